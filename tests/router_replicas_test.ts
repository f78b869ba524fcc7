import { assert, assertEquals, assertNotEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import { ApproximateCacheView, ExactCacheView } from "../actors/router/cache_view.ts";
import { createPolicy } from "../actors/policies/mod.ts";
import type { PolicySpec } from "../actors/policies/mod.ts";
import type { PrefilledCommand, RouterCommand } from "../actors/protocol.ts";
import { type RouterOptions, sessionReplica } from "../actors/router/router.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import { arrive, request, type RouterFleet, routerFleet, serves } from "./_router_fleet.ts";
import { status } from "./_status.ts";

/** `count` arrivals 1 ms apart, of prefix groups drawn from a seeded stream (some with none). */
function workload(fleet: RouterFleet, count: number, groups = 12, seed = 5): void {
  const draw = createRandomStream(seed, "test/workload");
  for (let id = 0; id < count; id++) {
    const group = Math.floor(draw() * (groups + 2)) - 2;
    arrive(fleet, request(id, Math.max(-1, group), undefined, id));
  }
}

/** Runs a workload through a router built with `options` and returns every delivery of the run. */
function deliveries(spec: PolicySpec, options?: RouterOptions): string[] {
  const fleet = routerFleet(createPolicy(spec), options, { instances: 4, serviceMs: 7, delayMs: 1 });
  workload(fleet, 300);
  fleet.kernel.run();
  return fleet.deliveries;
}

const POLICIES: PolicySpec[] = [
  { name: "round_robin" },
  { name: "power_of_two" },
  { name: "least_load" },
  { name: "prefix_aware" },
  { name: "random" },
];

Deno.test("one replica with the new options at their defaults is message-for-message today's router", async (t) => {
  for (const spec of POLICIES) {
    await t.step(spec.name, () => {
      const today = deliveries(spec);
      assert(today.length > 900, `only ${today.length} deliveries`);
      assertEquals(
        deliveries(spec, {
          replicas: { count: 1, spread: "random", delaysMs: [0] },
          seed: 9,
          statusTtlMs: Infinity,
          retryBudget: 1,
        }),
        today,
      );
    });
  }
});

Deno.test("N replicas sharing one view (sync 0) route exactly as one replica", async (t) => {
  for (const spec of POLICIES) {
    await t.step(spec.name, () => {
      for (const spread of ["random", "session"] as const) {
        assertEquals(
          deliveries(spec, { replicas: { count: 4, spread, syncMs: 0 }, seed: 3 }),
          deliveries(spec),
        );
      }
    });
  }
});

Deno.test("over seeds and replica counts: a shared view equals one replica, and independent replicas account for every arrival", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 2 ** 31 }),
      fc.integer({ min: 2, max: 6 }),
      fc.constantFrom("random" as const, "session" as const),
      fc.constantFrom("power_of_two", "prefix_aware", "least_load"),
      (seed, count, spread, name) => {
        const run = (options?: RouterOptions) => {
          const fleet = routerFleet(createPolicy({ name }), options, { instances: 4, serviceMs: 9, seed });
          workload(fleet, 120, 8, seed);
          fleet.kernel.run();
          return fleet;
        };
        const one = run();
        assertEquals(run({ replicas: { count, spread, syncMs: 0 }, seed }).deliveries, one.deliveries);
        const independent = run({ replicas: { count, spread }, seed });
        const views = independent.router.replicaViews();
        assertEquals(views.reduce((n, v) => n + v.routedCount, 0), 120);
        const perReplica = new Array(count).fill(0);
        for (const s of serves(independent)) perReplica[s[4]!]++;
        assertEquals(perReplica, views.map((v) => v.routedCount));
        // Every request finished: every replica's in-flight counts are back to 0.
        for (const v of views) assertEquals([...v.inFlight], [0, 0, 0, 0]);
      },
    ),
    { numRuns: 40 },
  );
});

Deno.test("replicas sharing a view share one table", () => {
  const fleet = routerFleet(createPolicy({ name: "round_robin" }), { replicas: { count: 3, syncMs: 0 } });
  const views = fleet.router.replicaViews();
  assertEquals(views.length, 3);
  assert(views.every((v) => v === fleet.router.view));
});

Deno.test("random spread is near uniform and leaves the policy's own draws unchanged", () => {
  const run = (options?: RouterOptions) => {
    const fleet = routerFleet(createPolicy({ name: "random" }), options, { instances: 5 });
    for (let id = 0; id < 4000; id++) arrive(fleet, request(id, -1, undefined, id));
    fleet.kernel.run();
    return fleet;
  };
  const one = run(), four = run({ replicas: { count: 4 }, seed: 11 });
  // The random policy reads no view: the same draws give the same instances.
  assertEquals(serves(four).map((s) => s.slice(0, 3)), serves(one).map((s) => s.slice(0, 3)));
  const perReplica = [0, 0, 0, 0];
  for (const s of serves(four)) perReplica[s[4]!]++;
  // Binomial(4000, 1/4): sd ≈ 27.
  for (const n of perReplica) assert(Math.abs(n - 1000) < 110, `replica counts ${perReplica}`);
  assertEquals(four.router.replicaViews().map((v) => v.routedCount), perReplica);
  // A single replica's serves carry no replica field.
  assert(serves(one).every((s) => s[4] === undefined));
});

Deno.test("session spread keeps each session on one replica and spreads sessions over all", () => {
  const fleet = routerFleet(createPolicy({ name: "round_robin" }), {
    replicas: { count: 3, spread: "session" },
  });
  let id = 0;
  for (let round = 0; round < 10; round++) {
    for (let session = 0; session < 60; session++) arrive(fleet, request(id, session % 7, session, id++));
  }
  fleet.kernel.run();
  const replicaOf = new Map<number, Set<number>>();
  for (const instance of fleet.instances) {
    for (const { message } of instance.served) {
      const session = message.request.session!;
      if (!replicaOf.has(session)) replicaOf.set(session, new Set());
      replicaOf.get(session)!.add(message.replica!);
      assertEquals(message.replica, sessionReplica(message.request, 3));
    }
  }
  assertEquals(replicaOf.size, 60);
  assert([...replicaOf.values()].every((s) => s.size === 1));
  const sessionsPer = [0, 0, 0];
  for (const s of replicaOf.values()) sessionsPer[[...s][0]]++;
  // Expected 20 each (sd ≈ 3.7).
  assert(sessionsPer.every((n) => n >= 8), `sessions per replica ${sessionsPer}`);
});

Deno.test("session spread keys on the prefix group without a session, else on the id", () => {
  const byGroup = new Set<number>(), byId = new Set<number>();
  for (let id = 0; id < 200; id++) {
    byGroup.add(sessionReplica(request(id, 42), 4));
    byId.add(sessionReplica(request(id), 4));
  }
  assertEquals(byGroup.size, 1);
  assertEquals(byId.size, 4);
  assertEquals(sessionReplica(request(1, 42, 42), 4), sessionReplica(request(2, 42), 4));
  assertNotEquals(
    [0, 1, 2, 3, 4, 5, 6, 7].map((g) => sessionReplica(request(0, g), 4)).join(),
    "0,0,0,0,0,0,0,0",
  );
});

/** Per replica, the (instance, group) pairs it routed, from the serves. */
function routedPairs(fleet: RouterFleet, replicas: number): Set<string>[] {
  const pairs = Array.from({ length: replicas }, () => new Set<string>());
  for (const instance of fleet.instances) {
    for (const { message } of instance.served) {
      if (message.request.prefixGroup >= 0) {
        pairs[message.replica!].add(`${instance.index}/${message.request.prefixGroup}`);
      }
    }
  }
  return pairs;
}

/** Per replica, the (instance, group) pairs its view believes cached. */
function believedPairs(fleet: RouterFleet, groups: number): Set<string>[] {
  return fleet.router.replicaViews().map((view) => {
    const held = new Set<string>();
    for (let i = 0; i < view.instanceCount; i++) {
      for (let g = 0; g < groups; g++) if (view.holds(i, g)) held.add(`${i}/${g}`);
    }
    return held;
  });
}

const approximate = (): RouterOptions => ({ cacheView: new ApproximateCacheView(3, "groups", Infinity) });

Deno.test("independent replicas' approximate views know only their own routings", () => {
  const fleet = routerFleet(createPolicy({ name: "round_robin" }), {
    ...approximate(),
    replicas: { count: 2 },
    seed: 4,
  });
  workload(fleet, 200, 20);
  fleet.kernel.run();
  const routed = routedPairs(fleet, 2), believed = believedPairs(fleet, 20);
  assertEquals(believed, routed);
  assertNotEquals(routed[0], routed[1]);
  assert(routed[0].size > 10 && routed[1].size > 10);
});

Deno.test("synchronised replicas learn their peers' routings and in-flight counts at each sync", () => {
  const fleet = routerFleet(createPolicy({ name: "round_robin" }), {
    ...approximate(),
    replicas: { count: 2, syncMs: 50 },
    seed: 4,
  }, { serviceMs: 1000 });
  workload(fleet, 41, 20);
  arrive(fleet, request(999, -1, undefined, 3000)); // keeps the run alive past the syncs
  fleet.kernel.run({ untilMs: 49 });
  const own = routedPairs(fleet, 2);
  assertEquals(believedPairs(fleet, 20), own);
  const ownInFlight = fleet.router.replicaViews().map((v) => [...v.inFlight]);
  assertNotEquals(ownInFlight[0], ownInFlight[1]);
  fleet.kernel.run({ untilMs: 51 });
  const all = new Set([...own[0], ...own[1]]);
  assertEquals(believedPairs(fleet, 20), [all, all]);
  const total = ownInFlight[0].map((n, i) => n + ownInFlight[1][i]);
  assertEquals(fleet.router.replicaViews().map((v) => [...v.inFlight]), [total, total]);
  assertEquals(total.reduce((a, b) => a + b), 41);
});

Deno.test("independent replicas never learn their peers' routings", () => {
  const fleet = routerFleet(createPolicy({ name: "round_robin" }), {
    ...approximate(),
    replicas: { count: 2 },
    seed: 4,
  }, { serviceMs: 1000 });
  workload(fleet, 41, 20);
  arrive(fleet, request(999, -1, undefined, 3000));
  fleet.kernel.run({ untilMs: 500 });
  assertEquals(believedPairs(fleet, 20), routedPairs(fleet, 2));
});

Deno.test("each replica's in-flight counts are its own routings minus its finishedBy entry", () => {
  const sessions = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
  const s0 = sessions.find((s) => sessionReplica(request(0, -1, s), 2) === 0)!;
  const s1 = sessions.find((s) => sessionReplica(request(0, -1, s), 2) === 1)!;
  const fleet = routerFleet(createPolicy({ name: "round_robin" }), {
    replicas: { count: 2, spread: "session" },
  }, { instances: 1, serviceMs: 100 });
  [s0, s0, s0, s1, s1].forEach((session, id) => arrive(fleet, request(id, -1, session, id)));
  const inFlight = () => fleet.router.replicaViews().map((v) => v.inFlight[0]);
  fleet.kernel.run({ untilMs: 50 });
  assertEquals(inFlight(), [3, 2]);
  fleet.kernel.run({ untilMs: 102.5 });
  assertEquals(inFlight(), [0, 2]);
  fleet.kernel.run({ untilMs: 103.5 });
  assertEquals(inFlight(), [0, 1]);
  fleet.kernel.run();
  assertEquals(inFlight(), [0, 0]);
  assertEquals(fleet.instances[0].finishedBy, [3, 2]);
});

Deno.test("a replica with an extra delay applies reports that much later", () => {
  const fleet = routerFleet(createPolicy({ name: "round_robin" }), {
    cacheView: new ExactCacheView(3, "groups"),
    replicas: { count: 2, delaysMs: [0, 50] },
  });
  fleet.kernel.send<RouterCommand>(fleet.ref, status(0, { cacheAdded: 7, waiting: 3 }), 10);
  const [fast, slow] = fleet.router.replicaViews();
  fleet.kernel.run({ untilMs: 20 });
  assertEquals([fast.holds(0, 7), slow.holds(0, 7)], [true, false]);
  assertEquals([fast.waiting[0], slow.waiting[0]], [3, 0]);
  fleet.kernel.run({ untilMs: 59.9 });
  assertEquals(slow.holds(0, 7), false);
  fleet.kernel.run();
  assertEquals([slow.holds(0, 7), slow.waiting[0], slow.lastHeardMs[0], fast.lastHeardMs[0]], [
    true,
    3,
    60,
    10,
  ]);
});

Deno.test("a disaggregated replica chooses the decode instance of the prefill it routed", () => {
  const policy = createPolicy({ name: "round_robin" });
  const table = {};
  const fleet = routerFleet(policy, {
    replicas: { count: 2, spread: "session" },
    disaggregation: {
      prefill: { members: [0], policy, table },
      decode: { members: [1, 2], policy: createPolicy({ name: "round_robin" }), table },
      flow: "prefill-first",
      localPrefillTokens: 0,
    },
  });
  const r = request(0, -1, 3);
  const replica = sessionReplica(r, 2);
  arrive(fleet, r);
  fleet.kernel.run();
  const prefillServe = fleet.instances[0].served[0].message;
  assertEquals([prefillServe.replica, prefillServe.leg?.phase], [replica, "prefill"]);
  const prefilled: PrefilledCommand = {
    type: "prefilled",
    request: r,
    prefill: { index: 0, ref: 0, startMs: 0, cachedTokens: 0, hostCachedTokens: 0 },
    replica,
  };
  fleet.kernel.send<RouterCommand>(fleet.ref, prefilled);
  fleet.kernel.run();
  assertEquals(
    fleet.instances.slice(1).flatMap((i) => i.served.map((s) => [s.message.replica, s.message.leg?.phase])),
    [[replica, "decode"]],
  );
});

Deno.test("the router refuses malformed replica and health options, naming the field", async (t) => {
  const policy = createPolicy({ name: "round_robin" });
  const cases: [RouterOptions, string][] = [
    [{ replicas: { count: 0 } }, "router.replicas.count"],
    [{ replicas: { count: 2, syncMs: -1 } }, "router.replicas.syncMs"],
    [{ replicas: { count: 2, delaysMs: [0, NaN] } }, "router.replicas.delaysMs[1]"],
    [{ statusTtlMs: 0 }, "router.statusTtlMs"],
    [{ retryBudget: 1.5 }, "router.retryBudget"],
  ];
  for (const [options, field] of cases) {
    await t.step(field, () => {
      const error = assertThrows(() => routerFleet(policy, options), RangeError);
      assert(error.message.startsWith(`${field}: expected`), error.message);
    });
  }
});
