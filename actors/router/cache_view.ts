/**
 * @module
 * What the router believes each instance has cached. *Exact*: built from the
 * instances' own cache events (groups, and block keys for the batching
 * model). *Approximate*: a router-side index updated when the router routes a
 * request (as SGLang's radix tree, llm-d's block index and vLLM
 * production-stack's trie are), with its own capacity and LRU eviction.
 */
import { LRUMap } from "mnemonist";
import { HostKvTier } from "../kv_cache/host_kv_tier.ts";
import { KvBlockCache } from "../kv_cache/kv_block_cache.ts";
import { NumberTable } from "../kv_cache/number_table.ts";
import { type BlockKeys, type CachedRuns, leadingCachedBlocks } from "../kv_cache/prefix_keys.ts";
import type { InstanceStatus, Request } from "../protocol.ts";

/** The router's belief about instance caches. */
export interface CacheView {
  /** Whether `instance` is believed to hold prefix `group`. */
  holds(instance: number, group: number): boolean;
  /** Leading keyed blocks of the request believed cached at `instance`. */
  matchedBlocks(instance: number, request: Request, keys: BlockKeys): number;
  /** Leading keyed blocks believed cached at `instance` in GPU or host memory: `matched` plus the host tier's continuation. */
  hostMatchedBlocks?(instance: number, keys: BlockKeys, matched: number): number;
  /** Whether any instance has a host tier (else there is nothing beyond `matched`). @default false */
  readonly hasHostTier?: boolean;
  /** Blocks (or groups) believed cached at `instance`: the size of its index, Dynamo's tie-break. @default absent: 0 */
  cachedBlockCount?(instance: number): number;
  /** Whether `routed` must be called (only the approximate view learns from routing). */
  readonly learnsFromRouting: boolean;
  /** The router sent `request` to `instance`. */
  routed(instance: number, request: Request, keys: BlockKeys): void;
  /** Instance `instance` (the view's own index for it: by default the status's) reported. */
  apply(status: InstanceStatus, instance?: number): void;
  /**
   * Forgets everything believed cached at `instance`: it restarted cold (after
   * a crash, or provisioned by the autoscaler). @default absent: nothing forgotten
   */
  forget?(instance: number): void;
  /**
   * A new view of the same kind, unit and capacities that believes nothing
   * cached: the view of another router replica. @default absent: the view
   * cannot serve independent replicas
   */
  emptyCopy?(): CacheView;
  /**
   * From now on, calls `listener` whenever the view starts or stops
   * believing that an instance holds a *holder key*: a prefix group (the
   * group unit), or a block run with at least its first block cached (the
   * block unit; a request can match only where its first run is held). For
   * the router's holder index (`actors/router/fleet_index.ts`). It first tells
   * what each instance holds already. @returns false when the view cannot
   * say (a host tier: a match may start in host memory) @default absent: it
   * cannot
   */
  watchHolders?(listener: HolderListener): boolean;
}

/** Told that the view now believes `instance` holds `key` (`held`), or no longer does. */
export type HolderListener = (instance: number, key: number, held: boolean) => void;

/** The key a request's match hangs on (see {@linkcode CacheView.watchHolders}); -1: it can match nothing. */
export function holderKey(unit: "groups" | "blocks", request: Request, keys: BlockKeys): number {
  if (keys.count === 0) return -1;
  return unit === "groups" ? request.prefixGroup : keys.runKey(0);
}

/** Options for {@linkcode createCacheView}. */
export interface CacheViewOptions {
  /** `exact` (from instance events) or `approximate` (router-side index). */
  readonly kind: "exact" | "approximate";
  /** `groups`: the FIFO model caches whole prefix groups; `blocks`: the batching model caches blocks. */
  readonly unit: "groups" | "blocks";
  /** Approximate view: entries per instance (groups or blocks); one number for all, or one each. */
  readonly capacity: number | readonly number[];
  /**
   * Approximate view of blocks: it matches whole chunks of this many blocks
   * (an index of 128-character chunks sees no partial chunk). @default 1
   */
  readonly chunkBlocks?: number;
  /**
   * Approximate view of blocks: the leading blocks of a prompt it matches and
   * inserts (llm-d hashes at most 256). @default Infinity
   */
  readonly maxBlocks?: number;
  /** Tokens per block (the engine's): a prompt's full blocks are what an index of blocks inserts. @default 16 */
  readonly blockTokens?: number;
  /**
   * Per instance, blocks of its host-memory KV tier (blocks unit only): the
   * view mirrors each tier from the GPU cache it believes in, since a tier
   * holds what its GPU cache evicted. @default none
   */
  readonly hostBlocks?: readonly number[];
}

/** Builds the cache view a scenario asks for. */
export function createCacheView(instanceCount: number, options: CacheViewOptions): CacheView {
  const tiers = hostTiers(instanceCount, options);
  return options.kind === "exact"
    ? new ExactCacheView(instanceCount, options.unit, tiers)
    : new ApproximateCacheView(instanceCount, options.unit, options.capacity, tiers, {
      chunkBlocks: options.chunkBlocks,
      maxBlocks: options.maxBlocks,
      blockTokens: options.blockTokens,
    });
}

/** The mirrored host tiers, one per instance (undefined where it has none); undefined when none has one. */
function hostTiers(instanceCount: number, options: CacheViewOptions): (HostKvTier | undefined)[] | undefined {
  const blocks = options.hostBlocks;
  if (options.unit !== "blocks" || blocks === undefined || !blocks.some((b) => b > 0)) return undefined;
  return Array.from(
    { length: instanceCount },
    (_, i) => blocks[i] > 0 ? new HostKvTier(blocks[i]) : undefined,
  );
}

/** New, empty mirrors of the same capacities as `tiers`. */
function emptyTiers(tiers: (HostKvTier | undefined)[] | undefined): (HostKvTier | undefined)[] | undefined {
  return tiers?.map((tier) => tier === undefined ? undefined : new HostKvTier(tier.capacity));
}

/** Empties `tiers[instance]`'s mirror (its instance restarted: its host memory is empty too). */
function emptyTier(tiers: (HostKvTier | undefined)[] | undefined, instance: number): void {
  const tier = tiers?.[instance];
  if (tier !== undefined) tiers![instance] = new HostKvTier(tier.capacity);
}

/** `matched` plus what `tier` holds right after it. */
function withHost(tier: HostKvTier | undefined, keys: BlockKeys, matched: number): number {
  return tier === undefined ? matched : matched + tier.match(keys, matched, keys.count);
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
  readonly hasHostTier: boolean;
  readonly #tiers: (HostKvTier | undefined)[] | undefined;
  readonly #groups: Set<number>[];
  /** Per instance: run key → leading blocks cached. */
  readonly #runs: ReportedRuns[];
  /** Per instance: blocks cached in all its runs (groups held, for the group unit). */
  readonly #totals: Float64Array;
  readonly #unit: "groups" | "blocks";
  readonly #instanceCount: number;
  #listener: HolderListener | undefined;

  /**
   * @param tiers Mirrors of the instances' host tiers, fed with the cached
   *   lengths the instances report (their tiers' only input but promotions).
   */
  constructor(instanceCount: number, unit: "groups" | "blocks", tiers?: (HostKvTier | undefined)[]) {
    this.#unit = unit;
    this.#instanceCount = instanceCount;
    this.#tiers = tiers;
    this.hasHostTier = tiers !== undefined;
    this.#groups = Array.from({ length: instanceCount }, () => new Set<number>());
    this.#runs = unit === "blocks" ? Array.from({ length: instanceCount }, () => new ReportedRuns()) : [];
    this.#totals = new Float64Array(instanceCount);
  }

  holds(instance: number, group: number): boolean {
    return this.#groups[instance].has(group);
  }

  cachedBlockCount(instance: number): number {
    return this.#unit === "groups" ? this.#groups[instance].size : this.#totals[instance];
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

  hostMatchedBlocks(instance: number, keys: BlockKeys, matched: number): number {
    return withHost(this.#tiers?.[instance], keys, matched);
  }

  watchHolders(listener: HolderListener): boolean {
    if (this.hasHostTier) return false;
    this.#listener = listener;
    for (let i = 0; i < this.#instanceCount; i++) {
      for (const group of this.#groups[i]) listener(i, group, true);
      for (const [key] of this.#runs[i]?.entries() ?? []) if (key >= 0) listener(i, key, true);
    }
    return true;
  }

  forget(instance: number): void {
    const listener = this.#listener;
    if (listener !== undefined) {
      for (const group of this.#groups[instance]) listener(instance, group, false);
      for (const [key] of this.#runs[instance]?.entries() ?? []) if (key >= 0) listener(instance, key, false);
    }
    this.#groups[instance].clear();
    this.#runs[instance]?.clear();
    this.#totals[instance] = 0;
    emptyTier(this.#tiers, instance);
  }

  emptyCopy(): ExactCacheView {
    return new ExactCacheView(this.#instanceCount, this.#unit, emptyTiers(this.#tiers));
  }

  apply(status: InstanceStatus, instance = status.instance): void {
    const i = instance;
    const listener = this.#listener;
    if (status.cacheEvicted !== undefined && this.#groups[i].delete(status.cacheEvicted)) {
      listener?.(i, status.cacheEvicted, false);
    }
    if (status.cacheAdded !== undefined && !this.#groups[i].has(status.cacheAdded)) {
      this.#groups[i].add(status.cacheAdded);
      listener?.(i, status.cacheAdded, true);
    }
    const changed = status.cachedRuns;
    if (changed !== undefined) {
      const runs = this.#runs[i], tier = this.#tiers?.[i];
      let total = this.#totals[i];
      for (let j = 0; j < changed.length; j += 2) {
        tier?.gpuChanged(changed[j], changed[j + 1]);
        const before = runs.cachedBlocks(changed[j]);
        total += changed[j + 1] - before;
        if (changed[j + 1] > 0) runs.set(changed[j], changed[j + 1]);
        else runs.delete(changed[j]);
        if (listener !== undefined && (before > 0) !== (changed[j + 1] > 0) && changed[j] >= 0) {
          listener(i, changed[j], changed[j + 1] > 0);
        }
      }
      this.#totals[i] = total;
    }
  }
}

/** The little a router-side index needs: membership, insert-or-touch (saying what it evicted), its keys and size. */
interface Index {
  has(key: number): boolean;
  set(key: number, value: true): unknown;
  setpop(key: number, value: true): { evicted: boolean; key: number } | null;
  keys(): Iterable<number>;
  readonly size: number;
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
  setpop(key: number): null {
    this.#keys.add(key);
    return null;
  }
  keys(): Iterable<number> {
    return this.#keys;
  }
  get size(): number {
    return this.#keys.size;
  }
}

/**
 * An LRU index on a `Map`'s insertion order (a touch re-inserts the key;
 * eviction takes the first): exactly `LRUMap`'s order, with no arrays sized
 * to the capacity up front — for indexes whose capacity is far beyond what
 * they will hold (a character-sized index counted in groups), which
 * `LRUMap` would allocate whole, for every instance.
 */
class MapLru implements Index {
  readonly #keys = new Map<number, true>();
  readonly #capacity: number;
  constructor(capacity: number) {
    this.#capacity = capacity;
  }
  has(key: number): boolean {
    return this.#keys.has(key);
  }
  set(key: number): void {
    this.setpop(key);
  }
  setpop(key: number): { evicted: boolean; key: number } | null {
    const keys = this.#keys;
    if (keys.delete(key)) {
      keys.set(key, true);
      return null;
    }
    let evicted: { evicted: boolean; key: number } | null = null;
    if (keys.size >= this.#capacity) {
      const oldest = keys.keys().next().value!;
      keys.delete(oldest);
      evicted = { evicted: true, key: oldest };
    }
    keys.set(key, true);
    return evicted;
  }
  keys(): Iterable<number> {
    // Most recently used first, as LRUMap lists them.
    return [...this.#keys.keys()].reverse();
  }
  get size(): number {
    return this.#keys.size;
  }
}

/** Group indexes larger than this are {@linkcode MapLru}s, not `LRUMap`s (which allocate their capacity up front). */
const PREALLOCATED_LRU_LIMIT = 4096;

/** The approximate view's matching rules: see {@linkcode CacheViewOptions}. */
export interface IndexRules {
  /** It matches whole chunks of this many blocks. @default 1 */
  readonly chunkBlocks?: number;
  /** Leading blocks of a prompt it matches and inserts. @default Infinity */
  readonly maxBlocks?: number;
  /** Tokens per block, to count a prompt's full blocks. @default 16 */
  readonly blockTokens?: number;
}

/**
 * The run of `count` blocks no other request shares: a prompt's unkeyed
 * tail, which a real index inserts too (it indexes the whole text) and so
 * counts against its capacity. Negative keys never meet a shared run's.
 */
function privateRun(requestId: number, count: number): BlockKeys {
  const key = -1 - requestId;
  return { count, keyAt: (j) => key * 2 ** 20 - j, runBlocks: Math.max(1, count), runKey: () => key };
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
  readonly hasHostTier: boolean;
  readonly #tiers: (HostKvTier | undefined)[] | undefined;
  readonly #groups: Index[];
  readonly #blocks: KvBlockCache[];
  readonly #unit: "groups" | "blocks";
  readonly #instanceCount: number;
  readonly #capacity: number | readonly number[];
  /** Block model: each group's first run key, learned when routing its requests. */
  readonly #firstKey = new Map<number, number>();
  readonly #chunkBlocks: number;
  readonly #maxBlocks: number;
  readonly #blockTokens: number;
  #listener: HolderListener | undefined;

  /**
   * @param capacity Entries per instance (groups for the FIFO model, blocks for
   *   the batching model), one for all or one each (a mixed fleet); `Infinity`
   *   for an index that never evicts.
   */
  constructor(
    instanceCount: number,
    unit: "groups" | "blocks",
    capacity: number | readonly number[],
    tiers?: (HostKvTier | undefined)[],
    rules: IndexRules = {},
  ) {
    this.#unit = unit;
    this.#instanceCount = instanceCount;
    this.#capacity = capacity;
    this.#chunkBlocks = rules.chunkBlocks ?? 1;
    this.#maxBlocks = rules.maxBlocks ?? Infinity;
    this.#blockTokens = rules.blockTokens ?? 16;
    this.#tiers = tiers;
    this.hasHostTier = tiers !== undefined;
    this.#groups = unit === "groups"
      ? Array.from({ length: instanceCount }, (_, i) => this.#groupIndex(i))
      : [];
    this.#blocks = unit === "blocks"
      ? Array.from({ length: instanceCount }, (_, i) => this.#blockIndex(i))
      : [];
  }

  /** Instance `i`'s capacity, as given (`Infinity`: unbounded). */
  #capacityOf(i: number): number {
    const capacity = this.#capacity;
    return typeof capacity === "number" ? capacity : capacity[i];
  }

  /** Instance `i`'s index size, in entries. */
  #size(i: number): number {
    const capacity = this.#capacityOf(i);
    return Number.isFinite(capacity) ? Math.max(1, Math.floor(capacity)) : Number.MAX_SAFE_INTEGER;
  }

  /** An empty group index for instance `i`. */
  #groupIndex(i: number): Index {
    const capacity = this.#capacityOf(i);
    if (!Number.isFinite(capacity)) return new UnboundedIndex();
    return this.#size(i) > PREALLOCATED_LRU_LIMIT
      ? new MapLru(this.#size(i))
      : new LRUMap<number, true>(this.#size(i));
  }

  /** An empty block index for instance `i`, feeding its host tier's mirror. */
  #blockIndex(i: number): KvBlockCache {
    const index = new KvBlockCache(this.#size(i)), tier = this.#tiers?.[i];
    // What the index evicts, the instance's host tier is believed to hold.
    // (A prompt's unshared private runs, negative keys, are never cached by the engine, so never demoted.)
    if (tier !== undefined) index.onRunChange = (key, cached) => key >= 0 && tier.gpuChanged(key, cached);
    else if (this.#listener !== undefined) this.#watchRuns(index, i, this.#listener);
    return index;
  }

  /** Tells `listener` when instance `i`'s `index` starts or stops holding a shared run. */
  #watchRuns(index: KvBlockCache, i: number, listener: HolderListener): void {
    index.onRunChange = (key, cached) => key >= 0 && listener(i, key, cached > 0);
  }

  watchHolders(listener: HolderListener): boolean {
    if (this.hasHostTier) return false;
    this.#listener = listener;
    this.#groups.forEach((index, i) => {
      for (const group of index.keys()) listener(i, group, true);
    });
    this.#blocks.forEach((index, i) => {
      for (const [key, cached] of index.runs()) if (key >= 0 && cached > 0) listener(i, key, true);
      this.#watchRuns(index, i, listener);
    });
    return true;
  }

  forget(instance: number): void {
    emptyTier(this.#tiers, instance);
    const listener = this.#listener;
    if (listener !== undefined) {
      if (this.#unit === "groups") {
        for (const group of this.#groups[instance].keys()) listener(instance, group, false);
      } else {for (const [key, cached] of this.#blocks[instance].runs()) {
          if (key >= 0 && cached > 0) listener(instance, key, false);
        }}
    }
    if (this.#unit === "groups") this.#groups[instance] = this.#groupIndex(instance);
    else this.#blocks[instance] = this.#blockIndex(instance);
  }

  emptyCopy(): ApproximateCacheView {
    return new ApproximateCacheView(
      this.#instanceCount,
      this.#unit,
      this.#capacity,
      emptyTiers(this.#tiers),
      {
        chunkBlocks: this.#chunkBlocks,
        maxBlocks: this.#maxBlocks,
        blockTokens: this.#blockTokens,
      },
    );
  }

  cachedBlockCount(instance: number): number {
    if (this.#unit === "groups") return this.#groups[instance].size;
    const index = this.#blocks[instance];
    return index.held + index.evictable;
  }

  hostMatchedBlocks(instance: number, keys: BlockKeys, matched: number): number {
    return withHost(this.#tiers?.[instance], keys, matched);
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
    const matched = this.#blocks[instance].matchPrefix(keys, Math.min(keys.count, this.#maxBlocks));
    const chunk = this.#chunkBlocks;
    return chunk === 1 ? matched : matched - matched % chunk;
  }

  routed(instance: number, request: Request, keys: BlockKeys): void {
    if (this.#unit === "groups") {
      const group = request.prefixGroup;
      if (group < 0) return;
      const index = this.#groups[instance], listener = this.#listener;
      if (listener === undefined) {
        index.set(group, true);
        return;
      }
      const fresh = !index.has(group);
      const popped = index.setpop(group, true);
      if (popped !== null && popped.evicted) listener(instance, popped.key, false);
      if (fresh) listener(instance, group, true);
      return;
    }
    const index = this.#blocks[instance];
    const keyed = Math.min(keys.count, this.#maxBlocks);
    // A bounded index holds the prompt's unshared full blocks too (they never
    // match; they age out). Inserted first, they are the older: a prompt's
    // tail goes before its prefix, as a tree evicts leaves first.
    if (index.capacity < Number.MAX_SAFE_INTEGER) {
      const full = Math.min(
        Math.floor((request.prefixTokens + request.suffixTokens) / this.#blockTokens),
        this.#maxBlocks,
      );
      if (full > keyed) this.#insert(index, privateRun(request.id, full - keyed), full - keyed);
    }
    if (keyed > 0) {
      if (request.prefixGroup >= 0) this.#firstKey.set(request.prefixGroup, keys.runKey(0));
      this.#insert(index, keys, keyed);
    }
  }

  /**
   * Touches the first `count` of `keys` already indexed, indexes the rest (as
   * much as fits), and leaves it all evictable: the deepest blocks the least
   * recently used.
   */
  #insert(index: KvBlockCache, keys: BlockKeys, count: number): void {
    const hits = index.matchPrefix(keys, count);
    index.acquire(keys, hits);
    const fresh = Math.min(count - hits, index.free + index.evictable);
    index.allocate(fresh);
    if (fresh > 0) index.publish(keys, hits, hits + fresh);
    index.release(keys, hits + fresh, 0);
  }

  apply(): void {}
}
