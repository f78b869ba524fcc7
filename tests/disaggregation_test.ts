/**
 * Disaggregated prefill/decode serving, mixed fleets and the host KV tier,
 * through whole runs: a lone request's TTFT to the addition, the KV link's
 * arithmetic, conservation under both routing flows, and the validation of
 * pools.
 */
import { assert, assertAlmostEquals, assertEquals, assertStringIncludes, assertThrows } from "@std/assert";
import fc from "fast-check";
import { ApproximateCacheView } from "../actors/router/cache_view.ts";
import { ENGINE_PRESETS, kvBytesPerToken } from "../actors/instances/engine_presets.ts";
import { blockKeys } from "../actors/kv_cache/prefix_keys.ts";
import { type RunResult, simulate, type SimulationConfig } from "../actors/simulation.ts";
import { parseScenario, type ScenarioInput } from "../scenarios/scenario/scenario.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";
import { runCli } from "./_cli.ts";

/** A scenario of `prefill` + `decode` instances (batching, Qwen2.5-7B), with `extra` merged over it. */
function disaggregated(prefill: number, decode: number, extra: ScenarioInput = {}): SimulationConfig {
  return parseScenario({
    ...extra,
    instances: {
      model: "batching",
      pools: [{ role: "prefill", count: prefill }, { role: "decode", count: decode }],
      ...(extra.instances as object | undefined),
    },
  });
}

/** One request: a unique 1,024-token prefix and `suffix` more tokens, 4 output tokens. */
const LONE: ScenarioInput = {
  workload: {
    requests: 1,
    prefix: { sharedFrac: 0, tokens: 1024 },
    suffixTokens: { dist: "constant", value: 476 },
    outputTokens: { dist: "constant", value: 4 },
  },
};

const qwen = ENGINE_PRESETS["qwen2.5-7b"];

Deno.test("a lone request's TTFT is prefill step + KV transfer + the decode instance's first step, exactly", () => {
  const gbps = 100, latencyMs = 0.05;
  const config = disaggregated(1, 1, { ...LONE, instances: { kvTransfer: { gbps, latencyMs } } });
  let arrival = NaN;
  const r = simulate(config, {
    onDeliver: (message) => {
      const m = message as { type: string; request?: { arrivalMs: number } };
      if (m.type === "route") arrival = m.request!.arrivalMs;
    },
  });
  const prompt = 1500;
  const prefillMs = qwen.stepMs + qwen.prefillMsPerToken * prompt;
  const wireMs = prompt * kvBytesPerToken(qwen.shape) * 8e-6 / gbps;
  const decodeMs = qwen.stepMs + qwen.decodeMsPerSeq * 1;
  // The simulation's additions, in its order: arrival, prefill step, wire, latency, decode step, overhead.
  const firstToken = arrival + prefillMs + wireMs + latencyMs + decodeMs + qwen.requestOverheadMs;
  assertEquals(r.completed, 1);
  assertEquals(r.ttftMeanMs, firstToken - arrival);
  assertAlmostEquals(r.ttftMeanMs!, prefillMs + wireMs + latencyMs + decodeMs + qwen.requestOverheadMs, 1e-9);
  assertAlmostEquals(r.kvTransferMeanMs!, wireMs + latencyMs, 1e-12);
  assertEquals(r.kvQueueMeanMs, 0);
  // 1,500 tokens × 57,344 B × 8 bits at 100 Gb/s = 6.88 ms on the wire.
  assertAlmostEquals(wireMs, 6.88128, 1e-9);
});

Deno.test("infinite bandwidth and zero latency make the transfer free: TTFT is the two steps", () => {
  const config = disaggregated(1, 1, {
    ...LONE,
    instances: { kvTransfer: { gbps: Infinity, latencyMs: 0 } },
  });
  const r = simulate(config);
  assertEquals(r.kvTransferMeanMs, 0);
  const steps = qwen.stepMs + qwen.prefillMsPerToken * 1500 + qwen.stepMs + qwen.decodeMsPerSeq;
  assertAlmostEquals(r.ttftMeanMs!, steps + qwen.requestOverheadMs, 1e-9);
});

Deno.test("a 100× lower bandwidth makes a transfer 100× slower", () => {
  const at = (gbps: number) =>
    simulate(disaggregated(1, 1, { ...LONE, instances: { kvTransfer: { gbps, latencyMs: 0 } } }))
      .kvTransferMeanMs!;
  assertAlmostEquals(at(4) / at(400), 100, 1e-9);
  assertAlmostEquals(at(0.5) / at(50), 100, 1e-9);
});

Deno.test("transfers queue on the prefill instance's one link; the wait is reported apart", () => {
  // Slow link, one prefill instance, a burst: later transfers wait for earlier ones.
  const config = disaggregated(1, 2, {
    instances: { kvTransfer: { gbps: 1, latencyMs: 0 } },
    workload: { requests: 40, ratePerSec: 200, outputTokens: { dist: "constant", value: 8 } },
  });
  const r = simulate(config);
  assertEquals(r.completed, 40);
  assert(r.kvQueueMeanMs! > 0, `queue ${r.kvQueueMeanMs}`);
  assert(r.kvTransferMeanMs! > r.kvQueueMeanMs!);
  assert(r.kvTransferP99Ms! >= r.kvTransferMeanMs!);
});

Deno.test("a decode instance that holds the prefix receives only the rest of the prompt", () => {
  // Two requests of one group, far apart: the second finds the prefix on the (only) decode instance.
  const config = disaggregated(1, 1, {
    instances: { kvTransfer: { gbps: 10, latencyMs: 0 } },
    workload: {
      requests: 2,
      ratePerSec: 0.01,
      prefix: { groups: 1, sharedFrac: 1, tokens: 1024 },
      suffixTokens: { dist: "constant", value: 100 },
      outputTokens: { dist: "constant", value: 2 },
    },
  });
  const r = simulate(config);
  const perToken = kvBytesPerToken(qwen.shape) * 8e-6 / 10;
  // First: all 1,124 tokens; second: 1,124 − 1,024 cached = 100.
  assertAlmostEquals(r.kvTransferMeanMs!, (1124 + 100) * perToken / 2, 1e-9);
});

Deno.test("requests are conserved under both flows, early stops and drops (property)", () => {
  fc.assert(
    fc.property(
      fc.constantFrom("prefill-first", "decode-first"),
      fc.integer({ min: 1, max: 3 }),
      fc.integer({ min: 1, max: 3 }),
      fc.option(fc.integer({ min: 200, max: 4000 }), { nil: undefined }),
      fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined }),
      fc.integer({ min: 0, max: 2000 }),
      fc.integer({ min: 0, max: 1000 }),
      (flow, prefill, decode, untilMs, maxQueue, local, seed) => {
        const config = disaggregated(prefill, decode, {
          seed,
          router: { pdFlow: flow, ...(flow === "decode-first" ? { pdLocalPrefillTokens: local } : {}) },
          instances: { maxQueue: maxQueue ?? null, engine: { kvBlocks: 400 } },
          workload: { requests: 120, ratePerSec: 60 },
          ...(untilMs === undefined ? {} : { untilMs }),
        });
        let held = -1;
        const r = simulate(config, {
          // checks conservation itself, and throws if it fails
          inspect: ({ router }) =>
            held = [...router.view.inFlight, ...router.decodeView!.inFlight].reduce((x, y) => x + y, 0),
        });
        assertEquals(r.completed + r.dropped + r.inFlight, r.requests);
        // Finished, every pool's view has let go of every request.
        if (untilMs === undefined) assertEquals([r.inFlight, held], [0, 0]);
      },
    ),
    { numRuns: 40 },
  );
});

Deno.test("decode-first prefills on the decode instance when little of the prompt is uncached there", () => {
  const base = { workload: { requests: 300, ratePerSec: 20 } };
  const local = simulate(
    disaggregated(2, 2, { ...base, router: { pdFlow: "decode-first", pdLocalPrefillTokens: 1e9 } }),
  );
  assertEquals(local.kvTransferMeanMs, null); // nothing was transferred
  assertEquals(local.perInstanceCompleted.slice(0, 2), [0, 0]); // the prefill pool did nothing
  const remote = simulate(disaggregated(2, 2, { ...base, router: { pdFlow: "decode-first" } }));
  assert(remote.kvTransferMeanMs! > 0);
  assertEquals(remote.perInstanceCompleted.slice(0, 2).reduce((a, b) => a + b), 300);
});

Deno.test("a disaggregated run is deterministic, and each pool takes its own policy", () => {
  const config = disaggregated(2, 3, {
    workload: { requests: 500, ratePerSec: 30 },
    prefillPolicy: { name: "prefix_aware" },
    decodePolicy: { name: "round_robin" },
  });
  const a = simulate(config), b = simulate(config);
  assertEquals(JSON.stringify(a), JSON.stringify(b));
  // Round robin over 3 decode instances: 500 = 167 + 167 + 166.
  assertEquals(a.perInstanceCompleted.slice(2).toSorted(), [166, 167, 167]);
});

Deno.test("a fleet of identical 'both' pools is the plain fleet, result for result", () => {
  const plain = parseScenario({ instances: { model: "batching", count: 4 }, workload: { requests: 800 } });
  const pooled = parseScenario({
    instances: { model: "batching", pools: [{ count: 1 }, { count: 3 }] },
    workload: { requests: 800 },
  });
  assertEquals(pooled.instances.count, 4);
  assertEquals(JSON.stringify(simulate(pooled)), JSON.stringify(simulate(plain)));
});

Deno.test("a mixed fleet: load-aware routing gives the faster engines more work", () => {
  const config = parseScenario({
    policy: { name: "least_load" },
    instances: {
      model: "batching",
      pools: [{ count: 2, engine: { preset: "qwen2.5-7b" } }, { count: 2, engine: { preset: "qwen3-14b" } }],
    },
    workload: { requests: 3000, ratePerSec: 40 },
  });
  const r: RunResult = simulate(config);
  const fast = r.perInstanceCompleted[0] + r.perInstanceCompleted[1];
  const slow = r.perInstanceCompleted[2] + r.perInstanceCompleted[3];
  assert(fast > slow * 1.2, `fast ${fast} vs slow ${slow}`);
});

Deno.test("the host tier adds hits the GPU lost, reported apart; without it nothing changes", () => {
  const scenario = (hostKvBlocks?: number) =>
    parseScenario({
      policy: { name: "round_robin" },
      instances: {
        model: "batching",
        count: 2,
        engine: { kvBlocks: 1500, ...(hostKvBlocks ? { hostKvBlocks } : {}) },
      },
      workload: { requests: 1500, ratePerSec: 15, prefix: { groups: 200 } },
    });
  const none = simulate(scenario()), zero = simulate(scenario(0)), host = simulate(scenario(20_000));
  assertEquals(JSON.stringify(zero), JSON.stringify(none));
  assertEquals(none.hostTokenHitRate, 0);
  assert(host.hostTokenHitRate! > 0.02, `host hits ${host.hostTokenHitRate}`);
  assertAlmostEquals(host.gpuTokenHitRate! + host.hostTokenHitRate!, host.tokenHitRate!, 1e-12);
  assert(host.tokenHitRate! > none.tokenHitRate!);
});

Deno.test("pools are validated: model, roles, block size, KV shape, and settings they make unused", () => {
  const cases: [ScenarioInput, string][] = [
    [
      { instances: { pools: [{ count: 2 }] } },
      'scenario.instances.pools: used only by instances.model "batching"',
    ],
    [
      { instances: { model: "batching", pools: [{ count: 1 }, { role: "decode", count: 1 }] } },
      'scenario.instances.pools[1].role: expected "both" like pool 0',
    ],
    [
      { instances: { model: "batching", pools: [{ role: "prefill", count: 1 }] } },
      'scenario.instances.pools: expected a pool with role "decode" too',
    ],
    [
      { instances: { model: "batching", count: 3, pools: [{ count: 1 }] } },
      "scenario.instances.count: not used with instances.pools",
    ],
    [
      {
        instances: {
          model: "batching",
          pools: [{ role: "prefill", count: 1 }, {
            role: "decode",
            count: 1,
            engine: { preset: "llama-3.1-8b" },
          }],
        },
      },
      "scenario.instances.pools[1].engine.preset: expected a model with pool 0's KV shape (57344 bytes/token",
    ],
    [
      { instances: { model: "batching", pools: [{ count: 1 }, { count: 1, engine: { blockTokens: 32 } }] } },
      "scenario.instances.pools[1].engine.blockTokens: expected 16",
    ],
    [
      { instances: { model: "batching", count: 2, kvTransfer: { gbps: 10 } } },
      "scenario.instances.kvTransfer: used only by a disaggregated fleet",
    ],
    [{ decodePolicy: { name: "random" } }, "scenario.decodePolicy: used only by a disaggregated fleet"],
    [
      {
        router: { pdLocalPrefillTokens: 10 },
        instances: {
          model: "batching",
          pools: [{ role: "prefill", count: 1 }, { role: "decode", count: 1 }],
        },
      },
      'scenario.router.pdLocalPrefillTokens: used only with router.pdFlow "decode-first"',
    ],
    [
      {
        instances: {
          model: "batching",
          pools: [{ role: "prefill", count: 1 }, { role: "decode", count: 1 }],
          kvTransfer: { gbps: 0 },
        },
      },
      "scenario.instances.kvTransfer.gbps: expected a number > 0",
    ],
  ];
  for (const [input, message] of cases) {
    const error = assertThrows(() => parseScenario(input), UsageError);
    assertStringIncludes(error.message, message);
  }
});

Deno.test("the disaggregation flags: both pools or neither, never beside --instances; inf bandwidth", async () => {
  const bad: [string[], string][] = [
    [
      ["--model", "batching", "--prefill-instances", "2"],
      "--prefill-instances: needs --decode-instances too",
    ],
    [
      ["--model", "batching", "--instances", "4", "--prefill-instances", "2", "--decode-instances", "2"],
      "--instances: not used with --prefill-instances and --decode-instances",
    ],
    [
      ["--prefill-instances", "1", "--decode-instances", "1"],
      '--prefill-instances: used only by instances.model "batching"',
    ],
    [
      ["--model", "batching", "--kv-transfer-gbps", "10"],
      "--kv-transfer-gbps: used only by a disaggregated fleet",
    ],
    [
      ["--model", "batching", "--prefill-instances", "1", "--decode-instances", "1", "--pd-flow", "sideways"],
      '--pd-flow: expected one of "prefill-first", "decode-first", got "sideways"',
    ],
  ];
  for (const [args, message] of bad) {
    const { code, stderr } = await runCli(...args, "--requests", "10");
    assertEquals(code, 2, args.join(" "));
    assertStringIncludes(stderr, message);
  }
  const { code, stdout } = await runCli(
    "--model",
    "batching",
    "--prefill-instances",
    "1",
    "--decode-instances",
    "2",
    "--kv-transfer-gbps",
    "inf",
    "--kv-transfer-latency-ms",
    "0",
    "--requests",
    "50",
    "--json",
  );
  assertEquals(code, 0);
  const r = JSON.parse(stdout);
  assertEquals([r.completed, r.kvTransferMeanMs], [50, 0]);
});

Deno.test("after a whole run, every pool's view holds nothing in flight (drops on either leg included)", () => {
  for (const pdFlow of ["prefill-first", "decode-first"] as const) {
    // Prefill instances too small for any prompt: every prefill leg is dropped (too_long).
    const config = disaggregated(1, 2, {
      router: { pdFlow },
      decodePolicy: { name: "least_load" },
      instances: {
        pools: [{ role: "prefill", count: 1, engine: { kvBlocks: 10 } }, { role: "decode", count: 2 }],
      },
      workload: { requests: 30, ratePerSec: 20 },
    });
    let views: (readonly number[])[] = [];
    const r = simulate(config, {
      inspect: ({ router }) => views = [[...router.view.inFlight], [...router.decodeView!.inFlight]],
    });
    assertEquals([r.dropped, r.droppedByReason.too_long], [30, 30]);
    assertEquals(views, [[0], [0, 0]], pdFlow);
  }
});

Deno.test("decode-first prefills locally by the decode pool's cache even when its policy ignores caches", () => {
  const config = disaggregated(2, 2, {
    router: { pdFlow: "decode-first", pdLocalPrefillTokens: 512 },
    policy: { name: "round_robin" },
    decodePolicy: { name: "least_load" },
    workload: {
      requests: 200,
      ratePerSec: 10,
      prefix: { groups: 1, sharedFrac: 1, tokens: 1024 },
      suffixTokens: { dist: "constant", value: 100 },
    },
  });
  const r = simulate(config);
  const prefilledRemotely = r.perInstanceCompleted[0] + r.perInstanceCompleted[1];
  // Once each decode instance holds the shared prefix, only 100 tokens are uncached there: local prefill.
  assert(prefilledRemotely > 0 && prefilledRemotely <= 4, `remote prefills ${prefilledRemotely}`);
  // Cache-blind policies in both pools: the router's own reading of the decode pool's cache is not the policy's.
  assertEquals(r.expectedTokenHitRate, null);
});

Deno.test("a decode leg preempted while its KV is on the way still counts its transfer and its prefill", () => {
  const config = disaggregated(2, 1, {
    instances: {
      kvTransfer: { gbps: 1, latencyMs: 0 },
      pools: [{ role: "prefill", count: 2 }, { role: "decode", count: 1, engine: { kvBlocks: 300 } }],
    },
    workload: { requests: 300, ratePerSec: 30, outputTokens: { dist: "constant", value: 64 } },
  });
  const r = simulate(config);
  assert(r.preemptions > 0, "the scenario preempts");
  assertEquals(r.completed, 300);
  assertEquals(r.perInstanceCompleted[0] + r.perInstanceCompleted[1], 300); // every prefill credited
});

Deno.test("a mixed fleet's approximate view gives each instance its own cache's size", () => {
  const view = new ApproximateCacheView(2, "blocks", [4, 100]);
  const request = {
    id: 0,
    arrivalMs: 0,
    prefixGroup: 3,
    prefixTokens: 160,
    suffixTokens: 16,
    outputTokens: 1,
  };
  const keys = blockKeys(request, 16);
  view.routed(0, request, keys);
  view.routed(1, request, keys);
  assertEquals([view.matchedBlocks(0, request, keys), view.matchedBlocks(1, request, keys)], [4, 10]);
});

Deno.test("fleet settings that would be ignored or exceed the limits are refused", async () => {
  const cases: [ScenarioInput, string][] = [
    [
      { instances: { model: "batching", engine: { hostKvGbps: 100 } } },
      "scenario.instances.engine.hostKvGbps: used only with a host KV tier",
    ],
    [
      { instances: { model: "batching", pools: [{ count: 1, engine: { hostKvGbps: 100 } }] } },
      "scenario.instances.pools[0].engine.hostKvGbps: used only with a host KV tier",
    ],
    [
      { instances: { model: "batching", pools: [{ count: 6000 }, { count: 6000 }] } },
      "scenario.instances.pools: expected at most 10000 instances in all",
    ],
  ];
  for (const [input, message] of cases) {
    assertStringIncludes(assertThrows(() => parseScenario(input), UsageError).message, message);
  }
  // The pool flags replace a scenario file's instance count, as --instances would.
  const file = await Deno.makeTempFile({ suffix: ".json" });
  try {
    await Deno.writeTextFile(file, JSON.stringify({ instances: { model: "batching", count: 8 } }));
    const out = await runCli(
      "--scenario",
      file,
      "--prefill-instances",
      "1",
      "--decode-instances",
      "1",
      "--requests",
      "20",
      "--json",
    );
    assertEquals(out.code, 0, out.stderr);
    assertEquals(JSON.parse(out.stdout).completed, 20);
  } finally {
    await Deno.remove(file);
  }
});
