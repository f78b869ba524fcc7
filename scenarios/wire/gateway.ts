/**
 * @module
 * The gateway of `deno task serve`: an OpenAI-compatible HTTP front for
 * upstream servers (our simulated instances, or real vLLM/SGLang) that routes
 * with the simulator's own router actor and view. The router runs in a
 * {@linkcode WorkerRuntime} kernel (its plugin, if any, in a sandboxed Worker,
 * as in `deno task realtime`); each upstream is an {@linkcode UpstreamInstance}
 * actor there, and this module is their host: it forwards requests over HTTP,
 * scrapes `/metrics`, and injects what happened back into the kernel.
 *
 * The cache view is approximate (the gateway cannot see upstream caches); a
 * status TTL makes the router probe health and retry failed attempts within
 * `router.retryBudget`. Final failures answer 502 (`upstream_error`). A slow
 * `/metrics` is stale load, not a dead upstream: only a refused or reset
 * connection, or `scrapeFailures` failed scrapes in a row, take one down.
 */
import { GatewayMetrics } from "../../actors/metrics/gateway_metrics.ts";
import type { FailedReason } from "../../actors/metrics/metrics_collector.ts";
import { isDisaggregated } from "../../actors/instances/instance_model.ts";
import { createPolicy, policyReads } from "../../actors/policies/mod.ts";
import type { RouterCommand, ServeCommand } from "../../actors/protocol.ts";
import { routerInWorker } from "../../actors/realtime_simulation.ts";
import type { ActorRef, Message } from "../../actors/runtime/kernel.ts";
import { WallClock, type WallTime } from "../../actors/runtime/wall_clock.ts";
import { WorkerRuntime } from "../../actors/runtime/worker_runtime.ts";
import { buildRouter, metricsOptions, type SimulationConfig } from "../../actors/topology.ts";
import {
  DEFAULT_SCRAPE_FAILURES,
  type FailureCause,
  type UpstreamCommand,
  type UpstreamEvent,
  UpstreamInstance,
} from "../../actors/instances/upstream_instance.ts";
import { gatewayMetricsText, type UpstreamScrape } from "./gateway_metrics_text.ts";
import { errorResponse, jsonResponse, readJsonBody, serverUrl, SseWriter } from "./http.ts";
import {
  type ConnectionLimits,
  type ConnectionPool,
  type ConnectionStats,
  type HttpServer,
  NO_CONNECTIONS,
  serveHttp,
  wholeBodyOf,
} from "./http_server.ts";
import { livePageHtml } from "./live_page.ts";
import {
  type Endpoint,
  modelNotFound,
  OpenAIError,
  type ParsedRequest,
  parseRequest,
  unexpectedError,
} from "./openai.ts";
import { parsePrometheus, parseTypes, readLoad, VLLM_TTFT_BUCKETS_S } from "./prometheus.ts";
import { BucketHistogram } from "./prometheus.ts";
import { promptRequest, tokenize } from "./tokenizer.ts";
import { HttpClient } from "./http_client.ts";
import { GatewayShutdown, isLocalExhaustion, relayAttempt, type RelayEvents } from "./upstream_relay.ts";

/** Options for {@linkcode startGateway}. */
export interface GatewayOptions {
  /**
   * The scenario: its policy, `router` (replicas, retryBudget, statusTtlMs),
   * seed, `instances.engine.blockTokens` and `workload.prefix.tokens` (how
   * prompts become the simulator's requests); `instances.count` is replaced
   * by the number of upstreams.
   */
  readonly config: SimulationConfig;
  /** The upstreams' base URLs (`http://127.0.0.1:8001`, no `/v1`). */
  readonly upstreams: readonly string[];
  /** The address to bind. */
  readonly host: string;
  /** The port to bind; 0 for an ephemeral one. */
  readonly port: number;
  /** Simulated ms per wall ms of the router's clock. */
  readonly speed: number;
  /** The wall time source. */
  readonly wallTime: WallTime;
  /** Largest request body, bytes. */
  readonly maxBodyBytes: number;
  /** Wall ms between two `/metrics` scrapes of each upstream. @default 200 */
  readonly scrapeMs?: number;
  /**
   * Wall ms a scrape may take before it counts as failed. A busy engine answers
   * late (llama-server answers `/metrics` from its main loop, between two
   * batches), and a late answer is still load; a long wait costs only staleness.
   * @default 10000
   */
  readonly scrapeTimeoutMs?: number;
  /**
   * Failed scrapes in a row (timed out, or a 5xx), with no sign of life between
   * them, after which an upstream is taken as down. A refused or reset
   * connection takes it down at once.
   * @default 3
   */
  readonly scrapeFailures?: number;
  /** Wall ms an upstream may stay silent (before answering, and between stream events) before the attempt fails. */
  readonly upstreamTimeoutMs: number;
  /** A router plugin, run in a permission-less Worker. @default the config's built-in policy */
  readonly plugin?: {
    /** The plugin module (`file:` URL). */
    readonly url: string;
    /** Its name, for the live page until its Worker says. */
    readonly name: string;
    /** What its Worker may read. @default the plugin's directory and `actors/` */
    readonly readPaths?: readonly string[];
    /** Wall ms it may take to load and to answer each message. */
    readonly timeoutMs: number;
  };
  /** The only model name served (others get OpenAI's 404). @default any: the upstreams decide */
  readonly servedModelName?: string;
  /** What the gateway's server accepts of its clients, and the slots it shares with the process's other servers. @default connectionLimits() */
  readonly connections?: { readonly limits?: Partial<ConnectionLimits>; readonly pool?: ConnectionPool };
  /**
   * Wall ms the router may take to decide a request (a plugin's time, or the
   * gateway's own lagging loop, not counted), after which it is taken as
   * broken: every request and `/health` answer 503 and `onFatal` is called.
   * @default the plugin's `timeoutMs` × 2, else 10,000
   */
  readonly routeTimeoutMs?: number;
  /** Called once, with one line, when the router's run fails (a plugin overran its time): the process should exit 1. */
  readonly onFatal: (line: string) => void;
  /**
   * A warning for the live page to show while it holds (`deno task serve`'s
   * simulated fleet lagging the wall clock), or null. @default none
   */
  readonly warning?: () => string | null;
}

/** One upstream as the live page shows it. */
export interface UpstreamSnapshot {
  readonly url: string;
  /** Taken as alive: routable (see {@linkcode GatewayOptions.scrapeFailures}). */
  readonly healthy: boolean;
  /** Scrapes failed in a row since its last sign of life. */
  readonly failedScrapes: number;
  /** From its last scrape; null when it exposes no load metrics we read. */
  readonly waiting: number | null;
  readonly running: number | null;
  readonly kvUsage: number | null;
  /** Requests the gateway forwarded there and not finished. */
  readonly inFlight: number;
  /** Routing decisions for it (retries included). */
  readonly routed: number;
  readonly completed: number;
  /** cached_tokens / prompt_tokens over its completed requests (usage); null before any. */
  readonly hitRate: number | null;
}

/** What the live page shows: the gateway's counts, TTFT percentiles and every upstream. */
export interface GatewaySnapshot {
  /** The router's simulated now, ms. */
  readonly timeMs: number;
  readonly policy: string;
  readonly draining: boolean;
  /** Requests to the completion endpoints: received, in flight, and how they ended. */
  readonly requests: Readonly<Record<Outcome | "received" | "inFlight" | "retries", number>>;
  /** Time to first token (simulated ms, from the gateway's arrival to the upstream's first text). */
  readonly ttftMs: {
    readonly mean: number | null;
    readonly p50: number | null;
    readonly p90: number | null;
    readonly p99: number | null;
  };
  /** cached_tokens / prompt_tokens over every completed request; null before any. */
  readonly hitRate: number | null;
  readonly upstreams: readonly UpstreamSnapshot[];
  /** What the live page shows as a warning now (see {@linkcode GatewayOptions.warning}); null: none. */
  readonly warning: string | null;
}

/** A running gateway. */
export interface Gateway {
  /** Its base URL. */
  readonly url: string;
  /** Stop taking requests: `/health` and new requests answer 503 at once; those in flight go on. */
  drain(): void;
  /** Drains, waits up to `graceMs` wall ms for requests in flight, ends the rest (503), and closes everything. */
  close(graceMs: number): Promise<void>;
  /** What the live page shows. */
  snapshot(): GatewaySnapshot;
  /** Its server's connections: open, and closed by a timeout. */
  connectionStats(): ConnectionStats;
}

/** How a request to a completion endpoint ended. */
export type Outcome =
  | "completed"
  | "failed"
  | "cancelled"
  | "broken"
  | "rejected"
  | "invalid"
  | "unavailable";

/** Every {@linkcode Outcome}, in display order. */
export const OUTCOMES: readonly Outcome[] = [
  "completed",
  "failed",
  "cancelled",
  "broken",
  "rejected",
  "invalid",
  "unavailable",
];

/** The default wall ms between scrapes. */
export const DEFAULT_SCRAPE_MS = 200;

/** The default wall ms a scrape may take. */
export const DEFAULT_SCRAPE_TIMEOUT_MS = 10_000;

export { DEFAULT_SCRAPE_FAILURES };

/**
 * Wall ms an idle pooled connection to an upstream is kept: under the
 * keep-alive timeout of every server the gateway fronts (uvicorn's 5 s, which
 * vLLM and SGLang serve with; cpp-httplib's 5 s in llama-server; our own
 * instances' 30 s), so the gateway never sends a request on a connection the
 * upstream is closing.
 */
export const UPSTREAM_POOL_IDLE_MS = 4000;

/** Wall ms a built-in router may take to decide a request before the gateway takes it as broken. */
export const DEFAULT_ROUTE_TIMEOUT_MS = 10_000;

/** Wall ms between two snapshots on `/events`. */
const EVENTS_MS = 500;

const PATHS: Readonly<Record<Endpoint, string>> = {
  completion: "/v1/completions",
  chat: "/v1/chat/completions",
};

/**
 * The config the gateway's router runs: `upstreamCount` instances, the
 * approximate cache view, reports at once with no network delay, and no
 * status TTL unless the scenario sets one: whether an upstream is alive is
 * judged by its {@linkcode UpstreamInstance} on wall-clock evidence
 * (connections, scrapes, answers), which it reports at once; a TTL in the
 * router's simulated time would take a live upstream down whenever the
 * gateway's own loop lagged past it. No faults, no autoscaler.
 * @throws {RangeError} for a disaggregated fleet (one pool of upstreams only).
 */
export function gatewayConfig(
  config: SimulationConfig,
  upstreamCount: number,
): SimulationConfig {
  if (isDisaggregated(config.instances)) {
    throw new RangeError(
      "gateway: instances.pools: a disaggregated fleet cannot be fronted (one pool of upstreams)",
    );
  }
  return {
    ...config,
    instances: { ...config.instances, count: upstreamCount },
    router: {
      ...config.router,
      cacheView: "approximate",
      statusIntervalMs: 0,
      networkDelayMs: 0,
      upstreamFailures: true,
    },
    faults: undefined,
    autoscale: undefined,
    untilMs: undefined,
  };
}

/** Checks the options a user may get wrong, naming the field. */
function checkOptions(o: GatewayOptions): void {
  const fail = (field: string, expected: string, got: unknown): never => {
    throw new RangeError(`gateway.${field}: expected ${expected}, got ${JSON.stringify(got)}`);
  };
  if (o.upstreams.length === 0) fail("upstreams", "at least one URL", []);
  o.upstreams.forEach((u, i) => {
    let url: URL | undefined;
    try {
      url = new URL(u);
    } catch { /* reported below */ }
    if (url === undefined || (url.protocol !== "http:" && url.protocol !== "https:")) {
      fail(`upstreams[${i}]`, "an http:// or https:// URL", u);
    }
  });
  if (!(o.speed > 0 && Number.isFinite(o.speed))) fail("speed", "a finite number > 0", o.speed);
  if (!(Number.isInteger(o.maxBodyBytes) && o.maxBodyBytes > 0)) {
    fail("maxBodyBytes", "an integer > 0", o.maxBodyBytes);
  }
  if (!(o.upstreamTimeoutMs > 0)) fail("upstreamTimeoutMs", "a number > 0", o.upstreamTimeoutMs);
  if (o.scrapeMs !== undefined && !(o.scrapeMs > 0)) fail("scrapeMs", "a number > 0", o.scrapeMs);
  if (o.scrapeTimeoutMs !== undefined && !(o.scrapeTimeoutMs > 0 && Number.isFinite(o.scrapeTimeoutMs))) {
    fail("scrapeTimeoutMs", "a finite number > 0", o.scrapeTimeoutMs);
  }
  if (o.scrapeFailures !== undefined && !(Number.isInteger(o.scrapeFailures) && o.scrapeFailures >= 1)) {
    fail("scrapeFailures", "an integer >= 1", o.scrapeFailures);
  }
}

/**
 * Starts a gateway in front of `options.upstreams`: the router's run, one
 * scrape of every upstream (so that routing starts on their load), then the
 * HTTP server.
 *
 * @example
 * ```ts
 * const gateway = await startGateway({ config, upstreams: fleet.urls, host: "127.0.0.1", port: 0, speed: 1,
 *   wallTime: systemWallTime, maxBodyBytes: DEFAULT_MAX_BODY_BYTES, upstreamTimeoutMs: 30_000,
 *   onFatal: (line) => { console.error(line); Deno.exit(1); } });
 * console.log(gateway.url);
 * await gateway.close(5000);
 * ```
 * @throws {RangeError} naming a bad option; {@linkcode SimulationError} when a plugin fails to load.
 */
export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  checkOptions(options);
  const gateway = new GatewayServer(options);
  try {
    await gateway.start();
  } catch (error) {
    await gateway.close(0);
    throw error;
  }
  return gateway;
}

/** One client request, from arrival to its answer. */
interface Exchange {
  readonly id: number;
  readonly parsed: ParsedRequest;
  readonly promptTokens: number;
  readonly arrivalWallMs: number;
  /** Aborted when the client cancels its stream (or the gateway gives up on it). */
  readonly client: AbortController;
  readonly resolve: (response: Response) => void;
  answered: boolean;
  /** Why the last attempt failed, for the 502. */
  lastError: string;
  /** The Authorization header, forwarded. */
  readonly authorization: string | null;
  /** The client's body as it came, when it came whole with its head (forwarded as is where it may be). */
  readonly rawBody: Uint8Array | undefined;
}

class GatewayServer implements Gateway {
  readonly #o: GatewayOptions;
  readonly #config: SimulationConfig;
  readonly #scrapeMs: number;
  readonly #scrapeTimeoutMs: number;
  readonly #runtime: WorkerRuntime;
  readonly #metrics: GatewayMetrics;
  readonly #upstreams: UpstreamInstance[] = [];
  readonly #upstreamRefs: ActorRef<UpstreamCommand>[] = [];
  #router!: ActorRef<RouterCommand>;
  readonly #exchanges = new Map<number, Exchange>();
  readonly #relays = new Set<Promise<void>>();
  readonly #routed: Int32Array;
  readonly #inFlight: Int32Array;
  /** Per upstream, the wall ms it last sent bytes on a request (a sign of life while a scrape waits). */
  readonly #heardWallMs: Float64Array;
  readonly #scrapes: (UpstreamScrape | undefined)[];
  readonly #outcomes = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>;
  readonly #ttft = new BucketHistogram(VLLM_TTFT_BUCKETS_S);
  readonly #stop = new AbortController();
  /** The connection pool of every request to the upstreams (see {@linkcode UPSTREAM_POOL_IDLE_MS}). */
  readonly #http = new HttpClient({ idleTimeoutMs: UPSTREAM_POOL_IDLE_MS });
  /** Requests given to the router and not yet decided (see #watchRouter). */
  readonly #undecided = new Set<number>();
  /** Decisions the router has made (see #watchRouter). */
  #decisions = 0;
  #routerWatch: ReturnType<typeof setInterval> | undefined;
  readonly #subscribers = new Set<SseWriter>();
  #ticker: ReturnType<typeof setInterval> | undefined;
  #scrapeLoops: Promise<void>[] = [];
  #server: HttpServer | undefined;
  #clock: WallClock | undefined;
  #run: Promise<void> | undefined;
  #running = false;
  #received = 0;
  #retries = 0;
  #nextId = 0;
  #draining = false;
  #failure: string | undefined;
  #closing: Promise<void> | undefined;
  #url = "";

  constructor(options: GatewayOptions) {
    this.#o = options;
    const n = options.upstreams.length;
    this.#scrapeMs = options.scrapeMs ?? DEFAULT_SCRAPE_MS;
    this.#scrapeTimeoutMs = options.scrapeTimeoutMs ?? DEFAULT_SCRAPE_TIMEOUT_MS;
    this.#config = gatewayConfig(options.config, n);
    this.#routed = new Int32Array(n);
    this.#inFlight = new Int32Array(n);
    this.#heardWallMs = new Float64Array(n).fill(-Infinity);
    this.#scrapes = new Array(n).fill(undefined);
    this.#runtime = new WorkerRuntime({ seed: this.#config.seed, wallTime: options.wallTime, poolSize: 1 });
    this.#metrics = new GatewayMetrics(
      n,
      { requestFailed: (id, reason) => this.#requestFailed(id, reason) },
      {
        ...metricsOptions(this.#config),
      },
    );
  }

  get url(): string {
    return this.#url;
  }

  /** Spawns the actors, starts the router's run, scrapes once, and listens. */
  async start(): Promise<void> {
    const runtime = this.#runtime, config = this.#config;
    const metrics = runtime.spawnLocal("metrics", this.#metrics);
    for (let i = 0; i < this.#o.upstreams.length; i++) {
      const upstream = new UpstreamInstance(i, this, {
        scrapeFailures: this.#o.scrapeFailures ?? DEFAULT_SCRAPE_FAILURES,
        metrics,
        // A router that counts its own active prefill hears of each first token at once (a plugin may).
        requestEvents: this.#o.plugin !== undefined || policyReads(config.policy.name).requests === true,
      });
      this.#upstreams.push(upstream);
      this.#upstreamRefs.push(runtime.spawnLocal(`upstream/${i}`, upstream));
    }
    const instances = this.#upstreamRefs as unknown as ActorRef<ServeCommand>[];
    const plugin = this.#o.plugin;
    this.#router = plugin === undefined
      ? runtime.spawnLocal(
        "router",
        buildRouter(instances, config, createPolicy(config.policy), undefined, {}, metrics),
      )
      : runtime.spawnRemote("router", routerInWorker(config, instances, metrics, plugin));
    for (const upstream of this.#upstreams) upstream.reportTo(this.#router);
    await runtime.start();
    this.#clock = new WallClock(this.#o.wallTime, this.#o.speed);
    this.#running = true;
    this.#run = runtime.run(this.#clock, { open: true }).then(
      () => {
        this.#running = false;
      },
      (error) => this.#fatal(error),
    );
    await Promise.all(this.#o.upstreams.map((_, i) => this.#scrape(i)));
    this.#scrapeLoops = this.#o.upstreams.map((_, i) => this.#scrapeLoop(i));
    this.#watchRouter();
    this.#server = serveHttp({
      hostname: this.#o.host,
      port: this.#o.port,
      handler: (request) => this.#handle(request),
      limits: this.#o.connections?.limits,
      pool: this.#o.connections?.pool,
      name: "gateway",
    });
    const addr = this.#server.addr;
    this.#url = serverUrl(addr);
  }

  drain(): void {
    this.#draining = true;
  }

  close(graceMs: number): Promise<void> {
    return this.#closing ??= this.#close(graceMs);
  }

  async #close(graceMs: number): Promise<void> {
    this.drain();
    const time = this.#o.wallTime, deadline = time.now() + graceMs;
    while (this.#exchanges.size > 0 && time.now() < deadline) {
      await time.sleep(Math.min(20, deadline - time.now()));
    }
    for (const exchange of [...this.#exchanges.values()]) {
      this.#answer(exchange, errorResponse(shuttingDown()));
      exchange.client.abort(new GatewayShutdown("The gateway shut down before the request finished."));
    }
    this.#stop.abort();
    await Promise.all(this.#scrapeLoops);
    await Promise.allSettled([...this.#relays]);
    clearInterval(this.#ticker);
    for (const sse of this.#subscribers) sse.close();
    this.#subscribers.clear();
    this.#running = false;
    clearInterval(this.#routerWatch);
    this.#runtime.close();
    await this.#run;
    this.#runtime.terminate();
    await this.#server?.shutdown();
    this.#http.close();
  }

  // ---- The router's run ----------------------------------------------------

  /** The router's simulated now. */
  #simNow(): number {
    return Math.max(this.#runtime.kernel.nowMs, this.#clock?.simNowMs() ?? 0);
  }

  /** Sends `message` into the kernel; false once the run is over. */
  #inject<M extends Message>(to: ActorRef<M>, message: M): boolean {
    if (!this.#running) return false;
    try {
      this.#runtime.inject(to, message);
      return true;
    } catch {
      return false;
    }
  }

  /** The router's run failed (a plugin overran its time, an actor threw): every client is answered 503, and the host told. */
  #fatal(error: unknown): void {
    if (this.#failure !== undefined) return;
    clearInterval(this.#routerWatch);
    this.#running = false;
    const message = error instanceof Error ? error.message : String(error);
    this.#failure = `gateway: the router failed: ${message}`.replace(/\s*\n\s*/g, " ");
    for (const exchange of [...this.#exchanges.values()]) {
      this.#end(exchange, "unavailable", errorResponse(routerFailed(this.#failure)));
      exchange.client.abort();
    }
    this.#o.onFatal(this.#failure);
  }

  /**
   * The router's liveness, watched from this thread: a request the router
   * has not decided (forwarded, or failed) after `routeTimeoutMs` of its
   * attention means a broken router — a plugin that broke its Worker's
   * messaging or the intrinsics the router uses, say — and fails the
   * gateway (every request and `/health` 503, `onFatal`) instead of
   * accepting requests it will never answer. Only the time this thread
   * was awake counts (a tick counts for at most two intervals), so a lagging
   * loop is never taken for a broken router.
   */
  #watchRouter(): void {
    const limitMs = this.#o.routeTimeoutMs ??
      (this.#o.plugin !== undefined ? 2 * this.#o.plugin.timeoutMs : DEFAULT_ROUTE_TIMEOUT_MS);
    const tickMs = Math.max(10, Math.min(250, limitMs / 8));
    let last = performance.now(), decided = this.#decisions, waitedMs = 0;
    this.#routerWatch = setInterval(() => {
      const now = performance.now();
      const attention = Math.min(now - last, 2 * tickMs);
      last = now;
      // Stuck is nothing decided at all while requests wait: a burst queued behind slow but
      // timely decisions is not a broken router.
      if (this.#decisions !== decided || this.#undecided.size === 0) {
        decided = this.#decisions;
        waitedMs = 0;
        return;
      }
      waitedMs += attention;
      if (waitedMs <= limitMs) return;
      const [oldest] = this.#undecided;
      this.#fatal(
        new Error(
          `the router decided nothing for ${limitMs} ms while request ${oldest} waited (its Worker stopped answering)`,
        ),
      );
    }, tickMs);
  }

  /** The router decided request `id` (forwarded it, or failed it). */
  #decided(id: number): void {
    if (this.#undecided.delete(id)) this.#decisions++;
  }

  // ---- The upstreams' host -------------------------------------------------

  /** {@linkcode UpstreamHost.forward}: one attempt at `command`'s request on upstream `index`. */
  forward(index: number, command: ServeCommand): void {
    this.#decided(command.request.id);
    const exchange = this.#exchanges.get(command.request.id);
    const to = this.#upstreamRefs[index], requestId = command.request.id;
    if (exchange === undefined || exchange.client.signal.aborted) {
      this.#inject(to, { type: "upstream_ended", requestId, outcome: "cancelled" });
      if (exchange !== undefined) this.#end(exchange, "cancelled");
      return;
    }
    this.#routed[index]++;
    this.#inFlight[index]++;
    if ((command.attempt ?? 0) > 0) this.#retries++;
    const relay = relayAttempt({
      url: this.#o.upstreams[index].replace(/\/+$/, "") + PATHS[exchange.parsed.endpoint],
      body: exchange.parsed.body,
      rawBody: exchange.rawBody,
      stream: exchange.parsed.stream,
      includeUsage: exchange.parsed.includeUsage,
      headers: { "x-routed-to": String(index) },
      authorization: exchange.authorization,
      timeoutMs: this.#o.upstreamTimeoutMs,
      promptTokens: exchange.promptTokens,
      client: exchange.client,
      httpClient: this.#http,
    }, this.#relayEvents(exchange, index));
    this.#relays.add(relay);
    relay.finally(() => this.#relays.delete(relay));
  }

  /** What one attempt's relay reports, injected into upstream `index`'s actor. */
  #relayEvents(exchange: Exchange, index: number): RelayEvents {
    const to = this.#upstreamRefs[index], requestId = exchange.id;
    const report = (event: UpstreamEvent) => this.#inject(to, event);
    return {
      heard: () => {
        this.#heardWallMs[index] = this.#o.wallTime.now();
      },
      firstToken: () => {
        this.#ttft.observe((this.#o.wallTime.now() - exchange.arrivalWallMs) * this.#o.speed / 1000);
        report({ type: "upstream_first_token", requestId });
      },
      respond: (response) => this.#answer(exchange, response),
      finished: (usage) => {
        this.#inFlight[index]--;
        report({ type: "upstream_finished", requestId, ...usage });
        this.#end(exchange, "completed");
      },
      failed: (reason, cause) => {
        this.#inFlight[index]--;
        exchange.lastError = `${this.#o.upstreams[index]}: ${reason}`;
        // The router decides again: a retry, or the request's failure.
        this.#undecided.add(requestId);
        if (!report({ type: "upstream_failed", requestId, cause })) this.#end(exchange, "failed");
      },
      ended: (outcome, cause) => {
        this.#inFlight[index]--;
        report({ type: "upstream_ended", requestId, outcome, ...(cause !== undefined && { cause }) });
        this.#end(exchange, outcome);
      },
    };
  }

  /** The router gave up on a request (no retry left, or no upstream): 502. */
  #requestFailed(requestId: number, reason: FailedReason): void {
    const exchange = this.#exchanges.get(requestId);
    if (exchange === undefined) return;
    // A retry finds no upstream but the ones that just failed it: say what failed, not "none available".
    const message = reason === "no_instance" && exchange.lastError === ""
      ? "No upstream is available to serve the request."
      : `Every attempt at the request failed; the last: ${exchange.lastError}`;
    this.#end(exchange, "failed", errorResponse(new OpenAIError(502, message, { type: "upstream_error" })));
  }

  /** Answers the client once (later answers are ignored). */
  #answer(exchange: Exchange, response: Response): void {
    if (exchange.answered) return;
    exchange.answered = true;
    exchange.resolve(response);
  }

  /** The exchange is over: counted once, and its client answered (`response`, else 499 — it is gone). */
  #end(exchange: Exchange, outcome: Outcome, response?: Response): void {
    this.#decided(exchange.id);
    if (!this.#exchanges.delete(exchange.id)) return;
    this.#outcomes[outcome]++;
    this.#answer(exchange, response ?? new Response(null, { status: 499 }));
  }

  // ---- Scrapes ---------------------------------------------------------------

  async #scrapeLoop(i: number): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      await this.#o.wallTime.sleep(this.#scrapeMs, signal);
      if (!signal.aborted) await this.#scrape(i);
    }
  }

  /**
   * Reads upstream `i`'s `/metrics` once and tells its actor. A 501 or 404 (no
   * metrics: llama-server without `--metrics`) answers, with no load; a 5xx
   * or silence past the scrape timeout is a failed scrape — unless the
   * upstream sent bytes on a request meanwhile (`heard`: it is alive, its load
   * stale); a refused or reset connection drops its re-exposed gauges too.
   */
  async #scrape(i: number): Promise<void> {
    const startedMs = this.#o.wallTime.now();
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), this.#scrapeTimeoutMs);
    const signal = AbortSignal.any([this.#stop.signal, timeout.signal]);
    const to = this.#upstreamRefs[i];
    const failed = (cause: FailureCause): void => {
      const heard = cause !== "connection" && this.#heardWallMs[i] >= startedMs;
      this.#inject(to, { type: "upstream_scrape_failed", cause, ...(heard && { heard }) });
    };
    try {
      const response = await this.#http.request(`${this.#o.upstreams[i].replace(/\/+$/, "")}/metrics`, {
        signal,
      });
      const text = await response.text();
      if (response.status >= 500 && response.status !== 501) return failed("answer");
      let load = null;
      if (response.ok) {
        try {
          const samples = parsePrometheus(text);
          this.#scrapes[i] = { samples, types: parseTypes(text) };
          load = readLoad(samples) ?? null;
        } catch {
          this.#scrapes[i] = undefined; // not an exposition we read: reachable, load unknown
        }
      }
      this.#inject(to, { type: "upstream_scraped", load });
    } catch (error) {
      if (this.#stop.signal.aborted) return;
      // Out of descriptors here says nothing about the upstream: no verdict at all.
      if (isLocalExhaustion(error)) return;
      if (timeout.signal.aborted) return failed("timeout");
      this.#scrapes[i] = undefined;
      failed("connection");
    } finally {
      clearTimeout(timer);
    }
  }

  // ---- HTTP ------------------------------------------------------------------

  async #handle(request: Request): Promise<Response> {
    try {
      const path = new URL(request.url).pathname;
      const endpoint = path === PATHS.completion ? "completion" : path === PATHS.chat ? "chat" : undefined;
      if (endpoint !== undefined) {
        if (request.method !== "POST") throw methodNotAllowed(request.method, path);
        return await this.#complete(endpoint, request);
      }
      if (request.method !== "GET") {
        throw GET_PATHS.has(path) ? methodNotAllowed(request.method, path) : notFound(path);
      }
      return await this.#get(path);
    } catch (error) {
      if (error instanceof OpenAIError) return errorResponse(error);
      // A bug: a 500 in OpenAI's shape and one line, never a stack trace per request.
      const failure = unexpectedError(error);
      console.error(`gateway: ${request.method} ${new URL(request.url).pathname}: ${failure.message}`);
      return errorResponse(failure);
    }
  }

  async #get(path: string): Promise<Response> {
    switch (path) {
      case "/":
        // The first state is in the page itself: it shows numbers before its first event, or without scripts.
        return new Response(livePageHtml(this.snapshot()), {
          headers: { "content-type": "text/html; charset=utf-8" },
        });
      case "/events":
        return this.#events();
      case "/health":
        if (this.#draining || this.#failure !== undefined || !this.#upstreams.some((u) => u.alive)) {
          throw new OpenAIError(503, this.#failure ?? "The gateway is not taking requests.", {
            type: "service_unavailable",
          });
        }
        return jsonResponse(200, { status: "ok" });
      case "/metrics":
        return new Response(this.#metricsText(), {
          headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" },
        });
      case "/v1/models":
        return await this.#models();
      default:
        throw notFound(path);
    }
  }

  /** A completion request: parsed, tokenized, routed; its answer comes from the relay or the router. */
  async #complete(endpoint: Endpoint, request: Request): Promise<Response> {
    this.#received++;
    let exchange: Exchange;
    try {
      if (this.#draining || this.#failure !== undefined) throw shuttingDown(this.#failure);
      const rawBody = wholeBodyOf(request);
      const body = await readJsonBody(request, this.#o.maxBodyBytes, { requireJsonContentType: true });
      const parsed = parseRequest(body, endpoint);
      const served = this.#o.servedModelName;
      if (served !== undefined && parsed.model !== served) throw modelNotFound(parsed.model);
      const tokens = typeof parsed.prompt === "string" ? tokenize(parsed.prompt) : parsed.prompt;
      const id = this.#nextId++;
      const simRequest = promptRequest(id, this.#simNow(), tokens, parsed.maxTokens ?? 16, {
        blockTokens: this.#config.instances.engine.blockTokens,
        prefixTokens: this.#config.workload.prefix.tokens,
      });
      // Aborted when the client cancels its stream (request.signal is not read: Deno also aborts it on success).
      const client = new AbortController();
      const answer = Promise.withResolvers<Response>();
      exchange = {
        id,
        parsed,
        promptTokens: tokens.length,
        arrivalWallMs: this.#o.wallTime.now(),
        client,
        resolve: answer.resolve,
        answered: false,
        lastError: "",
        authorization: request.headers.get("authorization"),
        rawBody,
      };
      this.#exchanges.set(id, exchange);
      this.#undecided.add(id);
      if (!this.#inject(this.#router, { type: "route", request: simRequest })) {
        this.#end(exchange, "unavailable", errorResponse(shuttingDown(this.#failure)));
      }
      return await answer.promise;
    } catch (error) {
      if (error instanceof OpenAIError) this.#outcomes[error.status === 503 ? "unavailable" : "invalid"]++;
      throw error;
    }
  }

  /** `/events`: a snapshot now and every 500 ms while the client listens. */
  #events(): Response {
    const sse: SseWriter = new SseWriter(() => this.#subscribers.delete(sse));
    this.#subscribers.add(sse);
    sse.send(this.snapshot());
    this.#ticker ??= setInterval(() => {
      if (this.#subscribers.size === 0) {
        clearInterval(this.#ticker);
        this.#ticker = undefined;
        return;
      }
      const snapshot = this.snapshot();
      for (const s of this.#subscribers) if (!s.send(snapshot)) this.#subscribers.delete(s);
    }, EVENTS_MS);
    return sse.response();
  }

  /** `/v1/models`, from the first healthy upstream. */
  async #models(): Promise<Response> {
    const i = this.#upstreams.findIndex((u) => u.alive);
    if (i < 0) throw new OpenAIError(503, "No upstream is available.", { type: "service_unavailable" });
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), this.#o.upstreamTimeoutMs);
    try {
      const response = await this.#http.request(`${this.#o.upstreams[i].replace(/\/+$/, "")}/v1/models`, {
        signal: AbortSignal.any([timeout.signal, this.#stop.signal]),
      });
      const text = await response.text();
      return new Response(text, {
        status: response.status,
        headers: {
          "content-type": response.headers.get("content-type") ?? "application/json",
          "x-routed-to": `${i}`,
        },
      });
    } catch (error) {
      throw new OpenAIError(502, `${this.#o.upstreams[i]}: ${(error as Error).message}`, {
        type: "upstream_error",
      });
    } finally {
      clearTimeout(timer);
    }
  }

  #metricsText(): string {
    return gatewayMetricsText({
      upstreams: this.#o.upstreams,
      outcomes: this.#outcomes,
      retries: this.#retries,
      routed: this.#routed,
      inFlight: this.#inFlight,
      up: this.#upstreams.map((u) => u.alive),
      failedScrapes: this.#upstreams.map((u) => u.failedScrapes),
      ttft: this.#ttft,
      scrapes: this.#scrapes,
      connections: this.connectionStats(),
      ...memoryFigures(),
    });
  }

  connectionStats(): ConnectionStats {
    return this.#server?.stats() ?? NO_CONNECTIONS;
  }

  snapshot(): GatewaySnapshot {
    const summary = this.#metrics.collector.summary();
    const per = this.#metrics.perUpstream();
    return {
      timeMs: this.#simNow(),
      policy: (this.#o.plugin && this.#runtime.aboutOf(this.#router)) ?? this.#o.plugin?.name ??
        this.#config.policy.name,
      draining: this.#draining || this.#failure !== undefined,
      requests: {
        received: this.#received,
        inFlight: this.#exchanges.size,
        retries: this.#retries,
        ...this.#outcomes,
      },
      ttftMs: {
        mean: summary.ttftMeanMs,
        p50: summary.ttftP50Ms,
        p90: summary.ttftP90Ms,
        p99: summary.ttftP99Ms,
      },
      hitRate: summary.tokenHitRate,
      upstreams: this.#upstreams.map((u, i) => ({
        url: this.#o.upstreams[i],
        healthy: u.alive,
        failedScrapes: u.failedScrapes,
        waiting: u.load?.waiting ?? null,
        running: u.load?.running ?? null,
        kvUsage: u.load?.kvUsage ?? null,
        inFlight: this.#inFlight[i],
        routed: this.#routed[i],
        completed: per[i].completed,
        hitRate: per[i].promptTokens > 0 ? per[i].cachedTokens / per[i].promptTokens : null,
      })),
      warning: this.#o.warning?.() ?? null,
    };
  }
}

/** This process's resident memory and the main thread's heap in use, for `/metrics`. */
function memoryFigures(): { residentBytes: number; heapUsedBytes: number } {
  const { rss, heapUsed } = Deno.memoryUsage();
  return { residentBytes: rss, heapUsedBytes: heapUsed };
}

const GET_PATHS: ReadonlySet<string> = new Set(["/", "/events", "/health", "/metrics", "/v1/models"]);

function shuttingDown(failure?: string): OpenAIError {
  return new OpenAIError(503, failure ?? "The gateway is shutting down.", { type: "service_unavailable" });
}

function routerFailed(line: string): OpenAIError {
  return new OpenAIError(503, line, { type: "service_unavailable" });
}

function methodNotAllowed(method: string, path: string): OpenAIError {
  return new OpenAIError(405, `Method ${method} is not allowed on ${path}.`, { code: "method_not_allowed" });
}

function notFound(path: string): OpenAIError {
  return new OpenAIError(
    404,
    `No route ${path}: the gateway has /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics, / and /events.`,
    { code: "not_found" },
  );
}
