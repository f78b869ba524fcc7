import { assert, assertEquals, assertThrows } from "@std/assert";
import { ApproximateCacheView, ExactCacheView } from "../actors/router/cache_view.ts";
import type { RoutingPolicy } from "../actors/policies/policy.ts";
import type { MetricsCommand, RequestFailed, RouterCommand, ServeCommand } from "../actors/protocol.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import {
  arrive,
  availableRoundRobin,
  request,
  type RouterFleet,
  routerFleet,
  serves,
} from "./_router_fleet.ts";
import { status } from "./_status.ts";

type AttemptFailed = Extract<MetricsCommand, { type: "attempt_failed" }>;

/** The failed attempts the router reported, as `[request, instance, reason, attempt, final]`. */
function failures(fleet: RouterFleet): [number, number, string, number, boolean][] {
  return fleet.metrics.ofType("attempt_failed").map(({ message: m }: { message: AttemptFailed }) => [
    m.requestId,
    m.instance,
    m.reason,
    m.attempt,
    m.final,
  ]);
}

/** The lowest-numbered available instance: only the view's availability moves it. */
const firstAvailable: RoutingPolicy = {
  name: "first_available",
  choose: (_request, view) => Array.prototype.indexOf.call(view.available, 1),
};

Deno.test("a failed attempt is retried at once elsewhere as attempt 1, and reported not final", () => {
  const fleet = routerFleet(firstAvailable, {}, { reportFailures: true, delayMs: 2 });
  fleet.instances[0].refuse = "crash";
  arrive(fleet, request(7, -1, undefined, 5));
  fleet.kernel.run();
  // Sent to 0 at 5, the failure is back at 7, retried on 1 at once.
  assertEquals(serves(fleet), [[5, 0, 7, 0, undefined], [7, 1, 7, 1, undefined]]);
  assertEquals(failures(fleet), [[7, 0, "crash", 0, false]]);
  const notice = fleet.metrics.ofType("attempt_failed")[0];
  assertEquals([notice.timeMs, notice.message.timeMs, notice.message.arrivalMs], [7, 7, 5]);
  // Instance 0 is unavailable until it reports; 1 came back with its reports.
  assertEquals([...fleet.router.view.available], [0, 1, 1]);
  assertEquals(fleet.router.view.availableCount, 2);
});

Deno.test("a request whose retries are spent is failed, final", async (t) => {
  for (const budget of [0, 1, 2]) {
    await t.step(`retry budget ${budget}`, () => {
      const fleet = routerFleet(availableRoundRobin(), { retryBudget: budget }, { reportFailures: true });
      for (const instance of fleet.instances) instance.refuse = "unreachable";
      arrive(fleet, request(3));
      fleet.kernel.run();
      const expected: [number, number, string, number, boolean][] = [];
      for (let a = 0; a <= budget; a++) expected.push([3, a, "unreachable", a, a === budget]);
      assertEquals(failures(fleet), expected);
      assertEquals(serves(fleet).map((s) => [s[1], s[3]]), expected.map((e) => [e[1], e[3]]));
    });
  }
});

Deno.test("with every instance unavailable a request fails at once as no_instance, without asking the policy", () => {
  let asked = 0;
  const inner = availableRoundRobin();
  const policy: RoutingPolicy = {
    name: "counting",
    choose: (r, v, rnd) => (asked++, inner.choose(r, v, rnd)),
  };
  const fleet = routerFleet(policy, { initiallyAvailable: 0 }, { reportFailures: true });
  assertEquals([fleet.router.view.availableCount, ...fleet.router.view.available], [0, 0, 0, 0]);
  arrive(fleet, request(1, -1, undefined, 1));
  fleet.kernel.run();
  assertEquals([asked, serves(fleet).length], [0, 0]);
  assertEquals(failures(fleet), [[1, -1, "no_instance", 0, true]]);
  // An instance that reports (provisioned) becomes available, and is routed to.
  fleet.kernel.send<RouterCommand>(fleet.ref, status(2), 0);
  arrive(fleet, request(2, -1, undefined, 3));
  fleet.kernel.run();
  assertEquals([asked, serves(fleet)], [1, [[3, 2, 2, 0, undefined]]]);
});

Deno.test("a retry with no instance left fails as no_instance on its own attempt", () => {
  const fleet = routerFleet(availableRoundRobin(), { initiallyAvailable: 1, retryBudget: 3 }, {
    reportFailures: true,
  });
  fleet.instances[0].refuse = "crash";
  arrive(fleet, request(4));
  fleet.kernel.run();
  assertEquals(failures(fleet), [[4, 0, "crash", 0, false], [4, -1, "no_instance", 1, true]]);
});

Deno.test("failures go unreported without a metrics actor, and nothing else changes", () => {
  const fleet = routerFleet(availableRoundRobin(), {}, { reportFailures: false });
  fleet.instances[0].refuse = "crash";
  arrive(fleet, request(1));
  fleet.kernel.run();
  assertEquals(fleet.metrics.received.length, 0);
  assertEquals(serves(fleet).map((s) => [s[1], s[3]]), [[0, 0], [1, 1]]);
});

Deno.test("a failed request leaves the in-flight count of the replica that routed it at once", () => {
  const fleet = routerFleet(availableRoundRobin(), { replicas: { count: 2, spread: "session" } }, {
    instances: 2,
    serviceMs: 100,
  });
  const failed: RequestFailed = {
    type: "request_failed",
    command: { type: "serve", request: request(1), replyTo: fleet.ref, replica: 1 },
    instance: 0,
    reason: "crash",
  };
  const [r0, r1] = fleet.router.replicaViews();
  r1.routed(0, request(1));
  fleet.kernel.send<RouterCommand>(fleet.ref, failed);
  fleet.kernel.run({ untilMs: 0 });
  assertEquals([r0.inFlight[0], r1.inFlight[0], r0.available[0], r1.available[0]], [0, 0, 1, 0]);
  // The retry went to instance 1, through replica 1.
  assertEquals(serves(fleet), [[0, 1, 1, 1, 1]]);
  assertEquals([r1.inFlight[1], r0.inFlight[1]], [1, 0]);
});

Deno.test("draining instances are unavailable until they report without draining", () => {
  const fleet = routerFleet(availableRoundRobin(), {}, { reportFailures: true });
  const view = fleet.router.view;
  fleet.kernel.send<RouterCommand>(fleet.ref, status(1, { draining: true }));
  fleet.kernel.run();
  assertEquals([...view.available], [1, 0, 1]);
  fleet.kernel.send<RouterCommand>(fleet.ref, status(1));
  fleet.kernel.run();
  assertEquals([...view.available], [1, 1, 1]);
  // A request refused for draining marks the instance down too, and is retried.
  fleet.instances[0].refuse = "draining";
  arrive(fleet, request(9, -1, undefined, 1));
  fleet.kernel.run({ untilMs: 1 });
  assertEquals([...view.available], [0, 1, 1]);
  assertEquals(failures(fleet), [[9, 0, "draining", 0, false]]);
});

Deno.test("a restarted instance's cache is forgotten by the view, and only that instance's", async (t) => {
  await t.step("exact view", () => {
    const fleet = routerFleet(availableRoundRobin(), { cacheView: new ExactCacheView(3, "groups") });
    fleet.kernel.send<RouterCommand>(fleet.ref, status(0, { cacheAdded: 5 }));
    fleet.kernel.send<RouterCommand>(fleet.ref, status(0, { cacheAdded: 6 }));
    fleet.kernel.send<RouterCommand>(fleet.ref, status(1, { cacheAdded: 5 }));
    fleet.kernel.run();
    const view = fleet.router.view;
    assertEquals([view.holds(0, 5), view.holds(0, 6), view.holds(1, 5)], [true, true, true]);
    fleet.kernel.send<RouterCommand>(fleet.ref, status(0, { restarted: true }));
    fleet.kernel.run();
    assertEquals([view.holds(0, 5), view.holds(0, 6), view.holds(1, 5)], [false, false, true]);
    // What it caches after its restart, it reports as ever.
    fleet.kernel.send<RouterCommand>(fleet.ref, status(0, { restarted: true, cacheAdded: 6 }));
    fleet.kernel.run();
    assertEquals([view.holds(0, 5), view.holds(0, 6)], [false, true]);
  });
  await t.step("exact view of blocks", () => {
    const cacheView = new ExactCacheView(2, "blocks");
    const fleet = routerFleet(availableRoundRobin(), { cacheView, cacheUnit: "blocks" }, { instances: 2 });
    fleet.kernel.send<RouterCommand>(fleet.ref, status(0, { cachedRuns: [11, 2] }));
    fleet.kernel.send<RouterCommand>(fleet.ref, status(1, { cachedRuns: [11, 3] }));
    fleet.kernel.send<RouterCommand>(fleet.ref, status(0, { restarted: true }));
    fleet.kernel.run();
    assertEquals([cacheView.runsOf(0), cacheView.runsOf(1)], [new Map(), new Map([[11, 3]])]);
  });
  await t.step("approximate view", () => {
    const fleet = routerFleet(availableRoundRobin(), { cacheView: new ApproximateCacheView(3, "groups", 4) });
    arrive(fleet, request(0, 5));
    arrive(fleet, request(1, 5));
    fleet.kernel.run();
    const view = fleet.router.view;
    assertEquals([view.holds(0, 5), view.holds(1, 5)], [true, true]);
    fleet.kernel.send<RouterCommand>(fleet.ref, status(0, { restarted: true }));
    fleet.kernel.run();
    assertEquals([view.holds(0, 5), view.holds(1, 5)], [false, true]);
    // The forgotten instance's index still works, with its capacity.
    for (let g = 10; g < 20; g++) view.cacheView.routed(0, request(0, g), { count: 0 } as never);
    assertEquals([10, 15, 16, 19].map((g) => view.holds(0, g)), [false, false, true, true]);
  });
});

/** Three instances, 0 silent from the start; arrivals every 10 ms for 1 s; TTL 100 ms. */
function silentInstanceRun(): RouterFleet {
  const fleet = routerFleet(availableRoundRobin(), { statusTtlMs: 100 }, {
    reportFailures: true,
    serviceMs: 5,
    delayMs: 1,
  });
  fleet.instances[0].silent = true;
  for (let id = 0; id < 100; id++) arrive(fleet, request(id, -1, undefined, id * 10));
  return fleet;
}

Deno.test("with a status TTL, a silent instance is not routed to once its last report is older than the TTL", () => {
  const fleet = silentInstanceRun();
  fleet.kernel.run({ untilMs: 1000 });
  const toSilent = serves(fleet).filter((s) => s[1] === 0).map((s) => s[0]);
  // Routed to while the TTL since probing began (at 0) has not run out; never after.
  assert(toSilent.length >= 3, `${toSilent}`);
  assert(toSilent.every((t) => t <= 100), `${toSilent}`);
  assert(serves(fleet).filter((s) => s[0] > 100).length > 80);
  // The others answered every probe (every 50 ms) and stayed available.
  assertEquals([...fleet.router.view.available], [0, 1, 1]);
  for (const instance of fleet.instances) {
    assert(Math.abs(instance.probes - 20) <= 1, `${instance.probes} probes`);
  }
  assertEquals(fleet.router.view.lastHeardMs[0], 0);
  // Its swallowed requests are still in flight as far as the router knows; nothing failed.
  assertEquals(fleet.router.view.inFlight[0], toSilent.length);
  assertEquals(failures(fleet), []);
});

Deno.test("a silent instance is routed to again once it reports", () => {
  const fleet = silentInstanceRun();
  fleet.kernel.run({ untilMs: 500 });
  fleet.instances[0].silent = false;
  fleet.kernel.run();
  const after = serves(fleet).filter((s) => s[1] === 0 && s[0] > 500);
  // Its answer to the next probe (at 550, back at 551) brings it back.
  assert(after.length > 10, `${after.length}`);
  assert(after[0][0] > 550 && after[0][0] <= 570, `${after[0]}`);
});

Deno.test("probes never keep a run alive: it ends with only background timers pending", () => {
  const fleet = silentInstanceRun();
  fleet.kernel.run();
  assertEquals(fleet.kernel.liveCount, 0);
  assert(fleet.kernel.pendingCount >= 1);
  // The last arrival is at 990 and its request done by 997: probing stopped with the run.
  assert(fleet.kernel.nowMs < 1060, `${fleet.kernel.nowMs}`);
  assertEquals(fleet.kernel.nextTimeMs(), Infinity);
});

Deno.test("no probe goes out without a status TTL, nor before the first arrival", () => {
  const none = routerFleet(availableRoundRobin());
  for (let id = 0; id < 20; id++) arrive(none, request(id, -1, undefined, id * 10));
  none.kernel.run();
  assertEquals(none.instances.map((i) => i.probes), [0, 0, 0]);
  const idle = routerFleet(availableRoundRobin(), { statusTtlMs: 10 });
  idle.kernel.send<RouterCommand>(idle.ref, status(0), 100);
  idle.kernel.run();
  assertEquals(idle.instances.map((i) => i.probes), [0, 0, 0]);
});

Deno.test("a policy's choice of an unavailable instance is obeyed", () => {
  const fleet = routerFleet({ name: "stubborn", choose: () => 0 }, {}, { reportFailures: true });
  fleet.instances[0].draining = true; // it reports draining, yet serves (the fake does not refuse)
  fleet.kernel.send<RouterCommand>(fleet.ref, status(0, { draining: true }));
  arrive(fleet, request(1));
  fleet.kernel.run();
  assertEquals(fleet.router.view.available[0], 0);
  assertEquals(serves(fleet), [[0, 0, 1, 0, undefined]]);
});

Deno.test("a request failure reaching a disaggregated router fails the run", () => {
  const policy = availableRoundRobin();
  const fleet = routerFleet(policy, {
    disaggregation: {
      prefill: { members: [0], policy, table: {} },
      decode: { members: [1, 2], policy, table: {} },
      flow: "prefill-first",
      localPrefillTokens: 0,
    },
  });
  const command: ServeCommand = { type: "serve", request: request(1), replyTo: fleet.ref };
  fleet.kernel.send<RouterCommand>(fleet.ref, {
    type: "request_failed",
    command,
    instance: 0,
    reason: "crash",
  });
  const error = assertThrows(() => fleet.kernel.run(), SimulationError);
  assertEquals(error.kind, "invariant_broken");
});
