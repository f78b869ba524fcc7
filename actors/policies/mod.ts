/**
 * @module
 * The built-in routing policies, by name, and a factory from a policy spec.
 */
import { chwbl } from "./chwbl.ts";
import { dynamoKv } from "./dynamo_kv.ts";
import { hybrid } from "./hybrid.ts";
import { leastLoad } from "./least_load.ts";
import { llmdWeighted } from "./llmd_weighted.ts";
import type { RoutingPolicy } from "./policy.ts";
import { powerOfTwo } from "./power_of_two.ts";
import { prebleE2 } from "./preble_e2.ts";
import { prefixAware } from "./prefix_aware.ts";
import { randomChoice } from "./random.ts";
import { roundRobin } from "./round_robin.ts";
import { sglangCacheAware } from "./sglang_cache_aware.ts";
import { vllmPrefix } from "./vllm_prefix.ts";

export type { RouterView, RoutingPolicy } from "./policy.ts";
export {
  chwbl,
  dynamoKv,
  hybrid,
  leastLoad,
  llmdWeighted,
  powerOfTwo,
  prebleE2,
  prefixAware,
  randomChoice,
  roundRobin,
  sglangCacheAware,
  vllmPrefix,
};

/** Names of the built-in policies: the original study's four, `random`, then the production routers'. */
export const POLICY_NAMES = [
  "round_robin",
  "least_load",
  "prefix_aware",
  "hybrid",
  "random",
  "sglang_cache_aware",
  "llmd_weighted",
  "dynamo_kv",
  "power_of_two",
  "chwbl",
  "preble_e2",
  "vllm_prefix",
] as const;

/** A built-in policy's name. */
export type PolicyName = typeof POLICY_NAMES[number];

/** Each policy's parameters (all optional; defaults are the shipped ones, see each policy). */
export const POLICY_PARAMETERS: Readonly<Record<PolicyName, readonly string[]>> = {
  round_robin: [],
  least_load: [],
  prefix_aware: [],
  hybrid: ["threshold"],
  random: [],
  sglang_cache_aware: ["balanceAbs", "balanceRel", "cacheThreshold"],
  llmd_weighted: ["prefixWeight", "queueWeight", "kvWeight"],
  dynamo_kv: ["temperature"],
  power_of_two: [],
  chwbl: ["loadFactor", "ringPoints"],
  preble_e2: [],
  vllm_prefix: [],
};

/** Which policy to use, with its parameters. */
export interface PolicySpec {
  /** A built-in policy's name. */
  readonly name: PolicyName;
  /** Queue-depth gate of `hybrid`. @default 1 */
  readonly threshold?: number;
  readonly balanceAbs?: number;
  readonly balanceRel?: number;
  readonly cacheThreshold?: number;
  readonly prefixWeight?: number;
  readonly queueWeight?: number;
  readonly kvWeight?: number;
  readonly temperature?: number;
  readonly loadFactor?: number;
  readonly ringPoints?: number;
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
    case "sglang_cache_aware":
      return sglangCacheAware(spec);
    case "llmd_weighted":
      return llmdWeighted(spec);
    case "dynamo_kv":
      return dynamoKv(spec);
    case "power_of_two":
      return powerOfTwo();
    case "chwbl":
      return chwbl(spec);
    case "preble_e2":
      return prebleE2();
    case "vllm_prefix":
      return vllmPrefix();
  }
}
