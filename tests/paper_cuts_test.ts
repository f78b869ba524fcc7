/**
 * Issue 27's paper cuts outside the HTTP twin: the routing lines' two bases,
 * the committed example scenarios, the charts' axes and facets, what
 * `.gitignore` keeps out of git, plugin sweeps' homes, plugin errors naming
 * the path as typed, "did you mean" for a mistyped flag, the count of lines a
 * `--skip-invalid` run skipped (under the trace's path as typed), and one
 * instance or request said in the singular.
 */
import {
  assert,
  assertEquals,
  assertMatch,
  assertNotEquals,
  assertRejects,
  assertStringIncludes,
} from "@std/assert";
import { basename, join, resolve } from "node:path";
import * as Plot from "@observablehq/plot";
import { figure, plot, variantColors } from "../scenarios/report/chart.ts";
import { reportHtml } from "../scenarios/report/report_html.ts";
import { editDistance, nearestFlag, unknownFlagMessage } from "../scenarios/cli/flag_suggestion.ts";
import { parseScenario, readJsonFile } from "../scenarios/scenario/scenario.ts";
import {
  committedSweeps,
  outputDirectory,
  RESULTS_DIR,
  SWEEPS_DIR,
} from "../scenarios/sweep_runner/output_directory.ts";
import { specHash } from "../scenarios/sweep_runner/sweep_journal.ts";
import { loadRouterPlugin } from "../scenarios/workers/router_plugin.ts";
import { runOnWorkers } from "../scenarios/workers/worker_pool.ts";
import { parseSweep } from "../scenarios/sweep_runner/sweep_spec.ts";
import { sweepReport } from "../scenarios/report/sweep_report.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";
import { messageLine, realtimeCli, runCli, runDeno } from "./_cli.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const PLUGIN = "scenarios/plugins/cache_with_slack.ts";

Deno.test("the run table names each routing rate's denominator, and its numbers are the JSON's", async () => {
  const args = ["--scenario", "scenarios/example.json", "--requests", "3000", "--router", PLUGIN];
  const [table, json] = await Promise.all([runCli(...args), runCli(...args, "--json")]);
  assertEquals([table.code, json.code], [0, 0], table.stderr + json.stderr);
  const r = JSON.parse(json.stdout);
  // The plugin consults the view only for requests with a prefix group: the two rates have different bases.
  assert(r.expectedTokenHitRate > r.availableTokenHitRate, json.stdout);
  assertStringIncludes(
    table.stdout,
    `routing       available ${r.availableTokenHitRate.toFixed(3)} of all prompt tokens`,
  );
  assertStringIncludes(
    table.stdout,
    `expected ${r.expectedTokenHitRate.toFixed(3)} of the prompt tokens of requests the view routed`,
  );
});

Deno.test("the sweep summary's legend gives expect its own basis, apart from tok hit and avail", async () => {
  const sweep = parseSweep({
    base: { workload: { requests: 400 } },
    axes: { "workload.ratePerSec": [20] },
    policies: [{ name: "prefix_aware" }, { name: "round_robin" }],
    seeds: [1],
  });
  const { summary } = sweepReport(sweep, await runOnWorkers(sweep.runs, { workers: 1 }));
  const legend = summary.split("\n").filter((l) => /^ ?\(?(tok hit, avail|expect|view fp):/.test(l));
  assertEquals(legend.length, 3, summary);
  assertStringIncludes(legend[0], "share of all prompt tokens");
  assertStringIncludes(
    legend[1],
    "share of the prompt tokens of the requests whose policy consulted the router's view",
  );
});

/** Every committed example scenario: `scenarios/*.json`. */
function exampleScenarios(): string[] {
  return [...Deno.readDirSync(join(ROOT, "scenarios"))]
    .filter((e) => e.isFile && e.name.endsWith(".json"))
    .map((e) => `scenarios/${e.name}`)
    .sort();
}

Deno.test("every committed example scenario parses in full and runs (cut to 300 requests)", async (t) => {
  const files = exampleScenarios();
  for (const example of ["scenarios/faults_example.json", "scenarios/autoscaling_example.json"]) {
    assert(files.includes(example), `${example} missing from ${files}`);
  }
  for (const file of files) {
    await t.step(file, async () => {
      const config = parseScenario(await readJsonFile(join(ROOT, file), "--scenario"));
      if (file.includes("faults")) assertEquals(config.faults?.length, 3);
      if (file.includes("autoscaling")) assertEquals(config.autoscale?.signal, "queue_depth");
      const { code, stdout, stderr } = await runCli("--scenario", file, "--requests", "300", "--json");
      assertEquals(code, 0, stderr);
      const r = JSON.parse(stdout);
      assertEquals(r.requests, 300);
      assertEquals(r.completed + r.dropped + (r.failed ?? 0) + r.inFlight, 300);
      assert(r.completed > 0, stdout);
    });
  }
});

/** The absolute x of every x-axis tick label of a Plot SVG, and the axis title's and tick labels' offsets. */
function xAxis(svg: string) {
  const ticks = /<g transform="translate\(0,(\d+)\)" aria-label="x-axis tick label">(.*?)<\/g><\/g>/.exec(
    svg,
  )!;
  const xs: { text: string; x: number }[] = [];
  for (const facet of `${ticks[2]}</g>`.matchAll(/<g transform="translate\(([\d.]+),0\)"[^>]*>(.*?)<\/g>/g)) {
    for (
      const text of facet[2].matchAll(/<text transform="translate\(([\d.]+),[\d.]+\)"[^>]*>([^<]*)<\/text>/g)
    ) {
      xs.push({ text: text[2], x: Number(facet[1]) + Number(text[1]) });
    }
  }
  const label = /<g transform="translate\(0,(\d+)\)" aria-label="x-axis label">/.exec(svg)!;
  return { ticks: xs.sort((a, b) => a.x - b.x), tickOffset: Number(ticks[1]), labelOffset: Number(label[1]) };
}

Deno.test("charts: facets' end ticks stand apart, the last is not clipped, the x title sits below the ticks", () => {
  const data = ["a", "b", "c"].flatMap((f) => [0.1, 0.5, 0.9].map((x) => ({ f, x, y: x })));
  const svg = (plot({
    fx: { label: null },
    x: { label: "shared-prefix fraction", ticks: [0.1, 0.5, 0.9] },
    marks: [Plot.dot(data, { fx: "f", x: "x", y: "y" })],
  }) as unknown as { outerHTML: string }).outerHTML;
  const { ticks, tickOffset, labelOffset } = xAxis(svg);
  assertEquals(ticks.map((t) => t.text), ["0.1", "0.5", "0.9", "0.1", "0.5", "0.9", "0.1", "0.5", "0.9"]);
  // "0.9" of one panel and "0.1" of the next, centred on their ticks, are 22 px wide at 12 px: no contact.
  const gaps = ticks.slice(1).map((t, i) => t.x - ticks[i].x);
  assert(Math.min(...gaps) >= 40, `tick gaps ${gaps}`);
  assert(ticks[ticks.length - 1].x + 12 <= 900, `last tick at ${ticks[ticks.length - 1].x} of 900`);
  // The title is a line of text below the tick labels' line, not on it.
  assert(labelOffset - tickOffset >= 24, `title at +${labelOffset}, ticks at +${tickOffset}`);
});

Deno.test("a figure keeps what Plot's root gives its text: centred tick labels, its style sheet's class", () => {
  const p = plot({ marks: [Plot.dot([{ x: 1, y: 2 }], { x: "x", y: "y" })] });
  const svg = figure("t", "s", [], p);
  const nested = /<svg x="0" y="64"[^>]*>/.exec(svg)![0];
  assertStringIncludes(nested, 'text-anchor="middle"');
  assertStringIncludes(nested, `class="${p.getAttribute("class")}"`);
  assertStringIncludes(nested, 'font-size="12"');
});

Deno.test("variant colours never repeat while the palette lasts, the study's four keeping theirs", () => {
  const variant = (label: string) => ({ name: label, label, params: {} });
  const labels = [
    "prefix_aware",
    "sglang_cache_aware",
    "llmd_weighted",
    "vllm_prefix",
    "round_robin",
    "chwbl",
  ];
  const { range } = variantColors(labels.map(variant));
  assertEquals(new Set(range).size, labels.length, `${range}`);
  assertEquals([range[0], range[4]], ["#ff725c", "#4269d0"]);
});

Deno.test("report.html scrolls the summary's wide tables inside their box, never the page", () => {
  const html = reportHtml("t", "x".repeat(400), []);
  assertMatch(html, /pre, table \{ display: block; max-width: 100%; overflow-x: auto; \}/);
  assertMatch(html, /box-sizing: border-box/);
});

Deno.test(".gitignore keeps users' output out of git and every committed study's home in it", async () => {
  const rules = (await Deno.readTextFile(join(ROOT, ".gitignore"))).split("\n").map((l) => l.trim());
  assert(rules.includes("results/*/"), "results/*/ is not ignored");
  const kept = new Set(rules.filter((l) => l.startsWith("!")).map((l) => l.slice(1)));
  const ignored = (dir: string) => dir.startsWith("results/") && !kept.has(dir);
  for (const sweep of await committedSweeps()) {
    if (sweep.name === "quick") {
      assert(ignored("results/quick/"), "results/quick/ must stay ignored");
      continue;
    }
    const home = sweep.home === RESULTS_DIR ? "results/plots/" : `results/${sweep.name}/`;
    assert(!ignored(home), `${home} (the home of ${sweep.name}.json) is ignored: add !${home} to .gitignore`);
  }
  for (
    const users of ["results/traces/", "results/my_sweep/", "results/plugin-my_router/", "results/shards/"]
  ) {
    assert(ignored(users), `${users} is not ignored`);
  }
});

Deno.test("a plugin sweep's home is named from the plugin and the spec, so two specs never share one", async () => {
  const quick = JSON.parse(await Deno.readTextFile(join(SWEEPS_DIR, "quick.json")));
  const committed = JSON.parse(await Deno.readTextFile(join(SWEEPS_DIR, "default.json")));
  const dir = await Deno.makeTempDir({ prefix: "rrs_plugin_home_" });
  const at = async (options: Parameters<typeof outputDirectory>[0]) =>
    resolve(ROOT, await outputDirectory(options));
  const plugin = "x/my_router.ts";
  const homes = [
    await at({ specHash: specHash(committed), plugin, specFile: join(SWEEPS_DIR, "default.json") }),
    await at({ specHash: specHash(quick), plugin, specFile: join(SWEEPS_DIR, "quick.json") }),
    await at({ specHash: "0", plugin, specFile: `${dir}/my_study.json` }),
    await at({ specHash: specHash(quick), plugin }), // merge: the spec is recognised by its hash
  ];
  assertEquals(homes, [
    join(RESULTS_DIR, "plugin-my_router"),
    join(RESULTS_DIR, "plugin-my_router-quick"),
    join(RESULTS_DIR, "plugin-my_router-my_study"),
    join(RESULTS_DIR, "plugin-my_router-quick"),
  ]);
  const error = await assertRejects(() => outputDirectory({ specHash: "0", plugin }), UsageError);
  assertMatch(error.message, /^--out: needed, because this sweep with the plugin my_router is none of/);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("plugin errors name the plugin as typed and its imports from the user's directory", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_typed_" });
  await Deno.mkdir(`${dir}/sub`);
  await Deno.writeTextFile(`${dir}/sub/builtin.ts`, `import "node:fs";\nexport default {};`);
  await Deno.writeTextFile(`${dir}/sub/missing.ts`, `import "./helper.ts";\nexport default {};`);
  await Deno.writeTextFile(`${dir}/sub/nested.ts`, `import "./deeper/h.ts";\nexport default {};`);
  await Deno.mkdir(`${dir}/sub/deeper`);
  await Deno.writeTextFile(`${dir}/sub/deeper/h.ts`, `import "https://evil.example/x.ts";`);
  const rows: [typed: string, flag: string | undefined, message: string][] = [
    [
      "sub/builtin.ts",
      undefined,
      '--router: "sub/builtin.ts": import "node:fs" refused: a plugin may import only local files',
    ],
    [
      "./sub/missing.ts",
      "--decode-policy",
      '--decode-policy: "./sub/missing.ts": import "./helper.ts": cannot read "sub/helper.ts": no such file',
    ],
    [
      "sub/nested.ts",
      undefined,
      '--router: "sub/deeper/h.ts": import "https://evil.example/x.ts" refused',
    ],
  ];
  for (const [typed, flag, message] of rows) {
    await t.step(typed, async () => {
      const error = await assertRejects(() => loadRouterPlugin(typed, { baseDir: dir, flag }), UsageError);
      assert(error.message.startsWith(message), error.message);
      assert(!error.message.includes(dir), `absolute path in: ${error.message}`);
    });
  }
  await Deno.remove(dir, { recursive: true });
});

Deno.test("nearestFlag suggests within two edits or by prefix, and nothing far", async (t) => {
  const known = ["policy", "rate", "requests", "instances", "seed", "speed", "out", "quick", "id"];
  const rows: [typed: string, suggestion: string | undefined][] = [
    ["--polcy", "--policy"],
    ["--plociy", "--policy"], // a swap of neighbours is one edit
    ["--Policy", "--policy"],
    ["--reqests=5", "--requests"],
    ["--inst", "--instances"],
    ["--sped", "--speed"], // as near as --seed, but it shares a longer beginning
    ["--ot", "--out"],
    ["--bogus", undefined],
    ["--x", undefined],
    ["-q", undefined],
  ];
  for (const [typed, suggestion] of rows) {
    await t.step(typed, () => assertEquals(nearestFlag(typed, known), suggestion));
  }
  assertEquals(editDistance("kitten", "sitting"), 3);
  assertEquals(unknownFlagMessage("--bogus", known), "unknown flag --bogus (see --help)");
  assertEquals(
    unknownFlagMessage("--polcy", known),
    "unknown flag --polcy; did you mean --policy? (see --help)",
  );
});

Deno.test("every tool's unknown flag names the nearest known one, in one line, exit 2", async (t) => {
  const write = ["--allow-read", "--allow-write=/tmp", "--allow-ffi", "--allow-sys"];
  const rows: [script: string, flag: string, suggestion: string][] = [
    ["run", "--polcy", "--policy"],
    ["sweep", "--quik", "--quick"],
    ["merge", "--ot", "--out"],
    ["trace_gen", "--agent-fra", "--agent-frac"],
    ["calibrate", "--tolerence", "--tolerance"],
    ["validate", "--rpeat", "--repeat"],
  ];
  for (const [script, flag, suggestion] of rows) {
    await t.step(`${script} ${flag}`, async () => {
      const { code, stderr } = await runDeno(write, script, flag, "1");
      assertEquals(code, 2, stderr);
      assertEquals(
        messageLine(stderr),
        `error: unknown flag ${flag}; did you mean ${suggestion}? (see --help)`,
      );
    });
  }
  await t.step("realtime --sped", async () => {
    const { code, stderr } = await realtimeCli("--sped", "5");
    assertEquals(code, 2, stderr);
    assertEquals(messageLine(stderr), "error: unknown flag --sped; did you mean --speed? (see --help)");
  });
});

Deno.test("a --skip-invalid run says how many lines it skipped: stderr, the table and --json, 0 included", async (t) => {
  const malformed = "tests/fixtures/mooncake_malformed.jsonl";
  // realtime's source Worker does not count: its count comes from the host's own pass over the trace.
  const tools = [["run", runCli, []], ["realtime", realtimeCli, ["--speed", "200"]]] as const;
  for (const [tool, cli, extra] of tools) {
    await t.step(`${tool}, 2 skipped`, async () => {
      const args = ["--trace", malformed, "--model", "batching", "--skip-invalid", ...extra];
      const [table, json] = await Promise.all([cli(...args), cli(...args, "--json")]);
      assertEquals([table.code, json.code], [0, 0], table.stderr);
      assertMatch(
        table.stderr,
        new RegExp(
          `^${tool}: skipped 2 malformed lines of tests/fixtures/mooncake_malformed\\.jsonl \\(--skip-invalid\\)$`,
          "m",
        ),
      );
      assertStringIncludes(table.stdout, "(skipped 2 malformed trace lines)");
      assertEquals(JSON.parse(json.stdout).skippedInvalid, 2);
    });
  }
  await t.step("run, none to skip", async () => {
    const { code, stdout, stderr } = await runCli(
      "--trace",
      "tests/fixtures/mooncake_sample.jsonl",
      "--model",
      "batching",
      "--skip-invalid",
    );
    assertEquals(code, 0, stderr);
    assertMatch(
      stderr,
      /^run: skipped 0 malformed lines of tests\/fixtures\/mooncake_sample\.jsonl \(--skip-invalid\)$/m,
    );
    assertStringIncludes(stdout, "(skipped 0 malformed trace lines)");
  });
  await t.step("without --skip-invalid, a clean trace's table says nothing of skipping", async () => {
    const { code, stdout, stderr } = await runCli(
      "--trace",
      "tests/fixtures/mooncake_sample.jsonl",
      "--model",
      "batching",
    );
    assertEquals(code, 0, stderr);
    assert(!stdout.includes("skipped") && !stderr.includes("skipped"), stdout + stderr);
  });
});

Deno.test("a --skip-invalid notice names a scenario file's trace as the file wrote it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_skip_typed_" });
  try {
    await Deno.copyFile(join(ROOT, "tests/fixtures/mooncake_malformed.jsonl"), `${dir}/trace.jsonl`);
    const scenario = { workload: { trace: { path: "trace.jsonl", format: "mooncake", skipInvalid: true } } };
    await Deno.writeTextFile(`${dir}/scenario.json`, JSON.stringify(scenario));
    // From the scenario's directory, as a user in it would run it.
    const output = await new Deno.Command("deno", {
      args: [
        "run",
        "--allow-read",
        join(ROOT, "scenarios/run.ts"),
        "--scenario",
        "scenario.json",
        "--model",
        "batching",
      ],
      cwd: dir,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(output.stderr);
    assertEquals(output.code, 0, stderr);
    assertMatch(stderr, /^run: skipped 2 malformed lines of trace\.jsonl \(--skip-invalid\)$/m);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("one instance, one request: the run table says each in the singular", async () => {
  const { code, stdout, stderr } = await runCli("--instances", "1", "--requests", "1");
  assertEquals(code, 0, stderr);
  assertStringIncludes(stdout, " · 1 instance · seed ");
  assertStringIncludes(stdout, "workload: 1 request at ");
  assert(!/\b1 instances\b/.test(stdout) && !/\b1 requests\b/.test(stdout), stdout);
});

Deno.test("a sweep whose trace is read with skipInvalid says how many lines its runs skipped in all", async () => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_skip_sweep_" });
  const trace = join(ROOT, "tests/fixtures/mooncake_malformed.jsonl");
  await Deno.writeTextFile(
    `${dir}/spec.json`,
    JSON.stringify({
      base: {
        instances: { model: "batching" },
        workload: { trace: { path: trace, format: "mooncake", skipInvalid: true } },
      },
      axes: { "workload.trace.speed": [1, 2] },
      policies: [{ name: "round_robin" }],
      seeds: [1],
    }),
  );
  const permissions = ["--allow-read", `--allow-write=${dir}`, "--allow-ffi", "--allow-sys"];
  const { code, stderr } = await runDeno(
    permissions,
    "sweep",
    "--spec",
    `${dir}/spec.json`,
    "--out",
    `${dir}/out`,
  );
  assertEquals(code, 0, stderr);
  assertMatch(
    stderr,
    /^sweep: skipped 4 malformed trace lines in all, over the 2 runs reading a trace with skipInvalid$/m,
  );
  await Deno.remove(dir, { recursive: true });
});

Deno.test("the example files' names stay within the top level's budget of files", () => {
  const files = [...Deno.readDirSync(join(ROOT, "scenarios"))].filter((e) => e.isFile).map((e) => e.name);
  assert(files.length <= 14, `${files.length} files at the top of scenarios/: ${files}`);
  assertNotEquals(files.map((f) => basename(f)).indexOf("example.json"), -1);
});
