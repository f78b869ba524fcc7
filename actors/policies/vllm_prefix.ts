/**
 * @module
 * vLLM production-stack's `prefixaware` router: random among the instances
 * with the longest prefix match; random when nothing matches. No load term.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { availabilityMask } from "./_availability.ts";
import { effectiveMatch, HOST_CREDIT } from "./_host_credit.ts";
import { pickAmong, pickBy } from "./_pick.ts";
import { NO_LOAD } from "./_real_views.ts";

/** Options for {@linkcode vllmPrefix}. */
export interface VllmPrefixOptions {
  /** Credit for a prefix block only in an instance's host KV tier, as a fraction of a GPU hit. @default 0.8 */
  readonly hostCredit?: number;
}

/**
 * Longest match (host-tier blocks at `hostCredit`; a fractional match ties
 * only an equal one), ties (and no match) uniformly at random. No load term,
 * so capacity plays no part. Among available instances only: the longest
 * match is the longest an available instance holds.
 */
export function vllmPrefix(options: VllmPrefixOptions = {}): RoutingPolicy {
  const hostCredit = options.hostCredit ?? HOST_CREDIT.default;
  return {
    name: "vllm_prefix",
    choose(request, view, random) {
      const candidates = view.index?.candidates(request);
      if (candidates === undefined) {
        return pickBy(
          view.instanceCount,
          (i) => effectiveMatch(view, i, request, hostCredit),
          random,
          availabilityMask(view),
        );
      }
      // Indexed: uniform among the longest matching candidates, else among all (one draw each way).
      let longest = 0;
      const walked = view.index!.wholeMatches ? Math.min(1, candidates.size) : candidates.size;
      for (let k = 0; k < walked; k++) {
        longest = Math.max(longest, effectiveMatch(view, candidates.at(k), request, hostCredit));
      }
      if (longest === 0) return view.index!.pickAvailable(random);
      if (view.index!.wholeMatches) {
        // Whole-group matches are all equal: one draw among the candidates.
        return candidates.at(Math.min(candidates.size - 1, Math.floor(random() * candidates.size)));
      }
      return pickAmong(
        candidates,
        (i) => effectiveMatch(view, i, request, hostCredit) === longest ? 0 : NaN,
        random,
      );
    },
  };
}

/** {@linkcode vllmPrefix}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "vllm_prefix",
  summary:
    "vLLM production-stack's prefixaware router: random among the longest matches; random when nothing matches.",
  params: { hostCredit: HOST_CREDIT },
  reads: { blocks: true, load: false },
  view: {
    cache: { source: "router_index", unit: "characters", chunkCharacters: 128, capacity: "unbounded" },
    load: NO_LOAD,
    citation:
      "vllm-project/production-stack src/vllm_router/routers/routing_logic.py (`PrefixAwareRouter`: insert after the choice), prefix/hashtrie.py (128-character chunks; the trie never evicts)",
  },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => vllmPrefix(params),
} as const satisfies PolicyDescriptor<"vllm_prefix">;
