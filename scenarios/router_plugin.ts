/**
 * @module
 * `--router FILE.ts`: resolve a router plugin, check its import graph, and
 * load it once in a sandboxed Worker to learn its name — turning every
 * problem with the file into a one-line usage error. The plugin is never
 * imported in this (the main) thread.
 */
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";
import { checkPluginImports, pluginImportRules } from "./plugin_imports.ts";
import { UsageError } from "./usage_error.ts";
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
  try {
    const info = await Deno.stat(absolute);
    if (!info.isFile) throw new UsageError(`--router: "${path}" is not a file`);
  } catch (error) {
    if (error instanceof UsageError) throw error;
    throw new UsageError(`--router: cannot read "${path}": no such file`);
  }
  const readPaths = await checkPluginImports(absolute, await pluginImportRules(absolute));
  const plugin: SandboxPlugin = { url: pathToFileURL(absolute).href, path, readPaths };
  const name = await loadInSandbox(plugin, options.timeoutMs ?? DEFAULT_PLUGIN_TIMEOUT_MS);
  return { ...plugin, name };
}
