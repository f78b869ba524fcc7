/**
 * @module
 * The seam between the kernel's virtual time and the world's time. Before
 * each delivery the kernel asks its clock whether the next message may be
 * delivered (SimPy's `rt.py`, NeXosim's `Clock::synchronize`): the virtual
 * clock always says yes at once; a wall clock first waits for the deadline,
 * and says how late it is when the deadline has already passed.
 */

/** How a delivery stands against its clock. */
export interface SyncStatus {
  /**
   * How far the clock is behind the message's time, in wall ms: 0 when it is
   * delivered on time (synchronized), > 0 when out of sync.
   */
  readonly lagMs: number;
}

/** The status of a clock that is never late. */
export const SYNCHRONIZED: SyncStatus = Object.freeze({ lagMs: 0 });

/**
 * Decides when the kernel may deliver its next message
 * ({@linkcode Kernel.runWithClock}).
 */
export interface Clock {
  /**
   * Called with the time of the next message (`Infinity` when none is due
   * before the run's end). Returns a status when that message may be
   * delivered now; returns a promise when the kernel must wait, after which
   * it reads its queue again (work outside the kernel — a Worker's answer —
   * may have added an earlier message) and asks again. Answering `Infinity`
   * with a status ends the run.
   */
  synchronize(timeMs: number): SyncStatus | Promise<void>;
}

/** The clock of the deterministic sweep: every deadline has already passed. */
export class VirtualClock implements Clock {
  /** Never waits. */
  synchronize(_timeMs: number): SyncStatus {
    return SYNCHRONIZED;
  }
}
