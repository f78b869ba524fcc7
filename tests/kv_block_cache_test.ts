import { assert, assertEquals } from "@std/assert";
import fc from "fast-check";
import { KvBlockCache } from "../actors/kv_block_cache.ts";

const chain = (base: number) => (i: number) => base + i;

Deno.test("kv cache: published blocks are found again, and evicted least recently used, tail first", () => {
  const cache = new KvBlockCache(6);
  const evicted: number[] = [];
  cache.onEvict = (key) => evicted.push(key);
  // Request A: 3 keyed blocks, computed and released.
  assert(cache.allocate(3));
  cache.publish(chain(100), 0, 3);
  cache.release(chain(100), 3, 0);
  assertEquals([cache.held, cache.evictable, cache.free], [0, 3, 3]);
  assertEquals(cache.matchPrefix(chain(100), 5), 3);
  // Request B needs 5 private blocks: two of A's are evicted, its last blocks first.
  assert(cache.allocate(5));
  assertEquals(evicted, [102, 101]);
  assertEquals(cache.matchPrefix(chain(100), 3), 1);
  assertEquals([cache.held, cache.evictable, cache.free], [5, 1, 0]);
  assertEquals(cache.allocate(2), false);
  assertEquals([cache.held, cache.evictable, cache.free], [5, 1, 0]);
});

Deno.test("kv cache: a shared prefix is held once and stays while any request references it", () => {
  const cache = new KvBlockCache(10);
  assert(cache.allocate(2));
  cache.publish(chain(7), 0, 2);
  cache.acquire(chain(7), 2); // a second request reuses both blocks
  assertEquals(cache.held, 2);
  cache.release(chain(7), 2, 0);
  assertEquals([cache.held, cache.evictable], [2, 0]);
  cache.release(chain(7), 2, 0);
  assertEquals([cache.held, cache.evictable], [0, 2]);
});

Deno.test("kv cache: publishing a key another request already cached frees the duplicate", () => {
  const cache = new KvBlockCache(10);
  assert(cache.allocate(2)); // two requests computed the same block concurrently
  cache.publish(chain(1), 0, 1);
  cache.publish(chain(1), 0, 1);
  assertEquals(cache.held, 1);
});

Deno.test("kv cache accounting never goes negative or above capacity (property)", () => {
  type Op = { kind: "admit"; base: number; blocks: number; extra: number } | {
    kind: "finish";
    index: number;
  };
  const op = fc.oneof(
    fc.record({
      kind: fc.constant("admit" as const),
      base: fc.integer({ min: 0, max: 3 }),
      blocks: fc.integer({ min: 1, max: 6 }),
      extra: fc.integer({ min: 0, max: 3 }),
    }),
    fc.record({ kind: fc.constant("finish" as const), index: fc.nat() }),
  );
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 20 }),
      fc.array(op as fc.Arbitrary<Op>, { maxLength: 200 }),
      (capacity, ops) => {
        const cache = new KvBlockCache(capacity);
        const live: { keyAt: (i: number) => number; keys: number; priv: number }[] = [];
        const check = () => {
          assert(
            cache.held >= 0 && cache.evictable >= 0 && cache.free >= 0,
            `held ${cache.held} evictable ${cache.evictable} free ${cache.free}`,
          );
          assertEquals(
            cache.held,
            live.reduce((a, r) => a + r.priv, 0) +
              new Set(live.flatMap((r) => [...Array(r.keys).keys()].map(r.keyAt))).size,
          );
        };
        for (const o of ops) {
          if (o.kind === "admit") {
            const keyAt = chain(o.base * 1000);
            const hits = cache.matchPrefix(keyAt, o.blocks);
            cache.acquire(keyAt, hits);
            const fresh = o.blocks - hits + o.extra;
            if (!cache.allocate(fresh)) {
              cache.release(keyAt, hits, 0);
            } else {
              cache.publish(keyAt, hits, o.blocks); // prefill done: keyed blocks become cached
              live.push({ keyAt, keys: o.blocks, priv: o.extra });
            }
          } else if (live.length > 0) {
            const [r] = live.splice(o.index % live.length, 1);
            cache.release(r.keyAt, r.keys, r.priv);
          }
          check();
        }
      },
    ),
    { numRuns: 300 },
  );
});
