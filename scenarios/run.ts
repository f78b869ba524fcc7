/**
 * @module
 * `deno task run`: simulate one scenario and print a table (or JSON).
 */
import { expectedRequests, runProgress } from "./cli/run_progress.ts";
import { formatReport, skippedLinesNotice } from "./report/run_report.ts";
import { callerDirectory } from "./cli/caller_directory.ts";
import { loadRouterPlugin, poolPluginJson, withPoolPluginLine } from "./workers/router_plugin.ts";
import { runPluginScenario, runScenario } from "./workers/run_scenario.ts";
import { watchPluginProcess } from "./workers/plugin_watchdog.ts";
import {
  parseFlags,
  pluginFlag,
  pluginTimeoutMs,
  runCommand,
  SCENARIO_FLAGS_HELP,
  SCENARIO_OPTIONS,
  scenarioFromFlags,
} from "./scenario/command_line.ts";

const HELP = `Usage: deno task run [flags]

Simulates one scenario under the virtual clock and prints its metrics. A run
longer than a second shows its progress on stderr: a bar on a terminal, else
(with --progress) a line every ten seconds.

${SCENARIO_FLAGS_HELP}
  --progress             show progress on stderr even when it is not a terminal`;

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, { ...SCENARIO_OPTIONS, progress: { type: "boolean" } });
    if (values.help) {
      console.log(HELP);
      return;
    }
    const { config, typedTracePath } = await scenarioFromFlags(values);
    const timeoutMs = pluginTimeoutMs(values);
    const named = pluginFlag(values);
    const plugin = named && await loadRouterPlugin(named.path, {
      timeoutMs,
      baseDir: callerDirectory(),
      flag: named.flag,
      pool: named.pool,
    });
    // Memory and a main thread kept busy, watched from a Worker of its own (scenarios/workers/plugin_watchdog.ts).
    const watchdog = plugin && watchPluginProcess(plugin);
    const terminal = Deno.stderr.isTerminal();
    const progress = terminal || values.progress
      ? runProgress(expectedRequests(config), terminal)
      : undefined;
    const report = plugin
      ? await runPluginScenario(config, plugin, timeoutMs)
      : runScenario(config, progress && ((p) => progress.update(p)));
    progress?.stop();
    const skipped = skippedLinesNotice(report, typedTracePath);
    if (skipped) console.error(`run: ${skipped}`);
    console.log(
      values.json
        ? JSON.stringify({ ...report, ...poolPluginJson(plugin) }, null, 2)
        : withPoolPluginLine(formatReport(report), plugin),
    );
    if (watchdog) {
      // A Worker running a plugin's code cannot always be terminated (a loop,
      // endless promise callbacks) and would keep the process alive: end it.
      watchdog.stop();
      Deno.exit(0);
    }
  });
}
