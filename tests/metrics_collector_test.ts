import { assertAlmostEquals, assertEquals } from "@std/assert";
import {
  coefficientOfVariation,
  MetricsCollector,
  rangeOverMean,
} from "../actors/metrics/metrics_collector.ts";
import type { CompletionRecord, MetricsCommand } from "../actors/protocol.ts";
import { Kernel } from "../actors/runtime/kernel.ts";
import { record } from "./_records.ts";

Deno.test("metrics collector summarises TTFT, waits, hits and imbalance exactly", () => {
  const kernel = new Kernel();
  const collector = new MetricsCollector(2);
  const ref = kernel.spawn<MetricsCommand>("metrics", collector);
  const records = [
    record({ requestId: 0, instance: 0, arrivalMs: 0, startMs: 0, firstTokenMs: 10, endMs: 10 }),
    record({
      requestId: 1,
      instance: 0,
      arrivalMs: 5,
      startMs: 10,
      firstTokenMs: 30,
      endMs: 30,
      cachedTokens: 50,
    }),
    record({
      requestId: 2,
      instance: 1,
      arrivalMs: 6,
      startMs: 6,
      firstTokenMs: 46,
      endMs: 46,
      cachedTokens: 100,
    }),
  ];
  for (const r of records) kernel.send(ref, { type: "completed", record: r });
  kernel.send(ref, { type: "dropped", requestId: 3, instance: 1, timeMs: 7, reason: "queue_full" });
  kernel.run();
  const s = collector.summary();
  assertEquals([s.completed, s.dropped, s.droppedByReason.queue_full], [3, 1, 1]);
  assertAlmostEquals(s.ttftMeanMs!, (10 + 25 + 40) / 3);
  assertAlmostEquals(s.queueWaitMeanMs!, 5 / 3);
  assertAlmostEquals(s.hitRate!, 2 / 3);
  assertAlmostEquals(s.tokenHitRate!, 150 / 300);
  assertAlmostEquals(s.imbalance!, (2 - 1) / 1.5);
  assertAlmostEquals(s.imbalanceCv!, 0.5 / 1.5);
  assertEquals(s.perInstanceBusyMs, [30, 40]);
  assertAlmostEquals(s.ttftP50Ms!, 25, 0.025);
  assertAlmostEquals(s.ttftP99Ms!, 40, 0.04);
  assertAlmostEquals(s.throughputRps, 3 / 0.046);
  assertEquals(s.goodputRps, s.throughputRps); // no SLO set: every completion counts
  assertEquals(s.kvUtilizationMean, null); // no instance reported KV blocks
});

Deno.test("metrics percentiles are within 0.1% over a wide range of TTFTs", () => {
  const kernel = new Kernel();
  const collector = new MetricsCollector(1);
  const ref = kernel.spawn<MetricsCommand>("metrics", collector);
  for (let i = 1; i <= 10_000; i++) {
    kernel.send(ref, { type: "completed", record: record({ firstTokenMs: i * 0.7 }) });
  }
  kernel.run();
  const s = collector.summary();
  assertAlmostEquals(s.ttftP50Ms!, 3500, 3.5);
  assertAlmostEquals(s.ttftP90Ms!, 6300, 6.3);
  assertAlmostEquals(s.ttftP99Ms!, 6930, 6.93);
});

Deno.test("an empty run reports its means as null and its counts and rates as 0, never NaN", () => {
  const s = new MetricsCollector(3).summary();
  assertEquals([s.ttftMeanMs, s.hitRate, s.tokenHitRate, s.imbalance, s.imbalanceCv, s.busyImbalanceCv], [
    null,
    null,
    null,
    null,
    null,
    null,
  ]);
  assertEquals([s.completed, s.dropped, s.throughputRps, s.goodputRps, s.tokensPerSec], [0, 0, 0, 0, 0]);
});

Deno.test("imbalance formulas match their definitions", () => {
  assertAlmostEquals(rangeOverMean([10, 10, 10, 10])!, 0);
  assertAlmostEquals(rangeOverMean([12, 8, 10, 10])!, 0.4);
  assertAlmostEquals(coefficientOfVariation([12, 8, 10, 10])!, Math.sqrt(2) / 10);
  assertEquals([rangeOverMean([0, 0]), coefficientOfVariation([0, 0])], [null, null]);
});

Deno.test("routing accounting folds the notes of completed requests into hit rates, regret and view false positives", async (t) => {
  const summarise = (records: CompletionRecord[]) => {
    const kernel = new Kernel();
    const collector = new MetricsCollector(1);
    const ref = kernel.spawn<MetricsCommand>("metrics", collector);
    for (const r of records) kernel.send(ref, { type: "completed", record: r });
    kernel.run();
    return collector.summary();
  };
  const note = (
    availableTokens: number | null,
    expectedTokens: number | null,
    falseTokens: number | null,
  ) => ({
    availableTokens,
    expectedTokens,
    falseTokens,
  });
  await t.step("sums over all completed requests; expected over those with an expectation", () => {
    const s = summarise([
      record({ promptTokens: 100, cachedTokens: 50, routing: note(80, 60, 10) }),
      record({ promptTokens: 300, cachedTokens: 0, routing: note(40, null, null) }),
      record({ promptTokens: 100, cachedTokens: 100, routing: note(90, 40, 0) }),
    ]);
    assertAlmostEquals(s.tokenHitRate!, 150 / 500);
    assertAlmostEquals(s.availableTokenHitRate!, 210 / 500);
    assertAlmostEquals(s.expectedTokenHitRate!, 100 / 200);
    assertAlmostEquals(s.routingRegret!, 210 / 500 - 150 / 500);
    assertAlmostEquals(s.viewFalsePositiveRate!, 10 / 100);
  });
  await t.step("regret is negative when more was delivered than was available at routing time", () => {
    const s = summarise([record({ promptTokens: 100, cachedTokens: 64, routing: note(32, 32, 0) })]);
    assertAlmostEquals(s.routingRegret!, -0.32);
  });
  await t.step(
    "one request without an available count (no note, or real time) makes it unknown, not 0",
    () => {
      const missing = summarise([record({ routing: note(80, 60, 10) }), record({})]);
      const realtime = summarise([record({ routing: note(null, 60, null) })]);
      for (const s of [missing, realtime]) {
        assertEquals([s.availableTokenHitRate, s.routingRegret], [
          null,
          null,
        ]);
      }
      assertAlmostEquals(missing.expectedTokenHitRate!, 0.6);
      assertEquals([realtime.expectedTokenHitRate, realtime.viewFalsePositiveRate], [0.6, null]);
    },
  );
  await t.step(
    "nothing expected (cache-blind policy, or expectations of 0 tokens): no false-positive rate",
    () => {
      const blind = summarise([record({ routing: note(80, null, null) })]);
      assertEquals([blind.expectedTokenHitRate, blind.viewFalsePositiveRate], [null, null]);
      assertAlmostEquals(blind.availableTokenHitRate!, 0.8);
      const zero = summarise([record({ routing: note(0, 0, 0) })]);
      assertEquals([zero.expectedTokenHitRate, zero.viewFalsePositiveRate, zero.routingRegret], [0, null, 0]);
    },
  );
  await t.step("nothing completed: every accounting rate is null", () => {
    const s = new MetricsCollector(1).summary();
    assertEquals(
      [s.availableTokenHitRate, s.expectedTokenHitRate, s.routingRegret, s.viewFalsePositiveRate],
      [null, null, null, null],
    );
  });
});
