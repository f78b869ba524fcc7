/**
 * @module
 * What the documentation generators share: a markdown table padded the way
 * `deno fmt` pads it, and the swap of a generated section between two marker
 * comments in a hand-written page.
 */

/** The two comments a generated section sits between in a markdown page. */
export interface SectionMarkers {
  /** The comment before the section, e.g. `<!-- policies:begin -->`. */
  readonly begin: string;
  /** The comment after it. */
  readonly end: string;
}

/**
 * A markdown table of `rows` (the first is the header), each cell's `|`
 * escaped and every column padded as `deno fmt` pads it, so a page holding
 * the table stays formatted.
 *
 * @example
 * ```ts
 * markdownTable([["key", "meaning"], ["`seed`", "the seed"]]);
 * // | key    | meaning  |
 * // | ------ | -------- |
 * // | `seed` | the seed |
 * ```
 */
export function markdownTable(rows: readonly (readonly string[])[]): string {
  const escaped = rows.map((row) => row.map((cell) => cell.replaceAll("|", "\\|")));
  const widths = escaped[0].map((_, column) => Math.max(3, ...escaped.map((row) => width(row[column]))));
  const line = (cells: readonly string[]) =>
    `| ${cells.map((cell, column) => cell + " ".repeat(widths[column] - width(cell))).join(" | ")} |`;
  return [line(escaped[0]), line(widths.map((w) => "-".repeat(w))), ...escaped.slice(1).map(line)].join("\n");
}

/** `section` between its markers, with the blank lines `deno fmt` keeps around them. */
export function markedSection(markers: SectionMarkers, section: string): string {
  return `${markers.begin}\n\n${section}\n\n${markers.end}`;
}

/**
 * The text between (and including) `markers` in `page`.
 * @throws {RangeError} when `page` lacks either marker, or has them out of order.
 */
export function findSection(page: string, markers: SectionMarkers, pageName: string): string {
  const begin = page.indexOf(markers.begin), end = page.indexOf(markers.end);
  if (begin < 0 || end < begin) {
    throw new RangeError(
      `${pageName}: expected the markers ${markers.begin} … ${markers.end}, in that order`,
    );
  }
  return page.slice(begin, end + markers.end.length);
}

/** `page` with the text between `markers` replaced by `section` (markers included). */
export function replaceSection(
  page: string,
  markers: SectionMarkers,
  section: string,
  pageName: string,
): string {
  return page.replace(findSection(page, markers, pageName), () => section);
}

/** Characters as `deno fmt` counts them when it pads a table (code points). */
function width(text: string): number {
  return [...text].length;
}
