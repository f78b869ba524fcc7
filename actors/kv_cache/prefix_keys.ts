/**
 * @module
 * A request's KV block keys, the one definition shared by the batching
 * instance (what it caches) and the router (what it thinks is cached).
 * Block j's key identifies tokens `[j·B, (j+1)·B)` and every token before.
 *
 * Keys come in *runs*: consecutive blocks that share one identity, such as
 * the 32 engine blocks of one 512-token Mooncake hash block, or a synthetic
 * group's whole prefix. Caches and views count blocks per run, so a request
 * costs O(its runs), not O(its blocks) (design.md, "Block runs").
 */
import type { Request } from "../protocol.ts";

/** Key space of the implicit per-group chains: group g's block j → (g + 1) × 2^20 + j. */
export const GROUP_KEY_STRIDE = 2 ** 20;

/** A request's keyed blocks: how many, the key of each, and the runs they form. */
export interface BlockKeys {
  /** Full prompt blocks that carry a key (others are never shared). */
  readonly count: number;
  /** Key of block `j`, for `0 <= j < count` (block granularity; runs are what caches use). */
  readonly keyAt: (j: number) => number;
  /**
   * Blocks per run: run r covers blocks `[r·runBlocks, min((r+1)·runBlocks, count))`;
   * only the last run may be shorter. A run key always denotes the same blocks.
   */
  readonly runBlocks: number;
  /** Identity of run r, for `0 <= r < ceil(count / runBlocks)`. */
  readonly runKey: (r: number) => number;
}

const NO_KEYS: BlockKeys = Object.freeze({ count: 0, keyAt: () => -1, runBlocks: 1, runKey: () => -1 });

/**
 * The block keys of `request` at `blockTokens` tokens per block: from its
 * explicit `prefixKeys` (trace, sessions; one run per key), else a chain
 * derived from its prefix group covering `prefixTokens` (one run), else none.
 */
export function blockKeys(request: Request, blockTokens: number): BlockKeys {
  if (request.prefixKeys !== undefined && request.keyTokens !== undefined) {
    const keys = request.prefixKeys;
    const per = request.keyTokens / blockTokens;
    return {
      count: keyedBlockCount(request, blockTokens),
      keyAt: per === 1 ? (j) => keys[j] : (j) => keys[Math.floor(j / per)] * per + (j % per),
      runBlocks: per,
      runKey: (r) => keys[r],
    };
  }
  if (request.prefixGroup >= 0) {
    const base = (request.prefixGroup + 1) * GROUP_KEY_STRIDE;
    const count = keyedBlockCount(request, blockTokens);
    return { count, keyAt: (j) => base + j, runBlocks: Math.max(1, count), runKey: () => base };
  }
  return NO_KEYS;
}

/** `blockKeys(request, blockTokens).count`, without building the keys (the FIFO model's group view needs only this). */
export function keyedBlockCount(request: Request, blockTokens: number): number {
  const prompt = request.prefixTokens + request.suffixTokens;
  if (request.prefixKeys !== undefined && request.keyTokens !== undefined) {
    return Math.floor(Math.min(prompt, request.prefixKeys.length * request.keyTokens) / blockTokens);
  }
  return request.prefixGroup >= 0 ? Math.floor(Math.min(prompt, request.prefixTokens) / blockTokens) : 0;
}

/** Where a run's cached length can be read: an instance's cache, or the router's view of one. */
export interface CachedRuns {
  /** Leading blocks of run `runKey` that are cached (0 when none). */
  cachedBlocks(runKey: number): number;
}

/**
 * How many of the first `limit` keyed blocks `cached` holds, run by run,
 * stopping at the first run not wholly cached (a block is only reusable when
 * every block before it is).
 */
export function leadingCachedBlocks(keys: BlockKeys, limit: number, cached: CachedRuns): number {
  const per = keys.runBlocks;
  if (limit > keys.count) limit = keys.count;
  let n = 0;
  for (let r = 0; n < limit; r++) {
    const want = Math.min(per, limit - n);
    const blocks = cached.cachedBlocks(keys.runKey(r));
    if (blocks < want) return n + blocks;
    n += want;
  }
  return n;
}
