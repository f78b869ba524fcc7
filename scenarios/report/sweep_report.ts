/**
 * @module
 * A sweep's report, before any file is written: the CSV, `summary.txt` (a
 * header, the sections the sweep declares, the all-policies comparison) and
 * the declared sections' charts as SVG.
 */
import type { RunResult } from "../../actors/simulation.ts";
import type { Chart } from "./chart.ts";
import { formatComparison } from "./comparison.ts";
import { reportSection } from "./sections.ts";
import { summarise, toCsv } from "./sweep_summary.ts";
import type { Sweep } from "../scenario/sweep_types.ts";

/** What a sweep reports. */
export interface SweepReport {
  /** `sweep_summary.csv`. */
  readonly csv: string;
  /** `summary.txt`. */
  readonly summary: string;
  /** The declared sections' charts, in declaration order. */
  readonly charts: readonly Chart[];
}

/** The opening lines of any sweep's `summary.txt`. */
export function formatHeader(sweep: Sweep, runs: number, requests: number): string {
  return [
    "request-routing-sim — sweep summary",
    "",
    ...(sweep.description ? [sweep.description, ""] : []),
    `${sweep.points.length} points × ${sweep.variants.length} policy variants × ${sweep.seeds.length} seeds = ${runs} runs, ` +
    `${requests.toLocaleString("en-US")} simulated requests. Metrics are means over seeds.`,
  ].join("\n") + "\n";
}

/**
 * The report of a sweep from its results (aligned with `sweep.runs`). Every
 * sweep gets the CSV, the header and the all-policies comparison; each
 * section in `sweep.report` adds its text (between the two) and its charts.
 */
export function sweepReport(sweep: Sweep, results: readonly RunResult[]): SweepReport {
  const rows = summarise(sweep, results);
  const inputs = {
    sweep,
    rows,
    runs: results.length,
    requests: results.reduce((a, r) => a + r.requests, 0),
    results,
  };
  const parts = sweep.report.map((name) => reportSection(name)!.render(inputs));
  return {
    csv: toCsv(sweep, rows),
    summary: formatHeader(sweep, inputs.runs, inputs.requests) + parts.map((p) => p.summary ?? "").join("") +
      formatComparison(sweep, rows),
    charts: parts.flatMap((p) => p.charts ?? []),
  };
}
