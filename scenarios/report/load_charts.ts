/**
 * @module
 * The `load` report section: every policy against the sweep's load axis
 * (arrival rate or trace speed) — mean TTFT, token hit rate, imbalance and
 * TPOT — and, with two or more hybrid thresholds, hybrid's TTFT per
 * threshold in each load regime.
 */
import * as Plot from "@observablehq/plot";
import {
  type Chart,
  figure,
  meansBy,
  plot,
  type SvgElement,
  thresholdChart,
  variantColors,
} from "./chart.ts";
import type { ReportSection } from "./section.ts";
import {
  LOAD_AXES,
  loadAxisOf,
  OPERATIONAL_TTFT_MS,
  RATE,
  type ThresholdChoice,
  thresholdChoices,
} from "./study_findings.ts";
import type { SummaryRow } from "./sweep_summary.ts";
import type { Sweep } from "../scenario/sweep_types.ts";

/** One point of a load chart: a policy at one load, its metrics averaged over seeds and other axes. */
interface LoadDatum {
  readonly strategy: string;
  readonly load: number;
  readonly ttft: number;
  readonly ttftLo: number;
  readonly ttftHi: number;
  readonly hit: number;
  readonly imbalance: number;
  readonly tpot: number;
}

/** One value per (policy, load): means over any other axes (and over seeds already). */
function loadData(rows: readonly SummaryRow[], loadAxis: string): LoadDatum[] {
  const metric = (f: (r: SummaryRow) => number | null) =>
    new Map(meansBy(rows, loadAxis, f).map((d) => [`${d.strategy}|${d.x}`, d.y]));
  const ttft = metric((r) => r.mean.ttftMeanMs), ci = metric((r) => r.ci95.ttftMeanMs);
  const hit = metric((r) => r.mean.tokenHitRate), imb = metric((r) => r.mean.imbalance);
  const tpot = metric((r) => r.mean.tpotMeanMs);
  return [...ttft.keys()].map((key) => {
    const [strategy, load] = key.split("|");
    const t = ttft.get(key)!, c = ci.get(key)!;
    return {
      strategy,
      load: Number(load),
      ttft: t,
      ttftLo: Math.max(1, t - c),
      ttftHi: t + c,
      hit: hit.get(key)!,
      imbalance: imb.get(key)!,
      tpot: tpot.get(key)!,
    };
  });
}

/** The four charts of every policy against load. */
export function loadCharts(rows: readonly SummaryRow[], sweep: Sweep, loadAxis: string): Chart[] {
  const xLabel = loadAxis === RATE
    ? "arrival rate (requests/s)"
    : "trace speed (× the trace's own arrival rate)";
  const colors = variantColors(sweep.variants);
  const data = loadData(rows, loadAxis);
  const line = (y: string, yLabel: string, extra: Plot.Markish[] = [], log = false) =>
    plot({
      x: { label: xLabel, grid: true },
      y: { label: yLabel, grid: true, ...(log ? { type: "log" as const } : {}) },
      color: { domain: colors.domain, range: colors.range },
      marks: [
        ...extra,
        Plot.lineY(data, { x: "load", y, stroke: "strategy", strokeWidth: 2 }),
        Plot.dot(data, { x: "load", y, fill: "strategy", r: 3 }),
      ],
    });
  const chart = (file: string, title: string, heading: string, subtitle: string, svg: SvgElement): Chart => ({
    file,
    title,
    svg: figure(heading, subtitle, colors.legend, svg),
  });
  return [
    chart(
      "ttft_vs_load.png",
      "Mean TTFT vs load",
      "Mean TTFT vs load",
      `Mean over seeds, band = 95% CI; dashed line = ${OPERATIONAL_TTFT_MS / 1000} s; log scale`,
      line("ttft", "mean TTFT (ms)", [
        Plot.areaY(data, { x: "load", y1: "ttftLo", y2: "ttftHi", fill: "strategy", fillOpacity: 0.15 }),
        Plot.ruleY([OPERATIONAL_TTFT_MS], { stroke: "#999", strokeDasharray: "4,3" }),
      ], true),
    ),
    chart(
      "token_hit_vs_load.png",
      "Token hit rate vs load",
      "Prompt-token cache hit rate vs load",
      "Cached prompt tokens / all prompt tokens; mean over seeds",
      line("hit", "token hit rate"),
    ),
    chart(
      "load_imbalance.png",
      "Load imbalance vs load",
      "Load imbalance (max − min) / mean of per-instance request counts",
      "Mean over seeds",
      line("imbalance", "imbalance"),
    ),
    chart(
      "tpot_vs_load.png",
      "Time per output token vs load",
      "Mean time per output token vs load",
      "Mean over seeds (batching model)",
      line("tpot", "mean TPOT (ms)"),
    ),
  ];
}

/** Hybrid's mean TTFT per threshold in each load regime; undefined when no threshold has one. */
export function thresholdByRegimeChart(byRegime: readonly ThresholdChoice[]): Chart | undefined {
  if (!byRegime.some((c) => c.ttftByThreshold.some((t) => Number.isFinite(t.ttftMeanMs)))) return undefined;
  return thresholdChart(
    byRegime,
    "Mean over the operational points of each load regime; threshold 0 = least_load",
    // Model-neutral: `queued` is the waiting requests (FIFO) or those owed their first token (batching).
    "hybrid threshold (requests queued at the cached instance)",
  );
}

/** `load`: needs a load axis (`workload.ratePerSec` or `workload.trace.speed`). */
export const section: ReportSection = {
  name: "load",
  summary:
    "every policy's TTFT, token hit rate, imbalance and TPOT against the load axis, and hybrid's TTFT per threshold by load regime",
  charts: [
    "ttft_vs_load.png",
    "token_hit_vs_load.png",
    "load_imbalance.png",
    "tpot_vs_load.png",
    "hybrid_threshold_sweep.png",
  ],
  check: ({ axes }) =>
    loadAxisOf(axes) === undefined ? `needs a load axis (${LOAD_AXES.join(" or ")})` : undefined,
  render: ({ sweep, rows }) => {
    const charts = loadCharts(rows, sweep, loadAxisOf(sweep.axes)!);
    const byRegime = thresholdByRegimeChart(thresholdChoices(sweep, rows).bestByRegime);
    return { charts: byRegime ? [...charts, byRegime] : charts };
  },
};
