/**
 * @module
 * A generated trace as a Mooncake JSONL file: the rows in chunks for an
 * atomic streaming write, their running totals, and the one-line summary —
 * shared by `deno task trace-gen` and the bench.
 */
import { mooncakeLine, type MooncakeRow, type TraceGenerator } from "../../actors/traces/trace_generator.ts";
import { MAX_TRACE_LINE_BYTES, MOONCAKE_BLOCK_TOKENS } from "../../actors/traces/trace_reader.ts";
import { UsageError } from "../cli/usage_error.ts";

/** What a written trace holds, for the one-line summary. */
export interface TraceSummary {
  /** Rows written. */
  readonly requests: number;
  /** Sessions with at least one row. */
  readonly sessions: number;
  /** Last timestamp minus the first, ms. */
  readonly durationMs: number;
  /** Mean `input_length`, tokens. */
  readonly meanInputTokens: number;
  /** Mean `output_length`, tokens. */
  readonly meanOutputTokens: number;
  /** Mean `hash_ids` per row (512-token blocks). */
  readonly meanBlocks: number;
}

/** Characters of JSONL gathered before a chunk is handed to the writer (about 64 KiB). */
const CHUNK_CHARS = 1 << 16;

/**
 * The generator's rows as JSONL text, in chunks of about 64 KiB (one line per
 * row, each ending in a newline), tallying `summary` as it goes: memory holds
 * one chunk and the open sessions, never the trace.
 *
 * @throws {UsageError} for a row longer than the trace reader reads
 * ({@linkcode MAX_TRACE_LINE_BYTES}): a file that could not be replayed.
 */
export function* traceChunks(generator: TraceGenerator, summary: TraceTally): Generator<string> {
  let lines: string[] = [], chars = 0;
  for (let row = generator.next(); row !== undefined; row = generator.next()) {
    const line = mooncakeLine(row);
    // Digits and punctuation only: one byte per character.
    if (line.length > MAX_TRACE_LINE_BYTES) throw overlongRow(summary.requests + 1, line.length, row);
    summary.add(row);
    lines.push(line);
    chars += line.length + 1;
    if (chars >= CHUNK_CHARS) {
      yield lines.join("\n") + "\n";
      lines = [];
      chars = 0;
    }
  }
  if (lines.length > 0) yield lines.join("\n") + "\n";
}

function overlongRow(index: number, bytes: number, row: MooncakeRow): UsageError {
  return new UsageError(
    `trace generator: row ${index} would be a line of ${bytes} bytes (input_length ${row.input_length}), ` +
      `longer than the ${MAX_TRACE_LINE_BYTES} bytes the trace reader reads; lower --first-message-tokens, ` +
      `--message-tokens, --output-tokens or --turns-mean`,
  );
}

/** Running totals of the rows written. */
export class TraceTally {
  #requests = 0;
  #firstMs = 0;
  #lastMs = 0;
  #inputTokens = 0;
  #outputTokens = 0;
  #blocks = 0;

  /** Rows counted so far. */
  get requests(): number {
    return this.#requests;
  }

  /** Counts one row. */
  add(row: MooncakeRow): void {
    if (this.#requests === 0) this.#firstMs = row.timestamp;
    this.#lastMs = row.timestamp;
    this.#requests++;
    this.#inputTokens += row.input_length;
    this.#outputTokens += row.output_length;
    this.#blocks += row.hash_ids.length;
  }

  /** The totals so far, with the generator's session count. */
  summary(sessions: number): TraceSummary {
    const n = Math.max(1, this.#requests);
    return {
      requests: this.#requests,
      sessions,
      durationMs: this.#lastMs - this.#firstMs,
      meanInputTokens: this.#inputTokens / n,
      meanOutputTokens: this.#outputTokens / n,
      meanBlocks: this.#blocks / n,
    };
  }
}

/** The one line `trace-gen` prints about what it wrote. */
export function formatSummary(path: string, s: TraceSummary): string {
  const seconds = s.durationMs / 1000;
  return `wrote ${s.requests} requests (${s.sessions} sessions) over ${seconds.toFixed(1)} s ` +
    `(${(seconds > 0 ? s.requests / seconds : 0).toFixed(2)} req/s) to ${path}: ` +
    `mean input ${s.meanInputTokens.toFixed(0)} tokens (${
      s.meanBlocks.toFixed(1)
    } blocks of ${MOONCAKE_BLOCK_TOKENS}), ` +
    `mean output ${s.meanOutputTokens.toFixed(1)} tokens`;
}
