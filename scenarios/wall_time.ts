/**
 * @module
 * The process's wall time, for the real-time runtime (which, living under
 * `actors/`, may not read the clock itself).
 */
import type { WallTime } from "../actors/runtime/wall_clock.ts";

/** `performance.now()` and a cancellable `setTimeout` sleep. */
export const systemWallTime: WallTime = {
  now: () => performance.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const id = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, Math.max(0, ms));
      const onAbort = () => {
        clearTimeout(id);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
    }),
};
