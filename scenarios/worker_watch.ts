/**
 * @module
 * The watch buffer between a simulation Worker and its host: a few shared
 * integers the Worker updates as it loads a plugin, starts a run and enters
 * or leaves a plugin's decision, so the host can tell, without the Worker's
 * help, that user code has hung (or that the Worker has silently ended).
 */

/** What a simulation Worker is doing. */
export const WorkerPhase = {
  /** Waiting for work. */
  Idle: 0,
  /** Importing a router plugin. */
  Loading: 1,
  /** Inside a plugin's `choose`. */
  Deciding: 2,
} as const;

/** One of {@linkcode WorkerPhase}'s values. */
export type WorkerPhase = typeof WorkerPhase[keyof typeof WorkerPhase];

const PHASE = 0, TASK = 1, DECISIONS = 2, REQUEST = 3, INTS = 4;

// Taken when this module loads, before any plugin runs: a plugin that patches
// `Atomics` cannot see the buffer or fake the Worker's progress.
const { load, store, add } = Atomics;

/** A view of one Worker's watch buffer; both sides construct one over the same buffer. */
export class WatchSlot {
  readonly #ints: Int32Array;
  readonly #time: Float64Array;

  /** A new buffer for one Worker. */
  static create(): SharedArrayBuffer {
    const buffer = new SharedArrayBuffer(INTS * 4 + 8);
    new Int32Array(buffer, 0, INTS)[TASK] = -1; // no run started yet
    return buffer;
  }

  constructor(readonly buffer: SharedArrayBuffer) {
    this.#ints = new Int32Array(buffer, 0, INTS);
    this.#time = new Float64Array(buffer, INTS * 4, 1);
  }

  /** Worker: a new phase. */
  setPhase(phase: WorkerPhase): void {
    store(this.#ints, PHASE, phase);
  }

  /** Worker: run `id` has started. */
  startTask(id: number): void {
    store(this.#ints, TASK, id);
  }

  /** Worker: the plugin is deciding request `requestId`, which arrived at `timeMs`. */
  enterDecision(requestId: number, timeMs: number): void {
    this.#time[0] = timeMs;
    store(this.#ints, REQUEST, requestId);
    add(this.#ints, DECISIONS, 1);
    store(this.#ints, PHASE, WorkerPhase.Deciding);
  }

  /** Worker: the decision returned (or threw). */
  leaveDecision(): void {
    if (this.#ints[PHASE] === WorkerPhase.Deciding) store(this.#ints, PHASE, WorkerPhase.Idle);
  }

  /** Host: what the Worker is doing now. */
  read(): { phase: WorkerPhase; task: number; decisions: number; requestId: number; timeMs: number } {
    return {
      phase: load(this.#ints, PHASE) as WorkerPhase,
      task: load(this.#ints, TASK),
      decisions: load(this.#ints, DECISIONS),
      requestId: load(this.#ints, REQUEST),
      timeMs: this.#time[0],
    };
  }
}
