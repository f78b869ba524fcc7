/**
 * @module
 * An instance's prefix cache: which prefix groups it holds, with LRU eviction
 * at a fixed capacity (Mooncake-style explicit capacity management).
 */
import { LRUMap } from "mnemonist";

/**
 * How many caches of a fleet hold each prefix group, kept by the caches
 * themselves ({@linkcode PrefixCache.countInto}): the god's-eye "is it held
 * anywhere" without asking every instance.
 */
export class GroupHolders {
  readonly #counts = new Map<number, number>();

  /** Whether any cache counted here holds `group`. */
  heldAnywhere(group: number): boolean {
    return (this.#counts.get(group) ?? 0) > 0;
  }

  /** A cache now holds `group` (`delta` 1) or no longer does (−1). */
  change(group: number, delta: number): void {
    const count = (this.#counts.get(group) ?? 0) + delta;
    if (count === 0) this.#counts.delete(group);
    else this.#counts.set(group, count);
  }
}

/** Returned by {@linkcode PrefixCache.insert} when nothing was evicted. */
export const NO_EVICTION = -1;

/**
 * An LRU set of prefix groups, each flagged `computed` once a prefill of that
 * prefix has finished here. A group is inserted (uncomputed) when a request
 * for it is accepted, because everything queued behind that request will find
 * it computed; a request only hits when the group is present and computed.
 *
 * A capacity of 0 disables caching: nothing is ever held.
 */
export class PrefixCache {
  readonly capacity: number;
  /** Capacities above {@linkcode SMALL_CAPACITY}: mnemonist's LRU map. */
  readonly #lru: LRUMap<number, boolean> | undefined;
  /** Small capacities: the held groups, most recently used first, and whether each is computed. */
  readonly #keys: Float64Array | undefined;
  readonly #computed: Uint8Array | undefined;
  #count = 0;
  #holders: GroupHolders | undefined;

  constructor(capacity: number) {
    if (!(Number.isInteger(capacity) && capacity >= 0)) {
      throw new RangeError(`PrefixCache: capacity must be an integer >= 0, got ${capacity}`);
    }
    this.capacity = capacity;
    if (capacity > SMALL_CAPACITY) this.#lru = new LRUMap<number, boolean>(capacity);
    else if (capacity > 0) {
      this.#keys = new Float64Array(capacity);
      this.#computed = new Uint8Array(capacity);
    }
  }

  /** From now on, counts every group this cache starts or stops holding in `holders` (it must be empty). */
  countInto(holders: GroupHolders): void {
    if (this.size > 0) throw new RangeError("PrefixCache.countInto: the cache must be empty");
    this.#holders = holders;
  }

  /** Groups currently held. */
  get size(): number {
    return this.#lru?.size ?? this.#count;
  }

  /** Whether `group` is held (computed or not); does not touch recency. */
  has(group: number): boolean {
    if (this.#keys !== undefined) return this.#find(group) >= 0;
    return this.#lru?.has(group) ?? false;
  }

  /**
   * Inserts `group` as uncomputed, or marks it most recently used if held.
   * @returns the group evicted to make room, or {@linkcode NO_EVICTION}.
   */
  insert(group: number): number {
    let evicted = NO_EVICTION;
    const keys = this.#keys, lru = this.#lru;
    if (keys !== undefined) {
      const at = this.#find(group);
      if (at >= 0) {
        this.#touch(at);
        return NO_EVICTION;
      }
      const computed = this.#computed!;
      if (this.#count === this.capacity) evicted = keys[--this.#count];
      keys.copyWithin(1, 0, this.#count);
      computed.copyWithin(1, 0, this.#count);
      keys[0] = group;
      computed[0] = 0;
      this.#count++;
    } else if (lru !== undefined) {
      if (lru.has(group)) {
        lru.get(group);
        return NO_EVICTION;
      }
      const popped = lru.setpop(group, false);
      if (popped !== null && popped.evicted) evicted = popped.key;
    } else return NO_EVICTION;
    const holders = this.#holders;
    if (holders !== undefined) {
      holders.change(group, 1);
      if (evicted !== NO_EVICTION) holders.change(evicted, -1);
    }
    return evicted;
  }

  /** Whether `group` is held and computed; a hit (computed or not) marks it most recently used. */
  hitComputed(group: number): boolean {
    if (this.#keys !== undefined) {
      const at = this.#find(group);
      if (at < 0) return false;
      this.#touch(at);
      return this.#computed![0] === 1;
    }
    return this.#lru?.get(group) === true;
  }

  /** Marks a held `group` computed (and most recently used); does nothing if it was evicted meanwhile. */
  markComputed(group: number): void {
    if (this.#keys !== undefined) {
      const at = this.#find(group);
      if (at < 0) return;
      this.#touch(at);
      this.#computed![0] = 1;
      return;
    }
    const lru = this.#lru;
    if (lru !== undefined && lru.has(group)) lru.set(group, true);
  }

  /** The held groups, most recently used first. */
  groups(): number[] {
    if (this.#keys !== undefined) return Array.from(this.#keys.subarray(0, this.#count));
    return this.#lru === undefined ? [] : [...this.#lru.keys()];
  }

  /** Where `group` is among the small cache's keys; -1 when absent. */
  #find(group: number): number {
    const keys = this.#keys!;
    for (let i = 0; i < this.#count; i++) if (keys[i] === group) return i;
    return -1;
  }

  /** Moves the small cache's entry `at` to the front (most recently used). */
  #touch(at: number): void {
    if (at === 0) return;
    const keys = this.#keys!, computed = this.#computed!;
    const key = keys[at], done = computed[at];
    keys.copyWithin(1, 0, at);
    computed.copyWithin(1, 0, at);
    keys[0] = key;
    computed[0] = done;
  }
}

/**
 * Up to this capacity a cache is a plain array searched from the most
 * recently used end (a FIFO instance holds 16 groups by default): a linear
 * scan of one or two cache lines beats a hash map's lookup and keeps a large
 * fleet's caches compact (design.md, "Decisions that do not scan the fleet").
 * The order is exactly the LRU map's, so results do not change.
 */
const SMALL_CAPACITY = 32;
