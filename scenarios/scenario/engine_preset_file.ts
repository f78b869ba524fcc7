/**
 * @module
 * Engine preset files: what `deno task calibrate` writes and
 * `instances.engine.preset` takes beside the built-in names — a versioned
 * JSON file of one engine's values for an engine-driven model (`batching`,
 * `slots`). Read while a scenario is parsed, so every caller of
 * `parseScenario` (run, sweep, realtime, serve, their Workers' configs) takes
 * it alike.
 */
import { z } from "zod";
import type { ModelShape, PresetFileNote } from "../../actors/instances/engine_presets.ts";
import { MODELS } from "../../actors/instances/instance_models.ts";
import { fromCaller } from "../cli/caller_directory.ts";
import { count } from "./schema_numbers.ts";

/** The `kind` every preset file carries. */
export const PRESET_FILE_KIND = "request-routing-sim engine preset";

/** The format version this simulator reads (and `calibrate` writes). */
export const PRESET_FILE_VERSION = 1;

/** Names of the models a preset file may be for: those that run engine steps. */
export const PRESET_FILE_MODELS = MODELS.filter((m) => m.decodes).map((m) => m.name) as [string, ...string[]];

/** Whether a preset value names a file (a path ending in `.json`) rather than a built-in preset. */
export function isPresetFilePath(value: unknown): value is `${string}.json` {
  return typeof value === "string" && value.endsWith(".json");
}

/** The engine values of a preset file; each may be overridden by the scenario's `instances.engine`. */
const engineValues = z.strictObject({
  stepMs: z.number().min(0),
  prefillMsPerToken: z.number().min(0),
  decodeMsPerSeq: z.number().min(0),
  prefillMsPerContextToken: z.number().min(0).optional(),
  requestOverheadMs: z.number().min(0),
  kvBlocks: count(1),
  blockTokens: count(1).optional(),
  maxBatchTokens: count(1).optional(),
  maxSeqs: count(1).optional(),
  slots: count(1).optional(),
  slotSimilarity: z.number().min(0).max(1).optional(),
  attentionMsPerKvToken: z.number().min(0).optional(),
  prefixCaching: z.boolean().optional(),
});

/** The engine values a preset file gives. */
export type PresetFileEngine = z.infer<typeof engineValues>;

const modelShape = z.strictObject({
  layers: count(1),
  kvHeads: count(1),
  headDim: count(1),
  dtypeBytes: z.number().gt(0),
  source: z.string(),
});

/**
 * A preset file's schema (version 1). Model-specific fields: a `batching`
 * preset must give `maxBatchTokens` and `maxSeqs` (vLLM's defaults depend on
 * the GPU) and no slot settings; a `slots` preset's `maxSeqs`, if given,
 * must equal its slots (llama-server runs one sequence per slot).
 */
export const presetFileSchema = z.strictObject({
  kind: z.custom<typeof PRESET_FILE_KIND>((v) => v === PRESET_FILE_KIND, {
    message: `expected "${PRESET_FILE_KIND}"`,
  }),
  version: z.custom<typeof PRESET_FILE_VERSION>((v) => v === PRESET_FILE_VERSION, {
    message: `expected ${PRESET_FILE_VERSION} (the preset file version this simulator reads)`,
  }),
  name: z.string().min(1),
  model: z.enum(PRESET_FILE_MODELS),
  engine: engineValues,
  shape: modelShape.optional(),
  source: z.string(),
  calibration: z.record(z.string(), z.unknown()).optional(),
}).superRefine((file, ctx) => {
  const e = file.engine;
  const issue = (field: string, message: string) =>
    ctx.addIssue({ code: "custom", path: ["engine", field], message });
  if (file.model === "batching") {
    for (const field of ["maxBatchTokens", "maxSeqs"] as const) {
      if (e[field] === undefined) {
        issue(field, `expected an integer >= 1 (a batching preset gives its scheduler's limits)`);
      }
    }
    for (const field of ["slots", "slotSimilarity", "attentionMsPerKvToken"] as const) {
      if (e[field] !== undefined) {
        issue(field, `used only by model "slots" (this preset's model is "batching")`);
      }
    }
  } else if (e.prefillMsPerContextToken !== undefined) {
    issue("prefillMsPerContextToken", `used only by model "batching" (this preset's model is "slots")`);
  } else if (e.maxSeqs !== undefined && e.maxSeqs !== (e.slots ?? 1)) {
    issue(
      "maxSeqs",
      `expected ${e.slots ?? 1}, the preset's slots (llama-server runs one sequence per slot)`,
    );
  }
});

/** What reading a preset file went wrong on, in one line (the scenario's error names the field). */
export class PresetFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PresetFileError";
  }
}

/**
 * A preset file, read and checked. It stands in for the preset's name while
 * the scenario is validated (a JSON scenario cannot forge one), then is
 * resolved into the engine config: its values, its path as given, and its
 * {@linkcode PresetFileNote}.
 */
export class EnginePresetFile {
  constructor(
    /** The path as the scenario gives it. */
    readonly path: `${string}.json`,
    readonly name: string,
    readonly model: string,
    readonly engine: PresetFileEngine,
    readonly shape: ModelShape | undefined,
    readonly source: string,
    readonly calibration: Readonly<Record<string, unknown>> | undefined,
  ) {}

  /** What the resolved engine keeps of the file for the record. */
  note(): PresetFileNote {
    return {
      name: this.name,
      model: this.model,
      source: this.source,
      ...(this.calibration !== undefined && { calibration: this.calibration }),
    };
  }
}

/**
 * Reads the preset file at `path` (relative: to the caller's directory, as
 * trace paths), synchronously, and checks it.
 *
 * @param describe Words a schema issue, "expected …, got …" (the scenario's `describeIssue`).
 * @throws {PresetFileError} when it cannot be read, is not JSON, or is not a valid preset file.
 */
export function readPresetFile(
  path: `${string}.json`,
  describe: (issue: z.core.$ZodIssue, input: unknown, path: readonly PropertyKey[]) => string,
): EnginePresetFile {
  let text: string;
  try {
    text = Deno.readTextFileSync(fromCaller(path));
  } catch (error) {
    const reason = error instanceof Deno.errors.NotFound ? "no such file" : (error as Error).message;
    throw new PresetFileError(`cannot read engine preset file "${path}": ${reason.split("\n")[0]}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new PresetFileError(`engine preset file "${path}" is not valid JSON: ${(error as Error).message}`);
  }
  const result = presetFileSchema.safeParse(value);
  if (!result.success) {
    const issue = result.error.issues[0];
    const at = issue.code === "unrecognized_keys" ? [...issue.path, issue.keys[0]] : issue.path;
    const field = at.length === 0 ? "" : `${at.map(String).join(".")}: `;
    throw new PresetFileError(`engine preset file "${path}": ${field}${describe(issue, value, at)}`);
  }
  const f = result.data;
  return new EnginePresetFile(path, f.name, f.model, f.engine, f.shape, f.source, f.calibration);
}
