/**
 * A fleet that misbehaves, end to end (issue 14): conservation under every
 * fault, determinism, router replicas against one router, the hit rate that
 * independent views cost, crashes that never hang a run (virtual or real
 * time), a partitioned instance left alone once its status is stale, and the
 * scenario checks of the new sections.
 */
import { assert, assertEquals, assertGreater, assertStringIncludes, assertThrows } from "@std/assert";
import fc from "fast-check";
import type { AnyMessage } from "../actors/protocol.ts";
import { simulateRealtime } from "../actors/realtime_simulation.ts";
import { type RunResult, simulate } from "../actors/simulation.ts";
import type { ScenarioInput } from "../scenarios/scenario/scenario.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";
import { systemWallTime } from "../scenarios/cli/wall_time.ts";
import { scenario } from "./_scenarios.ts";

const KINDS = ["crash", "slow", "drain", "partition"] as const;

/** A random small fleet with random faults, replicas, TTL and retries. */
const faultyScenario = fc.record({
  seed: fc.integer({ min: 1, max: 1_000_000 }),
  model: fc.constantFrom("fifo", "batching"),
  count: fc.integer({ min: 1, max: 4 }),
  replicas: fc.integer({ min: 1, max: 3 }),
  sync: fc.option(fc.constantFrom(0, 50, 500), { nil: undefined }),
  ttl: fc.option(fc.constantFrom(100, 400), { nil: undefined }),
  retryBudget: fc.integer({ min: 0, max: 2 }),
  until: fc.option(fc.integer({ min: 500, max: 6000 }), { nil: undefined }),
  policy: fc.constantFrom("round_robin", "least_load", "prefix_aware", "chwbl", "random", "hybrid"),
  faults: fc.array(
    fc.record({
      instance: fc.nat(3),
      kind: fc.constantFrom(...KINDS),
      atMs: fc.integer({ min: 0, max: 5000 }),
      forMs: fc.option(fc.integer({ min: 1, max: 3000 }), { nil: undefined }),
    }),
    { minLength: 1, maxLength: 4 },
  ),
}).map((c): ScenarioInput => ({
  seed: c.seed,
  policy: { name: c.policy },
  instances: { count: c.count, model: c.model, ...(c.model === "fifo" ? { cacheCapacity: 4 } : {}) },
  router: {
    replicas: c.replicas,
    ...(c.sync !== undefined && { replicaSyncMs: c.sync }),
    ...(c.ttl !== undefined && { statusTtlMs: c.ttl }),
    retryBudget: c.retryBudget,
  },
  workload: { requests: 250, ratePerSec: c.model === "fifo" ? 20 : 60, prefix: { groups: 8 } },
  faults: c.faults.map((f) => ({
    ...f,
    instance: f.instance % c.count,
    ...(f.forMs === undefined ? {} : { forMs: f.forMs }),
    ...(f.kind === "slow" ? { factor: 3 } : {}),
  })),
  ...(c.until !== undefined && { untilMs: c.until }),
}));

Deno.test("every arrival ends completed, dropped, failed or in flight, under any faults, replicas and retries", () => {
  fc.assert(
    fc.property(faultyScenario, (input) => {
      const r = simulate(scenario(input)); // throws invariant_broken otherwise
      assertEquals(r.completed + r.dropped + r.failed + r.inFlight, r.requests);
      // A failed request had a failed attempt; each retry was an attempt that failed.
      assert(r.requestsAffected >= r.failed);
      assertEquals(Object.values(r.failedByReason).reduce((a, b) => a + b, 0), r.failed);
      if (input.untilMs === undefined) assertEquals(r.inFlight, 0);
    }),
    { numRuns: 60 },
  );
});

Deno.test("a run with faults, replicas and an autoscaler is deterministic", () => {
  const input: ScenarioInput = {
    instances: { count: 3, model: "batching" },
    router: { replicas: 3, replicaSyncMs: 200, statusTtlMs: 300, cacheView: "approximate" },
    workload: {
      requests: 1500,
      ratePerSec: 120,
      arrivals: { process: "mmpp", burstiness: 4, burstMs: 2000 },
    },
    faults: [{ instance: 1, kind: "crash", atMs: 3000, forMs: 2000 }, {
      instance: 0,
      kind: "partition",
      atMs: 6000,
      forMs: 1000,
    }],
    autoscale: { min: 2, max: 6, provisionMs: 1000, target: 16, intervalMs: 500, cooldownMs: 2000 },
  };
  const a = simulate(scenario(input)), b = simulate(scenario(input));
  assertEquals(a, b);
  assertGreater(a.requestsAffected, 0);
  assertGreater(a.scaling!.length, 1);
});

Deno.test("one replica, with any replica settings, is today's router exactly", () => {
  for (const model of ["fifo", "batching"] as const) {
    const base: ScenarioInput = { instances: { model, count: 4 }, workload: { requests: 1500 } };
    const today = simulate(scenario(base));
    const one = simulate(
      scenario({ ...base, router: { replicas: 1, replicaSyncMs: 100, replicaSpread: "session" } }),
    );
    assertEquals(one, today);
  }
});

Deno.test("N replicas sharing one view (sync 0) equal one replica exactly, whatever the spread", () => {
  for (const policy of ["prefix_aware", "random", "least_load", "sglang_cache_aware"]) {
    const base: ScenarioInput = {
      policy: { name: policy },
      instances: { model: "batching", count: 6 },
      router: { cacheView: "approximate" },
      workload: { requests: 1500, ratePerSec: 150 },
    };
    const one = simulate(scenario(base));
    for (const replicaSpread of ["random", "session"] as const) {
      const shared = simulate(
        scenario({
          ...base,
          router: { cacheView: "approximate", replicas: 5, replicaSyncMs: 0, replicaSpread },
        }),
      );
      assertEquals(shared, one, `${policy}, ${replicaSpread} spread`);
    }
  }
});

Deno.test("with independent approximate views the hit rate falls as replicas grow (a property over seeds)", () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 1_000_000 }), (seed) => {
      const hit = [1, 2, 4, 8].map((replicas) =>
        simulate(scenario({
          seed,
          policy: { name: "prefix_aware" },
          instances: { count: 8, model: "batching" },
          router: { cacheView: "approximate", replicas },
          workload: { requests: 2000, ratePerSec: 200 },
        })).tokenHitRate!
      );
      for (let i = 1; i < hit.length; i++) assert(hit[i] < hit[i - 1], `seed ${seed}: ${hit.join(" > ")}`);
    }),
    { numRuns: 6 },
  );
});

/** Every instance crashes for good mid-run: what is left fails, and the run ends. */
const everyoneCrashes = (model: "fifo" | "batching"): ScenarioInput => ({
  instances: { count: 3, model },
  router: { statusTtlMs: 200 },
  workload: { requests: 400, ratePerSec: 40 },
  faults: [0, 1, 2].map((instance) => ({ instance, kind: "crash" as const, atMs: 3000 + instance * 100 })),
});

Deno.test("a crash never hangs a virtual run: with the whole fleet down, the rest fails as no_instance", () => {
  for (const model of ["fifo", "batching"] as const) {
    const r = simulate(scenario(everyoneCrashes(model)));
    assertEquals(r.inFlight, 0);
    assertEquals(r.completed + r.dropped + r.failed, 400);
    assertGreater(r.failedByReason.no_instance, 200);
    assertGreater(r.completed, 50);
  }
});

Deno.test("a crash never hangs a real-time run, and it agrees with the virtual run", async () => {
  const config = scenario({ ...everyoneCrashes("fifo"), workload: { requests: 200, ratePerSec: 40 } });
  const virtual = simulate(config);
  const { lag: _lag, speed: _speed, ...realtime } = await simulateRealtime(config, {
    speed: 100,
    wallTime: systemWallTime,
  });
  assertEquals([realtime.completed, realtime.failed, realtime.inFlight], [
    virtual.completed,
    virtual.failed,
    0,
  ]);
  assertEquals(realtime.failedByReason, virtual.failedByReason);
  assertEquals(realtime.ttftMeanMs, virtual.ttftMeanMs);
});

Deno.test("a partitioned instance gets no request once its status is older than the TTL, and gets them again after", () => {
  const ttl = 200, start = 2000, length = 3000, delay = 5;
  const served: number[] = [];
  const config = scenario({
    policy: { name: "round_robin" },
    instances: { count: 4 },
    router: { statusTtlMs: ttl, networkDelayMs: delay },
    workload: { requests: 600, ratePerSec: 80 },
    faults: [{ instance: 0, kind: "partition", atMs: start, forMs: length }],
  });
  // Instance 0's address: the first actor spawned after the metrics collector (actors/topology.ts).
  const instance0 = 1;
  simulate(config, {
    onDeliver: (message, to, timeMs) => {
      if ((message as AnyMessage).type === "serve" && to === instance0) served.push(timeMs);
    },
  });
  const during = served.filter((t) => t > start + ttl + 2 * delay && t < start + length);
  assertEquals(during, [], "no serve reaches the partitioned instance once its status is stale");
  assertGreater(
    served.filter((t) => t >= start + length).length,
    10,
    "it is routed to again once it reports",
  );
});

/** The usage error a scenario gets, in one line. */
function refusal(input: unknown): string {
  return assertThrows(() => scenario(input as ScenarioInput), UsageError).message;
}

Deno.test("the new scenario sections refuse bad input naming the field, the value and what was expected", () => {
  assertStringIncludes(
    refusal({ instances: { count: 2 }, faults: [{ instance: 2, kind: "crash", atMs: 0 }] }),
    "scenario.faults[0].instance: expected an instance index below 2",
  );
  assertStringIncludes(
    refusal({ faults: [{ instance: 0, kind: "melt", atMs: 0 }] }),
    "scenario.faults[0].kind",
  );
  assertStringIncludes(
    refusal({ faults: [{ instance: 0, kind: "crash", atMs: 0, factor: 2 }] }),
    'scenario.faults[0].factor: used only by a fault of kind "slow"',
  );
  assertStringIncludes(
    refusal({
      instances: { model: "batching", pools: [{ role: "prefill", count: 1 }, { role: "decode", count: 1 }] },
      faults: [{ instance: 0, kind: "crash", atMs: 0 }],
    }),
    "scenario.faults: not modelled for a disaggregated fleet",
  );
  assertStringIncludes(
    refusal({ instances: { count: 3 }, autoscale: { min: 4, max: 8, target: 2 } }),
    "scenario.instances.count: expected a starting count within autoscale's [4, 8], got 3",
  );
  assertStringIncludes(
    refusal({ autoscale: { min: 1, max: 8, target: 0.5, signal: "kv_utilization" } }),
    "scenario.autoscale.signal: expected",
  );
  assertStringIncludes(
    refusal({ autoscale: { min: 1, max: 8, target: 0.9, signal: "slo_attainment" } }),
    "scenario.autoscale.signal: needs an SLO",
  );
  assertStringIncludes(
    refusal({ router: { replicas: 2, replicaDelaysMs: [1, 2, 3] } }),
    "scenario.router.replicaDelaysMs: expected one delay per replica (2 numbers >= 0), got [1,2,3]",
  );
  // Probes whose answers reach a replica after the next probe would keep a run alive for ever: refused.
  assertStringIncludes(
    refusal({ router: { replicas: 2, replicaDelaysMs: [0, 60], statusTtlMs: 100 } }),
    "scenario.router.statusTtlMs: expected a number > 120",
  );
  assertStringIncludes(
    refusal({
      instances: { model: "batching", count: 2 },
      router: { networkDelayMs: 60 },
      autoscale: { min: 1, max: 3, target: 4, intervalMs: 50 },
    }),
    "scenario.autoscale.intervalMs: expected a number > router.networkDelayMs (60)",
  );
  assertStringIncludes(
    refusal({ faults: [{ instance: 0, kind: "slow", atMs: 0, factor: 1e300 }] }),
    "scenario.faults[0].factor: expected a number <= 1000",
  );
  assertStringIncludes(
    refusal({ router: { statusTtlMs: 10, networkDelayMs: 5 } }),
    "scenario.router.statusTtlMs: expected a number > 10",
  );
  assertStringIncludes(
    refusal({ workload: { arrivals: { process: "mmpp", burstiness: 0.5 } } }),
    'scenario.workload.arrivals.burstiness: expected a number >= 1 for "mmpp"',
  );
  assertStringIncludes(
    refusal({
      workload: { arrivals: { profile: { points: [{ atMs: 0, factor: 1 }, { atMs: 0, factor: 2 }] } } },
    }),
    "scenario.workload.arrivals.profile.points[1].atMs: expected a time after the previous point's (0), got 0",
  );
});

Deno.test("an autoscaled fleet is built at max, starts at instances.count, and its decisions are reported", () => {
  const config = scenario({
    instances: { count: 2, model: "batching" },
    workload: { requests: 3000, ratePerSec: 150 },
    autoscale: { min: 1, max: 6, provisionMs: 2000, target: 8, intervalMs: 500, cooldownMs: 5000 },
  });
  assertEquals([config.instances.count, config.autoscale!.initial], [6, 2]);
  const r: RunResult = simulate(config);
  assertEquals(r.scaling![0], { timeMs: 0, instances: 2, signal: null, action: "hold" });
  assert(r.scaling!.some((d) => d.action === "up"), "it scales out under load");
  assertGreater(r.peakInstances!, 2);
  assert(r.instanceSeconds! < 6 * r.simulatedMs / 1000, "it costs less than the whole fleet all the time");
  assertEquals(r.completed + r.dropped + r.failed, 3000);
});
