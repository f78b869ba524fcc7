/**
 * @module
 * Preble's E2 scheduling (ICLR 2025): exploit a cached prefix when the new
 * tokens are fewer than the matched ones, otherwise explore for the lightest
 * load.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { availabilityMask } from "./_availability.ts";
import { effectiveMatch, HOST_CREDIT } from "./_host_credit.ts";
import { pickAmong, pickBy } from "./_pick.ts";
import { PUSHED_LOAD } from "./_real_views.ts";

/** Options for {@linkcode prebleE2}. */
export interface PrebleE2Options {
  /** Credit for a prefix block only in an instance's host KV tier, as a fraction of a GPU hit. @default 0.8 */
  readonly hostCredit?: number;
}

/**
 * Let m = the longest match over instances (tokens; host-tier blocks at
 * `hostCredit`). If the request's uncached tokens (prompt − m) < m → exploit:
 * among instances with that match (exactly: a fractional match ties only an
 * equal one), the lowest load cost. Else explore: the lowest load cost
 * overall. Load cost = (prefill tokens pending + decode KV tokens in flight,
 * last reports) ÷ the instance's capacity: work, in the fastest instance's
 * time (a uniform fleet divides by 1). Only available instances count: m is
 * the longest match among them, and both choices are made among them.
 */
export function prebleE2(options: PrebleE2Options = {}): RoutingPolicy {
  const hostCredit = options.hostCredit ?? HOST_CREDIT.default;
  return {
    name: "preble_e2",
    choose(request, view, random) {
      const B = view.blockTokens;
      const cost = (i: number) =>
        (view.pendingPrefillTokens[i] + view.decodeBlocks[i] * B) / view.capacity[i];
      const available = availabilityMask(view);
      const index = view.index, candidates = index?.candidates(request);
      if (index !== undefined && candidates !== undefined) {
        // Indexed: the longest match among the candidates (the same choice and draws as the scan
        // below); exploring, the least cost from the index (one draw among equals).
        let longest = 0;
        for (let k = 0; k < candidates.size; k++) {
          longest = Math.max(longest, effectiveMatch(view, candidates.at(k), request, hostCredit));
        }
        const matched = longest * B, total = request.prefixTokens + request.suffixTokens;
        if (longest > 0 && total - matched < matched) {
          return pickAmong(
            candidates,
            (i) => effectiveMatch(view, i, request, hostCredit) === longest ? -cost(i) : NaN,
            random,
          );
        }
        return index.pickLeast("prefillDecode", random);
      }
      let longest = 0;
      for (let i = 0; i < view.instanceCount; i++) {
        if (available !== undefined && available[i] !== 1) continue;
        longest = Math.max(longest, effectiveMatch(view, i, request, hostCredit));
      }
      const matched = longest * B, total = request.prefixTokens + request.suffixTokens;
      if (longest > 0 && total - matched < matched) {
        return pickBy(
          view.instanceCount,
          (i) => effectiveMatch(view, i, request, hostCredit) === longest ? -cost(i) : NaN,
          random,
          available,
        );
      }
      return pickBy(view.instanceCount, (i) => -cost(i), random, available);
    },
  };
}

/** {@linkcode prebleE2}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "preble_e2",
  summary:
    "Preble's E2: exploit a cached prefix when the new tokens are fewer than the matched ones, else explore for the lightest load.",
  params: { hostCredit: HOST_CREDIT },
  reads: { blocks: true, load: true },
  view: {
    cache: { source: "router_index", unit: "tokens", capacity: "engine", eviction: "on_insert" },
    load: PUSHED_LOAD,
    citation:
      "WukLab/preble preble/global_scheduler_with_time.py (the global radix tree updated when it schedules; `handle_eviction` trims each GPU's share to its `max_tokens_gpu`, least recently used first)",
  },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => prebleE2(params),
} as const satisfies PolicyDescriptor<"preble_e2">;
