/**
 * @module
 * Consistent hashing with bounded loads (KubeAI's CHWBL): the prefix picks a
 * point on a hash ring; the first instance clockwise whose load is within the
 * bound takes the request.
 */
import type { PolicyDescriptor, RoutingPolicy } from "./policy.ts";

/** Parameters of {@linkcode chwbl}, with KubeAI's defaults. */
export interface ChwblOptions {
  /** An instance may take the request while in-flight <= loadFactor × (total + 1) / N. @default 1.25 */
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
 * clockwise from the key's point to the first instance with in-flight ≤
 * `loadFactor` × (total in-flight + 1) / N.
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
      let total = 0;
      for (let i = 0; i < n; i++) total += view.inFlight[i];
      const bound = (loadFactor * (total + 1)) / n;
      const key = fnv1a(request.prefixGroup >= 0 ? `g${request.prefixGroup}` : `r${request.id}`);
      // First ring point at or after the key (binary search), then clockwise.
      let lo = 0, hi = ring.hash.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (ring.hash[mid] < key) lo = mid + 1;
        else hi = mid;
      }
      for (let step = 0; step < ring.hash.length; step++) {
        const owner = ring.owner[(lo + step) % ring.hash.length];
        if (view.inFlight[owner] <= bound) return owner;
      }
      return ring.owner[lo % ring.hash.length]; // unreachable: someone is always at or below the mean
    },
  };
}

/** {@linkcode chwbl}, described for the registry (actors/policies/mod.ts). */
export const descriptor = {
  name: "chwbl",
  summary:
    "KubeAI's consistent hashing with bounded loads: the prefix's point on a ring, first instance clockwise within the load bound.",
  params: {
    loadFactor: {
      doc: "an instance may take the request while in-flight <= loadFactor × (total + 1) / N",
      default: 1.25,
      min: 1,
    },
    ringPoints: { doc: "ring points per instance", default: 256, min: 1, integer: true },
  },
  reads: { blocks: false, load: false },
  create: (params: Readonly<Record<string, number>>): RoutingPolicy => chwbl(params),
} as const satisfies PolicyDescriptor<"chwbl">;
