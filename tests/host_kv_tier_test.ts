import { assert, assertEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import { HostKvTier } from "../actors/kv_cache/host_kv_tier.ts";
import { KvBlockCache } from "../actors/kv_cache/kv_block_cache.ts";
import { type BlockKeys, blockKeys } from "../actors/kv_cache/prefix_keys.ts";
import type { Request } from "../actors/protocol.ts";

/** A request's keys: `runBlocks` blocks under each of `runKeys`, `count` in all (default: every run full). */
function keysOf(runBlocks: number, runKeys: number[], count = runBlocks * runKeys.length): BlockKeys {
  return { count, keyAt: () => -1, runBlocks, runKey: (r) => runKeys[r] };
}

/** Demotes blocks `[lo, hi)` of run `key` as the GPU cache would: it held `hi`, now `lo`. */
function demote(tier: HostKvTier, key: number, lo: number, hi: number): void {
  tier.gpuChanged(key, hi);
  tier.gpuChanged(key, lo);
}

// Keys are arbitrary safe integers: negative ones and large ones too.
const A = -7, B = 2 ** 45, C = 3;

Deno.test("host tier: capacity must be an integer >= 1", async (t) => {
  for (const capacity of [0, -1, 1.5, NaN, Infinity]) {
    await t.step(`${capacity}`, () => {
      assertThrows(
        () => new HostKvTier(capacity),
        RangeError,
        `capacity must be an integer >= 1, got ${capacity}`,
      );
    });
  }
});

Deno.test("host tier: evicts least recently demoted blocks first, a run's tail before its head", () => {
  const tier = new HostKvTier(5);
  demote(tier, A, 3, 4); // A3
  demote(tier, B, 0, 2); // B1, B0
  tier.gpuChanged(A, 1); // A2, A1: newer than A3 and than B's
  assertEquals([...tier.blocks()], [[A, 3], [B, 1], [B, 0], [A, 2], [A, 1]]);
  assertEquals(tier.held, 5);
  demote(tier, C, 0, 3); // three more: A3, B1 and B0 go
  assertEquals([...tier.blocks()], [[A, 2], [A, 1], [C, 2], [C, 1], [C, 0]]);
  assertEquals(tier.held, 5);
  tier.gpuChanged(A, 0); // A0, just below A's host blocks: A2 (the oldest) goes
  assertEquals([...tier.blocks()], [[A, 1], [C, 2], [C, 1], [C, 0], [A, 0]]);
  assertEquals(tier.match(keysOf(4, [A]), 0, 4), 2);
});

Deno.test("host tier: a demotion larger than the tier keeps its lowest blocks", () => {
  const tier = new HostKvTier(3);
  demote(tier, B, 1, 2);
  demote(tier, A, 0, 5);
  assertEquals([...tier.blocks()], [[A, 2], [A, 1], [A, 0]]);
  assertEquals(tier.match(keysOf(5, [A]), 0, 5), 3);
  assertEquals(tier.match(keysOf(2, [B]), 1, 2), 0);
});

Deno.test("host tier: match counts consecutive held blocks from `from` and stops at the first gap", async (t) => {
  const tier = new HostKvTier(20);
  demote(tier, A, 0, 2); // run 0: whole
  demote(tier, B, 0, 1); // run 1: block 0 only
  demote(tier, C, 0, 2); // run 2: whole
  const keys = keysOf(2, [A, B, C]);
  const rows: [from: number, limit: number, matched: number][] = [
    [0, 6, 3], // stops at B's block 1
    [0, 3, 3],
    [0, 2, 2],
    [0, 99, 3], // limit beyond the keys
    [1, 6, 2],
    [3, 6, 0], // B's block 1 is missing
    [4, 6, 2],
    [4, 5, 1],
    [2, 2, 0], // empty range
    [5, 4, 0],
  ];
  for (const [from, limit, matched] of rows) {
    await t.step(`from ${from}, limit ${limit}: ${matched}`, () => {
      assertEquals(tier.match(keys, from, limit), matched);
    });
  }
  await t.step("a gap inside a run", () => {
    tier.take(keysOf(2, [C]), 1, 1);
    assertEquals(tier.match(keys, 4, 6), 1);
    tier.take(keysOf(2, [C]), 0, 1);
    assertEquals(tier.match(keys, 4, 6), 0);
  });
  await t.step("blocks the GPU holds are not the tier's", () => {
    demote(tier, -1, 1, 3);
    const gpuFirst = keysOf(3, [-1, A]);
    assertEquals(tier.match(gpuFirst, 0, 6), 0);
    assertEquals(tier.match(gpuFirst, 1, 6), 4);
  });
  await t.step("a short last run", () => {
    assertEquals(tier.match(keysOf(2, [B, A], 3), 0, 4), 1);
    assertEquals(tier.match(keysOf(2, [A, B], 3), 0, 4), 3);
  });
});

Deno.test("host tier: take removes the blocks, splitting a range, and skips blocks it does not hold", () => {
  const tier = new HostKvTier(10);
  demote(tier, A, 0, 6);
  demote(tier, B, 0, 1);
  const keys = keysOf(6, [A]);
  tier.take(keys, 2, 2); // A2, A3 out of the middle
  assertEquals(tier.held, 5);
  assertEquals([...tier.blocks()], [[A, 5], [A, 4], [A, 1], [A, 0], [B, 0]]);
  assertEquals(tier.match(keys, 0, 6), 2);
  assertEquals(tier.match(keys, 4, 6), 2);
  tier.take(keys, 2, 3); // only A4 is there
  assertEquals(tier.held, 4);
  assertEquals([...tier.blocks()], [[A, 5], [A, 1], [A, 0], [B, 0]]);
  tier.take(keys, 0, 0);
  tier.take(keysOf(1, [C]), 0, 1); // a run it never saw
  assertEquals(tier.held, 4);
  // The split pieces keep their age, the upper one first: A5, then A1 go.
  demote(tier, C, 0, 8);
  assertEquals([...tier.blocks()], [[A, 0], [B, 0], [C, 7], [C, 6], [C, 5], [C, 4], [C, 3], [C, 2], [C, 1], [
    C,
    0,
  ]]);
  assertEquals(tier.held, 10);
});

Deno.test("host tier: a range split under a higher range keeps both neighbours", () => {
  const tier = new HostKvTier(10);
  demote(tier, A, 4, 6); // A5, A4
  demote(tier, B, 0, 1); // B0: A's next demotion is a range of its own
  tier.gpuChanged(A, 0); // A3..A0
  const keys = keysOf(6, [A]);
  tier.take(keys, 1, 2); // A1, A2
  assertEquals([...tier.blocks()], [[A, 5], [A, 4], [B, 0], [A, 3], [A, 0]]);
  assertEquals(tier.match(keys, 3, 6), 3);
  tier.take(keys, 3, 1); // A3, its range now empty
  assertEquals(tier.match(keys, 4, 6), 2);
  assertEquals([...tier.blocks()], [[A, 5], [A, 4], [B, 0], [A, 0]]);
  tier.gpuChanged(A, 5); // recomputed up to A4: A5 stays
  assertEquals([...tier.blocks()], [[A, 5], [B, 0]]);
});

Deno.test("host tier: the GPU growing removes host copies, and a promotion's publish finds nothing to remove", () => {
  const tier = new HostKvTier(8);
  const keys = keysOf(4, [A]);
  demote(tier, A, 0, 4);
  tier.gpuChanged(A, 2); // another request recomputed A0, A1
  assertEquals([...tier.blocks()], [[A, 3], [A, 2]]);
  assertEquals(tier.match(keys, 2, 4), 2);
  tier.take(keys, 2, 2); // promoted…
  assertEquals(tier.held, 0);
  tier.gpuChanged(A, 4); // …and published
  assertEquals(tier.held, 0);
  tier.gpuChanged(A, 0); // all four evicted from the GPU again
  assertEquals([...tier.blocks()], [[A, 3], [A, 2], [A, 1], [A, 0]]);
  tier.gpuChanged(A, 0); // no change, nothing happens
  assertEquals(tier.held, 4);
});

/** The tier block by block: one entry per held block in a Map kept in eviction order. */
class ReferenceTier {
  readonly order = new Map<string, [number, number]>();
  readonly #gpu = new Map<number, number>();
  constructor(readonly capacity: number) {}

  gpuChanged(key: number, cached: number): void {
    const old = this.#gpu.get(key) ?? 0;
    this.#gpu.set(key, cached);
    for (let i = old; i < cached; i++) this.order.delete(`${key}:${i}`);
    // A run's tail is older than its head, so it goes first.
    for (let i = old - 1; i >= cached; i--) {
      this.order.delete(`${key}:${i}`);
      this.order.set(`${key}:${i}`, [key, i]);
    }
    for (const id of this.order.keys()) {
      if (this.order.size <= this.capacity) break;
      this.order.delete(id);
    }
  }

  match(keys: BlockKeys, from: number, limit: number): number {
    let j = from;
    while (j < Math.min(limit, keys.count) && this.order.has(blockId(keys, j))) j++;
    return Math.max(0, j - from);
  }

  take(keys: BlockKeys, from: number, count: number): void {
    for (let j = from; j < Math.min(from + count, keys.count); j++) this.order.delete(blockId(keys, j));
  }
}

function blockId(keys: BlockKeys, j: number): string {
  return `${keys.runKey(Math.floor(j / keys.runBlocks))}:${j % keys.runBlocks}`;
}

/** Requests down a small tree of run keys (`runBlocks` blocks each), sharing prefixes of every length. */
function treeRequests(runBlocks: number): (path: readonly number[], tailBlocks: number) => Request {
  const ids = new Map<string, number>();
  const idOf = (path: string) => {
    let id = ids.get(path);
    if (id === undefined) ids.set(path, id = ids.size - 3);
    return id;
  };
  return (path, tailBlocks) => {
    const prefixKeys = path.map((_, i) => idOf(path.slice(0, i + 1).join(".")));
    const tokens = ((path.length - 1) * runBlocks + Math.min(runBlocks, tailBlocks)) * 16;
    return {
      id: 0,
      arrivalMs: 0,
      prefixGroup: 0,
      prefixTokens: tokens,
      suffixTokens: 0,
      outputTokens: 1,
      prefixKeys,
      keyTokens: runBlocks * 16,
    };
  };
}

type Op =
  | {
    kind: "admit";
    path: number[];
    tail: number;
    limit: number;
    extra: number;
    promote: "no" | "before allocating" | "after allocating";
  }
  | { kind: "publish"; index: number }
  | { kind: "grow"; index: number }
  | { kind: "finish"; index: number }
  | { kind: "take"; path: number[]; tail: number; from: number; count: number };

const path = fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 1, maxLength: 4 });
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant("admit" as const),
    path,
    tail: fc.integer({ min: 1, max: 4 }),
    limit: fc.integer({ min: 0, max: 16 }),
    extra: fc.integer({ min: 0, max: 3 }),
    promote: fc.constantFrom("no" as const, "before allocating" as const, "after allocating" as const),
  }),
  fc.record({ kind: fc.constant("publish" as const), index: fc.nat() }),
  fc.record({ kind: fc.constant("grow" as const), index: fc.nat() }),
  fc.record({ kind: fc.constant("finish" as const), index: fc.nat() }),
  fc.record({
    kind: fc.constant("take" as const),
    path,
    tail: fc.integer({ min: 1, max: 4 }),
    from: fc.integer({ min: 0, max: 16 }),
    count: fc.integer({ min: 0, max: 6 }),
  }),
);

/** A running request, as the engine tracks it: keyed blocks referenced, to publish, and private blocks. */
interface Live {
  keys: BlockKeys;
  held: number;
  target: number;
  priv: number;
}

Deno.test("host tier beside a real GPU cache: never holds a GPU block, stays within capacity, and holds exactly what was demoted and not since evicted or taken (property)", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 4 }),
      fc.integer({ min: 4, max: 24 }),
      fc.integer({ min: 1, max: 12 }),
      fc.array(op, { maxLength: 150, size: "max" }),
      (runBlocks, gpuBlocks, hostBlocks, ops) => {
        const request = treeRequests(runBlocks);
        const cache = new KvBlockCache(gpuBlocks);
        const tier = new HostKvTier(hostBlocks), reference = new ReferenceTier(hostBlocks);
        cache.onRunChange = (key, cached) => {
          tier.gpuChanged(key, cached);
          reference.gpuChanged(key, cached);
        };
        const check = (what: string) => {
          const blocks = [...tier.blocks()];
          assertEquals(blocks.length, tier.held, what);
          assert(tier.held <= hostBlocks, `${what}: ${tier.held} blocks held, capacity ${hostBlocks}`);
          for (const [key, i] of blocks) {
            assert(i >= cache.cachedBlocks(key), `${what}: (${key}, ${i}) is on the GPU too`);
          }
          assertEquals(blocks, [...reference.order.values()], what);
          for (const [key, i] of blocks) assertEquals(tier.match(keysOf(i + 1, [key]), i, i + 1), 1, what);
        };
        const live: Live[] = [];
        for (const o of ops) {
          if (o.kind === "admit") {
            const keys = blockKeys(request(o.path, o.tail), 16);
            const limit = Math.min(keys.count, o.limit);
            const hits = cache.matchPrefix(keys, limit);
            const promoted = tier.match(keys, hits, limit);
            assertEquals(promoted, reference.match(keys, hits, limit), "match");
            if (o.promote === "before allocating") {
              tier.take(keys, hits, promoted);
              reference.take(keys, hits, promoted);
            }
            cache.acquire(keys, hits);
            const needed = keys.count - hits + o.extra;
            if (!cache.allocate(needed)) cache.release(keys, hits, 0);
            else {
              // Promoted blocks load into private blocks and are published with the computed ones.
              if (o.promote === "after allocating") {
                tier.take(keys, hits, promoted);
                reference.take(keys, hits, promoted);
              }
              live.push({ keys, held: hits, target: keys.count, priv: needed });
            }
          } else if (o.kind === "take") {
            const keys = blockKeys(request(o.path, o.tail), 16);
            assertEquals(
              tier.match(keys, o.from, o.from + o.count),
              reference.match(keys, o.from, o.from + o.count),
            );
            tier.take(keys, o.from, o.count);
            reference.take(keys, o.from, o.count);
          } else if (live.length === 0) continue;
          else if (o.kind === "publish") {
            const r = live[o.index % live.length];
            if (r.held === r.target) continue;
            cache.publish(r.keys, r.held, r.target);
            r.priv -= r.target - r.held;
            r.held = r.target;
          } else if (o.kind === "grow") {
            if (cache.allocate(1)) live[o.index % live.length].priv++;
          } else {
            const [r] = live.splice(o.index % live.length, 1);
            cache.release(r.keys, r.held, r.priv);
          }
          check(o.kind);
        }
      },
    ),
    { numRuns: 600 },
  );
});
