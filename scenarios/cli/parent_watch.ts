/**
 * @module
 * Notices when the process that started this one is gone. `kill -9` of the
 * `deno task` wrapper orphans its `deno run` child; a sweep polls its parent
 * pid and treats a change as Ctrl-C, so it stops instead of running on unseen.
 */

/** How often the parent pid is polled, wall ms. */
export const PARENT_POLL_MS = 500;

/**
 * Calls `onGone` once when this process's parent changes (it died and the
 * process was re-parented). `Deno.ppid` needs no permission. The poll does not
 * keep the process alive.
 * @returns A function that stops watching.
 */
export function watchParent(onGone: () => void, intervalMs = PARENT_POLL_MS): () => void {
  const parent = Deno.ppid;
  const timer = setInterval(() => {
    if (Deno.ppid === parent) return;
    clearInterval(timer);
    onGone();
  }, intervalMs);
  Deno.unrefTimer(timer);
  return () => clearInterval(timer);
}
