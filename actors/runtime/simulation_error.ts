/**
 * @module
 * The one error type for failures inside a run, with a documented `kind` for
 * each way a run can go wrong (after NeXosim's typed error list), and the
 * plain-data form in which any error crosses a Worker boundary.
 */

/**
 * Why a run failed. design.md ("Errors and exit codes") catalogues each with
 * an example message.
 *
 * - `actor_threw`: an actor's `handle` threw while processing a message.
 * - `unknown_actor`: a message was addressed to a reference no actor holds.
 * - `invalid_choice`: a routing policy returned something that is not the
 *   index of an instance.
 * - `invariant_broken`: an end-of-run check failed, such as the conservation
 *   of requests (completed + dropped + in flight = arrivals).
 * - `actor_timeout` (Worker runtime): an actor did not finish handling a
 *   message within the handler timeout (a policy that never returns).
 * - `worker_crashed` (Worker runtime, sweep pool): an actor's or a
 *   simulation's Worker died outside any handler (an uncaught asynchronous
 *   error, a failed module load, `Deno.exit`).
 * - `plugin_timeout`: a router plugin did not finish loading, or did not
 *   answer one routing decision, within the plugin timeout (or its Worker
 *   ended without a word, e.g. through `Deno.exit`).
 * - `resource_exhausted`: a run with a router plugin went over the memory
 *   budget of a plugin run (the host's watchdog ended it).
 */
export type SimulationErrorKind = typeof SIMULATION_ERROR_KINDS[number];

/** Every {@linkcode SimulationErrorKind}, for checks at run time (data from a Worker, the catalogue's test). */
export const SIMULATION_ERROR_KINDS = [
  "actor_threw",
  "unknown_actor",
  "invalid_choice",
  "invariant_broken",
  "actor_timeout",
  "worker_crashed",
  "plugin_timeout",
  "resource_exhausted",
] as const;

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

/**
 * An error as plain data, for `postMessage`: structured cloning keeps the
 * message of an error but neither its class (beyond JavaScript's own) nor its
 * fields — a {@linkcode SimulationError}'s kind, a trace error's file and
 * line, a file-system error's code. {@linkcode errorToData} takes them all,
 * {@linkcode errorFromData} rebuilds the error on the other side.
 */
export interface ErrorData {
  /** The class's name: `SimulationError`, `TraceFormatError`, `TypeError`, `NotFound`… */
  readonly name: string;
  /** The error's message. */
  readonly message: string;
  /** Where it was thrown (the Worker's stack), if known. */
  readonly stack?: string;
  /**
   * Its own fields of primitive value: a SimulationError's `kind`, `detail`,
   * `actor`, `messageType`, `timeMs`; a file-system error's `code`.
   */
  readonly fields: Readonly<Record<string, string | number | boolean>>;
  /** What caused it, as data too. */
  readonly cause?: ErrorData;
}

/** What {@linkcode errorFromData} calls for a class it does not know: the error, or undefined to fall back. */
export type ErrorReviver = (data: ErrorData, cause: Error | undefined) => Error | undefined;

/** Causes followed at most (a cycle or a long chain stops here). */
const MAX_CAUSES = 4;

/**
 * `error` — anything thrown — as {@linkcode ErrorData}. Never throws: a value
 * whose properties cannot be read (a hostile plugin's) is described as such.
 */
export function errorToData(error: unknown, depth = 0): ErrorData {
  try {
    if (!(error instanceof Error)) return { name: "Error", message: String(error), fields: {} };
    const fields: Record<string, string | number | boolean> = {};
    for (const [key, value] of Object.entries(error)) {
      if (key === "cause" || key === "stack") continue;
      if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") {
        fields[key] = value;
      }
    }
    const cause = error.cause !== undefined && depth < MAX_CAUSES
      ? errorToData(error.cause, depth + 1)
      : undefined;
    const stack = typeof error.stack === "string" ? error.stack : undefined;
    return { name: String(error.name), message: String(error.message), stack, fields, cause };
  } catch {
    return { name: "Error", message: "(a thrown value that cannot be described)", fields: {} };
  }
}

/** JavaScript's own error classes, by name. */
const BUILT_IN: Readonly<Record<string, ErrorConstructor>> = {
  Error,
  EvalError,
  RangeError,
  ReferenceError,
  SyntaxError,
  TypeError,
  URIError,
};

/**
 * The error `data` describes, of its class: a {@linkcode SimulationError}
 * (its message rebuilt from kind, detail and location, so never doubled), a
 * class in `revivers` (by name), one of JavaScript's or Deno's
 * (`Deno.errors.NotFound`…, with its `code`); else an `Error` bearing the
 * name. Its stack is the one `data` carries.
 * @param revivers Classes this module cannot import, by name (`TraceFormatError`, `UsageError`).
 */
export function errorFromData(data: ErrorData, revivers: Readonly<Record<string, ErrorReviver>> = {}): Error {
  const cause = data.cause && errorFromData(data.cause, revivers);
  const error = (Object.hasOwn(revivers, data.name) ? revivers[data.name](data, cause) : undefined) ??
    simulationErrorFrom(data, cause) ?? builtInErrorFrom(data, cause);
  const frames = data.stack?.split("\n").filter((line) => /^\s+at /.test(line)) ?? [];
  error.stack = [`${error.name}: ${error.message}`, ...frames].join("\n");
  return error;
}

function simulationErrorFrom(data: ErrorData, cause: Error | undefined): SimulationError | undefined {
  const { kind, detail, actor, messageType, timeMs } = data.fields;
  if (data.name !== "SimulationError" || !SIMULATION_ERROR_KINDS.includes(kind as SimulationErrorKind)) {
    return undefined;
  }
  return new SimulationError(
    kind as SimulationErrorKind,
    typeof detail === "string" ? detail : data.message,
    {
      actor: typeof actor === "string" ? actor : undefined,
      messageType: typeof messageType === "string" ? messageType : undefined,
      timeMs: typeof timeMs === "number" ? timeMs : undefined,
      cause,
    },
  );
}

function builtInErrorFrom(data: ErrorData, cause: Error | undefined): Error {
  const options = cause === undefined ? undefined : { cause };
  const denoErrors = Deno.errors as unknown as Readonly<Record<string, ErrorConstructor>>;
  if (Object.hasOwn(BUILT_IN, data.name)) return new BUILT_IN[data.name](data.message, options);
  if (Object.hasOwn(denoErrors, data.name)) {
    const error = new denoErrors[data.name](data.message, options);
    if (typeof data.fields.code === "string") Object.assign(error, { code: data.fields.code });
    return error;
  }
  const error = new Error(data.message, options);
  error.name = data.name;
  return error;
}
