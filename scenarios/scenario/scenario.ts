/**
 * @module
 * The scenario format: a JSON file (or flags) describing one run, validated
 * with zod into a complete {@linkcode SimulationConfig}. Errors name the field
 * path, the value and what was expected.
 */
import { z } from "zod";
import {
  ENGINE_PRESET_NAMES,
  ENGINE_PRESETS,
  type EnginePresetName,
  engineShape,
  isEnginePresetName,
  kvBytesPerToken,
} from "../../actors/instances/engine_presets.ts";
import {
  parameterList,
  POLICIES,
  type PolicyDescriptor,
  policyDescriptor,
  type PolicyName,
  type PolicySpec,
  realViewDefaults,
  type ViewDefaults,
} from "../../actors/policies/mod.ts";
import { MAX_SIMULATED_MS } from "../../actors/metrics/metrics_collector.ts";
import { MOONCAKE_BLOCK_TOKENS, type TraceOptions } from "../../actors/traces/trace_reader.ts";
import {
  TRACE_GENERATOR_PARAMETERS,
  type TraceGeneratorOptions,
} from "../../actors/traces/trace_generator.ts";
import { instanceModel, MODEL_NAMES, MODELS } from "../../actors/instances/instance_models.ts";
import {
  type EngineConfig,
  isDisaggregated,
  type KvTransferConfig,
  type PoolConfig,
  type PoolRole,
} from "../../actors/instances/instance_model.ts";
import type { SimulationConfig } from "../../actors/simulation.ts";
import { SLOT_DEFAULTS } from "../../actors/instances/slot_instance.ts";
import { fromCaller } from "../cli/caller_directory.ts";
import { EnginePresetFile, isPresetFilePath, PresetFileError, readPresetFile } from "./engine_preset_file.ts";
import { UsageError } from "../cli/usage_error.ts";
import { count, positiveOrInfinite } from "./schema_numbers.ts";
import {
  arrivals,
  autoscale,
  dynamicsIssues,
  faults,
  resolveAutoscale,
  routerDynamics,
} from "./scenario_dynamics.ts";

const lengthDistribution = z.discriminatedUnion("dist", [
  z.strictObject({ dist: z.literal("constant"), value: count(0) }),
  z.strictObject({ dist: z.literal("exponential"), mean: z.number().gt(0) }),
  z.strictObject({ dist: z.literal("uniform"), min: count(0), max: count(0) }).refine(
    (d) => d.max >= d.min,
    { message: "expected max >= min", path: ["max"] },
  ),
]);

/** The bounds and default of a numeric parameter: a trace generator's or a routing policy's. */
interface NumberParameter {
  readonly default: number;
  readonly min: number;
  readonly exclusiveMin?: boolean;
  readonly max?: number;
  readonly integer?: boolean;
  readonly multipleOf?: number;
}

/** A numeric parameter's schema: its bounds and default, from its table (trace generator, policy registry). */
function numberParameter(parameter: NumberParameter) {
  let schema = z.number();
  if (parameter.integer) schema = schema.int();
  schema = parameter.exclusiveMin ? schema.gt(parameter.min) : schema.min(parameter.min);
  if (parameter.max !== undefined) schema = schema.max(parameter.max);
  if (parameter.multipleOf !== undefined) schema = schema.multipleOf(parameter.multipleOf);
  return schema.default(parameter.default);
}

/** `workload.trace.generate`: every parameter of actors/traces/trace_generator.ts, each optional. */
const traceGenerator = z.strictObject(
  Object.fromEntries(
    Object.entries(TRACE_GENERATOR_PARAMETERS).map((entry) => [entry[0], numberParameter(entry[1])]),
  ) as Record<keyof TraceGeneratorOptions, ReturnType<typeof numberParameter>>,
);

/**
 * `workload.trace`: a trace file (`path`) or a generated trace (`generate`,
 * the generator's parameters), never both.
 */
const trace = z.strictObject({
  path: z.string().min(1).optional(),
  generate: traceGenerator.optional(),
  format: z.enum(["mooncake", "azure"]).optional(),
  speed: z.number().gt(0).default(1),
  skipInvalid: z.boolean().optional(),
  maxRequests: count(1).optional(),
}).superRefine((t, ctx) => {
  if (t.path === undefined && t.generate === undefined) {
    ctx.addIssue({
      code: "custom",
      path: [],
      message: "expected a trace file (path) or generator parameters (generate)",
    });
  }
  if (t.generate === undefined) return;
  if (t.path !== undefined) {
    ctx.addIssue({
      code: "custom",
      path: ["path"],
      message:
        "expected no path beside workload.trace.generate (a trace is read from a file or generated, not both)",
    });
  }
  if (t.format === "azure") {
    ctx.addIssue({
      code: "custom",
      path: ["format"],
      message: 'expected "mooncake" (a generated trace is in the Mooncake format)',
    });
  }
  if (t.skipInvalid !== undefined) {
    ctx.addIssue({
      code: "custom",
      path: ["skipInvalid"],
      message: "used only when replaying a trace file (a generated trace has no malformed lines)",
    });
  }
}).transform((t): TraceOptions =>
  t.generate !== undefined
    ? { generate: t.generate, format: "mooncake", speed: t.speed, maxRequests: t.maxRequests }
    : {
      path: t.path!,
      format: t.format ?? (t.path!.endsWith(".csv") ? "azure" : "mooncake"),
      speed: t.speed,
      skipInvalid: t.skipInvalid ?? false,
      maxRequests: t.maxRequests,
    }
);

/** An SLO, ms: any number > 0, no upper bound; `Infinity` is met by every completed request. */
const sloMs = positiveOrInfinite;

/** `slo`: the SLOs of every request its class does not override. */
const slo = z.strictObject({ ttftMs: sloMs.optional(), tpotMs: sloMs.optional() });

/**
 * `workload.classes`: 1 to 16 request classes, each with a unique name, a
 * share of arrivals (normalised), a priority and SLOs overriding `slo`.
 */
const requestClasses = z.array(z.strictObject({
  name: z.string(),
  share: z.number().gt(0),
  priority: z.number().int().default(0),
  sloTtftMs: sloMs.optional(),
  sloTpotMs: sloMs.optional(),
})).min(1).max(16).superRefine((classes, ctx) => {
  classes.forEach((c, i) => {
    if (c.name === "" || classes.findIndex((other) => other.name === c.name) !== i) {
      ctx.addIssue({
        code: "custom",
        path: [i, "name"],
        message: "expected a non-empty name no other class has",
      });
    }
  });
});

/** How an unknown field of a policy is refused (it names the policy's parameters instead of the README). */
const NOT_A_PARAMETER = "not a parameter of";

/**
 * One built-in policy's `policy` object: its name and its parameters, each a
 * number within the descriptor's bounds, absent ones filled with their
 * defaults (so a parsed config shows every value the run used). A field that
 * is not one of its parameters is refused, naming the policy's parameters.
 */
function policyOption(descriptor: PolicyDescriptor) {
  const parameters = Object.entries(descriptor.params);
  return z.strictObject({
    name: z.literal(descriptor.name as PolicyName),
    ...Object.fromEntries(parameters.map(([key, parameter]) => [key, numberParameter(parameter)])),
  }, {
    error: (issue) =>
      issue.code === "unrecognized_keys"
        ? `${NOT_A_PARAMETER} ${descriptor.name} (its parameters: ${parameterList(descriptor)})`
        : undefined,
  });
}

/** The policy of a scenario that names none (the original study's). */
export const DEFAULT_POLICY: PolicyName = "hybrid";

/**
 * `policy`: derived from the registry (actors/policies/mod.ts), one strict
 * object per policy, told apart by `name` (default {@linkcode DEFAULT_POLICY}).
 * No policy at all is the default one with its defaults:
 * `{ name: "hybrid", threshold: 1 }`.
 */
const policy = z.preprocess(
  // A copy keeps every own field, `__proto__` included, for the strict check.
  (value) => isPlainObject(value) && value.name === undefined ? { ...value, name: DEFAULT_POLICY } : value,
  z.discriminatedUnion(
    "name",
    POLICIES.map(policyOption) as unknown as [
      ReturnType<typeof policyOption>,
      ...ReturnType<typeof policyOption>[],
    ],
  ),
).transform((p) => p as PolicySpec);

/** A policy of a disaggregated fleet's pool (`prefillPolicy`, `decodePolicy`): as `policy`, absent = `policy`. */
const poolPolicy = policy.optional();

/**
 * `instances.engine.preset`: a built-in preset's name, or — once
 * {@linkcode withPresetFiles} has read it — a preset file.
 */
const presetRef = z.custom<EnginePresetName | EnginePresetFile>(
  (v) => v instanceof EnginePresetFile || (typeof v === "string" && isEnginePresetName(v)),
  {
    error: (issue) =>
      typeof issue.input === "string"
        ? `expected one of ${
          ENGINE_PRESET_NAMES.map((n) => JSON.stringify(n)).join(", ")
        }, or an engine preset file (a path ending in .json)`
        : "expected a string",
  },
);

/**
 * `instances.engine`: a preset (built-in, or a file) and overrides of its
 * values, resolved into a complete engine. A built-in preset's engine has
 * exactly the fields it always had; the slot settings, the context term and
 * a file's shape and note are there only when set.
 */
const engine = z.strictObject({
  preset: presetRef.default("qwen2.5-7b"),
  stepMs: z.number().min(0).optional(),
  prefillMsPerToken: z.number().min(0).optional(),
  decodeMsPerSeq: z.number().min(0).optional(),
  prefillMsPerContextToken: z.number().min(0).optional(),
  requestOverheadMs: z.number().min(0).optional(),
  kvBlocks: count(1).optional(),
  blockTokens: count(1).optional(),
  maxBatchTokens: count(1).optional(),
  maxSeqs: count(1).optional(),
  prefixCaching: z.boolean().optional(),
  reserveFullIsl: z.boolean().default(true),
  hostKvBlocks: count(0).default(0),
  hostKvGbps: positiveOrInfinite.default(512),
  slots: count(1).max(65_536).optional(),
  slotSimilarity: z.number().min(0).max(1).optional(),
  attentionMsPerKvToken: z.number().min(0).optional(),
}).prefault({}).transform((e) => {
  const file = e.preset instanceof EnginePresetFile ? e.preset : undefined;
  const values = file?.engine ?? ENGINE_PRESETS[e.preset as EnginePresetName];
  const contextTerm = e.prefillMsPerContextToken ?? file?.engine.prefillMsPerContextToken;
  const kvAttention = e.attentionMsPerKvToken ?? file?.engine.attentionMsPerKvToken;
  const slots = e.slots ?? file?.engine.slots,
    slotSimilarity = e.slotSimilarity ?? file?.engine.slotSimilarity;
  return {
    preset: file?.path ?? e.preset as EnginePresetName,
    stepMs: e.stepMs ?? values.stepMs,
    prefillMsPerToken: e.prefillMsPerToken ?? values.prefillMsPerToken,
    decodeMsPerSeq: e.decodeMsPerSeq ?? values.decodeMsPerSeq,
    requestOverheadMs: e.requestOverheadMs ?? values.requestOverheadMs,
    kvBlocks: e.kvBlocks ?? values.kvBlocks,
    blockTokens: e.blockTokens ?? file?.engine.blockTokens ?? 16,
    // A file without them is a slots preset (a batching one must give both): llama-server's n_batch, one seq a slot.
    maxBatchTokens: e.maxBatchTokens ?? values.maxBatchTokens ?? SLOT_DEFAULTS.maxBatchTokens,
    maxSeqs: e.maxSeqs ?? values.maxSeqs ?? slots ?? SLOT_DEFAULTS.slots,
    prefixCaching: e.prefixCaching ?? file?.engine.prefixCaching ?? true,
    reserveFullIsl: e.reserveFullIsl,
    hostKvBlocks: e.hostKvBlocks,
    hostKvGbps: e.hostKvGbps,
    ...(contextTerm !== undefined && { prefillMsPerContextToken: contextTerm }),
    ...(slots !== undefined && { slots }),
    ...(slotSimilarity !== undefined && { slotSimilarity }),
    ...(kvAttention !== undefined && { attentionMsPerKvToken: kvAttention }),
    ...(file?.shape !== undefined && { shape: file.shape }),
    ...(file !== undefined && { presetFile: file.note() }),
  };
});

/** `instances.kvTransfer`: a disaggregated fleet's KV link, each field at its default when absent. */
const kvTransfer = z.strictObject({
  gbps: positiveOrInfinite.default(400),
  latencyMs: z.number().min(0).default(0.02),
});

/**
 * One of `instances.pools`: a role, a count, and its engine's overrides of
 * `instances.engine` (merged over it before validation, see
 * {@linkcode withPoolEngines}).
 */
const pool = z.strictObject({
  name: z.string().min(1).optional(),
  role: z.enum(["both", "prefill", "decode"]).default("both"),
  count: count(1).max(10_000),
  engine,
});

/**
 * Each pool's engine is `instances.engine` with the pool's own fields over
 * it (before validation: a pool naming another preset takes that preset's
 * values for every field neither sets).
 */
function withPoolEngines(value: unknown): unknown {
  if (!isPlainObject(value) || !Array.isArray(value.pools)) return value;
  const base = value.engine ?? {};
  return {
    ...value,
    pools: value.pools.map((p) => isPlainObject(p) ? { ...p, engine: deepMerge(base, p.engine ?? {}) } : p),
  };
}

/**
 * Pools resolved: each named (`prefill-0`… by role when unnamed), the fleet's
 * count their total, and a disaggregated fleet's KV link at its defaults
 * when unset.
 */
function resolveFleet<
  I extends {
    count: number;
    pools?: { name?: string; role: PoolRole; count: number; engine: EngineConfig }[];
    kvTransfer?: KvTransferConfig;
  },
>(instances: I) {
  const pools = instances.pools;
  if (pools === undefined) return instances as I & { pools?: PoolConfig[] };
  const named: PoolConfig[] = pools.map((p, i) => ({ ...p, name: p.name ?? `${p.role}-${i}` }));
  return {
    ...instances,
    count: named.reduce((total, p) => total + p.count, 0),
    pools: named,
    kvTransfer: instances.kvTransfer ??
      (isDisaggregated({ pools: named }) ? kvTransfer.parse({}) : undefined),
  };
}

/**
 * Reads the preset files `instances.engine.preset` and the pools' engines
 * name (scenarios/scenario/engine_preset_file.ts): each file stands in for its name
 * until the engine is resolved, and the base engine's file gives
 * `instances.model` when the scenario names none (naming another is an
 * error). A slots fleet on a built-in preset steps llama-server's n_batch
 * (2048 tokens), not the preset's vLLM budget, unless the scenario sets one.
 */
function withPresetFiles(value: unknown, ctx: z.core.$RefinementCtx): unknown {
  if (!isPlainObject(value)) return value;
  const out: Record<string, unknown> = { ...value };
  if (isPlainObject(value.engine) && isPresetFilePath(value.engine.preset)) {
    const file = presetFile(value.engine.preset, ["engine", "preset"], ctx);
    if (file === undefined) return value;
    if (value.model !== undefined && value.model !== file.model) {
      ctx.addIssue({
        code: "custom",
        path: ["model"],
        message:
          `expected "${file.model}", the model of engine preset file "${file.path}", or none (it then follows the file)`,
      });
      return value;
    }
    out.model = file.model;
    out.engine = { ...value.engine, preset: file };
  }
  const model = out.model ?? MODEL_NAMES[0];
  if (Array.isArray(value.pools)) {
    const pools = value.pools.map((p, i) => {
      if (!isPlainObject(p) || !isPlainObject(p.engine) || !isPresetFilePath(p.engine.preset)) return p;
      const file = presetFile(p.engine.preset, ["pools", i, "engine", "preset"], ctx);
      if (file !== undefined && file.model !== model) {
        ctx.addIssue({
          code: "custom",
          path: ["pools", i, "engine", "preset"],
          message: `expected a preset file for the fleet's model "${
            String(model)
          }", got one for "${file.model}"`,
          params: { complete: true },
        });
      }
      return file === undefined ? p : { ...p, engine: { ...p.engine, preset: file } };
    });
    out.pools = pools;
  }
  const engine = out.engine ?? {};
  if (model === "slots" && isPlainObject(engine) && engine.maxBatchTokens === undefined) {
    if (!(engine.preset instanceof EnginePresetFile)) {
      out.engine = { ...engine, maxBatchTokens: SLOT_DEFAULTS.maxBatchTokens };
    }
  }
  return out;
}

/** The preset file at `path`, or undefined with an issue at `at` naming what is wrong with it. */
function presetFile(
  path: `${string}.json`,
  at: (string | number)[],
  ctx: z.core.$RefinementCtx,
): EnginePresetFile | undefined {
  try {
    return readPresetFile(path, describeIssue);
  } catch (error) {
    if (!(error instanceof PresetFileError)) throw error;
    ctx.addIssue({ code: "custom", path: at, message: error.message, params: { complete: true } });
    return undefined;
  }
}

/**
 * The slots model's engine, complete: its slots and similarity at
 * llama-server's defaults when unset, and its sequence limit its slots.
 */
function withSlotSettings<I extends { model: string; engine: EngineConfig }>(instances: I): I {
  if (instances.model !== "slots") return instances;
  const slots = instances.engine.slots ?? SLOT_DEFAULTS.slots;
  return {
    ...instances,
    engine: {
      ...instances.engine,
      maxSeqs: slots,
      slots,
      slotSimilarity: instances.engine.slotSimilarity ?? SLOT_DEFAULTS.slotSimilarity,
    },
  };
}

/** The models whose cache counts `unit`, quoted: `"batching"`, or `"a" or "b"`. */
function modelsCaching(unit: "groups" | "blocks"): string {
  return MODELS.filter((m) => m.cacheUnit === unit).map((m) => `"${m.name}"`).join(" or ");
}

/**
 * The scenario schema with every default. Defaults put the default scenario in
 * the original study's operational regime (design.md, "Default scenario").
 */
export const scenarioSchema = z.strictObject({
  seed: count(0).default(1),
  policy: policy.prefault({}),
  prefillPolicy: poolPolicy,
  decodePolicy: poolPolicy,
  router: z.strictObject({
    cacheView: z.enum(["exact", "approximate"]).optional(),
    approxCapacity: count(1).nullable().optional(),
    indexChunkBlocks: count(1).optional(),
    indexMaxBlocks: count(1).nullable().optional(),
    statusIntervalMs: z.number().min(0).optional(),
    networkDelayMs: z.number().min(0).default(0),
    pdFlow: z.enum(["prefill-first", "decode-first"]).optional(),
    pdLocalPrefillTokens: count(0).optional(),
    ...routerDynamics,
  }).prefault({}),
  instances: z.preprocess(
    (value, ctx) => withPresetFiles(withPoolEngines(value), ctx),
    z.strictObject({
      count: count(1).max(10_000).default(4),
      overheadMs: z.number().min(0).default(30),
      prefillMsPerToken: z.number().min(0).default(0.04),
      decodeMsPerToken: z.number().min(0).default(0),
      serviceTime: z.enum(["deterministic", "exponential"]).default("deterministic"),
      cacheCapacity: count(0).default(16),
      maxQueue: count(0).nullable().default(null).transform((v) => v ?? Infinity),
      model: z.enum(MODEL_NAMES).default(MODEL_NAMES[0]),
      engine,
      pools: z.array(pool).min(1).max(64).optional(),
      kvTransfer: kvTransfer.optional(),
    }).transform(resolveFleet).transform(withSlotSettings),
  ).prefault({}),
  workload: z.strictObject({
    requests: count(1).max(1e12).default(20_000),
    ratePerSec: z.number().gt(0).default(35),
    prefix: z.strictObject({
      groups: count(1).default(100),
      zipf: z.number().min(0).default(1.0),
      sharedFrac: z.number().min(0).max(1).default(0.5),
      tokens: count(0).default(1024),
    }).prefault({}),
    suffixTokens: lengthDistribution.default({ dist: "exponential", mean: 256 }),
    outputTokens: lengthDistribution.default({ dist: "constant", value: 128 }),
    sessions: z.strictObject({
      turnsMean: z.number().min(1),
      thinkTimeMs: z.number().gt(0),
      keyTokens: count(1).default(16),
    }).optional(),
    trace: trace.optional(),
    classes: requestClasses.optional(),
    arrivals: arrivals.optional(),
  }).prefault({}),
  slo: slo.optional(),
  faults: faults.optional(),
  autoscale: autoscale.optional(),
  untilMs: z.number().gt(0).optional(),
}).transform(resolveRouterView).superRefine((s, ctx) => {
  checkPools(s.instances, ctx);
  checkSlots(s.instances, ctx);
  for (const issue of dynamicsIssues(s)) ctx.addIssue({ code: "custom", ...issue });
  const trace = s.workload.trace;
  const cachesBlocks = instanceModel(s.instances.model).cacheUnit === "blocks";
  if (trace?.format === "mooncake" && !cachesBlocks) {
    ctx.addIssue({
      code: "custom",
      path: ["instances", "model"],
      message: `expected ${
        modelsCaching("blocks")
      }: a Mooncake trace has block-level prefixes, which only a model caching KV blocks uses`,
    });
  }
  const sessions = s.workload.sessions;
  if (sessions && !cachesBlocks) {
    ctx.addIssue({
      code: "custom",
      path: ["instances", "model"],
      message: `expected ${
        modelsCaching("blocks")
      }: multi-turn sessions reuse partial prefixes, which only a model caching KV blocks tracks`,
    });
  }
  if (sessions && sessions.keyTokens % s.instances.engine.blockTokens !== 0) {
    ctx.addIssue({
      code: "custom",
      path: ["workload", "sessions", "keyTokens"],
      message: `expected a multiple of instances.engine.blockTokens (${s.instances.engine.blockTokens})`,
    });
  }
  if (trace?.format === "mooncake" && MOONCAKE_BLOCK_TOKENS % s.instances.engine.blockTokens !== 0) {
    ctx.addIssue({
      code: "custom",
      path: ["instances", "engine", "blockTokens"],
      message: `expected a divisor of ${MOONCAKE_BLOCK_TOKENS} (the Mooncake trace's block size)`,
    });
  }
  const generated = trace?.generate;
  if (generated !== undefined) {
    const requests = Math.min(generated.requests, trace!.maxRequests ?? Infinity);
    const min = Number((minRatePerSec(requests, s.untilMs) / trace!.speed).toPrecision(3));
    if (generated.ratePerSec < min) {
      ctx.addIssue({
        code: "custom",
        path: ["workload", "trace", "generate", "ratePerSec"],
        message:
          `expected a number >= ${min} (below it, at speed ${trace!.speed}, its ${requests} requests ` +
          `span over 2^42 ms ≈ 139 years of simulated time on average, and past 2^43 ms the clock no longer ` +
          `resolves the 1 µs TTFT is measured in)`,
      });
    }
  }
  const minRate = minRatePerSec(s.workload.requests, s.untilMs);
  if (!s.workload.trace && s.workload.ratePerSec < minRate) {
    ctx.addIssue({
      code: "custom",
      path: ["workload", "ratePerSec"],
      message: `expected a number >= ${minRate} (below it the arrivals of workload.requests = ` +
        `${s.workload.requests} span over 2^42 ms ≈ 139 years of simulated time on average, and past 2^43 ms ` +
        `the clock no longer resolves the 1 µs TTFT is measured in)`,
    });
  }
}).transform(resolveAutoscale);

/**
 * The router's view settings the scenario leaves unset, from what the run's
 * policy's real system sees (actors/policies/real_view.ts): so a run, and
 * its `--json` echo, says which view and staleness it used.
 */
function resolveRouterView<
  S extends {
    policy: PolicySpec;
    router: {
      cacheView?: "exact" | "approximate";
      approxCapacity?: number | null;
      indexChunkBlocks?: number;
      indexMaxBlocks?: number | null;
      statusIntervalMs?: number;
    };
    instances: { model: string; engine: { blockTokens: number } };
    workload: { prefix: { tokens: number } };
  },
>(s: S) {
  const real = realViewDefaults(policyDescriptor(s.policy.name)!, {
    cacheUnit: instanceModel(s.instances.model).cacheUnit,
    blockTokens: s.instances.engine.blockTokens,
    groupTokens: s.workload.prefix.tokens,
  }, s.policy);
  const r = s.router;
  return {
    ...s,
    router: {
      ...r as Omit<S["router"], keyof ViewDefaults>,
      cacheView: r.cacheView ?? real.cacheView,
      approxCapacity: r.approxCapacity !== undefined ? r.approxCapacity : real.approxCapacity,
      indexChunkBlocks: r.indexChunkBlocks ?? real.indexChunkBlocks,
      indexMaxBlocks: r.indexMaxBlocks !== undefined ? r.indexMaxBlocks : real.indexMaxBlocks,
      statusIntervalMs: r.statusIntervalMs ?? real.statusIntervalMs,
    },
  };
}

/**
 * A fleet of pools: batching only; all serving whole requests, or prefill
 * and decode pools (at least one of each); one block size; and, when
 * disaggregated, one KV shape (a decode instance takes the prefill
 * instance's KV as it is).
 */
function checkPools(instances: SimulationConfig["instances"], ctx: z.core.$RefinementCtx): void {
  const pools = instances.pools;
  if (pools === undefined) return;
  const at = (i: number, ...rest: string[]) => ["instances", "pools", i, ...rest];
  if (instances.model !== "batching") {
    ctx.addIssue({
      code: "custom",
      path: ["instances", "pools"],
      message: 'used only by instances.model "batching"',
    });
    return;
  }
  const roles = new Set(pools.map((p) => p.role));
  if (roles.has("both") && roles.size > 1) {
    const i = pools.findIndex((p) => p.role !== pools[0].role);
    ctx.addIssue({
      code: "custom",
      path: at(i, "role"),
      message: `expected "${
        pools[0].role
      }" like pool 0 (a fleet serves whole requests, or is split into prefill and decode pools)`,
    });
  } else if (!roles.has("both") && roles.size < 2) {
    ctx.addIssue({
      code: "custom",
      path: ["instances", "pools"],
      message: `expected a pool with role "${
        roles.has("prefill") ? "decode" : "prefill"
      }" too (a disaggregated fleet needs both)`,
    });
  }
  // `count` is the pools' total (resolveFleet).
  if (instances.count > 10_000) {
    ctx.addIssue({
      code: "custom",
      path: ["instances", "pools"],
      message: `expected at most 10000 instances in all (as instances.count), got ${instances.count}`,
    });
  }
  const blockTokens = instances.engine.blockTokens;
  const shape = (p: PoolConfig) => kvBytesPerToken(engineShape(p.engine));
  pools.forEach((p, i) => {
    if (p.engine.blockTokens !== blockTokens) {
      ctx.addIssue({
        code: "custom",
        path: at(i, "engine", "blockTokens"),
        message: `expected ${blockTokens}, instances.engine.blockTokens (every pool shares one block size)`,
      });
    }
    if (roles.size > 1 && shape(p) !== shape(pools[0])) {
      ctx.addIssue({
        code: "custom",
        path: at(i, "engine", "preset"),
        message:
          `expected a model with pool 0's KV shape (${shape(pools[0])} bytes/token, ${
            pools[0].engine.preset
          }): ` +
          `a decode instance uses the prefill instance's KV as it is`,
      });
    }
  });
}

/** The slots model's slots share `n_ctx` = kvBlocks × blockTokens tokens: each needs one at least. */
function checkSlots(instances: SimulationConfig["instances"], ctx: z.core.$RefinementCtx): void {
  const e = instances.engine, context = e.kvBlocks * e.blockTokens;
  if (instances.model !== "slots" || (e.slots ?? 1) <= context) return;
  ctx.addIssue({
    code: "custom",
    path: ["instances", "engine", "slots"],
    message:
      `expected at most instances.engine.kvBlocks × blockTokens = ${context} (each slot gets n_ctx / slots tokens)`,
  });
}

/**
 * The lowest arrival rate at which `requests` arrive, on average, within half
 * of {@linkcode MAX_SIMULATED_MS} (the other half absorbs the randomness of
 * the arrivals and the service after them), rounded up to 3 significant
 * digits; 0 when `untilMs` stops the run before the limit.
 */
function minRatePerSec(requests: number, untilMs: number | undefined): number {
  if (untilMs !== undefined && untilMs <= MAX_SIMULATED_MS) return 0;
  const exact = requests * 1000 / (MAX_SIMULATED_MS / 2);
  const unit = 10 ** (Math.floor(Math.log10(exact)) - 2);
  return Number((Math.ceil(exact / unit) * unit).toPrecision(3));
}

/** A scenario as written in a file: every field optional. */
export type ScenarioInput = z.input<typeof scenarioSchema>;

/**
 * Validates a scenario object into a complete config.
 *
 * @param input Parsed JSON, flags already merged in.
 * @param describePath Turns a field path into the name shown in errors; the
 *   command line uses it to name a flag instead of a path.
 * @throws {UsageError} naming the first invalid field, its value and what was expected.
 */
export function parseScenario(
  input: unknown,
  describePath: (path: readonly PropertyKey[]) => string = scenarioPath,
): SimulationConfig {
  const result = scenarioSchema.safeParse(input);
  if (result.success) {
    const unused = unusedSetting(input, result.data);
    if (unused) throw new UsageError(`${describePath(unused.path)}: ${unused.reason}`);
    return result.data satisfies SimulationConfig;
  }
  const issue = result.error.issues[0];
  let path = issue.path;
  if (issue.code === "unrecognized_keys") path = [...path, issue.keys[0]];
  throw new UsageError(`${describePath(path)}: ${describeIssue(issue, input, path)}`);
}

/** "expected <what>, got <value>" for a zod issue at `path` of `input` (shared by scenarios and sweeps). */
export function describeIssue(issue: z.core.$ZodIssue, input: unknown, path: readonly PropertyKey[]): string {
  if (issue.code === "unrecognized_keys") return expectation(issue);
  // A message that names its value itself (an engine preset file's problem).
  if (issue.code === "custom" && issue.params?.complete === true) return issue.message;
  return `${expectation(issue)}, got ${show(valueAt(input, path))}`;
}

/**
 * A setting the scenario gives that this run would ignore (never silently):
 * engine settings without the batching model, FIFO cache size with it,
 * synthetic-workload settings beside a trace.
 */
function unusedSetting(
  input: unknown,
  config: SimulationConfig,
): { path: (string | number)[]; reason: string } | undefined {
  const given = (path: string[]) => valueAt(input, path) !== undefined;
  // The engine drives the models that cache KV blocks; cacheCapacity (in prefix groups) the others.
  const cachesBlocks = instanceModel(config.instances.model).cacheUnit === "blocks";
  if (!cachesBlocks && given(["instances", "engine"])) {
    return {
      path: ["instances", "engine"],
      reason: `used only by instances.model ${
        modelsCaching("blocks")
      } (this run's model is "${config.instances.model}")`,
    };
  }
  if (cachesBlocks && given(["instances", "cacheCapacity"])) {
    return {
      path: ["instances", "cacheCapacity"],
      reason: `used only by instances.model ${
        modelsCaching("groups")
      }; the ${config.instances.model} model's cache is instances.engine.kvBlocks`,
    };
  }
  const engineSetting = otherModelsEngineSetting(input, config);
  if (engineSetting) return engineSetting;
  const pd = disaggregationSetting(input, config);
  if (pd) return pd;
  if (config.workload.trace) {
    for (const field of ["requests", "ratePerSec", "prefix", "suffixTokens", "outputTokens", "sessions"]) {
      if (given(["workload", field])) {
        return {
          path: ["workload", field],
          reason: `not used when workload.trace replays a trace${
            field === "requests" ? " (use workload.trace.maxRequests)" : ""
          }`,
        };
      }
    }
  }
  return undefined;
}

/**
 * The engine settings only one engine-driven model reads: the batching
 * engine's scheduler and host tier, the slots model's slots. (Both read the
 * step costs, the KV size and `maxBatchTokens`: the slots model's n_batch.)
 */
const MODEL_ENGINE_SETTINGS: Readonly<Record<string, readonly string[]>> = {
  batching: ["maxSeqs", "reserveFullIsl", "hostKvBlocks", "hostKvGbps", "prefillMsPerContextToken"],
  slots: ["slots", "slotSimilarity", "attentionMsPerKvToken"],
};

/** An engine setting of another model than this run's (`--host-kv-blocks` with slots, `slots` with batching). */
function otherModelsEngineSetting(
  input: unknown,
  config: SimulationConfig,
): { path: (string | number)[]; reason: string } | undefined {
  const model = config.instances.model;
  for (const [owner, fields] of Object.entries(MODEL_ENGINE_SETTINGS)) {
    if (owner === model) continue;
    for (const field of fields) {
      const path = ["instances", "engine", field];
      if (valueAt(input, path) === undefined) continue;
      const hint = field === "maxSeqs" && model === "slots"
        ? "; the slots model runs one sequence per slot: instances.engine.slots"
        : "";
      return {
        path,
        reason: `used only by instances.model "${owner}" (this run's model is "${model}")${hint}`,
      };
    }
  }
  return undefined;
}

/** Settings of pools and disaggregated serving this run would ignore. */
function disaggregationSetting(
  input: unknown,
  config: SimulationConfig,
): { path: (string | number)[]; reason: string } | undefined {
  const given = (path: string[]) => valueAt(input, path) !== undefined;
  if (config.instances.pools !== undefined && given(["instances", "count"])) {
    return {
      path: ["instances", "count"],
      reason: "not used with instances.pools (the fleet is their counts' total)",
    };
  }
  const host = hostTierSetting(input, config);
  if (host) return host;
  const disaggregated = isDisaggregated(config.instances);
  const paths = [["instances", "kvTransfer"], ["prefillPolicy"], ["decodePolicy"], ["router", "pdFlow"], [
    "router",
    "pdLocalPrefillTokens",
  ]];
  for (const path of disaggregated ? [] : paths) {
    if (given(path)) {
      return {
        path,
        reason: "used only by a disaggregated fleet (instances.pools with prefill and decode roles)",
      };
    }
  }
  if (given(["router", "pdLocalPrefillTokens"]) && config.router.pdFlow !== "decode-first") {
    return {
      path: ["router", "pdLocalPrefillTokens"],
      reason: 'used only with router.pdFlow "decode-first"',
    };
  }
  return undefined;
}

/** A host tier's bandwidth given where no host tier is (`hostKvBlocks` 0): it would be ignored. */
function hostTierSetting(
  input: unknown,
  config: SimulationConfig,
): { path: (string | number)[]; reason: string } | undefined {
  const reason = "used only with a host KV tier (instances.engine.hostKvBlocks > 0)";
  const pools = config.instances.pools;
  const base = ["instances", "engine", "hostKvGbps"];
  const hasTier = (pools?.map((p) => p.engine) ?? [config.instances.engine]).some((e) =>
    (e.hostKvBlocks ?? 0) > 0
  );
  if (valueAt(input, base) !== undefined && !hasTier) return { path: base, reason };
  for (let i = 0; i < (pools?.length ?? 0); i++) {
    const path = ["instances", "pools", i, "engine", "hostKvGbps"];
    if (valueAt(input, path) !== undefined && (pools![i].engine.hostKvBlocks ?? 0) === 0) {
      return { path, reason };
    }
  }
  return undefined;
}

/** `scenario.workload.prefix.zipf` style name of a field path. */
export function scenarioPath(path: readonly PropertyKey[]): string {
  return ["scenario", ...path].map((key, i) =>
    typeof key === "number" ? `[${key}]` : `${i === 0 ? "" : "."}${String(key)}`
  ).join("");
}

function expectation(issue: z.core.$ZodIssue): string {
  switch (issue.code) {
    case "invalid_type":
      return issue.expected === "int"
        ? "expected an integer"
        : `expected ${article(issue.expected === "record" ? "object" : issue.expected)}`;
    case "too_small":
      if (issue.origin === "array") return `expected at least ${String(issue.minimum)} item(s)`;
      return `expected ${issue.origin === "number" ? "a number" : "a value"} ${
        issue.inclusive ? ">=" : ">"
      } ${String(issue.minimum)}`;
    case "too_big":
      return `expected ${issue.origin === "number" ? "a number" : "a value"} ${
        issue.inclusive ? "<=" : "<"
      } ${String(issue.maximum)}`;
    case "invalid_value":
      return `expected one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")}`;
    case "unrecognized_keys":
      // A policy names its parameters; elsewhere scenarios/README.md has the formats.
      return issue.message.startsWith(NOT_A_PARAMETER)
        ? issue.message
        : "unknown field (see the field table in scenarios/README.md)";
    case "not_multiple_of":
      return `expected a multiple of ${String(issue.divisor)}`;
    case "invalid_union":
      return "options" in issue && Array.isArray(issue.options)
        ? `expected one of ${issue.options.map((v) => JSON.stringify(v)).join(", ")}`
        : issue.message;
    default:
      return issue.message;
  }
}

function article(type: string): string {
  return `${/^[aeiou]/.test(type) ? "an" : "a"} ${type}`;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (value === null || typeof value !== "object") return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

/** A value as an error message shows it: JSON, an out-of-range number as written, `nothing` for undefined. */
export function show(value: unknown): string {
  if (value === undefined) return "nothing";
  if (value instanceof OutOfRangeNumber) return value.raw;
  if (Array.isArray(value)) return `[${value.map(show).join(",")}]`;
  return typeof value === "string" ? JSON.stringify(value) : JSON.stringify(value) ?? String(value);
}

/**
 * Checks that a scenario's trace file (if any) can be read, before a run
 * opens it.
 * @throws {UsageError} naming the field and the path.
 */
export async function checkTraceFile(
  config: SimulationConfig,
  field = "scenario.workload.trace.path",
): Promise<void> {
  const path = config.workload.trace?.path;
  if (path === undefined) return;
  try {
    const info = await Deno.stat(fromCaller(path));
    if (!info.isFile) throw new Error("not a file");
  } catch (error) {
    const reason = error instanceof Deno.errors.NotFound ? "no such file" : (error as Error).message;
    throw new UsageError(`${field}: cannot read "${path}": ${reason}`);
  }
}

/**
 * A JSON number beyond the range of a double (`1e400`), kept as written so a
 * validation error shows it instead of the `null` that `Infinity` prints as.
 */
class OutOfRangeNumber {
  constructor(readonly raw: string) {}
}

/** `JSON.parse` reviver: an out-of-range number becomes an {@linkcode OutOfRangeNumber}. */
function keepOutOfRange(_key: string, value: unknown, context?: { source?: string }): unknown {
  return typeof value === "number" && !Number.isFinite(value)
    ? new OutOfRangeNumber(context?.source ?? String(value))
    : value;
}

/**
 * The config with its trace path (if any) resolved against the caller's
 * directory, where `deno task` may not run.
 */
export function resolveTracePath(config: SimulationConfig): SimulationConfig {
  const trace = config.workload.trace;
  if (trace?.path === undefined) return config;
  return { ...config, workload: { ...config.workload, trace: { ...trace, path: fromCaller(trace.path) } } };
}

/**
 * Reads and parses a JSON input file given by `flag` (a scenario or a sweep);
 * a relative path is relative to the caller's directory.
 * @throws {UsageError} naming the flag when it is missing, unreadable or not JSON.
 */
export async function readJsonFile(
  path: string,
  flag = "--scenario",
  holds: "object" | "array" = "object",
): Promise<unknown> {
  let text: string;
  try {
    text = await Deno.readTextFile(fromCaller(path));
  } catch (error) {
    const reason = error instanceof Deno.errors.NotFound ? "no such file" : (error as Error).message;
    throw new UsageError(`${flag}: cannot read "${path}": ${reason}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text, keepOutOfRange);
  } catch (error) {
    throw new UsageError(`${flag}: "${path}" is not valid JSON: ${(error as Error).message}`);
  }
  if (holds === "array" && !Array.isArray(value)) {
    throw new UsageError(
      `${flag}: "${path}" must hold a JSON list, got ${JSON.stringify(value)?.slice(0, 60)}`,
    );
  }
  if (holds === "object" && !isPlainObject(value)) {
    throw new UsageError(
      `${flag}: "${path}" must hold a JSON object, got ${
        Array.isArray(value) ? "an array" : JSON.stringify(value)
      }`,
    );
  }
  return value;
}

/** Merges `override` into `base`: nested objects merge, anything else replaces. */
export function deepMerge(base: unknown, override: unknown): unknown {
  if (!isPlainObject(base) || !isPlainObject(override)) return override;
  const merged: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(override)) {
    merged[key] = key in merged ? deepMerge(merged[key], value) : value;
  }
  return merged;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== "object") return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}
