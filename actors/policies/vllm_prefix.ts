/**
 * @module
 * vLLM production-stack's `prefixaware` router: random among the instances
 * with the longest prefix match; random when nothing matches. No load term.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { pickBy } from "./_pick.ts";

/** Longest match, ties (and no match) uniformly at random. */
export function vllmPrefix(): RoutingPolicy {
  return {
    name: "vllm_prefix",
    choose: (request, view, random) =>
      pickBy(view.instanceCount, (i) => view.matchedBlocks(i, request), random),
  };
}

/** {@linkcode vllmPrefix}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "vllm_prefix",
  summary:
    "vLLM production-stack's prefixaware router: random among the longest matches; random when nothing matches.",
  params: {},
  reads: { blocks: true, load: false },
  create: (): RoutingPolicy => vllmPrefix(),
} as const satisfies PolicyDescriptor<"vllm_prefix">;
