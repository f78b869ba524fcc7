/**
 * @module
 * One run in real time: the metrics collector stays in this thread, the
 * instances and the source share a pool of Workers sized to the cores, the
 * router (and its plugin, if any) has a Worker of its own, and a wall clock
 * paces the central kernel at `speed` simulated ms per wall ms.
 */
import type * as Factories from "./actor_factories.ts";
import type { PoolRole } from "./instances/instance_model.ts";
import { droppedFraction, type MetricsCollector } from "./metrics/metrics_collector.ts";
import type {
  AnyMessage,
  MetricsCommand,
  RouteCommand,
  RouterCommand,
  ServeCommand,
  SourceCommand,
} from "./protocol.ts";
import type { ActorRef, DeliveryTap, Message } from "./runtime/kernel.ts";
import { WallClock, type WallTime } from "./runtime/wall_clock.ts";
import {
  type LagStats,
  NO_PERMISSIONS,
  type Outgoing,
  type RemoteActorSpec,
  WorkerRuntime,
} from "./runtime/worker_runtime.ts";
import type { RunResult } from "./simulation.ts";
import { reviveTraceFormatError } from "./traces/trace_reader.ts";
import {
  buildAutoscaler,
  buildFaultInjector,
  buildMetrics,
  checkConservation,
  metricsOptions,
  pendingRequests,
  type Placement,
  type SimulationConfig,
  startRun,
  wire,
} from "./topology.ts";

const ENTRY = new URL("./model_worker.ts", import.meta.url);

/** Options for {@linkcode simulateRealtime}. */
export interface RealtimeOptions {
  /** Simulated ms per wall ms. */
  readonly speed: number;
  /** The wall time source, supplied by the caller (see scenarios/cli/wall_time.ts). */
  readonly wallTime: WallTime;
  /**
   * A router plugin module (`file:` URL), imported only in the router's
   * Worker, which may read the files of its import graph, nothing else.
   */
  readonly pluginUrl?: string;
  /**
   * The one pool of a disaggregated fleet the plugin routes; the other keeps
   * its built-in policy, and the result's `policy` is the run's.
   * @default every pool without a policy of its own
   */
  readonly pluginPool?: Exclude<PoolRole, "both">;
  /**
   * What the plugin's Worker may read: the files of its import graph, from
   * the host's check (scenarios/workers/plugin_imports.ts). @default the plugin's file alone
   */
  readonly pluginReadPaths?: readonly string[];
  /**
   * Wall ms the plugin may take to load, and to answer each message to the
   * router (in place of `handlerTimeoutMs`); past it the run fails with
   * `plugin_timeout`. @default 5000
   */
  readonly pluginTimeoutMs?: number;
  /** Observes every delivery (for a live view). */
  readonly onDeliver?: DeliveryTap;
  /** Aborting stops the run (`AbortError`); Workers are terminated. */
  readonly signal?: AbortSignal;
  /** Wall ms our own actors (instances, source, a built-in router) may take to be built or to handle one message. @default 5000 */
  readonly handlerTimeoutMs?: number;
  /** Policy name to report. @default the plugin's own `name` (from its Worker), else config.policy.name */
  readonly policyName?: string;
  /** Workers in the instances' pool. @default navigator.hardwareConcurrency, at least 1 */
  readonly poolSize?: number;
  /** Called once every Worker is ready, with live handles (for views and partial reports). */
  readonly onStart?: (live: LiveHandles) => void;
}

/** What a live view can read while the run goes on. */
export interface LiveHandles {
  /** The metrics collector (in this thread). */
  readonly metrics: MetricsCollector;
  /** Lag over the most recent deliveries (the last `recent`, default 2,000). */
  readonly lag: (recent?: number) => LagStats;
}

/** A real-time run's metrics and how far the wall clock fell behind. */
export interface RealtimeResult extends RunResult {
  readonly lag: LagStats;
  readonly speed: number;
}

/**
 * Runs `config` with actors in Workers against the wall clock.
 * @throws {SimulationError} naming the actor (and plugin), message type and time.
 */
export async function simulateRealtime(
  config: SimulationConfig,
  options: RealtimeOptions,
): Promise<RealtimeResult> {
  // Requests the instances hold, counted from the deliveries themselves
  // (serves in, completions and drops out), independently of the metrics
  // collector's account — and exact when the run stops early, unlike the
  // instances' last status, which a delay or a reporting interval makes late.
  let arrivals = 0, served = 0, finished = 0;
  const tap: DeliveryTap = (message, to, timeMs) => {
    const m = message as AnyMessage;
    if (m.type === "route") arrivals++;
    // A decode leg's serve, or a retry's, is the same request again: it entered with its first.
    else if (m.type === "serve" && m.leg?.phase !== "decode" && (m.attempt ?? 0) === 0) served++;
    else if (m.type === "completed" || m.type === "dropped") finished++;
    else if (m.type === "attempt_failed" && m.final) {
      finished++;
      // Failed on arrival (no instance to take it): it never had a serve.
      if (m.reason === "no_instance" && m.attempt === 0) served++;
    }
    options.onDeliver?.(message, to, timeMs);
  };
  const runtime = new WorkerRuntime({
    seed: config.seed,
    wallTime: options.wallTime,
    onDeliver: tap,
    handlerTimeoutMs: options.handlerTimeoutMs,
    poolSize: options.poolSize,
  });
  try {
    const collector = buildMetrics(config.instances.count, metricsOptions(config));
    const run = wire(config, placeInWorkers(runtime, config, collector, options));
    await runtime.start({ signal: options.signal });
    options.onStart?.({ metrics: collector, lag: (recent = 2000) => runtime.lagStats(recent) });
    startRun(run, (to, message) => runtime.kernel.send(to, message));
    await runtime.run(new WallClock(options.wallTime, options.speed), {
      signal: options.signal,
      untilMs: config.untilMs,
    });

    const summary = collector.summary();
    const inFlight = served - finished + pendingRequests(runtime.kernel, false).inFlight;
    checkConservation(
      { arrivals, completed: summary.completed, dropped: summary.dropped, failed: summary.failed, inFlight },
      runtime.kernel.nowMs,
    );
    return {
      policy: options.policyName ?? (options.pluginUrl ? runtime.aboutOf(run.router) : undefined) ??
        config.policy.name,
      skippedInvalid: 0,
      requests: arrivals,
      inFlight,
      ...summary,
      droppedFraction: droppedFraction(summary.dropped, arrivals),
      simulatedMs: runtime.kernel.nowMs,
      messages: runtime.kernel.messagesDelivered,
      lag: runtime.lagStats(),
      speed: options.speed,
    };
  } finally {
    runtime.terminate();
  }
}

/** A factory of actors/actor_factories.ts, by name. */
type FactoryName = keyof typeof Factories;

/** The error classes our own actors may throw in a Worker, rebuilt on this side (a plugin's Worker gets none). */
const OUR_ERRORS = { TraceFormatError: reviveTraceFormatError };

/**
 * The spec of one of our actors that a Worker builds with `factory(...args)`:
 * the name and the arguments are type-checked, and its errors keep their class.
 */
function remote<K extends FactoryName>(
  factory: K,
  args: Parameters<typeof Factories[K]>,
): Pick<RemoteActorSpec, "entry" | "factory" | "args" | "revivers"> {
  return { entry: ENTRY, factory, args, revivers: OUR_ERRORS };
}

/**
 * The real-time placement: the metrics collector in this thread, the
 * instances and the source in the pool's Workers, the router (and its
 * plugin, if any) in a Worker of its own.
 */
function placeInWorkers(
  runtime: WorkerRuntime,
  config: SimulationConfig,
  collector: MetricsCollector,
  options: RealtimeOptions,
): Placement {
  const plugin = options.pluginUrl;
  return {
    metrics: (name) => runtime.spawnLocal(name, collector, { lookaheadMs: metricsLookahead }),
    instance: (name, index, metrics) =>
      runtime.spawnRemote<ServeCommand>(
        name,
        remote("createInstance", [index, config, metrics, plugin !== undefined]),
      ),
    router: (name, instances, metrics) =>
      runtime.spawnRemote<RouteCommand>(
        name,
        routerInWorker(
          config,
          instances,
          metrics,
          plugin === undefined ? undefined : {
            url: plugin,
            pool: options.pluginPool,
            readPaths: options.pluginReadPaths,
            timeoutMs: options.pluginTimeoutMs ?? 5000,
          },
        ),
      ),
    // The fault injector and the autoscaler only send a few commands: they stay in this thread.
    faults: (name, instances, router) =>
      runtime.spawnLocal(name, buildFaultInjector(config, instances, router)),
    autoscaler: (name, instances, router, metrics) =>
      runtime.spawnLocal(name, buildAutoscaler(config, instances, router, metrics)),
    source: (name, router) => {
      const trace = config.workload.trace;
      return runtime.spawnRemote<SourceCommand>(name, {
        ...remote("createSource", [config.workload, router, config.seed]),
        // A trace replay may read its trace file, nothing else (a generated trace reads nothing).
        permissions: trace?.path !== undefined ? { ...NO_PERMISSIONS, read: [trace.path] } : "none",
      });
    },
  };
}

/**
 * The metrics collector's lookahead: it sends nothing but its answer to an
 * SLO probe (the autoscaler's), so every other message runs at once.
 */
function metricsLookahead(message: Message): number {
  return (message as MetricsCommand).type === "slo_probe" ? 0 : Infinity;
}

/**
 * The router's lookahead (actors/router/router.ts): a report only updates its
 * views — or, for a replica that hears reports late, schedules them after
 * that replica's delay — so it sends nothing sooner than the least positive
 * replica delay; a late report sends nothing. Everything else (a route, a
 * probe tick, a failure) may send at once.
 */
function routerLookahead(config: SimulationConfig): (message: Message) => number {
  const delays = (config.router.replicaDelaysMs ?? []).filter((delayMs) => delayMs > 0);
  const reportMs = delays.length === 0 ? Infinity : Math.min(...delays);
  return (message) => {
    const type = (message as RouterCommand).type;
    return type === "status" ? reportMs : type === "replica_status" ? Infinity : 0;
  };
}

/** A router plugin, as its Worker gets it. */
export interface RouterPluginSandbox {
  /** The plugin module (`file:` URL). */
  readonly url: string;
  /** The one pool of a disaggregated fleet it routes. @default every pool without a policy of its own */
  readonly pool?: Exclude<PoolRole, "both">;
  /** What its Worker may read: the files of its import graph. @default the plugin's file alone */
  readonly readPaths?: readonly string[];
  /** Wall ms it may take to load, and to answer each message. */
  readonly timeoutMs: number;
}

/**
 * The spec of a router in a Worker of its own (built by
 * actors/actor_factories.ts's `createRouter`): with a plugin, a sandbox —
 * no permission but reading the plugin's files, a time budget per message,
 * and only the messages a router may send. The real-time run and the
 * gateway (scenarios/wire/gateway.ts) both place a plugin's router so.
 */
export function routerInWorker(
  config: SimulationConfig,
  instances: readonly ActorRef<ServeCommand>[],
  metrics: ActorRef<MetricsCommand>,
  plugin: RouterPluginSandbox | undefined,
): RemoteActorSpec {
  return {
    ...remote("createRouter", [instances, config, plugin?.url, plugin?.pool, metrics]),
    ownWorker: true,
    lookaheadMs: routerLookahead(config),
    ...(plugin ? pluginSandbox(plugin, new Set(instances), metrics) : {}),
  };
}

/** The router's Worker when it runs a plugin: what it may read, its time budget, and what it may send. */
function pluginSandbox(
  plugin: RouterPluginSandbox,
  instanceRefs: ReadonlySet<number>,
  metrics: number,
): Partial<RemoteActorSpec> {
  return {
    permissions: {
      ...NO_PERMISSIONS,
      // Files, never a directory: a plugin kept in $HOME must not read the rest of it.
      read: plugin.readPaths ? [...plugin.readPaths] : [new URL(plugin.url)],
    },
    label: `plugin ${plugin.url.split("/").pop()}${plugin.pool ? ` for the ${plugin.pool} pool` : ""}`,
    revivers: undefined, // the plugin's code runs there: its word is not taken
    timeoutMs: plugin.timeoutMs,
    timeoutKind: "plugin_timeout",
    describe: describeRouted,
    mayEmit: (out: Outgoing) => routerMayEmit(out, instanceRefs, metrics),
  };
}

/** The router's own timers (health probes, replica sync, a replica's delayed report). */
const ROUTER_TIMERS: ReadonlySet<string> = new Set(["probe_tick", "sync_tick", "replica_status"]);

/**
 * What a router (with a plugin in its Worker) may send, never later than
 * now: `serve` and `probe` to instances, failed attempts to the metrics,
 * and its own timers.
 */
function routerMayEmit(out: Outgoing, instanceRefs: ReadonlySet<number>, metrics: number): boolean {
  if (out?.op === "schedule") return ROUTER_TIMERS.has(out.message?.type);
  if (out?.op !== "send" || out.delayMs !== 0) return false;
  const type = out.message?.type;
  return instanceRefs.has(out.to)
    ? type === "serve" || type === "probe"
    : out.to === metrics && type === "attempt_failed";
}

/** Names a message to the router in a timeout error: the request a `route` carries. */
function describeRouted(message: Message): string | undefined {
  const m = message as AnyMessage;
  return m.type === "route" ? `routing request ${m.request.id}` : undefined;
}
