/**
 * The whole path on loopback: the load generator → the gateway (the router
 * actor) → four simulated instances over HTTP, against `deno task run` on
 * the same scenario; and an upstream killed mid-run.
 */
import { assert, assertEquals } from "@std/assert";
import { startSimFleet } from "../scenarios/wire/sim_server.ts";
import { startGateway } from "../scenarios/wire/gateway.ts";
import { runLoad } from "../scenarios/wire/load_generator.ts";
import { runScenario } from "../scenarios/run_scenario.ts";
import { systemWallTime } from "../scenarios/wall_time.ts";
import type { SimulationConfig } from "../actors/topology.ts";
import { scenario } from "./_scenarios.ts";

/**
 * 300 requests at 40/s of simulated time over 4 batching instances (a 70B
 * model: mean TTFT ≈ 150 ms, so the few ms HTTP adds stay small beside it),
 * prefix-aware routing on an approximate view.
 */
function wireScenario(overrides: Record<string, unknown> = {}): SimulationConfig {
  return scenario({
    seed: 7,
    policy: { name: "prefix_aware" },
    // The gateway reads load from a /metrics scrape every 200 ms: `run` gets status as often.
    router: { cacheView: "approximate", statusIntervalMs: 200 },
    instances: { count: 4, model: "batching", engine: { preset: "llama-3.3-70b-tp4" } },
    workload: {
      requests: 300,
      ratePerSec: 40,
      prefix: { groups: 20, zipf: 1.2, sharedFrac: 0.8, tokens: 1024 },
      suffixTokens: { dist: "exponential", mean: 512 },
      outputTokens: { dist: "constant", value: 24 },
    },
    ...overrides,
  });
}

/** A fleet of the scenario's instances and a gateway scraping them every 200 ms of simulated time. */
async function fleetAndGateway(config: SimulationConfig, speed: number) {
  const fleet = await startSimFleet({
    config,
    speed,
    host: "127.0.0.1",
    servedModelName: "sim",
    maxBodyBytes: 1 << 20,
    maxModelLen: 32768,
    wallTime: systemWallTime,
  });
  const fatal: string[] = [];
  const gateway = await startGateway({
    config,
    upstreams: fleet.urls,
    host: "127.0.0.1",
    port: 0,
    speed,
    wallTime: systemWallTime,
    maxBodyBytes: 1 << 20,
    scrapeMs: 200 / speed,
    upstreamTimeoutMs: 10_000,
    onFatal: (line) => fatal.push(line),
  });
  return { fleet, gateway, fatal };
}

Deno.test("gateway + 4 simulated instances + load generator agree with deno task run", async () => {
  const config = wireScenario();
  // Real time: the HTTP hops (≈ 3 ms of wall time each way) count once, not twice.
  const speed = 1;
  const { fleet, gateway, fatal } = await fleetAndGateway(config, speed);
  try {
    const wire = await runLoad({
      url: gateway.url,
      config,
      speed,
      endpoint: "completion",
      model: "sim",
      nonce: 1,
      requestTimeoutMs: 20_000,
      wallTime: systemWallTime,
    });
    const sim = runScenario(config);
    // Every request accounted for.
    assertEquals(wire.requests, 300);
    assertEquals(wire.completed + wire.dropped + wire.failed, 300);
    assertEquals(wire.failed, 0);
    assertEquals(wire.completed, sim.completed);
    assertEquals(fatal, []);
    const hitGap = Math.abs(wire.tokenHitRate! - sim.tokenHitRate!);
    assert(hitGap <= 0.03, `token hit rate ${wire.tokenHitRate} over the wire, ${sim.tokenHitRate} in run`);
    const ttftGap = Math.abs(wire.ttftMeanMs! - sim.ttftMeanMs!) / sim.ttftMeanMs!;
    assert(ttftGap <= 0.15, `mean TTFT ${wire.ttftMeanMs} ms over the wire, ${sim.ttftMeanMs} ms in run`);
  } finally {
    await gateway.close(1000);
    await fleet.close(1000);
  }
});

Deno.test("an upstream killed mid-run: its requests are retried or fail with an error, and nothing hangs", async () => {
  const config = wireScenario({
    workload: { requests: 160, ratePerSec: 40, outputTokens: { dist: "constant", value: 40 } },
  });
  const speed = 2;
  const { fleet, gateway } = await fleetAndGateway(config, speed);
  // A second fleet of one instance, killed (closed at once, streams cut) mid-run.
  const victim = await startSimFleet({
    config: { ...config, instances: { ...config.instances, count: 1 } },
    speed,
    host: "127.0.0.1",
    servedModelName: "sim",
    maxBodyBytes: 1 << 20,
    maxModelLen: 32768,
    wallTime: systemWallTime,
  });
  const mixed = await startGateway({
    config: { ...config, policy: { name: "round_robin" } },
    upstreams: [...fleet.urls.slice(0, 2), victim.urls[0]],
    host: "127.0.0.1",
    port: 0,
    speed,
    wallTime: systemWallTime,
    maxBodyBytes: 1 << 20,
    scrapeMs: 100,
    upstreamTimeoutMs: 5_000,
    onFatal: () => {},
  });
  try {
    const killer = setTimeout(() => victim.close(0), 1000);
    const result = await runLoad({
      url: mixed.url,
      config,
      speed,
      endpoint: "completion",
      model: "sim",
      nonce: 2,
      requestTimeoutMs: 15_000,
      wallTime: systemWallTime,
    });
    clearTimeout(killer);
    assertEquals(result.requests, 160);
    assertEquals(result.completed + result.dropped + result.failed, 160);
    assert(result.completed >= 100, `only ${result.completed} completed`);
    // Those cut mid-stream fail with an error (no timeout: nothing hung).
    assertEquals(result.load.failedBy["timeout"] ?? 0, 0);
  } finally {
    await mixed.close(1000);
    await gateway.close(1000);
    await fleet.close(1000);
    await victim.close(0);
  }
});
