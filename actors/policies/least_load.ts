/**
 * @module
 * Least load: the instance with the shortest queue (waiting + running) for
 * its capacity, ties broken at random.
 */
import { leastLoaded } from "./_least_loaded.ts";
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { NO_CACHE, PUSHED_LOAD } from "./_real_views.ts";

/** Picks the available instance with the fewest requests waiting or running per unit of capacity (uniform fleet: the fewest). */
export function leastLoad(): RoutingPolicy {
  return { name: "least_load", choose: (_request, view, random) => leastLoaded(view, random) };
}

/** {@linkcode leastLoad}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "least_load",
  summary:
    "The instance with the fewest requests waiting or running per unit of capacity; ties at random (the original study).",
  params: {},
  reads: { blocks: false, load: false },
  view: {
    cache: NO_CACHE,
    load: PUSHED_LOAD,
    originalStudy: true,
    citation: "the original study's simulator: the router reads each instance's queue as it is",
  },
  create: (): RoutingPolicy => leastLoad(),
} as const satisfies PolicyDescriptor<"least_load">;
