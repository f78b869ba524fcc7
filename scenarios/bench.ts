/**
 * @module
 * `deno task bench`: the speed figures of issue 2, on one thread — kernel
 * messages delivered per second, and requests simulated per second on the
 * default scenario for each policy. Best of several repetitions after warm-up.
 */
import { type Actor, type ActorContext, type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { POLICY_NAMES } from "../actors/policies/mod.ts";
import { simulate } from "../actors/simulation.ts";
import { fileURLToPath } from "node:url";
import { parseFlags, runCommand } from "./command_line.ts";
import { parseScenario } from "./scenario.ts";
import { UsageError } from "./usage_error.ts";
import { loadRouterPlugin } from "./router_plugin.ts";
import { runPluginScenario } from "./run.ts";

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

/** Peak resident memory of this process, MB (Linux's VmHWM; current RSS elsewhere). */
function peakRssMb(): number {
  try {
    const status = Deno.readTextFileSync("/proc/self/status");
    const kb = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1]);
    if (Number.isFinite(kb)) return kb / 1024;
  } catch {
    // not Linux
  }
  return Deno.memoryUsage().rss / 2 ** 20;
}

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
      `peak memory ${peakRssMb().toFixed(0)} MB (completed ${r.completed})`,
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

/** The parts of `deno task bench`, in the order it runs them. */
const PARTS: Readonly<Record<string, () => void | Promise<void>>> = {
  kernel() {
    console.log("kernel (64 actors, 1,000 balls in flight, 4 M messages):");
    console.log(
      `  messages delivered   ${(best(3, () => kernelMessagesPerSec(64, 1000, 4000)) / 1e6).toFixed(2)} M/s`,
    );
  },
  fifo: () => policyBench("fifo", 500_000),
  batching: () => policyBench("batching", 200_000),
  "memory-fifo": () => memoryBench("fifo"),
  "memory-batching": () => memoryBench("batching"),
  plugin: () => pluginBench(200_000),
};

const HELP = `Usage: deno task bench [PART…]

Prints the speed figures: kernel messages/s, requests/s per model and policy,
peak memory, the plugin sandbox's cost. Each part runs in its own deno
process; with no PART, all of them in turn.

  PART        ${Object.keys(PARTS).join(" | ")}
  -h, --help  show this help`;

/**
 * Runs each part in a fresh `deno` process: a long benchmark process carries
 * heap and JIT state from one part into the next, which here cost the FIFO
 * figures up to 20% (and peak memory is per process).
 */
async function runParts(names: readonly string[]): Promise<void> {
  for (const name of names) {
    const { code } = await new Deno.Command("deno", {
      args: ["run", "--no-prompt", "--allow-read", fileURLToPath(import.meta.url), "--part", name],
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
    if (values.part !== undefined) return await PARTS[values.part]();
    await runParts(positionals.length > 0 ? positionals : Object.keys(PARTS));
  });
}
