/**
 * @module
 * Round robin: rotate through the instances the router believes available,
 * ignoring their load.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { availabilityMask, nthAvailable } from "./_availability.ts";
import { NO_CACHE, NO_LOAD } from "./_real_views.ts";

/**
 * Sends request k to the (k mod m)-th of the m available instances, in
 * index order: with every instance available, instance k mod n. The real
 * round-robin routers cycle over the healthy set the same way (SGLang's
 * `RoundRobinPolicy::select_worker`, `sgl-model-gateway/src/policies/round_robin.rs`:
 * a counter modulo the healthy workers' count, indexing the healthy list),
 * so an instance that goes down splits its turns evenly among the others
 * rather than handing them all to its successor.
 */
export function roundRobin(): RoutingPolicy {
  return {
    name: "round_robin",
    choose(_request, view) {
      const available = availabilityMask(view);
      if (available === undefined) return view.routedCount % view.instanceCount;
      return nthAvailable(available, view.instanceCount, view.routedCount % view.availableCount);
    },
  };
}

/** {@linkcode roundRobin}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "round_robin",
  summary: "Request k to instance k mod n, ignoring state (the original study).",
  params: {},
  reads: { blocks: false, load: false },
  view: {
    cache: NO_CACHE,
    load: NO_LOAD,
    citation:
      "the original study; SGLang `RoundRobinPolicy::select_worker` (sgl-model-gateway/src/policies/round_robin.rs) cycles over the healthy workers",
  },
  create: (): RoutingPolicy => roundRobin(),
} as const satisfies PolicyDescriptor<"round_robin">;
