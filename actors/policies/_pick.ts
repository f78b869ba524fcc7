/**
 * @module
 * The arg-max every scored policy needs, with a uniformly random choice among
 * equal scores (reservoir sampling), so no instance collects every tie.
 */
import type { IndexList, RandomStream } from "./policy.ts";

/**
 * The index in [0, n) with the highest `score` (among those `score` does not
 * return NaN for); ties uniformly at random. −1 if every score is NaN.
 *
 * With `available` (an availability mask, see `availabilityMask`), only the
 * indices whose entry is 1 compete: the others are not scored and draw
 * nothing. Without it every index competes, as before availability existed.
 */
export function pickBy(
  n: number,
  score: (i: number) => number,
  random: RandomStream,
  available?: ArrayLike<number>,
): number {
  let best = -1, bestScore = -Infinity, ties = 0;
  for (let i = 0; i < n; i++) {
    if (available !== undefined && available[i] !== 1) continue;
    const s = score(i);
    if (Number.isNaN(s)) continue;
    if (best < 0 || s > bestScore) {
      best = i;
      bestScore = s;
      ties = 1;
    } else if (s === bestScore && random() * ++ties < 1) {
      best = i;
    }
  }
  return best;
}

/**
 * The index in [0, n) with the highest `score` (NaN: not a candidate), the
 * lowest index among equal scores, with no random draw: Rust's `max_by_key`
 * / `min_by_key` over a list keep the first of equals, which is how SGLang's
 * gateway picks. -1 when no index competes. With `available`, only indices
 * whose entry is 1 compete.
 */
export function firstBy(n: number, score: (i: number) => number, available?: ArrayLike<number>): number {
  // A "random" number that never wins a tie: the first of equals stays.
  return pickBy(n, score, NEVER_REPLACE, available);
}

/** A stream whose every draw is 1: `random() * ties < 1` never holds, so no tie replaces the first. */
const NEVER_REPLACE: RandomStream = () => 1;

/**
 * {@linkcode pickBy} over the instances of `list` only, in its (index)
 * order: the same choice and the same draws as `pickBy` over the whole fleet
 * whenever every instance outside `list` scores NaN (is not a candidate).
 */
export function pickAmong(list: IndexList, score: (i: number) => number, random: RandomStream): number {
  const k = pickBy(list.size, (k) => score(list.at(k)), random);
  return k < 0 ? -1 : list.at(k);
}
