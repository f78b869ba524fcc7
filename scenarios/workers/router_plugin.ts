/**
 * @module
 * `--router FILE.ts` (or a pool's `--prefill-policy FILE.ts`): resolve a
 * router plugin, check its import graph, and load it once in a sandboxed
 * Worker to learn its name — turning every problem with the file into a
 * one-line usage error. The plugin is never imported in this (the main) thread.
 */
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";
import { checkPluginImports, pluginImportRules } from "./plugin_imports.ts";
import type { PoolName } from "../scenario/command_line.ts";
import { UsageError } from "../cli/usage_error.ts";
import { DEFAULT_PLUGIN_TIMEOUT_MS, loadInSandbox, type SandboxPlugin } from "./worker_pool.ts";

/** A checked plugin: where it is, what it may read, and its name. */
export interface RouterPlugin extends SandboxPlugin {
  /** The plugin's `name`. */
  readonly name: string;
}

/** Options for {@linkcode loadRouterPlugin}. */
export interface LoadRouterPluginOptions {
  /** Bound on the plugin's loading, wall ms. @default DEFAULT_PLUGIN_TIMEOUT_MS */
  readonly timeoutMs?: number;
  /** Directory `path` is relative to. @default the working directory */
  readonly baseDir?: string;
  /** The flag that named the plugin, for messages. @default "--router" */
  readonly flag?: string;
  /** The pool of a disaggregated fleet it routes alone. @default every pool (as `--router`) */
  readonly pool?: PoolName;
}

/**
 * Checks the plugin at `path` and loads it in a sandboxed Worker.
 * @throws {UsageError} when the file is missing, imports what a plugin may
 *   not, fails to load, or exports no policy.
 * @throws {SimulationError} (`plugin_timeout`) when loading takes longer than
 *   the timeout; the Worker may still be spinning, so the caller must end the process.
 */
export async function loadRouterPlugin(
  path: string,
  options: LoadRouterPluginOptions = {},
): Promise<RouterPlugin> {
  const absolute = resolve(options.baseDir ?? Deno.cwd(), path);
  const flag = options.flag ?? "--router";
  try {
    const info = await Deno.stat(absolute);
    if (!info.isFile) throw new UsageError(`${flag}: "${path}" is not a file`);
  } catch (error) {
    if (error instanceof UsageError) throw error;
    throw new UsageError(`${flag}: cannot read "${path}": no such file`);
  }
  // Errors name the plugin as the user typed it, and the files it imports from the user's directory.
  const readPaths = await checkPluginImports(absolute, await pluginImportRules(absolute), {
    typedPath: path,
    baseDir: options.baseDir ?? Deno.cwd(),
    flag,
  });
  const plugin: SandboxPlugin = {
    url: pathToFileURL(absolute).href,
    path,
    readPaths,
    ...(options.flag === undefined ? {} : { flag }),
    ...(options.pool === undefined ? {} : { pool: options.pool }),
  };
  const name = await loadInSandbox(plugin, options.timeoutMs ?? DEFAULT_PLUGIN_TIMEOUT_MS);
  return { ...plugin, name };
}

/**
 * The report line of a plugin that routes one pool: the report's policy line
 * names the run's policy (`RunResult.policy`), so this says where the plugin
 * ran. Undefined for a plugin of every pool, which the policy line names.
 */
export function poolPluginLine(plugin: RouterPlugin | undefined): string | undefined {
  return plugin?.pool && `${plugin.pool} pool routed by plugin ${plugin.name} (${plugin.path})`;
}

/** `report` (a run's text report) with {@linkcode poolPluginLine} after its first (policy) line. */
export function withPoolPluginLine(report: string, plugin: RouterPlugin | undefined): string {
  const line = poolPluginLine(plugin);
  if (line === undefined) return report;
  const end = report.indexOf("\n");
  return end < 0 ? `${report}\n${line}` : `${report.slice(0, end)}\n${line}${report.slice(end)}`;
}

/** The `poolPlugin` field a run's JSON gains when a plugin routed one pool: which pool, which plugin, which file. */
export function poolPluginJson(
  plugin: RouterPlugin | undefined,
): { poolPlugin?: { pool: PoolName; name: string; path: string } } {
  return plugin?.pool ? { poolPlugin: { pool: plugin.pool, name: plugin.name, path: plugin.path } } : {};
}
