/**
 * @module
 * Prefix aware: the instance with the longest cached prefix match (the least
 * loaded of them); when no instance matches more than the others, the
 * least-loaded instance.
 */
import { leastLoaded, leastLoadedLongestMatch } from "./_least_loaded.ts";
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";

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

/** {@linkcode prefixAware}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "prefix_aware",
  summary:
    "The longest cached prefix match (the least loaded of equals); no match: the least loaded (the original study).",
  params: {},
  reads: { blocks: true, load: false },
  create: (): RoutingPolicy => prefixAware(),
} as const satisfies PolicyDescriptor<"prefix_aware">;
