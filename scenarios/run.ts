/**
 * @module
 * `deno task run`: simulate one scenario and print a table (or JSON).
 */
import { type RunProgress, simulate, type SimulationConfig } from "../actors/simulation.ts";
import { expectedRequests, runProgress } from "./run_progress.ts";
import { formatReport, type RunReport } from "./run_report.ts";
import { callerDirectory } from "./caller_directory.ts";
import { loadRouterPlugin, type RouterPlugin } from "./router_plugin.ts";
import { runOnWorkers } from "./worker_pool.ts";
import {
  configFromFlags,
  parseFlags,
  pluginTimeoutMs,
  runCommand,
  SCENARIO_FLAGS_HELP,
  SCENARIO_OPTIONS,
} from "./command_line.ts";

const HELP = `Usage: deno task run [flags]

Simulates one scenario under the virtual clock and prints its metrics. A run
longer than a second shows its progress on stderr: a bar on a terminal, else
(with --progress) a line every ten seconds.

${SCENARIO_FLAGS_HELP}
  --progress             show progress on stderr even when it is not a terminal`;

/** Simulates `config` with its built-in policy, in this thread, and times it. */
export function runScenario(
  config: SimulationConfig,
  onProgress?: (progress: RunProgress) => void,
): RunReport {
  const start = performance.now();
  const result = simulate(config, { onProgress });
  return { ...result, wallMs: performance.now() - start, scenario: config };
}

/**
 * Simulates `config` with a router plugin, in a sandboxed Worker watched for
 * hangs (see scenarios/worker_pool.ts); `wallMs` is the simulation's time there.
 */
export async function runPluginScenario(
  config: SimulationConfig,
  plugin: RouterPlugin,
  timeoutMs: number,
): Promise<RunReport> {
  let wallMs = 0;
  const [result] = await runOnWorkers([{ config, pluginUrl: plugin.url }], {
    workers: 1,
    plugin,
    pluginTimeoutMs: timeoutMs,
    readPaths: config.workload.trace?.path !== undefined ? [config.workload.trace.path] : [],
    onWallMs: (_, ms) => wallMs = ms,
  });
  return { ...result, wallMs, scenario: config };
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, { ...SCENARIO_OPTIONS, progress: { type: "boolean" } });
    if (values.help) {
      console.log(HELP);
      return;
    }
    const config = await configFromFlags(values);
    const timeoutMs = pluginTimeoutMs(values);
    const plugin = values.router
      ? await loadRouterPlugin(values.router, { timeoutMs, baseDir: callerDirectory() })
      : undefined;
    const terminal = Deno.stderr.isTerminal();
    const progress = terminal || values.progress
      ? runProgress(expectedRequests(config), terminal)
      : undefined;
    const report = plugin
      ? await runPluginScenario(config, plugin, timeoutMs)
      : runScenario(config, progress && ((p) => progress.update(p)));
    progress?.stop();
    console.log(values.json ? JSON.stringify(report, null, 2) : formatReport(report));
  });
}
