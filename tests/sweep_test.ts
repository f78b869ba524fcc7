/**
 * The sweep's determinism: worker count does not change a byte, and the quick
 * preset reproduces the committed default sweep's rows exactly (golden test).
 */
import { assert, assertEquals, assertStringIncludes } from "@std/assert";
import { parse } from "@std/csv";
import { parseSweep } from "../scenarios/sweep_runner/sweep_spec.ts";
import { summarise, toCsv } from "../scenarios/report/sweep_summary.ts";
import { runOnWorkers } from "../scenarios/workers/worker_pool.ts";
import { sweepReport } from "../scenarios/report/sweep_report.ts";
import { REPORT_SECTIONS } from "../scenarios/report/sections.ts";

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

  const { summary } = sweepReport(quick, two.results);
  assert(!summary.includes("NaN"), summary);
  for (let i = 1; i <= 4; i++) assertStringIncludes(summary, `(${i}) `);
});

Deno.test("every report section fits the quick sweep and draws only the charts it declares", async (t) => {
  const results = await runOnWorkers(quick.runs, { workers: 2 });
  const sweep = { ...quick, focus: "workload.ratePerSec" };
  const inputs = { sweep, rows: summarise(sweep, results), runs: results.length, requests: 0 };
  for (const section of REPORT_SECTIONS) {
    await t.step(section.name, () => {
      assertEquals(section.check(sweep), undefined);
      const part = section.render(inputs);
      assert(part.summary !== undefined || (part.charts?.length ?? 0) > 0, "it adds something");
      assert(!part.summary?.includes("NaN"), part.summary);
      for (const chart of part.charts ?? []) {
        assert(section.charts.includes(chart.file), `${chart.file} is not among ${section.charts}`);
        assertStringIncludes(chart.svg, "<svg");
      }
    });
  }
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
