/**
 * @module
 * The registry of built-in routing policies. Each policy file exports a
 * {@linkcode PolicyDescriptor} as `descriptor`; adding a policy is that file
 * plus one import and one entry in {@linkcode POLICIES}. The scenario schema,
 * the command line, sweep expansion, labels, status reporting, the contract
 * suite and the docs' policy table all derive from this list.
 */
import { descriptor as chwblPolicy } from "./chwbl.ts";
import { descriptor as dynamoKvPolicy } from "./dynamo_kv.ts";
import { descriptor as hybridPolicy } from "./hybrid.ts";
import { descriptor as leastLoadPolicy } from "./least_load.ts";
import { descriptor as llmdWeightedPolicy } from "./llmd_weighted.ts";
import type { PolicyDescriptor, PolicyParameter, PolicyReads, RoutingPolicy } from "./policy.ts";
import { descriptor as powerOfTwoPolicy } from "./power_of_two.ts";
import { descriptor as prebleE2Policy } from "./preble_e2.ts";
import { descriptor as prefixAwarePolicy } from "./prefix_aware.ts";
import { descriptor as randomPolicy } from "./random.ts";
import { descriptor as roundRobinPolicy } from "./round_robin.ts";
import { descriptor as sglangCacheAwarePolicy } from "./sglang_cache_aware.ts";
import { descriptor as vllmPrefixPolicy } from "./vllm_prefix.ts";

export type {
  CacheSource,
  PolicyDescriptor,
  PolicyParameter,
  PolicyReads,
  RealCacheView,
  RealLoadView,
  RealView,
  RouterView,
  RoutingPolicy,
} from "./policy.ts";
export { CHARS_PER_TOKEN, realViewDefaults, type ViewDefaults, type ViewFleet } from "./real_view.ts";
export { chwbl } from "./chwbl.ts";
export { dynamoKv } from "./dynamo_kv.ts";
export { hybrid } from "./hybrid.ts";
export { leastLoad } from "./least_load.ts";
export { llmdWeighted } from "./llmd_weighted.ts";
export { powerOfTwo } from "./power_of_two.ts";
export { prebleE2 } from "./preble_e2.ts";
export { prefixAware } from "./prefix_aware.ts";
export { randomChoice } from "./random.ts";
export { roundRobin } from "./round_robin.ts";
export { sglangCacheAware } from "./sglang_cache_aware.ts";
export { vllmPrefix } from "./vllm_prefix.ts";

/** Every built-in policy, in the order help text, docs and benches list them: the original study's four, `random`, then the production routers'. */
export const POLICIES = [
  roundRobinPolicy,
  leastLoadPolicy,
  prefixAwarePolicy,
  hybridPolicy,
  randomPolicy,
  sglangCacheAwarePolicy,
  llmdWeightedPolicy,
  dynamoKvPolicy,
  powerOfTwoPolicy,
  chwblPolicy,
  prebleE2Policy,
  vllmPrefixPolicy,
] as const satisfies readonly PolicyDescriptor[];

/** A built-in policy's name. */
export type PolicyName = typeof POLICIES[number]["name"];

/** Names of the built-in policies, in registry order. */
export const POLICY_NAMES: readonly [PolicyName, ...PolicyName[]] = POLICIES.map((d) => d.name) as [
  PolicyName,
  ...PolicyName[],
];

const BY_NAME: ReadonlyMap<string, PolicyDescriptor> = new Map(POLICIES.map((d) => [d.name, d]));

/** Which policy to use, with its parameters (each optional; absent ones take the descriptor's default). */
export interface PolicySpec {
  /** A built-in policy's name. */
  readonly name: PolicyName;
  /** The policy's parameters, by the names its descriptor gives. */
  readonly [parameter: string]: number | string | undefined;
}

/** The descriptor of the built-in policy `name`, or undefined when there is none. */
export function policyDescriptor(name: string): PolicyDescriptor | undefined {
  return BY_NAME.get(name);
}

/** The parameters a spec gives (its fields other than `name`), checked against the descriptor. */
export function policyParams(spec: PolicySpec): Record<string, number> {
  const descriptor = requireDescriptor(spec.name);
  const params: Record<string, number> = {};
  for (const [key, value] of Object.entries(spec)) {
    if (key === "name" || value === undefined) continue;
    // Own keys only: `constructor` or `toString` is no policy's parameter.
    const parameter = Object.hasOwn(descriptor.params, key) ? descriptor.params[key] : undefined;
    if (parameter === undefined) {
      throw new RangeError(
        `${spec.name}: ${key} is not a parameter (its parameters: ${parameterList(descriptor)})`,
      );
    }
    if (typeof value !== "number" || !inBounds(parameter, value)) {
      throw new RangeError(`${spec.name}: ${key} must be ${describeBounds(parameter)}, got ${value}`);
    }
    params[key] = value;
  }
  return params;
}

/**
 * Builds the policy a spec names, its absent parameters at the descriptor's defaults.
 * @throws {RangeError} for an unknown name or parameter, or one out of bounds.
 */
export function createPolicy(spec: PolicySpec): RoutingPolicy {
  const descriptor = requireDescriptor(spec.name);
  // The descriptor's defaults are the ones that run, whatever a factory's own fallback says.
  const defaults = Object.fromEntries(Object.entries(descriptor.params).map(([key, p]) => [key, p.default]));
  return descriptor.create({ ...defaults, ...policyParams(spec) });
}

/**
 * The policy's name in reports: its name, followed by the parameters that
 * are always labelled or differ from their default, by their short names —
 * `round_robin`, `hybrid(thr=1)`, `sglang_cache_aware(balanceAbs=32)`.
 * `omit` leaves parameters out (a CSV that gives one a column of its own).
 */
export function policyLabel(spec: PolicySpec, options: { readonly omit?: readonly string[] } = {}): string {
  const descriptor = requireDescriptor(spec.name);
  const shown: string[] = [];
  for (const [key, parameter] of Object.entries(descriptor.params)) {
    if (options.omit?.includes(key)) continue;
    const value = typeof spec[key] === "number" ? spec[key] as number : parameter.default;
    if (parameter.alwaysLabelled || value !== parameter.default) {
      shown.push(`${parameter.short ?? key}=${value}`);
    }
  }
  return shown.length === 0 ? descriptor.name : `${descriptor.name}(${shown.join(",")})`;
}

/** What the policy `name` reads from the view; a plugin (not in the registry) may read anything. */
export function policyReads(name: string): PolicyReads {
  return BY_NAME.get(name)?.reads ?? { blocks: true, load: true, requests: true };
}

/** `threshold` (or `none`): a descriptor's parameter names, for messages. */
export function parameterList(descriptor: PolicyDescriptor): string {
  const names = Object.keys(descriptor.params);
  return names.length > 0 ? names.join(", ") : "none";
}

/** Whether `value` is within the parameter's bounds. */
export function inBounds(parameter: PolicyParameter, value: number): boolean {
  if (!Number.isFinite(value)) return false;
  if (parameter.exclusiveMin ? value <= parameter.min : value < parameter.min) return false;
  if (parameter.max !== undefined && value > parameter.max) return false;
  return !parameter.integer || Number.isInteger(value);
}

/** The bounds in words: `a number >= 0`, `an integer >= 1`, `a number in [0, 1]`. */
export function describeBounds(parameter: PolicyParameter): string {
  const kind = parameter.integer ? "an integer" : "a number";
  if (parameter.max !== undefined) {
    return `${kind} in ${parameter.exclusiveMin ? "(" : "["}${parameter.min}, ${parameter.max}]`;
  }
  return `${kind} ${parameter.exclusiveMin ? ">" : ">="} ${parameter.min}`;
}

function requireDescriptor(name: string): PolicyDescriptor {
  const descriptor = BY_NAME.get(name);
  if (descriptor === undefined) {
    throw new RangeError(`unknown policy "${name}" (built-in policies: ${POLICY_NAMES.join(", ")})`);
  }
  return descriptor;
}
