/**
 * @module
 * The watchdog of a process that runs a router plugin: a Worker of its own
 * (scenarios/workers/plugin_watchdog_worker.ts) that, on its own timer, checks the
 * process's memory against the plugin budget, the plugin Workers' watch
 * buffers against the plugin timeout and, for a command-line tool, that the
 * main thread still runs — and ends the process with one line when the main
 * thread cannot (the evidence is in design.md, "Router plugins").
 */
import { errorFromData, type errorToData, SimulationError } from "../../actors/runtime/simulation_error.ts";
import { processNowMs, type WatchedPlugin } from "./worker_watch.ts";
import { UsageError } from "../cli/usage_error.ts";

/**
 * Resident memory above which a process running a plugin is stopped: below
 * the 4 GiB heap limit of a Worker, at which V8 would abort the whole process
 * with a crash dump instead of a one-line message.
 */
export const PLUGIN_MEMORY_BUDGET_BYTES = 3 * 2 ** 30;

/**
 * The environment variable that lowers (or raises) the budget, in MiB — for
 * tests, which must not fill gigabytes on a shared machine. Read only where
 * the process may read it (`--allow-env=PLUGIN_MEMORY_BUDGET_MB`); the tasks
 * may not, so users get {@linkcode PLUGIN_MEMORY_BUDGET_BYTES}.
 */
export const MEMORY_BUDGET_ENV = "PLUGIN_MEMORY_BUDGET_MB";

/**
 * The memory budget of a plugin run, bytes: {@linkcode MEMORY_BUDGET_ENV}
 * when this process may read it and it is set, else {@linkcode PLUGIN_MEMORY_BUDGET_BYTES}.
 * @throws {UsageError} when the variable is set but not a number > 0.
 */
export function pluginMemoryBudgetBytes(): number {
  if (Deno.permissions.querySync({ name: "env", variable: MEMORY_BUDGET_ENV }).state !== "granted") {
    return PLUGIN_MEMORY_BUDGET_BYTES;
  }
  const raw = Deno.env.get(MEMORY_BUDGET_ENV);
  if (raw === undefined) return PLUGIN_MEMORY_BUDGET_BYTES;
  const mib = Number(raw);
  if (raw.trim() === "" || !(mib > 0) || mib === Infinity) {
    throw new UsageError(`${MEMORY_BUDGET_ENV}: expected a number of MiB > 0, got "${raw}"`);
  }
  return mib * 2 ** 20;
}

/** How a plugin is named in errors: `router (plugin NAME)`, or `router (plugin NAME for the prefill pool)`. */
export function pluginActor(
  plugin: { readonly path: string; readonly name?: string; readonly pool?: string },
): string {
  return `router (plugin ${plugin.name ?? plugin.path}${plugin.pool ? ` for the ${plugin.pool} pool` : ""})`;
}

/** A plugin as the watchdog names it. */
export function watchedPlugin(
  plugin: { readonly path: string; readonly name?: string; readonly pool?: string },
): WatchedPlugin {
  return { path: plugin.path, name: plugin.name, actor: pluginActor(plugin) };
}

/** The memory verdict: a `resource_exhausted` error when this process is over `budgetBytes`. */
export function memoryVerdict(plugin: WatchedPlugin, budgetBytes: number): SimulationError | undefined {
  const rss = Deno.memoryUsage().rss;
  if (rss <= budgetBytes) return undefined;
  return new SimulationError(
    "resource_exhausted",
    `the process running plugin ${plugin.name ?? plugin.path} used ${
      (rss / 2 ** 20).toFixed(0)
    } MB, over the ${(budgetBytes / 2 ** 20).toFixed(0)} MB budget of a plugin run`,
    { actor: plugin.actor },
  );
}

/** Main thread → watchdog. */
export type WatchdogCommand =
  | {
    readonly type: "start";
    /** The plugin the process runs, for the memory and stall verdicts. */
    readonly plugin: WatchedPlugin;
    /** Resident memory above which the run fails, bytes. */
    readonly budgetBytes: number;
    /** Wall ms between looks. */
    readonly pollMs: number;
    /** The main thread's {@linkcode Heartbeat}, when a stall of `stallMs` is a verdict. */
    readonly heartbeat: SharedArrayBuffer;
    readonly stallMs?: number;
    /** Ends the process `graceMs` after a verdict the main thread has not taken, `linePrefix` and the verdict on stderr first. */
    readonly lastResort?: { readonly linePrefix: string; readonly graceMs: number };
  }
  | {
    readonly type: "watch";
    readonly id: number;
    /** A plugin Worker's watch buffer (see scenarios/workers/worker_watch.ts). */
    readonly buffer: SharedArrayBuffer;
    readonly plugin: WatchedPlugin;
    readonly timeoutMs: number;
  }
  | { readonly type: "unwatch"; readonly id: number };

/** Watchdog → main thread: the first failure it saw, as data. */
export interface WatchdogVerdict {
  readonly type: "verdict";
  readonly error: ReturnType<typeof errorToData>;
}

/**
 * Shared by the main thread and the watchdog: when the main thread last ran a
 * timer ({@linkcode processNowMs}), and whether it has taken the verdict.
 */
export class Heartbeat {
  readonly #time: Float64Array;
  readonly #taken: Int32Array;
  constructor(readonly buffer: SharedArrayBuffer = new SharedArrayBuffer(16)) {
    this.#time = new Float64Array(buffer, 0, 1);
    this.#taken = new Int32Array(buffer, 8, 1);
  }
  /** Main thread: alive now. */
  beat(): void {
    this.#time[0] = processNowMs();
  }
  /** Main thread: it has the verdict. */
  take(): void {
    Atomics.store(this.#taken, 0, 1);
  }
  /** When the main thread last beat. */
  lastBeatMs(): number {
    return this.#time[0];
  }
  /** Whether the main thread has taken the verdict. */
  taken(): boolean {
    return Atomics.load(this.#taken, 0) === 1;
  }
}

/** Options for {@linkcode PluginWatchdog}. */
export interface PluginWatchdogOptions {
  /** The plugin the process runs. */
  readonly plugin: WatchedPlugin;
  /** Called in this thread with the first verdict; the watchdog then looks no more. */
  readonly onVerdict: (error: SimulationError) => void;
  /** Resident memory above which the run fails, bytes. @default pluginMemoryBudgetBytes() */
  readonly budgetBytes?: number;
  /** Wall ms between looks. @default 100 */
  readonly pollMs?: number;
  /** Wall ms the main thread may go without running a timer before that is a verdict. @default never */
  readonly stallMs?: number;
  /**
   * For a command-line tool, whose `onVerdict` ends the process: when the
   * process still runs `graceMs` after a verdict, the watchdog ends it
   * (SIGKILL: exit status 137), first writing `linePrefix` and the verdict's
   * message to stderr if this thread never took the verdict (a thread kept
   * busy cannot). @default none
   */
  readonly lastResort?: { readonly linePrefix: string; readonly graceMs?: number };
}

/** Wall ms between two beats of the main thread's heartbeat. */
const BEAT_MS = 100;

/**
 * A watchdog Worker and its handle in this thread. Give it the watch buffers
 * of plugin Workers to judge ({@linkcode PluginWatchdog.watch}); it always
 * judges memory. {@linkcode PluginWatchdog.stop} ends it (a live Worker keeps
 * the process alive).
 */
export class PluginWatchdog {
  readonly #worker: Worker;
  readonly #heartbeat = new Heartbeat();
  readonly #beat: ReturnType<typeof setInterval> | undefined;
  #ids = 0;
  #stopped = false;

  constructor(options: PluginWatchdogOptions) {
    this.#worker = new Worker(new URL("./plugin_watchdog_worker.ts", import.meta.url), {
      type: "module",
      name: "plugin watchdog",
      deno: { permissions: "none" },
    });
    this.#worker.onmessage = (event: MessageEvent<WatchdogVerdict>) => {
      if (this.#stopped || event.data?.type !== "verdict") return;
      this.#heartbeat.take();
      // A command-line tool's verdict ends the process: should it not, the watchdog does, graceMs later.
      if (options.lastResort === undefined) this.stop();
      const error = errorFromData(event.data.error);
      options.onVerdict(
        error instanceof SimulationError ? error : new SimulationError("actor_threw", error.message),
      );
    };
    this.#worker.onerror = (event) => {
      event.preventDefault();
      this.stop();
      options.onVerdict(
        new SimulationError("worker_crashed", `the plugin watchdog failed: ${event.message}`, {
          actor: options.plugin.actor,
        }),
      );
    };
    this.#heartbeat.beat();
    if (options.stallMs !== undefined) {
      const beat = setInterval(() => this.#heartbeat.beat(), BEAT_MS);
      Deno.unrefTimer(beat);
      this.#beat = beat;
    }
    this.#worker.postMessage(
      {
        type: "start",
        plugin: options.plugin,
        budgetBytes: options.budgetBytes ?? pluginMemoryBudgetBytes(),
        pollMs: options.pollMs ?? 100,
        heartbeat: this.#heartbeat.buffer,
        stallMs: options.stallMs,
        lastResort: options.lastResort && {
          linePrefix: options.lastResort.linePrefix,
          graceMs: options.lastResort.graceMs ?? 2000,
        },
      } satisfies WatchdogCommand,
    );
  }

  /**
   * Judges one plugin Worker by its watch buffer: loading, starting a run,
   * progress and each decision, against `timeoutMs`.
   * @returns the id that {@linkcode PluginWatchdog.unwatch} takes.
   */
  watch(buffer: SharedArrayBuffer, plugin: WatchedPlugin, timeoutMs: number): number {
    const id = this.#ids++;
    if (!this.#stopped) {
      this.#worker.postMessage({ type: "watch", id, buffer, plugin, timeoutMs } satisfies WatchdogCommand);
    }
    return id;
  }

  /** Stops judging the Worker `id` (it was terminated). */
  unwatch(id: number): void {
    if (!this.#stopped) this.#worker.postMessage({ type: "unwatch", id } satisfies WatchdogCommand);
  }

  /** Ends the watchdog. Safe to call more than once. */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    clearInterval(this.#beat);
    this.#worker.terminate();
  }
}

/** Options for {@linkcode watchPluginProcess}. */
export interface WatchPluginProcessOptions {
  /** What the one line starts with, such as `run failed: ` or `serve: `. @default "run failed: " */
  readonly linePrefix?: string;
  /**
   * Called in this thread with the verdict; it must end the process (the
   * watchdog does, `graceMs` later, if it does not). @default writes the line
   * (`linePrefix` and the verdict's message) to stderr and exits 1
   */
  readonly onVerdict?: (error: SimulationError) => void;
  /** Resident memory above which the process is stopped, bytes. @default pluginMemoryBudgetBytes() */
  readonly budgetBytes?: number;
  /** Wall ms the main thread may go without running a timer (kept busy by a flood) before the process is stopped. @default 10000 */
  readonly stallMs?: number;
  /** Wall ms the main thread has to take a verdict before the watchdog ends the process itself. @default 2000 */
  readonly graceMs?: number;
  /** Wall ms between looks. @default 100 */
  readonly pollMs?: number;
}

/**
 * Watches a process that runs `plugin` (from its load to its exit): past the
 * memory budget, or with its main thread kept busy past `stallMs`, the
 * process ends with one line on stderr, `linePrefix` then the verdict
 * (`resource_exhausted: the process running plugin NAME used 3100 MB, over
 * the 3072 MB budget of a plugin run (actor router (plugin NAME))`), and exit
 * status 1 — or 137 when the main thread cannot take the verdict and the
 * watchdog ends the process itself.
 *
 * @example
 * ```ts ignore
 * const watchdog = watchPluginProcess(plugin, { linePrefix: "serve: " });
 * // … serve until a signal …
 * watchdog.stop();
 * ```
 */
export function watchPluginProcess(
  plugin: { readonly path: string; readonly name?: string; readonly pool?: string },
  options: WatchPluginProcessOptions = {},
): PluginWatchdog {
  const linePrefix = options.linePrefix ?? "run failed: ";
  return new PluginWatchdog({
    plugin: watchedPlugin(plugin),
    budgetBytes: options.budgetBytes,
    pollMs: options.pollMs,
    stallMs: options.stallMs ?? 10_000,
    lastResort: { linePrefix, graceMs: options.graceMs },
    onVerdict: options.onVerdict ?? ((error) => {
      console.error(`${linePrefix}${error.message.replace(/\s*\n\s*/g, " / ")}`);
      Deno.exit(1);
    }),
  });
}
