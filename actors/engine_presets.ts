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
  /** Where the numbers come from. */
  readonly source: string;
}

/**
 * The presets. Step coefficients are REFERENCE §3's. `requestOverheadMs` is
 * REFERENCE's measured lone-request TTFT minus the step time (Qwen2.5-7B:
 * 21.7 − (7.05 + 0.0195 × 512) = 4.67 ms); the other sets have no such
 * anchor and use 0. KV capacities are BLIS's `total_kv_blocks` for the same
 * model and TP degree where published; Qwen3-14B's is estimated (design.md).
 */
export const ENGINE_PRESETS = {
  "qwen2.5-7b": {
    stepMs: 7.05,
    prefillMsPerToken: 0.0195,
    decodeMsPerSeq: 0.0254,
    requestOverheadMs: 4.67,
    kvBlocks: 67659,
    source: "BLIS H100 TP1 (REFERENCE §3); overhead from the 21.7 ms lone-request TTFT",
  },
  "llama-3.1-8b": {
    stepMs: 6.47,
    prefillMsPerToken: 0.0198,
    decodeMsPerSeq: 0.0254,
    requestOverheadMs: 0,
    kvBlocks: 29205,
    source: "BLIS H100 TP1 (REFERENCE §3); γ not published, Qwen2.5-7B's used",
  },
  "qwen3-14b": {
    stepMs: 13.6,
    prefillMsPerToken: 0.0394,
    decodeMsPerSeq: 0.0273,
    requestOverheadMs: 0,
    kvBlocks: 19000,
    source: "BLIS H100 TP1 (REFERENCE §3); KV blocks estimated from memory",
  },
  "llama-3.3-70b-tp4": {
    stepMs: 12.6,
    prefillMsPerToken: 0.0764,
    decodeMsPerSeq: 0.0668,
    requestOverheadMs: 0,
    kvBlocks: 128273,
    source: "BLIS H100 TP4 (REFERENCE §3)",
  },
} as const satisfies Record<string, EnginePreset>;

/** A preset's name. */
export type EnginePresetName = keyof typeof ENGINE_PRESETS;

/** The preset names, for validation and help. */
export const ENGINE_PRESET_NAMES = Object.keys(ENGINE_PRESETS) as EnginePresetName[];
