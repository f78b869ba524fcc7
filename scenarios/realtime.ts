/**
 * @module
 * `deno task realtime`: one scenario with the source, the router and each
 * instance in their own Worker, paced by the wall clock at `--speed`, with a
 * live terminal view; ends with the same summary as `deno task run` plus the
 * lag figures.
 */
import { type LiveHandles, type RealtimeResult, simulateRealtime } from "../actors/realtime_simulation.ts";
import {
  numberFlag,
  parseFlags,
  pluginFlag,
  pluginTimeoutMs,
  runCommand,
  SCENARIO_FLAGS_HELP,
  SCENARIO_OPTIONS,
  scenarioFromFlags,
} from "./scenario/command_line.ts";
import { policyLabel } from "../actors/policies/mod.ts";
import type { SimulationConfig } from "../actors/simulation.ts";
import type { TraceOptions } from "../actors/traces/trace_reader.ts";
import { openTrace } from "../actors/traces/trace_source.ts";
import { LiveView } from "./report/live_view.ts";
import { callerDirectory } from "./cli/caller_directory.ts";
import { plural } from "./cli/plural.ts";
import { loadRouterPlugin, poolPluginJson, withPoolPluginLine } from "./workers/router_plugin.ts";
import { formatMetric, formatReport, type RunReport, skippedLinesNotice } from "./report/run_report.ts";
import { UsageError } from "./cli/usage_error.ts";
import { watchPluginProcess } from "./workers/plugin_watchdog.ts";
import { systemWallTime } from "./cli/wall_time.ts";

const HELP = `Usage: deno task realtime [flags]

Runs one scenario in real time: source, router and instances in their own
Deno Workers, the central clock paced at --speed simulated ms per wall ms.

  --speed X              simulated ms per wall ms (default 5; 1 is real time)
  --lag-tolerance-ms N   warn when the p99 delivery lag exceeds this (default 50)
  --handler-timeout-ms N fail when an actor takes longer to handle a message (default 5000)

${SCENARIO_FLAGS_HELP}`;

const OPTIONS = {
  ...SCENARIO_OPTIONS,
  speed: { type: "string" },
  "lag-tolerance-ms": { type: "string" },
  "handler-timeout-ms": { type: "string" },
} as const;

/** The longest wall time a real-time run may need, ms: 2^31 − 1 (≈ 24.9 days), the longest JavaScript timer. */
export const MAX_REALTIME_WALL_MS = 2 ** 31 - 1;

/**
 * The smallest `--speed` at which `config` can end within
 * {@linkcode MAX_REALTIME_WALL_MS} of wall time: the simulated span of its
 * arrivals — a trace's, read through once; requests / rate for a synthetic
 * workload (session starts only, with sessions) — capped by `untilMs`, at
 * least 1 ms, over that limit. A lower bound: service after the last arrival
 * only adds to it.
 */
export function minimumSpeed(config: SimulationConfig, scan?: TraceScan): number {
  const w = config.workload;
  const arrivalsMs = w.trace !== undefined
    ? (scan ?? scanTrace(w.trace)).spanMs
    : (1000 * w.requests) / w.ratePerSec / (w.sessions?.turnsMean ?? 1);
  return Math.max(1, Math.min(arrivalsMs, config.untilMs ?? Infinity)) / MAX_REALTIME_WALL_MS;
}

/** What one read through a trace found: its span and the malformed lines it skipped. */
interface TraceScan {
  /** Simulated ms from the first arrival to the last (after `speed` and `maxRequests`). */
  readonly spanMs: number;
  /** Malformed lines skipped (only with `skipInvalid`). */
  readonly skipped: number;
}

/**
 * Reads `trace` through once. The run's trace source reads it in the
 * source's Worker, which does not report its skipped lines; this read, over
 * the same lines and cap, counts them for the report.
 */
function scanTrace(trace: TraceOptions): TraceScan {
  const reader = openTrace(trace);
  try {
    let last = 0;
    for (let r = reader.next(); r; r = reader.next()) last = r.arrivalMs;
    return { spanMs: last, skipped: reader.skipped };
  } finally {
    reader.close();
  }
}

/**
 * `--speed` checked against the scenario: a speed so small that the run
 * cannot end (see {@linkcode minimumSpeed}) is a usage error.
 */
function checkSpeed(
  speed: number,
  raw: string | undefined,
  config: SimulationConfig,
  scan?: TraceScan,
): void {
  const minimum = minimumSpeed(config, scan);
  if (speed >= minimum) return;
  throw new UsageError(
    `--speed: expected a number >= ${minimum.toPrecision(3)} for this scenario ` +
      `(slower, it would need more than ${
        (MAX_REALTIME_WALL_MS / 86_400_000).toFixed(1)
      } days of wall time), got "${raw}"`,
  );
}

/** The end-of-run lag lines, with a warning when the speed was too high. */
export function formatLag(result: RealtimeResult, toleranceMs: number): string {
  const { lag } = result;
  const lines = [
    `  lag           p50 ${lag.p50Ms.toFixed(2)} ms · p99 ${lag.p99Ms.toFixed(2)} ms · max ${
      lag.maxMs.toFixed(2)
    } ms wall behind schedule` +
    ` (${plural(lag.deliveries, "delivery", "deliveries")} at speed ${result.speed}×)`,
  ];
  if (lag.p99Ms > toleranceMs) {
    lines.push(
      `warning: p99 lag ${
        lag.p99Ms.toFixed(1)
      } ms exceeds the ${toleranceMs} ms tolerance: speed ${result.speed}× is too high for this machine; ` +
        `results are still exact (stamps are kept), but the run is not real time`,
    );
  }
  return lines.join("\n");
}

/** The parsed flags of `deno task realtime`. */
type RealtimeFlags = ReturnType<typeof parseFlags<typeof OPTIONS>>["values"];

/** What `deno task realtime` is asked to run: its settings, scenario and plugin, checked. */
async function realtimeSettings(values: RealtimeFlags) {
  const speed = numberFlag("--speed", values.speed, 5);
  const tolerance = numberFlag("--lag-tolerance-ms", values["lag-tolerance-ms"], 50);
  const handlerTimeoutMs = numberFlag("--handler-timeout-ms", values["handler-timeout-ms"], 5000);
  const { config, typedTracePath } = await scenarioFromFlags(values);
  const scan = config.workload.trace === undefined ? undefined : scanTrace(config.workload.trace);
  checkSpeed(speed, values.speed, config, scan);
  const pluginTimeout = pluginTimeoutMs(values);
  const named = pluginFlag(values);
  const plugin = named && await loadRouterPlugin(named.path, {
    timeoutMs: pluginTimeout,
    baseDir: callerDirectory(),
    flag: named.flag,
    pool: named.pool,
  });
  const skipped = { count: scan?.skipped ?? 0, tracePath: typedTracePath };
  return { speed, tolerance, handlerTimeoutMs, config, pluginTimeout, plugin, skipped };
}

/** The one line an interrupted run ends with: how long it ran and what it had measured. */
function interruptedLine(live: LiveHandles | undefined, wallMs: number): string {
  const s = live?.metrics.summary();
  return `interrupted after ${(wallMs / 1000).toFixed(1)} s wall: ${s?.completed ?? 0} requests completed, ` +
    `TTFT mean ${formatMetric(s?.ttftMeanMs ?? null, 1, " ms")}, p99 ${
      formatMetric(s?.ttftP99Ms ?? null, 1, " ms")
    }, hit rate ${formatMetric(s?.hitRate ?? null, 3)}; every Worker terminated`;
}

/**
 * The run's report, with the malformed lines `scanTrace` counted before the
 * run (the source's Worker does not count them), noted on stderr with
 * `--skip-invalid` under the trace's path as the user typed it.
 */
function realtimeReport(
  result: RealtimeResult,
  config: SimulationConfig,
  skipped: { readonly count: number; readonly tracePath?: string },
  wallMs: number,
): RunReport {
  const report = { ...result, skippedInvalid: skipped.count, wallMs, scenario: config };
  const notice = skippedLinesNotice(report, skipped.tracePath);
  if (notice) console.error(`realtime: ${notice}`);
  return report;
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    const { speed, tolerance, handlerTimeoutMs, config, pluginTimeout, plugin, skipped } =
      await realtimeSettings(values);

    const name = plugin?.pool
      ? `${policyLabel(config.policy)} · ${plugin.pool} plugin ${plugin.name}`
      : plugin
      ? `plugin ${plugin.name}`
      : policyLabel(config.policy);
    const view = new LiveView(
      config.instances.count,
      config.workload.requests,
      `realtime · ${name} · speed ${speed}×`,
    );
    const terminal = Deno.stderr.isTerminal();
    const encoder = new TextEncoder();
    const write = (text: string) => Deno.stderr.writeSync(encoder.encode(text));
    const abort = new AbortController();
    const onInterrupt = () => abort.abort();
    Deno.addSignalListener("SIGINT", onInterrupt);
    let live: LiveHandles | undefined;
    const start = performance.now();
    const timer = setInterval(
      () => live && !values.json && view.draw(write, terminal, performance.now() - start, live.lag().p99Ms),
      terminal ? 250 : 2000,
    );
    // The router's Worker runs the plugin: past the memory budget, end the run in one line
    // before V8 aborts the whole process with a crash dump (scenarios/workers/plugin_watchdog.ts).
    const watchdog = plugin && watchPluginProcess(plugin);
    try {
      const result = await simulateRealtime(config, {
        speed,
        wallTime: systemWallTime,
        pluginUrl: plugin?.url,
        pluginPool: plugin?.pool,
        // A pool's plugin leaves the run's policy its own name.
        policyName: plugin?.pool ? undefined : plugin?.name,
        pluginTimeoutMs: pluginTimeout,
        pluginReadPaths: plugin?.readPaths,
        onDeliver: view.observe,
        signal: abort.signal,
        handlerTimeoutMs,
        onStart: (handles) => {
          live = handles;
          view.attach(handles.metrics);
        },
      });
      clearInterval(timer);
      const report = realtimeReport(result, config, skipped, performance.now() - start);
      console.log(
        values.json
          ? JSON.stringify({ ...report, ...poolPluginJson(plugin) }, null, 2)
          : `${withPoolPluginLine(formatReport(report), plugin)}\n${formatLag(result, tolerance)}`,
      );
      if (watchdog) {
        // The router's Worker, running the plugin's code, cannot always be
        // terminated (a loop, endless promise callbacks): end the process.
        watchdog.stop();
        Deno.exit(0);
      }
    } catch (error) {
      clearInterval(timer);
      if (error instanceof DOMException && error.name === "AbortError") {
        console.error(interruptedLine(live, performance.now() - start));
        Deno.exit(130);
      }
      throw error;
    } finally {
      Deno.removeSignalListener("SIGINT", onInterrupt);
    }
  });
}
