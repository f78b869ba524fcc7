/**
 * @module
 * One writer per output: a sweep (or merge) holds an exclusive OS lock
 * (`Deno.FsFile.lock`) on a lock file in its output directory while it
 * writes, so a second sweep, `--resume` or `--fresh` there stops with a line
 * naming the holder instead of deleting its journal. The lock dies with its
 * holder, so a `kill -9` leaves no stale lock to clean up.
 */
import { UsageError } from "../cli/usage_error.ts";

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
        throw new UsageError(inUse(what, describe(holder, path)));
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

  /**
   * Who holds the lock at `path`, if another process does — `"sweep …" (pid
   * N, started T; lock PATH)` — else undefined (no lock file, or one a killed
   * holder left). Takes no lock, creates nothing: it probes with a shared lock,
   * released at once (a sweep taking the lock in that instant would be refused).
   * @param shown The lock's path as messages name it. @default path
   */
  static async holder(path: string, shown: string = path): Promise<string | undefined> {
    let file: Deno.FsFile;
    try {
      file = await Deno.open(path, { read: true });
    } catch {
      return undefined; // no lock file: no holder
    }
    try {
      if (await file.tryLock(false)) return undefined;
      return describe(await readHolder(file), shown);
    } finally {
      file.close();
    }
  }

  /**
   * Refuses, as {@linkcode OutputLock.acquire} would, when another process
   * holds the lock at `path`; takes no lock itself (see {@linkcode OutputLock.holder}).
   * @param what How to name what is locked, e.g. `--out results/x`.
   * @throws {UsageError} naming the holder.
   */
  static async assertFree(path: string, what: string, shown: string = path): Promise<void> {
    const holder = await OutputLock.holder(path, shown);
    if (holder !== undefined) throw new UsageError(inUse(what, holder));
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

/** The refusal when `what` is locked by `holder` (see {@linkcode describe}). */
function inUse(what: string, holder: string): string {
  return `${what} is in use by ${holder}: another sweep or merge holds its lock; ` +
    `wait for it to finish or stop it, then run this command again`;
}

function describe(holder: Holder | undefined, path: string): string {
  if (typeof holder?.pid !== "number") return `another process (lock ${path})`;
  return `"${holder.command}" (pid ${holder.pid}, started ${holder.started}; lock ${path})`;
}
