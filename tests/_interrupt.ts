/**
 * @module
 * Ctrl-C as a user presses it: only once the child is visibly running, however
 * long Deno takes to start on a loaded machine.
 */

/**
 * Reads `child`'s stderr, sends SIGINT the first time `marker` appears, and
 * returns the exit code with everything the child wrote to stderr.
 */
export async function interruptWhenSeen(
  child: Deno.ChildProcess,
  marker: string,
): Promise<{ code: number; stderr: string }> {
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let stderr = "";
  let interrupted = false;
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
    stderr += chunk.value;
    if (!interrupted && stderr.includes(marker)) {
      child.kill("SIGINT");
      interrupted = true;
    }
  }
  const { code } = await child.status;
  await child.stdout.cancel();
  return { code, stderr };
}
