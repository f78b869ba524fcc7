/**
 * `deno task trace-gen` as a user runs it, and generated traces named by
 * their parameters in scenarios and sweeps: the same runs as replaying the
 * file, byte-identical sweeps at any worker count and across shards.
 */
import { assert, assertEquals, assertMatch, assertNotEquals, assertStringIncludes } from "@std/assert";
import { simulate } from "../actors/simulation.ts";
import { TRACE_GENERATOR_DEFAULTS, TRACE_GENERATOR_PARAMETERS } from "../actors/traces/trace_generator.ts";
import { parseScenario } from "../scenarios/scenario/scenario.ts";
import { generatorOptionsFromFlags } from "../scenarios/trace_gen.ts";
import { messageLine, runScript, taskFrom } from "./_cli.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const decode = (b: Uint8Array) => new TextDecoder().decode(b);

/** Non-default parameters, as flags and as `workload.trace.generate`. */
const FLAGS = [
  "--requests",
  "1200",
  "--seed",
  "3",
  "--agent-frac",
  "0.5",
  "--system-prompts",
  "2",
  "--rate",
  "5",
];
const GENERATE = { requests: 1200, seed: 3, agentFrac: 0.5, systemPrompts: 2, ratePerSec: 5 };

Deno.test("trace-gen writes the trace and one summary line; the same flags write the same bytes", async () => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_tracegen_" });
  try {
    const first = await runScript("trace_gen", dir, "--out", `${dir}/a.jsonl`, ...FLAGS);
    assertEquals(first.code, 0, first.stderr);
    assertMatch(
      first.stdout,
      /^wrote 1200 requests \(\d+ sessions\) over [\d.]+ s \([\d.]+ req\/s\) to .*a\.jsonl: mean input \d+ tokens \([\d.]+ blocks of 512\), mean output [\d.]+ tokens\n$/,
    );
    const again = await runScript("trace_gen", dir, "--out", `${dir}/b.jsonl`, ...FLAGS);
    assertEquals(again.code, 0, again.stderr);
    const a = await Deno.readTextFile(`${dir}/a.jsonl`);
    assertEquals(await Deno.readTextFile(`${dir}/b.jsonl`), a);
    assertEquals(a.split("\n").length, 1201); // 1200 lines, each ending in a newline
    const other = await runScript("trace_gen", dir, "--out", `${dir}/c.jsonl`, ...FLAGS, "--seed", "4");
    assertEquals(other.code, 0, other.stderr);
    assertNotEquals(await Deno.readTextFile(`${dir}/c.jsonl`), a);
    assertEquals([...Deno.readDirSync(dir)].map((e) => e.name).sort(), ["a.jsonl", "b.jsonl", "c.jsonl"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("trace-gen bad input exits 2 with one line naming the flag, the value and the expectation", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_tracegen_" });
  const out = ["--out", `${dir}/t.jsonl`];
  const cases: [string[], string | RegExp][] = [
    [[...out, "--rate", "0"], "error: --rate: expected a number > 0, got 0"],
    [[...out, "--rate", "-3"], "error: --rate: expected a number > 0, got -3"],
    [[...out, "--rate", "fast"], 'error: --rate: expected a number, got "fast"'],
    [[...out, "--requests", "10.5"], "error: --requests: expected an integer, got 10.5"],
    [[...out, "--requests", "0"], "error: --requests: expected a number >= 1, got 0"],
    [[...out, "--agent-frac", "1.5"], "error: --agent-frac: expected a number <= 1, got 1.5"],
    [[...out, "--turns-mean", "0.5"], "error: --turns-mean: expected a number >= 1, got 0.5"],
    [
      [...out, "--system-prompt-tokens", "1000"],
      "error: --system-prompt-tokens: expected a multiple of 512, got 1000",
    ],
    [[...out, "--system-prompts", "0"], "error: --system-prompts: expected a number >= 1, got 0"],
    [[...out, "--think-time-ms", "-1"], "error: --think-time-ms: expected a number >= 0, got -1"],
    [[...out, "--output-tokens", "0"], "error: --output-tokens: expected a number >= 1, got 0"],
    [[...out, "--rate", "1e-12"], /^error: --rate: expected a number >= 1\.07e-8 .*, got 1e-12$/],
    [[...out, "--bogus", "1"], "error: unknown flag --bogus (see --help)"],
    [[...out, "--seed"], "error: --seed: expected a value after the flag"],
    [[...out, "stray"], 'error: unexpected argument "stray"'],
    [[], "error: --out: expected the file to write (see --help)"],
    [["--out", dir], `error: --out: "${dir}" is a directory, expected a file`],
    [["--out", `${dir}/t.csv`], "error: --out: expected a .jsonl file"],
    [["--out", "/no_such_dir_rrs/t.jsonl"], "error: --out /no_such_dir_rrs/t.jsonl: outside results/"],
  ];
  for (const [args, message] of cases) {
    await t.step(args.slice(2).join(" ") || args.join(" ") || "(no flags)", async () => {
      const { code, stdout, stderr } = await runScript("trace_gen", dir, ...args);
      assertEquals(code, 2, stderr);
      const line = messageLine(stderr);
      if (typeof message === "string") assertStringIncludes(line, message);
      else assertMatch(line, message);
      assertEquals(stdout, "");
    });
  }
  assertEquals([...Deno.readDirSync(dir)], [], "nothing written");
  await Deno.remove(dir, { recursive: true });
});

Deno.test("trace-gen --help lists every generator flag with its default", async () => {
  const { code, stdout } = await runScript("trace_gen", "/tmp", "--help");
  assertEquals(code, 0);
  for (
    const flag of [
      "--out FILE",
      "--seed N  default 1",
      "--requests N  default 12000",
      "--rate R  default 10/3",
      "--system-prompts N  default 1",
      "--system-prompt-tokens N  default 2048",
      "--turns-mean X  default 8",
      "--think-time-ms MS  default 60000",
      "--agent-frac F  default 0.3",
      "--tool-wait-ms MS  default 2000",
      "--first-message-tokens N  default 2500",
      "--message-tokens N  default 725",
      "--output-tokens N  default 340",
    ]
  ) assertStringIncludes(stdout, flag);
});

Deno.test("deno task trace-gen from another directory writes inside results/ only, paths the caller's", async () => {
  const caller = await Deno.makeTempDir();
  const name = `quick/test_trace_gen_${crypto.randomUUID().slice(0, 8)}`;
  const task = (...args: string[]) => taskFrom(caller, "trace-gen", "--requests", "50", ...args);
  try {
    const inside = await task("--out", `${ROOT}results/${name}/t.jsonl`);
    assertEquals(inside.code, 0, decode(inside.stderr));
    assertEquals((await Deno.readTextFile(`${ROOT}results/${name}/t.jsonl`)).split("\n").length, 51);
    // Relative to the caller, results/… is not the repository's results/.
    const relative = await task("--out", `results/${name}/t.jsonl`);
    assertEquals(relative.code, 2, decode(relative.stderr));
    // `deno task` prints its command line first; the error is the one line after it.
    const lines = decode(relative.stderr).trim().split("\n");
    assertEquals(lines.length, 2, decode(relative.stderr));
    assertStringIncludes(lines[1], `error: --out results/${name}/t.jsonl: outside results/`);
  } finally {
    // The tests may write only /tmp: `deno eval` (all permissions) removes what the task wrote.
    const remove = `Deno.removeSync(${JSON.stringify(`${ROOT}results/${name}`)}, { recursive: true })`;
    await new Deno.Command("deno", { args: ["eval", remove], stderr: "null" }).output();
    await Deno.remove(caller, { recursive: true });
  }
});

Deno.test("a scenario naming a generated trace runs exactly as one replaying the file trace-gen writes", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_tracegen_" });
  const path = `${dir}/trace.jsonl`;
  const written = await runScript("trace_gen", dir, "--out", path, ...FLAGS);
  assertEquals(written.code, 0, written.stderr);
  const cases: [string, Record<string, unknown>, Record<string, unknown>][] = [
    ["as recorded", {}, {}],
    ["at twice the speed, first 800 requests", { speed: 2, maxRequests: 800 }, {}],
    ["with the llm-d router, 3 instances", { speed: 1.5 }, { policy: { name: "llmd_weighted" } }],
  ];
  for (const [label, replay, rest] of cases) {
    await t.step(label, () => {
      const base = { instances: { model: "batching", count: 3 }, policy: { name: "prefix_aware" }, ...rest };
      const generated = simulate(
        parseScenario({ ...base, workload: { trace: { generate: GENERATE, ...replay } } }),
      );
      const file = simulate(parseScenario({ ...base, workload: { trace: { path, ...replay } } }));
      assertEquals(generated, file);
      assertEquals(generated.requests, (replay.maxRequests as number | undefined) ?? 1200);
      assert(generated.tokenHitRate! > 0.3, `token hit rate ${generated.tokenHitRate}`);
    });
  }
  await Deno.remove(dir, { recursive: true });
});

Deno.test("deno task run replays a generated trace from a scenario file, and --trace-speed and --requests apply", async () => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_tracegen_" });
  const scenario = `${dir}/s.json`;
  await Deno.writeTextFile(
    scenario,
    JSON.stringify({
      instances: { model: "batching", count: 2 },
      workload: { trace: { generate: GENERATE } },
    }),
  );
  const run = (...args: string[]) => runScript("run", dir, "--scenario", scenario, ...args);
  const table = await run("--trace-speed", "2", "--requests", "300");
  assertEquals(table.code, 0, table.stderr);
  assertStringIncludes(
    table.stdout,
    "generated trace (1200 requests at 5 req/s, seed 3; mooncake, speed 2×)",
  );
  assertStringIncludes(table.stdout, "requests      300  completed 300");
  const bad = await run("--skip-invalid");
  assertEquals(bad.code, 2);
  assertStringIncludes(messageLine(bad.stderr), "--skip-invalid: used only when replaying a trace file");
  const both = await run("--trace", "tests/fixtures/mooncake_sample.jsonl");
  assertEquals(both.code, 2);
  assertStringIncludes(messageLine(both.stderr), "--trace: expected no path beside workload.trace.generate");
  await Deno.remove(dir, { recursive: true });
});

Deno.test("scenario errors in workload.trace.generate name the field, the value and the expectation", async (t) => {
  const cases: [unknown, string][] = [
    [
      { generate: { agentFrac: -0.1 } },
      "scenario.workload.trace.generate.agentFrac: expected a number >= 0, got -0.1",
    ],
    [
      { generate: { systemPromptTokens: 700 } },
      "scenario.workload.trace.generate.systemPromptTokens: expected a multiple of 512, got 700",
    ],
    [
      { generate: { requests: "many" } },
      'scenario.workload.trace.generate.requests: expected a number, got "many"',
    ],
    [{ generate: { turns: 3 } }, "scenario.workload.trace.generate.turns: unknown field"],
    [{ generate: {}, format: "azure" }, 'scenario.workload.trace.format: expected "mooncake"'],
    [
      { speed: 2 },
      "scenario.workload.trace: expected a trace file (path) or generator parameters (generate)",
    ],
  ];
  for (const [trace, message] of cases) {
    await t.step(message, () => {
      let error: Error | undefined;
      try {
        parseScenario({ instances: { model: "batching" }, workload: { trace } });
      } catch (e) {
        error = e as Error;
      }
      assertEquals(error?.name, "UsageError");
      assertStringIncludes(error!.message, message);
    });
  }
});

Deno.test("the scenario schema and the flags derive from the generator's parameter table", () => {
  const config = parseScenario({ instances: { model: "batching" }, workload: { trace: { generate: {} } } });
  assertEquals(config.workload.trace?.generate, TRACE_GENERATOR_DEFAULTS);
  const flags = Object.values(TRACE_GENERATOR_PARAMETERS).map((p) => p.flag);
  assertEquals(new Set(flags).size, flags.length, "two parameters share a flag");
  assertEquals(Object.keys(TRACE_GENERATOR_DEFAULTS).sort(), Object.keys(TRACE_GENERATOR_PARAMETERS).sort());
  const fromFlags = generatorOptionsFromFlags({ rate: "5", "agent-frac": "0.5", seed: "3" });
  assertEquals(fromFlags, { ...TRACE_GENERATOR_DEFAULTS, ratePerSec: 5, agentFrac: 0.5, seed: 3 });
});

/** A small study over a generated trace: no trace file anywhere. */
const SPEC = {
  description: "generated trace, two speeds",
  base: {
    instances: { count: 2, model: "batching" },
    workload: { trace: { generate: { requests: 300, seed: 4, ratePerSec: 5 } } },
  },
  axes: { "workload.trace.speed": [1, 2] },
  policies: [{ name: "round_robin" }, { name: "prefix_aware" }],
  seeds: [1, 2],
};

Deno.test("a sweep over a generated trace is byte-identical at any worker count and across shards", async () => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_tracegen_" });
  try {
    const spec = `${dir}/spec.json`;
    await Deno.writeTextFile(spec, JSON.stringify(SPEC));
    const sweep = (out: string, ...args: string[]) =>
      runScript("sweep", dir, "--spec", spec, "--out", out, ...args);
    const csvs: string[] = [];
    for (const workers of ["1", "3"]) {
      const r = await sweep(`${dir}/w${workers}`, "--workers", workers);
      assertEquals(r.code, 0, r.stderr);
      csvs.push(await Deno.readTextFile(`${dir}/w${workers}/sweep_summary.csv`));
    }
    for (const shard of ["1/2", "2/2"]) {
      const r = await sweep(`${dir}/shards`, "--shard", shard, "--workers", "1");
      assertEquals(r.code, 0, r.stderr);
    }
    const merged = await runScript("merge", dir, "--out", `${dir}/merged`, `${dir}/shards`);
    assertEquals(merged.code, 0, merged.stderr);
    csvs.push(await Deno.readTextFile(`${dir}/merged/sweep_summary.csv`));
    assertEquals(csvs[1], csvs[0]);
    assertEquals(csvs[2], csvs[0]);
    assertEquals(csvs[0].trim().split("\n").length, 1 + 4); // header + 2 speeds × 2 policies
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
