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

const policy: RoutingPolicy = {
  name: "cache_with_slack",
  choose(request: Request, view: RouterView, random: () => number): number {
    const load = (i: number) => view.waiting[i] + view.running[i];
    let least = 0, holder = -1;
    for (let i = 0; i < view.instanceCount; i++) {
      // Random tie-break, so ties do not all land on instance 0.
      if (load(i) < load(least) || (load(i) === load(least) && random() < 0.5)) least = i;
      if (request.prefixGroup >= 0 && view.holds(i, request.prefixGroup)) {
        if (holder < 0 || load(i) < load(holder)) holder = i;
      }
    }
    return holder >= 0 && load(holder) <= load(least) + SLACK ? holder : least;
  },
};

export default policy;
