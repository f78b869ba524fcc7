/**
 * @module
 * `deno task merge DIR…`: combine the shard journals of a sweep run with
 * `--shard i/n` (on one machine or a cluster) into the same
 * `sweep_summary.csv`, `summary.txt`, plots and report as a single run.
 */
import type { RunResult } from "../actors/simulation.ts";
import { SIMULATOR_VERSION } from "../actors/version.ts";
import { join } from "node:path";
import { fromCaller } from "./caller_directory.ts";
import { parseFlags, runCommand } from "./command_line.ts";
import { assertInsideResults, makeDirectoryInside, outputDirectory } from "./output_directory.ts";
import { OutputLock } from "./output_lock.ts";
import { lockPath, sweepOutputs, writeSweepOutputs } from "./sweep.ts";
import { type JournalContents, readJournal, specHash } from "./sweep_journal.ts";
import { parseSweep } from "./sweep_spec.ts";
import { UsageError } from "./usage_error.ts";

const HELP = `Usage: deno task merge [--out DIR] DIR…

Reads every shard-*-of-*.jsonl in the given directories, checks that they are
the complete, non-overlapping shards of one sweep (same spec, plugin and
simulator version), and writes the sweep's outputs to --out: by default the
home of the committed sweep it is (results/ for scenarios/sweeps/default.json,
results/NAME for NAME.json), results/plugin-NAME for a sweep with a plugin;
the home of another committed sweep is refused.`;

/** A shard journal found on disk. */
interface Shard {
  readonly path: string;
  readonly contents: JournalContents;
}

/**
 * Checks the shards and assembles the results in run order.
 * @throws {UsageError} for a missing, duplicated, incomplete or incompatible shard.
 */
export function assemble(
  shards: readonly Shard[],
): { spec: unknown; plugin?: { name: string; url: string }; results: RunResult[] } {
  if (shards.length === 0) {
    throw new UsageError("no shard files (shard-*-of-*.jsonl) in the given directories");
  }
  for (const { path, contents } of shards) {
    if (contents.header === undefined) {
      throw new UsageError(`${path}: torn before its header was written; re-run that shard`);
    }
  }
  const headerOf = (shard: Shard) => shard.contents.header!;
  const first = headerOf(shards[0]);
  for (const shard of shards) {
    const { path } = shard, header = headerOf(shard);
    if (header.version !== SIMULATOR_VERSION) {
      throw new UsageError(
        `${path}: written by simulator version ${header.version}, this is ${SIMULATOR_VERSION}; re-run that shard`,
      );
    }
    if (
      header.specHash !== first.specHash || JSON.stringify(header.plugin) !== JSON.stringify(first.plugin)
    ) {
      throw new UsageError(
        `${path}: belongs to a different sweep than ${
          shards[0].path
        } (spec or plugin differ); refusing to merge`,
      );
    }
    if (header.shard.count !== first.shard.count) {
      throw new UsageError(
        `${path}: is one of ${header.shard.count} shards, ${
          shards[0].path
        } one of ${first.shard.count}; refusing to merge`,
      );
    }
  }
  const byIndex = new Map<number, Shard>();
  for (const shard of shards) {
    const index = headerOf(shard).shard.index;
    const other = byIndex.get(index);
    if (other) {
      throw new UsageError(
        `overlapping shards: shard ${index}/${first.shard.count} is both ${other.path} and ${shard.path}`,
      );
    }
    byIndex.set(index, shard);
  }
  const missing = [...Array(first.shard.count).keys()].map((i) => i + 1).filter((i) => !byIndex.has(i));
  if (missing.length > 0) {
    throw new UsageError(`missing shards: ${missing.map((i) => `${i}/${first.shard.count}`).join(", ")}`);
  }
  for (const { path, contents } of shards) {
    const lacking = contents.header!.points.filter((p) => !contents.points.has(p));
    if (lacking.length > 0) {
      throw new UsageError(
        `${path}: incomplete (${contents.header!.points.length - lacking.length} of ${
          contents.header!.points.length
        } points); finish it with --resume`,
      );
    }
  }
  const sweep = parseSweep(first.spec, first.plugin);
  const pointResults = new Map<number, readonly RunResult[]>();
  for (const { contents } of shards) for (const [p, runs] of contents.points) pointResults.set(p, runs);
  const firstRun = new Map<number, number>();
  sweep.runs.forEach((run, i) => firstRun.has(run.point) || firstRun.set(run.point, i));
  const results = sweep.runs.map((run, i) => pointResults.get(run.point)![i - firstRun.get(run.point)!]);
  return { spec: first.spec, plugin: first.plugin, results };
}

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
    const shards: Shard[] = [];
    for (const dir of positionals) {
      let entries: Deno.DirEntry[];
      try {
        entries = [...Deno.readDirSync(fromCaller(dir))];
      } catch (error) {
        const reason = error instanceof Deno.errors.NotFound ? "no such directory" : (error as Error).message;
        throw new UsageError(`cannot read directory "${dir}": ${reason.replace(/ \(os error \d+\).*/, "")}`);
      }
      for (
        const e of entries.filter((e) => /^shard-\d+-of-\d+\.jsonl$/.test(e.name)).sort((a, b) =>
          a.name.localeCompare(b.name)
        )
      ) {
        const path = join(fromCaller(dir), e.name);
        shards.push({ path, contents: await readJournal(path) });
      }
    }
    const { spec, plugin, results } = assemble(shards);
    const sweep = parseSweep(spec, plugin);
    const out = await outputDirectory({ out: values.out, specHash: specHash(spec), plugin: plugin?.url });
    await makeDirectoryInside(out, `--out ${out}`);
    // A merge writes what a whole sweep writes: it takes the same lock.
    await assertInsideResults(lockPath(out, { index: 1, count: 1 }), lockPath(out, { index: 1, count: 1 }));
    const lock = await OutputLock.acquire(lockPath(out, { index: 1, count: 1 }), `--out ${out}`, "merge");
    await writeSweepOutputs(out, sweepOutputs(sweep, results));
    lock.release();
    console.error(`merged ${shards.length} shards (${sweep.runs.length} runs) into ${out}/`);
  });
}
