/**
 * The prefix cache keeps small capacities in a plain array and large ones in
 * mnemonist's LRU map: both must be the LRU map's exact order, operation by
 * operation, since the FIFO model's results depend on it.
 */
import { assertEquals } from "@std/assert";
import fc from "fast-check";
import { LRUMap } from "mnemonist";
import { NO_EVICTION, PrefixCache } from "../actors/kv_cache/prefix_cache.ts";

/** The reference: PrefixCache's rules written directly on an LRU map. */
class ReferenceCache {
  readonly #lru: LRUMap<number, boolean>;
  constructor(capacity: number) {
    this.#lru = new LRUMap<number, boolean>(capacity);
  }
  has = (group: number) => this.#lru.has(group);
  insert(group: number): number {
    if (this.#lru.has(group)) {
      this.#lru.get(group);
      return NO_EVICTION;
    }
    const popped = this.#lru.setpop(group, false);
    return popped !== null && popped.evicted ? popped.key : NO_EVICTION;
  }
  hitComputed = (group: number) => this.#lru.get(group) === true;
  markComputed(group: number): void {
    if (this.#lru.has(group)) this.#lru.set(group, true);
  }
  groups = () => [...this.#lru.keys()];
}

Deno.test("the prefix cache's LRU order is the LRU map's, at small and large capacities", () => {
  const op = fc.record({
    kind: fc.constantFrom("has", "insert", "hit", "mark"),
    group: fc.integer({ min: 0, max: 50 }),
  });
  fc.assert(
    fc.property(
      fc.constantFrom(1, 2, 3, 16, 32, 33, 48),
      fc.array(op, { maxLength: 400 }),
      (capacity, ops) => {
        const cache = new PrefixCache(capacity), reference = new ReferenceCache(capacity);
        for (const { kind, group } of ops) {
          switch (kind) {
            case "has":
              assertEquals(cache.has(group), reference.has(group));
              break;
            case "insert":
              assertEquals(cache.insert(group), reference.insert(group));
              break;
            case "hit":
              assertEquals(cache.hitComputed(group), reference.hitComputed(group));
              break;
            case "mark":
              cache.markComputed(group);
              reference.markComputed(group);
          }
          assertEquals(cache.groups(), reference.groups());
          assertEquals(cache.size, reference.groups().length);
        }
      },
    ),
    { numRuns: 200 },
  );
});

Deno.test("a cache of capacity 0 holds nothing", () => {
  const cache = new PrefixCache(0);
  assertEquals(cache.insert(1), NO_EVICTION);
  assertEquals([cache.has(1), cache.hitComputed(1), cache.size, cache.groups()], [false, false, 0, []]);
});
