/**
 * The whole path on loopback: the load generator → the gateway (the router
 * actor) → four simulated instances over HTTP, against `deno task run` on
 * the same scenario; and an upstream killed mid-run.
 */
import { assert, assertEquals } from "@std/assert";
import { runLoad } from "../scenarios/wire/load_generator.ts";
import { runScenario } from "../scenarios/workers/run_scenario.ts";
import { systemWallTime } from "../scenarios/cli/wall_time.ts";
import type { SimulationConfig } from "../actors/topology.ts";
import { scenario } from "./_scenarios.ts";
import { loopbackFleet, loopbackGateway } from "./_wire.ts";
import { transportMs } from "./_transport.ts";

/**
 * 300 requests at 25/s of simulated time over 4 batching instances (a 70B
 * model: mean TTFT ≈ 130 ms, so the few ms HTTP adds stay small beside it;
 * little queueing, which would amplify small routing differences),
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
      ratePerSec: 25,
      prefix: { groups: 20, zipf: 1.2, sharedFrac: 0.8, tokens: 1024 },
      suffixTokens: { dist: "exponential", mean: 512 },
      outputTokens: { dist: "constant", value: 24 },
    },
    ...overrides,
  });
}

/** A fleet of the scenario's instances and a gateway scraping them every 200 ms of simulated time. */
async function fleetAndGateway(config: SimulationConfig, speed: number) {
  const fleet = await loopbackFleet(config, speed);
  const fatal: string[] = [];
  const front = await loopbackGateway(config, fleet.urls, speed, {
    scrapeMs: 200 / speed,
    onFatal: (line) => fatal.push(line),
  });
  return { fleet, gateway: front, fatal };
}

Deno.test("gateway + 4 simulated instances + load generator agree with deno task run", async () => {
  const config = wireScenario();
  // Real time: the HTTP hops (≈ 3 ms of wall time each way) count once, not twice.
  const speed = 1;
  // What the path itself adds on this machine now, measured before and after (no absolute allowance).
  const transport = [await transportMs(config)];
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
    transport.push(await transportMs(config));
    // The wire may add the path's measured cost to the simulator's TTFT, and differ by 10% beside it.
    const excess = wire.ttftMeanMs! - sim.ttftMeanMs!, slack = 0.1 * sim.ttftMeanMs!;
    assert(
      excess >= -slack && excess <= slack + Math.max(...transport),
      `mean TTFT ${wire.ttftMeanMs} ms over the wire, ${sim.ttftMeanMs} ms in run; ` +
        `the path alone costs ${transport.map((t) => t.toFixed(1)).join(" then ")} ms`,
    );
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
  const { fleet, gateway: front } = await fleetAndGateway(config, speed);
  // A second fleet of one instance, killed (closed at once, streams cut) mid-run.
  const victim = await loopbackFleet({ ...config, instances: { ...config.instances, count: 1 } }, speed);
  const mixed = await loopbackGateway(
    { ...config, policy: { name: "round_robin" } },
    [...fleet.urls.slice(0, 2), victim.urls[0]],
    speed,
    { upstreamTimeoutMs: 5_000 },
  );
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
    await front.close(1000);
    await fleet.close(1000);
    await victim.close(0);
  }
});

Deno.test("an instance's full queue reaches the client as its 503 queue_full: a drop, not retried, not held against it", async () => {
  const config = scenario({
    policy: { name: "round_robin" },
    instances: { count: 2, overheadMs: 50, decodeMsPerToken: 1, maxQueue: 1 },
  });
  const fleet = await loopbackFleet(config, 1);
  const front = await loopbackGateway(config, fleet.urls, 1);
  try {
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        fetch(`${front.url}/v1/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "sim", prompt: `burst ${i}`, max_tokens: 4, ignore_eos: true }),
        }).then(async (r) => ({ status: r.status, body: await r.json() }))),
    );
    const full = answers.filter((a) => a.status === 503);
    assertEquals(answers.filter((a) => a.status !== 200 && a.status !== 503), []);
    assert(full.length >= 4, `${full.length} of 12 refused with a queue of 1 on 2 instances`);
    for (const a of full) assertEquals(a.body.error.code, "queue_full");
    const metrics = await (await fetch(`${front.url}/metrics`)).text();
    assert(/^gateway_retries_total 0(\.0)?$/m.test(metrics), "a full queue is not retried");
    assertEquals(metrics.match(/^gateway_upstream_up\{[^}]*\} 1(\.0)?$/gm)?.length, 2);
  } finally {
    await front.close(1000);
    await fleet.close(1000);
  }
});
