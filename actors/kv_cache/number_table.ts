/**
 * @module
 * A hash table from number keys to values that allocates nothing once it has
 * grown: open addressing with linear probing over typed arrays, deletion by
 * backward shift (no tombstones). The KV cache keeps one entry per cached run
 * and churns through millions of them in a long replay; a `Map` rebuilt its
 * table every few thousand deletions, and those tables, too big for the young
 * generation, were most of a 1,000,000-request replay's peak memory
 * (design.md, "Performance").
 */

const EMPTY = 0, FULL = 1;

/** Number keys (any finite double) to values. */
export class NumberTable<V> {
  #keys: Float64Array;
  #state: Uint8Array;
  #values: (V | undefined)[];
  #mask: number;
  #size = 0;

  constructor(initialCapacity = 1024) {
    let capacity = 16;
    while (capacity < initialCapacity * 2) capacity *= 2;
    this.#keys = new Float64Array(capacity);
    this.#state = new Uint8Array(capacity);
    this.#values = new Array(capacity).fill(undefined);
    this.#mask = capacity - 1;
  }

  /** Entries held. */
  get size(): number {
    return this.#size;
  }

  /** The value of `key`, or undefined. */
  get(key: number): V | undefined {
    const keys = this.#keys, state = this.#state, mask = this.#mask;
    for (let i = hash(key) & mask;; i = (i + 1) & mask) {
      if (state[i] === EMPTY) return undefined;
      if (keys[i] === key) return this.#values[i];
    }
  }

  /** Sets `key` to `value`. */
  set(key: number, value: V): void {
    if ((this.#size + 1) * 2 > this.#state.length) this.#grow();
    const keys = this.#keys, state = this.#state, mask = this.#mask;
    let i = hash(key) & mask;
    for (; state[i] === FULL; i = (i + 1) & mask) {
      if (keys[i] === key) {
        this.#values[i] = value;
        return;
      }
    }
    state[i] = FULL;
    keys[i] = key;
    this.#values[i] = value;
    this.#size++;
  }

  /** Removes `key`; returns whether it was there. */
  delete(key: number): boolean {
    const keys = this.#keys, state = this.#state, values = this.#values, mask = this.#mask;
    let i = hash(key) & mask;
    for (;; i = (i + 1) & mask) {
      if (state[i] === EMPTY) return false;
      if (keys[i] === key) break;
    }
    // Backward shift: pull later entries of the probe run into the hole.
    for (let j = (i + 1) & mask; state[j] === FULL; j = (j + 1) & mask) {
      const home = hash(keys[j]) & mask;
      // Entry j may move to i if its home is not in the cyclic range (i, j].
      if (i <= j ? home <= i || home > j : home <= i && home > j) {
        keys[i] = keys[j];
        values[i] = values[j];
        i = j;
      }
    }
    state[i] = EMPTY;
    values[i] = undefined;
    this.#size--;
    return true;
  }

  /** Removes every entry (keeping the table's size). */
  clear(): void {
    if (this.#size === 0) return;
    this.#state.fill(EMPTY);
    this.#values.fill(undefined);
    this.#size = 0;
  }

  /** Every entry as `[key, value]`, in no particular order. */
  *entries(): IterableIterator<[number, V]> {
    const keys = this.#keys, state = this.#state, values = this.#values;
    for (let i = 0; i < state.length; i++) if (state[i] === FULL) yield [keys[i], values[i]!];
  }

  /** Every value, in no particular order. */
  *values(): IterableIterator<V> {
    const state = this.#state, values = this.#values;
    for (let i = 0; i < state.length; i++) if (state[i] === FULL) yield values[i]!;
  }

  #grow(): void {
    const keys = this.#keys, state = this.#state, values = this.#values;
    const capacity = state.length * 2;
    this.#keys = new Float64Array(capacity);
    this.#state = new Uint8Array(capacity);
    this.#values = new Array(capacity).fill(undefined);
    this.#mask = capacity - 1;
    this.#size = 0;
    for (let i = 0; i < state.length; i++) if (state[i] === FULL) this.set(keys[i], values[i]!);
  }
}

/** A 32-bit mix of a double's integer part and high bits (keys are integers in practice). */
function hash(key: number): number {
  const low = key | 0, high = (key / 4294967296) | 0;
  let h = Math.imul(low ^ Math.imul(high, 0x27d4eb2d), 0x9e3779b1);
  h ^= h >>> 15;
  return Math.imul(h, 0x85ebca6b) ^ (h >>> 13);
}
