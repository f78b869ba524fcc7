/**
 * The catalogue of bad inputs and hostile router plugins, each run as a user
 * would run it — in `run`, `sweep` and `realtime` where it applies — asserting
 * the exit code, exactly one line on stderr with the expected words, no stack
 * trace, and that nothing on disk changed.
 */
import { assert, assertEquals, assertMatch } from "@std/assert";
import { inParallel, messageLine } from "./_cli.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const HOSTILE = "tests/fixtures/hostile";
const FIXTURES = "tests/fixtures";

type Mode = "run" | "sweep" | "realtime";

/** One catalogue entry: the arguments, in which modes, and what must come out. */
interface Case {
  readonly name: string;
  readonly args: readonly string[];
  readonly modes: readonly Mode[];
  readonly code: number;
  /** What the one stderr line must match. */
  readonly message: RegExp;
}

const ALL: readonly Mode[] = ["run", "sweep", "realtime"];
const SCENARIO_TOOLS: readonly Mode[] = ["run", "realtime"];

/**
 * A plugin case: the plugin alone, with the default plugin timeout of 5 s unless the case is the
 * timeout (300 ms). A rule broken at load or in choose is found at once; a shorter watchdog could
 * answer first with plugin_timeout while other tests load the machine (a Worker's start alone can
 * then take a second). The case still fails if the rule is not enforced: the command exits 0, or
 * hangs until the timeout and ends with plugin_timeout, not the rule's line.
 */
function plugin(file: string, code: number, message: RegExp, modes = ALL, timeoutMs = 5000): Case {
  return {
    name: `plugin ${file}`,
    args: [
      "--router",
      `${file.includes("/") ? file : `${HOSTILE}/${file}`}`,
      "--plugin-timeout-ms",
      `${timeoutMs}`,
    ],
    modes,
    code,
    message,
  };
}

const PLUGINS: readonly Case[] = [
  plugin("ffi_system.ts", 2, /failed to load: Requires ffi access to "libc\.so\.6"/),
  plugin("read_system_file.ts", 2, /failed to load: Requires read access to "\/etc\/hostname"/),
  plugin("read_in_choose.ts", 1, /Requires read access to "\/etc\/hostname".*read_in_choose/),
  plugin("write_results.ts", 2, /failed to load: Requires write access to ".*results\/PWNED\.txt"/),
  plugin("read_env.ts", 2, /failed to load: Requires env access to "HOME"/),
  plugin("net_fetch.ts", 2, /failed to load: Requires net access to "127\.0\.0\.1:8080"/),
  plugin("subprocess.ts", 2, /failed to load: Requires run access to "touch"/),
  plugin("remote_import.ts", 2, /import "https:\/\/example\.com\/evil\.ts" refused/),
  plugin("npm_import.ts", 2, /import "npm:left-pad@1\.3\.0" refused: npm packages .* pinned in deno\.lock/),
  plugin("text_import.ts", 2, /import "\/etc\/hostname" refused: outside the plugin's directory/),
  plugin("dynamic_import.ts", 2, /import\(\) with a computed specifier cannot be checked/),
  plugin("node_builtin.ts", 2, /import "node:child_process" refused/),
  plugin("outside_import.ts", 2, /import "\.\.\/\.\.\/\.\.\/scenarios\/run\.ts" refused: outside/),
  plugin("exit_at_load.ts", 2, /failed to load: a router plugin may not call Deno\.exit/),
  plugin("exit_in_choose.ts", 1, /a router plugin may not call Deno\.exit.*exit_in_choose/),
  plugin("close_in_choose.ts", 1, /a router plugin may not call close\(\).*close_in_choose/),
  plugin(
    "loop_at_load.ts",
    1,
    /plugin_timeout: .*loop_at_load\.ts did not finish loading within 300 ms/,
    ALL,
    300,
  ),
  // 2 s, not 300 ms: the budget bounds loading too, which took over 300 ms on a loaded machine
  // (the line then said "did not finish loading"). A plugin that never answers still times out.
  plugin(
    `${FIXTURES}/plugin_never_returns.ts`,
    1,
    /plugin_timeout: .*never_returns.* request 0 .*2000 ms|plugin_timeout: .*never_returns.*"route".*at t=/,
    ALL,
    2000,
  ),
  plugin("huge_allocation.ts", 1, /Array buffer allocation failed.*huge_allocation/),
  plugin(
    "fill_memory.ts",
    1,
    /resource_exhausted: .*fill_memory used \d+ MB, over the 3072 MB budget/,
    ALL,
    60_000,
  ),
  plugin("object_choice.ts", 1, /invalid_choice: (run \d+: )?policy "object_choice" returned an object;/),
  plugin(
    "patch_math.ts",
    1,
    /a router plugin may not modify built-in objects: Cannot assign to read only property 'max'/,
  ),
  plugin("bad_name.ts", 2, /is not a router plugin: its name must be 1 to 80 printable ASCII characters/),
  plugin("multiline_error.ts", 1, /actor_threw: (run \d+: )?line one( \/ line two \/ line three)?/),
  plugin("forged_ready.ts", 2, /failed to load: a router plugin may not post messages/),
  plugin(`${FIXTURES}/plugin_throws.ts`, 1, /actor_threw: (run \d+: )?plugin exploded/),
  plugin(`${FIXTURES}/plugin_bad_instance.ts`, 1, /invalid_choice: (run \d+: )?.*returned 7/),
  plugin("./deno.json", 2, /--router: "\.\/deno\.json" is not a router plugin/),
  plugin(`${HOSTILE}/no_such_plugin.ts`, 2, /--router: cannot read ".*no_such_plugin\.ts": no such file/),
];

/** A bad flag or file: exits 2 naming it. */
function bad(name: string, args: readonly string[], message: RegExp, modes = SCENARIO_TOOLS): Case {
  return { name, args, modes, code: 2, message };
}

const BAD_INPUTS: readonly Case[] = [
  bad("negative rate", ["--rate", "-3"], /--rate: expected a number > 0, got -3/),
  bad("rate not a number", ["--rate", "fast"], /--rate: expected a number, got "fast"/),
  bad("rate overflowing to Infinity", ["--rate", "1e400"], /--rate: .*1e400/),
  bad("zero instances", ["--instances", "0"], /--instances: expected .*>= 1, got 0/),
  bad("fractional requests", ["--requests", "1.5"], /--requests: expected an integer, got 1\.5/),
  bad("negative zipf", ["--zipf", "-1"], /--zipf: expected a number >= 0, got -1/),
  bad("shared fraction above 1", ["--prefix-frac", "2"], /--prefix-frac: .*got 2/),
  bad("unknown policy", ["--policy", "fastest"], /--policy: expected one of .*got "fastest"/),
  bad("unknown model", ["--model", "gpu"], /--model: expected .*got "gpu"/),
  bad("preset without the batching model", ["--preset", "qwen3-14b"], /--preset/),
  bad(
    "missing trace file",
    ["--model", "batching", "--trace", "no_such_trace.jsonl"],
    /--trace: .*no_such_trace\.jsonl/,
  ),
  bad("trace speed without a trace", ["--trace-speed", "2"], /--trace-speed: needs --trace FILE/),
  bad(
    "threshold beside a non-hybrid policy",
    ["--policy", "round_robin", "--threshold", "2"],
    /--threshold: not a parameter of round_robin \(its parameters: none\)/,
  ),
  bad(
    "a parameter flag of another policy than the default",
    ["--load-factor", "2"],
    /--load-factor: not a parameter of hybrid \(its parameters: threshold, hostCredit\)/,
  ),
  bad("missing scenario file", ["--scenario", "no_such.json"], /no_such\.json/),
  bad(
    "threshold beside a non-hybrid policy in a scenario file",
    ["--scenario", `${FIXTURES}/threshold_round_robin.json`],
    /scenario\.policy\.threshold: not a parameter of round_robin \(its parameters: none\)/,
  ),
  bad(
    "scenario that is not an object",
    ["--scenario", `${FIXTURES}/not_an_object.json`],
    /not_an_object\.json/,
  ),
  bad("unknown flag", ["--fast"], /unknown flag --fast/),
  bad("stray argument", ["fast"], /unexpected argument "fast"/),
  bad("negative seed", ["--seed", "-1"], /--seed: .*got -1/),
  bad("negative cache capacity", ["--cache-capacity", "-1"], /--cache-capacity: .*got -1/),
  bad("zero plugin timeout", [
    "--router",
    "scenarios/plugins/cache_with_slack.ts",
    "--plugin-timeout-ms",
    "0",
  ], /--plugin-timeout-ms: expected a number > 0, got 0/),
  bad(
    "plugin timeout without a plugin",
    ["--plugin-timeout-ms", "100"],
    /--plugin-timeout-ms: needs --router/,
  ),
  bad("router beside policy", [
    "--router",
    "scenarios/plugins/cache_with_slack.ts",
    "--policy",
    "hybrid",
  ], /--router: replaces the built-in policy; drop --policy/),
  bad("zero workers", ["--workers", "0"], /--workers: expected an integer >= 1/, ["sweep"]),
  bad("a billion workers", ["--workers", "1e9"], /--workers: .*1e9/, ["sweep"]),
  bad("shard beyond the count", ["--shard", "3/2"], /--shard: expected i\/n/, ["sweep"]),
  bad("missing sweep spec", ["--spec", "no_such_sweep.json"], /no_such_sweep\.json/, ["sweep"]),
  bad("resume and fresh together", ["--resume", "--fresh"], /--resume and --fresh/, ["sweep"]),
  bad("quick and spec together", ["--quick", "--spec", "scenarios/sweeps/quick.json"], /--quick and --spec/, [
    "sweep",
  ]),
  bad("zero speed", ["--speed", "0"], /--speed: expected a number > 0, got "0"/, ["realtime"]),
  bad("handler timeout not a number", ["--handler-timeout-ms", "soon"], /--handler-timeout-ms/, ["realtime"]),
];

/** The command line of `mode`, with the permissions its task has (writes go to `out`). */
function command(mode: Mode, args: readonly string[], out: string): Deno.Command {
  const perms: Record<Mode, string[]> = {
    run: ["--allow-read"],
    sweep: ["--allow-read", `--allow-write=${out}`, "--allow-ffi", "--allow-sys"],
    realtime: ["--allow-read"],
  };
  const extra: Record<Mode, string[]> = {
    run: ["--requests", "300"],
    sweep: ["--spec", "scenarios/sweeps/quick.json", "--workers", "1", "--out", out],
    realtime: ["--requests", "300", "--speed", "1000"],
  };
  return new Deno.Command("deno", {
    args: ["run", ...perms[mode], `scenarios/${mode}.ts`, ...extra[mode], ...args],
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  });
}

/** Every file under `dir` with its size and modification time. */
async function snapshot(dir: string): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  const walk = async (path: string) => {
    for await (const entry of Deno.readDir(path)) {
      const full = `${path}/${entry.name}`;
      if (entry.isDirectory) await walk(full);
      else {
        const info = await Deno.stat(full);
        files.set(full, `${info.size}:${info.mtime?.getTime()}`);
      }
    }
  };
  await walk(dir);
  return files;
}

const CANARIES = ["/tmp/rrs_pwned_ffi", "/tmp/rrs_pwned_run", `${ROOT}results/PWNED.txt`];

for (const mode of ALL) {
  const cases = [...PLUGINS, ...BAD_INPUTS].filter((c) => c.modes.includes(mode));
  Deno.test(`${mode}: ${cases.length} bad inputs and hostile plugins exit with one clear line and change nothing`, async (t) => {
    for (const canary of CANARIES) await Deno.remove(canary).catch(() => {});
    const before = await snapshot(`${ROOT}results`);
    const outs: string[] = [];
    const outputs = await inParallel(
      cases.map((c) => async () => {
        const out = await Deno.makeTempDir({ prefix: "rrs_catalogue_" });
        outs.push(out);
        const { code, stderr } = await command(mode, c.args, out).output();
        const files = [...Deno.readDirSync(out)].map((e) => e.name);
        return { code, stderr: new TextDecoder().decode(stderr), files };
      }),
      3,
    );
    for (const [i, c] of cases.entries()) {
      await t.step(c.name, () => {
        const { code, stderr, files } = outputs[i];
        assertEquals(code, c.code, stderr);
        assertMatch(messageLine(stderr), c.message);
        // A failed sweep keeps only its journal (as Ctrl-C does); nothing else is written.
        assert(
          files.every((f) => f === "sweep_journal.jsonl" || f === ".sweep.lock"),
          `files written: ${files}`,
        );
      });
    }
    for (const canary of CANARIES) {
      assert(!(await Deno.stat(canary).then(() => true, () => false)), `${canary} was created`);
    }
    assertEquals(await snapshot(`${ROOT}results`), before, "results/ changed");
    for (const out of outs) await Deno.remove(out, { recursive: true });
  });
}
