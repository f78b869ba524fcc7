/**
 * @module
 * What the router believes each instance has cached. *Exact*: built from the
 * instances' own cache events (groups, and block keys for the batching
 * model). *Approximate*: a router-side index updated when the router routes a
 * request (as SGLang's radix tree, llm-d's block index and vLLM
 * production-stack's trie are), with its own capacity and LRU eviction.
 */
import { LRUMap } from "mnemonist";
import { KvBlockCache } from "./kv_block_cache.ts";
import { NumberTable } from "./number_table.ts";
import { type BlockKeys, type CachedRuns, leadingCachedBlocks } from "./prefix_keys.ts";
import type { InstanceStatus, Request } from "./protocol.ts";

/** The router's belief about instance caches. */
export interface CacheView {
  /** Whether `instance` is believed to hold prefix `group`. */
  holds(instance: number, group: number): boolean;
  /** Leading keyed blocks of the request believed cached at `instance`. */
  matchedBlocks(instance: number, request: Request, keys: BlockKeys): number;
  /** Whether `routed` must be called (only the approximate view learns from routing). */
  readonly learnsFromRouting: boolean;
  /** The router sent `request` to `instance`. */
  routed(instance: number, request: Request, keys: BlockKeys): void;
  /** An instance reported. */
  apply(status: InstanceStatus): void;
}

/** Options for {@linkcode createCacheView}. */
export interface CacheViewOptions {
  /** `exact` (from instance events) or `approximate` (router-side index). */
  readonly kind: "exact" | "approximate";
  /** `groups`: the FIFO model caches whole prefix groups; `blocks`: the batching model caches blocks. */
  readonly unit: "groups" | "blocks";
  /** Approximate view: entries per instance (groups or blocks). */
  readonly capacity: number;
}

/** Builds the cache view a scenario asks for. */
export function createCacheView(instanceCount: number, options: CacheViewOptions): CacheView {
  return options.kind === "exact"
    ? new ExactCacheView(instanceCount, options.unit)
    : new ApproximateCacheView(instanceCount, options.unit, options.capacity);
}

/** An instance's cached runs as its reports tell them: run key → leading blocks cached. */
class ReportedRuns extends NumberTable<number> implements CachedRuns {
  cachedBlocks(runKey: number): number {
    return this.get(runKey) ?? 0;
  }
}

/** From the instances' reports: groups advertised, and block runs cached (batching). */
export class ExactCacheView implements CacheView {
  readonly learnsFromRouting = false;
  readonly #groups: Set<number>[];
  /** Per instance: run key → leading blocks cached. */
  readonly #runs: ReportedRuns[];
  readonly #unit: "groups" | "blocks";

  constructor(instanceCount: number, unit: "groups" | "blocks") {
    this.#unit = unit;
    this.#groups = Array.from({ length: instanceCount }, () => new Set<number>());
    this.#runs = unit === "blocks" ? Array.from({ length: instanceCount }, () => new ReportedRuns()) : [];
  }

  holds(instance: number, group: number): boolean {
    return this.#groups[instance].has(group);
  }

  matchedBlocks(instance: number, request: Request, keys: BlockKeys): number {
    if (this.#unit === "groups") {
      return request.prefixGroup >= 0 && this.holds(instance, request.prefixGroup) ? keys.count : 0;
    }
    return leadingCachedBlocks(keys, keys.count, this.#runs[instance]);
  }

  routed(): void {}

  /** The block runs the router believes `instance` caches: run key → leading blocks cached. */
  runsOf(instance: number): Map<number, number> {
    return new Map(this.#runs[instance]?.entries());
  }

  apply(status: InstanceStatus): void {
    const i = status.instance;
    if (status.cacheEvicted !== undefined) this.#groups[i].delete(status.cacheEvicted);
    if (status.cacheAdded !== undefined) this.#groups[i].add(status.cacheAdded);
    const changed = status.cachedRuns;
    if (changed !== undefined) {
      const runs = this.#runs[i];
      for (let j = 0; j < changed.length; j += 2) {
        if (changed[j + 1] > 0) runs.set(changed[j], changed[j + 1]);
        else runs.delete(changed[j]);
      }
    }
  }
}

/** The little a router-side index needs: membership and insert-or-touch. */
interface Index {
  has(key: number): boolean;
  set(key: number, value: true): unknown;
}

/** An index without eviction (vLLM production-stack's trie never forgets). */
class UnboundedIndex implements Index {
  readonly #keys = new Set<number>();
  has(key: number): boolean {
    return this.#keys.has(key);
  }
  set(key: number): void {
    this.#keys.add(key);
  }
}

/**
 * A router-side LRU index per instance, filled when the router routes. In
 * blocks it is a KV cache without requests: routing a request touches its
 * cached prefix and caches the rest (evicting least recently used blocks,
 * a prefix's last blocks first), as SGLang's radix tree inserts a routed
 * prompt — so it costs O(runs) per request, like the instances' caches.
 */
export class ApproximateCacheView implements CacheView {
  readonly learnsFromRouting = true;
  readonly #groups: Index[];
  readonly #blocks: KvBlockCache[];
  readonly #unit: "groups" | "blocks";
  /** Block model: each group's first run key, learned when routing its requests. */
  readonly #firstKey = new Map<number, number>();

  /**
   * @param capacity Entries per instance (groups for the FIFO model, blocks for
   *   the batching model); `Infinity` for an index that never evicts.
   */
  constructor(instanceCount: number, unit: "groups" | "blocks", capacity: number) {
    this.#unit = unit;
    const bounded = Number.isFinite(capacity);
    const size = bounded ? Math.max(1, Math.floor(capacity)) : Number.MAX_SAFE_INTEGER;
    this.#groups = unit === "groups"
      ? Array.from(
        { length: instanceCount },
        () => bounded ? new LRUMap<number, true>(size) : new UnboundedIndex(),
      )
      : [];
    this.#blocks = unit === "blocks"
      ? Array.from({ length: instanceCount }, () => new KvBlockCache(size))
      : [];
  }

  holds(instance: number, group: number): boolean {
    if (this.#unit === "groups") return this.#groups[instance].has(group);
    // Block model: a group is held while its first block is in the (block-bounded) index.
    const first = this.#firstKey.get(group);
    return first !== undefined && this.#blocks[instance].cachedBlocks(first) > 0;
  }

  matchedBlocks(instance: number, request: Request, keys: BlockKeys): number {
    if (this.#unit === "groups") {
      return request.prefixGroup >= 0 && this.holds(instance, request.prefixGroup) ? keys.count : 0;
    }
    return this.#blocks[instance].matchPrefix(keys, keys.count);
  }

  routed(instance: number, request: Request, keys: BlockKeys): void {
    if (this.#unit === "groups") {
      if (request.prefixGroup >= 0) this.#groups[instance].set(request.prefixGroup, true);
      return;
    }
    if (keys.count === 0) return;
    if (request.prefixGroup >= 0) this.#firstKey.set(request.prefixGroup, keys.runKey(0));
    // Touch the prefix already indexed, index the rest (as much as fits), and
    // leave it all evictable: the deepest blocks the least recently used.
    const index = this.#blocks[instance];
    const hits = index.matchPrefix(keys, keys.count);
    index.acquire(keys, hits);
    const fresh = Math.min(keys.count - hits, index.free + index.evictable);
    index.allocate(fresh);
    if (fresh > 0) index.publish(keys, hits, hits + fresh);
    index.release(keys, hits + fresh, 0);
  }

  apply(): void {}
}
