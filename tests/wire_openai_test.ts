import { assert, assertEquals, assertStringIncludes, assertThrows } from "@std/assert";
import {
  ChatChunk,
  ChatResponse,
  chunkBody,
  completionBody,
  CompletionChunk,
  CompletionResponse,
  type Endpoint,
  ErrorBody,
  MAX_JSON_DEPTH,
  modelNotFound,
  modelsBody,
  OpenAIError,
  parseRequest,
  refuseDeepNesting,
  resolveMaxTokens,
  responseId,
  unexpectedError,
  type Usage,
  usageChunkBody,
} from "../scenarios/wire/openai.ts";
import { renderChat } from "../scenarios/wire/tokenizer.ts";

Deno.test("parseRequest accepts OpenAI's documented completion examples", () => {
  const body = {
    model: "gpt-3.5-turbo-instruct",
    prompt: "Say this is a test",
    max_tokens: 7,
    temperature: 0,
  };
  const parsed = parseRequest(body, "completion");
  assertEquals(parsed, {
    endpoint: "completion",
    model: "gpt-3.5-turbo-instruct",
    prompt: "Say this is a test",
    maxTokens: 7,
    stream: false,
    includeUsage: false,
    ignoreEos: false,
    minTokens: 0,
    body,
  });
  const streamed = parseRequest(
    { ...body, stream: true, stream_options: { include_usage: true } },
    "completion",
  );
  assertEquals([streamed.stream, streamed.includeUsage], [true, true]);
});

Deno.test("parseRequest accepts OpenAI's documented chat examples and renders the template", () => {
  const messages = [
    { role: "developer", content: "You are a helpful assistant." },
    { role: "user", content: "Hello!" },
  ];
  const parsed = parseRequest({ model: "gpt-4.1", messages }, "chat");
  assertEquals(parsed.prompt, renderChat(messages));
  assertEquals(parsed.maxTokens, undefined);
  const parts = parseRequest({
    model: "gpt-4.1",
    messages: [{ role: "user", content: [{ type: "text", text: "What's in this text?" }] }],
    stream: true,
    stream_options: { include_usage: false },
  }, "chat");
  assertEquals(parts.prompt, "<|user|>\nWhat's in this text?\n<|assistant|>\n");
  assertEquals([parts.stream, parts.includeUsage], [true, false]);
  const tools = parseRequest({
    model: "gpt-4.1",
    messages: [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "w" } }],
      },
      { role: "tool", content: "sunny", tool_call_id: "c1" },
    ],
    tools: [{ type: "function", function: { name: "w", parameters: {} } }],
    tool_choice: "auto",
  }, "chat");
  assertStringIncludes(tools.prompt as string, "<|tool|>\nsunny\n");
});

Deno.test("parseRequest accepts and ignores the schema fields it does not model", async (t) => {
  const ignored: Record<Endpoint, Record<string, unknown>> = {
    completion: {
      suffix: null,
      top_p: 0.9,
      stop: ["\n"],
      presence_penalty: 0.1,
      frequency_penalty: -0.1,
      logit_bias: { "50256": -100 },
      user: "u-1",
      seed: 42,
      n: 1,
      best_of: 1,
      echo: false,
      logprobs: null,
      top_k: 40,
      min_p: 0.05,
      repetition_penalty: 1.1,
      skip_special_tokens: true,
      spaces_between_special_tokens: true,
      include_stop_str_in_output: false,
      add_special_tokens: true,
      priority: 0,
      request_id: "r-1",
      cache_salt: "salt",
    },
    chat: {
      temperature: null,
      stop: "END",
      max_completion_tokens: 9,
      max_tokens: 99,
      response_format: { type: "json_object" },
      parallel_tool_calls: false,
      store: false,
      metadata: { team: "a" },
      service_tier: "auto",
      reasoning_effort: "low",
      modalities: ["text"],
      logprobs: false,
      top_logprobs: 0,
      add_generation_prompt: true,
      chat_template_kwargs: { enable_thinking: false },
    },
  };
  for (const endpoint of ["completion", "chat"] as const) {
    await t.step(endpoint, () => {
      const base = endpoint === "chat"
        ? { model: "sim", messages: [{ role: "user", content: "hi" }] }
        : { model: "sim", prompt: "hi" };
      const parsed = parseRequest(
        { ...base, ...ignored[endpoint], ignore_eos: true, min_tokens: 2 },
        endpoint,
      );
      assertEquals(parsed.ignoreEos, true);
      assertEquals(parsed.minTokens, 2);
      // Chat: max_completion_tokens wins over max_tokens.
      assertEquals(parsed.maxTokens, endpoint === "chat" ? 9 : undefined);
    });
  }
});

Deno.test("parseRequest takes prompts given as token ids as they are", () => {
  assertEquals(parseRequest({ model: "m", prompt: [1, 2, 4294967295] }, "completion").prompt, [
    1,
    2,
    4294967295,
  ]);
  assertEquals(parseRequest({ model: "m", prompt: [[5, 6]] }, "completion").prompt, [5, 6]);
  assertEquals(parseRequest({ model: "m", prompt: ["one prompt"] }, "completion").prompt, "one prompt");
  assertEquals(
    parseRequest({ model: "m", prompt: "x", max_tokens: null }, "completion").maxTokens,
    undefined,
  );
});

Deno.test("parseRequest rejects bad fields with a 400 naming the field, the value and what was expected", async (t) => {
  const chat = (extra: Record<string, unknown>) => ({
    model: "m",
    messages: [{ role: "user", content: "hi" }],
    ...extra,
  });
  const completion = (extra: Record<string, unknown>) => ({ model: "m", prompt: "hi", ...extra });
  const rows: [string, Endpoint, unknown, string, string[]][] = [
    ["unknown field", "completion", completion({ foo: 1 }), "foo", [
      "Unrecognized request argument supplied: foo",
    ]],
    ["chat-only field on completions", "completion", completion({ messages: [] }), "messages", [
      "Unrecognized",
    ]],
    ["unknown nested field", "chat", chat({ stream: true, stream_options: { x: 1 } }), "stream_options.x", [
      "Unrecognized request argument supplied: stream_options.x",
    ]],
    [
      "unknown message field",
      "chat",
      { model: "m", messages: [{ role: "user", content: "a", mood: 1 }] },
      "messages[0].mood",
      [
        "Unrecognized",
      ],
    ],
    ["bad role", "chat", { model: "m", messages: [{ role: "robot", content: "a" }] }, "messages[0].role", [
      '"robot"',
      "expected one of",
    ]],
    [
      "non-text part",
      "chat",
      {
        model: "m",
        messages: [{
          role: "user",
          content: [{ type: "text", text: "a" }, { type: "image_url", image_url: {} }],
        }],
      },
      "messages[0].content[1].type",
      ['"image_url"', '"text"'],
    ],
    ["no messages", "chat", chat({ messages: [] }), "messages", ["at least 1"]],
    ["max_tokens not a number", "completion", completion({ max_tokens: "ten" }), "max_tokens", [
      '"ten"',
      "expected a number",
    ]],
    ["max_tokens zero", "completion", completion({ max_tokens: 0 }), "max_tokens", [">= 1", "got 0"]],
    ["max_tokens fractional", "chat", chat({ max_tokens: 1.5 }), "max_tokens", ["integer", "1.5"]],
    ["max_completion_tokens negative", "chat", chat({ max_completion_tokens: -3 }), "max_completion_tokens", [
      "-3",
    ]],
    ["temperature wrong type", "completion", completion({ temperature: "hot" }), "temperature", ['"hot"']],
    ["user wrong type", "chat", chat({ user: 5 }), "user", ["expected a string", "got 5"]],
    ["model missing", "completion", { prompt: "hi" }, "model", ["expected a string", "nothing"]],
    ["prompt missing", "completion", { model: "m" }, "prompt", ["nothing"]],
    ["prompt object", "completion", completion({ prompt: { a: 1 } }), "prompt", ["expected a string"]],
    ["prompt whitespace", "completion", completion({ prompt: "  \n" }), "prompt", ["at least one token"]],
    ["bad token id", "completion", completion({ prompt: [1, -2] }), "prompt[1]", ["-2", "token id"]],
    ["empty token list", "completion", completion({ prompt: [] }), "prompt", ["non-empty"]],
    ["two prompts", "completion", completion({ prompt: ["a", "b"] }), "prompt", ["only one prompt", "2"]],
    ["n > 1", "chat", chat({ n: 2 }), "n", ["only n=1 is supported, got 2"]],
    ["best_of > 1", "completion", completion({ best_of: 3 }), "best_of", ["only best_of=1"]],
    ["echo", "completion", completion({ echo: true }), "echo", ["not supported"]],
    ["completion logprobs", "completion", completion({ logprobs: 5 }), "logprobs", ["not supported", "5"]],
    ["chat logprobs", "chat", chat({ logprobs: true }), "logprobs", ["not supported", "true"]],
    ["beam search", "completion", completion({ use_beam_search: true }), "use_beam_search", [
      "not supported",
    ]],
    [
      "stream_options without stream",
      "chat",
      chat({ stream_options: { include_usage: true } }),
      "stream_options",
      [
        "only allowed when 'stream' is enabled",
      ],
    ],
    ["min_tokens over max_tokens", "completion", completion({ max_tokens: 3, min_tokens: 4 }), "min_tokens", [
      "max_tokens (3)",
      "got 4",
    ]],
  ];
  for (const [name, endpoint, body, param, includes] of rows) {
    await t.step(name, () => {
      const error = assertThrows(() => parseRequest(body, endpoint), OpenAIError);
      assertEquals([error.status, error.param, error.type], [400, param, "invalid_request_error"]);
      for (const text of includes) assertStringIncludes(error.message, text);
      assert(ErrorBody.safeParse(error.body()).success);
    });
  }
  await t.step("not an object", () => {
    for (const body of [null, [1], "x", 3]) {
      assertEquals(assertThrows(() => parseRequest(body, "chat"), OpenAIError).status, 400);
    }
  });
});

Deno.test("parseRequest refuses the sampling parameters vLLM's SamplingParams._verify_args refuses, in its words", async (t) => {
  const completion = (extra: Record<string, unknown>) => ({ model: "m", prompt: "hi", ...extra });
  const rows: [string, Record<string, unknown>, string, string][] = [
    ["temperature -3", { temperature: -3 }, "temperature", "temperature must be non-negative, got -3."],
    ["temperature 2.5", { temperature: 2.5 }, "temperature", "temperature must be in [0, 2], got 2.5."],
    ["top_p 0", { top_p: 0 }, "top_p", "top_p must be in (0, 1], got 0."],
    ["top_p 1.5", { top_p: 1.5 }, "top_p", "top_p must be in (0, 1], got 1.5."],
    ["top_k -2", { top_k: -2 }, "top_k", "top_k must be 0 (disable), or at least 1, got -2."],
    ["min_p 1.5", { min_p: 1.5 }, "min_p", "min_p must be in [0, 1], got 1.5."],
    [
      "presence_penalty 2.5",
      { presence_penalty: 2.5 },
      "presence_penalty",
      "presence_penalty must be in [-2, 2], got 2.5.",
    ],
    [
      "frequency_penalty -3",
      { frequency_penalty: -3 },
      "frequency_penalty",
      "frequency_penalty must be in [-2, 2], got -3.",
    ],
    [
      "repetition_penalty 0",
      { repetition_penalty: 0 },
      "repetition_penalty",
      "repetition_penalty must be greater than zero, got 0.",
    ],
    ["stop empty", { stop: "" }, "stop", "stop cannot contain an empty string."],
    ["stop list with an empty one", { stop: ["a", ""] }, "stop[1]", "stop cannot contain an empty string."],
  ];
  for (const [name, extra, param, message] of rows) {
    await t.step(name, () => {
      const error = assertThrows(() => parseRequest(completion(extra), "completion"), OpenAIError);
      assertEquals([error.status, error.param, error.message, error.type], [
        400,
        param,
        message,
        "invalid_request_error",
      ]);
    });
  }
  await t.step("JSON's 1e999 is Infinity: named as such, not as null", () => {
    const error = assertThrows(
      () => parseRequest(JSON.parse('{"model":"m","prompt":"hi","temperature":1e999}'), "completion"),
      OpenAIError,
    );
    assertEquals([error.param, error.message], [
      "temperature",
      "temperature: expected a finite number, got Infinity",
    ]);
  });
  await t.step("the ranges' edges are accepted, on both endpoints", () => {
    const edges: Record<string, unknown>[] = [
      { temperature: 0, top_p: 1, top_k: -1, min_p: 0, presence_penalty: -2, frequency_penalty: 2 },
      { temperature: 2, top_p: 1e-9, top_k: 0, min_p: 1, presence_penalty: 2, frequency_penalty: -2 },
      { top_k: 1, repetition_penalty: 1e-9, stop: ["a", "b"] },
    ];
    for (const extra of edges) {
      parseRequest(completion(extra), "completion");
      parseRequest({ model: "m", messages: [{ role: "user", content: "hi" }], ...extra }, "chat");
    }
  });
});

Deno.test("parseRequest refuses a body nested deeper than MAX_JSON_DEPTH with a 400, never a stack overflow", async (t) => {
  const nested = (depth: number): unknown => {
    let value: unknown = "x";
    for (let i = 0; i < depth; i++) value = [value];
    return value;
  };
  const deep = nested(10_000);
  const rows: [string, Endpoint, Record<string, unknown>, string][] = [
    ["user", "completion", { model: "m", prompt: "hi", user: deep }, "user"],
    ["stop", "completion", { model: "m", prompt: "hi", stop: deep }, "stop"],
    [
      "a chat message's content",
      "chat",
      { model: "m", messages: [{ role: "user", content: deep }] },
      "messages[0].content",
    ],
    [
      "tools (any JSON)",
      "chat",
      { model: "m", messages: [{ role: "user", content: "hi" }], tools: deep },
      "tools",
    ],
  ];
  for (const [name, endpoint, body, param] of rows) {
    await t.step(name, () => {
      const error = assertThrows(() => parseRequest(body, endpoint), OpenAIError);
      assertEquals([error.status, error.param], [400, param]);
      assertStringIncludes(error.message, `nested deeper than ${MAX_JSON_DEPTH} levels`);
      assert(error.message.length < 400, `a bounded message, not the value: ${error.message.length} chars`);
    });
  }
  await t.step("at the bound a body is parsed; one level more is refused", () => {
    const chat = (tools: unknown) => ({ model: "m", messages: [{ role: "user", content: "hi" }], tools });
    // The body is level 1 and `tools` level 2: MAX_JSON_DEPTH - 1 arrays reach the bound.
    assertEquals(parseRequest(chat(nested(MAX_JSON_DEPTH - 1)), "chat").model, "m");
    assertEquals(
      assertThrows(() => parseRequest(chat(nested(MAX_JSON_DEPTH)), "chat"), OpenAIError).param,
      "tools",
    );
  });
  await t.step("refuseDeepNesting takes any bound; nesting at the root has no param", () => {
    refuseDeepNesting({ a: [[1]] }, 3);
    assertEquals(assertThrows(() => refuseDeepNesting({ a: [[[1]]] }, 3), OpenAIError).param, "a");
    const root = assertThrows(() => refuseDeepNesting([[[]]], 2), OpenAIError);
    assertEquals([root.status, root.param], [400, null]);
  });
});

Deno.test("unexpectedError is a 500 in OpenAI's shape whose message is one line, without a stack trace", () => {
  const error = unexpectedError(new RangeError("Maximum call stack size exceeded\nsecond line"));
  assertEquals(error.body(), {
    error: {
      message:
        "The server had an error while processing your request: RangeError: Maximum call stack size exceeded",
      type: "server_error",
      param: null,
      code: "internal_error",
    },
  });
  assertEquals(error.status, 500);
  assertEquals(
    unexpectedError("a string").message,
    "The server had an error while processing your request: a string",
  );
  assert(unexpectedError(new Error("x".repeat(10_000))).message.length < 400);
});

Deno.test("OpenAIError answers in OpenAI's body shape", () => {
  const error = new OpenAIError(503, "busy", { type: "service_unavailable" });
  assertEquals(error.body(), {
    error: { message: "busy", type: "service_unavailable", param: null, code: null },
  });
  const missing = modelNotFound("gpt-9");
  assertEquals([missing.status, missing.param, missing.code], [404, "model", "model_not_found"]);
  assertStringIncludes(missing.message, "`gpt-9` does not exist");
  assert(ErrorBody.safeParse(missing.body()).success);
  assert(!ErrorBody.safeParse({ message: "flat" }).success);
});

const usage: Usage = {
  prompt_tokens: 10,
  completion_tokens: 3,
  total_tokens: 13,
  prompt_tokens_details: { cached_tokens: 8 },
};
const about = (endpoint: Endpoint) => ({
  id: responseId(endpoint, 7),
  createdS: 1_700_000_000,
  model: "sim",
  endpoint,
});

Deno.test("non-streaming bodies validate against the response schemas", () => {
  const text = completionBody({ ...about("completion"), text: " the", finishReason: "length", usage });
  assertEquals(CompletionResponse.parse(text).choices[0], {
    index: 0,
    text: " the",
    logprobs: null,
    finish_reason: "length",
  });
  assertEquals(text.id, "cmpl-7");
  const chat = ChatResponse.parse(
    completionBody({ ...about("chat"), text: " the", finishReason: "stop", usage }),
  );
  assertEquals([chat.id, chat.object, chat.choices[0].message.content], [
    "chatcmpl-7",
    "chat.completion",
    " the",
  ]);
  assertEquals(chat.usage.prompt_tokens_details?.cached_tokens, 8);
  // The schemas can fail: a chat body is not a completion, a body without usage is incomplete.
  assert(!CompletionResponse.safeParse(chat).success);
  assert(
    !ChatResponse.safeParse(completionBody({ ...about("chat"), text: "x", finishReason: "stop" })).success,
  );
});

Deno.test("stream chunks validate against the chunk schemas, in OpenAI's order", () => {
  const first = ChatChunk.parse(chunkBody({ ...about("chat"), text: " the", role: true, usage: null }));
  assertEquals(first.choices[0].delta, { role: "assistant", content: " the" });
  assertEquals(first.usage, null);
  const middle = chunkBody({ ...about("chat"), text: " fox", finishReason: null });
  assertEquals(ChatChunk.parse(middle).choices[0].delta, { content: " fox" });
  assert(!("usage" in middle), "no usage key without include_usage");
  const last = ChatChunk.parse(chunkBody({ ...about("chat"), finishReason: "length", includeUsage: true }));
  assertEquals([last.choices[0].delta, last.choices[0].finish_reason, last.usage], [{}, "length", null]);
  const tail = ChatChunk.parse(usageChunkBody({ ...about("chat"), usage }));
  assertEquals([tail.choices, tail.usage?.total_tokens], [[], 13]);
  const text = CompletionChunk.parse(chunkBody({ ...about("completion"), text: " a", finishReason: "stop" }));
  assertEquals([text.object, text.choices[0].text, text.choices[0].finish_reason], [
    "text_completion",
    " a",
    "stop",
  ]);
  CompletionChunk.parse(usageChunkBody({ ...about("completion"), usage }));
  assert(!ChatChunk.safeParse(text).success);
  assert(
    !CompletionChunk.safeParse({ ...text, choices: [{ index: 0, text: 1, finish_reason: null }] }).success,
  );
});

Deno.test("modelsBody lists the served model as vLLM does", () => {
  assertEquals(modelsBody("sim", 5, 4096), {
    object: "list",
    data: [{
      id: "sim",
      object: "model",
      created: 5,
      owned_by: "request-routing-sim",
      root: "sim",
      parent: null,
      max_model_len: 4096,
    }],
  });
});

Deno.test("resolveMaxTokens applies OpenAI's defaults and the model's length", () => {
  const completion = parseRequest({ model: "m", prompt: "x" }, "completion");
  assertEquals(resolveMaxTokens(completion, 100, 4096), 16);
  assertEquals(resolveMaxTokens(completion, 4090, 4096), 6);
  const chat = parseRequest({ model: "m", messages: [{ role: "user", content: "x" }] }, "chat");
  assertEquals(resolveMaxTokens(chat, 100, 4096), 3996);
  const big = parseRequest({ model: "m", prompt: "x", max_tokens: 4000 }, "completion");
  const error = assertThrows(
    () => resolveMaxTokens(big, 100, 4096),
    OpenAIError,
    "maximum context length is 4096",
  );
  assertEquals([error.status, error.param], [400, "max_tokens"]);
  assertEquals(assertThrows(() => resolveMaxTokens(completion, 4096, 4096), OpenAIError).param, "prompt");
});
