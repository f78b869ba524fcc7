/**
 * @module
 * The registry of report sections: the analyses a sweep may declare in its
 * `report` list. Adding one is its file (exporting a
 * {@linkcode ReportSection} as `section`) plus one import and one entry in
 * {@linkcode REPORT_SECTIONS}; the sweep format's validation, its error
 * messages and the report derive from this list.
 */
import { section as disaggregation } from "./disaggregation.ts";
import { section as dynamics } from "./dynamics.ts";
import { section as focus } from "./focus_chart.ts";
import { section as load } from "./load_charts.ts";
import { section as originalCharts } from "./original_charts.ts";
import { section as originalStudy } from "./original_study.ts";
import type { ReportSection } from "./section.ts";

export type { ReportInputs, ReportPart, ReportSection, ReportSubject } from "./section.ts";

/** Every report section, in the order help text and docs list them. */
export const REPORT_SECTIONS: readonly ReportSection[] = [
  originalStudy,
  originalCharts,
  load,
  focus,
  disaggregation,
  dynamics,
];

/** Names of the report sections, in registry order. */
export const REPORT_NAMES: readonly string[] = REPORT_SECTIONS.map((s) => s.name);

const BY_NAME: ReadonlyMap<string, ReportSection> = new Map(REPORT_SECTIONS.map((s) => [s.name, s]));

/** The report section `name`, or undefined when there is none. */
export function reportSection(name: string): ReportSection | undefined {
  return BY_NAME.get(name);
}
