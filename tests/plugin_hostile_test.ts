/**
 * Hostile router plugins against the Worker they share with our code and
 * against the process around it (issue 25, "The wire under attack"): a plugin
 * may not post messages, start Workers, signal the process or change a
 * built-in object; a process running one is watched for memory and for a main
 * thread kept busy from a Worker of its own; a Worker that cannot be stopped
 * does not keep a finished command alive; a plugin reads only the files it
 * imports; and every mode says the same one line.
 */
import { assert, assertEquals, assertMatch, assertRejects, assertStringIncludes } from "@std/assert";
import { simulateRealtime } from "../actors/realtime_simulation.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { osResourceMessage } from "../scenarios/scenario/command_line.ts";
import { checkPluginImports, pluginImportRules } from "../scenarios/workers/plugin_imports.ts";
import { loadRouterPlugin } from "../scenarios/workers/router_plugin.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";
import { systemWallTime } from "../scenarios/cli/wall_time.ts";
import { type CliOutput, inParallel, messageLine } from "./_cli.ts";
import { scenario } from "./_scenarios.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const HOSTILE = "tests/fixtures/hostile";

type Mode = "run" | "realtime" | "sweep";

/**
 * The plugin timeout of a case whose plugin breaks a rule other than the timeout, wall ms: the
 * default, 5 s. Loading a plugin, a Worker's start or filling its memory budget can take over a
 * second while other tests load the machine, and the watchdog would then answer first with a
 * plugin_timeout line. The case still fails if the rule is not enforced: the run exits 0, or hangs
 * until this timeout and ends with a plugin_timeout line, not the rule's.
 */
const RULE_TIMEOUT_MS = 5000;

/** `deno run` of a command as its task runs it (reads only; a sweep writes to `out`), plugin timeout `timeoutMs`. */
async function command(
  mode: Mode,
  plugin: string,
  options: { env?: Record<string, string>; out?: string; timeoutMs?: number } = {},
): Promise<CliOutput> {
  const permissions = mode === "sweep"
    ? ["--allow-read", `--allow-write=${options.out}`, "--allow-ffi", "--allow-sys"]
    : ["--allow-read"];
  const extra: Record<Mode, string[]> = {
    run: ["--requests", "300"],
    realtime: ["--requests", "300", "--speed", "1000"],
    sweep: ["--spec", "scenarios/sweeps/quick.json", "--workers", "1", "--out", options.out ?? ""],
  };
  const env = Object.keys(options.env ?? {});
  const output = await new Deno.Command("deno", {
    args: [
      "run",
      "--no-prompt",
      ...permissions,
      ...(env.length > 0 ? [`--allow-env=${env.join(",")}`] : []),
      "--unstable-worker-options",
      `scenarios/${mode}.ts`,
      ...extra[mode],
      "--router",
      plugin.includes("/") ? plugin : `${HOSTILE}/${plugin}`,
      "--plugin-timeout-ms",
      `${options.timeoutMs ?? RULE_TIMEOUT_MS}`,
    ],
    cwd: ROOT,
    env: options.env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    // A command that never ends is the failure some of these tests look for.
    signal: AbortSignal.timeout(60_000),
  }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: output.code, stdout: decode(output.stdout), stderr: decode(output.stderr) };
}

/** One hostile plugin in one mode, and the exit code and one line it must end with. */
interface Row {
  readonly plugin: string;
  readonly modes: readonly Mode[];
  readonly code: number;
  readonly line: RegExp;
}

/** Runs every row in each of its modes (three commands at once) as a step of `t`. */
async function runRows(t: Deno.TestContext, rows: readonly Row[]): Promise<void> {
  const cases = rows.flatMap((row) => row.modes.map((mode) => ({ row, mode })));
  const outs: string[] = [];
  const outputs = await inParallel(
    cases.map(({ row, mode }) => async () => {
      const out = mode === "sweep" ? await Deno.makeTempDir({ prefix: "rrs_hostile_" }) : undefined;
      if (out) outs.push(out);
      return await command(mode, row.plugin, { out });
    }),
    3,
  );
  for (const [i, { row, mode }] of cases.entries()) {
    await t.step(`${mode} ${row.plugin}`, () => {
      const { code, stderr } = outputs[i];
      assertEquals(code, row.code, stderr);
      assertMatch(messageLine(stderr), row.line);
    });
  }
  for (const out of outs) await Deno.remove(out, { recursive: true });
}

const BOTH: readonly Mode[] = ["run", "realtime"];

Deno.test("a plugin may not post messages, open channels, start Workers or signal the process: one line names the rule", async (t) => {
  await runRows(t, [
    // A flood of messages starved the host's main thread (its timers, its watchdog) into an OOM kill.
    {
      plugin: "flood_at_load.ts",
      modes: BOTH,
      code: 2,
      line: /failed to load: a router plugin may not post messages$/,
    },
    {
      plugin: "flood_in_choose.ts",
      modes: [...BOTH, "sweep"],
      code: 1,
      line:
        /^run failed: actor_threw: (run \d+: )?a router plugin may not post messages \(actor router \(plugin flood_in_choose/,
    },
    {
      plugin: "forged_ready.ts",
      modes: ["run"],
      code: 2,
      line: /failed to load: a router plugin may not post messages$/,
    },
    // A nested Worker spun a core for the life of the process.
    {
      plugin: "nested_worker.ts",
      modes: BOTH,
      code: 2,
      line: /failed to load: a router plugin may not start Workers$/,
    },
    {
      plugin: "nested_worker_in_choose.ts",
      modes: BOTH,
      code: 1,
      line: /^run failed: actor_threw: a router plugin may not start Workers \(actor router/,
    },
    // Deno.kill of the process's own pid needs no permission: it killed the host without a word.
    {
      plugin: "kill_host.ts",
      modes: BOTH,
      code: 2,
      line: /failed to load: a router plugin may not call Deno\.kill$/,
    },
  ]);
});

Deno.test("a plugin may not change a built-in object the router shares with it: it fails to load, or its run fails", async (t) => {
  await runRows(t, [
    {
      plugin: "patch_array_push.ts",
      modes: BOTH,
      code: 2,
      line:
        /failed to load: a router plugin may not modify built-in objects: Array\.prototype\.push was replaced$/,
    },
    {
      plugin: "patch_in_choose.ts",
      modes: BOTH,
      code: 1,
      line:
        /^run failed: actor_threw: a router plugin may not modify built-in objects: Cannot assign to read only property 'get' of object '#<Map>' \(actor router/,
    },
    // From a timer, between two deliveries to the router: caught before the next one.
    {
      plugin: "patch_later.ts",
      modes: ["realtime"],
      code: 1,
      line:
        /^run failed: actor_threw: a router plugin may not modify built-in objects: Array\.prototype\.push was replaced/,
    },
  ]);
});

Deno.test("every built-in a plugin could change is frozen or checked before the plugin loads", async (t) => {
  const dir = await Deno.makeTempDir();
  const rows: [what: string, code: string][] = [
    ["JSON.stringify", `JSON.stringify = () => "{}";`],
    ["Math.random", `Math.random = () => 0.5;`],
    ["Promise.prototype.then", `Promise.prototype.then = function () { return this; };`],
    ["Map.prototype.get", `Map.prototype.get = () => undefined;`],
    ["Object.prototype.toString", `Object.prototype.toString = () => "x";`],
    ["a new Object.prototype.then", `Object.defineProperty(Object.prototype, "then", { value: () => {} });`],
    ["an element of Array.prototype", `Array.prototype[0] = "hole filler";`],
    ["Array.prototype's iterator", `Array.prototype[Symbol.iterator] = function* () {};`],
    [
      "an iterator prototype's next",
      `Object.getPrototypeOf([][Symbol.iterator]()).next = () => ({ done: true });`,
    ],
    ["a global binding", `globalThis.JSON = { stringify: () => "{}", parse: () => ({}) };`],
    ["Function.prototype.call", `Function.prototype.call = () => 0;`],
    ["Error.prototype.toString", `Error.prototype.toString = () => "x";`],
    ["a Deno namespace function", `Deno.inspect = () => "x";`],
    ["a Web API prototype", `TextEncoder.prototype.encode = () => new Uint8Array();`],
    ["Atomics", `Atomics.store = () => 0;`],
  ];
  for (const [what, code] of rows) {
    await t.step(what, async () => {
      const path = `${dir}/patch.ts`;
      await Deno.writeTextFile(path, `${code}\nexport default { name: "patch", choose: () => 0 };\n`);
      const error = await assertRejects(() => loadRouterPlugin(path), UsageError);
      assertStringIncludes(
        error.message,
        "failed to load: a router plugin may not modify built-in objects: ",
      );
    });
  }
  await t.step("a plugin's own objects stay its own to change (no override mistake)", async () => {
    const path = `${dir}/own.ts`;
    await Deno.writeTextFile(
      path,
      `class Refusal extends TypeError { constructor(m: string) { super(m); this.name = "Refusal"; } }\n` +
        `const labelled: { toString?: () => string } = {};\nlabelled.toString = () => "own";\n` +
        `const f = () => 0;\n(f as { toString: () => string }).toString = () => "f";\n` +
        `const name = new Refusal("x").name + String(labelled) + String(f) + new Map([[1, 2]]).get(1);\n` +
        `export default { name, choose: () => 0 };\n`,
    );
    assertEquals((await loadRouterPlugin(path)).name, "Refusalownf2");
  });
  await Deno.remove(dir, { recursive: true });
});

Deno.test("a process running a plugin stops at the memory budget with one line, in every mode", async (t) => {
  // The budget is lowered for the test: nothing here fills gigabytes.
  const env = { PLUGIN_MEMORY_BUDGET_MB: "300" };
  const modes: Mode[] = ["run", "realtime", "sweep"];
  const outputs = await inParallel(
    modes.map((mode) => async () => {
      const out = mode === "sweep" ? await Deno.makeTempDir({ prefix: "rrs_memory_" }) : undefined;
      const output = await command(mode, "fill_memory.ts", { env, out });
      if (out) await Deno.remove(out, { recursive: true });
      return output;
    }),
    3,
  );
  for (const [i, mode] of modes.entries()) {
    await t.step(mode, () => {
      const { code, stderr } = outputs[i];
      assertEquals(code, 1, stderr);
      assertMatch(
        messageLine(stderr),
        /^run failed: resource_exhausted: (run \d+: )?the process running plugin fill_memory used \d+ MB, over the 300 MB budget of a plugin run/,
      );
    });
  }
});

/** `tests/fixtures/watchdog_probe.ts MODE` in a process of its own. */
async function probe(mode: string): Promise<Deno.CommandOutput> {
  return await new Deno.Command("deno", {
    args: ["run", "--no-prompt", "--allow-read", "tests/fixtures/watchdog_probe.ts", mode],
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
}

Deno.test("the plugin watchdog ends the process in one line even when its main thread is kept busy", async (t) => {
  await t.step("memory over the budget, main thread free: its own line, exit 1", async () => {
    const out = await probe("memory");
    const stderr = new TextDecoder().decode(out.stderr);
    assertEquals(out.code, 1, stderr);
    assertMatch(
      messageLine(stderr),
      /^serve: resource_exhausted: the process running plugin probe used \d+ MB, over the \d+ MB budget of a plugin run \(actor router \(plugin probe\)\)$/,
    );
  });
  // A busy main thread takes no message and runs no timer: the watchdog's Worker writes the
  // line itself and ends the process with SIGKILL (Deno.exit in a Worker ends only the Worker).
  await t.step("memory over the budget, main thread busy: the watchdog's line, SIGKILL", async () => {
    const out = await probe("memory-busy");
    const stderr = new TextDecoder().decode(out.stderr);
    assertEquals(out.signal, "SIGKILL", stderr);
    assertMatch(
      messageLine(stderr),
      /^serve: resource_exhausted: the process running plugin probe used \d+ MB/,
    );
  });
  await t.step("a verdict taken but the process not ended: the taker's line only, SIGKILL", async () => {
    const out = await probe("memory-kept");
    const stderr = new TextDecoder().decode(out.stderr);
    assertEquals(out.signal, "SIGKILL", stderr);
    assertMatch(
      messageLine(stderr),
      /^serve: resource_exhausted: the process running plugin probe used \d+ MB/,
    );
  });
  await t.step("a main thread busy past the stall bound: the watchdog's line, SIGKILL", async () => {
    const out = await probe("busy");
    const stderr = new TextDecoder().decode(out.stderr);
    assertEquals(out.signal, "SIGKILL", stderr);
    assertMatch(
      messageLine(stderr),
      /^serve: plugin_timeout: the main thread did not run for \d+ ms while plugin probe was loaded/,
    );
  });
});

Deno.test("a plugin's Worker that cannot be stopped does not keep a finished command alive", async (t) => {
  // Endless promise callbacks from the first decision: the run finishes, its Worker never does.
  // A plugin timeout of 1 s: the Worker that never answers again is the case, found at the timeout.
  const timeoutMs = 1000;
  const [run, realtime, spinning] = await inParallel([
    () => command("run", "microtask_flood.ts", { timeoutMs }),
    () => command("realtime", "microtask_flood.ts", { timeoutMs }),
    () => command("run", "spin_outside_choose.ts", { timeoutMs }),
  ], 3);
  await t.step("run prints its report and exits 0", () => {
    assertEquals(run.code, 0, run.stderr);
    assertStringIncludes(run.stdout, "policy plugin microtask_flood");
  });
  await t.step("realtime fails the run at the plugin timeout and exits 1", () => {
    assertEquals(realtime.code, 1, realtime.stderr);
    assertMatch(
      messageLine(realtime.stderr),
      /^run failed: plugin_timeout: plugin microtask_flood\.ts did not answer/,
    );
  });
  await t.step("a Worker busy outside choose is said to be busy, not to have called Deno.exit", () => {
    assertEquals(spinning.code, 1, spinning.stderr);
    assertMatch(
      messageLine(spinning.stderr),
      /^run failed: plugin_timeout: plugin spin_outside_choose did not start run 0 within 1000 ms: its Worker is still busy with code the plugin left running outside choose/,
    );
  });
});

Deno.test("a plugin's Worker may read the files of its import graph, and no directory or hidden file", async (t) => {
  await t.step("the grants are files only, ours included", async () => {
    for (const file of ["tests/fixtures/hostile/uses_actors.ts", "scenarios/plugins/cache_with_slack.ts"]) {
      const path = `${ROOT}${file}`;
      const grants = await checkPluginImports(path, await pluginImportRules(path));
      assert(grants.includes(path), `${file}: ${grants}`);
      for (const grant of grants) assert((await Deno.stat(grant)).isFile, `${grant} is not a file`);
    }
    const path = `${ROOT}tests/fixtures/hostile/uses_actors.ts`;
    const grants = await checkPluginImports(path, await pluginImportRules(path));
    assert(grants.some((g) => g.endsWith("actors/policies/_least_loaded.ts")), `${grants}`);
  });
  const dir = await Deno.makeTempDir();
  await Deno.mkdir(`${dir}/.ssh`);
  await Deno.writeTextFile(`${dir}/.ssh/key.json`, `{ "key": "SECRET" }`);
  await Deno.writeTextFile(`${dir}/notes.txt`, "SECRET");
  await t.step("a hidden file beside the plugin is refused before loading", async () => {
    await Deno.writeTextFile(
      `${dir}/hidden.ts`,
      `import k from "./.ssh/key.json" with { type: "json" };\nexport default { name: k.key, choose: () => 0 };\n`,
    );
    const error = await assertRejects(() => loadRouterPlugin(`${dir}/hidden.ts`), UsageError);
    assertStringIncludes(
      error.message,
      `is hidden (a name starting with "."), which a plugin may not import`,
    );
  });
  await t.step("a file beside the plugin that it does not import is unreadable", async () => {
    await Deno.writeTextFile(
      `${dir}/sibling.ts`,
      `const n = Deno.readTextFileSync(new URL("./notes.txt", import.meta.url));\n` +
        `export default { name: n, choose: () => 0 };\n`,
    );
    const error = await assertRejects(() => loadRouterPlugin(`${dir}/sibling.ts`), UsageError);
    assertStringIncludes(error.message, `failed to load: Requires read access to "${dir}/notes.txt"`);
    // The real-time router's Worker, given no grants, may read the plugin's file alone.
    const realtime = await assertRejects(
      () =>
        simulateRealtime(scenario({ workload: { requests: 20 } }), {
          speed: 50,
          wallTime: systemWallTime,
          pluginUrl: new URL(`file://${dir}/sibling.ts`).href,
        }),
      SimulationError,
    );
    assertStringIncludes(realtime.message, `Requires read access to "${dir}/notes.txt"`);
  });
  await Deno.remove(dir, { recursive: true });
});

Deno.test("an async choose is described by one line, the same in every mode", async () => {
  const [run, realtime] = await inParallel([
    () => command("run", "async_choose.ts"),
    () => command("realtime", "async_choose.ts"),
  ], 2);
  const detail = (out: CliOutput) => {
    assertEquals(out.code, 1, out.stderr);
    return /^run failed: (invalid_choice: .*?) \(actor/.exec(messageLine(out.stderr))?.[1];
  };
  assertEquals(
    detail(run),
    `invalid_choice: policy "async_choose" returned a Promise (choose must decide synchronously, not async); expected an integer in [0, 4)`,
  );
  assertEquals(detail(realtime), detail(run));
});

Deno.test("an operating-system resource error says what ran out and blames no plugin", async () => {
  assertEquals(
    osResourceMessage(Object.assign(new Error("Too many open files (os error 24)"), { code: "EMFILE" })),
    "the process ran out of file descriptors (Too many open files): raise `ulimit -n` or lower the connections",
  );
  assertEquals(
    osResourceMessage(new Error("Too many open files (os error 24): open '/x'")),
    osResourceMessage({ code: "EMFILE" }),
  );
  assertEquals(osResourceMessage(new Error("boom")), undefined);
  const out = await new Deno.Command("deno", {
    args: ["run", "--no-prompt", "--allow-read", "tests/fixtures/uncaught_os_error.ts"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  assertEquals(out.code, 1, stderr);
  assertEquals(
    messageLine(stderr),
    "error: the process ran out of file descriptors (Too many open files): raise `ulimit -n` or lower the connections",
  );
});
