/**
 * @module
 * A file-system failure (disk full, read-only directory, a file where a
 * directory should be…) as the one line a command prints: what it could not
 * do, the path, and the operating system's reason.
 */

/** What each file-system operation was trying to do, as Deno names the operation in its messages. */
const VERBS: Readonly<Record<string, string>> = {
  mkdir: "create directory",
  open: "open",
  writefile: "write",
  readfile: "read",
  remove: "remove",
  rename: "replace",
  stat: "inspect",
  lstat: "inspect",
  realpath: "resolve",
  readdir: "read directory",
  copyfile: "copy",
  truncate: "truncate",
  fdatasync: "flush",
  fsync: "flush",
  write: "write",
};

/**
 * The one-line description of a file-system error thrown by Deno, or
 * undefined when `error` is not one: `cannot write "results/x.csv": No space
 * left on device (os error 28)`. Deno's messages read
 * `<reason> (os error N): <operation> '<path>'`.
 */
export function fileSystemErrorMessage(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  const code = (error as { code?: unknown }).code;
  const match = /^(.*?) \(os error \d+\)(?:: (\w+) '([^']*)'(?: -> '([^']*)')?)?/.exec(error.message);
  if (!match || typeof code !== "string" || !/^E[A-Z0-9]+$/.test(code)) return undefined;
  const [, reason, operation, path, target] = match;
  if (operation === undefined) return `file-system error: ${error.message}`;
  const verb = VERBS[operation] ?? operation;
  return `cannot ${verb} "${target ?? path}": ${reason}`;
}

/**
 * `error` (a file-system error) naming `operation '<path>'` in Deno's own
 * form — added where Deno gives no path (`FsFile.write`), replaced where it
 * names a temporary file instead of the one the user knows — so
 * {@linkcode fileSystemErrorMessage} names the right file. Other errors are
 * returned unchanged.
 */
export function withPath(error: unknown, operation: string, path: string): unknown {
  const reason = error instanceof Error ? /^.*?\(os error \d+\)/.exec(error.message)?.[0] : undefined;
  if (reason === undefined) return error;
  return Object.assign(new Error(`${reason}: ${operation} '${path}'`, { cause: error }), {
    code: (error as { code?: unknown }).code,
  });
}

/** Linux's numbers for the resource errors a command names, for an error that carries only its message. */
const OS_ERROR_CODES: Readonly<Record<string, string>> = {
  "11": "EAGAIN",
  "12": "ENOMEM",
  "23": "ENFILE",
  "24": "EMFILE",
  "28": "ENOSPC",
};

/**
 * The operating system's error code of `error` (`EMFILE`…): its `code`, or
 * one read from a message's `(os error N)` (fetch's wrapped errors carry
 * only that); undefined for another error.
 */
export function osErrorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code ??
    OS_ERROR_CODES[/\(os error (\d+)\)/.exec(String((error as Error | null)?.message))?.[1] ?? ""];
  return typeof code === "string" ? code : undefined;
}
