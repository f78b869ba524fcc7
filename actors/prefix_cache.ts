/**
 * @module
 * An instance's prefix cache: which prefix groups it holds, with LRU eviction
 * at a fixed capacity (Mooncake-style explicit capacity management).
 */
import { LRUMap } from "mnemonist";

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
  readonly #lru: LRUMap<number, boolean> | undefined;

  constructor(capacity: number) {
    if (!(Number.isInteger(capacity) && capacity >= 0)) {
      throw new RangeError(`PrefixCache: capacity must be an integer >= 0, got ${capacity}`);
    }
    this.capacity = capacity;
    this.#lru = capacity > 0 ? new LRUMap<number, boolean>(capacity) : undefined;
  }

  /** Groups currently held. */
  get size(): number {
    return this.#lru?.size ?? 0;
  }

  /** Whether `group` is held (computed or not); does not touch recency. */
  has(group: number): boolean {
    return this.#lru?.has(group) ?? false;
  }

  /**
   * Inserts `group` as uncomputed, or marks it most recently used if held.
   * @returns the group evicted to make room, or {@linkcode NO_EVICTION}.
   */
  insert(group: number): number {
    const lru = this.#lru;
    if (lru === undefined) return NO_EVICTION;
    if (lru.has(group)) {
      lru.get(group);
      return NO_EVICTION;
    }
    const popped = lru.setpop(group, false);
    return popped !== null && popped.evicted ? popped.key : NO_EVICTION;
  }

  /** Whether `group` is held and computed; a hit marks it most recently used. */
  hitComputed(group: number): boolean {
    return this.#lru?.get(group) === true;
  }

  /** Marks a held `group` computed; does nothing if it was evicted meanwhile. */
  markComputed(group: number): void {
    const lru = this.#lru;
    if (lru !== undefined && lru.has(group)) lru.set(group, true);
  }

  /** The held groups, most recently used first. */
  groups(): number[] {
    return this.#lru === undefined ? [] : [...this.#lru.keys()];
  }
}
