/**
 * @module
 * `deno task realtime`: one scenario with the source, the router and each
 * instance in their own Worker, paced by the wall clock at `--speed`, with a
 * live terminal view; ends with the same summary as `deno task run` plus the
 * lag figures.
 */
import { type LiveHandles, type RealtimeResult, simulateRealtime } from "../actors/realtime_simulation.ts";
import {
  configFromFlags,
  parseFlags,
  runCommand,
  SCENARIO_FLAGS_HELP,
  SCENARIO_OPTIONS,
} from "./command_line.ts";
import { LiveView } from "./live_view.ts";
import { loadRouterPlugin } from "./router_plugin.ts";
import { formatReport } from "./run_report.ts";
import { UsageError } from "./usage_error.ts";
import { systemWallTime } from "./wall_time.ts";

const HELP = `Usage: deno task realtime [flags]

Runs one scenario in real time: source, router and instances in their own
Deno Workers, the central clock paced at --speed simulated ms per wall ms.

  --speed X              simulated ms per wall ms (default 5; 1 is real time)
  --lag-tolerance-ms N   warn when the p99 delivery lag exceeds this (default 50)
  --handler-timeout-ms N fail when an actor takes longer to handle a message (default 5000)

${SCENARIO_FLAGS_HELP}`;

const OPTIONS = {
  ...SCENARIO_OPTIONS,
  speed: { type: "string" },
  "lag-tolerance-ms": { type: "string" },
  "handler-timeout-ms": { type: "string" },
} as const;

function positive(flag: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!(value > 0 && Number.isFinite(value))) {
    throw new UsageError(`${flag}: expected a number > 0, got "${raw}"`);
  }
  return value;
}

/** The end-of-run lag lines, with a warning when the speed was too high. */
export function formatLag(result: RealtimeResult, toleranceMs: number): string {
  const { lag } = result;
  const lines = [
    `  lag           p50 ${lag.p50Ms.toFixed(2)} ms · p99 ${lag.p99Ms.toFixed(2)} ms · max ${
      lag.maxMs.toFixed(2)
    } ms wall behind schedule` +
    ` (${lag.deliveries} deliveries at speed ${result.speed}×)`,
  ];
  if (lag.p99Ms > toleranceMs) {
    lines.push(
      `warning: p99 lag ${
        lag.p99Ms.toFixed(1)
      } ms exceeds the ${toleranceMs} ms tolerance: speed ${result.speed}× is too high for this machine; ` +
        `results are still exact (stamps are kept), but the run is not real time`,
    );
  }
  return lines.join("\n");
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    const speed = positive("--speed", values.speed, 5);
    const tolerance = positive("--lag-tolerance-ms", values["lag-tolerance-ms"], 50);
    const handlerTimeoutMs = positive("--handler-timeout-ms", values["handler-timeout-ms"], 5000);
    const config = await configFromFlags(values);
    const plugin = values.router ? await loadRouterPlugin(values.router) : undefined;

    const name = plugin
      ? `plugin ${plugin.policy.name}`
      : config.policy.name === "hybrid"
      ? `hybrid(thr=${config.policy.threshold})`
      : config.policy.name;
    const view = new LiveView(
      config.instances.count,
      config.workload.requests,
      `realtime · ${name} · speed ${speed}×`,
    );
    const terminal = Deno.stderr.isTerminal();
    const encoder = new TextEncoder();
    const write = (text: string) => Deno.stderr.writeSync(encoder.encode(text));
    const abort = new AbortController();
    const onInterrupt = () => abort.abort();
    Deno.addSignalListener("SIGINT", onInterrupt);
    let live: LiveHandles | undefined;
    const start = performance.now();
    const timer = setInterval(
      () => live && !values.json && view.draw(write, terminal, performance.now() - start, live.lag().p99Ms),
      terminal ? 250 : 2000,
    );
    try {
      const result = await simulateRealtime(config, {
        speed,
        wallTime: systemWallTime,
        pluginUrl: plugin?.url,
        policyName: plugin?.policy.name,
        onDeliver: view.observe,
        signal: abort.signal,
        handlerTimeoutMs,
        onStart: (handles) => {
          live = handles;
          view.attach(handles.metrics);
        },
      });
      clearInterval(timer);
      const report = { ...result, wallMs: performance.now() - start, scenario: config };
      if (values.json) console.log(JSON.stringify(report, null, 2));
      else console.log(`${formatReport(report)}\n${formatLag(result, tolerance)}`);
    } catch (error) {
      clearInterval(timer);
      if (error instanceof DOMException && error.name === "AbortError") {
        const s = live?.metrics.summary();
        console.error(
          `interrupted after ${((performance.now() - start) / 1000).toFixed(1)} s wall: ${
            s?.completed ?? 0
          } requests completed, ` +
            `TTFT mean ${(s?.ttftMeanMs ?? 0).toFixed(1)} ms, p99 ${
              (s?.ttftP99Ms ?? 0).toFixed(1)
            } ms, hit rate ${(s?.hitRate ?? 0).toFixed(3)}; every Worker terminated`,
        );
        Deno.exit(130);
      }
      throw error;
    } finally {
      Deno.removeSignalListener("SIGINT", onInterrupt);
    }
  });
}
