/**
 * @module
 * The routing-policy interface: a pure function of the router's view of the
 * instances (built only from their status messages) and a random stream.
 */
import type { Request } from "../protocol.ts";
import type { RandomStream } from "../runtime/random_stream.ts";

/** What the router knows of the instances, from their status messages. */
export interface RouterView {
  /** Number of instances; valid choices are 0 .. instanceCount − 1. */
  readonly instanceCount: number;
  /** Requests routed so far (before this one). */
  readonly routedCount: number;
  /** Per instance: requests queued, not counting those in service. */
  readonly waiting: ArrayLike<number>;
  /** Per instance: requests in service. */
  readonly running: ArrayLike<number>;
  /** Whether `instance` reported holding prefix `group` (and not its eviction since). */
  holds(instance: number, group: number): boolean;
}

/**
 * A routing policy. `choose` must return an integer in
 * [0, view.instanceCount); the router treats anything else as a failure. It
 * may keep no hidden state: everything it needs is in the view, so the same
 * view and stream give the same choice.
 *
 * @example A policy that always picks the last instance
 * ```ts
 * const last: RoutingPolicy = {
 *   name: "last",
 *   choose: (_request, view) => view.instanceCount - 1,
 * };
 * ```
 */
export interface RoutingPolicy {
  /** Name used in reports. */
  readonly name: string;
  /** Index of the instance that should serve `request`. */
  choose(request: Request, view: RouterView, random: RandomStream): number;
}
