/**
 * @module
 * The `original-charts` report section: the original study's five charts —
 * TTFT and imbalance against arrival rate at two prefix scenarios, hybrid's
 * TTFT per threshold and the best threshold per Zipf exponent, and hit rate
 * against the shared-prefix fraction.
 */
import * as Plot from "@observablehq/plot";
import {
  type Chart,
  figure,
  plot,
  plotted,
  SERIES_COLORS,
  strategyColor,
  strategyLegend,
  thresholdChart,
} from "./chart.ts";
import type { ReportSection } from "./section.ts";
import {
  FRAC,
  KEY,
  missingStrategies,
  OPERATIONAL_TTFT_MS,
  RATE,
  STRATEGIES,
  type ThresholdChoice,
  thresholdChoices,
  ZIPF,
} from "./study_findings.ts";
import type { SummaryRow } from "./sweep_summary.ts";

/** The axes the five charts plot. */
const AXES = [RATE, ZIPF, FRAC] as const;

/** One of the four strategies at one point, flattened for Plot. */
interface StrategyDatum {
  readonly strategy: string;
  readonly scenario: string;
  readonly rate: number;
  readonly ttft: number;
  readonly ttftLo: number;
  readonly ttftHi: number;
  readonly imbalance: number;
}

/** Rows of the four strategies at zipf/sharedFrac combinations, flattened for Plot. */
function strategyRows(
  rows: readonly SummaryRow[],
  scenarios: readonly { zipf: number; frac: number }[],
): StrategyDatum[] {
  return rows.filter((r) =>
    (STRATEGIES as readonly string[]).includes(r.label) &&
    scenarios.some((s) => r.axes[ZIPF] === s.zipf && r.axes[FRAC] === s.frac)
  ).map((r) => ({
    strategy: r.label,
    scenario: `zipf ${r.axes[ZIPF]}, sharedFrac ${r.axes[FRAC]}`,
    rate: Number(r.axes[RATE]),
    ttft: plotted(r.mean.ttftMeanMs),
    ttftLo: Math.max(1, plotted(r.mean.ttftMeanMs) - plotted(r.ci95.ttftMeanMs)),
    ttftHi: plotted(r.mean.ttftMeanMs) + plotted(r.ci95.ttftMeanMs),
    imbalance: plotted(r.mean.imbalance),
  }));
}

/** Mean TTFT of the four strategies against arrival rate, one panel per prefix scenario. */
function ttftVsArrival(perScenario: readonly StrategyDatum[]): Chart {
  return {
    file: "ttft_vs_arrival.png",
    title: "Mean TTFT vs arrival rate",
    svg: figure(
      "Mean TTFT vs arrival rate",
      `Mean over seeds, band = 95% CI; dashed line = ${
        OPERATIONAL_TTFT_MS / 1000
      } s operational limit; log scale`,
      strategyLegend,
      plot({
        fx: { label: null },
        x: { label: "arrival rate (requests/s)", grid: true },
        y: { type: "log", label: "mean TTFT (ms)", grid: true },
        color: strategyColor,
        marks: [
          Plot.areaY(perScenario, {
            fx: "scenario",
            x: "rate",
            y1: "ttftLo",
            y2: "ttftHi",
            fill: "strategy",
            fillOpacity: 0.15,
          }),
          Plot.lineY(perScenario, {
            fx: "scenario",
            x: "rate",
            y: "ttft",
            stroke: "strategy",
            strokeWidth: 2,
          }),
          Plot.dot(perScenario, { fx: "scenario", x: "rate", y: "ttft", fill: "strategy", r: 2.5 }),
          Plot.ruleY([OPERATIONAL_TTFT_MS], { stroke: "#999", strokeDasharray: "4,3" }),
        ],
      }),
    ),
  };
}

/** Hybrid's mean TTFT per threshold, one line per Zipf exponent. */
function thresholdByZipf(bestByZipf: readonly ThresholdChoice[]): Chart {
  return thresholdChart(
    bestByZipf,
    "Mean over operational points of each Zipf exponent (all thresholds < 2 s); threshold 0 = least_load",
    "hybrid threshold (waiting requests at the cached instance)",
  );
}

/** Request hit rate of the four strategies against the shared-prefix fraction, at the median rate. */
function hitVsSharedFraction(rows: readonly SummaryRow[]): Chart {
  const midRate = median(rows.map((r) => Number(r.axes[RATE])));
  const fracData = rows.filter((r) =>
    (STRATEGIES as readonly string[]).includes(r.label) && Number(r.axes[RATE]) === midRate
  ).map((r) => ({
    strategy: r.label,
    zipf: `zipf ${r.axes[ZIPF]}`,
    sharedFrac: Number(r.axes[FRAC]),
    hit: plotted(r.mean.hitRate),
    hitLo: Math.max(0, plotted(r.mean.hitRate) - plotted(r.ci95.hitRate)),
    hitHi: Math.min(1, plotted(r.mean.hitRate) + plotted(r.ci95.hitRate)),
  }));
  return {
    file: "cache_hit_vs_prefix_frac.png",
    title: "Cache hit rate vs shared-prefix fraction",
    svg: figure(
      "Request hit rate vs shared-prefix fraction",
      `At ${midRate} requests/s; one panel per Zipf exponent; band = 95% CI over seeds`,
      strategyLegend,
      plot({
        fx: { label: null },
        // Ticks at the fractions swept, whatever they are (never one outside the data's domain).
        x: {
          label: "shared-prefix fraction",
          ticks: [...new Set(fracData.map((d) => d.sharedFrac))],
          tickFormat: (d: number) => `${d}`,
        },
        y: { label: "request hit rate", domain: [0, 1], grid: true },
        color: strategyColor,
        marks: [
          Plot.areaY(fracData, {
            fx: "zipf",
            x: "sharedFrac",
            y1: "hitLo",
            y2: "hitHi",
            fill: "strategy",
            fillOpacity: 0.15,
          }),
          Plot.lineY(fracData, { fx: "zipf", x: "sharedFrac", y: "hit", stroke: "strategy", strokeWidth: 2 }),
          Plot.dot(fracData, { fx: "zipf", x: "sharedFrac", y: "hit", fill: "strategy", r: 2.5 }),
        ],
      }),
    ),
  };
}

/** Load imbalance of the four strategies against arrival rate, one panel per prefix scenario. */
function imbalanceVsArrival(perScenario: readonly StrategyDatum[]): Chart {
  return {
    file: "load_imbalance.png",
    title: "Load imbalance vs arrival rate",
    svg: figure(
      "Load imbalance (max − min) / mean of per-instance request counts",
      "Mean over seeds",
      strategyLegend,
      plot({
        fx: { label: null },
        x: { label: "arrival rate (requests/s)", grid: true },
        y: { label: "imbalance (max − min) / mean", grid: true },
        color: strategyColor,
        marks: [
          Plot.lineY(perScenario, {
            fx: "scenario",
            x: "rate",
            y: "imbalance",
            stroke: "strategy",
            strokeWidth: 2,
          }),
          Plot.dot(perScenario, { fx: "scenario", x: "rate", y: "imbalance", fill: "strategy", r: 2.5 }),
          Plot.ruleY([0]),
        ],
      }),
    ),
  };
}

/** The best hybrid threshold per Zipf exponent. */
function bestThresholdByZipf(bestByZipf: readonly ThresholdChoice[]): Chart {
  const best = bestByZipf.map((c) => ({
    series: "all loads",
    zipf: Number(c.subset.replace("zipf ", "")),
    best: c.best,
  })).filter((d) => d.best !== undefined);
  const thresholds = [...new Set(bestByZipf.flatMap((c) => c.ttftByThreshold.map((t) => t.threshold)))];
  return {
    file: "optimal_threshold_by_zipf.png",
    title: "Best hybrid threshold by Zipf exponent",
    svg: figure(
      "Best hybrid threshold by Zipf exponent",
      "Threshold with the lowest mean TTFT over the operational points of each Zipf exponent",
      [{ label: "best threshold", color: SERIES_COLORS[0] }],
      plot({
        x: { label: "Zipf exponent of prefix popularity", ticks: best.map((d) => d.zipf) },
        y: {
          label: "best threshold (waiting requests)",
          ticks: thresholds,
          domain: [0, Math.max(...thresholds, 1)],
          grid: true,
        },
        marks: [
          Plot.lineY(best, { x: "zipf", y: "best", stroke: SERIES_COLORS[0], strokeWidth: 2 }),
          Plot.dot(best, { x: "zipf", y: "best", fill: SERIES_COLORS[0], r: 5 }),
          Plot.text(best, { x: "zipf", y: "best", text: (d) => String(d.best), dy: -12 }),
        ],
      }),
    ),
  };
}

function median(values: readonly number[]): number {
  const sorted = [...new Set(values)].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

/**
 * `original-charts`: needs the study's four strategies and its three axes
 * (`workload.ratePerSec`, `workload.prefix.zipf`, `workload.prefix.sharedFrac`).
 */
export const section: ReportSection = {
  name: "original-charts",
  summary: "the original study's five charts, against arrival rate, Zipf exponent and shared-prefix fraction",
  charts: [
    "ttft_vs_arrival.png",
    "hybrid_threshold_sweep.png",
    "cache_hit_vs_prefix_frac.png",
    "load_imbalance.png",
    "optimal_threshold_by_zipf.png",
  ],
  check: ({ axes, variants }) => {
    const lacking = [...AXES.filter((a) => !axes.includes(a)), ...missingStrategies(variants)];
    return lacking.length === 0
      ? undefined
      : `needs the axes ${AXES.join(", ")} and the policies of the original study; the sweep lacks ${
        lacking.join(", ")
      }`;
  },
  render: ({ sweep, rows }) => {
    const perScenario = strategyRows(rows, [{ zipf: 1.0, frac: 0.5 }, {
      zipf: KEY.zipf,
      frac: KEY.sharedFrac,
    }]);
    const { bestByZipf } = thresholdChoices(sweep, rows);
    return {
      charts: [
        ttftVsArrival(perScenario),
        thresholdByZipf(bestByZipf),
        hitVsSharedFraction(rows),
        imbalanceVsArrival(perScenario),
        bestThresholdByZipf(bestByZipf),
      ],
    };
  },
};
