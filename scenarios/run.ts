/**
 * @module
 * `deno task run`: simulate one scenario and print a table (or JSON).
 */
import type { RoutingPolicy } from "../actors/policies/policy.ts";
import { simulate, type SimulationConfig } from "../actors/simulation.ts";
import { formatReport, type RunReport } from "./run_report.ts";
import { loadRouterPlugin } from "./router_plugin.ts";
import {
  configFromFlags,
  parseFlags,
  runCommand,
  SCENARIO_FLAGS_HELP,
  SCENARIO_OPTIONS,
} from "./command_line.ts";

const HELP = `Usage: deno task run [flags]

Simulates one scenario under the virtual clock and prints its metrics.

${SCENARIO_FLAGS_HELP}`;

/** Simulates `config` (with a plugin's policy, if given) and times it. */
export function runScenario(config: SimulationConfig, policy?: RoutingPolicy): RunReport {
  const start = performance.now();
  const result = simulate(config, { policy });
  return { ...result, wallMs: performance.now() - start, scenario: config };
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, SCENARIO_OPTIONS);
    if (values.help) {
      console.log(HELP);
      return;
    }
    const config = await configFromFlags(values);
    const plugin = values.router ? await loadRouterPlugin(values.router) : undefined;
    const report = runScenario(config, plugin?.policy);
    console.log(values.json ? JSON.stringify(report, null, 2) : formatReport(report));
  });
}
