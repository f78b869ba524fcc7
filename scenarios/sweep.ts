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
import { oneLine, parseFlags, pluginTimeoutMs, runCommand } from "./scenario/command_line.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { TraceFormatError } from "../actors/traces/trace_reader.ts";
import { readJsonFile } from "./scenario/scenario.ts";
import {
  checkRunCount,
  checkSweepInputs,
  countRuns,
  MAX_RUNS,
  parseSweep,
  type Sweep,
} from "./sweep_runner/sweep_spec.ts";
import { outputDirectory, SWEEPS_DIR } from "./sweep_runner/output_directory.ts";
import type { OutputLock } from "./sweep_runner/output_lock.ts";
import { watchParent } from "./cli/parent_watch.ts";
import { type JournalHeader, journalHeader, shardPoints } from "./sweep_runner/sweep_journal.ts";
import { callerDirectory } from "./cli/caller_directory.ts";
import { loadRouterPlugin, type RouterPlugin } from "./workers/router_plugin.ts";
import {
  lockOutput,
  type OpenJournal,
  openJournal,
  resultsInRunOrder,
  type Shard,
  WHOLE,
  writeSweepOutputs,
} from "./sweep_runner/sweep_directory.ts";
import { UsageError } from "./cli/usage_error.ts";
import { runOnWorkers } from "./workers/worker_pool.ts";

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

  --spec FILE      sweep file (default ${DEFAULT_SPEC}; format in scenarios/sweep_runner/README.md)
  --quick          the small preset ${QUICK_SPEC} (a corner of the default grid)
  --workers N      Worker threads, integer from 1 to 4 × cores (default: number of cores)
  --router FILE.ts add a router plugin as one more policy of the sweep
  --plugin-timeout-ms N  wall ms the plugin may take to load or to make one routing decision (default 5000)
  --shard i/n      run only shard i of n (every n-th point) and record it for 'deno task merge'
  --max-runs N     refuse a sweep of more than N runs (points × policy variants × seeds), before any
                   run (default ${MAX_RUNS.toLocaleString("en-US")}: about 9 minutes and 200 MB on 2 cores)
  --resume         finish an interrupted sweep (or shard): run only the points its journal lacks
  --fresh          discard the journal of an unfinished sweep and start over
  --out DIR        output directory inside results/ (default: the sweep file's home — results/ for
                   default.json, results/NAME for NAME.json; with --router P.ts, results/plugin-P for
                   default.json and results/plugin-P-NAME for NAME.json).
                   The home of another committed sweep is refused
  -h, --help       show this help`;

const OPTIONS = {
  spec: { type: "string" },
  shard: { type: "string" },
  "max-runs": { type: "string" },
  resume: { type: "boolean" },
  fresh: { type: "boolean" },
  quick: { type: "boolean" },
  workers: { type: "string" },
  out: { type: "string" },
  router: { type: "string" },
  "plugin-timeout-ms": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/** The flags as parsed. */
type Flags = ReturnType<typeof parseFlags<typeof OPTIONS>>["values"];

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
function parseShard(raw: string | undefined): Shard {
  if (raw === undefined) return WHOLE;
  const m = /^(\d+)\/(\d+)$/.exec(raw);
  const index = m ? Number(m[1]) : NaN, count = m ? Number(m[2]) : NaN;
  if (!(count >= 1 && index >= 1 && index <= count)) {
    throw new UsageError(`--shard: expected i/n with 1 <= i <= n (e.g. 2/8), got "${raw}"`);
  }
  return { index, count };
}

/** Parses `--workers N`: the number of cores when not given. */
function parseWorkers(raw: string | undefined): number {
  if (raw === undefined) return navigator.hardwareConcurrency;
  const workers = Number(raw);
  if (!Number.isInteger(workers) || workers < 1 || workers > MAX_WORKERS) {
    throw new UsageError(
      `--workers: expected an integer >= 1 and <= ${MAX_WORKERS} (4 × ${navigator.hardwareConcurrency} cores), ` +
        `got "${raw}"`,
    );
  }
  return workers;
}

/** Largest `--max-runs`: a sweep's runs are one array, whose length JavaScript bounds at 2^32 − 1. */
const MAX_RUNS_CEILING = 2 ** 32 - 1;

/** Parses `--max-runs N`: {@linkcode MAX_RUNS} when not given. */
function parseMaxRuns(raw: string | undefined): number {
  if (raw === undefined) return MAX_RUNS;
  const maxRuns = Number(raw);
  if (raw.trim() === "" || !Number.isInteger(maxRuns) || maxRuns < 1 || maxRuns > MAX_RUNS_CEILING) {
    throw new UsageError(
      `--max-runs: expected an integer from 1 to ${MAX_RUNS_CEILING} (a JavaScript array's longest), got "${raw}"`,
    );
  }
  return maxRuns;
}

/** A sweep as its flags give it: checked, expanded, with its share of the points and where it writes. */
interface SweepSetup {
  readonly sweep: Sweep;
  /** What its journal records: the spec, plugin, shard and its points. */
  readonly header: JournalHeader;
  readonly workers: number;
  readonly plugin?: RouterPlugin;
  readonly pluginTimeoutMs: number;
  /** The output directory (checked, not yet created). */
  readonly out: string;
}

/**
 * Reads the flags, the plugin and the sweep file; checks the sweep and what
 * its runs read, and picks its output directory.
 * @throws {UsageError} for a bad flag, sweep file, trace or output directory.
 */
async function setUp(values: Flags): Promise<SweepSetup> {
  if (values.quick && values.spec) throw new UsageError("--quick and --spec: give one or the other");
  const workers = parseWorkers(values.workers);
  if (values.resume && values.fresh) throw new UsageError("--resume and --fresh: give one or the other");
  const shard = parseShard(values.shard);
  const maxRuns = parseMaxRuns(values["max-runs"]);
  const timeoutMs = pluginTimeoutMs(values);
  const specPath = values.quick
    ? join(SWEEPS_DIR, "quick.json")
    : values.spec ?? join(SWEEPS_DIR, "default.json");
  const spec = await readJsonFile(specPath, "--spec");
  // A grid too large is refused from its lists' lengths, before the plugin loads or anything expands.
  checkRunCount(countRuns(spec, values.router !== undefined), maxRuns);
  const plugin = values.router
    ? await loadRouterPlugin(values.router, { timeoutMs, baseDir: callerDirectory() })
    : undefined;
  const pluginInfo = plugin && { name: plugin.name, url: plugin.url };
  const sweep = parseSweep(spec, pluginInfo, { maxRuns });
  const header = journalHeader(
    spec,
    shard,
    shardPoints(sweep.points.length, shard.index, shard.count),
    pluginInfo,
  );
  await checkSweepInputs(sweep);
  // Never over a committed study but its own (the quick preset, a plugin sweep: their own homes).
  const out = await outputDirectory({
    out: values.out,
    specHash: header.specHash,
    plugin: values.router,
    specFile: specPath,
  });
  return { sweep, header, workers, plugin, pluginTimeoutMs: timeoutMs, out };
}

/**
 * What stops a sweep: Ctrl-C, or the process that started it vanishing
 * (`kill -9` of the `deno task` wrapper orphans this one). Either aborts
 * the runs; during the final write, it waits for the write to finish.
 */
class Interrupts {
  readonly #abort = new AbortController();
  readonly #stopWatchingParent: () => void;
  readonly #onInterrupt = () => {
    if (this.writing) this.interruptedWhileWriting = true;
    else this.#abort.abort();
  };
  /** Whether the final write has begun (it is finished even if interrupted). */
  writing = false;
  /** Whether an interrupt came during the final write. */
  interruptedWhileWriting = false;
  /** What stopped the sweep, for the message. */
  why = "interrupted";

  constructor() {
    Deno.addSignalListener("SIGINT", this.#onInterrupt);
    this.#stopWatchingParent = watchParent(() => {
      this.why = "interrupted (the process that started this sweep is gone)";
      this.#onInterrupt();
    });
  }

  /** Aborted on an interrupt (or by {@linkcode Interrupts.abort}). */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** Aborts the runs (a journal that cannot be written stops the sweep). */
  abort(): void {
    this.#abort.abort();
  }

  /** Stops listening. */
  stop(): void {
    Deno.removeSignalListener("SIGINT", this.#onInterrupt);
    this.#stopWatchingParent();
  }
}

/** The runs a sweep simulated: their indexes in `sweep.runs`, their results, and the time they took. */
interface Simulated {
  readonly todo: readonly number[];
  readonly finished: readonly (RunResult | undefined)[];
  readonly seconds: number;
}

/**
 * Simulates the runs of the sweep's points that the journal lacks, recording
 * each point in the journal as its last run finishes.
 * @throws the pool's error: an `AbortError` on an interrupt, a `SimulationError` for a failed run.
 */
async function simulatePoints(
  setup: SweepSetup,
  journal: OpenJournal,
  interrupts: Interrupts,
): Promise<Simulated> {
  const { sweep, header } = setup, done = journal.done;
  const mine = new Set(header.points);
  const todo = sweep.runs.map((_, i) => i).filter((i) =>
    mine.has(sweep.runs[i].point) && !done.has(sweep.runs[i].point)
  );
  const pointRuns = new Map<number, number[]>();
  sweep.runs.forEach((run, i) => {
    if (mine.has(run.point)) pointRuns.set(run.point, [...(pointRuns.get(run.point) ?? []), i]);
  });
  const finished: (RunResult | undefined)[] = new Array(sweep.runs.length);
  const left = new Map<number, number>();
  for (const i of todo) left.set(sweep.runs[i].point, (left.get(sweep.runs[i].point) ?? 0) + 1);
  let writes = Promise.resolve();
  journal.writer.onFailure = () => interrupts.abort(); // a full disk stops the sweep; the error is reported after
  const start = performance.now();
  const progress = progressReporter(sweep, todo);
  try {
    await runOnWorkers(todo.map((i) => sweep.runs[i]), {
      workers: setup.workers,
      signal: interrupts.signal,
      plugin: setup.plugin,
      pluginTimeoutMs: setup.pluginTimeoutMs,
      // A main thread kept busy cannot take the watchdog's verdict: it then ends the process itself.
      watchdog: { stallMs: 10_000, lastResort: { linePrefix: "run failed: " } },
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
          writes = writes.then(() => journal.writer.add({ point, runs }));
        }
      },
    });
    await writes;
  } finally {
    progress.stop();
    await writes.catch(() => {});
    journal.writer.close();
  }
  if (journal.writer.failure !== undefined) throw journal.writer.failure;
  return { todo, finished, seconds: (performance.now() - start) / 1000 };
}

/**
 * Ends a sweep whose runs failed or were interrupted: the journal keeps the
 * finished points for `--resume`, and the previous results stay untouched.
 * Exits 130 for an interrupt, 1 for a failed run; rethrows anything else.
 */
function stopFailed(error: unknown, setup: SweepSetup, journal: OpenJournal, interrupts: Interrupts): never {
  if (journal.writer.failure !== undefined) throw journal.writer.failure;
  const recorded =
    `${journal.done.size} of ${setup.header.points.length} points are recorded in ${journal.path}`;
  if (error instanceof DOMException && error.name === "AbortError") {
    console.error(
      `${interrupts.why}: ${recorded}; run the same command with --resume to finish. ` +
        `Previous results in ${setup.out}/ are untouched`,
    );
    Deno.exit(130);
  }
  if (error instanceof SimulationError && !(error.cause instanceof TraceFormatError)) {
    // A failed run (a plugin's fault, say) ends the sweep as Ctrl-C does: the journal is kept.
    console.error(
      `run failed: ${oneLine(error.message)}; ${recorded} ` +
        `(after fixing the cause, run the same command with --resume). Previous results in ${setup.out}/ are untouched`,
    );
    Deno.exit(1);
  }
  throw error;
}

/** `N k requests/s` over the runs simulated. */
function simulatedRate(simulated: Simulated): string {
  const requests = simulated.todo.reduce((a, i) => a + simulated.finished[i]!.requests, 0);
  return `${(requests / simulated.seconds / 1000).toFixed(0)}k requests/s`;
}

/**
 * Writes the sweep's outputs from every point's results, then removes the
 * journal, which they now hold, and releases the lock.
 */
async function writeResults(
  setup: SweepSetup,
  journal: OpenJournal,
  simulated: Simulated,
  { interrupts, lock, start }: { interrupts: Interrupts; lock: OutputLock; start: number },
): Promise<void> {
  const { sweep, out } = setup;
  interrupts.writing = true; // finish writing even if interrupted: every file is replaced atomically
  const results = resultsInRunOrder(sweep, journal.done);
  await writeSweepOutputs(out, sweep, results);
  await Deno.remove(journal.path);
  interrupts.stop();
  lock.release();
  if (interrupts.interruptedWhileWriting) {
    console.error(
      `interrupted while writing: the write was finished first, so ${out}/ holds complete new results`,
    );
    Deno.exit(130);
  }
  const requests = results.reduce((a, r) => a + r.requests, 0);
  const wall = (performance.now() - start) / 1000;
  const used = Math.min(setup.workers, simulated.todo.length); // the pool starts no more Workers than runs
  console.error(
    `sweep done: ${sweep.runs.length} runs, ${requests.toLocaleString("en-US")} requests on ${used} worker${
      used === 1 ? "" : "s"
    } in ` +
      `${wall.toFixed(1)} s wall (${
        simulated.seconds.toFixed(1)
      } s simulating ${simulated.todo.length} runs, ${simulatedRate(simulated)}); wrote ${out}/`,
  );
  const skipped = skippedLinesLine(sweep, results);
  if (skipped !== undefined) console.error(skipped);
}

/**
 * The line of a sweep whose traces are read with `skipInvalid`: how many
 * malformed lines its runs skipped in all (0 included); undefined when none
 * skips.
 */
function skippedLinesLine(sweep: Sweep, results: readonly RunResult[]): string | undefined {
  const skipping = sweep.runs.filter((r) => r.config.workload.trace?.skipInvalid === true).length;
  const skipped = results.reduce((a, r) => a + r.skippedInvalid, 0);
  if (skipping === 0 && skipped === 0) return undefined;
  return `sweep: skipped ${skipped} malformed trace line${
    skipped === 1 ? "" : "s"
  } in all, over the ${skipping} ` +
    `run${skipping === 1 ? "" : "s"} reading a trace with skipInvalid`;
}

/** Runs the sweep `setup` describes, under its lock: resumes its journal, simulates, writes (or records a shard). */
async function runSweep(setup: SweepSetup, values: Flags, lock: OutputLock): Promise<void> {
  const { header, out } = setup, shard = header.shard;
  const journal = await openJournal({ out, header, resume: values.resume, fresh: values.fresh });
  if (journal === undefined) return; // this shard is already complete
  const interrupts = new Interrupts();
  const start = performance.now();
  const simulated = await simulatePoints(setup, journal, interrupts).catch((error) =>
    stopFailed(error, setup, journal, interrupts)
  );
  if (shard.count === 1) return await writeResults(setup, journal, simulated, { interrupts, lock, start });
  interrupts.stop();
  lock.release();
  console.error(
    `shard ${shard.index}/${shard.count} done: ${header.points.length} points, ${simulated.todo.length} runs ` +
      `simulated in ${simulated.seconds.toFixed(1)} s (${simulatedRate(simulated)}); ` +
      `wrote ${journal.path}. When every shard is done: deno task merge DIR…`,
  );
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    const setup = await setUp(values);
    // One writer per journal: a second sweep, --resume or --fresh here stops, naming this one.
    const lock = await lockOutput(setup.out, setup.header.shard, `sweep ${Deno.args.join(" ")}`);
    await runSweep(setup, values, lock);
    lock.release();
    // A Worker running a plugin's code cannot always be terminated (a loop,
    // endless promise callbacks) and would keep the process alive: end it.
    if (setup.plugin) Deno.exit(0);
  });
}
