import { assertEquals } from "@std/assert";
import type {
  InstanceCommand,
  InstanceStatus,
  MetricsCommand,
  Request,
  RoutingNote,
} from "../actors/protocol.ts";
import { type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { type FifoInstanceOptions, ServingInstance } from "../actors/instances/serving_instance.ts";
import { Recorder } from "./_recorder.ts";
import { status } from "./_status.ts";

const options: FifoInstanceOptions = {
  overheadMs: 10,
  prefillMsPerToken: 0.5,
  decodeMsPerToken: 0,
  serviceTime: "deterministic",
  cacheCapacity: 2,
  maxQueue: Infinity,
};

const req = (id: number, group: number, arrivalMs = 0): Request => ({
  id,
  arrivalMs,
  prefixGroup: group,
  prefixTokens: 100,
  suffixTokens: 20,
  outputTokens: 8,
});

function setup(over: Partial<FifoInstanceOptions> = {}) {
  const kernel = new Kernel({ seed: 1 });
  const router = new Recorder<InstanceStatus>();
  const metrics = new Recorder<MetricsCommand>();
  const routerRef = kernel.spawn("router", router) as ActorRef<InstanceStatus>;
  const metricsRef = kernel.spawn("metrics", metrics);
  const instance = new ServingInstance(3, { ...options, ...over }, metricsRef);
  const ref = kernel.spawn<InstanceCommand>("instance/3", instance);
  const serve = (request: Request, atMs: number, routing?: RoutingNote) =>
    kernel.send(ref, { type: "serve", request, replyTo: routerRef, routing }, atMs - kernel.nowMs);
  return { kernel, router, metrics, instance, serve };
}

Deno.test("instance reports accept at once and completes after overhead + prefill of the whole prompt, with the router's note", () => {
  const { kernel, router, metrics, serve } = setup();
  const routing: RoutingNote = { availableTokens: 100, expectedTokens: 100, falseTokens: 0 };
  serve(req(0, 5), 0, routing);
  kernel.run();
  assertEquals(router.received, [
    { timeMs: 0, message: status(3, { running: 1, pendingPrefillTokens: 120, cacheAdded: 5 }) },
    { timeMs: 70, message: status(3, { finished: 1 }) },
  ]);
  assertEquals(metrics.received, [{
    timeMs: 70,
    message: {
      type: "completed",
      record: {
        requestId: 0,
        instance: 3,
        arrivalMs: 0,
        startMs: 0,
        firstTokenMs: 70,
        endMs: 70,
        promptTokens: 120,
        cachedTokens: 0,
        outputTokens: 8,
        routing,
      },
    },
  }]);
});

Deno.test("instance serves FIFO; a queued request of the same group hits the computed prefix", () => {
  const { kernel, router, metrics, serve } = setup();
  serve(req(0, 5), 0);
  serve(req(1, 5), 1);
  serve(req(2, -1), 2);
  kernel.run();
  const done = metrics.ofType("completed").map((
    r,
  ) => [r.timeMs, r.message.record.requestId, r.message.record.cachedTokens]);
  // 0: 10 + 0.5×120 = 70. 1: hit, 10 + 0.5×20 = 20 → 90. 2: unique, 70 → 160.
  assertEquals(done, [[70, 0, 0], [90, 1, 100], [160, 2, 0]]);
  assertEquals(router.received.map((r) => [r.timeMs, r.message.waiting, r.message.running]), [
    [0, 0, 1],
    [1, 1, 1],
    [2, 2, 1],
    [70, 1, 1],
    [90, 0, 1],
    [160, 0, 0],
  ]);
});

Deno.test("instance evicts the least recently used group and reports it", () => {
  const { kernel, router, serve } = setup();
  serve(req(0, 1), 0);
  serve(req(1, 2), 100);
  serve(req(2, 1), 200); // touches 1, so 2 is now least recent
  serve(req(3, 3), 300);
  kernel.run();
  const events = router.received
    .filter((r) => r.message.cacheAdded !== undefined || r.message.cacheEvicted !== undefined)
    .map((r) => [r.timeMs, r.message.cacheAdded, r.message.cacheEvicted]);
  assertEquals(events, [[0, 1, undefined], [100, 2, undefined], [300, 3, 2]]);
});

Deno.test("instance with cache capacity 0 never hits and never reports cache events", () => {
  const { kernel, router, metrics, serve } = setup({ cacheCapacity: 0 });
  serve(req(0, 1), 0);
  serve(req(1, 1), 100);
  kernel.run();
  assertEquals(metrics.ofType("completed").map((r) => r.message.record.cachedTokens), [0, 0]);
  assertEquals(router.received.some((r) => "cacheAdded" in r.message), false);
});

Deno.test("instance drops a request beyond maxQueue with reason queue_full", () => {
  const { kernel, metrics, serve } = setup({ maxQueue: 1 });
  serve(req(0, -1), 0);
  serve(req(1, -1), 0);
  serve(req(2, -1), 0);
  kernel.run();
  assertEquals(metrics.ofType("dropped").map((r) => [r.message.requestId, r.message.reason]), [[
    2,
    "queue_full",
  ]]);
  assertEquals(metrics.ofType("completed").length, 2);
});

Deno.test("instance with decode time reports first token at prefill end and completes after decode", () => {
  const { kernel, metrics, instance, serve } = setup({ decodeMsPerToken: 2 });
  serve(req(0, -1), 0);
  kernel.run();
  const record = metrics.ofType("completed")[0].message.record;
  assertEquals([record.firstTokenMs, record.endMs], [70, 86]);
  assertEquals(instance.busyMs, 86);
});
