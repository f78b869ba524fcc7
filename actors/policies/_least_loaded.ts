/**
 * @module
 * Choice among equals, shared by several policies: the least-loaded instance
 * (load = (waiting + running) ÷ capacity, so a mixed fleet is balanced by
 * work), ties broken uniformly at random so that no instance, instance 0 least
 * of all, collects every tie. Only available instances compete (the view's
 * `available`); with every instance available, the choices and draws are
 * those of a fleet without faults. On a fleet the router indexes
 * (`view.index`), the same choice comes from the index, with one draw among
 * the tied instead of one per tie met.
 */
import type { Request } from "../protocol.ts";
import type { RandomStream } from "./policy.ts";
import { availabilityMask } from "./_availability.ts";
import { effectiveMatch } from "./_host_credit.ts";
import { pickBy } from "./_pick.ts";
import type { RouterView } from "./policy.ts";

/**
 * Least-loaded instance overall, load = (waiting + running) ÷ capacity; ties
 * at random. A uniform fleet's capacities are all 1 and x ÷ 1 is x, so there
 * this is the fewest requests, with the same draws. Among available
 * instances only; unavailable ones draw nothing.
 */
export function leastLoaded(view: RouterView, random: RandomStream): number {
  if (view.index !== undefined) return view.index.pickLeast("active", random);
  const { waiting, running, capacity } = view;
  return pickBy(
    view.instanceCount,
    (i) => -(waiting[i] + running[i]) / capacity[i],
    random,
    availabilityMask(view),
  );
}

/**
 * Least-loaded instance (load ÷ capacity, as {@linkcode leastLoaded}) among
 * those with the longest cached prefix match, ties at random; -1 when no
 * instance matches a block. The match is `view.matchedBlocks` plus
 * `hostCredit` × the blocks only the instance's host tier holds
 * ({@linkcode effectiveMatch}); a fractional match compares as the number it
 * is, so at a credit below 1 a GPU match beats an equally long match partly in
 * host memory, and two matches tie only when their credited lengths are equal
 * (without a host tier every match is a whole number of blocks, as before). A
 * match every instance has (the longest equals the shortest) tells instances
 * apart no more than none: all of them tie, so this is the least-loaded
 * instance overall. Under the FIFO model's group-level view (all of a
 * request's keyed blocks where the group is held, else 0) the longest matches
 * are the group's holders: this is the old group rule's "least loaded
 * holder", with the same random draws.
 *
 * One pass: a longer match restarts the choice, so the result is uniform
 * among the least-loaded of the final longest matches, and instances that
 * match nothing draw nothing. Ties among a shorter match that a longer one
 * later replaces do spend draws, so where matches differ in length the
 * random stream is not {@linkcode pickBy}'s over the longest; where every
 * match is equal (the group view) it is exactly pickBy's.
 *
 * Unavailable instances are skipped before their match is asked for, so they
 * neither compete nor draw: the longest match is the longest among the
 * available instances.
 *
 * On an indexed fleet (`view.index`) only the index's candidates (the
 * holders of the request's first block run) are asked, in index order: the
 * same choice and the same draws, since the others match nothing. Under the
 * group view every candidate matches alike, and the index answers the least
 * loaded of them with one draw among equals.
 */
export function leastLoadedLongestMatch(
  view: RouterView,
  request: Request,
  random: RandomStream,
  hostCredit: number,
): number {
  const index = view.index;
  if (index?.wholeMatches === true) return index.pickLeastActiveCandidate(request, random);
  // Indexed: only the candidates can match; the others would be skipped without a draw.
  const candidates = index?.candidates(request);
  const { waiting, running, capacity } = view;
  const available = availabilityMask(view);
  const n = candidates === undefined ? view.instanceCount : candidates.size;
  let best = -1, longest = 0, bestLoad = Infinity, ties = 0;
  for (let k = 0; k < n; k++) {
    const i = candidates === undefined ? k : candidates.at(k);
    if (candidates === undefined && available !== undefined && available[i] !== 1) continue;
    const matched = effectiveMatch(view, i, request, hostCredit);
    if (matched === 0 || matched < longest) continue;
    const load = (waiting[i] + running[i]) / capacity[i];
    if (matched > longest || load < bestLoad) {
      best = i;
      longest = matched;
      bestLoad = load;
      ties = 1;
    } else if (load === bestLoad && random() * ++ties < 1) {
      best = i;
    }
  }
  return best;
}
