/**
 * @module
 * Simulated instances as OpenAI-compatible HTTP servers (`deno task serve`):
 * one server per instance on its own port, every instance actor in this
 * thread on one {@linkcode LiveRuntime} paced by the wall clock. A request
 * off the network is tokenized (scenarios/wire/tokenizer.ts), becomes a
 * simulator `Request` stamped with the wall clock's simulated now, and is
 * `serve`d to the instance; the instance's first token, its paced further
 * tokens and its completion come back through the {@linkcode ClientBridge}
 * and go out as the OpenAI response — streamed (SSE) or whole. `/metrics`
 * speaks vLLM's metric names (scenarios/wire/prometheus.ts).
 *
 * The simulated model's output: `max_tokens` tokens when `ignore_eos` is
 * set, else it "stops" after a length drawn from the scenario's
 * `workload.outputTokens` (capped by `max_tokens`, at least `min_tokens`),
 * like a model meeting its end-of-sequence token. `max_tokens` defaults as
 * OpenAI's: 16 for completions, the rest of the context for chat.
 */
import { BatchingInstance } from "../../actors/instances/batching_instance.ts";
import { ClientBridge, type ClientBridgeCommand, type ClientSink } from "../../actors/client_bridge.ts";
import { sampleLength } from "../../actors/workload/distributions.ts";
import { type ModelInstance, poolOfInstance } from "../../actors/instances/instance_model.ts";
import { instanceModel } from "../../actors/instances/instance_models.ts";
import type {
  CompletionRecord,
  DropReason,
  FirstToken,
  InstanceStatus,
  MetricsCommand,
  Request as SimRequest,
  ServeCommand,
} from "../../actors/protocol.ts";
import type { ActorRef, Message } from "../../actors/runtime/kernel.ts";
import { LiveRuntime } from "../../actors/runtime/live_runtime.ts";
import { createRandomStream, type RandomStream } from "../../actors/runtime/random_stream.ts";
import type { WallTime } from "../../actors/runtime/wall_clock.ts";
import type { LagStats } from "../../actors/runtime/worker_runtime.ts";
import type { SimulationConfig } from "../../actors/topology.ts";
import { errorResponse, jsonResponse, readJsonBody, serverUrl, SseWriter } from "./http.ts";
import {
  type ConnectionLimits,
  type ConnectionPool,
  type ConnectionStats,
  type HttpServer,
  serveHttp,
} from "./http_server.ts";
import {
  chunkBody,
  completionBody,
  type Endpoint,
  modelsBody,
  OpenAIError,
  type ParsedRequest,
  parseRequest,
  resolveMaxTokens,
  unexpectedError,
  type Usage,
  usageChunkBody,
} from "./openai.ts";
import { VllmMetrics } from "./prometheus.ts";
import { outputWord, promptRequest, tokenize } from "./tokenizer.ts";

/** Options for {@linkcode startSimFleet}. */
export interface SimFleetOptions {
  /** The scenario: its instances (count, model, engine), seed, and workload (output lengths, prefix length). */
  readonly config: SimulationConfig;
  /** Simulated ms per wall ms. */
  readonly speed: number;
  /** The address to bind. */
  readonly host: string;
  /** The model name served; others get OpenAI's 404. */
  readonly servedModelName: string;
  /** Largest request body, bytes. */
  readonly maxBodyBytes: number;
  /** Largest prompt plus completion, tokens. */
  readonly maxModelLen: number;
  /** The wall time source. */
  readonly wallTime: WallTime;
  /** Ports to bind, one per instance. @default 0 each (ephemeral) */
  readonly ports?: readonly number[];
  /** Called once when an instance actor throws (the fleet then answers 500). */
  readonly onError?: (error: Error) => void;
  /** What each instance's server accepts of its clients, and the slots it shares with the process's other servers. @default connectionLimits() */
  readonly connections?: { readonly limits?: Partial<ConnectionLimits>; readonly pool?: ConnectionPool };
}

/** A running fleet of simulated instances. */
export interface SimFleet {
  /** Each instance's base URL (`http://host:port`). */
  readonly urls: readonly string[];
  /** The live runtime's lag figures, over its most recent `recent` deliveries (at most 65,536; default all kept). */
  lagStats(recent?: number): LagStats;
  /** Requests accepted and not finished. */
  inFlight(): number;
  /** Each instance server's connections: open, and closed by a timeout. */
  connectionStats(): ConnectionStats[];
  /** Stop taking requests: `/health` and new requests answer 503 at once; those in flight go on. */
  drain(): void;
  /** Drains, waits up to `graceMs` wall ms for requests in flight, ends the rest, and closes every server. */
  close(graceMs: number): Promise<void>;
}

/** One request in flight, as its client waits for it. */
interface Pending {
  readonly id: number;
  readonly instance: number;
  /** The simulator's request. */
  readonly request: SimRequest;
  /** Being served right now (a refusal then is answered by the caller, with a status code). */
  admitting: boolean;
  readonly parsed: ParsedRequest;
  readonly promptTokens: number;
  readonly outputTokens: number;
  readonly finishReason: "stop" | "length";
  readonly createdS: number;
  readonly responseId: string;
  /** Tokens sent so far (streaming). */
  emitted: number;
  sse: SseWriter | undefined;
  /** Non-streaming: answers the client. */
  answer: ((response: Response) => void) | undefined;
  dropped: DropReason | undefined;
}

/** Starts the instances of `options.config` and one HTTP server for each. */
export function startSimFleet(options: SimFleetOptions): Promise<SimFleet> {
  const fleet = new Fleet(options);
  fleet.listen(); // serveHttp binds at once
  return Promise.resolve(fleet);
}

class Fleet implements SimFleet, ClientSink {
  readonly #options: SimFleetOptions;
  readonly #runtime: LiveRuntime;
  readonly #instances: ActorRef<ServeCommand>[] = [];
  readonly #bridge: ActorRef<ClientBridgeCommand>;
  readonly #metrics: VllmMetrics[] = [];
  readonly #lengths: RandomStream[] = [];
  readonly #pending = new Map<number, Pending>();
  readonly #servers: HttpServer[] = [];
  #urls: string[] = [];
  #nextId = 0;
  #draining = false;
  #failure: Error | undefined;

  constructor(options: SimFleetOptions) {
    this.#options = options;
    const { config } = options;
    this.#runtime = new LiveRuntime({
      seed: config.seed,
      wallTime: options.wallTime,
      speed: options.speed,
      onError: (error) => {
        this.#failure = error;
        options.onError?.(error);
      },
    });
    const bridge = this.#runtime.spawn("clients", new ClientBridge(this));
    this.#bridge = bridge;
    const model = instanceModel(config.instances.model);
    for (let i = 0; i < config.instances.count; i++) {
      // Nothing routes on the instances' reports here: they go to the bridge, which ignores them.
      const instance = model.create(i, config.instances, bridge as ActorRef<MetricsCommand>, {
        intervalMs: 0,
        delayMs: 0,
        blockEvents: false,
        firstTokensTo: bridge as ActorRef<FirstToken>,
      });
      this.#instances.push(this.#runtime.spawn(`instance/${i}`, instance));
      const engine = poolOfInstance(config.instances, i).engine;
      this.#metrics.push(
        new VllmMetrics(options.servedModelName, {
          maxModelLen: options.maxModelLen,
          cacheConfig: {
            blockSize: engine.blockTokens,
            numGpuBlocks: engine.kvBlocks,
            enablePrefixCaching: engine.prefixCaching,
          },
        }),
      );
      this.#lengths.push(createRandomStream(config.seed, `serve/length/${i}`));
    }
  }

  get urls(): readonly string[] {
    return this.#urls;
  }

  listen(): void {
    this.#runtime.start();
    const ports = this.#options.ports;
    for (let i = 0; i < this.#instances.length; i++) {
      const server = serveHttp({
        hostname: this.#options.host,
        port: ports?.[i] ?? 0,
        handler: (request) => this.#handle(i, request),
        limits: this.#options.connections?.limits,
        pool: this.#options.connections?.pool,
        name: `instance ${i}`,
      });
      this.#servers.push(server);
    }
    this.#urls = this.#servers.map((s) => serverUrl(s.addr));
  }

  lagStats(recent?: number): LagStats {
    return this.#runtime.lagStats(recent);
  }

  inFlight(): number {
    return this.#pending.size;
  }

  connectionStats(): ConnectionStats[] {
    return this.#servers.map((s) => s.stats());
  }

  drain(): void {
    this.#draining = true;
  }

  async close(graceMs: number): Promise<void> {
    this.drain();
    const deadline = this.#options.wallTime.now() + graceMs;
    while (this.#pending.size > 0 && this.#options.wallTime.now() < deadline) {
      await this.#options.wallTime.sleep(Math.min(20, deadline - this.#options.wallTime.now()));
    }
    for (const pending of [...this.#pending.values()]) {
      this.#fail(
        pending,
        new OpenAIError(503, "The server is shutting down.", { type: "service_unavailable" }),
      );
    }
    await this.#runtime.stop();
    await Promise.all(this.#servers.map((s) => s.shutdown()));
  }

  // ---- HTTP ----------------------------------------------------------------

  /**
   * Answers one request: an {@linkcode OpenAIError} as its JSON body; any
   * other error (a bug) as a 500 in the same shape and one line on stderr,
   * never a stack trace per request.
   */
  async #handle(instance: number, request: Request): Promise<Response> {
    const headers = { "x-sim-instance": String(instance) };
    const path = new URL(request.url).pathname;
    try {
      const endpoint: Endpoint | undefined = path === "/v1/completions"
        ? "completion"
        : path === "/v1/chat/completions"
        ? "chat"
        : undefined;
      if (endpoint !== undefined) {
        if (request.method !== "POST") throw methodNotAllowed(request.method, path);
        return await this.#complete(instance, endpoint, request, headers);
      }
      if (request.method !== "GET") {
        if (GET_PATHS.has(path)) throw methodNotAllowed(request.method, path);
        throw notFound(path);
      }
      return this.#get(instance, path, headers);
    } catch (error) {
      if (error instanceof OpenAIError) return errorResponse(error, headers);
      const failure = unexpectedError(error);
      console.error(`sim instance ${instance}: ${request.method} ${path}: ${failure.message}`);
      return errorResponse(failure, headers);
    }
  }

  #get(instance: number, path: string, headers: Record<string, string>): Response {
    switch (path) {
      case "/health":
        return this.#draining || this.#failure
          ? errorResponse(
            new OpenAIError(503, "The server is shutting down.", { type: "service_unavailable" }),
            headers,
          )
          : new Response(null, { status: 200, headers });
      case "/v1/models":
        return jsonResponse(
          200,
          modelsBody(this.#options.servedModelName, nowSeconds(), this.#options.maxModelLen),
          headers,
        );
      case "/metrics":
        return new Response(this.#metricsText(instance), {
          headers: { ...headers, "content-type": "text/plain; version=0.0.4; charset=utf-8" },
        });
      default:
        throw notFound(path);
    }
  }

  #metricsText(instance: number): string {
    const actor = this.#runtime.kernel.actorOf<ModelInstance>(this.#instances[instance] as ActorRef<Message>);
    const status = actor.snapshot();
    const metrics = this.#metrics[instance];
    metrics.setLoad({ running: status.running, waiting: status.waiting, kvUsage: status.kvUtilization });
    if (actor instanceof BatchingInstance) metrics.setPreemptions(actor.preemptions);
    return metrics.text();
  }

  async #complete(
    instance: number,
    endpoint: Endpoint,
    request: Request,
    headers: Record<string, string>,
  ): Promise<Response> {
    if (this.#draining || this.#failure) {
      throw new OpenAIError(503, "The server is not taking requests.", { type: "service_unavailable" });
    }
    const body = await readJsonBody(request, this.#options.maxBodyBytes, { requireJsonContentType: true });
    const parsed = parseRequest(body, endpoint);
    if (parsed.model !== this.#options.servedModelName) {
      throw new OpenAIError(404, `The model \`${parsed.model}\` does not exist.`, {
        param: "model",
        code: "model_not_found",
      });
    }
    const pending = this.#prepare(instance, parsed);
    // The client's end is attached before the request is served: serving delivers everything
    // already due, which at a high speed (or a free engine) may be its first token or its completion.
    let answer: Promise<Response> | Response;
    if (parsed.stream) {
      pending.sse = new SseWriter(() => this.#clientGone(pending));
      answer = pending.sse.response(headers);
    } else {
      answer = new Promise<Response>((resolve) => {
        pending.answer = (response) => {
          for (const [name, value] of Object.entries(headers)) response.headers.set(name, value);
          resolve(response);
        };
      });
    }
    this.#serve(pending);
    if (pending.dropped !== undefined) {
      pending.sse?.close();
      throw dropError(pending.dropped, pending, this.#options.maxModelLen);
    }
    return await answer;
  }

  /** Tokenizes, checks the lengths, and builds the request (not served yet). */
  #prepare(instance: number, parsed: ParsedRequest): Pending {
    const { config, maxModelLen } = this.#options;
    const tokens = typeof parsed.prompt === "string" ? tokenize(parsed.prompt) : parsed.prompt;
    const param = parsed.endpoint === "chat" ? "messages" : "prompt";
    if (tokens.length === 0) throw new OpenAIError(400, "The prompt is empty: it has no token.", { param });
    const maxTokens = resolveMaxTokens(parsed, tokens.length, maxModelLen);
    const natural = Math.max(1, sampleLength(config.workload.outputTokens, this.#lengths[instance]));
    const length = parsed.ignoreEos ? maxTokens : Math.min(maxTokens, Math.max(natural, parsed.minTokens));
    const id = this.#nextId++;
    const arrivalMs = this.#runtime.nowMs();
    const simRequest = promptRequest(id, arrivalMs, tokens, length, {
      blockTokens: config.instances.engine.blockTokens,
      prefixTokens: config.workload.prefix.tokens,
    });
    const pending: Pending = {
      id,
      instance,
      request: simRequest,
      admitting: false,
      parsed,
      promptTokens: tokens.length,
      outputTokens: length,
      finishReason: length < maxTokens ? "stop" : "length",
      createdS: nowSeconds(),
      responseId: `${parsed.endpoint === "chat" ? "chatcmpl" : "cmpl"}-sim${instance}-${id}`,
      emitted: 0,
      sse: undefined,
      answer: undefined,
      dropped: undefined,
    };
    return pending;
  }

  /** Serves the request to its instance: delivered at once, with everything else due (a refusal included). */
  #serve(pending: Pending): void {
    this.#pending.set(pending.id, pending);
    pending.admitting = true;
    const replyTo = this.#bridge as ActorRef<InstanceStatus>;
    const serve: ServeCommand = { type: "serve", request: pending.request, replyTo };
    this.#runtime.inject(this.#instances[pending.instance], serve, pending.request.arrivalMs);
    pending.admitting = false;
  }

  // ---- The bridge's events -------------------------------------------------

  firstToken(requestId: number, _timeMs: number): void {
    const pending = this.#pending.get(requestId);
    if (pending?.sse === undefined) return;
    if (pending.parsed.endpoint === "chat") pending.sse.send(this.#chunk(pending, "", null, true));
    this.#sendToken(pending, pending.outputTokens === 1 ? pending.finishReason : null);
  }

  token(requestId: number, _timeMs: number): boolean {
    const pending = this.#pending.get(requestId);
    if (pending?.sse === undefined || pending.sse.closed) return false;
    if (pending.emitted >= pending.outputTokens - 1) return false;
    this.#sendToken(pending, null);
    return pending.emitted < pending.outputTokens - 1;
  }

  completed(record: CompletionRecord): void {
    const pending = this.#pending.get(record.requestId);
    if (pending === undefined) return;
    this.#pending.delete(record.requestId);
    this.#observe(pending, record);
    const usage = usageOf(pending, record.cachedTokens);
    if (pending.answer !== undefined) {
      const text = Array.from({ length: pending.outputTokens }, (_, i) => outputWord(i)).join("");
      pending.answer(
        jsonResponse(
          200,
          completionBody({ ...this.#about(pending), text, finishReason: pending.finishReason, usage }),
        ),
      );
      return;
    }
    const sse = pending.sse;
    if (sse === undefined || sse.closed) return;
    // The rest of the tokens, if pacing fell short (the last one carries the finish reason).
    while (pending.emitted < pending.outputTokens) {
      this.#sendToken(pending, pending.emitted === pending.outputTokens - 1 ? pending.finishReason : null);
    }
    if (pending.parsed.includeUsage) sse.send(usageChunkBody({ ...this.#about(pending), usage }));
    sse.done();
  }

  dropped(requestId: number, reason: DropReason, _timeMs: number): void {
    const pending = this.#pending.get(requestId);
    if (pending === undefined) return;
    pending.dropped = reason;
    // A drop is decided when the request is served, before its client got an answer:
    // `#complete` answers it with a status code. Should one ever come later, end the client's wait here.
    if (!pending.admitting) {
      this.#fail(pending, dropError(reason, pending, this.#options.maxModelLen));
    }
    this.#pending.delete(requestId);
  }

  // ---- Helpers ---------------------------------------------------------------

  #about(pending: Pending) {
    return {
      id: pending.responseId,
      createdS: pending.createdS,
      model: this.#options.servedModelName,
      endpoint: pending.parsed.endpoint,
    };
  }

  #chunk(pending: Pending, text: string, finishReason: "stop" | "length" | null, role = false): unknown {
    return chunkBody({
      ...this.#about(pending),
      text,
      finishReason,
      role,
      ...(pending.parsed.includeUsage && { usage: null }),
    });
  }

  #sendToken(pending: Pending, finishReason: "stop" | "length" | null): void {
    pending.sse!.send(this.#chunk(pending, outputWord(pending.emitted), finishReason));
    pending.emitted++;
  }

  #observe(pending: Pending, record: CompletionRecord): void {
    const out = record.outputTokens;
    this.#metrics[pending.instance].observe({
      promptTokens: record.promptTokens,
      cachedTokens: record.cachedTokens,
      outputTokens: out,
      ttftS: (record.firstTokenMs - record.arrivalMs) / 1000,
      tpotS: out > 1 ? (record.endMs - record.firstTokenMs) / (out - 1) / 1000 : null,
      e2eS: (record.endMs - record.arrivalMs) / 1000,
      queueS: (record.startMs - record.arrivalMs) / 1000,
      finishReason: pending.finishReason,
    });
  }

  /** The client went away mid-stream: nothing more is written; the engine finishes the request (no abort is modelled). */
  #clientGone(pending: Pending): void {
    pending.sse?.close();
  }

  /** Ends a client's wait with an error: an error event on a stream, an error response otherwise. */
  #fail(pending: Pending, error: OpenAIError): void {
    this.#pending.delete(pending.id);
    if (pending.answer !== undefined) pending.answer(errorResponse(error));
    else if (pending.sse !== undefined && !pending.sse.closed) {
      pending.sse.send(error.body());
      pending.sse.close();
    }
  }
}

/** The Usage block of a finished request. */
function usageOf(pending: Pending, cachedTokens: number): Usage {
  return {
    prompt_tokens: pending.promptTokens,
    completion_tokens: pending.outputTokens,
    total_tokens: pending.promptTokens + pending.outputTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

/** The error a refused request gets: too long for the engine's KV (400), or a full queue (503). */
function dropError(reason: DropReason, pending: Pending, maxModelLen: number): OpenAIError {
  if (reason === "too_long") {
    return new OpenAIError(
      400,
      `The prompt (${pending.promptTokens} tokens) needs more KV cache than the instance has (maximum context length ${maxModelLen}).`,
      { param: pending.parsed.endpoint === "chat" ? "messages" : "prompt" },
    );
  }
  return new OpenAIError(503, "The instance's queue is full; retry later.", {
    type: "service_unavailable",
    code: "queue_full",
  });
}

const GET_PATHS: ReadonlySet<string> = new Set(["/health", "/v1/models", "/metrics"]);

function methodNotAllowed(method: string, path: string): OpenAIError {
  return new OpenAIError(405, `Method ${method} is not allowed on ${path}.`, { code: "method_not_allowed" });
}

function notFound(path: string): OpenAIError {
  return new OpenAIError(
    404,
    `No route ${path}: this server has /v1/completions, /v1/chat/completions, /v1/models, /health and /metrics.`,
    {
      code: "not_found",
    },
  );
}

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
