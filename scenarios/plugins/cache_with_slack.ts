/**
 * @module
 * Example router plugin: follow the cache while the holder is not much busier
 * than the least-loaded instance, otherwise balance. Copy it, change `choose`,
 * and run it with `--router`: it works in `run`, `sweep` and `realtime`.
 */
import type { RouterView, RoutingPolicy } from "../../actors/policies/policy.ts";
import type { Request } from "../../actors/protocol.ts";

/** How many more requests the cache holder may have than the least-loaded instance. */
const SLACK = 2;

/** The least-loaded instance among those `accept` allows; ties uniformly at random; -1 if none. */
function leastLoaded(view: RouterView, random: () => number, accept: (i: number) => boolean): number {
  let best = -1, bestLoad = Infinity, ties = 0;
  for (let i = 0; i < view.instanceCount; i++) {
    if (!accept(i)) continue;
    const load = view.waiting[i] + view.running[i];
    if (load < bestLoad) [best, bestLoad, ties] = [i, load, 1];
    else if (load === bestLoad && random() * ++ties < 1) best = i; // keeps each tie with equal chance
  }
  return best;
}

const policy: RoutingPolicy = {
  name: "cache_with_slack",
  choose(request: Request, view: RouterView, random: () => number): number {
    const load = (i: number) => view.waiting[i] + view.running[i];
    const least = leastLoaded(view, random, () => true);
    const holder = request.prefixGroup < 0
      ? -1
      : leastLoaded(view, random, (i) => view.holds(i, request.prefixGroup));
    return holder >= 0 && load(holder) <= load(least) + SLACK ? holder : least;
  },
};

export default policy;
