/**
 * @module
 * A router view built by hand (no InstanceTable, no cache view): loads,
 * cache matches and availability given per instance, and a fast-check
 * arbitrary of such views, for tests of policies' choices over any view.
 */
import fc from "fast-check";
import type { RouterView } from "../actors/policies/mod.ts";
import type { Request } from "../actors/protocol.ts";

/** Tokens per block in every fake view. */
export const FAKE_BLOCK_TOKENS = 16;

/** What one instance of a fake view reports. */
export interface FakeInstance {
  readonly waiting: number;
  readonly running: number;
  readonly queued: number;
  readonly inFlight: number;
  readonly kvUtilization: number;
  readonly pendingPrefillTokens: number;
  readonly decodeBlocks: number;
  readonly capacity: number;
  /** Leading keyed blocks believed cached in GPU memory (capped at the request's keyed blocks). */
  readonly matched: number;
  /** Further leading blocks believed cached only in host memory. */
  readonly hostExtra: number;
  /** 1: the router may route there. */
  readonly available: number;
}

/** A fake view's instances and routed count. */
export interface FakeViewSpec {
  readonly instances: readonly FakeInstance[];
  readonly routedCount: number;
}

/** The keyed blocks of `request`: whole blocks of a shared prefix, none for a unique one. */
export function keyedBlocks(request: Request): number {
  return request.prefixGroup >= 0 ? Math.floor(request.prefixTokens / FAKE_BLOCK_TOKENS) : 0;
}

/**
 * The view a router would present with these instances: matches are capped
 * at the request's keyed blocks, a group is held where some block matches,
 * and `availableCount` counts the 1s of `available`.
 */
export function fakeView(spec: FakeViewSpec): RouterView {
  const xs = spec.instances;
  const field = (key: keyof FakeInstance) => Float64Array.from(xs, (x) => x[key]);
  const matched = (i: number, request: Request) => Math.min(xs[i].matched, keyedBlocks(request));
  return {
    instanceCount: xs.length,
    routedCount: spec.routedCount,
    waiting: field("waiting"),
    running: field("running"),
    queued: field("queued"),
    inFlight: field("inFlight"),
    kvUtilization: field("kvUtilization"),
    pendingPrefillTokens: field("pendingPrefillTokens"),
    decodeBlocks: field("decodeBlocks"),
    capacity: field("capacity"),
    available: field("available"),
    availableCount: xs.filter((x) => x.available === 1).length,
    blockTokens: FAKE_BLOCK_TOKENS,
    holds: (i, group) => group >= 0 && xs[i].matched > 0,
    requestBlocks: keyedBlocks,
    matchedBlocks: matched,
    hostMatchedBlocks: (i, request) => Math.min(matched(i, request) + xs[i].hostExtra, keyedBlocks(request)),
    // The router's own accounting, as the engine-side loads (a fake has no routings of its own).
    activePrefillTokens: field("pendingPrefillTokens"),
    activeBlocks: field("decodeBlocks"),
    newBlocks: (_i, request) => Math.ceil((request.prefixTokens + request.suffixTokens) / FAKE_BLOCK_TOKENS),
    cachedBlockCount: (i) => xs[i].matched,
  };
}

/** One instance, from small ranges so that ties (and so random draws) are common. */
const instance: fc.Arbitrary<FakeInstance> = fc.record({
  waiting: fc.integer({ min: 0, max: 4 }),
  running: fc.integer({ min: 0, max: 3 }),
  queued: fc.integer({ min: 0, max: 4 }),
  inFlight: fc.integer({ min: 0, max: 6 }),
  kvUtilization: fc.constantFrom(0, 0.25, 0.5, 1),
  pendingPrefillTokens: fc.constantFrom(0, 0, 100, 160, 400),
  decodeBlocks: fc.integer({ min: 0, max: 8 }),
  capacity: fc.constantFrom(1, 1, 1, 0.5, 2),
  matched: fc.constantFrom(0, 0, 1, 3, 5, 10),
  hostExtra: fc.constantFrom(0, 0, 2),
  available: fc.integer({ min: 0, max: 1 }),
});

/** Views of 1 to 8 instances; `allAvailable` forces every instance available, else at least one is. */
export function fakeViewSpec(options: { allAvailable?: boolean } = {}): fc.Arbitrary<FakeViewSpec> {
  return fc.record({
    instances: fc.array(instance, { minLength: 1, maxLength: 8 }),
    routedCount: fc.integer({ min: 0, max: 1000 }),
    someone: fc.nat(),
  }).map(({ instances, routedCount, someone }) => {
    const keep = someone % instances.length;
    return {
      routedCount,
      instances: instances.map((x, i) => options.allAvailable || i === keep ? { ...x, available: 1 } : x),
    };
  });
}

/** A request: a shared prefix of 0 to 12 blocks (group 0 to 3) or a unique one, and a suffix. */
export const fakeRequest: fc.Arbitrary<Request> = fc.record({
  id: fc.integer({ min: 0, max: 1e6 }),
  arrivalMs: fc.constant(0),
  prefixGroup: fc.integer({ min: -1, max: 3 }),
  prefixTokens: fc.integer({ min: 0, max: 200 }),
  suffixTokens: fc.integer({ min: 0, max: 120 }),
  outputTokens: fc.constant(1),
});

/** `random`, counting its draws in `counter.draws`. */
export function counting(random: () => number, counter: { draws: number }): () => number {
  return () => {
    counter.draws++;
    return random();
  };
}
