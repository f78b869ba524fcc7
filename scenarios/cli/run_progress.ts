/**
 * @module
 * Progress of one long `deno task run` on stderr: a bar on a terminal (when
 * the number of requests is known), else a line every ten seconds. Nothing is
 * shown for runs that end within a second.
 */
import cliProgress from "cli-progress";
import process from "node:process";
import type { RunProgress, SimulationConfig } from "../../actors/simulation.ts";

/** Requests the run will see, when the scenario says (a trace file's length is unknown until read). */
export function expectedRequests(config: SimulationConfig): number | null {
  const trace = config.workload.trace;
  if (trace === undefined) return config.workload.requests;
  const generated = trace.generate?.requests;
  if (generated !== undefined) return Math.min(generated, trace.maxRequests ?? Infinity);
  return trace.maxRequests ?? null;
}

/** A progress display for one run: `update` from `simulate`'s `onProgress`, then `stop`. */
export interface ProgressDisplay {
  update(progress: RunProgress): void;
  stop(): void;
}

const hours = (ms: number) => `${(ms / 3_600_000).toFixed(1)} h`;

/** Shows progress after the first second of wall time; `terminal` chooses the bar over lines. */
export function runProgress(total: number | null, terminal: boolean): ProgressDisplay {
  const start = performance.now();
  let bar: cliProgress.SingleBar | undefined;
  let lastLine = start;
  return {
    update(p) {
      const now = performance.now();
      if (now - start < 1000) return;
      const rate = `${(p.arrived / ((now - start) / 1000) / 1000).toFixed(0)}k`;
      if (terminal && total !== null) {
        if (bar === undefined) {
          bar = new cliProgress.SingleBar({
            format:
              "run [{bar}] {value}/{total} requests · simulated {sim} · {rate} requests/s · ETA {eta_formatted}",
            stream: process.stderr,
            hideCursor: true,
          }, cliProgress.Presets.shades_classic);
          bar.start(total, 0, { sim: hours(0), rate });
        }
        bar.update(Math.min(p.arrived, total), { sim: hours(p.simulatedMs), rate });
        return;
      }
      if (now - lastLine < (terminal ? 1000 : 10_000)) return;
      lastLine = now;
      const of = total === null ? "" : ` of ${total.toLocaleString("en-US")}`;
      console.error(
        `run: ${p.arrived.toLocaleString("en-US")}${of} requests arrived, ${
          p.finished.toLocaleString("en-US")
        } finished, simulated ${hours(p.simulatedMs)}, ${rate} requests/s`,
      );
    },
    stop() {
      bar?.stop();
    },
  };
}
