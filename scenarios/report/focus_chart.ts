/**
 * @module
 * The `focus` report section: mean TTFT of every policy against the axis the
 * sweep names as its `focus` (`plots/ttft_by_focus.png`).
 */
import * as Plot from "@observablehq/plot";
import { type Chart, figure, meansBy, plot, variantColors } from "./chart.ts";
import type { ReportSection } from "./section.ts";
import type { SummaryRow } from "./sweep_summary.ts";
import type { PolicyVariant } from "../scenario/policy_variants.ts";

/** Mean TTFT of every policy against the `focus` axis, over seeds and the other axes. */
export function focusChart(
  rows: readonly SummaryRow[],
  variants: readonly PolicyVariant[],
  focus: string,
): Chart {
  const colors = variantColors(variants);
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

/** `focus`: needs the sweep's `focus` field. */
export const section: ReportSection = {
  name: "focus",
  summary: "mean TTFT of every policy against the sweep's focus axis (plots/ttft_by_focus.png)",
  charts: ["ttft_by_focus.png"],
  check: ({ focus }) => focus === undefined ? "needs sweep.focus, the axis to chart" : undefined,
  render: ({ sweep, rows }) => ({ charts: [focusChart(rows, sweep.variants, sweep.focus!)] }),
};
