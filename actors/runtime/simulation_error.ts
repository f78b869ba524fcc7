/**
 * @module
 * The one error type for failures inside a run, with a documented `kind` for
 * each way a run can go wrong (after NeXosim's typed error list).
 */

/**
 * Why a run failed.
 *
 * - `actor_threw`: an actor's `handle` threw while processing a message.
 * - `unknown_actor`: a message was addressed to a reference no actor holds.
 * - `invalid_choice`: a routing policy returned something that is not the
 *   index of an instance.
 * - `invariant_broken`: an end-of-run check failed, such as the conservation
 *   of requests (completed + dropped + in flight = arrivals).
 * - `actor_timeout` (Worker runtime): an actor did not finish handling a
 *   message within the handler timeout (a policy that never returns).
 * - `worker_crashed` (Worker runtime): an actor's Worker died outside any
 *   handler (an uncaught asynchronous error, a failed module load).
 * - `plugin_timeout`: a router plugin did not finish loading, or did not
 *   answer one routing decision, within the plugin timeout (or its Worker
 *   ended without a word, e.g. through `Deno.exit`).
 * - `resource_exhausted`: a run with a router plugin went over the memory
 *   budget of a plugin run (the host's watchdog ended it).
 */
export type SimulationErrorKind =
  | "actor_threw"
  | "unknown_actor"
  | "invalid_choice"
  | "invariant_broken"
  | "actor_timeout"
  | "worker_crashed"
  | "plugin_timeout"
  | "resource_exhausted";

/** Where in the run the failure happened. */
export interface SimulationErrorContext {
  /** The failing actor's name, such as `router` or `instance/2`. */
  readonly actor?: string;
  /** The `type` of the message being handled. */
  readonly messageType?: string;
  /** Simulated time of the failure, in milliseconds. */
  readonly timeMs?: number;
  /** The original exception, when one was thrown. */
  readonly cause?: unknown;
}

/** A failure inside a simulation run; `kind` says which one. */
export class SimulationError extends Error {
  /** Which failure this is. */
  readonly kind: SimulationErrorKind;
  /** The actor involved, if any. */
  readonly actor?: string;
  /** The message type being handled, if any. */
  readonly messageType?: string;
  /** Simulated time of the failure, in milliseconds. */
  readonly timeMs?: number;
  /** What went wrong, without the kind and location the message adds. */
  readonly detail: string;

  constructor(kind: SimulationErrorKind, detail: string, context: SimulationErrorContext = {}) {
    const where = [
      context.actor !== undefined ? `actor ${context.actor}` : undefined,
      context.messageType !== undefined ? `message "${context.messageType}"` : undefined,
      context.timeMs !== undefined ? `at t=${context.timeMs.toFixed(3)} ms` : undefined,
    ].filter((part) => part !== undefined).join(", ");
    super(`${kind}: ${detail}${where ? ` (${where})` : ""}`, { cause: context.cause });
    this.name = "SimulationError";
    this.kind = kind;
    this.actor = context.actor;
    this.messageType = context.messageType;
    this.timeMs = context.timeMs;
    this.detail = detail;
  }
}
