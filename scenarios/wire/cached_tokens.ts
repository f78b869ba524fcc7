/**
 * @module
 * The prompt tokens an upstream found in its cache, read from an OpenAI usage
 * object — or, where the usage has none (llama.cpp's llama-server), derived
 * from the `timings` it sends beside the usage — and written back into the usage.
 */

/** A plain object's fields, or undefined for anything else. */
function fields(value: unknown): Record<string, unknown> | undefined {
  return value !== null && typeof value === "object" && !Array.isArray(value)
    ? value as Record<string, unknown>
    : undefined;
}

/** A count: a whole number >= 0, else undefined (llama.cpp writes -1 for "not measured"). */
function count(value: unknown): number | undefined {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : undefined;
}

/**
 * The cached prompt tokens of one response, by the first rule that applies:
 * 1. `usage.prompt_tokens_details.cached_tokens` (vLLM with
 *    `--enable-prompt-tokens-details`, SGLang with `--enable-cache-report`,
 *    recent llama.cpp);
 * 2. `timings.cache_n` (recent llama.cpp), at most `usage.prompt_tokens`;
 * 3. `usage.prompt_tokens − timings.prompt_n` (llama.cpp: `prompt_n` is the
 *    prompt tokens it evaluated, the rest came from the slot's cache), at least 0.
 *
 * Pure: reads its arguments only.
 *
 * @param usage The response's (or final chunk's) `usage`.
 * @param timings llama-server's `timings` from the same response or stream.
 * @returns undefined when no rule applies (no usage, no timings, or `prompt_n` of -1)
 * @example
 * ```ts
 * cachedTokensOf({ prompt_tokens: 34, completion_tokens: 3 }, { prompt_n: 1 }); // 33
 * cachedTokensOf({ prompt_tokens: 34, prompt_tokens_details: { cached_tokens: 16 } }); // 16
 * cachedTokensOf({ prompt_tokens: 34 }); // undefined
 * ```
 */
export function cachedTokensOf(usage: unknown, timings?: unknown): number | undefined {
  const u = fields(usage);
  if (u === undefined) return undefined;
  const stated = count(fields(u.prompt_tokens_details)?.cached_tokens);
  if (stated !== undefined) return stated;
  const t = fields(timings);
  if (t === undefined) return undefined;
  const prompt = count(u.prompt_tokens), cacheN = count(t.cache_n);
  if (cacheN !== undefined) return prompt === undefined ? cacheN : Math.min(cacheN, prompt);
  const evaluated = count(t.prompt_n);
  return prompt === undefined || evaluated === undefined ? undefined : Math.max(0, prompt - evaluated);
}

/**
 * Writes {@linkcode cachedTokensOf} into `body.usage.prompt_tokens_details.cached_tokens`
 * when the usage lacks it and it can be derived (other details are kept). Mutates `body`.
 *
 * @param body A response body or stream chunk.
 * @param timings The stream's latest `timings`. @default `body.timings`
 * @returns the cached tokens, or undefined when `body` has no usage or they cannot be known
 */
export function fillCachedTokens(
  body: Record<string, unknown>,
  timings: unknown = body.timings,
): number | undefined {
  const usage = fields(body.usage);
  const cached = cachedTokensOf(usage, timings);
  if (usage === undefined || cached === undefined) return cached;
  const details = fields(usage.prompt_tokens_details);
  if (count(details?.cached_tokens) === undefined) {
    usage.prompt_tokens_details = { ...details, cached_tokens: cached };
  }
  return cached;
}
