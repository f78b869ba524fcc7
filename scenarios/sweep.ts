/**
 * @module
 * `deno task sweep`: run a sweep (the original study's grid by default) on a
 * pool of Workers and write `sweep_summary.csv`, `summary.txt`, `plots/` and
 * `report.html`, atomically, under `results/` (or `--out`).
 */
import process from "node:process";
import cliProgress from "cli-progress";
import { join } from "node:path";
import type { RunResult } from "../actors/simulation.ts";
import { writeFilesAtomic } from "./atomic_write.ts";
import { oneLine, parseFlags, pluginTimeoutMs, runCommand } from "./command_line.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { TraceFormatError } from "../actors/trace_reader.ts";
import { readJsonFile } from "./scenario.ts";
import { studyCharts, toPng } from "./plots.ts";
import { reportHtml } from "./report.ts";
import { analyse, formatHeader, formatSummary, STRATEGIES } from "./study_findings.ts";
import { formatComparison } from "./comparison_summary.ts";
import { checkSweepInputs, parseSweep, type Sweep } from "./sweep_spec.ts";
import { assertInsideResults, makeDirectoryInside, outputDirectory, SWEEPS_DIR } from "./output_directory.ts";
import { OutputLock } from "./output_lock.ts";
import { watchParent } from "./parent_watch.ts";
import { journalHeader, JournalWriter, readJournal, shardPoints } from "./sweep_journal.ts";
import { callerDirectory } from "./caller_directory.ts";
import { loadRouterPlugin } from "./router_plugin.ts";
import { summarise, toCsv } from "./sweep_summary.ts";
import { UsageError } from "./usage_error.ts";
import { runOnWorkers } from "./worker_pool.ts";

const DEFAULT_SPEC = "scenarios/sweeps/default.json";
const QUICK_SPEC = "scenarios/sweeps/quick.json";

/**
 * Most Workers a sweep starts: 4 per core. Runs are CPU-bound, so more than
 * one per core buys no speed, and each Worker costs ≈ 20 MB (design.md, Errors).
 */
export const MAX_WORKERS = 4 * navigator.hardwareConcurrency;

const HELP = `Usage: deno task sweep [flags]

Runs a sweep on a pool of Workers and writes, under --out:
sweep_summary.csv, summary.txt, plots/*.png and report.html.

  --spec FILE      sweep file (default ${DEFAULT_SPEC}; format in README)
  --quick          the small preset ${QUICK_SPEC} (a corner of the default grid)
  --workers N      Worker threads, integer from 1 to 4 × cores (default: number of cores)
  --router FILE.ts add a router plugin as one more policy of the sweep
  --plugin-timeout-ms N  wall ms the plugin may take to load or to make one routing decision (default 5000)
  --shard i/n      run only shard i of n (every n-th point) and record it for 'deno task merge'
  --resume         finish an interrupted sweep (or shard): run only the points its journal lacks
  --fresh          discard the journal of an unfinished sweep and start over
  --out DIR        output directory inside results/ (default: the sweep file's home — results/ for
                   default.json, results/NAME for NAME.json; results/plugin-NAME with --router NAME.ts).
                   The home of another committed sweep is refused
  -h, --help       show this help`;

const OPTIONS = {
  spec: { type: "string" },
  shard: { type: "string" },
  resume: { type: "boolean" },
  fresh: { type: "boolean" },
  quick: { type: "boolean" },
  workers: { type: "string" },
  out: { type: "string" },
  router: { type: "string" },
  "plugin-timeout-ms": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/** Every file a sweep writes, as text or bytes, by path relative to the output directory. */
export function sweepOutputs(sweep: Sweep, results: readonly RunResult[]): Map<string, string | Uint8Array> {
  const rows = summarise(sweep, results);
  const study = analyse(sweep, rows);
  const requests = results.reduce((a, r) => a + r.requests, 0);
  const isStudy = STRATEGIES.every((s) => sweep.variants.some((v) => v.label === s));
  const summary =
    (isStudy
      ? formatSummary(sweep, study, results.length, requests)
      : formatHeader(sweep, results.length, requests)) +
    formatComparison(sweep, rows);
  const charts = studyCharts(rows, study, sweep);
  const files = new Map<string, string | Uint8Array>();
  files.set("sweep_summary.csv", toCsv(sweep, rows));
  files.set("summary.txt", summary);
  for (const chart of charts) files.set(`plots/${chart.file}`, toPng(chart.svg));
  files.set("report.html", reportHtml("request-routing-sim — routing study", summary, charts));
  return files;
}

/**
 * Progress on stderr: a bar on a terminal, a line every 10% otherwise.
 * Counts points (all of a point's runs done) and runs.
 */
function progressReporter(sweep: Sweep, todo: readonly number[]) {
  const start = performance.now();
  const total = todo.length;
  const leftPerPoint = new Map<number, number>();
  for (const i of todo) {
    leftPerPoint.set(sweep.runs[i].point, (leftPerPoint.get(sweep.runs[i].point) ?? 0) + 1);
  }
  const points = leftPerPoint.size;
  let pointsDone = 0;
  const record = (run: number) => {
    const point = sweep.runs[run].point;
    const left = leftPerPoint.get(point)! - 1;
    leftPerPoint.set(point, left);
    if (left === 0) pointsDone++;
  };
  const rate = (done: number) => (done / ((performance.now() - start) / 1000)).toFixed(0);
  if (Deno.stderr.isTerminal()) {
    const bar = new cliProgress.SingleBar({
      format:
        "sweep [{bar}] {points}/{totalPoints} points · {value}/{total} runs · {rate} runs/s · ETA {eta_formatted}",
      stream: process.stderr,
      hideCursor: true,
    }, cliProgress.Presets.shades_classic);
    bar.start(total, 0, { rate: "0", points: 0, totalPoints: points });
    return {
      update: (done: number, run: number) => {
        record(run);
        bar.update(done, { rate: rate(done), points: pointsDone, totalPoints: points });
      },
      stop: () => bar.stop(),
    };
  }
  let nextReport = Math.ceil(total / 10);
  return {
    update(done: number, run: number) {
      record(run);
      if (done < nextReport && done !== total) return;
      nextReport += Math.ceil(total / 10);
      const seconds = (performance.now() - start) / 1000;
      const eta = done > 0 ? (seconds / done) * (total - done) : 0;
      console.error(
        `sweep: ${pointsDone}/${points} points · ${done}/${total} runs · ${rate(done)} runs/s · ETA ${
          eta.toFixed(0)
        } s`,
      );
    },
    stop() {},
  };
}

/** Parses `--shard i/n`. */
function parseShard(raw: string | undefined): { index: number; count: number } {
  if (raw === undefined) return { index: 1, count: 1 };
  const m = /^(\d+)\/(\d+)$/.exec(raw);
  const index = m ? Number(m[1]) : NaN, count = m ? Number(m[2]) : NaN;
  if (!(count >= 1 && index >= 1 && index <= count)) {
    throw new UsageError(`--shard: expected i/n with 1 <= i <= n (e.g. 2/8), got "${raw}"`);
  }
  return { index, count };
}

/**
 * Writes a sweep's files under `out` (see {@linkcode sweepOutputs}): its
 * directories stay inside `results/`, and every file is replaced only once
 * all are written, so a failure leaves the previous results as they were.
 */
export async function writeSweepOutputs(
  out: string,
  files: ReadonlyMap<string, string | Uint8Array>,
): Promise<void> {
  await makeDirectoryInside(join(out, "plots"), join(out, "plots"));
  await writeFilesAtomic(new Map([...files].map(([path, data]) => [join(out, path), data])));
}

/** The lock file of a sweep (or of one shard) in `out`: one writer per journal, so shards may share `out`. */
export function lockPath(out: string, shard: { index: number; count: number }): string {
  return shard.count === 1
    ? join(out, ".sweep.lock")
    : join(out, `.shard-${shard.index}-of-${shard.count}.lock`);
}

/** The journal file of a sweep (or of one shard) in `out`. */
export function journalPath(out: string, shard: { index: number; count: number }): string {
  return shard.count === 1
    ? `${out}/sweep_journal.jsonl`
    : `${out}/shard-${shard.index}-of-${shard.count}.jsonl`;
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    if (values.quick && values.spec) throw new UsageError("--quick and --spec: give one or the other");
    let workers = navigator.hardwareConcurrency;
    if (values.workers !== undefined) {
      workers = Number(values.workers);
      if (!Number.isInteger(workers) || workers < 1 || workers > MAX_WORKERS) {
        throw new UsageError(
          `--workers: expected an integer >= 1 and <= ${MAX_WORKERS} (4 × ${navigator.hardwareConcurrency} cores), ` +
            `got "${values.workers}"`,
        );
      }
    }
    if (values.resume && values.fresh) throw new UsageError("--resume and --fresh: give one or the other");
    const shard = parseShard(values.shard);
    const timeoutMs = pluginTimeoutMs(values);
    const plugin = values.router
      ? await loadRouterPlugin(values.router, { timeoutMs, baseDir: callerDirectory() })
      : undefined;
    const pluginInfo = plugin && { name: plugin.name, url: plugin.url };
    const specPath = values.quick
      ? join(SWEEPS_DIR, "quick.json")
      : values.spec ?? join(SWEEPS_DIR, "default.json");
    const spec = await readJsonFile(specPath, "--spec");
    const sweep = parseSweep(spec, pluginInfo);
    const mine = shardPoints(sweep.points.length, shard.index, shard.count);
    const header = journalHeader(spec, shard, mine, pluginInfo);
    await checkSweepInputs(sweep);
    // Never over a committed study but its own (the quick preset, a plugin sweep: their own homes).
    const out = await outputDirectory({
      out: values.out,
      specHash: header.specHash,
      plugin: values.router,
      specFile: specPath,
    });

    await makeDirectoryInside(out, `--out ${out}`);
    await assertInsideResults(join(out, "plots"), join(out, "plots"));
    // One writer per journal: a second sweep, --resume or --fresh here stops, naming this one.
    await assertInsideResults(lockPath(out, shard), lockPath(out, shard));
    const lock = await OutputLock.acquire(
      lockPath(out, shard),
      `--out ${out}`,
      `sweep ${Deno.args.join(" ")}`,
    );
    // Points already recorded (with --resume), and the journal to append to.
    const journalFile = journalPath(out, shard);
    await assertInsideResults(journalFile, journalFile);
    const done = new Map<number, readonly RunResult[]>();
    let journal: JournalWriter;
    const existing = await Deno.stat(journalFile).then(() => true, () => false);
    const previous = values.resume && existing ? await readJournal(journalFile) : undefined;
    if (existing && !values.resume && !values.fresh && shard.count > 1) {
      const recorded = await readJournal(journalFile);
      if (recorded.header?.specHash === header.specHash && mine.every((p) => recorded.points.has(p))) {
        console.error(
          `shard ${shard.index}/${shard.count} is already complete in ${journalFile}; nothing to do`,
        );
        lock.release();
        return;
      }
    }
    if (existing && !values.resume && !values.fresh) {
      throw new UsageError(
        `${journalFile} records an unfinished sweep: add --resume to finish it, or --fresh to discard it and start over`,
      );
    }
    const h = previous?.header;
    if (h !== undefined) {
      if (h.version !== header.version) {
        throw new UsageError(
          `--resume: ${journalFile} was written by version ${h.version}, this is ${header.version}; start over with --fresh`,
        );
      }
      if (
        h.specHash !== header.specHash || JSON.stringify(h.plugin) !== JSON.stringify(header.plugin) ||
        h.shard.index !== shard.index || h.shard.count !== shard.count
      ) {
        throw new UsageError(
          `--resume: ${journalFile} belongs to a different sweep (spec, plugin or shard differ); start over with --fresh`,
        );
      }
      for (const [p, runs] of previous!.points) done.set(p, runs);
      journal = await JournalWriter.resume(journalFile, previous!.validBytes);
      console.error(
        `resuming: ${done.size} of ${mine.length} points already recorded` +
          (previous!.torn
            ? " (a torn or corrupt record was found: it and any records after it are dropped and re-run)"
            : ""),
      );
    } else {
      // No journal, --fresh, or a journal torn before its header was complete: start afresh.
      if (values.resume && !existing) console.error(`--resume: no journal in ${out}/, starting afresh`);
      journal = await JournalWriter.create(journalFile, header);
    }

    // The runs still to do, and per point how many are left.
    const todo = sweep.runs.map((_, i) => i).filter((i) =>
      mine.includes(sweep.runs[i].point) && !done.has(sweep.runs[i].point)
    );
    const mineSet = new Set(mine);
    const pointRuns = new Map<number, number[]>();
    sweep.runs.forEach((run, i) => {
      if (mineSet.has(run.point)) pointRuns.set(run.point, [...(pointRuns.get(run.point) ?? []), i]);
    });
    const finished: (RunResult | undefined)[] = new Array(sweep.runs.length);
    const left = new Map<number, number>();
    for (const i of todo) left.set(sweep.runs[i].point, (left.get(sweep.runs[i].point) ?? 0) + 1);
    let writes = Promise.resolve();

    const abort = new AbortController();
    let writing = false;
    let interruptedWhileWriting = false;
    let why = "interrupted";
    const onInterrupt = () => {
      if (writing) interruptedWhileWriting = true;
      else abort.abort();
    };
    Deno.addSignalListener("SIGINT", onInterrupt);
    // `kill -9` of the `deno task` wrapper orphans this process: stop as on Ctrl-C.
    const stopWatchingParent = watchParent(() => {
      why = "interrupted (the process that started this sweep is gone)";
      onInterrupt();
    });
    journal.onFailure = () => abort.abort(); // a full disk stops the sweep; the error is reported below
    const start = performance.now();
    const progress = progressReporter(sweep, todo);
    try {
      await runOnWorkers(todo.map((i) => sweep.runs[i]), {
        workers,
        signal: abort.signal,
        plugin,
        pluginTimeoutMs: timeoutMs,
        readPaths: [...new Set(todo.flatMap((i) => sweep.runs[i].config.workload.trace?.path ?? []))],
        onProgress: (count, result, k) => {
          const run = todo[k];
          finished[run] = result;
          progress.update(count, run);
          const point = sweep.runs[run].point;
          const remaining = left.get(point)! - 1;
          left.set(point, remaining);
          if (remaining === 0) {
            const runs = pointRuns.get(point)!.map((i) => finished[i]!);
            done.set(point, runs);
            writes = writes.then(() => journal.add({ point, runs }));
          }
        },
      });
      await writes;
    } catch (error) {
      progress.stop();
      await writes.catch(() => {});
      journal.close();
      if (journal.failure !== undefined) throw journal.failure;
      if (error instanceof DOMException && error.name === "AbortError") {
        console.error(
          `${why}: ${done.size} of ${mine.length} points are recorded in ${journalFile}; ` +
            `run the same command with --resume to finish. Previous results in ${out}/ are untouched`,
        );
        Deno.exit(130);
      }
      if (error instanceof SimulationError && !(error.cause instanceof TraceFormatError)) {
        // A failed run (a plugin's fault, say) ends the sweep as Ctrl-C does: the journal is kept.
        console.error(
          `run failed: ${
            oneLine(error.message)
          }; ${done.size} of ${mine.length} points are recorded in ${journalFile} ` +
            `(after fixing the cause, run the same command with --resume). Previous results in ${out}/ are untouched`,
        );
        Deno.exit(1);
      }
      throw error;
    }
    journal.close();
    progress.stop();
    if (journal.failure !== undefined) throw journal.failure;
    const simulatedSeconds = (performance.now() - start) / 1000;
    const simulated = todo.reduce((a, i) => a + finished[i]!.requests, 0);
    const rate = `${(simulated / simulatedSeconds / 1000).toFixed(0)}k requests/s`;

    if (shard.count > 1) {
      Deno.removeSignalListener("SIGINT", onInterrupt);
      stopWatchingParent();
      lock.release();
      console.error(
        `shard ${shard.index}/${shard.count} done: ${mine.length} points, ${todo.length} runs simulated in ${
          simulatedSeconds.toFixed(1)
        } s (${rate}); ` +
          `wrote ${journalFile}. When every shard is done: deno task merge DIR…`,
      );
      return;
    }

    writing = true; // finish writing even if interrupted: every file is replaced atomically
    // Runs of a point are contiguous in run order, so run i is its point's (i − first run) result.
    const firstRun = new Map<number, number>();
    sweep.runs.forEach((run, i) => firstRun.has(run.point) || firstRun.set(run.point, i));
    const results = sweep.runs.map((run, i) => done.get(run.point)![i - firstRun.get(run.point)!]);
    await writeSweepOutputs(out, sweepOutputs(sweep, results));
    await Deno.remove(journalFile); // the outputs now hold everything it recorded
    Deno.removeSignalListener("SIGINT", onInterrupt);
    stopWatchingParent();
    lock.release();
    if (interruptedWhileWriting) {
      console.error(
        `interrupted while writing: the write was finished first, so ${out}/ holds complete new results`,
      );
      Deno.exit(130);
    }
    const requests = results.reduce((a, r) => a + r.requests, 0);
    const wall = (performance.now() - start) / 1000;
    const used = Math.min(workers, todo.length); // the pool starts no more Workers than runs
    console.error(
      `sweep done: ${sweep.runs.length} runs, ${requests.toLocaleString("en-US")} requests on ${used} worker${
        used === 1 ? "" : "s"
      } in ` +
        `${wall.toFixed(1)} s wall (${
          simulatedSeconds.toFixed(1)
        } s simulating ${todo.length} runs, ${rate}); wrote ${out}/`,
    );
  });
}
