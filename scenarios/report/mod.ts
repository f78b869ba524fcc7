/**
 * @module
 * The reports wing's front door: what a sweep writes ({@linkcode sweepOutputs}),
 * and the registry of the analyses a sweep may declare in its `report` list.
 * Importing it loads the PNG renderer (a native module needing `--allow-ffi`),
 * so the tools that print one run's report import `run_report.ts` directly.
 *
 * @example
 * ```ts
 * const files = sweepOutputs(sweep, results); // "summary.txt", "plots/ttft_vs_load.png", …
 * ```
 */
export { sweepOutputs } from "./sweep_outputs.ts";
export { formatHeader, type SweepReport, sweepReport } from "./sweep_report.ts";
export {
  REPORT_NAMES,
  REPORT_SECTIONS,
  type ReportInputs,
  type ReportPart,
  type ReportSection,
  reportSection,
  type ReportSubject,
} from "./sections.ts";
export type { Chart } from "./chart.ts";
export { summarise, type SummaryRow, toCsv } from "./sweep_summary.ts";
