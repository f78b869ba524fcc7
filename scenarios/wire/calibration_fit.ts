/**
 * @module
 * The arithmetic of `deno task calibrate`: least-squares lines with their
 * confidence intervals, the engine coefficients they give, the step budget
 * a burst of prefills reveals, and when the estimates are stable. Pure: the
 * measuring is `calibration.ts`.
 */

import { T_975 } from "../report/statistics.ts";

/** A fitted straight line y = intercept + slope·x, with standard errors. */
export interface LineFit {
  readonly intercept: number;
  readonly slope: number;
  readonly interceptSe: number;
  readonly slopeSe: number;
  /** Points fitted. */
  readonly n: number;
  /** Residual standard deviation (n − 2 degrees of freedom). */
  readonly sigma: number;
}

/**
 * Ordinary least squares of `ys` on `xs`.
 * @throws {RangeError} with fewer than 3 points or when every x is equal (no slope can be fitted).
 */
export function fitLine(xs: readonly number[], ys: readonly number[]): LineFit {
  const n = xs.length;
  if (n !== ys.length) throw new RangeError(`fitLine: ${n} xs against ${ys.length} ys`);
  if (n < 3) throw new RangeError(`fitLine: needs at least 3 points, got ${n}`);
  const mx = mean(xs), my = mean(ys);
  let sxx = 0, sxy = 0;
  for (let i = 0; i < n; i++) {
    sxx += (xs[i] - mx) ** 2;
    sxy += (xs[i] - mx) * (ys[i] - my);
  }
  if (!(sxx > 0)) throw new RangeError("fitLine: every x is the same, so no slope can be fitted");
  const slope = sxy / sxx, intercept = my - slope * mx;
  let sse = 0;
  for (let i = 0; i < n; i++) sse += (ys[i] - intercept - slope * xs[i]) ** 2;
  const sigma = Math.sqrt(sse / (n - 2));
  return {
    intercept,
    slope,
    slopeSe: sigma / Math.sqrt(sxx),
    interceptSe: sigma * Math.sqrt(1 / n + mx * mx / sxx),
    n,
    sigma,
  };
}

/** A fitted linear model y = Σ βⱼ·xⱼ, with standard errors. */
export interface LinearFit {
  readonly beta: readonly number[];
  readonly se: readonly number[];
  readonly n: number;
  /** Residual standard deviation (n − k degrees of freedom). */
  readonly sigma: number;
}

/**
 * Ordinary least squares of `ys` on the rows of `xs` (each row the k
 * regressors of one point; include a 1 for an intercept), by the normal
 * equations solved with Gauss–Jordan elimination.
 * @throws {RangeError} with no more points than regressors, or collinear regressors.
 */
export function fitLinear(xs: readonly (readonly number[])[], ys: readonly number[]): LinearFit {
  const n = xs.length, k = xs[0]?.length ?? 0;
  if (n !== ys.length) throw new RangeError(`fitLinear: ${n} rows against ${ys.length} ys`);
  if (n <= k) throw new RangeError(`fitLinear: needs more than ${k} points, got ${n}`);
  // Each regressor scaled to unit root-mean-square (a count of tokens and a count of token
  // pairs differ by 10⁴ and more), solved, then β and its errors scaled back.
  const scale = Array.from(
    { length: k },
    (_, j) => Math.sqrt(xs.reduce((sum, row) => sum + row[j] ** 2, 0) / n) || 1,
  );
  // [XᵀX | I | Xᵀy], reduced to [I | (XᵀX)⁻¹ | β].
  const m = Array.from({ length: k }, (_, i) => {
    const row = new Array<number>(2 * k + 1).fill(0);
    for (let p = 0; p < n; p++) {
      for (let j = 0; j < k; j++) row[j] += xs[p][i] / scale[i] * xs[p][j] / scale[j];
      row[2 * k] += xs[p][i] / scale[i] * ys[p];
    }
    row[k + i] = 1;
    return row;
  });
  for (let c = 0; c < k; c++) {
    let pivot = c;
    for (let r = c + 1; r < k; r++) if (Math.abs(m[r][c]) > Math.abs(m[pivot][c])) pivot = r;
    [m[c], m[pivot]] = [m[pivot], m[c]];
    // Scaled columns give XᵀX a unit diagonal: a pivot this small is a column the others make.
    if (!(Math.abs(m[c][c]) > 1e-10)) throw new RangeError("fitLinear: the regressors are collinear");
    const d = m[c][c];
    for (let j = 0; j <= 2 * k; j++) m[c][j] /= d;
    for (let r = 0; r < k; r++) {
      if (r === c) continue;
      const f = m[r][c];
      if (f !== 0) { for (let j = 0; j <= 2 * k; j++) m[r][j] -= f * m[c][j]; }
    }
  }
  const beta = m.map((row, j) => row[2 * k] / scale[j]);
  let sse = 0;
  for (let p = 0; p < n; p++) {
    let fitted = 0;
    for (let j = 0; j < k; j++) fitted += beta[j] * xs[p][j];
    sse += (ys[p] - fitted) ** 2;
  }
  const sigma = Math.sqrt(sse / (n - k));
  return { beta, se: m.map((row, i) => sigma * Math.sqrt(Math.max(0, row[k + i])) / scale[i]), n, sigma };
}

/** The mean of `values` (NaN when empty). */
export function mean(values: readonly number[]): number {
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

/** Student's t for a two-sided 95% interval with `df` degrees of freedom (1.96 beyond 120). */
export function t95(df: number): number {
  if (df < 1) return Infinity;
  if (df <= 30) return T_975[Math.floor(df) - 1];
  if (df <= 60) return 2.042 - (df - 30) * (2.042 - 2.0) / 30;
  if (df <= 120) return 2.0 - (df - 60) * (2.0 - 1.98) / 60;
  return 1.96;
}

/** One coefficient: its estimate and the half-width of its 95% confidence interval. */
export interface Estimate {
  readonly value: number;
  readonly ci95: number;
}

/** The batching engine's coefficients (actors/instances/engine_presets.ts `EnginePreset`), estimated. */
export interface EngineCoefficients {
  /** Fixed cost of a step (β0), ms. */
  readonly stepMs: Estimate;
  /** Cost per prefill token in a step (β1), ms. */
  readonly prefillMsPerToken: Estimate;
  /** Cost per decoding sequence in a step (β2), ms. */
  readonly decodeMsPerSeq: Estimate;
  /** Time outside the engine's steps (α): request overhead, ms. */
  readonly requestOverheadMs: Estimate;
  /**
   * Attention's cost (γ), ms per unit of the engine's attention work (a
   * batching engine: prefill token × token of its own context before it; a
   * llama.cpp engine: step token × KV cell of the shared cache); 0 when not
   * significant.
   */
  readonly attention: Estimate;
}

/** A lone request's time to first token against the prompt tokens the engine computed. */
export interface PrefillPoint {
  /** Prompt tokens computed (the prompt minus the cached ones). */
  readonly prefillTokens: number;
  /** The attention work of computing them, in the engine's unit (see {@linkcode EngineCoefficients.attention}). */
  readonly attention: number;
  /** Engine steps the prompt took (more than one past the step's token budget). @default 1 */
  readonly steps?: number;
  readonly ttftMs: number;
}

/** Token pairs the attention of `n` tokens after `c` computed ones covers: n·c + n(n−1)/2 (actors/instances/batching_instance.ts). */
export function contextPairs(c: number, n: number): number {
  return n * c + n * (n - 1) / 2;
}

/** The mean gap between streamed tokens of `sequences` requests decoding together. */
export interface DecodePoint {
  readonly sequences: number;
  /** A decode step's mean attention work, in the engine's unit (0 where the model has none in decode). */
  readonly attention: number;
  readonly gapMs: number;
}

/** The fits and the coefficients they give. */
export interface CoefficientFit {
  readonly coefficients: EngineCoefficients;
  /** TTFT = (α + β0) + β1·n + γ·pairs: β = [α + β0, β1, γ], or [α + β0, β1] when γ is not significant. */
  readonly prefill: LinearFit;
  /** Token gap = β0 + β2 · sequences. */
  readonly decode: LineFit;
}

/**
 * The engine's coefficients from lone prefills and decode gaps: a lone
 * request's first token comes after one step holding its whole prompt, so
 * TTFT = α + β0 + β1·n + γ·a for n tokens computed with attention work a;
 * a token of s sequences decoding together comes every β0 + β2·s + γ·a.
 * γ comes from the prefills alone (decode's attention is small beside its
 * other costs), and is kept only when its 95% interval excludes 0 and it
 * moves the most attention-heavy prefill by at least 1%; else the
 * prefills are refitted without it and γ is 0. β0 and β2 are then the line
 * through the gaps less γ·a, α the prefill fit's intercept minus β0 (its
 * interval from both standard errors).
 * @throws {RangeError} as {@linkcode fitLine} and {@linkcode fitLinear}.
 */
export function fitCoefficients(
  prefills: readonly PrefillPoint[],
  decodes: readonly DecodePoint[],
): CoefficientFit {
  const ys = prefills.map((p) => p.ttftMs);
  let prefill = fitPrefills(prefills, ys);
  let decode = fitDecodes(decodes, gammaOf(prefill));
  // A prompt longer than a step's budget takes more steps, each with its β0: known once β0 is.
  if (prefills.some((p) => (p.steps ?? 1) > 1)) {
    prefill = fitPrefills(prefills, ys.map((y, i) => y - ((prefills[i].steps ?? 1) - 1) * decode.intercept));
    decode = fitDecodes(decodes, gammaOf(prefill));
  }
  const gamma = gammaOf(prefill);
  const tp = t95(prefill.n - prefill.beta.length), td = t95(decode.n - 2);
  return {
    prefill,
    decode,
    coefficients: {
      stepMs: { value: decode.intercept, ci95: td * decode.interceptSe },
      prefillMsPerToken: { value: prefill.beta[1], ci95: tp * prefill.se[1] },
      decodeMsPerSeq: { value: decode.slope, ci95: td * decode.slopeSe },
      requestOverheadMs: {
        value: prefill.beta[0] - decode.intercept,
        ci95: Math.hypot(tp * prefill.se[0], td * decode.interceptSe),
      },
      attention: prefill.beta.length > 2 ? { value: gamma, ci95: tp * prefill.se[2] } : { value: 0, ci95: 0 },
    },
  };
}

/** γ of a prefill fit: its third coefficient, or 0 when it was left out. */
function gammaOf(prefill: LinearFit): number {
  return prefill.beta.length > 2 ? prefill.beta[2] : 0;
}

/**
 * TTFT `ys` on [1, n, attention work]; γ kept when its interval excludes 0
 * and it moves the prediction of the prefill with the most attention work by
 * at least 1% (an exact line's γ is 0 to rounding, with an interval to
 * match), else on [1, n].
 */
function fitPrefills(prefills: readonly PrefillPoint[], ys: readonly number[]): LinearFit {
  if (prefills.length > 4 && prefills.some((p) => p.attention > 0)) {
    const withAttention = fitLinear(prefills.map((p) => [1, p.prefillTokens, p.attention]), ys);
    const t = t95(withAttention.n - 3);
    const top = prefills.reduce((a, b) => b.attention > a.attention ? b : a);
    const matters = withAttention.beta[2] * top.attention >= 0.01 * top.ttftMs;
    if (withAttention.beta[2] - t * withAttention.se[2] > 0 && matters) return withAttention;
  }
  return fitLinear(prefills.map((p) => [1, p.prefillTokens]), ys);
}

/** The line through the decode gaps less γ times their attention work. */
function fitDecodes(decodes: readonly DecodePoint[], gamma: number): LineFit {
  return fitLine(decodes.map((d) => d.sequences), decodes.map((d) => d.gapMs - gamma * d.attention));
}

/** A lone prefill's TTFT as the fit predicts it. */
export function fittedTtft(
  fit: CoefficientFit,
  p: Pick<PrefillPoint, "prefillTokens" | "attention" | "steps">,
): number {
  const c = fit.coefficients;
  return c.requestOverheadMs.value + c.stepMs.value * (p.steps ?? 1) +
    c.prefillMsPerToken.value * p.prefillTokens +
    c.attention.value * p.attention;
}

/** A decode gap as the fit predicts it. */
export function fittedGap(fit: CoefficientFit, d: Pick<DecodePoint, "sequences" | "attention">): number {
  const c = fit.coefficients;
  return c.stepMs.value + c.decodeMsPerSeq.value * d.sequences + c.attention.value * d.attention;
}

/**
 * Whether every coefficient is known well enough: its interval moves the
 * step it belongs to, at the largest x measured, by at most `tolerance` of
 * that step (β1 against the longest lone prefill, β2 and β0 against the
 * gap of the most sequences and of one, α against the shortest prefill's
 * TTFT). A coefficient that is small beside the rest of its step need not
 * be known to 10% of itself: only what it adds to a step matters.
 */
export function stable(
  fit: CoefficientFit,
  prefills: readonly PrefillPoint[],
  decodes: readonly DecodePoint[],
  tolerance: number,
): boolean {
  const { coefficients: c } = fit;
  const longest = prefills.reduce((a, b) => b.prefillTokens > a.prefillTokens ? b : a);
  const shortest = prefills.reduce((a, b) => b.prefillTokens < a.prefillTokens ? b : a);
  const maxSeqs = Math.max(...decodes.map((d) => d.sequences));
  const longTtft = fittedTtft(fit, longest);
  const bigGap = fit.decode.intercept + fit.decode.slope * maxSeqs;
  const oneGap = fit.decode.intercept + fit.decode.slope;
  return c.prefillMsPerToken.ci95 * longest.prefillTokens <= tolerance * longTtft &&
    c.attention.ci95 * longest.attention <= tolerance * longTtft &&
    c.decodeMsPerSeq.ci95 * maxSeqs <= tolerance * bigGap &&
    c.stepMs.ci95 <= tolerance * oneGap &&
    c.requestOverheadMs.ci95 <= tolerance * fittedTtft(fit, shortest);
}

/** A burst: `prompts.length` uncached prompts sent together, each with one output token. */
export interface BurstPoint {
  /** Prompt tokens each computes, in the order the engine took them. */
  readonly prompts: readonly number[];
  /** Each one's time to first token, ms, in the same order. */
  readonly ttftsMs: readonly number[];
  /** KV tokens other requests' slots held (per-slot engines; 0 elsewhere). @default 0 */
  readonly kvOther?: number;
}

/**
 * Each prompt's time to first token when an engine with `budget` tokens per
 * step packs them first come, first served, chunking a prompt across steps
 * (vLLM's chunked prefill; llama.cpp's `n_batch` over its slots in order):
 * a prompt's first token comes at the end of the step that holds its last
 * token, plus α. With `firstAlone`, the idle engine started a step with
 * the first prompt alone (the rest reached it while that step ran: an
 * event-driven engine, our simulated one); without, all were in its queue
 * when it built the first step (llama-server's loop takes every task posted
 * since its last iteration).
 */
export function burstTtfts(
  prompts: readonly number[],
  budget: number,
  c: EngineCoefficients,
  attention: StepAttention = pairsAttention,
  kvOther = 0,
  firstAlone = true,
): number[] {
  const left = [...prompts], done = new Array<number>(prompts.length);
  let now = 0, next = 0, first = true;
  while (next < left.length) {
    let room = budget, tokens = 0;
    const finishing: number[] = [], chunks: { computed: number; take: number }[] = [];
    const computedBefore = prompts.map((p, i) => p - left[i]);
    for (let i = next; i < left.length && room > 0 && (!firstAlone || !first || i === 0); i++) {
      const take = Math.min(room, left[i]);
      chunks.push({ computed: prompts[i] - left[i], take });
      left[i] -= take;
      room -= take;
      tokens += take;
      if (left[i] === 0) finishing.push(i);
    }
    first = false;
    // A step takes no time below zero, whatever a noisy fit's coefficients say.
    now += Math.max(
      0,
      c.stepMs.value + c.prefillMsPerToken.value * tokens +
        c.attention.value * attention(chunks, computedBefore, kvOther),
    );
    for (const i of finishing) done[i] = now + c.requestOverheadMs.value;
    while (next < left.length && left[next] === 0) next++;
  }
  return done;
}

/**
 * A step's attention work from its prefill chunks (each `take` tokens after
 * `computed` of its prompt) and what every prompt of the burst had computed
 * before the step.
 */
export type StepAttention = (
  chunks: readonly { readonly computed: number; readonly take: number }[],
  computedBefore: readonly number[],
  kvOther: number,
) => number;

/** A batching engine's: each chunk attends its own prompt's tokens ({@linkcode contextPairs}). */
export const pairsAttention: StepAttention = (chunks) =>
  chunks.reduce((sum, ch) => sum + contextPairs(ch.computed, ch.take), 0);

/**
 * A burst's first tokens as predicted under `budget`, by whichever arrival
 * (the first alone, or all together) fits them better: when prompts sent
 * together reached the engine is not observable from outside, and a real
 * engine shows both.
 */
export function burstFit(
  burst: BurstPoint,
  budget: number,
  c: EngineCoefficients,
  attention: StepAttention = pairsAttention,
): { predicted: number[]; sse: number } {
  const fits = [true, false].map((firstAlone) => {
    const predicted = burstTtfts(burst.prompts, budget, c, attention, burst.kvOther ?? 0, firstAlone);
    return { predicted, sse: burst.ttftsMs.reduce((sum, t, i) => sum + (t - predicted[i]) ** 2, 0) };
  });
  return fits[0].sse <= fits[1].sse ? fits[0] : fits[1];
}

/** The step budgets tried, tokens: the powers of two engines use. */
export const BUDGET_CANDIDATES: readonly number[] = [256, 512, 1024, 2048, 4096, 8192, 16384];

/** What the bursts say of the step budget. */
export interface BudgetChoice {
  /** The best budget, or undefined when no burst told the candidates apart. */
  readonly budget: number | undefined;
  /** When `budget` is undefined: the largest burst, in tokens — every budget at least this predicts the bursts alike. Else `budget`. */
  readonly atLeast: number;
  /** Each candidate's root-mean-square error over the bursts' first tokens, ms. */
  readonly rmsByBudget: ReadonlyArray<{ readonly budget: number; readonly rmsMs: number }>;
}

/**
 * The candidate budget whose packing best predicts the bursts' first
 * tokens. Timing noise on a shared machine separates candidates poorly, so
 * the engine's default budget `preferred` is kept unless another predicts
 * clearly better (root-mean-square error below 80% of the default's).
 * Budgets at least the largest burst predict the same (one step for all);
 * when one of them is chosen, the bursts only show the budget is at least
 * that big, and `budget` is undefined.
 */
export function chooseBudget(
  bursts: readonly BurstPoint[],
  c: EngineCoefficients,
  preferred: number,
  attention: StepAttention = pairsAttention,
): BudgetChoice {
  const largest = Math.max(0, ...bursts.map((b) => b.prompts.reduce((s, p) => s + p, 0)));
  const rmsByBudget = BUDGET_CANDIDATES.map((budget) => {
    let sse = 0, n = 0;
    for (const burst of bursts) {
      sse += burstFit(burst, budget, c, attention).sse;
      n += burst.ttftsMs.length;
    }
    return { budget, rmsMs: n === 0 ? NaN : Math.sqrt(sse / n) };
  });
  let best = rmsByBudget[0];
  for (const r of rmsByBudget) if (r.rmsMs < best.rmsMs) best = r;
  if (bursts.length === 0 || !(best.rmsMs >= 0)) return { budget: undefined, atLeast: 0, rmsByBudget };
  const kept = rmsByBudget.find((r) => r.budget === preferred);
  if (kept !== undefined && !(best.rmsMs < 0.8 * kept.rmsMs)) best = kept;
  const fitsAll = best.budget >= largest;
  return { budget: fitsAll ? undefined : best.budget, atLeast: fitsAll ? largest : best.budget, rmsByBudget };
}

/**
 * The block size the cached-token counts show: their greatest common
 * divisor (an engine that caches whole blocks reports multiples of its block
 * size; llama.cpp reports exact token counts, so 1). Undefined without a
 * positive count.
 */
export function blockSizeOf(cachedCounts: readonly number[]): number | undefined {
  let g = 0;
  for (const c of cachedCounts) if (c > 0) g = gcd(g, c);
  return g === 0 ? undefined : g;
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** Residuals of a fit: per kind of point, count, root-mean-square and largest, ms and relative. */
export interface Residuals {
  readonly n: number;
  readonly rmsMs: number;
  readonly maxAbsMs: number;
  /** RMS over the mean measured value. */
  readonly relativeRms: number;
}

/** The residuals of `measured` against `fitted`. */
export function residuals(measured: readonly number[], fitted: readonly number[]): Residuals {
  let sse = 0, max = 0;
  measured.forEach((m, i) => {
    const r = m - fitted[i];
    sse += r * r;
    max = Math.max(max, Math.abs(r));
  });
  const rms = Math.sqrt(sse / measured.length);
  return { n: measured.length, rmsMs: rms, maxAbsMs: max, relativeRms: rms / mean(measured) };
}
