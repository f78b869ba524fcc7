/**
 * What each router sees by default (its real system's view), and the
 * decisions the production policies make on it: sequences derived by hand
 * from the real algorithms, on tiny hand-built cases.
 */
import { assert, assertEquals } from "@std/assert";
import { ApproximateCacheView, type CacheView, createCacheView } from "../actors/router/cache_view.ts";
import { createPolicy, POLICIES, type PolicySpec } from "../actors/policies/mod.ts";
import { CHARS_PER_TOKEN } from "../actors/policies/real_view.ts";
import { blockKeys, GROUP_KEY_STRIDE } from "../actors/kv_cache/prefix_keys.ts";
import type { Request } from "../actors/protocol.ts";
import { InstanceTable, type Router } from "../actors/router/router.ts";
import { createRandomStream } from "../actors/runtime/random_stream.ts";
import { simulate } from "../actors/simulation.ts";
import { parseScenario } from "../scenarios/scenario/scenario.ts";
import { status } from "./_status.ts";

const B = 16;

/** A request of `group` (−1: none) with a prefix and suffix in tokens. */
const request = (id: number, group: number, prefixTokens = 64, suffixTokens = 32): Request => ({
  id,
  arrivalMs: 0,
  prefixGroup: group,
  prefixTokens,
  suffixTokens,
  outputTokens: 1,
});

/** A table over `n` block-caching instances with an approximate (router-side) index. */
function indexedTable(n: number, capacity = 1_000_000, requestAccounting = false): InstanceTable {
  return new InstanceTable(n, {
    cacheView: new ApproximateCacheView(n, "blocks", capacity),
    blockTokens: B,
    cacheUnit: "blocks",
    requestAccounting,
  });
}

/** Routes `requests` one after another with no instance reporting, returning the choices. */
function burst(spec: PolicySpec, table: InstanceTable, requests: readonly Request[]): number[] {
  const policy = createPolicy(spec), random = createRandomStream(1, "router");
  return requests.map((r) => {
    table.startDecision();
    const choice = policy.choose(r, table, random);
    table.routed(choice, r);
    return choice;
  });
}

Deno.test("every built-in policy declares what its real system sees, with a citation", () => {
  for (const d of POLICIES) {
    assert(d.view.citation.length > 10, `${d.name}: no citation`);
    if (d.reads.blocks) {
      assert(d.view.cache.source !== "none", `${d.name} reads blocks but declares no cache`);
    }
    if (d.view.load.source === "scraped") {
      assert(d.view.load.refreshMs > 0, `${d.name}: a scrape needs an interval`);
    }
  }
});

Deno.test("a scenario that sets no view runs its policy's real one, and echoes it", async (t) => {
  const router = (policy: string, model = "batching", extra: Record<string, unknown> = {}) =>
    parseScenario({ policy: { name: policy }, instances: { model }, ...extra }).router;
  await t.step(
    "SGLang: a router-side index of 2^26 characters (4 per token) in 16-token blocks, fresh load",
    () => {
      const r = router("sglang_cache_aware");
      assertEquals([r.cacheView, r.approxCapacity, r.statusIntervalMs], ["approximate", 2 ** 26 / 4 / 16, 0]);
      assertEquals(CHARS_PER_TOKEN, 4);
    },
  );
  await t.step("llm-d: an engine-sized index of the first 256 blocks, metrics every 50 ms", () => {
    const r = router("llmd_weighted");
    assertEquals([r.cacheView, r.approxCapacity, r.indexMaxBlocks, r.statusIntervalMs], [
      "approximate",
      undefined,
      256,
      50,
    ]);
  });
  await t.step("production-stack: a trie of 128-character chunks (2 blocks) that never evicts", () => {
    const r = router("vllm_prefix");
    assertEquals([r.cacheView, r.approxCapacity, r.indexChunkBlocks], ["approximate", null, 2]);
  });
  await t.step("Dynamo: the engines' KV events (exact)", () => {
    assertEquals(router("dynamo_kv").cacheView, "exact");
  });
  await t.step("the original study's policies: exact on FIFO, an engine-sized index on batching", () => {
    assertEquals(router("hybrid", "fifo").cacheView, "exact");
    assertEquals(router("prefix_aware", "fifo").cacheView, "exact");
    const r = router("prefix_aware");
    assertEquals([r.cacheView, r.approxCapacity], ["approximate", undefined]);
  });
  await t.step("SGLang on FIFO: its index counted in prefix groups (2^24 tokens / 1024-token groups)", () => {
    const r = router("sglang_cache_aware", "fifo");
    assertEquals([r.cacheView, r.approxCapacity], ["approximate", 2 ** 24 / 1024]);
  });
  await t.step("what the scenario sets wins: exact, a capacity, a status interval", () => {
    const r = router("sglang_cache_aware", "batching", {
      router: { cacheView: "exact", statusIntervalMs: 200 },
    });
    assertEquals([r.cacheView, r.statusIntervalMs], ["exact", 200]);
    const a = router("llmd_weighted", "batching", {
      router: { cacheView: "approximate", approxCapacity: null },
    });
    assertEquals([a.cacheView, a.approxCapacity, a.statusIntervalMs], ["approximate", null, 50]);
  });
});

Deno.test("SGLang piles a same-prefix burst onto the first worker until the balance gate opens", () => {
  // A router-side index learns each prompt as it is routed. Request 0 misses
  // everywhere: the least loaded, lowest index, is 0. Every later one matches
  // all of its prompt's keyed blocks (4 of 6 blocks, > 0.3) at instance 0
  // alone, so it follows: in flight [k, 0, 0, 0]. After 65 the gap is 65 > 64
  // and 65 > 1.5 × 0: balance sends 65 → 1, 66 → 2, 67 → 3 (lowest index of
  // the least loaded). Then [65, 1, 1, 1]: 64 is not > 64, so the match wins —
  // every instance now holds the prefix (SGLang inserts in either branch) and
  // the first tenant, instance 0, takes it: 68 → 0, and the gate opens again.
  const requests = Array.from({ length: 72 }, (_, i) => request(i, 7));
  const choices = burst({ name: "sglang_cache_aware" }, indexedTable(4), requests);
  const expected = [...new Array(65).fill(0), 1, 2, 3, 0, 1, 2, 3];
  assertEquals(choices, expected);
});

Deno.test("with an engine-fed view and no report yet, the same burst is spread (what the real router does not do)", () => {
  const table = new InstanceTable(4, {
    cacheView: createCacheView(4, { kind: "exact", unit: "blocks", capacity: 0 }),
    blockTokens: B,
    cacheUnit: "blocks",
  });
  const choices = burst(
    { name: "sglang_cache_aware" },
    table,
    Array.from({ length: 8 }, (_, i) => request(i, 7)),
  );
  // No match anywhere: each goes to the least loaded, the lowest index among equals.
  assertEquals(choices, [0, 1, 2, 3, 0, 1, 2, 3]);
});

Deno.test("production-stack's prefix router follows its own trie: a burst goes wherever its first request went", () => {
  // No load term: the first request is a miss (random over all), the trie then holds the prefix at
  // that instance alone, and every later request matches there (2 chunks of 2 blocks: 4 of 4).
  const table = new InstanceTable(4, {
    cacheView: new ApproximateCacheView(4, "blocks", Infinity, undefined, { chunkBlocks: 2 }),
    blockTokens: B,
    cacheUnit: "blocks",
  });
  const choices = burst({ name: "vllm_prefix" }, table, Array.from({ length: 30 }, (_, i) => request(i, 7)));
  assertEquals(new Set(choices).size, 1);
});

Deno.test("Preble exploits the instance its global tree credits with a prefix, while the new tokens are fewer", () => {
  // 64 prefix + 32 suffix: after the first routing the tree credits 64 tokens at one instance and
  // 96 − 64 = 32 < 64 new tokens, so every later request exploits it (no engine report changes
  // the load cost in a burst). A prompt whose new part is longer (64 + 100) explores instead: the
  // lowest load cost, all 0 here, drawn at random among the four.
  const table = indexedTable(4);
  const choices = burst({ name: "preble_e2" }, table, Array.from({ length: 20 }, (_, i) => request(i, 7)));
  assertEquals(new Set(choices).size, 1);
  const explored = new Set(
    burst({ name: "preble_e2" }, table, Array.from({ length: 40 }, (_, i) => request(100 + i, 7, 64, 100))),
  );
  assert(explored.size > 1, `explored ${[...explored]}`);
});

Deno.test("SGLang sends a miss to the lowest index among the least loaded, with no random draw", () => {
  const table = indexedTable(3);
  table.apply(status(0, {}));
  // Load [2, 1, 1] from earlier routings of prefix-less requests.
  for (const [i, id] of [[0, 100], [0, 101], [1, 102], [2, 103]]) table.routed(i, request(id, -1));
  let draws = 0;
  const random = () => {
    draws++;
    return 0.5;
  };
  const policy = createPolicy({ name: "sglang_cache_aware" });
  table.startDecision();
  assertEquals(policy.choose(request(1, 9), table, random), 1);
  assertEquals(draws, 0);
});

Deno.test("a router-side index never hears of an engine's eviction: its belief goes stale", () => {
  const view: CacheView = new ApproximateCacheView(2, "blocks", 1000);
  const r = request(0, 3);
  const keys = blockKeys(r, B);
  view.routed(0, r, keys);
  // The engine evicts the prefix and says so: the index does not listen.
  view.apply(status(0, { cachedRuns: [keys.runKey(0), 0] }));
  assertEquals(view.matchedBlocks(0, r, keys), 4);
});

Deno.test("a bounded index holds a prompt's unshared blocks too, and forgets a prefix sooner for them", () => {
  // Capacity 8 blocks. A: 4 keyed + 2 unshared full blocks = 6. B (another
  // group): 6 more → 12 > 8, so the 4 least recently used go: A's unshared
  // tail first (2), then A's prefix from its last block (2): A keeps 2.
  const view = new ApproximateCacheView(1, "blocks", 8, undefined, { blockTokens: B });
  const a = request(0, 1), b = request(1, 2);
  view.routed(0, a, blockKeys(a, B));
  assertEquals(view.cachedBlockCount(0), 6);
  view.routed(0, b, blockKeys(b, B));
  assertEquals(view.cachedBlockCount(0), 8);
  assertEquals(view.matchedBlocks(0, a, blockKeys(a, B)), 2);
  assertEquals(view.matchedBlocks(0, b, blockKeys(b, B)), 4);
});

Deno.test("an index of chunks matches whole chunks only; llm-d's index matches at most its first blocks", () => {
  const chunked = new ApproximateCacheView(1, "blocks", Infinity, undefined, { chunkBlocks: 2 });
  const r = request(0, 5, 80, 0); // 5 keyed blocks: matched in chunks of 2 → 4
  chunked.routed(0, r, blockKeys(r, B));
  assertEquals(chunked.matchedBlocks(0, r, blockKeys(r, B)), 4);
  const capped = new ApproximateCacheView(1, "blocks", 10_000, undefined, { maxBlocks: 3 });
  capped.routed(0, r, blockKeys(r, B));
  assertEquals(capped.matchedBlocks(0, r, blockKeys(r, B)), 3);
});

Deno.test("llm-d's prefix score saturates: 256 of 300 cached blocks score as all 300", () => {
  const table = indexedTable(2);
  const long = request(0, 4, 300 * B, 0);
  // Instance 0 believed to hold the first 256 blocks, instance 1 all 300.
  const view = table.cacheView as ApproximateCacheView;
  view.routed(1, long, blockKeys(long, B));
  const first256 = request(1, 4, 256 * B, 0);
  view.routed(0, first256, blockKeys(first256, B));
  // Equal prefix scores (1.0 each), equal queues and KV: a tie, broken at random — both win often.
  const policy = createPolicy({ name: "llmd_weighted" }), random = createRandomStream(3, "router");
  const wins = [0, 0];
  for (let k = 0; k < 400; k++) {
    table.startDecision();
    wins[policy.choose(long, table, random)]++;
  }
  assert(wins[0] > 150 && wins[1] > 150, `wins ${wins}`);
  // Without the cap (counting all 300 blocks), instance 1 would always win.
  const uncapped = createPolicy({ name: "llmd_weighted", maxPrefixBlocks: 1000 });
  table.startDecision();
  assertEquals(uncapped.choose(long, table, random), 1);
});

Deno.test("Dynamo: cost from the router's own active prefill tokens and blocks, hand-computed", async (t) => {
  // Two instances, block 16. Requests of group 0: 64 prefix tokens (4 keyed
  // blocks) + 32 suffix = 96 tokens, 6 blocks. Instance 0's engine reports
  // the prefix cached (the exact view, fed by KV events).
  const table = new InstanceTable(2, {
    cacheView: createCacheView(2, { kind: "exact", unit: "blocks", capacity: 0 }),
    blockTokens: B,
    cacheUnit: "blocks",
    requestAccounting: true,
  });
  const runKey = (0 + 1) * GROUP_KEY_STRIDE;
  table.apply(status(0, { cachedRuns: [runKey, 4] }));
  const policy = createPolicy({ name: "dynamo_kv" }), random = createRandomStream(1, "router");
  const decide = (r: Request) => {
    table.startDecision();
    const choice = policy.choose(r, table, random);
    table.routed(choice, r);
    return choice;
  };
  await t.step("A: 0 costs (96 − 64)/16 + 6 = 8, 1 costs 96/16 + 6 = 12 → 0", () => {
    assertEquals(decide(request(1, 0)), 0);
    assertEquals([table.activePrefillTokens[0], table.activeBlocks[0]], [32, 6]);
  });
  await t.step("B: 0 costs (32 + 32)/16 + (6 + 2 new) = 12, 1 costs 12: a tie → the smaller tree, 1", () => {
    assertEquals(table.newBlocks(0, request(2, 0)), 2);
    assertEquals(decide(request(2, 0)), 1);
    assertEquals([table.activePrefillTokens[1], table.activeBlocks[1]], [96, 6]);
  });
  await t.step("A's first token: 0 costs 2 + 8 = 10, 1 costs (96 + 96)/16 + 8 = 20 → 0", () => {
    table.apply(status(0, { prefilledIds: [1] }));
    assertEquals(table.activePrefillTokens[0], 0);
    assertEquals(decide(request(3, 0)), 0);
  });
  await t.step("A and C finish: instance 0 holds nothing active", () => {
    table.apply(status(0, { finishedIds: [1, 3] }));
    assertEquals([table.activePrefillTokens[0], table.activeBlocks[0]], [0, 0]);
  });
});

Deno.test("Dynamo at T > 0 samples over costs normalised by their range, one draw", () => {
  const table = new InstanceTable(3, { blockTokens: B, requestAccounting: true });
  // Active prefill tokens 0, 160, 320 (no cache): costs 6 + 6 = 12, 22, 32; range 20.
  table.routed(1, request(10, -1, 0, 160));
  table.routed(2, request(11, -1, 0, 320));
  table.activeBlocks.fill(0); // only the prefill terms differ below
  const r = request(1, -1, 0, 96);
  const policy = createPolicy({ name: "dynamo_kv", temperature: 1 });
  // Weights exp(0), exp(−0.5), exp(−1): 1, 0.6065, 0.3679 (sum 1.9744).
  const at = (u: number) => {
    table.startDecision();
    return policy.choose(r, table, () => u);
  };
  assertEquals([at(0.5), at(0.6), at(0.9)], [0, 1, 2]);
});

/** Runs `input` and returns the router's view at the end. */
function finalView(input: Record<string, unknown>): { view: InstanceTable; completed: number } {
  let router: Router | undefined;
  const result = simulate(parseScenario(input), { inspect: (run) => router = run.router });
  return { view: router!.view, completed: result.completed };
}

Deno.test("every request a Dynamo run routes leaves the router's accounting, whatever the reports' rhythm and faults", async (t) => {
  const base = {
    policy: { name: "dynamo_kv" },
    instances: { model: "batching", count: 3 },
    workload: { requests: 600, ratePerSec: 60 },
  };
  const cases: [string, Record<string, unknown>][] = [
    ["no fault", {}],
    ["a crash and a restart", { faults: [{ instance: 0, kind: "crash", atMs: 3000, forMs: 2000 }] }],
    ["a partition (its reports are lost, not their request events)", {
      faults: [{ instance: 0, kind: "partition", atMs: 3000, forMs: 2000 }],
    }],
  ];
  for (const [label, extra] of cases) {
    for (const statusIntervalMs of [0, 100]) {
      await t.step(`${label}, status every ${statusIntervalMs} ms`, () => {
        const { view, completed } = finalView({ ...base, ...extra, router: { statusIntervalMs } });
        assertEquals(completed, 600);
        assertEquals(view.routedCount >= 600, true);
        for (let i = 0; i < 3; i++) {
          assertEquals([view.activePrefillTokens[i], view.activeBlocks[i]], [0, 0], `instance ${i}`);
        }
      });
    }
  }
});

Deno.test("a FIFO instance tells a router that counts its active prefill of each first token when it comes", () => {
  // One prompt of 16,000 prefix tokens and a short suffix: prefill ≈ 30 + 0.04 × 16,100 ≈ 674 ms,
  // then 3,000 ms of decode. At 500 ms its prefill tokens are active; at 1,000 ms the request is
  // decoding: they are not, its blocks still are.
  const at = (untilMs: number) =>
    finalView({
      policy: { name: "dynamo_kv" },
      instances: { model: "fifo", count: 2, decodeMsPerToken: 1 },
      workload: {
        requests: 1,
        ratePerSec: 100,
        prefix: { tokens: 16_000 },
        outputTokens: { dist: "constant", value: 3000 },
      },
      untilMs,
    }).view;
  const before = at(500), after = at(1000);
  assert(before.activePrefillTokens[0] + before.activePrefillTokens[1] > 16_000);
  const i = after.activeBlocks[0] > 0 ? 0 : 1;
  assertEquals(after.activePrefillTokens[i], 0);
  assert(after.activeBlocks[i] > 1000, `active blocks ${after.activeBlocks[i]}`);
});
