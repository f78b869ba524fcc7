/**
 * @module
 * The routing-policy interface: a pure function of the router's view of the
 * instances (built only from their status messages) and a random stream.
 */
import type { Request } from "../protocol.ts";

/**
 * Uniform numbers in [0, 1), seeded per actor. The router hands its own
 * stream to the policy; a policy never creates one (it depends on the
 * protocol, not on the runtime: design.md, "Layering").
 */
export type RandomStream = () => number;

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
  /**
   * Per instance: requests queued in the model's own sense, as last reported —
   * FIFO, the waiting requests; batching, those waiting for admission plus
   * those admitted whose prefill has not finished (owed their first token).
   * The signal `hybrid` gates on (design.md, "Policies").
   */
  readonly queued: ArrayLike<number>;
  /**
   * Per instance: requests the router sent there that it has not yet heard
   * finished (its own count of routings minus the instance's reported
   * finishes) — the "load" SGLang-style routers track.
   */
  readonly inFlight: ArrayLike<number>;
  /** Per instance: share of KV blocks in use, as last reported (batching model; 0 for FIFO). */
  readonly kvUtilization: ArrayLike<number>;
  /** Per instance: prompt tokens still to prefill, as last reported. */
  readonly pendingPrefillTokens: ArrayLike<number>;
  /** Per instance: KV blocks held by decoding sequences, as last reported. */
  readonly decodeBlocks: ArrayLike<number>;
  /**
   * Per instance: its serving capacity relative to the fastest instance it is
   * routed beside (1 for that one, and for every instance of a uniform fleet):
   * load-aware policies divide load by it, so that a fleet of mixed engines
   * is balanced by work, not by counts (actors/policies/policies.md, "Capacity and host credit").
   */
  readonly capacity: ArrayLike<number>;
  /**
   * Per instance: 1 when the router may route there; 0 when it believes the
   * instance down (a request failed there since it last reported, or its
   * last report is older than the status TTL), draining, or not provisioned
   * (actors/dynamics/README.md, "Faults"). Every instance is available in a run without
   * faults or autoscaling. Policies choose among available instances (every
   * built-in does, and with all of them available chooses, and draws, as
   * though the field did not exist); a choice of an unavailable one is sent
   * anyway (and may fail, to be retried).
   */
  readonly available: ArrayLike<number>;
  /**
   * How many instances are available (entries of `available` that are 1): at
   * least 1 whenever a policy is asked (with none, the router fails the
   * request). Equal to `instanceCount` when every instance is available, the
   * cheap test for the common case.
   */
  readonly availableCount: number;
  /** Tokens per KV block in the router's view of caches. */
  readonly blockTokens: number;
  /**
   * Per instance: prompt tokens the router itself dispatched there that have
   * not yet produced their first token, each counted as its prompt less the
   * prefix the view believed cached there when it was routed — Dynamo's
   * router-side "active prefill tokens" (`ActiveSequences`). 0 everywhere
   * unless the policy reads `requests`.
   */
  readonly activePrefillTokens: ArrayLike<number>;
  /**
   * Per instance: distinct prompt blocks of the requests the router sent
   * there that have not finished (shared prefix blocks counted once) —
   * Dynamo's router-side active blocks. 0 everywhere unless the policy reads `requests`.
   */
  readonly activeBlocks: ArrayLike<number>;
  /**
   * Prompt blocks of `request` (all of them, keyed or not) that `instance`'s
   * active requests do not already hold: what the request would add to
   * {@linkcode activeBlocks} there (Dynamo's `new_blocks`). The whole
   * prompt's blocks unless the policy reads `requests`.
   */
  newBlocks(instance: number, request: Request): number;
  /**
   * Blocks the view believes cached at `instance` (its index's size: Dynamo's
   * per-worker tree size, the tie-break of its selector).
   */
  cachedBlockCount(instance: number): number;
  /** Whether `instance` is believed to hold prefix `group` (see the scenario's cache view). */
  holds(instance: number, group: number): boolean;
  /** Keyed prompt blocks of `request` (the part any cache could hold). */
  requestBlocks(request: Request): number;
  /** Leading keyed blocks of `request` believed cached at `instance`. */
  matchedBlocks(instance: number, request: Request): number;
  /**
   * Leading keyed blocks of `request` believed cached at `instance` in GPU
   * *or* host memory (its host KV tier, when it has one): at least
   * `matchedBlocks`, and equal to it without a host tier. The blocks beyond
   * `matchedBlocks` must be loaded from host memory before use, so policies
   * give them a discounted credit (actors/policies/policies.md, "Capacity and host credit").
   */
  hostMatchedBlocks(instance: number, request: Request): number;
  /**
   * The router's indexes over a large fleet (absent on small fleets and in
   * plugins): the same answers a scan of this view gives, at O(log n) a
   * question, so that no decision scans every instance (design.md,
   * "Decisions that do not scan the fleet"). A policy that finds it may use
   * it; one that scans stays correct.
   */
  readonly index?: FleetQueries;
}

/** A load {@linkcode FleetQueries} orders instances by (see `actors/router/fleet_index.ts`). */
export type FleetLoad =
  /** `(waiting + running) / capacity` */
  | "active"
  /** `inFlight / capacity` */
  | "inFlight"
  /** `(pendingPrefillTokens + decodeBlocks × blockTokens) / capacity` */
  | "prefillDecode";

/** Instances in index order: the `k`-th of `size`. */
export interface IndexList {
  readonly size: number;
  at(k: number): number;
}

/**
 * What {@linkcode RouterView.index} answers, over the *available* instances.
 * `first*` answers give the lowest index among equals (as a scan that keeps
 * the first); `pick*` answers draw once, uniformly, among equals (a scan
 * draws once per tie it meets: the same distribution, other draws). -1: no
 * instance qualifies.
 */
export interface FleetQueries {
  /**
   * Whether a candidate ({@linkcode FleetQueries.candidates}) matches all of
   * a request's keyed blocks: the view matches whole prefix groups (the FIFO
   * model's caches).
   */
  readonly wholeMatches: boolean;
  /**
   * The available instances that may match `request` (those believed to
   * hold its group, or its first block run), in index order: every other
   * instance matches 0 blocks. Asking counts as consulting every match.
   * Undefined when the view cannot index its holders (a host tier: a match
   * may start in host memory): scan.
   */
  candidates(request: Request): IndexList | undefined;
  /** With `wholeMatches`: a uniformly drawn candidate of least `active` load. */
  pickLeastActiveCandidate(request: Request, random: RandomStream): number;
  /** The least load; `Infinity` with no instance available. */
  minLoad(load: FleetLoad): number;
  /** The greatest load; `-Infinity` with no instance available. */
  maxLoad(load: FleetLoad): number;
  /** The lowest-indexed instance of least load. */
  firstLeast(load: FleetLoad): number;
  /** A uniformly drawn instance of least load. */
  pickLeast(load: FleetLoad, random: RandomStream): number;
  /** A uniformly drawn available instance. */
  pickAvailable(random: RandomStream): number;
  /** The sum of `inFlight` over available instances. */
  inFlightSum(): number;
  /** The sum of `capacity` over available instances (added in index order). */
  capacitySum(): number;
}

/**
 * A routing policy. `choose` must return an integer in
 * [0, view.instanceCount); the router treats anything else as a failure. It
 * should return an available instance (`view.available[i] === 1`): the
 * router sends any valid choice, but one it believes down, draining or not
 * provisioned is likely to fail and be retried elsewhere. It may keep no
 * hidden state: everything it needs is in the view, so the same view and
 * stream give the same choice.
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

/** One numeric parameter of a built-in policy: its bounds, default and meaning. */
export interface PolicyParameter {
  /** What it does, for help text and docs. */
  readonly doc: string;
  /** The shipped default. */
  readonly default: number;
  /** Smallest accepted value (inclusive unless `exclusiveMin`). */
  readonly min: number;
  /** Whether `min` itself is refused. @default false */
  readonly exclusiveMin?: boolean;
  /** Largest accepted value, inclusive. @default Infinity */
  readonly max?: number;
  /** Whether the value must be whole. @default false */
  readonly integer?: boolean;
  /** Its name in labels, e.g. `thr` in `hybrid(thr=1)`. @default the parameter's own name */
  readonly short?: string;
  /** Whether labels show it even at its default (the parameter a study varies). @default false */
  readonly alwaysLabelled?: boolean;
}

/**
 * What a policy reads from the {@linkcode RouterView} beyond queue counts,
 * so that instances report it (and nothing else) to the router.
 */
export interface PolicyReads {
  /** Block-level prefix matches (`matchedBlocks`, `holds`): an exact view of a batching fleet needs the instances' cache events. */
  readonly blocks: boolean;
  /** Pending prefill, decode blocks or KV utilisation, kept fresh step by step. */
  readonly load: boolean;
  /**
   * The router's own per-request accounting (`activePrefillTokens`,
   * `activeBlocks`, `newBlocks`): instances then tell it which requests
   * produced their first token and which finished. @default false
   */
  readonly requests?: boolean;
}

/**
 * How a policy's real system learns what each instance caches.
 * `router_index`: the router inserts a prompt into an index of its own when
 * it routes it, before any engine computed it, and never hears of the
 * engines' evictions (SGLang's radix tree, llm-d's approximate prefix index,
 * vLLM production-stack's trie, Preble's global tree). `engine_events`: the
 * engines publish what they cache and evict (Dynamo's KV events; our `exact`
 * view). `none`: the policy reads no cache.
 */
export type CacheSource = "router_index" | "engine_events" | "none";

/** The real system's cache index, as its source defines it. */
export interface RealCacheView {
  readonly source: CacheSource;
  /**
   * What the real index matches in: `characters` of the prompt text (SGLang,
   * production-stack), `tokens`, or `blocks` of tokens (llm-d, Dynamo).
   * @default "blocks"
   */
  readonly unit: "characters" | "tokens" | "blocks";
  /**
   * Characters per match chunk, for an index that matches whole chunks of
   * text (production-stack's trie: 128); absent: the engine's block.
   */
  readonly chunkCharacters?: number;
  /** The most leading blocks of a prompt it hashes and inserts (llm-d: 256). @default all */
  readonly maxBlocks?: number;
  /** The policy parameter that sets `maxBlocks` too, when it has one (llm-d: `maxPrefixBlocks`). */
  readonly maxBlocksParameter?: string;
  /**
   * Entries it keeps per instance before evicting: a number in `unit`s,
   * `engine` (as many blocks as the engine's KV cache: llm-d's autotune,
   * Preble's per-GPU token budget), or `unbounded` (never evicts).
   */
  readonly capacity: number | "engine" | "unbounded";
  /**
   * When it evicts, least recently used first: `on_insert`, or `periodic`
   * (a background pass every `evictEveryMs`, SGLang's). Absent when unbounded.
   */
  readonly eviction?: "on_insert" | "periodic";
  /** The periodic pass's interval, ms. */
  readonly evictEveryMs?: number;
}

/** Where a policy's real system gets the load it reads, and how fresh. */
export interface RealLoadView {
  /**
   * `router`: the router counts what it dispatched itself (in-flight
   * requests, active tokens), always current; `scraped`: engine metrics
   * polled every `refreshMs`; `pushed`: engine reports on every change;
   * `none`: the policy reads no load.
   */
  readonly source: "router" | "scraped" | "pushed" | "none";
  /** Scrape interval, ms (`scraped` only; 0 otherwise). */
  readonly refreshMs: number;
}

/**
 * What a policy's real system sees of the instances: the default view and
 * staleness of a run of the policy (design.md, "What each router sees").
 */
export interface RealView {
  readonly cache: RealCacheView;
  readonly load: RealLoadView;
  /**
   * The policy models no product but the original study's simulator: on
   * the FIFO (group-caching) model its view stays the engine-fed one the
   * original simulator's router read. @default false
   */
  readonly originalStudy?: boolean;
  /** Where the above is read: the real system's files and functions. */
  readonly citation: string;
}

/**
 * A built-in policy, described: everything the schema, the command line,
 * sweeps, labels, status reporting and the docs need to know about it. Each
 * policy file exports one as `descriptor`; `mod.ts` lists them.
 */
export interface PolicyDescriptor<Name extends string = string> {
  /** The name in scenarios, flags and reports. */
  readonly name: Name;
  /** One line: the rule, for help text and the docs' policy table. */
  readonly summary: string;
  /** Its parameters by name (empty when it has none). */
  readonly params: Readonly<Record<string, PolicyParameter>>;
  /** What it reads from the view. */
  readonly reads: PolicyReads;
  /** What its real system sees: the run's default cache view and status staleness. */
  readonly view: RealView;
  /** Builds the policy; `params` holds only known, in-bounds parameters (absent ones take their defaults). */
  create(params: Readonly<Record<string, number>>): RoutingPolicy;
}
