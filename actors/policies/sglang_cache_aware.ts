/**
 * @module
 * SGLang router's `cache_aware` policy (sgl-router / model gateway): balance
 * load when it is badly skewed, otherwise follow the longest prefix match if
 * it covers enough of the request.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { availabilityMask } from "./_availability.ts";
import { effectiveMatch, HOST_CREDIT } from "./_host_credit.ts";
import { firstBy } from "./_pick.ts";
import { ROUTER_LOAD } from "./_real_views.ts";

/** Parameters of {@linkcode sglangCacheAware}, with SGLang's shipped defaults. */
export interface SglangCacheAwareOptions {
  /** Absolute load gap that, with the relative one, triggers balancing. @default 64 */
  readonly balanceAbs?: number;
  /** Relative load ratio that, with the absolute one, triggers balancing. @default 1.5 */
  readonly balanceRel?: number;
  /** Matched/total prompt share above which the best match wins. @default 0.3 */
  readonly cacheThreshold?: number;
  /** Credit for a prefix block only in an instance's host KV tier, as a fraction of a GPU hit. @default 0.8 */
  readonly hostCredit?: number;
}

/**
 * If `max − min > balanceAbs` and `max > balanceRel × min` (load = the
 * router's in-flight count ÷ the instance's capacity) → the least-loaded
 * instance. Otherwise the instance with the longest prefix match (host-tier
 * blocks at `hostCredit`), if matched/total > `cacheThreshold`; else the
 * least-loaded. No random draws, as in SGLang's gateway
 * (`sgl-model-gateway/src/policies/cache_aware.rs`, `select_worker`): the
 * least loaded is `min_by_key`'s, the lowest index among equals, so ties
 * pile onto the first worker; and a match goes to the *first tenant* of the
 * deepest node the tree matched (`tree.rs`, `prefix_match`), whatever its
 * load — the first in the tenants map's fixed order, modelled as the lowest
 * index among the instances with the longest match.
 *
 * Both balance gates compare loads per capacity. On a mixed fleet, raw
 * counts would call the balanced state skewed (a twice-as-fast instance
 * holds twice the requests) and "balance" toward the slow instance. So
 * `balanceRel` is a ratio of per-capacity loads, and `balanceAbs` a gap in
 * requests as the fastest instance counts them (a gap of 64 on a
 * half-capacity instance is 32 of its own requests). A uniform fleet divides
 * by 1: SGLang's rule exactly.
 *
 * Only available instances count: the balance gates compare the loads of the
 * instances the router may route to, and both choices are made among them
 * (an unavailable instance's load, however high, opens no gate).
 */
export function sglangCacheAware(options: SglangCacheAwareOptions = {}): RoutingPolicy {
  const balanceAbs = options.balanceAbs ?? 64, balanceRel = options.balanceRel ?? 1.5;
  const cacheThreshold = options.cacheThreshold ?? 0.3,
    hostCredit = options.hostCredit ?? HOST_CREDIT.default;
  return {
    name: "sglang_cache_aware",
    choose(request, view) {
      const index = view.index;
      // Indexed: the scan below answered from the fleet index, with the same choices (no draw is involved).
      const indexedBalance = index !== undefined &&
        index.maxLoad("inFlight") - index.minLoad("inFlight") > balanceAbs &&
        index.maxLoad("inFlight") > balanceRel * index.minLoad("inFlight");
      if (indexedBalance) return index.firstLeast("inFlight");
      const candidates = index?.candidates(request);
      if (index !== undefined && candidates !== undefined) {
        let best = -1, longest = 0;
        // Whole-group matches are all equal: the first candidate is the scan's first of the longest.
        const walked = index.wholeMatches ? Math.min(1, candidates.size) : candidates.size;
        for (let k = 0; k < walked; k++) {
          const i = candidates.at(k), matched = effectiveMatch(view, i, request, hostCredit);
          if (matched > longest) {
            best = i;
            longest = matched;
          }
        }
        const total = request.prefixTokens + request.suffixTokens;
        return total > 0 && (longest * view.blockTokens) / total > cacheThreshold
          ? best
          : index.firstLeast("inFlight");
      }
      const { inFlight, capacity } = view;
      const available = availabilityMask(view);
      const load = (i: number) => inFlight[i] / capacity[i];
      let max = -Infinity, min = Infinity;
      for (let i = 0; i < view.instanceCount; i++) {
        if (available !== undefined && available[i] !== 1) continue;
        const l = load(i);
        if (l > max) max = l;
        if (l < min) min = l;
      }
      const leastLoaded = () => firstBy(view.instanceCount, (i) => -load(i), available);
      if (max - min > balanceAbs && max > balanceRel * min) return leastLoaded();
      const total = request.prefixTokens + request.suffixTokens;
      const best = firstBy(
        view.instanceCount,
        (i) => effectiveMatch(view, i, request, hostCredit),
        available,
      );
      const matchedTokens = effectiveMatch(view, best, request, hostCredit) * view.blockTokens;
      return total > 0 && matchedTokens / total > cacheThreshold ? best : leastLoaded();
    },
  };
}

/** {@linkcode sglangCacheAware}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "sglang_cache_aware",
  summary:
    "SGLang router's cache_aware: balance when load is skewed, else the longest prefix match if it covers enough of the prompt.",
  params: {
    balanceAbs: {
      doc: "absolute gap in in-flight / capacity that, with balanceRel, triggers balancing",
      default: 64,
      min: 0,
    },
    balanceRel: {
      doc: "ratio of in-flight / capacity that, with balanceAbs, triggers balancing",
      default: 1.5,
      min: 1,
    },
    cacheThreshold: {
      doc: "matched share of the prompt above which the best match wins",
      default: 0.3,
      min: 0,
      max: 1,
    },
    hostCredit: HOST_CREDIT,
  },
  reads: { blocks: true, load: false },
  view: {
    cache: {
      source: "router_index",
      unit: "characters",
      capacity: 2 ** 26,
      eviction: "periodic",
      evictEveryMs: 120_000,
    },
    load: ROUTER_LOAD,
    citation:
      "sgl-model-gateway/src/policies/cache_aware.rs (`select_worker`: `tree.insert_text` at routing, `w.load()` the router's in-flight count; the eviction thread calls `evict_tenant_by_size(max_tree_size)` every `eviction_interval_secs`), tree.rs (`prefix_match`, per-tenant character counts); defaults 2^26 characters, 120 s",
  },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => sglangCacheAware(params),
} as const satisfies PolicyDescriptor<"sglang_cache_aware">;
