/**
 * @module
 * Random variates the workload needs, drawn from a caller's seeded stream:
 * token-length distributions, exponential, normal and Gamma variates, and Zipf
 * popularity.
 */
import type { RandomStream } from "../runtime/random_stream.ts";

/** A distribution of token counts (whole numbers >= 0). */
export type LengthDistribution =
  | { readonly dist: "constant"; readonly value: number }
  | { readonly dist: "exponential"; readonly mean: number }
  | { readonly dist: "uniform"; readonly min: number; readonly max: number };

/** Mean of a length distribution, as configured. */
export function meanOf(d: LengthDistribution): number {
  switch (d.dist) {
    case "constant":
      return d.value;
    case "exponential":
      return d.mean;
    case "uniform":
      return (d.min + d.max) / 2;
  }
}

/**
 * Draws one token count. `constant` draws nothing; `exponential` rounds an
 * exponential variate to the nearest whole token; `uniform` is inclusive.
 */
export function sampleLength(d: LengthDistribution, random: RandomStream): number {
  switch (d.dist) {
    case "constant":
      return d.value;
    case "exponential":
      return Math.round(sampleExponential(d.mean, random));
    case "uniform":
      return d.min + Math.floor(random() * (d.max - d.min + 1));
  }
}

/** An exponential variate with the given mean (inverse transform). */
export function sampleExponential(mean: number, random: RandomStream): number {
  return -mean * Math.log(1 - random());
}

/** A standard normal variate (Box–Muller, two draws per variate, no state kept). */
export function sampleNormal(random: RandomStream): number {
  const radius = Math.sqrt(-2 * Math.log(1 - random()));
  return radius * Math.cos(2 * Math.PI * random());
}

/**
 * A Gamma variate of shape `shape` (> 0) and scale `scale` (mean shape ×
 * scale, squared coefficient of variation 1 / shape), by Marsaglia and Tsang's
 * exact rejection method; a shape below 1 draws shape + 1 and multiplies by
 * U^(1/shape). Draws a varying number of values from `random`.
 *
 * @example
 * ```ts
 * sampleGamma(0.25, 4, random); // mean 1, CV² 4: mostly tiny, now and then large
 * ```
 */
export function sampleGamma(shape: number, scale: number, random: RandomStream): number {
  if (shape < 1) {
    const boosted = sampleGamma(shape + 1, scale, random);
    return boosted * Math.pow(1 - random(), 1 / shape);
  }
  const d = shape - 1 / 3;
  const c = 1 / Math.sqrt(9 * d);
  for (;;) {
    let x: number, v: number;
    do {
      x = sampleNormal(random);
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const u = random();
    const x2 = x * x;
    if (u < 1 - 0.0331 * x2 * x2 || Math.log(u) < 0.5 * x2 + d * (1 - v + Math.log(v))) {
      return d * v * scale;
    }
  }
}

/**
 * Zipf popularity over `n` items: item k (0-based) has weight `1 / (k+1)^s`.
 * `s = 0` is uniform. Sampling is a binary search over the cumulative weights.
 *
 * @example
 * ```ts
 * const zipf = new ZipfSampler(100, 1.0);
 * zipf.probability(0); // ≈ 0.193
 * ```
 */
export class ZipfSampler {
  readonly #cdf: Float64Array;

  constructor(n: number, s: number) {
    if (!(Number.isInteger(n) && n >= 1)) {
      throw new RangeError(`ZipfSampler: n must be an integer >= 1, got ${n}`);
    }
    if (!(s >= 0)) throw new RangeError(`ZipfSampler: s must be a number >= 0, got ${s}`);
    const cdf = new Float64Array(n);
    let total = 0;
    for (let k = 0; k < n; k++) {
      total += 1 / Math.pow(k + 1, s);
      cdf[k] = total;
    }
    for (let k = 0; k < n; k++) cdf[k] /= total;
    cdf[n - 1] = 1;
    this.#cdf = cdf;
  }

  /** Probability of item `k`. */
  probability(k: number): number {
    return this.#cdf[k] - (k === 0 ? 0 : this.#cdf[k - 1]);
  }

  /** Draws an item index in [0, n). */
  sample(random: RandomStream): number {
    const cdf = this.#cdf;
    const u = random();
    let lo = 0, hi = cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] > u) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
}
