/**
 * Routing-quality accounting: the note the router attaches to each placement
 * (tokens available anywhere, expected by its view, expected but absent) and
 * the run metrics folded from it.
 */
import { assert, assertAlmostEquals, assertEquals, assertGreater } from "@std/assert";
import type { CacheView } from "../actors/router/cache_view.ts";
import { createPolicy, type PolicySpec } from "../actors/policies/mod.ts";
import type { RoutingPolicy } from "../actors/policies/policy.ts";
import type { AnyMessage, Request, RouterCommand, RoutingNote, ServeCommand } from "../actors/protocol.ts";
import { Router, type RouterOptions } from "../actors/router/router.ts";
import { Kernel } from "../actors/runtime/kernel.ts";
import { type RunResult, simulate, type SimulationConfig } from "../actors/simulation.ts";
import type { ScenarioInput } from "../scenarios/scenario/scenario.ts";
import { Recorder } from "./_recorder.ts";
import { scenario } from "./_scenarios.ts";

/** Runs `config` and collects the routing note of every placement, in routing order. */
function notesOf(config: SimulationConfig): { result: RunResult; notes: RoutingNote[] } {
  const notes: RoutingNote[] = [];
  const result = simulate(config, {
    onDeliver: (message) => {
      const m = message as AnyMessage;
      if (m.type === "serve") notes.push(m.routing!);
    },
  });
  return { result, notes };
}

const SESSIONS: ScenarioInput = {
  instances: { model: "batching" },
  workload: { requests: 800, ratePerSec: 20, sessions: { turnsMean: 4, thinkTimeMs: 3000 } },
};

Deno.test("with an exact, event-driven view, what the router expects is there: expected <= available, no false tokens", async (t) => {
  const cases: [string, ScenarioInput][] = [
    ["fifo, hybrid", { workload: { requests: 3000, prefix: { zipf: 1.5, sharedFrac: 0.9 } } }],
    ["fifo, prefix_aware, small cache", {
      policy: { name: "prefix_aware" },
      instances: { cacheCapacity: 4 },
      workload: { requests: 3000 },
    }],
    ["batching sessions, prefix_aware", { ...SESSIONS, policy: { name: "prefix_aware" } }],
    ["batching sessions, hybrid", { ...SESSIONS, policy: { name: "hybrid", threshold: 1 } }],
    ["batching sessions, tight KV, vllm_prefix", {
      ...SESSIONS,
      policy: { name: "vllm_prefix" },
      instances: { model: "batching", engine: { kvBlocks: 1500 } },
    }],
  ];
  for (const [label, input] of cases) {
    await t.step(label, () => {
      // The exact view by name: a batching fleet's default for these policies is a router-side index.
      const { result, notes } = notesOf(scenario({ ...input, router: { cacheView: "exact" } }));
      assertEquals(notes.length, result.requests);
      let expectedSum = 0;
      for (const note of notes) {
        assert(note.expectedTokens !== null && note.availableTokens !== null, JSON.stringify(note));
        assert(note.expectedTokens <= note.availableTokens, JSON.stringify(note));
        assertEquals(note.falseTokens, 0, JSON.stringify(note));
        expectedSum += note.expectedTokens;
      }
      assertGreater(expectedSum, 0, "the view expected some hits");
      assertEquals(result.viewFalsePositiveRate, 0);
      assertAlmostEquals(result.routingRegret!, result.availableTokenHitRate! - result.tokenHitRate!, 1e-12);
    });
  }
});

Deno.test("an approximate view credits prefixes the instances no longer hold: view false positives > 0", async (t) => {
  const cases: [string, ScenarioInput][] = [
    // The router's index never forgets; each instance's LRU keeps 4 of 100 groups.
    ["fifo", {
      policy: { name: "prefix_aware" },
      router: { cacheView: "approximate", approxCapacity: null },
      instances: { cacheCapacity: 4 },
      workload: { requests: 3000 },
    }],
    ["batching", {
      policy: { name: "prefix_aware" },
      router: { cacheView: "approximate", approxCapacity: null },
      instances: { model: "batching", engine: { kvBlocks: 2000 } },
      workload: { requests: 2000 },
    }],
  ];
  for (const [label, input] of cases) {
    await t.step(label, () => {
      const { result, notes } = notesOf(scenario(input));
      assertGreater(result.viewFalsePositiveRate!, 0.02);
      assert(notes.some((n) => n.falseTokens! > 0 && n.expectedTokens! > n.availableTokens!));
      // Expected but absent tokens are never more than expected.
      for (const n of notes) assert(n.falseTokens! <= n.expectedTokens!, JSON.stringify(n));
      assertGreater(result.expectedTokenHitRate!, result.tokenHitRate!);
    });
  }
});

Deno.test("a cache-blind policy has no expectation; what was available is still measured", async (t) => {
  for (const name of ["round_robin", "least_load", "random", "power_of_two"] as const) {
    await t.step(name, () => {
      const { result, notes } = notesOf(scenario({ policy: { name }, workload: { requests: 2000 } }));
      for (const n of notes) assertEquals([n.expectedTokens, n.falseTokens], [null, null]);
      assertEquals([result.expectedTokenHitRate, result.viewFalsePositiveRate], [null, null]);
      assertGreater(result.availableTokenHitRate!, result.tokenHitRate!);
      assertGreater(result.routingRegret!, 0);
    });
  }
});

Deno.test("prefix_aware leaves less of the available cache unused than round_robin", () => {
  const regret = (name: PolicySpec["name"]) =>
    simulate(scenario({ ...SESSIONS, policy: { name } })).routingRegret!;
  // prefix_aware always follows the longest match; delivered may even exceed it (blocks computed while a request waits).
  assert(Math.abs(regret("prefix_aware")) < 0.01, `${regret("prefix_aware")}`);
  assertGreater(regret("round_robin"), 0.2);
});

// ---- The router's note, unit by unit ------------------------------------------

/** A request of group 3: 160 prefix tokens (10 blocks of 16) + `suffix` tokens. */
const req = (suffix: number): Request => ({
  id: 0,
  arrivalMs: 0,
  prefixGroup: 3,
  prefixTokens: 160,
  suffixTokens: suffix,
  outputTokens: 1,
});

/** One routing by `policy` over 3 instances whose view matches `matches` blocks; the note sent. */
function routeOnce(policy: RoutingPolicy, request: Request, matches: number[], options: RouterOptions = {}) {
  const kernel = new Kernel({ seed: 1 });
  const recorders = matches.map(() => new Recorder<ServeCommand>());
  const refs = recorders.map((r, i) => kernel.spawn(`instance/${i}`, r));
  const cacheView: CacheView = {
    learnsFromRouting: false,
    holds: (i) => matches[i] > 0,
    matchedBlocks: (i) => matches[i],
    routed() {},
    apply() {},
  };
  const router = kernel.spawn<RouterCommand>(
    "router",
    new Router(refs, policy, { cacheView, cacheUnit: "blocks", ...options }),
  );
  kernel.send(router, { type: "route", request });
  kernel.run();
  return recorders.flatMap((r) => r.received.map((x) => x.message.routing!))[0];
}

Deno.test("the note counts expected tokens as the engine caps a hit: whole blocks, never the prompt's last token", async (t) => {
  /** Reads the view's block matches, then picks instance `i`. */
  const pick = (i: number): RoutingPolicy => ({
    name: "pick",
    choose(r, v) {
      v.matchedBlocks(0, r);
      return i;
    },
  });
  const fleet = { cachedPrefixTokens: (i: number) => [160, 96, 0][i] };
  await t.step("a 10-block match on a 260-token prompt: 160 tokens", () => {
    assertEquals(routeOnce(pick(0), req(100), [10, 6, 0], { fleetCache: fleet }), {
      availableTokens: 160,
      expectedTokens: 160,
      falseTokens: 0,
    });
  });
  await t.step("a 10-block match on a 160-token prompt: 9 blocks (the last token is always computed)", () => {
    assertEquals(routeOnce(pick(0), req(0), [10, 6, 0]).expectedTokens, 144);
  });
  await t.step("the choice held less than the view said: the difference is false", () => {
    // The view says 10 blocks at instance 1, which really holds 96 tokens.
    assertEquals(routeOnce(pick(1), req(100), [0, 10, 0], { fleetCache: fleet }), {
      availableTokens: 160,
      expectedTokens: 160,
      falseTokens: 64,
    });
  });
  await t.step("no fleet view (real time): available and false are unknown, expected is still known", () => {
    assertEquals(routeOnce(pick(1), req(100), [0, 6, 0]), {
      availableTokens: null,
      expectedTokens: 96,
      falseTokens: null,
    });
  });
  await t.step("a policy that never reads the cache view expects nothing", () => {
    const blind = createPolicy({ name: "round_robin" });
    assertEquals(routeOnce(blind, req(100), [10, 6, 0], { fleetCache: fleet }), {
      availableTokens: 160,
      expectedTokens: null,
      falseTokens: null,
    });
    assertEquals(routeOnce(blind, req(100), [10, 6, 0]), {
      availableTokens: null,
      expectedTokens: null,
      falseTokens: null,
    });
  });
  await t.step("a policy that reads only groups (holds) expects the group's keyed prefix", () => {
    const byGroup: RoutingPolicy = { name: "by_group", choose: (r, v) => v.holds(2, r.prefixGroup) ? 2 : 1 };
    assertEquals(routeOnce(byGroup, req(100), [0, 4, 0]).expectedTokens, 160);
  });
});

Deno.test("decode stretches change nothing the accounting or a stopped run's clock sees", async () => {
  // Request A caches 2 blocks of 512 tokens; B decodes 800 tokens on a
  // 100-block instance, evicting them step by step inside a decode stretch;
  // A's twin arrives mid-stretch and must find only what is left.
  const trace = await Deno.makeTempFile({ suffix: ".jsonl" });
  await Deno.writeTextFile(
    trace,
    [
      { timestamp: 0, input_length: 1024, output_length: 1, hash_ids: [1, 2] },
      { timestamp: 0, input_length: 400, output_length: 800, hash_ids: [100] },
      { timestamp: 3000, input_length: 1024, output_length: 1, hash_ids: [1, 2] },
    ].map((row) => JSON.stringify(row)).join("\n"),
  );
  // Round robin ignores status reports, so reporting once per 10^7 ms (which
  // turns decode stretches off) runs the engine exactly as reporting on every
  // change (with stretches): the real cache the accounting reads, and the
  // last step delivered before `untilMs`, must be the same.
  const run = (statusIntervalMs: number, untilMs?: number) =>
    simulate(scenario({
      policy: { name: "round_robin" },
      router: { statusIntervalMs },
      instances: { count: 1, model: "batching", engine: { kvBlocks: 100 } },
      workload: { trace: { path: trace, format: "mooncake" } },
      untilMs,
    }));
  try {
    for (const untilMs of [undefined, 1500, 2500]) {
      const stretched = run(0, untilMs), stepwise = run(1e7, untilMs);
      for (
        const field of [
          "completed",
          "inFlight",
          "ttftMeanMs",
          "tokenHitRate",
          "availableTokenHitRate",
          "routingRegret",
        ] as const
      ) {
        assertEquals(stretched[field], stepwise[field], `${field} (untilMs ${untilMs})`);
      }
      // Run to the end, the periodic reporter's last tick (10^7 ms) is the last delivery.
      if (untilMs !== undefined) assertEquals(stretched.simulatedMs, stepwise.simulatedMs);
    }
    assert(run(0).availableTokenHitRate! < 0.4, "the twin found blocks a step-by-step run had evicted");
  } finally {
    await Deno.remove(trace);
  }
});
