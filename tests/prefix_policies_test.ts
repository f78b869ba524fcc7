/**
 * prefix_aware and hybrid route by the longest cached prefix in blocks: the
 * rule at its edges, hybrid's gate on `queued`, the exact reduction to the
 * old group rule under the FIFO model's view, and the payoff on multi-turn
 * sessions under continuous batching.
 */
import { assert, assertEquals, assertGreater } from "@std/assert";
import fc from "fast-check";
import type { CacheView } from "../actors/router/cache_view.ts";
import { createPolicy, policyLabel, type PolicySpec, type RouterView } from "../actors/policies/mod.ts";
import { leastLoaded } from "../actors/policies/_least_loaded.ts";
import { pickBy } from "../actors/policies/_pick.ts";
import type { Request } from "../actors/protocol.ts";
import { InstanceTable } from "../actors/router/router.ts";
import { createRandomStream, type RandomStream } from "../actors/runtime/random_stream.ts";
import { simulate } from "../actors/simulation.ts";
import { scenario } from "./_scenarios.ts";
import { status } from "./_status.ts";

/** A request of group 7: 160 prefix tokens (10 blocks of 16) + 100 suffix tokens. */
const req = (id = 0, group = 7, prefixTokens = 160): Request => ({
  id,
  arrivalMs: 0,
  prefixGroup: group,
  prefixTokens,
  suffixTokens: 100,
  outputTokens: 1,
});

interface Load {
  readonly waiting?: number;
  readonly running?: number;
  /** @default waiting */
  readonly queued?: number;
}

/** A router view whose block matches are given per instance (a stub cache view), with these loads. */
function blockView(matches: readonly number[], loads: readonly Load[]): InstanceTable {
  const cacheView: CacheView = {
    learnsFromRouting: false,
    holds: () => false,
    matchedBlocks: (instance) => matches[instance],
    routed() {},
    apply() {},
  };
  const view = new InstanceTable(matches.length, { cacheView, cacheUnit: "blocks" });
  loads.forEach((l, i) =>
    view.apply(
      status(i, { waiting: l.waiting ?? 0, running: l.running ?? 0, queued: l.queued ?? l.waiting ?? 0 }),
    )
  );
  return view;
}

const choose = (spec: PolicySpec, view: RouterView, request = req(), seed = 1) =>
  createPolicy(spec).choose(request, view, createRandomStream(seed, "router"));

const CACHE_POLICIES: PolicySpec[] = [{ name: "prefix_aware" }, { name: "hybrid", threshold: 100 }];

Deno.test("the longest block match wins over a shorter one on a less loaded instance", async (t) => {
  for (const spec of CACHE_POLICIES) {
    await t.step(policyLabel(spec), () => {
      // Instances 1 and 3 match 7 blocks; 3 is the less loaded of them; 0 (3 blocks) and 2 (none) are idler.
      const view = blockView([3, 7, 0, 7], [{ waiting: 0 }, { waiting: 5, running: 1 }, {}, {
        waiting: 2,
        running: 1,
      }]);
      assertEquals(choose(spec, view), 3);
    });
  }
});

Deno.test("equal longest matches go to the least loaded (waiting + running), equal loads uniformly at random", () => {
  const view = blockView([5, 5, 5, 5, 2], [{ running: 1 }, { running: 1 }, { waiting: 1 }, {
    waiting: 1,
    running: 1,
  }, {}]);
  const counts = [0, 0, 0, 0, 0];
  const policy = createPolicy({ name: "prefix_aware" }), random = createRandomStream(2, "router");
  for (let k = 0; k < 3000; k++) counts[policy.choose(req(k), view, random)]++;
  // Instance 3 has the longest match but more load; 4 is idle but matches less.
  assertEquals([counts[3], counts[4]], [0, 0]);
  for (const c of counts.slice(0, 3)) assert(c > 850 && c < 1150, `counts ${counts}`);
});

Deno.test("a match every instance has, or none has, is no match: the least-loaded instance overall", async (t) => {
  const loads: Load[] = [{ waiting: 2, running: 1 }, { running: 1 }, { waiting: 1, running: 1 }];
  for (const spec of [...CACHE_POLICIES, { name: "hybrid", threshold: 1 } as const]) {
    for (const matches of [[4, 4, 4], [0, 0, 0]]) {
      await t.step(`${policyLabel(spec)}, matches ${matches}`, () => {
        assertEquals(choose(spec, blockView(matches, loads)), 1);
      });
    }
  }
});

Deno.test("a request without keyed blocks (unique prefix, or a prefix shorter than a block) routes by load alone", () => {
  // FIFO model's group view: instance 0 holds group 7 and is the busiest.
  const view = new InstanceTable(3);
  view.apply(status(0, { waiting: 3, running: 1, cacheAdded: 7 }));
  view.apply(status(2, { running: 1 }));
  for (const spec of CACHE_POLICIES) {
    assertEquals(choose(spec, view, req(0, 7)), 0, "a held group of 10 blocks is followed");
    assertEquals(choose(spec, view, req(0, -1)), 1, "a unique prefix has no keyed block");
    assertEquals(choose(spec, view, req(0, 7, 10)), 1, "10 prefix tokens are less than one 16-token block");
  }
});

Deno.test("hybrid gates on the cached instance's queued count, not its waiting count", async (t) => {
  // Instance 0 matches 6 blocks and runs 2 sequences with nobody waiting for admission; instance 1 is idle.
  const cases: [threshold: number, queued: number, expected: number][] = [
    [1, 0, 0], // both sequences decoding: nothing owed a first token
    [1, 1, 1], // one still in prefill: queued 1 is not below 1, although waiting is 0
    [2, 1, 0],
    [2, 2, 1],
    [4, 2, 0],
    [0, 0, 1], // threshold 0 never follows the cache
  ];
  for (const [threshold, queued, expected] of cases) {
    await t.step(`thr=${threshold}, queued ${queued} → instance ${expected}`, () => {
      const view = blockView([6, 0], [{ waiting: 0, running: 2, queued }, {}]);
      assertEquals(choose({ name: "hybrid", threshold }, view), expected);
    });
  }
});

// ---- The FIFO model's view: exactly the old group rule -------------------

/** The group rule prefix_aware and hybrid had before block matching (with its random draws). */
function oldRule(threshold: number) {
  return (request: Request, view: RouterView, random: RandomStream): number => {
    const group = request.prefixGroup, { waiting, running } = view;
    const holder = group < 0
      ? -1
      : pickBy(view.instanceCount, (i) => view.holds(i, group) ? -(waiting[i] + running[i]) : NaN, random);
    return holder >= 0 && view.waiting[holder] < threshold ? holder : leastLoaded(view, random);
  };
}

Deno.test("under the FIFO model's group view both make the old group rule's choice with the same random draws", () => {
  const specs: [PolicySpec, number][] = [
    [{ name: "prefix_aware" }, Infinity],
    [{ name: "hybrid", threshold: 0 }, 0],
    [{ name: "hybrid", threshold: 1 }, 1],
    [{ name: "hybrid", threshold: 2 }, 2],
  ];
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 6 }).chain((n) =>
        fc.tuple(
          fc.array(fc.integer({ min: 0, max: 3 }), { minLength: n, maxLength: n }),
          fc.array(fc.integer({ min: 0, max: 1 }), { minLength: n, maxLength: n }),
          fc.array(fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 3 }), {
            minLength: n,
            maxLength: n,
          }),
          fc.integer({ min: -1, max: 3 }),
          fc.integer({ min: 0, max: 1e6 }),
        )
      ),
      ([waiting, running, held, group, seed]) => {
        const view = new InstanceTable(waiting.length);
        waiting.forEach((w, i) => view.apply(status(i, { waiting: w, running: running[i] })));
        held.forEach((groups, i) =>
          groups.forEach((g) =>
            view.apply(status(i, { waiting: waiting[i], running: running[i], cacheAdded: g }))
          )
        );
        for (const [spec, threshold] of specs) {
          const now = createRandomStream(seed, "router"), before = createRandomStream(seed, "router");
          const a = createPolicy(spec).choose(req(0, group), view, now);
          const b = oldRule(threshold)(req(0, group), view, before);
          assertEquals(a, b, policyLabel(spec));
          assertEquals(now(), before(), `${policyLabel(spec)}: same number of draws`);
        }
      },
    ),
  );
});

// ---- Continuous batching, multi-turn sessions -----------------------------

Deno.test("on multi-turn sessions under batching, prefix_aware and hybrid reuse more prompt tokens than round_robin", () => {
  const tokenHit = (policy: PolicySpec) =>
    simulate(scenario({
      policy,
      instances: { model: "batching" },
      workload: { requests: 1500, ratePerSec: 20, sessions: { turnsMean: 4, thinkTimeMs: 3000 } },
    })).tokenHitRate!;
  const roundRobin = tokenHit({ name: "round_robin" });
  const prefixAware = tokenHit({ name: "prefix_aware" });
  const hybrid = tokenHit({ name: "hybrid", threshold: 1 });
  // Round robin finds a session's earlier turn on its instance about once in four.
  assertGreater(prefixAware, roundRobin + 0.15, `prefix_aware ${prefixAware} vs round_robin ${roundRobin}`);
  assertGreater(hybrid, roundRobin + 0.05, `hybrid ${hybrid} vs round_robin ${roundRobin}`);
  assertGreater(prefixAware, hybrid, "the gate gives up some reuse for balance");
});

Deno.test("on generated conversation traffic (every request shares block 0, sessions continue), hybrid(thr=1) follows conversations, stays balanced and differs from prefix_aware", () => {
  // 4,000 requests of the trace generator's defaults at twice their rate, on
  // 8 batching instances with the default preset.
  const run = (policy: PolicySpec) =>
    simulate(scenario({
      policy,
      instances: { count: 8, model: "batching" },
      workload: { trace: { generate: { requests: 4000 }, speed: 2 } },
    }));
  const rr = run({ name: "round_robin" });
  const prefix = run({ name: "prefix_aware" });
  const [thr1, thr4] = [1, 4].map((threshold) => run({ name: "hybrid", threshold }));
  for (const r of [rr, prefix, thr1, thr4]) assertEquals(r.completed, 4000);
  assertGreater(thr1.tokenHitRate!, rr.tokenHitRate! + 0.03);
  assert(thr1.imbalance! <= 1.0, `hybrid(thr=1) imbalance ${thr1.imbalance}`);
  assert(
    thr1.ttftMeanMs !== prefix.ttftMeanMs && thr1.imbalance !== prefix.imbalance,
    "hybrid equals prefix_aware",
  );
  // The threshold changes outcomes: a looser gate follows the cache more often.
  assert(thr4.ttftMeanMs !== thr1.ttftMeanMs && thr4.imbalance !== thr1.imbalance);
  assertGreater(thr4.tokenHitRate!, thr1.tokenHitRate!);
});
