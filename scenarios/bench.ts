/**
 * @module
 * `deno task bench`: the speed figures of issue 2, on one thread — kernel
 * messages delivered per second, and requests simulated per second on the
 * default scenario for each policy. Best of several repetitions after warm-up.
 */
import { type Actor, type ActorContext, type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { POLICY_NAMES } from "../actors/policies/mod.ts";
import { simulate } from "../actors/simulation.ts";
import { parseScenario } from "./scenario.ts";

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

// Each part runs in its own process (`deno task bench` chains them): a long
// benchmark process carries heap and JIT state from one part into the next,
// which here cost the FIFO figures up to 20%.
if (import.meta.main) {
  switch (Deno.args[0]) {
    case "kernel":
      console.log("kernel (64 actors, 1,000 balls in flight, 4 M messages):");
      console.log(
        `  messages delivered   ${
          (best(3, () => kernelMessagesPerSec(64, 1000, 4000)) / 1e6).toFixed(2)
        } M/s`,
      );
      break;
    case "fifo":
      policyBench("fifo", 500_000);
      break;
    case "batching":
      policyBench("batching", 200_000);
      break;
    case "--memory":
      memoryBench(Deno.args[1] === "fifo" ? "fifo" : "batching");
      break;
    default:
      console.error(
        "usage: bench.ts kernel | fifo | batching | --memory fifo|batching (deno task bench runs them all)",
      );
      Deno.exit(2);
  }
}
