/**
 * @module
 * Replays a generated trace straight from its generator, with no file: the
 * same requests, in the same order and at the same times, as reading the file
 * `deno task trace-gen` writes with the same parameters.
 */
import { TraceGenerator } from "./trace_generator.ts";
import {
  type GeneratedTraceOptions,
  mooncakeRequest,
  type TraceRequest,
  type TraceRequestReader,
} from "./trace_reader.ts";

/**
 * A {@linkcode TraceRequestReader} over a {@linkcode TraceGenerator}: arrival
 * = (timestamp − first timestamp) / speed, as the file reader computes it.
 *
 * @example
 * ```ts
 * const reader = new GeneratedTraceReader({ generate: TRACE_GENERATOR_DEFAULTS, format: "mooncake", speed: 2 });
 * for (let r = reader.next(); r; r = reader.next()) console.log(r.arrivalMs);
 * ```
 */
export class GeneratedTraceReader implements TraceRequestReader {
  readonly #generator: TraceGenerator;
  readonly #speed: number;
  readonly #maxRequests: number;
  #originMs: number | undefined;
  #read = 0;
  /** A generated trace has no malformed lines: always 0. */
  readonly skipped = 0;

  /** @throws {RangeError} for an invalid generator parameter. */
  constructor(options: GeneratedTraceOptions) {
    this.#generator = new TraceGenerator(options.generate);
    this.#speed = options.speed;
    this.#maxRequests = options.maxRequests ?? Infinity;
  }

  /** The next request, or undefined at the end (or after `maxRequests`). */
  next(): TraceRequest | undefined {
    if (this.#read >= this.#maxRequests) return undefined;
    const row = this.#generator.next();
    if (row === undefined) return undefined;
    this.#read++;
    this.#originMs ??= row.timestamp;
    return mooncakeRequest(
      (row.timestamp - this.#originMs) / this.#speed,
      row.input_length,
      row.output_length,
      row.hash_ids,
    );
  }

  /** Nothing to release. */
  close(): void {}
}
