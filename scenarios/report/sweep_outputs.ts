/**
 * @module
 * Every file a sweep writes — `sweep_summary.csv`, `summary.txt`,
 * `plots/*.png` and `report.html` — as bytes or text, by path relative to
 * its output directory. Loads the PNG renderer (see `png.ts`).
 */
import type { RunResult } from "../../actors/simulation.ts";
import { toPng } from "./png.ts";
import { reportHtml } from "./report_html.ts";
import { sweepReport } from "./sweep_report.ts";
import type { Sweep } from "../scenario/sweep_types.ts";

/** Every file a sweep writes, as text or bytes, by path relative to the output directory. */
export function sweepOutputs(sweep: Sweep, results: readonly RunResult[]): Map<string, string | Uint8Array> {
  const { csv, summary, charts } = sweepReport(sweep, results);
  const files = new Map<string, string | Uint8Array>();
  files.set("sweep_summary.csv", csv);
  files.set("summary.txt", summary);
  for (const chart of charts) files.set(`plots/${chart.file}`, toPng(chart.svg));
  files.set("report.html", reportHtml("request-routing-sim — routing study", summary, charts));
  return files;
}
