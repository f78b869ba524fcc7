import { assertEquals, assertThrows } from "@std/assert";
import { deepMerge, parseScenario } from "../scenarios/scenario.ts";
import { UsageError } from "../scenarios/usage_error.ts";

Deno.test("an empty scenario gets every documented default", () => {
  const c = parseScenario({});
  assertEquals(c.seed, 1);
  assertEquals(c.policy, { name: "hybrid", threshold: 1 });
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
      maxBatchTokens: 2048,
      maxSeqs: 256,
      prefixCaching: true,
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

Deno.test("deepMerge merges nested objects and lets the override win", () => {
  assertEquals(
    deepMerge({ a: { b: 1, c: 2 }, d: [1] }, { a: { c: 3 }, d: [2], e: 4 }),
    { a: { b: 1, c: 3 }, d: [2], e: 4 },
  );
});
