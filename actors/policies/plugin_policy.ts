/**
 * @module
 * Router plugins: a user's module whose default export is a
 * {@linkcode RoutingPolicy}. Loaded the same way by the virtual run, the
 * sweep's Workers and the real-time router Worker.
 */
import type { RoutingPolicy } from "./policy.ts";

/**
 * Imports a plugin module and checks its default export is a policy.
 *
 * @param moduleUrl A `file:` URL of the plugin module.
 * @throws {TypeError} when the module has no default export with a string
 *   `name` and a `choose` function.
 */
export async function loadPolicyModule(moduleUrl: string): Promise<RoutingPolicy> {
  const module = await import(moduleUrl);
  const policy = module.default as Partial<RoutingPolicy> | undefined;
  if (
    policy === null || typeof policy !== "object" || typeof policy.name !== "string" ||
    typeof policy.choose !== "function"
  ) {
    throw new TypeError(
      `${moduleUrl}: expected a default export { name: string, choose(request, view, random): number }, got ${
        policy === undefined ? "no default export" : typeof policy
      }`,
    );
  }
  return policy as RoutingPolicy;
}
