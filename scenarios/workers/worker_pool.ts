/**
 * @module
 * Runs simulations on a pool of sandboxed Deno Workers and returns the results
 * by run index — so the output never depends on which Worker ran what, or how
 * many there were. Runs of a router plugin go to Workers that load it (and
 * only those: a plugin never shares a Worker with built-in policies' runs),
 * with no permission but reading the files of its import graph; a watchdog
 * in a Worker of its own (scenarios/workers/plugin_watchdog.ts) ends the pool when
 * the plugin hangs, keeps its Worker busy or exhausts memory.
 */
import type { PoolRole } from "../../actors/instances/instance_model.ts";
import type { RunResult, SimulationConfig } from "../../actors/simulation.ts";
import {
  type ErrorData,
  errorFromData,
  type ErrorReviver,
  SIMULATION_ERROR_KINDS,
  SimulationError,
  type SimulationErrorKind,
} from "../../actors/runtime/simulation_error.ts";
import { NO_PERMISSIONS } from "../../actors/runtime/worker_runtime.ts";
import { reviveTraceFormatError, TraceFormatError, TraceReader } from "../../actors/traces/trace_reader.ts";
import type { SimulationWorkerCommand, SimulationWorkerReply } from "./simulation_worker.ts";
import { UsageError } from "../cli/usage_error.ts";
import { pluginActor, PluginWatchdog, type PluginWatchdogOptions, watchedPlugin } from "./plugin_watchdog.ts";
import { WatchSlot } from "./worker_watch.ts";

/** One run for the pool: a config and whether the pool's plugin replaces its policy. */
export interface PoolTask {
  readonly config: SimulationConfig;
  /** Run with the pool's router plugin (`WorkerPoolOptions.plugin`). */
  readonly pluginUrl?: string;
}

/** A router plugin, checked (see scenarios/workers/router_plugin.ts), for the pool to load. */
export interface SandboxPlugin {
  /** `file:` URL of the module. */
  readonly url: string;
  /** How the user named it (for messages). */
  readonly path: string;
  /** Its `name`, once known. */
  readonly name?: string;
  /** What its Worker may read: the files of its import graph (see scenarios/workers/plugin_imports.ts). */
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
  /** Resident memory above which a plugin's runs fail, bytes. @default pluginMemoryBudgetBytes() */
  readonly memoryBudgetBytes?: number;
  /**
   * For a command-line tool: let the plugin watchdog also judge a main thread
   * kept busy (`stallMs`) and end the process itself when this thread cannot
   * take its verdict (`lastResort`; see {@linkcode PluginWatchdogOptions}).
   * @default neither
   */
  readonly watchdog?: Pick<PluginWatchdogOptions, "stallMs" | "lastResort">;
}

/** One Worker of the pool, with the watch buffer its watchdog reads. */
class SimulationWorker {
  readonly worker: Worker;
  readonly watch: WatchSlot;
  readonly ready: Promise<string | undefined>;
  loaded = false;
  /** The run it is doing, -1 for none. */
  task = -1;
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
    // A plugin may not post (its Worker's postMessage throws); anything that came would land here, unread.
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
    this.watch.assign(id);
    this.#port.postMessage({ type: "run", id, config } satisfies SimulationWorkerCommand);
  }

  /** The answer to its run came. */
  answered(): void {
    this.task = -1;
    this.watch.assign(-1);
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

/**
 * Loads `plugin` in a sandboxed Worker, bounded by `timeoutMs`, and returns
 * its `name`; the Worker is then terminated.
 * @throws {UsageError} when it fails to load; {@linkcode SimulationError}
 *   (`plugin_timeout`) past the timeout.
 */
export function loadInSandbox(
  plugin: SandboxPlugin,
  timeoutMs: number,
  options: { readonly memoryBudgetBytes?: number } = {},
): Promise<string> {
  const w = new SimulationWorker(plugin, [], loadError);
  let watchdog: PluginWatchdog | undefined;
  return new Promise<string>((resolve, reject) => {
    watchdog = new PluginWatchdog({
      plugin: watchedPlugin(plugin),
      onVerdict: reject,
      pollMs: pollIntervalMs(timeoutMs),
      budgetBytes: options.memoryBudgetBytes,
    });
    watchdog.watch(w.watch.buffer, watchedPlugin(plugin), timeoutMs);
    w.onCrash = (message) => reject(loadError(plugin, message));
    w.ready.then((name) => resolve(name!), reject);
  }).finally(() => {
    watchdog?.stop();
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
  #watchdog: PluginWatchdog | undefined;
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
    const plugin = this.options.plugin;
    if (plugin !== undefined) {
      this.#watchdog = new PluginWatchdog({
        plugin: watchedPlugin(plugin),
        onVerdict: (error) => this.finish(error),
        pollMs: pollIntervalMs(this.#timeoutMs),
        budgetBytes: this.options.memoryBudgetBytes,
        ...this.options.watchdog,
      });
    }
    for (const slot of this.#slots) this.#feed(slot);
  }

  get #timeoutMs(): number {
    return this.options.pluginTimeoutMs ?? DEFAULT_PLUGIN_TIMEOUT_MS;
  }

  /** Ends the call once: every Worker terminated, then the results or the error. */
  finish(error?: Error): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#watchdog?.stop();
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
    if (w.plugin) this.#watchdog?.watch(w.watch.buffer, watchedPlugin(w.plugin), this.#timeoutMs);
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
    w.answered();
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
