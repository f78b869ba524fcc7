import { assert, assertAlmostEquals, assertEquals, assertGreater } from "@std/assert";
import fc from "fast-check";
import { BatchingInstance, type BatchingInstanceOptions } from "../actors/batching_instance.ts";
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
  assertEquals(
    s.router.received[0].message,
    status(0, { running: 1, queued: 1, pendingPrefillTokens: 600, kvUtilization: 38 / 1000, cacheAdded: 3 }),
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
    const T = 2048, X = T / (prompt + output - 1);
    const stepMs = 7.05 + 0.0195 * X * prompt + 0.0254 * X * (output - 1);
    const analytic = (X / stepMs) * 1000;
    assertAlmostEquals(r.throughputRps, analytic, analytic * 0.02);
  });
}
