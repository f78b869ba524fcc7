/**
 * @module
 * The reference for actors/kv_cache/kv_block_cache.ts: the block-by-block KV cache the
 * simulator used up to version 0.4 (one slot per 16-token block, one LRU entry
 * per block). The run-level cache must match it exactly — every hit, eviction
 * and preemption — and tests/kv_block_cache_test.ts checks that it does.
 */

const NIL = -1;

/**
 * Block accounting. Every block is in exactly one of three states: free,
 * held by running requests (private, or cached with a reference count > 0),
 * or cached and unreferenced (evictable, in LRU order). `free + held +
 * evictable = capacity` at all times.
 *
 * Cached blocks live in slots of typed arrays with an intrusive doubly
 * linked LRU list, because this is the batching model's hot path: a
 * `Map`-ordered LRU made eviction O(deleted entries) in V8 and a whole
 * Mooncake replay 300× slower (design.md, "Performance").
 */
export class ReferenceKvBlockCache {
  readonly capacity: number;
  readonly prefixCaching: boolean;
  /** Key → slot of every cached block. */
  readonly #slotOf = new Map<number, number>();
  #key = new Float64Array(1024);
  #refs = new Int32Array(1024);
  #prev = new Int32Array(1024);
  #next = new Int32Array(1024);
  #freeSlots: number[] = [];
  #used = 0;
  /** LRU list of evictable slots: head is the least recently used. */
  #head = NIL;
  #tail = NIL;
  #evictable = 0;
  #held = 0;
  /** Called with each evicted key. */
  onEvict: ((key: number) => void) | undefined;
  /** Called with each key that becomes cached. */
  onInsert: ((key: number) => void) | undefined;

  constructor(capacity: number, prefixCaching = true) {
    if (!(Number.isInteger(capacity) && capacity >= 1)) {
      throw new RangeError(`ReferenceKvBlockCache: capacity must be an integer >= 1, got ${capacity}`);
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
    return this.#evictable;
  }

  /** Blocks in no use at all. */
  get free(): number {
    return this.capacity - this.#held - this.#evictable;
  }

  /** Every cached key (held or evictable), in no particular order. */
  keys(): IterableIterator<number> {
    return this.#slotOf.keys();
  }

  /** Whether `key` is cached (held or evictable). */
  has(key: number): boolean {
    return this.#slotOf.has(key);
  }

  /**
   * How many of the first `limit` keys are cached, stopping at the first miss
   * (a block is only reusable when every block before it is).
   */
  matchPrefix(keyAt: (index: number) => number, limit: number): number {
    if (!this.prefixCaching) return 0;
    let n = 0;
    while (n < limit && this.#slotOf.has(keyAt(n))) n++;
    return n;
  }

  /** How many of the first `count` keys, which must be cached, no request references. */
  unreferenced(keyAt: (index: number) => number, count: number): number {
    let n = 0;
    for (let i = 0; i < count; i++) if (this.#refs[this.#slotOf.get(keyAt(i))!] === 0) n++;
    return n;
  }

  /** References the first `count` keys, which must be cached (see `matchPrefix`). */
  acquire(keyAt: (index: number) => number, count: number): void {
    for (let i = 0; i < count; i++) this.#reference(this.#slotOf.get(keyAt(i))!);
  }

  /**
   * Takes `count` blocks for private use, evicting least recently used
   * cached blocks if needed. Returns false, changing nothing, if even
   * evicting everything evictable would not make room.
   */
  allocate(count: number): boolean {
    if (count > this.free + this.#evictable) return false;
    while (this.free < count) {
      const slot = this.#head;
      const key = this.#key[slot];
      this.#unlink(slot);
      this.#evictable--;
      this.#slotOf.delete(key);
      this.#freeSlots.push(slot);
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
      const slot = this.#slotOf.get(key);
      if (slot === undefined) {
        const fresh = this.#newSlot(key); // the private block becomes a cached one: still held
        this.#refs[fresh] = 1;
        this.onInsert?.(key);
        continue;
      }
      this.#reference(slot);
      this.#held--; // the now-duplicate private block is freed
    }
  }

  /**
   * Releases a request's blocks: drops its reference on keys `0..keys−1`
   * (tail first, so a prefix's last blocks are evicted before its first) and
   * frees `privateBlocks`.
   */
  release(keyAt: (index: number) => number, keys: number, privateBlocks: number): void {
    const refs = this.#refs;
    for (let i = keys - 1; i >= 0; i--) {
      const slot = this.#slotOf.get(keyAt(i))!;
      if (--refs[slot] === 0) {
        this.#held--;
        this.#evictable++;
        this.#append(slot);
      }
    }
    this.#held -= privateBlocks;
  }

  #reference(slot: number): void {
    if (this.#refs[slot]++ === 0) {
      this.#unlink(slot);
      this.#evictable--;
      this.#held++;
    }
  }

  #newSlot(key: number): number {
    let slot = this.#freeSlots.pop();
    if (slot === undefined) {
      slot = this.#used++;
      if (slot === this.#key.length) this.#grow();
    }
    this.#key[slot] = key;
    this.#prev[slot] = NIL;
    this.#next[slot] = NIL;
    this.#slotOf.set(key, slot);
    return slot;
  }

  #grow(): void {
    const size = this.#key.length * 2;
    const grow = <T extends Float64Array | Int32Array>(a: T, make: (n: number) => T): T => {
      const b = make(size);
      b.set(a);
      return b;
    };
    this.#key = grow(this.#key, (n) => new Float64Array(n));
    this.#refs = grow(this.#refs, (n) => new Int32Array(n));
    this.#prev = grow(this.#prev, (n) => new Int32Array(n));
    this.#next = grow(this.#next, (n) => new Int32Array(n));
  }

  #append(slot: number): void {
    this.#prev[slot] = this.#tail;
    this.#next[slot] = NIL;
    if (this.#tail === NIL) this.#head = slot;
    else this.#next[this.#tail] = slot;
    this.#tail = slot;
  }

  #unlink(slot: number): void {
    const p = this.#prev[slot], n = this.#next[slot];
    if (p === NIL) this.#head = n;
    else this.#next[p] = n;
    if (n === NIL) this.#tail = p;
    else this.#prev[n] = p;
    this.#prev[slot] = NIL;
    this.#next[slot] = NIL;
  }
}
