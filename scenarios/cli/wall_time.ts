/**
 * @module
 * The process's wall time, for the real-time runtime (which, living under
 * `actors/`, may not read the clock itself).
 */
import type { WallTime } from "../../actors/runtime/wall_clock.ts";

/** The longest `setTimeout` delay, ms; a longer one overflows to 1 ms with a warning. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** `performance.now()` and a cancellable `setTimeout` sleep. */
export const systemWallTime: WallTime = {
  now: () => performance.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const id = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, Math.min(MAX_TIMER_MS, Math.max(0, ms))); // waking early is harmless: the caller sleeps again
      const onAbort = () => {
        clearTimeout(id);
        resolve();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
    }),
};
