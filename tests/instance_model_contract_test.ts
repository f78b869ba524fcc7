/**
 * The instance-model contract, run over every registered model
 * (actors/instances/instance_models.ts): what the router, the metrics and the run rely
 * on, whatever the model. A new model passes this suite by being registered.
 */
import { assert, assertEquals } from "@std/assert";
import fc from "fast-check";
import { ENGINE_PRESETS } from "../actors/instances/engine_presets.ts";
import type { InstancesConfig, ServingActor } from "../actors/instances/instance_model.ts";
import { MODELS } from "../actors/instances/instance_models.ts";
import type { InstanceStatus, MetricsCommand, Request } from "../actors/protocol.ts";
import { type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { EVENT_DRIVEN } from "../actors/instances/status_reporter.ts";
import { Recorder } from "./_recorder.ts";

/** A small fleet member of any model: a short queue, a small KV cache. */
function config(model: string, maxQueue = Infinity): InstancesConfig {
  return {
    count: 1,
    model,
    overheadMs: 5,
    prefillMsPerToken: 0.05,
    decodeMsPerToken: 0.5,
    serviceTime: "deterministic",
    cacheCapacity: 4,
    maxQueue,
    engine: {
      ...ENGINE_PRESETS["qwen2.5-7b"],
      preset: "qwen2.5-7b",
      kvBlocks: 64,
      blockTokens: 16,
      maxBatchTokens: 512,
      maxSeqs: 8,
      prefixCaching: true,
    },
  };
}

const request = (id: number, arrivalMs: number, group = id % 3, outputTokens = 4): Request => ({
  id,
  arrivalMs,
  prefixGroup: group,
  prefixTokens: 64,
  suffixTokens: 32,
  outputTokens,
});

function setup(model: (typeof MODELS)[number], maxQueue = Infinity) {
  const kernel = new Kernel({ seed: 1 });
  const router = new Recorder<InstanceStatus>();
  const metrics = new Recorder<MetricsCommand>();
  const routerRef = kernel.spawn("router", router) as ActorRef<InstanceStatus>;
  const metricsRef = kernel.spawn("metrics", metrics);
  const instance: ServingActor = model.create(0, config(model.name, maxQueue), metricsRef, EVENT_DRIVEN);
  const ref = kernel.spawn("instance/0", instance);
  const serve = (r: Request) =>
    kernel.send(ref, { type: "serve", request: r, replyTo: routerRef }, r.arrivalMs - kernel.nowMs);
  return { kernel, router, metrics, instance, serve };
}

for (const model of MODELS) {
  Deno.test(`${model.name}: a lone request completes once, after it arrived, with its first token before its end`, () => {
    const { kernel, metrics, router, instance, serve } = setup(model);
    serve(request(7, 10));
    kernel.run();
    const completed = metrics.ofType("completed");
    assertEquals(completed.length, 1);
    const record = completed[0].message.record;
    assertEquals([record.requestId, record.instance], [7, 0]);
    assert(record.arrivalMs === 10 && record.startMs >= 10, `start ${record.startMs}`);
    assert(record.firstTokenMs > record.startMs && record.endMs >= record.firstTokenMs);
    assertEquals(record.promptTokens, 96);
    // The router heard of the accept at once, and of the finish.
    assertEquals(router.received[0].timeMs, 10);
    assertEquals(router.received.at(-1)!.message.finished, 1);
    assertEquals([instance.waiting, instance.running], [0, 0]);
  });

  Deno.test(`${model.name}: every request ends completed or dropped with a reason, and the last status counts them all as finished`, () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 200 }), fc.integer({ min: 0, max: 3 })), {
          minLength: 1,
          maxLength: 40,
        }),
        fc.integer({ min: 0, max: 3 }),
        (arrivals, maxQueue) => {
          const { kernel, metrics, router, instance, serve } = setup(model, maxQueue);
          const sorted = [...arrivals].sort((a, b) => a[0] - b[0]);
          sorted.forEach(([at, group], id) => serve(request(id, at, group)));
          kernel.run();
          const completed = metrics.ofType("completed").map((r) => r.message.record.requestId);
          const dropped = metrics.ofType("dropped");
          assert(dropped.every((d) => d.message.reason === "queue_full" || d.message.reason === "too_long"));
          const ids = [...completed, ...dropped.map((d) => d.message.requestId)].sort((a, b) => a - b);
          assertEquals(ids, sorted.map((_, id) => id));
          assertEquals(router.received.at(-1)!.message.finished, sorted.length);
          assertEquals([instance.waiting, instance.running], [0, 0]);
        },
      ),
      { numRuns: 60 },
    );
  });

  Deno.test(`${model.name}: a request dropped for a full queue is answered with a status at once`, () => {
    const { kernel, metrics, router, serve } = setup(model, 0);
    // More arrivals at one instant than the instance can start: with no queue, some are dropped.
    for (let id = 0; id < 12; id++) serve(request(id, 0, id, 50));
    kernel.run({ untilMs: 0 });
    const dropped = metrics.ofType("dropped");
    assert(dropped.length > 0, "nothing was dropped");
    assert(dropped.every((d) => d.timeMs === 0 && d.message.reason === "queue_full"));
    // One status per serve, each at once.
    assertEquals(router.received.filter((r) => r.timeMs === 0).length >= 12, true);
  });

  Deno.test(`${model.name}: cachedPrefixTokens changes nothing, and a shared prefix is cached once computed`, () => {
    const a = setup(model), b = setup(model);
    for (const s of [a, b]) {
      s.serve(request(0, 0, 1));
      s.serve(request(1, 500, 1));
      s.serve(request(2, 1000, 2));
    }
    a.kernel.run({ untilMs: 400 });
    const cached = a.instance.cachedPrefixTokens(request(9, 400, 1), undefined, 400);
    assert(cached > 0 && cached <= 64, `cached ${cached}`);
    assertEquals(a.instance.cachedPrefixTokens(request(9, 400, 2), undefined, 400), 0);
    a.kernel.run();
    b.kernel.run();
    assertEquals(a.metrics.received, b.metrics.received);
    assertEquals(a.router.received, b.router.received);
  });

  Deno.test(`${model.name}: stopAt never moves past the stop`, () => {
    const { kernel, instance, serve } = setup(model);
    for (let id = 0; id < 5; id++) serve(request(id, id * 3, id, 200));
    kernel.run({ untilMs: 40 });
    const last = instance.stopAt(40);
    assert(last <= 40, `stopAt returned ${last}`);
  });

  Deno.test(`${model.name}: the descriptor's cache unit, capacity and description match the model`, () => {
    const capacity = model.cacheCapacity(config(model.name));
    assertEquals(capacity, model.cacheUnit === "blocks" ? 64 : 4);
    // A run's report names the model first.
    assert(
      model.describe(config(model.name)).startsWith(`${model.name} `),
      model.describe(config(model.name)),
    );
  });
}
