/**
 * The sweep's determinism: worker count does not change a byte, and the quick
 * preset reproduces the committed default sweep's rows exactly (golden test).
 */
import { assert, assertEquals, assertStringIncludes } from "@std/assert";
import { parse } from "@std/csv";
import { parseSweep } from "../scenarios/sweep_spec.ts";
import { summarise, toCsv } from "../scenarios/sweep_summary.ts";
import { runOnWorkers } from "../scenarios/worker_pool.ts";
import { analyse, formatSummary } from "../scenarios/study_findings.ts";

const root = new URL("..", import.meta.url);
const quick = parseSweep(JSON.parse(await Deno.readTextFile(new URL("scenarios/sweeps/quick.json", root))));

async function quickCsv(workers: number) {
  const results = await runOnWorkers(quick.runs, { workers });
  return { csv: toCsv(quick, summarise(quick, results)), results };
}

Deno.test("the quick sweep's CSV is byte-identical on 1 and 2 workers, and its rows equal the committed golden rows", async () => {
  const one = await quickCsv(1), two = await quickCsv(2);
  assertEquals(one.csv, two.csv);

  let committed: string;
  try {
    committed = await Deno.readTextFile(new URL("results/sweep_summary.csv", root));
  } catch {
    throw new Error("results/sweep_summary.csv is missing: run `deno task sweep` and commit its output");
  }
  const golden = parse(committed, { skipFirstRow: true });
  const rows = parse(one.csv, { skipFirstRow: true });
  assertEquals(rows.length, quick.points.length * quick.variants.length);
  const key = (r: Record<string, string>) =>
    [r.ratePerSec, r.zipf, r.sharedFrac, r.policy, r.threshold].join("|");
  const byKey = new Map(golden.map((r) => [key(r), r]));
  for (const row of rows) assertEquals(row, byKey.get(key(row)), `golden row ${key(row)}`);

  const study = analyse(quick, summarise(quick, two.results));
  const summary = formatSummary(quick, study, two.results.length, 0);
  assert(!summary.includes("NaN"), summary);
  for (let i = 1; i <= 4; i++) assertStringIncludes(summary, `(${i}) `);
});

Deno.test("the worker pool reports a failing run as an error and stops", async () => {
  const bad = { ...quick.runs[0].config, workload: { ...quick.runs[0].config.workload, ratePerSec: -1 } };
  let message = "";
  try {
    await runOnWorkers([quick.runs[0], { config: bad }], { workers: 1 });
  } catch (error) {
    message = (error as Error).message;
  }
  assertStringIncludes(message, "run 1");
});
