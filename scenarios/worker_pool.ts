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
import type { PoolRole } from "../actors/instance_model.ts";
import type { RunResult, SimulationConfig } from "../actors/simulation.ts";
import {
  type ErrorData,
  errorFromData,
  type ErrorReviver,
  SIMULATION_ERROR_KINDS,
  SimulationError,
  type SimulationErrorKind,
} from "../actors/runtime/simulation_error.ts";
import { NO_PERMISSIONS } from "../actors/runtime/worker_runtime.ts";
import { reviveTraceFormatError, TraceFormatError, TraceReader } from "../actors/trace_reader.ts";
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
  /** The flag that named it, for a load failure's message. @default "--router" */
  readonly flag?: string;
  /**
   * The one pool of a disaggregated fleet it routes (the other keeps its
   * built-in policy). @default every pool without a policy of its own
   */
  readonly pool?: Exclude<PoolRole, "both">;
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

  /**
   * @param loadFailure What a plugin's failure to load here is: a usage error
   *   in the host's load check, the plugin's own failure in a pool
   *   ({@linkcode poolLoadError}).
   */
  constructor(
    readonly plugin: SandboxPlugin | undefined,
    readPaths: readonly string[],
    loadFailure: (plugin: SandboxPlugin, message: string) => Error = poolLoadError,
  ) {
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
          reject(loadFailure(plugin!, String(reply.message).split("\n")[0]));
        }
      };
      this.worker.onerror = (event) => {
        event.preventDefault();
        const message = event.message.replace(/^Uncaught (\(in promise\) )?/, "");
        if (!this.loaded) {
          reject(
            plugin
              ? loadFailure(plugin, message)
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
        pluginPool: plugin?.pool,
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
  return new UsageError(`${plugin.flag ?? "--router"}: "${plugin.path}" ${what}: ${message}`);
}

/**
 * A plugin that passed the host's load check (every tool loads it there
 * first) but fails to load in a pool's Worker — where, unlike the check, it
 * may read the run's trace — fails its run: exit 1, never a usage error of
 * its choosing.
 */
function poolLoadError(plugin: SandboxPlugin, message: string): SimulationError {
  return new SimulationError("actor_threw", `could not start in its simulation Worker: ${message}`, {
    actor: pluginActor(plugin),
  });
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

/** How a plugin is named in errors: `router (plugin NAME)`, or `router (plugin NAME for the prefill pool)`. */
function pluginActor(plugin: SandboxPlugin): string {
  return `router (plugin ${plugin.name ?? plugin.path}${plugin.pool ? ` for the ${plugin.pool} pool` : ""})`;
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
  const w = new SimulationWorker(plugin, [], loadError);
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

/** Classes of the errors a run may throw that the runtime's {@linkcode errorFromData} cannot import. */
const REVIVERS: Readonly<Record<string, ErrorReviver>> = {
  TraceFormatError: reviveTraceFormatError,
  UsageError: ({ message }) => new UsageError(message),
};

/** Errors whose message names what the user got wrong (a file, a line, a flag), as `run` prints them: no run number. */
function namesItsCause(data: ErrorData): boolean {
  return data.name === "TraceFormatError" || data.name === "UsageError" ||
    typeof data.fields.code === "string"; // a file-system error
}

/**
 * The error a Worker's "error" reply stands for, of the class the run threw,
 * so that the command-line tools print it and exit as `run` does in-process.
 * Among many runs (a sweep), a run failure or an internal error names the
 * run; a malformed trace or a missing file names the file instead.
 */
function replyError(
  reply: Extract<SimulationWorkerReply, { type: "error" }>,
  task: PoolTask,
  plugin: SandboxPlugin | undefined,
  nameRun: boolean,
): Error {
  let data = plugin ? vouchedFor(reply.error, task.config, plugin) : reply.error;
  if (nameRun && data.name === "SimulationError") {
    data = { ...data, fields: { ...data.fields, detail: `run ${reply.id}: ${data.fields.detail}` } };
  } else if (nameRun && !namesItsCause(data)) {
    data = { ...data, message: `run ${reply.id}: ${data.message}` };
  }
  return errorFromData(data, REVIVERS);
}

/**
 * What a plugin's Worker reports, kept to what the host can vouch for: its
 * code ran beside the plugin's, so the failure is the plugin's run failure
 * (a {@linkcode SimulationError}, the router named as the plugin), and a
 * malformed-trace error (exit 2, the user's fault) stands only when reading
 * the trace here fails the same way.
 */
function vouchedFor(data: ErrorData, config: SimulationConfig, plugin: SandboxPlugin): ErrorData {
  const isRunFailure = data.name === "SimulationError" && typeof data.fields.detail === "string" &&
    SIMULATION_ERROR_KINDS.includes(data.fields.kind as SimulationErrorKind);
  const top = isRunFailure ? data : {
    name: "SimulationError",
    message: data.message,
    fields: { kind: "actor_threw", detail: data.message },
    cause: data,
  };
  const actor = top.fields.actor === "router" ? pluginActor(plugin) : top.fields.actor;
  const vouched = (d: ErrorData | undefined): ErrorData | undefined =>
    d &&
    (d.name === "TraceFormatError" && !traceFailsWith(config, d.message)
      ? { name: "Error", message: d.message, fields: {}, cause: vouched(d.cause) }
      : { ...d, cause: vouched(d.cause) });
  return {
    ...top,
    fields: actor === undefined ? top.fields : { ...top.fields, actor },
    cause: vouched(top.cause),
  };
}

/** Whether reading `config`'s trace file fails with `message` (a trace error's text). */
function traceFailsWith(config: SimulationConfig, message: string): boolean {
  const trace = config.workload.trace;
  if (trace?.path === undefined) return false;
  let reader: TraceReader | undefined;
  try {
    reader = new TraceReader(trace);
    while (reader.next() !== undefined);
    return false;
  } catch (error) {
    return error instanceof TraceFormatError && error.message === message;
  } finally {
    reader?.close();
  }
}

/** One place in the pool: a Worker for built-in policies' runs and one for the plugin's, each started on first use. */
interface PoolSlot {
  plain?: SimulationWorker;
  plugin?: SimulationWorker;
}

/** One call of {@linkcode runOnWorkers}: its tasks, its Workers (two kinds per slot) and how far it got. */
class PoolRun {
  readonly results: RunResult[];
  readonly #all: SimulationWorker[] = [];
  readonly #slots: PoolSlot[];
  #next = 0;
  #done = 0;
  #finished = false;
  #watchdog: ReturnType<typeof setInterval> | undefined;
  readonly #onAbort = () => this.finish(new DOMException("sweep interrupted", "AbortError"));

  constructor(
    readonly tasks: readonly PoolTask[],
    readonly options: WorkerPoolOptions,
    readonly resolve: (results: RunResult[]) => void,
    readonly reject: (error: Error) => void,
  ) {
    const size = Math.max(1, Math.min(options.workers ?? navigator.hardwareConcurrency, tasks.length));
    this.results = new Array<RunResult>(tasks.length);
    this.#slots = Array.from({ length: size }, () => ({}));
  }

  /** Starts every slot on a first task, and the watchdog when there is a plugin. */
  start(): void {
    const signal = this.options.signal;
    signal?.addEventListener("abort", this.#onAbort);
    if (signal?.aborted) return this.#onAbort();
    if (this.tasks.length === 0) return this.finish();
    for (const slot of this.#slots) this.#feed(slot);
    const plugin = this.options.plugin;
    if (plugin !== undefined) {
      const timeoutMs = this.options.pluginTimeoutMs ?? DEFAULT_PLUGIN_TIMEOUT_MS;
      this.#watchdog = setInterval(() => {
        const now = performance.now();
        for (const w of this.#all) {
          const verdict = w.plugin && watchdogVerdict(w, now, timeoutMs);
          if (verdict) return this.finish(verdict);
        }
        const verdict = memoryVerdict(plugin);
        if (verdict) this.finish(verdict);
      }, pollIntervalMs(timeoutMs));
    }
  }

  /** Ends the call once: every Worker terminated, then the results or the error. */
  finish(error?: Error): void {
    if (this.#finished) return;
    this.#finished = true;
    clearInterval(this.#watchdog);
    for (const w of this.#all) w.terminate();
    this.options.signal?.removeEventListener("abort", this.#onAbort);
    if (error) this.reject(error);
    else this.resolve(this.results);
  }

  /** The slot's Worker of the kind the task needs, started on first use. */
  #workerFor(slot: PoolSlot, plugin: boolean): SimulationWorker {
    const key = plugin ? "plugin" : "plain";
    const existing = slot[key];
    if (existing) return existing;
    if (plugin && this.options.plugin === undefined) {
      throw new TypeError("a task names a plugin but the pool has none");
    }
    const w = new SimulationWorker(plugin ? this.options.plugin : undefined, this.options.readPaths ?? []);
    w.ready.catch((error) => this.finish(error));
    w.onCrash = (message) => {
      const actor = w.plugin ? pluginActor(w.plugin) : "simulation Worker";
      this.finish(new SimulationError("worker_crashed", message, { actor }));
    };
    this.#all.push(w);
    slot[key] = w;
    return w;
  }

  /** Gives the slot's Worker the next task, if any. */
  #feed(slot: PoolSlot): void {
    if (this.#finished || this.#next >= this.tasks.length) return;
    const id = this.#next++;
    const w = this.#workerFor(slot, this.tasks[id].pluginUrl !== undefined);
    w.onReply = (reply) => this.#onReply(slot, w, reply);
    w.ready.then(() => this.#finished || w.run(id, this.tasks[id].config), () => {});
  }

  #onReply(slot: PoolSlot, w: SimulationWorker, reply: SimulationWorkerReply): void {
    if (this.#finished) return;
    // One answer per run given, for that run, of the right shape; anything else is a fault.
    if ((reply as { id?: unknown })?.id !== w.task || !(reply.type === "error" || isRunResult(reply))) {
      return this.finish(
        new SimulationError("actor_threw", `a simulation Worker answered out of turn for run ${w.task}`, {
          actor: w.plugin ? pluginActor(w.plugin) : "simulation Worker",
        }),
      );
    }
    w.task = -1;
    if (reply.type === "error") {
      return this.finish(replyError(reply, this.tasks[reply.id], w.plugin, this.tasks.length > 1));
    }
    this.results[reply.id] = reply.result;
    this.options.onWallMs?.(reply.id, reply.wallMs);
    this.#done++;
    this.options.onProgress?.(this.#done, reply.result, reply.id);
    if (this.#done === this.tasks.length) this.finish();
    else this.#feed(slot);
  }
}

/**
 * Simulates every task; `results[i]` belongs to `tasks[i]`.
 * @throws the error of the first run that fails, of the class it had in its
 *   Worker ({@linkcode SimulationError}, a trace's `TraceFormatError`, a
 *   file-system error…), or the watchdog's {@linkcode SimulationError}
 *   (`plugin_timeout`, `resource_exhausted`); every Worker is terminated. A
 *   Worker spinning in user code cannot be terminated in Deno: the caller
 *   must then end the process (the command-line tools do).
 * @throws {UsageError} when the plugin fails to load.
 */
export function runOnWorkers(
  tasks: readonly PoolTask[],
  options: WorkerPoolOptions = {},
): Promise<RunResult[]> {
  return new Promise<RunResult[]>((resolve, reject) => new PoolRun(tasks, options, resolve, reject).start());
}
