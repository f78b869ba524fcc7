/**
 * @module
 * `deno task bench fleet`: requests simulated per second as the fleet grows
 * from 4 to 10,000 FIFO instances, the arrival rate scaled with it (35
 * requests/s per 4 instances, the default scenario's load per instance), so
 * that a decision's cost, not the load, is what changes. Each size's figure
 * is the best of three 300,000-request runs after a warm-up, with its ratio
 * to the 4-instance figure and the machine's load average.
 */
import { simulate } from "../../actors/simulation.ts";
import { parseScenario } from "../scenario/scenario.ts";

/** Fleet sizes the part measures. */
export const FLEET_SIZES = [4, 64, 1024, 10_000] as const;

/** Requests per run: enough that building a 10,000-instance fleet is a small part of the run. */
const REQUESTS = 300_000;

/** One run's requests per second, and its messages per request. */
function measure(policy: string, instances: number): { perSec: number; messages: number } {
  const config = parseScenario({
    policy: { name: policy },
    instances: { model: "fifo", count: instances },
    workload: { requests: REQUESTS, ratePerSec: (35 * instances) / 4 },
  });
  const start = performance.now();
  const result = simulate(config);
  return {
    perSec: result.requests / ((performance.now() - start) / 1000),
    messages: result.messages / result.requests,
  };
}

const load = () => Deno.loadavg()[0].toFixed(2);

/** Prints each policy's requests/s per fleet size and its share of the 4-instance figure. */
export function fleetBench(
  policies: readonly string[] = ["hybrid", "sglang_cache_aware", "round_robin"],
): void {
  console.log(
    `\nFIFO fleets, ${
      REQUESTS.toLocaleString("en-US")
    } requests per run at 35 requests/s per 4 instances, best of 3:`,
  );
  console.log(
    "  policy                instances   requests/s   of 4 instances   msgs/request   load average",
  );
  for (const policy of policies) {
    measure(policy, 4); // warm-up
    let base = 0;
    for (const instances of FLEET_SIZES) {
      let best = 0, messages = 0;
      for (let i = 0; i < 3; i++) {
        const run = measure(policy, instances);
        best = Math.max(best, run.perSec);
        messages = run.messages;
      }
      if (instances === 4) base = best;
      console.log(
        `  ${policy.padEnd(20)}  ${String(instances).padStart(9)}   ${
          (best / 1e3).toFixed(0).padStart(6)
        } k/s   ${`${((100 * best) / base).toFixed(0)}%`.padStart(14)}   ${
          messages.toFixed(2).padStart(12)
        }   ${load().padStart(12)}`,
      );
    }
  }
}
