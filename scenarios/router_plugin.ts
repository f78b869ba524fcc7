/**
 * @module
 * `--router FILE.ts`: resolve and check a router plugin for the command line,
 * turning every problem with the file into a one-line usage error.
 */
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";
import type { RoutingPolicy } from "../actors/policies/policy.ts";
import { loadPolicyModule } from "../actors/policies/plugin_policy.ts";
import { UsageError } from "./usage_error.ts";

/** A checked plugin: where it is and what it exports. */
export interface RouterPlugin {
  /** `file:` URL of the module. */
  readonly url: string;
  /** Its default export. */
  readonly policy: RoutingPolicy;
}

/**
 * Loads the plugin at `path` (relative to the working directory).
 * @throws {UsageError} when the file is missing, fails to load, or exports no policy.
 */
export async function loadRouterPlugin(path: string): Promise<RouterPlugin> {
  const absolute = resolve(path);
  try {
    await Deno.stat(absolute);
  } catch {
    throw new UsageError(`--router: cannot read "${path}": no such file`);
  }
  const url = pathToFileURL(absolute).href;
  try {
    return { url, policy: await loadPolicyModule(url) };
  } catch (error) {
    throw new UsageError(
      `--router: "${path}" is not a router plugin: ${(error as Error).message.split("\n")[0]}`,
    );
  }
}
