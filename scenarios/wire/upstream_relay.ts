/**
 * @module
 * One attempt at a request on one upstream, for the gateway: forward the
 * client's body, and relay the answer — whole, or as a stream event by event.
 * The client is answered only once the upstream's first event (or whole
 * body) is in hand, so that a failure before that can still be retried.
 * Where the upstream's usage lacks `cached_tokens` (llama.cpp), the relay
 * derives it and writes it into the usage the client gets.
 */
import { isDescriptorExhaustion } from "./http_server.ts";
import type { EndOutcome } from "../../actors/metrics/gateway_metrics.ts";
import type { FailureCause } from "../../actors/instances/upstream_instance.ts";
import { fillCachedTokens } from "./cached_tokens.ts";
import { jsonResponse, readSseEvents, SseWriter } from "./http.ts";
import { type ByteStream, type ClientResponse, HttpClient } from "./http_client.ts";

/** What an attempt needs. */
export interface RelayRequest {
  /** The upstream endpoint's full URL (`http://host:port/v1/completions`). */
  readonly url: string;
  /** The client's body, as it sent it. */
  readonly body: Readonly<Record<string, unknown>>;
  /** The same body's bytes, when the gateway has them: sent as they are unless the usage chunk must be asked for. */
  readonly rawBody?: Uint8Array;
  /** The client asked for a stream. */
  readonly stream: boolean;
  /** The client asked for the usage chunk (`stream_options.include_usage`). */
  readonly includeUsage: boolean;
  /** Headers added to the client's response (`x-routed-to`). */
  readonly headers: Readonly<Record<string, string>>;
  /** The client's `Authorization` header, forwarded (an upstream's API key). */
  readonly authorization?: string | null;
  /** Wall ms the upstream may stay silent: before answering, and between two events. */
  readonly timeoutMs: number;
  /** The prompt's tokens by our own count, when the upstream reports no usage. */
  readonly promptTokens: number;
  /** Aborted when the gateway gives up on the request; the relay aborts it when the client cancels the stream. */
  readonly client: AbortController;
  /** The HTTP client whose connection pool the request uses. @default one of the relay's own */
  readonly httpClient?: HttpClient;
}

/** Token counts of a finished request (the upstream's usage, or our fallbacks). */
export interface RelayUsage {
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly outputTokens: number;
}

/**
 * What the relay tells the gateway. Exactly one of `failed`, `finished` and
 * `ended` is called, last; `respond` at most once, before `finished` or
 * `ended` (never with `failed`).
 */
export interface RelayEvents {
  /** The upstream sent something: its response's head, or a stream event (a sign of life). */
  heard(): void;
  /** The upstream's first generated text arrived. */
  firstToken(): void;
  /** The client's response (its body may still be streaming). */
  respond(response: Response): void;
  /** Completed; the client got everything. */
  finished(usage: RelayUsage): void;
  /** Failed before anything went to the client (refused, reset, 5xx, 429, timeout, malformed): retryable. */
  failed(reason: string, cause: FailureCause): void;
  /**
   * Ended otherwise after (or without) answering: the client left, the stream
   * broke (`cause` says how), or the upstream's own 4xx.
   */
  ended(outcome: EndOutcome, cause?: FailureCause): void;
}

/** The reason the gateway aborts a request it gives up on at shutdown: the client's stream gets an error event. */
export class GatewayShutdown extends Error {}

/** The bodies {@linkcode isQueueFull} read, by response. */
const queueFullBodies = new WeakMap<ClientResponse, string>();

/** The client of relays given none. */
let defaultClient: HttpClient | undefined;

/** Whether a 503's body is the `queue_full` error (our instances', vLLM-style); reads the body. */
async function isQueueFull(response: ClientResponse): Promise<boolean> {
  const text = await response.text();
  queueFullBodies.set(response, text);
  try {
    return (JSON.parse(text) as { error?: { code?: unknown } })?.error?.code === "queue_full";
  } catch {
    return false;
  }
}

/** An upstream fault, as opposed to the client going away. */
class UpstreamFault extends Error {}

/** Aborts when the upstream has been silent for `timeoutMs`; `kick` restarts the wait. */
class Watchdog {
  readonly controller = new AbortController();
  readonly #timeoutMs: number;
  #timer: ReturnType<typeof setTimeout> | undefined;
  constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
    this.kick();
  }
  kick(): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(
      () => this.controller.abort(new UpstreamFault(`no answer within ${this.#timeoutMs} ms`)),
      this.#timeoutMs,
    );
  }
  stop(): void {
    clearTimeout(this.#timer);
  }
}

/** The body sent upstream: the client's, asking for the usage chunk when streaming. */
function upstreamBody(r: RelayRequest): string | Uint8Array {
  if (r.rawBody !== undefined && (!r.stream || r.includeUsage)) return r.rawBody; // asks for it already
  if (!r.stream) return JSON.stringify(r.body);
  const options = r.body.stream_options;
  const own = options !== null && typeof options === "object" ? options : {};
  return JSON.stringify({ ...r.body, stream_options: { ...own, include_usage: true } });
}

/** Whether a chunk (completion or chat) carries generated text. */
function hasText(chunk: Record<string, unknown>): boolean {
  const choices = chunk.choices;
  if (!Array.isArray(choices)) return false;
  return choices.some((c) => {
    const text = c?.text ?? c?.delta?.content;
    return typeof text === "string" && text.length > 0;
  });
}

/** The usage an OpenAI body or chunk carries, if any. */
function usageOf(value: Record<string, unknown>): Record<string, unknown> | undefined {
  const usage = value.usage;
  return usage !== null && typeof usage === "object" ? usage as Record<string, unknown> : undefined;
}

function count(value: unknown, fallback: number): number {
  return typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : fallback;
}

/** Our counts from an upstream's usage, with fallbacks where it gives none. */
function relayUsage(
  usage: Record<string, unknown> | undefined,
  cachedTokens: number | undefined,
  promptTokens: number,
  output: number,
): RelayUsage {
  return {
    promptTokens: count(usage?.prompt_tokens, promptTokens),
    cachedTokens: count(cachedTokens, 0),
    outputTokens: count(usage?.completion_tokens, output),
  };
}

/**
 * Why an attempt that threw failed: our own verdicts are answers, a
 * watchdog's is silence, the gateway's own want of descriptors says nothing
 * about the upstream (unknown, as silence), the rest the connection's.
 */
export function causeOf(error: unknown, signal: AbortSignal): FailureCause {
  if (signal.aborted && signal.reason instanceof UpstreamFault) return "timeout";
  if (error instanceof UpstreamFault) return "answer";
  return isLocalExhaustion(error) ? "timeout" : "connection";
}

/** Whether `error` (or its cause: fetch wraps the socket's error) is this process running out of descriptors. */
export function isLocalExhaustion(error: unknown): boolean {
  for (let e = error, depth = 0; e !== undefined && e !== null && depth < 4; depth++) {
    if (isDescriptorExhaustion(e)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * Runs one attempt: never throws; reports through `on`.
 *
 * @example
 * ```ts
 * await relayAttempt({ url, body, stream: true, includeUsage: false, headers, timeoutMs: 30_000, promptTokens, client }, events);
 * ```
 */
export async function relayAttempt(r: RelayRequest, on: RelayEvents): Promise<void> {
  await new Relay(r, on).run();
}

/** One attempt's state: whether the client was answered, and its stream. */
class Relay {
  readonly #r: RelayRequest;
  readonly #on: RelayEvents;
  readonly #watchdog: Watchdog;
  readonly #signal: AbortSignal;
  #sse: SseWriter | undefined;
  #answered = false;

  constructor(r: RelayRequest, on: RelayEvents) {
    this.#r = r;
    this.#on = on;
    this.#watchdog = new Watchdog(r.timeoutMs);
    this.#signal = AbortSignal.any([r.client.signal, this.#watchdog.controller.signal]);
  }

  async run(): Promise<void> {
    try {
      const client = this.#r.httpClient ?? (defaultClient ??= new HttpClient());
      const response = await client.request(this.#r.url, {
        method: "POST",
        headers: this.#r.authorization
          ? { "content-type": "application/json", authorization: this.#r.authorization }
          : { "content-type": "application/json" },
        body: upstreamBody(this.#r),
        signal: this.#signal,
      });
      this.#on.heard();
      // A full queue is the upstream's answer about this request (the simulator drops it), not a fault of
      // the upstream: passed through like a 4xx, neither retried nor held against the upstream.
      if (response.status === 503 && await isQueueFull(response)) return this.#rejectedText(response);
      if (response.status >= 500 || response.status === 429) {
        if (!response.bodyUsed) await response.cancel().catch(() => {});
        throw new UpstreamFault(`the upstream answered ${response.status}`);
      }
      if (!response.ok) return await this.#rejected(response);
      const type = response.headers.get("content-type") ?? "";
      if (this.#r.stream && type.includes("text/event-stream")) {
        return await this.#stream(response.body);
      }
      return await this.#whole(response);
    } catch (error) {
      this.#fault(error);
    } finally {
      this.#watchdog.stop();
      this.#sse?.close();
    }
  }

  /** Where an attempt that threw ends: the client left, it may be retried, or its stream broke. */
  #fault(error: unknown): void {
    if (this.#r.client.signal.aborted) return this.#cancelled();
    const reason = this.#signal.aborted && this.#signal.reason instanceof UpstreamFault
      ? this.#signal.reason.message
      : error instanceof Error
      ? error.message
      : String(error);
    const cause = causeOf(error, this.#signal);
    if (!this.#answered) return this.#on.failed(reason, cause);
    this.#sse?.send({
      error: {
        message: `The upstream failed mid-stream: ${reason}`,
        type: "upstream_error",
        param: null,
        code: null,
      },
    });
    this.#on.ended("broken", cause);
  }

  /** The client left, or the gateway gave up on the request (then its stream says why). */
  #cancelled(): void {
    const reason = this.#r.client.signal.reason;
    if (reason instanceof GatewayShutdown) {
      this.#sse?.send({
        error: { message: reason.message, type: "service_unavailable", param: null, code: null },
      });
    }
    this.#on.ended("cancelled");
  }

  #respond(response: Response): void {
    this.#answered = true;
    this.#on.respond(response);
  }

  /** The upstream's own 4xx: passed through as it is. */
  async #rejected(response: ClientResponse): Promise<void> {
    this.#rejectedText(response, await response.text());
  }

  /** Passes the upstream's refusal through as it is. */
  #rejectedText(response: ClientResponse, text = queueFullBodies.get(response) ?? ""): void {
    const headers = new Headers(this.#r.headers);
    headers.set("content-type", response.headers.get("content-type") ?? "application/json");
    this.#respond(new Response(text, { status: response.status, headers }));
    this.#on.ended("rejected");
  }

  async #whole(response: ClientResponse): Promise<void> {
    const text = await response.text();
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(text);
    } catch {
      throw new UpstreamFault("the upstream's body is not JSON");
    }
    if (body === null || typeof body !== "object") {
      throw new UpstreamFault("the upstream's body is not an object");
    }
    const cached = fillCachedTokens(body);
    this.#on.firstToken();
    this.#respond(jsonResponse(response.status, body, this.#r.headers));
    this.#on.finished(relayUsage(usageOf(body), cached, this.#r.promptTokens, 0));
  }

  /**
   * Relays events one by one; the client's stream opens with the first. The
   * usage chunk gets `cached_tokens` derived from the latest `timings`
   * (llama-server sends them on its final chunk, beside the usage).
   */
  async #stream(body: ByteStream): Promise<void> {
    let usage: Record<string, unknown> | undefined, cached: number | undefined, timings: unknown;
    let texts = 0, done = false;
    // Events that came in one read go on together: the client's stream gets them in one write.
    events: for await (const batch of readSseEvents(body)) {
      this.#watchdog.kick();
      this.#on.heard();
      for (const data of batch) {
        if (data === "[DONE]") {
          done = true;
          break events;
        }
        const chunk = parseChunk(data);
        if ("error" in chunk) {
          throw new UpstreamFault(`the upstream sent an error event: ${JSON.stringify(chunk.error)}`);
        }
        if (chunk.timings !== null && typeof chunk.timings === "object") timings = chunk.timings;
        const own = usageOf(chunk);
        if (own !== undefined) {
          usage = own;
          cached = fillCachedTokens(chunk, timings);
        }
        if (!this.#r.includeUsage) {
          if (own !== undefined && Array.isArray(chunk.choices) && chunk.choices.length === 0) continue;
          delete chunk.usage;
        }
        if (hasText(chunk) && texts++ === 0) this.#on.firstToken();
        if (!this.#open().send(chunk)) break events;
      }
    }
    if (this.#r.client.signal.aborted) return this.#cancelled();
    if (!done) throw new UpstreamFault("the upstream's stream ended before [DONE]");
    this.#open().done();
    this.#on.finished(relayUsage(usage, cached, this.#r.promptTokens, texts));
  }

  /** The client's stream, opened (and the client answered) on first use. */
  #open(): SseWriter {
    if (this.#sse === undefined) {
      this.#sse = new SseWriter(() => this.#r.client.abort());
      this.#respond(this.#sse.response(this.#r.headers));
    }
    return this.#sse;
  }
}

/** One event's JSON object. */
function parseChunk(data: string): Record<string, unknown> {
  let chunk: unknown;
  try {
    chunk = JSON.parse(data);
  } catch {
    throw new UpstreamFault(`the upstream sent an event that is not JSON: ${data.slice(0, 80)}`);
  }
  if (chunk === null || typeof chunk !== "object" || Array.isArray(chunk)) {
    throw new UpstreamFault(`the upstream sent an event that is not a JSON object: ${data.slice(0, 80)}`);
  }
  return chunk as Record<string, unknown>;
}
