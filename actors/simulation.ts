/**
 * @module
 * The virtual run: wires one run's actors (actors/topology.ts) in a kernel
 * under the virtual clock, runs it, and checks that no request was lost.
 */
import { BatchingInstance } from "./instances/batching_instance.ts";
import { KeyHolders } from "./router/fleet_index.ts";
import type { ServingActor } from "./instances/instance_model.ts";
import { instanceModel } from "./instances/instance_models.ts";
import { droppedFraction, type MetricsCollector, type RequestMetrics } from "./metrics/metrics_collector.ts";
import { createPolicy } from "./policies/mod.ts";
import type { RoutingPolicy } from "./policies/policy.ts";
import { GroupHolders } from "./kv_cache/prefix_cache.ts";
import { type BlockKeys, blockKeys } from "./kv_cache/prefix_keys.ts";
import type { InstanceStatus, Request, RouteCommand, RouterCommand } from "./protocol.ts";
import { FLEET_INDEX_MIN_INSTANCES, type FleetCache, type Router } from "./router/router.ts";
import {
  type Actor,
  type ActorContext,
  type ActorRef,
  type DeliveryTap,
  Kernel,
  type Message,
} from "./runtime/kernel.ts";
import { ServingInstance } from "./instances/serving_instance.ts";
import { StatusBoard } from "./instances/status_reporter.ts";
import {
  buildAutoscaler,
  buildFaultInjector,
  buildInstance,
  buildMetrics,
  buildRouter,
  buildSource,
  checkConservation,
  metricsOptions,
  pendingRequests,
  type PoolPolicies,
  pullsReports,
  type RunActors,
  type SimulationConfig,
  startRun,
  wire,
} from "./topology.ts";
import { TraceSource } from "./traces/trace_source.ts";
import type { WorkloadSource } from "./workload/workload_source.ts";

export type { EngineConfig, InstancesConfig } from "./instances/instance_model.ts";
export type { RouterConfig, SimulationConfig } from "./topology.ts";

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
  /** Disaggregated fleets: use this policy for the prefill pool instead of `config.prefillPolicy`'s. */
  readonly prefillPolicy?: RoutingPolicy;
  /** Disaggregated fleets: use this policy for the decode pool instead of `config.decodePolicy`'s. */
  readonly decodePolicy?: RoutingPolicy;
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
  /**
   * Called once, the first time more than `queueWarningRequests` requests are
   * in flight (arrived, neither completed nor dropped) — the fleet is
   * overloaded and memory grows with its queues. Results are the same with or
   * without it. @default writes the line to stderr
   */
  readonly onWarning?: (line: string) => void;
  /** Requests in flight past which the run warns. @default {@linkcode QUEUE_WARNING_REQUESTS} */
  readonly queueWarningRequests?: number;
}

/**
 * Requests in flight past which a run warns (once): about 1.2 GB of queued
 * requests at the generated trace's defaults (24 block keys each; measured:
 * 1.1 million queued, 1.3 GB peak RSS) — early enough to act on, and far
 * beyond any run whose fleet keeps up.
 */
export const QUEUE_WARNING_REQUESTS = 1_000_000;

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
  const run = placeLocally(kernel, config, options);
  startRun(run.refs, (to, message) => kernel.send(to, message));
  runInSlices(kernel, run, config.untilMs ?? Infinity, options);
  // Reports posted after the router's last message: its view ends where the instances are.
  run.board?.drainAll((status, timeMs) => run.router.view.apply(status, status.instance, timeMs));

  // Stopped early: decode stretches apply their steps up to the stop, and the
  // clock ends at the last step a step-by-step run would have delivered.
  let endMs = kernel.nowMs;
  if (config.untilMs !== undefined) {
    for (const instance of run.instances) endMs = Math.max(endMs, instance.stopAt(config.untilMs));
  }
  options.inspect?.({
    router: run.router,
    // With faults or autoscaling each is a FaultyInstance around one of these (its `inner`).
    instances: run.instances as (ServingInstance | BatchingInstance)[],
  });
  const summary = run.metrics.summary();
  const pending = pendingRequests(kernel);
  let inFlight = pending.inFlight;
  for (const instance of run.instances) inFlight += instance.waiting + instance.running;
  const requests = run.source.emitted - pending.notYetArrived;
  checkConservation(
    {
      arrivals: requests,
      completed: summary.completed,
      dropped: summary.dropped,
      failed: summary.failed,
      inFlight,
    },
    kernel.nowMs,
  );
  return {
    policy: run.policy.name,
    requests,
    inFlight,
    ...summary,
    droppedFraction: droppedFraction(summary.dropped, requests),
    skippedInvalid: run.source instanceof TraceSource ? run.source.skipped : 0,
    simulatedMs: endMs,
    messages: kernel.messagesDelivered,
  };
}

/** A virtual run's actors, built in the kernel's thread. */
interface LocalRun {
  readonly metrics: MetricsCollector;
  readonly instances: readonly ServingActor[];
  readonly router: Router;
  readonly source: WorkloadSource | TraceSource;
  readonly refs: RunActors;
  readonly policy: RoutingPolicy;
  /** Where the instances post their reports, when they are pulled (`pullsReports`). */
  readonly board: StatusBoard | undefined;
}

/** Spawns the run's actors in `kernel`, keeping the objects (for the god's-eye cache view and the final counts). */
function placeLocally(kernel: Kernel, config: SimulationConfig, options: SimulateOptions): LocalRun {
  const instances: ServingActor[] = [];
  const policy = options.policy ?? createPolicy(config.policy);
  const plugin = options.policy ?? options.prefillPolicy ?? options.decodePolicy;
  const poolPolicies: PoolPolicies = {
    prefill: options.prefillPolicy ?? (config.prefillPolicy && createPolicy(config.prefillPolicy)),
    decode: options.decodePolicy ?? (config.decodePolicy && createPolicy(config.decodePolicy)),
  };
  let metrics: MetricsCollector | undefined, router: Router | undefined;
  let source: WorkloadSource | TraceSource | undefined;
  const board = pullsReports(config, plugin !== undefined)
    ? new StatusBoard({ now: () => kernel.nowMs, delivery: () => kernel.messagesDelivered })
    : undefined;
  const refs = wire(config, {
    metrics: (name) =>
      kernel.spawn(name, metrics = buildMetrics(config.instances.count, metricsOptions(config))),
    instance: (name, index, metricsRef) => {
      const instance = buildInstance(index, config, metricsRef, plugin !== undefined, board);
      instances.push(instance);
      return kernel.spawn(name, instance);
    },
    // The god's-eye view, for routing accounting only (the policy never sees it).
    router: (name, instanceRefs, metricsRef) => {
      router = buildRouter(
        instanceRefs,
        config,
        policy,
        fleetCache(config, instances, kernel),
        poolPolicies,
        metricsRef,
      );
      return kernel.spawn(name, board === undefined ? router : readingBoard(router, board));
    },
    source: (name, routerRef) => {
      source = buildSource(config.workload, routerRef, config.seed);
      return kernel.spawn(name, board === undefined ? source : markingLane(source, board, routerRef));
    },
    faults: (name, instanceRefs, routerRef) =>
      kernel.spawn(name, buildFaultInjector(config, instanceRefs, routerRef)),
    autoscaler: (name, instanceRefs, routerRef, metricsRef) =>
      kernel.spawn(name, buildAutoscaler(config, instanceRefs, routerRef, metricsRef)),
  });
  return { metrics: metrics!, instances, router: router!, source: source!, refs, policy, board };
}

/**
 * The router, reading `board` before each of its messages: it applies the
 * reports that would have reached it first, through the one table's `apply`
 * as a `status` message would (the only hook of pulled reports in the router).
 */
function readingBoard(router: Router, board: StatusBoard): Actor<RouterCommand> {
  const apply = (status: InstanceStatus, timeMs: number) =>
    router.view.apply(status, status.instance, timeMs);
  return {
    handle(message, ctx) {
      board.drain(message, ctx.now(), apply);
      router.handle(message, ctx);
    },
  };
}

/**
 * The source, telling `board` of each arrival it sends the router for this
 * very instant (the kernel delivers it after the reports posted so far this
 * instant, before those posted later).
 */
function markingLane<M extends Message>(
  source: Actor<M>,
  board: StatusBoard,
  router: ActorRef<RouteCommand>,
): Actor<M> {
  let marking: ActorContext<M> | undefined;
  return {
    handle(message, ctx) {
      // The source's own context, but for `send` (made once: an actor's context never changes).
      marking ??= Object.create(ctx, {
        send: {
          value: <T extends Message>(to: ActorRef<T>, sent: T, delayMs = 0) => {
            if (to === router && delayMs === 0) board.markLane(sent);
            ctx.send(to, sent, delayMs);
          },
        },
      }) as ActorContext<M>;
      source.handle(message, marking);
    },
  };
}

/**
 * Runs in slices of 65,536 deliveries (slicing changes nothing: `run` stops
 * before a message and the next slice delivers it). After each, warns once
 * when too many requests are in flight, and tells `onProgress` how far the
 * run is: a check per slice, nothing per delivery.
 */
function runInSlices(kernel: Kernel, run: LocalRun, untilMs: number, options: SimulateOptions): void {
  const limit = options.queueWarningRequests ?? QUEUE_WARNING_REQUESTS;
  let warned = false;
  while (kernel.liveCount > 0 && kernel.nextTimeMs() <= untilMs) {
    kernel.run({ untilMs, maxDeliveries: 1 << 16 });
    const arrived = run.source.emitted, finished = run.metrics.completed + run.metrics.dropped;
    const inFlight = arrived - finished - run.metrics.failed;
    if (!warned && inFlight > limit) {
      warned = true;
      (options.onWarning ?? warnOnStderr)(queueWarning(inFlight, limit, kernel.nowMs));
    }
    options.onProgress?.({ arrived, finished, simulatedMs: kernel.nowMs });
  }
}

/** The one line a run prints when its queues pass `limit` requests. */
export function queueWarning(inFlight: number, limit: number, simulatedMs: number): string {
  return `warning: ${inFlight} requests in flight at ${(simulatedMs / 1000).toFixed(1)} s simulated ` +
    `(more than ${limit}): the fleet is overloaded and memory grows with its queues (about 1.2 KB a ` +
    `request); instances.maxQueue bounds each instance's waiting queue (unbounded by default, as in vLLM)`;
}

function warnOnStderr(line: string): void {
  console.error(line);
}

/**
 * The instances' real caches, for routing accounting: a block-caching
 * model's request keys are built once for all instances (they share one
 * block size).
 */
function fleetCache(
  config: SimulationConfig,
  instances: readonly ServingActor[],
  kernel: Kernel,
): FleetCache {
  if (instanceModel(config.instances.model).cacheUnit !== "blocks") {
    const cachedPrefixTokens = (i: number, request: Request) => instances[i].cachedPrefixTokens(request);
    // Plain FIFO instances (no restarts) count their groups into one tally: "held anywhere" without a scan.
    if (!instances.every((instance) => instance instanceof ServingInstance)) return { cachedPrefixTokens };
    const holders = new GroupHolders();
    for (const instance of instances as ServingInstance[]) instance.cache.countInto(holders);
    return {
      cachedPrefixTokens,
      mostCachedTokens: (request) =>
        request.prefixGroup >= 0 && holders.heldAnywhere(request.prefixGroup) ? request.prefixTokens : 0,
    };
  }
  const blockTokens = config.instances.engine.blockTokens;
  let last: Request | undefined, keys: BlockKeys | undefined;
  const keysOf = (request: Request) => {
    if (request !== last) {
      last = request;
      keys = blockKeys(request, blockTokens);
    }
    return keys!;
  };
  const cachedPrefixTokens = (i: number, request: Request) =>
    instances[i].cachedPrefixTokens(request, keysOf(request), kernel.nowMs);
  // A large fleet of plain batching instances (no restarts) keeps, per block run, the instances
  // whose cache holds it: only those can have any of a request cached (its first run first).
  if (
    instances.length <= FLEET_INDEX_MIN_INSTANCES ||
    !instances.every((instance) => instance instanceof BatchingInstance)
  ) return { cachedPrefixTokens };
  const runHolders = new KeyHolders();
  (instances as BatchingInstance[]).forEach((instance, i) => {
    const cache = instance.cache, previous = cache.onRunChange;
    cache.onRunChange = (key, cached) => {
      previous?.(key, cached);
      if (key >= 0) runHolders.change(i, key, cached > 0);
    };
  });
  return {
    cachedPrefixTokens,
    mostCachedTokens(request, upTo = Infinity) {
      const requestKeys = keysOf(request);
      if (requestKeys.count === 0) return 0;
      // A copy: asking a holder catches its stretch up, which may evict the run and change the set.
      const found = runHolders.holders(requestKeys.runKey(0));
      const holders = Array.from({ length: found.size }, (_, k) => found.at(k));
      let most = 0;
      for (let k = 0; k < holders.length && most < upTo; k++) {
        most = Math.max(most, cachedPrefixTokens(holders[k], request));
      }
      return most;
    },
  };
}
