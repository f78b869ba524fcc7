/**
 * @module
 * One writer per output: a sweep (or merge) holds an exclusive OS lock
 * (`Deno.FsFile.lock`) on a lock file in its output directory while it
 * writes, so a second sweep, `--resume` or `--fresh` there stops with a line
 * naming the holder instead of deleting its journal. The lock dies with its
 * holder, so a `kill -9` leaves no stale lock to clean up.
 */
import { UsageError } from "./usage_error.ts";

/** Who holds a lock, as written into the lock file. */
interface Holder {
  readonly pid: number;
  readonly started: string;
  readonly command: string;
}

/** A held lock; released by {@linkcode OutputLock.release} or when the process ends. */
export class OutputLock {
  readonly #file: Deno.FsFile;
  readonly #path: string;
  readonly #onUnload = () => this.release();
  #released = false;

  private constructor(file: Deno.FsFile, path: string) {
    this.#file = file;
    this.#path = path;
    // Deno.exit (Ctrl-C, a failed run) fires "unload": remove the file then, too.
    globalThis.addEventListener("unload", this.#onUnload);
  }

  /**
   * Takes the exclusive lock on `path`, creating the file, and writes this
   * process's pid, start time and `command` into it.
   * @param what How to name what is locked in the refusal, e.g. `--out results/x`.
   * @throws {UsageError} naming the holder when another process holds it.
   */
  static async acquire(path: string, what: string, command: string): Promise<OutputLock> {
    for (;;) {
      const file = await Deno.open(path, { read: true, write: true, create: true });
      if (!(await file.tryLock(true))) {
        const holder = await readHolder(file);
        file.close();
        throw new UsageError(
          `${what} is in use by ${describe(holder, path)}; wait for it to finish or stop it`,
        );
      }
      // A holder that was finishing may have removed the file we opened: lock the file on disk.
      const [mine, onDisk] = await Promise.all([file.stat(), Deno.stat(path).catch(() => undefined)]);
      if (onDisk === undefined || (mine.ino !== null && mine.ino !== onDisk.ino)) {
        file.close();
        continue;
      }
      const holder: Holder = { pid: Deno.pid, started: new Date().toISOString(), command };
      await file.truncate(0);
      await file.write(new TextEncoder().encode(JSON.stringify(holder) + "\n"));
      return new OutputLock(file, path);
    }
  }

  /** Removes the lock file and releases the lock (idempotent). */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    globalThis.removeEventListener("unload", this.#onUnload);
    try {
      Deno.removeSync(this.#path); // before unlocking, so no one locks a file about to vanish
    } catch {
      // already gone: nothing to clean up
    }
    this.#file.close();
  }
}

async function readHolder(file: Deno.FsFile): Promise<Holder | undefined> {
  try {
    const bytes = new Uint8Array(4096);
    const n = await file.read(bytes);
    return n === null ? undefined : JSON.parse(new TextDecoder().decode(bytes.subarray(0, n)));
  } catch {
    return undefined; // the holder has not written its name yet
  }
}

function describe(holder: Holder | undefined, path: string): string {
  if (typeof holder?.pid !== "number") return `another process (lock ${path})`;
  return `"${holder.command}" (pid ${holder.pid}, started ${holder.started}; lock ${path})`;
}
