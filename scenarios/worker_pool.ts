/**
 * @module
 * Runs simulations on a pool of sandboxed Deno Workers and returns the results
 * by run index — so the output never depends on which Worker ran what, or how
 * many there were. Runs of a router plugin go to Workers that load it (and
 * only those: a plugin never shares a Worker with built-in policies' runs),
 * with no permission but reading the files it imports and `actors/`; a
 * watchdog in this thread ends the pool when the plugin hangs, silently ends
 * its Worker or exhausts memory.
 */
import type { RunResult, SimulationConfig } from "../actors/simulation.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { NO_PERMISSIONS } from "../actors/runtime/worker_runtime.ts";
import { TraceFormatError } from "../actors/trace_reader.ts";
import type { SimulationWorkerCommand, SimulationWorkerReply } from "./simulation_worker.ts";
import { UsageError } from "./usage_error.ts";
import { WatchSlot, WorkerPhase } from "./worker_watch.ts";

/** One run for the pool: a config and whether the pool's plugin replaces its policy. */
export interface PoolTask {
  readonly config: SimulationConfig;
  /** Run with the pool's router plugin (`WorkerPoolOptions.plugin`). */
  readonly pluginUrl?: string;
}

/** A router plugin, checked (see scenarios/router_plugin.ts), for the pool to load. */
export interface SandboxPlugin {
  /** `file:` URL of the module. */
  readonly url: string;
  /** How the user named it (for messages). */
  readonly path: string;
  /** Its `name`, once known. */
  readonly name?: string;
  /** What its Worker may read: the files of its import graph and `actors/` (see scenarios/plugin_imports.ts). */
  readonly readPaths: readonly string[];
}

/** Default bound on one routing decision and on a plugin's loading, wall ms. */
export const DEFAULT_PLUGIN_TIMEOUT_MS = 5000;

/**
 * Resident memory above which a run with a plugin is ended: below the 4 GiB
 * heap limit of a Worker, at which V8 would abort the whole process with a
 * crash dump instead of a one-line message.
 */
export const PLUGIN_MEMORY_BUDGET_BYTES = 3 * 2 ** 30;

/** Options for {@linkcode runOnWorkers}. */
export interface WorkerPoolOptions {
  /** Number of Workers running at once. @default navigator.hardwareConcurrency */
  readonly workers?: number;
  /** Called after each finished run with the count done, its result and its index. */
  readonly onProgress?: (done: number, result: RunResult, index: number) => void;
  /** Aborting terminates every Worker and rejects with an `AbortError`. */
  readonly signal?: AbortSignal;
  /** The router plugin of the tasks that name it. */
  readonly plugin?: SandboxPlugin;
  /** Bound on one plugin decision and on the plugin's loading, wall ms. @default DEFAULT_PLUGIN_TIMEOUT_MS */
  readonly pluginTimeoutMs?: number;
  /** Files the runs read (trace files): every Worker may read them. */
  readonly readPaths?: readonly string[];
  /** Called with each run's wall time inside its Worker. */
  readonly onWallMs?: (index: number, wallMs: number) => void;
}

/** One Worker of the pool, with its watch buffer and what the watchdog last saw. */
class SimulationWorker {
  readonly worker: Worker;
  readonly watch: WatchSlot;
  readonly ready: Promise<string | undefined>;
  /** When the watchdog first saw it importing the plugin (wall ms). */
  loadingSince: number | undefined;
  loaded = false;
  /** The run it is doing, and since when (wall ms). */
  task = -1;
  taskSince = 0;
  decisions = -1;
  decisionSince = 0;
  /** Decisions counted when the run last made progress, and since when (wall ms). */
  progressDecisions = -1;
  progressSince = 0;
  readonly #port: MessagePort;
  onReply: (reply: SimulationWorkerReply) => void = () => {};
  onCrash: (message: string) => void = () => {};

  constructor(readonly plugin: SandboxPlugin | undefined, readPaths: readonly string[]) {
    const read = [...(plugin?.readPaths ?? []), ...readPaths];
    this.worker = new Worker(new URL("./simulation_worker.ts", import.meta.url), {
      type: "module",
      name: plugin ? `plugin ${plugin.path}` : "simulation",
      deno: { permissions: { ...NO_PERMISSIONS, read: read.length > 0 ? read : false } },
    });
    const buffer = WatchSlot.create();
    this.watch = new WatchSlot(buffer);
    const channel = new MessageChannel();
    this.#port = channel.port1;
    // Whatever a plugin posts with its Worker's own postMessage lands here, unread.
    this.worker.onmessage = () => {};
    this.ready = new Promise((resolve, reject) => {
      this.#port.onmessage = (event: MessageEvent<SimulationWorkerReply>) => {
        const reply = event.data;
        if (reply?.type === "ready" && !this.loaded) {
          this.loaded = true;
          this.#port.onmessage = (e: MessageEvent<SimulationWorkerReply>) => this.onReply(e.data);
          resolve(reply.pluginName);
        } else if (reply?.type === "load_failed") {
          reject(loadError(plugin!, String(reply.message).split("\n")[0]));
        }
      };
      this.worker.onerror = (event) => {
        event.preventDefault();
        const message = event.message.replace(/^Uncaught (\(in promise\) )?/, "");
        if (!this.loaded) {
          reject(
            plugin
              ? loadError(plugin, message)
              : new SimulationError("worker_crashed", `simulation Worker failed to start: ${message}`),
          );
        }
        this.onCrash(message);
      };
    });
    this.worker.postMessage(
      {
        type: "init",
        port: channel.port2,
        watch: buffer,
        pluginUrl: plugin?.url,
      } satisfies SimulationWorkerCommand,
      [channel.port2],
    );
  }

  run(id: number, config: SimulationConfig): void {
    this.task = id;
    this.taskSince = performance.now();
    this.progressDecisions = -1;
    this.#port.postMessage({ type: "run", id, config } satisfies SimulationWorkerCommand);
  }

  terminate(): void {
    this.#port.close();
    this.worker.terminate();
  }
}

/** The usage error for a plugin that failed to load: refused a permission, or not a plugin at all. */
function loadError(plugin: SandboxPlugin, message: string): UsageError {
  const what = /^(Requires \w+ access|a router plugin may not)/.test(message)
    ? "failed to load"
    : "is not a router plugin";
  return new UsageError(`--router: "${plugin.path}" ${what}: ${message}`);
}

/** How often the watchdog looks: five times per timeout, between 10 and 250 ms. */
function pollIntervalMs(timeoutMs: number): number {
  return Math.min(250, Math.max(10, timeoutMs / 5));
}

/** A `resource_exhausted` error when the process is over a plugin run's memory budget. */
export function memoryVerdict(plugin: SandboxPlugin): SimulationError | undefined {
  const rss = Deno.memoryUsage().rss;
  if (rss <= PLUGIN_MEMORY_BUDGET_BYTES) return undefined;
  return new SimulationError(
    "resource_exhausted",
    `the run with plugin ${plugin.name ?? plugin.path} used ${(rss / 2 ** 20).toFixed(0)} MB, over the ${
      PLUGIN_MEMORY_BUDGET_BYTES / 2 ** 20
    } MB budget of a plugin run`,
    { actor: pluginActor(plugin) },
  );
}

/** How a plugin is named in errors: `router (plugin NAME)`. */
function pluginActor(plugin: SandboxPlugin): string {
  return `router (plugin ${plugin.name ?? plugin.path})`;
}

/**
 * What the watchdog finds wrong with a plugin Worker at wall time `now`, or
 * undefined: loading or one decision past the timeout, or a run it never
 * started (its Worker ended without a word).
 */
function watchdogVerdict(w: SimulationWorker, now: number, timeoutMs: number): SimulationError | undefined {
  const plugin = w.plugin!;
  const actor = pluginActor(plugin);
  if (!w.loaded) {
    // The budget starts when the Worker begins importing the plugin: starting
    // a Worker and loading our own modules is not the plugin's time.
    if (w.watch.read().phase !== WorkerPhase.Loading) return undefined;
    w.loadingSince ??= now;
    if (now - w.loadingSince <= timeoutMs) return undefined;
    return new SimulationError(
      "plugin_timeout",
      `plugin ${plugin.path} did not finish loading within ${timeoutMs} ms`,
      { actor },
    );
  }
  if (w.task < 0) return undefined;
  const seen = w.watch.read();
  if (seen.task !== w.task) {
    if (now - w.taskSince <= timeoutMs) return undefined;
    return new SimulationError(
      "plugin_timeout",
      `plugin ${plugin.name} did not start run ${w.task} within ${timeoutMs} ms: its Worker stopped (did it call Deno.exit or close?)`,
      { actor },
    );
  }
  // Progress: a plugin run routes requests all along. One in which no routing
  // decision starts for the timeout is stuck outside `choose` (in code the
  // plugin patched, say), whatever else the Worker reports.
  if (seen.decisions !== w.progressDecisions) {
    w.progressDecisions = seen.decisions;
    w.progressSince = now;
  } else if (seen.phase !== WorkerPhase.Deciding && now - w.progressSince > timeoutMs) {
    return new SimulationError(
      "plugin_timeout",
      `plugin ${plugin.name}'s run made no progress for ${timeoutMs} ms (no routing decision started; last was request ${seen.requestId})`,
      { actor, timeMs: seen.timeMs },
    );
  }
  if (seen.phase !== WorkerPhase.Deciding) return undefined;
  if (seen.decisions !== w.decisions) {
    w.decisions = seen.decisions;
    w.decisionSince = now;
    return undefined;
  }
  if (now - w.decisionSince <= timeoutMs) return undefined;
  return new SimulationError(
    "plugin_timeout",
    `plugin ${plugin.name} did not answer routing request ${seen.requestId} within ${timeoutMs} ms`,
    { actor, messageType: "route", timeMs: seen.timeMs },
  );
}

/**
 * Loads `plugin` in a sandboxed Worker, bounded by `timeoutMs`, and returns
 * its `name`; the Worker is then terminated.
 * @throws {UsageError} when it fails to load; {@linkcode SimulationError}
 *   (`plugin_timeout`) past the timeout.
 */
export function loadInSandbox(plugin: SandboxPlugin, timeoutMs: number): Promise<string> {
  const w = new SimulationWorker(plugin, []);
  let timer: ReturnType<typeof setInterval> | undefined;
  return new Promise<string>((resolve, reject) => {
    timer = setInterval(() => {
      const verdict = watchdogVerdict(w, performance.now(), timeoutMs) ?? memoryVerdict(plugin);
      if (verdict) reject(verdict);
    }, pollIntervalMs(timeoutMs));
    w.onCrash = (message) => reject(loadError(plugin, message));
    w.ready.then((name) => resolve(name!), reject);
  }).finally(() => {
    clearInterval(timer);
    w.terminate();
  });
}

/** A well-formed result reply: counts and the policy's name where a report needs them. */
function isRunResult(
  reply: SimulationWorkerReply,
): reply is Extract<SimulationWorkerReply, { type: "result" }> {
  if (reply.type !== "result" || typeof reply.wallMs !== "number") return false;
  const r = reply.result as Partial<RunResult> | null;
  return r !== null && typeof r === "object" && typeof r.policy === "string" &&
    ["requests", "completed", "dropped", "inFlight", "simulatedMs", "messages"].every((k) =>
      Number.isFinite((r as Record<string, unknown>)[k])
    );
}

/** The error a Worker's "error" reply stands for. */
function replyError(
  reply: Extract<SimulationWorkerReply, { type: "error" }>,
  plugin: SandboxPlugin | undefined,
  nameRun: boolean,
): Error {
  const { kind, messageType, timeMs } = reply;
  // A plugin's Worker cannot claim the user's trace is malformed (that would be exit 2).
  const traceFormat = plugin ? undefined : reply.traceFormat;
  const firstLine = String(reply.detail).split("\n")[0];
  // Among many runs (a sweep), say which one failed.
  const detail = nameRun ? `run ${reply.id}: ${firstLine}` : firstLine;
  const actor = plugin && reply.actor === "router" ? pluginActor(plugin) : reply.actor;
  const cause = traceFormat === undefined
    ? undefined
    : new TraceFormatError(traceFormat.file, traceFormat.line, traceFormat.reason);
  return new SimulationError(kind, detail, { actor, messageType, timeMs, cause });
}

/**
 * Simulates every task; `results[i]` belongs to `tasks[i]`.
 * @throws {SimulationError} from the first run that fails, or from the
 *   watchdog (`plugin_timeout`, `resource_exhausted`); every Worker is
 *   terminated. A Worker spinning in user code cannot be terminated in Deno:
 *   the caller must then end the process (the command-line tools do).
 * @throws {UsageError} when the plugin fails to load.
 */
export function runOnWorkers(
  tasks: readonly PoolTask[],
  options: WorkerPoolOptions = {},
): Promise<RunResult[]> {
  const size = Math.max(1, Math.min(options.workers ?? navigator.hardwareConcurrency, tasks.length));
  const timeoutMs = options.pluginTimeoutMs ?? DEFAULT_PLUGIN_TIMEOUT_MS;
  const results = new Array<RunResult>(tasks.length);
  const all: SimulationWorker[] = [];
  const slots = Array.from({ length: size }, () =>
    ({ plain: undefined, plugin: undefined }) as {
      plain?: SimulationWorker;
      plugin?: SimulationWorker;
    });
  let next = 0, done = 0, finished = false;
  return new Promise<RunResult[]>((resolve, reject) => {
    let watchdog: ReturnType<typeof setInterval> | undefined;
    const finish = (error?: Error) => {
      if (finished) return;
      finished = true;
      clearInterval(watchdog);
      for (const w of all) w.terminate();
      options.signal?.removeEventListener("abort", onAbort);
      if (error) reject(error);
      else resolve(results);
    };
    const onAbort = () => finish(new DOMException("sweep interrupted", "AbortError"));
    options.signal?.addEventListener("abort", onAbort);
    if (options.signal?.aborted) return onAbort();
    if (tasks.length === 0) return finish();

    const workerFor = (slot: typeof slots[number], plugin: boolean): SimulationWorker => {
      const key = plugin ? "plugin" : "plain";
      const existing = slot[key];
      if (existing) return existing;
      if (plugin && options.plugin === undefined) {
        throw new TypeError("a task names a plugin but the pool has none");
      }
      const w = new SimulationWorker(plugin ? options.plugin : undefined, options.readPaths ?? []);
      w.ready.catch(finish);
      w.onCrash = (message) => {
        const actor = w.plugin ? pluginActor(w.plugin) : "simulation Worker";
        finish(new SimulationError("worker_crashed", message, { actor }));
      };
      all.push(w);
      slot[key] = w;
      return w;
    };
    const feed = (slot: typeof slots[number]) => {
      if (finished || next >= tasks.length) return;
      const id = next++;
      const w = workerFor(slot, tasks[id].pluginUrl !== undefined);
      w.onReply = (reply) => {
        if (finished) return;
        // One answer per run given, for that run, of the right shape; anything else is a fault.
        if ((reply as { id?: unknown })?.id !== w.task || !(reply.type === "error" || isRunResult(reply))) {
          return finish(
            new SimulationError("actor_threw", `a simulation Worker answered out of turn for run ${w.task}`, {
              actor: w.plugin ? pluginActor(w.plugin) : "simulation Worker",
            }),
          );
        }
        w.task = -1;
        if (reply.type === "error") return finish(replyError(reply, w.plugin, tasks.length > 1));
        results[reply.id] = reply.result;
        options.onWallMs?.(reply.id, reply.wallMs);
        done++;
        options.onProgress?.(done, reply.result, reply.id);
        if (done === tasks.length) finish();
        else feed(slot);
      };
      w.ready.then(() => finished || w.run(id, tasks[id].config), () => {});
    };
    for (const slot of slots) feed(slot);

    if (options.plugin !== undefined) {
      watchdog = setInterval(() => {
        const now = performance.now();
        for (const w of all) {
          if (w.plugin === undefined) continue;
          const verdict = watchdogVerdict(w, now, timeoutMs);
          if (verdict) return finish(verdict);
        }
        const verdict = memoryVerdict(options.plugin!);
        if (verdict) finish(verdict);
      }, pollIntervalMs(timeoutMs));
    }
  });
}
