/**
 * @module
 * Instance availability, shared by every built-in policy: the view's mask
 * when some instance is unavailable (none when all are, the fast path that
 * keeps a fault-free run's choices and random draws as they were), and the
 * k-th available instance.
 */
import type { RouterView } from "./policy.ts";

/**
 * The view's availability mask (1: may be chosen) when some instance is
 * unavailable; undefined when every instance is, so that callers skip the
 * check altogether and choose exactly as they did before availability
 * existed. Allocates nothing.
 */
export function availabilityMask(view: RouterView): ArrayLike<number> | undefined {
  return view.availableCount < view.instanceCount ? view.available : undefined;
}

/**
 * The index of the `k`-th (from 0) instance whose mask entry is 1, among the
 * first `n`; -1 when fewer than k + 1 are (an inconsistent view: the router
 * then fails the run with `invalid_choice`).
 */
export function nthAvailable(mask: ArrayLike<number>, n: number, k: number): number {
  for (let i = 0; i < n; i++) {
    if (mask[i] === 1 && k-- === 0) return i;
  }
  return -1;
}
