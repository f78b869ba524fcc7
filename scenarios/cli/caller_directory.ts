/**
 * @module
 * The directory the user ran a command from. `deno task` runs its commands in
 * the repository, so relative paths on the command line (and trace paths in a
 * scenario or sweep file) resolve against `INIT_CWD`, which `deno task` sets.
 */
import { resolve } from "node:path";

/**
 * `INIT_CWD` when it is set and readable (`--allow-env=INIT_CWD`), else the
 * current directory (a plain `deno run`, the tests). Never prompts for a
 * permission.
 */
export function callerDirectory(): string {
  const allowed = Deno.permissions.querySync({ name: "env", variable: "INIT_CWD" }).state === "granted";
  const initCwd = allowed ? Deno.env.get("INIT_CWD") : undefined;
  return initCwd ? resolve(initCwd) : Deno.cwd();
}

/**
 * `path` resolved against the caller's directory; an absolute path is returned
 * normalised.
 *
 * @example
 * ```ts
 * // In /home/me, `deno task run --scenario s.json` reads /home/me/s.json.
 * const file = fromCaller("s.json");
 * ```
 */
export function fromCaller(path: string): string {
  return resolve(callerDirectory(), path);
}
