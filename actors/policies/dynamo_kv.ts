/**
 * @module
 * NVIDIA Dynamo's KV router: the lowest cost of prefill blocks still to
 * compute plus decode blocks in flight; a temperature turns the arg-min into
 * a softmax sample.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { pickBy } from "./_pick.ts";

/** Parameters of {@linkcode dynamoKv}, with Dynamo's default. */
export interface DynamoKvOptions {
  /** 0: lowest cost wins (random among equals). > 0: sample with probability ∝ exp(−cost/max cost / T). @default 0 */
  readonly temperature?: number;
}

/**
 * cost = (the instance's pending prefill blocks + this prompt's blocks −
 * its cached overlap) + the instance's decode blocks.
 */
export function dynamoKv(options: DynamoKvOptions = {}): RoutingPolicy {
  const temperature = options.temperature ?? 0;
  if (!(temperature >= 0)) {
    throw new RangeError(`dynamo_kv: temperature must be a number >= 0, got ${temperature}`);
  }
  return {
    name: "dynamo_kv",
    choose(request, view, random) {
      const B = view.blockTokens;
      const promptBlocks = Math.ceil((request.prefixTokens + request.suffixTokens) / B);
      const cost = (i: number) =>
        view.pendingPrefillTokens[i] / B + promptBlocks - view.matchedBlocks(i, request) +
        view.decodeBlocks[i];
      if (temperature === 0) return pickBy(view.instanceCount, (i) => -cost(i), random);
      const costs = Array.from({ length: view.instanceCount }, (_, i) => cost(i));
      const max = Math.max(...costs);
      const weights = costs.map((c) => Math.exp(-(max > 0 ? c / max : 0) / temperature));
      let u = random() * weights.reduce((a, b) => a + b, 0);
      for (let i = 0; i < weights.length; i++) if ((u -= weights[i]) < 0) return i;
      return weights.length - 1;
    },
  };
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
  },
  reads: { blocks: true, load: true },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => dynamoKv(params),
} as const satisfies PolicyDescriptor<"dynamo_kv">;
