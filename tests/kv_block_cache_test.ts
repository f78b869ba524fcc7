import { assert, assertEquals } from "@std/assert";
import fc from "fast-check";
import { KvBlockCache } from "../actors/kv_cache/kv_block_cache.ts";
import { type BlockKeys, blockKeys } from "../actors/kv_cache/prefix_keys.ts";
import type { Request } from "../actors/protocol.ts";
import { ReferenceKvBlockCache } from "./_reference_kv_block_cache.ts";

/** A group chain of `blocks` 16-token blocks: one run. */
const chain = (group: number, blocks: number): BlockKeys =>
  blockKeys({
    id: 0,
    arrivalMs: 0,
    prefixGroup: group,
    prefixTokens: blocks * 16,
    suffixTokens: 0,
    outputTokens: 1,
  }, 16);

/** The cache's content, block by block: each run's cached blocks, by their block keys. */
function cachedBlockKeys(cache: KvBlockCache, keyOfRunBlock: (run: number, j: number) => number): number[] {
  const keys: number[] = [];
  for (const [run, cached] of cache.runs()) for (let j = 0; j < cached; j++) keys.push(keyOfRunBlock(run, j));
  return keys.sort((a, b) => a - b);
}

Deno.test("kv cache: published blocks are found again, and evicted least recently used, tail first", () => {
  const cache = new KvBlockCache(6);
  const changes: [number, number][] = [];
  cache.onRunChange = (key, cached) => changes.push([key, cached]);
  const a = chain(0, 3), b = chain(9, 5);
  // Request A: 3 keyed blocks, computed and released.
  assert(cache.allocate(3));
  cache.publish(a, 0, 3);
  cache.release(a, 3, 0);
  assertEquals([cache.held, cache.evictable, cache.free], [0, 3, 3]);
  assertEquals(cache.matchPrefix(a, 5), 3);
  // Request B needs 5 private blocks: two of A's are evicted, its last blocks first.
  assert(cache.allocate(5));
  assertEquals(changes, [[a.runKey(0), 3], [a.runKey(0), 1]]);
  assertEquals(cache.matchPrefix(a, 3), 1);
  assertEquals(cache.matchPrefix(b, 5), 0);
  assertEquals([cache.held, cache.evictable, cache.free], [5, 1, 0]);
  assertEquals(cache.allocate(2), false);
  assertEquals([cache.held, cache.evictable, cache.free], [5, 1, 0]);
});

Deno.test("kv cache: a shared prefix is held once and stays while any request references it", () => {
  const cache = new KvBlockCache(10);
  const keys = chain(7, 2);
  assert(cache.allocate(2));
  cache.publish(keys, 0, 2);
  cache.acquire(keys, 2); // a second request reuses both blocks
  assertEquals(cache.held, 2);
  cache.release(keys, 2, 0);
  assertEquals([cache.held, cache.evictable], [2, 0]);
  cache.release(keys, 2, 0);
  assertEquals([cache.held, cache.evictable], [0, 2]);
});

Deno.test("kv cache: a hit's unreferenced blocks are counted, run by run, as the room referencing them takes", () => {
  const cache = new KvBlockCache(10);
  const keys = blockKeys({
    id: 0,
    arrivalMs: 0,
    prefixGroup: 0,
    prefixTokens: 96,
    suffixTokens: 0,
    outputTokens: 1,
    prefixKeys: [11, 12, 13],
    keyTokens: 32,
  }, 16); // three runs of two blocks
  assert(cache.allocate(6));
  cache.publish(keys, 0, 6);
  cache.release(keys, 6, 0);
  assertEquals(cache.unreferenced(keys, 5), 5);
  cache.acquire(keys, 3); // another request holds blocks 0..2
  assertEquals([cache.unreferenced(keys, 2), cache.unreferenced(keys, 3), cache.unreferenced(keys, 6)], [
    0,
    0,
    3,
  ]);
  assertEquals([cache.held, cache.evictable, cache.free], [3, 3, 4]);
});

Deno.test("kv cache: publishing a key another request already cached frees the duplicate", () => {
  const cache = new KvBlockCache(10);
  const keys = chain(1, 1);
  assert(cache.allocate(2)); // two requests computed the same block concurrently
  cache.publish(keys, 0, 1);
  cache.publish(keys, 0, 1);
  assertEquals(cache.held, 1);
});

/**
 * Random request chains over a small tree of Mooncake-style hash keys
 * (`runBlocks` engine blocks per key), so that requests share prefixes of
 * every length, and end mid-run.
 */
function treeRequests(runBlocks: number) {
  const ids = new Map<string, number>();
  const idOf = (path: string) => {
    let id = ids.get(path);
    if (id === undefined) ids.set(path, id = ids.size);
    return id;
  };
  return (path: readonly number[], tailBlocks: number): Request => {
    const prefixKeys = path.map((_, i) => idOf(path.slice(0, i + 1).join(".")));
    const tokens = ((path.length - 1) * runBlocks + Math.min(runBlocks, tailBlocks)) * 16;
    return {
      id: 0,
      arrivalMs: 0,
      prefixGroup: prefixKeys[0],
      prefixTokens: tokens,
      suffixTokens: 0,
      outputTokens: 1,
      prefixKeys,
      keyTokens: runBlocks * 16,
    };
  };
}

Deno.test("kv cache by runs equals the block-by-block reference: every hit, eviction and failure (property)", () => {
  type Op =
    | { kind: "admit"; path: number[]; tail: number; limit: number; extra: number }
    | { kind: "publish"; index: number; upTo: number }
    | { kind: "grow"; index: number }
    | { kind: "finish"; index: number };
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({
      kind: fc.constant("admit" as const),
      path: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 1, maxLength: 4 }),
      tail: fc.integer({ min: 1, max: 4 }),
      limit: fc.integer({ min: 0, max: 16 }),
      extra: fc.integer({ min: 0, max: 3 }),
    }),
    fc.record({ kind: fc.constant("publish" as const), index: fc.nat(), upTo: fc.nat() }),
    fc.record({ kind: fc.constant("grow" as const), index: fc.nat() }),
    fc.record({ kind: fc.constant("finish" as const), index: fc.nat() }),
  );
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 4 }),
      fc.integer({ min: 1, max: 40 }),
      fc.array(op, { maxLength: 150, size: "max" }),
      (runBlocks, capacity, ops) => {
        const request = treeRequests(runBlocks);
        const cache = new KvBlockCache(capacity), reference = new ReferenceKvBlockCache(capacity);
        const evictedRef: number[] = [];
        reference.onEvict = (key) => evictedRef.push(key);
        let evictedBlocks = 0;
        const cachedBefore = new Map<number, number>();
        cache.onRunChange = (key, cached) => {
          const before = cachedBefore.get(key) ?? 0;
          if (cached < before) evictedBlocks += before - cached;
          if (cached === 0) cachedBefore.delete(key);
          else cachedBefore.set(key, cached);
        };
        interface Live {
          keys: BlockKeys;
          held: number;
          target: number;
          priv: number;
        }
        const live: Live[] = [];
        const blockKey = (run: number, j: number) => runBlocks === 1 ? run : run * runBlocks + j;
        const same = (what: string) => {
          assertEquals([cache.held, cache.evictable, cache.free], [
            reference.held,
            reference.evictable,
            reference.free,
          ], what);
          assertEquals(cachedBlockKeys(cache, blockKey), [...reference.keys()].sort((a, b) => a - b), what);
          assertEquals(evictedBlocks, evictedRef.length, what);
        };
        for (const o of ops) {
          if (o.kind === "admit") {
            const keys = blockKeys(request(o.path, o.tail), 16);
            const limit = Math.min(keys.count, o.limit);
            const hits = cache.matchPrefix(keys, limit);
            assertEquals(hits, reference.matchPrefix(keys.keyAt, limit), "match");
            assertEquals(
              cache.unreferenced(keys, hits),
              reference.unreferenced(keys.keyAt, hits),
              "unreferenced",
            );
            cache.acquire(keys, hits);
            reference.acquire(keys.keyAt, hits);
            const needed = keys.count - hits + o.extra;
            const ok = cache.allocate(needed);
            assertEquals(ok, reference.allocate(needed), "allocate");
            if (!ok) {
              cache.release(keys, hits, 0);
              reference.release(keys.keyAt, hits, 0);
            } else live.push({ keys, held: hits, target: keys.count, priv: needed });
            same("admit");
          } else if (live.length === 0) continue;
          else if (o.kind === "publish") {
            // A chunk at a time, as the engine caches each scheduled chunk's full blocks.
            const r = live[o.index % live.length];
            if (r.held === r.target) continue;
            const to = r.held + 1 + o.upTo % (r.target - r.held);
            cache.publish(r.keys, r.held, to);
            reference.publish(r.keys.keyAt, r.held, to);
            r.priv -= to - r.held;
            r.held = to;
            same("publish");
          } else if (o.kind === "grow") {
            const r = live[o.index % live.length];
            const ok = cache.allocate(1);
            assertEquals(ok, reference.allocate(1), "grow");
            if (ok) r.priv++;
            same("grow");
          } else {
            const [r] = live.splice(o.index % live.length, 1);
            cache.release(r.keys, r.held, r.priv);
            reference.release(r.keys.keyAt, r.held, r.priv);
            same("finish");
          }
        }
      },
    ),
    { numRuns: 600 },
  );
});
