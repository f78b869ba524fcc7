/**
 * @module
 * Hybrid: follow the longest cached prefix only while that instance's queue
 * is short; otherwise balance load.
 */
import { HOST_CREDIT } from "./_host_credit.ts";
import { leastLoaded, leastLoadedLongestMatch } from "./_least_loaded.ts";
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { ENGINE_SIZED_INDEX, PUSHED_LOAD } from "./_real_views.ts";

/** Options for {@linkcode hybrid}. */
export interface HybridOptions {
  /**
   * The best cached instance (as `prefix_aware` picks it) is used only if its
   * queued requests (`view.queued`) are fewer than this: FIFO, the requests
   * waiting behind the one in service; batching, those still owed their first
   * token (waiting for admission or in prefill). 1 means "nothing queued";
   * 0 never uses the cache.
   *
   * Counted in requests, not divided by capacity: the gate weighs the queue
   * in front of a cache hit against the hit, and on a slower instance both
   * the wait behind each queued request and the prefill the hit saves take
   * longer by the same factor, so capacity cancels out. (At 1 it could not
   * matter anyway: fewer than 1 queued is nothing queued at any capacity.)
   * @default 1
   */
  readonly threshold?: number;
  /** Credit for a prefix block only in an instance's host KV tier, as a fraction of a GPU hit. @default 0.8 */
  readonly hostCredit?: number;
}

/**
 * Prefix-aware behind a queue-depth gate; its least-loaded choices are per
 * capacity. Both choices are among available instances only: the best cached
 * instance is the best available one, and the gate is its queue.
 */
export function hybrid(options: HybridOptions = {}): RoutingPolicy {
  const threshold = options.threshold ?? 1, hostCredit = options.hostCredit ?? HOST_CREDIT.default;
  if (!(threshold >= 0)) throw new RangeError(`hybrid: threshold must be a number >= 0, got ${threshold}`);
  return {
    name: "hybrid",
    choose(request, view, random) {
      const cached = leastLoadedLongestMatch(view, request, random, hostCredit);
      return cached >= 0 && view.queued[cached] < threshold ? cached : leastLoaded(view, random);
    },
  };
}

/** {@linkcode hybrid}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "hybrid",
  summary:
    "prefix_aware's choice while fewer than `threshold` requests are queued there, else the least loaded (the original study).",
  params: {
    threshold: {
      doc:
        "queue-depth gate: follow the longest cached prefix only while fewer than this many requests are queued there (fifo: waiting behind the one in service; batching: still owed their first token); 0 never follows the cache",
      default: 1,
      min: 0,
      short: "thr",
      alwaysLabelled: true,
    },
    hostCredit: HOST_CREDIT,
  },
  reads: { blocks: true, load: false },
  view: {
    cache: ENGINE_SIZED_INDEX,
    load: PUSHED_LOAD,
    originalStudy: true,
    citation:
      "the original study's simulator (FIFO: its router reads the instances' LRU of groups and queues); on a batching fleet, a router-side index inserted at routing time, as any real implementation must keep",
  },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => hybrid(params),
} as const satisfies PolicyDescriptor<"hybrid">;
