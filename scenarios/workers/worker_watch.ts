/**
 * @module
 * The watch buffer between a simulation Worker, its host and the watchdog: a
 * few shared numbers the Worker updates as it loads a plugin, starts a run and
 * enters or leaves a plugin's decision, and the host as it hands out runs — so
 * that the watchdog, in a Worker of its own, can tell without either one's
 * help that user code has hung (or that the Worker has silently ended).
 */
import { SimulationError } from "../../actors/runtime/simulation_error.ts";

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

const PHASE = 0, TASK = 1, DECISIONS = 2, REQUEST = 3, ASSIGNED = 4, INTS = 6;
const TIME = 0, ASSIGNED_AT = 1, FLOATS = 2;

// Taken when this module loads, before any plugin runs: a plugin that patches
// `Atomics` cannot see the buffer or fake the Worker's progress.
const { load, store, add } = Atomics;

/** Wall time that means the same in every thread of the process, ms since the epoch (a Worker's `performance.now()` starts at its own birth). */
export function processNowMs(): number {
  return performance.timeOrigin + performance.now();
}

/** What the watch buffer shows. */
export interface WatchReading {
  readonly phase: WorkerPhase;
  /** The run the Worker last started; -1 before any. */
  readonly task: number;
  /** Decisions entered so far. */
  readonly decisions: number;
  /** The request of the last decision entered, and its arrival (simulated ms). */
  readonly requestId: number;
  readonly timeMs: number;
  /** The run the host handed out and awaits, -1 for none; and when it was handed out ({@linkcode processNowMs}). */
  readonly assigned: number;
  readonly assignedAtMs: number;
}

/** A view of one Worker's watch buffer; the Worker, its host and the watchdog each construct one over the same buffer. */
export class WatchSlot {
  readonly #ints: Int32Array;
  readonly #floats: Float64Array;

  /** A new buffer for one Worker. */
  static create(): SharedArrayBuffer {
    const buffer = new SharedArrayBuffer(INTS * 4 + FLOATS * 8);
    const ints = new Int32Array(buffer, 0, INTS);
    ints[TASK] = -1; // no run started yet
    ints[ASSIGNED] = -1; // none handed out
    return buffer;
  }

  constructor(readonly buffer: SharedArrayBuffer) {
    this.#ints = new Int32Array(buffer, 0, INTS);
    this.#floats = new Float64Array(buffer, INTS * 4, FLOATS);
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
    this.#floats[TIME] = timeMs;
    store(this.#ints, REQUEST, requestId);
    add(this.#ints, DECISIONS, 1);
    store(this.#ints, PHASE, WorkerPhase.Deciding);
  }

  /** Worker: the decision returned (or threw). */
  leaveDecision(): void {
    if (this.#ints[PHASE] === WorkerPhase.Deciding) store(this.#ints, PHASE, WorkerPhase.Idle);
  }

  /** Host: run `id` handed out now (-1: the answer came, none awaited). */
  assign(id: number): void {
    this.#floats[ASSIGNED_AT] = processNowMs(); // written before the id, which publishes it
    store(this.#ints, ASSIGNED, id);
  }

  /** What the Worker and the host last recorded. */
  read(): WatchReading {
    const assigned = load(this.#ints, ASSIGNED);
    return {
      phase: load(this.#ints, PHASE) as WorkerPhase,
      task: load(this.#ints, TASK),
      decisions: load(this.#ints, DECISIONS),
      requestId: load(this.#ints, REQUEST),
      timeMs: this.#floats[TIME],
      assigned,
      assignedAtMs: this.#floats[ASSIGNED_AT],
    };
  }
}

/** How the watchdog names a plugin in its verdicts. */
export interface WatchedPlugin {
  /** How the user named the file. */
  readonly path: string;
  /** Its `name`, once known. */
  readonly name?: string;
  /** The actor its errors name, such as `router (plugin NAME)`. */
  readonly actor: string;
}

/**
 * The watchdog's judgement of one plugin Worker: loading or one decision past
 * the timeout, a run it never started, or a run in which no decision starts.
 * Keeps what it saw at each look; `now` is {@linkcode processNowMs}.
 */
export class SlotWatch {
  #loadingSince: number | undefined;
  #task = -1;
  #decisions = -1;
  #decisionSince = 0;
  #progressDecisions = -1;
  #progressSince = 0;

  constructor(readonly slot: WatchSlot, readonly plugin: WatchedPlugin, readonly timeoutMs: number) {}

  /** The failure the Worker shows at `now`, if any. */
  verdict(now: number): SimulationError | undefined {
    const { plugin, timeoutMs } = this;
    const seen = this.slot.read();
    const actor = plugin.actor, name = plugin.name ?? plugin.path;
    if (seen.phase === WorkerPhase.Loading) {
      // The budget starts when the Worker begins importing the plugin: starting
      // a Worker and loading our own modules is not the plugin's time.
      this.#loadingSince ??= now;
      if (now - this.#loadingSince <= timeoutMs) return undefined;
      return new SimulationError(
        "plugin_timeout",
        `plugin ${plugin.path} did not finish loading within ${timeoutMs} ms`,
        { actor },
      );
    }
    if (seen.assigned < 0) return undefined;
    if (seen.task !== seen.assigned) {
      if (now - seen.assignedAtMs <= timeoutMs) return undefined;
      return new SimulationError(
        "plugin_timeout",
        `plugin ${name} did not start run ${seen.assigned} within ${timeoutMs} ms: its Worker is still busy ` +
          `with code the plugin left running outside choose (a loop, a timer or endless promise callbacks)`,
        { actor },
      );
    }
    if (seen.task !== this.#task) {
      this.#task = seen.task;
      this.#progressDecisions = -1;
    }
    // Progress: a plugin run routes requests all along. One in which no routing
    // decision starts for the timeout is stuck outside `choose` (in code the
    // plugin patched, say), whatever else the Worker reports.
    if (seen.decisions !== this.#progressDecisions) {
      this.#progressDecisions = seen.decisions;
      this.#progressSince = now;
    } else if (seen.phase !== WorkerPhase.Deciding && now - this.#progressSince > timeoutMs) {
      return new SimulationError(
        "plugin_timeout",
        `plugin ${name}'s run made no progress for ${timeoutMs} ms (no routing decision started; last was request ${seen.requestId})`,
        { actor, timeMs: seen.timeMs },
      );
    }
    if (seen.phase !== WorkerPhase.Deciding) return undefined;
    if (seen.decisions !== this.#decisions) {
      this.#decisions = seen.decisions;
      this.#decisionSince = now;
      return undefined;
    }
    if (now - this.#decisionSince <= timeoutMs) return undefined;
    return new SimulationError(
      "plugin_timeout",
      `plugin ${name} did not answer routing request ${seen.requestId} within ${timeoutMs} ms`,
      { actor, messageType: "route", timeMs: seen.timeMs },
    );
  }
}
