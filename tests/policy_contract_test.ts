import { assert, assertEquals } from "@std/assert";
import fc from "fast-check";
import {
  createPolicy,
  POLICIES,
  policyLabel,
  type PolicySpec,
  type RouterView,
  type RoutingPolicy,
} from "../actors/policies/mod.ts";
import type { Request } from "../actors/protocol.ts";
import { InstanceTable } from "../actors/router/router.ts";
import { status } from "./_status.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import examplePlugin from "../scenarios/plugins/cache_with_slack.ts";

/**
 * Every built-in policy from the registry, at its defaults and with each
 * parameter at its lower bound (when that is a value) and well above its
 * default (or at its upper bound).
 */
const SPECS: PolicySpec[] = POLICIES.flatMap((d): PolicySpec[] => [
  { name: d.name },
  ...Object.entries(d.params).flatMap(([key, p]) =>
    [...new Set([p.exclusiveMin ? undefined : p.min, p.max ?? p.default * 4 + 4])]
      .filter((value) => value !== undefined && value !== p.default)
      .map((value) => ({ name: d.name, [key]: value }) as PolicySpec)
  ),
]);

/**
 * Consistent hashing: affinity by design (one prefix, one instance), so it
 * spreads only requests without a shared prefix, and only roughly evenly.
 */
const HASH_AFFINITY: ReadonlySet<string> = new Set(["chwbl"]);

/** A request of `group` whose prefix is two 16-token blocks (block-level policies see a group by its blocks). */
const request = (group: number): Request => ({
  id: 0,
  arrivalMs: 0,
  prefixGroup: group,
  prefixTokens: 32,
  suffixTokens: 10,
  outputTokens: 1,
});

function table(waiting: number[], running: number[], held: number[][] = []): InstanceTable {
  const t = new InstanceTable(waiting.length);
  waiting.forEach((w, i) => t.apply(status(i, { waiting: w, running: running[i] })));
  held.forEach((groups, i) =>
    groups.forEach((g) => t.apply(status(i, { waiting: waiting[i], running: running[i], cacheAdded: g })))
  );
  return t;
}

/** The contract every routing policy must meet, run against one policy factory. */
function policyContract(
  label: string,
  newPolicy: () => RoutingPolicy,
  kind: { hashAffinity?: boolean; atDefaults?: boolean; firstOfEquals?: boolean } = {},
) {
  Deno.test(`${label}: always returns a valid instance index`, () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 9 }).chain((n) =>
          fc.tuple(
            fc.array(fc.integer({ min: 0, max: 5 }), { minLength: n, maxLength: n }),
            fc.array(fc.integer({ min: 0, max: 1 }), { minLength: n, maxLength: n }),
            fc.array(fc.array(fc.integer({ min: 0, max: 4 }), { maxLength: 3 }), {
              minLength: n,
              maxLength: n,
            }),
            fc.integer({ min: -1, max: 4 }),
            fc.integer({ min: 0, max: 1000 }),
          )
        ),
        ([waiting, running, held, group, routed]) => {
          const view = table(waiting, running, held);
          view.routedCount = routed;
          const choice = newPolicy().choose(request(group), view, createRandomStream(routed, "router"));
          assert(Number.isInteger(choice) && choice >= 0 && choice < waiting.length, `got ${choice}`);
        },
      ),
    );
  });

  Deno.test(`${label}: same view and same stream give the same choice`, () => {
    const view = table([1, 0, 0, 2], [1, 1, 0, 1], [[3], [], [3], []]);
    const a = newPolicy().choose(request(3), view, createRandomStream(5, "router"));
    const b = newPolicy().choose(request(3), view, createRandomStream(5, "router"));
    assertEquals(a, b);
  });

  for (
    const [what, group, held] of [["no shared prefix", -1, []], ["every instance holding the prefix", 5, [
      [5],
      [5],
      [5],
      [5],
    ]]] as const
  ) {
    const behaviour = kind.firstOfEquals
      ? `sends every request with ${what} to the first of identical instances, as SGLang's gateway does`
      : `spreads requests with ${what} over identical instances instead of piling on instance 0`;
    Deno.test(`${label}: ${behaviour}`, () => {
      const view: RouterView & { routedCount: number } = table(
        [0, 0, 0, 0],
        [0, 0, 0, 0],
        held.map((h) => [...h]),
      );
      const counts = [0, 0, 0, 0];
      const random = createRandomStream(1, "router");
      const policy = newPolicy();
      for (let k = 0; k < 4000; k++) {
        view.routedCount = k;
        counts[policy.choose({ ...request(group), id: k }, view, random)]++;
      }
      if (kind.firstOfEquals) {
        // SGLang's gateway keeps the first of equals (`min_by_key`; a node's first tenant): with
        // loads and matches all equal, every request goes to instance 0 — the real router's hot spot.
        assertEquals(counts, [4000, 0, 0, 0]);
      } else if (kind.hashAffinity && group >= 0) {
        // Consistent hashing is affinity by design: one prefix, one instance (while within its load bound).
        assertEquals(counts.filter((c) => c > 0).length, 1, `counts ${counts}`);
      } else if (kind.hashAffinity && kind.atDefaults) {
        // A ring with 256 points per instance divides the key space only roughly evenly.
        for (const c of counts) assert(c > 600 && c < 1400, `counts ${counts}`);
      } else if (kind.hashAffinity) {
        // Another ring size (down to one point per instance) divides it unevenly, but divides it.
        assert(counts.filter((c) => c > 0).length > 1, `counts ${counts}`);
      } else {
        for (const c of counts) assert(c > 800 && c < 1200, `counts ${counts}`);
      }
    });
  }
}

for (const spec of SPECS) {
  policyContract(policyLabel(spec), () => createPolicy(spec), {
    hashAffinity: HASH_AFFINITY.has(spec.name),
    atDefaults: Object.keys(spec).length === 1,
    firstOfEquals: spec.name === "sglang_cache_aware",
  });
}
policyContract("example plugin cache_with_slack", () => examplePlugin);

// ---- Rules at their edges ---------------------------------------------------

const rng = () => createRandomStream(1, "router");

Deno.test("round_robin rotates by routed count, ignoring load", () => {
  const view = table([9, 0, 0], [1, 0, 0]);
  view.routedCount = 3;
  assertEquals(createPolicy({ name: "round_robin" }).choose(request(-1), view, rng()), 0);
});

Deno.test("least_load counts waiting plus running and never picks a busier instance", () => {
  const view = table([0, 0, 1], [1, 0, 0]);
  assertEquals(createPolicy({ name: "least_load" }).choose(request(-1), view, rng()), 1);
});

Deno.test("prefix_aware prefers a holder even when it is the busiest, least loaded among holders", () => {
  const view = table([5, 0, 3], [1, 0, 1], [[2], [], [2]]);
  assertEquals(createPolicy({ name: "prefix_aware" }).choose(request(2), view, rng()), 2);
  assertEquals(createPolicy({ name: "prefix_aware" }).choose(request(9), view, rng()), 1);
});

Deno.test("hybrid uses the best holder only while its queued count is below the threshold", async (t) => {
  // Holder: instance 0 with `waiting` queued (FIFO: queued = waiting) and one running; instance 1 idle.
  const cases: [threshold: number, waiting: number, expected: number][] = [
    [1, 0, 0], // serving one, nobody waiting: below 1
    [1, 1, 1], // one waiting: not below 1
    [0, 0, 1], // threshold 0 never follows the cache
    [3, 2, 0],
    [3, 3, 1],
  ];
  for (const [threshold, waiting, expected] of cases) {
    await t.step(`thr=${threshold}, holder waiting ${waiting} → instance ${expected}`, () => {
      const view = table([waiting, 0], [1, 0], [[7], []]);
      assertEquals(createPolicy({ name: "hybrid", threshold }).choose(request(7), view, rng()), expected);
    });
  }
});
