/**
 * @module
 * SGLang's `power_of_two`: two distinct instances at random, the less loaded
 * of them (the router's in-flight count ÷ the instance's capacity).
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";

/** Power of two choices; a tie between the two is broken at random. */
export function powerOfTwo(): RoutingPolicy {
  return {
    name: "power_of_two",
    choose(_request, view, random) {
      const n = view.instanceCount;
      if (n === 1) return 0;
      const a = Math.floor(random() * n);
      let b = Math.floor(random() * (n - 1));
      if (b >= a) b++;
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
  create: (): RoutingPolicy => powerOfTwo(),
} as const satisfies PolicyDescriptor<"power_of_two">;
