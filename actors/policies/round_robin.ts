/**
 * @module
 * Round robin: rotate through the instances, ignoring their state.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";

/** Sends request k to instance k mod n. */
export function roundRobin(): RoutingPolicy {
  return { name: "round_robin", choose: (_request, view) => view.routedCount % view.instanceCount };
}

/** {@linkcode roundRobin}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "round_robin",
  summary: "Request k to instance k mod n, ignoring state (the original study).",
  params: {},
  reads: { blocks: false, load: false },
  create: (): RoutingPolicy => roundRobin(),
} as const satisfies PolicyDescriptor<"round_robin">;
