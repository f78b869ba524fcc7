/**
 * @module
 * An instance's host-memory (CPU) KV tier: blocks the GPU cache evicts are
 * demoted here instead of lost, and a later request can promote them back
 * instead of recomputing them (issue 13, LMCache/vLLM-style CPU offload).
 *
 * Like the GPU cache (kv_block_cache.ts) it counts blocks per *run* of keys
 * (prefix_keys.ts): one record per run, and one LRU-list entry per range of
 * a run's blocks demoted together, so a demotion or promotion costs O(the
 * ranges it touches), not O(its blocks).
 */
import { NumberTable } from "./number_table.ts";
import type { BlockKeys } from "./prefix_keys.ts";

/**
 * Host blocks `[lo, hi)` of one run that were demoted together: one entry of
 * the LRU list. Evicted from `hi` down.
 */
interface Segment {
  run: RunRecord;
  lo: number;
  hi: number;
  /** Neighbours in the LRU list (`prev` is older). */
  prev: Segment | null;
  next: Segment | null;
  /** Neighbours in the run's list, by block index (`lower` is newer). */
  lower: Segment | null;
  upper: Segment | null;
}

/**
 * One run key: its cached length on the GPU, as the last `gpuChanged` said,
 * and its host segments, disjoint, from `lowest` up by block index. Every
 * host block lies at or above `gpu`, and a run's lower segments are newer:
 * a demotion adds blocks just below the run's host blocks (the GPU gave up
 * its tail, which sits right under them), and removals and evictions keep
 * the order. So the LRU list meets a run's segments highest first, and
 * evicting from its head takes a run's tail before its head.
 */
interface RunRecord {
  key: number;
  gpu: number;
  lowest: Segment | null;
}

/**
 * A host-memory tier of `capacity` KV blocks beside one instance's GPU cache.
 *
 * Invariants, after every call: the tier holds no block the GPU holds
 * (block `(k, i)` only if `i >=` the GPU's cached length of run `k`); it
 * holds at most `capacity` blocks; and it evicts least recently demoted
 * blocks first, a run's higher blocks before its lower ones.
 *
 * @example Wiring it to an instance's GPU cache
 * ```ts
 * import { KvBlockCache } from "./kv_block_cache.ts";
 * const cache = new KvBlockCache(1024), tier = new HostKvTier(4096);
 * cache.onRunChange = (key, cachedBlocks) => tier.gpuChanged(key, cachedBlocks);
 * // Admission: GPU hits, then host hits after them, promoted at once.
 * // const hits = cache.matchPrefix(keys, limit);
 * // const promoted = tier.match(keys, hits, limit);
 * // tier.take(keys, hits, promoted);
 * ```
 */
export class HostKvTier {
  /** Blocks the tier can hold. */
  readonly capacity: number;
  readonly #runs = new NumberTable<RunRecord>();
  /** LRU list of segments: head is the least recently demoted. */
  #head: Segment | null = null;
  #tail: Segment | null = null;
  #held = 0;
  /** Records and segments are recycled, as the GPU cache's are (long-lived garbage costs peak memory). */
  readonly #spareRuns: RunRecord[] = [];
  readonly #spareSegments: Segment[] = [];

  /**
   * An empty tier.
   * @param capacity Host blocks, an integer >= 1.
   */
  constructor(capacity: number) {
    if (!(Number.isInteger(capacity) && capacity >= 1)) {
      throw new RangeError(`HostKvTier: capacity must be an integer >= 1, got ${capacity}`);
    }
    this.capacity = capacity;
  }

  /** Blocks held (at most `capacity`). */
  get held(): number {
    return this.#held;
  }

  /**
   * Tells the tier that the GPU's cached length of run `key` is now
   * `cachedBlocks` (the GPU cache's `onRunChange`). Dropping from `old`
   * demotes blocks `cachedBlocks..old−1` as the most recently used, evicting
   * the least recently used host blocks beyond `capacity`; growing from
   * `old` removes any host copies of blocks `old..cachedBlocks−1`.
   */
  gpuChanged(key: number, cachedBlocks: number): void {
    let run = this.#runs.get(key);
    const old = run?.gpu ?? 0;
    if (cachedBlocks === old) return;
    if (run === undefined) {
      run = this.#spareRuns.pop() ?? { key, gpu: 0, lowest: null };
      run.key = key;
      this.#runs.set(key, run);
    }
    run.gpu = cachedBlocks;
    if (cachedBlocks > old) {
      this.#remove(run, old, cachedBlocks);
      this.#dropIfIdle(run);
    } else this.#demote(run, cachedBlocks, old);
  }

  /**
   * How many consecutive keyed blocks from block `from` (a request's block
   * index: the GPU matched blocks `0..from−1`) up to block `limit`
   * (exclusive) the tier holds, stopping at the first it does not. Changes
   * nothing, recency included.
   */
  match(keys: BlockKeys, from: number, limit: number): number {
    const per = keys.runBlocks;
    if (limit > keys.count) limit = keys.count;
    let n = 0;
    for (let r = Math.floor(from / per), start = r * per; from + n < limit; r++, start += per) {
      const p = from + n - start, want = Math.min(per, limit - start);
      const run = this.#runs.get(keys.runKey(r));
      let s = run === undefined ? null : run.lowest;
      while (s !== null && s.hi <= p) s = s.upper;
      if (s === null || s.lo > p) return n;
      let end = s.hi;
      for (s = s.upper; end < want && s !== null && s.lo === end; s = s.upper) end = s.hi;
      if (end < want) return n + end - p;
      n += want - p;
    }
    return n;
  }

  /**
   * Removes keyed blocks `from..from+count−1` (a promotion: the engine loads
   * them into private GPU blocks and publishes them later, when the GPU
   * cache's `onRunChange` arrives here and finds nothing left to remove).
   * Blocks the tier does not hold are skipped.
   */
  take(keys: BlockKeys, from: number, count: number): void {
    const per = keys.runBlocks, to = Math.min(from + count, keys.count);
    for (let r = Math.floor(from / per), start = r * per; start < to; r++, start += per) {
      const run = this.#runs.get(keys.runKey(r));
      if (run === undefined) continue;
      this.#remove(run, Math.max(0, from - start), Math.min(per, to - start));
      this.#dropIfIdle(run);
    }
  }

  /** Every held block as `[runKey, blockIndex]`, in eviction order (the next one evicted first). */
  *blocks(): IterableIterator<[number, number]> {
    for (let s = this.#head; s !== null; s = s.next) {
      for (let i = s.hi - 1; i >= s.lo; i--) yield [s.run.key, i];
    }
  }

  /** Adds blocks `[lo, hi)` of `run`, just below its host blocks, as the most recently used. */
  #demote(run: RunRecord, lo: number, hi: number): void {
    this.#held += hi - lo;
    const lowest = run.lowest;
    // Right after the same run's last demotion, one segment evicts exactly as the two would.
    if (lowest !== null && lowest === this.#tail && lowest.lo === hi) lowest.lo = lo;
    else {
      const s = this.#spareSegments.pop() ??
        { run, lo: 0, hi: 0, prev: null, next: null, lower: null, upper: null };
      s.run = run;
      s.lo = lo;
      s.hi = hi;
      this.#linkAfter(s, this.#tail);
      s.upper = lowest;
      if (lowest !== null) lowest.lower = s;
      run.lowest = s;
    }
    if (this.#held > this.capacity) this.#evict(this.#held - this.capacity);
  }

  /** Removes whatever `run` holds of blocks `[a, b)`, splitting a segment that straddles the range. */
  #remove(run: RunRecord, a: number, b: number): void {
    if (a >= b) return;
    for (let s = run.lowest; s !== null && s.lo < b;) {
      const upper = s.upper;
      if (s.hi <= a) {
        s = upper;
        continue;
      }
      if (s.lo < a && s.hi > b) {
        // Blocks [b, hi) keep the segment's recency, and are evicted before [lo, a).
        const t = this.#spareSegments.pop() ??
          { run, lo: 0, hi: 0, prev: null, next: null, lower: null, upper: null };
        t.run = run;
        t.lo = b;
        t.hi = s.hi;
        this.#linkAfter(t, s.prev);
        t.lower = s;
        t.upper = upper;
        s.upper = t;
        if (upper !== null) upper.lower = t;
        s.hi = a;
        this.#held -= b - a;
        return;
      }
      if (s.lo < a) {
        this.#held -= s.hi - a;
        s.hi = a;
      } else if (s.hi > b) {
        this.#held -= b - s.lo;
        s.lo = b;
      } else {
        this.#held -= s.hi - s.lo;
        this.#discard(s);
      }
      s = upper;
    }
  }

  /** Evicts `count` blocks from the LRU head: each from the top of its (run's highest) segment. */
  #evict(count: number): void {
    while (count > 0) {
      const s = this.#head!;
      const take = Math.min(count, s.hi - s.lo);
      count -= take;
      s.hi -= take;
      this.#held -= take;
      if (s.hi === s.lo) {
        const run = s.run;
        this.#discard(s);
        this.#dropIfIdle(run);
      }
    }
  }

  /** Forgets `run` once the GPU and the tier both hold none of it. */
  #dropIfIdle(run: RunRecord): void {
    if (run.gpu > 0 || run.lowest !== null) return;
    this.#runs.delete(run.key);
    this.#spareRuns.push(run);
  }

  /** Puts `s` into the LRU list right after `prev` (at the head when null). */
  #linkAfter(s: Segment, prev: Segment | null): void {
    const next = prev === null ? this.#head : prev.next;
    s.prev = prev;
    s.next = next;
    if (prev === null) this.#head = s;
    else prev.next = s;
    if (next === null) this.#tail = s;
    else next.prev = s;
  }

  /** Unlinks `s` from the LRU list and its run's list, and recycles it. */
  #discard(s: Segment): void {
    if (s.prev === null) this.#head = s.next;
    else s.prev.next = s.next;
    if (s.next === null) this.#tail = s.prev;
    else s.next.prev = s.prev;
    if (s.lower === null) s.run.lowest = s.upper;
    else s.lower.upper = s.upper;
    if (s.upper !== null) s.upper.lower = s.lower;
    s.prev =
      s.next =
      s.lower =
      s.upper =
        null;
    this.#spareSegments.push(s);
  }
}
