/**
 * @module
 * The report-section interface: one analysis a sweep may declare in its
 * `report` list (`"report": ["original-study", "load"]`), described for the
 * registry in `sections.ts`.
 */
import type { Chart } from "./chart.ts";
import type { SummaryRow } from "./sweep_summary.ts";
import type { PolicyVariant, Sweep } from "../scenario/sweep_types.ts";
import type { RunResult } from "../../actors/simulation.ts";

/** What a section may ask of a sweep before it runs: its axes, policy variants and focus. */
export interface ReportSubject {
  /** Axis paths, in order. */
  readonly axes: readonly string[];
  /** Policy variants, plugin included. */
  readonly variants: readonly PolicyVariant[];
  /** The sweep's focus axis, if any. */
  readonly focus?: string;
}

/** What a section analyses: the sweep, its summary rows, and the run totals. */
export interface ReportInputs {
  readonly sweep: Sweep;
  /** One row per (point, policy variant), as in `sweep_summary.csv`. */
  readonly rows: readonly SummaryRow[];
  /** Runs simulated. */
  readonly runs: number;
  /** Requests simulated over all runs. */
  readonly requests: number;
  /** Each run's result, aligned with `sweep.runs` (for a section that reads one run's own record). */
  readonly results?: readonly RunResult[];
}

/** What a section adds to the report. */
export interface ReportPart {
  /** Text for `summary.txt`, after its header and before the all-policies comparison. @default none */
  readonly summary?: string;
  /** Charts, written as `plots/<file>` and shown in `report.html`. @default none */
  readonly charts?: readonly Chart[];
}

/**
 * One analysis a sweep may declare. Each section file exports one as
 * `section`; `sections.ts` lists them.
 *
 * @example A section that writes one line
 * ```ts
 * const runsLine: ReportSection = {
 *   name: "runs",
 *   summary: "the number of runs, in summary.txt",
 *   charts: [],
 *   check: () => undefined,
 *   render: ({ runs }) => ({ summary: `${runs} runs\n` }),
 * };
 * ```
 */
export interface ReportSection {
  /** The name a sweep's `report` list gives. */
  readonly name: string;
  /** One line: what it adds, for help text and docs. */
  readonly summary: string;
  /** Chart files it may write under `plots/`: two sections a sweep declares may not share one. */
  readonly charts: readonly string[];
  /** Why the sweep cannot have this section (an axis, policy or focus it lacks), or undefined when it can. */
  check(subject: ReportSubject): string | undefined;
  /** The section's part of the report. */
  render(inputs: ReportInputs): ReportPart;
}
