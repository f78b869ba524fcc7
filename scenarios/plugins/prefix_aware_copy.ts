/**
 * @module
 * A router plugin that is a plain copy of the built-in `prefix_aware` policy
 * (no imports): `deno task bench` runs it beside the built-in to measure what
 * the plugin sandbox costs.
 */
import type { RouterView, RoutingPolicy } from "../../actors/policies/policy.ts";
import type { Request } from "../../actors/protocol.ts";

/** Credit for a prefix block found only in an instance's host KV tier (the built-in's `hostCredit` default). */
const HOST_CREDIT = 0.8;

/** The match in GPU-block equivalents: GPU blocks + HOST_CREDIT × the blocks only the host tier holds. */
function effectiveMatch(view: RouterView, i: number, request: Request): number {
  const matched = view.matchedBlocks(i, request);
  return matched + HOST_CREDIT * (view.hostMatchedBlocks(i, request) - matched);
}

/** The least-loaded instance, load = (waiting + running) ÷ capacity; ties uniformly at random. */
function leastLoaded(view: RouterView, random: () => number): number {
  let best = -1, bestLoad = Infinity, ties = 0;
  for (let i = 0; i < view.instanceCount; i++) {
    const load = (view.waiting[i] + view.running[i]) / view.capacity[i];
    if (load < bestLoad) [best, bestLoad, ties] = [i, load, 1];
    else if (load === bestLoad && random() * ++ties < 1) best = i;
  }
  return best;
}

/** The least loaded (as above) among the longest matches, in one pass (a longer match restarts the choice); -1 if none matches. */
function leastLoadedLongestMatch(view: RouterView, request: Request, random: () => number): number {
  let best = -1, longest = 0, bestLoad = Infinity, ties = 0;
  for (let i = 0; i < view.instanceCount; i++) {
    const matched = effectiveMatch(view, i, request);
    if (matched === 0 || matched < longest) continue;
    const load = (view.waiting[i] + view.running[i]) / view.capacity[i];
    if (matched > longest || load < bestLoad) [best, longest, bestLoad, ties] = [i, matched, load, 1];
    else if (load === bestLoad && random() * ++ties < 1) best = i;
  }
  return best;
}

const policy: RoutingPolicy = {
  name: "prefix_aware_copy",
  choose(request: Request, view: RouterView, random: () => number): number {
    // The longest cached prefix match; the least loaded among the longest; none matched → least loaded.
    const cached = leastLoadedLongestMatch(view, request, random);
    return cached >= 0 ? cached : leastLoaded(view, random);
  },
};

export default policy;
