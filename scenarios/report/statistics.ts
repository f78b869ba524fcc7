/**
 * @module
 * Replication statistics: means and 95% confidence half-widths (Student's t)
 * over the seeds of a sweep point.
 */

/** Two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom (index: df − 1). */
export const T_975: readonly number[] = [
  12.706,
  4.303,
  3.182,
  2.776,
  2.571,
  2.447,
  2.365,
  2.306,
  2.262,
  2.228,
  2.201,
  2.179,
  2.16,
  2.145,
  2.131,
  2.12,
  2.11,
  2.101,
  2.093,
  2.086,
  2.08,
  2.074,
  2.069,
  2.064,
  2.06,
  2.056,
  2.052,
  2.048,
  2.045,
  2.042,
];

/** Arithmetic mean; 0 for an empty list. */
export function mean(values: readonly number[]): number {
  return values.length === 0 ? 0 : values.reduce((a, b) => a + b, 0) / values.length;
}

/**
 * Half-width of the 95% confidence interval of the mean: t(0.975, n−1) × s/√n
 * with the sample standard deviation s; 0 when n < 2 (no interval).
 */
export function ci95HalfWidth(values: readonly number[]): number {
  const n = values.length;
  if (n < 2) return 0;
  const m = mean(values);
  const s = Math.sqrt(values.reduce((a, v) => a + (v - m) ** 2, 0) / (n - 1));
  const t = n - 1 <= T_975.length ? T_975[n - 2] : 1.96;
  return (t * s) / Math.sqrt(n);
}

/**
 * Whether every value is defined: a mean over seeds is taken only then.
 * Averaging just the seeds that have a value would describe other runs than
 * the point's counts (a seed that dropped everything would vanish from its
 * TTFT and flatter the point), so one undefined seed leaves the mean undefined.
 */
function allDefined(values: readonly (number | null)[]): values is readonly number[] {
  return values.every((v) => v !== null);
}

/** {@linkcode mean} of a metric that can be undefined in a run: null when any value is null. */
export function meanOrNull(values: readonly (number | null)[]): number | null {
  return allDefined(values) ? mean(values) : null;
}

/** {@linkcode ci95HalfWidth} of a metric that can be undefined in a run: null when any value is null. */
export function ci95HalfWidthOrNull(values: readonly (number | null)[]): number | null {
  return allDefined(values) ? ci95HalfWidth(values) : null;
}
