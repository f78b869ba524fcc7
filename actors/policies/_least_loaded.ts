/**
 * @module
 * Choice among equals, shared by several policies: the least-loaded instance
 * (load = waiting + running), ties broken uniformly at random so that no
 * instance, instance 0 least of all, collects every tie.
 */
import type { RandomStream } from "../runtime/random_stream.ts";
import type { RouterView } from "./policy.ts";

/** Least-loaded instance overall; ties at random (reservoir sampling). */
export function leastLoaded(view: RouterView, random: RandomStream): number {
  const { waiting, running, instanceCount } = view;
  let best = -1, bestLoad = Infinity, ties = 0;
  for (let i = 0; i < instanceCount; i++) {
    const load = waiting[i] + running[i];
    if (load < bestLoad) {
      best = i;
      bestLoad = load;
      ties = 1;
    } else if (load === bestLoad && random() * ++ties < 1) {
      best = i;
    }
  }
  return best;
}

/**
 * Least-loaded instance among those holding `group`, ties at random; -1 when
 * none holds it (or the request has no shared prefix).
 */
export function leastLoadedHolding(view: RouterView, group: number, random: RandomStream): number {
  if (group < 0) return -1;
  const { waiting, running, instanceCount } = view;
  let best = -1, bestLoad = Infinity, ties = 0;
  for (let i = 0; i < instanceCount; i++) {
    if (!view.holds(i, group)) continue;
    const load = waiting[i] + running[i];
    if (load < bestLoad) {
      best = i;
      bestLoad = load;
      ties = 1;
    } else if (load === bestLoad && random() * ++ties < 1) {
      best = i;
    }
  }
  return best;
}
