/**
 * @module
 * An instance's KV cache in blocks, with prefix caching by block key (vLLM's
 * automatic prefix caching): blocks of finished prefills stay cached while
 * memory allows; blocks no running request references are evicted least
 * recently used first, a prefix's last blocks before its first.
 *
 * The cache counts blocks per *run* of keys (see prefix_keys.ts): one node
 * per run holds how many of the run's leading blocks are cached, who
 * references how many, and where its evictable blocks sit in the LRU list.
 * It behaves exactly as a cache with one entry per block — the same hits,
 * evictions (in the same order) and allocation failures; a property test
 * holds it to the block-by-block reference — at a cost per request of its
 * runs, not its blocks (design.md, "Block runs").
 */
import { NumberTable } from "./number_table.ts";
import { type BlockKeys, type CachedRuns, leadingCachedBlocks } from "./prefix_keys.ts";

/**
 * Blocks `[lo, hi)` of one run that became evictable together: one entry of
 * the LRU list. Evicted from `hi` down; re-referenced from `lo` up.
 */
interface Segment {
  node: RunNode;
  lo: number;
  hi: number;
  /** Neighbours in the LRU list. */
  prev: Segment | null;
  next: Segment | null;
  /** The node's next newer segment (lower range), or null. */
  newer: Segment | null;
  /** The node's next older segment (higher range), or null. */
  older: Segment | null;
}

/**
 * One run key's blocks. Blocks `[0, cached)` are cached. Every reference
 * covers a prefix `[0, e)` of the run, so block j's reference count is the
 * number of references with extent > j: non-increasing in j. Blocks
 * `[0, held)` are referenced (held = the largest extent); `[held, cached)`
 * are evictable, in `segments` (oldest first = highest blocks first), and
 * they are contiguous: the newest segment starts at `held`.
 */
interface RunNode {
  key: number;
  cached: number;
  /**
   * Distinct reference extents and their counts: `pairs` of them, the first
   * two inline (`e0`/`n0`, `e1`/`n1`: most runs never have more), the rest
   * as flat pairs `[extent, count, …]` in `more` (created when first needed
   * and never shrunk, so references allocate nothing once it has grown). An
   * array per node, as before, held a 17-slot backing store for its one or
   * two pairs: a third of a 64-instance replay's live heap.
   */
  pairs: number;
  e0: number;
  n0: number;
  e1: number;
  n1: number;
  more: number[] | null;
  /** The largest extent: blocks referenced. */
  held: number;
  /** The node's oldest LRU segment (highest range), then `newer` ones down to `newest`. */
  oldest: Segment | null;
  newest: Segment | null;
}

/**
 * Block accounting. Every block is in exactly one of three states: free,
 * held by running requests (private, or cached with a reference count > 0),
 * or cached and unreferenced (evictable, in LRU order). `free + held +
 * evictable = capacity` at all times.
 */
export class KvBlockCache implements CachedRuns {
  readonly capacity: number;
  readonly prefixCaching: boolean;
  readonly #nodes = new NumberTable<RunNode>();
  /** LRU list of evictable segments: head is the least recently used. */
  #head: Segment | null = null;
  #tail: Segment | null = null;
  #evictable = 0;
  #held = 0;
  /**
   * Nodes and segments are recycled: they live for minutes of simulated
   * time, so fresh ones would all be promoted and die in the old generation,
   * which grew a long replay's peak memory by half.
   */
  readonly #spareNodes: RunNode[] = [];
  readonly #spareSegments: Segment[] = [];
  /** Called whenever a run's cached length changes (0: the run left the cache). */
  onRunChange: ((key: number, cachedBlocks: number) => void) | undefined;

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
    return this.#evictable;
  }

  /** Blocks in no use at all. */
  get free(): number {
    return this.capacity - this.#held - this.#evictable;
  }

  /** Leading blocks of run `key` that are cached (0 when none). */
  cachedBlocks(key: number): number {
    return this.#nodes.get(key)?.cached ?? 0;
  }

  /** Every cached run as `[key, cachedBlocks]`, in no particular order. */
  *runs(): IterableIterator<[number, number]> {
    for (const node of this.#nodes.values()) yield [node.key, node.cached];
  }

  /**
   * How many of the first `limit` keyed blocks are cached, stopping at the
   * first miss (a block is only reusable when every block before it is).
   */
  matchPrefix(keys: BlockKeys, limit: number): number {
    return this.prefixCaching ? leadingCachedBlocks(keys, limit, this) : 0;
  }

  /**
   * How many of the first `count` keyed blocks, which must be cached (see
   * `matchPrefix`), no request references: referencing them takes them off
   * the evictable list, so an admission needs room for them as well as for
   * its new blocks (vLLM's `get_num_blocks_to_allocate` counts such
   * "evictable computed blocks" the same way).
   */
  unreferenced(keys: BlockKeys, count: number): number {
    const per = keys.runBlocks;
    let blocks = 0;
    for (let r = 0, start = 0; start < count; r++, start += per) {
      blocks += Math.max(0, Math.min(per, count - start) - this.#nodes.get(keys.runKey(r))!.held);
    }
    return blocks;
  }

  /** References the first `count` keyed blocks, which must be cached (see `matchPrefix`). */
  acquire(keys: BlockKeys, count: number): void {
    const per = keys.runBlocks;
    for (let r = 0, start = 0; start < count; r++, start += per) {
      this.#reference(this.#nodes.get(keys.runKey(r))!, Math.min(per, count - start));
    }
  }

  /**
   * Takes `count` blocks for private use, evicting least recently used
   * cached blocks if needed. Returns false, changing nothing, if even
   * evicting everything evictable would not make room.
   */
  allocate(count: number): boolean {
    if (count > this.free + this.#evictable) return false;
    if (this.free < count) this.#evict(count - this.free);
    this.#held += count;
    return true;
  }

  /**
   * Turns private blocks holding computed keyed blocks `from..to−1` into
   * cached blocks referenced once by their owner, which already references
   * `0..from−1`. A block someone else cached in the meantime is referenced
   * instead, and the duplicate private block freed. Only called with prefix
   * caching on.
   */
  publish(keys: BlockKeys, from: number, to: number): void {
    const per = keys.runBlocks;
    for (let r = Math.floor(from / per), start = r * per; start < to; r++, start += per) {
      const a = Math.max(0, from - start), b = Math.min(per, to - start);
      const key = keys.runKey(r);
      let node = this.#nodes.get(key);
      if (node === undefined) {
        node = this.#spareNodes.pop() ??
          {
            key,
            cached: 0,
            pairs: 0,
            e0: 0,
            n0: 0,
            e1: 0,
            n1: 0,
            more: null,
            held: 0,
            oldest: null,
            newest: null,
          };
        node.key = key;
        this.#nodes.set(key, node);
      }
      const held = node.held, cached = node.cached;
      // Evictable blocks [held, min(b, cached)) leave the LRU list; `#reference`
      // counts [held, b) as newly held. But a block that was evictable is
      // held now and its duplicate private block freed (no change), a fresh
      // block was a private one already (no change), and of a block others
      // hold, [a, min(held, b)), only the duplicate is freed.
      this.#reference(node, b);
      this.#held -= Math.max(0, b - held) + Math.max(0, Math.min(held, b) - a);
      if (a > 0) this.#removeExtent(node, a);
      if (b > cached) {
        node.cached = b;
        this.onRunChange?.(key, b);
      }
    }
  }

  /**
   * Releases a request's blocks: drops its reference on keyed blocks
   * `0..count−1` (tail first, so a prefix's last blocks are evicted before
   * its first) and frees `privateBlocks`.
   */
  release(keys: BlockKeys, count: number, privateBlocks: number): void {
    const per = keys.runBlocks;
    for (let r = Math.ceil(count / per) - 1; r >= 0; r--) {
      const node = this.#nodes.get(keys.runKey(r))!;
      const before = node.held;
      this.#removeExtent(node, Math.min(per, count - r * per));
      if (node.held < before) {
        const freed = before - node.held;
        this.#held -= freed;
        this.#evictable += freed;
        const segment = this.#spareSegments.pop() ??
          { node, lo: 0, hi: 0, prev: null, next: null, newer: null, older: null };
        segment.node = node;
        segment.lo = node.held;
        segment.hi = before;
        segment.prev = this.#tail;
        if (this.#tail === null) this.#head = segment;
        else this.#tail.next = segment;
        this.#tail = segment;
        segment.older = node.newest;
        if (node.newest === null) node.oldest = segment;
        else node.newest.newer = segment;
        node.newest = segment;
      }
    }
    this.#held -= privateBlocks;
  }

  /**
   * How many of the next `limit` evictions can happen before one would take
   * the last cached block of a run whose key `keep` has: the evictions are
   * walked from the LRU head, and nothing is evicted. For planning ahead.
   */
  evictionsKeeping(limit: number, keep: { has(key: number): boolean }): number {
    let done = 0;
    for (let s = this.#head; s !== null && done < limit; s = s.next) {
      const size = s.hi - s.lo, take = Math.min(limit - done, size);
      // A run leaves the cache when its newest segment, starting at block 0,
      // goes whole (its older segments are older in the list: gone before).
      const node = s.node;
      if (take === size && s === node.newest && s.lo === 0 && keep.has(node.key)) return done + take - 1;
      done += take;
    }
    return done;
  }

  /** Adds a reference to blocks `[0, extent)` of `node`. */
  #reference(node: RunNode, extent: number): void {
    const pairs = node.pairs;
    if (pairs > 0 && node.e0 === extent) node.n0++;
    else if (pairs > 1 && node.e1 === extent) node.n1++;
    else {
      const more = node.more, end = 2 * (pairs - 2);
      let i = 0;
      while (i < end && more![i] !== extent) i += 2;
      if (i < end) more![i + 1]++;
      else {
        if (pairs === 0) {
          node.e0 = extent;
          node.n0 = 1;
        } else if (pairs === 1) {
          node.e1 = extent;
          node.n1 = 1;
        } else {
          const grown = node.more ??= [];
          grown[end] = extent;
          grown[end + 1] = 1;
        }
        node.pairs++;
      }
    }
    if (extent <= node.held) return;
    // Blocks [held, extent) leave the LRU list: the newest segments, lowest ranges first.
    for (let s = node.newest; s !== null && s.lo < extent; s = node.newest) {
      if (s.hi > extent) {
        this.#evictable -= extent - s.lo;
        s.lo = extent;
        break;
      }
      this.#evictable -= s.hi - s.lo;
      this.#unlink(s);
      node.newest = s.older;
      if (node.newest === null) node.oldest = null;
      else node.newest.newer = null;
      this.#recycle(s);
    }
    this.#held += extent - node.held;
    node.held = extent;
  }

  /** Drops one reference of extent `extent` from `node`, updating `node.held`. */
  #removeExtent(node: RunNode, extent: number): void {
    const more = node.more;
    // Its slot: 0 or 1 inline, else 2 + i / 2 for `more[i]`.
    let slot = node.e0 === extent ? 0 : node.pairs > 1 && node.e1 === extent ? 1 : 2, i = 0;
    if (slot === 2) {
      while (more![i] !== extent) i += 2;
      slot += i / 2;
    }
    if (slot === 0 ? --node.n0 > 0 : slot === 1 ? --node.n1 > 0 : --more![i + 1] > 0) return;
    // The last pair takes its slot.
    const last = --node.pairs;
    if (slot !== last) {
      const m = 2 * (last - 2);
      const lastExtent = last === 1 ? node.e1 : more![m], lastCount = last === 1 ? node.n1 : more![m + 1];
      if (slot === 0) {
        node.e0 = lastExtent;
        node.n0 = lastCount;
      } else if (slot === 1) {
        node.e1 = lastExtent;
        node.n1 = lastCount;
      } else {
        more![i] = lastExtent;
        more![i + 1] = lastCount;
      }
    }
    if (extent < node.held) return;
    const pairs = node.pairs;
    let held = pairs > 0 ? node.e0 : 0;
    if (pairs > 1 && node.e1 > held) held = node.e1;
    for (let j = 0, end = 2 * (pairs - 2); j < end; j += 2) if (more![j] > held) held = more![j];
    node.held = held;
  }

  /** Evicts `count` blocks from the LRU head. */
  #evict(count: number): void {
    while (count > 0) {
      const s = this.#head!;
      const node = s.node;
      const take = Math.min(count, s.hi - s.lo);
      count -= take;
      s.hi -= take;
      node.cached -= take;
      this.#evictable -= take;
      if (s.hi === s.lo) {
        this.#unlink(s);
        node.oldest = s.newer;
        if (node.oldest === null) node.newest = null;
        else node.oldest.older = null;
        this.#recycle(s);
      }
      const key = node.key, cached = node.cached;
      if (cached === 0) {
        this.#nodes.delete(key);
        this.#spareNodes.push(node);
      }
      this.onRunChange?.(key, cached);
    }
  }

  #recycle(s: Segment): void {
    s.newer = s.older = null;
    this.#spareSegments.push(s);
  }

  #unlink(s: Segment): void {
    if (s.prev === null) this.#head = s.next;
    else s.prev.next = s.next;
    if (s.next === null) this.#tail = s.prev;
    else s.next.prev = s.prev;
    s.prev = s.next = null;
  }
}
