/**
 * Validates the kernel against queueing theory (REFERENCE §5): with no prefix
 * sharing and random routing, c identical instances fed a Poisson stream are c
 * independent M/M/1 (exponential service) or M/D/1 (constant service) queues.
 */
import { assertAlmostEquals } from "@std/assert";
import { simulate } from "../actors/simulation.ts";
import { scenario } from "./_scenarios.ts";

const SERVICE_MS = 100; // μ = 10 per second per instance
const INSTANCES = 4;

function measuredWaitMs(serviceTime: "deterministic" | "exponential", rho: number, requests: number): number {
  const result = simulate(scenario({
    seed: 11,
    policy: { name: "random" },
    instances: {
      count: INSTANCES,
      overheadMs: 0,
      prefillMsPerToken: 1,
      decodeMsPerToken: 0,
      serviceTime,
      cacheCapacity: 0,
    },
    workload: {
      requests,
      ratePerSec: INSTANCES * rho * (1000 / SERVICE_MS),
      prefix: { groups: 1, zipf: 0, sharedFrac: 0, tokens: 0 },
      suffixTokens: { dist: "constant", value: SERVICE_MS },
      outputTokens: { dist: "constant", value: 0 },
    },
  }));
  return result.queueWaitMeanMs!;
}

const mu = 1000 / SERVICE_MS;
/** M/M/1: Wq = ρ / (μ − λ), in ms. */
const mm1WaitMs = (rho: number) => (rho / (mu - rho * mu)) * 1000;
/** M/D/1 (Pollaczek–Khinchine): Wq = ρ / (2μ(1 − ρ)), in ms. */
const md1WaitMs = (rho: number) => (rho / (2 * mu * (1 - rho))) * 1000;

// Requests are sized so the standard error of the mean wait is about 1%
// (the M/M/1 wait's relaxation time grows like 1/(1−ρ)²), making 3% a fair bound.
const CASES = [
  { model: "M/M/1", serviceTime: "exponential", rho: 0.5, requests: 500_000, theory: mm1WaitMs(0.5) },
  { model: "M/M/1", serviceTime: "exponential", rho: 0.8, requests: 2_000_000, theory: mm1WaitMs(0.8) },
  { model: "M/D/1", serviceTime: "deterministic", rho: 0.5, requests: 500_000, theory: md1WaitMs(0.5) },
  { model: "M/D/1", serviceTime: "deterministic", rho: 0.8, requests: 2_000_000, theory: md1WaitMs(0.8) },
] as const;

for (const c of CASES) {
  Deno.test(`random routing over ${INSTANCES} instances gives the ${c.model} mean queue wait at ρ=${c.rho} within 3%`, () => {
    const measured = measuredWaitMs(c.serviceTime, c.rho, c.requests);
    assertAlmostEquals(
      measured,
      c.theory,
      c.theory * 0.03,
      `measured ${measured.toFixed(2)} ms, theory ${c.theory.toFixed(2)} ms`,
    );
  });
}
