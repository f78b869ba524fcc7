/**
 * @module
 * Wires one run's actors (source → router → instances → metrics) on a kernel
 * under the virtual clock, runs it, and checks that no request was lost.
 */
import { droppedFraction, MetricsCollector, type RequestMetrics } from "./metrics_collector.ts";
import { createPolicy, policyReads, type PolicySpec } from "./policies/mod.ts";
import type { RoutingPolicy } from "./policies/policy.ts";
import type { AnyMessage, MetricsCommand, Request, RouteCommand, ServeCommand } from "./protocol.ts";
import { type BlockKeys, blockKeys } from "./prefix_keys.ts";
import type { TraceOptions } from "./trace_reader.ts";
import { TraceSource } from "./trace_source.ts";
import { type FleetCache, type InstanceTableOptions, Router } from "./router.ts";
import { Kernel } from "./runtime/kernel.ts";
import { SimulationError } from "./runtime/simulation_error.ts";
import { EVENT_DRIVEN, type FifoInstanceOptions, ServingInstance } from "./serving_instance.ts";
import type { StatusReportingOptions } from "./status_reporter.ts";
import { createCacheView } from "./cache_view.ts";
import { BatchingInstance, type BatchingInstanceOptions } from "./batching_instance.ts";
import type { EnginePresetName } from "./engine_presets.ts";
import type { Actor, ActorRef, DeliveryTap } from "./runtime/kernel.ts";
import { type WorkloadOptions, WorkloadSource } from "./workload_source.ts";

/** The continuous-batching engine, resolved from a preset plus overrides. */
export interface EngineConfig extends Omit<BatchingInstanceOptions, "maxQueue"> {
  /** The preset the values started from. */
  readonly preset: EnginePresetName;
}

/** Instance fleet: how many, which model, and each model's parameters. */
export interface InstancesConfig extends FifoInstanceOptions {
  /** Number of serving instances. */
  readonly count: number;
  /** `fifo`: the original study's one-at-a-time model; `batching`: continuous batching. @default "fifo" */
  readonly model: "fifo" | "batching";
  /** The batching engine (used when `model` is `batching`). */
  readonly engine: EngineConfig;
}

/** The synthetic source, or a trace source when the workload names a trace. */
export function createWorkloadSource(
  workload: SimulationConfig["workload"],
  router: ActorRef<RouteCommand>,
): WorkloadSource | TraceSource {
  return workload.trace ? new TraceSource(workload.trace, router) : new WorkloadSource(workload, router);
}

/** Builds one serving instance of the configured model. */
export function createServingInstance(
  index: number,
  config: InstancesConfig,
  metrics: ActorRef<MetricsCommand>,
  reporting: StatusReportingOptions = EVENT_DRIVEN,
): ServingInstance | BatchingInstance {
  return config.model === "batching"
    ? new BatchingInstance(index, { ...config.engine, maxQueue: config.maxQueue }, metrics, reporting)
    : new ServingInstance(index, config, metrics, reporting);
}

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

/** The router's options (cache view, block size) for a config. */
export function routerOptions(config: SimulationConfig): InstanceTableOptions {
  const { instances, router } = config;
  const batching = instances.model === "batching";
  const capacity = router.approxCapacity === null
    ? Infinity
    : router.approxCapacity ?? (batching ? instances.engine.kvBlocks : instances.cacheCapacity);
  return {
    blockTokens: instances.engine.blockTokens,
    cacheUnit: batching ? "blocks" : "groups",
    cacheView: createCacheView(instances.count, {
      kind: router.cacheView,
      unit: batching ? "blocks" : "groups",
      capacity,
    }),
  };
}

/** How instances report to the router for a config (`pluginPolicy`: the policy is a plugin). */
export function statusReporting(config: SimulationConfig, pluginPolicy = false): StatusReportingOptions {
  const { router, instances } = config;
  return {
    intervalMs: router.statusIntervalMs,
    delayMs: router.networkDelayMs,
    blockEvents: router.cacheView === "exact" && instances.model === "batching" &&
      (pluginPolicy || policyReads(config.policy.name).blocks),
    loadSignals: pluginPolicy || policyReads(config.policy.name).load,
  };
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

/** What one run measured. */
export interface RunResult extends RequestMetrics {
  /** Policy name as reported. */
  readonly policy: string;
  /** Requests that arrived at the router. */
  readonly requests: number;
  /** Requests arrived but neither completed nor dropped when the run stopped. */
  readonly inFlight: number;
  /** `dropped / requests`; null when no request arrived. */
  readonly droppedFraction: number | null;
  /** Malformed trace lines skipped (`trace.skipInvalid`); 0 without a trace. */
  readonly skippedInvalid: number;
  /** Simulated time at the last delivery, ms. */
  readonly simulatedMs: number;
  /** Messages the kernel delivered. */
  readonly messages: number;
}

/** Options for {@linkcode simulate}. */
export interface SimulateOptions {
  /** Use this policy instead of the one `config.policy` names. */
  readonly policy?: RoutingPolicy;
  /** Called after the run with its actors, for tests and diagnostics that compare their states. */
  readonly inspect?: (actors: {
    readonly router: Router;
    readonly instances: readonly (ServingInstance | BatchingInstance)[];
  }) => void;
  /** Observes every delivery, for tests that check messages one by one. @default none */
  readonly onDeliver?: DeliveryTap;
  /**
   * Called every 65,536 deliveries with how far the run is, for a progress
   * display (it may read the wall clock; the simulation does not). Results
   * are the same with or without it. @default none
   */
  readonly onProgress?: (progress: RunProgress) => void;
}

/** How far a run is, for {@linkcode SimulateOptions.onProgress}. */
export interface RunProgress {
  /** Requests that have arrived at the router. */
  readonly arrived: number;
  /** Requests completed or dropped. */
  readonly finished: number;
  /** Simulated time, ms. */
  readonly simulatedMs: number;
}

/**
 * Runs one scenario to the end (every request completed or dropped) or to
 * `config.untilMs`, and returns its metrics.
 *
 * @throws {SimulationError} when an actor fails or requests are not conserved.
 */
export function simulate(config: SimulationConfig, options: SimulateOptions = {}): RunResult {
  const kernel = new Kernel({ seed: config.seed, onDeliver: options.onDeliver });
  const count = config.instances.count;
  const metricsCollector = new MetricsCollector(count);
  const metrics = kernel.spawn("metrics", metricsCollector);
  const reporting = statusReporting(config, options.policy !== undefined);
  const instances = Array.from(
    { length: count },
    (_, i) => createServingInstance(i, config.instances, metrics, reporting),
  );
  const instanceRefs = instances.map((instance, i) =>
    kernel.spawn<ServeCommand>(`instance/${i}`, instance as unknown as Actor<ServeCommand>)
  );
  const policy = options.policy ?? createPolicy(config.policy);
  const routerActor = new Router(instanceRefs, policy, {
    ...routerOptions(config),
    // The god's-eye view, for routing accounting only (the policy never sees it).
    fleetCache: fleetCache(config, instances, () => kernel.nowMs),
  });
  const router = kernel.spawn("router", routerActor);
  const source = createWorkloadSource(config.workload, router);
  kernel.send(kernel.spawn("source", source), { type: "start" });
  const onProgress = options.onProgress;
  if (onProgress === undefined) kernel.run({ untilMs: config.untilMs });
  else {
    const untilMs = config.untilMs ?? Infinity;
    while (kernel.pendingCount > 0 && kernel.nextTimeMs() <= untilMs) {
      kernel.run({ untilMs, maxDeliveries: 1 << 16 });
      onProgress({
        arrived: source.emitted,
        finished: metricsCollector.completed + metricsCollector.dropped,
        simulatedMs: kernel.nowMs,
      });
    }
  }

  // Stopped early: decode stretches apply their steps up to the stop, and the
  // clock ends at the last step a step-by-step run would have delivered.
  let endMs = kernel.nowMs;
  if (config.untilMs !== undefined) {
    for (const instance of instances) {
      if (instance instanceof BatchingInstance) endMs = Math.max(endMs, instance.stopAt(config.untilMs));
    }
  }
  options.inspect?.({ router: routerActor, instances });
  const summary = metricsCollector.summary();
  const held = countRequestsHeld(kernel, instances);
  const requests = source.emitted - held.notYetArrived;
  const result: RunResult = {
    policy: policy.name,
    requests,
    inFlight: held.inFlight,
    ...summary,
    droppedFraction: droppedFraction(summary.dropped, requests),
    skippedInvalid: source instanceof TraceSource ? source.skipped : 0,
    simulatedMs: endMs,
    messages: kernel.messagesDelivered,
  };
  if (result.completed + result.dropped + result.inFlight !== requests) {
    throw new SimulationError(
      "invariant_broken",
      `requests not conserved: completed ${result.completed} + dropped ${result.dropped} + in flight ${result.inFlight} != arrivals ${requests}`,
      { timeMs: kernel.nowMs },
    );
  }
  return result;
}

/**
 * The instances' real caches, for routing accounting: the request's block
 * keys are built once for all instances (they share one block size).
 */
function fleetCache(
  config: SimulationConfig,
  instances: readonly (ServingInstance | BatchingInstance)[],
  now: () => number,
): FleetCache {
  if (config.instances.model !== "batching") {
    return { cachedPrefixTokens: (i, request) => instances[i].cachedPrefixTokens(request) };
  }
  const blockTokens = config.instances.engine.blockTokens;
  let last: Request | undefined, keys: BlockKeys | undefined;
  return {
    cachedPrefixTokens(i, request) {
      if (request !== last) {
        last = request;
        keys = blockKeys(request, blockTokens);
      }
      return (instances[i] as BatchingInstance).cachedPrefixTokens(request, keys, now());
    },
  };
}

/**
 * Counts requests still held somewhere, independently of the metrics: in an
 * instance's queue or service, or in a message not yet delivered. A `route`
 * message stamped after the stop time is a request that has not arrived.
 */
function countRequestsHeld(kernel: Kernel, instances: readonly { waiting: number; running: number }[]) {
  let inFlight = 0, notYetArrived = 0;
  for (const instance of instances) inFlight += instance.waiting + instance.running;
  kernel.forEachPending((message, _to, timeMs) => {
    const m = message as AnyMessage;
    if (m.type === "route" && timeMs > kernel.nowMs) notYetArrived++;
    else if (m.type === "route" || m.type === "serve") inFlight++;
  });
  return { inFlight, notYetArrived };
}
