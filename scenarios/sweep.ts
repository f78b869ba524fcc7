/**
 * @module
 * `deno task sweep`: run a sweep (the original study's grid by default) on a
 * pool of Workers and write `sweep_summary.csv`, `summary.txt`, `plots/` and
 * `report.html`, atomically, under `results/` (or `--out`).
 */
import process from "node:process";
import cliProgress from "cli-progress";
import type { RunResult } from "../actors/simulation.ts";
import { writeFileAtomic } from "./atomic_write.ts";
import { parseFlags, runCommand } from "./command_line.ts";
import { readJsonFile } from "./scenario.ts";
import { studyCharts, toPng } from "./plots.ts";
import { reportHtml } from "./report.ts";
import { analyse, formatSummary } from "./study_findings.ts";
import { parseSweep, type Sweep, type SweepPlugin } from "./sweep_spec.ts";
import { loadRouterPlugin } from "./router_plugin.ts";
import { summarise, toCsv } from "./sweep_summary.ts";
import { UsageError } from "./usage_error.ts";
import { runOnWorkers } from "./worker_pool.ts";

const DEFAULT_SPEC = "scenarios/sweeps/default.json";
const QUICK_SPEC = "scenarios/sweeps/quick.json";

const HELP = `Usage: deno task sweep [flags]

Runs a sweep on a pool of Workers and writes, under --out:
sweep_summary.csv, summary.txt, plots/*.png and report.html.

  --spec FILE      sweep file (default ${DEFAULT_SPEC}; format in README)
  --quick          the small preset ${QUICK_SPEC} (a corner of the default grid)
  --workers N      Worker threads, integer >= 1 (default: number of cores)
  --router FILE.ts add a router plugin as one more policy of the sweep
  --out DIR        output directory (default results; results/quick with --quick)
  -h, --help       show this help`;

const OPTIONS = {
  spec: { type: "string" },
  quick: { type: "boolean" },
  workers: { type: "string" },
  out: { type: "string" },
  router: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/** Every file a sweep writes, as text or bytes, by path relative to the output directory. */
export function sweepOutputs(sweep: Sweep, results: readonly RunResult[]): Map<string, string | Uint8Array> {
  const rows = summarise(sweep, results);
  const study = analyse(sweep, rows);
  const requests = results.reduce((a, r) => a + r.requests, 0);
  const summary = formatSummary(sweep, study, results.length, requests);
  const charts = studyCharts(rows, study, sweep);
  const files = new Map<string, string | Uint8Array>();
  files.set("sweep_summary.csv", toCsv(sweep, rows));
  files.set("summary.txt", summary);
  for (const chart of charts) files.set(`plots/${chart.file}`, toPng(chart.svg));
  files.set("report.html", reportHtml("request-routing-sim — routing study", summary, charts));
  return files;
}

async function readSweep(path: string, plugin?: SweepPlugin): Promise<Sweep> {
  return parseSweep(await readJsonFile(path, "--spec"), plugin);
}

/**
 * Progress on stderr: a bar on a terminal, a line every 10% otherwise.
 * Counts points (all of a point's runs done) and runs.
 */
function progressReporter(sweep: Sweep) {
  const start = performance.now();
  const total = sweep.runs.length, points = sweep.points.length;
  const runsPerPoint = total / points;
  const donePerPoint = new Array<number>(points).fill(0);
  let pointsDone = 0;
  const record = (run: number) => {
    if (++donePerPoint[sweep.runs[run].point] === runsPerPoint) pointsDone++;
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

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    if (values.quick && values.spec) throw new UsageError("--quick and --spec: give one or the other");
    let workers = navigator.hardwareConcurrency;
    if (values.workers !== undefined) {
      workers = Number(values.workers);
      if (!Number.isInteger(workers) || workers < 1) {
        throw new UsageError(`--workers: expected an integer >= 1, got "${values.workers}"`);
      }
    }
    // The quick preset must not overwrite the committed full results.
    const out = values.out ?? (values.quick ? "results/quick" : "results");
    const plugin = values.router ? await loadRouterPlugin(values.router) : undefined;
    const sweep = await readSweep(
      values.quick ? QUICK_SPEC : values.spec ?? DEFAULT_SPEC,
      plugin && { name: plugin.policy.name, url: plugin.url },
    );

    const abort = new AbortController();
    let writing = false;
    let interruptedWhileWriting = false;
    const onInterrupt = () => {
      if (writing) interruptedWhileWriting = true;
      else abort.abort();
    };
    Deno.addSignalListener("SIGINT", onInterrupt);
    const start = performance.now();
    const progress = progressReporter(sweep);
    let results: RunResult[];
    try {
      results = await runOnWorkers(sweep.runs, {
        workers,
        signal: abort.signal,
        onProgress: (done, _result, run) => progress.update(done, run),
      });
    } catch (error) {
      progress.stop();
      if (error instanceof DOMException && error.name === "AbortError") {
        console.error(`interrupted: nothing written; the previous results in ${out}/ are untouched`);
        Deno.exit(130);
      }
      throw error;
    }
    progress.stop();
    const simulatedSeconds = (performance.now() - start) / 1000;

    writing = true; // finish writing even if interrupted: every file is replaced atomically
    const files = sweepOutputs(sweep, results);
    await Deno.mkdir(`${out}/plots`, { recursive: true });
    for (const [path, data] of files) await writeFileAtomic(`${out}/${path}`, data);
    Deno.removeSignalListener("SIGINT", onInterrupt);
    if (interruptedWhileWriting) {
      console.error(
        `interrupted while writing: the write was finished first, so ${out}/ holds complete new results`,
      );
      Deno.exit(130);
    }

    const requests = results.reduce((a, r) => a + r.requests, 0);
    const wall = (performance.now() - start) / 1000;
    console.error(
      `sweep done: ${sweep.runs.length} runs, ${
        requests.toLocaleString("en-US")
      } requests on ${workers} workers in ${wall.toFixed(1)} s wall (${
        simulatedSeconds.toFixed(1)
      } s simulating, ${(requests / simulatedSeconds / 1000).toFixed(0)}k requests/s); wrote ${out}/`,
    );
  });
}
