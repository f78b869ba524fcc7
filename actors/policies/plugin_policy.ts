/**
 * @module
 * Router plugins: a user's module whose default export is a
 * {@linkcode RoutingPolicy}. Loaded the same way, inside a sandboxed Worker,
 * by a plugin run, the sweep's plugin Workers and the real-time router Worker
 * — never in a process's main thread.
 */
import type { RoutingPolicy } from "./policy.ts";

/**
 * What keeps a plugin in its place in its Worker (actors/runtime/plugin_lockdown.ts
 * provides both; handed in, as this layer imports nothing of the runtime).
 */
export interface PluginSandbox {
  /** Locks the Worker down; called before the plugin is imported. */
  readonly lockDown: () => void;
  /** Throws when the plugin has changed a built-in; called after its import and after every `choose`. */
  readonly check: () => void;
}

/**
 * Imports a plugin module and checks its default export is a policy, with
 * `sandbox` locking the Worker down first (frozen built-ins; no messages,
 * Workers, exits or signals from the plugin).
 * The specifier is computed at run time on purpose: Deno checks a computed
 * `import()` — and the whole graph it loads — against the Worker's read
 * permission, which a literal specifier would bypass.
 *
 * @param moduleUrl A `file:` URL of the plugin module.
 * @returns a policy of our own making around the plugin's: its `name` read
 *   once, and a `choose` that calls the plugin's and then `sandbox.check`s.
 * @throws {TypeError} when the module has no default export with a string
 *   `name` and a `choose` function, or changed a built-in object.
 */
export async function loadPolicyModule(moduleUrl: string, sandbox: PluginSandbox): Promise<RoutingPolicy> {
  sandbox.lockDown();
  const specifier = String(moduleUrl);
  const module = await import(specifier);
  const policy = module.default as Partial<RoutingPolicy> | undefined;
  const name = policy?.name, choose = policy?.choose;
  if (
    policy === null || typeof policy !== "object" || typeof name !== "string" || typeof choose !== "function"
  ) {
    throw new TypeError(
      `expected a default export { name: string, choose(request, view, random): number }, got ${
        policy === undefined ? "no default export" : policy === null ? "null" : typeof policy
      }`,
    );
  }
  const check = sandbox.check;
  check();
  return {
    name,
    choose(request, view, random) {
      try {
        return choose.call(policy, request, view, random);
      } finally {
        check();
      }
    },
  };
}
