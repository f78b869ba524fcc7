/** @module What the metrics tests share: a completion record to vary. */
import type { CompletionRecord } from "../actors/protocol.ts";

/** A completion record: one request of 100 prompt tokens and one output token, TTFT 10 ms, with `over` applied. */
export const record = (over: Partial<CompletionRecord>): CompletionRecord => ({
  requestId: 0,
  instance: 0,
  arrivalMs: 0,
  startMs: 0,
  firstTokenMs: 10,
  endMs: 10,
  promptTokens: 100,
  cachedTokens: 0,
  outputTokens: 1,
  ...over,
});
