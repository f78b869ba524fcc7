/**
 * @module
 * The built-in routing policies, by name, and a factory from a policy spec.
 */
import { hybrid } from "./hybrid.ts";
import { leastLoad } from "./least_load.ts";
import type { RoutingPolicy } from "./policy.ts";
import { prefixAware } from "./prefix_aware.ts";
import { randomChoice } from "./random.ts";
import { roundRobin } from "./round_robin.ts";

export type { RouterView, RoutingPolicy } from "./policy.ts";
export { hybrid, leastLoad, prefixAware, randomChoice, roundRobin };

/** Names of the built-in policies. */
export const POLICY_NAMES = ["round_robin", "least_load", "prefix_aware", "hybrid", "random"] as const;

/** A built-in policy's name. */
export type PolicyName = typeof POLICY_NAMES[number];

/** Which policy to use, with its parameters. */
export interface PolicySpec {
  /** A built-in policy's name. */
  readonly name: PolicyName;
  /** Queue-depth gate of `hybrid`; ignored by the others. @default 1 */
  readonly threshold?: number;
}

/** Builds the policy a spec names. */
export function createPolicy(spec: PolicySpec): RoutingPolicy {
  switch (spec.name) {
    case "round_robin":
      return roundRobin();
    case "least_load":
      return leastLoad();
    case "prefix_aware":
      return prefixAware();
    case "hybrid":
      return hybrid({ threshold: spec.threshold });
    case "random":
      return randomChoice();
  }
}
