/**
 * @module
 * The OpenAI-compatible surface: request validation for `/v1/completions` and
 * `/v1/chat/completions`, errors in OpenAI's body shape, the response and
 * stream-chunk builders, and zod schemas of the responses for the readers.
 *
 * Sources: OpenAI's API reference as published in `openai/openai-openapi`
 * (`openapi.yaml`: CreateCompletionRequest, CreateChatCompletionRequest,
 * CreateCompletionResponse, CreateChatCompletionResponse,
 * CreateChatCompletionStreamResponse, the `{ error: { message, type, param,
 * code } }` body, and the "Unrecognized request argument supplied: <name>"
 * wording of its 400s); vLLM's `vllm/entrypoints/openai/protocol.py` (v0.10)
 * for its extra sampling parameters (`ignore_eos`, `min_tokens`, `top_k`, …),
 * `stream_options.include_usage`, the final usage chunk with `choices: []`, and
 * `prompt_tokens_details.cached_tokens`.
 *
 * What we honour: the prompt (or the chat messages, rendered by the template
 * in `tokenizer.ts`), `max_tokens`/`max_completion_tokens`, `stream`,
 * `stream_options.include_usage`, `ignore_eos`, `min_tokens`. Other schema
 * fields are type-checked and ignored, the sampling parameters within the
 * ranges vLLM's `SamplingParams._verify_args` (`vllm/sampling_params.py`)
 * enforces; values we cannot honour (n > 1, best_of > 1, echo, logprobs, beam
 * search, several prompts) get a 400. A body nested deeper than
 * {@linkcode MAX_JSON_DEPTH} levels is refused before anything walks it.
 */
import { z } from "zod";
import { describeIssue } from "../scenario/scenario.ts";
import { type ChatMessage, hasTokens, renderChat } from "./tokenizer.ts";

/** An error answered in OpenAI's shape: `{ error: { message, type, param, code } }` with an HTTP status. */
export class OpenAIError extends Error {
  /** HTTP status to answer with. */
  readonly status: number;
  /** The offending request field (dotted/indexed path), or null. */
  readonly param: string | null;
  /** A machine-readable code (`model_not_found`, `request_too_large`, …), or null. */
  readonly code: string | null;
  /** OpenAI's error type (`invalid_request_error`, `service_unavailable`, `upstream_error`, …). */
  readonly type: string;

  /**
   * An error to answer with.
   *
   * @param status HTTP status.
   * @param message what went wrong, naming the field, the value and what was expected.
   * @param options `param`, `code` (default null) and `type` (default "invalid_request_error").
   */
  constructor(
    status: number,
    message: string,
    options: { param?: string | null; code?: string | null; type?: string } = {},
  ) {
    super(message);
    this.name = "OpenAIError";
    this.status = status;
    this.param = options.param ?? null;
    this.code = options.code ?? null;
    this.type = options.type ?? "invalid_request_error";
  }

  /** The JSON body OpenAI answers with. */
  body(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** OpenAI's 404 for a model the server does not serve (param "model", code "model_not_found"). */
export function modelNotFound(model: string): OpenAIError {
  return new OpenAIError(404, `The model \`${model}\` does not exist.`, {
    param: "model",
    code: "model_not_found",
  });
}

/**
 * The 500 for an error a handler did not expect (a bug, not the client's
 * mistake), in OpenAI's shape (`type: "server_error"`, as OpenAI's 500s;
 * `code: "internal_error"`): the message is the error's name and first line
 * of its message, so one line on stderr can say the same, with no stack trace.
 *
 * @example
 * ```ts
 * } catch (error) {
 *   if (error instanceof OpenAIError) return errorResponse(error);
 *   const failure = unexpectedError(error);
 *   console.error(`POST /v1/completions: ${failure.message}`);
 *   return errorResponse(failure);
 * }
 * ```
 */
export function unexpectedError(error: unknown): OpenAIError {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  const line = text.split("\n", 1)[0];
  const what = line.length > 300 ? `${line.slice(0, 300)}…` : line;
  return new OpenAIError(500, `The server had an error while processing your request: ${what}`, {
    type: "server_error",
    code: "internal_error",
  });
}

/** Which endpoint a request came to: `/v1/completions` or `/v1/chat/completions`. */
export type Endpoint = "completion" | "chat";

/** A validated request: what the simulator honours, plus the original body (forwarded as is by the gateway). */
export interface ParsedRequest {
  /** The endpoint it was parsed for. */
  readonly endpoint: Endpoint;
  /** The requested model name. */
  readonly model: string;
  /** The prompt: text (for chat, the rendered template) or token ids. */
  readonly prompt: string | number[];
  /** Never set (token-id prompts arrive in `prompt`). */
  readonly promptTokenIds?: undefined;
  /** `max_completion_tokens` ?? `max_tokens`; undefined when absent or null (see {@linkcode resolveMaxTokens}). */
  readonly maxTokens: number | undefined;
  /** Whether to answer as an SSE stream. */
  readonly stream: boolean;
  /** Whether a stream ends with a usage chunk (`stream_options.include_usage`). */
  readonly includeUsage: boolean;
  /** vLLM's `ignore_eos`: generate exactly the maximum tokens. */
  readonly ignoreEos: boolean;
  /** vLLM's `min_tokens` (default 0). */
  readonly minTokens: number;
  /** The request body as received. */
  readonly body: Record<string, unknown>;
}

/** Accepted and ignored: a field that may be absent or null, checked only for its JSON type. */
const opt = <T extends z.ZodType>(schema: T) => schema.nullable().optional();
const num = opt(z.number());
const int = opt(z.number().int());
const str = opt(z.string());
const bool = opt(z.boolean());
const obj = opt(z.record(z.string(), z.unknown()));
const arr = opt(z.array(z.unknown()));
const strOrObj = opt(
  z.union([z.string(), z.record(z.string(), z.unknown())], { error: "expected a string or an object" }),
);
const count = opt(z.number().int().min(1));

/** Fields both endpoints share: OpenAI's common ones and vLLM's extra sampling parameters. */
const COMMON_FIELDS = {
  model: z.string(),
  max_tokens: count,
  temperature: num,
  top_p: num,
  n: count,
  stream: bool,
  stream_options: opt(z.strictObject({ include_usage: bool, continuous_usage_stats: bool })),
  stop: opt(
    z.union([z.string(), z.array(z.string())], { error: "expected a string or an array of strings" }),
  ),
  presence_penalty: num,
  frequency_penalty: num,
  logit_bias: opt(z.record(z.string(), z.number())),
  user: str,
  seed: int,
  best_of: count,
  response_format: obj,
  // vLLM's sampling and extra parameters (protocol.py).
  ignore_eos: bool,
  min_tokens: opt(z.number().int().min(0)),
  top_k: int,
  min_p: num,
  repetition_penalty: num,
  length_penalty: num,
  use_beam_search: bool,
  stop_token_ids: opt(z.array(z.number().int())),
  include_stop_str_in_output: bool,
  skip_special_tokens: bool,
  spaces_between_special_tokens: bool,
  truncate_prompt_tokens: int,
  allowed_token_ids: opt(z.array(z.number().int())),
  bad_words: opt(z.array(z.string())),
  prompt_logprobs: int,
  add_special_tokens: bool,
  guided_json: strOrObj,
  guided_regex: str,
  guided_choice: opt(z.array(z.string())),
  guided_grammar: str,
  guided_decoding_backend: str,
  guided_whitespace_pattern: str,
  structural_tag: str,
  priority: int,
  request_id: str,
  logits_processors: arr,
  return_tokens_as_token_ids: bool,
  cache_salt: str,
  kv_transfer_params: obj,
  vllm_xargs: obj,
} as const;

const completionSchema = z.object({
  ...COMMON_FIELDS,
  prompt: z.unknown(),
  suffix: str,
  logprobs: int,
  echo: bool,
  prompt_embeds: opt(
    z.union([z.string(), z.array(z.string())], { error: "expected a string or an array of strings" }),
  ),
});

const contentPart = z.looseObject({ type: z.string(), text: z.string().optional() });
const message = z.strictObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
  content: opt(
    z.union([z.string(), z.array(contentPart)], { error: "expected a string or an array of content parts" }),
  ),
  name: str,
  tool_calls: arr,
  tool_call_id: str,
  refusal: str,
  audio: obj,
  function_call: obj,
  reasoning_content: str,
});

const chatSchema = z.object({
  ...COMMON_FIELDS,
  messages: z.array(message).min(1),
  max_completion_tokens: count,
  logprobs: bool,
  top_logprobs: int,
  tools: arr,
  tool_choice: strOrObj,
  parallel_tool_calls: bool,
  functions: arr,
  function_call: strOrObj,
  store: bool,
  metadata: opt(z.record(z.string(), z.string())),
  service_tier: str,
  reasoning_effort: str,
  modalities: opt(z.array(z.string())),
  prediction: obj,
  audio: obj,
  web_search_options: obj,
  verbosity: str,
  prompt_cache_key: str,
  safety_identifier: str,
  // vLLM chat extras.
  echo: bool,
  add_generation_prompt: bool,
  continue_final_message: bool,
  documents: opt(z.array(z.record(z.string(), z.string()))),
  chat_template: str,
  chat_template_kwargs: obj,
  mm_processor_kwargs: obj,
  include_reasoning: bool,
});

const FIELDS: Readonly<Record<Endpoint, ReadonlySet<string>>> = {
  completion: new Set(Object.keys(completionSchema.shape)),
  chat: new Set(Object.keys(chatSchema.shape)),
};

/** A field path as OpenAI writes `param`: `messages[0].content`. */
export function paramPath(path: readonly PropertyKey[]): string {
  let text = "";
  for (const key of path) {
    text += typeof key === "number" ? `[${key}]` : text === "" ? String(key) : `.${String(key)}`;
  }
  return text;
}

/**
 * Deepest nesting of arrays and objects a request body may have, the body
 * itself being level 1: serde_json's default recursion limit (128), below
 * pydantic-core's JSON parser (jiter, 200) and CPython's `json` module (the
 * interpreter's recursion limit, 1000 by default), which vLLM's FastAPI parses
 * bodies with. OpenAI bodies nest a few levels (a JSON schema in
 * `response_format` or `tools` a few dozen at most); the bound keeps every
 * recursive walk of a body (error messages, relaying, `structuredClone`) far
 * from the call stack's limit.
 */
export const MAX_JSON_DEPTH = 128;

/** Where the first container nested past `maxDepth` is, as a key path from the root; undefined when none is. */
function nestedPast(root: unknown, maxDepth: number): PropertyKey[] | undefined {
  // Iterative depth-first walk over containers only: linear in the body, no recursion.
  interface Frame {
    readonly value: object;
    readonly depth: number;
    readonly parent: Frame | undefined;
    readonly key: PropertyKey | undefined;
  }
  if (root === null || typeof root !== "object") return undefined;
  const stack: Frame[] = [{ value: root, depth: 1, parent: undefined, key: undefined }];
  while (stack.length > 0) {
    const frame = stack.pop()!;
    if (frame.depth > maxDepth) {
      const path: PropertyKey[] = [];
      for (let f: Frame | undefined = frame; f?.key !== undefined; f = f.parent) path.push(f.key);
      return path.reverse();
    }
    const value = frame.value as Record<PropertyKey, unknown>;
    const keys: readonly PropertyKey[] | undefined = Array.isArray(value) ? undefined : Object.keys(value);
    const length = keys === undefined ? (value as unknown as unknown[]).length : keys.length;
    for (let i = 0; i < length; i++) {
      const key = keys === undefined ? i : keys[i];
      const child = value[key];
      if (child !== null && typeof child === "object") {
        stack.push({ value: child, depth: frame.depth + 1, parent: frame, key });
      }
    }
  }
  return undefined;
}

/** The field a too-deep path is reported under: its first four steps, less trailing array indices (`messages[0].content`). */
function nestingParam(path: readonly PropertyKey[]): string | null {
  const head = path.slice(0, 4);
  while (head.length > 0 && typeof head[head.length - 1] === "number") head.pop();
  return head.length === 0 ? null : paramPath(head);
}

/**
 * Refuses a JSON value nested deeper than `maxDepth` levels of arrays and
 * objects (the value itself is level 1), with an iterative walk: call it
 * before anything recursive (an error message quoting the value,
 * `structuredClone`) touches a body.
 *
 * @throws {OpenAIError} 400 naming the field the nesting is in
 *   (`param`, e.g. `messages[0].content`), the depth and the limit.
 * @throws {RangeError} when `maxDepth` is not an integer >= 1.
 */
export function refuseDeepNesting(body: unknown, maxDepth: number = MAX_JSON_DEPTH): void {
  if (!Number.isInteger(maxDepth) || maxDepth < 1) {
    throw new RangeError(`refuseDeepNesting maxDepth: expected an integer >= 1, got ${maxDepth}`);
  }
  const path = nestedPast(body, maxDepth);
  if (path === undefined) return;
  const param = nestingParam(path);
  const where = param === null ? "the body" : param;
  const shown = paramPath(path.slice(0, 8)) + (path.length > 8 ? "…" : "");
  throw new OpenAIError(
    400,
    `Invalid JSON body: ${where} is nested deeper than ${maxDepth} levels of arrays and objects ` +
      `(level ${maxDepth + 1} at ${shown === "" ? "the root" : shown}); expected at most ${maxDepth}`,
    { param },
  );
}

function invalid(param: string, message: string): OpenAIError {
  return new OpenAIError(400, `${param}: ${message}`, { param });
}

function unrecognized(param: string): OpenAIError {
  return new OpenAIError(400, `Unrecognized request argument supplied: ${param}`, { param });
}

function fromZod(error: z.ZodError, body: unknown): OpenAIError {
  const issue = error.issues[0];
  if (issue.code === "unrecognized_keys") return unrecognized(paramPath([...issue.path, issue.keys[0]]));
  const param = paramPath(issue.path);
  // JSON's 1e999 parses to Infinity, which zod refuses as a number and JSON shows as null.
  const value = issue.path.reduce<unknown>(
    (at, key) =>
      at !== null && typeof at === "object" ? (at as Record<PropertyKey, unknown>)[key] : undefined,
    body,
  );
  if (typeof value === "number" && !Number.isFinite(value)) {
    return invalid(param, `expected a finite number, got ${value}`);
  }
  return invalid(param, describeIssue(issue, body, issue.path));
}

const MAX_TOKEN_ID = 0xffff_ffff;

/** A token-id list checked element by element, so the error names the element. */
function tokenIds(value: readonly unknown[], param: string): number[] {
  if (value.length === 0) throw invalid(param, "expected a non-empty prompt, got []");
  value.forEach((id, i) => {
    if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id > MAX_TOKEN_ID) {
      throw invalid(
        `${param}[${i}]`,
        `expected a token id (an integer 0..${MAX_TOKEN_ID}), got ${JSON.stringify(id)}`,
      );
    }
  });
  return value as number[];
}

/** The one prompt of a completion request: a string, token ids, or a list holding exactly one of either. */
function completionPrompt(prompt: unknown): string | number[] {
  const expected = "expected a string, an array of token ids, or an array holding one of either";
  if (prompt === undefined || prompt === null) {
    throw invalid("prompt", `${expected}, got ${JSON.stringify(prompt) ?? "nothing"}`);
  }
  if (typeof prompt === "string") {
    if (!hasTokens(prompt)) {
      throw invalid("prompt", `expected a prompt with at least one token, got ${JSON.stringify(prompt)}`);
    }
    return prompt;
  }
  if (!Array.isArray(prompt)) throw invalid("prompt", `${expected}, got ${JSON.stringify(prompt)}`);
  if (prompt.length > 0 && (typeof prompt[0] === "string" || Array.isArray(prompt[0]))) {
    if (prompt.length > 1) {
      throw invalid("prompt", `only one prompt per request is supported, got a list of ${prompt.length}`);
    }
    return Array.isArray(prompt[0]) ? tokenIds(prompt[0], "prompt[0]") : completionPrompt(prompt[0]);
  }
  return tokenIds(prompt, "prompt");
}

/** Chat content parts: only text parts can be rendered. */
function checkChatContent(messages: readonly z.infer<typeof message>[]): void {
  messages.forEach((m, i) => {
    if (!Array.isArray(m.content)) return;
    m.content.forEach((part, j) => {
      if (part.type !== "text") {
        throw invalid(
          `messages[${i}].content[${j}].type`,
          `only "text" content parts are supported, got ${JSON.stringify(part.type)}`,
        );
      }
      if (typeof part.text !== "string") {
        throw invalid(
          `messages[${i}].content[${j}].text`,
          `expected a string, got ${JSON.stringify(part.text) ?? "nothing"}`,
        );
      }
    });
  });
}

type Checked = z.infer<typeof completionSchema> | z.infer<typeof chatSchema>;

/** A sampling parameter vLLM refuses, in `SamplingParams._verify_args`'s words. */
function refused(param: string, message: string): OpenAIError {
  return new OpenAIError(400, message, { param });
}

/**
 * The sampling parameters' ranges, as vLLM's `SamplingParams._verify_args`
 * (`vllm/sampling_params.py`) checks them, with its wording: vLLM answers
 * these with a 400 too. (`n`, `max_tokens`, `min_tokens` and their order are
 * checked by the schema and {@linkcode parseRequest}.)
 */
function refuseOutOfRange(data: Checked): void {
  const { temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty } = data;
  if (presence_penalty != null && !(presence_penalty >= -2 && presence_penalty <= 2)) {
    throw refused("presence_penalty", `presence_penalty must be in [-2, 2], got ${presence_penalty}.`);
  }
  if (frequency_penalty != null && !(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    throw refused("frequency_penalty", `frequency_penalty must be in [-2, 2], got ${frequency_penalty}.`);
  }
  if (repetition_penalty != null && !(repetition_penalty > 0)) {
    throw refused(
      "repetition_penalty",
      `repetition_penalty must be greater than zero, got ${repetition_penalty}.`,
    );
  }
  if (temperature != null) {
    if (temperature < 0) {
      throw refused("temperature", `temperature must be non-negative, got ${temperature}.`);
    }
    if (temperature > 2) throw refused("temperature", `temperature must be in [0, 2], got ${temperature}.`);
  }
  if (top_p != null && !(top_p > 0 && top_p <= 1)) {
    throw refused("top_p", `top_p must be in (0, 1], got ${top_p}.`);
  }
  // vLLM quietly accepts -1 as "disabled", as 0.
  if (top_k != null && top_k < -1) {
    throw refused("top_k", `top_k must be 0 (disable), or at least 1, got ${top_k}.`);
  }
  if (min_p != null && !(min_p >= 0 && min_p <= 1)) {
    throw refused("min_p", `min_p must be in [0, 1], got ${min_p}.`);
  }
  const stops = typeof data.stop === "string" ? [data.stop] : data.stop ?? [];
  const empty = stops.indexOf("");
  if (empty >= 0) {
    throw refused(
      typeof data.stop === "string" ? "stop" : `stop[${empty}]`,
      "stop cannot contain an empty string.",
    );
  }
}

/** Values in the schema that we cannot honour: a 400 naming the field, never a silent difference. */
function refuseUnsupported(data: Checked): void {
  if ((data.n ?? 1) > 1) throw invalid("n", `only n=1 is supported, got ${data.n}`);
  if ((data.best_of ?? 1) > 1) throw invalid("best_of", `only best_of=1 is supported, got ${data.best_of}`);
  if ("echo" in data && data.echo === true) throw invalid("echo", "echo is not supported, got true");
  if (data.use_beam_search === true) {
    throw invalid("use_beam_search", "beam search is not supported, got true");
  }
  const logprobs = "logprobs" in data ? data.logprobs : undefined;
  if (logprobs !== undefined && logprobs !== null && logprobs !== false) {
    throw invalid("logprobs", `log probabilities are not supported, got ${JSON.stringify(logprobs)}`);
  }
  if ("top_logprobs" in data && (data.top_logprobs ?? 0) > 0) {
    throw invalid("top_logprobs", `log probabilities are not supported, got ${data.top_logprobs}`);
  }
  if ((data.prompt_logprobs ?? 0) > 0) {
    throw invalid("prompt_logprobs", `log probabilities are not supported, got ${data.prompt_logprobs}`);
  }
  if (data.stream_options != null && data.stream !== true) {
    throw new OpenAIError(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.", {
      param: "stream_options",
    });
  }
}

/**
 * Validates a request body for `endpoint`.
 *
 * @returns what the simulator honours, with the body kept for forwarding.
 * @throws {OpenAIError} 400 with `param` set: a field outside the schema
 *   ("Unrecognized request argument supplied: <name>"), a value of the wrong
 *   type or range (the field, the value and what was expected; a sampling
 *   parameter in vLLM's words: "temperature must be non-negative, got -3."),
 *   a value we cannot honour ("only n=1 is supported"), or a body nested
 *   deeper than {@linkcode MAX_JSON_DEPTH}.
 */
export function parseRequest(body: unknown, endpoint: Endpoint): ParsedRequest {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new OpenAIError(400, `Invalid JSON body: expected a JSON object, got ${JSON.stringify(body)}`);
  }
  refuseDeepNesting(body);
  const record = body as Record<string, unknown>;
  for (const key of Object.keys(record)) if (!FIELDS[endpoint].has(key)) throw unrecognized(key);
  const result = endpoint === "chat" ? chatSchema.safeParse(record) : completionSchema.safeParse(record);
  if (!result.success) throw fromZod(result.error, record);
  const data = result.data;
  refuseOutOfRange(data);
  refuseUnsupported(data);
  let prompt: string | number[];
  let maxTokens = data.max_tokens ?? undefined;
  if ("messages" in data) {
    checkChatContent(data.messages);
    prompt = renderChat(data.messages as readonly ChatMessage[]);
    maxTokens = data.max_completion_tokens ?? maxTokens;
  } else {
    prompt = completionPrompt(data.prompt);
  }
  const minTokens = data.min_tokens ?? 0;
  if (maxTokens !== undefined && minTokens > maxTokens) {
    throw invalid("min_tokens", `expected at most max_tokens (${maxTokens}), got ${minTokens}`);
  }
  const stream = data.stream === true;
  return {
    endpoint,
    model: data.model,
    prompt,
    maxTokens,
    stream,
    includeUsage: stream && data.stream_options?.include_usage === true,
    ignoreEos: data.ignore_eos === true,
    minTokens,
    body: record,
  };
}

/** OpenAI's default `max_tokens` for the legacy completions endpoint. */
export const COMPLETION_DEFAULT_MAX_TOKENS = 16;

/**
 * The tokens to generate: the request's maximum, else the default
 * (completions 16, capped by the context left; chat: the context left),
 * refusing a prompt plus maximum beyond the model's length as vLLM does.
 *
 * @throws {OpenAIError} 400 when `promptTokens + max` exceeds `maxModelLen`.
 */
export function resolveMaxTokens(parsed: ParsedRequest, promptTokens: number, maxModelLen: number): number {
  const left = maxModelLen - promptTokens;
  const param = parsed.endpoint === "chat" && parsed.body.max_completion_tokens != null
    ? "max_completion_tokens"
    : parsed.maxTokens === undefined
    ? "messages"
    : "max_tokens";
  const wanted = parsed.maxTokens ??
    (parsed.endpoint === "completion" ? Math.min(COMPLETION_DEFAULT_MAX_TOKENS, left) : left);
  if (wanted < 1 || promptTokens + wanted > maxModelLen) {
    throw new OpenAIError(
      400,
      `This model's maximum context length is ${maxModelLen} tokens. However, you requested ` +
        `${promptTokens + Math.max(wanted, 0)} tokens (${promptTokens} in the prompt, ${
          Math.max(wanted, 0)
        } ` +
        `in the completion). Please reduce the length of the prompt or completion.`,
      { param: parsed.endpoint === "completion" && parsed.maxTokens === undefined ? "prompt" : param },
    );
  }
  return wanted;
}

/** Token counts of a finished request, as OpenAI and vLLM report them. */
export interface Usage {
  /** Tokens in the prompt. */
  prompt_tokens: number;
  /** Tokens generated. */
  completion_tokens: number;
  /** prompt_tokens + completion_tokens. */
  total_tokens: number;
  /** Of the prompt, the tokens served from the prefix cache. */
  prompt_tokens_details: { cached_tokens: number };
}

/** What the builders need: identity, the text (or delta) and how it ended. */
export interface BodyArgs {
  /** Response id (`cmpl-…` or `chatcmpl-…`, see {@linkcode responseId}). */
  readonly id: string;
  /** Creation time, Unix seconds. */
  readonly createdS: number;
  /** Model name echoed back. */
  readonly model: string;
  /** Which shape to build. */
  readonly endpoint: Endpoint;
  /** The text (whole, or this chunk's delta); absent for a chunk that only ends the stream. */
  readonly text?: string;
  /** Why generation stopped; null/absent while streaming. */
  readonly finishReason?: "stop" | "length" | null;
  /** Chat stream: this is the first chunk, whose delta carries `role: "assistant"`. */
  readonly role?: boolean;
  /**
   * Token counts (non-stream body, final usage chunk). In a content chunk,
   * `null` writes `"usage": null` (what a stream with `include_usage` carries).
   */
  readonly usage?: Usage | null;
  /** Stream with `include_usage`: the content chunk carries `"usage": null` (same as `usage: null`). */
  readonly includeUsage?: boolean;
}

/** `cmpl-<serial>` (completions) or `chatcmpl-<serial>` (chat). */
export function responseId(endpoint: Endpoint, serial: number | string): string {
  return `${endpoint === "chat" ? "chatcmpl" : "cmpl"}-${serial}`;
}

/** A non-streaming response: `text_completion` or `chat.completion`, one choice, with usage. */
export function completionBody(args: BodyArgs): Record<string, unknown> {
  const finish_reason = args.finishReason ?? null;
  const choice = args.endpoint === "chat"
    ? { index: 0, message: { role: "assistant", content: args.text ?? "" }, logprobs: null, finish_reason }
    : { index: 0, text: args.text ?? "", logprobs: null, finish_reason };
  const body: Record<string, unknown> = {
    id: args.id,
    object: args.endpoint === "chat" ? "chat.completion" : "text_completion",
    created: args.createdS,
    model: args.model,
    choices: [choice],
  };
  if (args.usage != null) body.usage = args.usage;
  return body;
}

/**
 * One stream chunk: `text_completion` with `text`, or `chat.completion.chunk`
 * with a `delta` (`{role: "assistant", content: ""}` first when `role`;
 * `{}` for a chunk that only carries the finish reason).
 */
export function chunkBody(args: BodyArgs): Record<string, unknown> {
  const finish_reason = args.finishReason ?? null;
  let choice: Record<string, unknown>;
  if (args.endpoint === "chat") {
    const delta: Record<string, unknown> = args.role ? { role: "assistant", content: args.text ?? "" } : {};
    if (!args.role && args.text !== undefined) delta.content = args.text;
    choice = { index: 0, delta, logprobs: null, finish_reason };
  } else {
    choice = { index: 0, text: args.text ?? "", logprobs: null, finish_reason };
  }
  const body: Record<string, unknown> = {
    id: args.id,
    object: args.endpoint === "chat" ? "chat.completion.chunk" : "text_completion",
    created: args.createdS,
    model: args.model,
    choices: [choice],
  };
  if (args.includeUsage || args.usage === null) body.usage = null;
  else if (args.usage !== undefined) body.usage = args.usage;
  return body;
}

/** A stream's final usage chunk (`include_usage`): `choices: []` and the usage. */
export function usageChunkBody(args: BodyArgs & { readonly usage: Usage }): Record<string, unknown> {
  return {
    id: args.id,
    object: args.endpoint === "chat" ? "chat.completion.chunk" : "text_completion",
    created: args.createdS,
    model: args.model,
    choices: [],
    usage: args.usage,
  };
}

/** `GET /v1/models`: a list with the one served model (vLLM's card, with `max_model_len` when given). */
export function modelsBody(model: string, createdS: number, maxModelLen?: number): Record<string, unknown> {
  const card: Record<string, unknown> = {
    id: model,
    object: "model",
    created: createdS,
    owned_by: "request-routing-sim",
    root: model,
    parent: null,
  };
  if (maxModelLen !== undefined) card.max_model_len = maxModelLen;
  return { object: "list", data: [card] };
}

// ---- Response schemas (loose: real servers add fields) ----------------------

const finishReason = z.enum(["stop", "length", "tool_calls", "content_filter", "function_call", "abort"])
  .nullable();

/** Usage as servers send it (vLLM may omit the details or send `cached_tokens: null`). */
export const UsageSchema = z.looseObject({
  prompt_tokens: z.number().int().min(0),
  completion_tokens: z.number().int().min(0),
  total_tokens: z.number().int().min(0),
  prompt_tokens_details: z.looseObject({ cached_tokens: z.number().int().min(0).nullish() }).nullish(),
});

/** A non-streaming `/v1/completions` response. */
export const CompletionResponse = z.looseObject({
  id: z.string(),
  object: z.literal("text_completion"),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(z.looseObject({
    index: z.number().int().min(0),
    text: z.string(),
    logprobs: z.unknown().nullable(),
    finish_reason: finishReason,
  })).min(1),
  usage: UsageSchema,
});

/** A non-streaming `/v1/chat/completions` response. */
export const ChatResponse = z.looseObject({
  id: z.string(),
  object: z.literal("chat.completion"),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(z.looseObject({
    index: z.number().int().min(0),
    message: z.looseObject({ role: z.literal("assistant"), content: z.string().nullable() }),
    logprobs: z.unknown().nullish(),
    finish_reason: finishReason,
  })).min(1),
  usage: UsageSchema,
});

/** One `/v1/completions` stream chunk (a content chunk, or the usage chunk with `choices: []`). */
export const CompletionChunk = z.looseObject({
  id: z.string(),
  object: z.literal("text_completion"),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(z.looseObject({
    index: z.number().int().min(0),
    text: z.string(),
    logprobs: z.unknown().nullish(),
    finish_reason: finishReason,
  })),
  usage: UsageSchema.nullish(),
});

/** One `/v1/chat/completions` stream chunk (a delta, or the usage chunk with `choices: []`). */
export const ChatChunk = z.looseObject({
  id: z.string(),
  object: z.literal("chat.completion.chunk"),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(z.looseObject({
    index: z.number().int().min(0),
    delta: z.looseObject({ role: z.literal("assistant").optional(), content: z.string().nullish() }),
    logprobs: z.unknown().nullish(),
    finish_reason: finishReason,
  })),
  usage: UsageSchema.nullish(),
});

/** OpenAI's error body (vLLM sends `code` as a number). */
export const ErrorBody = z.looseObject({
  error: z.looseObject({
    message: z.string(),
    type: z.string(),
    param: z.string().nullish(),
    code: z.union([z.string(), z.number()]).nullish(),
  }),
});
