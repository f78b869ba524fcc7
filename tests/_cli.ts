/**
 * @module
 * What the command-line tests share: running `deno task run`'s entry point as
 * a subprocess, and reading the one message line of a failed command.
 */
import { assert, assertEquals } from "@std/assert";

const RUN = new URL("../scenarios/run.ts", import.meta.url).pathname;
const ROOT = new URL("..", import.meta.url).pathname;

/** `deno run --allow-read scenarios/run.ts ...args`, from the repository. */
export async function runCli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const output = await new Deno.Command("deno", {
    args: ["run", "--allow-read", RUN, ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: output.code, stdout: decode(output.stdout), stderr: decode(output.stderr) };
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
