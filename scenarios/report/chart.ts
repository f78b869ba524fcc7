/**
 * @module
 * The study's five charts, drawn with Observable Plot on a linkedom document
 * (no browser, no deno-dom) as standalone SVG, and rasterised to PNG with
 * resvg. Each chart has a title, a subtitle saying what is averaged, axis
 * labels with units and a legend drawn into the SVG.
 */
import * as Plot from "@observablehq/plot";
import { Resvg } from "@resvg/resvg-js";
import { parseHTML } from "linkedom";
import type { SummaryRow } from "./sweep_summary.ts";
import {
  FRAC,
  KEY,
  LOAD_AXES,
  OPERATIONAL_TTFT_MS,
  RATE,
  STRATEGIES,
  type Study,
  ZIPF,
} from "./study_findings.ts";
import type { Sweep } from "./sweep_spec.ts";

const FONT = "DejaVu Sans, Verdana, sans-serif";
const COLORS: Record<string, string> = {
  round_robin: "#4269d0",
  least_load: "#a463f2",
  prefix_aware: "#ff725c",
  "hybrid(thr=1)": "#3ca951",
};
const SERIES_COLORS = [
  "#4269d0",
  "#efb118",
  "#ff725c",
  "#6cc5b0",
  "#3ca951",
  "#ff8ab7",
  "#a463f2",
  "#97bbf5",
];

/** One chart: its file name and standalone SVG text. */
export interface Chart {
  readonly file: string;
  readonly title: string;
  readonly svg: string;
}

/** What we use of the SVG element Plot returns (linkedom's, not the browser's). */
interface SvgElement {
  getAttribute(name: string): string | null;
  readonly innerHTML: string;
}

interface LegendItem {
  readonly label: string;
  readonly color: string;
}

/** Wraps a Plot SVG with a title, subtitle and legend into one standalone SVG. */
function figure(title: string, subtitle: string, legend: readonly LegendItem[], plot: SvgElement): string {
  const width = Number(plot.getAttribute("width")), height = Number(plot.getAttribute("height"));
  const top = 64;
  let x = 12;
  const items = legend.map((item) => {
    const g = `<g transform="translate(${x},52)"><rect width="14" height="4" y="-6" fill="${item.color}"/>` +
      `<text x="20" y="0" font-size="12">${escape(item.label)}</text></g>`;
    x += 32 + item.label.length * 7;
    return g;
  }).join("");
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${
    height + top
  }" viewBox="0 0 ${width} ${height + top}" font-family="${FONT}">` +
    `<rect width="100%" height="100%" fill="white"/>` +
    `<text x="12" y="22" font-size="16" font-weight="bold">${escape(title)}</text>` +
    `<text x="12" y="40" font-size="12" fill="#555">${escape(subtitle)}</text>${items}` +
    `<svg x="0" y="${top}" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">${plot.innerHTML}</svg></svg>`;
}

function escape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function plot(options: Plot.PlotOptions): SvgElement {
  const { document } = parseHTML("<!DOCTYPE html><html><body></body></html>") as unknown as {
    document: unknown;
  };
  return Plot.plot({
    document: document as never,
    width: 900,
    height: 380,
    marginLeft: 60,
    marginTop: 36,
    marginRight: 20,
    style: { fontFamily: FONT, fontSize: "12px", background: "white" },
    ...options,
  }) as unknown as SvgElement;
}

const strategyLegend = STRATEGIES.map((s) => ({ label: s, color: COLORS[s] }));
const strategyColor = { domain: [...STRATEGIES], range: STRATEGIES.map((s) => COLORS[s]) };

/** A metric for a chart: an undefined one (null) is NaN, which Plot leaves out (a gap, not a 0). */
function plotted(value: number | null): number {
  return value ?? NaN;
}

/** Rows of the four strategies at zipf/sharedFrac combinations, flattened for Plot. */
function strategyRows(rows: readonly SummaryRow[], scenarios: readonly { zipf: number; frac: number }[]) {
  return rows.filter((r) =>
    (STRATEGIES as readonly string[]).includes(r.label) &&
    scenarios.some((s) => r.axes[ZIPF] === s.zipf && r.axes[FRAC] === s.frac)
  ).map((r) => ({
    strategy: r.label,
    scenario: `zipf ${r.axes[ZIPF]}, sharedFrac ${r.axes[FRAC]}`,
    rate: Number(r.axes[RATE]),
    sharedFrac: Number(r.axes[FRAC]),
    zipf: Number(r.axes[ZIPF]),
    ttft: plotted(r.mean.ttftMeanMs),
    ttftLo: Math.max(1, plotted(r.mean.ttftMeanMs) - plotted(r.ci95.ttftMeanMs)),
    ttftHi: plotted(r.mean.ttftMeanMs) + plotted(r.ci95.ttftMeanMs),
    hit: plotted(r.mean.hitRate),
    hitLo: Math.max(0, plotted(r.mean.hitRate) - plotted(r.ci95.hitRate)),
    hitHi: Math.min(1, plotted(r.mean.hitRate) + plotted(r.ci95.hitRate)),
    imbalance: plotted(r.mean.imbalance),
  }));
}

/**
 * The sweep's charts: the original study's five when the sweep has its
 * rate, Zipf and shared-fraction axes; otherwise charts against whichever
 * load axis it has (arrival rate or trace speed).
 */
export function studyCharts(rows: readonly SummaryRow[], study: Study, sweep: Sweep): Chart[] {
  const original = [RATE, ZIPF, FRAC].every((a) => sweep.axes.includes(a));
  if (original) return originalCharts(rows, study);
  const loadAxis = LOAD_AXES.find((a) => sweep.axes.includes(a));
  const charts = loadAxis ? loadCharts(rows, study, loadAxis, sweep) : [];
  if (sweep.focus !== undefined && sweep.focus !== loadAxis) {
    charts.push(focusChart(rows, sweep, sweep.focus));
  }
  return charts;
}

/** Colours for every variant: the study's four keep theirs, others take the palette in order. */
function variantColors(sweep: Sweep) {
  let next = 0;
  const labels = sweep.variants.map((v) => v.label);
  const range = labels.map((l) => COLORS[l] ?? SERIES_COLORS[next++ % SERIES_COLORS.length]);
  return { domain: labels, range, legend: labels.map((label, i) => ({ label, color: range[i] })) };
}

/** Means of a metric per (variant, value of `axis`), over all other axes; NaN where it is undefined at any point. */
function meansBy(rows: readonly SummaryRow[], axis: string, metric: (r: SummaryRow) => number | null) {
  const groups = new Map<string, { label: string; x: number | string; sum: number; n: number }>();
  for (const r of rows) {
    const key = `${r.label}\u0000${r.axes[axis]}`;
    const g = groups.get(key) ?? { label: r.label, x: r.axes[axis], sum: 0, n: 0 };
    g.sum += plotted(metric(r));
    g.n++;
    groups.set(key, g);
  }
  return [...groups.values()].map((g) => ({ strategy: g.label, x: g.x, y: g.sum / g.n }));
}

/** Mean TTFT of every policy against the sweep's focus axis. */
function focusChart(rows: readonly SummaryRow[], sweep: Sweep, focus: string): Chart {
  const colors = variantColors(sweep);
  const data = meansBy(rows, focus, (r) => r.mean.ttftMeanMs);
  const numeric = data.every((d) => typeof d.x === "number");
  return {
    file: "ttft_by_focus.png",
    title: `Mean TTFT by ${focus}`,
    svg: figure(
      `Mean TTFT by ${focus}`,
      "Mean over seeds and over the sweep's other axes",
      colors.legend,
      plot({
        x: { label: focus, ...(numeric ? { type: "point" as const } : {}) },
        y: { label: "mean TTFT (ms)", grid: true },
        color: { domain: colors.domain, range: colors.range },
        marks: [
          Plot.lineY(data, { x: "x", y: "y", stroke: "strategy", strokeWidth: 2 }),
          Plot.dot(data, { x: "x", y: "y", fill: "strategy", r: 3.5 }),
        ],
      }),
    ),
  };
}

/** Charts of a sweep over load only (a trace replay at several speeds, say). */
function loadCharts(rows: readonly SummaryRow[], study: Study, loadAxis: string, sweep: Sweep): Chart[] {
  const xLabel = loadAxis === RATE
    ? "arrival rate (requests/s)"
    : "trace speed (× the trace's own arrival rate)";
  const colors = variantColors(sweep);
  const strategyColor = { domain: colors.domain, range: colors.range };
  const strategyLegend = colors.legend;
  // One value per (policy, load): means over any other axes (and over seeds already).
  const metric = (f: (r: SummaryRow) => number | null) =>
    new Map(meansBy(rows, loadAxis, f).map((d) => [`${d.strategy}|${d.x}`, d.y]));
  const ttft = metric((r) => r.mean.ttftMeanMs), ci = metric((r) => r.ci95.ttftMeanMs);
  const hit = metric((r) => r.mean.tokenHitRate), imb = metric((r) => r.mean.imbalance);
  const tpot = metric((r) => r.mean.tpotMeanMs);
  const data = [...ttft.keys()].map((key) => {
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
  const line = (y: string, yLabel: string, extra: Plot.Markish[] = [], log = false) =>
    plot({
      x: { label: xLabel, grid: true },
      y: { label: yLabel, grid: true, ...(log ? { type: "log" as const } : {}) },
      color: strategyColor,
      marks: [
        ...extra,
        Plot.lineY(data, { x: "load", y, stroke: "strategy", strokeWidth: 2 }),
        Plot.dot(data, { x: "load", y, fill: "strategy", r: 3 }),
      ],
    });
  const charts: Chart[] = [
    {
      file: "ttft_vs_load.png",
      title: "Mean TTFT vs load",
      svg: figure(
        "Mean TTFT vs load",
        `Mean over seeds, band = 95% CI; dashed line = ${OPERATIONAL_TTFT_MS / 1000} s; log scale`,
        strategyLegend,
        line("ttft", "mean TTFT (ms)", [
          Plot.areaY(data, { x: "load", y1: "ttftLo", y2: "ttftHi", fill: "strategy", fillOpacity: 0.15 }),
          Plot.ruleY([OPERATIONAL_TTFT_MS], { stroke: "#999", strokeDasharray: "4,3" }),
        ], true),
      ),
    },
    {
      file: "token_hit_vs_load.png",
      title: "Token hit rate vs load",
      svg: figure(
        "Prompt-token cache hit rate vs load",
        "Cached prompt tokens / all prompt tokens; mean over seeds",
        strategyLegend,
        line("hit", "token hit rate"),
      ),
    },
    {
      file: "load_imbalance.png",
      title: "Load imbalance vs load",
      svg: figure(
        "Load imbalance (max − min) / mean of per-instance request counts",
        "Mean over seeds",
        strategyLegend,
        line("imbalance", "imbalance"),
      ),
    },
    {
      file: "tpot_vs_load.png",
      title: "Time per output token vs load",
      svg: figure(
        "Mean time per output token vs load",
        "Mean over seeds (batching model)",
        strategyLegend,
        line("tpot", "mean TPOT (ms)"),
      ),
    },
  ];
  const thresholdData = study.bestByRegime.flatMap((c) =>
    c.ttftByThreshold.map((t) => ({ regime: c.subset, threshold: t.threshold, ttft: t.ttftMeanMs }))
  ).filter((d) => Number.isFinite(d.ttft));
  if (thresholdData.length > 0) {
    const regimes = study.bestByRegime.map((c) => c.subset);
    charts.push({
      file: "hybrid_threshold_sweep.png",
      title: "Hybrid: mean TTFT vs threshold",
      svg: figure(
        "Hybrid: mean TTFT vs queue-depth threshold",
        "Mean over the operational points of each load regime; threshold 0 = least_load",
        regimes.map((z, i) => ({ label: z, color: SERIES_COLORS[i % SERIES_COLORS.length] })),
        plot({
          x: {
            // Model-neutral: `queued` is the waiting requests (FIFO) or those owed their first token (batching).
            label: "hybrid threshold (requests queued at the cached instance)",
            ticks: [...new Set(thresholdData.map((d) => d.threshold))],
          },
          y: { label: "mean TTFT (ms)", grid: true },
          color: { domain: regimes, range: SERIES_COLORS },
          marks: [
            Plot.lineY(thresholdData, { x: "threshold", y: "ttft", stroke: "regime", strokeWidth: 2 }),
            Plot.dot(thresholdData, { x: "threshold", y: "ttft", fill: "regime", r: 3 }),
          ],
        }),
      ),
    });
  }
  return charts;
}

/** All five charts of the original study. */
function originalCharts(rows: readonly SummaryRow[], study: Study): Chart[] {
  const scenarios = [{ zipf: 1.0, frac: 0.5 }, { zipf: KEY.zipf, frac: KEY.sharedFrac }];
  const perScenario = strategyRows(rows, scenarios);
  const charts: Chart[] = [];

  charts.push({
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
  });

  const thresholdData = study.bestByZipf.flatMap((c) =>
    c.ttftByThreshold.map((t) => ({ zipf: c.subset, threshold: t.threshold, ttft: t.ttftMeanMs }))
  ).filter((d) => Number.isFinite(d.ttft));
  const zipfLabels = study.bestByZipf.map((c) => c.subset);
  charts.push({
    file: "hybrid_threshold_sweep.png",
    title: "Hybrid: mean TTFT vs threshold",
    svg: figure(
      "Hybrid: mean TTFT vs queue-depth threshold",
      "Mean over operational points of each Zipf exponent (all thresholds < 2 s); threshold 0 = least_load",
      zipfLabels.map((z, i) => ({ label: z, color: SERIES_COLORS[i % SERIES_COLORS.length] })),
      plot({
        x: {
          label: "hybrid threshold (waiting requests at the cached instance)",
          ticks: [...new Set(thresholdData.map((d) => d.threshold))],
        },
        y: { label: "mean TTFT (ms)", grid: true },
        color: { domain: zipfLabels, range: SERIES_COLORS },
        marks: [
          Plot.lineY(thresholdData, { x: "threshold", y: "ttft", stroke: "zipf", strokeWidth: 2 }),
          Plot.dot(thresholdData, { x: "threshold", y: "ttft", fill: "zipf", r: 3 }),
        ],
      }),
    ),
  });

  const midRate = median(rows.map((r) => Number(r.axes[RATE])));
  const fracData = rows.filter((r) =>
    (STRATEGIES as readonly string[]).includes(r.label) && Number(r.axes[RATE]) === midRate
  )
    .map((r) => ({
      strategy: r.label,
      zipf: `zipf ${r.axes[ZIPF]}`,
      sharedFrac: Number(r.axes[FRAC]),
      hit: plotted(r.mean.hitRate),
      hitLo: Math.max(0, plotted(r.mean.hitRate) - plotted(r.ci95.hitRate)),
      hitHi: Math.min(1, plotted(r.mean.hitRate) + plotted(r.ci95.hitRate)),
    }));
  charts.push({
    file: "cache_hit_vs_prefix_frac.png",
    title: "Cache hit rate vs shared-prefix fraction",
    svg: figure(
      "Request hit rate vs shared-prefix fraction",
      `At ${midRate} requests/s; one panel per Zipf exponent; band = 95% CI over seeds`,
      strategyLegend,
      plot({
        fx: { label: null },
        x: { label: "shared-prefix fraction", ticks: [0.1, 0.5, 0.9] },
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
  });

  charts.push({
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
  });

  const best = [
    ...study.bestByZipf.map((c) => ({
      series: "all loads",
      zipf: Number(c.subset.replace("zipf ", "")),
      best: c.best,
    })),
  ].filter((d) => d.best !== undefined);
  const thresholds = [...new Set(study.bestByZipf.flatMap((c) => c.ttftByThreshold.map((t) => t.threshold)))];
  charts.push({
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
  });
  return charts;
}

function median(values: readonly number[]): number {
  const sorted = [...new Set(values)].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

/** Rasterises a chart's SVG to PNG at 2× with the system fonts. */
export function toPng(svg: string): Uint8Array {
  return new Resvg(svg, {
    font: { loadSystemFonts: true, defaultFontFamily: "DejaVu Sans" },
    fitTo: { mode: "zoom", value: 2 },
    background: "white",
  }).render().asPng();
}
