/**
 * @module
 * The original study's analysis, computed from sweep rows: the two headline
 * tables, the best hybrid threshold per Zipf exponent and per load regime, and
 * a verdict on each of the four findings. Nothing here is hard-coded text
 * about outcomes: every number and every verdict comes from the rows.
 */
import { formatMetric } from "./run_report.ts";
import type { SummaryRow } from "./sweep_summary.ts";
import { type PolicyVariant, variantParameter } from "../scenario/policy_variants.ts";
import type { Sweep, SweepPoint } from "../scenario/sweep_types.ts";

/** Axis paths the study needs. */
export const RATE = "workload.ratePerSec";
export const ZIPF = "workload.prefix.zipf";
export const FRAC = "workload.prefix.sharedFrac";
/** A trace replay's load knob. */
export const TRACE_SPEED = "workload.trace.speed";
/** Axes that set the load, in order of preference. */
export const LOAD_AXES = [RATE, TRACE_SPEED] as const;
/** The four strategies of the original study, as row labels. */
export const STRATEGIES = ["round_robin", "least_load", "prefix_aware", "hybrid(thr=1)"] as const;
/** Mean TTFT below which a point is in the operational regime. */
export const OPERATIONAL_TTFT_MS = 2000;
/** Share of requests a policy may drop at a point and still be operational there. */
export const OPERATIONAL_DROPPED_FRACTION = 0.01;

/** Whether a policy dropped more than {@linkcode OPERATIONAL_DROPPED_FRACTION} of the requests at a point. */
export function dropsTooMany(row: SummaryRow): boolean {
  return row.mean.droppedFraction !== null && row.mean.droppedFraction > OPERATIONAL_DROPPED_FRACTION;
}

/**
 * Whether a policy is operational at a point: its mean TTFT is defined and
 * below {@linkcode OPERATIONAL_TTFT_MS}, and it dropped at most
 * {@linkcode OPERATIONAL_DROPPED_FRACTION} of the requests (a policy that
 * refuses work is not fast, however quick the requests it kept).
 */
export function isOperational(row: SummaryRow): boolean {
  return row.mean.ttftMeanMs !== null && row.mean.ttftMeanMs < OPERATIONAL_TTFT_MS && !dropsTooMany(row);
}
/** The original study's key scenario. */
export const KEY = { zipf: 2.0, sharedFrac: 0.9 } as const;

/**
 * Mean TTFT, hit rate and imbalance of one strategy over a set of points;
 * null when undefined at any of them (a plugin that completed nothing at a
 * point where the four are operational).
 */
export interface TableRow {
  readonly strategy: string;
  readonly ttftMeanMs: number | null;
  readonly hitRate: number | null;
  readonly imbalance: number | null;
  readonly points: number;
}

/** The best threshold over a subset of points, with every threshold's mean TTFT. */
export interface ThresholdChoice {
  readonly subset: string;
  readonly best: number | undefined;
  readonly ttftByThreshold: readonly { threshold: number; ttftMeanMs: number }[];
  readonly points: number;
}

/** One finding of the original study and what our results say of it. */
export interface Finding {
  readonly claim: string;
  readonly verdict: "confirmed" | "partly confirmed" | "refuted" | "not tested";
  readonly evidence: readonly string[];
}

/** The whole analysis. */
export interface Study {
  readonly operational: readonly TableRow[];
  readonly key: readonly TableRow[];
  readonly operationalPoints: number;
  readonly totalPoints: number;
  readonly bestByZipf: readonly ThresholdChoice[];
  readonly bestByRegime: readonly ThresholdChoice[];
  readonly findings: readonly Finding[];
  /** Why parts were skipped (missing axes or policies), if any. */
  readonly notes: readonly string[];
}

/** A point of the sweep with its rows, by variant label. */
interface StudyPoint extends SweepPoint {
  readonly rows: ReadonlyMap<string, SummaryRow>;
}

/** The sweep's points, each with its rows by label. */
function studyPoints(sweep: Sweep, rows: readonly SummaryRow[]): StudyPoint[] {
  const byPoint = new Map<number, Map<string, SummaryRow>>();
  for (const row of rows) {
    let m = byPoint.get(row.point);
    if (!m) byPoint.set(row.point, m = new Map());
    m.set(row.label, row);
  }
  return sweep.points.map((p) => ({ ...p, rows: byPoint.get(p.index)! }));
}

/** Whether the point has a row for every one of `labels`. */
const hasAll = (labels: readonly string[]) => (p: StudyPoint) => labels.every((l) => p.rows.has(l));

/** Points where every one of `labels` is operational. */
const operationalOf = (labels: readonly string[]) => (p: StudyPoint) =>
  hasAll(labels)(p) && labels.every((l) => isOperational(p.rows.get(l)!));

/** Points where every one of `labels` completed requests, so has a TTFT, hit rate and imbalance. */
const measuredOf = (labels: readonly string[]) => (p: StudyPoint) =>
  hasAll(labels)(p) && labels.every((l) => {
    const m = p.rows.get(l)!.mean;
    return m.ttftMeanMs !== null && m.hitRate !== null && m.imbalance !== null;
  });

/** The study's four strategies that the sweep lacks, as labels. */
export function missingStrategies(variants: readonly PolicyVariant[]): string[] {
  return STRATEGIES.filter((s) => !variants.some((v) => v.pluginUrl === undefined && v.label === s));
}

/** Whether the sweep has the Zipf and shared-fraction axes (so a key scenario). */
const hasZipfAxes = (sweep: Sweep) => sweep.axes.includes(ZIPF) && sweep.axes.includes(FRAC);

/** The sweep's load axis, the first of {@linkcode LOAD_AXES} it has. */
export function loadAxisOf(axes: readonly string[]): string | undefined {
  return LOAD_AXES.find((a) => axes.includes(a));
}

/** Why parts of the study are skipped: the strategies, axes or load axis the sweep lacks. */
function studyNotes(sweep: Sweep): string[] {
  const notes: string[] = [];
  const missing = missingStrategies(sweep.variants);
  if (missing.length > 0) {
    notes.push(`the sweep lacks ${missing.join(", ")}: tables and findings need all four strategies`);
  }
  if (!hasZipfAxes(sweep)) {
    notes.push(
      `the sweep has no ${ZIPF} and ${FRAC} axes: there is no key scenario, no best threshold per Zipf exponent, ` +
        `and finding 1 is judged over all operational points (the workload's own popularity skew)`,
    );
  }
  if (!loadAxisOf(sweep.axes)) {
    notes.push(`the sweep has no load axis (${LOAD_AXES.join(" or ")}): no best threshold per load regime`);
  }
  return notes;
}

/** The best hybrid threshold per Zipf exponent and per load regime (thirds of the load axis). */
export interface ThresholdChoices {
  readonly bestByZipf: readonly ThresholdChoice[];
  readonly bestByRegime: readonly ThresholdChoice[];
}

/**
 * The best hybrid threshold over the points where every threshold is
 * operational: per Zipf exponent (with the Zipf axes) and per load regime
 * (with a load axis of at least three values); none with fewer than two thresholds.
 */
export function thresholdChoices(sweep: Sweep, rows: readonly SummaryRow[]): ThresholdChoices {
  const points = studyPoints(sweep, rows);
  const hybrids = sweep.variants.filter((v) => v.name === "hybrid" && v.pluginUrl === undefined);
  const thresholds = hybrids.map((v) => variantParameter(v, "threshold")!);
  const hybridOperational = points.filter(operationalOf(hybrids.map((v) => v.label)));
  const choose = (subset: string, ps: readonly StudyPoint[]): ThresholdChoice => {
    const ttftByThreshold = thresholds.map((threshold, i) => ({
      threshold,
      // Every threshold is operational at these points, so each has a mean TTFT.
      ttftMeanMs: avg(ps.map((p) => p.rows.get(hybrids[i].label)!.mean.ttftMeanMs!)),
    }));
    let best: number | undefined;
    let bestTtft = Infinity;
    for (const t of ttftByThreshold) {
      if (ps.length > 0 && t.ttftMeanMs < bestTtft) [best, bestTtft] = [t.threshold, t.ttftMeanMs];
    }
    return { subset, best, ttftByThreshold, points: ps.length };
  };
  const zipfs = hasZipfAxes(sweep) ? unique(points.map((p) => p.values[ZIPF])) : [];
  const bestByZipf = thresholds.length < 2
    ? []
    : zipfs.map((z) => choose(`zipf ${z}`, hybridOperational.filter((p) => p.values[ZIPF] === z)));
  const loadAxis = loadAxisOf(sweep.axes);
  const rates = loadAxis
    ? unique(points.map((p) => p.values[loadAxis])).sort((a, b) => Number(a) - Number(b))
    : [];
  const unit = loadAxis === RATE ? "req/s" : "× trace speed";
  const band = (i: number) => Math.min(2, Math.floor((3 * i) / rates.length));
  const regimeNames = ["light", "medium", "heavy"];
  const bestByRegime = thresholds.length < 2 || rates.length < 3 ? [] : regimeNames.map((name, b) => {
    const inBand = rates.filter((_, i) => band(i) === b);
    return choose(
      `${name} load (${inBand.join(", ")} ${unit})`,
      hybridOperational.filter((p) => inBand.includes(p.values[loadAxis!])),
    );
  });
  return { bestByZipf, bestByRegime };
}

/** Mean TTFT, hit rate and imbalance of the four strategies (and any plugin) over `subset`; none without the four. */
function strategyTable(sweep: Sweep, subset: readonly StudyPoint[]): TableRow[] {
  if (missingStrategies(sweep.variants).length > 0) return [];
  // Plugins get a row in both tables, over the same points as the four strategies.
  const plugins = sweep.variants.filter((v) => v.pluginUrl !== undefined).map((v) => v.label);
  return [...STRATEGIES, ...plugins].map((strategy): TableRow => {
    const rs = subset.map((p) => p.rows.get(strategy)!);
    return {
      strategy,
      ttftMeanMs: avgOrNull(rs.map((r) => r.mean.ttftMeanMs)),
      hitRate: avgOrNull(rs.map((r) => r.mean.hitRate)),
      imbalance: avgOrNull(rs.map((r) => r.mean.imbalance)),
      points: rs.length,
    };
  });
}

/** Computes the study from a sweep's rows. */
export function analyse(sweep: Sweep, rows: readonly SummaryRow[]): Study {
  const points = studyPoints(sweep, rows);
  const hasZipf = hasZipfAxes(sweep);
  const operational = points.filter(operationalOf(STRATEGIES));
  const keyPoints = operational.filter((p) =>
    hasZipf && p.values[ZIPF] === KEY.zipf && p.values[FRAC] === KEY.sharedFrac
  );
  const { bestByZipf, bestByRegime } = thresholdChoices(sweep, rows);
  const opTable = strategyTable(sweep, operational), keyTable = strategyTable(sweep, keyPoints);
  const skewed = operational.filter((p) => Number(p.values[ZIPF]) >= 1.5);
  const findings = missingStrategies(sweep.variants).length > 0 ? [] : [
    findingOne(
      hasZipf
        ? [["key scenario zipf 2.0 / sharedFrac 0.9", keyTable], [
          "all operational points with zipf >= 1.5",
          strategyTable(sweep, skewed),
        ]]
        : [["all operational points", opTable]],
    ),
    findingTwo(opTable, keyTable),
    findingThree(bestByZipf, bestByRegime),
    findingFour(opTable, strategyTable(sweep, points.filter(measuredOf(STRATEGIES)))),
  ];
  return {
    operational: opTable,
    key: keyTable,
    operationalPoints: operational.length,
    totalPoints: points.length,
    bestByZipf,
    bestByRegime,
    findings,
    notes: studyNotes(sweep),
  };
}

/** A table row with every mean defined. */
type MeasuredRow = { readonly [K in keyof TableRow]: NonNullable<TableRow[K]> };

/**
 * One of the four strategies' rows. Their tables average only points where
 * all four are operational (or, for the saturated table, completed requests),
 * so their means are defined; a null here is a bug in choosing the points.
 */
const get = (t: readonly TableRow[], s: string): MeasuredRow => {
  const row = t.find((r) => r.strategy === s)!;
  if (row.ttftMeanMs === null || row.hitRate === null || row.imbalance === null) {
    throw new Error(`${s}: undefined mean over points chosen where it is defined`);
  }
  return row as MeasuredRow;
};
const ms = (v: number) => `${v.toFixed(1)} ms`;
const f3 = (v: number | null) => formatMetric(v, 3);

/** Finding 1: prefix_aware's hit rate is higher but its TTFT worse than both cache-blind policies' under skew. */
function findingOne(subsets: readonly (readonly [where: string, table: readonly TableRow[]])[]): Finding {
  const claim =
    "Pure prefix-aware raises hit rate but degrades TTFT under skew (concentration builds queues faster than cache savings pay back).";
  const usable = subsets.filter(([, t]) => t.length > 0 && t[0].points > 0);
  if (usable.length === 0) {
    return {
      claim,
      verdict: "not tested",
      evidence: [`no operational point in: ${subsets.map(([w]) => w).join("; ")}`],
    };
  }
  const check = (t: readonly TableRow[], where: string) => {
    const pa = get(t, "prefix_aware"), rr = get(t, "round_robin"), ll = get(t, "least_load");
    const raises = pa.hitRate > rr.hitRate && pa.hitRate > ll.hitRate;
    const degrades = pa.ttftMeanMs > rr.ttftMeanMs && pa.ttftMeanMs > ll.ttftMeanMs;
    return {
      ok: raises && degrades,
      text:
        `${where} (${t[0].points} points): prefix_aware hit ${f3(pa.hitRate)} vs round_robin ${
          f3(rr.hitRate)
        } (${raises ? "higher" : "not higher"}); ` +
        `TTFT ${ms(pa.ttftMeanMs)} vs ${ms(rr.ttftMeanMs)} (${(pa.ttftMeanMs / rr.ttftMeanMs).toFixed(2)}×, ${
          degrades ? "worse" : "not worse"
        }); ` +
        `imbalance ${f3(pa.imbalance)} vs ${f3(rr.imbalance)}.`,
    };
  };
  const checks = usable.map(([where, t]) => check(t, where));
  const ok = checks.filter((c) => c.ok).length;
  return {
    claim,
    verdict: ok === checks.length ? "confirmed" : ok > 0 ? "partly confirmed" : "refuted",
    evidence: checks.map((c) => c.text),
  };
}

/** Finding 2: hybrid(thr=1) has prefix_aware's hit rate, round_robin's balance and the best TTFT of the four. */
function findingTwo(op: readonly TableRow[], key: readonly TableRow[]): Finding {
  const claim =
    "Hybrid (thr=1) matches prefix-aware's hit rate with round-robin's balance and the best TTFT.";
  const parts: { ok: boolean; text: string }[] = [];
  for (const [where, t] of [["operational regime", op], ["key scenario", key]] as const) {
    if (t.length === 0 || t[0].points === 0) continue;
    const h = get(t, "hybrid(thr=1)"), pa = get(t, "prefix_aware"), rr = get(t, "round_robin");
    // Only the study's four compete here; a plugin's row is shown, not judged.
    const best = STRATEGIES.map((strategy) =>
      get(t, strategy)
    ).sort((a, b) => a.ttftMeanMs - b.ttftMeanMs)[0];
    const hitOk = h.hitRate >= pa.hitRate - 0.02;
    const balanceOk = h.imbalance <= rr.imbalance + 0.05;
    const ttftOk = best.strategy === "hybrid(thr=1)";
    parts.push({
      ok: hitOk,
      text: `${where}: hit ${f3(h.hitRate)} vs prefix_aware ${f3(pa.hitRate)} — ${
        hitOk ? "matches" : "does not match"
      } (criterion: within 0.02).`,
    });
    parts.push({
      ok: balanceOk,
      text:
        `${where}: imbalance ${f3(h.imbalance)} vs round_robin ${f3(rr.imbalance)} and prefix_aware ${
          f3(pa.imbalance)
        } — ` +
        `${balanceOk ? "round-robin-like" : "not round-robin-like"} (criterion: within 0.05 of round_robin).`,
    });
    parts.push({
      ok: ttftOk,
      text:
        `${where}: TTFT ${ms(h.ttftMeanMs)}; best of the four is ${best.strategy} at ${
          ms(best.ttftMeanMs)
        } — ` +
        `${ttftOk ? "hybrid is best" : "hybrid is not best"}.`,
    });
  }
  const okCount = parts.filter((p) => p.ok).length;
  return {
    claim,
    verdict: parts.length === 0
      ? "not tested"
      : okCount === parts.length
      ? "confirmed"
      : okCount === 0
      ? "refuted"
      : "partly confirmed",
    evidence: parts.map((p) => p.text),
  };
}

/** Finding 3: threshold 1 is hybrid's best in every subset (Zipf exponent, load regime). */
function findingThree(byZipf: readonly ThresholdChoice[], byRegime: readonly ThresholdChoice[]): Finding {
  const claim = "The best hybrid threshold was 1 in every regime tested.";
  const all = [...byZipf, ...byRegime].filter((c) => c.best !== undefined);
  if (all.length === 0) {
    return {
      claim,
      verdict: "not tested",
      evidence: ["the sweep has fewer than two hybrid thresholds or no operational points"],
    };
  }
  const ones = all.filter((c) => c.best === 1);
  const evidence = all.map((c) => {
    const at1 = c.ttftByThreshold.find((t) => t.threshold === 1);
    const best = c.ttftByThreshold.find((t) => t.threshold === c.best)!;
    return `${c.subset}: best threshold ${c.best} (${ms(best.ttftMeanMs)}` +
      (at1 && c.best !== 1
        ? `; thr=1 gives ${ms(at1.ttftMeanMs)}, ${
          ((at1.ttftMeanMs / best.ttftMeanMs - 1) * 100).toFixed(1)
        }% worse`
        : "") +
      `; ${c.points} points)`;
  });
  const largest = Math.max(...all.flatMap((c) => c.ttftByThreshold.map((t) => t.threshold)));
  const atEdge = all.filter((c) => c.best === largest).length;
  return {
    claim,
    verdict: ones.length === all.length ? "confirmed" : ones.length === 0 ? "refuted" : "partly confirmed",
    evidence: [
      `threshold 1 is best in ${ones.length} of ${all.length} subsets.`,
      ...(atEdge > 0
        ? [
          `in ${atEdge} subsets the best is ${largest}, the largest threshold tested: the optimum may lie beyond the grid.`,
        ]
        : []),
      ...evidence,
    ],
  };
}

/** Finding 4: round_robin and least_load are equivalent (TTFT within 5%, hit rate within 0.01). */
function findingFour(op: readonly TableRow[], everywhere: readonly TableRow[]): Finding {
  const claim = "Round-robin and least-load are equivalent with homogeneous instances.";
  const evidence: string[] = [];
  let ok = true;
  for (
    const [where, t] of [["operational regime", op], ["all points, incl. saturated", everywhere]] as const
  ) {
    if (t.length === 0 || t[0].points === 0) continue;
    const rr = get(t, "round_robin"), ll = get(t, "least_load");
    const dTtft = ll.ttftMeanMs / rr.ttftMeanMs - 1, dHit = ll.hitRate - rr.hitRate;
    const same = Math.abs(dTtft) <= 0.05 && Math.abs(dHit) <= 0.01;
    if (where === "operational regime") ok = same;
    evidence.push(
      `${where}: TTFT ${ms(rr.ttftMeanMs)} vs ${ms(ll.ttftMeanMs)} (${(dTtft * 100).toFixed(1)}%), hit ${
        f3(rr.hitRate)
      } vs ${f3(ll.hitRate)}, ` +
        `imbalance ${f3(rr.imbalance)} vs ${f3(ll.imbalance)} — ${
          same ? "equivalent" : "different"
        } (criterion: TTFT within 5%, hit within 0.01).`,
    );
  }
  return { claim, verdict: evidence.length === 0 ? "not tested" : ok ? "confirmed" : "refuted", evidence };
}

function avg(values: readonly number[]): number {
  return values.length === 0 ? NaN : values.reduce((a, b) => a + b, 0) / values.length;
}

/** {@linkcode avg}, or null when any value is null (undefined at one point, undefined over the set). */
function avgOrNull(values: readonly (number | null)[]): number | null {
  return values.every((v) => v !== null) ? avg(values as readonly number[]) : null;
}

function unique<T>(values: readonly T[]): T[] {
  return [...new Set(values)];
}
