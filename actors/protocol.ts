/**
 * @module
 * Every message the actors exchange, in one place: what each actor accepts
 * (its commands) and what it sends back (its replies). All are plain readonly
 * data that survive `structuredClone`, so they cross `postMessage` unchanged.
 */
import type { ActorRef } from "./runtime/kernel.ts";

/** One inference request as the workload source creates it. */
export interface Request {
  /** Arrival order, from 0. */
  readonly id: number;
  /** Simulated arrival time at the router, in ms. */
  readonly arrivalMs: number;
  /** Shared prefix group, or -1 when the prompt's prefix is unique. */
  readonly prefixGroup: number;
  /** Tokens in the prefix (shared or unique). */
  readonly prefixTokens: number;
  /** Tokens after the prefix; never cached. */
  readonly suffixTokens: number;
  /** Tokens to generate. */
  readonly outputTokens: number;
  /**
   * Explicit prefix keys (trace replay): key i identifies tokens
   * `[i × keyTokens, (i+1) × keyTokens)` *and every token before them*, so
   * equal keys at position i mean an equal prefix. Absent: the block-level
   * model derives a key chain from `prefixGroup` covering `prefixTokens`.
   */
  readonly prefixKeys?: readonly number[];
  /** Tokens each of `prefixKeys` covers (a multiple of the instance's block size). */
  readonly keyTokens?: number;
  /** Index of the request's class in `workload.classes`; absent when no classes are configured. */
  readonly sloClass?: number;
  /** Its class's priority (higher is served first); absent when no classes are configured. */
  readonly priority?: number;
  /**
   * The multi-turn session it belongs to, where the workload has sessions
   * (a replica spread by session keys on it); absent otherwise.
   */
  readonly session?: number;
}

// ---- Workload source -------------------------------------------------------

/** Commands the workload source accepts. */
export type SourceCommand =
  /** Begin emitting arrivals. */
  | { readonly type: "start" }
  /** Internal timer: emit the next batch of arrivals. */
  | { readonly type: "emit" };

// ---- Router ----------------------------------------------------------------

/** A new request for the router to place. */
export interface RouteCommand {
  readonly type: "route";
  readonly request: Request;
}

/**
 * An instance's report of its state, sent whenever it changes (a request
 * accepted, started or finished). The router knows instances only by these.
 */
export interface InstanceStatus {
  readonly type: "status";
  /** Index of the reporting instance. */
  readonly instance: number;
  /** Requests queued, not counting those in service. */
  readonly waiting: number;
  /** Requests in service. */
  readonly running: number;
  /**
   * Requests queued in the model's own sense, the signal `hybrid` gates on:
   * FIFO, the waiting requests (the original study's queue); batching, those
   * waiting for admission plus those admitted whose prefill has not finished
   * (every request still owed its first token). See design.md.
   */
  readonly queued: number;
  /** Requests finished (completed or dropped) so far; with the router's own count routed, in flight = routed − finished. */
  readonly finished: number;
  /** Prompt tokens still to prefill: waiting requests' and the unfinished part of those in prefill. */
  readonly pendingPrefillTokens: number;
  /** KV blocks held by decoding sequences (batching model; 0 for FIFO). */
  readonly decodeBlocks: number;
  /** KV blocks held by running requests / capacity (batching model; 0 for FIFO). */
  readonly kvUtilization: number;
  /** Prefix group the instance now holds (or has committed to compute), if any. */
  readonly cacheAdded?: number;
  /** Prefix group the instance's cache just evicted, if any. */
  readonly cacheEvicted?: number;
  /**
   * Block runs whose cached length changed since the last report (exact
   * router view, batching model), as flat pairs `[runKey, cachedBlocks, …]`:
   * the run's leading `cachedBlocks` blocks are cached now; 0 = evicted.
   */
  readonly cachedRuns?: readonly number[];
  /**
   * Router replicas: per replica, the requests it sent here that finished
   * (completed, dropped or failed) so far — each replica's in-flight count
   * is its own routings minus its entry. Absent with one replica.
   */
  readonly finishedBy?: readonly number[];
  /**
   * Requests that produced their first token here since the last report
   * (ids), for a router that counts its own active prefill tokens (a policy
   * reading `requests`). Absent when none, or not asked for.
   */
  readonly prefilledIds?: readonly number[];
  /**
   * Requests that finished here (completed or dropped) since the last
   * report (ids), for a router that counts its own active blocks. Absent
   * when none, or not asked for.
   */
  readonly finishedIds?: readonly number[];
  /** The instance takes no new requests (a `drain` fault, or scaled in): a router stops routing there. */
  readonly draining?: boolean;
  /**
   * The instance (re)started cold — after a crash, or provisioned by the
   * autoscaler — with an empty cache: a view forgets what it believed cached there.
   */
  readonly restarted?: boolean;
}

/** An instance's own timer: time to report status (periodic reporting). */
export interface ReportTick {
  readonly type: "report_tick";
}

/**
 * A prefill instance finished a request's prefill and holds its KV for the
 * decode instance to pull (disaggregated serving, prefill-first flow): the
 * router now picks the decode instance.
 */
export interface PrefilledCommand {
  readonly type: "prefilled";
  readonly request: Request;
  readonly routing?: RoutingNote;
  readonly prefill: PrefillDone;
  /** The router replica that routed its prefill leg (it chooses the decode instance). @default 0 */
  readonly replica?: number;
}

/**
 * Why one attempt at a request failed at an instance (faults). `crash`: the
 * instance crashed with it in flight, or was down when it arrived.
 * `unreachable`: a network partition cut the instance off from the router.
 * `draining`: the instance takes no new requests.
 */
export type FailReason = "crash" | "unreachable" | "draining";

/**
 * One attempt at a request failed at `instance` — what a real router sees
 * as a reset connection, a refused one, or a 503. The router retries it
 * elsewhere within its retry budget, or records it as failed.
 */
export interface RequestFailed {
  readonly type: "request_failed";
  /** The `serve` that failed, as the router sent it (its attempt, replica, routing note). */
  readonly command: ServeCommand;
  readonly instance: number;
  readonly reason: FailReason;
}

/** The router's own timers (faults, replicas). */
export type RouterTimer =
  /** Time to probe every instance's health (a status TTL is set). */
  | { readonly type: "probe_tick" }
  /** Time for the replicas to exchange what they routed (`replicaSyncMs` > 0). */
  | { readonly type: "sync_tick" }
  /** A status report reaching replica `replica` after its own extra delay. */
  | { readonly type: "replica_status"; readonly replica: number; readonly status: InstanceStatus };

/** Commands the router accepts. */
export type RouterCommand = RouteCommand | InstanceStatus | PrefilledCommand | RequestFailed | RouterTimer;

// ---- Serving instance ------------------------------------------------------

/**
 * What the router knew when it placed a request, for routing-quality
 * accounting. All in prompt tokens, capped as the engine caps a hit (at most
 * the prompt's keyed blocks, and never the prompt's last token).
 */
export interface RoutingNote {
  /** Longest cached prefix on any instance at the moment of routing; null when the run cannot see the instances (real-time mode). */
  readonly availableTokens: number | null;
  /** What the router's own view expected cached on the chosen instance; null when the policy never consulted the cache view. */
  readonly expectedTokens: number | null;
  /** Of `expectedTokens`, those the chosen instance did not hold at that moment; null when either side is unknown. */
  readonly falseTokens: number | null;
}

/** Serve a request; status reports go to `replyTo`. */
export interface ServeCommand {
  readonly type: "serve";
  readonly request: Request;
  readonly replyTo: ActorRef<InstanceStatus>;
  /** The router's accounting of this placement, carried into the completion record. */
  readonly routing?: RoutingNote;
  /** Disaggregated serving: which leg of the request this is. Absent: serve it whole (prefill and decode here). */
  readonly leg?: PdLeg;
  /** Which try at the request this is: 0 the first, k the k-th retry (faults). @default 0 */
  readonly attempt?: number;
  /** The router replica that sent it (router replicas). @default 0 */
  readonly replica?: number;
}

/**
 * Asks an instance for its status now (a health check or metrics scrape):
 * a live, reachable instance answers `replyTo` at once with a status
 * report; a crashed, partitioned or unprovisioned one does not answer.
 */
export interface Probe {
  readonly type: "probe";
  readonly replyTo: ActorRef<InstanceStatus>;
}

/** What goes wrong with an instance (actors/dynamics/README.md, "Faults"). */
export type FaultKind = "crash" | "slow" | "drain" | "partition";

/** The fault injector's commands to an instance: a fault starts, or ends. */
export type FaultCommand =
  | {
    readonly type: "fault";
    readonly kind: FaultKind;
    /** `slow`: the factor on service (FIFO) or step (batching) time. */
    readonly factor?: number;
    /** The router, for the report the instance sends when it comes back. */
    readonly replyTo: ActorRef<InstanceStatus>;
  }
  | { readonly type: "recover"; readonly kind: FaultKind; readonly replyTo: ActorRef<InstanceStatus> };

/** The autoscaler's commands to an instance. */
export type ScalingCommand =
  /** Start the instance: it is ready `readyInMs` from now, cold, and then reports to `replyTo`. */
  | { readonly type: "provision"; readonly readyInMs: number; readonly replyTo: ActorRef<InstanceStatus> }
  /** Scale in: take no new requests, finish those running, then stop. */
  | { readonly type: "decommission"; readonly replyTo: ActorRef<InstanceStatus> };

/**
 * One leg of a disaggregated request (design.md, "Disaggregated serving").
 * `prefill`: compute the prompt's KV and hold it for the decode instance —
 * `decode` names it when the router chose it first (decode-first flow),
 * else the router is told (`prefilled`) and chooses it then. `decode`: pull
 * the KV from `prefill` and generate every output token here.
 */
export type PdLeg =
  | {
    readonly phase: "prefill";
    readonly decode?: { readonly index: number; readonly ref: ActorRef<ServeCommand | PdAbandoned> };
  }
  | { readonly phase: "decode"; readonly prefill: PrefillDone };

/** Where a request was prefilled, for its decode instance. */
export interface PrefillDone {
  /** The prefill instance's index. */
  readonly index: number;
  /** Where to pull the KV from. */
  readonly ref: ActorRef<KvPull>;
  /** When its prefill was admitted (the request's service start), ms. */
  readonly startMs: number;
  /** Prompt tokens the prefill instance found cached. */
  readonly cachedTokens: number;
  /** Of those, tokens loaded from its host-memory tier. */
  readonly hostCachedTokens: number;
}

/**
 * A decode instance asks the prefill instance for a request's KV: `tokens`
 * of it (those whose blocks the decode instance does not hold already), to
 * be sent on the prefill instance's outbound link; `tokens` −1 cancels (the
 * decode instance dropped the request: the prefill instance lets go of it).
 */
export interface KvPull {
  readonly type: "kv_pull";
  readonly requestId: number;
  readonly tokens: number;
  readonly replyTo: ActorRef<KvArrived>;
}

/** The KV a decode instance pulled has arrived: `transferMs` after the pull, of which `queueMs` waiting for the link. */
export interface KvArrived {
  readonly type: "kv_arrived";
  readonly requestId: number;
  readonly transferMs: number;
  readonly queueMs: number;
}

/** The decode instance chosen first (decode-first flow) will not get this request: its prefill instance dropped it. */
export interface PdAbandoned {
  readonly type: "pd_abandoned";
  readonly requestId: number;
  /** The router, for the status report that lets go of the request (the decode instance may have had no `serve` yet). */
  readonly replyTo: ActorRef<InstanceStatus>;
  /** The router replica that routed the request (its per-replica finished count). @default 0 */
  readonly replica?: number;
}

/**
 * An instance produced a request's first token (sent only to an instance's
 * `firstTokensTo`, when set: the simulated servers of `deno task serve`
 * stream the tokens of a request as they come).
 */
export interface FirstToken {
  readonly type: "first_token";
  readonly requestId: number;
  readonly instance: number;
  /** When the first token exists (the message is delivered then), ms. */
  readonly timeMs: number;
  /** The instance's estimate of the time each further token takes, ms: FIFO's exact decode time per token, batching's last step. */
  readonly tokenMs: number;
}

/** Commands the FIFO serving instance accepts. */
export type InstanceCommand =
  | ServeCommand
  /** Internal timer: the request in service finished its prefill. */
  | { readonly type: "prefill_done" }
  /** Internal timer: the request in service finished decoding. */
  | { readonly type: "decode_done" }
  | ReportTick;

/** Commands the continuous-batching instance accepts. */
export type BatchingCommand =
  | ServeCommand
  /** Internal timer: the engine step in progress ended. */
  | { readonly type: "step_done" }
  /** Internal timer: a KV transfer on the outbound link ended. */
  | { readonly type: "kv_sent"; readonly requestId: number }
  /** Internal timer: a prefix loaded from the host-memory tier arrived. */
  | { readonly type: "host_loaded"; readonly requestId: number }
  | KvPull
  | KvArrived
  | PdAbandoned
  | ReportTick;

/** Commands the slots (llama-server) instance accepts. */
export type SlotCommand =
  | ServeCommand
  /** Internal timer: the engine step in progress (one `update_slots` iteration) ended. */
  | { readonly type: "step_done" }
  | ReportTick;

// ---- Metrics collector -----------------------------------------------------

/** What an instance reports about a request it finished. */
export interface CompletionRecord {
  readonly requestId: number;
  readonly instance: number;
  readonly arrivalMs: number;
  /** When service began (the end of its queue wait). */
  readonly startMs: number;
  readonly firstTokenMs: number;
  readonly endMs: number;
  readonly promptTokens: number;
  /** Prompt tokens found in the instance's cache. */
  readonly cachedTokens: number;
  readonly outputTokens: number;
  /** Times this request was preempted (batching model). */
  readonly preemptions?: number;
  /** The router's accounting of the placement, when it made one. */
  readonly routing?: RoutingNote;
  /** The request's class (`Request.sloClass`), when classes are configured. */
  readonly sloClass?: number;
  /** Disaggregated: the instance that prefilled it (`instance` decoded it). */
  readonly prefillInstance?: number;
  /** Disaggregated: KV transfer time, from the pull to the arrival, including the wait for the link, ms. */
  readonly kvTransferMs?: number;
  /** Disaggregated: of `kvTransferMs`, the wait for the prefill instance's link, ms. */
  readonly kvQueueMs?: number;
  /** Of `cachedTokens`, those loaded from a host-memory KV tier (absent: none). */
  readonly hostCachedTokens?: number;
}

/** An instance's running totals, sent to the metrics collector whenever it goes idle. */
export interface InstanceStats {
  readonly type: "instance_stats";
  readonly instance: number;
  /** Integral of KV blocks in use over time, block·ms. */
  readonly kvBlockMs: number;
  /** KV capacity, blocks. */
  readonly kvBlocks: number;
  /** Preemptions so far. */
  readonly preemptions: number;
  /** Engine steps run so far. */
  readonly steps: number;
  /** Time the engine spent running steps, ms. */
  readonly busyMs: number;
}

/** A point of the autoscaler's record: when it decided, how many instances it wants, and on what signal. */
export interface ScalingDecision {
  readonly timeMs: number;
  /** Instances active or provisioning after the decision. */
  readonly instances: number;
  /** The signal's value that led to it (null when none could be read). */
  readonly signal: number | null;
  /** `up`, `down`, or `hold` (a periodic record with no change). */
  readonly action: "up" | "down" | "hold";
}

/** The metrics collector's answer to an SLO probe: requests finished and those that met every SLO, since the last probe. */
export interface SloWindow {
  readonly type: "slo_window";
  readonly finished: number;
  readonly met: number;
}

/**
 * Why a request was dropped. `queue_full`: the instance's `maxQueue` was
 * reached. `too_long`: its prompt needs more KV blocks than the instance has.
 */
export type DropReason = "queue_full" | "too_long";

/**
 * How a request ended at an upstream without a completion record, once
 * bytes had gone to the client: `cancelled`, the client disconnected;
 * `broken`, the upstream's stream failed mid-way; `rejected`, the upstream
 * answered with an error of its own (a 4xx), passed through as it was.
 */
export type EndOutcome = "cancelled" | "broken" | "rejected";

/** An upstream request ended without a completion record (see {@linkcode EndOutcome}). */
export interface RequestEnded {
  readonly type: "request_ended";
  readonly requestId: number;
  /** The upstream's index. */
  readonly instance: number;
  readonly timeMs: number;
  readonly outcome: EndOutcome;
}

/** Commands the gateway's metrics actor accepts: the collector's, and {@linkcode RequestEnded}. */
export type GatewayMetricsCommand = MetricsCommand | RequestEnded;

/** Commands the metrics collector accepts. */
export type MetricsCommand =
  | { readonly type: "completed"; readonly record: CompletionRecord }
  | InstanceStats
  | {
    readonly type: "dropped";
    readonly requestId: number;
    readonly instance: number;
    readonly timeMs: number;
    readonly reason: DropReason;
    /** The request's class (`Request.sloClass`), when classes are configured: a drop misses its SLO. */
    readonly sloClass?: number;
  }
  /**
   * The router saw an attempt at a request fail. `final`: no retry is left
   * (or no instance could take it, `no_instance`) — the request is failed,
   * a final state beside completed and dropped; else it was retried.
   */
  | {
    readonly type: "attempt_failed";
    readonly requestId: number;
    /** The instance it failed at; -1 for `no_instance`. */
    readonly instance: number;
    readonly timeMs: number;
    readonly reason: FailReason | "no_instance";
    /** The attempt that failed (0: the first). */
    readonly attempt: number;
    readonly final: boolean;
    /** The request's arrival, for the recovery metric. */
    readonly arrivalMs: number;
    readonly sloClass?: number;
  }
  /** The autoscaler decided (a point of its record, for the report and chart). */
  | { readonly type: "scaled"; readonly decision: ScalingDecision }
  /** The autoscaler asks for the SLO attainment since its last probe. */
  | { readonly type: "slo_probe"; readonly replyTo: ActorRef<SloWindow> };

/** Commands the autoscaler accepts: its own timer, and the signals it reads. */
export type AutoscalerCommand = { readonly type: "scale_tick" } | InstanceStatus | SloWindow;

/** Commands the fault injector accepts: its own timer. */
export type FaultInjectorCommand = { readonly type: "inject" };

/** Every command an instance may get when faults or autoscaling are configured (beside its model's own). */
export type LifecycleCommand = Probe | FaultCommand | ScalingCommand;

/** Any message of the protocol. */
export type AnyMessage =
  | SourceCommand
  | RouterCommand
  | InstanceCommand
  | BatchingCommand
  | SlotCommand
  | MetricsCommand
  | AutoscalerCommand
  | FaultInjectorCommand
  | LifecycleCommand;

/** Fails loudly on a message no `case` handled. */
export function assertNever(message: never): never {
  throw new TypeError(`unknown message: ${JSON.stringify(message)}`);
}
