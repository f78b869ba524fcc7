/**
 * @module
 * One scenario simulated and timed, as `deno task run` and `deno task bench`
 * do it: with a built-in policy in this thread, or with a router plugin in a
 * sandboxed Worker.
 */
import { type RunProgress, simulate, type SimulationConfig } from "../../actors/simulation.ts";
import type { RunReport } from "../report/run_report.ts";
import type { RouterPlugin } from "./router_plugin.ts";
import { runOnWorkers } from "./worker_pool.ts";

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
 * Simulates `config` with a router plugin — for every pool, or for its
 * `pool` only — in a sandboxed Worker watched for hangs (see
 * scenarios/workers/worker_pool.ts); `wallMs` is the simulation's time there.
 * @throws {TypeError} when the plugin is a pool's and `config`'s fleet has no such pool.
 */
export async function runPluginScenario(
  config: SimulationConfig,
  plugin: RouterPlugin,
  timeoutMs: number,
): Promise<RunReport> {
  const pool = plugin.pool;
  if (pool !== undefined && !(config.instances.pools?.some((p) => p.role === pool) ?? false)) {
    throw new TypeError(`plugin ${plugin.name} routes the ${pool} pool, but the fleet has none`);
  }
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
