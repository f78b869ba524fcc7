/**
 * @module
 * The `dynamics` report section: a fleet that misbehaves (design.md, "A
 * fleet that misbehaves"). Whatever of these the sweep has, it reports:
 * - router replicas (`router.replicas` axis): token hit rate, view precision
 *   and TTFT against the number of replicas, one line per sync setting
 *   (`plots/replicas_hit_rate.png`);
 * - faults (a `fault` axis): per fault and policy, the hit rate, TTFT, what
 *   failed, was retried or affected, and the time to recover;
 * - autoscaling (runs with `autoscale`): instance-seconds against tail
 *   latency and attainment per fleet, and the autoscaler's decisions over
 *   time for the first policy and seed (`plots/autoscaling.png`).
 */
import * as Plot from "@observablehq/plot";
import { type Chart, figure, plot, plotted, SERIES_COLORS } from "./chart.ts";
import { formatMetric } from "./run_report.ts";
import type { ReportInputs, ReportSection } from "./section.ts";
import type { SummaryRow } from "./sweep_summary.ts";

/** The axis of router replica counts. */
const REPLICAS_AXIS = "router.replicas";
/** The axis of fault scenarios (named values). */
const FAULT_AXIS = "fault";

/** Distinct values of `axis` over `rows`, in sweep order. */
function valuesOf(rows: readonly SummaryRow[], axis: string): (number | string)[] {
  return [...new Set(rows.map((r) => r.axes[axis]))];
}

/** The series of a row besides `skip`: every other axis and the policy. */
function seriesOf(inputs: ReportInputs, r: SummaryRow, skip: readonly string[]): string {
  const { sweep } = inputs;
  const parts = sweep.axes.filter((a) => !skip.includes(a)).map((a) => String(r.axes[a]));
  return [...parts, ...(sweep.variants.length > 1 ? [r.label] : [])].join(" · ") || r.label;
}

/** View precision: the share of expected cached tokens that were really there; null when unknown. */
function precision(r: SummaryRow): number | null {
  return r.mean.viewFalsePositiveRate === null ? null : 1 - r.mean.viewFalsePositiveRate;
}

/** The replicas table: hit rate, precision and mean TTFT by replica count, one line per other setting. */
function replicasPart(inputs: ReportInputs): { text: string; chart: Chart } {
  const rows = inputs.rows;
  const counts = valuesOf(rows, REPLICAS_AXIS);
  const series = [...new Set(rows.map((r) => seriesOf(inputs, r, [REPLICAS_AXIS])))];
  const width = Math.max(24, ...series.map((s) => s.length + 2));
  const cell = (r: SummaryRow | undefined) =>
    r === undefined
      ? "—"
      : `${formatMetric(r.mean.tokenHitRate, 3)} / ${formatMetric(precision(r), 2)} / ${
        formatMetric(r.mean.ttftMeanMs, 0)
      }`;
  const lines = [
    `\nRouter replicas: token hit rate / view precision / mean TTFT ms, by replicas`,
    `  ${"setting".padEnd(width)}${counts.map((c) => String(c).padStart(22)).join("")}`,
  ];
  for (const s of series) {
    const mine = rows.filter((r) => seriesOf(inputs, r, [REPLICAS_AXIS]) === s);
    lines.push(
      `  ${s.padEnd(width)}${
        counts.map((c) => cell(mine.find((r) => r.axes[REPLICAS_AXIS] === c)).padStart(22)).join("")
      }`,
    );
  }
  // One line per setting of the other axes (sync), one panel per policy.
  const settingOf = (r: SummaryRow) =>
    inputs.sweep.axes.filter((a) => a !== REPLICAS_AXIS).map((a) => String(r.axes[a])).join(" · ") ||
    "replicas";
  const settings = [...new Set(rows.map(settingOf))];
  const color = { domain: settings, range: settings.map((_, i) => SERIES_COLORS[i % SERIES_COLORS.length]) };
  const data = rows.map((r) => ({
    setting: settingOf(r),
    policy: r.label,
    replicas: Number(r.axes[REPLICAS_AXIS]),
    hit: plotted(r.mean.tokenHitRate),
  }));
  const chart: Chart = {
    file: "replicas_hit_rate.png",
    title: "Token hit rate by router replicas",
    svg: figure(
      "Token hit rate against router replicas",
      "Mean over seeds; one line per setting, one panel per policy",
      settings.map((s, i) => ({ label: s, color: color.range[i] })),
      plot({
        x: { label: "router replicas", type: "point" },
        y: { label: "token hit rate", grid: true },
        fx: { label: null },
        color,
        marks: [
          Plot.lineY(data, { x: "replicas", y: "hit", fx: "policy", stroke: "setting", strokeWidth: 2 }),
          Plot.dot(data, { x: "replicas", y: "hit", fx: "policy", fill: "setting", r: 3 }),
        ],
      }),
    ),
  };
  return { text: lines.join("\n"), chart };
}

/** The faults table: per fault and policy, what it cost. */
function faultsPart(inputs: ReportInputs): string {
  const rows = inputs.rows;
  const lines = [
    `\nFaults: per fault and policy (means over seeds)`,
    `  ${"fault · policy".padEnd(44)}token hit  TTFT mean  p50   p99   failed  retried  affected  recover ms`,
  ];
  for (const r of rows) {
    const name = `${r.axes[FAULT_AXIS] ?? "faults"} · ${r.label}`;
    lines.push(
      `  ${name.padEnd(44)}${formatMetric(r.mean.tokenHitRate, 3).padStart(9)}${
        formatMetric(r.mean.ttftMeanMs, 1).padStart(11)
      }${formatMetric(r.mean.ttftP50Ms, 0).padStart(5)}${formatMetric(r.mean.ttftP99Ms, 0).padStart(6)}${
        formatMetric(r.mean.failed, 1).padStart(9)
      }${formatMetric(r.mean.retried, 1).padStart(9)}${
        formatMetric(r.mean.requestsAffected, 1).padStart(10)
      }${formatMetric(r.mean.timeToRecoverMs, 0).padStart(12)}`,
    );
  }
  return lines.join("\n");
}

/** The autoscaling table and the first seed's decisions over time. */
function autoscalePart(inputs: ReportInputs): { text: string; chart: Chart | undefined } {
  const { rows, sweep, results } = inputs;
  const lines = [
    `\nAutoscaling: cost against latency, per fleet (means over seeds)`,
    `  ${"fleet · policy".padEnd(44)}instance·s  peak  TTFT p50  TTFT p99  attainment  failed`,
  ];
  for (const r of rows) {
    const name = seriesOf(inputs, r, []);
    lines.push(
      `  ${name.padEnd(44)}${formatMetric(r.mean.instanceSeconds, 0).padStart(10)}${
        formatMetric(r.mean.peakInstances, 1).padStart(6)
      }${formatMetric(r.mean.ttftP50Ms, 0).padStart(10)}${formatMetric(r.mean.ttftP99Ms, 0).padStart(10)}${
        formatMetric(r.mean.sloAttainment === null ? null : r.mean.sloAttainment * 100, 1, "%").padStart(12)
      }${formatMetric(r.mean.failed, 1).padStart(8)}`,
    );
  }
  // The first seed's runs of the first policy that scaled: their decisions over time.
  const firstSeed = sweep.seeds[0];
  const scaled = sweep.runs.flatMap((run, i) => {
    const scaling = results?.[i]?.scaling;
    if (run.seed !== firstSeed || run.variant !== 0 || scaling === null || scaling === undefined) return [];
    const name = seriesOf(
      inputs,
      rows.find((r) => r.point === run.point && sweep.variants[0].label === r.label)!,
      [],
    );
    return [{ name, scaling, end: results![i].simulatedMs }];
  });
  if (scaled.length === 0) return { text: lines.join("\n"), chart: undefined };
  const names = scaled.map((s) => s.name);
  const color = { domain: names, range: names.map((_, i) => SERIES_COLORS[i % SERIES_COLORS.length]) };
  const data = scaled.flatMap((s) => [
    ...s.scaling.map((d) => ({ run: s.name, t: d.timeMs / 1000, instances: d.instances })),
    { run: s.name, t: s.end / 1000, instances: s.scaling[s.scaling.length - 1]?.instances ?? NaN },
  ]);
  const chart: Chart = {
    file: "autoscaling.png",
    title: "Autoscaler decisions",
    svg: figure(
      "Instances wanted over time",
      `The autoscaler's decisions (active or provisioning instances), ${
        sweep.variants[0].label
      }, seed ${firstSeed}`,
      names.map((n, i) => ({ label: n, color: color.range[i] })),
      plot({
        x: { label: "simulated time (s)" },
        y: { label: "instances", grid: true },
        color,
        marks: [
          Plot.lineY(data, { x: "t", y: "instances", stroke: "run", curve: "step-after", strokeWidth: 2 }),
        ],
      }),
    ),
  };
  return { text: lines.join("\n"), chart };
}

/** Whether a run of the sweep has an autoscaler. */
function autoscaled(inputs: ReportInputs): boolean {
  return inputs.sweep.runs.some((r) => r.config.autoscale !== undefined);
}

/** Whether a run of the sweep has faults. */
function faulted(inputs: ReportInputs): boolean {
  return inputs.sweep.runs.some((r) => (r.config.faults?.length ?? 0) > 0);
}

export const section: ReportSection = {
  name: "dynamics",
  summary:
    "replicas (hit rate, precision, TTFT by replica count), faults (cost and recovery per policy) and " +
    "autoscaling (instance-seconds against latency, decisions over time)",
  charts: ["replicas_hit_rate.png", "autoscaling.png"],
  check: () => undefined,
  render: (inputs) => {
    const texts: string[] = [], charts: Chart[] = [];
    if (inputs.sweep.axes.includes(REPLICAS_AXIS)) {
      const part = replicasPart(inputs);
      texts.push(part.text);
      charts.push(part.chart);
    }
    if (faulted(inputs)) texts.push(faultsPart(inputs));
    if (autoscaled(inputs)) {
      const part = autoscalePart(inputs);
      texts.push(part.text);
      if (part.chart) charts.push(part.chart);
    }
    return { summary: texts.join("\n") + "\n", charts };
  },
};
