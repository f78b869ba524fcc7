/**
 * @module
 * A High Dynamic Range histogram (HdrHistogram's buckets) of the TTFTs and
 * KV transfers the metrics record: the two operations they use, with exactly
 * hdr-histogram-js's answers (a test compares them). Ours because that
 * package's module took longer to load than a run's recording takes.
 */

/**
 * Counts non-negative values in HdrHistogram's buckets: exact up to
 * 2 × 10^`significantDigits`, then to that many significant digits, over
 * any range (the counts grow to cover the largest value recorded). The
 * answers are hdr-histogram-js's `JsHistogram` with a lowest discernible
 * value of 1 and `autoResize`, value for value.
 *
 * @example
 * ```ts
 * const h = new HdrHistogram(3, 1e13);
 * h.recordValue(1500);
 * h.recordValue(123_456);
 * h.getValueAtPercentile(50); // 1500
 * h.getValueAtPercentile(99); // 123519: the highest value equivalent to 123456
 * ```
 */
export class HdrHistogram {
  /** log2 of half the sub-buckets per bucket. */
  readonly #halfCountMagnitude: number;
  /** Half the sub-buckets per bucket: every bucket but the first uses only its top half. */
  readonly #halfCount: number;
  readonly #subBucketCount: number;
  #counts: Float64Array;
  #totalCount = 0;

  /**
   * @param significantDigits Decimal digits of precision kept at every magnitude, 0–5.
   * @param highestTrackableValue The counts' first size covers values up to this one (larger ones grow it), >= 2.
   * @throws {RangeError} for digits outside 0–5 or a highest value below 2.
   */
  constructor(significantDigits: number, highestTrackableValue: number) {
    if (!(Number.isInteger(significantDigits) && significantDigits >= 0 && significantDigits <= 5)) {
      throw new RangeError(
        `HdrHistogram: significantDigits: expected an integer 0–5, got ${significantDigits}`,
      );
    }
    if (!(highestTrackableValue >= 2)) {
      throw new RangeError(
        `HdrHistogram: highestTrackableValue: expected a number >= 2, got ${highestTrackableValue}`,
      );
    }
    const countMagnitude = Math.ceil(Math.log2(2 * Math.floor(10 ** significantDigits)));
    this.#halfCountMagnitude = (countMagnitude > 1 ? countMagnitude : 1) - 1;
    this.#subBucketCount = 2 ** (this.#halfCountMagnitude + 1);
    this.#halfCount = this.#subBucketCount / 2;
    this.#counts = new Float64Array(this.#lengthToCover(highestTrackableValue));
  }

  /** Values recorded. */
  get totalCount(): number {
    return this.#totalCount;
  }

  /**
   * Counts one value.
   * @throws {RangeError} when `value` is negative or not a number.
   */
  recordValue(value: number): void {
    if (!(value >= 0)) throw new RangeError(`HdrHistogram.recordValue: expected a value >= 0, got ${value}`);
    let index: number;
    if (value < 2 ** 32) {
      // Integer arithmetic, equal to the general case below for every value in range.
      const bucket = Math.max(31 - Math.clz32(value) - this.#halfCountMagnitude, 0);
      index = (bucket + 1) * this.#halfCount + (value >>> bucket) - this.#halfCount;
    } else {
      const bucket = this.#bucketIndex(value);
      index = (bucket + 1) * this.#halfCount + Math.floor(value / 2 ** bucket) - this.#halfCount;
    }
    if (index >= this.#counts.length) {
      const counts = new Float64Array(this.#lengthToCover(value));
      counts.set(this.#counts);
      this.#counts = counts;
    }
    this.#counts[index]++;
    this.#totalCount++;
  }

  /**
   * The value that `percentile` per cent of the recorded values are at most
   * (equivalent to: the highest value of its bucket; at 0, the lowest), or
   * 0 when nothing was recorded.
   */
  getValueAtPercentile(percentile: number): number {
    const fpCount = (Math.min(percentile, 100) / 100) * this.#totalCount;
    // Round up, but not past a count that the floating-point product overshot by one ulp.
    const ulp = 2 ** (Math.floor(Math.log2(fpCount)) - 52);
    const countAtPercentile = Math.max(Math.ceil(fpCount - ulp), 1);
    const counts = this.#counts;
    let total = 0;
    for (let i = 0; i < counts.length; i++) {
      total += counts[i];
      if (total >= countAtPercentile) {
        const value = this.#valueFromIndex(i);
        const bucket = this.#bucketIndex(value);
        const sub = Math.floor(value / 2 ** bucket);
        const lowest = sub * 2 ** bucket;
        if (percentile === 0) return lowest;
        return lowest + 2 ** (sub >= this.#subBucketCount ? bucket + 1 : bucket) - 1;
      }
    }
    return 0;
  }

  /** The bucket of `value`: the lowest (finest) one that can hold it. */
  #bucketIndex(value: number): number {
    return Math.max(Math.floor(Math.log2(value)) - this.#halfCountMagnitude, 0);
  }

  /** The lowest value counted at `index`. */
  #valueFromIndex(index: number): number {
    let bucket = Math.floor(index / this.#halfCount) - 1;
    let sub = (index % this.#halfCount) + this.#halfCount;
    if (bucket < 0) {
      sub -= this.#halfCount;
      bucket = 0;
    }
    return sub * 2 ** bucket;
  }

  /** Counts needed to cover `value`: one half-bucket more than the buckets, the first bucket being whole. */
  #lengthToCover(value: number): number {
    let smallestUntrackable = this.#subBucketCount;
    let buckets = 1;
    while (smallestUntrackable <= value) {
      // Past 2^52 the next bucket holds every value up to MAX_SAFE_INTEGER and beyond.
      if (smallestUntrackable > Number.MAX_SAFE_INTEGER / 2) return (buckets + 2) * this.#halfCount;
      smallestUntrackable *= 2;
      buckets++;
    }
    return (buckets + 1) * this.#halfCount;
  }
}
