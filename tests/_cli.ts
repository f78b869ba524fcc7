/**
 * @module
 * Runs `deno task run`'s entry point as a subprocess, with the task's read
 * permission, and returns its exit code and decoded output.
 */

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
