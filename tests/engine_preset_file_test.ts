import { assert, assertEquals, assertStringIncludes, assertThrows } from "@std/assert";
import { join } from "node:path";
import { ENGINE_PRESETS } from "../actors/instances/engine_presets.ts";
import { simulate } from "../actors/simulation.ts";
import { PRESET_FILE_KIND } from "../scenarios/scenario/engine_preset_file.ts";
import { parseScenario, type ScenarioInput } from "../scenarios/scenario/scenario.ts";
import { parseSweep } from "../scenarios/sweep_runner/sweep_spec.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";
import { messageLine, realtimeCli, runCli, taskFrom } from "./_cli.ts";

/** A llama-server preset as `deno task calibrate` writes one. */
const SLOTS_PRESET = {
  kind: PRESET_FILE_KIND,
  version: 1,
  name: "llama-server-test",
  model: "slots",
  engine: {
    stepMs: 2,
    prefillMsPerToken: 0.4,
    decodeMsPerSeq: 1.5,
    requestOverheadMs: 3,
    kvBlocks: 512,
    blockTokens: 16,
    slots: 4,
    slotSimilarity: 0.5,
    prefixCaching: true,
  },
  shape: { layers: 2, kvHeads: 12, headDim: 64, dtypeBytes: 2, source: "test" },
  source: "measured in a test",
  calibration: { runs: 3, anything: { goes: ["here"] } },
};

const BATCHING_PRESET = {
  ...SLOTS_PRESET,
  name: "vllm-test",
  model: "batching",
  engine: {
    stepMs: 7,
    prefillMsPerToken: 0.02,
    decodeMsPerSeq: 0.03,
    requestOverheadMs: 1,
    kvBlocks: 5000,
    maxBatchTokens: 4096,
    maxSeqs: 64,
  },
};

const dir = Deno.makeTempDirSync({ prefix: "engine_preset_file_test_" });

/** Writes `content` (JSON unless a string) to a file of the test's directory; returns its path. */
function write(name: string, content: unknown): `${string}.json` {
  const path = join(dir, name) as `${string}.json`;
  Deno.writeTextFileSync(path, typeof content === "string" ? content : JSON.stringify(content));
  return path;
}

const slotsFile = write("slots.json", SLOTS_PRESET);
const batchingFile = write("batching.json", BATCHING_PRESET);

/** The error message of parsing `input`. */
function usageError(input: ScenarioInput): string {
  return assertThrows(() => parseScenario(input), UsageError).message;
}

Deno.test("a preset file gives the engine's values and, when the scenario names none, the model", () => {
  const config = parseScenario({ instances: { engine: { preset: slotsFile } } });
  assertEquals(config.instances.model, "slots");
  const e = config.instances.engine;
  assertEquals(e.preset, slotsFile);
  assertEquals([e.stepMs, e.prefillMsPerToken, e.decodeMsPerSeq, e.requestOverheadMs], [2, 0.4, 1.5, 3]);
  assertEquals([e.kvBlocks, e.blockTokens, e.slots, e.slotSimilarity, e.prefixCaching], [
    512,
    16,
    4,
    0.5,
    true,
  ]);
  // No n_batch in the file: llama-server's 2048. One sequence a slot.
  assertEquals([e.maxBatchTokens, e.maxSeqs], [2048, 4]);
  assertEquals(e.shape, SLOTS_PRESET.shape);
  assertEquals(e.presetFile, {
    name: "llama-server-test",
    model: "slots",
    source: "measured in a test",
    calibration: SLOTS_PRESET.calibration,
  });
});

Deno.test("scenario fields beside a preset file override its values", () => {
  const config = parseScenario({
    instances: { engine: { preset: slotsFile, stepMs: 9, slots: 2, maxBatchTokens: 512, slotSimilarity: 0 } },
  });
  const e = config.instances.engine;
  assertEquals([e.stepMs, e.prefillMsPerToken, e.slots, e.maxSeqs, e.maxBatchTokens, e.slotSimilarity], [
    9,
    0.4,
    2,
    2,
    512,
    0,
  ]);
  const batching = parseScenario({
    instances: { model: "batching", engine: { preset: batchingFile, kvBlocks: 99 } },
  });
  assertEquals([batching.instances.engine.kvBlocks, batching.instances.engine.maxSeqs], [99, 64]);
});

Deno.test("a scenario naming another model than its preset file's is refused, naming both", () => {
  assertEquals(
    usageError({ instances: { model: "batching", engine: { preset: slotsFile } } }),
    `scenario.instances.model: expected "slots", the model of engine preset file "${slotsFile}", or none (it then follows the file), got "batching"`,
  );
});

Deno.test("a built-in preset's resolved engine keeps exactly its fields", () => {
  const e =
    parseScenario({ instances: { model: "batching", engine: { preset: "qwen3-14b" } } }).instances.engine;
  assertEquals(Object.keys(e), [
    "preset",
    "stepMs",
    "prefillMsPerToken",
    "decodeMsPerSeq",
    "requestOverheadMs",
    "kvBlocks",
    "blockTokens",
    "maxBatchTokens",
    "maxSeqs",
    "prefixCaching",
    "reserveFullIsl",
    "hostKvBlocks",
    "hostKvGbps",
  ]);
  assertEquals(e.maxBatchTokens, ENGINE_PRESETS["qwen3-14b"].maxBatchTokens);
});

Deno.test("the slots model on a built-in preset steps llama-server's n_batch and has one slot unless told", () => {
  const e = parseScenario({ instances: { model: "slots" } }).instances.engine;
  assertEquals([e.preset, e.stepMs, e.maxBatchTokens, e.slots, e.maxSeqs, e.slotSimilarity], [
    "qwen2.5-7b",
    ENGINE_PRESETS["qwen2.5-7b"].stepMs,
    2048,
    1,
    1,
    0.5,
  ]);
  const told = parseScenario({ instances: { model: "slots", engine: { maxBatchTokens: 512, slots: 8 } } });
  assertEquals([told.instances.engine.maxBatchTokens, told.instances.engine.slots], [512, 8]);
});

Deno.test("engine settings of another model are refused, never ignored", async (t) => {
  const cases: [ScenarioInput, string][] = [
    [
      { instances: { model: "batching", engine: { slots: 4 } } },
      'scenario.instances.engine.slots: used only by instances.model "slots" (this run\'s model is "batching")',
    ],
    [
      { instances: { model: "batching", engine: { slotSimilarity: 0.2 } } },
      'scenario.instances.engine.slotSimilarity: used only by instances.model "slots"',
    ],
    [
      { instances: { model: "slots", engine: { maxSeqs: 4 } } },
      'scenario.instances.engine.maxSeqs: used only by instances.model "batching" (this run\'s model is "slots"); ' +
      "the slots model runs one sequence per slot: instances.engine.slots",
    ],
    [
      { instances: { model: "slots", engine: { hostKvBlocks: 100 } } },
      'scenario.instances.engine.hostKvBlocks: used only by instances.model "batching"',
    ],
    [
      { instances: { engine: { slots: 2 } } },
      'scenario.instances.engine: used only by instances.model "batching" or "slots"',
    ],
    [
      { instances: { model: "slots", engine: { slots: 0 } } },
      "scenario.instances.engine.slots: expected a number >= 1, got 0",
    ],
    [
      { instances: { model: "slots", engine: { slotSimilarity: 1.5 } } },
      "scenario.instances.engine.slotSimilarity: expected a number <= 1, got 1.5",
    ],
    [
      { instances: { model: "slots", engine: { kvBlocks: 1, slots: 17 } } },
      "scenario.instances.engine.slots: expected at most instances.engine.kvBlocks × blockTokens = 16 " +
      "(each slot gets n_ctx / slots tokens), got 17",
    ],
    [
      { instances: { model: "slots", pools: [{ count: 2 }] } },
      'scenario.instances.pools: used only by instances.model "batching"',
    ],
  ];
  for (const [input, message] of cases) {
    await t.step(message, () => assertStringIncludes(usageError(input), message));
  }
});

Deno.test("a missing, unreadable or invalid preset file is refused in one line naming the file, the field and what was expected", async (t) => {
  const bad = (name: string, content: unknown) => write(name, content);
  const cases: [string, string][] = [
    [join(dir, "absent.json"), `cannot read engine preset file "${join(dir, "absent.json")}": no such file`],
    [bad("not_json.json", "{ nope"), "is not valid JSON"],
    [bad("array.json", "[1]"), ": expected an object, got [1]"],
    [
      bad("kind.json", { ...SLOTS_PRESET, kind: "other" }),
      `: kind: expected "${PRESET_FILE_KIND}", got "other"`,
    ],
    [
      bad("version.json", { ...SLOTS_PRESET, version: 2 }),
      ": version: expected 1 (the preset file version this simulator reads), got 2",
    ],
    [
      bad("blocks.json", { ...SLOTS_PRESET, engine: { ...SLOTS_PRESET.engine, kvBlocks: -3 } }),
      ": engine.kvBlocks: expected a number >= 1, got -3",
    ],
    [
      bad("model.json", { ...SLOTS_PRESET, model: "fifo" }),
      ': model: expected one of "batching", "slots", got "fifo"',
    ],
    [
      bad("unknown.json", { ...SLOTS_PRESET, engine: { ...SLOTS_PRESET.engine, nBatch: 1 } }),
      ": engine.nBatch: unknown field",
    ],
    [
      bad("no_seqs.json", { ...BATCHING_PRESET, engine: { ...BATCHING_PRESET.engine, maxSeqs: undefined } }),
      ": engine.maxSeqs: expected an integer >= 1 (a batching preset gives its scheduler's limits), got nothing",
    ],
    [
      bad("slots_in_batching.json", { ...BATCHING_PRESET, engine: { ...BATCHING_PRESET.engine, slots: 2 } }),
      ': engine.slots: used only by model "slots" (this preset\'s model is "batching"), got 2',
    ],
    [
      bad("seqs.json", { ...SLOTS_PRESET, engine: { ...SLOTS_PRESET.engine, maxSeqs: 8 } }),
      ": engine.maxSeqs: expected 4, the preset's slots (llama-server runs one sequence per slot), got 8",
    ],
    [
      bad("calibration.json", { ...SLOTS_PRESET, calibration: [1] }),
      ": calibration: expected an object, got [1]",
    ],
  ];
  for (const [path, message] of cases) {
    await t.step(message, () => {
      const error = usageError({ instances: { engine: { preset: path } } });
      assert(error.startsWith("scenario.instances.engine.preset: "), error);
      assertStringIncludes(error, message);
      assertStringIncludes(error, path);
      assertEquals(error.split("\n").length, 1);
    });
  }
  await t.step("a name that is neither a built-in preset nor a .json file", () => {
    assertStringIncludes(
      usageError({ instances: { model: "batching", engine: { preset: "gpt-9" } } }),
      'scenario.instances.engine.preset: expected one of "qwen2.5-7b", "llama-3.1-8b", "qwen3-14b", ' +
        '"llama-3.3-70b-tp4", or an engine preset file (a path ending in .json), got "gpt-9"',
    );
  });
  await t.step("a pool naming a preset file of another model", () => {
    assertStringIncludes(
      usageError({ instances: { model: "batching", pools: [{ count: 1, engine: { preset: slotsFile } }] } }),
      'scenario.instances.pools[0].engine.preset: expected a preset file for the fleet\'s model "batching", got one for "slots"',
    );
  });
});

Deno.test("a slots preset file runs the slots model end to end", () => {
  const config = parseScenario({
    seed: 3,
    instances: { count: 2, engine: { preset: slotsFile } },
    workload: {
      requests: 300,
      ratePerSec: 4,
      prefix: { tokens: 256 },
      outputTokens: { dist: "constant", value: 16 },
    },
  });
  const result = simulate(config);
  assertEquals([result.completed, result.dropped], [300, 0]);
  assert((result.hitRate ?? 0) > 0, "no prompt was ever reused from a slot");
  assert((result.tpotMeanMs ?? 0) >= 2 + 1.5, `TPOT ${result.tpotMeanMs} below one slot's step`);
});

Deno.test("run takes a preset file (--preset, or in the scenario), reports its name, and fails in one line on a bad one", async () => {
  const ok = await runCli("--preset", slotsFile, "--requests", "40", "--rate", "2");
  assertEquals(ok.code, 0, ok.stderr);
  assertStringIncludes(ok.stdout, "model: slots llama-server-test (4 slots of 2048 tokens, similarity 0.5");
  const scenario = write("scenario.json", {
    instances: { engine: { preset: slotsFile } },
    workload: { requests: 30 },
  });
  const json = await runCli("--scenario", scenario, "--json");
  assertEquals(json.code, 0, json.stderr);
  assertEquals(JSON.parse(json.stdout).scenario.instances.model, "slots");
  const missing = await runCli("--preset", join(dir, "nope.json"));
  assertEquals([missing.code, missing.stdout], [2, ""]);
  assertEquals(
    messageLine(missing.stderr),
    `error: --preset: cannot read engine preset file "${join(dir, "nope.json")}": no such file`,
  );
  const other = await runCli("--preset", slotsFile, "--model", "fifo");
  assertEquals(other.code, 2);
  assertStringIncludes(
    messageLine(other.stderr),
    '--model: expected "slots", the model of engine preset file',
  );
});

Deno.test("a relative preset path is read from the caller's directory, as a trace path", async () => {
  const caller = Deno.makeTempDirSync({ prefix: "engine_preset_caller_" });
  Deno.writeTextFileSync(join(caller, "mine.json"), JSON.stringify(SLOTS_PRESET));
  const out = await taskFrom(caller, "run", "--preset", "mine.json", "--requests", "20", "--json");
  const stderr = new TextDecoder().decode(out.stderr);
  assertEquals(out.code, 0, stderr);
  const scenario = JSON.parse(new TextDecoder().decode(out.stdout)).scenario;
  assertEquals([scenario.instances.model, scenario.instances.engine.presetFile.name], [
    "slots",
    "llama-server-test",
  ]);
});

Deno.test("realtime takes a preset file", async () => {
  const out = await realtimeCli("--preset", slotsFile, "--requests", "20", "--rate", "20", "--speed", "50");
  assertEquals(out.code, 0, out.stderr);
  assertStringIncludes(out.stdout, "slots llama-server-test");
});

Deno.test("a sweep's base and axes take preset files", () => {
  const sweep = parseSweep({
    base: { instances: { count: 1 }, workload: { requests: 10 } },
    axes: { "instances.engine.preset": [slotsFile, batchingFile] },
    policies: [{ name: "round_robin" }],
    seeds: [1],
  });
  assertEquals(sweep.runs.map((r) => r.config.instances.model), ["slots", "batching"]);
  assertEquals(sweep.runs.map((r) => r.config.instances.engine.presetFile?.name), [
    "llama-server-test",
    "vllm-test",
  ]);
});

Deno.test("the example preset file is valid and runs", () => {
  const config = parseScenario({
    instances: { engine: { preset: "scenarios/presets/llama_server_tiny_cpu.json" } },
    // Prompts and outputs within a slot's 2,048 tokens.
    workload: { requests: 50, ratePerSec: 1, prefix: { tokens: 256 } },
  });
  assertEquals([config.instances.model, config.instances.engine.slots], ["slots", 2]);
  assertEquals(simulate(config).completed, 50);
});
