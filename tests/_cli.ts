/**
 * @module
 * What the command-line tests share: running a command's entry point (or its
 * task, from another directory) as a subprocess, and reading the one message
 * line of a failed command.
 */
import { assert, assertEquals } from "@std/assert";

const RUN = new URL("../scenarios/run.ts", import.meta.url).pathname;
const ROOT = new URL("..", import.meta.url).pathname;

/** `deno run --allow-read scenarios/run.ts ...args`, from the repository. */
export function runCli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return readOnlyCli([RUN], args);
}

/** `deno task realtime` as a user runs it: `scenarios/realtime.ts ...args`, reading only, from the repository. */
export function realtimeCli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return readOnlyCli(["--unstable-worker-options", "scenarios/realtime.ts"], args);
}

/** `deno run --allow-read` of `script` (with any flags before it) and `args`, from the repository. */
async function readOnlyCli(script: string[], args: string[]): Promise<CliOutput> {
  const output = await new Deno.Command("deno", {
    args: ["run", "--allow-read", ...script, ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: output.code, stdout: decode(output.stdout), stderr: decode(output.stderr) };
}

/** What a subprocess printed, decoded. */
export interface CliOutput {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * `deno run` of `scenarios/<script>.ts` from the repository, with the
 * permissions of its task but writes allowed only under `writable`.
 */
export function runScript(script: string, writable: string, ...args: string[]): Promise<CliOutput> {
  return runDeno(
    ["--allow-read", `--allow-write=${writable}`, "--allow-ffi", "--allow-sys"],
    script,
    ...args,
  );
}

/** `deno run --no-prompt …permissions scenarios/<script>.ts …args` in the repository, its output decoded. */
export async function runDeno(
  permissions: readonly string[],
  script: string,
  ...args: string[]
): Promise<CliOutput> {
  const output = await new Deno.Command("deno", {
    args: ["run", "--no-prompt", ...permissions, `scenarios/${script}.ts`, ...args],
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: output.code, stdout: decode(output.stdout), stderr: decode(output.stderr) };
}

/** `deno task <task> …args` of this repository as typed in the directory `caller`. */
export function taskFrom(caller: string, task: string, ...args: string[]): Promise<Deno.CommandOutput> {
  return new Deno.Command("deno", {
    args: ["task", "--cwd", ROOT, task, ...args],
    cwd: caller,
    // What `deno task` sets when typed in `caller` (an enclosing `deno task test` would pass its own on).
    env: { INIT_CWD: caller },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
}

/**
 * The one message line of a failed command — progress lines of the sweep and
 * the live view aside —, checked to be alone and free of stack traces.
 */
export function messageLine(stderr: string): string {
  const lines = stderr.split("\n").filter((line) =>
    line.trim() !== "" && !line.startsWith("sweep: ") && !line.startsWith("realtime · ")
  );
  assertEquals(lines.length, 1, `expected one line, got:\n${stderr}`);
  assert(!/^\s+at /m.test(stderr), `stack trace:\n${stderr}`);
  return lines[0];
}

/** Runs `jobs` with at most `limit` at once; their results in order. */
export async function inParallel<T>(jobs: readonly (() => Promise<T>)[], limit: number): Promise<T[]> {
  const results = new Array<T>(jobs.length);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const i = next++;
      results[i] = await jobs[i]();
    }
  };
  await Promise.all(Array.from({ length: limit }, worker));
  return results;
}
