/**
 * @module
 * Atomic file output: write to a temporary file beside the target, then
 * rename over it, so a reader (or an interrupted run) never sees half a file.
 */
import { withPath } from "./file_system_error.ts";

/** Writes `data` to `path` atomically (same-directory temp file + rename). */
export async function writeFileAtomic(path: string, data: string | Uint8Array): Promise<void> {
  await writeFilesAtomic(new Map([[path, data]]));
}

/**
 * Writes `chunks` to `path` atomically and streamed: each chunk goes to a
 * temporary file beside `path` as it comes (memory holds one chunk, never the
 * file), which is renamed over `path` only once complete. On an error, or
 * when `signal` aborts (checked between chunks), the temporary file is
 * removed and `path` left as it was.
 */
export async function writeChunksAtomic(
  path: string,
  chunks: Iterable<string | Uint8Array>,
  signal?: AbortSignal,
): Promise<void> {
  const temp = `${path}.tmp-${Deno.pid}`;
  if ((await Deno.lstat(path).catch(() => undefined))?.isDirectory) {
    throw Object.assign(new Error(`Is a directory (os error 21): rename '${temp}' -> '${path}'`), {
      code: "EISDIR",
    });
  }
  await Deno.remove(temp).catch(() => {}); // left by an earlier process with our pid
  const file = await Deno.open(temp, { write: true, createNew: true }).catch((error) => {
    throw withPath(error, "open", path);
  });
  const encoder = new TextEncoder();
  let closed = false, renamed = false;
  try {
    for (const chunk of chunks) {
      signal?.throwIfAborted();
      const bytes = typeof chunk === "string" ? encoder.encode(chunk) : chunk;
      for (let at = 0; at < bytes.length;) {
        at += await file.write(bytes.subarray(at)).catch((error) => {
          throw withPath(error, "write", path); // name the file the user knows, not the temp
        });
      }
    }
    signal?.throwIfAborted();
    file.close();
    closed = true;
    await Deno.rename(temp, path);
    renamed = true;
  } finally {
    if (!closed) file.close();
    if (!renamed) await Deno.remove(temp).catch(() => {});
  }
}

/**
 * Writes every file of `files` (path → contents) to a temporary file beside
 * it first, and renames them over their targets only once all are written,
 * so a full disk or a read-only file leaves every previous file as it was.
 * A temporary file is created new (never through an existing file or
 * symlink); a rename replaces a symlink rather than writing through it.
 */
export async function writeFilesAtomic(files: ReadonlyMap<string, string | Uint8Array>): Promise<void> {
  const temps: string[] = [];
  try {
    for (const [path, data] of files) {
      const temp = `${path}.tmp-${Deno.pid}`;
      // A directory in a file's place would fail its rename after others were done: refuse now.
      if ((await Deno.lstat(path).catch(() => undefined))?.isDirectory) {
        throw Object.assign(new Error(`Is a directory (os error 21): rename '${temp}' -> '${path}'`), {
          code: "EISDIR",
        });
      }
      await Deno.remove(temp).catch(() => {}); // left by an earlier process with our pid
      temps.push(temp);
      const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
      await Deno.writeFile(temp, bytes, { createNew: true }).catch((error) => {
        throw withPath(error, "writefile", path); // name the file the user knows, not the temp
      });
    }
  } catch (error) {
    for (const temp of temps) await Deno.remove(temp).catch(() => {});
    throw error;
  }
  let i = 0;
  try {
    for (const path of files.keys()) {
      await Deno.rename(temps[i], path);
      i++;
    }
  } finally {
    for (const temp of temps.slice(i)) await Deno.remove(temp).catch(() => {});
  }
}
