/**
 * @module
 * Runs sweep runs on a pool of Deno Workers, one run per message, and returns
 * the results by run index — so the output never depends on which worker ran
 * what, or how many there were.
 */
import type { RunResult, SimulationConfig } from "../actors/simulation.ts";

/** One run for the pool: a config and, optionally, a router plugin replacing its policy. */
export interface PoolTask {
  readonly config: SimulationConfig;
  readonly pluginUrl?: string;
}
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import type { WorkerReply } from "./sweep_worker.ts";

/** Options for {@linkcode runOnWorkers}. */
export interface WorkerPoolOptions {
  /** Number of Workers. @default navigator.hardwareConcurrency */
  readonly workers?: number;
  /** Called after each finished run with the count done, its result and its index. */
  readonly onProgress?: (done: number, result: RunResult, index: number) => void;
  /** Aborting terminates every Worker and rejects. */
  readonly signal?: AbortSignal;
}

/**
 * Simulates every config; `results[i]` belongs to `configs[i]`.
 * @throws {SimulationError} from the first run that fails (all Workers are terminated).
 */
export function runOnWorkers(
  configs: readonly PoolTask[],
  options: WorkerPoolOptions = {},
): Promise<RunResult[]> {
  const size = Math.max(1, Math.min(options.workers ?? navigator.hardwareConcurrency, configs.length));
  const results = new Array<RunResult>(configs.length);
  const workers: Worker[] = [];
  let next = 0, done = 0;
  return new Promise<RunResult[]>((resolve, reject) => {
    const finish = (error?: Error) => {
      for (const w of workers) w.terminate();
      options.signal?.removeEventListener("abort", onAbort);
      if (error) reject(error);
      else resolve(results);
    };
    const onAbort = () => finish(new DOMException("sweep interrupted", "AbortError"));
    options.signal?.addEventListener("abort", onAbort);
    if (configs.length === 0) return finish();
    for (let w = 0; w < size; w++) {
      const worker = new Worker(new URL("./sweep_worker.ts", import.meta.url), { type: "module" });
      workers.push(worker);
      const feed = () => {
        if (next < configs.length) {
          const id = next++;
          worker.postMessage({ id, ...configs[id] });
        }
      };
      worker.onmessage = (event: MessageEvent<WorkerReply>) => {
        const reply = event.data;
        if ("error" in reply) {
          return finish(new SimulationError("actor_threw", `run ${reply.id}: ${reply.error}`));
        }
        results[reply.id] = reply.result;
        done++;
        options.onProgress?.(done, reply.result, reply.id);
        if (done === configs.length) finish();
        else feed();
      };
      worker.onerror = (event) => {
        event.preventDefault();
        finish(new SimulationError("actor_threw", `sweep worker crashed: ${event.message}`));
      };
      feed();
      feed(); // keep one run queued per worker so it never idles between messages
    }
  });
}
