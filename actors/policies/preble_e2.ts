/**
 * @module
 * Preble's E2 scheduling (ICLR 2025): exploit a cached prefix when the new
 * tokens are fewer than the matched ones, otherwise explore for the lightest
 * load.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { pickBy } from "./_pick.ts";

/**
 * Let m = the longest match over instances (tokens). If the request's
 * uncached tokens (prompt − m) < m → exploit: among instances with that match,
 * the lowest load cost. Else explore: the lowest load cost overall. Load cost
 * = prefill tokens pending + decode KV tokens in flight (last reports).
 */
export function prebleE2(): RoutingPolicy {
  return {
    name: "preble_e2",
    choose(request, view, random) {
      const B = view.blockTokens;
      const cost = (i: number) => view.pendingPrefillTokens[i] + view.decodeBlocks[i] * B;
      let longest = 0;
      for (let i = 0; i < view.instanceCount; i++) {
        longest = Math.max(longest, view.matchedBlocks(i, request));
      }
      const matched = longest * B, total = request.prefixTokens + request.suffixTokens;
      if (longest > 0 && total - matched < matched) {
        return pickBy(
          view.instanceCount,
          (i) => view.matchedBlocks(i, request) === longest ? -cost(i) : NaN,
          random,
        );
      }
      return pickBy(view.instanceCount, (i) => -cost(i), random);
    },
  };
}

/** {@linkcode prebleE2}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "preble_e2",
  summary:
    "Preble's E2: exploit a cached prefix when the new tokens are fewer than the matched ones, else explore for the lightest load.",
  params: {},
  reads: { blocks: true, load: true },
  create: (): RoutingPolicy => prebleE2(),
} as const satisfies PolicyDescriptor<"preble_e2">;
