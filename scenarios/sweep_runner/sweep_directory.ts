/**
 * @module
 * A sweep's output directory as `deno task sweep` and `deno task merge` both
 * use it: its lock, its journals (opened to record or resume a sweep, read
 * and checked to merge shards), the results they assemble in run order, and
 * the files written from them.
 */
import { basename, join } from "node:path";
import type { RunResult } from "../../actors/simulation.ts";
import { SIMULATOR_VERSION } from "../../actors/version.ts";
import { writeFilesAtomic } from "../cli/atomic_write.ts";
import { fromCaller } from "../cli/caller_directory.ts";
import { assertInsideResults, makeDirectoryInside } from "./output_directory.ts";
import { OutputLock } from "./output_lock.ts";
import { sweepOutputs } from "../report/mod.ts";
import { type JournalContents, type JournalHeader, JournalWriter, readJournal } from "./sweep_journal.ts";
import { countRuns, parseSweep, type Sweep, type SweepPlugin } from "./sweep_spec.ts";
import { UsageError } from "../cli/usage_error.ts";

/** Which share of a sweep's points: shard `index` of `count` (1 of 1 for a whole sweep). */
export interface Shard {
  readonly index: number;
  readonly count: number;
}

/** A whole sweep: its only shard. */
export const WHOLE: Shard = { index: 1, count: 1 };

/** The lock file of a sweep (or of one shard) in `out`: one writer per journal, so shards may share `out`. */
export function lockPath(out: string, shard: Shard): string {
  return shard.count === 1
    ? join(out, ".sweep.lock")
    : join(out, `.shard-${shard.index}-of-${shard.count}.lock`);
}

/** The journal file of a sweep (or of one shard) in `out`. */
export function journalPath(out: string, shard: Shard): string {
  return shard.count === 1
    ? `${out}/sweep_journal.jsonl`
    : `${out}/shard-${shard.index}-of-${shard.count}.jsonl`;
}

/**
 * Creates `out` and takes its lock for `shard`, after checking that `out`,
 * its `plots/` and the lock stay inside `results/`: a second writer of the
 * same journal stops, naming `command` of the first.
 * @throws {UsageError} for a path outside `results/` or a lock another process holds.
 */
export async function lockOutput(out: string, shard: Shard, command: string): Promise<OutputLock> {
  await makeDirectoryInside(out, `--out ${out}`);
  await assertInsideResults(join(out, "plots"), join(out, "plots"));
  await assertInsideResults(lockPath(out, shard), lockPath(out, shard));
  return await OutputLock.acquire(lockPath(out, shard), `--out ${out}`, command);
}

/** What makes two journals parts of different runs, the first found: its simulator version, its sweep (spec or plugin), its shard count or index. */
export type JournalDifference = "version" | "sweep" | "shard count" | "shard index";

/** How `header` differs from `reference`, checked in the order of {@linkcode JournalDifference}; undefined when it does not. */
export function journalDifference(
  header: JournalHeader,
  reference: JournalHeader,
): JournalDifference | undefined {
  if (header.version !== reference.version) return "version";
  if (
    header.specHash !== reference.specHash ||
    JSON.stringify(header.plugin) !== JSON.stringify(reference.plugin)
  ) return "sweep";
  if (header.shard.count !== reference.shard.count) return "shard count";
  if (header.shard.index !== reference.shard.index) return "shard index";
  return undefined;
}

/** How a sweep treats an existing journal: `--resume` finishes it, `--fresh` discards it. */
export interface OpenJournalOptions {
  /** The output directory. */
  readonly out: string;
  /** The header this sweep writes (its spec, plugin, shard and points). */
  readonly header: JournalHeader;
  /** Finish the sweep an existing journal records. @default false */
  readonly resume?: boolean;
  /** Discard an existing journal and start over. @default false */
  readonly fresh?: boolean;
}

/** An open journal, and the points it already holds (with `--resume`). */
export interface OpenJournal {
  readonly path: string;
  readonly writer: JournalWriter;
  /** Results of the points already recorded, by point. */
  readonly done: Map<number, readonly RunResult[]>;
}

/**
 * Opens a sweep's (or shard's) journal in `out`: a fresh one, or with
 * `resume` the existing one, whose recorded points are kept. Undefined when
 * the journal is that of this very shard, already complete: nothing to do.
 * @throws {UsageError} for an unfinished journal without `--resume` or
 *   `--fresh`, or one of another sweep, shard or simulator version.
 */
export async function openJournal(options: OpenJournalOptions): Promise<OpenJournal | undefined> {
  const { out, header, resume, fresh } = options;
  const path = journalPath(out, header.shard);
  await assertInsideResults(path, path);
  const existing = await Deno.stat(path).then(() => true, () => false);
  if (existing && !resume && !fresh) {
    if (header.shard.count > 1 && await isComplete(path, header)) {
      console.error(
        `shard ${header.shard.index}/${header.shard.count} is already complete in ${path}; nothing to do`,
      );
      return undefined;
    }
    throw new UsageError(
      `${path} records an unfinished sweep: add --resume to finish it, or --fresh to discard it and start over`,
    );
  }
  const previous = resume && existing ? await readJournal(path) : undefined;
  if (previous?.header !== undefined) return await resumeJournal(path, previous, header);
  // No journal, --fresh, or a journal torn before its header was complete: start afresh.
  if (resume && !existing) console.error(`--resume: no journal in ${out}/, starting afresh`);
  return { path, writer: await JournalWriter.create(path, header), done: new Map() };
}

/** Whether the journal at `path` is this shard's and holds every one of its points. */
async function isComplete(path: string, header: JournalHeader): Promise<boolean> {
  const recorded = await readJournal(path);
  return recorded.header?.specHash === header.specHash && header.points.every((p) => recorded.points.has(p));
}

/** Continues the journal at `path` after checking it records this sweep. */
async function resumeJournal(
  path: string,
  previous: JournalContents,
  header: JournalHeader,
): Promise<OpenJournal> {
  const recorded = previous.header!;
  const difference = journalDifference(recorded, header);
  if (difference === "version") {
    throw new UsageError(
      `--resume: ${path} was written by version ${recorded.version}, this is ${header.version}; start over with --fresh`,
    );
  }
  if (difference !== undefined) {
    throw new UsageError(
      `--resume: ${path} belongs to a different sweep (spec, plugin or shard differ); start over with --fresh`,
    );
  }
  const done = new Map(previous.points);
  console.error(
    `resuming: ${done.size} of ${header.points.length} points already recorded` +
      (previous.torn
        ? " (a torn or corrupt record was found: it and any records after it are dropped and re-run)"
        : ""),
  );
  return { path, writer: await JournalWriter.resume(path, previous.validBytes), done };
}

/**
 * The results of every run of `sweep`, in run order, from its points' results.
 * Runs of a point are contiguous in run order, so run i is its point's (i − first run) result.
 */
export function resultsInRunOrder(
  sweep: Sweep,
  points: ReadonlyMap<number, readonly RunResult[]>,
): RunResult[] {
  const firstRun = new Map<number, number>();
  sweep.runs.forEach((run, i) => firstRun.has(run.point) || firstRun.set(run.point, i));
  return sweep.runs.map((run, i) => points.get(run.point)![i - firstRun.get(run.point)!]);
}

/** A shard journal found on disk. */
export interface ShardJournal {
  /** Its path as messages name it: under the directory as the user gave it. */
  readonly path: string;
  readonly contents: JournalContents;
  /** Who holds the shard's lock, when a sweep is still writing it (see {@linkcode OutputLock.holder}). */
  readonly running?: string;
}

/**
 * Refuses a merge's `--out` (as the user gave it, relative to the caller's
 * directory) while a sweep or merge holds its lock: checked before the shards
 * are read, so the refusal names the holder rather than what the directory lacks.
 * @throws {UsageError} naming the directory, the holder and what to do.
 */
export async function assertOutputFree(out: string): Promise<void> {
  await OutputLock.assertFree(lockPath(fromCaller(out), WHOLE), `--out ${out}`, lockPath(out, WHOLE));
}

/**
 * Every `shard-i-of-n.jsonl` in the given directories (relative to the
 * caller's), read, in name order per directory, each with the holder of its
 * lock if a sweep is still writing it. Paths in messages are under the
 * directories as given.
 * @throws {UsageError} for a directory that cannot be read, a file that is not
 *   a journal, or no shard file at all (naming a sweep or merge running in a
 *   directory, if one is).
 */
export async function readShards(dirs: readonly string[]): Promise<ShardJournal[]> {
  const shards: ShardJournal[] = [];
  for (const dir of dirs) {
    let entries: Deno.DirEntry[];
    try {
      entries = [...Deno.readDirSync(fromCaller(dir))];
    } catch (error) {
      const reason = error instanceof Deno.errors.NotFound ? "no such directory" : (error as Error).message;
      throw new UsageError(`cannot read directory "${dir}": ${reason.replace(/ \(os error \d+\).*/, "")}`);
    }
    const names = entries.map((e) => e.name).filter((name) => /^shard-\d+-of-\d+\.jsonl$/.test(name));
    for (const name of names.sort((a, b) => a.localeCompare(b))) {
      const path = join(dir, name);
      const lock = `.${basename(name, ".jsonl")}.lock`;
      shards.push({
        path,
        contents: await readShownJournal(join(fromCaller(dir), name), path),
        running: await OutputLock.holder(join(fromCaller(dir), lock), join(dir, lock)),
      });
    }
  }
  if (shards.length === 0) await refuseNoShards(dirs);
  return shards;
}

/** {@linkcode readJournal} of `path`, its messages naming it `shown`. */
async function readShownJournal(path: string, shown: string): Promise<JournalContents> {
  try {
    return await readJournal(path);
  } catch (error) {
    if (error instanceof UsageError && path !== shown) {
      throw new UsageError(error.message.replaceAll(path, shown));
    }
    throw error;
  }
}

/**
 * Refuses a merge that found no shard file: when a sweep or merge is running
 * in one of `dirs`, names it (a sweep without `--shard` writes no shards, and
 * writes its own results).
 * @throws {UsageError} always.
 */
async function refuseNoShards(dirs: readonly string[]): Promise<never> {
  for (const dir of dirs) {
    const holder = await OutputLock.holder(lockPath(fromCaller(dir), WHOLE), lockPath(dir, WHOLE));
    if (holder === undefined) continue;
    throw new UsageError(
      `no shard files (shard-*-of-*.jsonl) in ${dir}: it is in use by ${holder}, ` +
        `a sweep or merge writing its own results there; wait for it to finish ` +
        `(merge combines the shard files of sweeps run with --shard i/n)`,
    );
  }
  throw new UsageError(`no shard files (shard-*-of-*.jsonl) in ${dirs.join(", ")}`);
}

/** A merged sweep: its spec as the journals record it, its plugin, and every run's result in run order. */
export interface MergedSweep {
  readonly spec: unknown;
  readonly plugin?: SweepPlugin;
  readonly sweep: Sweep;
  readonly results: RunResult[];
}

/**
 * Checks that `shards` are the complete, non-overlapping shards of one sweep
 * by this simulator version, and assembles their results in run order.
 * @throws {UsageError} for a missing, duplicated, incomplete or incompatible shard.
 */
export function assembleShards(shards: readonly ShardJournal[]): MergedSweep {
  if (shards.length === 0) {
    throw new UsageError("no shard files (shard-*-of-*.jsonl) in the given directories");
  }
  for (const { path, contents } of shards) {
    if (contents.header === undefined) {
      throw new UsageError(`${path}: torn before its header was written; re-run that shard`);
    }
  }
  checkCompatible(shards);
  checkComplete(shards);
  const first = shards[0].contents.header!;
  const points = new Map<number, readonly RunResult[]>();
  for (const { contents } of shards) for (const [p, runs] of contents.points) points.set(p, runs);
  // The grid is expanded only once it is known to be no larger than the runs already read.
  const recorded = [...points.values()].reduce((n, runs) => n + runs.length, 0);
  const count = countRuns(first.spec, first.plugin !== undefined);
  if (count.runs !== BigInt(recorded)) {
    throw new UsageError(
      `${shards[0].path}: its sweep has ${count.runs.toLocaleString("en-US")} runs, but the shards hold ` +
        `${recorded.toLocaleString("en-US")}; refusing to merge (re-run the shards)`,
    );
  }
  const sweep = parseSweep(first.spec, first.plugin, { maxRuns: recorded });
  return { spec: first.spec, plugin: first.plugin, sweep, results: resultsInRunOrder(sweep, points) };
}

/** Checks every shard against this simulator version and the first shard's sweep and shard count. */
function checkCompatible(shards: readonly ShardJournal[]): void {
  const first = shards[0].contents.header!;
  const reference = { ...first, version: SIMULATOR_VERSION };
  for (const { path, contents } of shards) {
    const header = contents.header!;
    switch (journalDifference(header, reference)) {
      case "version":
        throw new UsageError(
          `${path}: written by simulator version ${header.version}, this is ${SIMULATOR_VERSION}; re-run that shard`,
        );
      case "sweep":
        throw new UsageError(
          `${path}: belongs to a different sweep than ${
            shards[0].path
          } (spec or plugin differ); refusing to merge`,
        );
      case "shard count":
        throw new UsageError(
          `${path}: is one of ${header.shard.count} shards, ${
            shards[0].path
          } one of ${first.shard.count}; refusing to merge`,
        );
    }
  }
}

/** Checks that every shard is there once and holds all its points. */
function checkComplete(shards: readonly ShardJournal[]): void {
  const count = shards[0].contents.header!.shard.count;
  const byIndex = new Map<number, ShardJournal>();
  for (const shard of shards) {
    const index = shard.contents.header!.shard.index;
    const other = byIndex.get(index);
    if (other) {
      throw new UsageError(
        `overlapping shards: shard ${index}/${count} is both ${other.path} and ${shard.path}`,
      );
    }
    byIndex.set(index, shard);
  }
  const missing = [...Array(count).keys()].map((i) => i + 1).filter((i) => !byIndex.has(i));
  if (missing.length > 0) {
    throw new UsageError(`missing shards: ${missing.map((i) => `${i}/${count}`).join(", ")}`);
  }
  for (const { path, contents, running } of shards) {
    const lacking = contents.header!.points.filter((p) => !contents.points.has(p));
    if (lacking.length > 0) {
      const { index } = contents.header!.shard;
      throw new UsageError(
        `${path}: incomplete (${contents.header!.points.length - lacking.length} of ${
          contents.header!.points.length
        } points); ` +
          (running === undefined
            ? "finish it with --resume"
            : `shard ${index}/${count} is still running, by ${running}: wait for it to finish, then merge`),
      );
    }
  }
}

/**
 * Writes a sweep's files under `out` (see {@linkcode sweepOutputs}): its
 * directories stay inside `results/`, and every file is replaced only once
 * all are written, so a failure leaves the previous results as they were.
 */
export async function writeSweepOutputs(
  out: string,
  sweep: Sweep,
  results: readonly RunResult[],
): Promise<void> {
  const files = sweepOutputs(sweep, results);
  await makeDirectoryInside(join(out, "plots"), join(out, "plots"));
  await writeFilesAtomic(new Map([...files].map(([path, data]) => [join(out, path), data])));
}
