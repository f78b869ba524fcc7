/**
 * @module
 * Round robin: rotate through the instances, ignoring their state.
 */
import type { RoutingPolicy } from "./policy.ts";

/** Sends request k to instance k mod n. */
export function roundRobin(): RoutingPolicy {
  return { name: "round_robin", choose: (_request, view) => view.routedCount % view.instanceCount };
}
