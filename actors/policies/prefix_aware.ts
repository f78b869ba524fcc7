/**
 * @module
 * Prefix aware: the instance with the longest cached prefix match (the least
 * loaded of them); when no instance matches more than the others, the
 * least-loaded instance.
 */
import { leastLoaded, leastLoadedLongestMatch } from "./_least_loaded.ts";
import type { RoutingPolicy } from "./policy.ts";

/** Always follows the longest cached prefix, whatever the queue behind it. */
export function prefixAware(): RoutingPolicy {
  return {
    name: "prefix_aware",
    choose(request, view, random) {
      const cached = leastLoadedLongestMatch(view, request, random);
      return cached >= 0 ? cached : leastLoaded(view, random);
    },
  };
}
