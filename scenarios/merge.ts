/**
 * @module
 * `deno task merge DIR…`: combine the shard journals of a sweep run with
 * `--shard i/n` (on one machine or a cluster) into the same
 * `sweep_summary.csv`, `summary.txt`, plots and report as a single run.
 */
import { parseFlags, runCommand } from "./scenario/command_line.ts";
import { outputDirectory } from "./sweep_runner/output_directory.ts";
import {
  assembleShards,
  assertOutputFree,
  lockOutput,
  readShards,
  WHOLE,
  writeSweepOutputs,
} from "./sweep_runner/sweep_directory.ts";
import { specHash } from "./sweep_runner/sweep_journal.ts";
import { UsageError } from "./cli/usage_error.ts";
import { plural } from "./cli/plural.ts";

const HELP = `Usage: deno task merge [--out DIR] DIR…

Reads every shard-*-of-*.jsonl in the given directories, checks that they are
the complete, non-overlapping shards of one sweep (same spec, plugin and
simulator version), and writes the sweep's outputs to --out: by default the
home of the committed sweep it is (results/ for scenarios/sweeps/default.json,
results/NAME for NAME.json), results/plugin-P (default.json) or
results/plugin-P-NAME (NAME.json) for a sweep with the plugin P.ts; a sweep of
no committed file needs --out. The home of another committed sweep is refused.`;

if (import.meta.main) {
  await runCommand(async () => {
    const { values, positionals } = parseFlags(Deno.args, {
      out: { type: "string" },
      help: { type: "boolean", short: "h" },
    }, true);
    if (values.help) return console.log(HELP);
    if (positionals.length === 0) {
      throw new UsageError("give the directories holding the shard files (see --help)");
    }
    // A sweep or merge running in --out is named first, before its directory is searched for shards.
    if (values.out !== undefined) await assertOutputFree(values.out);
    const shards = await readShards(positionals);
    const { spec, plugin, sweep, results } = assembleShards(shards);
    const out = await outputDirectory({ out: values.out, specHash: specHash(spec), plugin: plugin?.url });
    // A merge writes what a whole sweep writes: it takes the same lock.
    const lock = await lockOutput(out, WHOLE, "merge");
    await writeSweepOutputs(out, sweep, results);
    lock.release();
    console.error(
      `merged ${plural(shards.length, "shard")} (${plural(sweep.runs.length, "run")}) into ${out}/`,
    );
  });
}
