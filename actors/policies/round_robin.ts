/**
 * @module
 * Round robin: rotate through the instances, ignoring their load (skipping
 * only those the router believes unavailable).
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { availabilityMask, nextAvailable } from "./_availability.ts";

/**
 * Sends request k to instance k mod n; when that instance is unavailable, to
 * the next available one after it (cyclically), so the instance after an
 * unavailable one takes its turns too.
 */
export function roundRobin(): RoutingPolicy {
  return {
    name: "round_robin",
    choose(_request, view) {
      const n = view.instanceCount, start = view.routedCount % n, available = availabilityMask(view);
      return available === undefined ? start : nextAvailable(available, n, start);
    },
  };
}

/** {@linkcode roundRobin}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "round_robin",
  summary: "Request k to instance k mod n, ignoring state (the original study).",
  params: {},
  reads: { blocks: false, load: false },
  create: (): RoutingPolicy => roundRobin(),
} as const satisfies PolicyDescriptor<"round_robin">;
