/** A sweep's size is bounded: `deno task sweep` and `merge` refuse a grid too large before expanding it. */
import { assertEquals, assertStringIncludes } from "@std/assert";
import { type CliOutput, messageLine, runDeno, runScript } from "./_cli.ts";
import { MAX_RUNS } from "../scenarios/sweep_runner/sweep_spec.ts";

/**
 * The red team's grid, 1.1 × 10^8 runs: 100 × 100 × 100 × 11 points, one policy, ten seeds.
 * Every value is valid: only its size is wrong.
 */
const HUGE_SPEC = {
  base: { workload: { requests: 6000 } },
  axes: {
    "workload.ratePerSec": [...Array(100).keys()].map((i) => i + 1),
    "workload.prefix.zipf": [...Array(100).keys()].map((i) => i / 100),
    "workload.prefix.sharedFrac": [...Array(100).keys()].map((i) => (i + 1) / 1000),
    "workload.requests": [...Array(11).keys()].map((i) => 1000 * (i + 1)),
  },
  policies: [{ name: "round_robin" }],
  seeds: [...Array(10).keys()].map((i) => i + 1),
};

/** Two runs of 200 requests: a sweep that takes a fraction of a second. */
const TINY_SPEC = {
  base: { workload: { requests: 200 } },
  axes: { "workload.ratePerSec": [30, 40] },
  policies: [{ name: "round_robin" }],
  seeds: [1],
};

/**
 * A V8 heap of 64 MB: enough for a refusal, while expanding the huge grid
 * (gigabytes) crashes the process within a second, so a late check cannot pass.
 */
const SMALL_HEAP = "--v8-flags=--max-old-space-size=64";

/** `scenarios/<script>.ts` with its task's permissions (writes only under `writable`) and a 64 MB heap. */
function inSmallHeap(script: string, writable: string, ...args: string[]): Promise<CliOutput> {
  return runDeno(
    ["--allow-read", `--allow-write=${writable}`, "--allow-ffi", "--allow-sys", SMALL_HEAP],
    script,
    ...args,
  );
}

const names = (dir: string) => [...Deno.readDirSync(dir)].map((e) => e.name).sort();

async function workspace(spec: unknown): Promise<{ dir: string; spec: string; out: string }> {
  const dir = await Deno.makeTempDir({ prefix: "rrs_bounds_" });
  await Deno.writeTextFile(`${dir}/spec.json`, JSON.stringify(spec));
  await Deno.mkdir(`${dir}/out`);
  return { dir, spec: `${dir}/spec.json`, out: `${dir}/out` };
}

Deno.test("sweep refuses a 1.1×10^8-run grid in one line, in a 64 MB heap, before any work", async (t) => {
  const { dir, spec, out } = await workspace(HUGE_SPEC);
  await t.step("its size, how it comes about, the limit and the flag that raises it", async () => {
    const { code, stderr } = await inSmallHeap("sweep", dir, "--spec", spec, "--out", out);
    assertEquals(code, 2, stderr);
    assertEquals(
      messageLine(stderr),
      "error: sweep: 110,000,000 runs (11,000,000 points × 1 policy variant × 10 seeds), " +
        `expected at most ${MAX_RUNS.toLocaleString("en-US")}; ` +
        "shorten the axes, policies or seeds, or raise the limit with --max-runs N",
    );
  });
  await t.step("before its router plugin is loaded (the plugin counts as one more variant)", async () => {
    const { code, stderr } = await inSmallHeap(
      "sweep",
      dir,
      "--spec",
      spec,
      "--out",
      out,
      "--router",
      `${dir}/no_such_plugin.ts`,
    );
    assertEquals(code, 2, stderr);
    assertStringIncludes(
      messageLine(stderr),
      "error: sweep: 220,000,000 runs (11,000,000 points × 2 policy variants × 10 seeds)",
    );
  });
  assertEquals(names(out), []); // no lock, no journal
  await Deno.remove(dir, { recursive: true });
});

Deno.test("--max-runs N is the bound: a sweep of N runs runs, one of N + 1 is refused", async () => {
  const { dir, spec, out } = await workspace(TINY_SPEC);
  const refused = await runScript("sweep", dir, "--spec", spec, "--out", out, "--max-runs", "1");
  assertEquals(refused.code, 2, refused.stderr);
  assertStringIncludes(
    messageLine(refused.stderr),
    "error: sweep: 2 runs (2 points × 1 policy variant × 1 seed), expected at most 1;",
  );
  assertEquals(names(out), []);
  const ran = await runScript("sweep", dir, "--spec", spec, "--out", out, "--max-runs", "2");
  assertEquals(ran.code, 0, ran.stderr);
  assertStringIncludes(ran.stderr, "sweep done: 2 runs");
  assertEquals((await Deno.readTextFile(`${out}/sweep_summary.csv`)).trim().split("\n").length, 3);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("--max-runs takes an integer from 1 to 2^32 − 1, else exits 2 naming the value", async (t) => {
  const { dir, spec, out } = await workspace(TINY_SPEC);
  for (const value of ["0", "-3", "1.5", "lots", "", "4294967296"]) {
    await t.step(JSON.stringify(value), async () => {
      const { code, stderr } = await runScript(
        "sweep",
        dir,
        "--spec",
        spec,
        "--out",
        out,
        "--max-runs",
        value,
      );
      assertEquals(code, 2, stderr);
      assertEquals(
        messageLine(stderr),
        `error: --max-runs: expected an integer from 1 to 4294967295 (a JavaScript array's longest), got "${value}"`,
      );
    });
  }
  assertEquals(names(out), []);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("sweep --help documents --max-runs and its default", async () => {
  const { code, stdout } = await runScript("sweep", "/tmp", "--help");
  assertEquals(code, 0);
  assertStringIncludes(stdout, "--max-runs N     refuse a sweep of more than N runs");
  assertStringIncludes(stdout, `default ${MAX_RUNS.toLocaleString("en-US")}`);
});

Deno.test("merge refuses shards whose spec has more runs than they hold, before expanding it", async () => {
  const { dir, spec, out } = await workspace(TINY_SPEC);
  const shards = `${dir}/shards`;
  for (const shard of ["1/2", "2/2"]) {
    const r = await runScript("sweep", dir, "--spec", spec, "--out", shards, "--shard", shard);
    assertEquals(r.code, 0, r.stderr);
  }
  // Both headers claim the huge grid (their spec hashes still agree): 1.1 × 10^8 runs, 2 recorded.
  for (const name of names(shards)) {
    const [header, ...rest] = (await Deno.readTextFile(`${shards}/${name}`)).split("\n");
    const claimed = JSON.stringify({ ...JSON.parse(header), spec: HUGE_SPEC });
    await Deno.writeTextFile(`${shards}/${name}`, [claimed, ...rest].join("\n"));
  }
  const { code, stderr } = await inSmallHeap("merge", dir, "--out", out, shards);
  assertEquals(code, 2, stderr);
  assertEquals(
    messageLine(stderr),
    `error: ${shards}/shard-1-of-2.jsonl: its sweep has 110,000,000 runs, but the shards hold 2; ` +
      "refusing to merge (re-run the shards)",
  );
  assertEquals(names(out), []);
  await Deno.remove(dir, { recursive: true });
});
