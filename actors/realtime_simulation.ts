/**
 * @module
 * One run in real time: the metrics collector stays in this thread, the
 * instances and the source share a pool of Workers sized to the cores, the
 * router (and its plugin, if any) has a Worker of its own, and a wall clock
 * paces the central kernel at `speed` simulated ms per wall ms.
 */
import { droppedFraction, MetricsCollector } from "./metrics_collector.ts";
import type { AnyMessage, MetricsCommand, RouteCommand, ServeCommand } from "./protocol.ts";
import type { ActorRef, DeliveryTap, Message } from "./runtime/kernel.ts";
import { SimulationError } from "./runtime/simulation_error.ts";
import { WallClock, type WallTime } from "./runtime/wall_clock.ts";
import { type LagStats, NO_PERMISSIONS, type Outgoing, WorkerRuntime } from "./runtime/worker_runtime.ts";
import type { RunResult, SimulationConfig } from "./simulation.ts";

const ENTRY = new URL("./model_worker.ts", import.meta.url);
/** Our actors' directory: a plugin's Worker may read it, so a plugin may import our helpers. */
const ACTORS_DIR = new URL("./", import.meta.url);

/** Options for {@linkcode simulateRealtime}. */
export interface RealtimeOptions {
  /** Simulated ms per wall ms. */
  readonly speed: number;
  /** The wall time source, supplied by the caller (see scenarios/wall_time.ts). */
  readonly wallTime: WallTime;
  /**
   * A router plugin module (`file:` URL), imported only in the router's
   * Worker, which may read the plugin's directory and `actors/`, nothing else.
   */
  readonly pluginUrl?: string;
  /**
   * What the plugin's Worker may read, from the host's import-graph check
   * (the graph's files and `actors/`). @default the plugin's directory and `actors/`
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
  /** Lag over the most recent deliveries. */
  readonly lag: () => LagStats;
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
  const count = config.instances.count;
  // What each instance last said it holds (waiting + running): the
  // instances' own account, independent of the metrics collector's.
  const held = new Array<number>(count).fill(0);
  let arrivals = 0;
  const tap: DeliveryTap = (message, to, timeMs) => {
    const m = message as AnyMessage;
    if (m.type === "route") arrivals++;
    else if (m.type === "status") held[m.instance] = m.waiting + m.running;
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
    const collector = new MetricsCollector(count);
    const metrics = runtime.spawnLocal<MetricsCommand>("metrics", collector);
    const instances = Array.from(
      { length: count },
      (_, i) =>
        runtime.spawnRemote<ServeCommand>(`instance/${i}`, {
          entry: ENTRY,
          factory: "createInstance",
          args: [i, config, metrics, options.pluginUrl !== undefined],
        }),
    );
    const plugin = options.pluginUrl;
    const instanceRefs = new Set<number>(instances);
    const router = runtime.spawnRemote<RouteCommand>("router", {
      entry: ENTRY,
      factory: "createRouter",
      args: [instances, config, plugin],
      ownWorker: true,
      ...(plugin
        ? {
          permissions: {
            ...NO_PERMISSIONS,
            read: options.pluginReadPaths ? [...options.pluginReadPaths] : [new URL(".", plugin), ACTORS_DIR],
          },
          label: `plugin ${plugin.split("/").pop()}`,
          timeoutMs: options.pluginTimeoutMs ?? 5000,
          timeoutKind: "plugin_timeout",
          describe: describeRouted,
          // A router sends only "serve" commands to instances, never later than now.
          mayEmit: (out: Outgoing) =>
            out?.op === "send" && instanceRefs.has(out.to) && out.message?.type === "serve" &&
            out.delayMs === 0,
        }
        : {}),
    });
    const trace = config.workload.trace;
    const source = runtime.spawnRemote("source", {
      entry: ENTRY,
      factory: "createSource",
      args: [config.workload, router],
      // A trace replay may read its trace file, nothing else (a generated trace reads nothing).
      permissions: trace?.path !== undefined ? { ...NO_PERMISSIONS, read: [trace.path] } : "none",
    }) as ActorRef<{ type: "start" }>;
    await runtime.start();
    options.onStart?.({ metrics: collector, lag: () => runtime.lagStats(2000) });
    const clock = new WallClock(options.wallTime, options.speed);
    runtime.kernel.send(source, { type: "start" });
    await runtime.run(clock, { signal: options.signal, untilMs: config.untilMs });

    const summary = collector.summary();
    let pending = 0;
    runtime.kernel.forEachPending((message, _to, timeMs) => {
      const m = message as AnyMessage;
      if ((m.type === "route" && timeMs <= runtime.kernel.nowMs) || m.type === "serve") pending++;
    });
    const dropped = summary.dropped;
    const inFlight = held.reduce((a, b) => a + b, 0) + pending;
    const result: RealtimeResult = {
      policy: options.policyName ?? (plugin ? runtime.aboutOf(router) : undefined) ?? config.policy.name,
      skippedInvalid: 0,
      requests: arrivals,
      inFlight,
      ...summary,
      droppedFraction: droppedFraction(dropped, arrivals),
      simulatedMs: runtime.kernel.nowMs,
      messages: runtime.kernel.messagesDelivered,
      lag: runtime.lagStats(),
      speed: options.speed,
    };
    if (summary.completed + dropped + inFlight !== arrivals) {
      throw new SimulationError(
        "invariant_broken",
        `requests not conserved: completed ${summary.completed} + dropped ${dropped} + in flight ${inFlight} != arrivals ${arrivals}`,
        { timeMs: runtime.kernel.nowMs },
      );
    }
    return result;
  } finally {
    runtime.terminate();
  }
}

/** Names a message to the router in a timeout error: the request a `route` carries. */
function describeRouted(message: Message): string | undefined {
  const m = message as AnyMessage;
  return m.type === "route" ? `routing request ${m.request.id}` : undefined;
}
