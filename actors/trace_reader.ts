/**
 * @module
 * Streaming readers for request traces: Mooncake JSONL (`hash_ids` of
 * 512-token blocks) and Azure LLM inference CSV (no prefix information).
 * Lines are read one buffer at a time, never the whole file.
 */
import type { ErrorReviver } from "./runtime/simulation_error.ts";
import type { Request } from "./protocol.ts";
import type { TraceGeneratorOptions } from "./trace_generator.ts";

/** Supported trace formats. */
export type TraceFormat = "mooncake" | "azure";

/** Options for {@linkcode TraceReader}: a trace file. */
export interface TraceFileOptions {
  /** Path of the trace file. */
  readonly path: string;
  /** Its format. */
  readonly format: TraceFormat;
  /** Time compression: arrival = trace time / speed (2 = twice the load). @default 1 */
  readonly speed: number;
  /** Skip malformed lines (counting them) instead of failing. @default false */
  readonly skipInvalid: boolean;
  /** Stop after this many requests. @default all */
  readonly maxRequests?: number;
  /** Only a generated trace has generator parameters. */
  readonly generate?: undefined;
}

/**
 * A generated trace, named by its generator's parameters instead of a file
 * (actors/trace_generator.ts): replaying it equals replaying the file
 * `deno task trace-gen` writes with the same parameters.
 */
export interface GeneratedTraceOptions {
  /** The generator's parameters, complete. */
  readonly generate: TraceGeneratorOptions;
  /** A generated trace is in the Mooncake format. */
  readonly format: "mooncake";
  /** Time compression, as for a file. @default 1 */
  readonly speed: number;
  /** Stop after this many requests. @default all (`generate.requests`) */
  readonly maxRequests?: number;
  /** Only a trace file has a path. */
  readonly path?: undefined;
  /** A generated trace has no malformed lines to skip. */
  readonly skipInvalid?: false;
}

/** The trace a run replays: a file, or a generated trace. */
export type TraceOptions = TraceFileOptions | GeneratedTraceOptions;

/** What a trace source reads requests from: a file's reader or a generated trace's. */
export interface TraceRequestReader {
  /** The next request, or undefined at the end. */
  next(): TraceRequest | undefined;
  /** Releases what the reader holds (its file). */
  close(): void;
  /** Malformed lines skipped so far. */
  readonly skipped: number;
}

/** Tokens each Mooncake `hash_ids` entry covers. */
export const MOONCAKE_BLOCK_TOKENS = 512;

/** A malformed trace line; the message names the file and line. */
export class TraceFormatError extends Error {
  constructor(readonly file: string, readonly line: number, reason: string) {
    super(`${file}:${line}: ${reason}`);
    this.name = "TraceFormatError";
  }
}

/**
 * Rebuilds a {@linkcode TraceFormatError} that crossed a Worker boundary as
 * data (`errorToData`), for `errorFromData`'s revivers.
 */
export const reviveTraceFormatError: ErrorReviver = ({ fields, message }) => {
  const { file, line } = fields;
  if (typeof file !== "string" || typeof line !== "number") return undefined;
  const prefix = `${file}:${line}: `;
  return new TraceFormatError(
    file,
    line,
    message.startsWith(prefix) ? message.slice(prefix.length) : message,
  );
};

/** One request as a trace describes it (arrival relative to the trace's first request). */
export type TraceRequest = Omit<Request, "id">;

/**
 * The request a Mooncake row describes: its whole prompt is keyed by its
 * `hash_ids`, one key per 512-token block. Shared by the file reader and the
 * generated trace, so both replay a row identically.
 */
export function mooncakeRequest(
  arrivalMs: number,
  inputLength: number,
  outputLength: number,
  hashIds: readonly number[],
): TraceRequest {
  return {
    arrivalMs,
    prefixGroup: hashIds[0],
    prefixTokens: inputLength,
    suffixTokens: 0,
    outputTokens: outputLength,
    prefixKeys: hashIds,
    keyTokens: MOONCAKE_BLOCK_TOKENS,
  };
}

/**
 * Reads a trace line by line, synchronously (an actor's handler cannot await).
 *
 * @example
 * ```ts
 * const reader = new TraceReader({ path: "trace.jsonl", format: "mooncake", speed: 1, skipInvalid: false });
 * for (let r = reader.next(); r; r = reader.next()) console.log(r.arrivalMs);
 * reader.close();
 * ```
 */
export class TraceReader implements TraceRequestReader {
  readonly #options: TraceFileOptions;
  readonly #file: Deno.FsFile;
  readonly #decoder = new TextDecoder();
  readonly #buffer = new Uint8Array(1 << 16);
  #pending = "";
  #lines: string[] = [];
  #lineIndex = 0;
  #lineNumber = 0;
  #eof = false;
  #originMs: number | undefined;
  #originSeconds: number | undefined;
  #lastMs = -Infinity;
  #read = 0;
  /** Malformed lines skipped so far. */
  skipped = 0;

  constructor(options: TraceFileOptions) {
    this.#options = options;
    this.#file = Deno.openSync(options.path, { read: true });
    if (options.format === "azure") {
      const header = this.#nextLine();
      if (header === undefined || !/^TIMESTAMP,ContextTokens,GeneratedTokens\s*$/.test(header)) {
        this.close();
        throw new TraceFormatError(
          options.path,
          1,
          `expected the header "TIMESTAMP,ContextTokens,GeneratedTokens"`,
        );
      }
    }
  }

  /** The next request, or undefined at the end (or after `maxRequests`). */
  next(): TraceRequest | undefined {
    if (this.#options.maxRequests !== undefined && this.#read >= this.#options.maxRequests) return undefined;
    for (;;) {
      const line = this.#nextLine();
      if (line === undefined) return undefined;
      if (line.trim() === "") continue;
      try {
        const request = this.#options.format === "mooncake" ? this.#mooncake(line) : this.#azure(line);
        this.#read++;
        return request;
      } catch (error) {
        if (!(error instanceof TraceFormatError) || !this.#options.skipInvalid) throw error;
        this.skipped++;
      }
    }
  }

  /** Closes the file. */
  close(): void {
    try {
      this.#file.close();
    } catch {
      // already closed
    }
  }

  #fail(reason: string): never {
    throw new TraceFormatError(this.#options.path, this.#lineNumber, reason);
  }

  #arrival(traceMs: number): number {
    if (traceMs < this.#lastMs) {
      this.#fail(`timestamp ${traceMs} is earlier than the previous line's; traces must be in time order`);
    }
    this.#lastMs = traceMs;
    this.#originMs ??= traceMs;
    return (traceMs - this.#originMs) / this.#options.speed;
  }

  #mooncake(line: string): TraceRequest {
    let row: Record<string, unknown>;
    try {
      row = JSON.parse(line);
    } catch {
      this.#fail("not valid JSON");
    }
    const { timestamp, input_length: input, output_length: output, hash_ids: ids } = row;
    if (typeof timestamp !== "number" || !(timestamp >= 0)) {
      this.#fail(`timestamp: expected a number >= 0, got ${JSON.stringify(timestamp)}`);
    }
    if (!Number.isInteger(input) || (input as number) < 1) {
      this.#fail(`input_length: expected an integer >= 1, got ${JSON.stringify(input)}`);
    }
    if (!Number.isInteger(output) || (output as number) < 0) {
      this.#fail(`output_length: expected an integer >= 0, got ${JSON.stringify(output)}`);
    }
    const blocks = Math.ceil((input as number) / MOONCAKE_BLOCK_TOKENS);
    if (!Array.isArray(ids) || ids.length !== blocks || !ids.every((id) => Number.isInteger(id) && id >= 0)) {
      this.#fail(
        `hash_ids: expected ${blocks} integers >= 0 (one per 512-token block of input_length ${input})`,
      );
    }
    return mooncakeRequest(this.#arrival(timestamp), input as number, output as number, ids as number[]);
  }

  #azure(line: string): TraceRequest {
    const fields = line.split(",");
    if (fields.length !== 3) this.#fail(`expected 3 comma-separated fields, got ${fields.length}`);
    const m = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(\.\d+)?$/.exec(fields[0].trim());
    if (!m) this.#fail(`TIMESTAMP: expected "YYYY-MM-DD HH:MM:SS.fffffff", got ${JSON.stringify(fields[0])}`);
    // Whole seconds and the fraction apart: epoch ms as one double would lose
    // the sub-millisecond digits the trace has.
    const seconds = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]) / 1000;
    this.#originSeconds ??= seconds;
    const ms = (seconds - this.#originSeconds) * 1000 + (m[7] ? Number(m[7]) * 1000 : 0);
    const context = Number(fields[1]), generated = Number(fields[2]);
    if (!Number.isInteger(context) || context < 1) {
      this.#fail(`ContextTokens: expected an integer >= 1, got ${JSON.stringify(fields[1])}`);
    }
    if (!Number.isInteger(generated) || generated < 0) {
      this.#fail(`GeneratedTokens: expected an integer >= 0, got ${JSON.stringify(fields[2])}`);
    }
    return {
      arrivalMs: this.#arrival(ms),
      prefixGroup: -1,
      prefixTokens: 0,
      suffixTokens: context,
      outputTokens: generated,
    };
  }

  #nextLine(): string | undefined {
    while (this.#lineIndex >= this.#lines.length) {
      if (this.#eof) return undefined;
      const n = this.#file.readSync(this.#buffer);
      if (n === null) {
        this.#eof = true;
        const rest = this.#pending + this.#decoder.decode();
        this.#pending = "";
        this.#lines = rest === "" ? [] : [rest];
      } else {
        const text = this.#pending + this.#decoder.decode(this.#buffer.subarray(0, n), { stream: true });
        const lines = text.split("\n");
        this.#pending = lines.pop()!;
        this.#lines = lines;
      }
      this.#lineIndex = 0;
    }
    this.#lineNumber++;
    const line = this.#lines[this.#lineIndex++];
    return line.endsWith("\r") ? line.slice(0, -1) : line;
  }
}
