/**
 * @module
 * Request classes (`workload.classes`): each arriving request draws a class by
 * share, from a stream of its own, and carries the class's index and priority.
 */
import type { Request } from "../protocol.ts";
import { createRandomStream, type RandomStream } from "../runtime/random_stream.ts";

/** One request class of a scenario's `workload.classes`. */
export interface RequestClass {
  /** Unique, non-empty name, as reports show it. */
  readonly name: string;
  /** Relative share of arrivals (shares are normalised over the classes), > 0. */
  readonly share: number;
  /** Higher is served first by a model that orders its queue. @default 0 */
  readonly priority?: number;
  /** TTFT SLO of this class's requests, ms, overriding the scenario's `slo.ttftMs`. @default the scenario's */
  readonly sloTtftMs?: number;
  /** TPOT SLO of this class's requests, ms, overriding the scenario's `slo.tpotMs`. @default the scenario's */
  readonly sloTpotMs?: number;
}

/**
 * The name of the stream classes are drawn from, with the run's seed: not an
 * actor's name, so the source's own stream (arrival times, lengths, groups)
 * draws exactly what it draws without classes.
 */
export const CLASS_STREAM_NAME = "source/classes";

/**
 * Draws each request's class: one uniform draw per request, in emission
 * order, from its own seeded stream, mapped through the cumulative
 * normalised shares.
 *
 * @example
 * ```ts
 * const classes = new RequestClasses([{ name: "chat", share: 3 }, { name: "batch", share: 1 }], 1);
 * const request = classes.assign({ id: 0, arrivalMs: 0, prefixGroup: -1, prefixTokens: 0, suffixTokens: 8, outputTokens: 1 });
 * // request.sloClass is 0 (chat) with probability 3/4, else 1.
 * ```
 */
export class RequestClasses {
  readonly #cumulative: number[];
  readonly #priorities: number[];
  readonly #random: RandomStream;

  /**
   * @param classes At least one class.
   * @param seed The run's seed; the stream is {@linkcode CLASS_STREAM_NAME} under it.
   */
  constructor(classes: readonly RequestClass[], seed: number) {
    const total = classes.reduce((sum, c) => sum + c.share, 0);
    let sum = 0;
    this.#cumulative = classes.map((c) => (sum += c.share) / total);
    this.#priorities = classes.map((c) => c.priority ?? 0);
    this.#random = createRandomStream(seed, CLASS_STREAM_NAME);
  }

  /** `request` with a class drawn for it: its `sloClass` and `priority` set. */
  assign(request: Request): Request {
    const u = this.#random();
    const cumulative = this.#cumulative;
    let sloClass = 0;
    // The last class takes whatever rounding leaves above its cumulative share.
    while (sloClass < cumulative.length - 1 && u >= cumulative[sloClass]) sloClass++;
    return { ...request, sloClass, priority: this.#priorities[sloClass] };
  }
}

/** The class drawer of a run, or undefined when it configures no classes. */
export function requestClasses(
  classes: readonly RequestClass[] | undefined,
  seed: number,
): RequestClasses | undefined {
  return classes === undefined || classes.length === 0 ? undefined : new RequestClasses(classes, seed);
}
