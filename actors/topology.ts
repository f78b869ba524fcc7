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
import { createCacheView } from "./cache_view.ts";
import type { InstancesConfig, ServingActor } from "./instance_model.ts";
import { instanceModel } from "./instance_models.ts";
import { MetricsCollector } from "./metrics_collector.ts";
import { policyReads, type PolicySpec, type RoutingPolicy } from "./policies/mod.ts";
import type { AnyMessage, MetricsCommand, RouteCommand, ServeCommand, SourceCommand } from "./protocol.ts";
import { type FleetCache, type InstanceTableOptions, Router } from "./router.ts";
import type { ActorRef, Kernel } from "./runtime/kernel.ts";
import { SimulationError } from "./runtime/simulation_error.ts";
import type { StatusReportingOptions } from "./status_reporter.ts";
import type { TraceOptions } from "./trace_reader.ts";
import { TraceSource } from "./trace_source.ts";
import { type WorkloadOptions, WorkloadSource } from "./workload_source.ts";

/** What the router sees of the instances and how fresh it is. */
export interface RouterConfig {
  /** `exact`: built from the instances' cache events; `approximate`: a router-side index updated when routing. @default "exact" */
  readonly cacheView: "exact" | "approximate";
  /** Entries per instance of the approximate index; null = unbounded; absent = the instance's own capacity. */
  readonly approxCapacity?: number | null;
  /** 0: instances report on every change; > 0: at most once per this many ms. @default 0 */
  readonly statusIntervalMs: number;
  /** Network delay of every status report, ms. @default 0 */
  readonly networkDelayMs: number;
}

/** A complete, validated description of one run. */
export interface SimulationConfig {
  /** Seed of every random stream in the run. */
  readonly seed: number;
  /** The routing policy. */
  readonly policy: PolicySpec;
  /** What the router sees, and how late. */
  readonly router: RouterConfig;
  /** The serving instances. */
  readonly instances: InstancesConfig;
  /** The arriving requests: synthetic, or replayed from `workload.trace` when set. */
  readonly workload: WorkloadOptions & { readonly trace?: TraceOptions };
  /** Stop simulated time here; requests not finished count as in flight. @default Infinity */
  readonly untilMs?: number;
}

/** The actors' names; each seeds the actor's random stream, so they never change. */
export const ACTOR_NAMES = {
  metrics: "metrics",
  router: "router",
  source: "source",
  instance: (index: number): string => `instance/${index}`,
} as const;

/**
 * Where a runtime puts each actor of a run: the virtual run builds them in
 * its kernel's thread; the real-time run hosts them in Workers. Each method
 * spawns one actor under `name` and returns its address.
 */
export interface Placement {
  metrics(name: string): ActorRef<MetricsCommand>;
  instance(name: string, index: number, metrics: ActorRef<MetricsCommand>): ActorRef<ServeCommand>;
  router(name: string, instances: readonly ActorRef<ServeCommand>[]): ActorRef<RouteCommand>;
  source(name: string, router: ActorRef<RouteCommand>): ActorRef<SourceCommand>;
}

/** The addresses of one run's actors. */
export interface RunActors {
  readonly metrics: ActorRef<MetricsCommand>;
  readonly instances: readonly ActorRef<ServeCommand>[];
  readonly router: ActorRef<RouteCommand>;
  readonly source: ActorRef<SourceCommand>;
}

/** Spawns a run's actors through `placement`, in the one order both runtimes use. */
export function wire(config: SimulationConfig, placement: Placement): RunActors {
  const metrics = placement.metrics(ACTOR_NAMES.metrics);
  const instances = Array.from(
    { length: config.instances.count },
    (_, i) => placement.instance(ACTOR_NAMES.instance(i), i, metrics),
  );
  const router = placement.router(ACTOR_NAMES.router, instances);
  const source = placement.source(ACTOR_NAMES.source, router);
  return { metrics, instances, router, source };
}

/** The metrics collector of a run. */
export function buildMetrics(instanceCount: number): MetricsCollector {
  return new MetricsCollector(instanceCount);
}

/** Serving instance `index`, of the configured model, reporting what the policy reads (`pluginPolicy`: everything). */
export function buildInstance(
  index: number,
  config: SimulationConfig,
  metrics: ActorRef<MetricsCommand>,
  pluginPolicy: boolean,
): ServingActor {
  return instanceModel(config.instances.model).create(
    index,
    config.instances,
    metrics,
    statusReporting(config, pluginPolicy),
  );
}

/** The router, with `policy` and the view the config describes (plus the god's-eye `fleetCache`, in a virtual run). */
export function buildRouter(
  instances: readonly ActorRef<ServeCommand>[],
  config: SimulationConfig,
  policy: RoutingPolicy,
  fleetCache?: FleetCache,
): Router {
  return new Router(instances, policy, { ...routerOptions(config), fleetCache });
}

/** The workload source: synthetic, or a trace replay when the workload names a trace. */
export function buildSource(
  workload: SimulationConfig["workload"],
  router: ActorRef<RouteCommand>,
): WorkloadSource | TraceSource {
  return workload.trace ? new TraceSource(workload.trace, router) : new WorkloadSource(workload, router);
}

/** The router's options (cache view, block size) for a config. */
export function routerOptions(config: SimulationConfig): InstanceTableOptions {
  const { instances, router } = config;
  const model = instanceModel(instances.model);
  const capacity = router.approxCapacity === null
    ? Infinity
    : router.approxCapacity ?? model.cacheCapacity(instances);
  return {
    blockTokens: instances.engine.blockTokens,
    cacheUnit: model.cacheUnit,
    cacheView: createCacheView(instances.count, { kind: router.cacheView, unit: model.cacheUnit, capacity }),
  };
}

/**
 * How instances report to the router: as often and as late as the config
 * says, with block events only when an exact view of block-caching instances
 * serves a policy that reads blocks, and load signals only for one that
 * reads them (a plugin, `pluginPolicy`, may read anything).
 */
export function statusReporting(config: SimulationConfig, pluginPolicy = false): StatusReportingOptions {
  const { router, instances } = config;
  const reads = pluginPolicy ? { blocks: true, load: true } : policyReads(config.policy.name);
  return {
    intervalMs: router.statusIntervalMs,
    delayMs: router.networkDelayMs,
    blockEvents: router.cacheView === "exact" && instanceModel(instances.model).cacheUnit === "blocks" &&
      reads.blocks,
    loadSignals: reads.load,
  };
}

/** Where a run's requests are when it stops. */
export interface RequestCount {
  /** Requests that arrived at the router. */
  readonly arrivals: number;
  readonly completed: number;
  readonly dropped: number;
  /** Arrived and neither completed nor dropped. */
  readonly inFlight: number;
}

/**
 * Nothing is lost: every arrival ended completed or dropped, or is in flight.
 * @throws {SimulationError} (`invariant_broken`) when the counts disagree.
 */
export function checkConservation(count: RequestCount, timeMs: number): void {
  const { arrivals, completed, dropped, inFlight } = count;
  if (completed + dropped + inFlight !== arrivals) {
    throw new SimulationError(
      "invariant_broken",
      `requests not conserved: completed ${completed} + dropped ${dropped} + in flight ${inFlight} != arrivals ${arrivals}`,
      { timeMs },
    );
  }
}

/**
 * Requests in messages the kernel has not delivered: `inFlight` (a `serve`,
 * or a `route` due by now) and `notYetArrived` (a `route` stamped after the
 * run stopped), counted independently of the metrics.
 */
export function pendingRequests(kernel: Kernel): { inFlight: number; notYetArrived: number } {
  let inFlight = 0, notYetArrived = 0;
  kernel.forEachPending((message, _to, timeMs) => {
    const m = message as AnyMessage;
    if (m.type === "route" && timeMs > kernel.nowMs) notYetArrived++;
    else if (m.type === "route" || m.type === "serve") inFlight++;
  });
  return { inFlight, notYetArrived };
}
