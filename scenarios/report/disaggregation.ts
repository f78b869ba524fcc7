/**
 * @module
 * The `disaggregation` report section: fleets of one GPU count (the sweep's
 * `fleet` axis, named values; without one, its policies) against load, under each TPOT SLO the sweep
 * tries (`slo.tpotMs`): goodput with its 95% confidence interval, SLO
 * attainment, and the highest load each fleet serves with at least 90% of
 * requests within their SLOs — DistServe's measure of a configuration
 * (`plots/goodput_by_fleet.png`).
 */
import * as Plot from "@observablehq/plot";
import { type Chart, figure, plot, SERIES_COLORS } from "./chart.ts";
import { formatMetric } from "./run_report.ts";
import type { ReportInputs, ReportSection } from "./section.ts";
import { LOAD_AXES } from "./study_findings.ts";
import { meanOrNull } from "./statistics.ts";
import type { SummaryRow } from "./sweep_summary.ts";

/** The axis of fleet shapes this section compares. */
export const FLEET_AXIS = "fleet";

/** The axis of TPOT SLOs, when the sweep varies it. */
const TPOT_AXIS = "slo.tpotMs";

/** The attainment a fleet must keep at a load to be said to serve it (DistServe's 90%). */
export const ATTAINMENT_TARGET = 0.9;

/** The sweep's load axis: a known one (rate, trace speed), else its first numeric axis but fleet and TPOT SLO. */
function loadAxis(inputs: ReportInputs): string {
  const axes = inputs.sweep.axes.filter((a) => a !== FLEET_AXIS && a !== TPOT_AXIS);
  return axes.find((a) => (LOAD_AXES as readonly string[]).includes(a)) ?? axes[0];
}

/** Distinct values of `axis` over `rows`, in sweep order. */
function valuesOf(rows: readonly SummaryRow[], axis: string): (number | string)[] {
  return [...new Set(rows.map((r) => r.axes[axis]))];
}

/**
 * The rows as this section compares them: one per series (the fleet, with
 * the policy when the sweep has several; the policy without a fleet axis),
 * TPOT SLO and load; one more axis beside a fleet axis (a KV size, say)
 * makes series of its own, more are averaged (the confidence interval is
 * kept only where one row makes the cell).
 */
function seriesRows(inputs: ReportInputs, load: string): SummaryRow[] {
  const { rows, sweep } = inputs;
  const fleet = sweep.axes.includes(FLEET_AXIS), policies = sweep.variants.length > 1;
  // Axes beside fleet, load and SLO tell series apart when they are few (KV size, …); else they are averaged.
  const extra = sweep.axes.filter((a) => a !== FLEET_AXIS && a !== TPOT_AXIS && a !== load);
  const apart = extra.length === 1 && fleet ? extra : [];
  const column = (a: string) => sweep.axisColumns[sweep.axes.indexOf(a)];
  const name = (r: SummaryRow) =>
    (fleet ? (policies ? `${r.axes[FLEET_AXIS]} · ${r.label}` : String(r.axes[FLEET_AXIS])) : r.label) +
    apart.map((a) => ` · ${column(a)} ${r.axes[a]}`).join("");
  const groups = new Map<string, SummaryRow[]>();
  for (const r of rows) {
    const key = [name(r), r.axes[TPOT_AXIS], r.axes[load]].join("\u0000");
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  return [...groups.values()].map((group) => {
    const r = group[0];
    const axes = { [FLEET_AXIS]: name(r), [load]: r.axes[load], [TPOT_AXIS]: r.axes[TPOT_AXIS] };
    if (group.length === 1) return { ...r, axes };
    const mean = Object.fromEntries(
      Object.keys(r.mean).map((
        m,
      ) => [m, meanOrNull(group.map((g) => g.mean[m as keyof SummaryRow["mean"]]))]),
    ) as unknown as SummaryRow["mean"];
    const ci95 = Object.fromEntries(
      Object.keys(r.ci95).map((m) => [m, null]),
    ) as unknown as SummaryRow["ci95"];
    return { ...r, axes, mean, ci95 };
  });
}

/** The highest load at which `rows` (one fleet, one SLO, by load) keep the attainment target, every lower load too. */
function servedLoad(rows: readonly SummaryRow[], load: string): number | null {
  let served: number | null = null;
  for (const r of [...rows].sort((a, b) => Number(a.axes[load]) - Number(b.axes[load]))) {
    if ((r.mean.sloAttainment ?? 0) < ATTAINMENT_TARGET) break;
    served = Number(r.axes[load]);
  }
  return served;
}

/** One SLO level's table: goodput ± CI per fleet and load, attainment, and the load each fleet serves. */
function sloTable(rows: readonly SummaryRow[], load: string, heading: string): string {
  const fleets = valuesOf(rows, FLEET_AXIS), loads = valuesOf(rows, load);
  const width = Math.max(16, ...fleets.map((f) => String(f).length + 2));
  const cell = (r: SummaryRow | undefined) =>
    r === undefined
      ? "n/a"
      : `${formatMetric(r.mean.goodputRps, 1)}${
        r.ci95.goodputRps === null ? "" : ` ±${formatMetric(r.ci95.goodputRps, 1)}`
      } (${formatMetric(r.mean.sloAttainment === null ? null : r.mean.sloAttainment * 100, 0)}%)`;
  const lines = [
    `\n${heading}: goodput req/s ± 95% CI (SLO attainment), by ${load}`,
    `  ${"fleet".padEnd(width)}${loads.map((l) => String(l).padStart(22)).join("")}   serves (≥ ${
      ATTAINMENT_TARGET * 100
    }%)`,
  ];
  const served: [string, number | null][] = [];
  for (const fleet of fleets) {
    const mine = rows.filter((r) => r.axes[FLEET_AXIS] === fleet);
    const at = (l: number | string) => mine.find((r) => r.axes[load] === l);
    const s = servedLoad(mine, load);
    served.push([String(fleet), s]);
    lines.push(
      `  ${String(fleet).padEnd(width)}${loads.map((l) => cell(at(l)).padStart(22)).join("")}   ${
        s === null ? `none tried` : `${s}`
      }`,
    );
  }
  const best = served.filter(([, s]) => s !== null).sort((a, b) => b[1]! - a[1]!);
  if (best.length > 0) {
    const top = best.filter(([, s]) => s === best[0][1]).map(([f]) => f);
    lines.push(`  → serves the most load: ${top.join(", ")} (${best[0][1]} ${load})`);
  }
  return lines.join("\n");
}

/** Mean TTFT, TPOT, KV transfer and hit rates per fleet, over the points at which it keeps the attainment target. */
function latencyTable(rows: readonly SummaryRow[], load: string): string {
  const lines = [
    `\nLatency by fleet, over the points (load and SLO) where it keeps ≥ ${
      ATTAINMENT_TARGET * 100
    }% attainment`,
    "  fleet                                      TTFT ms   TPOT ms   KV transfer ms (link wait)   token hit (GPU / host)",
  ];
  for (const fleet of valuesOf(rows, FLEET_AXIS)) {
    const mine = rows.filter((r) =>
      r.axes[FLEET_AXIS] === fleet && (r.mean.sloAttainment ?? 0) >= ATTAINMENT_TARGET
    );
    const m = (f: (r: SummaryRow) => number | null) => mine.length === 0 ? null : meanOrNull(mine.map(f));
    const loads = [...new Set(mine.map((r) => r.axes[load]))];
    lines.push(
      `  ${String(fleet).padEnd(40)} ${formatMetric(m((r) => r.mean.ttftMeanMs), 1).padStart(8)}  ${
        formatMetric(m((r) => r.mean.tpotMeanMs), 2).padStart(8)
      }   ${formatMetric(m((r) => r.mean.kvTransferMeanMs), 2).padStart(8)} (${
        formatMetric(m((r) => r.mean.kvQueueMeanMs), 2)
      })${" ".repeat(12)}${formatMetric(m((r) => r.mean.tokenHitRate), 3)} (${
        formatMetric(m((r) => r.mean.gpuTokenHitRate), 3)
      } / ${formatMetric(m((r) => r.mean.hostTokenHitRate), 3)})  at ${
        loads.length === 0 ? "no load" : loads.join(", ")
      }`,
    );
  }
  return lines.join("\n");
}

/** Goodput against load, one line per fleet, one panel per TPOT SLO. */
function goodputChart(rows: readonly SummaryRow[], load: string): Chart {
  const fleets = valuesOf(rows, FLEET_AXIS).map(String);
  const color = { domain: fleets, range: fleets.map((_, i) => SERIES_COLORS[i % SERIES_COLORS.length]) };
  const data = rows.map((r) => ({
    fleet: String(r.axes[FLEET_AXIS]),
    load: Number(r.axes[load]),
    slo: r.axes[TPOT_AXIS] === undefined ? "TPOT SLO" : `TPOT ≤ ${r.axes[TPOT_AXIS]} ms`,
    goodput: r.mean.goodputRps,
    lo: Math.max(0, r.mean.goodputRps - (r.ci95.goodputRps ?? 0)),
    hi: r.mean.goodputRps + (r.ci95.goodputRps ?? 0),
  }));
  return {
    file: "goodput_by_fleet.png",
    title: "Goodput by fleet",
    svg: figure(
      "Goodput by fleet and load",
      `Requests/s meeting every SLO (mean over seeds, 95% CI), by ${load}; one panel per TPOT SLO`,
      fleets.map((f, i) => ({ label: f, color: color.range[i] })),
      plot({
        x: { label: load, type: "point" },
        y: { label: "goodput (req/s)", grid: true },
        fx: { label: null },
        color,
        marks: [
          Plot.ruleX(data, { x: "load", y1: "lo", y2: "hi", fx: "slo", stroke: "fleet", strokeOpacity: 0.5 }),
          Plot.lineY(data, { x: "load", y: "goodput", fx: "slo", stroke: "fleet", strokeWidth: 2 }),
          Plot.dot(data, { x: "load", y: "goodput", fx: "slo", fill: "fleet", r: 3 }),
        ],
      }),
    ),
  };
}

/** `disaggregation`: needs a `fleet` axis (named fleets) and a load axis. */
export const section: ReportSection = {
  name: "disaggregation",
  summary:
    "fleets of one GPU count (axis `fleet`) against load under each TPOT SLO: goodput with CIs, SLO attainment, the load each serves at 90% (plots/goodput_by_fleet.png)",
  charts: ["goodput_by_fleet.png"],
  check: ({ axes }) =>
    axes.some((a) => a !== FLEET_AXIS && a !== TPOT_AXIS)
      ? undefined
      : "needs a load axis (workload.ratePerSec or workload.trace.speed) beside the fleet and the TPOT SLO",
  render: (inputs) => {
    const load = loadAxis(inputs), rows = seriesRows(inputs, load);
    const slos = valuesOf(rows, TPOT_AXIS);
    const tables = slos[0] === undefined
      ? [sloTable(rows, load, "SLOs")]
      : slos.map((slo) => sloTable(rows.filter((r) => r.axes[TPOT_AXIS] === slo), load, `TPOT ≤ ${slo} ms`));
    return {
      summary: `${tables.join("\n")}\n${latencyTable(rows, load)}\n`,
      charts: [goodputChart(rows, load)],
    };
  },
};
