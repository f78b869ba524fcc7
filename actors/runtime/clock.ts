/**
 * @module
 * The seam between the kernel's virtual time and the world's time. A clock
 * only decides how long to wait before the next delivery (SimPy's `rt.py`,
 * NeXosim's `Clock::synchronize`): the virtual clock never waits.
 */

/** Decides when the kernel may deliver a message stamped `timeMs`. */
export interface Clock {
  /**
   * Returns once the message at simulated `timeMs` may be delivered. A
   * synchronous clock returns `undefined`; a wall clock returns a promise.
   */
  waitUntil(timeMs: number): void | Promise<void>;
}

/** The clock of the deterministic sweep: every deadline has already passed. */
export class VirtualClock implements Clock {
  /** Never waits. */
  waitUntil(_timeMs: number): void {}
}
