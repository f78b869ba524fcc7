/**
 * @module
 * Step-time coefficient sets for the continuous-batching model, fitted by BLIS
 * against vLLM on H100 (REFERENCE §3), selectable by name.
 */

/** One engine's cost model and limits. */
export interface EnginePreset {
  /** Fixed cost of every engine step, ms (BLIS β0). */
  readonly stepMs: number;
  /** Cost per prefill token scheduled in the step, ms (BLIS β1). */
  readonly prefillMsPerToken: number;
  /** Cost per decoding sequence in the step, ms (BLIS β2). */
  readonly decodeMsPerSeq: number;
  /**
   * Per-request overhead outside the engine (API server, tokenisation,
   * scheduling: BLIS's α terms), added to a request's first-token and end
   * times without occupying the engine, ms.
   */
  readonly requestOverheadMs: number;
  /** KV cache capacity in blocks. */
  readonly kvBlocks: number;
  /**
   * The scheduler's token budget per step (`--max-num-batched-tokens`) that
   * `vllm serve` picks on the preset's GPU when none is given.
   */
  readonly maxBatchTokens: number;
  /** The scheduler's cap on running sequences (`--max-num-seqs`) that `vllm serve` picks on the preset's GPU. */
  readonly maxSeqs: number;
  /** Where the numbers come from. */
  readonly source: string;
  /** The model's shape, for the KV bytes a token takes (KV transfers, the host tier). */
  readonly shape: ModelShape;
}

/** What sizes a token's KV: from the model's published `config.json`. */
export interface ModelShape {
  /** Transformer layers (`num_hidden_layers`). */
  readonly layers: number;
  /** Key/value heads (`num_key_value_heads`; grouped-query attention shares them). */
  readonly kvHeads: number;
  /** Size of one head (`head_dim`, or hidden size / attention heads). */
  readonly headDim: number;
  /** Bytes per element of the KV cache: 2 for bf16/fp16, 1 for fp8. */
  readonly dtypeBytes: number;
  /** Where the shape comes from. */
  readonly source: string;
}

/** KV bytes of one token: K and V × layers × KV heads × head size × bytes per element (REFERENCE §7). */
export function kvBytesPerToken(shape: ModelShape): number {
  return 2 * shape.layers * shape.kvHeads * shape.headDim * shape.dtypeBytes;
}

/**
 * `vllm serve`'s scheduler defaults on an H100 (≥ 70 GiB and not an A100):
 * `EngineArgs.get_batch_defaults` in `vllm/engine/arg_utils.py` gives the
 * OpenAI API server 8192 batched tokens and 1024 sequences there (2048 and
 * 256 on smaller GPUs and A100s). Every preset is an H100 fit, so every
 * preset carries these.
 */
export const VLLM_H100_SCHEDULER = { maxBatchTokens: 8192, maxSeqs: 1024 } as const;

/**
 * The presets. Step coefficients are REFERENCE §3's. `requestOverheadMs` is
 * REFERENCE's measured lone-request TTFT minus the step time (Qwen2.5-7B:
 * 21.7 − (7.05 + 0.0195 × 512) = 4.67 ms); the other sets have no such
 * anchor and use 0. KV capacities are BLIS's `total_kv_blocks` for the same
 * model and TP degree where published; Qwen3-14B's is estimated (design.md).
 */
export const ENGINE_PRESETS = {
  "qwen2.5-7b": {
    ...VLLM_H100_SCHEDULER,
    stepMs: 7.05,
    prefillMsPerToken: 0.0195,
    decodeMsPerSeq: 0.0254,
    requestOverheadMs: 4.67,
    kvBlocks: 67659,
    source: "BLIS H100 TP1 (REFERENCE §3); overhead from the 21.7 ms lone-request TTFT",
    shape: {
      layers: 28,
      kvHeads: 4,
      headDim: 128,
      dtypeBytes: 2,
      source: "Qwen/Qwen2.5-7B-Instruct config.json (28 layers, 4 KV heads, head 128, bf16): 57,344 B/token",
    },
  },
  "llama-3.1-8b": {
    ...VLLM_H100_SCHEDULER,
    stepMs: 6.47,
    prefillMsPerToken: 0.0198,
    decodeMsPerSeq: 0.0254,
    requestOverheadMs: 0,
    kvBlocks: 29205,
    source: "BLIS H100 TP1 (REFERENCE §3); γ not published, Qwen2.5-7B's used",
    shape: {
      layers: 32,
      kvHeads: 8,
      headDim: 128,
      dtypeBytes: 2,
      source:
        "meta-llama/Llama-3.1-8B-Instruct config.json (32 layers, 8 KV heads, head 128, bf16): 131,072 B/token",
    },
  },
  "qwen3-14b": {
    ...VLLM_H100_SCHEDULER,
    stepMs: 13.6,
    prefillMsPerToken: 0.0394,
    decodeMsPerSeq: 0.0273,
    requestOverheadMs: 0,
    kvBlocks: 19000,
    source: "BLIS H100 TP1 (REFERENCE §3); KV blocks estimated from memory",
    shape: {
      layers: 40,
      kvHeads: 8,
      headDim: 128,
      dtypeBytes: 2,
      source: "Qwen/Qwen3-14B config.json (40 layers, 8 KV heads, head 128, bf16): 163,840 B/token",
    },
  },
  "llama-3.3-70b-tp4": {
    ...VLLM_H100_SCHEDULER,
    stepMs: 12.6,
    prefillMsPerToken: 0.0764,
    decodeMsPerSeq: 0.0668,
    requestOverheadMs: 0,
    kvBlocks: 128273,
    source: "BLIS H100 TP4 (REFERENCE §3)",
    shape: {
      layers: 80,
      kvHeads: 8,
      headDim: 128,
      dtypeBytes: 2,
      source:
        "meta-llama/Llama-3.3-70B-Instruct config.json (80 layers, 8 KV heads, head 128, bf16): 327,680 B/token for the whole TP4 instance",
    },
  },
} as const satisfies Record<string, EnginePreset>;

/** A preset's name. */
export type EnginePresetName = keyof typeof ENGINE_PRESETS;

/** The preset names, for validation and help. */
export const ENGINE_PRESET_NAMES = Object.keys(ENGINE_PRESETS) as EnginePresetName[];

/** What `instances.engine.preset` holds once resolved: a built-in preset's name, or a preset file's path as given. */
export type EnginePresetRef = EnginePresetName | `${string}.json`;

/** Whether `name` is a built-in preset's name. */
export function isEnginePresetName(name: string): name is EnginePresetName {
  return Object.hasOwn(ENGINE_PRESETS, name);
}

/**
 * The shape assumed when a preset file gives none: Qwen2.5-7B's (57,344
 * bytes per token), the default preset's and the batching engine's
 * `bytesPerToken` default. It sizes only KV transfers and host-tier loads.
 */
export const DEFAULT_MODEL_SHAPE: ModelShape = ENGINE_PRESETS["qwen2.5-7b"].shape;

/**
 * The model shape of an engine: a preset file's (`shape`, when the file
 * gives one), a built-in preset's, else {@linkcode DEFAULT_MODEL_SHAPE}.
 */
export function engineShape(engine: { readonly preset: string; readonly shape?: ModelShape }): ModelShape {
  if (engine.shape !== undefined) return engine.shape;
  return isEnginePresetName(engine.preset) ? ENGINE_PRESETS[engine.preset].shape : DEFAULT_MODEL_SHAPE;
}

/** How a run's report names an engine's preset: a preset file by its name, a built-in one by its own. */
export function presetLabel(
  engine: { readonly preset: string; readonly presetFile?: PresetFileNote },
): string {
  return engine.presetFile?.name ?? engine.preset;
}

/** What a preset file says of itself, kept in the resolved engine for the record (scenarios/scenario/engine_preset_file.ts). */
export interface PresetFileNote {
  /** The preset's name in the file. */
  readonly name: string;
  /** The instance model the file is for. */
  readonly model: string;
  /** One line: how its numbers were measured. */
  readonly source: string;
  /** Free-form calibration metadata, as the file has it. */
  readonly calibration?: Readonly<Record<string, unknown>>;
}
