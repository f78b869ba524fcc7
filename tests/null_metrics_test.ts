/**
 * Numbers that never flatter: a run that completes nothing reports its means
 * as null (`n/a` in tables, an empty CSV cell), every report carries the
 * dropped fraction and goodput, and a sweep does not call a policy that drops
 * more than 1% of requests operational, nor best.
 */
import { assert, assertEquals, assertGreater, assertStringIncludes } from "@std/assert";
import { runCli } from "./_cli.ts";
import { parse } from "@std/csv";
import { simulate } from "../actors/simulation.ts";
import type { RunResult } from "../actors/simulation.ts";
import { formatComparison } from "../scenarios/report/comparison.ts";
import { formatStudy } from "../scenarios/report/original_study.ts";
import { analyse, isOperational } from "../scenarios/report/study_findings.ts";
import { parseSweep } from "../scenarios/sweep_runner/sweep_spec.ts";
import { summarise, type SummaryRow, toCsv } from "../scenarios/report/sweep_summary.ts";
import { scenario } from "./_scenarios.ts";

/** Fields that are means or ratios over completed requests: null when nothing completed. */
const NULLABLE = [
  "ttftMeanMs",
  "ttftP50Ms",
  "ttftP90Ms",
  "ttftP99Ms",
  "queueWaitMeanMs",
  "e2eMeanMs",
  "hitRate",
  "tokenHitRate",
  "availableTokenHitRate",
  "expectedTokenHitRate",
  "routingRegret",
  "viewFalsePositiveRate",
  "imbalance",
  "imbalanceCv",
  "busyImbalanceCv",
  "tpotMeanMs",
  "kvUtilizationMean",
] as const;

/** A prompt of 2,000,000 tokens exceeds any preset's KV cache: every request is dropped as too long. */
const TOO_LONG = {
  instances: { model: "batching" },
  workload: { requests: 40, prefix: { tokens: 2_000_000 } },
} as const;
const TOO_LONG_FLAGS = ["--model", "batching", "--prefix-tokens", "2000000", "--requests", "40"];

const run = runCli;

Deno.test("a run that drops every request reports its means as null, its counts and rates as numbers", () => {
  const r = simulate(scenario(TOO_LONG));
  assertEquals([r.requests, r.completed, r.dropped, r.inFlight], [40, 0, 40, 0]);
  assertEquals(r.droppedByReason.too_long, 40);
  for (const key of NULLABLE) assertEquals(r[key], null, key);
  assertEquals(r.droppedFraction, 1);
  assertEquals([r.throughputRps, r.goodputRps, r.outputTokensPerSec, r.tokensPerSec, r.preemptions], [
    0,
    0,
    0,
    0,
    0,
  ]);
});

Deno.test("a run that completes everything has dropped fraction 0 and goodput equal to throughput (no SLO set)", () => {
  const r = simulate(scenario({ workload: { requests: 500 } }));
  assertEquals([r.completed, r.droppedFraction], [500, 0]);
  assertGreater(r.throughputRps, 20);
  assertEquals(r.goodputRps, r.throughputRps);
  for (const key of NULLABLE.filter((k) => k !== "kvUtilizationMean")) assert(r[key] !== null, key);
  assertEquals(r.kvUtilizationMean, null, "the FIFO model reports no KV blocks");
  const batching = simulate(scenario({ instances: { model: "batching" }, workload: { requests: 300 } }));
  assertGreater(batching.kvUtilizationMean!, 0);
});

Deno.test("run --json of an all-dropped run exits 0 and prints null means, never 0", async () => {
  const { code, stdout, stderr } = await run(...TOO_LONG_FLAGS, "--json");
  assertEquals(code, 0, stderr);
  const r = JSON.parse(stdout);
  for (const key of NULLABLE) assertEquals(r[key], null, key);
  assertEquals([r.completed, r.dropped, r.droppedFraction, r.throughputRps, r.goodputRps], [0, 40, 1, 0, 0]);
});

Deno.test("run's table of an all-dropped run shows n/a for every mean and the dropped share", async () => {
  const { code, stdout, stderr } = await run(...TOO_LONG_FLAGS);
  assertEquals(code, 0, stderr);
  assertStringIncludes(stdout, "completed 0  dropped 40 (100.0%)");
  assertStringIncludes(stdout, "TTFT ms       mean n/a  p50 n/a  p90 n/a  p99 n/a");
  assertStringIncludes(stdout, "queue wait    mean n/a");
  assertStringIncludes(stdout, "TPOT          mean n/a · end-to-end mean n/a");
  assertStringIncludes(stdout, "KV cache      mean utilisation n/a");
  assertStringIncludes(stdout, "hit rate      n/a of requests, n/a of prompt tokens");
  assertStringIncludes(stdout, "imbalance     n/a (max-min)/mean · cv n/a · busy-time cv n/a");
  assertStringIncludes(stdout, "throughput    0.00 req/s");
  assertStringIncludes(stdout, "goodput 0.00 req/s");
  assert(!stdout.includes("NaN"), stdout);
});

Deno.test("--rate so low that time cannot resolve a TTFT is a usage error; a low rate that works measures real TTFTs", async (t) => {
  await t.step("--rate 1e-300 exits 2 with one line naming the flag, the bound and the value", async () => {
    const { code, stdout, stderr } = await run("--rate", "1e-300", "--requests", "100");
    assertEquals(code, 2, stderr);
    assertEquals(stderr.trim().split("\n").length, 1, stderr);
    assert(/^error: --rate: expected a number >= 2\.28e-8 \(.*\), got 1e-300$/.test(stderr.trim()), stderr);
    assertEquals(stdout, "");
  });
  await t.step(
    "--rate 1e-6 (100 requests over ≈ 3 simulated years) reports the same TTFT as at 1 req/s",
    async () => {
      const slow = JSON.parse((await run("--rate", "1e-6", "--requests", "100", "--json")).stdout);
      const idle = JSON.parse((await run("--rate", "0.001", "--requests", "100", "--json")).stdout);
      // Both are idle systems (no queueing): TTFT is the service time, ≥ the 30 ms overhead.
      assertGreater(slow.ttftMeanMs, 30);
      assert(Math.abs(slow.ttftMeanMs - idle.ttftMeanMs) < 0.01, `${slow.ttftMeanMs} vs ${idle.ttftMeanMs}`);
    },
  );
  await t.step("--trace-speed 1e-300 fails the run in one line instead of reporting TTFT 0", async () => {
    const { code, stdout, stderr } = await run(
      "--trace",
      "tests/fixtures/mooncake_sample.jsonl",
      "--model",
      "batching",
      "--trace-speed",
      "1e-300",
    );
    assertEquals(code, 1, stderr);
    assertEquals(stderr.trim().split("\n").length, 1, stderr);
    assertStringIncludes(stderr, "past 2^43 ms");
    assertEquals(stdout, "");
  });
});

// A small study: the four strategies, one feasible point and one where every prompt is too long.
const sweep = parseSweep({
  base: { instances: { model: "batching" }, workload: { requests: 60 } },
  axes: { "workload.prefix.tokens": [512, 2_000_000] },
  policies: [{ name: "round_robin" }, { name: "least_load" }, { name: "prefix_aware" }, {
    name: "hybrid",
    threshold: [1],
  }],
  seeds: [1, 2],
});
const results: RunResult[] = sweep.runs.map((r) => simulate(r.config));

Deno.test("a sweep point where everything was dropped has null means, empty CSV cells and n/a in the summary", () => {
  const rows = summarise(sweep, results);
  const dead = rows.filter((r) => r.point === 1);
  assertEquals(dead.length, 4);
  for (const row of dead) {
    assertEquals([row.mean.ttftMeanMs, row.mean.hitRate, row.mean.imbalance, row.ci95.ttftMeanMs], [
      null,
      null,
      null,
      null,
    ]);
    assertEquals([row.mean.completed, row.mean.droppedFraction, row.mean.goodputRps], [0, 1, 0]);
    assert(!isOperational(row));
  }
  const csv = parse(toCsv(sweep, rows), { skipFirstRow: true });
  const cells = csv.filter((r) => r.tokens === "2000000");
  assertEquals(cells.length, 4);
  for (const cell of cells) {
    assertEquals([cell.ttftMeanMs, cell.hitRate, cell.ttftMeanMsCi95], ["", "", ""]);
    assertEquals([cell.completed, cell.droppedFraction, cell.goodputRps], ["0", "1", "0"]);
  }
  const live = csv.filter((r) => r.tokens === "512");
  for (const cell of live) {
    assertEquals(cell.droppedFraction, "0");
    assertEquals(cell.goodputRps, cell.throughputRps);
    assertGreater(Number(cell.ttftMeanMs), 0);
  }

  const study = analyse(sweep, rows);
  assertEquals([study.operationalPoints, study.totalPoints], [1, 2]);
  const summary = formatStudy(study) + formatComparison(sweep, rows);
  assert(!summary.includes("NaN"), summary);
  assertStringIncludes(summary, "drop at most 1% of requests");
  assertStringIncludes(
    summary,
    "Points lost to drops, of 2 (more than 1% of requests dropped, mean over seeds: not operational there): " +
      "round_robin 1, least_load 1, prefix_aware 1, hybrid(thr=1) 1.",
  );
  // At the dead point no policy can be best, and each row reads n/a, 100% dropped, 0 goodput.
  const table = summary.slice(summary.indexOf("tokens=2000000"));
  assert(!table.includes(" *"), table);
  assertStringIncludes(
    table,
    "  round_robin                         n/a      n/a  n/a    n/a      n/a    n/a       n/a      n/a        n/a    100.0%       0.00\n",
  );
});

Deno.test("a seed mean is null when any seed's value is null; the counts still average", () => {
  // Seed 2 of round_robin at the feasible point is made to complete nothing.
  const k = sweep.runs.findIndex((r) => r.point === 0 && r.variant === 0 && r.seed === 2);
  const altered = results.map((r, i) => i === k ? { ...r, ttftMeanMs: null, hitRate: null } : r);
  const row = summarise(sweep, altered).find((r) => r.point === 0 && r.label === "round_robin")!;
  assertEquals([row.mean.ttftMeanMs, row.mean.hitRate, row.ci95.ttftMeanMs, row.ci95.hitRate], [
    null,
    null,
    null,
    null,
  ]);
  assertEquals(row.mean.completed, (results[k - 1].completed + results[k].completed) / 2);
  assertGreater(row.mean.e2eMeanMs!, 0); // defined in both seeds
});

/** The feasible point's rows with `droppedFraction` (and a flattering 1 ms TTFT) set for one policy. */
function withDrops(label: string, droppedFraction: number): SummaryRow[] {
  return summarise(sweep, results).filter((r) => r.point === 0).map((r) =>
    r.label === label ? { ...r, mean: { ...r.mean, droppedFraction, ttftMeanMs: 1 } } : r
  );
}

Deno.test("a policy that drops more than 1% of requests at a point is not operational there and cannot rank best", async (t) => {
  const one = parseSweep({
    base: { instances: { model: "batching" }, workload: { requests: 60 } },
    axes: { "workload.prefix.tokens": [512] },
    policies: [{ name: "round_robin" }, { name: "least_load" }, { name: "prefix_aware" }, {
      name: "hybrid",
      threshold: [1],
    }],
    seeds: [1, 2],
  });
  await t.step("2% dropped: out of the operational regime, listed last, counted as lost", () => {
    const rows = withDrops("prefix_aware", 0.02);
    assert(!isOperational(rows.find((r) => r.label === "prefix_aware")!));
    assertEquals(analyse(one, rows).operationalPoints, 0);
    const text = formatComparison(one, rows);
    assertStringIncludes(text, "Averages over the 0 of 1 points");
    assertStringIncludes(text, "prefix_aware 1, hybrid(thr=1) 0.");
    const table = text.slice(text.indexOf("tokens=512")).trim().split("\n");
    assert(table.at(-1)!.trimStart().startsWith("prefix_aware "), table.join("\n"));
    assert(/^ {2}prefix_aware +1\.0 .* 2\.0% /.test(table.at(-1)!), table.at(-1));
    assert(!table.some((l) => l.includes("prefix_aware *")), table.join("\n"));
    assert(table.some((l) => l.includes(" *")), "another policy is best");
  });
  await t.step("exactly 1% dropped: still operational, and its 1 ms TTFT ranks best", () => {
    const rows = withDrops("prefix_aware", 0.01);
    assert(isOperational(rows.find((r) => r.label === "prefix_aware")!));
    assertEquals(analyse(one, rows).operationalPoints, 1);
    const text = formatComparison(one, rows);
    assertStringIncludes(text, "Averages over the 1 of 1 points");
    assertStringIncludes(text, "  prefix_aware *");
    assertStringIncludes(text, "prefix_aware 0, hybrid(thr=1) 0.");
  });
});

Deno.test("with no point where every policy is operational, the comparison ranks nobody and prints no NaN", () => {
  const dead = results.map((r, i) => sweep.runs[i].point === 1 ? r : { ...r, ...droppedEverything(r) });
  const summary = formatComparison(sweep, summarise(sweep, dead));
  assert(!summary.includes("NaN"), summary);
  assertStringIncludes(summary, "Averages over the 0 of 2 points");
  assertStringIncludes(summary, "(no such point: no policy is ranked here)");
});

/** The fields of a run in which every request was dropped. */
function droppedEverything(r: RunResult): Partial<RunResult> {
  const nulls = Object.fromEntries(NULLABLE.map((k) => [k, null]));
  return { ...nulls, completed: 0, dropped: r.requests, droppedFraction: 1, throughputRps: 0, goodputRps: 0 };
}
