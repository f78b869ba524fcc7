import { assert, assertAlmostEquals, assertEquals } from "@std/assert";
import type { RouteCommand } from "../actors/protocol.ts";
import { Kernel } from "../actors/runtime/kernel.ts";
import { type WorkloadOptions, WorkloadSource } from "../actors/workload/workload_source.ts";
import { Recorder } from "./_recorder.ts";

const workload = (over: Partial<WorkloadOptions> = {}): WorkloadOptions => ({
  requests: 1000,
  ratePerSec: 50,
  prefix: { groups: 10, zipf: 1, sharedFrac: 0.5, tokens: 100 },
  suffixTokens: { dist: "constant", value: 20 },
  outputTokens: { dist: "uniform", min: 5, max: 7 },
  ...over,
});

function emit(options: WorkloadOptions, seed = 1) {
  const kernel = new Kernel({ seed });
  const router = new Recorder<RouteCommand>();
  const routerRef = kernel.spawn("router", router);
  const source = new WorkloadSource(options, routerRef, 16);
  kernel.send(kernel.spawn("source", source), { type: "start" });
  kernel.run();
  return { received: router.received, source };
}

Deno.test("source sends exactly `requests` route messages, each delivered at its arrival time", () => {
  const { received, source } = emit(workload());
  assertEquals(received.length, 1000);
  assertEquals(source.emitted, 1000);
  received.forEach((r, i) => {
    assertEquals(r.message.type, "route");
    assertEquals(r.message.request.id, i);
    assertEquals(r.timeMs, r.message.request.arrivalMs);
  });
});

Deno.test("source arrivals are Poisson at ratePerSec (mean gap within 5%)", () => {
  const { received } = emit(workload({ requests: 20_000, ratePerSec: 40 }));
  const last = received[received.length - 1].timeMs;
  assertAlmostEquals(last / received.length, 25, 25 * 0.05);
});

Deno.test("source shares prefixes with probability sharedFrac and Zipf popularity", () => {
  const { received } = emit(
    workload({ requests: 20_000, prefix: { groups: 10, zipf: 1, sharedFrac: 0.3, tokens: 64 } }),
  );
  const requests = received.map((r) => r.message.request);
  const shared = requests.filter((r) => r.prefixGroup >= 0);
  assertAlmostEquals(shared.length / requests.length, 0.3, 0.015);
  // Zipf(1) over 10 groups: P(group 0) = 1 / H(10) ≈ 0.3414.
  assertAlmostEquals(shared.filter((r) => r.prefixGroup === 0).length / shared.length, 0.3414, 0.02);
  assert(requests.every((r) => r.prefixTokens === 64 && r.suffixTokens === 20));
  assert(requests.every((r) => r.outputTokens >= 5 && r.outputTokens <= 7));
});

Deno.test("source is deterministic per seed and differs across seeds", () => {
  const a = emit(workload({ requests: 50 }), 7).received.map((r) => r.message.request);
  const b = emit(workload({ requests: 50 }), 7).received.map((r) => r.message.request);
  const c = emit(workload({ requests: 50 }), 8).received.map((r) => r.message.request);
  assertEquals(a, b);
  assert(JSON.stringify(a) !== JSON.stringify(c));
});

Deno.test("sessions: each turn's prompt extends the previous turn's prompt and answer, keys included", () => {
  const { received } = emit(workload({
    requests: 400,
    ratePerSec: 5,
    prefix: { groups: 4, zipf: 1, sharedFrac: 0.5, tokens: 64 },
    suffixTokens: { dist: "uniform", min: 10, max: 40 },
    outputTokens: { dist: "uniform", min: 5, max: 30 },
    sessions: { turnsMean: 4, thinkTimeMs: 2000, keyTokens: 16 },
  }));
  const requests = received.map((r) => r.message.request);
  assert(
    requests.every((r, i) => i === 0 || r.arrivalMs >= requests[i - 1].arrivalMs),
    "arrivals in time order",
  );
  // Follow each session by its first (session-specific or group) key chain continuation.
  const byFirstTurn = new Map<number, typeof requests>();
  let extended = 0;
  for (const r of requests) {
    const previous = [...byFirstTurn.values()].find((turns) => {
      const last = turns.at(-1)!;
      return r.prefixTokens === last.prefixTokens + last.suffixTokens + last.outputTokens &&
        last.prefixKeys!.every((k, j) => r.prefixKeys![j] === k);
    });
    if (previous) {
      previous.push(r);
      extended++;
    } else byFirstTurn.set(r.id, [r]);
  }
  // Mean 4 turns per session → about 3 of every 4 requests continue a session.
  assertAlmostEquals(extended / requests.length, 0.75, 0.08);
  assert(requests.every((r) => r.prefixKeys!.length === Math.floor((r.prefixTokens + r.suffixTokens) / 16)));
});
