/** The real-time mode: parity with the virtual run, plugins, and faults. */
import {
  assert,
  assertAlmostEquals,
  assertEquals,
  assertGreater,
  assertLess,
  assertRejects,
  assertStringIncludes,
  assertThrows,
} from "@std/assert";
import { simulateRealtime } from "../actors/realtime_simulation.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { TraceFormatError } from "../actors/traces/trace_reader.ts";
import { type RunResult, simulate } from "../actors/simulation.ts";
import { systemWallTime } from "../scenarios/cli/wall_time.ts";
import { scenario } from "./_scenarios.ts";

const short = scenario({ workload: { requests: 300, ratePerSec: 50, prefix: { zipf: 2, sharedFrac: 0.9 } } });
const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).href;
const PROBE = new URL("./fixtures/realtime_probe.ts", import.meta.url).pathname;

/**
 * A virtual run's result as a real-time run reports it: actors in Workers give
 * the router no god's-eye view of the caches, so the metrics that need one are
 * null (never 0); everything else, the view's own expectation included, is equal.
 */
const withoutFleetView = (r: RunResult): RunResult => ({
  ...r,
  availableTokenHitRate: null,
  routingRegret: null,
  viewFalsePositiveRate: null,
});

Deno.test("realtime and virtual runs of one scenario and seed agree (hit within 0.02, TTFT within 10%; in fact exactly)", async () => {
  const virtual = simulate(short);
  const realtime = await simulateRealtime(short, { speed: 20, wallTime: systemWallTime });
  assertEquals([realtime.requests, realtime.completed, realtime.inFlight], [300, 300, 0]);
  assertAlmostEquals(realtime.hitRate!, virtual.hitRate!, 0.02);
  assertAlmostEquals(realtime.ttftMeanMs!, virtual.ttftMeanMs!, virtual.ttftMeanMs! * 0.1);
  assertGreater(realtime.lag.deliveries, 1000);
  // Conservative delivery (answers applied in delivery order) keeps the virtual kernel's order: every metric is identical.
  const { lag: _lag, speed: _speed, ...metrics } = realtime;
  assertEquals(metrics, withoutFleetView(virtual));
  // hybrid consults the view: its expectation is measured in both modes, checked against the caches only in one.
  assertGreater(realtime.expectedTokenHitRate!, 0);
  assertGreater(virtual.availableTokenHitRate!, 0);
  assertEquals(virtual.viewFalsePositiveRate, 0);
});

Deno.test("realtime runs a disaggregated fleet, both flows, identical to the virtual run", async () => {
  for (const pdFlow of ["prefill-first", "decode-first"] as const) {
    const split = scenario({
      router: { pdFlow },
      instances: { model: "batching", pools: [{ role: "prefill", count: 1 }, { role: "decode", count: 2 }] },
      decodePolicy: { name: "least_load" },
      workload: { requests: 150, ratePerSec: 40 },
    });
    const virtual = simulate(split);
    assert(virtual.kvTransferMeanMs! > 0);
    const { lag: _lag, speed: _speed, ...metrics } = await simulateRealtime(split, {
      speed: 50,
      wallTime: systemWallTime,
    });
    assertEquals(metrics, withoutFleetView(virtual));
  }
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
  // Every metric agrees; only the message count differs: the virtual run pulls its instances'
  // reports (design.md, "Reports pulled, not pushed"), the Workers send each one.
  assertEquals({ ...metrics, messages: 0 }, { ...withoutFleetView(virtual), messages: 0 });
  assertLess(virtual.messages, metrics.messages);
});

Deno.test("64 instances pooled in a few Workers keep exact parity with the virtual run", async () => {
  const many = scenario({
    instances: { count: 64 },
    workload: { requests: 400, ratePerSec: 200, prefix: { zipf: 1, sharedFrac: 0.5 } },
  });
  const virtual = simulate(many);
  const { lag: _lag, speed: _speed, ...metrics } = await simulateRealtime(many, {
    speed: 50,
    wallTime: systemWallTime,
  });
  assertEquals(metrics, withoutFleetView(virtual));
});

Deno.test("the example plugin runs unchanged in the virtual and the realtime modes, its name reported from its Worker", async () => {
  const url = new URL("../scenarios/plugins/cache_with_slack.ts", import.meta.url).href;
  // The test imports the (trusted) example itself for the virtual run; the realtime run imports it only in the router's Worker.
  const virtual = simulate(short, { policy: (await import(url)).default });
  const realtime = await simulateRealtime(short, { speed: 20, wallTime: systemWallTime, pluginUrl: url });
  assertEquals([virtual.policy, realtime.policy], ["cache_with_slack", "cache_with_slack"]);
  assertAlmostEquals(realtime.hitRate!, virtual.hitRate!, 0.02);
  assertAlmostEquals(realtime.ttftMeanMs!, virtual.ttftMeanMs!, virtual.ttftMeanMs! * 0.1);
});

const faults: [file: string, kind: string, includes: string][] = [
  ["plugin_throws.ts", "actor_threw", "plugin exploded"],
  ["plugin_bad_instance.ts", "invalid_choice", "returned 7"],
  ["plugin_crashes_worker.ts", "worker_crashed", "asynchronous crash"],
  ["hostile/exit_in_choose.ts", "actor_threw", "Deno.exit"],
  ["hostile/read_in_choose.ts", "actor_threw", 'NotCapable: Requires read access to "/etc/hostname"'],
];
for (const [file, kind, includes] of faults) {
  Deno.test(`a plugin fault (${file}) fails the realtime run with ${kind}, naming plugin, message and time`, async () => {
    const error = await assertRejects(
      () => simulateRealtime(short, { speed: 50, wallTime: systemWallTime, pluginUrl: fixture(file) }),
      SimulationError,
      includes,
    );
    assertEquals(error.kind, kind);
    assert(error.actor?.startsWith(`router (plugin ${file.split("/").pop()})`), `actor: ${error.actor}`);
    if (kind !== "worker_crashed") assertEquals(error.messageType, "route");
    assert(typeof error.timeMs === "number" && error.timeMs > 0, `timeMs: ${error.timeMs}`);
  });
}

/** How a realtime run with `file` as its plugin failed, run in a process of its own (a spinning Worker cannot be stopped). */
async function probe(file: string, pluginTimeoutMs: number) {
  const out = await new Deno.Command("deno", {
    args: ["run", "--allow-read", "--unstable-worker-options", PROBE, fixture(file), String(pluginTimeoutMs)],
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  assertEquals(out.code, 0, new TextDecoder().decode(out.stderr));
  return JSON.parse(new TextDecoder().decode(out.stdout));
}

Deno.test("a plugin that loops at its top level fails with plugin_timeout while loading, naming the plugin", async () => {
  const failure = await probe("hostile/loop_at_load.ts", 300);
  assertEquals([failure.simulationError, failure.kind], [true, "plugin_timeout"]);
  assertEquals(failure.actor, "router (plugin loop_at_load.ts)");
  assertStringIncludes(
    failure.message,
    "plugin loop_at_load.ts timed out while loading: not ready within 300 ms",
  );
});

Deno.test("a plugin that loops in choose fails with plugin_timeout naming the request and the virtual time", async () => {
  // 2 s, not 300 ms: the timeout bounds the plugin's loading too, which took over 300 ms on a
  // loaded machine (the run then failed while loading, before any request).
  const failure = await probe("plugin_never_returns.ts", 2000);
  assertEquals([failure.simulationError, failure.kind], [true, "plugin_timeout"]);
  assertEquals([failure.actor, failure.messageType], ["router (plugin plugin_never_returns.ts)", "route"]);
  assertStringIncludes(failure.message, "did not answer routing request 0 within 2000 ms of wall time");
  assert(failure.timeMs > 0, `timeMs: ${failure.timeMs}`);
  assertStringIncludes(failure.message, `at t=${failure.timeMs.toFixed(3)} ms`);
});

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

Deno.test("realtime: a malformed trace read in the source's Worker fails the run as in-process, its error class kept", async () => {
  const path = new URL("./fixtures/mooncake_malformed.jsonl", import.meta.url).pathname;
  const config = scenario({
    instances: { model: "batching" },
    workload: { trace: { path, format: "mooncake" } },
  });
  const inProcess = assertThrows(() => simulate(config), SimulationError);
  const error = await assertRejects(
    () => simulateRealtime(config, { speed: 1000, wallTime: systemWallTime }),
    SimulationError,
  );
  assertEquals(error.kind, inProcess.kind);
  assert(error.cause instanceof TraceFormatError, `cause: ${error.cause}`);
  assertEquals((error.cause as TraceFormatError).message, (inProcess.cause as TraceFormatError).message);
  assertEquals([error.cause.file, error.cause.line], [path, 7]);
});

Deno.test("realtime: stopped early while reports run late, it counts what is in flight as the virtual run does", async () => {
  for (const router of [{ networkDelayMs: 50 }, { statusIntervalMs: 100 }]) {
    const config = scenario({
      policy: { name: "least_load" },
      router,
      workload: { requests: 2000, ratePerSec: 100 },
      untilMs: 3000,
    });
    const virtual = simulate(config);
    const realtime = await simulateRealtime(config, { speed: 200, wallTime: systemWallTime });
    assertGreater(virtual.inFlight, 0);
    assertEquals(
      [realtime.requests, realtime.completed, realtime.dropped, realtime.inFlight],
      [virtual.requests, virtual.completed, virtual.dropped, virtual.inFlight],
      JSON.stringify(router),
    );
  }
});

Deno.test("realtime keeps exact parity when the router's replicas hear reports late (its declared lookahead)", async () => {
  // A report to the router then schedules a late copy 3 ms on: the router's lookahead for it is 3 ms, not Infinity.
  const config = scenario({
    policy: { name: "least_load" },
    router: { replicas: 2, replicaDelaysMs: [0, 3] },
    workload: { requests: 300, ratePerSec: 80 },
  });
  const virtual = simulate(config);
  const { lag: _lag, speed: _speed, ...metrics } = await simulateRealtime(config, {
    speed: 50,
    wallTime: systemWallTime,
  });
  assertEquals(metrics, withoutFleetView(virtual));
});

Deno.test("realtime keeps exact parity with faults and an autoscaler, local actors that send taking their turn", async () => {
  const config = scenario({
    policy: { name: "least_load" },
    instances: { count: 3 },
    workload: { requests: 400, ratePerSec: 60 },
    faults: [{ instance: 1, kind: "crash", atMs: 1500, forMs: 1000 }],
    autoscale: { min: 2, max: 5, provisionMs: 500, target: 4, intervalMs: 250, cooldownMs: 1000 },
  });
  const virtual = simulate(config);
  assertGreater(virtual.scaling!.length, 0);
  const { lag: _lag, speed: _speed, ...metrics } = await simulateRealtime(config, {
    speed: 50,
    wallTime: systemWallTime,
  });
  assertEquals(metrics, withoutFleetView(virtual));
});
