/**
 * @module
 * An instance's KV cache in blocks, with prefix caching by block key (vLLM's
 * automatic prefix caching): blocks of finished prefills stay cached while
 * memory allows; blocks no running request references are evicted least
 * recently used first.
 */

/**
 * Block accounting. Every block is in exactly one of three states: free,
 * held by running requests (private, or cached with a reference count > 0),
 * or cached and unreferenced (evictable, in LRU order). `free + held +
 * evictable = capacity` at all times.
 */
export class KvBlockCache {
  readonly capacity: number;
  readonly prefixCaching: boolean;
  /** Cached blocks by key → reference count (0 = evictable). */
  readonly #cached = new Map<number, number>();
  /** Evictable keys, least recently used first (a Map keeps insertion order). */
  readonly #evictable = new Map<number, true>();
  #held = 0;
  /** Called with each evicted key. */
  onEvict: ((key: number) => void) | undefined;

  constructor(capacity: number, prefixCaching = true) {
    if (!(Number.isInteger(capacity) && capacity >= 1)) {
      throw new RangeError(`KvBlockCache: capacity must be an integer >= 1, got ${capacity}`);
    }
    this.capacity = capacity;
    this.prefixCaching = prefixCaching;
  }

  /** Blocks held by running requests. */
  get held(): number {
    return this.#held;
  }

  /** Cached blocks no running request uses. */
  get evictable(): number {
    return this.#evictable.size;
  }

  /** Blocks in no use at all. */
  get free(): number {
    return this.capacity - this.#held - this.#evictable.size;
  }

  /** Whether `key` is cached (held or evictable). */
  has(key: number): boolean {
    return this.#cached.has(key);
  }

  /**
   * How many of the first `limit` keys are cached, stopping at the first miss
   * (a block is only reusable when every block before it is).
   */
  matchPrefix(keyAt: (index: number) => number, limit: number): number {
    if (!this.prefixCaching) return 0;
    let n = 0;
    while (n < limit && this.#cached.has(keyAt(n))) n++;
    return n;
  }

  /** References the first `count` keys, which must be cached (see `matchPrefix`). */
  acquire(keyAt: (index: number) => number, count: number): void {
    for (let i = 0; i < count; i++) {
      const key = keyAt(i);
      const refs = this.#cached.get(key)!;
      if (refs === 0) {
        this.#evictable.delete(key);
        this.#held++;
      }
      this.#cached.set(key, refs + 1);
    }
  }

  /**
   * Takes `count` blocks for private use, evicting least recently used
   * cached blocks if needed. Returns false, changing nothing, if even
   * evicting everything evictable would not make room.
   */
  allocate(count: number): boolean {
    if (count > this.free + this.#evictable.size) return false;
    while (this.free < count) {
      const key = this.#evictable.keys().next().value as number;
      this.#evictable.delete(key);
      this.#cached.delete(key);
      this.onEvict?.(key);
    }
    this.#held += count;
    return true;
  }

  /**
   * Turns private blocks holding computed keys `from..to−1` into cached
   * blocks referenced once by their owner. A key someone else cached in the
   * meantime is referenced instead, and the duplicate block freed. Only
   * called with prefix caching on.
   */
  publish(keyAt: (index: number) => number, from: number, to: number): void {
    for (let i = from; i < to; i++) {
      const key = keyAt(i);
      const refs = this.#cached.get(key);
      if (refs === undefined) {
        this.#cached.set(key, 1); // the private block becomes a cached one: still held
        continue;
      }
      if (refs === 0) {
        this.#evictable.delete(key);
        this.#held++;
      }
      this.#cached.set(key, refs + 1);
      this.#held--; // the now-duplicate private block is freed
    }
  }

  /**
   * Releases a request's blocks: drops its reference on keys `0..keys−1`
   * (tail first, so a prefix's last blocks are evicted before its first) and
   * frees `privateBlocks`.
   */
  release(keyAt: (index: number) => number, keys: number, privateBlocks: number): void {
    for (let i = keys - 1; i >= 0; i--) {
      const key = keyAt(i);
      const refs = this.#cached.get(key)! - 1;
      this.#cached.set(key, refs);
      if (refs === 0) {
        this.#held--;
        this.#evictable.set(key, true);
      }
    }
    this.#held -= privateBlocks;
  }
}
