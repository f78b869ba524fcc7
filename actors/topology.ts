/**
 * @module
 * One run's actors and who talks to whom — the same in the virtual and the
 * real-time run, which differ only in where each actor is placed:
 *
 * ```
 *  source ──route──▶ router ──serve──▶ instance/i ──completed, dropped──▶ metrics
 *                      ▲                   │
 *                      └─────status────────┘
 * ```
 *
 * This module holds a run's configuration, the names and spawn order of its
 * actors (names seed their random streams), how each is built, what the
 * instances report to the router, and the one check that no request was lost.
 */
import { createCacheView } from "./router/cache_view.ts";
import type { AutoscaleConfig, Fault } from "./dynamics/faults.ts";
import {
  type EngineConfig,
  instancePools,
  type InstancesConfig,
  isDisaggregated,
  poolOfInstance,
  type ServingActor,
} from "./instances/instance_model.ts";
import { instanceModel } from "./instances/instance_models.ts";
import { MetricsCollector, type MetricsOptions, type SloTargets } from "./metrics/metrics_collector.ts";
import { policyReads, type PolicySpec, type RoutingPolicy } from "./policies/mod.ts";
import type {
  AnyMessage,
  FaultInjectorCommand,
  InstanceStatus,
  LifecycleCommand,
  MetricsCommand,
  RouteCommand,
  ServeCommand,
  SourceCommand,
} from "./protocol.ts";
import { Autoscaler } from "./dynamics/autoscaler.ts";
import { FaultInjector } from "./dynamics/fault_injector.ts";
import { FaultyInstance } from "./dynamics/faulty_instance.ts";
import { requestClasses } from "./workload/request_classes.ts";
import {
  type Disaggregation,
  type FleetCache,
  type InstanceTableOptions,
  Router,
  type RoutingPool,
} from "./router/router.ts";
import type { ActorRef, Kernel } from "./runtime/kernel.ts";
import { SimulationError } from "./runtime/simulation_error.ts";
import type { StatusBoard, StatusReportingOptions } from "./instances/status_reporter.ts";
import type { TraceOptions } from "./traces/trace_reader.ts";
import { TraceSource } from "./traces/trace_source.ts";
import { type WorkloadOptions, WorkloadSource } from "./workload/workload_source.ts";

/** What the router sees of the instances and how fresh it is. */
export interface RouterConfig {
  /**
   * `exact`: built from the instances' cache events; `approximate`: a
   * router-side index updated when routing. A scenario's default is what
   * its policy's real system keeps (actors/policies/real_view.ts).
   */
  readonly cacheView: "exact" | "approximate";
  /** Entries per instance of the approximate index; null = unbounded; absent = the instance's own capacity. */
  readonly approxCapacity?: number | null;
  /** The approximate index matches whole chunks of this many blocks (production-stack's 128 characters). @default 1 */
  readonly indexChunkBlocks?: number;
  /** Leading blocks of a prompt the approximate index matches and inserts (llm-d's 256); null = all. @default null */
  readonly indexMaxBlocks?: number | null;
  /** 0: instances report on every change; > 0: at most once per this many ms (a scrape). */
  readonly statusIntervalMs: number;
  /** Network delay of every status report, ms. @default 0 */
  readonly networkDelayMs: number;
  /** Disaggregated fleets: which instance is chosen first (see {@linkcode Disaggregation}). @default "prefill-first" */
  readonly pdFlow?: "prefill-first" | "decode-first";
  /** Decode-first: prefill on the decode instance when fewer prompt tokens than this are uncached there. @default 0 */
  readonly pdLocalPrefillTokens?: number;
  /**
   * Router replicas, each with its own views (actors/dynamics/README.md,
   * "Router replicas"). @default 1
   */
  readonly replicas?: number;
  /** How arrivals are spread over the replicas: uniformly at random, or by session key. @default "random" */
  readonly replicaSpread?: "random" | "session";
  /** Replicas exchange what they routed every this many ms; 0: one shared view. @default never (independent views) */
  readonly replicaSyncMs?: number;
  /** Per replica, an extra delay on the instances' reports to it, ms. @default 0 for each */
  readonly replicaDelaysMs?: readonly number[];
  /**
   * The instances are real servers behind `serve`'s gateway, whose attempts
   * fail whenever a connection or an answer does: every failed attempt goes
   * to the metrics, with or without a status TTL. Set by the gateway only.
   * @default false
   */
  readonly upstreamFailures?: boolean;
  /**
   * The router probes the instances' health, and takes one whose last
   * report is older than this as down until it reports again, ms.
   * @default Infinity (no probes; a crash is learnt only from failed requests)
   */
  readonly statusTtlMs?: number;
  /** Retries of a request whose attempt failed at an instance (faults). @default 1 */
  readonly retryBudget?: number;
}

/** A complete, validated description of one run. */
export interface SimulationConfig {
  /** Seed of every random stream in the run. */
  readonly seed: number;
  /** The routing policy (of every pool without its own). */
  readonly policy: PolicySpec;
  /** Disaggregated fleets: the prefill pool's policy. @default `policy` */
  readonly prefillPolicy?: PolicySpec;
  /** Disaggregated fleets: the decode pool's policy. @default `policy` */
  readonly decodePolicy?: PolicySpec;
  /** What the router sees, and how late. */
  readonly router: RouterConfig;
  /** The serving instances. */
  readonly instances: InstancesConfig;
  /** The arriving requests: synthetic, or replayed from `workload.trace` when set. */
  readonly workload: WorkloadOptions & { readonly trace?: TraceOptions };
  /** Stop simulated time here; requests not finished count as in flight. @default Infinity */
  readonly untilMs?: number;
  /** SLOs of every request its class does not override; a field absent everywhere is not checked. @default none */
  readonly slo?: SloTargets;
  /** Instance faults (actors/dynamics/README.md, "Faults"). @default none */
  readonly faults?: readonly Fault[];
  /** The autoscaler; `instances.count` is then its `max`. @default none (a fixed fleet) */
  readonly autoscale?: AutoscaleConfig;
}

/** The actors' names; each seeds the actor's random stream, so they never change. */
export const ACTOR_NAMES = {
  metrics: "metrics",
  router: "router",
  source: "source",
  instance: (index: number): string => `instance/${index}`,
  faults: "faults",
  autoscaler: "autoscaler",
} as const;

/**
 * Where a runtime puts each actor of a run: the virtual run builds them in
 * its kernel's thread; the real-time run hosts them in Workers. Each method
 * spawns one actor under `name` and returns its address.
 */
export interface Placement {
  metrics(name: string): ActorRef<MetricsCommand>;
  instance(name: string, index: number, metrics: ActorRef<MetricsCommand>): ActorRef<ServeCommand>;
  router(
    name: string,
    instances: readonly ActorRef<ServeCommand>[],
    metrics: ActorRef<MetricsCommand>,
  ): ActorRef<RouteCommand>;
  source(name: string, router: ActorRef<RouteCommand>): ActorRef<SourceCommand>;
  /** The fault injector (spawned only when the config has faults). */
  faults(
    name: string,
    instances: readonly ActorRef<LifecycleCommand>[],
    router: ActorRef<InstanceStatus>,
  ): ActorRef<FaultInjectorCommand>;
  /** The autoscaler (spawned only when the config has an `autoscale` block). */
  autoscaler(
    name: string,
    instances: readonly ActorRef<LifecycleCommand>[],
    router: ActorRef<InstanceStatus>,
    metrics: ActorRef<MetricsCommand>,
  ): ActorRef<AutoscalerStart>;
}

/** What starts the autoscaler's ticks (sent once at time 0). */
export type AutoscalerStart = { readonly type: "start" };

/** The addresses of one run's actors. */
export interface RunActors {
  readonly metrics: ActorRef<MetricsCommand>;
  readonly instances: readonly ActorRef<ServeCommand>[];
  readonly router: ActorRef<RouteCommand>;
  readonly source: ActorRef<SourceCommand>;
  /** The fault injector, when the config has faults. */
  readonly faults?: ActorRef<FaultInjectorCommand>;
  /** The autoscaler, when the config has one. */
  readonly autoscaler?: ActorRef<AutoscalerStart>;
}

/**
 * Spawns a run's actors through `placement`, in the one order both runtimes
 * use; the fault injector and the autoscaler come last, so a run without
 * them has the same addresses as before they existed.
 */
export function wire(config: SimulationConfig, placement: Placement): RunActors {
  const metrics = placement.metrics(ACTOR_NAMES.metrics);
  const instances = Array.from(
    { length: config.instances.count },
    (_, i) => placement.instance(ACTOR_NAMES.instance(i), i, metrics),
  );
  const router = placement.router(ACTOR_NAMES.router, instances, metrics);
  const source = placement.source(ACTOR_NAMES.source, router);
  // Instances take lifecycle commands whenever faults or autoscaling are configured (they are wrapped then).
  const lifecycle = instances as readonly ActorRef<LifecycleCommand>[];
  const status = router as ActorRef<InstanceStatus>;
  const faults = (config.faults?.length ?? 0) > 0
    ? placement.faults(ACTOR_NAMES.faults, lifecycle, status)
    : undefined;
  const autoscaler = config.autoscale === undefined
    ? undefined
    : placement.autoscaler(ACTOR_NAMES.autoscaler, lifecycle, status, metrics);
  return { metrics, instances, router, source, faults, autoscaler };
}

/**
 * Sends the messages that start a run, in one order for both runtimes: the
 * source's `start`, then the fault injector's and the autoscaler's.
 */
export function startRun(
  run: RunActors,
  send: <M extends { type: string }>(to: ActorRef<M>, message: M) => void,
): void {
  send(run.source, { type: "start" });
  if (run.faults !== undefined) send(run.faults, { type: "inject" });
  if (run.autoscaler !== undefined) send(run.autoscaler, { type: "start" });
}

/** Whether instances can fail or come and go (faults or autoscaling): they are then wrapped, and failures reported. */
export function hasLifecycle(config: SimulationConfig): boolean {
  return (config.faults?.length ?? 0) > 0 || config.autoscale !== undefined;
}

/** Whether the fleet misbehaves in any way reports show apart: faults, autoscaling, or router replicas. */
export function hasDynamics(config: SimulationConfig): boolean {
  return hasLifecycle(config) || (config.router.replicas ?? 1) > 1;
}

/**
 * The metrics collector of a run.
 * @param options The SLOs and classes it judges requests by: {@linkcode metricsOptions} of the run's config.
 */
export function buildMetrics(instanceCount: number, options: MetricsOptions = {}): MetricsCollector {
  return new MetricsCollector(instanceCount, options);
}

/** The SLOs and request classes of `config`, for {@linkcode buildMetrics}. */
export function metricsOptions(config: SimulationConfig): MetricsOptions {
  return {
    slo: config.slo,
    classes: config.workload.classes,
    pools: isDisaggregated(config.instances)
      ? instancePools(config.instances).map((p) => p.role === "prefill" ? 0 : 1)
      : undefined,
    ...((config.faults?.length ?? 0) > 0 && { faults: config.faults }),
    ...(config.autoscale !== undefined && { autoscale: config.autoscale }),
  };
}

/**
 * Serving instance `index`, of the configured model, reporting what the
 * policy reads (`pluginPolicy`: everything) — on `board`, when given (a
 * virtual run of {@linkcode pullsReports}), else in messages.
 */
export function buildInstance(
  index: number,
  config: SimulationConfig,
  metrics: ActorRef<MetricsCommand>,
  pluginPolicy: boolean,
  board?: StatusBoard,
): ServingActor {
  const pool = poolOfInstance(config.instances, index);
  const instances = config.instances.pools === undefined
    ? config.instances
    : { ...config.instances, engine: pool.engine };
  const policy = pool.role === "prefill"
    ? config.prefillPolicy
    : pool.role === "decode"
    ? config.decodePolicy
    : undefined;
  // Decode-first with local prefill: the router itself reads the decode instances' blocks.
  const routerReadsBlocks = pool.role === "decode" && config.router.pdFlow === "decode-first" &&
    (config.router.pdLocalPrefillTokens ?? 0) > 0;
  const reported = statusReporting(config, pluginPolicy, policy, routerReadsBlocks);
  const reporting = board === undefined ? reported : { ...reported, board };
  const create = () => instanceModel(config.instances.model).create(index, instances, metrics, reporting);
  if (!hasLifecycle(config)) return create();
  return new FaultyInstance(index, create, {
    active: index < (config.autoscale?.initial ?? Infinity),
    delayMs: reporting.delayMs,
  });
}

/** The policies of a disaggregated fleet's pools (absent: the run's policy). */
export interface PoolPolicies {
  readonly prefill?: RoutingPolicy;
  readonly decode?: RoutingPolicy;
}

/** The router, with `policy` and the view the config describes (plus the god's-eye `fleetCache`, in a virtual run). */
export function buildRouter(
  instances: readonly ActorRef<ServeCommand>[],
  config: SimulationConfig,
  policy: RoutingPolicy,
  fleetCache?: FleetCache,
  poolPolicies: PoolPolicies = {},
  metrics?: ActorRef<MetricsCommand>,
): Router {
  const router = config.router;
  const replicas = router.replicas ?? 1;
  return new Router(instances, policy, {
    ...routerOptions(config),
    requestAccounting: accountsRequests(policy),
    fleetCache,
    disaggregation: disaggregation(config, policy, poolPolicies),
    ...(replicas > 1 && {
      replicas: {
        count: replicas,
        spread: router.replicaSpread ?? "random",
        syncMs: router.replicaSyncMs,
        delaysMs: router.replicaDelaysMs,
      },
    }),
    seed: config.seed,
    statusTtlMs: router.statusTtlMs ?? Infinity,
    retryBudget: router.retryBudget ?? 1,
    // Failed attempts go to the metrics wherever a request can fail: faults, scaling, a TTL's verdict, upstreams.
    ...((hasLifecycle(config) || Number.isFinite(router.statusTtlMs ?? Infinity) ||
      router.upstreamFailures === true) && metrics !== undefined && { metrics }),
    ...(config.autoscale !== undefined && { initiallyAvailable: config.autoscale.initial }),
  });
}

/** Whether the router keeps per-request accounting for `policy` (it reads `requests`, or is a plugin). */
function accountsRequests(policy: RoutingPolicy): boolean {
  return policyReads(policy.name).requests === true;
}

/** The fault injector of a config with faults. */
export function buildFaultInjector(
  config: SimulationConfig,
  instances: readonly ActorRef<LifecycleCommand>[],
  router: ActorRef<InstanceStatus>,
): FaultInjector {
  return new FaultInjector(config.faults ?? [], instances, router);
}

/** The autoscaler of a config with an `autoscale` block. */
export function buildAutoscaler(
  config: SimulationConfig,
  instances: readonly ActorRef<LifecycleCommand>[],
  router: ActorRef<InstanceStatus>,
  metrics: ActorRef<MetricsCommand>,
): Autoscaler {
  return new Autoscaler(config.autoscale!, instances, router, metrics);
}

/** A disaggregated fleet's pools as the router routes them; undefined for an aggregated fleet. */
function disaggregation(
  config: SimulationConfig,
  policy: RoutingPolicy,
  policies: PoolPolicies,
): Disaggregation | undefined {
  if (!isDisaggregated(config.instances)) return undefined;
  const pools = instancePools(config.instances);
  const pool = (role: "prefill" | "decode", own: RoutingPolicy | undefined): RoutingPool => {
    const members = pools.flatMap((p, i) => p.role === role ? [i] : []);
    const engines = members.map((i) => pools[i].engine);
    const routed = own ?? policy;
    return {
      members,
      policy: routed,
      table: { ...routerOptions(config, engines), requestAccounting: accountsRequests(routed) },
    };
  };
  return {
    prefill: pool("prefill", policies.prefill),
    decode: pool("decode", policies.decode),
    flow: config.router.pdFlow ?? "prefill-first",
    localPrefillTokens: config.router.pdLocalPrefillTokens ?? 0,
  };
}

/**
 * An engine's serving capacity, for load-aware policies: the prompt tokens
 * per ms of a full-budget step. It weighs step overhead and prefill cost as
 * the engine does; only ratios between instances matter.
 */
export function engineCapacity(engine: EngineConfig): number {
  return engine.maxBatchTokens / (engine.stepMs + engine.prefillMsPerToken * engine.maxBatchTokens);
}

/** Capacities relative to the fastest (1): undefined when all are equal (every capacity 1). */
function relativeCapacities(engines: readonly EngineConfig[]): number[] | undefined {
  const raw = engines.map(engineCapacity);
  const max = Math.max(...raw);
  return raw.every((c) => c === max) ? undefined : raw.map((c) => c / max);
}

/**
 * The workload source: synthetic, or a trace replay when the workload names a
 * trace. With `workload.classes`, each request draws its class from a stream
 * of its own, seeded by `seed` (actors/workload/request_classes.ts).
 */
export function buildSource(
  workload: SimulationConfig["workload"],
  router: ActorRef<RouteCommand>,
  seed: number,
): WorkloadSource | TraceSource {
  const classes = requestClasses(workload.classes, seed);
  return workload.trace
    ? new TraceSource(workload.trace, router, undefined, classes)
    : new WorkloadSource(workload, router, undefined, classes);
}

/**
 * The router's options (cache view, block size, capacities) for a config's
 * fleet, or for the pool of `engines` (one per instance) of it.
 */
export function routerOptions(
  config: SimulationConfig,
  engines?: readonly EngineConfig[],
): InstanceTableOptions {
  const { instances, router } = config;
  const model = instanceModel(instances.model);
  const fleet = engines ??
    (instances.pools === undefined ? undefined : instancePools(instances).map((p) => p.engine));
  const count = fleet?.length ?? instances.count;
  // The approximate view's default capacity: each instance's own cache's.
  const cacheCapacity = router.approxCapacity === null ? Infinity : router.approxCapacity ??
    (fleet === undefined
      ? model.cacheCapacity(instances)
      : fleet.map((engine) => model.cacheCapacity({ ...instances, engine })));
  return {
    blockTokens: instances.engine.blockTokens,
    cacheUnit: model.cacheUnit,
    cacheView: createCacheView(count, {
      kind: router.cacheView,
      unit: model.cacheUnit,
      capacity: cacheCapacity,
      chunkBlocks: router.indexChunkBlocks ?? 1,
      maxBlocks: router.indexMaxBlocks ?? Infinity,
      blockTokens: instances.engine.blockTokens,
      hostBlocks: fleet?.map((e) => e.hostKvBlocks ?? 0) ??
        new Array(count).fill(instances.engine.hostKvBlocks ?? 0),
    }),
    capacity: fleet === undefined ? undefined : relativeCapacities(fleet),
  };
}

/**
 * How instances report to the router: as often and as late as the config
 * says, with block events only when an exact view of block-caching instances
 * serves a policy that reads blocks (or the router reads them itself,
 * `routerReadsBlocks`: decode-first's local-prefill test), and load signals
 * only for one that reads them (a plugin, `pluginPolicy`, may read anything).
 */
export function statusReporting(
  config: SimulationConfig,
  pluginPolicy = false,
  policy: PolicySpec = config.policy,
  routerReadsBlocks = false,
): StatusReportingOptions {
  const { router, instances } = config;
  const reads = pluginPolicy ? { blocks: true, load: true, requests: true } : policyReads(policy.name);
  return {
    intervalMs: router.statusIntervalMs,
    delayMs: router.networkDelayMs,
    blockEvents: router.cacheView === "exact" && instanceModel(instances.model).cacheUnit === "blocks" &&
      (reads.blocks || routerReadsBlocks),
    loadSignals: reads.load,
    requestEvents: reads.requests === true,
    // A plugin is told every request event, on the reports it gets anyway: it costs no extra message.
    firstTokenReports: reads.requests === true && !pluginPolicy,
  };
}

/**
 * Whether a virtual run's instances post their reports on a board the router
 * reads before each decision instead of sending them (design.md, "Reports
 * pulled"): batching instances whose reports are neither periodic nor
 * delayed, routed by one table with a built-in policy (`pluginPolicy`
 * false): one replica or replicas sharing one view, no pools, faults,
 * autoscaling or health probes (their reports travel, or are read, in
 * other ways).
 */
export function pullsReports(config: SimulationConfig, pluginPolicy: boolean): boolean {
  const router = config.router;
  return !pluginPolicy && config.instances.model === "batching" && router.statusIntervalMs === 0 &&
    router.networkDelayMs === 0 && (router.replicaDelaysMs?.[0] ?? 0) === 0 &&
    !isDisaggregated(config.instances) && !hasLifecycle(config) &&
    ((router.replicas ?? 1) === 1 || router.replicaSyncMs === 0) &&
    (router.statusTtlMs ?? Infinity) === Infinity && router.upstreamFailures !== true;
}

/** Where a run's requests are when it stops. */
export interface RequestCount {
  /** Requests that arrived at the router. */
  readonly arrivals: number;
  readonly completed: number;
  readonly dropped: number;
  /** Requests whose every attempt failed (faults). */
  readonly failed: number;
  /** Arrived and neither completed, dropped nor failed. */
  readonly inFlight: number;
}

/**
 * Nothing is lost: every arrival ended completed, dropped or failed, or is in flight.
 * @throws {SimulationError} (`invariant_broken`) when the counts disagree.
 */
export function checkConservation(count: RequestCount, timeMs: number): void {
  const { arrivals, completed, dropped, failed, inFlight } = count;
  if (completed + dropped + failed + inFlight !== arrivals) {
    throw new SimulationError(
      "invariant_broken",
      `requests not conserved: completed ${completed} + dropped ${dropped} + failed ${failed} + in flight ${inFlight} != arrivals ${arrivals}`,
      { timeMs },
    );
  }
}

/**
 * Requests in messages the kernel has not delivered: `inFlight` (a `serve`,
 * a `prefilled`, a `request_failed` on its way back to the router, or a
 * `route` due by now) and `notYetArrived` (a `route` stamped after the run
 * stopped), counted independently of the metrics. `handOffs` false leaves
 * out a request's messages after its first attempt's first leg (`prefilled`,
 * a decode leg's `serve`, a failure, a retry's `serve`), for a count that
 * has the request already (the real-time run's, from that leg's delivery).
 */
export function pendingRequests(
  kernel: Kernel,
  handOffs = true,
): { inFlight: number; notYetArrived: number } {
  let inFlight = 0, notYetArrived = 0;
  kernel.forEachPending((message, _to, timeMs) => {
    const m = message as AnyMessage;
    if (m.type === "route" && timeMs > kernel.nowMs) notYetArrived++;
    else if (m.type === "route") inFlight++;
    else if (m.type === "serve") {
      // The real-time count has a request from its first attempt's first leg on.
      if (handOffs || (m.leg?.phase !== "decode" && (m.attempt ?? 0) === 0)) inFlight++;
    } else if ((m.type === "prefilled" || m.type === "request_failed") && handOffs) inFlight++;
  });
  return { inFlight, notYetArrived };
}
