/**
 * `deno task calibrate` in closed loop: against our own simulated engine
 * served over HTTP, whose coefficients are known, it must recover them; and
 * the fit's arithmetic on exact data.
 */
import { assert, assertAlmostEquals, assertEquals, assertMatch, assertThrows } from "@std/assert";
import { type CliOutput, messageLine, runDeno } from "./_cli.ts";
import { calibrate } from "../scenarios/wire/calibration.ts";
import {
  blockSizeOf,
  burstTtfts,
  chooseBudget,
  contextPairs,
  type EngineCoefficients,
  fitCoefficients,
  fitLinear,
} from "../scenarios/wire/calibration_fit.ts";
import { kvAttentionWork } from "../actors/instances/slot_instance.ts";
import { scenario } from "./_scenarios.ts";
import { loopbackFleet } from "./_wire.ts";

const exact = (value: number) => ({ value, ci95: 0 });

Deno.test("fitLinear recovers an exact plane and refuses collinear regressors", () => {
  const xs = [[1, 0, 0], [1, 1, 0], [1, 0, 1], [1, 2, 3], [1, 5, 1]];
  const fit = fitLinear(xs, xs.map(([, a, b]) => 2 + 3 * a - 0.5 * b));
  fit.beta.forEach((b, i) => assertAlmostEquals(b, [2, 3, -0.5][i], 1e-9));
  assertAlmostEquals(fit.sigma, 0, 1e-9);
  assertThrows(() => fitLinear([[1, 1], [1, 1], [1, 1]], [1, 2, 3]), RangeError, "collinear");
});

Deno.test("fitCoefficients: exact prefills and gaps give the coefficients; γ only when it is there", () => {
  const truth = { alpha: 10, step: 20, prefill: 0.2, decode: 4, gamma: 1e-4 };
  const prefills = [39, 71, 135, 263, 519, 1031].flatMap((n) => [
    { prefillTokens: n, attention: contextPairs(0, n) },
    { prefillTokens: 16, attention: contextPairs(n, 16) },
  ]);
  const decodes = [1, 2, 4, 8].map((s) => ({
    sequences: s,
    attention: 0,
    gapMs: truth.step + truth.decode * s,
  }));
  const linear = fitCoefficients(
    prefills.map((p) => ({ ...p, ttftMs: truth.alpha + truth.step + truth.prefill * p.prefillTokens })),
    decodes,
  ).coefficients;
  assertAlmostEquals(linear.stepMs.value, 20, 1e-9);
  assertAlmostEquals(linear.decodeMsPerSeq.value, 4, 1e-9);
  assertAlmostEquals(linear.prefillMsPerToken.value, 0.2, 1e-9);
  assertAlmostEquals(linear.requestOverheadMs.value, 10, 1e-9);
  assertEquals(linear.attention.value, 0); // an exact line: γ's interval does not exclude 0
  const noisy = (i: number) => (i % 3 - 1) * 0.5; // ±0.5 ms, so γ has an interval
  const attention = fitCoefficients(
    prefills.map((p, i) => ({
      ...p,
      ttftMs: truth.alpha + truth.step + truth.prefill * p.prefillTokens +
        truth.gamma * p.attention + noisy(i),
    })),
    decodes,
  ).coefficients;
  assertAlmostEquals(attention.attention.value, 1e-4, 1e-5);
  assertAlmostEquals(attention.prefillMsPerToken.value, 0.2, 0.01);
});

Deno.test("kvAttentionWork: micro-batches of 512, each attending every occupied cell once it is in", () => {
  assertEquals(kvAttentionWork(100, 10), 10 * 110);
  assertEquals(kvAttentionWork(0, 1024), 512 * 512 + 512 * 1024);
  assertEquals(kvAttentionWork(1000, 600), 512 * 1512 + 88 * 1600);
});

Deno.test("burstTtfts: the first prompt alone, then the rest first come, first served within the budget", () => {
  const c: EngineCoefficients = {
    stepMs: exact(10),
    prefillMsPerToken: exact(1),
    decodeMsPerSeq: exact(0),
    requestOverheadMs: exact(5),
    attention: exact(0),
  };
  // Budget 100: step 1 = 60 of the first (70 ms); step 2 = 60 of the second + 40 of the third (110 ms);
  // step 3 = the third's last 20 (30 ms). +5 ms overhead each.
  assertEquals(burstTtfts([60, 60, 60], 100, c), [75, 185, 215]);
  const budget = chooseBudget([{ prompts: [60, 60, 60], ttftsMs: [75, 185, 215] }], c, 8192);
  assertEquals(budget.budget, undefined); // 100 is no candidate; every one ≥ 180 predicts alike
  assertEquals(blockSizeOf([32, 48, 0, 1024]), 16);
  assertEquals(blockSizeOf([263, 39]), 1);
  assertEquals(blockSizeOf([0]), undefined);
});

Deno.test({
  name: "calibrate recovers a served simulated engine's coefficients within 10%",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const engine = {
      preset: "qwen2.5-7b",
      stepMs: 20,
      prefillMsPerToken: 0.2,
      decodeMsPerSeq: 4,
      // Large beside the few ms HTTP adds on a loaded machine (3.8 ms measured beside two busy loops),
      // which a client, and so calibrate, counts as overhead too.
      requestOverheadMs: 60,
      kvBlocks: 20_000,
      blockTokens: 16,
    };
    const config = scenario({ instances: { count: 1, model: "batching", engine } });
    const fleet = await loopbackFleet(config, 1);
    try {
      const lines: string[] = [];
      const result = await calibrate({
        urls: fleet.urls,
        minRounds: 3,
        maxRounds: 6,
        tolerance: 0.1,
        maxPromptTokens: 1100,
        decodeTokens: 24,
        maxConcurrency: 8,
        slotProbe: 8,
        requestTimeoutMs: 30_000,
        nonce: 1,
        onProgress: (line) => lines.push(line),
      });
      const c = result.coefficients;
      const within = (name: string, got: number, want: number) =>
        assert(
          Math.abs(got - want) <= 0.1 * want,
          `${name}: ${got} is not within 10% of ${want}\n${lines.join("\n")}`,
        );
      within("stepMs", c.stepMs.value, 20);
      within("prefillMsPerToken", c.prefillMsPerToken.value, 0.2);
      within("decodeMsPerSeq", c.decodeMsPerSeq.value, 4);
      within("requestOverheadMs", c.requestOverheadMs.value, 60);
      // A linear engine: any attention term found is too small to matter at the longest prompt.
      assert(c.attention.value * contextPairs(0, 1031) < 0.05 * 0.2 * 1031);
      assertEquals(result.cache.kind, "pool");
      assertEquals(result.cache.blockSize, 16);
      assertEquals(result.preset.model, "batching");
      assertEquals(result.preset.engine.blockTokens, 16);
      assertEquals(result.preset.engine.kvBlocks, 20_000); // from vllm:cache_config_info
      assertEquals(result.facts.server, "vllm");
    } finally {
      await fleet.close(0);
    }
  },
});

/** `deno run` of a tool with its task's permissions (writes only under /tmp), its output decoded. */
function tool(script: "calibrate" | "validate", ...args: string[]): Promise<CliOutput> {
  return runDeno(
    ["--allow-read", "--allow-write=/tmp", "--allow-net=127.0.0.1,localhost", "--allow-ffi", "--allow-sys"],
    script,
    ...args,
  );
}

Deno.test("calibrate and validate: bad input is one line naming the flag, exit 2; an unreachable engine exit 1", async () => {
  const cases: [("calibrate" | "validate"), string[], RegExp][] = [
    ["calibrate", [], /^error: --url: required/],
    ["calibrate", ["--url", "ftp://127.0.0.1:1"], /^error: --url: expected http\(s\) URLs/],
    [
      "calibrate",
      ["--url", "http://example.com:8080"],
      /^error: --url: not allowed to reach example\.com:8080/,
    ],
    [
      "calibrate",
      ["--url", "http://127.0.0.1:1", "--tolerance", "-1"],
      /^error: --tolerance: expected a number > 0/,
    ],
    [
      "calibrate",
      ["--url", "http://127.0.0.1:1", "--min-rounds", "4", "--max-rounds", "2"],
      /^error: --max-rounds: expected at least --min-rounds \(4\), got 2/,
    ],
    [
      "validate",
      ["--url", "http://127.0.0.1:1", "--policies", "round_robin,"],
      /^error: --policies: expected P,P,…/,
    ],
    [
      "validate",
      ["--url", "http://127.0.0.1:1", "--repeat", "0"],
      /^error: --repeat: expected an integer > 0/,
    ],
    [
      "validate",
      ["--url", "http://127.0.0.1:1,http://127.0.0.1:2", "--instances", "3"],
      /^error: --instances: the fleet is the --url engines \(2\); got 3/,
    ],
  ];
  for (const [script, args, expected] of cases) {
    const { code, stderr } = await tool(script, ...args);
    assertEquals(code, 2, `${script} ${args.join(" ")}: ${stderr}`);
    assertMatch(messageLine(stderr), expected);
  }
  const out = await Deno.makeTempDir();
  try {
    const { code, stderr } = await tool("calibrate", "--url", "http://127.0.0.1:1", "--out", out);
    assertEquals(code, 1, stderr);
    assertMatch(stderr.trim(), /^calibrate: http:\/\/127\.0\.0\.1:1\/v1\/models: cannot connect: /);
  } finally {
    await Deno.remove(out, { recursive: true });
  }
});
