/**
 * @module
 * Stand-in for `jsr:@std/csv` (JSR is unreachable here): std's `stringify`
 * and `parse` signatures over `npm:csv-stringify` and `npm:csv-parse`.
 * `deno.json` maps `@std/csv` here, so switching later is a one-line change.
 */
import { parse as parseSync } from "csv-parse/sync";
import { stringify as stringifySync } from "csv-stringify/sync";

/** Options for {@linkcode stringify}. */
export interface StringifyOptions {
  /** Column names, in order; also the header row. */
  readonly columns: readonly string[];
}

/** Serialises records as CSV with a header row and `\n` line ends. */
export function stringify(data: readonly Record<string, unknown>[], options: StringifyOptions): string {
  return stringifySync(data as Record<string, unknown>[], {
    header: true,
    columns: [...options.columns],
    record_delimiter: "\n",
  });
}

/** Options for {@linkcode parse}. */
export interface ParseOptions {
  /** Treat the first row as the header and return records. */
  readonly skipFirstRow: true;
}

/** Parses CSV with a header row into records of strings. */
export function parse(text: string, _options: ParseOptions): Record<string, string>[] {
  return parseSync(text, { columns: true, skip_empty_lines: true }) as Record<string, string>[];
}
