/**
 * @module
 * Least load: the instance with the shortest queue (waiting + running), ties
 * broken at random.
 */
import { leastLoaded } from "./_least_loaded.ts";
import type { RoutingPolicy } from "./policy.ts";

/** Picks the instance with the fewest requests waiting or running. */
export function leastLoad(): RoutingPolicy {
  return { name: "least_load", choose: (_request, view, random) => leastLoaded(view, random) };
}
