/**
 * @module
 * Prefix aware: an instance holding the request's prefix (the least loaded of
 * them); when none does, the least-loaded instance.
 */
import { leastLoaded, leastLoadedHolding } from "./_least_loaded.ts";
import type { RoutingPolicy } from "./policy.ts";

/** Always follows the cache, whatever the queue behind it. */
export function prefixAware(): RoutingPolicy {
  return {
    name: "prefix_aware",
    choose(request, view, random) {
      const cached = leastLoadedHolding(view, request.prefixGroup, random);
      return cached >= 0 ? cached : leastLoaded(view, random);
    },
  };
}
