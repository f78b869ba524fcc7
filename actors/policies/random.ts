/**
 * @module
 * Random: a uniformly random instance. It splits a Poisson stream into
 * independent Poisson streams, which makes it the policy for validating the
 * kernel against queueing theory.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { availabilityMask, nthAvailable } from "./_availability.ts";
import { NO_CACHE, NO_LOAD } from "./_real_views.ts";

/**
 * Picks an instance uniformly at random from the router's stream: one draw,
 * k = ⌊u × available count⌋, mapped to the k-th available instance (with
 * every instance available, instance k: the draw and choice as ever).
 */
export function randomChoice(): RoutingPolicy {
  return {
    name: "random",
    choose(_request, view, random) {
      const available = availabilityMask(view);
      if (available === undefined) return Math.floor(random() * view.instanceCount);
      return nthAvailable(available, view.instanceCount, Math.floor(random() * view.availableCount));
    },
  };
}

/** {@linkcode randomChoice}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "random",
  summary: "A uniformly random instance (splits a Poisson stream; the queueing-theory check).",
  params: {},
  reads: { blocks: false, load: false },
  view: { cache: NO_CACHE, load: NO_LOAD, citation: "a baseline: reads nothing" },
  create: (): RoutingPolicy => randomChoice(),
} as const satisfies PolicyDescriptor<"random">;
