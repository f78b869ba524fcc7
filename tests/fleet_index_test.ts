/**
 * The router's fleet indexes (actors/router/fleet_index.ts) answer what a scan of
 * the table answers: the sorted structures against a reference model, then
 * every built-in policy on an indexed table beside the same policy on a
 * scanned one, fed the same reports, routings and failures — the same choice
 * and draws where no tie is drawn (or the candidates are walked in index
 * order), else a choice the scan could have made, drawn uniformly.
 */
import { assert, assertEquals } from "@std/assert";
import fc from "fast-check";
import { createCacheView } from "../actors/router/cache_view.ts";
import { FleetIndex, LoadBuckets, SortedIndices } from "../actors/router/fleet_index.ts";
import { createPolicy, POLICY_NAMES, type PolicyName, type RouterView } from "../actors/policies/mod.ts";
import { leastLoaded } from "../actors/policies/_least_loaded.ts";
import { GroupHolders, PrefixCache } from "../actors/kv_cache/prefix_cache.ts";
import { GROUP_KEY_STRIDE } from "../actors/kv_cache/prefix_keys.ts";
import type { Request } from "../actors/protocol.ts";
import { FLEET_INDEX_MIN_INSTANCES, InstanceTable } from "../actors/router/router.ts";
import { createRandomStream, type RandomStream } from "../actors/runtime/random_stream.ts";
import { simulate } from "../actors/simulation.ts";
import { parseScenario } from "../scenarios/scenario/scenario.ts";
import { status } from "./_status.ts";

/** The members of `set`, sorted. */
const sorted = (set: { size: number; at(k: number): number } | undefined) =>
  set === undefined ? [] : Array.from({ length: set.size }, (_, k) => set.at(k)).sort((a, b) => a - b);

Deno.test("SortedIndices and LoadBuckets agree with a sorted reference under any edits", () => {
  const edit = fc.record({ instance: fc.integer({ min: 0, max: 40 }), key: fc.integer({ min: 0, max: 6 }) });
  fc.assert(
    fc.property(fc.array(edit, { maxLength: 300 }), fc.boolean(), (edits, ordered) => {
      const buckets = new LoadBuckets(ordered, 41), set = new SortedIndices();
      const keyOf = new Map<number, number>();
      for (const { instance, key } of edits) {
        const old = keyOf.get(instance);
        if (old !== undefined) {
          buckets.delete(instance, old);
          set.delete(instance);
          keyOf.delete(instance);
          if (old === key) continue; // an edit to the same key removes it
        }
        buckets.add(instance, key);
        set.add(instance);
        keyOf.set(instance, key);
      }
      const members = [...keyOf.keys()].sort((a, b) => a - b);
      assertEquals(Array.from({ length: set.size }, (_, k) => set.at(k)), members);
      assertEquals(buckets.size, members.length);
      const keys = [...keyOf.values()];
      assertEquals(buckets.minKey(), keys.length === 0 ? Infinity : Math.min(...keys));
      assertEquals(buckets.maxKey(), keys.length === 0 ? -Infinity : Math.max(...keys));
      const least = buckets.least();
      const leastMembers = members.filter((i) => keyOf.get(i) === buckets.minKey());
      if (ordered) {
        assertEquals(
          least === undefined ? [] : Array.from({ length: least.size }, (_, k) => least.at(k)),
          leastMembers,
        );
      } else {
        assertEquals(sorted(least), leastMembers);
      }
      for (let j = 0; j < buckets.keyCount; j++) {
        const key = buckets.keyAt(j);
        assertEquals(sorted(buckets.bucket(key)), members.filter((i) => keyOf.get(i) === key));
      }
    }),
    { numRuns: 300 },
  );
});

Deno.test("GroupHolders counts a group held while any cache counted into it holds it", () => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 9 }))),
      (inserts) => {
        const holders = new GroupHolders();
        const caches = Array.from({ length: 4 }, () => new PrefixCache(3));
        caches.forEach((cache) => cache.countInto(holders));
        for (const [cache, group] of inserts) caches[cache].insert(group);
        for (let group = 0; group < 10; group++) {
          assertEquals(holders.heldAnywhere(group), caches.some((c) => c.has(group)), `group ${group}`);
        }
      },
    ),
  );
});

/** One random request of `groups` groups (−1: none), 8 or 40 prefix tokens (0 or 2 blocks of 16). */
function randomRequest(id: number, rng: RandomStream, groups: number): Request {
  const group = Math.floor(rng() * (groups + 1)) - 1;
  return {
    id,
    arrivalMs: id,
    prefixGroup: group,
    prefixTokens: group < 0 ? 0 : rng() < 0.1 ? 8 : 40 + 16 * Math.floor(rng() * 3),
    suffixTokens: Math.floor(rng() * 40),
    outputTokens: 1,
  };
}

/**
 * A table of `n` instances with the cache view a policy gets (exact or
 * approximate, groups or blocks), indexed or not.
 */
function table(n: number, unit: "groups" | "blocks", kind: "exact" | "approximate", indexed: boolean) {
  return new InstanceTable(n, {
    cacheUnit: unit,
    cacheView: createCacheView(n, { kind, unit, capacity: unit === "groups" ? 3 : 12 }),
    fleetIndex: indexed,
  });
}

/** What happens to a table between decisions: reports, routings, failures. */
type Event =
  | { kind: "report"; instance: number; waiting: number; running: number; finished: number; cache?: number[] }
  | { kind: "pending"; instance: number; prefill: number; decode: number }
  | { kind: "fail"; instance: number }
  | { kind: "drain"; instance: number };

function randomEvent(rng: RandomStream, n: number, unit: "groups" | "blocks", groups: number): Event {
  const instance = Math.floor(rng() * n), roll = rng();
  if (roll < 0.04) return { kind: "fail", instance };
  if (roll < 0.06) return { kind: "drain", instance };
  if (roll < 0.25) {
    return { kind: "pending", instance, prefill: Math.floor(rng() * 4) * 100, decode: Math.floor(rng() * 3) };
  }
  const group = Math.floor(rng() * groups);
  const cache = rng() < 0.5
    ? undefined
    : unit === "groups"
    ? [group, rng() < 0.5 ? 1 : 0]
    : [(group + 1) * GROUP_KEY_STRIDE, Math.floor(rng() * 4)];
  return {
    kind: "report",
    instance,
    waiting: Math.floor(rng() * 3),
    running: Math.floor(rng() * 2),
    finished: Math.floor(rng() * 2),
    cache,
  };
}

/** Applies `event` to `view` as the router would. */
function applyEvent(
  view: InstanceTable,
  event: Event,
  finishedSoFar: Int32Array,
  unit: "groups" | "blocks",
): void {
  switch (event.kind) {
    case "fail":
      view.failed(event.instance);
      return;
    case "drain":
      view.apply(status(event.instance, { draining: true, finished: finishedSoFar[event.instance] }));
      return;
    case "pending":
      view.apply(
        status(event.instance, {
          pendingPrefillTokens: event.prefill,
          decodeBlocks: event.decode,
          finished: finishedSoFar[event.instance],
        }),
      );
      return;
    case "report": {
      finishedSoFar[event.instance] += event.finished;
      const cache = event.cache;
      view.apply(
        status(event.instance, {
          waiting: event.waiting,
          running: event.running,
          finished: finishedSoFar[event.instance],
          ...(cache === undefined
            ? {}
            : unit === "groups"
            ? (cache[1] === 1 ? { cacheAdded: cache[0] } : { cacheEvicted: cache[0] })
            : { cachedRuns: cache }),
        }),
      );
    }
  }
}

/** Every instance the scanned `policy` could choose in this state: its choices under many random streams. */
function scanSupport(name: PolicyName, view: RouterView, request: Request, draws: number): Set<number> {
  const support = new Set<number>();
  const policy = createPolicy({ name });
  for (let seed = 0; seed < draws; seed++) {
    support.add(policy.choose(request, view, createRandomStream(seed, "support")));
  }
  return support;
}

/**
 * Policies whose indexed choice (and draws) must equal the scan's: no tie is
 * drawn, or the index walks the candidates in index order as the scan does.
 * Under the block unit, prefix_aware's and hybrid's longest match is walked
 * so; they still draw differently when nothing matches (the least loaded).
 */
const EXACT = new Set([
  "round_robin",
  "random",
  "power_of_two",
  "sglang_cache_aware",
  "chwbl",
  "llmd_weighted",
  "dynamo_kv",
]);

for (
  const [unit, kind] of [["groups", "exact"], ["groups", "approximate"], ["blocks", "exact"], [
    "blocks",
    "approximate",
  ]] as const
) {
  Deno.test(`every policy decides on an indexed ${kind} ${unit} view as on a scanned one`, async (t) => {
    for (const name of POLICY_NAMES) {
      await t.step(name, () => {
        const n = 12, groups = 5;
        const rng = createRandomStream(7, `${name}/${unit}/${kind}`);
        const scanned = table(n, unit, kind, false), indexed = table(n, unit, kind, true);
        assert(scanned.index === undefined && indexed.index !== undefined);
        const scanPolicy = createPolicy({ name }), indexPolicy = createPolicy({ name });
        const scanRandom = createRandomStream(3, "router"), indexRandom = createRandomStream(3, "router");
        const finishedA = new Int32Array(n), finishedB = new Int32Array(n);
        let exactChecks = 0, supportChecks = 0;
        // The first 60 events come before any question: the index learns the view's holders then.
        for (let step = 0; step < 460; step++) {
          const event = randomEvent(rng, n, unit, groups);
          applyEvent(scanned, event, finishedA, unit);
          applyEvent(indexed, event, finishedB, unit);
          if (step < 60 || step % 3 !== 0 || scanned.availableCount === 0) continue;
          const request = randomRequest(step, rng, groups);
          scanned.startDecision();
          indexed.startDecision();
          const support = EXACT.has(name) ? undefined : scanSupport(name, scanned, request, 300);
          scanned.startDecision();
          const a = scanPolicy.choose(request, scanned, scanRandom);
          const b = indexPolicy.choose(request, indexed, indexRandom);
          if (support === undefined) {
            assertEquals(b, a, `step ${step}: the indexed choice`);
            exactChecks++;
          } else {
            assert(support.has(b), `step ${step}: ${b} is not among the scan's choices ${[...support]}`);
            supportChecks++;
          }
          // The routing note sees the same consultation of the view.
          assertEquals(
            indexed.expectedTokens(b, request),
            scanned.expectedTokens(b, request),
            `step ${step}: note`,
          );
          scanned.routed(a, request);
          indexed.routed(a, request); // both learn the same routing, so the states stay equal
        }
        if (EXACT.has(name)) {
          // Same choices, and the same draws: the streams are still in step.
          assertEquals(indexRandom(), scanRandom());
          assert(exactChecks > 100);
        } else {
          assert(supportChecks > 100);
        }
      });
    }
  });
}

Deno.test("an indexed walk of the candidates draws exactly as the scan of the whole fleet (block view)", () => {
  // Under the block unit, prefix_aware's longest match walks only the holders, in index order.
  const n = 12, rng = createRandomStream(11, "walk");
  const scanned = table(n, "blocks", "exact", false), indexed = table(n, "blocks", "exact", true);
  const finishedA = new Int32Array(n), finishedB = new Int32Array(n);
  const scanRandom = createRandomStream(5, "router"), indexRandom = createRandomStream(5, "router");
  const policy = createPolicy({ name: "prefix_aware" });
  let matched = 0;
  for (let step = 0; step < 600; step++) {
    const event = randomEvent(rng, n, "blocks", 3);
    if (event.kind === "fail" || event.kind === "drain") continue; // keep every instance available
    applyEvent(scanned, event, finishedA, "blocks");
    applyEvent(indexed, event, finishedB, "blocks");
    const request = randomRequest(step, rng, 3);
    // Only decisions with a match: without one both fall back to the least loaded, drawn differently.
    const candidates = indexed.index!.candidates(request)!;
    let any = false;
    for (let k = 0; k < candidates.size; k++) any ||= indexed.matchedBlocks(candidates.at(k), request) > 0;
    if (!any) continue;
    matched++;
    assertEquals(policy.choose(request, indexed, indexRandom), policy.choose(request, scanned, scanRandom));
  }
  assert(matched > 100, `${matched} decisions had a match`);
  assertEquals(indexRandom(), scanRandom());
});

Deno.test("the index draws the least loaded uniformly among equals, as the scan does", () => {
  // 70 instances (indexed by default): 10 idle ones tie; the others are busy.
  const n = 70;
  assert(n > FLEET_INDEX_MIN_INSTANCES);
  const idle = new Set([3, 8, 15, 22, 30, 41, 47, 52, 60, 69]);
  const make = (indexed: boolean) => {
    const view = table(n, "groups", "exact", indexed);
    for (let i = 0; i < n; i++) if (!idle.has(i)) view.apply(status(i, { running: 1, waiting: i % 3 }));
    return view;
  };
  const defaulted = new InstanceTable(n);
  assert(defaulted.index !== undefined, `a fleet of ${n} is indexed by default`);
  for (const indexed of [false, true]) {
    const view = make(indexed), random = createRandomStream(9, `uniform/${indexed}`);
    const counts = new Map<number, number>();
    const draws = 20_000;
    for (let k = 0; k < draws; k++) {
      const choice = leastLoaded(view, random);
      assert(idle.has(choice), `${choice} is not idle`);
      counts.set(choice, (counts.get(choice) ?? 0) + 1);
    }
    // Chi-square against uniform over the 10 ties: 9 degrees of freedom, 27.88 is p = 0.001.
    const expected = draws / idle.size;
    let chi2 = 0;
    for (const i of idle) chi2 += ((counts.get(i) ?? 0) - expected) ** 2 / expected;
    assert(chi2 < 27.88, `${indexed ? "indexed" : "scanned"}: chi-square ${chi2.toFixed(1)} over uniform`);
  }
});

Deno.test("the least loaded of many holders is drawn uniformly among them, probing or counting", () => {
  // 200 instances; group 1 is held by 150 of them. The least load is 1 (no instance is idle);
  // 30 holders sit at it, among 40 instances at that load: the index probes the 40 at random.
  const n = 200, view = table(n, "groups", "exact", true);
  const leastHolders = new Set<number>();
  for (let i = 0; i < n; i++) {
    const holds = i % 4 !== 0, least = i % 5 === 1;
    view.apply(
      status(i, { running: 1, waiting: least ? 0 : 1 + (i % 3), ...(holds ? { cacheAdded: 1 } : {}) }),
    );
    if (holds && least) leastHolders.add(i);
  }
  // Instance 1 (a least-loaded holder) fails: unavailable, it must never be chosen.
  view.failed(1);
  leastHolders.delete(1);
  const random = createRandomStream(4, "probe"),
    request: Request = {
      id: 0,
      arrivalMs: 0,
      prefixGroup: 1,
      prefixTokens: 64,
      suffixTokens: 10,
      outputTokens: 1,
    };
  const counts = new Map<number, number>();
  const draws = 20_000;
  for (let k = 0; k < draws; k++) {
    const choice = view.index!.pickLeastActiveCandidate(request, random);
    assert(leastHolders.has(choice), `${choice} is not a least-loaded available holder`);
    counts.set(choice, (counts.get(choice) ?? 0) + 1);
  }
  const expected = draws / leastHolders.size;
  let chi2 = 0;
  for (const i of leastHolders) chi2 += ((counts.get(i) ?? 0) - expected) ** 2 / expected;
  // 29 holders: 28 degrees of freedom, 56.89 is p = 0.001.
  assertEquals(leastHolders.size, 29);
  assert(chi2 < 56.89, `chi-square ${chi2.toFixed(1)} over uniform`);
  // A group no available instance holds has no candidate.
  assertEquals(view.index!.pickLeastActiveCandidate({ ...request, prefixGroup: 2 }, random), -1);
  // Group 3: 40 holders at loads 2 to 4, and instance 6 at the least load: probes of the least
  // load's 39 instances mostly miss, and the exact count finds 6. Group 4: the same 40 without 6:
  // none at the least load, so the walk goes up to load 2 (the holders with i % 3 === 0).
  for (let i = 0; i < n; i++) {
    if (i % 5 === 2) view.apply(status(i, { running: 1, waiting: 1 + (i % 3), cacheAdded: 4 }));
  }
  for (let i = 0; i < n; i++) {
    if (i % 5 === 2 || i === 6) {
      view.apply(status(i, { running: 1, waiting: i === 6 ? 0 : 1 + (i % 3), cacheAdded: 3 }));
    }
  }
  const atTwo = new Set(Array.from({ length: n }, (_, i) => i).filter((i) => i % 5 === 2 && i % 3 === 0));
  for (let k = 0; k < 500; k++) {
    assertEquals(view.index!.pickLeastActiveCandidate({ ...request, prefixGroup: 3 }, random), 6);
    const choice = view.index!.pickLeastActiveCandidate({ ...request, prefixGroup: 4 }, random);
    assert(atTwo.has(choice), `group 4: ${choice} is not a least-loaded holder`);
  }
});

Deno.test("the FIFO fleet's group tally gives the routing note the instances would give, asked one by one", () => {
  // A fault after the run ends wraps every instance (restartable caches): the note then asks each.
  for (const name of ["round_robin", "hybrid"] as const) {
    const base = {
      policy: { name },
      instances: { count: 40 },
      workload: { requests: 6000, ratePerSec: 350 },
    };
    const tallied = simulate(parseScenario(base));
    const asked = simulate(
      parseScenario({ ...base, faults: [{ instance: 0, kind: "crash", atMs: 1e12, forMs: 1 }] }),
    );
    for (
      const field of [
        "availableTokenHitRate",
        "expectedTokenHitRate",
        "routingRegret",
        "tokenHitRate",
      ] as const
    ) {
      assertEquals(tallied[field], asked[field], `${name}: ${field}`);
    }
    assert(tallied.availableTokenHitRate! > 0.2, `${name}: something was available`);
  }
});

Deno.test("the indexes forget keys and loads no one holds any more: memory does not grow with a long trace", () => {
  const view = table(64, "blocks", "exact", true);
  const index = new FleetIndex(view);
  // 100,000 distinct run keys pass through 64 instances, 16 held at any moment.
  for (let key = 0; key < 100_000; key++) {
    index.holderChanged(key % 64, key, true);
    if (key >= 16) index.holderChanged((key - 16) % 64, key - 16, false);
  }
  assertEquals(index.holderKeyCount, 16);
  // A load taking 100,000 distinct values leaves one key behind.
  const buckets = new LoadBuckets(false, 1);
  for (let load = 0; load < 100_000; load++) {
    if (load > 0) buckets.delete(0, load - 1);
    buckets.add(0, load);
  }
  assertEquals([buckets.keyCount, buckets.size, buckets.minKey()], [1, 1, 99_999]);
});
