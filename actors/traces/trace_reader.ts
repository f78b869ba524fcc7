/**
 * @module
 * Streaming readers for request traces: Mooncake JSONL (`hash_ids` of
 * 512-token blocks) and Azure LLM inference CSV (no prefix information).
 * Lines are read one buffer at a time, never the whole file, and no line may
 * be longer than {@linkcode MAX_TRACE_LINE_BYTES}.
 */
import type { ErrorReviver } from "../runtime/simulation_error.ts";
import type { Request } from "../protocol.ts";
import type { TraceGeneratorOptions } from "./trace_generator.ts";
import { MOONCAKE_BLOCK_TOKENS } from "./mooncake_format.ts";

export { MOONCAKE_BLOCK_TOKENS };

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
 * (actors/traces/trace_generator.ts): replaying it equals replaying the file
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

/**
 * The longest trace line read, in bytes before its newline (1 MiB); a longer
 * line is malformed. Generous: the public Mooncake trace's longest line (a
 * 191,373-token prompt, 374 hash ids) is 2,698 bytes, and 1 MiB holds about
 * 58,000 ids even at 16 digits each (18 bytes with ", "): a 30-million-token
 * prompt.
 */
export const MAX_TRACE_LINE_BYTES = 1 << 20;

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
  readonly #lines: BoundedLineReader;
  #lineNumber = 0;
  #originMs: number | undefined;
  #originSeconds: number | undefined;
  #lastMs = -Infinity;
  #read = 0;
  /** Malformed lines skipped so far. */
  skipped = 0;

  constructor(options: TraceFileOptions) {
    this.#options = options;
    this.#lines = new BoundedLineReader(options.path, MAX_TRACE_LINE_BYTES);
    if (options.format === "azure") {
      const header = this.#nextLine();
      if (typeof header !== "string" || !/^TIMESTAMP,ContextTokens,GeneratedTokens\s*$/.test(header)) {
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
      if (typeof line === "string" && line.trim() === "") continue;
      try {
        if (line === OVERLONG_LINE) this.#fail(`line longer than ${MAX_TRACE_LINE_BYTES} bytes`);
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
    this.#lines.close();
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
    let row: unknown;
    try {
      row = JSON.parse(line);
    } catch {
      this.#fail("not valid JSON");
    }
    if (row === null || typeof row !== "object" || Array.isArray(row)) {
      this.#fail(
        `expected a JSON object with timestamp, input_length, output_length and hash_ids, got ${shown(row)}`,
      );
    }
    const fields = row as Record<string, unknown>;
    const { timestamp, input_length: input, output_length: output, hash_ids: ids } = fields;
    if (typeof timestamp !== "number" || !Number.isFinite(timestamp) || timestamp < 0) {
      this.#fail(`timestamp: expected a finite number >= 0, got ${shown(timestamp)}`);
    }
    if (!Number.isInteger(input) || (input as number) < 1) {
      this.#fail(`input_length: expected an integer >= 1, got ${shown(input)}`);
    }
    if (!Number.isInteger(output) || (output as number) < 0) {
      this.#fail(`output_length: expected an integer >= 0, got ${shown(output)}`);
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
    const seconds = this.#azureSeconds(fields[0]);
    const context = Number(fields[1]), generated = Number(fields[2]);
    if (!Number.isInteger(context) || context < 1) {
      this.#fail(`ContextTokens: expected an integer >= 1, got ${shown(fields[1])}`);
    }
    if (!Number.isInteger(generated) || generated < 0) {
      this.#fail(`GeneratedTokens: expected an integer >= 0, got ${shown(fields[2])}`);
    }
    // Whole seconds and the fraction apart: epoch ms as one double would lose
    // the sub-millisecond digits the trace has.
    this.#originSeconds ??= seconds.whole;
    const ms = (seconds.whole - this.#originSeconds) * 1000 + seconds.fraction * 1000;
    return {
      arrivalMs: this.#arrival(ms),
      prefixGroup: -1,
      prefixTokens: 0,
      suffixTokens: context,
      outputTokens: generated,
    };
  }

  /**
   * An Azure `TIMESTAMP` (UTC, "YYYY-MM-DD HH:MM:SS.fffffff") as whole epoch
   * seconds and the fraction: a date that exists on the proleptic Gregorian
   * calendar, hour < 24, minute < 60, second < 60 (no leap second: see design.md).
   */
  #azureSeconds(field: string): { whole: number; fraction: number } {
    const m = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(\.\d+)?$/.exec(field.trim());
    if (!m) this.#fail(`TIMESTAMP: expected "YYYY-MM-DD HH:MM:SS.fffffff", got ${shown(field)}`);
    const year = +m[1], month = +m[2], day = +m[3], hour = +m[4], minute = +m[5], second = +m[6];
    const problem = month < 1 || month > 12
      ? `month ${m[2]} is not 01-12`
      : day < 1 || day > daysInMonth(year, month)
      ? `day ${m[3]} is not in ${m[1]}-${m[2]} (01-${daysInMonth(year, month)})`
      : hour > 23
      ? `hour ${m[4]} is not 00-23`
      : minute > 59
      ? `minute ${m[5]} is not 00-59`
      : second > 59
      ? `second ${m[6]} is not 00-59`
      : undefined;
    if (problem) this.#fail(`TIMESTAMP: ${problem}, got ${shown(field)}`);
    return {
      whole: Date.UTC(year, month - 1, day, hour, minute, second) / 1000,
      fraction: m[7] ? Number(m[7]) : 0,
    };
  }

  /** The next line, CR of a CRLF removed, counting it; OVERLONG_LINE for one past the bound. */
  #nextLine(): string | typeof OVERLONG_LINE | undefined {
    const line = this.#lines.next();
    if (line === undefined) return undefined;
    this.#lineNumber++;
    return typeof line === "string" && line.endsWith("\r") ? line.slice(0, -1) : line;
  }
}

/** Days in `month` (1-12) of `year` on the Gregorian calendar. */
function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** Characters of a bad value an error message shows; a longer one is cut. */
const SHOWN_CHARS = 60;

/** A bad value as an error message shows it: its JSON, cut to {@linkcode SHOWN_CHARS} characters. */
function shown(value: unknown): string {
  const text = String(JSON.stringify(value));
  return text.length <= SHOWN_CHARS ? text : `${text.slice(0, SHOWN_CHARS)}… (${text.length} characters)`;
}

/** What {@linkcode BoundedLineReader.next} returns for a line longer than its bound. */
export const OVERLONG_LINE: unique symbol = Symbol("overlong line");

const NEWLINE = 0x0a;

/**
 * Splits a file into lines, one buffer at a time, in time linear in the file
 * and memory bounded by `maxLineBytes`: each byte is searched for a newline
 * and decoded once, and a line longer than the bound (in bytes before its
 * newline) is skipped to its newline without being kept, coming out as
 * {@linkcode OVERLONG_LINE}. Lines are UTF-8; a byte-order mark is dropped
 * from the first line only.
 *
 * @example
 * ```ts
 * const lines = new BoundedLineReader("trace.jsonl", MAX_TRACE_LINE_BYTES);
 * for (let line = lines.next(); line !== undefined; line = lines.next()) {
 *   if (line === OVERLONG_LINE) console.log("a line too long");
 * }
 * lines.close();
 * ```
 */
export class BoundedLineReader {
  readonly #file: Deno.FsFile;
  readonly #maxLineBytes: number;
  readonly #buffer: Uint8Array;
  // Each decode is of whole lines; only the file's first may start with a BOM (dropped in #decode).
  readonly #decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  /** Lines split from the last buffer, not yet returned. */
  #lines: (string | typeof OVERLONG_LINE)[] = [];
  #lineIndex = 0;
  /** The start of a line that goes on past the last buffer: at most `maxLineBytes`. */
  #partial: Uint8Array;
  #partialBytes = 0;
  /** The line being read is already past the bound: skip to its newline. */
  #overlong = false;
  #firstLine = true;
  #eof = false;
  #bytesRead = 0;
  #peakHeldBytes = 0;

  /**
   * Opens `path` for reading.
   * @throws {RangeError} when `maxLineBytes` is not an integer >= 1; a file-system error for an unreadable file.
   */
  constructor(path: string, maxLineBytes: number) {
    if (!Number.isInteger(maxLineBytes) || maxLineBytes < 1) {
      throw new RangeError(`maxLineBytes: expected an integer >= 1, got ${maxLineBytes}`);
    }
    this.#maxLineBytes = maxLineBytes;
    // No buffer is longer than a line may be: a line that starts and ends in one needs no check.
    this.#buffer = new Uint8Array(Math.min(1 << 16, maxLineBytes));
    this.#partial = new Uint8Array(Math.min(1 << 12, maxLineBytes));
    this.#file = Deno.openSync(path, { read: true });
  }

  /** Bytes read from the file so far. */
  get bytesRead(): number {
    return this.#bytesRead;
  }

  /** The most bytes of one unfinished line held at once (never more than `maxLineBytes`). */
  get peakHeldBytes(): number {
    return this.#peakHeldBytes;
  }

  /** The next line without its newline, {@linkcode OVERLONG_LINE} for one past the bound, or undefined at the end. */
  next(): string | typeof OVERLONG_LINE | undefined {
    while (this.#lineIndex >= this.#lines.length) {
      if (this.#eof) return undefined;
      this.#fill();
    }
    return this.#lines[this.#lineIndex++];
  }

  /** Closes the file. */
  close(): void {
    try {
      this.#file.close();
    } catch {
      // already closed
    }
  }

  /** Reads one buffer into `#lines`: the line it ends, the lines inside it; keeps the line it starts. */
  #fill(): void {
    const n = this.#file.readSync(this.#buffer);
    this.#lineIndex = 0;
    if (n === null) {
      this.#eof = true;
      const last = this.#overlong || this.#partialBytes > 0 ? this.#endLine(new Uint8Array(0)) : undefined;
      this.#lines = last === undefined ? [] : [last];
      return;
    }
    this.#bytesRead += n;
    const bytes = this.#buffer.subarray(0, n);
    const first = bytes.indexOf(NEWLINE);
    if (first === -1) {
      this.#lines = [];
      this.#keep(bytes);
      return;
    }
    const last = bytes.lastIndexOf(NEWLINE);
    const ended = this.#endLine(bytes.subarray(0, first));
    this.#lines = last === first
      ? [ended]
      : [ended, ...this.#decode(bytes.subarray(first + 1, last)).split("\n")];
    this.#keep(bytes.subarray(last + 1));
  }

  /** The line the held bytes and `tail` (up to its newline) make; nothing is held after. */
  #endLine(tail: Uint8Array): string | typeof OVERLONG_LINE {
    if (this.#overlong || this.#partialBytes + tail.length > this.#maxLineBytes) {
      this.#overlong = false;
      this.#partialBytes = 0;
      this.#firstLine = false;
      return OVERLONG_LINE;
    }
    if (this.#partialBytes === 0) return this.#decode(tail);
    this.#hold(tail);
    const line = this.#decode(this.#partial.subarray(0, this.#partialBytes));
    this.#partialBytes = 0;
    return line;
  }

  /** Holds `bytes`, the start of a line that goes on, unless the line is past the bound. */
  #keep(bytes: Uint8Array): void {
    if (this.#overlong || bytes.length === 0) return;
    if (this.#partialBytes + bytes.length > this.#maxLineBytes) {
      this.#overlong = true;
      this.#partialBytes = 0;
      return;
    }
    this.#hold(bytes);
  }

  /** Appends `bytes` to the held line (the caller has checked the bound). */
  #hold(bytes: Uint8Array): void {
    const needed = this.#partialBytes + bytes.length;
    if (needed > this.#partial.length) {
      const grown = new Uint8Array(Math.min(this.#maxLineBytes, Math.max(needed, 2 * this.#partial.length)));
      grown.set(this.#partial.subarray(0, this.#partialBytes));
      this.#partial = grown;
    }
    this.#partial.set(bytes, this.#partialBytes);
    this.#partialBytes = needed;
    this.#peakHeldBytes = Math.max(this.#peakHeldBytes, needed);
  }

  /** Whole lines' bytes as text; the file's first line loses a byte-order mark. */
  #decode(bytes: Uint8Array): string {
    const text = this.#decoder.decode(bytes);
    if (!this.#firstLine) return text;
    this.#firstLine = false;
    return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  }
}
