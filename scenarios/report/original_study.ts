/**
 * @module
 * The `original-study` report section: the original study's two tables
 * beside its published numbers, the best hybrid threshold per Zipf exponent
 * and per load regime, and a verdict on each of its four findings.
 */
import { formatMetric } from "./run_report.ts";
import type { ReportSection } from "./section.ts";
import {
  analyse,
  KEY,
  missingStrategies,
  OPERATIONAL_DROPPED_FRACTION,
  OPERATIONAL_TTFT_MS,
  type Study,
  type TableRow,
  type ThresholdChoice,
} from "./study_findings.ts";

/** Reference numbers of the original study (REFERENCE §1), shown beside ours: TTFT ms, hit rate, imbalance. */
export const ORIGINAL = {
  operational: {
    round_robin: [148.0, 0.362, 0.007],
    least_load: [148.0, 0.362, 0.007],
    prefix_aware: [204.1, 0.439, 0.173],
    "hybrid(thr=1)": [140.4, 0.453, 0.007],
  },
  key: {
    round_robin: [110.9, 0.795, 0.007],
    least_load: [110.9, 0.795, 0.007],
    prefix_aware: [280.3, 0.894, 0.856],
    "hybrid(thr=1)": [104.7, 0.895, 0.007],
  },
} as const;

const f3 = (v: number | null) => formatMetric(v, 3);

/** One headline table: a strategy per line, ours beside the original's. */
function tableLines(
  title: string,
  rows: readonly TableRow[],
  original: Readonly<Record<string, readonly number[]>>,
): string[] {
  const lines = ["", title, ""];
  if (rows.length === 0 || rows[0].points === 0) return [...lines, "  (no points)"];
  lines.push("  strategy         TTFT ms   hit    imbalance  | original: TTFT ms   hit    imbalance");
  for (const r of rows) {
    const o = original[r.strategy];
    lines.push(
      `  ${r.strategy.padEnd(15)} ${formatMetric(r.ttftMeanMs, 1).padStart(8)}  ${f3(r.hitRate).padEnd(5)}  ${
        f3(r.imbalance).padStart(9)
      }  |` +
        (o
          ? ` ${o[0].toFixed(1).padStart(17)}  ${f3(o[1])}  ${f3(o[2]).padStart(9)}`
          : "  (plugin: not in the original study)"),
    );
  }
  return lines;
}

/** The best thresholds over some subsets, one line each; nothing when there are none. */
function choiceLines(title: string, choices: readonly ThresholdChoice[]): string[] {
  if (choices.length === 0) return [];
  return [
    "",
    title,
    "",
    ...choices.map((c) =>
      `  ${c.subset.padEnd(34)} best ${String(c.best ?? "—").padStart(2)}   ` +
      c.ttftByThreshold.map((t) => `thr ${t.threshold}: ${t.ttftMeanMs.toFixed(1)}`).join(" · ")
    ),
  ];
}

/**
 * The study's part of `summary.txt`: the operational regime, any notes, the
 * two tables, the best thresholds and the four findings' verdicts.
 */
export function formatStudy(study: Study): string {
  const lines = [
    `Operational regime: the ${study.operationalPoints} points where all four strategies have mean TTFT < ${
      OPERATIONAL_TTFT_MS / 1000
    } s and drop at most ${OPERATIONAL_DROPPED_FRACTION * 100}% of requests.`,
    ...study.notes.map((note) => `Note: ${note}.`),
    ...tableLines(
      `Operational regime (${study.operationalPoints} points)`,
      study.operational,
      ORIGINAL.operational,
    ),
    ...tableLines(
      `Key scenario zipf ${KEY.zipf} / sharedFrac ${KEY.sharedFrac} (operational rates: ${
        study.key[0]?.points ?? 0
      })`,
      study.key,
      ORIGINAL.key,
    ),
    ...choiceLines(
      "Best hybrid threshold per Zipf exponent (mean TTFT ms over points where every threshold is operational)",
      study.bestByZipf,
    ),
    ...choiceLines("Best hybrid threshold per load regime (rates split in thirds)", study.bestByRegime),
    "",
    "Findings of the original study, checked against these results",
    "",
  ];
  study.findings.forEach((f, i) => {
    lines.push(`(${i + 1}) ${f.claim}`, `    Verdict: ${f.verdict.toUpperCase()}.`);
    for (const e of f.evidence) lines.push(`    - ${e}`);
    lines.push("");
  });
  return lines.join("\n") + "\n";
}

/**
 * `original-study`: needs the study's four strategies (round_robin,
 * least_load, prefix_aware, hybrid(thr=1)); without the Zipf and
 * shared-fraction axes or a load axis, the parts that need them are skipped
 * and the summary says so in a note.
 */
export const section: ReportSection = {
  name: "original-study",
  summary:
    "the original study's tables, best hybrid thresholds and verdicts on its four findings, in summary.txt",
  charts: [],
  check: ({ variants }) => {
    const missing = missingStrategies(variants);
    return missing.length === 0
      ? undefined
      : `needs the policies of the original study; the sweep lacks ${missing.join(", ")}`;
  },
  render: ({ sweep, rows }) => ({ summary: formatStudy(analyse(sweep, rows)) }),
};
