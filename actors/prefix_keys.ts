/**
 * @module
 * A request's KV block keys, the one definition shared by the batching
 * instance (what it caches) and the router (what it thinks is cached).
 * Block j's key identifies tokens `[j·B, (j+1)·B)` and every token before.
 */
import type { Request } from "./protocol.ts";

/** Key space of the implicit per-group chains: group g's block j → (g + 1) × 2^20 + j. */
export const GROUP_KEY_STRIDE = 2 ** 20;

/** A request's keyed blocks: how many, and the key of each. */
export interface BlockKeys {
  /** Full prompt blocks that carry a key (others are never shared). */
  readonly count: number;
  /** Key of block `j`, for `0 <= j < count`. */
  readonly keyAt: (j: number) => number;
}

const NO_KEYS: BlockKeys = Object.freeze({ count: 0, keyAt: () => -1 });

/**
 * The block keys of `request` at `blockTokens` tokens per block: from its
 * explicit `prefixKeys` (trace, sessions), else a chain derived from its
 * prefix group covering `prefixTokens`, else none.
 */
export function blockKeys(request: Request, blockTokens: number): BlockKeys {
  const prompt = request.prefixTokens + request.suffixTokens;
  if (request.prefixKeys !== undefined && request.keyTokens !== undefined) {
    const keys = request.prefixKeys;
    const per = request.keyTokens / blockTokens;
    const keyed = Math.min(prompt, keys.length * request.keyTokens);
    return {
      count: Math.floor(keyed / blockTokens),
      keyAt: per === 1 ? (j) => keys[j] : (j) => keys[Math.floor(j / per)] * per + (j % per),
    };
  }
  if (request.prefixGroup >= 0) {
    const base = (request.prefixGroup + 1) * GROUP_KEY_STRIDE;
    return {
      count: Math.floor(Math.min(prompt, request.prefixTokens) / blockTokens),
      keyAt: (j) => base + j,
    };
  }
  return NO_KEYS;
}
