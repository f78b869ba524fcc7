/**
 * @module
 * Host-tier credit, shared by the cache-aware policies: a prefix block cached
 * only in an instance's host-memory KV tier counts as a fraction of a GPU hit.
 */
import type { Request } from "../protocol.ts";
import type { PolicyParameter, RouterView } from "./policy.ts";

/**
 * The `hostCredit` parameter every policy that scores match length declares.
 * Its default is llm-d's: the precise prefix-cache scorer weighs a CPU-tier
 * block 0.8 against a GPU block's 1.0 (llm-d-kv-cache, `kvCacheBackendConfigs`).
 */
export const HOST_CREDIT: PolicyParameter = {
  doc:
    "credit for a prefix block found only in the instance's host-memory KV tier, as a fraction of a GPU hit (0: ignored; 1: as good as a GPU hit)",
  default: 0.8,
  min: 0,
  max: 1,
  short: "hc",
};

/**
 * The match of `request` at `instance` in GPU-block equivalents: matched +
 * `hostCredit` × (host-matched − matched). Fractional when host blocks count
 * at a credit below 1; exactly `matchedBlocks` without a host tier (the two
 * counts are equal, and m + c × 0 is m). The host count is asked for only
 * after the GPU count, and not at all when `hostCredit` is 0.
 */
export function effectiveMatch(
  view: RouterView,
  instance: number,
  request: Request,
  hostCredit: number,
): number {
  const matched = view.matchedBlocks(instance, request);
  if (hostCredit === 0) return matched;
  return matched + hostCredit * (view.hostMatchedBlocks(instance, request) - matched);
}
