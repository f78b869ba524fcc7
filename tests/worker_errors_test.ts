/**
 * Errors keep their class and kind across the sweep's Worker boundary
 * (scenarios/workers/simulation_worker.ts → scenarios/workers/worker_pool.ts), so `sweep`
 * and `run --router` fail as `run` does in-process: the same class, message
 * and exit code; and design.md's error catalogue names every kind.
 */
import { assert, assertEquals, assertMatch } from "@std/assert";
import { simulate, type SimulationConfig } from "../actors/simulation.ts";
import {
  errorFromData,
  errorToData,
  SIMULATION_ERROR_KINDS,
  SimulationError,
} from "../actors/runtime/simulation_error.ts";
import { TraceFormatError } from "../actors/traces/trace_reader.ts";
import { fileSystemErrorMessage } from "../scenarios/cli/file_system_error.ts";
import { loadRouterPlugin } from "../scenarios/workers/router_plugin.ts";
import { parseScenario, resolveTracePath } from "../scenarios/scenario/scenario.ts";
import { runOnWorkers } from "../scenarios/workers/worker_pool.ts";
import { messageLine, runScript } from "./_cli.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const MALFORMED = `${ROOT}tests/fixtures/mooncake_malformed.jsonl`;
const SAMPLE = `${ROOT}tests/fixtures/mooncake_sample.jsonl`;

/** Asserts that `value` is an instance of `type`, saying what it is otherwise. */
function assertInstanceOf<T>(value: unknown, type: abstract new (...args: never[]) => T): asserts value is T {
  const what = value instanceof Error ? `${value.constructor.name}: ${value.message}` : String(value);
  assert(value instanceof type, `expected a ${type.name}, got ${what}`);
}

function traceConfig(path: string, extra: Record<string, unknown> = {}): SimulationConfig {
  return resolveTracePath(
    parseScenario({ instances: { model: "batching" }, workload: { trace: { path, ...extra } } }),
  );
}

function caught(action: () => unknown): Promise<Error> {
  return Promise.resolve().then(action).then(
    () => {
      throw new Error("expected a failure");
    },
    (error) => error as Error,
  );
}

/** The class, message and cause's class and message of an error: what the command-line tools act on. */
function shape(error: Error) {
  const cause = error.cause as Error | undefined;
  return {
    class: error.constructor.name,
    kind: (error as SimulationError).kind,
    message: error.message,
    cause: cause && `${cause.constructor.name}: ${cause.message}`,
    fileSystem: fileSystemErrorMessage(error),
  };
}

Deno.test("an error survives structured cloning as data: its class, kind, fields and cause", async (t) => {
  const through = (error: unknown) => errorFromData(structuredClone(errorToData(error)));
  await t.step("a SimulationError caused by a trace error", () => {
    const cause = new TraceFormatError("/t.jsonl", 7, "not valid JSON");
    const error = new SimulationError("actor_threw", cause.message, {
      actor: "source",
      messageType: "start",
      timeMs: 12.5,
      cause,
    });
    const back = through(error);
    assertInstanceOf(back, SimulationError);
    assertEquals([back.kind, back.actor, back.messageType, back.timeMs], [
      "actor_threw",
      "source",
      "start",
      12.5,
    ]);
    assertEquals(back.message, error.message);
    // TraceFormatError is not the runtime's to import: without a reviver it is an Error of that name.
    assertEquals([(back.cause as Error).name, (back.cause as Error).message], [cause.name, cause.message]);
  });
  await t.step("a Deno file-system error, with its code", async () => {
    const error = await caught(() => Deno.openSync(`${ROOT}tests/fixtures/no_such_file.jsonl`));
    const back = through(error);
    assertInstanceOf(back, Deno.errors.NotFound);
    assertEquals(fileSystemErrorMessage(back), fileSystemErrorMessage(error));
  });
  await t.step("JavaScript's own classes, and a class nobody registered", () => {
    assertInstanceOf(through(new RangeError("r")), RangeError);
    class Odd extends Error {
      override name = "Odd";
    }
    const odd = through(new Odd("o"));
    assertEquals([odd.name, odd.message, odd instanceof Odd], ["Odd", "o", false]);
  });
  await t.step("a kind that is not one is not a SimulationError", () => {
    const data = errorToData(new SimulationError("actor_threw", "x"));
    const forged = errorFromData({ ...data, fields: { ...data.fields, kind: "all_fine" } });
    assertEquals([forged instanceof SimulationError, forged.name], [false, "SimulationError"]);
  });
  await t.step("a thrown value whose properties throw", () => {
    const hostile = Object.create(Error.prototype, {
      message: {
        get() {
          throw new Error("gotcha");
        },
      },
    });
    assertEquals(errorToData(hostile).message, "(a thrown value that cannot be described)");
  });
});

Deno.test("a run that fails in a pool Worker fails as it does in this thread: same class, message and cause", async (t) => {
  const missing = await Deno.makeTempFile({ suffix: ".jsonl" });
  const missingConfig = traceConfig(missing);
  await Deno.remove(missing);
  const azure = await Deno.makeTempFile({ suffix: ".csv" });
  await Deno.writeTextFile(azure, "not,the,header\n");
  const rows: [string, SimulationConfig][] = [
    ["a malformed line (a trace error inside the source actor)", traceConfig(MALFORMED)],
    ["a malformed header (a trace error while building the source)", traceConfig(azure, { format: "azure" })],
    ["a trace file gone (a file-system error)", missingConfig],
  ];
  for (const [what, config] of rows) {
    await t.step(what, async () => {
      const here = await caught(() => simulate(config));
      const trace = config.workload.trace!.path!;
      const there = await caught(() => runOnWorkers([{ config }], { workers: 1, readPaths: [trace] }));
      assertEquals(shape(there), shape(here));
    });
  }
  await Deno.remove(azure);
});

Deno.test("among many runs, a failure names its run once and keeps its kind", async () => {
  const config = traceConfig(MALFORMED);
  const error = await caught(() =>
    runOnWorkers([{ config }, { config }], { workers: 1, readPaths: [MALFORMED] })
  );
  assertInstanceOf(error, SimulationError);
  assertInstanceOf(error.cause, TraceFormatError);
  assertMatch(error.message, /^actor_threw: run [01]: .*mooncake_malformed\.jsonl:7: input_length: /);
  assertEquals(error.message.match(/actor_threw/g)?.length, 1, error.message);
  assertEquals(error.message.match(/run \d/g)?.length, 1, error.message);
});

/** The plugin at `path` (repository-relative), loaded as `--router` loads it. */
function plugin(path: string) {
  return loadRouterPlugin(path, { baseDir: ROOT, timeoutMs: 5000 });
}

Deno.test("a plugin's run failure keeps its kind and names the plugin", async () => {
  const bad = await plugin("tests/fixtures/plugin_bad_instance.ts");
  const config = traceConfig(SAMPLE);
  const tasks = [{ config, pluginUrl: bad.url }, { config, pluginUrl: bad.url }];
  const error = await caught(() => runOnWorkers(tasks, { workers: 1, plugin: bad, readPaths: [SAMPLE] }));
  assertInstanceOf(error, SimulationError);
  assertEquals([error.kind, error.actor], ["invalid_choice", "router (plugin bad_instance)"]);
  assertEquals(error.message.match(/invalid_choice/g)?.length, 1, error.message);
});

Deno.test("a plugin's Worker is believed about a malformed trace only when the host reads the same", async () => {
  const dir = await Deno.makeTempDir();
  try {
    // A plugin that claims, from its own code, that the (well-formed) trace is malformed.
    await Deno.writeTextFile(
      `${dir}/forged_trace_error.ts`,
      `import { TraceFormatError } from ${JSON.stringify(`${ROOT}actors/traces/trace_reader.ts`)};\n` +
        `export default { name: "forged_trace_error", choose(): number {\n` +
        `  throw new TraceFormatError(${JSON.stringify(SAMPLE)}, 1, "not valid JSON");\n} };\n`,
    );
    const forger = await plugin(`${dir}/forged_trace_error.ts`);
    const sample = traceConfig(SAMPLE);
    const forged = await caught(() =>
      runOnWorkers([{ config: sample, pluginUrl: forger.url }], { plugin: forger, readPaths: [SAMPLE] })
    );
    assertInstanceOf(forged, SimulationError);
    assertEquals([forged.kind, forged.cause instanceof TraceFormatError], ["actor_threw", false]);

    // The same plugin's run over a trace that is malformed: the host reads it fail the same way.
    const honest = await plugin("tests/fixtures/plugin_bad_instance.ts");
    const malformed = traceConfig(MALFORMED);
    const real = await caught(() =>
      runOnWorkers([{ config: malformed, pluginUrl: honest.url }], { plugin: honest, readPaths: [MALFORMED] })
    );
    assertEquals(shape(real), shape(await caught(() => simulate(malformed))));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** Runs `body` with a temporary directory holding `spec.json` (a round-robin sweep over `base` and `axes`); removes it after. */
async function withSweepSpec(
  base: unknown,
  axes: Record<string, unknown[]>,
  body: (out: string, spec: string) => Promise<void>,
): Promise<void> {
  const out = await Deno.makeTempDir();
  try {
    const spec = `${out}/spec.json`;
    await Deno.writeTextFile(
      spec,
      JSON.stringify({ base, axes, policies: [{ name: "round_robin" }], seeds: [1] }),
    );
    await body(out, spec);
  } finally {
    await Deno.remove(out, { recursive: true });
  }
}

Deno.test("sweep and run --router over a malformed trace exit 2 with run's one line", async () => {
  const base = { instances: { model: "batching" }, workload: { trace: { path: MALFORMED } } };
  await withSweepSpec(base, { "instances.count": [2, 3] }, async (out, spec) => {
    const run = await runScript("run", out, "--model", "batching", "--trace", MALFORMED);
    assertEquals(run.code, 2, run.stderr);
    const expected = messageLine(run.stderr);
    assertMatch(expected, /^error: .*mooncake_malformed\.jsonl:7: input_length: /);

    const sweep = await runScript("sweep", out, "--spec", spec, "--out", `${out}/sweep`);
    assertEquals([sweep.code, messageLine(sweep.stderr)], [2, expected]);

    const router = ["--router", "tests/fixtures/plugin_bad_instance.ts"];
    const plugged = await runScript("run", out, "--model", "batching", "--trace", MALFORMED, ...router);
    assertEquals([plugged.code, messageLine(plugged.stderr)], [2, expected]);
  });
});

Deno.test("a plugin's failure in a sweep exits 1 with its kind, the run named once", async () => {
  await withSweepSpec({ workload: { requests: 50 } }, { "instances.count": [2] }, async (out, spec) => {
    const router = ["--router", "tests/fixtures/plugin_bad_instance.ts"];
    const sweep = await runScript("sweep", out, "--spec", spec, "--out", `${out}/sweep`, ...router);
    assertEquals(sweep.code, 1, sweep.stderr);
    const line = messageLine(sweep.stderr);
    assertMatch(line, /^run failed: invalid_choice: run \d+: policy "bad_instance" returned 5/);
    assertEquals([line.match(/invalid_choice/g)?.length, line.match(/run \d+:/g)?.length], [1, 1], line);
  });
});

Deno.test("design.md's error catalogue names every SimulationError kind", async () => {
  const design = await Deno.readTextFile(`${ROOT}design.md`);
  const start = design.indexOf("\n## Errors and exit codes\n");
  assert(start >= 0, 'design.md has no "Errors and exit codes" section');
  const end = design.indexOf("\n## ", start + 1);
  const section = design.slice(start, end < 0 ? undefined : end);
  for (const kind of SIMULATION_ERROR_KINDS) {
    assert(section.includes(`\`${kind}\``), `${kind} is not catalogued`);
  }
  for (const other of ["TraceFormatError", "UsageError", "130"]) assert(section.includes(other), other);
});

Deno.test("a plugin that passes the load check but fails to load in a run's Worker fails its run: exit 1, not a usage error", async () => {
  const out = await Deno.makeTempDir();
  try {
    const trace = new URL("../../shared/data/traces/synthetic_trace.jsonl", import.meta.url).pathname;
    const router = ["--router", "tests/fixtures/plugin_fails_where_trace_readable.ts"];
    const run = await runScript("run", out, "--model", "batching", "--trace", trace, ...router);
    assertEquals(run.code, 1, run.stderr);
    const line = messageLine(run.stderr);
    assertMatch(line, /actor_threw: could not start in its simulation Worker: .*forged/);
    assert(!line.includes("--router:"), line);
  } finally {
    await Deno.remove(out, { recursive: true });
  }
});
