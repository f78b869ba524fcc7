/**
 * Every built-in policy honours the view's availability (issue 14): it never
 * chooses an unavailable instance while one is available; an unavailable
 * instance is as if absent (same choice, same draws as the view without it);
 * with every instance available nothing changes; and each policy's own
 * meaning of "skip it" — round robin's next turn, consistent hashing's
 * moved keys, random's uniformity — holds.
 */
import { assert, assertEquals, assertLess } from "@std/assert";
import fc from "fast-check";
import {
  createPolicy,
  POLICIES,
  policyLabel,
  type PolicySpec,
  type RouterView,
} from "../actors/policies/mod.ts";
import { nthAvailable } from "../actors/policies/_availability.ts";
import { pickBy } from "../actors/policies/_pick.ts";
import type { Request } from "../actors/protocol.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import {
  counting,
  type FakeInstance,
  fakeRequest,
  fakeView,
  type FakeViewSpec,
  fakeViewSpec,
} from "./_fake_view.ts";

/** Every built-in policy at its defaults, and dynamo_kv's softmax path (its default is the arg-min). */
const SPECS: PolicySpec[] = [
  ...POLICIES.map((d): PolicySpec => ({ name: d.name })),
  { name: "dynamo_kv", temperature: 1 },
];

/** Policies whose rule does not depend on instance indices: an unavailable instance is exactly an absent one. */
const INDEX_FREE = SPECS.filter((s) => s.name !== "round_robin" && s.name !== "chwbl");

/** The choice and the number of draws `spec`'s policy makes on `view` from stream `seed`. */
function decide(spec: PolicySpec, request: Request, view: RouterView, seed: number) {
  const counter = { draws: 0 };
  const choice = createPolicy(spec).choose(
    request,
    view,
    counting(createRandomStream(seed, "router"), counter),
  );
  return { choice, draws: counter.draws };
}

const instance = (fields: Partial<FakeInstance> = {}): FakeInstance => ({
  waiting: 0,
  running: 0,
  queued: 0,
  inFlight: 0,
  kvUtilization: 0,
  pendingPrefillTokens: 0,
  decodeBlocks: 0,
  capacity: 1,
  matched: 0,
  hostExtra: 0,
  available: 1,
  ...fields,
});

/** A view of instances with these in-flight counts and availability (1s and 0s). */
const loadView = (inFlight: readonly number[], available: readonly number[], routedCount = 0) =>
  fakeView({
    routedCount,
    instances: inFlight.map((f, i) => instance({ inFlight: f, available: available[i] })),
  });

const unique = (id: number): Request => ({
  id,
  arrivalMs: 0,
  prefixGroup: -1,
  prefixTokens: 0,
  suffixTokens: 50,
  outputTokens: 1,
});

for (const spec of SPECS) {
  const label = policyLabel(spec);

  Deno.test(`${label}: never chooses an unavailable instance while one is available`, () => {
    fc.assert(
      fc.property(fakeViewSpec(), fakeRequest, fc.nat(), (viewSpec, request, seed) => {
        const view = fakeView(viewSpec);
        const { choice } = decide(spec, request, view, seed);
        assert(Number.isInteger(choice) && choice >= 0 && choice < view.instanceCount, `got ${choice}`);
        assertEquals(view.available[choice], 1, `chose unavailable instance ${choice}`);
      }),
      { numRuns: 300 },
    );
  });

  Deno.test(`${label}: with every instance available, chooses and draws as on a view without availability`, () => {
    fc.assert(
      fc.property(fakeViewSpec({ allAvailable: true }), fakeRequest, fc.nat(), (viewSpec, request, seed) => {
        const view = fakeView(viewSpec);
        // The view as a router presented it before availability existed: no such fields at all.
        const { available: _a, availableCount: _c, ...legacy } = view;
        assertEquals(view.availableCount, view.instanceCount);
        assertEquals(
          decide(spec, request, view, seed),
          decide(spec, request, legacy as unknown as RouterView, seed),
        );
      }),
      { numRuns: 200 },
    );
  });
}

/** `spec` without its unavailable instances, and each remaining instance's index in the full view. */
function compact(spec: FakeViewSpec): { view: RouterView; index: number[] } {
  const index = spec.instances.flatMap((x, i) => x.available === 1 ? [i] : []);
  return { view: fakeView({ ...spec, instances: index.map((i) => spec.instances[i]) }), index };
}

for (const spec of INDEX_FREE) {
  Deno.test(`${policyLabel(spec)}: an unavailable instance is as if absent (same choice, same draws)`, () => {
    fc.assert(
      fc.property(fakeViewSpec(), fakeRequest, fc.nat(), (viewSpec, request, seed) => {
        const masked = decide(spec, request, fakeView(viewSpec), seed);
        const { view, index } = compact(viewSpec);
        const absent = decide(spec, request, view, seed);
        assertEquals(masked, { choice: index[absent.choice], draws: absent.draws });
      }),
      { numRuns: 300 },
    );
  });
}

Deno.test("round_robin cycles over the available instances: the k-th routing takes the (k mod m)-th of m", async (t) => {
  // Instances 0, 3 and 4 are available: each takes every third request, as
  // SGLang's counter modulo the healthy workers gives (no 2:1 split onto a
  // down instance's successor).
  const available = [1, 0, 0, 1, 1, 0];
  const expected = [0, 3, 4, 0, 3, 4, 0, 3, 4, 0, 3, 4];
  for (let k = 0; k < expected.length; k++) {
    await t.step(`routed ${k} → instance ${expected[k]}`, () => {
      assertEquals(
        decide({ name: "round_robin" }, unique(k), loadView([0, 0, 0, 0, 0, 0], available, k), 1),
        {
          choice: expected[k],
          draws: 0,
        },
      );
    });
  }
});

Deno.test("random is uniform over the available instances, one draw each", () => {
  const available = [1, 0, 1, 1, 0, 1];
  const view = loadView([0, 0, 0, 0, 0, 0], available);
  const policy = createPolicy({ name: "random" }), counter = { draws: 0 };
  const random = counting(createRandomStream(7, "router"), counter);
  const counts = [0, 0, 0, 0, 0, 0], runs = 40_000;
  for (let k = 0; k < runs; k++) counts[policy.choose(unique(k), view, random)]++;
  assertEquals(counter.draws, runs);
  assertEquals([counts[1], counts[4]], [0, 0]);
  const expected = runs / 4;
  const chi2 = [0, 2, 3, 5].reduce((sum, i) => sum + (counts[i] - expected) ** 2 / expected, 0);
  assertLess(chi2, 16.27, `counts ${counts}`); // χ², 3 degrees of freedom, p = 0.001
});

Deno.test("power_of_two compares two distinct available instances", () => {
  // Two available: both are always the pair, so the busier one (instance 3) is never chosen.
  const view = loadView([0, 0, 0, 9, 0], [0, 1, 0, 1, 0]);
  const policy = createPolicy({ name: "power_of_two" }), random = createRandomStream(3, "router");
  for (let k = 0; k < 500; k++) assertEquals(policy.choose(unique(k), view, random), 1);
  // One available: chosen without a draw.
  assertEquals(decide({ name: "power_of_two" }, unique(0), loadView([5, 0, 5], [0, 1, 0]), 1), {
    choice: 1,
    draws: 0,
  });
});

Deno.test("sglang_cache_aware's balance gate ignores an unavailable instance's load", () => {
  // Instance 0 (unavailable) is far busier: counted, it would open both gates; uncounted, the cache wins.
  const request: Request = { ...unique(0), prefixGroup: 1, prefixTokens: 160 };
  const view = fakeView({
    routedCount: 0,
    instances: [
      instance({ inFlight: 200, available: 0 }),
      instance({ inFlight: 20, matched: 10 }),
      instance({ inFlight: 0 }),
    ],
  });
  assertEquals(decide({ name: "sglang_cache_aware" }, request, view, 1).choice, 1);
});

// ---- Consistent hashing: only the keys of an unavailable instance move --------

/** CHWBL's choices for `keys` unique requests on `view`. */
function chwblChoices(view: RouterView, keys: number): number[] {
  const policy = createPolicy({ name: "chwbl" }), random = createRandomStream(1, "router");
  return Array.from({ length: keys }, (_, k) => policy.choose(unique(k), view, random));
}

Deno.test("chwbl: marking one instance unavailable moves only that instance's keys", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 2, max: 8 }).chain((n) =>
        fc.tuple(
          fc.constant(n),
          fc.integer({ min: 0, max: n - 1 }),
          fc.integer({ min: 4, max: 10 }),
          fc.array(fc.integer({ min: 0, max: 1 }), { minLength: n, maxLength: n }),
        )
      ),
      ([n, down, base, extra]) => {
        // Loads of base or base + 1 (base >= 4): within the 1.25 bound with or without any one instance.
        const loads = extra.map((e) => base + e);
        const before = chwblChoices(loadView(loads, new Array(n).fill(1)), 400);
        const after = chwblChoices(loadView(loads, loads.map((_, i) => i === down ? 0 : 1)), 400);
        for (let k = 0; k < before.length; k++) {
          if (before[k] === down) assert(after[k] !== down, `key ${k} stayed on the unavailable instance`);
          else assertEquals(after[k], before[k], `key ${k} moved from available instance ${before[k]}`);
        }
        assert(before.includes(down), "the unavailable instance owned no key: the property tested nothing");
      },
    ),
    { numRuns: 60 },
  );
});

Deno.test("chwbl: under any loads the choice is available and within the bound over available instances", () => {
  fc.assert(
    fc.property(fakeViewSpec(), fc.integer({ min: 0, max: 1e6 }), (viewSpec, id) => {
      const view = fakeView(viewSpec);
      const choice = decide({ name: "chwbl" }, unique(id), view, 1).choice;
      let total = 0, capacity = 0;
      for (let i = 0; i < view.instanceCount; i++) {
        if (view.available[i] !== 1) continue;
        total += view.inFlight[i];
        capacity += view.capacity[i];
      }
      assertEquals(view.available[choice], 1);
      assert(view.inFlight[choice] / view.capacity[choice] <= (1.25 * (total + 1)) / capacity);
    }),
    { numRuns: 300 },
  );
});

// ---- The shared helpers ---------------------------------------------------

Deno.test("pickBy with a mask scores and draws only for available indices", () => {
  const scored: number[] = [];
  const score = (i: number) => (scored.push(i), 0);
  const counter = { draws: 0 };
  const random = counting(createRandomStream(1, "router"), counter);
  const choice = pickBy(5, score, random, [0, 1, 0, 1, 1]);
  assertEquals(scored, [1, 3, 4]);
  assertEquals(counter.draws, 2); // the second and third of three equal scores
  assert([1, 3, 4].includes(choice));
  assertEquals(pickBy(3, () => 0, random, [0, 0, 0]), -1);
});

Deno.test("nthAvailable counts only the 1s", () => {
  const mask = [0, 1, 1, 0, 1];
  assertEquals([0, 1, 2, 3].map((k) => nthAvailable(mask, 5, k)), [1, 2, 4, -1]);
});
