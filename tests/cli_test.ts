/** End-to-end tests of `deno task run`'s entry point, run as a subprocess. */
import { assert, assertEquals, assertMatch, assertStringIncludes } from "@std/assert";
import { describeBounds, POLICIES } from "../actors/policies/mod.ts";
import { parameterFlag } from "../scenarios/scenario/command_line.ts";
import { runCli } from "./_cli.ts";

const run = runCli;

Deno.test("run --json prints the contract fields, consistent with each other", async () => {
  const { code, stdout } = await run("--json", "--requests", "2000", "--policy", "least_load");
  assertEquals(code, 0);
  const r = JSON.parse(stdout);
  for (
    const key of [
      "requests",
      "completed",
      "dropped",
      "ttftMeanMs",
      "ttftP50Ms",
      "ttftP90Ms",
      "ttftP99Ms",
      "hitRate",
      "tokenHitRate",
      "imbalance",
      "messages",
      "wallMs",
    ]
  ) assertEquals(typeof r[key], "number", key);
  assertEquals([r.requests, r.completed, r.policy], [2000, 2000, "least_load"]);
  assert(r.ttftP50Ms <= r.ttftP90Ms && r.ttftP90Ms <= r.ttftP99Ms);
});

Deno.test("run prints a table by default and flags override the scenario file", async () => {
  const { code, stdout } = await run(
    "--scenario",
    "scenarios/example.json",
    "--requests",
    "500",
    "--policy",
    "round_robin",
  );
  assertEquals(code, 0);
  assertStringIncludes(stdout, "policy round_robin");
  assertStringIncludes(stdout, "500 requests at 35 req/s, zipf 2");
  assertStringIncludes(stdout, "TTFT ms");
});

Deno.test("bad input exits 2 with one clear line and no stack trace", async (t) => {
  const cases: [string[], string][] = [
    [["--bogus"], "unknown flag --bogus"],
    [["--rate", "0"], "--rate: expected a number > 0, got 0"],
    [["--rate", "-3"], "--rate: expected a number > 0, got -3"],
    [["--rate", "fast"], '--rate: expected a number, got "fast"'],
    [["--zipf", "-0.5"], "--zipf: expected a number >= 0, got -0.5"],
    [["--prefix-frac", "1.2"], "--prefix-frac: expected a number <= 1, got 1.2"],
    [["--instances", "0"], "--instances: expected a number >= 1, got 0"],
    [["--threshold", "-1"], "--threshold: expected a number >= 0, got -1"],
    [
      ["--policy", "round_robin", "--threshold", "5"],
      "--threshold: not a parameter of round_robin (its parameters: none)",
    ],
    [
      ["--policy", "sglang_cache_aware", "--balance-rel", "0.5"],
      "--balance-rel: expected a number >= 1, got 0.5",
    ],
    [["--policy", "chwbl", "--ring-points", "2.5"], "--ring-points: expected an integer, got 2.5"],
    [
      ["--cache-threshold", "0.5"],
      "--cache-threshold: not a parameter of hybrid (its parameters: threshold, hostCredit)",
    ],
    [["--requests", "10.5"], "--requests: expected an integer, got 10.5"],
    [["--policy", "magic"], '--policy: expected one of "round_robin"'],
    [["--scenario", "no/such.json"], '--scenario: cannot read "no/such.json": no such file'],
    [["--scenario", "deno.lock", "--requests", "5"], "unknown field"],
    [["--scenario", "tests/cli_test.ts"], '--scenario: "tests/cli_test.ts" is not valid JSON'],
    [["stray"], 'unexpected argument "stray"'],
    [
      ["--trace", "no/such.jsonl", "--model", "batching"],
      '--trace: cannot read "no/such.jsonl": no such file',
    ],
    [["--trace", "tests/fixtures/mooncake_sample.jsonl"], 'scenario.instances.model: expected "batching"'],
    [
      ["--trace", "tests/fixtures/mooncake_malformed.jsonl", "--model", "batching"],
      "mooncake_malformed.jsonl:7: input_length",
    ],
    [["--model", "gpu"], '--model: expected one of "fifo", "batching"'],
    [["--preset", "llama-3.1-8b"], '--preset: used only by instances.model "batching"'],
    [
      ["--model", "batching", "--cache-capacity", "4"],
      '--cache-capacity: used only by instances.model "fifo"',
    ],
    [
      ["--trace", "tests/fixtures/azure_sample.csv", "--zipf", "2"],
      "--zipf: not used when workload.trace replays a trace",
    ],
    [["--trace-speed", "2"], "--trace-speed: needs --trace FILE"],
    [
      ["--router", "scenarios/plugins/cache_with_slack.ts", "--policy", "hybrid"],
      "--router: replaces the built-in policy; drop --policy",
    ],
    [
      ["--router", "scenarios/plugins/cache_with_slack.ts", "--ring-points", "8"],
      "--router: replaces the built-in policy; drop --ring-points",
    ],
    [["--requests"], "--requests: expected a value after the flag"],
    [["--instances", "1e9"], "--instances: expected a number <= 10000, got 1000000000"],
    [["--scenario", "tests/fixtures/not_an_object.json"], "must hold a JSON object, got an array"],
    [["--faults", "tests/fixtures/faults_bad.json"], "--faults [0].forMs: expected a number > 0, got -1"],
    [["--faults", "deno.json"], '--faults: "deno.json" must hold a JSON list'],
    [["--router-replicas", "0"], "--router-replicas: expected a number >= 1, got 0"],
    [["--replica-spread", "sticky"], '--replica-spread: expected one of "random", "session"'],
    [["--arrivals", "mmpp", "--burstiness", "0.5"], '--burstiness: expected a number >= 1 for "mmpp"'],
    [["--status-ttl-ms", "0"], "--status-ttl-ms: expected a number > 0, got 0"],
    [["--model", "batching", "--preset", "gpt-9"], '--preset: expected one of "qwen2.5-7b"'],
    [
      ["--trace-speed", "0", "--trace", "tests/fixtures/azure_sample.csv"],
      "--trace-speed: expected a number > 0, got 0",
    ],
  ];
  for (const [args, message] of cases) {
    await t.step(args.join(" "), async () => {
      const { code, stdout, stderr } = await run(...args);
      assertEquals(code, 2, stderr);
      assertStringIncludes(stderr, message);
      assertEquals(stderr.trim().split("\n").length, 1, stderr);
      assert(!/\bat .*\.ts:\d+/.test(stderr), `stack trace in: ${stderr}`);
      assertEquals(stdout, "");
    });
  }
});

Deno.test("run replays a trace with the batching model and reports skipped lines", async () => {
  const { code, stdout, stderr } = await run(
    "--trace",
    "tests/fixtures/mooncake_malformed.jsonl",
    "--model",
    "batching",
    "--skip-invalid",
  );
  assertEquals(code, 0, stderr);
  assertStringIncludes(stdout, "completed 38");
  assertStringIncludes(stdout, "(skipped 2 malformed trace lines)");
  assertStringIncludes(stdout, "TPOT");
});

Deno.test("run --help exits 0 and lists the flags, every built-in policy and its parameter flags with defaults", async () => {
  const { code, stdout } = await run("--help");
  assertEquals(code, 0);
  for (
    const flag of ["--policy", "--threshold", "--prefix-frac", "--cache-capacity", "--scenario", "--json"]
  ) {
    assertStringIncludes(stdout, flag);
  }
  for (const d of POLICIES) {
    assertMatch(stdout, new RegExp(`^    ${d.name} `, "m"));
    for (const [key, p] of Object.entries(d.params)) {
      assertMatch(stdout, new RegExp(`^      --${parameterFlag(key)} [NX]\\b`, "m"));
      // Wrapped lines joined: the default and bounds may straddle a line break.
      assertStringIncludes(stdout.replace(/\s+/g, " "), `default ${p.default}, ${describeBounds(p)}`);
    }
  }
});

Deno.test("a policy's parameter flags set its parameters; run --json's scenario shows every one", async () => {
  const { code, stdout, stderr } = await run(
    "--json",
    "--requests",
    "300",
    "--policy",
    "sglang_cache_aware",
    "--balance-abs",
    "32",
  );
  assertEquals(code, 0, stderr);
  const r = JSON.parse(stdout);
  assertEquals(r.scenario.policy, {
    name: "sglang_cache_aware",
    balanceAbs: 32,
    balanceRel: 1.5,
    cacheThreshold: 0.3,
    hostCredit: 0.8,
  });
  const hybrid = JSON.parse((await run("--json", "--requests", "300", "--threshold", "3")).stdout);
  assertEquals(hybrid.scenario.policy, { name: "hybrid", threshold: 3, hostCredit: 0.8 });
});
