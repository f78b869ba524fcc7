/** The real-time mode: parity with the virtual run, plugins, and faults. */
import { assert, assertAlmostEquals, assertEquals, assertGreater, assertRejects } from "@std/assert";
import { simulateRealtime } from "../actors/realtime_simulation.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { simulate } from "../actors/simulation.ts";
import { loadRouterPlugin } from "../scenarios/router_plugin.ts";
import { systemWallTime } from "../scenarios/wall_time.ts";
import { scenario } from "./_scenarios.ts";

const short = scenario({ workload: { requests: 300, ratePerSec: 50, prefix: { zipf: 2, sharedFrac: 0.9 } } });
const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).href;

Deno.test("realtime and virtual runs of one scenario and seed agree (hit within 0.02, TTFT within 10%; in fact exactly)", async () => {
  const virtual = simulate(short);
  const realtime = await simulateRealtime(short, { speed: 20, wallTime: systemWallTime });
  assertEquals([realtime.requests, realtime.completed, realtime.inFlight], [300, 300, 0]);
  assertAlmostEquals(realtime.hitRate, virtual.hitRate, 0.02);
  assertAlmostEquals(realtime.ttftMeanMs, virtual.ttftMeanMs, virtual.ttftMeanMs * 0.1);
  assertGreater(realtime.lag.deliveries, 1000);
  // Lock-step delivery keeps the virtual kernel's order, so every metric is identical.
  const { lag: _lag, speed: _speed, ...metrics } = realtime;
  assertEquals(metrics, virtual);
});

Deno.test("realtime runs the batching model unchanged and matches the virtual run", async () => {
  const batching = scenario({
    instances: { model: "batching" },
    workload: { requests: 200, ratePerSec: 50 },
  });
  const virtual = simulate(batching);
  const { lag: _lag, speed: _speed, ...metrics } = await simulateRealtime(batching, {
    speed: 50,
    wallTime: systemWallTime,
  });
  assertEquals(metrics, virtual);
});

Deno.test("the example plugin runs unchanged in the virtual and the realtime modes", async () => {
  const plugin = await loadRouterPlugin("scenarios/plugins/cache_with_slack.ts");
  const virtual = simulate(short, { policy: plugin.policy });
  const realtime = await simulateRealtime(short, {
    speed: 20,
    wallTime: systemWallTime,
    pluginUrl: plugin.url,
    policyName: plugin.policy.name,
  });
  assertEquals([virtual.policy, realtime.policy], ["cache_with_slack", "cache_with_slack"]);
  assertAlmostEquals(realtime.hitRate, virtual.hitRate, 0.02);
  assertAlmostEquals(realtime.ttftMeanMs, virtual.ttftMeanMs, virtual.ttftMeanMs * 0.1);
});

const faults: [file: string, kind: string, includes: string][] = [
  ["plugin_throws.ts", "actor_threw", "plugin exploded"],
  ["plugin_bad_instance.ts", "invalid_choice", "returned 7"],
  ["plugin_never_returns.ts", "actor_timeout", "no answer within 500 ms"],
  ["plugin_crashes_worker.ts", "worker_crashed", "asynchronous crash"],
];
for (const [file, kind, includes] of faults) {
  Deno.test(`a plugin fault (${file}) fails the realtime run with ${kind}, naming plugin, message and time`, async () => {
    const started = performance.now();
    const error = await assertRejects(
      () =>
        simulateRealtime(short, {
          speed: 50,
          wallTime: systemWallTime,
          pluginUrl: fixture(file),
          handlerTimeoutMs: 500,
        }),
      SimulationError,
      includes,
    );
    assertEquals(error.kind, kind);
    assert(error.actor?.startsWith(`router (plugin ${file})`), `actor: ${error.actor}`);
    if (kind !== "worker_crashed") assertEquals(error.messageType, "route");
    assert(typeof error.timeMs === "number" && error.timeMs > 0, `timeMs: ${error.timeMs}`);
    assert(performance.now() - started < 10_000, "the run hung");
  });
}

Deno.test("aborting a realtime run terminates it promptly with an AbortError", async () => {
  const abort = new AbortController();
  const run = simulateRealtime(scenario({ workload: { requests: 5000 } }), {
    speed: 1,
    wallTime: systemWallTime,
    signal: abort.signal,
  });
  setTimeout(() => abort.abort(), 300);
  const error = await run.catch((e) => e);
  assert(error instanceof DOMException && error.name === "AbortError", String(error));
});
