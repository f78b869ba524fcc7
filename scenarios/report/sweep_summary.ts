/**
 * @module
 * Folds a sweep's runs into one row per (point, policy variant): the mean of
 * every metric over the seeds and 95% confidence half-widths, and writes them
 * as `sweep_summary.csv` (an undefined metric — null — is an empty cell).
 */
import { stringify } from "@std/csv";
import { policyLabel, type PolicyName } from "../../actors/policies/mod.ts";
import type { RunResult } from "../../actors/simulation.ts";
import { hasDynamics } from "../../actors/topology.ts";
import { type PolicyVariant, variantParameter } from "../scenario/policy_variants.ts";
import { ci95HalfWidthOrNull, meanOrNull } from "./statistics.ts";
import type { Sweep } from "../scenario/sweep_types.ts";

/** Metrics averaged over seeds, in CSV column order. */
export const METRICS = [
  "ttftMeanMs",
  "ttftP50Ms",
  "ttftP90Ms",
  "ttftP99Ms",
  "queueWaitMeanMs",
  "e2eMeanMs",
  "hitRate",
  "tokenHitRate",
  "availableTokenHitRate",
  "expectedTokenHitRate",
  "routingRegret",
  "viewFalsePositiveRate",
  "imbalance",
  "imbalanceCv",
  "busyImbalanceCv",
  "throughputRps",
  "goodputRps",
  "tpotMeanMs",
  "outputTokensPerSec",
  "kvUtilizationMean",
  "preemptions",
  "requests",
  "completed",
  "dropped",
  "droppedFraction",
  "inFlight",
  "simulatedMs",
  "messages",
] as const satisfies readonly (keyof RunResult)[];

/**
 * Metrics a sweep's CSV has, after `goodputRps`, only when one of its runs
 * sets an SLO (`slo`, or a class's): a sweep without SLOs keeps its columns.
 */
export const SLO_METRICS = ["sloAttainment"] as const satisfies readonly (keyof RunResult)[];

/**
 * Metrics a sweep's CSV has, at its end, only when one of its runs has a
 * disaggregated fleet or a host KV tier: a sweep without them keeps its columns.
 */
export const FLEET_METRICS = [
  "kvTransferMeanMs",
  "kvTransferP99Ms",
  "kvQueueMeanMs",
  "gpuTokenHitRate",
  "hostTokenHitRate",
] as const satisfies readonly (keyof RunResult)[];

/**
 * Metrics a sweep's CSV has, at its very end, only when one of its runs has
 * faults, an autoscaler or router replicas: failures sit beside the drops,
 * and the cost of a fault or of scaling beside the latency it bought.
 */
export const DYNAMICS_METRICS = [
  "failed",
  "retried",
  "requestsAffected",
  "timeToRecoverMs",
  "instanceSeconds",
  "peakInstances",
] as const satisfies readonly (keyof RunResult)[];

/** Metrics that also get a 95% confidence half-width column (`<metric>Ci95`). */
export const CI_METRICS = ["ttftMeanMs", "ttftP99Ms", "hitRate"] as const;

/** Metrics with a 95% confidence half-width column only when a run sets an SLO. */
export const SLO_CI_METRICS = ["goodputRps", "sloAttainment"] as const;

/** One metric's name. */
export type Metric =
  | typeof METRICS[number]
  | typeof SLO_METRICS[number]
  | typeof FLEET_METRICS[number]
  | typeof DYNAMICS_METRICS[number];

/**
 * One row of the summary: a point, a policy variant, and its seed means. A
 * metric that can be undefined in a run (RunResult's `number | null` fields)
 * has a null mean when it is null in any seed.
 */
export interface SummaryRow {
  readonly point: number;
  /** Axis path → value. */
  readonly axes: Readonly<Record<string, number | string>>;
  /** The CSV's `policy` cell: the label less the threshold, which has a column of its own (see {@linkcode policyCell}). */
  readonly policy: string;
  /** The variant's `threshold` parameter (hybrid's); undefined for a policy that has none. */
  readonly threshold: number | undefined;
  /** `hybrid(thr=1)`, `round_robin`, … */
  readonly label: string;
  readonly seeds: number;
  readonly mean: { readonly [M in Metric]: RunResult[M] };
  readonly ci95: { readonly [M in typeof CI_METRICS[number] | typeof SLO_CI_METRICS[number]]: RunResult[M] };
}

/** Groups `results` (aligned with `sweep.runs`) into summary rows. */
export function summarise(sweep: Sweep, results: readonly RunResult[]): SummaryRow[] {
  const groups = new Map<string, RunResult[]>();
  sweep.runs.forEach((run, i) => {
    const key = `${run.point}/${run.variant}`;
    let group = groups.get(key);
    if (!group) groups.set(key, group = []);
    group.push(results[i]);
  });
  const rows: SummaryRow[] = [];
  for (const point of sweep.points) {
    sweep.variants.forEach((variant, v) => {
      const group = groups.get(`${point.index}/${v}`) ?? [];
      const of = (m: Metric) => group.map((r) => r[m]);
      rows.push({
        point: point.index,
        axes: point.values,
        policy: policyCell(variant),
        threshold: variantParameter(variant, "threshold"),
        label: variant.label,
        seeds: group.length,
        mean: Object.fromEntries(
          [...METRICS, ...SLO_METRICS, ...FLEET_METRICS, ...DYNAMICS_METRICS].map((
            m,
          ) => [m, meanOrNull(of(m))]),
        ) as SummaryRow["mean"],
        ci95: Object.fromEntries(
          [...CI_METRICS, ...SLO_CI_METRICS].map((m) => [m, ci95HalfWidthOrNull(of(m))]),
        ) as SummaryRow["ci95"],
      });
    });
  }
  return rows;
}

/**
 * The CSV's `policy` cell: the variant's label less its `threshold`, which
 * the `threshold` column holds — `hybrid`, `round_robin`,
 * `llmd_weighted(prefixWeight=1)`, a plugin's name.
 */
export function policyCell(variant: PolicyVariant): string {
  if (variant.pluginUrl !== undefined) return variant.label;
  return policyLabel({ name: variant.name as PolicyName, ...variant.params }, { omit: ["threshold"] });
}

/** A number as written to the CSV: integers exactly, others to 7 significant digits; null (undefined) as an empty cell. */
export function formatNumber(value: number | null): string {
  if (value === null) return "";
  return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(7)));
}

/** The metric columns of a sweep's CSV: {@linkcode METRICS}, with {@linkcode SLO_METRICS} when a run sets an SLO. */
function csvMetrics(sweep: Sweep): Metric[] {
  const fleet = [
    ...(sweepHasFleetMetrics(sweep) ? FLEET_METRICS : []),
    ...(sweepHasDynamics(sweep) ? DYNAMICS_METRICS : []),
  ];
  if (!sweepSetsSlo(sweep)) return [...METRICS, ...fleet];
  const at = METRICS.indexOf("goodputRps") + 1;
  return [...METRICS.slice(0, at), ...SLO_METRICS, ...METRICS.slice(at), ...fleet];
}

/** Whether a run of the sweep sets an SLO (`slo`, or a class's). */
export function sweepSetsSlo(sweep: Sweep): boolean {
  return sweep.runs.some(({ config }) =>
    config.slo?.ttftMs !== undefined || config.slo?.tpotMs !== undefined ||
    (config.workload.classes ?? []).some((c) => c.sloTtftMs !== undefined || c.sloTpotMs !== undefined)
  );
}

/** Whether a run of the sweep has a disaggregated fleet or a host KV tier. */
function sweepHasFleetMetrics(sweep: Sweep): boolean {
  return sweep.runs.some(({ config: { instances } }) =>
    instances.kvTransfer !== undefined ||
    [instances.engine, ...(instances.pools ?? []).map((p) => p.engine)].some((e) => (e.hostKvBlocks ?? 0) > 0)
  );
}

/** Whether a run of the sweep has faults, an autoscaler or router replicas. */
export function sweepHasDynamics(sweep: Sweep): boolean {
  return sweep.runs.some(({ config }) => hasDynamics(config));
}

/** The confidence columns of a sweep's CSV. */
function csvCiMetrics(sweep: Sweep): (typeof CI_METRICS[number] | typeof SLO_CI_METRICS[number])[] {
  return sweepSetsSlo(sweep) ? [...CI_METRICS, ...SLO_CI_METRICS] : [...CI_METRICS];
}

/** The CSV's columns for a sweep. */
export function csvColumns(sweep: Sweep): string[] {
  return [
    ...sweep.axisColumns,
    "policy",
    "threshold",
    "seeds",
    ...csvMetrics(sweep),
    ...csvCiMetrics(sweep).map((m) => `${m}Ci95`),
  ];
}

/** `sweep_summary.csv`: one row per (point, policy variant). */
export function toCsv(sweep: Sweep, rows: readonly SummaryRow[]): string {
  const metrics = csvMetrics(sweep);
  const records = rows.map((row) => {
    const record: Record<string, string> = {};
    sweep.axes.forEach((axis, i) => {
      const v = row.axes[axis];
      record[sweep.axisColumns[i]] = typeof v === "number" ? formatNumber(v) : v;
    });
    record.policy = row.policy;
    record.threshold = row.threshold === undefined ? "" : formatNumber(row.threshold);
    record.seeds = String(row.seeds);
    for (const m of metrics) record[m] = formatNumber(row.mean[m]);
    for (const m of csvCiMetrics(sweep)) record[`${m}Ci95`] = formatNumber(row.ci95[m]);
    return record;
  });
  return stringify(records, { columns: csvColumns(sweep) });
}
