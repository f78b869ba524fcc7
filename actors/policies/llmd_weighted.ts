/**
 * @module
 * llm-d / Gateway API Inference Extension scheduling: weighted scorers and a
 * max-score picker with random tie-break.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { availabilityMask } from "./_availability.ts";
import { effectiveMatch, HOST_CREDIT } from "./_host_credit.ts";
import { pickBy } from "./_pick.ts";

/** Scorer weights of {@linkcode llmdWeighted}, with llm-d's defaults. */
export interface LlmdWeightedOptions {
  /** Weight of the prefix score (matched blocks / all blocks of the prompt). @default 3 */
  readonly prefixWeight?: number;
  /** Weight of the queue score ((q_max − q) / (q_max − q_min); 1 when all equal). @default 2 */
  readonly queueWeight?: number;
  /** Weight of the KV score (1 − KV utilisation). @default 2 */
  readonly kvWeight?: number;
  /** Credit for a prefix block only in an instance's host KV tier, as a fraction of a GPU hit. @default 0.8 */
  readonly hostCredit?: number;
  /** The prompt's leading full blocks the prefix score counts (llm-d's `MaxPrefixBlocksToMatch`). @default 256 */
  readonly maxPrefixBlocks?: number;
}

/**
 * Score = prefix·wP + queue·wQ + kv·wK; the highest score wins, ties at
 * random. The prefix score is matched ÷ total over the prompt's leading
 * full blocks, at most `maxPrefixBlocks` of them (llm-d hashes full blocks
 * and truncates at `MaxPrefixBlocksToMatch`, so a prompt whose first 256
 * blocks are cached scores 1 however long it is). The queue is waiting ÷ capacity (a queue drains at its instance's
 * speed); KV utilisation is a share of the instance's own blocks, already
 * relative, so it is not divided. The prefix score counts host-tier blocks at
 * `hostCredit`, as llm-d's precise scorer weighs its CPU tier. Only
 * available instances are scored, and the queue score's range is theirs (as
 * llm-d scores only the endpoints its filters kept).
 */
export function llmdWeighted(options: LlmdWeightedOptions = {}): RoutingPolicy {
  const wP = options.prefixWeight ?? 3, wQ = options.queueWeight ?? 2, wK = options.kvWeight ?? 2;
  const hostCredit = options.hostCredit ?? HOST_CREDIT.default;
  const maxBlocks = options.maxPrefixBlocks ?? 256;
  return {
    name: "llmd_weighted",
    choose(request, view, random) {
      const { waiting, capacity } = view;
      const available = availabilityMask(view);
      const q = (i: number) => waiting[i] / capacity[i];
      let qMax = -Infinity, qMin = Infinity;
      for (let i = 0; i < view.instanceCount; i++) {
        if (available !== undefined && available[i] !== 1) continue;
        const qi = q(i);
        if (qi > qMax) qMax = qi;
        if (qi < qMin) qMin = qi;
      }
      // Blocks hashed: the prompt's full blocks, at most `maxPrefixBlocks` (llm-d truncates), so the score saturates.
      const blocks = Math.min(
        Math.floor((request.prefixTokens + request.suffixTokens) / view.blockTokens),
        maxBlocks,
      );
      return pickBy(
        view.instanceCount,
        (i) => {
          const matched = Math.min(effectiveMatch(view, i, request, hostCredit), blocks);
          const prefix = blocks > 0 ? matched / blocks : 0;
          const queue = qMax === qMin ? 1 : (qMax - q(i)) / (qMax - qMin);
          const kv = 1 - view.kvUtilization[i];
          return wP * prefix + wQ * queue + wK * kv;
        },
        random,
        available,
      );
    },
  };
}

/** {@linkcode llmdWeighted}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "llmd_weighted",
  summary: "llm-d scheduler: weighted prefix, queue and KV-utilisation scores, max score wins.",
  params: {
    prefixWeight: { doc: "weight of the prefix score (matched / all prompt blocks)", default: 3, min: 0 },
    queueWeight: {
      doc: "weight of the queue score ((q_max − q) / (q_max − q_min), q = waiting / capacity)",
      default: 2,
      min: 0,
    },
    kvWeight: { doc: "weight of the KV score (1 − KV utilisation)", default: 2, min: 0 },
    maxPrefixBlocks: {
      doc: "leading full blocks of the prompt the prefix score counts (llm-d's MaxPrefixBlocksToMatch)",
      default: 256,
      min: 1,
      integer: true,
    },
    hostCredit: HOST_CREDIT,
  },
  reads: { blocks: true, load: true },
  view: {
    cache: {
      source: "router_index",
      unit: "blocks",
      maxBlocks: 256,
      maxBlocksParameter: "maxPrefixBlocks",
      capacity: "engine",
      eviction: "on_insert",
    },
    load: { source: "scraped", refreshMs: 50 },
    citation:
      "llm-d-inference-scheduler: the approximate prefix plugin (`DefaultConfig`: AutoTune on, so the per-pod LRU holds the pod's `num_gpu_blocks` from `vllm:cache_config_info` and blocks are its `block_size`; `MaxPrefixBlocksToMatch` 256; blocks added in `PreRequest`, at dispatch); pkg/epp/server/options.go (metrics refreshed every 50 ms)",
  },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => llmdWeighted(params),
} as const satisfies PolicyDescriptor<"llmd_weighted">;
