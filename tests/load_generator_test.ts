/**
 * @module
 * The load generator against a fake OpenAI server on 127.0.0.1 that streams
 * with known delays: client-side TTFT and end-to-end times, usage and cached
 * tokens, the open loop, failures with conservation, a client whose own
 * event loop stalls (against a fake on its own thread), the instance
 * headers, interrupts, and `deno task load`'s flags and exit codes.
 */
import { assert, assertEquals, assertGreater, assertLess, assertMatch } from "@std/assert";
import type { Request } from "../actors/protocol.ts";
import { simulate, type SimulationConfig } from "../actors/simulation.ts";
import { systemWallTime } from "../scenarios/cli/wall_time.ts";
import { SseWriter } from "../scenarios/wire/http.ts";
import {
  ChatChunk,
  chunkBody,
  CompletionChunk,
  type Endpoint,
  usageChunkBody,
} from "../scenarios/wire/openai.ts";
import { promptText } from "../scenarios/wire/tokenizer.ts";
import {
  endpointUrl,
  formatLoadReport,
  instanceOf,
  type LoadOptions,
  type LoadResult,
  LOOP_PROBE_MS,
  requestBody,
  runLoad,
  scenarioArrivals,
} from "../scenarios/wire/load_generator.ts";
import { type CliOutput, messageLine, runCli, runDeno } from "./_cli.ts";
import { interruptWhenSeen } from "./_interrupt.ts";
import { scenario } from "./_scenarios.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/** How the fake answers one request (by the order it received them in). */
type Reply =
  /** A stream: first token after `firstMs`, then one every `gapMs` (wall ms); usage unless `usage` is false. */
  | {
    readonly kind: "stream";
    readonly firstMs?: number;
    readonly gapMs?: number;
    readonly cached?: number;
    readonly headers?: Record<string, string>;
    readonly usage?: boolean;
  }
  /** A plain JSON response. */
  | { readonly kind: "status"; readonly status: number; readonly body: unknown }
  /** A first chunk, then the connection is broken. */
  | { readonly kind: "drop" }
  /** Headers, then nothing until the client gives up. */
  | { readonly kind: "hang" };

/** A request the fake received: when (wall ms), its body, and its path. */
interface Received {
  readonly wallMs: number;
  readonly body: Record<string, unknown>;
  readonly path: string;
}

/** The fake's prompt: the completion's prompt or the first message's content. */
function promptOf(body: Record<string, unknown>): string {
  const messages = body.messages as { content: string }[] | undefined;
  return messages?.[0].content ?? String(body.prompt);
}

/** Wall-clock timers of one response, all cleared when it ends or its client goes away. */
class Timers {
  readonly #ids = new Set<ReturnType<typeof setTimeout>>();
  later(ms: number, f: () => void): void {
    const id = setTimeout(() => {
      this.#ids.delete(id);
      f();
    }, ms);
    this.#ids.add(id);
  }
  clear(): void {
    for (const id of this.#ids) clearTimeout(id);
    this.#ids.clear();
  }
}

/** An OpenAI stream of `max_tokens` tokens with the reply's delays, checked against the chunk schemas as it goes. */
function streamResponse(body: Record<string, unknown>, reply: Extract<Reply, { kind: "stream" }>): Response {
  const endpoint: Endpoint = body.messages ? "chat" : "completion";
  const tokens = Number(body.max_tokens), prompt = promptOf(body).split(" ").length;
  const timers = new Timers();
  const sse = new SseWriter(() => timers.clear());
  const args = { id: "cmpl-1", createdS: 0, model: String(body.model), endpoint };
  const send = (chunk: Record<string, unknown>) => {
    (endpoint === "chat" ? ChatChunk : CompletionChunk).parse(chunk);
    sse.send(chunk);
  };
  let sent = 0;
  const tick = () => {
    const last = sent === tokens - 1;
    send(chunkBody({ ...args, text: ` t${sent}`, role: sent === 0, finishReason: last ? "length" : null }));
    if (++sent < tokens) return timers.later(reply.gapMs ?? 0, tick);
    if (reply.usage !== false) {
      send(usageChunkBody({
        ...args,
        usage: {
          prompt_tokens: prompt,
          completion_tokens: tokens,
          total_tokens: prompt + tokens,
          prompt_tokens_details: { cached_tokens: reply.cached ?? 0 },
        },
      }));
    }
    sse.done();
  };
  timers.later(reply.firstMs ?? 0, tick);
  return sse.response(reply.headers);
}

/** A body that sends one event, then breaks the connection. */
function droppedResponse(): Response {
  const timers = new Timers();
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(`data: {"choices":[{"index":0,"text":" a"}]}\n\n`));
      timers.later(20, () => controller.error(new Error("fake server: connection broken on purpose")));
    },
    cancel: () => timers.clear(),
  });
  return new Response(body, { headers: { "content-type": "text/event-stream" } });
}

/** Runs `test` against a fake OpenAI server on 127.0.0.1, answering the i-th request received with `reply(i, body)`. */
async function withFake(
  reply: (index: number, body: Record<string, unknown>) => Reply,
  test: (url: string, received: readonly Received[]) => Promise<void>,
): Promise<void> {
  const received: Received[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    const body = await request.json();
    const r = reply(received.length, body);
    received.push({ wallMs: performance.now(), body, path: new URL(request.url).pathname });
    switch (r.kind) {
      case "stream":
        return streamResponse(body, r);
      case "status":
        return Response.json(r.body, { status: r.status });
      case "drop":
        return droppedResponse();
      case "hang":
        return new Response(new ReadableStream(), { headers: { "content-type": "text/event-stream" } });
    }
  });
  try {
    await test(`http://127.0.0.1:${server.addr.port}`, received);
  } finally {
    await server.shutdown();
  }
}

/**
 * The body of a Worker running a fake OpenAI server on 127.0.0.1: the i-th
 * request received gets no answer at all (until its client goes away) when
 * `silent` has i, else its whole stream (`max_tokens` text chunks, usage,
 * `[DONE]`) at once; it posts `received` (with i) to the test as each
 * request's body arrives.
 */
const WORKER_FAKE = `
let server;
const event = (data) => "data: " + JSON.stringify(data) + "\\n\\n";
self.onmessage = async ({ data }) => {
  if (data.type === "stop") {
    await server?.shutdown();
    return self.postMessage({ type: "stopped" });
  }
  const silent = new Set(data.silent);
  let received = 0;
  server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    const body = await request.json(), index = received++;
    self.postMessage({ type: "received", index });
    const headers = { "content-type": "text/event-stream", "x-sim-instance": "0" };
    if (silent.has(index)) {
      await new Promise((resolve) => request.signal.addEventListener("abort", resolve));
      return new Response(null, { status: 499 });
    }
    const tokens = Number(body.max_tokens), events = [];
    for (let i = 0; i < tokens; i++) {
      events.push(event({ choices: [{ index: 0, text: " t" + i, finish_reason: i === tokens - 1 ? "length" : null }] }));
    }
    const usage = { prompt_tokens: 16, completion_tokens: tokens, total_tokens: 16 + tokens };
    events.push(event({ choices: [], usage: { ...usage, prompt_tokens_details: { cached_tokens: 0 } } }));
    return new Response(events.join("") + "data: [DONE]\\n\\n", { headers });
  });
  self.postMessage({ type: "listening", port: server.addr.port });
};
`;

/**
 * Runs `test` against {@linkcode WORKER_FAKE}: a server on its own thread, so
 * it answers while the test blocks the client's event loop. `onReceived(i)`
 * runs on the client's thread when the server has read the i-th request.
 */
async function withWorkerFake(
  silent: readonly number[],
  onReceived: (index: number) => void,
  test: (url: string) => Promise<void>,
): Promise<void> {
  const source = URL.createObjectURL(new Blob([WORKER_FAKE], { type: "text/javascript" }));
  const worker = new Worker(source, { type: "module" });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      worker.onerror = (event) => reject(new Error(`fake server worker: ${event.message}`));
      worker.onmessage = ({ data }) => {
        if (data.type === "listening") resolve(data.port);
        if (data.type === "received") onReceived(data.index);
      };
      worker.postMessage({ type: "start", silent });
    });
    await test(`http://127.0.0.1:${port}`);
  } finally {
    const stopped = new Promise<void>((resolve) => {
      worker.onmessage = ({ data }) => data.type === "stopped" && resolve();
    });
    worker.postMessage({ type: "stop" });
    await stopped;
    worker.terminate();
    URL.revokeObjectURL(source);
  }
}

/** Blocks this thread for `ms` of wall time: a client too busy to run its timers or read its sockets. */
function blockLoop(ms: number): void {
  const endMs = performance.now() + ms;
  while (performance.now() < endMs) {
    // busy: no timer fires, no response is read
  }
}

/**
 * How late this run's own timers fired at worst, wall ms: the client's loop
 * probe (a {@linkcode LOOP_PROBE_MS} ms timer doing no work, measured in the
 * same run) plus one probe period, since a stall can end just before a probe
 * is due. A send is a timer too, so on a machine that is slow just now its lag
 * is bounded by this plus the send's own work — not by a fixed number.
 */
function timersLateMs(result: LoadResult): number {
  return result.load.loopLagMaxMs! + LOOP_PROBE_MS;
}

/** A small synthetic workload: `requests` at `ratePerSec`, prompts of 8 + 8 tokens, 4 output tokens. */
function workload(
  requests: number,
  ratePerSec: number,
  extra: Record<string, unknown> = {},
): SimulationConfig {
  return scenario({
    instances: { count: 2 },
    workload: {
      requests,
      ratePerSec,
      prefix: { groups: 3, zipf: 1, sharedFrac: 0.7, tokens: 8 },
      suffixTokens: { dist: "constant", value: 8 },
      outputTokens: { dist: "constant", value: 4 },
      ...extra,
    },
  });
}

/** Nearly evenly spaced arrivals (gamma gaps with CV² 0.001). */
const STEADY = { arrivals: { process: "gamma", burstiness: 0.001 } };

/** `runLoad` of `config` against `url` with test defaults. */
function load(
  url: string,
  config: SimulationConfig,
  options: Partial<LoadOptions> = {},
): Promise<LoadResult> {
  return runLoad({
    url,
    config,
    speed: 1,
    endpoint: "completion",
    model: "sim",
    nonce: 7,
    requestTimeoutMs: 10_000,
    wallTime: systemWallTime,
    ...options,
  });
}

Deno.test("the arrivals are the ones deno task run routes: same ids, times and prompts, synthetic and trace", () => {
  const configs = {
    synthetic: workload(40, 50),
    trace: scenario({
      instances: { model: "batching" },
      workload: { trace: { path: "tests/fixtures/mooncake_sample.jsonl" } },
    }),
  };
  for (const [name, config] of Object.entries(configs)) {
    const routed: Request[] = [];
    simulate(config, {
      onDeliver: (message) => {
        const m = message as { type: string; request?: Request };
        if (m.type === "route") routed.push(m.request!);
      },
    });
    const { requests } = scenarioArrivals(config);
    assertGreater(requests.length, 5, name);
    assertEquals(requests, routed, name);
  }
});

Deno.test("the URL gets the endpoint's path unless it names it, and a URL for the other endpoint is refused", () => {
  assertEquals(endpointUrl("http://127.0.0.1:8000", "completion"), "http://127.0.0.1:8000/v1/completions");
  assertEquals(endpointUrl("http://127.0.0.1:8000/", "chat"), "http://127.0.0.1:8000/v1/chat/completions");
  assertEquals(endpointUrl("http://h:1/v1", "chat"), "http://h:1/v1/chat/completions");
  assertEquals(endpointUrl("http://h:1/v1/completions", "completion"), "http://h:1/v1/completions");
  for (
    const [url, endpoint] of [["ftp://h/", "completion"], ["nope", "chat"], [
      "http://h/v1/completions",
      "chat",
    ]]
  ) {
    let message = "";
    try {
      endpointUrl(url, endpoint as Endpoint);
    } catch (error) {
      message = (error as Error).message;
    }
    assertMatch(message, /^url: /, `${url}: ${message}`);
  }
});

Deno.test("a request's body streams the prompt text with max_tokens, ignore_eos and usage", () => {
  const [request] = scenarioArrivals(workload(1, 10)).requests;
  const completion = requestBody(request, { endpoint: "completion", model: "m", nonce: 3 });
  assertEquals(completion, {
    model: "m",
    max_tokens: 4,
    ignore_eos: true,
    stream: true,
    stream_options: { include_usage: true },
    prompt: promptText(request, 3),
  });
  assertEquals(promptOf(completion).split(" ").length, 16);
  const chat = requestBody(request, { endpoint: "chat", model: "m", nonce: 3 });
  assertEquals(chat.messages, [{ role: "user", content: promptText(request, 3) }]);
});

Deno.test("TTFT, TPOT and end-to-end are measured from the scheduled send, in simulated ms (wall × speed)", async () => {
  const speed = 2, firstMs = 60, gapMs = 15;
  // What the client and the fake cost on this machine now: the same stream with no delays, in this run.
  let overhead = 0;
  await withFake(() => ({ kind: "stream", firstMs: 0, gapMs: 0 }), async (url) => {
    const base = await load(url, workload(8, 40), { speed });
    overhead = Math.max(base.ttftP99Ms!, base.e2eMeanMs!);
  });
  await withFake(() => ({ kind: "stream", firstMs, gapMs }), async (url, received) => {
    const result = await load(url, workload(8, 40), { speed });
    assertEquals([result.completed, result.failed, received.length], [8, 0, 8]);
    assert(received.every((r) => r.path === "/v1/completions"));
    // Never earlier than the fake's delays × speed; later by at most the measured overhead, twice
    // over, plus 20 ms wall × speed — short of a second × speed (TTFT 240, end-to-end 420 on idle).
    const ttft = firstMs * speed, e2e = (firstMs + 3 * gapMs) * speed, late = 2 * overhead + 20 * speed;
    assertGreater(result.ttftMeanMs!, ttft - 2);
    assertLess(result.ttftP99Ms!, ttft + late, `overhead ${overhead.toFixed(1)} ms`);
    assertGreater(result.e2eMeanMs!, e2e - 2);
    assertLess(result.e2eMeanMs!, e2e + late, `overhead ${overhead.toFixed(1)} ms`);
    assertGreater(result.tpotMeanMs!, gapMs * speed * 0.5);
    assertLess(result.tpotMeanMs!, gapMs * speed * 2.5);
    assertEquals(result.load.sent, 8);
    // Sends keep their schedule: late by at most what the run's timers were late, plus 50 ms. A
    // client that waited for each answer before the next send (about 105 ms wall each against
    // arrivals 12.5 ms apart) would send the eighth about 650 ms late.
    assertLess(
      result.load.sendLagP99Ms!,
      50 + timersLateMs(result),
      `timers late ${timersLateMs(result)} ms`,
    );
  });
});

Deno.test("chat streams are read from their deltas", async () => {
  await withFake(() => ({ kind: "stream", firstMs: 5 }), async (url, received) => {
    const result = await load(url, workload(4, 100), { endpoint: "chat" });
    assertEquals(result.completed, 4);
    assert(received.every((r) => r.path === "/v1/chat/completions" && Array.isArray(r.body.messages)));
  });
});

Deno.test("cached tokens from usage give the hit rates, and prompts share text exactly as the scenario shares prefixes", async () => {
  const seen = new Set<string>();
  // A prefix cache of the first 8 words: a prompt whose first 8 words came before has them cached.
  const reply = (_: number, body: Record<string, unknown>): Reply => {
    const key = promptOf(body).split(" ").slice(0, 8).join(" ");
    const cached = seen.has(key) ? 8 : 0;
    seen.add(key);
    return { kind: "stream", cached };
  };
  await withFake(reply, async (url) => {
    const config = workload(30, 200);
    const { requests } = scenarioArrivals(config);
    const result = await load(url, config);
    // Every request of a group but its first hits; a unique prefix never does.
    const groups = new Set(requests.filter((r) => r.prefixGroup >= 0).map((r) => r.prefixGroup));
    const hits = requests.filter((r) => r.prefixGroup >= 0).length - groups.size;
    assertGreater(hits, 5);
    assertEquals(result.completed, 30);
    assertEquals(result.hitRate, hits / 30);
    assertEquals(result.tokenHitRate, (8 * hits) / (30 * 16));
  });
});

Deno.test("the load is open loop: a slow answer does not delay the requests after it", async () => {
  const config = workload(6, 20, STEADY);
  const { requests } = scenarioArrivals(config);
  const spanMs = requests[5].arrivalMs - requests[0].arrivalMs;
  const reply = (index: number): Reply => ({ kind: "stream", firstMs: index === 0 ? spanMs + 500 : 1 });
  await withFake(reply, async (url, received) => {
    const result = await load(url, config);
    assertEquals(result.completed, 6);
    const byPrompt = new Map(received.map((r) => [promptOf(r.body), r.wallMs]));
    const sentMs = requests.map((r) => byPrompt.get(promptText(r, 7))!);
    // Received on schedule, up to 60 ms plus what this run's timers were late, twice (the send's
    // timer, then the in-process fake's read). A closed-loop client would send request 1 after the
    // first answer: spanMs + 500 = 750 ms late, past this bound unless a timer was ~340 ms late.
    const slackMs = 60 + 2 * timersLateMs(result);
    for (let i = 1; i < 6; i++) {
      const offset = sentMs[i] - sentMs[0] - (requests[i].arrivalMs - requests[0].arrivalMs);
      assertLess(
        Math.abs(offset),
        slackMs,
        `request ${i} was sent ${offset.toFixed(1)} ms off its schedule (bound ${slackMs.toFixed(0)} ms)`,
      );
    }
    // The slow first answer took longer than all the sends together.
    assertGreater(result.ttftP99Ms!, spanMs + 500);
    assertLess(
      result.load.sendLagP99Ms!,
      50 + timersLateMs(result),
      `timers late ${timersLateMs(result)} ms`,
    );
  });
});

Deno.test("errors, broken streams and timeouts fail, refusals drop, and every request is accounted for", async () => {
  const replies: Reply[] = [
    { kind: "status", status: 500, body: { error: { message: "boom", type: "server_error" } } },
    { kind: "drop" },
    { kind: "hang" },
    { kind: "status", status: 503, body: { error: { message: "queue full", code: "queue_full" } } },
    { kind: "status", status: 200, body: { choices: [] } },
  ];
  await withFake((index) => replies[index] ?? { kind: "stream", firstMs: 1 }, async (url) => {
    const result = await load(url, workload(8, 100), { requestTimeoutMs: 400 });
    assertEquals(
      [result.requests, result.completed, result.dropped, result.failed, result.inFlight],
      [8, 3, 1, 4, 0],
    );
    assertEquals(result.load.failedBy, { "http 500": 1, dropped: 1, timeout: 1, "bad stream": 1 });
    assertEquals(result.load.clientStalled, 0); // the client was responsive: the hang is the server's
    assertEquals(result.failedByReason.unreachable, 4);
    assertEquals(result.droppedByReason.queue_full, 1);
    assertEquals(result.load.failureExamples["http 500"], "boom");
    assertMatch(formatLoadReport(result), /failed 4 \(http 500 1, dropped 1, timeout 1, bad stream 1\)/);
  });
});

Deno.test("a client stalled past the timeout while the server answered: completed, not timed out, and the client named the bottleneck", async () => {
  // The server answers request 1 at once; the client's loop is blocked for 4 timeouts as it does, so its
  // timer is long overdue when the answer is read, and requests 2-5 go out about a second late.
  const timeoutMs = 300, blockMs = 4 * timeoutMs;
  await withWorkerFake([], (index) => index === 1 && blockLoop(blockMs), async (url) => {
    const result = await load(url, workload(6, 20, STEADY), { requestTimeoutMs: timeoutMs });
    const l = result.load;
    assertEquals([result.completed, result.failed, result.inFlight, l.clientStalled], [6, 0, 0, 0]);
    assertEquals(l.failedBy, {});
    assertGreater(l.completedThroughStall, 0); // request 1 at least waited through the block
    assertGreater(l.lateSends, 3); // requests 2-5 were due during the block
    assertGreater(l.loopLagMaxMs!, blockMs - 2 * 50); // the probe saw the block (it can only be later)
    assertGreater(l.loopStalledMs, blockMs - 2 * 50);
    assert(l.clientBottleneck);
    const report = formatLoadReport(result);
    assertMatch(
      report,
      /warning: the client was the bottleneck: it sent \d+ of 6 requests more than 50 ms late/,
    );
    assertMatch(report, /completed requests waited through a stall of its loop/);
    assertMatch(report, /failed 0 · client stalled 0/);
  });
});

Deno.test("a stream that keeps coming never times out, however long it takes: the timeout counts silence", async () => {
  // 4 tokens 150 ms apart: 550 ms in all, never 300 ms without an event.
  await withFake(() => ({ kind: "stream", firstMs: 100, gapMs: 150 }), async (url) => {
    const result = await load(url, workload(2, 20), { requestTimeoutMs: 300 });
    assertEquals([result.completed, result.failed], [2, 0]);
    assertGreater(result.e2eMeanMs!, 300); // longer than the timeout, from the scheduled send
  });
});

Deno.test("a silent server times out once it had the timeout of the client's attention; silent 3 timeouts without it, the request is given up as client stalled, not failed", async (t) => {
  const timeoutMs = 500;
  await t.step("stalled 1.2 timeouts: the client waits out its stall, then a timeout", async () => {
    await withWorkerFake([0], () => blockLoop(1.2 * timeoutMs), async (url) => {
      const result = await load(url, workload(1, 10), { requestTimeoutMs: timeoutMs });
      assertEquals([result.failed, result.inFlight, result.load.clientStalled], [1, 0, 0]);
      assertEquals(result.load.failedBy, { timeout: 1 });
      assertMatch(
        result.load.failureExamples.timeout,
        /^no response for 500 ms wall while the client was responsive$/,
      );
      assertEquals(result.failedByReason.unreachable, 1);
    });
  });
  await t.step("stalled 4 timeouts: client stalled, counted in flight, no failure", async () => {
    await withWorkerFake([0], () => blockLoop(4 * timeoutMs), async (url) => {
      const result = await load(url, workload(1, 10), { requestTimeoutMs: timeoutMs });
      assertEquals([result.completed, result.failed, result.inFlight], [0, 0, 1]);
      assertEquals([result.load.clientStalled, result.load.inFlight], [1, 0]);
      assertEquals(result.load.failedBy, {});
      assertEquals(result.failedByReason.unreachable ?? 0, 0);
      assert(result.load.clientBottleneck);
      const report = formatLoadReport(result);
      assertMatch(report, /failed 0 · client stalled 1 · aborted in flight 0/);
      assertMatch(
        report,
        /1 request was given up while it stalled \(outcome unknown: counted in flight, not as server failures\)/,
      );
    });
  });
});

Deno.test("the serving instance comes from x-routed-to, else x-sim-instance; without either, imbalance is null", async (t) => {
  assertEquals(instanceOf(new Headers({ "x-routed-to": "3", "x-sim-instance": "0" })), 3);
  assertEquals(instanceOf(new Headers({ "x-sim-instance": "1" })), 1);
  assertEquals(instanceOf(new Headers({ "x-routed-to": "a" })), undefined);
  await t.step("headers: per-instance counts", async () => {
    const reply = (i: number): Reply => ({
      kind: "stream",
      headers: { "x-sim-instance": String(i % 3 === 0 ? 0 : 1) },
    });
    await withFake(reply, async (url) => {
      const result = await load(url, workload(9, 200));
      assertEquals(result.perInstanceCompleted, [3, 6]);
      assertEquals(result.imbalance, 3 / 4.5); // (max − min) / mean
      assertEquals(result.load.instanceMissing, 0);
    });
  });
  await t.step("no headers, no usage: imbalance and hit rates null, not 0", async () => {
    await withFake(() => ({ kind: "stream", usage: false }), async (url) => {
      const result = await load(url, workload(4, 200));
      assertEquals(result.completed, 4);
      assertEquals([result.imbalance, result.imbalanceCv, result.hitRate, result.tokenHitRate], [
        null,
        null,
        null,
        null,
      ]);
      assertEquals([result.load.instanceMissing, result.load.usageMissing], [4, 4]);
      assertEquals(result.tpotMeanMs !== null, true); // output tokens counted from the chunks
    });
  });
});

Deno.test("what a client cannot measure is null, never 0", async () => {
  await withFake(() => ({ kind: "stream", headers: { "x-sim-instance": "0" } }), async (url) => {
    const result = await load(url, workload(3, 200));
    for (
      const key of [
        "queueWaitMeanMs",
        "availableTokenHitRate",
        "expectedTokenHitRate",
        "routingRegret",
        "viewFalsePositiveRate",
        "busyImbalanceCv",
        "kvUtilizationMean",
        "preemptions",
        "messages",
      ] as const
    ) {
      assertEquals(result[key], null, key);
    }
    assertEquals(result.policy, "remote");
  });
});

Deno.test("an interrupt stops sending, aborts the requests in flight and reports what was measured", async () => {
  const abort = new AbortController();
  await withFake((index) => {
    if (index === 1) abort.abort();
    return index === 0 ? { kind: "stream", firstMs: 1 } : { kind: "hang" };
  }, async (url) => {
    const result = await load(url, workload(20, 20, STEADY), { signal: abort.signal });
    assert(result.load.interrupted);
    assertEquals([result.completed, result.failed], [1, 0]);
    assertEquals(result.requests, 2);
    assertEquals(result.inFlight, 1);
    assertEquals(result.load.notSent, 18);
  });
});

/** `deno run` of scenarios/load.ts with the task's permissions. */
function loadCli(...args: string[]): Promise<CliOutput> {
  return runDeno(
    ["--allow-read", "--allow-net=127.0.0.1,localhost", "--allow-env=INIT_CWD"],
    "load",
    ...args,
  );
}

Deno.test("deno task load: a bad flag exits 2 with one line naming the flag and the value", async (t) => {
  const cases: [string[], RegExp][] = [
    [[], /^error: --url: required/],
    [["--url", "ftp://127.0.0.1/"], /^error: --url: expected an http\(s\) URL, got "ftp:/],
    [["--url", "http://example.com:8000"], /^error: --url: this task may connect only to 127\.0\.0\.1/],
    [["--url", "http://127.0.0.1:1", "--speed", "0"], /^error: --speed: expected a number > 0, got "0"/],
    [
      ["--url", "http://127.0.0.1:1", "--endpoint", "embed"],
      /^error: --endpoint: expected completion or chat, got "embed"/,
    ],
    [
      ["--url", "http://127.0.0.1:1/v1/completions", "--endpoint", "chat"],
      /^error: --url: .* completion endpoint/,
    ],
    [["--url", "http://127.0.0.1:1", "--nonce", "-1"], /^error: --nonce: expected an integer >= 0, got "-1"/],
    [
      ["--url", "http://127.0.0.1:1", "--request-timeout-ms", "x"],
      /^error: --request-timeout-ms: expected a number > 0, got "x"/,
    ],
    [["--url", "http://127.0.0.1:1", "--router", "r.ts"], /^error: --router: configures the serving side/],
    [["--url", "http://127.0.0.1:1", "--rate", "-1"], /^error: --rate: /],
  ];
  for (const [args, expected] of cases) {
    await t.step(args.join(" ") || "(no flags)", async () => {
      const { code, stderr } = await loadCli(...args);
      assertEquals(code, 2, stderr);
      assertMatch(messageLine(stderr), expected);
    });
  }
});

Deno.test("deno task load --json prints every key of deno task run --json, and load's own", async () => {
  await withFake(() => ({ kind: "stream", headers: { "x-sim-instance": "1" } }), async (url) => {
    const [loaded, run] = await Promise.all([
      loadCli("--url", url, "--requests", "5", "--rate", "100", "--model", "m", "--json"),
      runCli("--requests", "5", "--rate", "100", "--json"),
    ]);
    assertEquals(loaded.code, 0, loaded.stderr);
    const result = JSON.parse(loaded.stdout), runKeys = Object.keys(JSON.parse(run.stdout));
    assertEquals(runKeys.filter((key) => !(key in result)), []);
    assertEquals([result.completed, result.load.sent, result.load.model], [5, 5, "m"]);
    assertEquals(result.perInstanceCompleted, [0, 5, 0, 0]);
  });
});

Deno.test("deno task load: Ctrl-C aborts the requests in flight, prints what was measured and exits 130", async () => {
  await withFake(() => ({ kind: "hang" }), async (url) => {
    const child = new Deno.Command("deno", {
      args: [
        "run",
        "--allow-read",
        "--allow-net=127.0.0.1",
        "scenarios/load.ts",
        "--url",
        url,
        "--requests",
        "50",
      ],
      cwd: ROOT,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const { code, stderr } = await interruptWhenSeen(child, "load: sending 50 requests");
    assertEquals(code, 130, stderr);
    assertMatch(stderr, /load: interrupted after [\d.]+ s wall: \d+ of 50 sent, \d+ in flight aborted/);
  });
});

Deno.test("deno task load refuses routing and fleet flags it would ignore: exit 2 naming the flag and why", async (t) => {
  const cases: string[][] = [
    ["--policy", "round_robin"],
    ["--threshold", "2"],
    ["--instances", "2"],
    ["--preset", "qwen2.5-7b"],
    ["--prefill-instances", "1"],
    ["--cache-capacity", "3"],
    ["--retry-budget", "0"],
    ["--faults", "f.json"],
  ];
  for (const args of cases) {
    await t.step(args.join(" "), async () => {
      const { code, stderr } = await loadCli("--url", "http://127.0.0.1:1", ...args);
      assertEquals(code, 2, stderr);
      assertEquals(
        messageLine(stderr),
        `error: ${args[0]}: configures the serving side: load replays the workload only; routing and ` +
          `fleet flags belong to serve (give ${args[0]} to deno task serve, not load)`,
      );
    });
  }
});

Deno.test("deno task load --help lists each flag once, and none that load refuses", async () => {
  const { code, stdout } = await loadCli("--help");
  assertEquals(code, 0);
  // An entry is a flag at the start of a line (indented 2), a policy's parameter flag (indented 6).
  const flags = [...stdout.matchAll(/^ {2}(?:-\w, )?(--[a-z0-9-]+)/gm)].map((m) => m[1]);
  const twice = flags.filter((flag, i) => flags.indexOf(flag) !== i);
  assertEquals(twice, []);
  for (const flag of ["--url", "--nonce", "--model", "--json", "--rate", "--trace", "--seed", "--help"]) {
    assert(flags.includes(flag), `${flag} is not in the help`);
  }
  for (const flag of ["--policy", "--router", "--instances", "--preset", "--faults", "--threshold"]) {
    assert(!stdout.includes(`  ${flag} `), `${flag} is in the help, but load refuses it`);
  }
  assertMatch(stdout, /--nonce N .*drawn\s+fresh for each run, not from the seed/s);
});

Deno.test("deno task load draws a fresh nonce each run and prints it; --nonce N sends exactly that run's prompts again", async () => {
  await withFake(() => ({ kind: "stream" }), async (url, received) => {
    const args = ["--url", url, "--requests", "6", "--rate", "200", "--json"];
    const first = await loadCli(...args);
    const second = await loadCli(...args);
    assertEquals([first.code, second.code], [0, 0], first.stderr + second.stderr);
    const [a, b] = [JSON.parse(first.stdout).load.nonce, JSON.parse(second.stdout).load.nonce];
    assert(Number.isSafeInteger(a) && a >= 0, `nonce ${a}`);
    assert(a !== b, `two runs drew the same nonce ${a}`);
    assertMatch(first.stderr, new RegExp(`nonce ${a} \\(drawn fresh; --nonce ${a} repeats these prompts\\)`));
    const prompts = received.map((r) => promptOf(r.body));
    const [firstPrompts, secondPrompts] = [prompts.slice(0, 6).sort(), prompts.slice(6, 12).sort()];
    assertEquals(firstPrompts.filter((p) => secondPrompts.includes(p)), []);
    const again = await loadCli(...args, "--nonce", String(a));
    assertEquals(again.code, 0, again.stderr);
    assertEquals(JSON.parse(again.stdout).load.nonce, a);
    assert(!again.stderr.includes("drawn fresh"), again.stderr);
    assertEquals(received.slice(12).map((r) => promptOf(r.body)).sort(), firstPrompts);
  });
});

Deno.test("deno task load exits 1 when every request failed, and says so in its last line", async () => {
  await withFake(
    () => ({ kind: "status", status: 500, body: { error: { message: "boom", type: "server_error" } } }),
    async (url) => {
      const { code, stdout, stderr } = await loadCli("--url", url, "--requests", "4", "--rate", "200");
      assertEquals(code, 1, stderr);
      assertMatch(stdout, /failed 4/);
      const last = stderr.trimEnd().split("\n").at(-1) ?? "";
      assertMatch(last, /^load: every request failed \(4 of 4: .*\).*exit 1$/);
    },
  );
  await withFake(
    (i) => i === 0 ? { kind: "stream" } : { kind: "status", status: 500, body: {} },
    async (url) => {
      const { code, stderr } = await loadCli("--url", url, "--requests", "4", "--rate", "200");
      assertEquals(code, 0, stderr); // one answered: the run measured something
    },
  );
});
