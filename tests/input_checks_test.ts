/**
 * What the tools check before they start: a sweep's files and scenarios, the
 * bounds of `--workers` and `--speed`, a policy parameter's flag beside a
 * policy without that parameter, numbers beyond a double, `bench --help`;
 * where a sweep may write (never over another committed study); and relative
 * paths, which are the caller's, not the repository's.
 */
import { assertEquals, assertMatch, assertStringIncludes } from "@std/assert";
import { messageLine } from "./_cli.ts";
import { join, resolve } from "node:path";
import {
  homeOf,
  outputDirectory,
  RESULTS_DIR,
  SWEEPS_DIR,
} from "../scenarios/sweep_runner/output_directory.ts";
import { specHash } from "../scenarios/sweep_runner/sweep_journal.ts";

const ROOT = new URL("..", import.meta.url).pathname;
/** The sweep's bound on --workers (scenarios/sweep.ts; importing it would load the PNG renderer). */
const MAX_WORKERS = 4 * navigator.hardwareConcurrency;
const decode = (b: Uint8Array) => new TextDecoder().decode(b);

/** Two runs of 200 requests. */
const TINY_SPEC = {
  base: { workload: { requests: 200 } },
  axes: { "workload.ratePerSec": [30, 40] },
  policies: [{ name: "round_robin" }],
  seeds: [1],
};

interface ToolOptions {
  /** Directory the tool may write (sweep, merge). */
  readonly writable?: string;
  /** `INIT_CWD`, with `--allow-env=INIT_CWD` as the tasks grant it. */
  readonly initCwd?: string;
}

/** `deno run scenarios/<script>.ts args…` from the repository, with its task's permissions. */
async function tool(script: string, options: ToolOptions, ...args: string[]) {
  const permissions = ["--allow-read"];
  if (options.writable !== undefined) {
    permissions.push(`--allow-write=${options.writable}`, "--allow-ffi", "--allow-sys");
  }
  if (options.initCwd !== undefined) permissions.push("--allow-env=INIT_CWD");
  const output = await new Deno.Command("deno", {
    args: ["run", ...permissions, `scenarios/${script}.ts`, ...args],
    cwd: ROOT,
    env: options.initCwd === undefined ? {} : { INIT_CWD: options.initCwd },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: output.code, stdout: decode(output.stdout), stderr: decode(output.stderr) };
}

const names = (dir: string) => [...Deno.readDirSync(dir)].map((e) => e.name).sort();

Deno.test("a sweep checks every trace file before its first run", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_checks_" });
  const specs: [string, unknown, RegExp][] = [
    [
      "a missing trace in the base",
      {
        base: { instances: { model: "batching" }, workload: { trace: { path: "no_such_trace.jsonl" } } },
        axes: { "workload.trace.speed": [1, 2] },
        policies: [{ name: "round_robin" }],
        seeds: [1],
      },
      /^error: sweep\.base\.workload\.trace\.path: cannot read ".*\/no_such_trace\.jsonl": no such file$/,
    ],
    [
      "a missing trace among an axis's values",
      {
        base: { instances: { model: "batching" } },
        axes: {
          "workload.trace.path": ["tests/fixtures/mooncake_sample.jsonl", "tests/no_such_trace.jsonl"],
        },
        policies: [{ name: "round_robin" }],
        seeds: [1],
      },
      /^error: sweep\.axes\["workload\.trace\.path"\]: cannot read ".*tests\/no_such_trace\.jsonl": no such file$/,
    ],
    [
      "a directory as a trace",
      {
        base: { instances: { model: "batching" }, workload: { trace: { path: "tests" } } },
        axes: { "workload.trace.speed": [1] },
        policies: [{ name: "round_robin" }],
        seeds: [1],
      },
      /^error: sweep\.base\.workload\.trace\.path: cannot read ".*tests": not a file$/,
    ],
  ];
  for (const [name, spec, message] of specs) {
    await t.step(name, async () => {
      const out = await Deno.makeTempDir({ dir });
      await Deno.writeTextFile(`${out}/spec.json`, JSON.stringify(spec));
      const { code, stderr } = await tool(
        "sweep",
        { writable: out },
        "--spec",
        `${out}/spec.json`,
        "--out",
        out,
      );
      assertEquals(code, 2, stderr);
      assertMatch(messageLine(stderr), message);
      assertEquals(names(out), ["spec.json"]);
    });
  }
  await Deno.remove(dir, { recursive: true });
});

Deno.test("bad flags exit 2 with one line naming the flag and the value", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_checks_" });
  await Deno.writeTextFile(`${dir}/spec.json`, JSON.stringify(TINY_SPEC));
  await Deno.writeTextFile(`${dir}/huge_rate.json`, '{ "workload": { "ratePerSec": 1e400 } }');
  await Deno.writeTextFile(
    `${dir}/huge_spec.json`,
    JSON.stringify(TINY_SPEC).replace('"workload.ratePerSec":[30,40]', '"workload.ratePerSec":[30,-1e999]'),
  );
  const sweep = ["--spec", `${dir}/spec.json`, "--out", `${dir}/out`];
  const cases: [string, string[], RegExp][] = [
    [
      "run",
      ["--policy", "round_robin", "--threshold", "2"],
      /^error: --threshold: not a parameter of round_robin \(its parameters: none\)$/,
    ],
    [
      "realtime",
      ["--policy", "least_load", "--threshold", "0"],
      /^error: --threshold: not a parameter of least_load \(its parameters: none\)$/,
    ],
    [
      "realtime",
      ["--policy", "chwbl", "--balance-abs", "8"],
      /^error: --balance-abs: not a parameter of chwbl \(its parameters: loadFactor, ringPoints\)$/,
    ],
    [
      "sweep",
      [...sweep, "--workers", String(MAX_WORKERS + 1)],
      new RegExp(
        `^error: --workers: expected an integer >= 1 and <= ${MAX_WORKERS} \\(4 × \\d+ cores\\), got "${
          MAX_WORKERS + 1
        }"$`,
      ),
    ],
    ["run", ["--rate", "1e400"], /^error: --rate: expected a number, got "1e400"$/],
    [
      "run",
      ["--scenario", `${dir}/huge_rate.json`],
      /^error: scenario\.workload\.ratePerSec: expected a number, got 1e400$/,
    ],
    [
      "sweep",
      ["--spec", `${dir}/huge_spec.json`, "--out", `${dir}/out`],
      /^error: sweep\.axes\["workload\.ratePerSec"\]\[1\]: .*got -1e999$/,
    ],
    [
      "realtime",
      ["--speed", "1e-9"],
      /^error: --speed: expected a number >= 0\.000266 for this scenario \(slower, it would need more than 24\.9 days of wall time\), got "1e-9"$/,
    ],
    ["realtime", [
      "--speed",
      "1e-9",
      "--model",
      "batching",
      "--trace",
      "tests/fixtures/mooncake_sample.jsonl",
    ], /^error: --speed: expected a number >= [\d.e-]+ for this scenario .*got "1e-9"$/],
  ];
  for (const [script, args, message] of cases) {
    await t.step(`${script} ${args.join(" ")}`, async () => {
      const { code, stdout, stderr } = await tool(script, { writable: `${dir}/out` }, ...args);
      assertEquals(code, 2, stderr);
      assertMatch(messageLine(stderr), message);
      assertEquals(stdout, "");
    });
  }
  assertEquals(names(dir), ["huge_rate.json", "huge_spec.json", "spec.json"]);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("the sweep's last line states the Workers it used, not the ones asked for", async () => {
  const out = await Deno.makeTempDir({ prefix: "rrs_checks_" });
  await Deno.writeTextFile(`${out}/spec.json`, JSON.stringify(TINY_SPEC));
  const asked = Math.min(4, MAX_WORKERS);
  const { code, stderr } = await tool(
    "sweep",
    { writable: out },
    "--spec",
    `${out}/spec.json`,
    "--out",
    out,
    "--workers",
    String(asked),
  );
  assertEquals(code, 0, stderr);
  assertMatch(stderr, /sweep done: 2 runs, 400 requests on 2 workers in /);
  await Deno.remove(out, { recursive: true });
});

Deno.test("realtime sleeps at most the longest timer, so a huge handler timeout warns nothing", async () => {
  const { code, stdout, stderr } = await tool(
    "realtime",
    {},
    "--requests",
    "60",
    "--speed",
    "1000",
    "--handler-timeout-ms",
    "1e12",
  );
  assertEquals(code, 0, stderr);
  assertStringIncludes(stdout, "completed 60");
  assertEquals(/TimeoutOverflowWarning|Timeout duration was set to 1/.test(stderr), false, stderr);
});

Deno.test("deno task bench --help prints the usage and runs nothing; an unknown part exits 2", async () => {
  const task = (...args: string[]) =>
    new Deno.Command("deno", { args: ["task", "bench", ...args], cwd: ROOT, stdin: "null" }).output();
  const help = await task("--help");
  assertEquals(help.code, 0, decode(help.stderr));
  assertStringIncludes(decode(help.stdout), "Usage: deno task bench [PART…]");
  assertEquals(/ M\/s| k\/s|peak memory \d/.test(decode(help.stdout)), false, "a benchmark ran");
  const bogus = await task("warp-speed");
  assertEquals(bogus.code, 2);
  assertEquals(decode(bogus.stdout), "");
  const errors = decode(bogus.stderr).split("\n").filter((l) => l.startsWith("error: "));
  assertEquals(errors, [
    'error: unknown bench part "warp-speed": expected kernel | fifo | fleet | peer | batching | disaggregated | trace | replay-1m | memory-fifo | memory-batching | plugin | trace-gen | serve | gateway | stream | soak | proxy | realtime',
  ]);
});

Deno.test("relative paths are the caller's (INIT_CWD under deno task), not the repository's", async (t) => {
  const caller = await Deno.makeTempDir({ prefix: "rrs_caller_" });
  await Deno.copyFile(`${ROOT}tests/fixtures/mooncake_sample.jsonl`, `${caller}/trace.jsonl`);
  await Deno.copyFile(`${ROOT}scenarios/example.json`, `${caller}/my_scenario.json`);
  await t.step("run --scenario and --trace", async () => {
    const scenario = await tool(
      "run",
      { initCwd: caller },
      "--scenario",
      "my_scenario.json",
      "--requests",
      "50",
    );
    assertEquals(scenario.code, 0, scenario.stderr);
    assertStringIncludes(scenario.stdout, "50 requests at 35 req/s, zipf 2");
    const trace = await tool("run", { initCwd: caller }, "--model", "batching", "--trace", "trace.jsonl");
    assertEquals(trace.code, 0, trace.stderr);
    assertStringIncludes(trace.stdout, `${caller}/trace.jsonl`);
  });
  await t.step("a missing relative file is looked for in the caller's directory", async () => {
    const { code, stderr } = await tool("run", { initCwd: caller }, "--scenario", "scenarios/example.json");
    assertEquals(code, 2);
    assertEquals(
      messageLine(stderr),
      'error: --scenario: cannot read "scenarios/example.json": no such file',
    );
  });
  await t.step("sweep --spec, --out and the trace inside the spec", async () => {
    await Deno.writeTextFile(
      `${caller}/spec.json`,
      JSON.stringify({
        base: { instances: { model: "batching" }, workload: { trace: { path: "trace.jsonl" } } },
        axes: { "workload.trace.speed": [1] },
        policies: [{ name: "round_robin" }],
        seeds: [1],
      }),
    );
    const { code, stderr } = await tool(
      "sweep",
      { writable: caller, initCwd: caller },
      "--spec",
      "spec.json",
      "--out",
      "out",
    );
    assertEquals(code, 0, stderr);
    assertEquals(names(`${caller}/out`), ["plots", "report.html", "summary.txt", "sweep_summary.csv"]);
  });
  await t.step("without --allow-env=INIT_CWD, the current directory", async () => {
    const { code, stderr } = await tool(
      "run",
      {},
      "--scenario",
      "scenarios/example.json",
      "--requests",
      "50",
    );
    assertEquals(code, 0, stderr);
  });
  await Deno.remove(caller, { recursive: true });
});

Deno.test("a sweep never writes over another committed study", async (t) => {
  const committed = JSON.parse(await Deno.readTextFile(join(SWEEPS_DIR, "default.json")));
  const quick = JSON.parse(await Deno.readTextFile(join(SWEEPS_DIR, "quick.json")));
  const dir = await Deno.makeTempDir({ prefix: "rrs_home_" });
  const at = async (options: Parameters<typeof outputDirectory>[0]) =>
    resolve(ROOT, await outputDirectory(options));
  const refused = (options: Parameters<typeof outputDirectory>[0]) =>
    outputDirectory(options).then((out) => `accepted ${out}`, (error) => error.message);

  await t.step("defaults: each committed sweep's home, a plugin's own, a spec's stem", async () => {
    assertEquals(await at({ specHash: specHash(committed) }), RESULTS_DIR);
    assertEquals(await at({ specHash: specHash(quick) }), homeOf("quick"));
    assertEquals(
      await at({ specHash: specHash(committed), plugin: "x/my_router.ts" }),
      join(RESULTS_DIR, "plugin-my_router"),
    );
    assertEquals(
      await at({ specHash: specHash(committed), plugin: "file:///x/my_router.ts" }),
      join(RESULTS_DIR, "plugin-my_router"),
    );
    assertEquals(
      await at({ specHash: "0", specFile: `${dir}/my_study.json` }),
      join(RESULTS_DIR, "my_study"),
    );
    // An edited committed file is still that sweep: it writes its own home.
    const staleness = join(SWEEPS_DIR, "staleness.json");
    assertEquals(await at({ specHash: "edited", specFile: staleness }), homeOf("staleness"));
  });
  await t.step("refusals", async () => {
    assertMatch(
      await refused({ specHash: specHash(quick), out: "results" }),
      /^--out results is the home of scenarios\/sweeps\/default\.json; scenarios\/sweeps\/quick\.json must not overwrite its results/,
    );
    assertMatch(
      await refused({ specHash: specHash(committed), plugin: "my_router.ts", out: RESULTS_DIR }),
      /is the home of scenarios\/sweeps\/default\.json; a sweep with the plugin my_router must not overwrite/,
    );
    assertMatch(
      await refused({ specHash: "0", specFile: `${dir}/staleness.json` }),
      /^the default output directory results\/staleness is the home of scenarios\/sweeps\/staleness\.json; the sweep staleness\.json must not/,
    );
    assertMatch(
      await refused({ specHash: "0" }),
      /^--out: needed, because this sweep is none of scenarios\/sweeps/,
    );
  });
  await t.step("sweep --quick --out results, as a user types it", async () => {
    const before = names(RESULTS_DIR);
    const { code, stderr } = await tool("sweep", { writable: dir }, "--quick", "--out", "results");
    assertEquals(code, 2, stderr);
    assertMatch(messageLine(stderr), /^error: --out results is the home of scenarios\/sweeps\/default\.json/);
    assertEquals(names(RESULTS_DIR), before);
  });
  await Deno.remove(dir, { recursive: true });
});
