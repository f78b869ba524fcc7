import { assert, assertEquals, assertLess, assertRejects, assertStringIncludes } from "@std/assert";
import {
  DEFAULT_MAX_BODY_BYTES,
  errorResponse,
  jsonResponse,
  readJsonBody,
  readSseData,
  SseWriter,
} from "../scenarios/wire/http.ts";
import { MAX_JSON_DEPTH, OpenAIError } from "../scenarios/wire/openai.ts";

const MiB = 1_048_576;
const CHUNK = 64 * 1024;

/** A body of `total` bytes of "a", produced on demand in 64 KiB chunks, counting what was pulled. */
function countingBody(total: number) {
  const state = { pulled: 0, cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (state.pulled >= total) return controller.close();
      const n = Math.min(CHUNK, total - state.pulled);
      state.pulled += n;
      controller.enqueue(new Uint8Array(n).fill(97));
    },
    cancel() {
      state.cancelled = true;
    },
  }, { highWaterMark: 0 });
  return { stream, state };
}

function post(body: BodyInit | null, headers?: HeadersInit): Request {
  return new Request("http://127.0.0.1/v1/completions", { method: "POST", body, headers });
}

Deno.test("readJsonBody returns the JSON object of a body", async () => {
  assertEquals(await readJsonBody(post('{"model":"sim","prompt":"héllo"}'), DEFAULT_MAX_BODY_BYTES), {
    model: "sim",
    prompt: "héllo",
  });
});

Deno.test("readJsonBody refuses a 2 MiB body with a 1 MiB limit without reading it all", async (t) => {
  await t.step("streamed, no Content-Length", async () => {
    const { stream, state } = countingBody(2 * MiB);
    const error = await assertRejects(() => readJsonBody(post(stream), MiB), OpenAIError, "too large");
    assertEquals([error.status, error.code, error.type], [413, "request_too_large", "invalid_request_error"]);
    assert(state.pulled <= MiB + CHUNK, `pulled ${state.pulled} bytes`);
    assert(state.cancelled, "the rest of the body is cancelled");
  });
  await t.step("Content-Length over the limit: refused before reading", async () => {
    const { stream, state } = countingBody(2 * MiB);
    const error = await assertRejects(
      () => readJsonBody(post(stream, { "content-length": String(2 * MiB) }), MiB),
      OpenAIError,
    );
    assertEquals(error.status, 413);
    assertLess(state.pulled, 2 * CHUNK);
  });
  await t.step("exactly at the limit is accepted", async () => {
    const body = JSON.stringify({ pad: "x".repeat(100 - 10) });
    assertEquals(body.length, 100);
    assertEquals(Object.keys(await readJsonBody(post(body), 100)), ["pad"]);
    await assertRejects(() => readJsonBody(post(body + " "), 100), OpenAIError, "the limit is 100 bytes");
  });
});

Deno.test("readJsonBody answers 400 for malformed JSON, non-UTF-8 and non-objects", async (t) => {
  const rows: [string, BodyInit | null, string][] = [
    ["malformed", '{"model": "sim",', "Invalid JSON body"],
    ["empty", null, "the body is empty"],
    ["not UTF-8", new Uint8Array([0x7b, 0xff, 0x7d]), "not valid UTF-8"],
    ["an array", "[1,2]", "expected a JSON object, got an array"],
    ["null", "null", "got null"],
    ["a string", '"hi"', "got string"],
  ];
  for (const [name, body, includes] of rows) {
    await t.step(name, async () => {
      const error = await assertRejects(() => readJsonBody(post(body), MiB), OpenAIError, includes);
      assertEquals(error.status, 400);
    });
  }
});

/** `{"model":"sim","prompt":"hi","<field>":` + `open` × depth + `inner` + `close` × depth + `}`. */
function nestedBody(field: string, depth: number, open = "[", close = "]", inner = ""): string {
  return `{"model":"sim","prompt":"hi","${field}":${open.repeat(depth)}${inner}${close.repeat(depth)}}`;
}

Deno.test("readJsonBody refuses a body nested deeper than MAX_JSON_DEPTH with a 400 naming the field", async (t) => {
  const rows: [string, string, string][] = [
    ["10,000 arrays in user", nestedBody("user", 10_000), "user"],
    ["10,000 arrays in stop", nestedBody("stop", 10_000), "stop"],
    [
      "100,000 objects in response_format",
      nestedBody("response_format", 100_000, '{"a":', "}", "1"),
      "response_format.a.a.a",
    ],
    [
      "10,000 arrays in a chat message's content",
      `{"model":"sim","messages":[{"role":"user","content":${"[".repeat(10_000)}${"]".repeat(10_000)}}]}`,
      "messages[0].content",
    ],
  ];
  for (const [name, body, param] of rows) {
    await t.step(name, async () => {
      assert(body.length <= MiB, `${body.length} bytes`);
      const error = await assertRejects(() => readJsonBody(post(body), MiB), OpenAIError);
      assertEquals([error.status, error.param, error.type], [400, param, "invalid_request_error"]);
      assertStringIncludes(error.message, `nested deeper than ${MAX_JSON_DEPTH} levels`);
    });
  }
  await t.step("the bound is exact: the body is level 1, so a field may nest 127 more", async () => {
    const at = await readJsonBody(post(nestedBody("tools", MAX_JSON_DEPTH - 1)), MiB);
    let depth = 1;
    for (let v: unknown = at.tools; Array.isArray(v); v = v[0]) depth++;
    assertEquals(depth, MAX_JSON_DEPTH);
    const past = await assertRejects(
      () => readJsonBody(post(nestedBody("tools", MAX_JSON_DEPTH)), MiB),
      OpenAIError,
    );
    assertEquals([past.status, past.param], [400, "tools"]);
  });
});

Deno.test("readJsonBody with requireJsonContentType refuses what vLLM's validate_json_request refuses", async (t) => {
  const body = '{"model":"sim","prompt":"hi"}';
  const strict = { requireJsonContentType: true };
  const refused: [string, HeadersInit | undefined, string][] = [
    ["text/plain", { "content-type": "text/plain" }, 'content-type "text/plain"'],
    [
      "form-encoded",
      { "content-type": "application/x-www-form-urlencoded" },
      "application/x-www-form-urlencoded",
    ],
    ["a JSON suffix type", { "content-type": "application/vnd.api+json" }, "application/vnd.api+json"],
    ["no content type", undefined, "no content-type header"],
  ];
  for (const [name, headers, got] of refused) {
    await t.step(name, async () => {
      // A Uint8Array body gets no default content type (a string one gets text/plain).
      const request = post(new TextEncoder().encode(body), headers);
      const error = await assertRejects(() => readJsonBody(request, MiB, strict), OpenAIError);
      assertEquals([error.status, error.code, error.param], [400, "unsupported_media_type", null]);
      assertStringIncludes(error.message, "Only 'application/json' is allowed");
      assertStringIncludes(error.message, got);
      assert(request.bodyUsed, "the body is cancelled unread");
    });
  }
  await t.step("application/json with a charset, in any case", async () => {
    const request = post(body, { "content-type": "Application/JSON; charset=utf-8" });
    assertEquals(await readJsonBody(request, MiB, strict), { model: "sim", prompt: "hi" });
  });
  await t.step("without the option any content type is read", async () => {
    assertEquals(await readJsonBody(post(body, { "content-type": "text/plain" }), MiB), {
      model: "sim",
      prompt: "hi",
    });
  });
});

Deno.test("jsonResponse and errorResponse answer JSON with the status", async () => {
  const ok = jsonResponse(201, { a: 1 }, { "x-sim-instance": "2" });
  assertEquals([ok.status, ok.headers.get("content-type"), ok.headers.get("x-sim-instance")], [
    201,
    "application/json",
    "2",
  ]);
  assertEquals(await ok.json(), { a: 1 });
  const error = errorResponse(new OpenAIError(404, "nope", { param: "model", code: "model_not_found" }));
  assertEquals(error.status, 404);
  assertEquals(await error.json(), {
    error: { message: "nope", type: "invalid_request_error", param: "model", code: "model_not_found" },
  });
});

async function bytesOf(stream: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function streamOf(chunks: readonly Uint8Array[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
}

async function collect(stream: ReadableStream<Uint8Array>): Promise<string[]> {
  const out: string[] = [];
  for await (const data of readSseData(stream)) out.push(data);
  return out;
}

Deno.test("SseWriter output read back by readSseData, split at every byte offset", async () => {
  const events = [{ id: "chatcmpl-1", choices: [{ delta: { content: " héllo 😀" } }] }, {
    text: "line\nbreak",
  }, {
    usage: null,
  }];
  const writer = new SseWriter();
  for (const event of events) assert(writer.send(event));
  writer.done();
  assert(writer.closed);
  assert(!writer.send({ late: true }), "send after done reports false");
  const bytes = await bytesOf(writer.stream);
  const expected = [...events.map((e) => JSON.stringify(e)), "[DONE]"];
  assertEquals(await collect(streamOf([bytes])), expected);
  for (let k = 0; k <= bytes.length; k++) {
    assertEquals(await collect(streamOf([bytes.slice(0, k), bytes.slice(k)])), expected, `split at ${k}`);
  }
  // And one byte at a time.
  assertEquals(await collect(streamOf([...bytes].map((b) => new Uint8Array([b])))), expected);
});

Deno.test("readSseData joins multi-line data, ignores comments and other fields, accepts CR, LF and CRLF", async () => {
  const text = ": keep-alive\r\nevent: message\r\nid: 7\r\ndata: one\r\ndata:two\r\n\r\n" +
    "retry: 10\rdata: three\r\rdata: [DONE]\n\ndata: tail";
  const bytes = new TextEncoder().encode(text);
  const expected = ["one\ntwo", "three", "[DONE]", "tail"];
  for (let k = 0; k <= bytes.length; k++) {
    assertEquals(await collect(streamOf([bytes.slice(0, k), bytes.slice(k)])), expected, `split at ${k}`);
  }
});

Deno.test("readSseData cancels the body when the reader stops early", async () => {
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode("data: 1\n\ndata: 2\n\n"));
    },
    cancel() {
      cancelled = true;
    },
  });
  for await (const data of readSseData(body)) {
    assertEquals(data, "1");
    break;
  }
  assert(cancelled);
});

Deno.test("SseWriter calls onCancel once when the reader cancels, and not after it closed", async () => {
  let cancels = 0;
  const writer = new SseWriter(() => cancels++);
  writer.send({ n: 1 });
  const reader = writer.stream.getReader();
  await reader.read();
  await reader.cancel();
  assertEquals(cancels, 1);
  assert(writer.closed);
  assert(!writer.send({ n: 2 }));
  writer.done();
  writer.close();
  assertEquals(cancels, 1);

  let late = 0;
  const finished = new SseWriter(() => late++);
  finished.send({ n: 1 });
  finished.done();
  await finished.stream.cancel();
  assertEquals(late, 0);
});

Deno.test("over HTTP: a client that goes away mid-stream cancels the server's SseWriter", async () => {
  const { promise: cancelled, resolve } = Promise.withResolvers<void>();
  let writer: SseWriter | undefined;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, () => {
    writer = new SseWriter(resolve);
    writer.send({ n: 1 });
    return writer.response();
  });
  const abort = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const response = await fetch(`http://127.0.0.1:${server.addr.port}/`, { signal: abort.signal });
    assertEquals(response.headers.get("content-type"), "text/event-stream; charset=utf-8");
    assertEquals(response.headers.get("cache-control"), "no-cache");
    const events = readSseData(response.body!);
    assertEquals((await events.next()).value, '{"n":1}');
    abort.abort();
    await events.return(undefined).catch(() => {});
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("onCancel was not called within 5 s")), 5000);
    });
    await Promise.race([cancelled, timeout]);
    assert(writer!.closed);
    assert(!writer!.send({ n: 2 }));
  } finally {
    clearTimeout(timer);
    await server.shutdown();
  }
});

Deno.test("over HTTP: a 2 MiB upload to a 1 MiB limit gets a 413 OpenAI error", async () => {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    try {
      return jsonResponse(200, await readJsonBody(request, MiB));
    } catch (error) {
      return errorResponse(error as OpenAIError);
    }
  });
  try {
    const response = await fetch(`http://127.0.0.1:${server.addr.port}/`, {
      method: "POST",
      body: JSON.stringify({ pad: "x".repeat(2 * MiB) }),
    });
    assertEquals(response.status, 413);
    const body = await response.json();
    assertEquals(body.error.code, "request_too_large");
    assertStringIncludes(body.error.message, String(MiB));
  } finally {
    await server.shutdown();
  }
});

Deno.test("readJsonBody: a body that stalls is a 408 after the timeout, and its stream is cancelled", async () => {
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode('{"model":'));
    },
    cancel() {
      cancelled = true;
    },
  });
  const request = new Request("http://127.0.0.1/v1/completions", { method: "POST", body });
  const timeoutMs = 50;
  const started = performance.now();
  // A bare timer of the same length, started with it: how late a 50 ms timer fires on this machine now.
  const timerFired = new Promise<number>((resolve) =>
    setTimeout(() => resolve(performance.now()), timeoutMs)
  );
  const error = await readJsonBody(request, 1 << 20, { timeoutMs }).then(() => undefined, (e) => e);
  const tookMs = performance.now() - started;
  const timerMs = await timerFired - started;
  assert(error instanceof OpenAIError, String(error));
  assertEquals(error.status, 408);
  // After the timeout, and no later than twice what the same timer took in this run.
  assert(
    tookMs >= timeoutMs - 1 && tookMs < 2 * timerMs,
    `408 after ${tookMs.toFixed(1)} ms; a ${timeoutMs} ms timer took ${timerMs.toFixed(1)} ms`,
  );
  assert(cancelled);
});
