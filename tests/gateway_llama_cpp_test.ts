/**
 * The gateway (scenarios/wire/gateway.ts) in front of llama.cpp's llama-server
 * as it is: fakes on 127.0.0.1 replay answers and a `/metrics` recorded from
 * the real server (tests/fixtures/llama_cpp/, made by its record.sh), to check
 * that cached tokens are derived from `timings` into the usage clients get,
 * that the `llamacpp:` gauges are the load the router sees, that a slow
 * `/metrics` is stale load and not a dead upstream, and that a refused one is
 * drained. One live test runs the real server when `LLAMA_SERVER` (its binary)
 * and `LLAMA_MODEL` (a GGUF) are set.
 */
import { assert, assertAlmostEquals, assertEquals } from "@std/assert";
import type { Gateway, GatewayOptions } from "../scenarios/wire/gateway.ts";
import { readSseData } from "../scenarios/wire/http.ts";
import { parsePrometheus, readLoad } from "../scenarios/wire/prometheus.ts";
import { scenario } from "./_scenarios.ts";
import { loopbackGateway } from "./_wire.ts";

const FIXTURES = new URL("./fixtures/llama_cpp/", import.meta.url);
const fixture = (name: string) => Deno.readTextFileSync(new URL(name, FIXTURES));

const COMPLETION = fixture("completion_whole.txt");
const COMPLETION_STREAM = fixture("completion_stream.txt");
const CHAT = fixture("chat_whole.txt");
const CHAT_STREAM = fixture("chat_stream.txt");
const METRICS = fixture("metrics.txt");

/** The cached tokens a recorded answer implies: prompt tokens minus those llama-server evaluated. */
function recordedCached(wholeBody: string): { prompt: number; cached: number } {
  const body = JSON.parse(wholeBody);
  return { prompt: body.usage.prompt_tokens, cached: body.usage.prompt_tokens - body.timings.prompt_n };
}

/** How a replaying fake answers. */
interface ReplayOptions {
  /** Its `/metrics` text. @default the recorded one */
  readonly metrics?: string;
  /** Wall ms before `/metrics` answers; Infinity: never (until the fake closes). @default 0 */
  readonly metricsDelayMs?: number;
  /** Wall ms between two replayed stream events. @default 0 */
  readonly eventDelayMs?: number;
}

/** A fake llama-server that replays the recorded answers. */
interface Replay {
  readonly url: string;
  /** Completion requests it got. */
  readonly requests: () => number;
  /** `/metrics` requests it got. */
  readonly scrapes: () => number;
  /** Stops listening: later connections are refused. */
  close(): Promise<void>;
}

/** Resolves after `ms` (never, for Infinity) or when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = Number.isFinite(ms) ? setTimeout(done, ms) : undefined;
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}

/** Starts a replaying fake on an ephemeral loopback port. */
function startReplay(options: ReplayOptions = {}): Replay {
  const closing = new AbortController();
  let requests = 0, scrapes = 0;
  const stream = (recorded: string, signal: AbortSignal): Response => {
    const events = recorded.split("\n\n").filter((e) => e.trim() !== "").map((e) => `${e}\n\n`);
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        for (const [i, event] of events.entries()) {
          if (i > 0 && options.eventDelayMs) await sleep(options.eventDelayMs, signal);
          if (signal.aborted) return;
          controller.enqueue(encoder.encode(event));
        }
        controller.close();
      },
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  };
  const handler = async (request: Request): Promise<Response> => {
    const path = new URL(request.url).pathname;
    const signal = closing.signal;
    if (path === "/metrics") {
      scrapes++;
      await sleep(options.metricsDelayMs ?? 0, signal);
      return new Response(options.metrics ?? METRICS, {
        headers: { "content-type": "text/plain; version=0.0.4" },
      });
    }
    const chat = path === "/v1/chat/completions";
    if (!chat && path !== "/v1/completions") return new Response(null, { status: 404 });
    requests++;
    const body = await request.json();
    if (body.stream === true) return stream(chat ? CHAT_STREAM : COMPLETION_STREAM, signal);
    return new Response(chat ? CHAT : COMPLETION, {
      headers: { "content-type": "application/json; charset=utf-8" },
    });
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, handler);
  let closed: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    requests: () => requests,
    scrapes: () => scrapes,
    close() {
      closing.abort();
      return closed ??= server.shutdown();
    },
  };
}

/** Runs `body` with replaying fakes and a gateway in front of them, then closes everything. */
async function withGateway(
  setup: { upstreams: readonly ReplayOptions[]; policy?: string; gateway?: Partial<GatewayOptions> },
  body: (gateway: Gateway, replays: readonly Replay[]) => Promise<void>,
): Promise<void> {
  const replays = setup.upstreams.map((o) => startReplay(o));
  const config = scenario({ policy: { name: setup.policy ?? "round_robin" } });
  let gateway: Gateway | undefined;
  try {
    gateway = await loopbackGateway(config, replays.map((r) => r.url), 1, {
      scrapeMs: 10_000, // one scrape at start unless a test says otherwise
      upstreamTimeoutMs: 5_000,
      ...setup.gateway,
    });
    await body(gateway, replays);
  } finally {
    await gateway?.close(1000);
    await Promise.all(replays.map((r) => r.close()));
  }
}

type Endpoint = "completion" | "chat";

/** One request through the gateway; a stream is read to its end. */
async function send(
  gateway: Gateway,
  endpoint: Endpoint,
  stream: boolean,
  includeUsage = true,
): Promise<
  { status: number; routedTo: number; body: Record<string, unknown>; chunks: Record<string, unknown>[] }
> {
  const path = endpoint === "chat" ? "/v1/chat/completions" : "/v1/completions";
  const input = endpoint === "chat"
    ? { messages: [{ role: "user", content: "the shared prefix and a question" }] }
    : { prompt: "the shared prefix and a question" };
  const response = await fetch(`${gateway.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "tiny",
      ...input,
      max_tokens: 3,
      ...(stream && { stream: true }),
      ...(stream && includeUsage && { stream_options: { include_usage: true } }),
    }),
  });
  const routedTo = Number(response.headers.get("x-routed-to"));
  if (!response.headers.get("content-type")?.startsWith("text/event-stream")) {
    return { status: response.status, routedTo, body: await response.json(), chunks: [] };
  }
  const chunks: Record<string, unknown>[] = [];
  for await (const data of readSseData(response.body!)) if (data !== "[DONE]") chunks.push(JSON.parse(data));
  return { status: response.status, routedTo, body: {}, chunks };
}

/** The cached tokens a usage object states. */
function cachedIn(usage: unknown): unknown {
  return (usage as { prompt_tokens_details?: { cached_tokens?: unknown } } | undefined)?.prompt_tokens_details
    ?.cached_tokens;
}

/** A sample's value from a gateway's `/metrics`. */
async function gatewaySample(gateway: Gateway, name: string, labels: Record<string, string>) {
  const samples = parsePrometheus(await (await fetch(`${gateway.url}/metrics`)).text());
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    ?.value;
}

/** Polls `predicate` every 10 ms until it holds; fails after `ms`. */
async function eventually(predicate: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  while (!predicate()) {
    if (performance.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

Deno.test("the recorded answers share a prefix: each has more than one cached prompt token", () => {
  for (const recorded of [COMPLETION, CHAT]) {
    const { prompt, cached } = recordedCached(recorded);
    assert(cached > 1 && cached < prompt, `cached ${cached} of ${prompt}`);
  }
});

Deno.test("readLoad reads llama-server's /metrics: requests processing and deferred, KV cells used", () => {
  assertEquals(readLoad(parsePrometheus(METRICS)), { running: 2, waiting: 2, kvUsage: 0.206299 });
});

Deno.test("cached_tokens is derived from llama-server's timings into the usage the client gets, whole and streamed", async (t) => {
  const completion = recordedCached(COMPLETION), chat = recordedCached(CHAT);
  await withGateway({ upstreams: [{}] }, async (gateway) => {
    for (const endpoint of ["completion", "chat"] as const) {
      const expected = endpoint === "chat" ? chat.cached : completion.cached;
      await t.step(`${endpoint}, whole`, async () => {
        const { status, body } = await send(gateway, endpoint, false);
        assertEquals(status, 200);
        assertEquals(cachedIn(body.usage), expected);
        // llama-server's own fields pass through untouched.
        const recorded = JSON.parse(endpoint === "chat" ? CHAT : COMPLETION);
        assertEquals(body.timings, recorded.timings);
        assertEquals((body.usage as { prompt_tokens: number }).prompt_tokens, recorded.usage.prompt_tokens);
      });
      await t.step(`${endpoint}, streamed with include_usage`, async () => {
        const { status, chunks } = await send(gateway, endpoint, true);
        assertEquals(status, 200);
        const usages = chunks.filter((c) => c.usage != null);
        assertEquals(usages.length, 1);
        assertEquals(cachedIn(usages[0].usage), expected);
        assert(usages[0].timings !== undefined, "the final chunk's timings were dropped");
      });
      await t.step(
        `${endpoint}, streamed without include_usage: no usage to the client, counted all the same`,
        async () => {
          const before = gateway.snapshot().upstreams[0].completed;
          const { status, chunks } = await send(gateway, endpoint, true, false);
          assertEquals(status, 200);
          assert(chunks.every((c) => !("usage" in c)), "a usage field reached a client that did not ask");
          assert(
            chunks.some((c) => (c.choices as { finish_reason: unknown }[])[0]?.finish_reason === "length"),
          );
          assertEquals(gateway.snapshot().upstreams[0].completed, before + 1);
        },
      );
    }
    // Three requests per endpoint; the gateway's own hit rate counts the derived tokens.
    const expectedRate = (3 * completion.cached + 3 * chat.cached) /
      (3 * completion.prompt + 3 * chat.prompt);
    assertAlmostEquals(gateway.snapshot().upstreams[0].hitRate!, expectedRate, 1e-12);
  });
});

Deno.test("the llamacpp: gauges are the load the router sees, and are re-exposed labelled by upstream", async () => {
  const idle = METRICS.replace(/^llamacpp:requests_processing .*$/m, "llamacpp:requests_processing 0")
    .replace(/^llamacpp:requests_deferred .*$/m, "llamacpp:requests_deferred 0");
  await withGateway(
    { policy: "least_load", upstreams: [{}, { metrics: idle }] },
    async (gateway, replays) => {
      const [busy] = gateway.snapshot().upstreams;
      assertEquals([busy.running, busy.waiting, busy.kvUsage], [2, 2, 0.206299]);
      // least_load reads waiting + running: 4 on upstream 0, 0 on upstream 1.
      const routed: number[] = [];
      for (let i = 0; i < 6; i++) routed.push((await send(gateway, "completion", i % 2 === 1)).routedTo);
      assertEquals(routed, [1, 1, 1, 1, 1, 1]);
      assertEquals(replays.map((r) => r.requests()), [0, 6]);
      const url = replays[0].url;
      assertEquals(await gatewaySample(gateway, "llamacpp:requests_deferred", { upstream: url }), 2);
      assertEquals(
        await gatewaySample(gateway, "llamacpp:kv_cache_usage_ratio", { upstream: url }),
        0.206299,
      );
      // Counters stay with their upstream (llama-server types n_busy_slots_per_decode a counter too).
      assertEquals(
        await gatewaySample(gateway, "llamacpp:prompt_tokens_total", { upstream: url }),
        undefined,
      );
      assertEquals(
        await gatewaySample(gateway, "llamacpp:n_busy_slots_per_decode", { upstream: url }),
        undefined,
      );
    },
  );
});

Deno.test("a live upstream whose /metrics is slower than the scrape timeout, again and again, keeps serving: no 502", async () => {
  // Every scrape takes 400 ms against a 100 ms timeout (as when a long prefill holds llama-server's main
  // loop). A stream's events come 250 ms apart; 8 failed scrapes in a row (≈ 880 ms, 3.5 event gaps, so a
  // loaded machine's late timers do not open a gap that long) would drain the upstream within the test's
  // ≈ 2 s of scrapes that never answer, were the streams' bytes not a sign of life; a request sent then
  // would find none.
  await withGateway({
    upstreams: [{ metricsDelayMs: 400, eventDelayMs: 250 }],
    gateway: { scrapeMs: 10, scrapeTimeoutMs: 100, scrapeFailures: 8 },
  }, async (gateway, [replay]) => {
    let drained = 0;
    const watch = setInterval(() => drained += gateway.snapshot().upstreams[0].healthy ? 0 : 1, 5);
    const statuses: number[] = [];
    try {
      for (const endpoint of ["completion", "chat"] as const) {
        const stream = send(gateway, endpoint, true);
        await new Promise((r) => setTimeout(r, 700)); // mid-stream, 700 ms after its first token
        statuses.push((await send(gateway, endpoint, false)).status);
        statuses.push((await stream).status);
      }
    } finally {
      clearInterval(watch);
    }
    assertEquals(statuses, [200, 200, 200, 200]);
    assertEquals(drained, 0, "the upstream was taken as down");
    const snapshot = gateway.snapshot();
    assertEquals(snapshot.requests.failed, 0);
    // Not one scrape answered in time (no load was ever read), and many were tried.
    assertEquals(snapshot.upstreams[0].running, null);
    assert(replay.scrapes() >= 15, `${replay.scrapes()} scrapes`);
    assertEquals((await fetch(`${gateway.url}/health`)).status, 200);
  });
});

Deno.test("an upstream whose /metrics never answers and that serves nothing is drained after scrapeFailures timeouts", async () => {
  await withGateway({
    upstreams: [{ metricsDelayMs: Infinity }, {}],
    gateway: { scrapeMs: 10, scrapeTimeoutMs: 50, scrapeFailures: 3 },
  }, async (gateway, replays) => {
    await eventually(() => !gateway.snapshot().upstreams[0].healthy, 3000, "upstream 0 drained");
    assert(replays[0].scrapes() >= 3, `${replays[0].scrapes()} scrapes`);
    const routed: number[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await send(gateway, "completion", false);
      assertEquals(r.status, 200);
      routed.push(r.routedTo);
    }
    assertEquals(routed, [1, 1, 1, 1]);
    assertEquals(gateway.snapshot().requests.retries, 0);
    assertEquals(await gatewaySample(gateway, "gateway_upstream_up", { upstream: replays[0].url }), 0);
  });
});

Deno.test("an upstream that refuses connections is drained at its first refusal, and the other takes the traffic", async () => {
  await withGateway({ upstreams: [{}, {}] }, async (gateway, replays) => {
    assert(gateway.snapshot().upstreams.every((u) => u.healthy));
    await replays[0].close(); // gone after the gateway's one scrape: only a request can find out
    const routed: number[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await send(gateway, "completion", i % 2 === 0);
      assertEquals(r.status, 200);
      routed.push(r.routedTo);
    }
    // Round robin tries 0 first: refused, retried on 1; 0 is drained at once, so no other request tries it.
    assertEquals(routed, [1, 1, 1, 1, 1, 1]);
    const snapshot = gateway.snapshot();
    assertEquals(snapshot.requests.retries, 1);
    assertEquals(snapshot.upstreams.map((u) => u.healthy), [false, true]);
    assertEquals(replays[1].requests(), 6);
    assertEquals(await gatewaySample(gateway, "gateway_upstream_up", { upstream: replays[0].url }), 0);
    assertEquals((await fetch(`${gateway.url}/health`)).status, 200);
  });
});

// ---- The real llama-server (optional) -------------------------------------------------

const LLAMA_SERVER = Deno.permissions.querySync({ name: "env", variable: "LLAMA_SERVER" }).state === "granted"
  ? Deno.env.get("LLAMA_SERVER")
  : undefined;
const LLAMA_MODEL = Deno.permissions.querySync({ name: "env", variable: "LLAMA_MODEL" }).state === "granted"
  ? Deno.env.get("LLAMA_MODEL")
  : undefined;

/** Why the live test cannot run here, or undefined when it can. */
const LIVE_SKIP = LLAMA_SERVER === undefined || LLAMA_MODEL === undefined
  ? "set LLAMA_SERVER (the llama-server binary) and LLAMA_MODEL (a .gguf) to run it"
  : Deno.permissions.querySync({ name: "run", command: LLAMA_SERVER }).state !== "granted"
  ? `add --allow-run=${LLAMA_SERVER} to the deno test command to run it`
  : undefined;
if (LIVE_SKIP !== undefined) {
  console.log(`gateway_llama_cpp_test: the live llama-server test is skipped: ${LIVE_SKIP}`);
}

/** A free loopback port among 18081–18089. */
function freePort(): number {
  for (let port = 18081; port <= 18089; port++) {
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
      return port;
    } catch { /* taken */ }
  }
  throw new Error("no free port in 18081-18089");
}

Deno.test({
  name: "live: through the gateway, a real llama-server's answers carry cached tokens and its load is read",
  ignore: LIVE_SKIP !== undefined,
  async fn() {
    const port = freePort();
    const child = new Deno.Command(LLAMA_SERVER!, {
      args: ["-m", LLAMA_MODEL!, "-t", "1", "-c", "4096", "-np", "2", "--metrics", "--no-webui"]
        .concat(["--host", "127.0.0.1", "--port", String(port)]),
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    const upstream = `http://127.0.0.1:${port}`;
    let gateway: Gateway | undefined;
    try {
      const deadline = performance.now() + 60_000;
      for (;;) {
        const ok = await fetch(`${upstream}/health`).then((r) => (r.body?.cancel(), r.ok), () => false);
        if (ok) break;
        if (performance.now() > deadline) throw new Error("llama-server did not become healthy within 60 s");
        await new Promise((r) => setTimeout(r, 200));
      }
      gateway = await loopbackGateway(scenario(), [upstream], 1, {
        scrapeMs: 100,
        upstreamTimeoutMs: 30_000,
      });
      const prefix =
        "The gateway routes every request to one of its upstream servers and a shared prefix of " +
        "this prompt stays in the slot cache of the server that saw it first";
      const post = (path: string, body: Record<string, unknown>) =>
        fetch(`${gateway!.url}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "tiny", max_tokens: 3, ...body }),
        });
      const usageOf = async (response: Response, stream: boolean) => {
        assertEquals(response.status, 200);
        if (!stream) return (await response.json()).usage;
        let usage: unknown;
        for await (const data of readSseData(response.body!)) {
          if (data !== "[DONE]" && JSON.parse(data).usage != null) usage = JSON.parse(data).usage;
        }
        return usage;
      };
      for (
        const [path, input] of [
          ["/v1/completions", (s: string) => ({ prompt: `${prefix} ${s}` })],
          [
            "/v1/chat/completions",
            (s: string) => ({ messages: [{ role: "user", content: `${prefix} ${s}` }] }),
          ],
        ] as const
      ) {
        await usageOf(await post(path, input("warm")), false);
        const whole = await usageOf(await post(path, input("whole")), false);
        const streamed = await usageOf(
          await post(path, { ...input("stream"), stream: true, stream_options: { include_usage: true } }),
          true,
        );
        for (const usage of [whole, streamed]) {
          const cached = cachedIn(usage) as number;
          assert(
            cached > 1 && cached < usage.prompt_tokens,
            `${path}: cached ${cached} of ${usage.prompt_tokens}`,
          );
        }
      }
      await eventually(() => gateway!.snapshot().upstreams[0].running !== null, 5000, "a scrape with load");
      assertEquals(gateway.snapshot().requests.failed, 0);
    } finally {
      await gateway?.close(1000);
      child.kill("SIGTERM");
      await child.status;
    }
  },
});
