import { assert, assertAlmostEquals, assertEquals, assertGreater } from "@std/assert";
import fc from "fast-check";
import { BatchingInstance, type BatchingInstanceOptions } from "../actors/instances/batching_instance.ts";
import { ENGINE_PRESETS } from "../actors/instances/engine_presets.ts";
import type { BatchingCommand, InstanceStatus, MetricsCommand, Request } from "../actors/protocol.ts";
import { type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { simulate } from "../actors/simulation.ts";
import { SMALL_ENGINE } from "./_engine.ts";
import { Recorder } from "./_recorder.ts";
import { status } from "./_status.ts";
import { scenario } from "./_scenarios.ts";

const engine = SMALL_ENGINE;

const req = (id: number, group: number, prompt: number, output: number, arrivalMs = 0): Request => ({
  id,
  arrivalMs,
  prefixGroup: group,
  prefixTokens: group >= 0 ? prompt : 0,
  suffixTokens: group >= 0 ? 0 : prompt,
  outputTokens: output,
});

function setup(over: Partial<BatchingInstanceOptions> = {}) {
  const kernel = new Kernel({ seed: 1 });
  const router = new Recorder<InstanceStatus>();
  const metrics = new Recorder<MetricsCommand>();
  const routerRef = kernel.spawn("router", router) as ActorRef<InstanceStatus>;
  const metricsRef = kernel.spawn("metrics", metrics);
  const instance = new BatchingInstance(0, { ...engine, ...over }, metricsRef);
  const ref = kernel.spawn<BatchingCommand>("instance/0", instance);
  const serve = (request: Request) =>
    kernel.send(ref, { type: "serve", request, replyTo: routerRef }, request.arrivalMs - kernel.nowMs);
  const completed = () => metrics.ofType("completed").map((r) => r.message.record);
  return { kernel, router, metrics, instance, serve, completed };
}

Deno.test("batching: a lone request's prefill is chunked by the token budget, then it decodes one token a step", () => {
  // Prompt 600 = chunks 256 + 256 + 88; steps 5 + 2.56, 5 + 2.56, 5 + 0.88 → first token at 21.0.
  const s = setup();
  s.serve(req(0, 3, 600, 3));
  s.kernel.run();
  const [r] = s.completed();
  assertAlmostEquals(r.firstTokenMs, 21.0, 1e-9);
  // two decode steps of 5 + 0.1 ms each
  assertAlmostEquals(r.endMs, 31.2, 1e-9);
  assertEquals([r.promptTokens, r.cachedTokens, r.outputTokens], [600, 0, 3]);
  // Blocks are taken per scheduled chunk: the first 256 tokens hold 16 blocks, not the prompt's 38.
  assertEquals(
    s.router.received[0].message,
    status(0, { running: 1, queued: 1, pendingPrefillTokens: 600, kvUtilization: 16 / 1000, cacheAdded: 3 }),
  );
  assertEquals(s.router.received.at(-1)!.message.running, 0);
});

Deno.test("batching: a second request of the same group reuses the cached full blocks", () => {
  const s = setup();
  s.serve(req(0, 3, 600, 1, 0));
  s.serve(req(1, 3, 600, 1, 100));
  s.kernel.run();
  const [, second] = s.completed();
  // 600 tokens = 37 full blocks + 8; all 37 are reused: 592 cached tokens.
  assertEquals(second.cachedTokens, 592);
  assertAlmostEquals(second.firstTokenMs - 100, 5 + 0.01 * 8, 1e-9);
});

Deno.test("batching: same-prefix requests admitted in one step hit the blocks the first of them is computing in it", () => {
  // X (unique, 256 tokens) fills step 1 (5 + 2.56 = 7.56 ms); A, B, C (group 3, 100 tokens each)
  // arrive during it and are admitted together at 7.56. A's chunk caches its 6 full blocks when
  // scheduled, so B and C hit them (96 tokens, capped below the 100-token prompt) and compute 4
  // tokens each: 100 + 4 + 4 prefill tokens and X's decode, 5 + 1.08 + 0.1 = 6.18 ms → 13.74.
  // (Caching only at prefill completion would give 300 tokens: 8.1 ms, and no hits.)
  const s = setup();
  s.serve(req(0, -1, 256, 2, 0));
  for (const id of [1, 2, 3]) s.serve(req(id, 3, 100, 1, 1));
  s.kernel.run();
  const done = new Map(s.completed().map((r) => [r.requestId, r]));
  assertEquals([1, 2, 3].map((id) => done.get(id)!.cachedTokens), [0, 96, 96]);
  for (const id of [0, 1, 2, 3]) assertAlmostEquals(done.get(id)!.endMs, 13.74, 1e-9);
  for (const id of [1, 2, 3]) assertAlmostEquals(done.get(id)!.firstTokenMs, 13.74, 1e-9);
  // In that step: X 17 blocks (257 tokens), A 7, B and C one private block each beside A's 6.
  const atStep = s.router.received.filter((r) => Math.abs(r.timeMs - 7.56) < 1e-9).at(-1)!.message;
  assertEquals([atStep.running, atStep.kvUtilization], [4, 26 / 1000]);
});

Deno.test("batching: a request queued behind a chunked prefill of its prefix joins at the last chunk and computes only its tail", () => {
  // A (600 tokens, group 3) prefills in chunks of 256, 256, 88; B (the same prompt) finds no
  // budget until the third step, where A's last chunk caches blocks 32..36 as it is scheduled:
  // B hits all 37 full blocks (592 tokens) and computes 8. Steps: 7.56, 7.56, 5 + 0.96 → 21.08.
  const s = setup();
  s.serve(req(0, 3, 600, 1, 0));
  s.serve(req(1, 3, 600, 1, 0));
  s.kernel.run();
  const [a, b] = s.completed().toSorted((x, y) => x.requestId - y.requestId);
  assertEquals([a.cachedTokens, b.cachedTokens], [0, 592]);
  assertAlmostEquals(b.startMs, 15.12, 1e-9);
  assertAlmostEquals(a.firstTokenMs, 21.08, 1e-9);
  assertAlmostEquals(b.firstTokenMs, 21.08, 1e-9);
});

Deno.test("batching: without the full-sequence gate, admission needs blocks for the first chunk only", () => {
  // 36 blocks. X (158 tokens, 2 out) holds 10 after step 1 (6.58 ms). A (480 tokens) arrives at
  // 1 ms: its whole prompt needs 30 blocks, 26 are free, but its first chunk (255 tokens beside
  // X's decode) needs 16, so it starts at 6.58 (step 5 + 2.55 + 0.1 → 14.23). X then finishes;
  // A's last 225 tokens take 14 more blocks: 5 + 2.25 → first token at 21.48. (Whole-prompt
  // admission would start A at 11.68, when X leaves, and give it its first token at 26.48.)
  const s = setup({ kvBlocks: 36, reserveFullIsl: false });
  s.serve(req(0, -1, 158, 2, 0));
  s.serve(req(1, -1, 480, 1, 1));
  s.kernel.run();
  const a = s.completed().find((r) => r.requestId === 1)!;
  assertAlmostEquals(a.startMs, 6.58, 1e-9);
  assertAlmostEquals(a.firstTokenMs, 21.48, 1e-9);
  assertEquals(a.preemptions, 0);
  const atAdmission = s.router.received.filter((r) => Math.abs(r.timeMs - 6.58) < 1e-9).at(-1)!.message;
  assertEquals([atAdmission.running, atAdmission.kvUtilization], [2, 26 / 36]);
});

Deno.test("batching: full-sequence gate off, an older sequence that needs a block preempts the newest, which nobody admits again in that step", () => {
  // 39 blocks. X (158 tokens, 5 out) holds 10. A (463 tokens, 2 out) is admitted at 6.58 with
  // 16 blocks (255 tokens), and at 14.23 takes the 13 left for its last 208 (step 7.18 → 21.41,
  // its first token). At 21.41 X's KV reaches 161 tokens: an 11th block, none free, so A (the
  // newest) is preempted and X decodes alone (5.1 → 26.51). A is readmitted at 26.51 (255
  // tokens, 7.65 → 34.16, X's last token) and recomputes its other 209 (7.09 → 41.25), where
  // its recompute yields its second token.
  const s = setup({ kvBlocks: 39, reserveFullIsl: false });
  s.serve(req(0, -1, 158, 5, 0));
  s.serve(req(1, -1, 463, 2, 1));
  s.kernel.run();
  const [x, a] = s.completed().toSorted((p, q) => p.requestId - q.requestId);
  assertEquals([x.preemptions, a.preemptions], [0, 1]);
  assertAlmostEquals(x.endMs, 34.16, 1e-9);
  assertAlmostEquals(a.firstTokenMs, 21.41, 1e-9);
  assertAlmostEquals(a.endMs, 41.25, 1e-9);
  assertEquals(s.metrics.ofType("instance_stats").at(-1)!.message.preemptions, 1);
  assertEquals(s.instance.preemptions, 1);
});

Deno.test("batching: by default a request is admitted only when its whole prompt fits, though it takes blocks chunk by chunk", () => {
  // The case above with vLLM's default gate (scheduler_reserve_full_isl): A's 480 tokens need 30
  // blocks and only 26 are free while X runs, so A waits for X to leave at 11.68; then its first
  // chunk (256 tokens) takes 16 blocks, not 30.
  const s = setup({ kvBlocks: 36 });
  s.serve(req(0, -1, 158, 2, 0));
  s.serve(req(1, -1, 480, 1, 1));
  s.kernel.run();
  const a = s.completed().find((r) => r.requestId === 1)!;
  assertAlmostEquals(a.startMs, 11.68, 1e-9);
  assertAlmostEquals(a.firstTokenMs, 26.48, 1e-9);
  const atAdmission = s.router.received.filter((r) => Math.abs(r.timeMs - 11.68) < 1e-9).at(-1)!.message;
  assertEquals([atAdmission.running, atAdmission.kvUtilization], [1, 16 / 36]);
});

Deno.test("batching: a preempted sequence's cached blocks stay, so its recompute hits them", () => {
  // As above, but A's prompt is a group's: the 28 full blocks its two chunks cached stay (as
  // evictable) when it is preempted at 21.41. Readmitting it takes those 28 (limit
  // floor(463/16)) and one more block, 29 of the 28 X leaves, so it waits for X to finish at
  // 31.61 (X's steps now 5.1 each), hits all 28 and recomputes 464 − 448 = 16 tokens: 5.16 ms.
  const s = setup({ kvBlocks: 39 });
  s.serve(req(0, -1, 158, 5, 0));
  s.serve(req(1, 3, 463, 2, 1));
  s.kernel.run();
  const [x, a] = s.completed().toSorted((p, q) => p.requestId - q.requestId);
  assertEquals([a.preemptions, a.cachedTokens], [1, 0]);
  assertAlmostEquals(x.endMs, 31.61, 1e-9);
  assertAlmostEquals(a.endMs, 36.77, 1e-9);
});

Deno.test("batching: a prompt larger than the KV cache is dropped as too_long", () => {
  const s = setup({ kvBlocks: 10 });
  s.serve(req(0, -1, 1000, 1));
  s.kernel.run();
  assertEquals(s.metrics.ofType("dropped").map((d) => d.message.reason), ["too_long"]);
});

Deno.test("batching: when blocks run out, the latest admitted sequence is preempted and later finishes", () => {
  const s = setup({ kvBlocks: 40, maxBatchTokens: 2048 });
  for (let i = 0; i < 4; i++) s.serve(req(i, -1, 150, 100)); // 10 blocks each, growing to 16
  s.kernel.run();
  const done = s.completed();
  assertEquals(done.length, 4);
  assertGreater(done.reduce((a, r) => a + (r.preemptions ?? 0), 0), 0);
  assertEquals(s.instance.cache.held, 0);
  const stats = s.metrics.ofType("instance_stats").at(-1)!.message;
  assertGreater(stats.preemptions, 0);
});

Deno.test("batching: KV accounting stays within [0, capacity] and requests are conserved, whatever the load (property)", () => {
  fc.assert(
    fc.property(
      fc.record({
        kvBlocks: fc.integer({ min: 20, max: 200 }),
        maxSeqs: fc.integer({ min: 1, max: 16 }),
        budget: fc.integer({ min: 16, max: 512 }),
        caching: fc.boolean(),
        requests: fc.array(
          fc.record({
            group: fc.integer({ min: -1, max: 3 }),
            prompt: fc.integer({ min: 1, max: 600 }),
            output: fc.integer({ min: 0, max: 60 }),
            gap: fc.integer({ min: 0, max: 30 }),
          }),
          { minLength: 1, maxLength: 40 },
        ),
      }),
      (p) => {
        const s = setup({
          kvBlocks: p.kvBlocks,
          maxSeqs: p.maxSeqs,
          maxBatchTokens: p.budget,
          prefixCaching: p.caching,
        });
        let t = 0;
        p.requests.forEach((r, i) => s.serve(req(i, r.group, r.prompt, r.output, t += r.gap)));
        const cache = s.instance.cache;
        while (s.kernel.step()) {
          assert(cache.held >= 0 && cache.evictable >= 0 && cache.free >= 0 && cache.held <= p.kvBlocks);
        }
        const dropped = s.metrics.ofType("dropped").length;
        assertEquals(s.completed().length + dropped, p.requests.length);
        assertEquals([cache.held, s.instance.waiting, s.instance.running], [0, 0, 0]);
      },
    ),
    { numRuns: 200 },
  );
});

Deno.test("a lone 512-token request on the Qwen2.5-7B preset has TTFT within 5% of 21.7 ms", () => {
  const r = simulate(scenario({
    instances: { count: 1, model: "batching", engine: { preset: "qwen2.5-7b" } },
    workload: {
      requests: 1,
      prefix: { sharedFrac: 0, tokens: 0 },
      suffixTokens: { dist: "constant", value: 512 },
      outputTokens: { dist: "constant", value: 1 },
    },
  }));
  assertAlmostEquals(r.ttftMeanMs!, 21.7, 21.7 * 0.05);
});

for (const [prompt, output] of [[1000, 1], [1000, 20], [500, 40]]) {
  Deno.test(`without cache, one saturated instance serves identical ${prompt}+${output}-token requests at the analytic rate (±2%)`, () => {
    const r = simulate(scenario({
      instances: { count: 1, model: "batching", engine: { preset: "qwen2.5-7b", prefixCaching: false } },
      workload: {
        requests: 20_000,
        ratePerSec: 1000,
        prefix: { sharedFrac: 0, tokens: 0 },
        suffixTokens: { dist: "constant", value: prompt },
        outputTokens: { dist: "constant", value: output },
      },
    }));
    // Budget-bound steady state: each step holds X = T/(P + O − 1) requests' worth of
    // work — X·P prefill tokens and X·(O − 1) decoding sequences.
    const e = ENGINE_PRESETS["qwen2.5-7b"], T = e.maxBatchTokens, X = T / (prompt + output - 1);
    const stepMs = e.stepMs + e.prefillMsPerToken * X * prompt + e.decodeMsPerSeq * X * (output - 1);
    const analytic = (X / stepMs) * 1000;
    assertAlmostEquals(r.throughputRps, analytic, analytic * 0.02);
  });
}
