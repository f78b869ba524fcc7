/**
 * @module
 * NVIDIA Dynamo's KV router: the lowest cost of prefill blocks still to
 * compute plus decode blocks in flight; a temperature turns the arg-min into
 * a softmax sample.
 */
import type { PolicyDescriptor, RandomStream, RoutingPolicy } from "./policy.ts";
import { availabilityMask } from "./_availability.ts";
import { effectiveMatch, HOST_CREDIT } from "./_host_credit.ts";
import { pickBy } from "./_pick.ts";

/** Parameters of {@linkcode dynamoKv}, with Dynamo's default. */
export interface DynamoKvOptions {
  /** 0: lowest cost wins (random among equals). > 0: sample with probability ∝ exp(−cost/max cost / T). @default 0 */
  readonly temperature?: number;
  /** Credit for a prefix block only in an instance's host KV tier, as a fraction of a GPU hit. @default 0.8 */
  readonly hostCredit?: number;
}

/**
 * cost = ((the instance's pending prefill blocks + this prompt's blocks −
 * its cached overlap) + the instance's decode blocks) ÷ its capacity: blocks
 * of work, in the time the fastest instance would take (a uniform fleet
 * divides by 1, Dynamo's cost exactly). The overlap counts host-tier blocks
 * at `hostCredit` (Dynamo weighs host hits separately too). Only available
 * instances are costed and chosen; at a temperature, the softmax is over
 * them (normalised by the largest of their costs).
 */
export function dynamoKv(options: DynamoKvOptions = {}): RoutingPolicy {
  const temperature = options.temperature ?? 0, hostCredit = options.hostCredit ?? HOST_CREDIT.default;
  if (!(temperature >= 0)) {
    throw new RangeError(`dynamo_kv: temperature must be a number >= 0, got ${temperature}`);
  }
  return {
    name: "dynamo_kv",
    choose(request, view, random) {
      const B = view.blockTokens;
      const promptBlocks = Math.ceil((request.prefixTokens + request.suffixTokens) / B);
      const cost = (i: number) =>
        (view.pendingPrefillTokens[i] / B + promptBlocks - effectiveMatch(view, i, request, hostCredit) +
          view.decodeBlocks[i]) / view.capacity[i];
      const available = availabilityMask(view);
      if (temperature === 0) return pickBy(view.instanceCount, (i) => -cost(i), random, available);
      const costs = Array.from(
        { length: view.instanceCount },
        (_, i) => available === undefined || available[i] === 1 ? cost(i) : NaN,
      );
      return softmaxSample(costs, temperature, random, available);
    },
  };
}

/**
 * An index sampled with probability ∝ exp(−cost/max cost / T), one draw;
 * with `available`, among the indices whose entry is 1 (the others weigh 0,
 * and their costs are not read). Without it, exactly the rule over all.
 */
function softmaxSample(
  costs: readonly number[],
  temperature: number,
  random: RandomStream,
  available: ArrayLike<number> | undefined,
): number {
  const eligible = (i: number) => available === undefined || available[i] === 1;
  let max = -Infinity, last = -1;
  for (let i = 0; i < costs.length; i++) {
    if (!eligible(i)) continue;
    max = Math.max(max, costs[i]);
    last = i;
  }
  const weights = costs.map((c, i) => eligible(i) ? Math.exp(-(max > 0 ? c / max : 0) / temperature) : 0);
  let u = random() * weights.reduce((a, b) => a + b, 0);
  for (let i = 0; i < weights.length; i++) if (eligible(i) && (u -= weights[i]) < 0) return i;
  return last;
}

/** {@linkcode dynamoKv}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "dynamo_kv",
  summary:
    "NVIDIA Dynamo's KV router: lowest cost of prefill blocks to compute plus decode blocks in flight.",
  params: {
    temperature: {
      doc: "0: lowest cost wins; > 0: softmax sample over normalised costs",
      default: 0,
      min: 0,
    },
    hostCredit: HOST_CREDIT,
  },
  reads: { blocks: true, load: true },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => dynamoKv(params),
} as const satisfies PolicyDescriptor<"dynamo_kv">;
