/**
 * @module
 * Choice among equals, shared by several policies: the least-loaded instance
 * (load = waiting + running), ties broken uniformly at random so that no
 * instance, instance 0 least of all, collects every tie.
 */
import type { RandomStream } from "../runtime/random_stream.ts";
import { pickBy } from "./_pick.ts";
import type { RouterView } from "./policy.ts";

/** Least-loaded instance overall; ties at random. */
export function leastLoaded(view: RouterView, random: RandomStream): number {
  const { waiting, running } = view;
  return pickBy(view.instanceCount, (i) => -(waiting[i] + running[i]), random);
}

/**
 * Least-loaded instance among those holding `group`, ties at random; -1 when
 * none holds it (or the request has no shared prefix).
 */
export function leastLoadedHolding(view: RouterView, group: number, random: RandomStream): number {
  if (group < 0) return -1;
  const { waiting, running } = view;
  return pickBy(view.instanceCount, (i) => view.holds(i, group) ? -(waiting[i] + running[i]) : NaN, random);
}
