/**
 * @module
 * The over-the-wire parts of `deno task bench` (scenarios/bench.ts): whether
 * the live runtime keeps real time under load (`serve`), and how many
 * requests per second the gateway alone passes through (`gateway`).
 * Loopback only.
 */
import type { SimulationConfig } from "../../actors/topology.ts";
import { parseScenario } from "../scenario.ts";
import { runScenario } from "../run_scenario.ts";
import { systemWallTime } from "../wall_time.ts";
import { startGateway } from "./gateway.ts";
import { runLoad } from "./load_generator.ts";
import { startSimFleet } from "./sim_server.ts";

/** A gateway on loopback in front of `upstreams`, at real time, with `deno task serve`'s defaults. */
function loopbackGateway(config: SimulationConfig, upstreams: readonly string[]) {
  return startGateway({
    config,
    upstreams,
    host: "127.0.0.1",
    port: 0,
    speed: 1,
    wallTime: systemWallTime,
    maxBodyBytes: 1 << 20,
    scrapeMs: 200,
    upstreamTimeoutMs: 60_000,
    onFatal: (line) => console.error(line),
  });
}

/**
 * `serve`: 8 batching instances behind the gateway, at 50 requests/s of the
 * synthetic workload in real time (speed 1) for 20 s, the load generator in
 * this process too: the fleet's delivery lag (target p99 < 50 ms), the
 * generator's own send lag, and what the clients measured.
 */
export async function serveLagBench(): Promise<void> {
  const config = parseScenario({
    policy: { name: "prefix_aware" },
    router: { cacheView: "approximate" },
    instances: { count: 8, model: "batching" },
    workload: { requests: 1000, ratePerSec: 50 },
  });
  const fleet = await startSimFleet({
    config,
    speed: 1,
    host: "127.0.0.1",
    servedModelName: "sim",
    maxBodyBytes: 1 << 20,
    maxModelLen: 32768,
    wallTime: systemWallTime,
  });
  const gateway = await loopbackGateway(config, fleet.urls);
  const start = performance.now();
  try {
    const result = await runLoad({
      url: gateway.url,
      config,
      speed: 1,
      endpoint: "completion",
      model: "sim",
      nonce: 1,
      requestTimeoutMs: 60_000,
      wallTime: systemWallTime,
    });
    const lag = fleet.lagStats();
    // The gateway's load is a 200 ms scrape: `run` with status as stale.
    const sim = runScenario({ ...config, router: { ...config.router, statusIntervalMs: 200 } });
    const f = (ms: number | null) => ms === null ? "n/a" : `${ms.toFixed(1)} ms`;
    console.log("serve: 8 batching instances behind the gateway, 50 requests/s, speed 1, 1,000 requests:");
    console.log(
      `  fleet delivery lag   p50 ${f(lag.p50Ms)}, p99 ${f(lag.p99Ms)}, max ${f(lag.maxMs)} ` +
        `over ${lag.deliveries} deliveries (target p99 < 50 ms)`,
    );
    console.log(
      `  load generator       sent ${result.load.sent} in ${
        ((performance.now() - start) / 1000).toFixed(1)
      } s, ` +
        `send lag p99 ${
          f(result.load.sendLagP99Ms)
        }; completed ${result.completed}, failed ${result.failed}, ` +
        `dropped ${result.dropped}`,
    );
    console.log(
      `  clients measured     TTFT mean ${f(result.ttftMeanMs)}, p99 ${f(result.ttftP99Ms)}, ` +
        `token hit rate ${result.tokenHitRate?.toFixed(3) ?? "n/a"}`,
    );
    console.log(
      `  deno task run        TTFT mean ${f(sim.ttftMeanMs)}, p99 ${f(sim.ttftP99Ms)}, ` +
        `token hit rate ${
          sim.tokenHitRate?.toFixed(3) ?? "n/a"
        } (the same scenario, virtual clock, status every 200 ms)`,
    );
  } finally {
    await gateway.close(1000);
    await fleet.close(1000);
  }
}

/** A trivial upstream: every completion answered at once with a fixed body, and an empty /metrics. */
function trivialUpstream(): Deno.HttpServer<Deno.NetAddr> {
  const body = JSON.stringify({
    id: "cmpl-0",
    object: "text_completion",
    created: 0,
    model: "sim",
    choices: [{ index: 0, text: " ok", logprobs: null, finish_reason: "length" }],
    usage: {
      prompt_tokens: 8,
      completion_tokens: 1,
      total_tokens: 9,
      prompt_tokens_details: { cached_tokens: 0 },
    },
  });
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (request) => {
    const path = new URL(request.url).pathname;
    if (path === "/metrics") {
      return new Response("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n");
    }
    return new Response(body, { headers: { "content-type": "application/json" } });
  });
}

/**
 * `gateway`: requests/s through the gateway alone (prefix_aware, a built-in
 * router on this thread) to two trivial upstreams, 64 clients at a time,
 * non-streaming; and the same straight to an upstream, for the HTTP floor.
 */
export async function gatewayBench(requests = 20_000, clients = 64): Promise<void> {
  const upstreams = [trivialUpstream(), trivialUpstream()];
  const config = parseScenario({ policy: { name: "prefix_aware" }, router: { cacheView: "approximate" } });
  const gateway = await loopbackGateway(config, upstreams.map((u) => `http://127.0.0.1:${u.addr.port}`));
  try {
    const prompt = Array.from({ length: 64 }, (_, i) => `w${i}`).join(" ");
    const body = JSON.stringify({ model: "sim", prompt, max_tokens: 1 });
    const through = async (url: string) => {
      let next = 0, failed = 0;
      const start = performance.now();
      await Promise.all(Array.from({ length: clients }, async () => {
        while (next++ < requests) {
          const response = await fetch(`${url}/v1/completions`, { method: "POST", body });
          if (!response.ok) failed++;
          await response.arrayBuffer();
        }
      }));
      return { perSec: requests / ((performance.now() - start) / 1000), failed };
    };
    await through(gateway.url); // warm-up
    const direct = await through(`http://127.0.0.1:${upstreams[0].addr.port}`);
    const routed = await through(gateway.url);
    console.log(`gateway (prefix_aware, 2 trivial upstreams, ${clients} clients, ${requests} requests):`);
    console.log(
      `  through the gateway  ${(routed.perSec / 1e3).toFixed(2)}k requests/s (${routed.failed} failed)`,
    );
    console.log(`  straight upstream    ${(direct.perSec / 1e3).toFixed(2)}k requests/s (the HTTP floor)`);
  } finally {
    await gateway.close(1000);
    await Promise.all(upstreams.map((u) => u.shutdown()));
  }
}
