/**
 * @module
 * What every chart of a sweep report shares: Observable Plot drawn on a
 * linkedom document (no browser, no deno-dom) as standalone SVG, a title, a
 * subtitle saying what is averaged and a legend drawn into the SVG, and the
 * colours of the policies. PNG rendering is `png.ts`.
 */
import * as Plot from "@observablehq/plot";
import { parseHTML } from "linkedom";
import type { SummaryRow } from "./sweep_summary.ts";
import { STRATEGIES, type ThresholdChoice } from "./study_findings.ts";
import type { PolicyVariant } from "../scenario/policy_variants.ts";

const FONT = "DejaVu Sans, Verdana, sans-serif";

/** The colours of the original study's four strategies, kept in every chart. */
const COLORS: Readonly<Record<string, string>> = {
  round_robin: "#4269d0",
  least_load: "#a463f2",
  prefix_aware: "#ff725c",
  "hybrid(thr=1)": "#3ca951",
};

/** Colours of other series, in order. */
export const SERIES_COLORS: readonly string[] = [
  "#4269d0",
  "#efb118",
  "#ff725c",
  "#6cc5b0",
  "#3ca951",
  "#ff8ab7",
  "#a463f2",
  "#97bbf5",
];

/** One chart: its file name under `plots/`, its title and standalone SVG text. */
export interface Chart {
  readonly file: string;
  readonly title: string;
  readonly svg: string;
}

/** What we use of the SVG element Plot returns (linkedom's, not the browser's). */
export interface SvgElement {
  getAttribute(name: string): string | null;
  readonly innerHTML: string;
}

/** One entry of a chart's legend. */
export interface LegendItem {
  readonly label: string;
  readonly color: string;
}

/** Wraps a Plot SVG with a title, subtitle and legend into one standalone SVG. */
export function figure(
  title: string,
  subtitle: string,
  legend: readonly LegendItem[],
  plot: SvgElement,
): string {
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
    `<svg x="0" y="${top}" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}"${
      rootAttributes(plot)
    }>${plot.innerHTML}</svg></svg>`;
}

/**
 * The attributes of Plot's root `<svg>` its marks inherit, for the nested
 * `<svg>` that replaces it: `text-anchor="middle"` (without it every tick
 * label starts at its tick, so the last one is clipped and adjacent panels'
 * end ticks run together), `fill`, the class its inline style sheet names,
 * and the report's font size (Plot's root `style` sets 12 px over its 10).
 */
function rootAttributes(plot: SvgElement): string {
  const copied = ["class", "text-anchor", "fill"].flatMap((name) => {
    const value = plot.getAttribute(name);
    return value === null ? [] : [` ${name}="${escape(value).replace(/"/g, "&quot;")}"`];
  });
  return `${copied.join("")} font-size="12"`;
}

function escape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/**
 * Room below the frame, px: the x tick labels, then the x axis title beneath
 * them (at {@linkcode X_LABEL_OFFSET}), never over them.
 */
const MARGIN_BOTTOM = 52;

/** How far below the frame the x axis title sits, px: below the tick labels (6 px tick + 12 px text). */
const X_LABEL_OFFSET = 44;

/** Room right of the frame, px: the last x tick label, centred on the frame's edge, is not clipped. */
const MARGIN_RIGHT = 32;

/** Space inside an unfaceted chart's left and right edges, px: a dot at the domain's end is not cut by the axis. */
const INSET = 8;

/**
 * Space inside each facet's left and right edges, px: adjacent panels' end
 * ticks (`0.9` | `0.1`) stand apart instead of running together as `0.90.1`.
 */
const FACET_INSET = 16;

/**
 * A Plot chart, 900 × 380, in the report's font, on a fresh linkedom
 * document. The x axis title is centred below the tick labels; a faceted
 * chart (`fx`) gets space between its panels and inside each panel's edges.
 * A chart's own `x` and `fx` options override these defaults field by field.
 */
export function plot(options: Plot.PlotOptions): SvgElement {
  const { document } = parseHTML("<!DOCTYPE html><html><body></body></html>") as unknown as {
    document: unknown;
  };
  const faceted = options.fx !== undefined;
  return Plot.plot({
    document: document as never,
    width: 900,
    height: 380,
    marginLeft: 60,
    marginTop: 36,
    marginRight: MARGIN_RIGHT,
    marginBottom: MARGIN_BOTTOM,
    style: { fontFamily: FONT, fontSize: "12px", background: "white" },
    ...options,
    x: {
      labelAnchor: "center",
      labelOffset: X_LABEL_OFFSET,
      insetLeft: faceted ? FACET_INSET : INSET,
      insetRight: faceted ? FACET_INSET : INSET,
      ...options.x,
    },
    ...(faceted ? { fx: { padding: 0.12, ...options.fx } } : {}),
  }) as unknown as SvgElement;
}

/** The legend of the study's four strategies. */
export const strategyLegend: readonly LegendItem[] = STRATEGIES.map((s) => ({ label: s, color: COLORS[s] }));

/** Plot's colour scale of the study's four strategies. */
export const strategyColor = { domain: [...STRATEGIES], range: STRATEGIES.map((s) => COLORS[s]) };

/** A metric for a chart: an undefined one (null) is NaN, which Plot leaves out (a gap, not a 0). */
export function plotted(value: number | null): number {
  return value ?? NaN;
}

/** Colours for every variant: the study's four keep theirs, others take the palette in order. */
export function variantColors(variants: readonly PolicyVariant[]) {
  const labels = variants.map((v) => v.label);
  // A palette colour one of the study's four already wears here is skipped, so no two variants share one
  // (until there are more variants than colours).
  const taken = new Set(labels.filter((l) => Object.hasOwn(COLORS, l)).map((l) => COLORS[l]));
  const free = SERIES_COLORS.filter((c) => !taken.has(c));
  const palette = free.length > 0 ? free : SERIES_COLORS;
  let next = 0;
  const range = labels.map((l) => Object.hasOwn(COLORS, l) ? COLORS[l] : palette[next++ % palette.length]);
  return { domain: labels, range, legend: labels.map((label, i) => ({ label, color: range[i] })) };
}

/** Means of a metric per (variant, value of `axis`), over all other axes; NaN where it is undefined at any point. */
export function meansBy(
  rows: readonly SummaryRow[],
  axis: string,
  metric: (r: SummaryRow) => number | null,
): { strategy: string; x: number | string; y: number }[] {
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

/** Hybrid's mean TTFT per threshold, one line per subset of points (a Zipf exponent, a load regime). */
export function thresholdChart(
  choices: readonly ThresholdChoice[],
  subtitle: string,
  xLabel: string,
): Chart {
  const data = choices.flatMap((c) =>
    c.ttftByThreshold.map((t) => ({ series: c.subset, threshold: t.threshold, ttft: t.ttftMeanMs }))
  ).filter((d) => Number.isFinite(d.ttft));
  const series = choices.map((c) => c.subset);
  return {
    file: "hybrid_threshold_sweep.png",
    title: "Hybrid: mean TTFT vs threshold",
    svg: figure(
      "Hybrid: mean TTFT vs queue-depth threshold",
      subtitle,
      series.map((z, i) => ({ label: z, color: SERIES_COLORS[i % SERIES_COLORS.length] })),
      plot({
        x: { label: xLabel, ticks: [...new Set(data.map((d) => d.threshold))] },
        y: { label: "mean TTFT (ms)", grid: true },
        color: { domain: series, range: SERIES_COLORS },
        marks: [
          Plot.lineY(data, { x: "threshold", y: "ttft", stroke: "series", strokeWidth: 2 }),
          Plot.dot(data, { x: "threshold", y: "ttft", fill: "series", r: 3 }),
        ],
      }),
    ),
  };
}
