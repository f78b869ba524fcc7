/**
 * @module
 * Trivial OpenAI-compatible upstreams for the gateway's tests, on 127.0.0.1:
 * completions and chat (whole, or streamed chunk by chunk), `/metrics` in
 * vLLM's format, `/v1/models` and `/health`. Each records what it was sent,
 * counts streams its client cancelled, and can be killed abruptly.
 */
import { chunkBody, completionBody, type Endpoint, usageChunkBody } from "../scenarios/wire/openai.ts";

/** How a fake upstream answers. */
export interface FakeUpstreamOptions {
  /** Tokens generated per request. @default 4 */
  readonly tokens?: number;
  /** Wall ms between two streamed tokens. @default 0 */
  readonly tokenDelayMs?: number;
  /** Resolves when the stream may go on after its first token (a test holds it there). @default at once */
  readonly gate?: () => Promise<void>;
  /** `vllm:num_requests_waiting`'s value. @default 0 */
  readonly waiting?: number;
  /** Prompt tokens it reports cached, per request. @default 0 */
  readonly cachedTokens?: number;
}

/** A running fake upstream. */
export interface FakeUpstream {
  readonly url: string;
  /** Bodies of the completion requests it got, in order. */
  readonly bodies: Record<string, unknown>[];
  /** Streams whose client went away before the end. */
  readonly cancelled: () => number;
  /** Streams (or whole answers) finished. */
  readonly finished: () => number;
  /** Cuts every open stream short (no [DONE]) and stops listening (later connections are refused). */
  kill(): Promise<void>;
  /** Stops listening (gracefully). */
  close(): Promise<void>;
}

const MODEL = "fake";

function metricsText(open: number, waiting: number, served: number): string {
  const labels = `{engine="0",model_name="${MODEL}"}`;
  return [
    "# HELP vllm:num_requests_running Number of requests in model execution batches.",
    "# TYPE vllm:num_requests_running gauge",
    `vllm:num_requests_running${labels} ${open}.0`,
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
    "# TYPE vllm:num_requests_waiting gauge",
    `vllm:num_requests_waiting${labels} ${waiting}.0`,
    "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
    "# TYPE vllm:kv_cache_usage_perc gauge",
    `vllm:kv_cache_usage_perc${labels} 0.25`,
    "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
    "# TYPE vllm:prompt_tokens_total counter",
    `vllm:prompt_tokens_total${labels} ${served}.0`,
    "",
  ].join("\n");
}

/** Starts one fake upstream on an ephemeral port. */
export function startFakeUpstream(options: FakeUpstreamOptions = {}): FakeUpstream {
  const tokens = options.tokens ?? 4;
  const bodies: Record<string, unknown>[] = [];
  const streams = new Map<ReadableStreamDefaultController<Uint8Array>, () => void>();
  const runs = new Set<Promise<void>>();
  let cancelled = 0, finished = 0, open = 0, dead = false;
  const encoder = new TextEncoder();

  const stream = (endpoint: Endpoint, body: Record<string, unknown>, promptTokens: number): Response => {
    const includeUsage =
      (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
    const about = { id: `${endpoint}-fake-${bodies.length}`, createdS: 1, model: MODEL, endpoint };
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    let closed = false;
    const send = (data: unknown) => {
      if (!closed) {
        controller.enqueue(
          encoder.encode(`data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`),
        );
      }
    };
    const run = async () => {
      open++;
      try {
        if (endpoint === "chat") {
          send(chunkBody({ ...about, text: "", role: true, ...(includeUsage && { usage: null }) }));
        }
        for (let i = 0; i < tokens && !closed; i++) {
          if (i === 1 && options.gate) await options.gate();
          else if (i > 0 && options.tokenDelayMs) {
            await new Promise((r) => setTimeout(r, options.tokenDelayMs));
          }
          const finishReason = i === tokens - 1 ? "length" : null;
          send(chunkBody({ ...about, text: ` w${i}`, finishReason, ...(includeUsage && { usage: null }) }));
        }
        if (closed) return;
        if (includeUsage) {
          const usage = {
            prompt_tokens: promptTokens,
            completion_tokens: tokens,
            total_tokens: promptTokens + tokens,
            prompt_tokens_details: { cached_tokens: options.cachedTokens ?? 0 },
          };
          send(usageChunkBody({ ...about, usage }));
        }
        send("[DONE]");
        closed = true;
        finished++;
        controller.close();
      } catch {
        // killed or cancelled
      } finally {
        streams.delete(controller);
        open--;
      }
    };
    const body$ = new ReadableStream<Uint8Array>({
      start(c) {
        controller = c;
        streams.set(c, () => closed = true);
        const running = run();
        runs.add(running);
        running.finally(() => runs.delete(running));
      },
      cancel() {
        if (!closed) cancelled++;
        closed = true;
      },
    });
    return new Response(body$, { headers: { "content-type": "text/event-stream" } });
  };

  const handler = async (request: Request): Promise<Response> => {
    const path = new URL(request.url).pathname;
    if (path === "/metrics") return new Response(metricsText(open, options.waiting ?? 0, bodies.length));
    if (path === "/health") return new Response(null, { status: 200 });
    if (path === "/v1/models") {
      return Response.json({
        object: "list",
        data: [{ id: MODEL, object: "model", created: 1, owned_by: "test" }],
      });
    }
    const endpoint: Endpoint | undefined = path === "/v1/completions"
      ? "completion"
      : path === "/v1/chat/completions"
      ? "chat"
      : undefined;
    if (endpoint === undefined) return Response.json({ error: { message: "no route" } }, { status: 404 });
    const body = await request.json() as Record<string, unknown>;
    bodies.push(body);
    if (body.model !== MODEL) {
      return Response.json({
        error: {
          message: `The model \`${body.model}\` does not exist.`,
          type: "NotFoundError",
          param: "model",
          code: 404,
        },
      }, { status: 404 });
    }
    const prompt = endpoint === "chat" ? JSON.stringify(body.messages) : String(body.prompt);
    const promptTokens = prompt.split(/\s+/).filter((w) => w !== "").length;
    if (body.stream === true) return stream(endpoint, body, promptTokens);
    finished++;
    const text = Array.from({ length: tokens }, (_, i) => ` w${i}`).join("");
    return Response.json(completionBody({
      id: `${endpoint}-fake-${bodies.length}`,
      createdS: 1,
      model: MODEL,
      endpoint,
      text,
      finishReason: "length",
      usage: {
        prompt_tokens: promptTokens,
        completion_tokens: tokens,
        total_tokens: promptTokens + tokens,
        prompt_tokens_details: { cached_tokens: options.cachedTokens ?? 0 },
      },
    }));
  };

  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, handler);
  let stopped: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    bodies,
    cancelled: () => cancelled,
    finished: () => finished,
    kill() {
      dead = true;
      for (const [c, close] of streams) {
        close();
        c.close(); // cut short: no more tokens, no [DONE]
      }
      streams.clear();
      return stopped ??= Promise.all([server.shutdown(), ...runs]).then(() => {});
    },
    async close() {
      await (stopped ??= dead ? server.finished : server.shutdown());
      await Promise.all([...runs]);
    },
  };
}

/** The model the fakes serve. */
export const FAKE_MODEL = MODEL;
