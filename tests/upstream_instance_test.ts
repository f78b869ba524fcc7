/**
 * The gateway's stand-in for an upstream (actors/instances/upstream_instance.ts) and
 * its metrics actor (actors/metrics/gateway_metrics.ts), in a virtual kernel with a
 * fake host — alone, and behind the real router with its retries and TTL.
 */
import { assert, assertEquals } from "@std/assert";
import { GatewayMetrics, type GatewayMetricsCommand } from "../actors/metrics/gateway_metrics.ts";
import type { FailedReason } from "../actors/metrics/metrics_collector.ts";
import { createPolicy } from "../actors/policies/mod.ts";
import type { InstanceStatus, Request, RouterCommand, ServeCommand } from "../actors/protocol.ts";
import { Router } from "../actors/router/router.ts";
import { type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { type UpstreamCommand, UpstreamInstance } from "../actors/instances/upstream_instance.ts";
import { Recorder } from "./_recorder.ts";

/** A host that records what it is asked to forward. */
class FakeHost {
  readonly forwarded: { index: number; command: ServeCommand }[] = [];
  forward(index: number, command: ServeCommand): void {
    this.forwarded.push({ index, command });
  }
}

function req(id: number, over: Partial<Request> = {}): Request {
  return { id, arrivalMs: 0, prefixGroup: -1, prefixTokens: 0, suffixTokens: 40, outputTokens: 5, ...over };
}

/** One upstream with a recording router and metrics. */
function harness(scrapeFailures?: number) {
  const kernel = new Kernel({ seed: 1 });
  const host = new FakeHost();
  const router = new Recorder<RouterCommand>();
  const metrics = new Recorder<GatewayMetricsCommand>();
  const routerRef = kernel.spawn("router", router);
  const metricsRef = kernel.spawn("metrics", metrics);
  const upstream = new UpstreamInstance(0, host, {
    metrics: metricsRef,
    ...(scrapeFailures !== undefined && { scrapeFailures }),
  });
  const ref: ActorRef<UpstreamCommand> = kernel.spawn("upstream/0", upstream);
  upstream.reportTo(routerRef);
  const serve = (request: Request, replica?: number): ServeCommand => ({
    type: "serve",
    request,
    replyTo: routerRef,
    ...(replica !== undefined && { replica }),
  });
  return { kernel, host, router, metrics, upstream, ref, routerRef, serve };
}

Deno.test("an upstream tells a router that counts per request which requests began and finished, once each", () => {
  const kernel = new Kernel({ seed: 1 });
  const router = new Recorder<RouterCommand>();
  const metrics = new Recorder<GatewayMetricsCommand>();
  const routerRef = kernel.spawn("router", router);
  const upstream = new UpstreamInstance(0, new FakeHost(), {
    metrics: kernel.spawn("metrics", metrics),
    requestEvents: true,
  });
  const ref: ActorRef<UpstreamCommand> = kernel.spawn("upstream/0", upstream);
  upstream.reportTo(routerRef);
  for (const id of [1, 2]) kernel.send(ref, { type: "serve", request: req(id), replyTo: routerRef });
  kernel.send(ref, { type: "upstream_first_token", requestId: 1 }, 10);
  kernel.send(ref, {
    type: "upstream_finished",
    requestId: 1,
    promptTokens: 40,
    cachedTokens: 0,
    outputTokens: 5,
  }, 20);
  kernel.send(ref, { type: "upstream_first_token", requestId: 2 }, 30);
  kernel.send(ref, { type: "upstream_ended", requestId: 2, outcome: "cancelled" }, 40);
  kernel.run();
  const reports = router.ofType("status").map((
    r,
  ) => [r.timeMs, r.message.prefilledIds, r.message.finishedIds]);
  assertEquals(reports, [[10, [1], undefined], [20, undefined, [1]], [30, [2], undefined], [40, undefined, [
    2,
  ]]]);
});

Deno.test("an upstream forwards a serve and turns first token and finish into a completion record and a report", () => {
  const h = harness();
  h.kernel.send(h.ref, h.serve(req(7, { arrivalMs: 0 })), 5);
  h.kernel.run();
  assertEquals(h.host.forwarded.map((f) => [f.index, f.command.request.id]), [[0, 7]]);
  assertEquals(h.upstream.inFlight, 1);
  h.kernel.send(h.ref, { type: "upstream_first_token", requestId: 7 }, 20);
  h.kernel.send(h.ref, { type: "upstream_first_token", requestId: 7 }, 30); // only the first counts
  h.kernel.send(h.ref, {
    type: "upstream_finished",
    requestId: 7,
    promptTokens: 40,
    cachedTokens: 32,
    outputTokens: 5,
  }, 60);
  h.kernel.run();
  const [done] = h.metrics.ofType("completed");
  assertEquals(done.message.record, {
    requestId: 7,
    instance: 0,
    arrivalMs: 0,
    startMs: 5,
    firstTokenMs: 25,
    endMs: 65,
    promptTokens: 40,
    cachedTokens: 32,
    outputTokens: 5,
  });
  const reports = h.router.ofType("status");
  assertEquals(reports.length, 1);
  assertEquals(reports[0].message.finished, 1);
  assertEquals(reports[0].message.running, 0); // no scrape yet: its own in flight
  assertEquals(h.upstream.inFlight, 0);
});

Deno.test("a failure before the first byte goes back as request_failed (unreachable), counted finished", async (t) => {
  for (const cause of ["connection", "answer", "timeout"] as const) {
    await t.step(
      `${cause}: ${cause === "connection" ? "a draining report" : "a report: routable again"}`,
      () => {
        const h = harness();
        const command = h.serve(req(3));
        h.kernel.send(h.ref, command);
        h.kernel.send(h.ref, { type: "upstream_failed", requestId: 3, cause }, 10);
        h.kernel.send(h.ref, { type: "upstream_failed", requestId: 3, cause }, 11); // a late duplicate is ignored
        h.kernel.run();
        const failures = h.router.ofType("request_failed");
        assertEquals(failures.length, 1);
        assertEquals(failures[0].message.reason, "unreachable");
        assertEquals(failures[0].message.instance, 0);
        assertEquals(failures[0].message.command.request.id, 3);
        // The report follows the failure (the router places the retry first), once.
        const kinds = h.router.received.map((r) => r.message.type);
        assertEquals(kinds, ["request_failed", "status"]);
        const [report] = h.router.ofType("status");
        assertEquals(report.message.draining, cause === "connection" ? true : undefined);
        assertEquals(report.message.finished, 1);
        assertEquals(h.upstream.alive, cause !== "connection");
        assertEquals(h.upstream.finished, 1);
        assertEquals(h.metrics.received.length, 0);
      },
    );
  }
});

Deno.test("an end after bytes went out (cancelled, broken, rejected) is counted and reported, never retried", () => {
  const h = harness();
  for (const id of [1, 2, 3]) h.kernel.send(h.ref, h.serve(req(id)));
  h.kernel.send(h.ref, { type: "upstream_ended", requestId: 1, outcome: "cancelled" }, 5);
  h.kernel.send(h.ref, { type: "upstream_ended", requestId: 2, outcome: "broken" }, 6);
  h.kernel.send(h.ref, { type: "upstream_ended", requestId: 3, outcome: "rejected" }, 7);
  h.kernel.run();
  assertEquals(h.metrics.ofType("request_ended").map((r) => r.message.outcome), [
    "cancelled",
    "broken",
    "rejected",
  ]);
  assertEquals(h.router.ofType("request_failed").length, 0);
  assertEquals(h.router.ofType("status").map((r) => r.message.finished), [1, 2, 3]);
});

Deno.test("a scrape reports the upstream's load; a refused one reports it draining once; a good one brings it back", () => {
  const h = harness();
  h.kernel.send(h.ref, { type: "upstream_scraped", load: { running: 3, waiting: 2, kvUsage: 0.25 } }, 1);
  h.kernel.send(h.ref, { type: "upstream_scrape_failed", cause: "connection" }, 2);
  h.kernel.send(h.ref, { type: "upstream_scrape_failed", cause: "connection" }, 3);
  h.kernel.send(h.ref, { type: "upstream_scraped", load: null }, 4);
  h.kernel.run();
  const reports = h.router.ofType("status").map((r) => r.message);
  assertEquals(reports.length, 3);
  assertEquals([reports[0].waiting, reports[0].running, reports[0].queued, reports[0].kvUtilization], [
    2,
    3,
    2,
    0.25,
  ]);
  assertEquals(reports[0].draining, undefined);
  assertEquals(reports[1].draining, true);
  assertEquals(reports[2].draining, undefined);
  assertEquals([reports[2].waiting, reports[2].running, reports[2].kvUtilization], [0, 0, 0]);
});

Deno.test("timed-out or 5xx scrapes drain an upstream only after scrapeFailures in a row with no sign of life", () => {
  const h = harness(3);
  const failed = (cause: "timeout" | "answer") => ({ type: "upstream_scrape_failed", cause }) as const;
  h.kernel.send(h.ref, failed("timeout"), 1);
  h.kernel.send(h.ref, failed("answer"), 2);
  // A first token is a sign of life: the count starts again.
  h.kernel.send(h.ref, h.serve(req(1)), 3);
  h.kernel.send(h.ref, { type: "upstream_first_token", requestId: 1 }, 4);
  h.kernel.send(h.ref, failed("timeout"), 5);
  h.kernel.send(h.ref, failed("timeout"), 6);
  h.kernel.send(h.ref, failed("timeout"), 7); // the third in a row
  h.kernel.send(h.ref, failed("timeout"), 8);
  // The request in flight finishing proves it alive again.
  h.kernel.send(h.ref, {
    type: "upstream_finished",
    requestId: 1,
    promptTokens: 40,
    cachedTokens: 0,
    outputTokens: 5,
  }, 9);
  h.kernel.run({ untilMs: 6 });
  assertEquals([h.upstream.alive, h.upstream.failedScrapes], [true, 2]);
  assertEquals(h.router.ofType("status").length, 0); // no change, no report
  h.kernel.run({ untilMs: 8 });
  assertEquals(h.upstream.alive, false);
  assertEquals(h.router.ofType("status").map((r) => [r.timeMs, r.message.draining]), [[7, true]]);
  h.kernel.run();
  assertEquals([h.upstream.alive, h.upstream.failedScrapes], [true, 0]);
  assertEquals(h.router.ofType("status").at(-1)!.message.draining, undefined);
});

Deno.test("a probe is answered while the upstream is alive, however old its last scrape, and not while it is down", () => {
  const h = harness();
  const probe = { type: "probe", replyTo: h.routerRef as ActorRef<InstanceStatus> } as const;
  h.kernel.send(h.ref, probe, 0); // alive until shown otherwise: answered
  h.kernel.send(h.ref, { type: "upstream_scraped", load: null }, 100);
  h.kernel.send(h.ref, { type: "upstream_scrape_failed", cause: "timeout" }, 5000);
  h.kernel.send(h.ref, probe, 60_000); // a minute after the last good scrape: answered
  h.kernel.send(h.ref, { type: "upstream_scrape_failed", cause: "connection" }, 60_100);
  h.kernel.send(h.ref, probe, 60_200); // refused: silent
  h.kernel.run();
  const times = h.router.ofType("status").map((r) => r.timeMs);
  assertEquals(times, [0, 100, 60_000, 60_100]);
});

Deno.test("an end after bytes went out marks health by its cause: a broken connection drains, a 4xx is a sign of life", () => {
  const h = harness(1);
  for (const id of [1, 2, 3]) h.kernel.send(h.ref, h.serve(req(id)));
  h.kernel.send(h.ref, { type: "upstream_scrape_failed", cause: "timeout" }, 1); // threshold 1: down
  h.kernel.send(h.ref, { type: "upstream_ended", requestId: 1, outcome: "rejected" }, 2); // its 4xx: alive
  h.kernel.send(h.ref, { type: "upstream_ended", requestId: 2, outcome: "broken", cause: "connection" }, 3);
  h.kernel.send(h.ref, { type: "upstream_ended", requestId: 3, outcome: "cancelled" }, 4); // the client's doing
  h.kernel.run();
  assertEquals(h.router.ofType("status").map((r) => [r.timeMs, r.message.draining ?? false]), [
    [1, true],
    [2, false],
    [3, true],
    [4, true],
  ]);
});

Deno.test("per-replica finished counts follow the serves' replicas", () => {
  const h = harness();
  h.kernel.send(h.ref, h.serve(req(1), 0));
  h.kernel.send(h.ref, h.serve(req(2), 2));
  h.kernel.send(h.ref, { type: "upstream_ended", requestId: 2, outcome: "cancelled" }, 1);
  h.kernel.send(h.ref, { type: "upstream_failed", requestId: 1, cause: "connection" }, 2);
  h.kernel.send(h.ref, { type: "upstream_scraped", load: null }, 3);
  h.kernel.run();
  const last = h.router.ofType("status").at(-1)!.message;
  assertEquals(last.finished, 2);
  assertEquals(last.finishedBy, [1, 0, 1]);
});

/** Upstreams behind the real router, with the gateway's metrics actor; the host fails what `fails` says. */
function fleet(count: number, retryBudget: number) {
  const kernel = new Kernel({ seed: 3 });
  const host = new FakeHost();
  const finalFailures: { requestId: number; reason: FailedReason }[] = [];
  const gm = new GatewayMetrics(count, {
    requestFailed: (requestId, reason) => finalFailures.push({ requestId, reason }),
  });
  const metrics = kernel.spawn("metrics", gm);
  const upstreams = Array.from(
    { length: count },
    (_, i) => new UpstreamInstance(i, host, { metrics }),
  );
  const refs = upstreams.map((u, i) => kernel.spawn(`upstream/${i}`, u));
  const router = new Router(refs as ActorRef<ServeCommand>[], createPolicy({ name: "round_robin" }), {
    statusTtlMs: 2000,
    retryBudget,
    metrics,
  });
  const routerRef = kernel.spawn("router", router);
  for (const u of upstreams) u.reportTo(routerRef);
  return { kernel, host, gm, refs, routerRef, finalFailures, upstreams };
}

Deno.test("behind the router: a failed attempt is retried on another upstream, and a final failure reaches the host", () => {
  const f = fleet(3, 1);
  for (const ref of f.refs) f.kernel.send(ref, { type: "upstream_scraped", load: null });
  f.kernel.send(f.routerRef, { type: "route", request: req(1) }, 1);
  f.kernel.run({ untilMs: 2 });
  assertEquals(f.host.forwarded.length, 1);
  const first = f.host.forwarded[0];
  f.kernel.send(f.refs[first.index], { type: "upstream_failed", requestId: 1, cause: "answer" });
  f.kernel.run({ untilMs: 3 });
  assertEquals(f.host.forwarded.length, 2);
  const retry = f.host.forwarded[1];
  assert(retry.index !== first.index, `retried on the same upstream ${retry.index}`);
  assertEquals(retry.command.attempt, 1);
  f.kernel.send(f.refs[retry.index], { type: "upstream_failed", requestId: 1, cause: "timeout" });
  f.kernel.run({ untilMs: 4 });
  assertEquals(f.host.forwarded.length, 2); // budget 1: no third attempt
  assertEquals(f.finalFailures, [{ requestId: 1, reason: "unreachable" }]);
  const summary = f.gm.collector.summary();
  assertEquals([summary.failed, summary.retried], [1, 1]);
});

Deno.test("behind the router: a refused upstream is skipped at once; one whose scrapes go stale past the TTL is not", () => {
  const f = fleet(2, 1);
  f.kernel.send(f.refs[0], { type: "upstream_scraped", load: null });
  f.kernel.send(f.refs[1], { type: "upstream_scraped", load: null });
  f.kernel.send(f.refs[1], { type: "upstream_scrape_failed", cause: "connection" }, 1);
  for (let i = 0; i < 4; i++) f.kernel.send(f.routerRef, { type: "route", request: req(i) }, 2 + i);
  f.kernel.run({ untilMs: 10 });
  assertEquals(f.host.forwarded.map((x) => x.index), [0, 0, 0, 0]);
  // Both scraped once more at 90 ms; then only upstream 1 answers its scrapes, and 0's time out
  // (twice in a row, under the default 3): its load is stale for seconds, longer than the 2 s TTL.
  f.kernel.send(f.refs[0], { type: "upstream_scraped", load: null }, 90);
  f.kernel.send(f.refs[1], { type: "upstream_scraped", load: null }, 90);
  f.kernel.send(f.refs[0], { type: "upstream_scrape_failed", cause: "timeout" }, 1500);
  f.kernel.send(f.refs[0], { type: "upstream_scrape_failed", cause: "timeout" }, 3500);
  for (let t = 500; t < 5000; t += 500) {
    f.kernel.send(f.refs[1], { type: "upstream_scraped", load: null }, t - 10);
  }
  // Probes (every TTL / 2) are answered while it is alive: round robin keeps using both.
  for (let i = 4; i < 8; i++) f.kernel.send(f.routerRef, { type: "route", request: req(i) }, 4400 + i);
  f.kernel.run({ untilMs: 4500 });
  assertEquals(f.host.forwarded.slice(4).map((x) => x.index).sort(), [0, 0, 1, 1]);
  assertEquals(f.upstreams[0].failedScrapes, 2);
});

Deno.test("the gateway's metrics count completions per upstream with their tokens, and ends by outcome", () => {
  const f = fleet(2, 1);
  for (const ref of f.refs) f.kernel.send(ref, { type: "upstream_scraped", load: null });
  for (let i = 0; i < 4; i++) f.kernel.send(f.routerRef, { type: "route", request: req(i) }, 1);
  f.kernel.run({ untilMs: 2 });
  for (const { index, command } of f.host.forwarded) {
    const id = command.request.id;
    const event = id === 3 ? { type: "upstream_ended", requestId: id, outcome: "cancelled" } as const : {
      type: "upstream_finished",
      requestId: id,
      promptTokens: 40,
      cachedTokens: 10 * id,
      outputTokens: 5,
    } as const;
    f.kernel.send(f.refs[index], event, 5);
  }
  f.kernel.run({ untilMs: 20 });
  const per = f.gm.perUpstream();
  assertEquals(per.map((p) => p.completed).reduce((a, b) => a + b), 3);
  assertEquals(per.map((p) => p.cachedTokens).reduce((a, b) => a + b), 30);
  assertEquals(f.gm.ended(), { cancelled: 1, broken: 0, rejected: 0 });
  assertEquals(f.gm.collector.summary().completed, 3);
});
