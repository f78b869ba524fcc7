import { assert, assertAlmostEquals, assertEquals, assertThrows } from "@std/assert";
import { GROUP_KEY_STRIDE } from "../actors/kv_cache/prefix_keys.ts";
import type { InstanceStatus, MetricsCommand, Request, SlotCommand } from "../actors/protocol.ts";
import { type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { EVENT_DRIVEN } from "../actors/instances/status_reporter.ts";
import { SlotInstance, type SlotInstanceOptions } from "../actors/instances/slot_instance.ts";
import { Recorder } from "./_recorder.ts";
import { SMALL_ENGINE } from "./_engine.ts";

/**
 * Two slots of 8,000 tokens, n_batch 256: a step costs 5 ms + 0.01 ms per
 * prompt token + 0.1 ms per generating slot (the batching tests' engine).
 */
const { maxSeqs: _, ...SHARED } = SMALL_ENGINE;
const ENGINE: SlotInstanceOptions = Object.freeze({ ...SHARED, slots: 2, slotSimilarity: 0.5 });

/** A request of prefix group `group` (its `prefix` tokens keyed), or unique (`group` −1: nothing keyed). */
const req = (
  id: number,
  arrivalMs: number,
  group: number,
  prefix: number,
  output: number,
  suffix = 0,
): Request => ({
  id,
  arrivalMs,
  prefixGroup: group,
  prefixTokens: prefix,
  suffixTokens: suffix,
  outputTokens: output,
});

/** A request whose prompt is `keys.length` explicitly keyed 16-token chunks (a trace's or a session's). */
const keyed = (id: number, arrivalMs: number, keys: number[], output = 1): Request => ({
  id,
  arrivalMs,
  prefixGroup: -1,
  prefixTokens: 0,
  suffixTokens: keys.length * 16,
  outputTokens: output,
  prefixKeys: keys,
  keyTokens: 16,
});

function setup(over: Partial<SlotInstanceOptions> = {}, blockEvents = false) {
  const kernel = new Kernel({ seed: 1 });
  const router = new Recorder<InstanceStatus>();
  const metrics = new Recorder<MetricsCommand>();
  const routerRef = kernel.spawn("router", router) as ActorRef<InstanceStatus>;
  const metricsRef = kernel.spawn("metrics", metrics);
  const instance = new SlotInstance(0, { ...ENGINE, ...over }, metricsRef, { ...EVENT_DRIVEN, blockEvents });
  const ref = kernel.spawn<SlotCommand>("instance/0", instance);
  const serve = (request: Request) =>
    kernel.send(ref, { type: "serve", request, replyTo: routerRef }, request.arrivalMs - kernel.nowMs);
  const done = () =>
    new Map(metrics.ofType("completed").map((r) => [r.message.record.requestId, r.message.record]));
  return { kernel, router, metrics, instance, serve, done };
}

/** The run key of a group's implicit chain (actors/kv_cache/prefix_keys.ts). */
const groupKey = (group: number) => (group + 1) * GROUP_KEY_STRIDE;

Deno.test("slots: a lone prompt fills n_batch-token steps, then decodes one token a step (exact step times)", () => {
  // 600 tokens = 256 + 256 + 88: steps 5 + 2.56, 5 + 2.56, 5 + 0.88 → first token at 21.0;
  // then two decode steps of 5 + 0.1 → 31.2.
  const s = setup();
  s.serve(req(0, 0, 3, 600, 3));
  s.kernel.run();
  const r = s.done().get(0)!;
  assertAlmostEquals(r.firstTokenMs, 21.0, 1e-9);
  assertAlmostEquals(r.endMs, 31.2, 1e-9);
  assertEquals([r.startMs, r.promptTokens, r.cachedTokens, r.outputTokens], [0, 600, 0, 3]);
  const stats = s.metrics.ofType("instance_stats").at(-1)!.message;
  assertEquals(stats.steps, 5);
  assertAlmostEquals(stats.busyMs, 31.2, 1e-9);
});

Deno.test("slots: a step holds one token per generating slot, then prompt tokens up to n_batch in all", () => {
  // A (100 tokens, 3 out) prefills alone: 5 + 1 → first token at 6. B (300) arrives at 1 and takes
  // slot 1. At 6: A's decode token + 255 of B's prompt (256 in all): 5 + 2.55 + 0.1 = 7.65 → 13.65.
  // At 13.65: A's decode + B's last 45: 5 + 0.45 + 0.1 = 5.55 → 19.2, A's third token (done) and
  // B's first.
  const s = setup();
  s.serve(req(0, 0, -1, 100, 3));
  s.serve(req(1, 1, -1, 300, 1));
  s.kernel.run();
  const [a, b] = [s.done().get(0)!, s.done().get(1)!];
  assertAlmostEquals(a.firstTokenMs, 6, 1e-9);
  assertAlmostEquals(a.endMs, 19.2, 1e-9);
  assertEquals(b.startMs, 1);
  assertAlmostEquals(b.firstTokenMs, 19.2, 1e-9);
});

Deno.test("slots: two long prompts prefill one after the other when the first fills n_batch; short ones share a step", async (t) => {
  // X (10 tokens, 1 out) starts a step at 0 on its own (5.1 ms: the first arrival at an idle
  // instance starts one at once); A and B arrive during it and take slots 1 and 2.
  const run = (prompt: number, over: Partial<SlotInstanceOptions> = {}) => {
    const s = setup({ slots: 3, ...over });
    s.serve(req(0, 0, -1, 10, 1));
    s.serve(req(1, 1, -1, prompt, 1));
    s.serve(req(2, 1, -1, prompt, 1));
    s.kernel.run();
    return [s.done().get(1)!.firstTokenMs, s.done().get(2)!.firstTokenMs];
  };
  await t.step("300 + 300 tokens: A's 256, then A's 44 + B's 212, then B's 88", () => {
    // 5.1 + 7.56 + 7.56 = 20.22 (A's first token); + 5.88 = 26.1 (B's).
    const [a, b] = run(300);
    assertAlmostEquals(a, 20.22, 1e-9);
    assertAlmostEquals(b, 26.1, 1e-9);
  });
  await t.step("100 + 100 tokens: one step of 200 tokens, 5 + 2 ms", () => {
    const [a, b] = run(100);
    assertAlmostEquals(a, 12.1, 1e-9);
    assertAlmostEquals(b, 12.1, 1e-9);
  });
  await t.step("an n_batch of 2048 packs both long prompts in one step, 5 + 6 ms", () => {
    const [a, b] = run(300, { maxBatchTokens: 2048 });
    assertAlmostEquals(a, 16.1, 1e-9);
    assertAlmostEquals(b, 16.1, 1e-9);
  });
});

Deno.test("slots: a prompt reuses its slot's cached common prefix, but always evaluates at least one token", async (t) => {
  await t.step("600 tokens again: its 37 full blocks (592 tokens) are cached, 8 evaluated", () => {
    const s = setup();
    s.serve(req(0, 0, 3, 600, 1));
    s.serve(req(1, 100, 3, 600, 1));
    s.kernel.run();
    const second = s.done().get(1)!;
    assertEquals(second.cachedTokens, 592);
    assertAlmostEquals(second.firstTokenMs - 100, 5 + 0.08, 1e-9);
  });
  await t.step("320 tokens again (20 whole blocks): 319 cached, the last token evaluated", () => {
    const s = setup();
    s.serve(req(0, 0, 5, 320, 1));
    s.serve(req(1, 100, 5, 320, 1));
    s.kernel.run();
    const second = s.done().get(1)!;
    assertEquals(second.cachedTokens, 319);
    assertAlmostEquals(second.firstTokenMs - 100, 5.01, 1e-9);
  });
  await t.step("without prompt caching nothing is reused", () => {
    const s = setup({ prefixCaching: false });
    s.serve(req(0, 0, 5, 320, 1));
    s.serve(req(1, 100, 5, 320, 1));
    s.kernel.run();
    assertEquals(s.done().get(1)!.cachedTokens, 0);
  });
});

Deno.test("slots: a request takes the idle slot sharing the longest prefix over the similarity threshold", () => {
  // Three slots, filled at once: [1,2] in slot 0, [1,2,3,4] in slot 1, [7] in slot 2; all done at
  // 5 + 0.01 × 112 = 6.12 and released in slot order. [1,2,3,4,5] shares 32 tokens with slot 0 and
  // 64 with slot 1 (each its slot's whole cache): slot 1, though slot 0 is the least recently used.
  const s = setup({ slots: 3 });
  s.serve(keyed(0, 0, [1, 2]));
  s.serve(keyed(1, 0, [1, 2, 3, 4]));
  s.serve(keyed(2, 0, [7]));
  s.serve(keyed(3, 100, [1, 2, 3, 4, 5]));
  s.kernel.run();
  assertEquals(s.done().get(3)!.cachedTokens, 64);
  const slots = s.instance.slotContents();
  assertEquals(slots.map((c) => [...c.runs.keys()]), [[1, 2], [1, 2, 3, 4, 5], [7]]);
  assertEquals(slots.map((c) => c.tokens), [32, 80, 16]);
});

Deno.test("slots: with no slot similar enough, the least recently used idle slot is taken", () => {
  // A (group 1) takes slot 0, B (group 2) slot 1; A is released first (6.6), B at 13.2. C (group 2)
  // at 100 finds B's whole prompt in slot 1 (similarity 1): 159 of its 160 tokens cached. D (group
  // 3) at 200 matches nothing: the least recently used slot is 0 (released before slot 1's C).
  const s = setup();
  s.serve(req(0, 0, 1, 160, 1));
  s.serve(req(1, 0, 2, 160, 1));
  s.serve(req(2, 100, 2, 160, 1));
  s.serve(req(3, 200, 3, 160, 1));
  s.kernel.run();
  const done = s.done();
  assertAlmostEquals(done.get(0)!.endMs, 6.6, 1e-9);
  assertAlmostEquals(done.get(1)!.endMs, 13.2, 1e-9);
  assertEquals([done.get(2)!.cachedTokens, done.get(3)!.cachedTokens], [159, 0]);
  const slots = s.instance.slotContents();
  assertEquals(slots.map((c) => [...c.runs.keys()]), [[groupKey(3)], [groupKey(2)]]);
});

Deno.test("slots: the similarity threshold is respected, strictly, against the slot's cached tokens", async (t) => {
  // X (group 9, 32 tokens) takes slot 0; A (group 4: 160 keyed + 160 unkeyed tokens) then slot 1,
  // the never-used one, so slot 0 is the least recently used. E (group 4, 160 + 200) shares 160 of
  // slot 1's 320 cached tokens: similarity 0.5.
  const run = (slotSimilarity: number) => {
    const s = setup({ slotSimilarity });
    s.serve(req(0, 0, 9, 32, 1));
    s.serve(req(1, 50, 4, 160, 1, 160));
    s.serve(req(2, 100, 4, 160, 1, 200));
    s.kernel.run();
    return s.done().get(2)!.cachedTokens;
  };
  await t.step("0.5: not over it, so the least recently used slot (X's): nothing cached", () => {
    assertEquals(run(0.5), 0);
  });
  await t.step("0.4: over it, so A's slot: its 160 keyed tokens cached", () => {
    assertEquals(run(0.4), 160);
  });
  await t.step("0: the similarity pass is off, so the least recently used slot", () => {
    assertEquals(run(0), 0);
  });
  await t.step(
    "a short cached prompt is similar to a long prompt it starts (the snapshot's denominator)",
    () => {
      // A' (group 4, 160 tokens, 1 out) leaves 160 tokens in slot 1; E' (group 4, 160 + 400) shares all
      // of them: similarity 1 (as a share of E's 560 tokens it would be 0.29, under the threshold).
      const s = setup();
      s.serve(req(0, 0, 9, 32, 1));
      s.serve(req(1, 50, 4, 160, 1));
      s.serve(req(2, 100, 4, 160, 1, 400));
      s.kernel.run();
      assertEquals(s.done().get(2)!.cachedTokens, 160);
    },
  );
  await t.step("a slot's cached tokens include the tokens it decoded", () => {
    // A'' (group 4, 160 tokens, 200 out) leaves 160 + 199 tokens: 160 / 359 = 0.45, under 0.5.
    const s = setup();
    s.serve(req(0, 0, 9, 32, 1));
    s.serve(req(1, 50, 4, 160, 200));
    s.serve(req(2, 5000, 4, 160, 1, 400));
    s.kernel.run();
    assertEquals(s.instance.slotContents()[1].tokens, 359, "E'' took A''s slot");
    assertEquals(s.done().get(2)!.cachedTokens, 0);
  });
});

Deno.test("slots: a slot reused by another prompt drops its cached prompt beyond the common prefix, and the router hears of it", () => {
  // One slot. A (group 3, 600 tokens) caches 37 blocks of run 3 chunk by chunk (16, 32, 37 after its
  // three steps); U (unique) then takes the slot and nothing of A's is left: run 3 → 0. A request of
  // group 3 after that finds nothing cached.
  const s = setup({ slots: 1 }, true);
  s.serve(req(0, 0, 3, 600, 1));
  s.serve(req(1, 100, -1, 50, 1));
  s.serve(req(2, 200, 3, 600, 1));
  s.kernel.run({ untilMs: 150 });
  const runs = s.router.received.flatMap((r) => r.message.cachedRuns ?? []);
  assertEquals(runs, [groupKey(3), 16, groupKey(3), 32, groupKey(3), 37, groupKey(3), 0]);
  assertEquals(s.router.received.find((r) => r.message.cacheEvicted !== undefined)?.message.cacheEvicted, 3);
  assertEquals(s.instance.slotContents()[0].runs.size, 0);
  s.kernel.run();
  assertEquals(s.done().get(2)!.cachedTokens, 0);
});

Deno.test("slots: with every slot busy a request waits, first come first served, and a full queue drops", async (t) => {
  await t.step("C waits for the first slot released", () => {
    // A's arrival starts a step of its 100 tokens (6.0) at once; B takes slot 1 for the next step,
    // C waits. At 6.0: A's decode + B's 100 tokens (6.1) → A done at 12.1, and C takes its slot.
    // At 12.1: B's decode + C's prompt (6.1) → C's first token at 18.2; a decode step → 23.3.
    const s = setup();
    for (const id of [0, 1, 2]) s.serve(req(id, 0, -1, 100, 2));
    s.kernel.run({ untilMs: 0 });
    const atArrival = s.router.received.at(-1)!.message;
    assertEquals([atArrival.waiting, atArrival.running, atArrival.queued], [1, 2, 3]);
    assertEquals(atArrival.pendingPrefillTokens, 300);
    s.kernel.run();
    const c = s.done().get(2)!;
    assertAlmostEquals(c.startMs, 12.1, 1e-9);
    assertAlmostEquals(c.firstTokenMs, 18.2, 1e-9);
    assertAlmostEquals(c.endMs, 23.3, 1e-9);
  });
  await t.step("waiting requests take freed slots in arrival order", () => {
    // A (100, 2 out) and B (100, 50 out) hold both slots; C and D wait. A frees slot 0 at 12.1: C
    // gets it, D waits until a slot frees again (C's, at its end).
    const s = setup();
    s.serve(req(0, 0, -1, 100, 2));
    s.serve(req(1, 0, -1, 100, 50));
    s.serve(req(2, 1, -1, 100, 2));
    s.serve(req(3, 2, -1, 100, 2));
    s.kernel.run();
    const done = s.done();
    assertAlmostEquals(done.get(2)!.startMs, 12.1, 1e-9);
    assert(done.get(3)!.startMs > done.get(2)!.endMs - 1e-9, "D started before a slot was freed again");
  });
  await t.step("maxQueue 1: the second request that finds no idle slot is dropped (queue_full)", () => {
    const s = setup({ maxQueue: 1 });
    for (const id of [0, 1, 2, 3]) s.serve(req(id, 0, -1, 100, 2));
    s.kernel.run();
    const dropped = s.metrics.ofType("dropped").map((d) => [d.message.requestId, d.message.reason]);
    assertEquals(dropped, [[3, "queue_full"]]);
    assertEquals(s.done().size, 3);
  });
});

Deno.test("slots: a prompt and output longer than a slot's context are refused as too long", () => {
  // 20 blocks of 16 over 2 slots: 160 tokens a slot.
  const s = setup({ kvBlocks: 20 });
  s.serve(req(0, 0, -1, 150, 10));
  s.serve(req(1, 0, -1, 150, 11));
  s.kernel.run();
  assertEquals(s.done().size, 1);
  assertEquals(s.metrics.ofType("dropped").map((d) => [d.message.requestId, d.message.reason]), [[
    1,
    "too_long",
  ]]);
  assertThrows(() => setup({ kvBlocks: 1, slots: 17 }), RangeError, "slots");
});

Deno.test("slots: status counts busy slots and reports the KV tokens of every slot, idle ones' cached prompts included", () => {
  // A (100 tokens, 3 out) leaves 102 tokens in slot 0; B (unique, 40 tokens, 1 out) 40 in slot 1.
  const s = setup();
  s.serve(req(0, 0, -1, 100, 3));
  s.serve(req(1, 0, -1, 40, 1));
  s.kernel.run();
  const last = s.router.received.at(-1)!.message;
  assertEquals([last.running, last.waiting, last.finished], [0, 0, 2]);
  assertAlmostEquals(last.kvUtilization, 142 / 16000, 1e-12);
  assertEquals(s.instance.slotContents().map((c) => c.tokens), [102, 40]);
});

Deno.test("slots: cachedPrefixTokens predicts what admission finds, and changes nothing", () => {
  const s = setup();
  s.serve(req(0, 0, 3, 600, 1));
  s.kernel.run();
  assertEquals(s.instance.cachedPrefixTokens(req(9, 100, 3, 600, 1)), 592);
  assertEquals(s.instance.cachedPrefixTokens(req(9, 100, 3, 592, 1)), 591);
  assertEquals(s.instance.cachedPrefixTokens(req(9, 100, 4, 600, 1)), 0);
  s.serve(req(1, 100, 3, 600, 1));
  s.kernel.run();
  assertEquals(s.done().get(1)!.cachedTokens, 592);
});

Deno.test("slots: a slowdown stretches the steps from the next one on", () => {
  // 600 tokens: the first step (7.56) runs at full speed; slowed ×2 during it, the next two take
  // 15.12 and 11.76: first token at 34.44.
  const s = setup();
  s.serve(req(0, 0, 3, 600, 1));
  s.kernel.run({ untilMs: 1 });
  s.instance.setSlowdown(2, { now: () => 1 } as never);
  s.kernel.run();
  assertAlmostEquals(s.done().get(0)!.firstTokenMs, 7.56 + 15.12 + 11.76, 1e-9);
});

Deno.test("slots: attention costs every step token against every KV token held, the other slot's included", () => {
  // γ = 0.001 ms per (step token × KV token). Request 0 (300 tokens, 1 output) alone: steps of 256
  // and 44 prompt tokens over an empty cache: 256·256 and 44·300 pairs (micro-batches of 512 hold
  // each step whole). Its slot then keeps 300 tokens. Request 1 (100 tokens) takes the other slot:
  // one step of 100 tokens attending 300 + 100 cells.
  const s = setup({ attentionMsPerKvToken: 0.001 });
  s.serve(req(0, 0, 1, 300, 1));
  s.serve(req(1, 1000, 2, 100, 1));
  s.kernel.run();
  const first = 5 + 2.56 + 0.001 * 256 * 256, second = 5 + 0.44 + 0.001 * 44 * 300;
  assertAlmostEquals(s.done().get(0)!.firstTokenMs, first + second, 1e-9);
  assertAlmostEquals(s.done().get(1)!.firstTokenMs, 1000 + 5 + 1 + 0.001 * 100 * 400, 1e-9);
});
