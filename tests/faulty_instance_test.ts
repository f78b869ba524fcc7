/**
 * Instances under faults (actors/dynamics/faulty_instance.ts), the hooks the models
 * give it (probes, per-replica finished counts, slowdown), and the fault
 * injector (actors/dynamics/fault_injector.ts), each in a small kernel harness.
 */
import { assert, assertAlmostEquals, assertEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import { BatchingInstance, type BatchingInstanceOptions } from "../actors/instances/batching_instance.ts";
import { FaultInjector } from "../actors/dynamics/fault_injector.ts";
import type { Fault } from "../actors/dynamics/faults.ts";
import { FaultyInstance, type FaultyInstanceCommand } from "../actors/dynamics/faulty_instance.ts";
import type { ModelInstance } from "../actors/instances/instance_model.ts";
import type {
  CompletionRecord,
  FaultCommand,
  FaultKind,
  InstanceStatus,
  MetricsCommand,
  PrefilledCommand,
  Request,
  RequestFailed,
  ServeCommand,
} from "../actors/protocol.ts";
import { type ActorRef, Kernel, type Message } from "../actors/runtime/kernel.ts";
import { type FifoInstanceOptions, ServingInstance } from "../actors/instances/serving_instance.ts";
import { EVENT_DRIVEN, type StatusReportingOptions } from "../actors/instances/status_reporter.ts";
import { SMALL_ENGINE } from "./_engine.ts";
import { Recorder } from "./_recorder.ts";

type ModelName = "fifo" | "batching";
const MODEL_NAMES: readonly ModelName[] = ["fifo", "batching"];

/** FIFO: a 120-token prompt takes 10 + 60 = 70 ms to prefill, 8 output tokens 8 ms more. */
const fifo: FifoInstanceOptions = {
  overheadMs: 10,
  prefillMsPerToken: 0.5,
  decodeMsPerToken: 1,
  serviceTime: "deterministic",
  cacheCapacity: 4,
  maxQueue: Infinity,
};

const engine = SMALL_ENGINE;

/** A request of `model`'s usual shape: FIFO 100 + 20 prompt tokens, 8 out; batching 600 prompt tokens, 3 out. */
function req(model: ModelName, id: number, group: number, over: Partial<Request> = {}): Request {
  return model === "fifo"
    ? { id, arrivalMs: 0, prefixGroup: group, prefixTokens: 100, suffixTokens: 20, outputTokens: 8, ...over }
    : { id, arrivalMs: 0, prefixGroup: group, prefixTokens: 600, suffixTokens: 0, outputTokens: 3, ...over };
}

function build(
  model: ModelName,
  metrics: ActorRef<MetricsCommand>,
  reporting: StatusReportingOptions,
  over: Partial<BatchingInstanceOptions> = {},
): ModelInstance {
  return model === "fifo"
    ? new ServingInstance(0, fifo, metrics, reporting)
    : new BatchingInstance(0, { ...engine, ...over }, metrics, reporting);
}

interface HarnessOptions {
  readonly active?: boolean;
  readonly reporting?: StatusReportingOptions;
  /** No wrapper: the model instance itself. */
  readonly bare?: boolean;
  readonly engine?: Partial<BatchingInstanceOptions>;
}

/** One instance (wrapped unless `bare`) between a recording router and metrics collector. */
function harness(model: ModelName, options: HarnessOptions = {}) {
  const kernel = new Kernel({ seed: 1 });
  const router = new Recorder<InstanceStatus | RequestFailed | PrefilledCommand>();
  const metrics = new Recorder<MetricsCommand>();
  const prober = new Recorder<InstanceStatus>();
  const routerRef = kernel.spawn("router", router) as ActorRef<InstanceStatus>;
  const metricsRef = kernel.spawn("metrics", metrics);
  const proberRef = kernel.spawn("prober", prober);
  const reporting = options.reporting ?? EVENT_DRIVEN;
  const create = () => build(model, metricsRef, reporting, options.engine);
  const instance = options.bare
    ? create()
    : new FaultyInstance(0, create, { active: options.active, delayMs: reporting.delayMs });
  const ref = kernel.spawn("instance/0", instance as unknown as FaultyInstance) as ActorRef<
    FaultyInstanceCommand
  >;
  const send = (message: FaultyInstanceCommand, atMs: number) =>
    kernel.send(ref, message, atMs - kernel.nowMs);
  return {
    kernel,
    router,
    metrics,
    prober,
    instance,
    wrapper: instance as FaultyInstance,
    serve: (request: Request, atMs = request.arrivalMs, over: Partial<ServeCommand> = {}) =>
      send({ type: "serve", request: { ...request, arrivalMs: atMs }, replyTo: routerRef, ...over }, atMs),
    fault: (kind: FaultKind, atMs: number, factor?: number) =>
      send({ type: "fault", kind, replyTo: routerRef, ...(factor !== undefined && { factor }) }, atMs),
    recover: (kind: FaultKind, atMs: number) => send({ type: "recover", kind, replyTo: routerRef }, atMs),
    probe: (atMs: number) => send({ type: "probe", replyTo: proberRef }, atMs),
    provision: (atMs: number, readyInMs: number) =>
      send({ type: "provision", readyInMs, replyTo: routerRef }, atMs),
    decommission: (atMs: number) => send({ type: "decommission", replyTo: routerRef }, atMs),
    statuses: () => router.ofType("status"),
    failures: () => router.ofType("request_failed"),
    completed: (): CompletionRecord[] => metrics.ofType("completed").map((r) => r.message.record),
  };
}

/** [time, request id, reason] of every failure. */
const failed = (h: ReturnType<typeof harness>) =>
  h.failures().map((f) => [f.timeMs, f.message.command.request.id, f.message.reason]);

// ---- Without faults ---------------------------------------------------------

for (const model of MODEL_NAMES) {
  Deno.test(`${model}: a wrapped instance with no faults sends exactly what the bare one sends`, async (t) => {
    const reportings: Record<string, StatusReportingOptions> = {
      "on change": EVENT_DRIVEN,
      "periodic, delayed": { intervalMs: 7, delayMs: 2, blockEvents: true },
      "load signals": { intervalMs: 0, delayMs: 0, blockEvents: false, loadSignals: true },
    };
    for (const [name, reporting] of Object.entries(reportings)) {
      await t.step(name, () => {
        const runs = [true, false].map((bare) => {
          const h = harness(model, { bare, reporting });
          for (let id = 0; id < 8; id++) {
            h.serve(req(model, id, id % 3, { outputTokens: 4 + 7 * id }), 3 * id);
          }
          h.kernel.run();
          return h;
        });
        assert(runs[0].completed().length === 8);
        assertEquals(runs[1].router.received, runs[0].router.received);
        assertEquals(runs[1].metrics.received, runs[0].metrics.received);
        assertEquals(runs[1].kernel.messagesDelivered, runs[0].kernel.messagesDelivered);
      });
    }
  });
}

Deno.test("a status carries no finishedBy until a replica other than 0 sends a request, then counts per replica", () => {
  const h = harness("fifo", { bare: true });
  h.serve(req("fifo", 0, 1), 0);
  h.serve(req("fifo", 1, 1), 100, { replica: 2 });
  h.serve(req("fifo", 2, 1), 200, { replica: 0 });
  h.kernel.run();
  const reports = h.statuses().map((s) => [s.timeMs, s.message.finished, s.message.finishedBy]);
  assertEquals(reports, [
    [0, 0, undefined],
    [78, 1, undefined],
    [100, 1, [1, 0, 0]],
    [128, 2, [1, 0, 1]], // a cache hit: 10 + 0.5 × 20 ms of prefill
    [200, 2, [1, 0, 1]],
    [228, 3, [2, 0, 1]],
  ]);
  assert(!("finishedBy" in h.statuses()[1].message), "a one-replica status has no finishedBy key");
});

Deno.test("batching: drops, completions and handed-off prefills count for the replica that sent them", () => {
  const h = harness("batching", { bare: true, engine: { kvBlocks: 40 } });
  h.serve(req("batching", 0, -1, { suffixTokens: 1000, prefixTokens: 0 }), 0, { replica: 1 }); // too long
  h.serve(req("batching", 1, 3, { prefixTokens: 100 }), 1, { replica: 3, leg: { phase: "prefill" } });
  h.serve(req("batching", 2, 4, { prefixTokens: 100 }), 2, { replica: 0 });
  h.kernel.run();
  assertEquals(h.metrics.ofType("dropped").map((d) => d.message.requestId), [0]);
  const prefilled = h.router.ofType("prefilled");
  assertEquals(prefilled.map((p) => [p.message.request.id, p.message.replica]), [[1, 3]]);
  // The held prefill is let go of by its decode instance's pull; until then it is not finished.
  assertEquals(h.statuses().at(-1)!.message.finishedBy, [1, 1, 0, 0]);
});

Deno.test("a probe is answered at once with the current counts, after the network delay, and leaves the reports as they were", () => {
  const reporting: StatusReportingOptions = { intervalMs: 50, delayMs: 3, blockEvents: false };
  const runs = [false, true].map((probing) => {
    const h = harness("fifo", { bare: true, reporting });
    h.serve(req("fifo", 0, 1), 0);
    h.serve(req("fifo", 1, 2), 1);
    if (probing) {
      h.probe(5);
      h.probe(120);
    }
    h.kernel.run();
    return h;
  });
  assertEquals(
    runs[1].prober.received.map((r) => [r.timeMs, r.message.waiting, r.message.running, r.message.finished]),
    [[8, 1, 1, 0], [123, 0, 1, 1]],
  );
  assert(runs[1].prober.received.every((r) => r.message.cacheAdded === undefined));
  assertEquals(runs[1].router.received, runs[0].router.received);
});

// ---- Crash --------------------------------------------------------------------

for (const model of MODEL_NAMES) {
  Deno.test(`${model}: a crash fails every accepted request once, in accept order, counted as finished`, () => {
    const h = harness(model, { reporting: { intervalMs: 0, delayMs: 2, blockEvents: false } });
    // FIFO serves by priority: request 2 would start before request 1.
    h.serve(req(model, 0, 1, { outputTokens: 200 }), 0);
    h.serve(req(model, 1, 2, { outputTokens: 200, priority: 0 }), 1);
    h.serve(req(model, 2, 3, { outputTokens: 200, priority: 5 }), 2);
    h.fault("crash", 15);
    h.serve(req(model, 3, 1), 20);
    h.probe(25);
    h.recover("crash", 50);
    h.kernel.run();
    assertEquals(failed(h), [[17, 0, "crash"], [17, 1, "crash"], [17, 2, "crash"], [22, 3, "crash"]]);
    assertEquals(h.completed(), []);
    assertEquals(h.prober.received, []);
    // Nothing reached the router between the crash and the restart but failures.
    assert(h.statuses().every((s) => s.timeMs <= 17 || s.timeMs >= 52));
    const restart = h.statuses().at(-1)!;
    assertEquals(restart.timeMs, 52);
    assertEquals(
      [restart.message.restarted, restart.message.finished, restart.message.waiting, restart.message.running],
      [true, 4, 0, 0],
    );
    assertEquals([h.wrapper.finished, h.wrapper.waiting, h.wrapper.running], [4, 0, 0]);
  });
}

Deno.test("fifo: the restarted instance is cold, and no timer of the crashed one reaches it", () => {
  const h = harness("fifo");
  h.serve(req("fifo", 0, 5), 0); // done at 78
  h.serve(req("fifo", 1, 6), 80); // its prefill would end at 150
  h.fault("crash", 100);
  h.recover("crash", 110);
  h.serve(req("fifo", 2, 5), 120);
  h.kernel.run({ untilMs: 90 });
  assertEquals(h.wrapper.cachedPrefixTokens(req("fifo", 9, 5)), 100);
  h.kernel.run({ untilMs: 115 });
  assertEquals(h.wrapper.cachedPrefixTokens(req("fifo", 9, 5)), 0);
  h.kernel.run();
  const r2 = h.completed().find((r) => r.requestId === 2)!;
  assertEquals([r2.startMs, r2.firstTokenMs, r2.endMs, r2.cachedTokens], [120, 190, 198, 0]);
  assertEquals(failed(h), [[100, 1, "crash"]]);
  assertEquals(h.statuses().find((s) => s.timeMs === 110)!.message.restarted, true);
  assertEquals([h.wrapper.finished, h.completed().length], [3, 2]);
});

Deno.test("batching: a crash mid-step, a restart, and the run goes on cold and conserved, its totals kept", () => {
  const bare = harness("batching", { bare: true });
  bare.serve(req("batching", 2, 5), 46);
  bare.kernel.run();
  const alone = bare.completed()[0];

  const h = harness("batching");
  h.serve(req("batching", 0, 5), 0); // done at 31.2
  h.serve(req("batching", 1, 6, { outputTokens: 50 }), 40); // its first step runs 40 → 47.56
  h.fault("crash", 45);
  h.recover("crash", 46);
  h.serve(req("batching", 2, 5), 46);
  h.kernel.run({ untilMs: 46 });
  // Cold: request 0's 592 cached tokens went with the crash; only the 256 of request 2's first
  // chunk, cached as it was scheduled at 46, are there.
  assertEquals(h.wrapper.cachedPrefixTokens(req("batching", 9, 5)), 256);
  h.kernel.run();
  const r2 = h.completed().find((r) => r.requestId === 2)!;
  assertEquals(r2, alone); // as on a fresh instance: cold, and untouched by the old step's timer
  assertEquals(failed(h), [[45, 1, "crash"]]);
  assertEquals([h.wrapper.finished, h.wrapper.waiting, h.wrapper.running], [3, 0, 0]);
  assertEquals((h.wrapper.inner as BatchingInstance).cache.held, 0);
  // Steps: 5 for request 0, the one cut short, 5 for request 2.
  const stats = h.metrics.ofType("instance_stats").at(-1)!.message;
  assertEquals(stats.steps, 11);
  assertAlmostEquals(stats.busyMs, 31.2 + 7.56 + 31.2, 1e-9);
});

Deno.test("a failure at a crash counts for the replica that sent the request", () => {
  const h = harness("fifo");
  h.serve(req("fifo", 0, 1), 0, { replica: 1 });
  h.serve(req("fifo", 1, 1), 0, { replica: 0 });
  h.fault("crash", 5);
  h.serve(req("fifo", 2, 1), 6, { replica: 2 });
  h.recover("crash", 10);
  h.kernel.run();
  const restart = h.statuses().at(-1)!.message;
  assertEquals([restart.restarted, restart.finished, restart.finishedBy], [true, 3, [1, 1, 1]]);
});

// ---- Slow ---------------------------------------------------------------------

for (const model of MODEL_NAMES) {
  Deno.test(`${model}: slow ×2 doubles a lone request's service time exactly, and recover restores it`, () => {
    const bare = harness(model, { bare: true });
    bare.serve(req(model, 0, 1), 0);
    bare.kernel.run();
    const [alone] = bare.completed();

    const h = harness(model);
    h.fault("slow", 0, 2);
    h.serve(req(model, 0, 1), 0);
    h.recover("slow", 1000);
    h.serve(req(model, 1, 1, { prefixGroup: -1 }), 2000);
    h.kernel.run();
    const [slow, after] = h.completed();
    assertEquals([slow.firstTokenMs, slow.endMs], [2 * alone.firstTokenMs, 2 * alone.endMs]);
    assertAlmostEquals(after.firstTokenMs - 2000, alone.firstTokenMs, 1e-9);
    assertAlmostEquals(after.endMs - 2000, alone.endMs, 1e-9);
  });
}

Deno.test("fifo: a slowdown leaves the request in service as it was and slows those that start after it", () => {
  const h = harness("fifo");
  h.serve(req("fifo", 0, 1), 0);
  h.serve(req("fifo", 1, 2), 1);
  h.fault("slow", 5, 2);
  h.kernel.run();
  assertEquals(h.completed().map((r) => [r.requestId, r.firstTokenMs, r.endMs]), [[0, 70, 78], [
    1,
    218,
    234,
  ]]);
});

Deno.test("batching: a slowdown in a decode stretch keeps the step in progress and slows the rest, as step by step", () => {
  // Prompt 100: one 6 ms prefill step (first token at 6), then 10 decode steps of 5.1 ms: boundaries
  // 11.1, 16.2, 21.3, … The slowdown at 20 keeps the step 16.2 → 21.3; the 7 after it take 10.2 ms.
  const stepwise: StatusReportingOptions = { ...EVENT_DRIVEN, loadSignals: true }; // no stretches
  const records = [EVENT_DRIVEN, stepwise].map((reporting) => {
    const h = harness("batching", { reporting });
    h.serve(req("batching", 0, 1, { prefixTokens: 100, outputTokens: 11 }), 0);
    h.fault("slow", 20, 2);
    h.kernel.run();
    return h.completed()[0];
  });
  assertAlmostEquals(records[0].firstTokenMs, 6, 1e-9);
  assertAlmostEquals(records[0].endMs, 21.3 + 7 * 10.2, 1e-9);
  assertEquals(records[0], records[1]);
});

// ---- Drain and partition ------------------------------------------------------

for (const model of MODEL_NAMES) {
  Deno.test(`${model}: drain says so, refuses new requests and lets the running one finish; recover takes them again`, () => {
    const h = harness(model);
    h.serve(req(model, 0, 1), 0);
    h.fault("drain", 5);
    h.serve(req(model, 1, 1), 10);
    h.probe(12);
    h.recover("drain", 200);
    h.serve(req(model, 2, 1), 210);
    h.kernel.run();
    assertEquals(failed(h), [[10, 1, "draining"]]);
    assertEquals(h.completed().map((r) => r.requestId), [0, 2]);
    const draining = h.statuses().filter((s) => s.timeMs >= 5 && s.timeMs < 200);
    assert(draining.length >= 2 && draining.every((s) => s.message.draining === true));
    assertEquals(draining[0].timeMs, 5);
    assertEquals(draining.at(-1)!.message.finished, 2); // the refusal and the completion
    const after = h.statuses().filter((s) => s.timeMs >= 200);
    assert(after.length > 0 && after.every((s) => s.message.draining === undefined));
    assertEquals(h.wrapper.finished, 3);
    assertEquals(h.prober.received.map((r) => [r.timeMs, r.message.draining, r.message.running]), [[
      12,
      true,
      1,
    ]]);
  });

  Deno.test(`${model}: a partition loses reports and probes, refuses requests and turns completions into failures`, () => {
    const h = harness(model);
    h.serve(req(model, 0, 1), 0);
    h.fault("partition", 5);
    h.serve(req(model, 1, 1), 10);
    h.probe(20);
    h.recover("partition", 100);
    h.probe(110);
    h.kernel.run();
    const done = model === "fifo" ? 78 : 31.2;
    assertEquals(failed(h).map(([, id, reason]) => [id, reason]), [[1, "unreachable"], [0, "unreachable"]]);
    assertAlmostEquals(h.failures()[1].timeMs, done, 1e-9);
    assertEquals(h.completed(), []);
    assert(h.statuses().every((s) => s.timeMs < 5 || s.timeMs >= 100));
    const back = h.statuses().at(-1)!;
    assertEquals([back.timeMs, back.message.finished, back.message.running], [100, 2, 0]);
    assertEquals(h.prober.received.map((r) => r.timeMs), [110]);
  });
}

Deno.test("a restart hidden by a partition is announced by the first report after it", () => {
  const h = harness("fifo");
  h.fault("crash", 10);
  h.fault("partition", 20);
  h.recover("crash", 30);
  h.recover("partition", 40);
  h.kernel.run();
  assertEquals(h.statuses().map((s) => [s.timeMs, s.message.restarted]), [[40, true]]);
});

// ---- Lifecycle ------------------------------------------------------------------

Deno.test("an unprovisioned instance refuses requests until provisioned, starts cold, and a decommission drains it to off", () => {
  const h = harness("fifo", { active: false });
  h.serve(req("fifo", 0, 1), 0);
  h.probe(5);
  h.provision(10, 50);
  h.serve(req("fifo", 1, 1), 30); // still provisioning
  h.serve(req("fifo", 2, 1), 70); // done at 148
  h.decommission(75);
  h.serve(req("fifo", 3, 1), 80);
  h.serve(req("fifo", 4, 1), 150); // off
  h.provision(160, 10);
  h.serve(req("fifo", 5, 1), 180);
  h.kernel.run({ untilMs: 100 });
  assertEquals(h.wrapper.lifecycle, "decommissioning");
  h.kernel.run({ untilMs: 150 });
  assertEquals([h.wrapper.lifecycle, h.wrapper.inner], ["off", undefined]);
  h.kernel.run();
  assertEquals(failed(h), [[0, 0, "unreachable"], [30, 1, "unreachable"], [80, 3, "draining"], [
    150,
    4,
    "unreachable",
  ]]);
  assertEquals(h.prober.received, []);
  const reports = h.statuses().map((
    s,
  ) => [s.timeMs, s.message.restarted, s.message.draining, s.message.finished]);
  assertEquals(reports.filter(([, restarted]) => restarted), [[60, true, undefined, 2], [
    170,
    true,
    undefined,
    5,
  ]]);
  assertEquals(reports.filter(([t]) => t === 75), [[75, undefined, true, 2]]);
  // The last report before going off says draining, with everything finished.
  assertEquals(reports.filter(([t]) => t === 148).at(-1), [148, undefined, true, 4]);
  const r5 = h.completed().find((r) => r.requestId === 5)!;
  assertEquals([r5.cachedTokens, r5.startMs], [0, 180]);
  assertEquals([h.wrapper.lifecycle, h.wrapper.finished], ["active", 6]);
});

Deno.test("a decommission while provisioning cancels it; one of an idle instance stops it at once", () => {
  const h = harness("fifo", { active: false });
  h.provision(0, 50);
  h.decommission(10);
  h.kernel.run();
  assertEquals([h.wrapper.lifecycle, h.statuses().length], ["off", 0]);

  const idle = harness("fifo");
  idle.decommission(10);
  idle.kernel.run();
  assertEquals(idle.wrapper.lifecycle, "off");
  assertEquals(idle.statuses().map((s) => [s.timeMs, s.message.draining]), [[10, true]]);
});

// ---- Any mix of faults ------------------------------------------------------------

for (const model of MODEL_NAMES) {
  Deno.test(`${model}: whatever the faults, every request ends exactly once and the instance ends empty (property)`, () => {
    const kinds: FaultKind[] = ["crash", "slow", "drain", "partition"];
    fc.assert(
      fc.property(
        fc.array(
          fc.record({ at: fc.integer({ min: 0, max: 400 }), group: fc.integer({ min: -1, max: 3 }) }),
          {
            minLength: 1,
            maxLength: 30,
          },
        ),
        fc.array(
          fc.record({
            kind: fc.constantFrom(...kinds),
            at: fc.integer({ min: 0, max: 400 }),
            length: fc.integer({ min: 0, max: 150 }),
          }),
          { maxLength: 6 },
        ),
        (arrivals, faults) => {
          const h = harness(model, { engine: { kvBlocks: 120 } });
          for (const f of faults) {
            h.fault(f.kind, f.at, 3);
            h.recover(f.kind, f.at + f.length);
          }
          arrivals.sort((a, b) => a.at - b.at).forEach((a, id) =>
            h.serve(req(model, id, a.group, { outputTokens: 1 + id % 20 }), a.at)
          );
          h.kernel.run();
          const ends = [
            ...h.completed().map((r) => r.requestId),
            ...h.metrics.ofType("dropped").map((d) => d.message.requestId),
            ...h.failures().map((f) => f.message.command.request.id),
          ].sort((a, b) => a - b);
          assertEquals(ends, arrivals.map((_, id) => id));
          assertEquals([h.wrapper.finished, h.wrapper.waiting, h.wrapper.running], [arrivals.length, 0, 0]);
          assert(!h.wrapper.down);
        },
      ),
      { numRuns: 150 },
    );
  });
}

// ---- The fault injector -----------------------------------------------------------

Deno.test("the fault injector sends each fault and its end at their times, ends before starts at one instant", () => {
  const log: [number, string, string, string][] = [];
  const kernel = new Kernel({
    onDeliver: (m: Message, to, t) => {
      const c = m as FaultCommand;
      if (c.type === "fault" || c.type === "recover") log.push([t, kernel.nameOf(to), c.type, c.kind]);
    },
  });
  const router = kernel.spawn("router", new Recorder<InstanceStatus>());
  const recorders = [new Recorder<FaultCommand>(), new Recorder<FaultCommand>()];
  const instances = recorders.map((r, i) => kernel.spawn(`instance/${i}`, r));
  const faults: Fault[] = [
    { instance: 0, kind: "crash", atMs: 10, forMs: 20 },
    { instance: 1, kind: "drain", atMs: 30, forMs: Infinity },
    { instance: 0, kind: "partition", atMs: 30, forMs: 0 },
    { instance: 1, kind: "slow", atMs: 5, forMs: 25, factor: 3 },
  ];
  const injector = kernel.spawn("faults", new FaultInjector(faults, instances, router));
  kernel.send(injector, { type: "inject" });
  // The injector's timers are background ones: a run with nothing else to do ends at once…
  kernel.run();
  assertEquals(log, []);
  // …so some work (a message due at 100) keeps this one going past every fault.
  kernel.send(router, { type: "status" } as unknown as InstanceStatus, 100);
  kernel.run();
  assertEquals(log, [
    [5, "instance/1", "fault", "slow"],
    [10, "instance/0", "fault", "crash"],
    [30, "instance/0", "recover", "crash"],
    [30, "instance/1", "recover", "slow"],
    [30, "instance/1", "fault", "drain"],
    [30, "instance/0", "fault", "partition"],
    [30, "instance/0", "recover", "partition"],
  ]);
  const slow = recorders[1].received[0].message;
  assertEquals(slow, { type: "fault", kind: "slow", replyTo: router, factor: 3 });
});

Deno.test("the fault injector refuses a fault beyond the fleet or out of range, naming the field", () => {
  const kernel = new Kernel();
  const router = kernel.spawn("router", new Recorder<InstanceStatus>());
  const instances = [kernel.spawn("instance/0", new Recorder<FaultCommand>())];
  assertThrows(
    () => new FaultInjector([{ instance: 1, kind: "crash", atMs: 0, forMs: 1 }], instances, router),
    RangeError,
    "faults[0].instance",
  );
  assertThrows(
    () => new FaultInjector([{ instance: 0, kind: "slow", atMs: 0, forMs: 1, factor: 0 }], instances, router),
    RangeError,
    "faults[0].factor",
  );
});
