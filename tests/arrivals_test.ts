import { assert, assertAlmostEquals, assertEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import {
  createArrivalProcess,
  expectedArrivals,
  OperationalTime,
} from "../actors/workload/arrival_process.ts";
import { sampleGamma } from "../actors/workload/distributions.ts";
import type { Request, RouteCommand } from "../actors/protocol.ts";
import { GROUP_KEY_STRIDE } from "../actors/kv_cache/prefix_keys.ts";
import { Kernel } from "../actors/runtime/kernel.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import {
  type ArrivalOptions,
  type RateProfile,
  type WorkloadOptions,
  WorkloadSource,
} from "../actors/workload/workload_source.ts";
import { Recorder } from "./_recorder.ts";

const workload = (over: Partial<WorkloadOptions> = {}): WorkloadOptions => ({
  requests: 3000,
  ratePerSec: 50,
  prefix: { groups: 10, zipf: 1, sharedFrac: 0.5, tokens: 100 },
  suffixTokens: { dist: "exponential", mean: 20 },
  outputTokens: { dist: "uniform", min: 5, max: 70 },
  ...over,
});

const SESSIONS = { turnsMean: 4, thinkTimeMs: 2000, keyTokens: 16 } as const;

/** Runs a source alone in a kernel; returns what the router received, checked to arrive on time and in order. */
function emit(options: WorkloadOptions, seed = 1): Request[] {
  const kernel = new Kernel({ seed });
  const router = new Recorder<RouteCommand>();
  const source = new WorkloadSource(options, kernel.spawn("router", router), 16);
  kernel.send(kernel.spawn("source", source), { type: "start" });
  kernel.run();
  assertEquals(router.received.length, options.requests);
  router.received.forEach((r, i) => {
    assertEquals(r.timeMs, r.message.request.arrivalMs, `request ${i} delivered at its arrival time`);
    if (i > 0) assert(r.timeMs >= router.received[i - 1].timeMs, `request ${i} in time order`);
  });
  return router.received.map((r) => r.message.request);
}

/** `count` arrival times of a process, drawn straight from a stream. */
function arrivalTimes(ratePerSec: number, arrivals: ArrivalOptions | undefined, count: number, seed = 1) {
  const random = createRandomStream(seed, "arrivals-test");
  const process = createArrivalProcess(ratePerSec, arrivals);
  const times = new Float64Array(count);
  times[0] = process.first(0, random);
  for (let i = 1; i < count; i++) times[i] = process.next(random);
  return times;
}

function gapStats(times: Float64Array): { mean: number; cv2: number } {
  let sum = 0, sumSq = 0;
  for (let i = 1; i < times.length; i++) {
    const gap = times[i] - times[i - 1];
    sum += gap;
    sumSq += gap * gap;
  }
  const n = times.length - 1, mean = sum / n;
  return { mean, cv2: (sumSq / n - mean * mean) / (mean * mean) };
}

/** Arrivals per window of `windowMs`, over the whole windows before the last arrival. */
function windowCounts(times: Float64Array, windowMs: number): number[] {
  const counts = new Array(Math.floor(times[times.length - 1] / windowMs)).fill(0);
  for (const t of times) {
    const w = Math.floor(t / windowMs);
    if (w < counts.length) counts[w]++;
  }
  return counts;
}

function dispersion(counts: readonly number[]): number {
  const mean = counts.reduce((a, b) => a + b, 0) / counts.length;
  const variance = counts.reduce((a, c) => a + (c - mean) ** 2, 0) / (counts.length - 1);
  return variance / mean;
}

const poissonOptions = (over: Partial<ArrivalOptions> = {}): ArrivalOptions => ({
  process: "poisson",
  burstiness: 1,
  burstMs: 10_000,
  ...over,
});

Deno.test("absent arrivals keep today's draws exactly (pinned arrival times and requests)", () => {
  const plain = emit(workload(), 3);
  assertEquals(plain[0], {
    id: 0,
    arrivalMs: 2.653155567834543,
    prefixGroup: -1,
    prefixTokens: 100,
    suffixTokens: 78,
    outputTokens: 24,
  });
  assertEquals(plain[2999].arrivalMs, 58238.30395130026);
  assertEquals(plain[2999].suffixTokens, 1);
  const sessions = emit(workload({ sessions: SESSIONS }), 5);
  assertEquals(sessions[1].arrivalMs, 10.317345841681721);
  assertEquals(sessions[2999].arrivalMs, 20967.210527015315);
  assertEquals(sessions[2999].prefixGroup, 1035);
  assertEquals(sessions[2999].prefixKeys?.[0], -1075838976);
});

Deno.test("poisson arrivals without a profile equal absent arrivals, request for request", async (t) => {
  for (const sessions of [undefined, SESSIONS]) {
    await t.step(sessions ? "session mode" : "independent requests", () => {
      const absent = emit(workload({ sessions }), 11);
      const poisson = emit(
        workload({ sessions, arrivals: poissonOptions({ burstiness: 7, burstMs: 3 }) }),
        11,
      );
      assertEquals(poisson, absent);
    });
  }
});

Deno.test("session-mode requests carry their session's index; independent requests carry none", () => {
  const requests = emit(workload({ requests: 2000, sessions: SESSIONS }), 2);
  assert(requests.every((r) => r.session !== undefined));
  // Sessions are numbered in start order: each new index is one more than the largest so far.
  let largest = -1;
  for (const r of requests) {
    assert(r.session! <= largest + 1, `session ${r.session} after ${largest}`);
    largest = Math.max(largest, r.session!);
  }
  // `session` names the session the request's own keys and group belong to.
  let ownKeys = 0;
  for (const r of requests) {
    const key = r.prefixKeys!.at(-1)!;
    if (r.prefixGroup >= 10) {
      assertEquals(r.prefixGroup, 10 + r.session!, "an unshared session's group is groups + session");
    }
    if (key < 0) {
      assertEquals(Math.floor(-key / GROUP_KEY_STRIDE), r.session! + 1, "session keys are the session's");
      ownKeys++;
    }
  }
  assert(ownKeys > requests.length / 2);
  // Mean 4 turns, but sessions still open at the 2000th request are cut short.
  assert(largest > 400 && largest < 1000, `several turns per session, got ${largest + 1} sessions`);
  assert(emit(workload({ requests: 200 }), 2).every((r) => !("session" in r)));
});

Deno.test("sampleGamma has mean shape × scale and CV² 1 / shape", async (t) => {
  for (const shape of [0.2, 1, 3.5]) {
    await t.step(`shape ${shape}`, () => {
      const random = createRandomStream(4, "gamma");
      let sum = 0, sumSq = 0;
      const n = 100_000;
      for (let i = 0; i < n; i++) {
        const x = sampleGamma(shape, 2, random);
        assert(x >= 0);
        sum += x;
        sumSq += x * x;
      }
      const mean = sum / n;
      assertAlmostEquals(mean, shape * 2, shape * 2 * 0.03);
      assertAlmostEquals((sumSq / n - mean * mean) / (mean * mean), 1 / shape, 0.08 / shape);
    });
  }
});

Deno.test("gamma arrivals: mean gap 1000/rate and CV² of gaps = burstiness", async (t) => {
  for (const burstiness of [4, 0.5]) {
    await t.step(`burstiness ${burstiness}`, () => {
      const stats = gapStats(arrivalTimes(40, { process: "gamma", burstiness, burstMs: 1 }, 100_000, 9));
      assertAlmostEquals(stats.mean, 25, 25 * 0.03);
      assertAlmostEquals(stats.cv2, burstiness, burstiness * 0.1);
    });
  }
});

Deno.test("mmpp arrivals: long-run rate is ratePerSec, counts are overdispersed, the states' rates differ by burstiness", () => {
  const mmpp = arrivalTimes(50, { process: "mmpp", burstiness: 4, burstMs: 1000 }, 100_000, 5);
  assertAlmostEquals(mmpp.length / (mmpp[mmpp.length - 1] / 1000), 50, 50 * 0.05);
  const poisson = arrivalTimes(50, undefined, 100_000, 5);
  const poissonDispersion = dispersion(windowCounts(poisson, 1000));
  assertAlmostEquals(poissonDispersion, 1, 0.12);
  // Counts in T = 1 s, switching rates 1/s each way: 1 + (λh−λl)²·2πhπl/(λ·2/s)·(1 − (1 − e^−2)/2) ≈ 11.2.
  const idc = 1 + (80 - 20) ** 2 * 2 * 0.25 / (50 * 2) * (1 - (1 - Math.exp(-2)) / 2);
  assertAlmostEquals(
    dispersion(windowCounts(mmpp, 1000)),
    idc,
    idc * 0.15,
    "bursty counts, as the MMPP's theory says",
  );
  // Long states: 1 s windows sit in one state or the other, at 2λ/(1+b) = 20 or 2λb/(1+b) = 80 per s.
  const long = windowCounts(
    arrivalTimes(50, { process: "mmpp", burstiness: 4, burstMs: 60_000 }, 200_000, 6),
    1000,
  );
  const low = long.filter((c) => c < 50), high = long.filter((c) => c >= 50);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  assertAlmostEquals(mean(low), 20, 2);
  assertAlmostEquals(mean(high), 80, 4);
  // Equal mean times in each state; over some 70 sojourns, loosely: a chain stuck in one state fails.
  assertAlmostEquals(low.length / long.length, 0.5, 0.2);
  // burstiness 1: both states at λ, a plain Poisson process.
  const flat = arrivalTimes(50, { process: "mmpp", burstiness: 1, burstMs: 1000 }, 100_000, 7);
  assertAlmostEquals(dispersion(windowCounts(flat, 1000)), 1, 0.12);
});

/** Checks each window's count against the profile's integral, within 4 standard deviations (Poisson). */
function assertCountsFollow(
  times: Float64Array,
  arrivals: ArrivalOptions,
  ratePerSec: number,
  edgesMs: number[],
) {
  for (let w = 0; w + 1 < edgesMs.length; w++) {
    const [from, to] = [edgesMs[w], edgesMs[w + 1]];
    const count = times.filter((t) => t >= from && t < to).length;
    const expected = expectedArrivals(ratePerSec, arrivals, from, to);
    assert(
      Math.abs(count - expected) <= 4 * Math.sqrt(expected) + 1,
      `[${from}, ${to}): ${count} arrivals, expected ${expected.toFixed(1)}`,
    );
  }
}

Deno.test("a ramp profile: the rate rises linearly, then holds the last factor", () => {
  const arrivals = poissonOptions({
    profile: { points: [{ atMs: 0, factor: 1 }, { atMs: 10_000, factor: 3 }] },
  });
  assertEquals(expectedArrivals(100, arrivals, 0, 10_000), 2000);
  assertEquals(expectedArrivals(100, arrivals, 10_000, 30_000), 6000);
  const times = arrivalTimes(100, arrivals, 8000, 3);
  const edges = Array.from({ length: 11 }, (_, i) => i * 1000).concat([15_000, 20_000]);
  assertCountsFollow(times, arrivals, 100, edges);
  const after = times.filter((t) => t >= 10_000 && t < 20_000).length;
  assertAlmostEquals(after / 10, 300, 300 * 0.05, "3 × the rate after the ramp");
});

Deno.test("a periodic profile repeats, holds its last factor to the period's end and skips a zero-rate span", () => {
  // 1 → 2 → 1 → 0, held at 0 from 3 s to 4 s, every 4 s: 3.5 s of factor 1 per cycle.
  const profile: RateProfile = {
    points: [{ atMs: 0, factor: 1 }, { atMs: 1000, factor: 2 }, { atMs: 2000, factor: 1 }, {
      atMs: 3000,
      factor: 0,
    }],
    periodMs: 4000,
  };
  const arrivals = poissonOptions({ profile });
  assertEquals(expectedArrivals(1000, arrivals, 0, 4000), 3500);
  assertEquals(expectedArrivals(1000, arrivals, 2750, 3250), 31.25);
  assertEquals(expectedArrivals(1000, arrivals, 4000, 44_000), 35_000);
  const times = arrivalTimes(1000, arrivals, 160_000, 8);
  // Fold 40 cycles onto one and compare 8 phase bins with 40 × each bin's integral.
  const folded = times.filter((t) => t < 160_000).map((t) => t % 4000);
  for (let bin = 0; bin < 8; bin++) {
    const count = folded.filter((p) => p >= bin * 500 && p < (bin + 1) * 500).length;
    const expected = 40 * expectedArrivals(1000, arrivals, bin * 500, (bin + 1) * 500);
    assert(
      Math.abs(count - expected) <= 4 * Math.sqrt(expected),
      `phase bin ${bin}: ${count}, expected ${expected}`,
    );
  }
  assertEquals(folded.filter((p) => p >= 3000).length, 0, "none while the factor is 0");
});

Deno.test("a step profile with a zero-rate span has no arrivals in it, and the full rate elsewhere", () => {
  const profile: RateProfile = {
    points: [{ atMs: 0, factor: 2 }, { atMs: 1000, factor: 2 }, { atMs: 1000, factor: 0 }, {
      atMs: 2000,
      factor: 0,
    }, {
      atMs: 2000,
      factor: 1,
    }],
    periodMs: 3000,
  };
  for (const process of ["poisson", "gamma", "mmpp"] as const) {
    const times = arrivalTimes(500, { process, burstiness: 2, burstMs: 300, profile }, 30_000, 4);
    const phases = Array.from(times, (t) => t % 3000);
    assertEquals(
      phases.filter((p) => p >= 1000 && p < 2000).length,
      0,
      `${process}: none while the factor is 0`,
    );
    const cycles = times[times.length - 1] / 3000;
    const high = phases.filter((p) => p < 1000).length / cycles,
      low = phases.filter((p) => p >= 2000).length / cycles;
    assertAlmostEquals(high / low, 2, 0.15, `${process}: factor 2 then factor 1`);
  }
});

Deno.test("bursty processes keep to the profile over long windows", async (t) => {
  const profile: RateProfile = {
    points: [{ atMs: 0, factor: 0.5 }, { atMs: 5000, factor: 1.5 }],
    periodMs: 10_000,
  };
  for (const process of ["gamma", "mmpp"] as const) {
    await t.step(process, () => {
      const arrivals: ArrivalOptions = { process, burstiness: 2, burstMs: 500, profile };
      const times = arrivalTimes(200, arrivals, 100_000, 12);
      const end = Math.floor(times[times.length - 1] / 10_000) * 10_000;
      const total = times.filter((t) => t < end).length;
      assertAlmostEquals(total / expectedArrivals(200, arrivals, 0, end), 1, 0.05);
      // A cycle integrates to 5000·1 + 5000·1.5 = 12500: 5000 on the ramp, 1875 of it in its first half.
      const phases = times.filter((t) => t < end).map((t) => t % 10_000);
      const firstHalf = phases.filter((p) => p < 5000).length;
      assertAlmostEquals(firstHalf / total, 0.4, 0.03);
      const firstQuarter = phases.filter((p) => p < 2500).length;
      assertAlmostEquals(firstQuarter / total, 0.15, 0.02);
    });
  }
});

Deno.test("operational time is exact at segment ends, periodic or not", () => {
  const time = new OperationalTime({
    points: [{ atMs: 0, factor: 1 }, { atMs: 1000, factor: 3 }, { atMs: 1000, factor: 0 }, {
      atMs: 3000,
      factor: 2,
    }],
  });
  const ends = [[0, 0], [1000, 2000], [3000, 4000], [5000, 8000]];
  for (const [realMs, operationalMs] of ends) {
    assertEquals(time.toOperational(realMs), operationalMs);
    assertEquals(time.toReal(operationalMs), realMs);
  }
  assertEquals(time.toReal(2000), 1000, "the step to 0 at 1 s: the first time operational time reaches 2000");
  assertEquals(time.toReal(2000 + 1e-9) > 1000, true);
  const periodic = new OperationalTime({
    points: [{ atMs: 0, factor: 0 }, { atMs: 500, factor: 4 }],
    periodMs: 1000,
  });
  // Per period: 500·4/2 + 500·4 = 3000.
  for (const [realMs, operationalMs] of [[500, 1000], [1000, 3000], [7500, 22_000], [9000, 27_000]]) {
    assertEquals(periodic.toOperational(realMs), operationalMs);
    assertEquals(periodic.toReal(operationalMs), realMs);
  }
  assertAlmostEquals(periodic.toReal(500), 500 * Math.SQRT1_2, 1e-9, "Λ(t) = 4t²/1000 on the rise");
});

Deno.test("operational time and its inverse are monotone and invert each other (property)", () => {
  // Factors 0 or >= 1e-3: subnormal factors would only test the floating point's underflow.
  const factor = fc.oneof(fc.constant(0), fc.double({ min: 1e-3, max: 5, noNaN: true }));
  const point = fc.record({ gapMs: fc.integer({ min: 0, max: 5000 }), factor });
  fc.assert(
    fc.property(
      fc.array(point, { minLength: 1, maxLength: 6 }),
      fc.double({ min: 1e-3, max: 5, noNaN: true }),
      fc.option(fc.integer({ min: 1, max: 5000 })),
      fc.array(fc.double({ min: 0, max: 1e5, noNaN: true }), { minLength: 2, maxLength: 20 }),
      (raw, lastFactor, periodExtra, samples) => {
        let atMs = 0;
        const points = raw.map((p, i) => ({ atMs: i === 0 ? 0 : (atMs += p.gapMs), factor: p.factor }));
        points.push({ atMs: atMs + 1000, factor: lastFactor });
        const profile: RateProfile = periodExtra === null
          ? { points }
          : { points, periodMs: atMs + 1000 + periodExtra };
        const time = new OperationalTime(profile);
        const sorted = [...samples].sort((a, b) => a - b);
        let lastReal = -Infinity, lastOperational = -Infinity;
        for (const s of sorted) {
          const t = time.toReal(s);
          assert(t >= lastReal - 1e-9 * Math.max(1, t), `toReal monotone at ${s}`);
          assertAlmostEquals(time.toOperational(t), s, 1e-7 * Math.max(1, s));
          const o = time.toOperational(s);
          assert(o >= lastOperational - 1e-9 * Math.max(1, o), `toOperational monotone at ${s}`);
          lastReal = t;
          lastOperational = o;
        }
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("bursty and profiled sources are deterministic per seed, on time and in order", async (t) => {
  const profile: RateProfile = {
    points: [{ atMs: 0, factor: 0.2 }, { atMs: 20_000, factor: 2 }],
    periodMs: 40_000,
  };
  const cases: [string, ArrivalOptions][] = [
    ["gamma", { process: "gamma", burstiness: 4, burstMs: 1 }],
    ["mmpp", { process: "mmpp", burstiness: 8, burstMs: 2000 }],
    ["poisson with a profile", poissonOptions({ profile })],
    ["mmpp with a profile", { process: "mmpp", burstiness: 3, burstMs: 2000, profile }],
  ];
  for (const [name, arrivals] of cases) {
    for (const sessions of [undefined, SESSIONS]) {
      await t.step(`${name}${sessions ? ", sessions" : ""}`, () => {
        const a = emit(workload({ requests: 1500, arrivals, sessions }), 21);
        assertEquals(emit(workload({ requests: 1500, arrivals, sessions }), 21), a);
        const other = emit(workload({ requests: 1500, arrivals, sessions }), 22);
        assert(JSON.stringify(other) !== JSON.stringify(a));
        const plain = emit(workload({ requests: 1500, sessions }), 21);
        assert(a.some((r, i) => r.arrivalMs !== plain[i].arrivalMs), "not today's Poisson times");
      });
    }
  }
});

Deno.test("session mode: the arrival process spaces session starts", () => {
  const requests = emit(
    workload({
      requests: 60_000,
      sessions: { turnsMean: 2, thinkTimeMs: 500, keyTokens: 16 },
      arrivals: { process: "gamma", burstiness: 4, burstMs: 1 },
    }),
    6,
  );
  const starts: number[] = [];
  const seen = new Set<number>();
  for (const r of requests) {
    if (!seen.has(r.session!)) {
      seen.add(r.session!);
      starts.push(r.arrivalMs);
    }
  }
  const stats = gapStats(Float64Array.from(starts.slice(0, -1000)));
  // Sessions start at ratePerSec: mean gap 20 ms; gaps between starts have CV² = burstiness.
  assertAlmostEquals(stats.mean, 20, 20 * 0.04);
  assertAlmostEquals(stats.cv2, 4, 4 * 0.12);
});

Deno.test("degenerate arrival options are refused with a RangeError, never a hang", async (t) => {
  const refused: [string, ArrivalOptions][] = [
    [
      "a profile 0 throughout",
      poissonOptions({ profile: { points: [{ atMs: 0, factor: 0 }], periodMs: 10 } }),
    ],
    [
      "a profile ending at 0 without a period",
      poissonOptions({ profile: { points: [{ atMs: 0, factor: 1 }, { atMs: 5, factor: 0 }] } }),
    ],
    ["no points", poissonOptions({ profile: { points: [] } })],
    ["a first point after 0", poissonOptions({ profile: { points: [{ atMs: 5, factor: 1 }] } })],
    [
      "unsorted points",
      poissonOptions({
        profile: { points: [{ atMs: 0, factor: 1 }, { atMs: 9, factor: 1 }, { atMs: 4, factor: 1 }] },
      }),
    ],
    [
      "a period not after the last point",
      poissonOptions({ profile: { points: [{ atMs: 0, factor: 1 }, { atMs: 9, factor: 1 }], periodMs: 9 } }),
    ],
    ["mmpp with burstMs 0", { process: "mmpp", burstiness: 2, burstMs: 0 }],
    ["mmpp with burstiness below 1", { process: "mmpp", burstiness: 0.5, burstMs: 10 }],
    ["gamma with burstiness 0", { process: "gamma", burstiness: 0, burstMs: 10 }],
  ];
  for (const [name, arrivals] of refused) {
    await t.step(name, () => {
      assertThrows(() => createArrivalProcess(10, arrivals), RangeError);
    });
  }
});
