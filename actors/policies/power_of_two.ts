/**
 * @module
 * SGLang's `power_of_two`: two distinct instances at random, the less loaded
 * of them (the router's in-flight count ÷ the instance's capacity).
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { availabilityMask, nthAvailable } from "./_availability.ts";
import { NO_CACHE, ROUTER_LOAD } from "./_real_views.ts";

/**
 * Power of two choices; a tie between the two is broken at random. The two
 * are distinct available instances: the draws pick the k-th and j-th of the
 * m available ones exactly as they pick instances k and j of a fleet of m
 * (with every instance available, the draws and choice as ever); a single
 * available instance is chosen without a draw.
 */
export function powerOfTwo(): RoutingPolicy {
  return {
    name: "power_of_two",
    choose(_request, view, random) {
      const n = view.instanceCount, available = availabilityMask(view);
      const m = available === undefined ? n : view.availableCount;
      if (m === 1) return available === undefined ? 0 : nthAvailable(available, n, 0);
      let a = Math.floor(random() * m), b = Math.floor(random() * (m - 1));
      if (b >= a) b++;
      if (available !== undefined) {
        a = nthAvailable(available, n, a);
        b = nthAvailable(available, n, b);
      }
      const la = view.inFlight[a] / view.capacity[a], lb = view.inFlight[b] / view.capacity[b];
      return la < lb ? a : lb < la ? b : random() < 0.5 ? a : b;
    },
  };
}

/** {@linkcode powerOfTwo}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "power_of_two",
  summary:
    "SGLang's power_of_two: two distinct random instances, the one with fewer in flight per unit of capacity.",
  params: {},
  reads: { blocks: false, load: false },
  view: {
    cache: NO_CACHE,
    load: ROUTER_LOAD,
    citation:
      "sgl-model-gateway/src/policies/power_of_two.rs (request counts, `w.load()`, unless the token-load monitor is on)",
  },
  create: (): RoutingPolicy => powerOfTwo(),
} as const satisfies PolicyDescriptor<"power_of_two">;
