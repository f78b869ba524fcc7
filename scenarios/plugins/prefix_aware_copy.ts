/**
 * @module
 * A router plugin that is a plain copy of the built-in `prefix_aware` policy
 * (no imports): `deno task bench` runs it beside the built-in to measure what
 * the plugin sandbox costs.
 */
import type { RouterView, RoutingPolicy } from "../../actors/policies/policy.ts";
import type { Request } from "../../actors/protocol.ts";

/** The least-loaded instance (waiting + running) among those `accept` allows; ties uniformly at random; -1 if none. */
function leastLoaded(view: RouterView, random: () => number, accept: (i: number) => boolean): number {
  let best = -1, bestLoad = Infinity, ties = 0;
  for (let i = 0; i < view.instanceCount; i++) {
    if (!accept(i)) continue;
    const load = view.waiting[i] + view.running[i];
    if (load < bestLoad) [best, bestLoad, ties] = [i, load, 1];
    else if (load === bestLoad && random() * ++ties < 1) best = i;
  }
  return best;
}

const policy: RoutingPolicy = {
  name: "prefix_aware_copy",
  choose(request: Request, view: RouterView, random: () => number): number {
    // The longest cached prefix match in blocks; the least loaded among the longest; none matched → least loaded.
    let longest = 0;
    for (let i = 0; i < view.instanceCount; i++) longest = Math.max(longest, view.matchedBlocks(i, request));
    const cached = longest === 0
      ? -1
      : leastLoaded(view, random, (i) => view.matchedBlocks(i, request) === longest);
    return cached >= 0 ? cached : leastLoaded(view, random, () => true);
  },
};

export default policy;
