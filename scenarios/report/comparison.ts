/**
 * @module
 * The policy-by-policy part of a sweep summary: every variant at every point
 * (small sweeps), averages over the points where every variant is
 * operational, how many points each policy lost to drops, and — when the
 * sweep names a `focus` axis — how each policy responds to it. Every sentence
 * is computed from the rows.
 */
import { formatMetric } from "./run_report.ts";
import type { SummaryRow } from "./sweep_summary.ts";
import type { Sweep } from "../scenario/sweep_types.ts";
import {
  dropsTooMany,
  isOperational,
  OPERATIONAL_DROPPED_FRACTION,
  OPERATIONAL_TTFT_MS,
} from "./study_findings.ts";

const POINT_TABLE_LIMIT = 30;

/** One policy's means over a set of points; a mean is null when it is undefined at any of them. */
interface Averages {
  readonly label: string;
  readonly ttftMeanMs: number | null;
  readonly ttftP99Ms: number | null;
  readonly hitRate: number | null;
  readonly tokenHitRate: number | null;
  readonly availableTokenHitRate: number | null;
  readonly expectedTokenHitRate: number | null;
  readonly routingRegret: number | null;
  readonly viewFalsePositiveRate: number | null;
  readonly imbalance: number | null;
  readonly droppedFraction: number | null;
  readonly goodputRps: number | null;
  readonly points: number;
  /** Points where the policy dropped more than the operational share of requests. */
  readonly droppingPoints: number;
}

function average(label: string, rows: readonly SummaryRow[]): Averages {
  const avg = (f: (r: SummaryRow) => number | null) => {
    if (rows.length === 0) return null; // no points: nothing to average
    const values = rows.map(f);
    return values.includes(null) ? null : (values as number[]).reduce((a, v) => a + v, 0) / rows.length;
  };
  return {
    label,
    ttftMeanMs: avg((r) => r.mean.ttftMeanMs),
    ttftP99Ms: avg((r) => r.mean.ttftP99Ms),
    hitRate: avg((r) => r.mean.hitRate),
    tokenHitRate: avg((r) => r.mean.tokenHitRate),
    availableTokenHitRate: avg((r) => r.mean.availableTokenHitRate),
    expectedTokenHitRate: avg((r) => r.mean.expectedTokenHitRate),
    routingRegret: avg((r) => r.mean.routingRegret),
    viewFalsePositiveRate: avg((r) => r.mean.viewFalsePositiveRate),
    imbalance: avg((r) => r.mean.imbalance),
    droppedFraction: avg((r) => r.mean.droppedFraction),
    goodputRps: avg((r) => r.mean.goodputRps),
    points: rows.length,
    droppingPoints: rows.filter(dropsTooMany).length,
  };
}

/** Whether a policy may be ranked best over its points: it has a mean TTFT and never dropped too many. */
const canRank = (a: Averages) => a.ttftMeanMs !== null && a.droppingPoints === 0;

/** Best TTFT first; a policy that cannot rank comes after every one that can. */
function ranked(averages: readonly Averages[]): Averages[] {
  const key = (a: Averages) => [canRank(a) ? 0 : 1, a.ttftMeanMs ?? Infinity];
  return [...averages].sort((a, b) => {
    const [ka, kb] = [key(a), key(b)];
    return ka[0] - kb[0] || ka[1] - kb[1];
  });
}

const header =
  "  policy                          TTFT ms   p99 ms    hit   tok hit  avail   expect  regret  view fp" +
  "  imbalance   dropped  goodput/s";
const line = (a: Averages, mark = "") =>
  `  ${(a.label + mark).padEnd(30)} ${formatMetric(a.ttftMeanMs, 1).padStart(8)} ${
    formatMetric(a.ttftP99Ms, 1).padStart(8)
  }  ${formatMetric(a.hitRate, 3).padEnd(5)}  ${formatMetric(a.tokenHitRate, 3).padEnd(5)}    ${
    formatMetric(a.availableTokenHitRate, 3).padEnd(5)
  }  ${formatMetric(a.expectedTokenHitRate, 3).padEnd(5)}  ${formatMetric(a.routingRegret, 3).padStart(6)}  ${
    formatMetric(a.viewFalsePositiveRate, 3).padStart(7)
  }  ${formatMetric(a.imbalance, 3).padStart(9)}  ${
    formatMetric(a.droppedFraction === null ? null : a.droppedFraction * 100, 1, "%").padStart(8)
  }  ${formatMetric(a.goodputRps, 2).padStart(9)}`;
/** The ranked table's lines: `*` marks the best, if any policy can rank. */
const rankedLines = (averages: readonly Averages[]) =>
  ranked(averages).map((a, k) => line(a, k === 0 && canRank(a) ? " *" : ""));

/**
 * What the routing-accounting columns mean (actors/metrics/README.md, "Routing quality"),
 * one line per basis: `expect` has a different denominator from `tok hit`
 * and `avail`, so it may exceed them without the view being wrong.
 */
const ROUTING_LEGEND: readonly string[] = [
  "(tok hit, avail: share of all prompt tokens — avail = longest prefix cached on any instance when routed; " +
  "regret = avail − tok hit;",
  " expect: share of the prompt tokens of the requests whose policy consulted the router's view — what the " +
  "view expected cached on its choice, so it may exceed avail;",
  " view fp: expected tokens the choice did not hold / expected; n/a: not measurable for that policy or run)",
];

/** " Lowest routing regret: X (r)." over the policies that have one; "" when none has. */
function lowestRegret(averages: readonly Averages[]): string {
  const measured = averages.filter((a) => a.routingRegret !== null);
  if (measured.length === 0) return "";
  const best = [...measured].sort((a, b) => a.routingRegret! - b.routingRegret!)[0];
  return ` Lowest routing regret: ${best.label} (${best.routingRegret!.toFixed(3)}).`;
}

/** Averages over the points where every variant is operational, ranked, and who is best and worst there. */
function operationalLines(labels: readonly string[], byPoint: readonly SummaryRow[][]): string[] {
  const operational = byPoint.filter((rs) => rs.length === labels.length && rs.every(isOperational));
  const out = [
    `Averages over the ${operational.length} of ${byPoint.length} points where every policy has mean TTFT < ${
      OPERATIONAL_TTFT_MS / 1000
    } s and drops at most ${OPERATIONAL_DROPPED_FRACTION * 100}% of requests (best TTFT first):`,
    ...ROUTING_LEGEND,
    "",
    header,
  ];
  const overall = ranked(labels.map((l) => average(l, operational.flat().filter((r) => r.label === l))));
  if (operational.length === 0) {
    out.push("  (no such point: no policy is ranked here)");
    return out;
  }
  overall.forEach((a, i) => out.push(line(a, i === 0 ? " *" : "")));
  // Every policy is operational at these points, so every mean is defined.
  const best = overall[0], worst = overall[overall.length - 1];
  out.push(
    "",
    `Best mean TTFT: ${best.label} (${best.ttftMeanMs!.toFixed(1)} ms); worst: ${worst.label} (${
      worst.ttftMeanMs!.toFixed(1)
    } ms, ` +
      `${((worst.ttftMeanMs! / best.ttftMeanMs! - 1) * 100).toFixed(0)}% slower). Highest token hit rate: ` +
      `${[...overall].sort((a, b) => b.tokenHitRate! - a.tokenHitRate!)[0].label}.` +
      lowestRegret(overall),
  );
  return out;
}

/** How many points each policy lost to drops. */
function lostLines(labels: readonly string[], rows: readonly SummaryRow[], points: number): string[] {
  const lost = labels.map((l) => average(l, rows.filter((r) => r.label === l)));
  return [
    "",
    `Points lost to drops, of ${points} (more than ${OPERATIONAL_DROPPED_FRACTION * 100}% of requests ` +
    `dropped, mean over seeds: not operational there): ` +
    lost.map((a) => `${a.label} ${a.droppingPoints}`).join(", ") + ".",
  ];
}

/** The focus axis, policy by policy: TTFT and token hit along it, who changes most, who is best at each value. */
function focusLines(sweep: Sweep, rows: readonly SummaryRow[], focus: string): string[] {
  const labels = sweep.variants.map((v) => v.label);
  const values = [...new Set(sweep.points.map((p) => p.values[focus]))];
  const out = ["", `Effect of ${focus} (${values.join(" → ")}), averaged over the other axes:`, ""];
  const effects: { label: string; change: number | null }[] = [];
  const pct = (c: number | null) => c === null ? "n/a" : `${c >= 0 ? "+" : ""}${(c * 100).toFixed(1)}%`;
  const at = (label: string, v: number | string) =>
    average(label, rows.filter((r) => r.label === label && r.axes[focus] === v));
  for (const label of labels) {
    const along = values.map((v) => at(label, v));
    const first = along[0].ttftMeanMs, last = along[along.length - 1].ttftMeanMs;
    const change = first === null || last === null ? null : last / first - 1;
    effects.push({ label, change });
    out.push(
      `  ${label.padEnd(30)} TTFT ${along.map((a) => formatMetric(a.ttftMeanMs, 1)).join(" → ")} ms (${
        pct(change)
      }); token hit ${along.map((a) => formatMetric(a.tokenHitRate, 3)).join(" → ")}` +
        (along.some((a) => a.droppingPoints > 0)
          ? `; drops ${along.map((a) => formatMetric(a.droppedFraction, 3)).join(" → ")}`
          : ""),
    );
  }
  // An undefined change (no TTFT at one end) sorts last.
  const size = (c: number | null) => c === null ? -1 : Math.abs(c);
  const sorted = [...effects].sort((a, b) => size(b.change) - size(a.change));
  out.push(
    "",
    `Most affected: ${sorted[0].label} (${pct(sorted[0].change)} TTFT from ${values[0]} to ${
      values.at(-1)
    }); ` +
      `least: ${sorted.at(-1)!.label} (${pct(sorted.at(-1)!.change)}).`,
  );
  for (const v of values) {
    const best = ranked(labels.map((l) => at(l, v)))[0];
    out.push(
      `At ${focus.split(".").pop()}=${v}: ` +
        (canRank(best)
          ? `best ${best.label} (${best.ttftMeanMs!.toFixed(1)} ms).`
          : `no best: every policy dropped more than ${OPERATIONAL_DROPPED_FRACTION * 100}% of requests ` +
            `at some point, or completed none.`),
    );
  }
  return out;
}

/** Every point's ranked table. */
function pointLines(sweep: Sweep, labels: readonly string[], byPoint: readonly SummaryRow[][]): string[] {
  const out = [
    "",
    "Every point (best TTFT first, * = best):",
    `(a policy that dropped more than ${
      OPERATIONAL_DROPPED_FRACTION * 100
    }% of requests at a point cannot be best there and is listed last)`,
  ];
  sweep.points.forEach((p, i) => {
    out.push("", sweep.axes.map((a) => `${a.split(".").pop()}=${p.values[a]}`).join(", "), header);
    out.push(...rankedLines(labels.map((l) => average(l, byPoint[i].filter((r) => r.label === l)))));
  });
  return out;
}

/**
 * The comparison section of `summary.txt`, which every sweep gets: every
 * policy's averages over the operational points, the points each lost to
 * drops, the effect of the `focus` axis (when the sweep names one) and, for
 * sweeps of at most 30 points, every point's table.
 */
export function formatComparison(sweep: Sweep, rows: readonly SummaryRow[]): string {
  const labels = sweep.variants.map((v) => v.label);
  const byPoint = sweep.points.map((p) => rows.filter((r) => r.point === p.index));
  const out: string[] = [
    "",
    "All policies",
    "",
    ...operationalLines(labels, byPoint),
    ...lostLines(labels, rows, byPoint.length),
    ...(sweep.focus !== undefined ? focusLines(sweep, rows, sweep.focus) : []),
    ...(byPoint.length <= POINT_TABLE_LIMIT ? pointLines(sweep, labels, byPoint) : []),
  ];
  return out.join("\n") + "\n";
}
