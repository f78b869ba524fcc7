/**
 * @module
 * Consistent hashing with bounded loads (KubeAI's CHWBL): the prefix picks a
 * point on a hash ring; the first instance clockwise whose load is within its
 * bound (proportional to its capacity) takes the request.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";
import { availabilityMask } from "./_availability.ts";
import { NO_CACHE, ROUTER_LOAD } from "./_real_views.ts";

/** Parameters of {@linkcode chwbl}, with KubeAI's defaults. */
export interface ChwblOptions {
  /** An instance may take the request while in-flight <= capacity × loadFactor × (total + 1) / Σ capacity. @default 1.25 */
  readonly loadFactor?: number;
  /** Ring points per instance. @default 256 */
  readonly ringPoints?: number;
}

/** 32-bit FNV-1a of a string: a fixed, seedless hash, so the ring is the same in every run. */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * Key = the request's prefix group (a unique request hashes its id). Walk
 * clockwise from the key's point to the first instance i with
 * in-flight_i ÷ capacity_i ≤ `loadFactor` × (total in-flight + 1) / Σ capacity.
 *
 * The bound, generalised to a mixed fleet: CHWBL caps each instance at
 * (1 + ε) × the average load, the average being what a perfectly even
 * spread gives each one. Spread evenly by work, instance i holds the share
 * capacity_i / Σ capacity of the (total + 1) requests, so its cap is
 * capacity_i × (1 + ε) × (total + 1) / Σ capacity, i.e. per-capacity load ≤
 * (1 + ε) × the average per-capacity load. The caps still sum to (1 + ε) ×
 * (total + 1) > total, so some instance is always within its bound (the
 * capacity-weighted mean of in-flight ÷ capacity is total / Σ capacity, and
 * one instance is at or below a mean). With every capacity 1, Σ capacity is
 * exactly N and in-flight ÷ 1 is in-flight: KubeAI's rule, bit for bit. The
 * ring itself is not weighted (each instance keeps `ringPoints` points): a
 * slower instance is the first choice of as many keys, and the bound sends
 * its excess onward.
 *
 * Unavailable instances are as if removed from the ring, as KubeAI removes
 * an endpoint that is not ready: the walk passes their points, and the total
 * in-flight and Σ capacity of the bound are the available instances' (so
 * some available instance is always within it, by the argument above). A key
 * whose instance is available keeps it as long as the bound lets it — only
 * the keys of an unavailable instance move, to the next available instance
 * clockwise: the consistent-hashing property. (Where load bounds bind,
 * removing an instance's load from the average can also move keys, as in
 * KubeAI.)
 */
export function chwbl(options: ChwblOptions = {}): RoutingPolicy {
  const loadFactor = options.loadFactor ?? 1.25, ringPoints = options.ringPoints ?? 256;
  let ring: { hash: Float64Array; owner: Int32Array } | undefined;
  const build = (n: number) => {
    const points = [];
    for (let i = 0; i < n; i++) for (let k = 0; k < ringPoints; k++) points.push([fnv1a(`${i}-${k}`), i]);
    points.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    return { hash: Float64Array.from(points, (p) => p[0]), owner: Int32Array.from(points, (p) => p[1]) };
  };
  return {
    name: "chwbl",
    choose(request, view) {
      const n = view.instanceCount;
      if (ring === undefined || ring.owner.length !== n * ringPoints) ring = build(n);
      const { inFlight, capacity } = view;
      const available = availabilityMask(view);
      let total = 0, capacitySum = 0;
      if (view.index !== undefined) {
        // Indexed: the same sums, kept as instances change (inFlight counts are integers: exact in any order).
        total = view.index.inFlightSum();
        capacitySum = view.index.capacitySum();
      } else {
        for (let i = 0; i < n; i++) {
          if (available !== undefined && available[i] !== 1) continue;
          total += inFlight[i];
          capacitySum += capacity[i];
        }
      }
      const bound = (loadFactor * (total + 1)) / capacitySum;
      const key = fnv1a(request.prefixGroup >= 0 ? `g${request.prefixGroup}` : `r${request.id}`);
      // First ring point at or after the key (binary search), then clockwise.
      let lo = 0, hi = ring.hash.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (ring.hash[mid] < key) lo = mid + 1;
        else hi = mid;
      }
      let first = -1;
      for (let step = 0; step < ring.hash.length; step++) {
        const owner = ring.owner[(lo + step) % ring.hash.length];
        if (available !== undefined && available[owner] !== 1) continue;
        if (inFlight[owner] / capacity[owner] <= bound) return owner;
        if (first < 0) first = owner;
      }
      return first; // unreachable: some available instance is always at or below the mean
    },
  };
}

/** {@linkcode chwbl}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "chwbl",
  summary:
    "KubeAI's consistent hashing with bounded loads: the prefix's point on a ring, first instance clockwise within its load bound (its capacity's share).",
  params: {
    loadFactor: {
      doc:
        "an instance may take the request while in-flight / capacity <= loadFactor × (total + 1) / Σ capacity",
      default: 1.25,
      min: 1,
    },
    ringPoints: { doc: "ring points per instance", default: 256, min: 1, integer: true },
  },
  reads: { blocks: false, load: false },
  view: {
    cache: NO_CACHE,
    load: ROUTER_LOAD,
    citation:
      "kubeai internal/loadbalancer/balance_chwbl.go (the load balancer's own in-flight count per endpoint)",
  },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => chwbl(params),
} as const satisfies PolicyDescriptor<"chwbl">;
