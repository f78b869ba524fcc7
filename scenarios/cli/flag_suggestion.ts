/**
 * @module
 * The nearest known flag to one a user mistyped, so every tool's "unknown
 * flag" error can say "did you mean --policy?".
 */

/** The longest edit distance at which a known flag is still suggested. */
export const MAX_SUGGESTION_DISTANCE = 2;

/**
 * Optimal-string-alignment distance between `a` and `b`: insertions,
 * deletions, substitutions and swaps of two neighbours each cost 1.
 */
export function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) rows[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      rows[i][j] = Math.min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        rows[i][j] = Math.min(rows[i][j], rows[i - 2][j - 2] + 1);
      }
    }
  }
  return rows[a.length][b.length];
}

/**
 * The known flag nearest to `typed` (`--polcy`, `--pol`, `--policy=x`):
 * the closest within {@linkcode MAX_SUGGESTION_DISTANCE} edits (and fewer
 * edits than half the longer name, so a two-letter typo does not match any
 * two-letter flag), else the shortest known flag `typed` begins. Of equally
 * close flags, the one sharing the longest beginning with `typed` wins
 * (`--sped` → `--speed`, not `--seed`), then the first in `known`.
 * Undefined when none is near.
 *
 * @param typed the flag as typed, with its dashes
 * @param known the tool's flag names, without dashes (a `parseArgs` options object's keys)
 *
 * @example
 * ```ts
 * import { nearestFlag } from "./flag_suggestion.ts";
 * nearestFlag("--polcy", ["policy", "rate"]); // "--policy"
 * nearestFlag("--inst", ["instances", "seed"]); // "--instances"
 * nearestFlag("--bogus", ["policy", "rate"]); // undefined
 * ```
 */
export function nearestFlag(typed: string, known: readonly string[]): string | undefined {
  const name = typed.replace(/^-+/, "").split("=")[0].toLowerCase();
  if (name.length === 0) return undefined;
  let best: string | undefined, bestDistance = Infinity, bestShared = -1;
  for (const flag of known) {
    const lower = flag.toLowerCase();
    const d = editDistance(name, lower);
    if (d > MAX_SUGGESTION_DISTANCE || d >= Math.max(name.length, lower.length) / 2) continue;
    const shared = sharedPrefix(name, lower);
    if (d < bestDistance || (d === bestDistance && shared > bestShared)) {
      [best, bestDistance, bestShared] = [flag, d, shared];
    }
  }
  if (best === undefined && name.length >= 2) {
    const longer = known.filter((flag) => flag.startsWith(name));
    best = longer.sort((a, b) => a.length - b.length)[0];
  }
  return best === undefined ? undefined : `--${best}`;
}

/** How many leading characters `a` and `b` share. */
function sharedPrefix(a: string, b: string): number {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

/**
 * The message of an unknown flag: `unknown flag --polcy; did you mean
 * --policy? (see --help)`, or without the suggestion when none is near.
 */
export function unknownFlagMessage(typed: string, known: readonly string[]): string {
  const near = nearestFlag(typed, known);
  return `unknown flag ${typed}${near === undefined ? "" : `; did you mean ${near}?`} (see --help)`;
}
