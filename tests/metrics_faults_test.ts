import { assertAlmostEquals, assertEquals } from "@std/assert";
import type { Fault } from "../actors/dynamics/faults.ts";
import {
  MetricsCollector,
  type MetricsOptions,
  RECOVERY_MIN_REQUESTS,
  RECOVERY_STEP_MS,
  RECOVERY_TOLERANCE,
  RECOVERY_WINDOW_MS,
  recoveryTimes,
} from "../actors/metrics/metrics_collector.ts";
import type { MetricsCommand, SloWindow } from "../actors/protocol.ts";
import { Kernel } from "../actors/runtime/kernel.ts";
import { Recorder } from "./_recorder.ts";
import { record } from "./_records.ts";

type AttemptFailed = Extract<MetricsCommand, { type: "attempt_failed" }>;

function failure(requestId: number, over: Partial<AttemptFailed> = {}): AttemptFailed {
  return {
    type: "attempt_failed",
    requestId,
    instance: 0,
    timeMs: 0,
    reason: "crash",
    attempt: 0,
    final: false,
    arrivalMs: 0,
    ...over,
  };
}

/** Runs `messages` through a fresh collector and returns it. */
function collect(messages: readonly MetricsCommand[], options: MetricsOptions = {}, instances = 2) {
  const kernel = new Kernel();
  const collector = new MetricsCollector(instances, options);
  const ref = kernel.spawn<MetricsCommand>("metrics", collector);
  for (const m of messages) kernel.send(ref, m);
  kernel.run();
  return collector;
}

const CRASH: Fault = { instance: 0, kind: "crash", atMs: 20_000, forMs: 5_000 };

Deno.test("failed attempts count retries, final failures by reason and each affected request once", () => {
  const s = collect([
    // Request 1: one crash, retried, then completed.
    failure(1, { attempt: 0 }),
    { type: "completed", record: record({ requestId: 1, arrivalMs: 0, firstTokenMs: 30, endMs: 30 }) },
    // Request 2: crash, retried, unreachable, retried, draining with no retry left.
    failure(2, { attempt: 0 }),
    failure(2, { attempt: 1, reason: "unreachable", instance: 1 }),
    failure(2, { attempt: 2, reason: "draining", final: true }),
    // Request 3: no instance could take it on arrival.
    failure(3, { attempt: 0, reason: "no_instance", instance: -1, final: true }),
    // Request 4: failed at its first attempt with no retry budget.
    failure(4, { attempt: 0, reason: "unreachable", final: true }),
  ], { faults: [CRASH] }).summary();
  assertEquals([s.retried, s.failed, s.requestsAffected], [3, 3, 4]);
  assertEquals(s.failedByReason, { crash: 0, unreachable: 1, draining: 1, no_instance: 1 });
  assertEquals([s.completed, s.dropped], [1, 0]); // a failure is never a drop
  assertEquals(s.droppedByReason, { queue_full: 0, too_long: 0 });
  assertAlmostEquals(s.ttftMeanMs!, 30); // latency statistics stay over completed requests
});

Deno.test("a failed request misses its SLO like a drop, overall and in its class", () => {
  const classes = [{ name: "chat", share: 1 }, { name: "batch", share: 1, sloTtftMs: 1000 }];
  const s = collect([
    { type: "completed", record: record({ requestId: 0, firstTokenMs: 10, endMs: 10, sloClass: 0 }) },
    { type: "completed", record: record({ requestId: 1, firstTokenMs: 15, endMs: 15, sloClass: 0 }) },
    { type: "completed", record: record({ requestId: 2, firstTokenMs: 50, endMs: 50, sloClass: 0 }) },
    { type: "completed", record: record({ requestId: 3, firstTokenMs: 50, endMs: 50, sloClass: 1 }) },
    { type: "dropped", requestId: 4, instance: 0, timeMs: 1, reason: "queue_full", sloClass: 0 },
    failure(5, { final: true, sloClass: 0 }),
    failure(6, { final: false, sloClass: 1 }), // retried: not finished, no effect on attainment
    failure(7, { final: true, sloClass: 1 }),
  ], { slo: { ttftMs: 20 }, classes }).summary();
  assertAlmostEquals(s.sloAttainment!, 3 / 7); // met 0, 1, 3 of 4 completed + 1 dropped + 2 failed
  assertAlmostEquals(s.classAttainment!.chat!, 2 / 5);
  assertAlmostEquals(s.classAttainment!.batch!, 1 / 2);
  // Goodput and throughput stay over completed requests: 3 met, 4 completed over 50 ms.
  assertAlmostEquals(s.throughputRps, 4 / 0.05);
  assertAlmostEquals(s.goodputRps, 3 / 0.05);
});

Deno.test("without faults or autoscaling the new fields are true zeros, nulls and the fixed fleet's cost, at the end of the summary", () => {
  const s = collect([{ type: "completed", record: record({}) }]).summary();
  assertEquals([s.failed, s.retried, s.requestsAffected], [0, 0, 0]);
  assertEquals(s.failedByReason, { crash: 0, unreachable: 0, draining: 0, no_instance: 0 });
  assertEquals([s.recovery, s.timeToRecoverMs, s.scaling], [null, null, null]);
  // A fixed fleet of 2 costs both instances until the last completion (at 10 ms).
  assertEquals([s.instanceSeconds, s.peakInstances], [2 * 10 / 1000, 2]);
  assertEquals(collect([]).summary().instanceSeconds, null);
  const keys = Object.keys(s);
  assertEquals(keys.slice(keys.indexOf("perInstanceBusyMs")), [
    "perInstanceBusyMs",
    "failed",
    "retried",
    "requestsAffected",
    "failedByReason",
    "recovery",
    "timeToRecoverMs",
    "scaling",
    "instanceSeconds",
    "peakInstances",
  ]);
});

/** One arrival every `gapMs` over [0, untilMs), each with TTFT `ttft(arrivalMs)`. */
function stream(untilMs: number, gapMs: number, ttft: (arrivalMs: number) => number) {
  const arrivals: number[] = [], ttfts: number[] = [];
  for (let t = 0; t < untilMs; t += gapMs) {
    arrivals.push(t);
    ttfts.push(ttft(t));
  }
  return { arrivals, ttfts };
}

Deno.test("recovery time is the first window step whose TTFT p50 is back within 10%", async (t) => {
  // 10 arrivals/s, TTFT 10 ms, then 50 ms for requests arriving in [20 s, 26.5 s). A
  // window [20 s + k s, 30 s + k s) holds 100 requests of which 65 − 10k are slow:
  // the median is fast from k = 2 (45 slow) on, not at k = 1 (55 slow).
  const slowUntil = 26_500;
  const step = (slowTtft: number) => (a: number) => a >= 20_000 && a < slowUntil ? slowTtft : 10;
  await t.step("a step that returns", () => {
    const { arrivals, ttfts } = stream(60_000, 100, step(50));
    assertEquals(recoveryTimes([CRASH], arrivals, ttfts), [
      { fault: 0, atMs: 20_000, preFaultTtftP50Ms: 10, timeToRecoverMs: 2 * RECOVERY_STEP_MS },
    ]);
  });
  await t.step("the median is the nearest-rank one: a window half slow has recovered", () => {
    // Slow until 27 s: the window at k = 2 holds 50 slow and 50 fast; its 50th smallest is fast.
    const { arrivals, ttfts } = stream(60_000, 100, (a) => a >= 20_000 && a < 27_000 ? 50 : 10);
    assertEquals(recoveryTimes([CRASH], arrivals, ttfts)[0].timeToRecoverMs, 2000);
  });
  await t.step("dropped or failed requests count as infinite TTFT", () => {
    const { arrivals, ttfts } = stream(60_000, 100, step(Infinity));
    assertEquals(recoveryTimes([CRASH], arrivals, ttfts)[0].timeToRecoverMs, 2000);
  });
  await t.step("a rise within the tolerance is no fault at all (k = 0)", () => {
    const { arrivals, ttfts } = stream(60_000, 100, step(10 * RECOVERY_TOLERANCE - 0.01));
    assertEquals(recoveryTimes([CRASH], arrivals, ttfts)[0].timeToRecoverMs, 0);
  });
  await t.step("TTFT that never comes back gives null", () => {
    const { arrivals, ttfts } = stream(60_000, 100, (a) => a >= 20_000 ? 10 * RECOVERY_TOLERANCE + 0.01 : 10);
    assertEquals(recoveryTimes([CRASH], arrivals, ttfts)[0], {
      fault: 0,
      atMs: 20_000,
      preFaultTtftP50Ms: 10,
      timeToRecoverMs: null,
    });
  });
  await t.step("too few pre-fault requests gives no baseline and no recovery time", () => {
    // 19 arrivals in the 10 s before the fault, plenty after.
    const arrivals = [
      ...Array.from({ length: RECOVERY_MIN_REQUESTS - 1 }, (_, i) => 11_000 + i * 100),
      ...Array.from({ length: 300 }, (_, i) => 20_000 + i * 100),
    ];
    const ttfts = arrivals.map(() => 10);
    assertEquals(recoveryTimes([CRASH], arrivals, ttfts)[0].preFaultTtftP50Ms, null);
    assertEquals(recoveryTimes([CRASH], arrivals, ttfts)[0].timeToRecoverMs, null);
    // One more pre-fault request, inside the window, is enough.
    const enough = [10_000, ...arrivals];
    assertEquals(recoveryTimes([CRASH], enough, enough.map(() => 10))[0].timeToRecoverMs, 0);
  });
  await t.step("a window with too few requests is skipped, and windows stop at the last arrival", () => {
    // Fast before the fault; after it, 10 slow requests, then silence until 45 s, then fast ones to 60 s.
    const arrivals = [...Array.from({ length: 200 }, (_, i) => i * 100)];
    const ttfts = arrivals.map(() => 10);
    for (let i = 0; i < 10; i++) arrivals.push(20_000 + i * 100), ttfts.push(50);
    for (let a = 45_000; a < 60_000; a += 100) arrivals.push(a), ttfts.push(10);
    // Windows starting at 20–36 s hold the 10 slow requests or at most 10 fast ones: too
    // few to judge. [37 s, 47 s) is the first with 20 requests (all fast).
    assertEquals(recoveryTimes([CRASH], arrivals, ttfts)[0].timeToRecoverMs, 17_000);
    // No window starts at or after the last arrival: a fault after it has none.
    const late: Fault = { ...CRASH, atMs: 60_000 };
    assertEquals(recoveryTimes([late], arrivals, ttfts)[0].timeToRecoverMs, null);
  });
  assertEquals([RECOVERY_WINDOW_MS, RECOVERY_STEP_MS, RECOVERY_MIN_REQUESTS, RECOVERY_TOLERANCE], [
    10_000,
    1_000,
    20,
    1.1,
  ]);
});

Deno.test("the collector measures recovery per fault from completions, drops and failures in any order", () => {
  const messages: MetricsCommand[] = [];
  let id = 0;
  for (let a = 0; a < 60_000; a += 100) {
    const requestId = id++;
    if (a >= 20_000 && a < 23_000) {
      // Fails for good, with retries: counts as an infinite TTFT at its arrival.
      messages.push(failure(requestId, { arrivalMs: a, timeMs: a + 5, final: true }));
    } else if (a >= 23_000 && a < 26_500) {
      // Dropped 2 ms after arriving: the drop's time stands for its arrival.
      messages.push({ type: "dropped", requestId, instance: 1, timeMs: a + 2, reason: "queue_full" });
    } else {
      const ttft = a >= 40_000 && a < 47_500 ? 80 : 10;
      messages.push({
        type: "completed",
        record: record({ requestId, arrivalMs: a, startMs: a, firstTokenMs: a + ttft, endMs: a + ttft }),
      });
    }
  }
  // Deliver in a scrambled (but fixed) order: the collector must not rely on arrival order.
  const scrambled = messages.map((m, i) => ({ m, key: (i * 7919) % messages.length }))
    .sort((x, y) => x.key - y.key).map((x) => x.m);
  const faults: Fault[] = [
    { instance: 1, kind: "slow", atMs: 40_000, forMs: 7_000, factor: 8 },
    CRASH,
  ];
  const collector = collect(scrambled, { faults }, 2);
  const s = collector.summary();
  assertEquals(s.recovery, [
    // Slow TTFT in [40 s, 47.5 s): 75 − 10k slow of 100 → fast median from k = 3 (45 slow).
    { fault: 0, atMs: 40_000, preFaultTtftP50Ms: 10, timeToRecoverMs: 3000 },
    { fault: 1, atMs: 20_000, preFaultTtftP50Ms: 10, timeToRecoverMs: 2000 },
  ]);
  assertEquals(s.timeToRecoverMs, 2000); // the earliest fault's
  assertEquals([s.failed, s.dropped, s.requestsAffected], [30, 35, 30]);
  assertEquals(collector.summary().recovery, s.recovery); // asked again: the same answer
});

Deno.test("the collector answers SLO probes with the requests finished and met since the last probe", async (t) => {
  const run = (options: MetricsOptions) => {
    const kernel = new Kernel();
    const metrics = kernel.spawn<MetricsCommand>("metrics", new MetricsCollector(1, options));
    const recorder = new Recorder<SloWindow>();
    const probe = kernel.spawn("autoscaler", recorder);
    const done = (ttft: number, at: number) =>
      kernel.send(metrics, { type: "completed", record: record({ firstTokenMs: ttft, endMs: ttft }) }, at);
    done(10, 0), done(50, 0), done(15, 1);
    kernel.send(metrics, { type: "dropped", requestId: 9, instance: 0, timeMs: 1, reason: "too_long" }, 1);
    kernel.send(metrics, { type: "slo_probe", replyTo: probe }, 2);
    done(5, 3);
    kernel.send(metrics, failure(10, { final: true }), 3);
    kernel.send(metrics, failure(11, { final: false }), 3); // retried: not finished
    kernel.send(metrics, { type: "slo_probe", replyTo: probe }, 4);
    kernel.send(metrics, { type: "slo_probe", replyTo: probe }, 5);
    kernel.run();
    return recorder.received.map((r) => [r.timeMs, r.message.finished, r.message.met]);
  };
  await t.step("with a TTFT SLO, met is judged as attainment is", () => {
    assertEquals(run({ slo: { ttftMs: 20 }, faults: [CRASH] }), [[2, 4, 2], [4, 2, 1], [5, 0, 0]]);
  });
  await t.step("with no SLO, every completion is met", () => {
    assertEquals(run({}), [[2, 4, 3], [4, 2, 1], [5, 0, 0]]);
  });
});

Deno.test("the collector keeps the autoscaler's decisions and integrates instances to the last completion", () => {
  const autoscale = {
    min: 1,
    max: 6,
    initial: 2,
    provisionMs: 500,
    signal: "queue_depth",
    target: 2,
    intervalMs: 1000,
    cooldownMs: 5000,
  } as const;
  const decisions = [
    { timeMs: 0, instances: 2, signal: null, action: "hold" },
    { timeMs: 1000, instances: 4, signal: 4.5, action: "up" },
    { timeMs: 3000, instances: 3, signal: 0, action: "down" },
    { timeMs: 6000, instances: 5, signal: 9, action: "up" }, // after the last completion
  ] as const;
  const s = collect([
    ...decisions.map((decision) => ({ type: "scaled", decision }) as const),
    {
      type: "completed",
      record: record({ arrivalMs: 4000, startMs: 4000, firstTokenMs: 4500, endMs: 5000 }),
    },
  ], { autoscale }).summary();
  assertEquals(s.scaling, decisions);
  assertAlmostEquals(s.instanceSeconds!, (2 * 1000 + 4 * 2000 + 3 * 2000) / 1000);
  assertEquals(s.peakInstances, 5);
  // Nothing completed: no time to integrate over.
  assertEquals(collect([], { autoscale }).summary().instanceSeconds, 0);
  assertEquals(collect([], { autoscale }).summary().peakInstances, 2);
});
