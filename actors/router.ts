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
  type Request,
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
}

/** The note of a decision that knew nothing of caches: every field unknown. */
const NO_NOTE: RoutingNote = Object.freeze({
  availableTokens: null,
  expectedTokens: null,
  falseTokens: null,
});

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
    // TODO(host tier): GPU and host blocks, from the view's tier reports.
    return this.matchedBlocks(instance, request);
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

  /** Applies one status report. */
  apply(status: InstanceStatus): void {
    const i = status.instance;
    this.waiting[i] = status.waiting;
    this.running[i] = status.running;
    this.queued[i] = status.queued;
    this.#finished[i] = status.finished;
    this.inFlight[i] = this.#routedTo[i] - status.finished;
    this.kvUtilization[i] = status.kvUtilization;
    this.pendingPrefillTokens[i] = status.pendingPrefillTokens;
    this.decodeBlocks[i] = status.decodeBlocks;
    this.cacheView.apply(status);
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
 * the run with an `invalid_choice` error naming the policy.
 */
export class Router implements Actor<RouterCommand> {
  readonly view: InstanceTable;
  readonly #instances: readonly ActorRef<ServeCommand>[];
  readonly #policy: RoutingPolicy;
  readonly #fleetCache: FleetCache | undefined;

  constructor(
    instances: readonly ActorRef<ServeCommand>[],
    policy: RoutingPolicy,
    options: RouterOptions = {},
  ) {
    this.#instances = instances;
    this.#policy = policy;
    this.#fleetCache = options.fleetCache;
    this.view = new InstanceTable(instances.length, options);
  }

  /**
   * The accounting of placing `request` on `choice`, before the view records
   * it (an approximate view learns from the routing). The fleet cache is read
   * here, never by the policy.
   */
  #note(choice: number, request: Request): RoutingNote {
    const expected = this.view.expectedTokens(choice, request);
    const fleet = this.#fleetCache;
    if (fleet === undefined) {
      return expected === null
        ? NO_NOTE
        : { availableTokens: null, expectedTokens: expected, falseTokens: null };
    }
    // The chosen instance first: when it holds all the request could share (or
    // there is nothing to share), no instance can hold more, and the others
    // need not be asked.
    const most = this.view.cacheableTokens(request);
    const held = most > 0 ? fleet.cachedPrefixTokens(choice, request) : 0;
    let available = held;
    for (let i = 0; i < this.#instances.length && available < most; i++) {
      if (i !== choice) available = Math.max(available, fleet.cachedPrefixTokens(i, request));
    }
    return {
      availableTokens: available,
      expectedTokens: expected,
      falseTokens: expected === null ? null : Math.max(0, expected - held),
    };
  }

  handle(message: RouterCommand, ctx: ActorContext<RouterCommand>): void {
    switch (message.type) {
      case "route": {
        const view = this.view, request = message.request;
        view.startDecision();
        const choice = this.#policy.choose(request, view, ctx.random);
        if (!(Number.isInteger(choice) && choice >= 0 && choice < view.instanceCount)) {
          throw new SimulationError(
            "invalid_choice",
            `policy "${this.#policy.name}" returned ${
              String(choice)
            }; expected an integer in [0, ${view.instanceCount})`,
            { actor: ctx.name, messageType: message.type, timeMs: ctx.now() },
          );
        }
        const routing = this.#note(choice, request);
        view.routed(choice, request);
        ctx.send(this.#instances[choice], { type: "serve", request, replyTo: ctx.self, routing });
        break;
      }
      case "status":
        this.view.apply(message);
        break;
      default:
        assertNever(message);
    }
  }
}
