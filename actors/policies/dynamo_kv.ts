/**
 * @module
 * NVIDIA Dynamo's KV router: the lowest cost of prefill blocks still to
 * compute plus decode blocks in flight, both counted by the router itself;
 * a temperature turns the arg-min into a softmax sample.
 */
import type { PolicyDescriptor, RandomStream, RouterView, RoutingPolicy } from "./policy.ts";
import { availabilityMask } from "./_availability.ts";
import { effectiveMatch, HOST_CREDIT } from "./_host_credit.ts";
import { pickBy } from "./_pick.ts";
import { ROUTER_LOAD } from "./_real_views.ts";

/** Parameters of {@linkcode dynamoKv}, with Dynamo's defaults. */
export interface DynamoKvOptions {
  /** 0: lowest cost wins (the smaller tree among equals). > 0: softmax sample over range-normalised costs. @default 0 */
  readonly temperature?: number;
  /** Weight of the prefill blocks against the decode blocks (`overlap_score_weight`). @default 1 */
  readonly overlapWeight?: number;
  /** Credit for a prefix block only in an instance's host KV tier, as a fraction of a GPU hit. @default 0.8 */
  readonly hostCredit?: number;
}

/**
 * cost = (`overlapWeight` × prefill blocks + decode blocks) ÷ the instance's
 * capacity, Dynamo's `select_worker` logit (lib/kv-router,
 * scheduling/selector.rs), with the loads the router counts itself
 * (`potential_blocks_and_tokens` of the slot tracker's `ActiveSequences`):
 *
 * - prefill blocks = (the instance's active prefill tokens — prompts the
 *   router sent there that have not produced their first token, each less
 *   the overlap it had — plus this prompt less its overlap) ÷ block size;
 * - decode blocks = the instance's active blocks (distinct prompt blocks of
 *   its unfinished requests) plus the blocks this prompt would add to them
 *   (`new_blocks`: a prefix its active requests share is not new).
 *
 * The overlap is the cached prefix the view reports (host-tier blocks at
 * `hostCredit`: Dynamo weighs host hits separately too). Dividing by
 * capacity puts the cost in the fastest instance's time; a uniform fleet
 * divides by 1, Dynamo's cost exactly.
 *
 * At T = 0 the lowest cost wins; among equal costs the instance whose tree
 * (blocks the view believes cached there) is smallest, then at random —
 * Dynamo's tie-break. At T > 0 one draw samples with probability ∝
 * exp(−(cost − min) / (max − min) / T) (Dynamo's `softmax_sample` normalises
 * by the range; all equal: uniform). Only available instances are costed
 * and chosen.
 */
export function dynamoKv(options: DynamoKvOptions = {}): RoutingPolicy {
  const temperature = options.temperature ?? 0, hostCredit = options.hostCredit ?? HOST_CREDIT.default;
  const overlapWeight = options.overlapWeight ?? 1;
  if (!(temperature >= 0)) {
    throw new RangeError(`dynamo_kv: temperature must be a number >= 0, got ${temperature}`);
  }
  return {
    name: "dynamo_kv",
    choose(request, view, random) {
      const cost = (i: number) => dynamoCost(view, i, request, hostCredit, overlapWeight);
      const available = availabilityMask(view);
      if (temperature > 0) {
        const costs = Array.from(
          { length: view.instanceCount },
          (_, i) => available === undefined || available[i] === 1 ? cost(i) : NaN,
        );
        return softmaxSample(costs, temperature, random, available);
      }
      let lowest = Infinity;
      const costs = new Float64Array(view.instanceCount).fill(NaN);
      for (let i = 0; i < view.instanceCount; i++) {
        if (available !== undefined && available[i] !== 1) continue;
        costs[i] = cost(i);
        if (costs[i] < lowest) lowest = costs[i];
      }
      return pickBy(
        view.instanceCount,
        (i) => costs[i] === lowest ? -view.cachedBlockCount(i) : NaN,
        random,
        available,
      );
    },
  };
}

/** Instance `i`'s cost for `request` (see {@linkcode dynamoKv}). */
function dynamoCost(
  view: RouterView,
  i: number,
  request: Parameters<RoutingPolicy["choose"]>[0],
  hostCredit: number,
  overlapWeight: number,
): number {
  const B = view.blockTokens, prompt = request.prefixTokens + request.suffixTokens;
  const overlapTokens = Math.min(prompt, effectiveMatch(view, i, request, hostCredit) * B);
  const prefillBlocks = (view.activePrefillTokens[i] + prompt - overlapTokens) / B;
  const decodeBlocks = view.activeBlocks[i] + view.newBlocks(i, request);
  return (overlapWeight * prefillBlocks + decodeBlocks) / view.capacity[i];
}

/**
 * An index sampled with probability ∝ exp(−(cost − min) / (max − min) / T),
 * one draw; all costs equal: uniformly. With `available`, among the
 * indices whose entry is 1 (the others weigh 0, and their costs are not read).
 */
function softmaxSample(
  costs: readonly number[],
  temperature: number,
  random: RandomStream,
  available: ArrayLike<number> | undefined,
): number {
  const eligible = (i: number) => available === undefined || available[i] === 1;
  let max = -Infinity, min = Infinity, last = -1;
  for (let i = 0; i < costs.length; i++) {
    if (!eligible(i)) continue;
    max = Math.max(max, costs[i]);
    min = Math.min(min, costs[i]);
    last = i;
  }
  const range = max - min;
  const weights = costs.map((c, i) =>
    eligible(i) ? (range > 0 ? Math.exp(-(c - min) / range / temperature) : 1) : 0
  );
  let u = random() * weights.reduce((a, b) => a + b, 0);
  for (let i = 0; i < weights.length; i++) if (eligible(i) && (u -= weights[i]) < 0) return i;
  return last;
}

/** {@linkcode dynamoKv}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "dynamo_kv",
  summary:
    "NVIDIA Dynamo's KV router: lowest cost of prefill blocks to compute plus decode blocks in flight, as the router counts them.",
  params: {
    temperature: {
      doc:
        "0: lowest cost wins (the smaller tree among equals); > 0: softmax sample over range-normalised costs",
      default: 0,
      min: 0,
    },
    overlapWeight: {
      doc: "weight of the prefill blocks against the decode blocks (Dynamo's overlap_score_weight)",
      default: 1,
      min: 0,
    },
    hostCredit: HOST_CREDIT,
  },
  reads: { blocks: true, load: false, requests: true },
  view: {
    cache: { source: "engine_events", unit: "blocks", capacity: "engine" },
    load: ROUTER_LOAD,
    citation:
      "ai-dynamo/dynamo lib/kv-router: config.rs (`use_kv_events` true: the indexer is fed by the engines' KV events), scheduling/selector.rs (`select_worker`), the slot tracker's `ActiveSequences` (`potential_blocks_and_tokens`: active prefill tokens and blocks counted by the router from dispatch to first token and to finish)",
  },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => dynamoKv(params),
} as const satisfies PolicyDescriptor<"dynamo_kv">;
