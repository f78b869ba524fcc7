/**
 * @module
 * llm-d / Gateway API Inference Extension scheduling: weighted scorers and a
 * max-score picker with random tie-break.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { pickBy } from "./_pick.ts";

/** Scorer weights of {@linkcode llmdWeighted}, with llm-d's defaults. */
export interface LlmdWeightedOptions {
  /** Weight of the prefix score (matched blocks / all blocks of the prompt). @default 3 */
  readonly prefixWeight?: number;
  /** Weight of the queue score ((q_max − q) / (q_max − q_min); 1 when all equal). @default 2 */
  readonly queueWeight?: number;
  /** Weight of the KV score (1 − KV utilisation). @default 2 */
  readonly kvWeight?: number;
}

/** Score = prefix·wP + queue·wQ + kv·wK; the highest score wins, ties at random. */
export function llmdWeighted(options: LlmdWeightedOptions = {}): RoutingPolicy {
  const wP = options.prefixWeight ?? 3, wQ = options.queueWeight ?? 2, wK = options.kvWeight ?? 2;
  return {
    name: "llmd_weighted",
    choose(request, view, random) {
      const q = view.waiting;
      let qMax = -Infinity, qMin = Infinity;
      for (let i = 0; i < view.instanceCount; i++) {
        if (q[i] > qMax) qMax = q[i];
        if (q[i] < qMin) qMin = q[i];
      }
      // Blocks in the request: the whole prompt, keyed or not (llm-d hashes every block).
      const blocks = Math.ceil((request.prefixTokens + request.suffixTokens) / view.blockTokens);
      return pickBy(view.instanceCount, (i) => {
        const prefix = blocks > 0 ? view.matchedBlocks(i, request) / blocks : 0;
        const queue = qMax === qMin ? 1 : (qMax - q[i]) / (qMax - qMin);
        const kv = 1 - view.kvUtilization[i];
        return wP * prefix + wQ * queue + wK * kv;
      }, random);
    },
  };
}

/** {@linkcode llmdWeighted}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "llmd_weighted",
  summary: "llm-d scheduler: weighted prefix, queue and KV-utilisation scores, max score wins.",
  params: {
    prefixWeight: { doc: "weight of the prefix score (matched / all prompt blocks)", default: 3, min: 0 },
    queueWeight: { doc: "weight of the queue score ((q_max − q) / (q_max − q_min))", default: 2, min: 0 },
    kvWeight: { doc: "weight of the KV score (1 − KV utilisation)", default: 2, min: 0 },
  },
  reads: { blocks: true, load: true },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => llmdWeighted(params),
} as const satisfies PolicyDescriptor<"llmd_weighted">;
