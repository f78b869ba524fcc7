/**
 * @module
 * Atomic file output: write to a temporary file beside the target, then
 * rename over it, so a reader (or an interrupted run) never sees half a file.
 */

/** Writes `data` to `path` atomically (same-directory temp file + rename). */
export async function writeFileAtomic(path: string, data: string | Uint8Array): Promise<void> {
  const temp = `${path}.tmp-${Deno.pid}`;
  try {
    if (typeof data === "string") await Deno.writeTextFile(temp, data);
    else await Deno.writeFile(temp, data);
    await Deno.rename(temp, path);
  } catch (error) {
    await Deno.remove(temp).catch(() => {});
    throw error;
  }
}
