/**
 * @module
 * Hybrid: follow the cache only while the best cached instance's queue is
 * short; otherwise balance load.
 */
import { leastLoaded, leastLoadedHolding } from "./_least_loaded.ts";
import type { RoutingPolicy } from "./policy.ts";

/** Options for {@linkcode hybrid}. */
export interface HybridOptions {
  /**
   * The best cached instance is used only if its waiting requests (not
   * counting the one in service) are fewer than this. 1 means "idle, or
   * serving one request with nobody waiting"; 0 never uses the cache.
   * @default 1
   */
  readonly threshold?: number;
}

/** Prefix-aware behind a queue-depth gate. */
export function hybrid(options: HybridOptions = {}): RoutingPolicy {
  const threshold = options.threshold ?? 1;
  if (!(threshold >= 0)) throw new RangeError(`hybrid: threshold must be a number >= 0, got ${threshold}`);
  return {
    name: "hybrid",
    choose(request, view, random) {
      const cached = leastLoadedHolding(view, request.prefixGroup, random);
      return cached >= 0 && view.waiting[cached] < threshold ? cached : leastLoaded(view, random);
    },
  };
}
