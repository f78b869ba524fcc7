import { assertEquals, assertThrows } from "@std/assert";
import { deepMerge, parseScenario } from "../scenarios/scenario/scenario.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";

Deno.test("an empty scenario gets every documented default", () => {
  const c = parseScenario({});
  assertEquals(c.seed, 1);
  assertEquals(c.policy, { name: "hybrid", threshold: 1, hostCredit: 0.8 });
  assertEquals(c.instances, {
    count: 4,
    overheadMs: 30,
    prefillMsPerToken: 0.04,
    decodeMsPerToken: 0,
    serviceTime: "deterministic",
    cacheCapacity: 16,
    maxQueue: Infinity,
    model: "fifo",
    engine: {
      preset: "qwen2.5-7b",
      stepMs: 7.05,
      prefillMsPerToken: 0.0195,
      decodeMsPerSeq: 0.0254,
      requestOverheadMs: 4.67,
      kvBlocks: 67659,
      blockTokens: 16,
      maxBatchTokens: 8192,
      maxSeqs: 1024,
      prefixCaching: true,
      reserveFullIsl: true,
      hostKvBlocks: 0,
      hostKvGbps: 512,
    },
  });
  assertEquals(c.workload.prefix, { groups: 100, zipf: 1, sharedFrac: 0.5, tokens: 1024 });
  assertEquals([c.workload.requests, c.workload.ratePerSec], [20_000, 35]);
});

Deno.test("the example scenario file is valid", async () => {
  const c = parseScenario(
    JSON.parse(await Deno.readTextFile(new URL("../scenarios/example.json", import.meta.url))),
  );
  assertEquals(c.workload.prefix.zipf, 2);
});

Deno.test("invalid scenarios name the field path, the value and the expectation", async (t) => {
  const cases: [unknown, string][] = [
    [{ workload: { prefix: { zipf: -1 } } }, "scenario.workload.prefix.zipf: expected a number >= 0, got -1"],
    [{ workload: { ratePerSec: 0 } }, "scenario.workload.ratePerSec: expected a number > 0, got 0"],
    [
      { workload: { prefix: { sharedFrac: 1.5 } } },
      "scenario.workload.prefix.sharedFrac: expected a number <= 1, got 1.5",
    ],
    [{ instances: { count: 2.5 } }, "scenario.instances.count: expected an integer, got 2.5"],
    [{ instances: { count: "four" } }, 'scenario.instances.count: expected a number, got "four"'],
    [{ policy: { name: "fastest" } }, 'scenario.policy.name: expected one of "round_robin", "least_load"'],
    [
      { policy: { name: "sglang_cache_aware", balanceRel: 0.5 } },
      "scenario.policy.balanceRel: expected a number >= 1, got 0.5",
    ],
    [
      { policy: { name: "round_robin", threshold: 2 } },
      "scenario.policy.threshold: not a parameter of round_robin (its parameters: none)",
    ],
    [
      { policy: { name: "llmd_weighted", loadFactor: 2 } },
      "scenario.policy.loadFactor: not a parameter of llmd_weighted (its parameters: prefixWeight, queueWeight, kvWeight, maxPrefixBlocks, hostCredit)",
    ],
    [
      { policy: { name: "chwbl", ringPoints: 0.5 } },
      "scenario.policy.ringPoints: expected an integer, got 0.5",
    ],
    [{ policy: { threshold: -1 } }, "scenario.policy.threshold: expected a number >= 0, got -1"],
    [{ policy: "hybrid" }, 'scenario.policy: expected an object, got "hybrid"'],
    [{ workload: { colour: "red" } }, "scenario.workload.colour: unknown field"],
    [
      { workload: { suffixTokens: { dist: "normal" } } },
      'scenario.workload.suffixTokens.dist: expected one of "constant"',
    ],
    [
      { workload: { suffixTokens: { dist: "uniform", min: 5, max: 2 } } },
      "scenario.workload.suffixTokens.max: expected max >= min, got 2",
    ],
    [[1, 2], "scenario: expected an object"],
  ];
  for (const [input, message] of cases) {
    await t.step(message, () => {
      assertThrows(() => parseScenario(input), UsageError, message);
    });
  }
});

Deno.test("a parsed policy carries every parameter of its descriptor, absent ones at their defaults", () => {
  assertEquals(parseScenario({ policy: { threshold: 4 } }).policy, {
    name: "hybrid",
    threshold: 4,
    hostCredit: 0.8,
  });
  assertEquals(parseScenario({ policy: { name: "round_robin" } }).policy, { name: "round_robin" });
  assertEquals(
    parseScenario({ policy: { name: "chwbl", ringPoints: 64 } }).policy,
    { name: "chwbl", loadFactor: 1.25, ringPoints: 64 },
  );
  // The registry's field order, whatever the file's: `run --json` prints the policy the same way every time.
  assertEquals(
    Object.keys(parseScenario({ policy: { cacheThreshold: 0.5, name: "sglang_cache_aware" } }).policy),
    ["name", "balanceAbs", "balanceRel", "cacheThreshold", "hostCredit"],
  );
});

Deno.test("deepMerge merges nested objects and lets the override win", () => {
  assertEquals(
    deepMerge({ a: { b: 1, c: 2 }, d: [1] }, { a: { c: 3 }, d: [2], e: 4 }),
    { a: { b: 1, c: 3 }, d: [2], e: 4 },
  );
});
