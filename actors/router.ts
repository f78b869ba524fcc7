/**
 * @module
 * The router actor: keeps a view of the instances built only from their status
 * messages, and places each arriving request with a routing policy.
 */
import type { RouterView, RoutingPolicy } from "./policies/policy.ts";
import { type CacheView, ExactCacheView } from "./cache_view.ts";
import { type BlockKeys, blockKeys, keyedBlockCount } from "./prefix_keys.ts";
import {
  assertNever,
  type InstanceStatus,
  type PdAbandoned,
  type PdLeg,
  type PrefilledCommand,
  type Request,
  type RouteCommand,
  type RouterCommand,
  type RoutingNote,
  type ServeCommand,
} from "./protocol.ts";
import type { Actor, ActorContext, ActorRef } from "./runtime/kernel.ts";
import { SimulationError } from "./runtime/simulation_error.ts";

/** Options for {@linkcode InstanceTable}. */
export interface InstanceTableOptions {
  /** What the router believes is cached. @default exact, group-level */
  readonly cacheView?: CacheView;
  /** Tokens per KV block for block matching. @default 16 */
  readonly blockTokens?: number;
  /**
   * What the instances cache, for the accounting of what the view expected:
   * `groups` (FIFO: a held group's whole prefix hits) or `blocks` (batching:
   * matched blocks, never the prompt's last token). @default "groups"
   */
  readonly cacheUnit?: "groups" | "blocks";
  /** Per instance: serving capacity relative to the fastest (see {@linkcode RouterView.capacity}). @default all 1 */
  readonly capacity?: readonly number[];
}

/**
 * The simulation's god's-eye view of the instances' caches, for routing
 * accounting only: policies never see it (real-time runs have none).
 */
export interface FleetCache {
  /** Prompt tokens of `request` that `instance` would find cached right now. */
  cachedPrefixTokens(instance: number, request: Request): number;
}

/** Options for {@linkcode Router}. */
export interface RouterOptions extends InstanceTableOptions {
  /**
   * The instances' real caches, read when routing to account for the tokens
   * available anywhere and those the view wrongly expected. @default none:
   * `availableTokens` and `falseTokens` are null
   */
  readonly fleetCache?: FleetCache;
  /** Disaggregated serving: the prefill and decode pools and how requests flow between them. @default aggregated */
  readonly disaggregation?: Disaggregation;
}

/** A pool of instances the router routes among with one policy and one view. */
export interface RoutingPool {
  /** The instances' indices in the fleet; the pool's view numbers them 0 .. n − 1 in this order. */
  readonly members: readonly number[];
  readonly policy: RoutingPolicy;
  /** The pool's view options (its own cache view, capacities). */
  readonly table: InstanceTableOptions;
}

/**
 * How the router places a disaggregated request (design.md, "Disaggregated
 * serving"). `prefill-first`: a prefill instance at arrival, the decode
 * instance when the prefill is done (SGLang's router and Dynamo score each
 * pool with its own policy). `decode-first` (llm-d): the decode instance at
 * arrival, then a prefill instance — or none, when the part of the prompt
 * the decode instance is believed not to hold is under `localPrefillTokens`.
 */
export interface Disaggregation {
  readonly prefill: RoutingPool;
  readonly decode: RoutingPool;
  readonly flow: "prefill-first" | "decode-first";
  /** Decode-first: prefill on the decode instance itself when fewer prompt tokens than this are uncached there. */
  readonly localPrefillTokens: number;
}

/** One pool as the router keeps it. */
interface Pool {
  readonly view: InstanceTable;
  readonly policy: RoutingPolicy;
  /** Fleet index of each of the pool's instances (absent: the identity, a fleet of one pool). */
  readonly members: readonly number[] | undefined;
}

/** The note of a decision that knew nothing of caches: every field unknown. */
const NO_NOTE: RoutingNote = Object.freeze({
  availableTokens: null,
  expectedTokens: null,
  falseTokens: null,
});

/** The prefill leg of a prefill-first request (its decode instance is chosen later). */
const PREFILL_LEG: PdLeg = Object.freeze({ phase: "prefill" });

/** What a policy consulted of the cache view during one decision: nothing, groups only, or block matches. */
const CONSULTED_NOTHING = 0, CONSULTED_GROUPS = 1, CONSULTED_BLOCKS = 2;

/** The router's picture of the instances, as their reports (and its own routings) left it. */
export class InstanceTable implements RouterView {
  readonly instanceCount: number;
  routedCount = 0;
  readonly waiting: Int32Array;
  readonly running: Int32Array;
  readonly queued: Int32Array;
  readonly inFlight: Int32Array;
  readonly kvUtilization: Float64Array;
  readonly pendingPrefillTokens: Float64Array;
  readonly decodeBlocks: Float64Array;
  readonly capacity: Float64Array;
  readonly blockTokens: number;
  readonly cacheView: CacheView;
  readonly #cacheUnit: "groups" | "blocks";
  #consulted = CONSULTED_NOTHING;
  readonly #routedTo: Int32Array;
  readonly #finished: Int32Array;
  #memoRequest: Request | undefined;
  #memoKeys: BlockKeys | undefined;
  #countRequest: Request | undefined;
  #memoCount = 0;
  readonly #memoMatched: Int32Array;

  constructor(instanceCount: number, options: InstanceTableOptions = {}) {
    this.instanceCount = instanceCount;
    this.waiting = new Int32Array(instanceCount);
    this.running = new Int32Array(instanceCount);
    this.queued = new Int32Array(instanceCount);
    this.inFlight = new Int32Array(instanceCount);
    this.kvUtilization = new Float64Array(instanceCount);
    this.pendingPrefillTokens = new Float64Array(instanceCount);
    this.decodeBlocks = new Float64Array(instanceCount);
    this.capacity = options.capacity === undefined
      ? new Float64Array(instanceCount).fill(1)
      : Float64Array.from(options.capacity);
    this.#routedTo = new Int32Array(instanceCount);
    this.#finished = new Int32Array(instanceCount);
    this.#memoMatched = new Int32Array(instanceCount);
    this.blockTokens = options.blockTokens ?? 16;
    this.cacheView = options.cacheView ?? new ExactCacheView(instanceCount, "groups");
    this.#cacheUnit = options.cacheUnit ?? "groups";
  }

  holds(instance: number, group: number): boolean {
    if (this.#consulted === CONSULTED_NOTHING) this.#consulted = CONSULTED_GROUPS;
    return this.cacheView.holds(instance, group);
  }

  requestBlocks(request: Request): number {
    return this.#count(request);
  }

  matchedBlocks(instance: number, request: Request): number {
    this.#consulted = CONSULTED_BLOCKS;
    return this.#matched(instance, request);
  }

  hostMatchedBlocks(instance: number, request: Request): number {
    const matched = this.matchedBlocks(instance, request);
    if (!this.cacheView.hasHostTier || this.#cacheUnit === "groups") return matched;
    return this.cacheView.hostMatchedBlocks!(instance, this.#keys(request), matched);
  }

  /**
   * Leading keyed blocks of `request` the view believes cached at `instance`
   * (as `matchedBlocks`), read by the router itself: it does not count as the
   * policy consulting the cache.
   */
  believedBlocks(instance: number, request: Request): number {
    return this.#matched(instance, request);
  }

  /** Starts a routing decision: forgets what the previous one consulted. */
  startDecision(): void {
    this.#consulted = CONSULTED_NOTHING;
  }

  /**
   * Prompt tokens of `request` the view expects cached at `instance`, in the
   * engine's units and caps (FIFO: the whole prefix where the group is held;
   * batching: matched blocks, never the prompt's last token), by what the
   * decision consulted (block matches, else groups); null when the decision
   * since {@linkcode startDecision} consulted neither.
   */
  expectedTokens(instance: number, request: Request): number | null {
    const consulted = this.#consulted;
    if (consulted === CONSULTED_NOTHING) return null;
    const group = request.prefixGroup;
    if (this.#cacheUnit === "groups") {
      return group >= 0 && this.cacheView.holds(instance, group) ? request.prefixTokens : 0;
    }
    const blocks = consulted === CONSULTED_BLOCKS
      ? this.#matched(instance, request)
      : group >= 0 && this.cacheView.holds(instance, group)
      ? this.#count(request)
      : 0;
    return this.#blockTokensCapped(blocks, request);
  }

  /**
   * The most prompt tokens of `request` any instance could find cached, in the
   * same units and caps (FIFO: its prefix, if shared; batching: all its keyed
   * blocks but never the last token) — 0 when it has nothing to share.
   */
  cacheableTokens(request: Request): number {
    if (this.#cacheUnit === "groups") return request.prefixGroup >= 0 ? request.prefixTokens : 0;
    return this.#blockTokensCapped(this.#count(request), request);
  }

  /** `blocks` leading blocks in prompt tokens, as admission counts a hit: never the prompt's last token. */
  #blockTokensCapped(blocks: number, request: Request): number {
    const B = this.blockTokens, prompt = request.prefixTokens + request.suffixTokens;
    return Math.max(0, Math.min(Math.min(blocks, Math.floor((prompt - 1) / B)) * B, prompt));
  }

  /** Records that the router sent `request` to `instance`. */
  routed(instance: number, request: Request): void {
    this.routedCount++;
    this.#routedTo[instance]++;
    this.inFlight[instance]++;
    if (this.cacheView.learnsFromRouting) this.cacheView.routed(instance, request, this.#keys(request));
  }

  /** Applies one status report, from the instance this table calls `i` (by default the status's own index). */
  apply(status: InstanceStatus, i = status.instance): void {
    this.waiting[i] = status.waiting;
    this.running[i] = status.running;
    this.queued[i] = status.queued;
    this.#finished[i] = status.finished;
    this.inFlight[i] = this.#routedTo[i] - status.finished;
    this.kvUtilization[i] = status.kvUtilization;
    this.pendingPrefillTokens[i] = status.pendingPrefillTokens;
    this.decodeBlocks[i] = status.decodeBlocks;
    this.cacheView.apply(status, i);
    this.#memoRequest = undefined;
  }

  /** The view's block match, memoised per request until the next report. */
  #matched(instance: number, request: Request): number {
    if (this.#cacheUnit === "groups") {
      // A group view matches all of the request's keyed blocks where it holds the group.
      return request.prefixGroup >= 0 && this.cacheView.holds(instance, request.prefixGroup)
        ? this.#count(request)
        : 0;
    }
    const keys = this.#keys(request);
    const memo = this.#memoMatched;
    if (memo[instance] < 0) memo[instance] = this.cacheView.matchedBlocks(instance, request, keys);
    return memo[instance];
  }

  /** The request's keyed blocks, memoised (without building its keys). */
  #count(request: Request): number {
    if (request !== this.#countRequest) {
      this.#countRequest = request;
      this.#memoCount = keyedBlockCount(request, this.blockTokens);
    }
    return this.#memoCount;
  }

  #keys(request: Request): BlockKeys {
    if (request !== this.#memoRequest) {
      this.#memoRequest = request;
      this.#memoKeys = blockKeys(request, this.blockTokens);
      this.#memoMatched.fill(-1);
    }
    return this.#memoKeys!;
  }
}

/**
 * Routes `route` commands to instances and applies their `status` reports.
 * The policy's choice is checked: anything but a valid instance index fails
 * the run with an `invalid_choice` error naming the policy. A disaggregated
 * fleet has two pools, each with its own view and policy; a request gets a
 * prefill instance and a decode instance, in the order the flow says.
 */
export class Router implements Actor<RouterCommand> {
  /** The view of the (first) pool: the whole fleet, or the prefill pool. */
  readonly view: InstanceTable;
  readonly #instances: readonly ActorRef<ServeCommand>[];
  readonly #policy: RoutingPolicy;
  readonly #fleetCache: FleetCache | undefined;
  readonly #pd: Disaggregation | undefined;
  readonly #prefill: Pool;
  readonly #decode: Pool | undefined;
  /** Disaggregated: each fleet instance's pool (0 prefill, 1 decode) and index in it. */
  readonly #poolOf: Int32Array | undefined;
  readonly #indexInPool: Int32Array | undefined;

  constructor(
    instances: readonly ActorRef<ServeCommand>[],
    policy: RoutingPolicy,
    options: RouterOptions = {},
  ) {
    this.#instances = instances;
    this.#policy = policy;
    this.#fleetCache = options.fleetCache;
    const pd = this.#pd = options.disaggregation;
    if (pd === undefined) {
      this.view = new InstanceTable(instances.length, options);
      this.#prefill = { view: this.view, policy, members: undefined };
      return;
    }
    this.#prefill = poolOf(pd.prefill);
    this.#decode = poolOf(pd.decode);
    this.view = this.#prefill.view;
    this.#poolOf = new Int32Array(instances.length).fill(-1);
    this.#indexInPool = new Int32Array(instances.length);
    [pd.prefill, pd.decode].forEach((pool, p) =>
      pool.members.forEach((member, i) => {
        this.#poolOf![member] = p;
        this.#indexInPool![member] = i;
      })
    );
  }

  /** The decode pool's view (disaggregated fleets only). */
  get decodeView(): InstanceTable | undefined {
    return this.#decode?.view;
  }

  /**
   * The accounting of placing `request` on `pool`'s instance `choice`, before
   * the view records it (an approximate view learns from the routing). The
   * fleet cache is read here, never by the policy.
   */
  #note(pool: Pool, choice: number, request: Request): RoutingNote {
    const view = pool.view, members = pool.members;
    const expected = view.expectedTokens(choice, request);
    const fleet = this.#fleetCache;
    if (fleet === undefined) {
      return expected === null
        ? NO_NOTE
        : { availableTokens: null, expectedTokens: expected, falseTokens: null };
    }
    // The chosen instance first: when it holds all the request could share (or
    // there is nothing to share), no instance can hold more, and the others
    // need not be asked.
    const most = view.cacheableTokens(request);
    const at = (i: number) => fleet.cachedPrefixTokens(members === undefined ? i : members[i], request);
    const held = most > 0 ? at(choice) : 0;
    let available = held;
    for (let i = 0; i < view.instanceCount && available < most; i++) {
      if (i !== choice) available = Math.max(available, at(i));
    }
    return {
      availableTokens: available,
      expectedTokens: expected,
      falseTokens: expected === null ? null : Math.max(0, expected - held),
    };
  }

  /** `pool`'s policy's choice for `request`, checked. */
  #choose(pool: Pool, request: Request, ctx: ActorContext<RouterCommand>, type: string): number {
    const view = pool.view;
    view.startDecision();
    const choice = pool.policy.choose(request, view, ctx.random);
    if (!(Number.isInteger(choice) && choice >= 0 && choice < view.instanceCount)) {
      throw new SimulationError(
        "invalid_choice",
        `policy "${pool.policy.name}" returned ${
          String(choice)
        }; expected an integer in [0, ${view.instanceCount})`,
        { actor: ctx.name, messageType: type, timeMs: ctx.now() },
      );
    }
    return choice;
  }

  /** The fleet address of `pool`'s instance `i`. */
  #ref(pool: Pool, i: number): ActorRef<ServeCommand> {
    return this.#instances[pool.members === undefined ? i : pool.members[i]];
  }

  handle(message: RouterCommand, ctx: ActorContext<RouterCommand>): void {
    switch (message.type) {
      case "route": {
        if (this.#pd !== undefined) return this.#routeDisaggregated(message, ctx);
        const pool = this.#prefill, request = message.request;
        const choice = this.#choose(pool, request, ctx, message.type);
        const routing = this.#note(pool, choice, request);
        pool.view.routed(choice, request);
        ctx.send(this.#instances[choice], { type: "serve", request, replyTo: ctx.self, routing });
        break;
      }
      case "status":
        if (this.#poolOf === undefined) this.view.apply(message);
        else {
          const pool = this.#poolOf[message.instance] === 0 ? this.#prefill : this.#decode!;
          pool.view.apply(message, this.#indexInPool![message.instance]);
        }
        break;
      case "prefilled":
        this.#prefilled(message, ctx);
        break;
      default:
        assertNever(message);
    }
  }

  /** A disaggregated arrival: prefill instance now (prefill-first), or decode instance and then prefill instance. */
  #routeDisaggregated(message: RouteCommand, ctx: ActorContext<RouterCommand>): void {
    const pd = this.#pd!, request = message.request, prefill = this.#prefill;
    if (pd.flow === "prefill-first") {
      const p = this.#choose(prefill, request, ctx, message.type);
      return this.#serve(prefill, p, request, ctx, this.#note(prefill, p, request), PREFILL_LEG);
    }
    const decode = this.#decode!;
    const d = this.#choose(decode, request, ctx, message.type);
    const prompt = request.prefixTokens + request.suffixTokens;
    const cached = Math.min(decode.view.believedBlocks(d, request) * decode.view.blockTokens, prompt);
    if (prompt - cached < pd.localPrefillTokens) {
      // Little to prefill: the decode instance does it all.
      return this.#serve(decode, d, request, ctx, this.#note(decode, d, request));
    }
    decode.view.routed(d, request);
    const p = this.#choose(prefill, request, ctx, message.type);
    // Instances take every leg's messages, whatever the fleet's refs are typed as.
    const decodeAt = {
      index: decode.members![d],
      ref: this.#ref(decode, d) as ActorRef<ServeCommand | PdAbandoned>,
    };
    this.#serve(prefill, p, request, ctx, this.#note(prefill, p, request), {
      phase: "prefill",
      decode: decodeAt,
    });
  }

  /** Records `request` as routed to `pool`'s instance `i` and sends it there: whole, or the `leg` given. */
  #serve(
    pool: Pool,
    i: number,
    request: Request,
    ctx: ActorContext<RouterCommand>,
    routing: RoutingNote | undefined,
    leg?: PdLeg,
  ) {
    pool.view.routed(i, request);
    ctx.send(
      this.#ref(pool, i),
      leg === undefined
        ? { type: "serve", request, replyTo: ctx.self, routing }
        : { type: "serve", request, replyTo: ctx.self, routing, leg },
    );
  }

  /** Prefill-first: a prefill finished; the decode instance is chosen now, and pulls the KV. */
  #prefilled(message: PrefilledCommand, ctx: ActorContext<RouterCommand>): void {
    const decode = this.#decode;
    if (decode === undefined || this.#pd!.flow !== "prefill-first") {
      throw new SimulationError(
        "invariant_broken",
        "a prefilled request reached a router that did not ask for it",
        {
          actor: ctx.name,
          messageType: message.type,
          timeMs: ctx.now(),
        },
      );
    }
    const { request, routing, prefill } = message;
    const d = this.#choose(decode, request, ctx, message.type);
    this.#serve(decode, d, request, ctx, routing, { phase: "decode", prefill });
  }
}

/** A pool's view and policy. */
function poolOf(pool: RoutingPool): Pool {
  return {
    view: new InstanceTable(pool.members.length, pool.table),
    policy: pool.policy,
    members: pool.members,
  };
}
