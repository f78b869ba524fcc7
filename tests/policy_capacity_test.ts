/**
 * Load-aware policies on a mixed fleet compare load ÷ capacity: at equal
 * counts the faster instance wins, over time per-capacity loads even out,
 * and a uniform fleet routes exactly as before (same choices, same draws).
 * Cache-aware policies credit host-tier blocks at `hostCredit`: 0 ignores
 * them, 1 counts them as GPU hits.
 */
import { assert, assertEquals, assertLess } from "@std/assert";
import fc from "fast-check";
import type { CacheView } from "../actors/router/cache_view.ts";
import { createPolicy, POLICIES, policyLabel, type PolicySpec } from "../actors/policies/mod.ts";
import type { Request } from "../actors/protocol.ts";
import { InstanceTable, type InstanceTableOptions } from "../actors/router/router.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import { status } from "./_status.ts";

/** A request without a shared prefix: no policy sees a cache match. */
const unique = (id: number): Request => ({
  id,
  arrivalMs: 0,
  prefixGroup: -1,
  prefixTokens: 0,
  suffixTokens: 160,
  outputTokens: 1,
});

/** The built-in policies that compare load across instances (round_robin, random and vllm_prefix do not). */
const LOAD_AWARE: PolicySpec[] = [
  { name: "least_load" },
  { name: "prefix_aware" },
  { name: "hybrid", threshold: 1 },
  { name: "sglang_cache_aware" },
  { name: "llmd_weighted" },
  { name: "dynamo_kv" },
  { name: "power_of_two" },
  { name: "preble_e2" },
];

/**
 * Sets every load signal of `table` from one count of requests per instance:
 * `count` waiting (and queued, and in flight), `count` prompts like
 * {@linkcode unique}'s (10 blocks each) of prefill pending and `count` decode
 * blocks — so whichever signal a policy reads, it sees `count` requests.
 */
function setLoads(table: InstanceTable, counts: readonly number[]): void {
  counts.forEach((count, i) => {
    table.apply(status(i, {
      waiting: count,
      pendingPrefillTokens: count * unique(0).suffixTokens,
      decodeBlocks: count,
    }));
    table.inFlight[i] = count;
    // What a router counts itself (Dynamo's active prefill tokens and blocks), likewise.
    table.activePrefillTokens[i] = count * unique(0).suffixTokens;
    table.activeBlocks[i] = count * Math.ceil(unique(0).suffixTokens / table.blockTokens);
  });
}

Deno.test("at equal counts every load-aware policy prefers the faster instance", async (t) => {
  for (const spec of LOAD_AWARE) {
    await t.step(policyLabel(spec), () => {
      const mixed = new InstanceTable(2, { capacity: [1, 0.5] });
      const reversed = new InstanceTable(2, { capacity: [0.5, 1] });
      const uniform = new InstanceTable(2);
      setLoads(mixed, [2, 2]);
      setLoads(reversed, [2, 2]);
      setLoads(uniform, [2, 2]);
      const policy = createPolicy(spec);
      const onUniform = new Set<number>();
      for (let seed = 0; seed < 40; seed++) {
        assertEquals(
          policy.choose(unique(seed), mixed, createRandomStream(seed, "router")),
          0,
          `seed ${seed}`,
        );
        assertEquals(
          policy.choose(unique(seed), reversed, createRandomStream(seed, "router")),
          1,
          `seed ${seed}, reversed`,
        );
        onUniform.add(policy.choose(unique(seed), uniform, createRandomStream(seed, "router")));
      }
      // Without capacities the two are equals: the same seeds pick both (SGLang, the first of equals,
      // always 0 — which the reversed fleet overrules): the preference is capacity's doing.
      assertEquals([...onUniform].sort(), spec.name === "sglang_cache_aware" ? [0] : [0, 1]);
    });
  }
});

Deno.test("prefix_aware and hybrid pick the faster of two equal cache matches", () => {
  const view = new InstanceTable(2, { capacity: [0.5, 1] });
  [0, 1].forEach((i) => view.apply(status(i, { waiting: 1, queued: 0, cacheAdded: 7 })));
  const request: Request = { ...unique(0), prefixGroup: 7, prefixTokens: 160, suffixTokens: 10 };
  for (const spec of [{ name: "prefix_aware" }, { name: "hybrid", threshold: 1 }] satisfies PolicySpec[]) {
    for (let seed = 0; seed < 20; seed++) {
      assertEquals(createPolicy(spec).choose(request, view, createRandomStream(seed, "router")), 1);
    }
  }
});

Deno.test("chwbl's bound is per capacity: a slow ring owner at the same count overflows, a fast one does not", () => {
  const policy = createPolicy({ name: "chwbl" });
  const idle = new InstanceTable(2);
  // A request whose ring owner is instance 1 (the one made slow below).
  const request = [...Array(100).keys()].map(unique).find((r) =>
    policy.choose(r, idle, createRandomStream(0, "router")) === 1
  )!;
  // In flight 3 and 3: bound 1.25 × 7 / 2 = 4.375 on a uniform fleet; 1.25 × 7 / 1.5 = 5.83 per capacity
  // on [1, 0.5], where instance 1 carries 3 / 0.5 = 6.
  const uniform = new InstanceTable(2), mixed = new InstanceTable(2, { capacity: [1, 0.5] });
  setLoads(uniform, [3, 3]);
  setLoads(mixed, [3, 3]);
  assertEquals(policy.choose(request, uniform, createRandomStream(0, "router")), 1);
  assertEquals(policy.choose(request, mixed, createRandomStream(0, "router")), 0);
  // The fast instance as owner keeps it: capacity [0.5, 1] puts instance 1 at 3 ≤ 5.83.
  const fastOwner = new InstanceTable(2, { capacity: [0.5, 1] });
  setLoads(fastOwner, [3, 3]);
  assertEquals(policy.choose(request, fastOwner, createRandomStream(0, "router")), 1);
});

Deno.test("sglang_cache_aware's balance gates compare in-flight per capacity", () => {
  // Instance 0 holds the prefix with 130 in flight; instance 1 has 60. Raw counts: gap 70 > 64 and
  // ratio 2.2 > 1.5 → balance to instance 1. Per capacity on [1, 0.5]: 130 vs 120, no skew → the cache.
  const request: Request = { ...unique(0), prefixGroup: 7, prefixTokens: 160, suffixTokens: 10 };
  const build = (options: InstanceTableOptions) => {
    const view = new InstanceTable(2, options);
    view.apply(status(0, { cacheAdded: 7 }));
    view.inFlight[0] = 130;
    view.inFlight[1] = 60;
    return view;
  };
  const policy = createPolicy({ name: "sglang_cache_aware" });
  assertEquals(policy.choose(request, build({}), createRandomStream(1, "router")), 1);
  assertEquals(policy.choose(request, build({ capacity: [1, 0.5] }), createRandomStream(1, "router")), 0);
});

/**
 * A closed loop of `population` requests: each tick an instance with work
 * finishes one request with probability 0.9 × its capacity, and each finished
 * request is replaced by a new one, routed by the policy (the fleet starts
 * empty and fills the same way). Returns each instance's time-averaged
 * count ÷ capacity.
 */
function perCapacityLoad(
  spec: PolicySpec,
  capacity: readonly number[],
  population = 56,
  ticks = 4000,
): number[] {
  const view = new InstanceTable(capacity.length, { capacity: [...capacity] });
  const policy = createPolicy(spec);
  const router = createRandomStream(7, "router"), service = createRandomStream(7, "service");
  const counts = capacity.map(() => 0), sums = capacity.map(() => 0);
  let id = 0;
  const route = (n: number) => {
    for (let k = 0; k < n; k++) {
      setLoads(view, counts);
      counts[policy.choose(unique(id++), view, router)]++;
    }
  };
  route(population);
  for (let tick = 0; tick < ticks; tick++) {
    let finished = 0;
    for (let i = 0; i < counts.length; i++) {
      if (counts[i] > 0 && service() < 0.9 * capacity[i]) {
        counts[i]--;
        finished++;
      }
    }
    route(finished);
    counts.forEach((count, i) => sums[i] += count);
  }
  return sums.map((sum, i) => sum / ticks / capacity[i]);
}

Deno.test("over many choices with completions, per-capacity loads even out", async (t) => {
  const capacity = [1, 0.5, 0.25], population = 56;
  for (const spec of [...LOAD_AWARE, { name: "chwbl" } as PolicySpec]) {
    await t.step(policyLabel(spec), () => {
      const loads = perCapacityLoad(spec, capacity, population);
      const ratio = Math.max(...loads) / Math.min(...loads);
      // Balancing raw counts would leave the quarter-speed instance at 4× the fast one's per-capacity load.
      if (spec.name !== "chwbl") {
        // The least-loaded rules hold the fleet at its balance point; two random choices only near it.
        assertLess(ratio, spec.name === "power_of_two" ? 1.3 : 1.05, `per-capacity loads ${loads}`);
        return;
      }
      // CHWBL only caps: no instance above 1.25 × the mean per-capacity load; below it, the ring decides.
      assertLess(Math.max(...loads), 1.25 * population / 1.75, `per-capacity loads ${loads}`);
      assertLess(ratio, 1.5, `per-capacity loads ${loads}`);
    });
  }
});

/** Every built-in policy at its defaults. */
const ALL_POLICIES: PolicySpec[] = POLICIES.map((d) => ({ name: d.name }) as PolicySpec);

Deno.test("capacities all 1 route exactly as a table without capacities: same choice, same draws (property)", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 6 }).chain((n) =>
        fc.record({
          waiting: fc.array(fc.integer({ min: 0, max: 6 }), { minLength: n, maxLength: n }),
          running: fc.array(fc.integer({ min: 0, max: 3 }), { minLength: n, maxLength: n }),
          inFlight: fc.array(fc.integer({ min: 0, max: 200 }), { minLength: n, maxLength: n }),
          pending: fc.array(fc.integer({ min: 0, max: 500 }), { minLength: n, maxLength: n }),
          decode: fc.array(fc.integer({ min: 0, max: 40 }), { minLength: n, maxLength: n }),
          kv: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: n, maxLength: n }),
          holds: fc.array(fc.boolean(), { minLength: n, maxLength: n }),
        })
      ),
      fc.constantFrom(...ALL_POLICIES),
      fc.integer({ min: -1, max: 3 }),
      fc.nat(1000),
      (loads, spec, group, seed) => {
        const build = (options: InstanceTableOptions) => {
          const view = new InstanceTable(loads.waiting.length, options);
          loads.waiting.forEach((waiting, i) => {
            view.apply(status(i, {
              waiting,
              running: loads.running[i],
              pendingPrefillTokens: loads.pending[i],
              decodeBlocks: loads.decode[i],
              kvUtilization: loads.kv[i],
              ...(loads.holds[i] && group >= 0 ? { cacheAdded: group } : {}),
            }));
            view.inFlight[i] = loads.inFlight[i];
          });
          view.routedCount = seed;
          return view;
        };
        const request: Request = { ...unique(seed), prefixGroup: group, prefixTokens: 64, suffixTokens: 40 };
        const a = createRandomStream(seed, "router"), b = createRandomStream(seed, "router");
        const plain = createPolicy(spec).choose(request, build({}), a);
        const ones = createPolicy(spec).choose(
          request,
          build({ capacity: loads.waiting.map(() => 1) }),
          b,
        );
        assertEquals(ones, plain);
        assertEquals(b(), a(), "the two streams drew differently");
      },
    ),
    { numRuns: 500 },
  );
});

// ---- Host-tier credit -------------------------------------------------------

/** The policies that score match length, each with its `hostCredit`. */
const CACHE_AWARE = [
  "prefix_aware",
  "hybrid",
  "sglang_cache_aware",
  "llmd_weighted",
  "dynamo_kv",
  "preble_e2",
  "vllm_prefix",
];

/** A request of 160 prefix + 0 suffix tokens: 10 blocks of 16. */
const tenBlocks: Request = { ...unique(0), prefixGroup: 3, prefixTokens: 160, suffixTokens: 0 };

/**
 * A view whose GPU and host matches are given per instance (host ≥ GPU), equal
 * loads. `hostMatchedBlocks` throws when `forbidHost` is set, to show a
 * policy at `hostCredit` 0 never asks.
 */
class TieredView extends InstanceTable {
  readonly #host: readonly number[];
  readonly #forbidHost: boolean;
  constructor(gpu: readonly number[], host: readonly number[], forbidHost = false) {
    const cacheView: CacheView = {
      learnsFromRouting: false,
      holds: () => false,
      matchedBlocks: (instance) => gpu[instance],
      routed() {},
      apply() {},
    };
    super(gpu.length, { cacheView, cacheUnit: "blocks" });
    this.#host = host;
    this.#forbidHost = forbidHost;
  }
  override hostMatchedBlocks(instance: number, request: Request): number {
    if (this.#forbidHost) throw new Error("hostMatchedBlocks consulted at hostCredit 0");
    return Math.max(this.matchedBlocks(instance, request), this.#host[instance]);
  }
}

Deno.test("hostCredit 0 ignores host-tier blocks; 1 counts them as GPU hits", async (t) => {
  // Instance 0: nothing on the GPU, 9 blocks in host memory; instance 1: 6 blocks on the GPU.
  for (const name of CACHE_AWARE) {
    await t.step(name, () => {
      for (let seed = 0; seed < 10; seed++) {
        const choose = (hostCredit: number, view: InstanceTable) =>
          createPolicy({ name, hostCredit } as PolicySpec).choose(
            tenBlocks,
            view,
            createRandomStream(seed, "router"),
          );
        assertEquals(choose(0, new TieredView([0, 6], [9, 6], true)), 1, `hostCredit 0, seed ${seed}`);
        assertEquals(choose(1, new TieredView([0, 6], [9, 6])), 0, `hostCredit 1, seed ${seed}`);
        assertEquals(
          choose(0.8, new TieredView([0, 6], [9, 6])),
          0,
          `hostCredit 0.8 (7.2 > 6), seed ${seed}`,
        );
        assertEquals(
          choose(0.5, new TieredView([0, 6], [9, 6])),
          1,
          `hostCredit 0.5 (4.5 < 6), seed ${seed}`,
        );
      }
    });
  }
});

Deno.test("hostCredit 0 is the view without a host tier and 1 the view with it all on the GPU (property)", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 5 }).chain((n) =>
        fc.tuple(
          fc.array(fc.integer({ min: 0, max: 10 }), { minLength: n, maxLength: n }),
          fc.array(fc.integer({ min: 0, max: 10 }), { minLength: n, maxLength: n }),
          fc.array(fc.integer({ min: 0, max: 4 }), { minLength: n, maxLength: n }),
        )
      ),
      fc.constantFrom(...CACHE_AWARE),
      fc.nat(1000),
      ([gpu, extra, waiting], name, seed) => {
        const host = gpu.map((g, i) => Math.min(10, g + extra[i]));
        const loaded = (view: InstanceTable) => {
          waiting.forEach((w, i) => view.apply(status(i, { waiting: w, pendingPrefillTokens: 16 * w })));
          waiting.forEach((w, i) => view.inFlight[i] = w);
          return view;
        };
        const run = (hostCredit: number, view: InstanceTable) => {
          const random = createRandomStream(seed, "router");
          const choice = createPolicy({ name, hostCredit } as PolicySpec).choose(
            tenBlocks,
            loaded(view),
            random,
          );
          return [choice, random()];
        };
        assertEquals(run(0, new TieredView(gpu, host)), run(0, new TieredView(gpu, gpu)));
        assertEquals(run(1, new TieredView(gpu, host)), run(1, new TieredView(host, host)));
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("hostCredit at its default is not in labels; another value shows as hc", () => {
  for (const name of CACHE_AWARE) {
    const label = policyLabel({ name } as PolicySpec);
    assert(!label.includes("hc="), label);
    assertEquals(policyLabel({ name, hostCredit: 0.8 } as PolicySpec), label);
    assert(policyLabel({ name, hostCredit: 0.5 } as PolicySpec).includes("hc=0.5"));
  }
  assertEquals(policyLabel({ name: "hybrid", threshold: 1 }), "hybrid(thr=1)");
  assertEquals(policyLabel({ name: "prefix_aware", hostCredit: 0 }), "prefix_aware(hc=0)");
});
