/** What the router sees: stale status, delayed reports, exact and approximate cache views. */
import { assert, assertEquals, assertGreater, assertLess } from "@std/assert";
import { ApproximateCacheView, ExactCacheView } from "../actors/router/cache_view.ts";
import type { InstanceStatus, MetricsCommand, Request } from "../actors/protocol.ts";
import { blockKeys } from "../actors/kv_cache/prefix_keys.ts";
import { type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { ServingInstance } from "../actors/instances/serving_instance.ts";
import { BatchingInstance } from "../actors/instances/batching_instance.ts";
import { simulate } from "../actors/simulation.ts";
import { Recorder } from "./_recorder.ts";
import { scenario } from "./_scenarios.ts";
import { status } from "./_status.ts";

const request = (id: number, group: number, arrivalMs = 0): Request => ({
  id,
  arrivalMs,
  prefixGroup: group,
  prefixTokens: 64,
  suffixTokens: 16,
  outputTokens: 1,
});

Deno.test("with a status interval, an instance reports at most once per interval, delayed by the network", () => {
  const kernel = new Kernel();
  const router = new Recorder<InstanceStatus>();
  const routerRef = kernel.spawn("router", router) as ActorRef<InstanceStatus>;
  const metrics = kernel.spawn("metrics", new Recorder<MetricsCommand>());
  const options = {
    overheadMs: 10,
    prefillMsPerToken: 0,
    decodeMsPerToken: 0,
    serviceTime: "deterministic" as const,
    cacheCapacity: 4,
    maxQueue: Infinity,
  };
  const ref = kernel.spawn(
    "instance/0",
    new ServingInstance(0, options, metrics, { intervalMs: 50, delayMs: 7, blockEvents: false }),
  );
  for (let i = 0; i < 10; i++) {
    kernel.send(ref, { type: "serve", request: request(i, 1, i * 3), replyTo: routerRef }, i * 3);
  }
  kernel.run();
  // Ten accepts and ten completions over 100 ms: reports only at the ticks t = 50, 100 and 150
  // (+ 7 ms of network). The last completion, at t = 100, comes after that instant's tick (it was
  // scheduled later), so the t = 150 tick carries it.
  assertEquals(router.received.map((r) => r.timeMs), [57, 107, 157]);
  assertEquals(router.received.at(-1)!.message.finished, 10);
  assertEquals(router.received[0].message.cacheAdded, 1);
});

Deno.test("exact view follows block-run events; approximate view learns from routing and forgets by LRU", () => {
  const keys = blockKeys(request(0, 3), 16); // 64 prefix tokens → 4 blocks, one run
  const exact = new ExactCacheView(2, "blocks");
  exact.apply(status(0, { cachedRuns: [keys.runKey(0), 2] }));
  assertEquals(exact.matchedBlocks(0, request(0, 3), keys), 2);
  exact.apply(status(0, { cachedRuns: [keys.runKey(0), 1] }));
  assertEquals(exact.matchedBlocks(0, request(0, 3), keys), 1);
  exact.apply(status(0, { cachedRuns: [keys.runKey(0), 0] }));
  assertEquals(exact.matchedBlocks(0, request(0, 3), keys), 0);

  const approx = new ApproximateCacheView(2, "blocks", 6);
  approx.routed(1, request(0, 3), keys);
  assertEquals([approx.matchedBlocks(1, request(0, 3), keys), approx.matchedBlocks(0, request(0, 3), keys)], [
    4,
    0,
  ]);
  const other = blockKeys(request(1, 9), 16);
  // Each prompt also holds its one unshared full block (80 tokens: 5 blocks, 4 keyed), inserted before
  // its prefix. Group 9's 5 blocks into a 6-block index holding 5: 4 must go, least recently used
  // first — group 3's unshared block, then its prefix from the last block: it keeps a 1-block prefix.
  approx.routed(1, request(1, 9), other);
  assertEquals(approx.matchedBlocks(1, request(0, 3), keys), 1);
  assert(approx.holds(1, 3) && approx.holds(1, 9));
});

Deno.test("stale status (500 ms scrapes) makes least_load route worse than an exact view", () => {
  const run = (statusIntervalMs: number) =>
    simulate(scenario({
      policy: { name: "least_load" },
      router: { statusIntervalMs },
      workload: { requests: 6000, ratePerSec: 50 },
    }));
  const fresh = run(0), stale = run(500);
  assertGreater(stale.ttftMeanMs!, fresh.ttftMeanMs! * 1.2);
  assertLess(stale.messages, fresh.messages);
  assertEquals(stale.completed, 6000);
});

Deno.test("with periodic status, the router's exact block view ends equal to each instance's real cache", async (t) => {
  for (const statusIntervalMs of [0, 50, 500]) {
    await t.step(`interval ${statusIntervalMs} ms`, () => {
      simulate(
        scenario({
          policy: { name: "llmd_weighted" },
          router: { cacheView: "exact", statusIntervalMs },
          instances: { model: "batching", engine: { kvBlocks: 600 } },
          workload: { requests: 1500, ratePerSec: 40, prefix: { zipf: 0.8, sharedFrac: 0.7, groups: 60 } },
        }),
        {
          inspect({ router, instances }) {
            const view = router.view.cacheView as ExactCacheView;
            instances.forEach((instance, i) => {
              const real = new Map((instance as BatchingInstance).cache.runs());
              const blocks = [...real.values()].reduce((a, b) => a + b, 0);
              assertGreater(blocks, 100); // there was churn: 600 blocks for 60 groups × 64 blocks
              assertEquals(new Map(view.runsOf(i)), real);
            });
          },
        },
      );
    });
  }
});

Deno.test("the router's in-flight counts return to 0 after drops (both models)", async (t) => {
  for (const model of ["fifo", "batching"] as const) {
    await t.step(model, () => {
      const r = simulate(
        scenario({ instances: { model, maxQueue: 2 }, workload: { requests: 3000, ratePerSec: 400 } }),
        { inspect: ({ router }) => assertEquals([...router.view.inFlight], [0, 0, 0, 0]) },
      );
      assertGreater(r.dropped, 0);
    });
  }
});

Deno.test("policies reading load signals see pending prefill drain as soon as a prefill ends", () => {
  const kernel = new Kernel();
  const router = new Recorder<InstanceStatus>();
  const routerRef = kernel.spawn("router", router) as ActorRef<InstanceStatus>;
  const metrics = kernel.spawn("metrics", new Recorder<MetricsCommand>());
  const engine = {
    stepMs: 5,
    prefillMsPerToken: 0.01,
    decodeMsPerSeq: 0.1,
    requestOverheadMs: 0,
    blockTokens: 16,
    kvBlocks: 10_000,
    maxBatchTokens: 2048,
    maxSeqs: 8,
    prefixCaching: true,
    maxQueue: Infinity,
  };
  const ref = kernel.spawn(
    "instance/0",
    new BatchingInstance(0, engine, metrics, {
      intervalMs: 0,
      delayMs: 0,
      blockEvents: false,
      loadSignals: true,
    }),
  );
  kernel.send(ref, {
    type: "serve",
    request: { ...request(0, -1), suffixTokens: 20_000, outputTokens: 50 },
    replyTo: routerRef,
  });
  kernel.run();
  const reports = router.received.map((r) => r.message);
  const firstDecoding = reports.findIndex((m) => m.pendingPrefillTokens === 0 && m.decodeBlocks > 0);
  assert(
    firstDecoding > 0 && firstDecoding < reports.length - 1,
    "a report after the prefill, before the end",
  );
  assert(
    reports.slice(1, firstDecoding).every((m) =>
      m.pendingPrefillTokens > 0 && m.pendingPrefillTokens < 20_064
    ),
  );
});

Deno.test("every production policy runs the batching model with both cache views and conserves requests", async (t) => {
  for (
    const name of [
      "sglang_cache_aware",
      "llmd_weighted",
      "dynamo_kv",
      "power_of_two",
      "chwbl",
      "preble_e2",
      "vllm_prefix",
    ] as const
  ) {
    for (const cacheView of ["exact", "approximate"] as const) {
      await t.step(`${name}, ${cacheView}`, () => {
        const r = simulate(scenario({
          policy: { name },
          router: { cacheView },
          instances: { model: "batching", engine: { kvBlocks: 2000 } },
          workload: { requests: 1500, ratePerSec: 40, prefix: { zipf: 1.2, sharedFrac: 0.8 } },
        }));
        assertEquals(r.completed + r.dropped, 1500);
        assertGreater(r.hitRate!, 0.2);
      });
    }
  }
});
