/**
 * @module
 * `deno task bench`: the speed and memory figures, on one thread — kernel
 * messages delivered per second; requests simulated per second for each
 * policy and model; the FIFO model side by side with the plain Python peer;
 * long-prompt trace replay and a 1,000,000-request replay with their true
 * peak memory; the plugin sandbox's cost. Best of several repetitions after
 * warm-up; each part in a fresh process.
 */
import { type Actor, type ActorContext, type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { POLICY_NAMES } from "../actors/policies/mod.ts";
import { simulate } from "../actors/simulation.ts";
import { fileURLToPath } from "node:url";
import { parseFlags, runCommand } from "./scenario/command_line.ts";
import { parseScenario } from "./scenario/scenario.ts";
import { UsageError } from "./cli/usage_error.ts";
import { loadRouterPlugin } from "./workers/router_plugin.ts";
import { runPluginScenario } from "./workers/run_scenario.ts";
import {
  mooncakeLine,
  TraceGenerator,
  type TraceGeneratorOptions,
} from "../actors/traces/trace_generator.ts";
import type { SimulationConfig } from "../actors/simulation.ts";
import { traceChunks, TraceTally } from "./scenario/trace_file.ts";
import { fleetBench } from "./bench/fleet_bench.ts";
import { gatewayBench, proxyBench, serveLagBench, soakBench, streamBench } from "./wire/wire_bench.ts";
import { realtimeBench } from "./bench/realtime_bench.ts";

type Ball = { readonly type: "ball"; readonly hops: number };

/** Kernel throughput: `actors` actors pass balls to random peers with random delays. */
function kernelMessagesPerSec(actors: number, balls: number, hopsPerBall: number): number {
  const kernel = new Kernel({ seed: 1 });
  const refs: ActorRef<Ball>[] = [];
  const player: Actor<Ball> = {
    handle(ball, ctx: ActorContext<Ball>) {
      if (ball.hops > 0) {
        ctx.send(
          refs[Math.floor(ctx.random() * refs.length)],
          { type: "ball", hops: ball.hops - 1 },
          ctx.random() * 10,
        );
      }
    },
  };
  for (let i = 0; i < actors; i++) refs.push(kernel.spawn(`player/${i}`, player));
  for (let b = 0; b < balls; b++) {
    kernel.send(refs[b % actors], { type: "ball", hops: hopsPerBall }, b * 0.001);
  }
  const start = performance.now();
  kernel.run();
  const seconds = (performance.now() - start) / 1000;
  return kernel.messagesDelivered / seconds;
}

function best(repetitions: number, measure: () => number): number {
  measure(); // warm-up
  let top = 0;
  for (let i = 0; i < repetitions; i++) top = Math.max(top, measure());
  return top;
}

/**
 * This process's true peak resident memory, MB: the kernel's high-water mark
 * from `getrusage` (FFI; the bench gives its parts `--allow-ffi` for this one
 * call). Null, never a guess, where it cannot be read.
 */
function peakRssMb(): number | null {
  if (Deno.permissions.querySync({ name: "ffi" }).state !== "granted") return null;
  const os = Deno.build.os;
  if (os !== "linux" && os !== "darwin") return null;
  const lib = Deno.dlopen(os === "darwin" ? "libSystem.B.dylib" : "libc.so.6", {
    getrusage: { parameters: ["i32", "buffer"], result: "i32" },
  });
  try {
    const usage = new BigInt64Array(18); // struct rusage: two timevals, then ru_maxrss
    if (lib.symbols.getrusage(0, new Uint8Array(usage.buffer)) !== 0) return null;
    const maxRss = Number(usage[4]); // KiB on Linux, bytes on macOS
    return os === "darwin" ? maxRss / 2 ** 20 : maxRss / 1024;
  } finally {
    lib.close();
  }
}

const mb = (value: number | null) => value === null ? "n/a" : `${value.toFixed(0)} MB`;

/** `--memory`: one 1,000,000-request run per model in a fresh process, reporting peak memory. */
function memoryBench(model: "fifo" | "batching"): void {
  const config = parseScenario({ instances: { model }, workload: { requests: 1_000_000 } });
  const start = performance.now();
  const r = simulate(config);
  const seconds = (performance.now() - start) / 1000;
  console.log(
    `${model.padEnd(8)} 1,000,000 requests: ${seconds.toFixed(1)} s, ${
      (r.requests / seconds / 1000).toFixed(0)
    }k requests/s, ` +
      `peak memory ${mb(peakRssMb())} (completed ${r.completed})`,
  );
}

/** Requests simulated per second, best of 5 after a warm-up, for each policy. */
function policyBench(model: "fifo" | "batching", requests: number): void {
  const fmt = (v: number) => `${(v / 1e6).toFixed(2)} M/s`;
  console.log(`\n${model} model, default scenario, ${requests.toLocaleString("en-US")} requests per run:`);
  console.log("  policy                requests/s    messages/s   msgs/request");
  for (const name of POLICY_NAMES) {
    const config = parseScenario({ policy: { name }, instances: { model }, workload: { requests } });
    let messages = 0;
    const perSec = best(5, () => {
      const start = performance.now();
      const r = simulate(config);
      messages = r.messages;
      return r.requests / ((performance.now() - start) / 1000);
    });
    const msgPerReq = messages / requests;
    console.log(
      `  ${name.padEnd(20)}  ${(perSec / 1e3).toFixed(0).padStart(6)} k/s   ${
        fmt(perSec * msgPerReq).padStart(10)
      }   ${msgPerReq.toFixed(2)}`,
    );
  }
}

/**
 * `disaggregated`: the batching model's default scenario on 4 instances
 * serving whole requests against 2 prefill + 2 decode instances (both
 * flows), and the generated conversation trace on 8 instances against 6 + 2:
 * what the second leg, the KV handshake and the link cost the simulator.
 * Best of 5 (synthetic) or 3 (trace) after a warm-up each.
 */
function disaggregatedBench(requests: number): void {
  const split = (p: number, d: number) => [{ role: "prefill", count: p }, { role: "decode", count: d }];
  const synthetic = { policy: { name: "prefix_aware" }, workload: { requests } };
  console.log(
    `\ndisaggregated serving, prefix_aware, default batching scenario (${
      requests.toLocaleString("en-US")
    } requests):`,
  );
  compareFleets(5, requests, [
    ["aggregated, 4 instances", { ...synthetic, instances: { model: "batching", count: 4 } }],
    ["2 prefill + 2 decode, prefill-first", {
      ...synthetic,
      instances: { model: "batching", pools: split(2, 2) },
    }],
    [
      "2 prefill + 2 decode, decode-first",
      {
        ...synthetic,
        router: { pdFlow: "decode-first" },
        instances: { model: "batching", pools: split(2, 2) },
      },
    ],
  ]);
  const trace = { policy: { name: "prefix_aware" }, workload: { trace: { generate: {}, speed: 8 } } };
  console.log("\n  generated conversation trace (12,000 requests, ≈ 12,000-token prompts) at 8× its rate:");
  compareFleets(3, 12_000, [
    ["aggregated, 8 instances", { ...trace, instances: { model: "batching", count: 8 } }],
    [
      "6 prefill + 2 decode (least_load decode)",
      {
        ...trace,
        decodePolicy: { name: "least_load" },
        instances: { model: "batching", pools: split(6, 2) },
      },
    ],
  ]);
}

/** Requests/s of each scenario (best of `repetitions`), and each against the first. */
function compareFleets(repetitions: number, requests: number, runs: readonly [string, unknown][]): void {
  let first = 0;
  for (const [label, input] of runs) {
    const config = parseScenario(input);
    let messages = 0;
    const perSec = best(repetitions, () => {
      const start = performance.now();
      const r = simulate(config);
      messages = r.messages;
      return r.requests / ((performance.now() - start) / 1000);
    });
    if (first === 0) first = perSec;
    console.log(
      `  ${label.padEnd(40)} ${(perSec / 1e3).toFixed(1).padStart(6)} k requests/s  ${
        (messages / requests).toFixed(1)
      } msgs/request  ${(100 * perSec / first).toFixed(0)}% of aggregated`,
    );
  }
}

/**
 * `plugin`: the built-in prefix_aware in this thread against a plain copy of
 * it run as a sandboxed plugin (scenarios/plugins/prefix_aware_copy.ts), on
 * the default scenario: the sandbox's cost. Best of 5 after a warm-up each.
 */
async function pluginBench(requests: number): Promise<void> {
  const config = parseScenario({ policy: { name: "prefix_aware" }, workload: { requests } });
  const builtIn = best(5, () => {
    const start = performance.now();
    return simulate(config).requests / ((performance.now() - start) / 1000);
  });
  const plugin = await loadRouterPlugin(new URL("./plugins/prefix_aware_copy.ts", import.meta.url).pathname);
  let simulated = 0, endToEnd = 0;
  for (let i = 0; i < 6; i++) {
    const start = performance.now();
    const report = await runPluginScenario(config, plugin, 5000);
    const total = performance.now() - start;
    if (i === 0) continue; // warm-up
    simulated = Math.max(simulated, report.requests / (report.wallMs / 1000));
    endToEnd = Math.max(endToEnd, report.requests / (total / 1000));
  }
  const k = (v: number) => `${(v / 1e3).toFixed(0)}k requests/s`;
  console.log(`plugin sandbox, default scenario, ${requests.toLocaleString("en-US")} requests per run:`);
  console.log(`  built-in prefix_aware (this thread)      ${k(builtIn)}`);
  console.log(
    `  plugin copy in its sandboxed Worker      ${k(simulated)} (${(100 * simulated / builtIn).toFixed(0)}%)`,
  );
  console.log(
    `  the same, with Worker start and loading  ${k(endToEnd)} (${(100 * endToEnd / builtIn).toFixed(0)}%)`,
  );
}

/**
 * `trace-gen`: 1,000,000 default requests generated and formatted as JSONL
 * (what `deno task trace-gen` writes, without the disk), in a fresh process:
 * rows per second and peak memory, which must not grow with the trace.
 */
function traceGenBench(requests: number): void {
  const start = performance.now();
  const generator = new TraceGenerator({ requests });
  let bytes = 0;
  for (const chunk of traceChunks(generator, new TraceTally())) bytes += chunk.length;
  const seconds = (performance.now() - start) / 1000;
  console.log(
    `trace generator, ${requests.toLocaleString("en-US")} default requests as JSONL ` +
      `(${(bytes / 2 ** 20).toFixed(0)} MB): ${seconds.toFixed(1)} s, ${
        (requests / seconds / 1000).toFixed(0)
      }k requests/s, peak memory ${mb(peakRssMb())} (at most ${generator.maxOpenSessions} sessions open)`,
  );
}

/** One side-by-side figure of the peer part: wall seconds and the 1-minute load average when it ended. */
interface PeerTiming {
  readonly seconds: number;
  readonly load: number;
}

const median = (values: readonly number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

/** The machine's 1-minute load average (other work in the same minutes), or NaN where it cannot be read. */
function loadAverage(): number {
  try {
    return Deno.loadavg()[0];
  } catch {
    return NaN;
  }
}

/** Our side: the whole `deno task run` process a user starts (module loading, parsing, the run, the report). */
async function timeOurRun(scenario: string, policy: string, requests: number): Promise<PeerTiming> {
  const start = performance.now();
  const out = await new Deno.Command("deno", {
    args: ["task", "run", "--scenario", scenario, "--requests", String(requests), "--policy", policy],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const seconds = (performance.now() - start) / 1000;
  if (!out.success) {
    throw new Error(`deno task run --policy ${policy} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return { seconds, load: loadAverage() };
}

/** The peer's side: its own figure, the simulation loop alone (`wall_s`, to the precision of `req_per_s`). */
async function timePeer(script: string, policy: string, requests: number): Promise<PeerTiming> {
  const out = await new Deno.Command("python3", {
    args: [script, policy, "--requests", String(requests)],
    stdout: "piped",
  }).output();
  const perSec = Number(/req_per_s=(\d+)/.exec(new TextDecoder().decode(out.stdout))?.[1]);
  if (!out.success || !(perSec > 0)) throw new Error(`python3 ${script} ${policy} failed`);
  return { seconds: requests / perSec, load: loadAverage() };
}

/**
 * Ours, then the peer's, `alternations` times, for one policy and size;
 * prints each pair (seconds, load average, ratio) and the medians. The
 * ratio is the peer's seconds over ours: how many times faster we are.
 */
async function peerRatio(policy: string, requests: number, alternations: number, target?: number) {
  const peer = fileURLToPath(new URL("../../shared/bench/", import.meta.url));
  const pairs: { ours: PeerTiming; theirs: PeerTiming }[] = [];
  const fmt = (t: PeerTiming) => `${t.seconds.toFixed(2).padStart(6)} s (load ${t.load.toFixed(2)})`;
  console.log(
    `\n  ${policy}, ${requests.toLocaleString("en-US")} requests${target ? ` (target ≥ ${target}×)` : ""}:` +
      "\n    #   ours: deno task run            python_peer.py (own figure)   ratio",
  );
  for (let i = 0; i < alternations; i++) {
    const ours = await timeOurRun(`${peer}peer_scenario.json`, policy, requests);
    const theirs = await timePeer(`${peer}python_peer.py`, policy, requests);
    pairs.push({ ours, theirs });
    console.log(
      `    ${i + 1}   ${fmt(ours)}        ${fmt(theirs)}         ${
        (theirs.seconds / ours.seconds).toFixed(2)
      }×`,
    );
  }
  const ours = median(pairs.map((p) => p.ours.seconds)), theirs = median(pairs.map((p) => p.theirs.seconds));
  const k = (seconds: number) => `${(requests / seconds / 1e3).toFixed(0)}k requests/s`;
  console.log(
    `    median: ours ${ours.toFixed(2)} s (${k(ours)}), python ${theirs.toFixed(2)} s (${k(theirs)}); ` +
      `ratio of medians ${(theirs / ours).toFixed(2)}×, median ratio ${
        median(pairs.map((p) => p.theirs.seconds / p.ours.seconds)).toFixed(2)
      }×`,
  );
}

/**
 * `peer`: the FIFO model against ../shared/bench/python_peer.py, a plain
 * heapq simulator of the same model, on its scenario, in the path users
 * run: the whole `deno task run` process (start-up and report included)
 * against the peer's own figure (its loop alone). Ours, then the peer's, 5
 * times, so both see the same minutes, with the load average beside each
 * figure: at 1,000,000 requests, hybrid (target ≥ 5×) and round robin
 * (≥ 3×), then at 200,000.
 */
async function peerBench(): Promise<void> {
  console.log(
    "FIFO model vs the Python peer, peer_scenario.json: the whole `deno task run` process against the " +
      "peer's own figure, alternating, 5 times each:",
  );
  await peerRatio("hybrid", 1_000_000, 5, 5);
  await peerRatio("round_robin", 1_000_000, 5, 3);
  await peerRatio("hybrid", 200_000, 5);
  await peerRatio("round_robin", 200_000, 5);
}

/** The long-prompt conversation trace of the issue: the generator's defaults (≈ 12,000 requests over an hour, ≈ 12,000-token prompts). */
const LONG_PROMPT: Partial<TraceGeneratorOptions> = {};

/** Writes a generated trace to results/.bench/ (scratch, git-ignored) and returns its path. */
function writeTrace(name: string, options: Partial<TraceGeneratorOptions>): string {
  const dir = fileURLToPath(new URL("../results/.bench/", import.meta.url));
  Deno.mkdirSync(dir, { recursive: true });
  const path = `${dir}${name}.jsonl`;
  const file = Deno.openSync(path, { write: true, create: true, truncate: true });
  const encoder = new TextEncoder();
  let chunk = "";
  for (const row of new TraceGenerator(options)) {
    chunk += mooncakeLine(row) + "\n";
    if (chunk.length > 1 << 16) {
      file.writeSync(encoder.encode(chunk));
      chunk = "";
    }
  }
  file.writeSync(encoder.encode(chunk));
  file.close();
  return path;
}

/** 8 batching instances (default preset) replaying a trace file or a generated trace. */
function traceConfig(policy: string, trace: { path: string } | { generate: Partial<TraceGeneratorOptions> }) {
  return parseScenario({
    policy: { name: policy },
    instances: { count: 8, model: "batching" },
    workload: { trace: "path" in trace ? { path: trace.path, format: "mooncake" } : trace },
  });
}

/** Runs once (for the true peak of one run), then best of `repetitions` more for speed. */
function speedAndPeak(config: SimulationConfig, repetitions: number) {
  const timed = () => {
    const start = performance.now();
    const r = simulate(config);
    return { r, perSec: r.requests / ((performance.now() - start) / 1000) };
  };
  const first = timed();
  const peak = peakRssMb();
  let perSec = first.perSec;
  for (let i = 0; i < repetitions; i++) perSec = Math.max(perSec, timed().perSec);
  return { result: first.r, perSec, peak };
}

/**
 * `trace`: the long-prompt Mooncake-format trace (generated, written to a
 * file, replayed from it) on 8 batching instances: requests/s and the
 * process's true peak memory after one replay, per policy.
 */
function traceBench(): void {
  const path = writeTrace("long_prompt", LONG_PROMPT);
  console.log(
    "long-prompt trace replay (generated defaults, from its file), 8 batching instances, qwen2.5-7b:",
  );
  console.log("  policy          requests  requests/s  msgs/request");
  let firstPeak: number | null = null;
  for (const policy of ["round_robin", "prefix_aware", "hybrid", "least_load"]) {
    const { result, perSec, peak } = speedAndPeak(traceConfig(policy, { path }), 3);
    firstPeak ??= peak;
    console.log(
      `  ${policy.padEnd(14)}  ${String(result.requests).padStart(8)}  ${
        (perSec / 1e3).toFixed(1).padStart(8)
      }k  ${(result.messages / result.requests).toFixed(1).padStart(12)}`,
    );
  }
  // A process's high-water mark only rises: after the first replay it is that
  // replay's peak (with writing the trace); later ones would show the max so far.
  console.log(`  peak memory after writing the trace and one round_robin replay: ${mb(firstPeak)}`);
  console.log(`  peak memory after all 16 replays: ${mb(peakRssMb())}`);
}

/** `replay-1m`: a 1,000,000-request generated trace (the same traffic, 83 hours of it) replayed once, streamed. */
function millionBench(): void {
  const config = traceConfig("round_robin", { generate: { ...LONG_PROMPT, requests: 1_000_000 } });
  const start = performance.now();
  const r = simulate(config);
  const seconds = (performance.now() - start) / 1000;
  console.log(
    `1,000,000-request generated trace replay, 8 batching instances, round_robin: ${seconds.toFixed(1)} s, ` +
      `${(r.requests / seconds / 1e3).toFixed(1)}k requests/s, peak memory ${mb(peakRssMb())} ` +
      `(completed ${r.completed}, dropped ${r.dropped})`,
  );
}

/** The parts of `deno task bench`, in the order it runs them. */
const PARTS: Readonly<Record<string, () => void | Promise<void>>> = {
  kernel() {
    console.log("kernel (64 actors, 1,000 balls in flight, 4 M messages):");
    console.log(
      `  messages delivered   ${(best(3, () => kernelMessagesPerSec(64, 1000, 4000)) / 1e6).toFixed(2)} M/s`,
    );
  },
  fifo: () => policyBench("fifo", 500_000),
  fleet: () => fleetBench(),
  peer: peerBench,
  batching: () => policyBench("batching", 200_000),
  disaggregated: () => disaggregatedBench(200_000),
  trace: traceBench,
  "replay-1m": millionBench,
  "memory-fifo": () => memoryBench("fifo"),
  "memory-batching": () => memoryBench("batching"),
  plugin: () => pluginBench(200_000),
  "trace-gen": () => traceGenBench(1_000_000),
  serve: serveLagBench,
  gateway: () => gatewayBench(),
  stream: () => streamBench(),
  soak: () => soakBench(),
  proxy: () => proxyBench(),
  realtime: realtimeBench,
};

const HELP = `Usage: deno task bench [PART…]

Prints the speed figures: kernel messages/s, requests/s per model and policy,
the FIFO model beside the Python peer, long-prompt and 1,000,000-request
trace replay with true peak memory, the plugin sandbox's cost, the live
runtime's lag under HTTP load, the gateway's throughput and what it adds to
a stream's first event, and a soak of minutes beside idle and slow
connections (SOAK_SECONDS, default 180). Each part runs
in its own deno process; with no PART, all of them in turn.

  PART        ${Object.keys(PARTS).join(" | ")}
  -h, --help  show this help`;

/**
 * Runs each part in a fresh `deno` process: a long benchmark process carries
 * heap and JIT state from one part into the next, which here cost the FIFO
 * figures up to 20% (and peak memory is per process).
 */
/**
 * Appends the machine's 1-minute load average to every line a part prints
 * with a figure in it (a digit, not a heading ending in ":"), unless the part
 * prints it itself: on a shared machine a figure means little without it.
 */
function printLoadAverage(): void {
  const log = console.log;
  const load = () => {
    try {
      return Deno.loadavg()[0].toFixed(2);
    } catch {
      return "n/a"; // no --allow-sys=loadavg
    }
  };
  console.log = (...args: unknown[]) => {
    const line = args.map(String).join(" ");
    if (/\d/.test(line) && !/load/.test(line) && !line.trimEnd().endsWith(":")) {
      log(`${line} · load ${load()}`);
    } else log(...args);
  };
}

async function runParts(names: readonly string[]): Promise<void> {
  for (const name of names) {
    const { code } = await new Deno.Command("deno", {
      // --allow-ffi: getrusage, for the true peak memory; --allow-write=results/.bench:
      // the scratch trace; --allow-run: python3 for the peer, deno for the soak.
      args: [
        "run",
        "--no-prompt",
        "--allow-read",
        "--allow-ffi",
        "--allow-write=results/.bench",
        "--allow-run=python3,deno,nginx", // the peer; the soak's serve; the proxy floor
        "--allow-net=127.0.0.1", // the serve, gateway, stream and soak parts, on loopback
        "--allow-env=SOAK_SECONDS,SOAK_QUIET",
        "--allow-sys=loadavg", // the peer part prints the load average beside each figure
        "--v8-flags=--max-semi-space-size=4", // as the run and sweep tasks (design.md, "Performance")
        fileURLToPath(import.meta.url),
        "--part",
        name,
      ],
      cwd: fileURLToPath(new URL("../", import.meta.url)),
      stdout: "inherit",
      stderr: "inherit",
    }).output();
    if (code !== 0) {
      console.error(`bench: part ${name} failed (exit ${code})`);
      Deno.exit(1);
    }
  }
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values, positionals } = parseFlags(Deno.args, {
      part: { type: "string" },
      help: { type: "boolean", short: "h" },
    }, true);
    if (values.help) return console.log(HELP);
    for (const name of [...positionals, ...(values.part === undefined ? [] : [values.part])]) {
      if (!Object.hasOwn(PARTS, name)) {
        throw new UsageError(`unknown bench part "${name}": expected ${Object.keys(PARTS).join(" | ")}`);
      }
    }
    if (values.part !== undefined) {
      printLoadAverage();
      return await PARTS[values.part]();
    }
    await runParts(positionals.length > 0 ? positionals : Object.keys(PARTS));
  });
}
