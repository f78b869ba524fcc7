/**
 * @module
 * When the synthetic workload's requests (or sessions) arrive: Poisson, Gamma
 * renewal or two-state Markov-modulated arrivals, shaped over time by a
 * piecewise-linear rate profile through time rescaling.
 */
import { sampleExponential, sampleGamma } from "./distributions.ts";
import type { RandomStream } from "../runtime/random_stream.ts";

/**
 * Bursty and time-varying arrivals. The mean rate is always `ratePerSec`
 * (times the profile's factor at each moment).
 */
export interface ArrivalOptions {
  /**
   * `poisson`: exponential gaps. `gamma`: a renewal process whose gaps are
   * Gamma-distributed with squared coefficient of variation `burstiness`
   * (1 is Poisson; above 1, bursty). `mmpp`: a two-state Markov-modulated
   * Poisson process whose high state's rate is `burstiness` times the low
   * state's, each state lasting an exponential time of mean `burstMs`.
   */
  readonly process: "poisson" | "gamma" | "mmpp";
  /** gamma: CV² of the gaps (> 0); mmpp: high/low rate ratio (>= 1). @default 1 */
  readonly burstiness: number;
  /** mmpp: mean time in each state, ms (> 0). @default 10000 */
  readonly burstMs: number;
  /**
   * A rate profile: the rate is `ratePerSec` × a factor that moves linearly
   * between these points (sorted by `atMs`, the first at 0) and stays at the
   * last one after it — or repeats from 0 every `periodMs` when set.
   * Absent: factor 1 throughout.
   */
  readonly profile?: RateProfile;
}

/** A piecewise-linear factor on the arrival rate over simulated time. */
export interface RateProfile {
  readonly points: readonly { readonly atMs: number; readonly factor: number }[];
  /** Repeat every this many ms (a diurnal cycle); absent: hold the last factor. */
  readonly periodMs?: number;
}

/** Arrival times drawn one at a time, in increasing order, from a caller's stream. */
export interface ArrivalProcess {
  /** Starts the process at `nowMs` and returns its first arrival time, ms. */
  first(nowMs: number, random: RandomStream): number;
  /** The arrival time after the last one returned, ms. */
  next(random: RandomStream): number;
}

/**
 * The arrival process of `arrivals` at a mean rate of `ratePerSec`. Absent
 * options, and `poisson` without a profile, draw exactly one exponential gap
 * per arrival, as the workload always has.
 *
 * Draw order: `poisson`, one exponential per arrival; `gamma`, one Gamma
 * variate per arrival (several uniforms each); `mmpp`, at the start the state
 * (high with probability 1/2) and its sojourn, then an exponential per arrival
 * and, at each state switch, the next sojourn and a fresh gap.
 *
 * @throws {RangeError} for a burstiness, burst length or profile the process cannot run on.
 * @example
 * ```ts
 * const process = createArrivalProcess(10, { process: "gamma", burstiness: 4, burstMs: 10000 });
 * let t = process.first(0, random);
 * t = process.next(random);
 * ```
 */
export function createArrivalProcess(ratePerSec: number, arrivals?: ArrivalOptions): ArrivalProcess {
  const meanGapMs = 1000 / ratePerSec;
  const time = arrivals?.profile === undefined ? undefined : new OperationalTime(arrivals.profile);
  switch (arrivals?.process ?? "poisson") {
    case "poisson":
      return new RenewalArrivals((random) => sampleExponential(meanGapMs, random), time);
    case "gamma": {
      const b = arrivals!.burstiness;
      if (!(b > 0 && Number.isFinite(b))) {
        throw new RangeError(`arrivals.burstiness: expected a finite number > 0 for gamma, got ${b}`);
      }
      const shape = 1 / b;
      return new RenewalArrivals((random) => sampleGamma(shape, meanGapMs / shape, random), time);
    }
    case "mmpp":
      return new MmppArrivals(meanGapMs, arrivals!.burstiness, arrivals!.burstMs, time);
    default:
      throw new RangeError(`arrivals.process: expected poisson, gamma or mmpp, got ${arrivals?.process}`);
  }
}

/**
 * Expected arrivals in `[fromMs, toMs)` at a mean rate of `ratePerSec` shaped
 * by `arrivals.profile`: the integral of the rate. Exact for Poisson and MMPP
 * (which starts in its stationary state), the long-run mean for Gamma.
 *
 * @example
 * ```ts
 * expectedArrivals(10, { process: "poisson", burstiness: 1, burstMs: 1, profile: { points: [{ atMs: 0, factor: 2 }] } }, 0, 1000); // 20
 * ```
 */
export function expectedArrivals(
  ratePerSec: number,
  arrivals: ArrivalOptions | undefined,
  fromMs: number,
  toMs: number,
): number {
  if (arrivals?.profile === undefined) return ratePerSec * (toMs - fromMs) / 1000;
  const time = new OperationalTime(arrivals.profile);
  return ratePerSec * (time.toOperational(toMs) - time.toOperational(fromMs)) / 1000;
}

/**
 * A renewal process (independent, identically distributed gaps) in
 * operational time, mapped to real time through the profile when there is one.
 */
class RenewalArrivals implements ArrivalProcess {
  readonly #gap: (random: RandomStream) => number;
  readonly #time: OperationalTime | undefined;
  #operationalMs = 0;
  #lastMs = 0;

  constructor(gap: (random: RandomStream) => number, time: OperationalTime | undefined) {
    this.#gap = gap;
    this.#time = time;
  }

  first(nowMs: number, random: RandomStream): number {
    this.#lastMs = nowMs;
    this.#operationalMs = this.#time === undefined ? nowMs : this.#time.toOperational(nowMs);
    return this.next(random);
  }

  next(random: RandomStream): number {
    this.#operationalMs += this.#gap(random);
    if (this.#time === undefined) return this.#operationalMs;
    // Never earlier than the last arrival, whatever the rounding of the inverse.
    return this.#lastMs = Math.max(this.#lastMs, this.#time.toReal(this.#operationalMs));
  }
}

/**
 * A two-state Markov-modulated Poisson process. The states' rates are
 * 2λ/(1+b) and 2λb/(1+b), so the long-run rate is λ; each state lasts an
 * exponential time of mean `burstMs` of real time (the profile, if any, shapes
 * the rate within a state, not the states' lengths). Exact: within a state the
 * gaps are exponential; at a switch the gap is drawn afresh (memoryless).
 */
class MmppArrivals implements ArrivalProcess {
  readonly #lowGapMs: number;
  readonly #highGapMs: number;
  readonly #burstMs: number;
  readonly #time: OperationalTime | undefined;
  #high = false;
  #switchMs = 0;
  #operationalMs = 0;
  #lastMs = 0;

  constructor(meanGapMs: number, burstiness: number, burstMs: number, time: OperationalTime | undefined) {
    if (!(burstiness >= 1 && Number.isFinite(burstiness))) {
      throw new RangeError(`arrivals.burstiness: expected a finite number >= 1 for mmpp, got ${burstiness}`);
    }
    if (!(burstMs > 0 && Number.isFinite(burstMs))) {
      throw new RangeError(`arrivals.burstMs: expected a finite number > 0, got ${burstMs}`);
    }
    this.#lowGapMs = meanGapMs * (1 + burstiness) / 2;
    this.#highGapMs = meanGapMs * (1 + burstiness) / (2 * burstiness);
    this.#burstMs = burstMs;
    this.#time = time;
  }

  first(nowMs: number, random: RandomStream): number {
    this.#high = random() < 0.5;
    this.#switchMs = nowMs + sampleExponential(this.#burstMs, random);
    this.#operationalMs = this.#toOperational(nowMs);
    this.#lastMs = nowMs;
    return this.next(random);
  }

  next(random: RandomStream): number {
    for (;;) {
      const operationalMs = this.#operationalMs +
        sampleExponential(this.#high ? this.#highGapMs : this.#lowGapMs, random);
      const atMs = this.#time === undefined ? operationalMs : this.#time.toReal(operationalMs);
      if (atMs < this.#switchMs) {
        this.#operationalMs = operationalMs;
        return this.#lastMs = Math.max(this.#lastMs, atMs);
      }
      this.#operationalMs = this.#toOperational(this.#switchMs);
      this.#high = !this.#high;
      this.#switchMs += sampleExponential(this.#burstMs, random);
    }
  }

  #toOperational(realMs: number): number {
    return this.#time === undefined ? realMs : this.#time.toOperational(realMs);
  }
}

/**
 * The time rescaling of a rate profile: operational time Λ(t) = ∫₀ᵗ f(u) du,
 * where f is the profile's factor, in ms (a process at rate λ in operational
 * time has rate λ·f(t) in real time). Λ is piecewise quadratic; both it and
 * its inverse are computed exactly per segment. Time spans where the factor is
 * 0 are skipped by the inverse (it returns their end).
 *
 * After the last point the factor holds its value, up to `periodMs` when
 * set, where the cycle starts again from the first point (so a smooth cycle
 * ends with a point back at the first point's factor).
 *
 * @example
 * ```ts
 * const time = new OperationalTime({ points: [{ atMs: 0, factor: 1 }, { atMs: 10000, factor: 3 }] });
 * time.toOperational(10000); // 20000
 * time.toReal(20000); // 10000
 * ```
 */
export class OperationalTime {
  /** Each segment's start, ms (within a period). */
  readonly #startsMs: Float64Array;
  /** Each segment's factor at its start. */
  readonly #factors: Float64Array;
  /** Each segment's factor change per ms. */
  readonly #slopes: Float64Array;
  /** Operational time at each segment's start (within a period). */
  readonly #areas: Float64Array;
  /** Each segment's length, ms (Infinity for the last one without a period). */
  readonly #lengthsMs: Float64Array;
  /** The period, ms; Infinity without one. */
  readonly #periodMs: number;
  /** Operational time per period. */
  readonly #periodArea: number;

  /** @throws {RangeError} for a profile whose Λ cannot be inverted (see {@linkcode checkProfile}). */
  constructor(profile: RateProfile) {
    checkProfile(profile);
    const { points } = profile;
    const n = points.length;
    const periodMs = profile.periodMs ?? Infinity;
    this.#startsMs = new Float64Array(n);
    this.#factors = new Float64Array(n);
    this.#slopes = new Float64Array(n);
    this.#areas = new Float64Array(n);
    this.#lengthsMs = new Float64Array(n);
    let area = 0;
    for (let i = 0; i < n; i++) {
      const { atMs, factor } = points[i];
      const endMs = i + 1 < n ? points[i + 1].atMs : periodMs;
      const endFactor = i + 1 < n ? points[i + 1].factor : factor;
      const lengthMs = endMs - atMs;
      this.#startsMs[i] = atMs;
      this.#factors[i] = factor;
      this.#slopes[i] = lengthMs > 0 && Number.isFinite(lengthMs) ? (endFactor - factor) / lengthMs : 0;
      this.#areas[i] = area;
      this.#lengthsMs[i] = lengthMs;
      if (Number.isFinite(lengthMs)) area += lengthMs * (factor + endFactor) / 2;
    }
    this.#periodMs = periodMs;
    this.#periodArea = area;
  }

  /** Λ(t): operational time at real time `realMs` (>= 0), ms. */
  toOperational(realMs: number): number {
    let cycles = 0, r = realMs;
    if (this.#periodMs !== Infinity) {
      cycles = Math.floor(realMs / this.#periodMs);
      r = realMs - cycles * this.#periodMs;
    }
    const i = lastAtOrBelow(this.#startsMs, r);
    const x = r - this.#startsMs[i];
    return cycles * this.#periodArea + this.#areas[i] + x * (this.#factors[i] + 0.5 * this.#slopes[i] * x);
  }

  /** Λ⁻¹(s): the real time at which operational time reaches `operationalMs` (>= 0), ms. */
  toReal(operationalMs: number): number {
    let cycles = 0, r = operationalMs;
    if (this.#periodMs !== Infinity) {
      cycles = Math.floor(operationalMs / this.#periodArea);
      r = operationalMs - cycles * this.#periodArea;
      if (r >= this.#periodArea) r = 0, cycles++;
    }
    // The last segment starting at or below r: zero-area segments before it are skipped.
    const i = lastAtOrBelow(this.#areas, r);
    const delta = r - this.#areas[i];
    const f = this.#factors[i], m = this.#slopes[i];
    let x = 0;
    if (delta > 0) {
      // Solve f·x + m·x²/2 = delta, in the form without cancellation (f = 0: a ramp up from 0).
      if (m === 0) x = delta / f;
      else if (f === 0) x = Math.sqrt(2 * delta / m);
      else x = 2 * delta / (f + Math.sqrt(Math.max(0, f * f + 2 * m * delta)));
      x = Math.min(x, this.#lengthsMs[i]);
    }
    return (cycles === 0 ? 0 : cycles * this.#periodMs) + this.#startsMs[i] + x;
  }
}

/**
 * Rejects a profile the time rescaling cannot run on: no points, a first
 * point not at 0, unsorted or non-finite points, a negative factor, a period
 * not after the last point, a periodic profile that is 0 throughout, or a
 * non-periodic one that ends at 0 (its later arrivals would never come).
 *
 * @throws {RangeError} naming the field, the value and what was expected.
 */
function checkProfile(profile: RateProfile): void {
  const { points, periodMs } = profile;
  if (points.length === 0) {
    throw new RangeError("arrivals.profile.points: expected at least one point, got none");
  }
  if (points[0].atMs !== 0) {
    throw new RangeError(`arrivals.profile.points[0].atMs: expected 0, got ${points[0].atMs}`);
  }
  let positive = false;
  for (let i = 0; i < points.length; i++) {
    const { atMs, factor } = points[i];
    if (!(Number.isFinite(atMs) && (i === 0 || atMs >= points[i - 1].atMs))) {
      throw new RangeError(
        `arrivals.profile.points[${i}].atMs: expected a finite number >= the previous, got ${atMs}`,
      );
    }
    if (!(factor >= 0 && Number.isFinite(factor))) {
      throw new RangeError(
        `arrivals.profile.points[${i}].factor: expected a finite number >= 0, got ${factor}`,
      );
    }
    positive ||= factor > 0;
  }
  const lastMs = points[points.length - 1].atMs;
  if (periodMs !== undefined && !(periodMs > lastMs && Number.isFinite(periodMs))) {
    throw new RangeError(`arrivals.profile.periodMs: expected a finite number > ${lastMs}, got ${periodMs}`);
  }
  if (!positive) throw new RangeError("arrivals.profile.points: expected a factor > 0, got all 0");
  if (periodMs === undefined && points[points.length - 1].factor === 0) {
    throw new RangeError(
      "arrivals.profile.points: the last factor is 0 and there is no periodMs, so arrivals stop",
    );
  }
}

/** Index of the last element of `sorted` that is <= `value` (0 if none is). */
function lastAtOrBelow(sorted: Float64Array, value: number): number {
  let lo = 0, hi = sorted.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (sorted[mid] <= value) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
