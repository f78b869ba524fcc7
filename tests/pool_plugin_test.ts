/**
 * A router plugin for one pool of a disaggregated fleet (`--prefill-policy
 * FILE.ts`, `--decode-policy FILE.ts`), as a user runs it in `run` and
 * `realtime`: the built-in's numbers from a plugin copy of it, the usage
 * errors (no split fleet, two plugins), a hostile plugin's run failure, and
 * real time matching the virtual run.
 */
import { assert, assertEquals, assertMatch, assertNotEquals, assertStringIncludes } from "@std/assert";
import { messageLine, realtimeCli, runCli } from "./_cli.ts";

const COPY = "scenarios/plugins/prefix_aware_copy.ts";
const THROWS = "tests/fixtures/plugin_throws.ts";
const NEVER_RETURNS = "tests/fixtures/plugin_never_returns.ts";

/**
 * A split fleet with much prefix reuse, so that prefix_aware's choices
 * matter; the run's policy is round_robin, so a plugin placed in the wrong
 * pool (or ignored) changes the numbers.
 */
const SPLIT = [
  "--model",
  "batching",
  "--prefill-instances",
  "3",
  "--decode-instances",
  "2",
  "--requests",
  "400",
  "--rate",
  "40",
  "--zipf",
  "2",
  "--prefix-frac",
  "0.9",
  "--policy",
  "round_robin",
];

/** A run's JSON report, the command checked to have succeeded. */
function report(out: { code: number; stdout: string; stderr: string }): Record<string, unknown> {
  assertEquals(out.code, 0, out.stderr);
  return JSON.parse(out.stdout);
}

/**
 * The metrics of a JSON report: without the wall time, the scenario (a
 * built-in pool policy is in it, a plugin is not), what the report says of
 * a pool plugin, and the kernel's delivery count (a plugin may read
 * anything, so instances report it every load signal too: more messages,
 * same numbers — as with `--router`).
 */
function metrics(r: Record<string, unknown>): Record<string, unknown> {
  const { wallMs: _w, scenario: _s, poolPlugin: _p, messages: _m, lag: _l, speed: _v, ...rest } = r;
  return rest;
}

Deno.test("a pool plugin copy of prefix_aware gives the built-in pool policy's metrics exactly", async (t) => {
  const plain = metrics(report(await runCli(...SPLIT, "--json")));
  for (const pool of ["prefill", "decode"] as const) {
    await t.step(`the ${pool} pool`, async () => {
      const flag = `--${pool}-policy`;
      const plugin = report(await runCli(...SPLIT, flag, COPY, "--json"));
      const builtIn = report(await runCli(...SPLIT, flag, "prefix_aware", "--json"));
      assertEquals(metrics(plugin), metrics(builtIn));
      // The plugin mattered: the run's own policy alone gives other numbers.
      assertNotEquals(metrics(plugin), plain);
      // The run's policy keeps its name; the report says where the plugin ran.
      assertEquals(plugin.policy, "round_robin");
      assertEquals(plugin.poolPlugin, { pool, name: "prefix_aware_copy", path: COPY });
      const scenario = plugin.scenario as Record<string, unknown>;
      assertEquals([scenario.prefillPolicy, scenario.decodePolicy], [undefined, undefined]);
    });
  }
});

Deno.test("the text report names the pool a plugin routed, under the run's policy line", async () => {
  const out = await runCli(...SPLIT, "--decode-policy", COPY, "--prefill-policy", "least_load");
  assertEquals(out.code, 0, out.stderr);
  const [policyLine, pluginLine] = out.stdout.split("\n");
  assertMatch(policyLine, /^policy round_robin · prefill least_load · 5 instances/);
  assertEquals(pluginLine, `decode pool routed by plugin prefix_aware_copy (${COPY})`);
});

Deno.test("a pool plugin without a disaggregated fleet exits 2 as a built-in pool policy does", async () => {
  for (const [tool, args] of [["run", ["--model", "batching"]], ["realtime", []]] as const) {
    const out = await (tool === "run" ? runCli : realtimeCli)(...args, "--prefill-policy", COPY);
    assertEquals(out.code, 2, `${tool}: ${out.stderr}`);
    assertEquals(
      messageLine(out.stderr),
      "error: --prefill-policy: used only by a disaggregated fleet (instances.pools with prefill and decode roles)",
    );
  }
});

Deno.test("a second plugin file exits 2 in one line: a run has one plugin sandbox", async (t) => {
  const cases: [string[], RegExp][] = [
    [
      ["--router", COPY, "--decode-policy", THROWS],
      /^error: --decode-policy: .* beside --router's; a run has one plugin sandbox/,
    ],
    [
      ["--prefill-policy", THROWS, "--decode-policy", COPY],
      /^error: --decode-policy: .* beside --prefill-policy's; .*\(give one pool a built-in policy\)$/,
    ],
    [
      ["--prefill-policy", COPY, "--decode-policy", COPY],
      /to route both pools with it, use --router scenarios/,
    ],
  ];
  for (const [args, message] of cases) {
    await t.step(args.join(" "), async () => {
      const split = SPLIT.filter((a) => a !== "--policy" && a !== "round_robin");
      const out = await runCli(...split, ...args);
      assertEquals(out.code, 2, out.stderr);
      assertMatch(messageLine(out.stderr), message);
    });
  }
});

Deno.test("a pool policy that names a file but not a plugin, or a plugin that fails to load, exits 2 naming the flag", async () => {
  const notPlugin = await runCli(...SPLIT, "--decode-policy", "deno.json");
  assertEquals(notPlugin.code, 2);
  assertStringIncludes(
    messageLine(notPlugin.stderr),
    '--decode-policy: "deno.json" is neither a built-in policy',
  );
  const missing = await runCli(...SPLIT, "--prefill-policy", "tests/fixtures/no_such_plugin.ts");
  assertEquals(missing.code, 2);
  assertStringIncludes(
    messageLine(missing.stderr),
    '--prefill-policy: cannot read "tests/fixtures/no_such_plugin.ts"',
  );
  const denied = await runCli(...SPLIT, "--prefill-policy", "tests/fixtures/hostile/read_system_file.ts");
  assertEquals(denied.code, 2);
  assertMatch(messageLine(denied.stderr), /--prefill-policy: ".*" failed to load: Requires read access/);
});

Deno.test("a hostile pool plugin fails its run with exit 1 and one line naming it and its pool", async (t) => {
  const cases: [string, string[], RegExp][] = [
    [
      "run",
      ["--prefill-policy", THROWS],
      /^run failed: actor_threw: plugin exploded \(actor router \(plugin throws for the prefill pool\)/,
    ],
    [
      "run",
      // 2 s, not 300 ms: the timeout bounds the plugin's loading too, over 300 ms on a loaded machine.
      ["--decode-policy", NEVER_RETURNS, "--plugin-timeout-ms", "2000"],
      /^run failed: plugin_timeout: plugin never_returns did not answer routing request \d+ within 2000 ms \(actor router \(plugin never_returns for the decode pool\)/,
    ],
    [
      "realtime",
      ["--decode-policy", THROWS, "--speed", "50"],
      /^run failed: actor_threw: plugin exploded \(actor router \(plugin plugin_throws\.ts for the decode pool\), message "prefilled"/,
    ],
  ];
  for (const [tool, args, message] of cases) {
    await t.step(`${tool} ${args.join(" ")}`, async () => {
      const out = await (tool === "run" ? runCli : realtimeCli)(...SPLIT, ...args);
      assertEquals(out.code, 1, out.stderr);
      assertMatch(messageLine(out.stderr), message);
    });
  }
});

Deno.test("a pool plugin seldom asked is not taken for a stalled one: the other pool's decisions are progress", async () => {
  // decode-first with local prefill: the decode instance serves every request
  // whole, so the prefill pool's plugin is never asked, in a run far longer
  // than the plugin timeout (≈ 2 s against 400 ms: a budget a loaded machine's
  // scheduling pauses do not reach).
  const out = await runCli(
    ...SPLIT,
    "--requests",
    "100000",
    "--rate",
    "60",
    "--pd-flow",
    "decode-first",
    "--pd-local-prefill-tokens",
    "100000000",
    "--prefill-policy",
    COPY,
    "--plugin-timeout-ms",
    "400",
    "--json",
  );
  const r = report(out);
  assertEquals(r.completed, 100000);
  assert((r.poolPlugin as { pool: string }).pool === "prefill");
});

Deno.test("realtime with a pool plugin gives the virtual run's numbers", async () => {
  const args = [...SPLIT, "--requests", "200", "--decode-policy", COPY, "--json"];
  const virtual = report(await runCli(...args));
  const realtime = report(await realtimeCli(...args, "--speed", "50"));
  assertEquals(realtime.poolPlugin, virtual.poolPlugin);
  assertEquals(realtime.messages, virtual.messages);
  // Actors in Workers give the router no god's-eye view of the caches.
  const fleetView = { availableTokenHitRate: null, routingRegret: null, viewFalsePositiveRate: null };
  assertEquals(metrics(realtime), { ...metrics(virtual), ...fleetView });
  assertEquals(realtime.policy, "round_robin");
});
