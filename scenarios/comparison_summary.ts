/**
 * @module
 * The policy-by-policy part of a sweep summary: every variant at every point
 * (small sweeps), averages over the points where every variant is
 * operational, and — when the sweep names a `focus` axis — how each policy
 * responds to it. Every sentence is computed from the rows.
 */
import type { SummaryRow } from "./sweep_summary.ts";
import type { Sweep } from "./sweep_spec.ts";
import { OPERATIONAL_TTFT_MS } from "./study_findings.ts";

const POINT_TABLE_LIMIT = 30;

interface Averages {
  readonly label: string;
  readonly ttftMeanMs: number;
  readonly ttftP99Ms: number;
  readonly hitRate: number;
  readonly tokenHitRate: number;
  readonly imbalance: number;
  readonly points: number;
}

function average(label: string, rows: readonly SummaryRow[]): Averages {
  const avg = (f: (r: SummaryRow) => number) =>
    rows.length === 0 ? NaN : rows.reduce((a, r) => a + f(r), 0) / rows.length;
  return {
    label,
    ttftMeanMs: avg((r) => r.mean.ttftMeanMs),
    ttftP99Ms: avg((r) => r.mean.ttftP99Ms),
    hitRate: avg((r) => r.mean.hitRate),
    tokenHitRate: avg((r) => r.mean.tokenHitRate),
    imbalance: avg((r) => r.mean.imbalance),
    points: rows.length,
  };
}

const header = "  policy                          TTFT ms   p99 ms    hit   tok hit  imbalance";
const line = (a: Averages, mark = "") =>
  `  ${(a.label + mark).padEnd(30)} ${a.ttftMeanMs.toFixed(1).padStart(8)} ${
    a.ttftP99Ms.toFixed(1).padStart(8)
  }  ${a.hitRate.toFixed(3)}  ${a.tokenHitRate.toFixed(3)}  ${a.imbalance.toFixed(3).padStart(9)}`;

/** The comparison section of `summary.txt`. */
export function formatComparison(sweep: Sweep, rows: readonly SummaryRow[]): string {
  const labels = sweep.variants.map((v) => v.label);
  const byPoint = sweep.points.map((p) => rows.filter((r) => r.point === p.index));
  const describe = (values: Readonly<Record<string, number | string>>, axes = sweep.axes) =>
    axes.map((a) => `${a.split(".").pop()}=${values[a]}`).join(", ");
  const out: string[] = ["", "All policies", ""];

  // Averages over points where every variant is operational.
  const operational = byPoint.filter((rs) =>
    rs.length === labels.length && rs.every((r) => r.mean.ttftMeanMs < OPERATIONAL_TTFT_MS)
  );
  out.push(
    `Averages over the ${operational.length} of ${byPoint.length} points where every policy has mean TTFT < ${
      OPERATIONAL_TTFT_MS / 1000
    } s (best TTFT first):`,
    "",
    header,
  );
  const overall = labels.map((l) => average(l, operational.flat().filter((r) => r.label === l)))
    .sort((a, b) => a.ttftMeanMs - b.ttftMeanMs);
  overall.forEach((a, i) => out.push(line(a, i === 0 ? " *" : "")));
  if (operational.length > 0) {
    const best = overall[0], worst = overall[overall.length - 1];
    out.push(
      "",
      `Best mean TTFT: ${best.label} (${best.ttftMeanMs.toFixed(1)} ms); worst: ${worst.label} (${
        worst.ttftMeanMs.toFixed(1)
      } ms, ` +
        `${((worst.ttftMeanMs / best.ttftMeanMs - 1) * 100).toFixed(0)}% slower). Highest token hit rate: ` +
        `${[...overall].sort((a, b) => b.tokenHitRate - a.tokenHitRate)[0].label}.`,
    );
  }

  // The focus axis, policy by policy.
  const focus = sweep.focus;
  if (focus !== undefined) {
    const values = [...new Set(sweep.points.map((p) => p.values[focus]))];
    out.push("", `Effect of ${focus} (${values.join(" → ")}), averaged over the other axes:`, "");
    const effects: { label: string; change: number; text: string }[] = [];
    for (const label of labels) {
      const at = values.map((v) =>
        average(label, rows.filter((r) => r.label === label && r.axes[focus] === v))
      );
      const change = at[at.length - 1].ttftMeanMs / at[0].ttftMeanMs - 1;
      const text = `  ${label.padEnd(30)} TTFT ${at.map((a) => a.ttftMeanMs.toFixed(1)).join(" → ")} ms (${
        change >= 0 ? "+" : ""
      }${(change * 100).toFixed(1)}%); token hit ${at.map((a) => a.tokenHitRate.toFixed(3)).join(" → ")}`;
      effects.push({ label, change, text });
      out.push(text);
    }
    const sorted = [...effects].sort((a, b) => Math.abs(b.change) - Math.abs(a.change));
    const pct = (c: number) => `${c >= 0 ? "+" : ""}${(c * 100).toFixed(1)}%`;
    out.push(
      "",
      `Most affected: ${sorted[0].label} (${pct(sorted[0].change)} TTFT from ${values[0]} to ${
        values.at(-1)
      }); ` +
        `least: ${sorted.at(-1)!.label} (${pct(sorted.at(-1)!.change)}).`,
    );
    for (const v of values) {
      const ranked = labels.map((l) => average(l, rows.filter((r) => r.label === l && r.axes[focus] === v)))
        .sort((a, b) => a.ttftMeanMs - b.ttftMeanMs);
      out.push(
        `At ${focus.split(".").pop()}=${v}: best ${ranked[0].label} (${ranked[0].ttftMeanMs.toFixed(1)} ms).`,
      );
    }
  }

  // Every point, for small sweeps.
  if (byPoint.length <= POINT_TABLE_LIMIT) {
    out.push("", "Every point (best TTFT first, * = best):");
    sweep.points.forEach((p, i) => {
      out.push("", `${describe(p.values)}`, header);
      const ranked = labels.map((l) => average(l, byPoint[i].filter((r) => r.label === l)))
        .sort((a, b) => a.ttftMeanMs - b.ttftMeanMs);
      ranked.forEach((a, k) => out.push(line(a, k === 0 ? " *" : "")));
    });
  }
  return out.join("\n") + "\n";
}
