import {
  assert,
  assertAlmostEquals,
  assertEquals,
  assertGreater,
  assertNotEquals,
  assertThrows,
} from "@std/assert";
import fc from "fast-check";
import { POLICY_NAMES } from "../actors/policies/mod.ts";
import { simulate } from "../actors/simulation.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { scenario } from "./_scenarios.ts";

Deno.test("two runs with the same seed give identical results; another seed differs", () => {
  const config = scenario({ workload: { requests: 5000 } });
  const a = simulate(config), b = simulate(config);
  assertEquals(JSON.stringify(a), JSON.stringify(b));
  const c = simulate({ ...config, seed: config.seed + 1 });
  assertNotEquals(c.ttftMeanMs, a.ttftMeanMs);
  assertNotEquals(c.hitRate, a.hitRate);
});

Deno.test("every policy completes every request of the default scenario", async (t) => {
  for (const name of POLICY_NAMES) {
    await t.step(name, () => {
      const r = simulate(scenario({ policy: { name }, workload: { requests: 3000 } }));
      assertEquals([r.requests, r.completed, r.dropped, r.inFlight], [3000, 3000, 0, 0]);
      assertEquals(r.perInstanceCompleted.reduce((a, b) => a + b, 0), 3000);
    });
  }
});

Deno.test("a run stopped early counts unfinished arrivals as in flight and not-yet-arrived ones not at all", () => {
  const r = simulate({ ...scenario({ workload: { requests: 5000, ratePerSec: 200 } }), untilMs: 10_000 });
  assertGreater(r.inFlight, 0);
  assert(r.requests < 5000, `requests ${r.requests}`);
  assertEquals(r.completed + r.dropped + r.inFlight, r.requests);
  assertAlmostEquals(r.requests, 2000, 150); // 200 req/s × 10 s
});

Deno.test("bounded queues drop with a reason and the books still balance", () => {
  const r = simulate(scenario({ instances: { maxQueue: 2 }, workload: { requests: 4000, ratePerSec: 150 } }));
  assertGreater(r.dropped, 0);
  assertEquals(r.droppedByReason.queue_full, r.dropped);
  assertEquals(r.completed + r.dropped, 4000);
});

Deno.test("conservation holds over many seeds and small random scenarios", () => {
  fc.assert(
    fc.property(
      fc.record({
        seed: fc.integer({ min: 0, max: 1e6 }),
        policy: fc.constantFrom(...POLICY_NAMES),
        threshold: fc.integer({ min: 0, max: 4 }),
        count: fc.integer({ min: 1, max: 6 }),
        rate: fc.double({ min: 1, max: 300, noNaN: true }),
        requests: fc.integer({ min: 1, max: 400 }),
        zipf: fc.double({ min: 0, max: 3, noNaN: true }),
        sharedFrac: fc.double({ min: 0, max: 1, noNaN: true }),
        groups: fc.integer({ min: 1, max: 20 }),
        cacheCapacity: fc.integer({ min: 0, max: 5 }),
        maxQueue: fc.option(fc.integer({ min: 0, max: 5 })),
        untilMs: fc.option(fc.integer({ min: 1, max: 5000 })),
        decodeMsPerToken: fc.constantFrom(0, 0.5),
      }),
      (p) => {
        const r = simulate({
          ...scenario({
            seed: p.seed,
            // Only hybrid takes a threshold (any other policy refuses one).
            policy: p.policy === "hybrid" ? { name: p.policy, threshold: p.threshold } : { name: p.policy },
            instances: {
              count: p.count,
              cacheCapacity: p.cacheCapacity,
              maxQueue: p.maxQueue,
              decodeMsPerToken: p.decodeMsPerToken,
            },
            workload: {
              requests: p.requests,
              ratePerSec: p.rate,
              prefix: { zipf: p.zipf, sharedFrac: p.sharedFrac, groups: p.groups },
            },
          }),
          untilMs: p.untilMs ?? undefined,
        });
        assertEquals(r.completed + r.dropped + r.inFlight, r.requests);
        if (p.untilMs === null) assertEquals([r.requests, r.inFlight], [p.requests, 0]);
        // Over no completed request the hit rate is undefined (null), never 0.
        assertEquals(r.hitRate === null, r.completed === 0);
        if (r.hitRate !== null) {
          assert(r.hitRate >= 0 && r.hitRate <= 1 && r.tokenHitRate! <= r.hitRate + 1e-12);
          if (p.sharedFrac === 0 || p.cacheCapacity === 0) assertEquals(r.hitRate, 0);
        }
      },
    ),
    { numRuns: 150 },
  );
});

Deno.test("a policy that throws fails the run with the router named", () => {
  const config = scenario({ workload: { requests: 10 } });
  const error = assertThrows(
    () =>
      simulate(config, {
        policy: {
          name: "explosive",
          choose: () => {
            throw new Error("no route");
          },
        },
      }),
    SimulationError,
    "no route",
  );
  assertEquals([error.kind, error.actor, error.messageType], ["actor_threw", "router", "route"]);
});

Deno.test("round_robin's request-count imbalance is near 0 and prefix_aware's is large under skew", () => {
  const key = { workload: { requests: 8000, prefix: { zipf: 2, sharedFrac: 0.9 } } } as const;
  const rr = simulate(scenario({ ...key, policy: { name: "round_robin" } }));
  const pa = simulate(scenario({ ...key, policy: { name: "prefix_aware" } }));
  assert(rr.imbalance !== null && rr.imbalance < 0.01, `round_robin ${rr.imbalance}`);
  assertGreater(pa.imbalance!, 0.5);
  assertGreater(pa.hitRate!, rr.hitRate!);
});

Deno.test("with multi-turn sessions under cache pressure, session affinity (prefix_aware) reuses more tokens than round_robin", () => {
  const sessions = (name: "round_robin" | "prefix_aware") =>
    simulate(scenario({
      policy: { name },
      instances: { model: "batching", engine: { kvBlocks: 3000 } },
      workload: { requests: 4000, ratePerSec: 4, sessions: { turnsMean: 5, thinkTimeMs: 5000 } },
    }));
  const rr = sessions("round_robin"), pa = sessions("prefix_aware");
  assertGreater(pa.tokenHitRate!, rr.tokenHitRate! + 0.1);
  assertEquals(pa.completed + pa.dropped, 4000);
});
