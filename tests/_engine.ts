/**
 * @module
 * A small continuous-batching engine for instance tests: a lone 600-token
 * prompt prefills in three 256-token steps (first token at 21.0 ms), and each
 * decode step takes 5.1 ms.
 */
import type { BatchingInstanceOptions } from "../actors/instances/batching_instance.ts";

export const SMALL_ENGINE: BatchingInstanceOptions = Object.freeze({
  stepMs: 5,
  prefillMsPerToken: 0.01,
  decodeMsPerSeq: 0.1,
  requestOverheadMs: 0,
  blockTokens: 16,
  kvBlocks: 1000,
  maxBatchTokens: 256,
  maxSeqs: 8,
  prefixCaching: true,
  maxQueue: Infinity,
});
