/**
 * @module
 * The router actor: keeps a view of the instances built only from their status
 * messages (and what it routed, and what failed), and places each arriving
 * request with a routing policy — as one process, or as several replicas
 * with their own views, probing the instances' health and retrying failures.
 */
import type { FleetLoad, FleetQueries, IndexList, RouterView, RoutingPolicy } from "../policies/policy.ts";
import { FleetIndex } from "./fleet_index.ts";
import { ActiveRequests } from "./active_requests.ts";
import { type CacheView, ExactCacheView, holderKey } from "./cache_view.ts";
import { type BlockKeys, blockKeys, keyedBlockCount } from "../kv_cache/prefix_keys.ts";
import {
  assertNever,
  type FailReason,
  type InstanceStatus,
  type MetricsCommand,
  type PdAbandoned,
  type PdLeg,
  type PrefilledCommand,
  type Probe,
  type Request,
  type RequestFailed,
  type RouteCommand,
  type RouterCommand,
  type RouterTimer,
  type RoutingNote,
  type ServeCommand,
} from "../protocol.ts";
import type { Actor, ActorContext, ActorRef } from "../runtime/kernel.ts";
import { createRandomStream, type RandomStream } from "../runtime/random_stream.ts";
import { SimulationError } from "../runtime/simulation_error.ts";

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
  /**
   * Instances 0 .. k − 1 are available from the start; the rest (not yet
   * provisioned by the autoscaler) are unavailable until they first report.
   * @default all
   */
  readonly initiallyAvailable?: number;
  /**
   * Count per request what was dispatched (active prefill tokens and
   * blocks, Dynamo's `ActiveSequences`): for a policy that reads `requests`,
   * whose instances then report first tokens and finishes by id. @default false
   */
  readonly requestAccounting?: boolean;
  /**
   * Keep indexes over the fleet (loads, prefix-group holders) so that a
   * decision does not scan every instance ({@linkcode RouterView.index}).
   * @default on above {@linkcode FLEET_INDEX_MIN_INSTANCES} instances
   */
  readonly fleetIndex?: boolean;
}

/**
 * Fleets larger than this keep the router's indexes by default: below it a
 * scan costs less than keeping them (measured: design.md, "Decisions that do
 * not scan the fleet"), and every committed study runs below it, so their
 * tie draws are the scan's.
 */
export const FLEET_INDEX_MIN_INSTANCES = 32;

/** Which router replica an {@linkcode InstanceTable} belongs to, when replicas keep their own tables. */
export interface ReplicaTableOptions {
  /** The replica's index: its in-flight counts subtract the reports' `finishedBy[replica]`. */
  readonly replica: number;
  /** Replicas synchronise: the table logs its routings for its peers and keeps their in-flight counts. */
  readonly synced: boolean;
}

/**
 * The simulation's god's-eye view of the instances' caches, for routing
 * accounting only: policies never see it (real-time runs have none).
 */
export interface FleetCache {
  /** Prompt tokens of `request` that `instance` would find cached right now. */
  cachedPrefixTokens(instance: number, request: Request): number;
  /**
   * The most prompt tokens of `request` any instance of the fleet would find
   * cached right now (the maximum of `cachedPrefixTokens`, or any value of at
   * least `upTo` once one reaches it), answered without asking each.
   * @default absent: the router asks each instance
   */
  mostCachedTokens?(request: Request, upTo?: number): number;
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
  /**
   * Router replicas, each with its own views (actors/dynamics/README.md,
   * "Router replicas"). @default one replica
   */
  readonly replicas?: ReplicaOptions;
  /** The run's seed, for the replicas' random spread (its own stream, `router/spread`). @default 0 */
  readonly seed?: number;
  /**
   * Probe every instance every `statusTtlMs / 2` (from the first arrival),
   * and take one whose last report is older than this as down until it
   * reports again, ms. @default Infinity (no probes)
   */
  readonly statusTtlMs?: number;
  /** Retries of a request whose attempt failed at an instance. @default 1 */
  readonly retryBudget?: number;
  /**
   * Where to report every failed attempt (`attempt_failed`): set it whenever
   * requests can fail (faults, autoscaling, a status TTL), and only then, so
   * that no other run sends more messages. @default none (failures unreported)
   */
  readonly metrics?: ActorRef<MetricsCommand>;
}

/**
 * Router replicas: arrivals are spread over `count` replicas, each with its
 * own tables (cache view, in-flight counts, health) and the router's one
 * policy and random stream (actors/dynamics/README.md, "Router replicas").
 */
export interface ReplicaOptions {
  /** How many replicas, an integer >= 1. */
  readonly count: number;
  /**
   * `random`: each arrival to a uniformly drawn replica (from the stream
   * `router/spread`, so the policy's draws are unchanged); `session`: by a
   * fixed hash of its session, else its prefix group, else its id.
   * @default "random"
   */
  readonly spread?: "random" | "session";
  /**
   * Every this many ms the replicas learn what their peers routed since the
   * last exchange (modelled as instantaneous). 0: the replicas share one set
   * of tables — exactly one replica's behaviour. @default never: independent views
   */
  readonly syncMs?: number;
  /** Per replica, an extra delay before the instances' reports reach it, ms (a shared view: entry 0). @default 0 each */
  readonly delaysMs?: readonly number[];
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

/** One router replica: its pools (their tables are its own) and its reports' extra delay. */
interface Replica {
  /** Its index, carried by its `serve`s; undefined when it is the only set of tables (one replica, or a shared view). */
  readonly index: number | undefined;
  /** The whole fleet, or the prefill pool. */
  readonly prefill: Pool;
  readonly decode: Pool | undefined;
  /** Extra delay before the instances' reports reach it, ms. */
  readonly delayMs: number;
}

/** The router's periodic timers (frozen: one object serves every tick). */
const PROBE_TICK: RouterTimer = Object.freeze({ type: "probe_tick" });
const SYNC_TICK: RouterTimer = Object.freeze({ type: "sync_tick" });

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

/**
 * The router's picture of the instances, as their reports (and its own
 * routings and the failures it saw) left it. Health: an instance is
 * unavailable after a request failed there ({@linkcode failed}), when it
 * reports `draining`, when its last report is older than the status TTL
 * ({@linkcode expireStale}), or before it first reports when it is beyond
 * `initiallyAvailable`; any other report makes it available again.
 */
export class InstanceTable implements RouterView {
  readonly instanceCount: number;
  routedCount = 0;
  readonly available: Uint8Array;
  availableCount: number;
  /** Per instance: when this table last applied a report of it, ms (0: never). */
  readonly lastHeardMs: Float64Array;
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
  readonly activePrefillTokens: Float64Array;
  readonly activeBlocks: Float64Array;
  /** The router's per-request accounting, when a policy reads it. */
  readonly #active: ActiveRequests | undefined;
  readonly #cacheUnit: "groups" | "blocks";
  #consulted = CONSULTED_NOTHING;
  readonly #routedTo: Int32Array;
  /** Per instance: the finished requests of this table's own routings, as last reported. */
  readonly #finished: Int32Array;
  /** The replica whose `finishedBy` entry counts; −1: every finished request does (one set of tables). */
  readonly #replica: number;
  /** Synced replicas: per instance, the peers' in-flight requests as of the last sync. */
  readonly #peerInFlight: Int32Array | undefined;
  /** Synced replicas: this table's routings since the last sync (instance, request), for its peers. */
  readonly #logInstances: number[] = [];
  readonly #logRequests: Request[] = [];
  #memoRequest: Request | undefined;
  #memoKeys: BlockKeys | undefined;
  #countRequest: Request | undefined;
  #memoCount = 0;
  readonly #memoMatched: Int32Array;
  /** Per instance: the stamp its `#memoMatched` entry was computed under. */
  readonly #memoStamps: Float64Array;
  #memoStamp = 0;
  readonly #index: FleetIndex | undefined;
  readonly index: FleetQueries | undefined;

  /**
   * @param replica The router replica it belongs to, when replicas keep their
   *   own tables. @default none: it counts every replica's requests
   */
  constructor(instanceCount: number, options: InstanceTableOptions = {}, replica?: ReplicaTableOptions) {
    this.instanceCount = instanceCount;
    const initially = Math.max(0, Math.min(instanceCount, options.initiallyAvailable ?? instanceCount));
    this.available = new Uint8Array(instanceCount).fill(1, 0, initially);
    this.availableCount = initially;
    this.lastHeardMs = new Float64Array(instanceCount);
    this.#replica = replica?.replica ?? -1;
    this.#peerInFlight = replica?.synced === true ? new Int32Array(instanceCount) : undefined;
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
    this.#memoStamps = new Float64Array(instanceCount).fill(-1);
    this.blockTokens = options.blockTokens ?? 16;
    this.cacheView = options.cacheView ?? new ExactCacheView(instanceCount, "groups");
    this.#cacheUnit = options.cacheUnit ?? "groups";
    this.#active = options.requestAccounting === true
      ? new ActiveRequests(instanceCount, this.blockTokens)
      : undefined;
    this.activePrefillTokens = this.#active?.prefillTokens ?? new Float64Array(instanceCount);
    this.activeBlocks = this.#active?.blocks ?? new Float64Array(instanceCount);
    const indexed = options.fleetIndex ?? instanceCount > FLEET_INDEX_MIN_INSTANCES;
    this.#index = indexed ? new FleetIndex(this) : undefined;
    this.index = this.#index === undefined ? undefined : this.#queries(this.#index);
  }

  /** The policies' questions to the fleet index, asked as a scan would consult the view. */
  #queries(index: FleetIndex): FleetQueries {
    const unit = this.#cacheUnit;
    // Holders are indexed from a policy's first question on (round robin never asks).
    let watched: boolean | undefined;
    const watch = () =>
      watched ??= this.cacheView.watchHolders?.((i, key, held) => index.holderChanged(i, key, held)) === true;
    // The holder key a request's match hangs on, counting the consultation as a scan's; -1: nothing can match.
    const keyOf = (request: Request): number => {
      this.#consulted = CONSULTED_BLOCKS;
      return unit === "groups"
        ? (request.prefixGroup >= 0 && this.#count(request) > 0 ? request.prefixGroup : -1)
        : holderKey(unit, request, this.#keys(request));
    };
    return {
      get wholeMatches(): boolean {
        return watch() && unit === "groups";
      },
      candidates(request: Request): IndexList | undefined {
        if (!watch()) return undefined;
        return index.holders(keyOf(request)); // a key of -1 (nothing can match) has no holders
      },
      pickLeastActiveCandidate(request: Request, random: RandomStream): number {
        watch();
        return index.pickLeastActiveHolder(keyOf(request), random); // -1 without a holder
      },
      minLoad: (load: FleetLoad) => index.minLoad(load),
      maxLoad: (load: FleetLoad) => index.maxLoad(load),
      firstLeast: (load: FleetLoad) => index.firstLeast(load),
      pickLeast: (load: FleetLoad, random: RandomStream) => index.pickLeast(load, random),
      pickAvailable: (random: RandomStream) => index.pickAvailable(random),
      inFlightSum: () => index.inFlightSum(),
      capacitySum: () => index.capacitySum(),
    };
  }

  newBlocks(instance: number, request: Request): number {
    if (this.#active === undefined) {
      return Math.ceil((request.prefixTokens + request.suffixTokens) / this.blockTokens);
    }
    return this.#active.newBlocks(instance, request, this.#keys(request));
  }

  cachedBlockCount(instance: number): number {
    return this.cacheView.cachedBlockCount?.(instance) ?? 0;
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
    this.#index?.loadChanged(instance);
    // What the view believed cached there before the routing teaches it more.
    this.#active?.add(instance, request, this.#keys(request), this.#matched(instance, request));
    if (this.cacheView.learnsFromRouting) this.cacheView.routed(instance, request, this.#keys(request));
    if (this.#peerInFlight !== undefined) {
      this.#logInstances.push(instance);
      this.#logRequests.push(request);
    }
  }

  /**
   * Applies one status report, from the instance this table calls `i` (by
   * default the status's own index), at `nowMs`. A `restarted` instance's
   * cache is forgotten first; a report makes the instance available unless
   * it says `draining`.
   */
  apply(status: InstanceStatus, i = status.instance, nowMs = 0): void {
    this.waiting[i] = status.waiting;
    this.running[i] = status.running;
    this.queued[i] = status.queued;
    const finished = this.#replica < 0 ? status.finished : finishedBy(status, this.#replica);
    this.#finished[i] = finished;
    const peers = this.#peerInFlight;
    this.inFlight[i] = this.#routedTo[i] - finished + (peers === undefined ? 0 : peers[i]);
    this.kvUtilization[i] = status.kvUtilization;
    this.pendingPrefillTokens[i] = status.pendingPrefillTokens;
    this.decodeBlocks[i] = status.decodeBlocks;
    this.lastHeardMs[i] = nowMs;
    if (status.restarted === true) {
      this.cacheView.forget?.(i);
      this.#active?.forget(i);
    }
    this.cacheView.apply(status, i);
    const active = this.#active;
    if (active !== undefined) {
      status.prefilledIds?.forEach((id) => active.prefilled(i, id));
      status.finishedIds?.forEach((id) => active.finished(i, id));
    }
    this.#memoRequest = undefined;
    if (status.draining === true) this.markDown(i);
    else if (this.available[i] === 0) {
      this.available[i] = 1;
      this.availableCount++;
      this.#index?.availabilityChanged(i);
    }
    this.#index?.loadChanged(i);
  }

  /** Takes `instance` as unavailable until it reports again (a request failed there, or it drains). */
  markDown(instance: number): void {
    if (this.available[instance] === 0) return;
    this.available[instance] = 0;
    this.availableCount--;
    this.#index?.availabilityChanged(instance);
  }

  /**
   * A request this table routed to `instance` failed there: the instance is
   * unavailable until it reports again, and the request is no longer in
   * flight (the instance counts it finished, so its next report agrees).
   */
  failed(instance: number, requestId?: number): void {
    this.markDown(instance);
    this.inFlight[instance]--;
    this.#index?.loadChanged(instance);
    if (requestId !== undefined) this.#active?.finished(instance, requestId);
    // The view may have learnt the failed routing: the request's memo is stale for its retry.
    this.#memoRequest = undefined;
  }

  /**
   * Takes as unavailable every instance whose last report (or `sinceMs`, when
   * probing started, if later) is more than `ttlMs` before `nowMs`. O(instances).
   */
  expireStale(nowMs: number, ttlMs: number, sinceMs: number): void {
    const available = this.available, heard = this.lastHeardMs;
    for (let i = 0; i < this.instanceCount; i++) {
      if (available[i] === 1 && nowMs - Math.max(heard[i], sinceMs) > ttlMs) this.markDown(i);
    }
  }

  /**
   * Synced replicas: `peer`'s routings since the last sync, learnt by this
   * table's cache view as though it had routed them (an approximate view;
   * an exact one learns nothing from routing).
   */
  learnFrom(peer: InstanceTable): void {
    if (!this.cacheView.learnsFromRouting) return;
    const instances = peer.#logInstances, requests = peer.#logRequests;
    for (let k = 0; k < instances.length; k++) {
      const request = requests[k];
      this.cacheView.routed(instances[k], request, this.#keys(request));
    }
    this.#memoRequest = undefined;
  }

  /** Synced replicas: adds this table's own in-flight requests to `total`, per instance. */
  addOwnInFlight(total: Int32Array): void {
    for (let i = 0; i < this.instanceCount; i++) total[i] += this.#routedTo[i] - this.#finished[i];
  }

  /**
   * Synced replicas: every replica's in-flight requests, per instance, as of
   * this sync (`total`, from {@linkcode addOwnInFlight} over all of them);
   * the routing log starts afresh.
   */
  applySync(total: Int32Array): void {
    const peers = this.#peerInFlight!;
    for (let i = 0; i < this.instanceCount; i++) {
      peers[i] = total[i] - (this.#routedTo[i] - this.#finished[i]);
      this.inFlight[i] = total[i];
      this.#index?.loadChanged(i);
    }
    this.#logInstances.length = 0;
    this.#logRequests.length = 0;
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
    const memo = this.#memoMatched, stamps = this.#memoStamps, stamp = this.#memoStamp;
    if (stamps[instance] !== stamp) {
      memo[instance] = this.cacheView.matchedBlocks(instance, request, keys);
      stamps[instance] = stamp;
    }
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
      // A new stamp forgets every instance's memo at once (no fill: O(1) on any fleet).
      this.#memoStamp++;
    }
    return this.#memoKeys!;
  }
}

/**
 * A policy's invalid choice in an error message, described without
 * converting it: an object's `toString` is the policy's code, which could
 * spin or throw here. A Promise gets the one line every mode gives it.
 */
function describeChoice(choice: unknown): string {
  if (typeof choice === "number" || typeof choice === "boolean" || choice === null || choice === undefined) {
    return String(choice);
  }
  if (typeof choice === "string") return `the string ${JSON.stringify(choice.slice(0, 40))}`;
  if (choice instanceof Promise) return "a Promise (choose must decide synchronously, not async)";
  return typeof choice === "object" ? "an object" : `a ${typeof choice}`;
}

/**
 * Routes `route` commands to instances and applies their `status` reports.
 * The policy's choice is checked: anything but a valid instance index fails
 * the run with an `invalid_choice` error naming the policy; a valid choice
 * is obeyed even when the view holds that instance unavailable (the request
 * may then fail there, and be retried). A disaggregated fleet has two pools,
 * each with its own view and policy; a request gets a prefill instance and a
 * decode instance, in the order the flow says.
 *
 * Replicas (actors/dynamics/README.md, "Router replicas") live inside this one actor: each
 * has its own tables and shares the policy and the random stream; each
 * arrival goes to one replica, which places it (and any retry of it). Every
 * replica applies every report, after its own extra delay (a
 * `replica_status` timer). With a sync interval the replicas exchange, at
 * each `sync_tick`, what they routed since the last one and their in-flight
 * counts — instantaneously, at the tick.
 *
 * Health (actors/dynamics/README.md, "Faults"): a `request_failed` makes the instance
 * unavailable in the replica that routed it and is retried at once, while
 * the retry budget lasts; with a status TTL the router probes every instance
 * every TTL / 2 and takes a silent one as down. With no instance available
 * a request fails at once (`no_instance`). Failed attempts go to `metrics`.
 */
export class Router implements Actor<RouterCommand> {
  /** The view of replica 0's (first) pool: the whole fleet, or the prefill pool. */
  readonly view: InstanceTable;
  readonly #instances: readonly ActorRef<ServeCommand>[];
  readonly #fleetCache: FleetCache | undefined;
  readonly #pd: Disaggregation | undefined;
  /** The replicas with their own tables: one when there is one replica or they share a view. */
  readonly #replicas: readonly Replica[];
  /** The one table every report goes to, when there is only one (no replicas, no pools, no delay). */
  #onlyTable: InstanceTable | undefined;
  /** How many replicas the router models (several may share one entry of `#replicas`). */
  readonly #replicaCount: number;
  /** Random spread over several sets of tables: the spread's own stream. */
  readonly #spread: RandomStream | undefined;
  readonly #syncMs: number;
  readonly #ttlMs: number;
  readonly #retryBudget: number;
  readonly #metrics: ActorRef<MetricsCommand> | undefined;
  /** Disaggregated: each fleet instance's pool (0 prefill, 1 decode) and index in it. */
  readonly #poolOf: Int32Array | undefined;
  readonly #indexInPool: Int32Array | undefined;
  /** Whether the periodic timers (probes, sync) are started, or none is needed. */
  #started: boolean;
  /** When probing started: staleness counts from here for an instance not heard from since. */
  #probingSinceMs = 0;
  #probe: Probe | undefined;

  constructor(
    instances: readonly ActorRef<ServeCommand>[],
    policy: RoutingPolicy,
    options: RouterOptions = {},
  ) {
    checkRouterOptions(options);
    this.#instances = instances;
    this.#fleetCache = options.fleetCache;
    this.#pd = options.disaggregation;
    const replicas = options.replicas;
    this.#replicaCount = replicas?.count ?? 1;
    this.#syncMs = replicas?.syncMs ?? Infinity;
    const distinct = this.#replicaCount > 1 && this.#syncMs !== 0 ? this.#replicaCount : 1;
    this.#spread = distinct > 1 && replicas?.spread !== "session"
      ? createRandomStream(options.seed ?? 0, "router/spread")
      : undefined;
    this.#ttlMs = options.statusTtlMs ?? Infinity;
    this.#retryBudget = options.retryBudget ?? 1;
    this.#metrics = options.metrics;
    this.#started = this.#ttlMs === Infinity &&
      !(distinct > 1 && this.#syncMs > 0 && this.#syncMs < Infinity);
    const synced = distinct > 1 && this.#syncMs < Infinity;
    this.#replicas = Array.from(
      { length: distinct },
      (_, r) =>
        buildReplica(instances.length, policy, options, {
          index: distinct > 1 ? r : undefined,
          synced,
          delayMs: replicas?.delaysMs?.[r] ?? 0,
        }),
    );
    this.view = this.#replicas[0].prefill.view;
    const pd = this.#pd;
    // The common case — one table, reports applied as they come — takes a direct path (the hot one).
    if (pd === undefined && distinct === 1 && this.#replicas[0].delayMs === 0) this.#onlyTable = this.view;
    if (pd === undefined) return;
    this.#poolOf = new Int32Array(instances.length).fill(-1);
    this.#indexInPool = new Int32Array(instances.length);
    [pd.prefill, pd.decode].forEach((pool, p) =>
      pool.members.forEach((member, i) => {
        this.#poolOf![member] = p;
        this.#indexInPool![member] = i;
      })
    );
  }

  /** The decode pool's view of replica 0 (disaggregated fleets only). */
  get decodeView(): InstanceTable | undefined {
    return this.#replicas[0].decode?.view;
  }

  /** Each replica's (first) table, in replica order; replicas sharing a view share one table. */
  replicaViews(): readonly InstanceTable[] {
    return Array.from(
      { length: this.#replicaCount },
      (_, r) => this.#replicas[r % this.#replicas.length].prefill.view,
    );
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
    if (available < most && members === undefined && fleet.mostCachedTokens !== undefined) {
      // The fleet keeps the maximum itself: no instance need be asked.
      available = Math.max(available, fleet.mostCachedTokens(request, most));
    } else {
      for (let i = 0; i < view.instanceCount && available < most; i++) {
        if (i !== choice) available = Math.max(available, at(i));
      }
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
          describeChoice(choice)
        }; expected an integer in [0, ${view.instanceCount})`,
        { actor: ctx.name, messageType: type, timeMs: ctx.now() },
      );
    }
    return choice;
  }

  /** With a status TTL: `pool`'s view takes the instances it has not heard from within the TTL as down. */
  #expire(pool: Pool, ctx: ActorContext<RouterCommand>): void {
    if (this.#ttlMs !== Infinity) pool.view.expireStale(ctx.now(), this.#ttlMs, this.#probingSinceMs);
  }

  /** The fleet address of `pool`'s instance `i`. */
  #ref(pool: Pool, i: number): ActorRef<ServeCommand> {
    return this.#instances[pool.members === undefined ? i : pool.members[i]];
  }

  handle(message: RouterCommand, ctx: ActorContext<RouterCommand>): void {
    switch (message.type) {
      case "route": {
        if (!this.#started) this.#start(ctx);
        const replica = this.#replicaOf(message.request);
        if (this.#pd !== undefined) return this.#routeDisaggregated(replica, message, ctx);
        this.#route(replica, message.request, 0, ctx, message.type);
        break;
      }
      case "status":
        if (this.#onlyTable !== undefined) this.#onlyTable.apply(message, message.instance, ctx.now());
        else this.#status(message, ctx);
        break;
      case "prefilled":
        this.#prefilled(message, ctx);
        break;
      case "request_failed":
        this.#failed(message, ctx);
        break;
      case "replica_status":
        this.#applyTo(this.#replicas[message.replica], message.status, ctx);
        break;
      case "probe_tick":
        this.#probeAll(ctx);
        break;
      case "sync_tick":
        this.#sync();
        ctx.scheduleBackground(this.#syncMs, SYNC_TICK);
        break;
      default:
        assertNever(message);
    }
  }

  /** The replica an arrival goes to: by the spread's draw, or its session key's hash. */
  #replicaOf(request: Request): Replica {
    const replicas = this.#replicas;
    if (replicas.length === 1) return replicas[0];
    return replicas[
      this.#spread === undefined
        ? sessionReplica(request, replicas.length)
        : Math.floor(this.#spread() * replicas.length)
    ];
  }

  /** Places attempt `attempt` at `request` with `replica` (aggregated fleet): or fails it, when no instance is available. */
  #route(
    replica: Replica,
    request: Request,
    attempt: number,
    ctx: ActorContext<RouterCommand>,
    type: string,
  ): void {
    const pool = replica.prefill;
    this.#expire(pool, ctx);
    if (pool.view.availableCount === 0) {
      return this.#attemptFailed(request, -1, "no_instance", attempt, true, ctx);
    }
    const choice = this.#choose(pool, request, ctx, type);
    const routing = this.#note(pool, choice, request);
    pool.view.routed(choice, request);
    ctx.send(
      this.#instances[choice],
      serveCommand(request, ctx.self, routing, undefined, attempt, replica.index),
    );
  }

  /** The first arrival: starts the periodic probes and syncs the options ask for (background timers). */
  #start(ctx: ActorContext<RouterCommand>): void {
    this.#started = true;
    if (this.#ttlMs !== Infinity) {
      this.#probingSinceMs = ctx.now();
      ctx.scheduleBackground(this.#ttlMs / 2, PROBE_TICK);
    }
    if (this.#replicas.length > 1 && this.#syncMs > 0 && this.#syncMs < Infinity) {
      ctx.scheduleBackground(this.#syncMs, SYNC_TICK);
    }
  }

  /** Asks every instance for its status (it answers with its network delay, unless down), and probes again in TTL / 2. */
  #probeAll(ctx: ActorContext<RouterCommand>): void {
    const probe = this.#probe ??= Object.freeze({ type: "probe", replyTo: ctx.self });
    for (const instance of this.#instances) ctx.send(instance as ActorRef<ServeCommand | Probe>, probe);
    ctx.scheduleBackground(this.#ttlMs / 2, PROBE_TICK);
  }

  /** The replicas exchange their routings since the last sync and their in-flight counts, pool by pool. */
  #sync(): void {
    const replicas = this.#replicas;
    syncTables(replicas.map((r) => r.prefill.view));
    if (this.#pd !== undefined) syncTables(replicas.map((r) => r.decode!.view));
  }

  /** A report reaches every replica: at once, or after the replica's own extra delay. */
  #status(status: InstanceStatus, ctx: ActorContext<RouterCommand>): void {
    const replicas = this.#replicas;
    if (replicas.length === 1 && replicas[0].delayMs === 0) return this.#applyTo(replicas[0], status, ctx);
    for (let r = 0; r < replicas.length; r++) {
      const delayMs = replicas[r].delayMs;
      if (delayMs > 0) ctx.schedule(delayMs, { type: "replica_status", replica: r, status });
      else this.#applyTo(replicas[r], status, ctx);
    }
  }

  /** `replica` applies a report to the table of the instance's pool. */
  #applyTo(replica: Replica, status: InstanceStatus, ctx: ActorContext<RouterCommand>): void {
    if (this.#poolOf === undefined) return replica.prefill.view.apply(status, status.instance, ctx.now());
    const pool = this.#poolOf[status.instance] === 0 ? replica.prefill : replica.decode!;
    pool.view.apply(status, this.#indexInPool![status.instance], ctx.now());
  }

  /**
   * An attempt failed at an instance: the replica that routed it takes the
   * instance as unavailable, and retries the request at once while the
   * retry budget lasts; else the request is failed.
   */
  #failed(message: RequestFailed, ctx: ActorContext<RouterCommand>): void {
    const command = message.command, replica = this.#replicas[command.replica ?? 0];
    if (this.#pd !== undefined || replica === undefined) {
      throw new SimulationError(
        "invariant_broken",
        this.#pd !== undefined
          ? "a request failed in a disaggregated fleet, where faults are not supported"
          : `a failed request names replica ${command.replica}, of ${this.#replicas.length}`,
        { actor: ctx.name, messageType: message.type, timeMs: ctx.now() },
      );
    }
    const attempt = command.attempt ?? 0, retry = attempt < this.#retryBudget;
    replica.prefill.view.failed(message.instance, command.request.id);
    this.#attemptFailed(command.request, message.instance, message.reason, attempt, !retry, ctx);
    if (retry) this.#route(replica, command.request, attempt + 1, ctx, message.type);
  }

  /** Tells the metrics collector (when there is one) that an attempt at `request` failed. */
  #attemptFailed(
    request: Request,
    instance: number,
    reason: FailReason | "no_instance",
    attempt: number,
    final: boolean,
    ctx: ActorContext<RouterCommand>,
  ): void {
    if (this.#metrics === undefined) return;
    const timeMs = ctx.now(), requestId = request.id, arrivalMs = request.arrivalMs;
    ctx.send(
      this.#metrics,
      request.sloClass === undefined
        ? { type: "attempt_failed", requestId, instance, timeMs, reason, attempt, final, arrivalMs }
        : {
          type: "attempt_failed",
          requestId,
          instance,
          timeMs,
          reason,
          attempt,
          final,
          arrivalMs,
          sloClass: request.sloClass,
        },
    );
  }

  /** A disaggregated arrival: prefill instance now (prefill-first), or decode instance and then prefill instance. */
  #routeDisaggregated(replica: Replica, message: RouteCommand, ctx: ActorContext<RouterCommand>): void {
    const pd = this.#pd!, request = message.request, prefill = replica.prefill, index = replica.index;
    this.#expire(prefill, ctx);
    if (pd.flow === "prefill-first") {
      const p = this.#choose(prefill, request, ctx, message.type);
      return this.#serve(prefill, p, request, ctx, this.#note(prefill, p, request), index, PREFILL_LEG);
    }
    const decode = replica.decode!;
    this.#expire(decode, ctx);
    const d = this.#choose(decode, request, ctx, message.type);
    const prompt = request.prefixTokens + request.suffixTokens;
    const cached = Math.min(decode.view.believedBlocks(d, request) * decode.view.blockTokens, prompt);
    if (prompt - cached < pd.localPrefillTokens) {
      // Little to prefill: the decode instance does it all.
      return this.#serve(decode, d, request, ctx, this.#note(decode, d, request), index);
    }
    decode.view.routed(d, request);
    const p = this.#choose(prefill, request, ctx, message.type);
    // Instances take every leg's messages, whatever the fleet's refs are typed as.
    const decodeAt = {
      index: decode.members![d],
      ref: this.#ref(decode, d) as ActorRef<ServeCommand | PdAbandoned>,
    };
    this.#serve(prefill, p, request, ctx, this.#note(prefill, p, request), index, {
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
    replica: number | undefined,
    leg?: PdLeg,
  ) {
    pool.view.routed(i, request);
    ctx.send(this.#ref(pool, i), serveCommand(request, ctx.self, routing, leg, 0, replica));
  }

  /** Prefill-first: a prefill finished; the replica that routed it chooses the decode instance now, which pulls the KV. */
  #prefilled(message: PrefilledCommand, ctx: ActorContext<RouterCommand>): void {
    const replica = this.#replicas[message.replica ?? 0], decode = replica?.decode;
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
    this.#expire(decode, ctx);
    const d = this.#choose(decode, request, ctx, message.type);
    this.#serve(decode, d, request, ctx, routing, replica.index, { phase: "decode", prefill });
  }
}

/** What {@linkcode buildReplica} needs to know of the replica it builds. */
interface ReplicaSlot {
  readonly index: number | undefined;
  readonly synced: boolean;
  readonly delayMs: number;
}

/** One replica's pools, with tables of its own (replica 0 uses the options' cache views, the others empty copies). */
function buildReplica(
  instanceCount: number,
  policy: RoutingPolicy,
  options: RouterOptions,
  slot: ReplicaSlot,
): Replica {
  const r = slot.index ?? 0;
  const table = slot.index === undefined ? undefined : { replica: slot.index, synced: slot.synced };
  const pd = options.disaggregation;
  if (pd === undefined) {
    const view = new InstanceTable(instanceCount, { ...options, cacheView: viewOf(options, r) }, table);
    return {
      index: slot.index,
      prefill: { view, policy, members: undefined },
      decode: undefined,
      delayMs: slot.delayMs,
    };
  }
  const pool = (spec: RoutingPool): Pool => {
    const initially = options.initiallyAvailable;
    const own: InstanceTableOptions = {
      ...spec.table,
      cacheView: viewOf(spec.table, r),
      initiallyAvailable: initially === undefined
        ? spec.table.initiallyAvailable
        : spec.members.filter((m) => m < initially).length,
    };
    return {
      view: new InstanceTable(spec.members.length, own, table),
      policy: spec.policy,
      members: spec.members,
    };
  };
  return { index: slot.index, prefill: pool(pd.prefill), decode: pool(pd.decode), delayMs: slot.delayMs };
}

/** Replica `r`'s cache view: the options' own for replica 0, an empty copy for the others. */
function viewOf(options: InstanceTableOptions, r: number): CacheView | undefined {
  const view = options.cacheView;
  if (r === 0 || view === undefined) return view;
  if (view.emptyCopy === undefined) {
    throw new TypeError("router.replicas: independent replicas need a cache view with emptyCopy()");
  }
  return view.emptyCopy();
}

/** Synced replicas' exchange over one pool's tables: each learns its peers' routings, then everyone's in-flight counts. */
function syncTables(tables: readonly InstanceTable[]): void {
  for (const table of tables) for (const peer of tables) if (peer !== table) table.learnFrom(peer);
  const total = new Int32Array(tables[0].instanceCount);
  for (const table of tables) table.addOwnInFlight(total);
  for (const table of tables) table.applySync(total);
}

/** A `serve`: as always, plus `attempt` when a retry and `replica` when replicas keep their own tables. */
function serveCommand(
  request: Request,
  replyTo: ActorRef<RouterCommand>,
  routing: RoutingNote | undefined,
  leg: PdLeg | undefined,
  attempt: number,
  replica: number | undefined,
): ServeCommand {
  const base: ServeCommand = leg === undefined
    ? { type: "serve", request, replyTo, routing }
    : { type: "serve", request, replyTo, routing, leg };
  if (attempt === 0) return replica === undefined ? base : { ...base, replica };
  return replica === undefined ? { ...base, attempt } : { ...base, attempt, replica };
}

/**
 * The replica of `request` under session spread: a fixed 32-bit mix of its
 * session id, else its prefix group, else its id, modulo `count` — so a
 * session's requests all reach one replica.
 */
export function sessionReplica(request: Request, count: number): number {
  const key = request.session ?? (request.prefixGroup >= 0 ? request.prefixGroup : request.id);
  let h = (key >>> 0) ^ Math.imul(Math.floor(key / 4294967296) >>> 0, 0x27d4eb2d);
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return ((h ^ (h >>> 16)) >>> 0) % count;
}

/** Checks the options a scenario would have checked, naming the field. */
function checkRouterOptions(options: RouterOptions): void {
  const replicas = options.replicas;
  const fail = (field: string, expected: string, got: unknown) => {
    throw new RangeError(`router.${field}: expected ${expected}, got ${String(got)}`);
  };
  if (replicas !== undefined) {
    if (!(Number.isInteger(replicas.count) && replicas.count >= 1)) {
      fail("replicas.count", "an integer >= 1", replicas.count);
    }
    if (replicas.syncMs !== undefined && !(replicas.syncMs >= 0)) {
      fail("replicas.syncMs", "a number >= 0", replicas.syncMs);
    }
    replicas.delaysMs?.forEach((d, r) => {
      if (!(d >= 0 && d < Infinity)) fail(`replicas.delaysMs[${r}]`, "a finite number >= 0", d);
    });
  }
  const ttl = options.statusTtlMs;
  if (ttl !== undefined && !(ttl > 0)) fail("statusTtlMs", "a number > 0", ttl);
  const budget = options.retryBudget;
  if (budget !== undefined && !(Number.isInteger(budget) && budget >= 0)) {
    fail("retryBudget", "an integer >= 0", budget);
  }
}

/**
 * Requests of replica `replica`'s that the instance reports finished: its
 * `finishedBy` entry; without one, the instance has seen only replica 0's
 * requests, so all its finished ones are replica 0's.
 */
function finishedBy(status: InstanceStatus, replica: number): number {
  const by = status.finishedBy;
  return by === undefined ? (replica === 0 ? status.finished : 0) : by[replica] ?? 0;
}
