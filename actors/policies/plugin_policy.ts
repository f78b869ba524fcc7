/**
 * @module
 * Router plugins: a user's module whose default export is a
 * {@linkcode RoutingPolicy}. Loaded the same way, inside a sandboxed Worker,
 * by a plugin run, the sweep's plugin Workers and the real-time router Worker
 * — never in a process's main thread.
 */
import type { RoutingPolicy } from "./policy.ts";

/** A plugin tried to end its Worker (`Deno.exit`, `close`): refused, so the run fails visibly. */
export class PluginExitError extends Error {
  constructor(what: string) {
    super(`a router plugin may not call ${what}`);
    this.name = "PluginExitError";
  }
}

/**
 * In a Worker, replaces `Deno.exit` and `close` by functions that throw: a
 * plugin calling them fails its run with a message instead of ending the
 * Worker silently. Does nothing in a main thread.
 */
export function lockWorkerExits(): void {
  if (!("WorkerGlobalScope" in globalThis)) return;
  const refuse = (what: string) => () => {
    throw new PluginExitError(what);
  };
  const lock = (target: object, key: string, what: string) => {
    try {
      Object.defineProperty(target, key, { value: refuse(what), writable: false, configurable: false });
    } catch {
      // Already locked (a second plugin load in the same Worker).
    }
  };
  lock(Deno, "exit", "Deno.exit");
  lock(globalThis, "close", "close()");
  const scope = Object.getPrototypeOf(globalThis);
  if (scope && "close" in scope) lock(scope, "close", "close()");
}

/**
 * Imports a plugin module and checks its default export is a policy. In a
 * Worker, first locks `Deno.exit` and `close` (see {@linkcode lockWorkerExits}).
 * The specifier is computed at run time on purpose: Deno checks a computed
 * `import()` — and the whole graph it loads — against the Worker's read
 * permission, which a literal specifier would bypass.
 *
 * @param moduleUrl A `file:` URL of the plugin module.
 * @throws {TypeError} when the module has no default export with a string
 *   `name` and a `choose` function.
 */
export async function loadPolicyModule(moduleUrl: string): Promise<RoutingPolicy> {
  lockWorkerExits();
  const specifier = String(moduleUrl);
  const module = await import(specifier);
  const policy = module.default as Partial<RoutingPolicy> | undefined;
  if (
    policy === null || typeof policy !== "object" || typeof policy.name !== "string" ||
    typeof policy.choose !== "function"
  ) {
    throw new TypeError(
      `expected a default export { name: string, choose(request, view, random): number }, got ${
        policy === undefined ? "no default export" : policy === null ? "null" : typeof policy
      }`,
    );
  }
  return policy as RoutingPolicy;
}
