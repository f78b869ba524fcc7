/**
 * @module
 * Prefix aware: the instance with the longest cached prefix match (the least
 * loaded of them); when no instance matches more than the others, the
 * least-loaded instance.
 */
import { HOST_CREDIT } from "./_host_credit.ts";
import { leastLoaded, leastLoadedLongestMatch } from "./_least_loaded.ts";
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { ENGINE_SIZED_INDEX, PUSHED_LOAD } from "./_real_views.ts";

/** Options for {@linkcode prefixAware}. */
export interface PrefixAwareOptions {
  /** Credit for a prefix block only in an instance's host KV tier, as a fraction of a GPU hit. @default 0.8 */
  readonly hostCredit?: number;
}

/**
 * Always follows the longest cached prefix, whatever the queue behind it;
 * load (among equal matches, and when nothing matches) is per capacity.
 * Among available instances only: the longest match is the longest an
 * available instance holds.
 */
export function prefixAware(options: PrefixAwareOptions = {}): RoutingPolicy {
  const hostCredit = options.hostCredit ?? HOST_CREDIT.default;
  return {
    name: "prefix_aware",
    choose(request, view, random) {
      const cached = leastLoadedLongestMatch(view, request, random, hostCredit);
      return cached >= 0 ? cached : leastLoaded(view, random);
    },
  };
}

/** {@linkcode prefixAware}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "prefix_aware",
  summary:
    "The longest cached prefix match (the least loaded of equals); no match: the least loaded (the original study).",
  params: { hostCredit: HOST_CREDIT },
  reads: { blocks: true, load: false },
  view: {
    cache: ENGINE_SIZED_INDEX,
    load: PUSHED_LOAD,
    originalStudy: true,
    citation:
      "the original study's simulator (FIFO: its router reads the instances' LRU of groups); on a batching fleet, a router-side index inserted at routing time, as any real implementation must keep",
  },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => prefixAware(params),
} as const satisfies PolicyDescriptor<"prefix_aware">;
