/**
 * @module
 * The open-loop load generator behind `deno task load`: replays a scenario's
 * arrivals (synthetic or a trace) against any OpenAI-compatible URL at their
 * simulated times over `speed`, never waiting for earlier answers, and folds
 * what it measures client-side into the metrics of `deno task run`.
 */
import { droppedFraction, MetricsCollector } from "../../actors/metrics/metrics_collector.ts";
import type { DropReason, MetricsCommand, Request, RouteCommand } from "../../actors/protocol.ts";
import { type Actor, Kernel } from "../../actors/runtime/kernel.ts";
import type { WallTime } from "../../actors/runtime/wall_clock.ts";
import { ACTOR_NAMES, buildSource, checkConservation, type SimulationConfig } from "../../actors/topology.ts";
import { TraceSource } from "../../actors/traces/trace_source.ts";
import { formatReport, type RunReport } from "../report/run_report.ts";
import { readSseData } from "./http.ts";
import { plural } from "../cli/plural.ts";
import { type ByteStream, type ClientHeaders, type ClientResponse, HttpClient } from "./http_client.ts";
import { promptText, promptTokenIds } from "./tokenizer.ts";

/** Which OpenAI endpoint the generator loads. */
export type LoadEndpoint = "completion" | "chat";

/** The paths of the two endpoints, appended to a base URL. */
export const ENDPOINT_PATHS: Readonly<Record<LoadEndpoint, string>> = {
  completion: "/v1/completions",
  chat: "/v1/chat/completions",
};

/**
 * The client's own lag it tolerates, wall ms: a send this late behind its
 * schedule is a late send (a p99 above it: the generator did not keep up),
 * and a timer this late means the client's event loop stalled.
 */
export const CLIENT_LAG_TOLERANCE_MS = 50;

/** Wall ms between the probes of the client's event-loop lag (how late a timer of this length fires). */
export const LOOP_PROBE_MS = 20;

/**
 * Behind its schedule, the sender sends without waiting; after this many
 * wall ms of doing so it yields to the event loop once (≈ 2 ms), so that its
 * own burst never stalls the reads and timers of the requests in flight.
 */
export const SEND_BURST_MS = 20;

/**
 * A request is given up as `client stalled` once it has waited this many
 * times `requestTimeoutMs` of wall time without a sign of life and without
 * the server having had `requestTimeoutMs` of the client's attention (see
 * {@linkcode LoadStats.clientStalled}).
 */
export const MAX_WAIT_TIMEOUTS = 3;

/** Options for {@linkcode runLoad}. */
export interface LoadOptions {
  /** The server: a base URL (`http://127.0.0.1:8000`) or the endpoint's own URL. */
  readonly url: string;
  /** The workload (synthetic or trace), its seed, SLOs and classes; `instances.count` sizes per-instance metrics. */
  readonly config: SimulationConfig;
  /** Simulated ms per wall ms: request i is sent at wall start + arrivalMs / speed. @default 1 (in the CLI) */
  readonly speed: number;
  /** The endpoint loaded. @default "completion" (in the CLI) */
  readonly endpoint: LoadEndpoint;
  /** The `model` field of every request. @default "sim" (in the CLI) */
  readonly model: string;
  /** Makes this run's unique prompt tokens its own (see `promptText`). @default the scenario seed (in the CLI) */
  readonly nonce: number;
  /**
   * Send each prompt as token ids (`promptTokenIds`) instead of text, so an
   * engine with its own tokenizer sees exactly the simulated tokens
   * (completions only: a chat message is text). @default false
   */
  readonly promptIds?: boolean;
  /**
   * Mix the nonce into the shared prefixes' tokens too (a group's, a
   * trace's), so that no earlier run with another nonce left any of this
   * run's prompts cached: every run starts cold, as a simulation does.
   * Default: only each request's own tokens depend on the nonce, and runs
   * share their prefixes. @default false
   */
  readonly freshPrefixes?: boolean;
  /**
   * Wall ms a request may go without a sign of life — from its actual send
   * to its response's headers, then between events of its stream — before it
   * fails as `timeout`; ms the client's own event loop spent stalled do not
   * count (see {@linkcode LoadStats.clientStalled}). @default 60000 (in the CLI)
   */
  readonly requestTimeoutMs: number;
  /** Aborting stops sending, aborts the requests in flight and resolves with what was measured. @default none */
  readonly signal?: AbortSignal;
  /** The wall clock (and its timers). */
  readonly wallTime: WallTime;
  /** Called once the arrivals are known, before the first send, with their number and the endpoint URL. @default none */
  readonly onStart?: (total: number, url: string) => void;
  /** Called whenever a request is sent or finishes. @default none */
  readonly onProgress?: (done: number, total: number, progress: LoadProgress) => void;
}

/** How far a load run is. */
export interface LoadProgress {
  /** Requests the scenario has. */
  readonly total: number;
  readonly sent: number;
  readonly completed: number;
  readonly failed: number;
  /** Refused as a simulator drops a request (see `LoadStats.dropped`). */
  readonly dropped: number;
  /** Given up while the client itself was stalled (see `LoadStats.clientStalled`). */
  readonly clientStalled: number;
}

/** What the generator itself saw, beside the run metrics. */
export interface LoadStats {
  /** The endpoint URL loaded. */
  readonly url: string;
  readonly endpoint: LoadEndpoint;
  readonly model: string;
  readonly speed: number;
  readonly nonce: number;
  /** Requests the scenario has. */
  readonly total: number;
  /** Requests sent (the run's `requests`). */
  readonly sent: number;
  readonly completed: number;
  /**
   * Refused as a simulator drops a request, counted `dropped` like `deno task
   * run` does: a 503 with code `queue_full`, a 400 about the maximum context length.
   */
  readonly dropped: number;
  /** Failed: any other HTTP error, a timeout, a lost connection, a bad stream (counted `failed`, reason `unreachable`). */
  readonly failed: number;
  /** Sent, and aborted unfinished by an interrupt. */
  readonly inFlight: number;
  /**
   * Sent, and given up unfinished while the client's own event loop was
   * stalled: after {@linkcode MAX_WAIT_TIMEOUTS} × the timeout of wall time
   * without a sign of life, the server had had less than the timeout of the
   * client's attention. Their outcome is unknown, so they are not failures:
   * the run counts them in flight, like requests an interrupt aborted.
   */
  readonly clientStalled: number;
  /** Completed requests whose wait the client's loop stalled through: their TTFT and end-to-end include the client's own delay. */
  readonly completedThroughStall: number;
  /** Not sent (interrupted first). */
  readonly notSent: number;
  /**
   * Failures (not drops) by kind: `http <status>`, `timeout` (no response,
   * or no event, for the timeout while the client was responsive), `connection`,
   * `dropped`, `stream error`, `bad stream`.
   */
  readonly failedBy: Readonly<Record<string, number>>;
  /** One message per failure kind (the first seen), for a user to read. */
  readonly failureExamples: Readonly<Record<string, string>>;
  /** Completed requests whose stream carried no usage (token counts then come from the request and the chunks). */
  readonly usageMissing: number;
  /** Completed requests whose usage had no `prompt_tokens_details.cached_tokens` (hit rates are then null). */
  readonly cachedTokensMissing: number;
  /** Completed requests with neither `x-routed-to` nor `x-sim-instance` (instance imbalance is then null). */
  readonly instanceMissing: number;
  /** How late the generator sent requests behind their schedule, wall ms; null when none was sent. */
  readonly sendLagP50Ms: number | null;
  readonly sendLagP99Ms: number | null;
  readonly sendLagMaxMs: number | null;
  /** Requests sent more than {@linkcode CLIENT_LAG_TOLERANCE_MS} behind their schedule. */
  readonly lateSends: number;
  /** Whether the p99 send lag stayed within {@linkcode CLIENT_LAG_TOLERANCE_MS}: if not, the load was lighter than asked. */
  readonly keptUp: boolean;
  /**
   * The client's own event-loop lag: how late a {@linkcode LOOP_PROBE_MS} ms
   * timer fired, probed throughout the run, wall ms; null when no probe finished.
   */
  readonly loopLagP50Ms: number | null;
  readonly loopLagP99Ms: number | null;
  readonly loopLagMaxMs: number | null;
  /** Wall ms the client's loop spent stalled (each probe more than {@linkcode CLIENT_LAG_TOLERANCE_MS} late counts its lateness). */
  readonly loopStalledMs: number;
  /**
   * The client, not only the server, limited what was measured: its p99 send
   * lag or p99 loop lag exceeded {@linkcode CLIENT_LAG_TOLERANCE_MS}, or a
   * request was given up as client stalled.
   */
  readonly clientBottleneck: boolean;
  /** The run was interrupted (its signal aborted). */
  readonly interrupted: boolean;
}

/**
 * One load run's report: the keys of `deno task run --json` (policy
 * `"remote"`: the client cannot see the router), with null for what a client
 * cannot measure, plus `load`.
 */
export interface LoadResult
  extends Omit<RunReport, "preemptions" | "messages" | "retried" | "requestsAffected" | "recovery"> {
  /** A client sees no preemption. */
  readonly preemptions: null;
  /** Nor the retries behind the server (a gateway's): null. */
  readonly retried: null;
  readonly requestsAffected: null;
  /** Nor when a fault started, which the recovery figures are measured from: null. */
  readonly recovery: null;
  /** No kernel delivers messages here. */
  readonly messages: null;
  readonly load: LoadStats;
}

/** The requests a scenario's source emits, as `deno task run` sees them arrive, and the trace lines it skipped. */
export interface ScenarioArrivals {
  readonly requests: readonly Request[];
  readonly skippedInvalid: number;
}

/**
 * Runs the scenario's workload source (synthetic or trace) alone in a
 * virtual kernel, a capturing stand-in for the router recording every
 * `route` — the same arrivals, ids and prompts as `deno task run`'s.
 */
export function scenarioArrivals(config: SimulationConfig): ScenarioArrivals {
  const kernel = new Kernel({ seed: config.seed });
  const requests: Request[] = [];
  const capture: Actor<RouteCommand> = { handle: (message) => void requests.push(message.request) };
  const router = kernel.spawn(ACTOR_NAMES.router, capture);
  const source = buildSource(config.workload, router, config.seed);
  kernel.send(kernel.spawn(ACTOR_NAMES.source, source), { type: "start" });
  kernel.run({ untilMs: config.untilMs });
  return { requests, skippedInvalid: source instanceof TraceSource ? source.skipped : 0 };
}

/**
 * The endpoint's URL from `url`: kept when its path already ends in one of
 * {@linkcode ENDPOINT_PATHS}, else the endpoint's path appended (after a
 * trailing `/v1`, only its rest).
 * @throws {TypeError} for a URL that does not parse, is not http(s), or names the other endpoint.
 */
export function endpointUrl(url: string, endpoint: LoadEndpoint): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`url: expected an http(s) URL, got "${url}"`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new TypeError(`url: expected an http(s) URL, got "${url}"`);
  }
  const path = parsed.pathname.replace(/\/+$/, "");
  const named = (Object.keys(ENDPOINT_PATHS) as LoadEndpoint[]).find((e) => path.endsWith(ENDPOINT_PATHS[e]));
  if (named !== undefined && named !== endpoint) {
    throw new TypeError(`url: "${url}" is the ${named} endpoint, but the endpoint is ${endpoint}`);
  }
  if (named === undefined) {
    parsed.pathname = path.endsWith("/v1")
      ? path + ENDPOINT_PATHS[endpoint].slice(3)
      : path + ENDPOINT_PATHS[endpoint];
  }
  return parsed.href;
}

/**
 * The JSON body sent for `request`: its prompt text (`promptText`) or token
 * ids (`promptTokenIds`), as a prompt or one user message, `max_tokens` its output tokens with
 * `ignore_eos` (vLLM's) so that exactly that many come back, streamed with usage.
 */
export function requestBody(
  request: Request,
  options: Pick<LoadOptions, "endpoint" | "model" | "nonce" | "promptIds" | "freshPrefixes">,
): Record<string, unknown> {
  const fresh = options.freshPrefixes ?? false;
  const prompt = options.promptIds
    ? promptTokenIds(request, options.nonce, fresh)
    : promptText(request, options.nonce, fresh);
  const common = {
    model: options.model,
    max_tokens: request.outputTokens,
    ignore_eos: true,
    stream: true,
    stream_options: { include_usage: true },
  };
  return options.endpoint === "chat"
    ? { ...common, messages: [{ role: "user", content: prompt }] }
    : { ...common, prompt };
}

/**
 * Replays `options.config`'s arrivals against `options.url`, open loop, and
 * reports what it measured once every request sent has finished (or, when
 * `signal` aborts, at once with what it had).
 * @throws {TypeError} for options out of range or a bad URL.
 * @throws {SimulationError} (`invariant_broken`) if a request went unaccounted for.
 */
export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  checkOptions(options);
  const url = endpointUrl(options.url, options.endpoint);
  const { requests, skippedInvalid } = scenarioArrivals(options.config);
  options.onStart?.(requests.length, url);
  const run = new LoadRun(options, url, requests.length);
  await run.sendAll(requests);
  return run.result(skippedInvalid);
}

/** @throws {TypeError} naming the option, its value and what was expected. */
function checkOptions(options: LoadOptions): void {
  const positive = (name: string, value: number) => {
    if (!(value > 0 && Number.isFinite(value))) {
      throw new TypeError(`${name}: expected a finite number > 0, got ${value}`);
    }
  };
  positive("speed", options.speed);
  positive("requestTimeoutMs", options.requestTimeoutMs);
  if (options.endpoint !== "completion" && options.endpoint !== "chat") {
    throw new TypeError(`endpoint: expected "completion" or "chat", got ${JSON.stringify(options.endpoint)}`);
  }
  if (!Number.isSafeInteger(options.nonce) || options.nonce < 0) {
    throw new TypeError(`nonce: expected an integer >= 0, got ${options.nonce}`);
  }
  if (options.promptIds && options.endpoint === "chat") {
    throw new TypeError('promptIds: token ids need the completion endpoint, got endpoint "chat"');
  }
}

/** Token counts from a stream's usage chunk. */
interface StreamUsage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  /** Absent when the server did not report cached tokens. */
  readonly cachedTokens: number | undefined;
}

/** A stream read to its end: when text came, how many chunks carried it, the usage. */
interface StreamTimes {
  readonly firstWallMs: number;
  readonly endWallMs: number;
  readonly textChunks: number;
  readonly usage: StreamUsage | undefined;
}

/** A request's last sign of life — its send, its response's headers, each event read — for its timeout. */
interface Heard {
  /** SSE events read so far. */
  events: number;
  /** Whether the response's headers came. */
  responded: boolean;
  /** When the last sign came, wall ms. */
  atWallMs: number;
  /** The client's stalled ms then ({@linkcode LoopLagProbe.stalledMs}). */
  stalledMs: number;
}

/** Why a request's wait was cut short: the server's time was up, or the client could not tell. */
type Verdict = "timeout" | "client stalled";

/** How one request ended. */
type Outcome =
  | ({
    readonly kind: "completed";
    readonly instance: number | undefined;
    /** Wall ms the client's loop spent stalled while this request waited. */
    readonly clientStalledMs: number;
  } & StreamTimes)
  | {
    readonly kind: "failed";
    readonly label: string;
    readonly message: string;
    readonly atWallMs: number;
    readonly instance: number | undefined;
    /** The server refused it as a simulator drops a request (counted dropped, not failed). */
    readonly drop?: DropReason;
  }
  | { readonly kind: "client stalled" }
  | { readonly kind: "interrupted" };

/** A request's failure, by kind (see {@linkcode LoadStats.failedBy}). */
class RequestFailure extends Error {
  /**
   * @param label The failure's kind.
   * @param drop Set when the server refused the request as a simulator drops one.
   */
  constructor(readonly label: string, message: string, readonly drop?: DropReason) {
    super(message);
  }
}

/** One request sent: when it was due and how it ended. */
interface Sent {
  readonly request: Request;
  readonly dueWallMs: number;
  outcome?: Outcome;
}

/** The value at quantile `q` of ascending `sorted` (nearest rank); null when it is empty. */
function quantile(sorted: readonly number[], q: number): number | null {
  return sorted.length === 0 ? null : sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)];
}

/**
 * The client's own event-loop lag: a {@linkcode LOOP_PROBE_MS} ms timer set
 * again and again, each firing's lateness one sample — the method of Node's
 * `perf_hooks.monitorEventLoopDelay`, which Deno does not implement. A busy
 * or descheduled loop fires every timer late, a request's timeout and its
 * response's reads alike.
 */
class LoopLagProbe {
  readonly #wallTime: WallTime;
  readonly #stop = new AbortController();
  readonly #lagsMs: number[] = [];
  #stalledMs = 0;
  #dueWallMs: number | undefined;
  #running: Promise<void> | undefined;

  constructor(wallTime: WallTime) {
    this.#wallTime = wallTime;
  }

  /** Starts probing until {@linkcode stop}. */
  start(): void {
    this.#running ??= this.#probe();
  }

  /** Stops probing and leaves no timer behind. */
  async stop(): Promise<void> {
    this.#stop.abort();
    await this.#running;
  }

  /** Every probe's lateness, wall ms, in the order probed. */
  get lagsMs(): readonly number[] {
    return this.#lagsMs;
  }

  /**
   * Wall ms the loop has spent stalled so far: each probe more than
   * {@linkcode CLIENT_LAG_TOLERANCE_MS} late counts its whole lateness,
   * including the probe overdue now (a stall still in progress).
   */
  stalledMs(): number {
    const overdueMs = this.#dueWallMs === undefined ? 0 : this.#wallTime.now() - this.#dueWallMs;
    return this.#stalledMs + (overdueMs > CLIENT_LAG_TOLERANCE_MS ? overdueMs : 0);
  }

  async #probe(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      this.#dueWallMs = this.#wallTime.now() + LOOP_PROBE_MS;
      await this.#wallTime.sleep(LOOP_PROBE_MS, signal);
      if (signal.aborted) break;
      const lagMs = Math.max(0, this.#wallTime.now() - this.#dueWallMs);
      this.#lagsMs.push(lagMs);
      if (lagMs > CLIENT_LAG_TOLERANCE_MS) this.#stalledMs += lagMs;
    }
    this.#dueWallMs = undefined;
  }
}

/** The reason a request's deadline watch is stopped with once the request is over. */
const FINISHED = new Error("the request is over");

/** One load run: the sender loop, the requests in flight, and what came back. */
class LoadRun {
  readonly #options: LoadOptions;
  readonly #url: string;
  readonly #total: number;
  readonly #sent: Sent[] = [];
  readonly #lagsMs: number[] = [];
  readonly #loop: LoopLagProbe;
  readonly #inFlight = new Set<AbortController>();
  readonly #pending = new Set<Promise<void>>();
  /** The run's connections: kept alive between requests, as `fetch`'s pool would. */
  readonly #client = new HttpClient();
  #completed = 0;
  #failed = 0;
  #dropped = 0;
  #clientStalled = 0;
  #interrupted = false;
  #startWallMs = 0;
  #endWallMs = 0;

  constructor(options: LoadOptions, url: string, total: number) {
    this.#options = options;
    this.#url = url;
    this.#total = total;
    this.#loop = new LoopLagProbe(options.wallTime);
  }

  /** Sends every request at its time (until interrupted), then waits for every one sent to end. */
  async sendAll(requests: readonly Request[]): Promise<void> {
    const { wallTime, speed, signal } = this.#options;
    const onAbort = () => this.#interrupt();
    signal?.addEventListener("abort", onAbort, { once: true });
    if (signal?.aborted) this.#interrupt();
    this.#startWallMs = wallTime.now();
    this.#loop.start();
    try {
      let yieldedWallMs = this.#startWallMs;
      for (const request of requests) {
        const dueWallMs = this.#startWallMs + request.arrivalMs / speed;
        // Built before the wait: a long prompt's text takes milliseconds to write.
        const body = JSON.stringify(requestBody(request, this.#options));
        const nowMs = wallTime.now();
        if ((dueWallMs > nowMs || nowMs - yieldedWallMs > SEND_BURST_MS) && !this.#interrupted) {
          await wallTime.sleep(Math.max(0, dueWallMs - nowMs), signal);
          yieldedWallMs = wallTime.now();
        }
        if (this.#interrupted) break;
        this.#launch(request, dueWallMs, body);
      }
      while (this.#pending.size > 0) await Promise.all([...this.#pending]);
    } finally {
      this.#client.close();
      signal?.removeEventListener("abort", onAbort);
      this.#endWallMs = wallTime.now();
      await this.#loop.stop();
    }
  }

  #interrupt(): void {
    this.#interrupted = true;
    for (const controller of this.#inFlight) controller.abort();
  }

  #launch(request: Request, dueWallMs: number, body: string): void {
    const sent: Sent = { request, dueWallMs };
    const sentWallMs = this.#options.wallTime.now();
    this.#sent.push(sent);
    this.#lagsMs.push(Math.max(0, sentWallMs - dueWallMs));
    const done = this.#exchange(body, sentWallMs).then((outcome) => {
      sent.outcome = outcome;
      if (outcome.kind === "completed") this.#completed++;
      if (outcome.kind === "client stalled") this.#clientStalled++;
      if (outcome.kind === "failed" && outcome.drop !== undefined) this.#dropped++;
      else if (outcome.kind === "failed") this.#failed++;
      this.#pending.delete(done);
      this.#progress();
    });
    this.#pending.add(done);
    this.#progress();
  }

  #progress(): void {
    const progress = {
      total: this.#total,
      sent: this.#sent.length,
      completed: this.#completed,
      failed: this.#failed,
      dropped: this.#dropped,
      clientStalled: this.#clientStalled,
    };
    const done = progress.completed + progress.failed + progress.dropped + progress.clientStalled;
    this.#options.onProgress?.(done, this.#total, progress);
  }

  /** Sends one request (at `sentWallMs`, just now) and reads its stream; never rejects. */
  async #exchange(body: string, sentWallMs: number): Promise<Outcome> {
    const { wallTime } = this.#options;
    const controller = new AbortController(), finished = new AbortController();
    const heard: Heard = {
      events: 0,
      responded: false,
      atWallMs: sentWallMs,
      stalledMs: this.#loop.stalledMs(),
    };
    const stalledAtSendMs = heard.stalledMs;
    const hear = () => {
      heard.atWallMs = wallTime.now();
      heard.stalledMs = this.#loop.stalledMs();
    };
    let verdict: Verdict | undefined, instance: number | undefined;
    this.#inFlight.add(controller);
    this.#deadline(heard, finished.signal).then((v) => {
      if (v === undefined) return;
      verdict = v;
      controller.abort();
    });
    try {
      const response = await this.#client.request(this.#url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
        signal: controller.signal,
      });
      heard.responded = true;
      hear();
      instance = instanceOf(response.headers);
      const times = await readAnswer(response, this.#options.endpoint, wallTime, () => {
        heard.events++;
        hear();
      });
      const clientStalledMs = this.#loop.stalledMs() - stalledAtSendMs;
      return { kind: "completed", instance, clientStalledMs, ...times };
    } catch (error) {
      if (this.#interrupted) return { kind: "interrupted" };
      if (verdict === "client stalled") return { kind: "client stalled" };
      const failure = verdict === "timeout"
        ? this.#timeoutFailure(heard)
        : error instanceof RequestFailure
        ? error
        : new RequestFailure(heard.responded ? "dropped" : "connection", errorText(error));
      return {
        kind: "failed",
        label: failure.label,
        message: failure.message,
        atWallMs: wallTime.now(),
        instance,
        drop: failure.drop,
      };
    } finally {
      finished.abort(FINISHED); // a reason of its own: no DOMException (and its stack) per request
      this.#inFlight.delete(controller);
    }
  }

  /**
   * Waits until a request's time is up and says why, or resolves undefined
   * once `finished` aborts. Its time is up after `requestTimeoutMs` of the
   * client's attention without a sign of life (from the actual send, then
   * the headers and each event read): wall ms the client's own loop spent
   * stalled do not count, so a stream the server keeps feeding never times
   * out, however slowly the client reads it. Back from a stall, the client
   * first takes {@linkcode CLIENT_LAG_TOLERANCE_MS} to read what arrived
   * meanwhile (an overdue timer may fire before those reads). After
   * {@linkcode MAX_WAIT_TIMEOUTS} × the timeout of silence without that much
   * attention, the client gives up: `client stalled`.
   */
  async #deadline(heard: Heard, finished: AbortSignal): Promise<Verdict | undefined> {
    const { wallTime, requestTimeoutMs: timeoutMs } = this.#options;
    let dueWallMs = heard.atWallMs + timeoutMs, checkedStalledMs = heard.stalledMs;
    let gracedAtWallMs: number | undefined; // the sign of life after which a grace was given
    for (;;) {
      await wallTime.sleep(Math.max(0, dueWallMs - wallTime.now()), finished);
      if (finished.aborted) return undefined;
      const nowMs = wallTime.now(), stalledMs = this.#loop.stalledMs(), silentMs = nowMs - heard.atWallMs;
      const justStalled = stalledMs > Math.max(checkedStalledMs, heard.stalledMs);
      const givenUp = silentMs >= MAX_WAIT_TIMEOUTS * timeoutMs;
      checkedStalledMs = stalledMs;
      if (justStalled && !(givenUp && gracedAtWallMs === heard.atWallMs)) {
        gracedAtWallMs = heard.atWallMs;
        dueWallMs = nowMs + CLIENT_LAG_TOLERANCE_MS;
        continue;
      }
      const attentiveMs = silentMs - (stalledMs - heard.stalledMs);
      if (attentiveMs >= timeoutMs) return "timeout";
      if (givenUp) return "client stalled";
      dueWallMs = nowMs + timeoutMs - attentiveMs;
    }
  }

  /** A server's timeout: how far its answer had got. */
  #timeoutFailure(heard: Heard): RequestFailure {
    const got = !heard.responded
      ? "no response"
      : heard.events === 0
      ? "headers, then no event"
      : `${plural(heard.events, "event")}, then none`;
    return new RequestFailure(
      "timeout",
      `${got} for ${this.#options.requestTimeoutMs} ms wall while the client was responsive`,
    );
  }

  /** The report: run metrics from the outcomes, and the generator's own figures. */
  result(skippedInvalid: number): LoadResult {
    const { config, speed } = this.#options;
    const completed = this.#sent.filter((s) => s.outcome?.kind === "completed");
    const collector = collect(this.#sent, config, speed);
    const summary = collector.summary();
    const sent = this.#sent.length;
    const aborted = this.#sent.filter((s) => s.outcome?.kind === "interrupted").length;
    // Given up while the client stalled: unfinished, as far as anyone knows; not failed.
    const inFlight = aborted + this.#clientStalled;
    checkConservation(
      {
        arrivals: sent,
        completed: summary.completed,
        dropped: summary.dropped,
        failed: summary.failed,
        inFlight,
      },
      (this.#endWallMs - this.#startWallMs) * speed,
    );
    const load = this.#stats(completed, aborted);
    return {
      ...summary,
      ...clientUnmeasured(load),
      policy: "remote",
      requests: sent,
      inFlight,
      droppedFraction: droppedFraction(summary.dropped, sent),
      skippedInvalid,
      simulatedMs: (this.#endWallMs - this.#startWallMs) * speed,
      messages: null,
      wallMs: this.#endWallMs - this.#startWallMs,
      scenario: config,
      load,
    };
  }

  /** The generator's own figures. */
  #stats(completed: readonly Sent[], inFlight: number): LoadStats {
    const failedBy: Record<string, number> = {}, failureExamples: Record<string, string> = {};
    for (const { outcome } of this.#sent) {
      if (outcome?.kind !== "failed" || outcome.drop !== undefined) continue;
      failedBy[outcome.label] = (failedBy[outcome.label] ?? 0) + 1;
      failureExamples[outcome.label] ??= outcome.message;
    }
    const answers = completed.map((s) => s.outcome as Extract<Outcome, { kind: "completed" }>);
    const lags = [...this.#lagsMs].sort((a, b) => a - b);
    const loopLags = [...this.#loop.lagsMs].sort((a, b) => a - b);
    const keptUp = (quantile(lags, 0.99) ?? 0) <= CLIENT_LAG_TOLERANCE_MS;
    const loopKeptUp = (quantile(loopLags, 0.99) ?? 0) <= CLIENT_LAG_TOLERANCE_MS;
    const { url: _url, endpoint, model, speed, nonce } = this.#options;
    return {
      url: this.#url,
      endpoint,
      model,
      speed,
      nonce,
      total: this.#total,
      sent: this.#sent.length,
      completed: this.#completed,
      dropped: this.#dropped,
      failed: this.#failed,
      inFlight,
      clientStalled: this.#clientStalled,
      completedThroughStall: answers.filter((a) => a.clientStalledMs > 0).length,
      notSent: this.#total - this.#sent.length,
      failedBy,
      failureExamples,
      usageMissing: answers.filter((a) => a.usage === undefined).length,
      cachedTokensMissing: answers.filter((a) => a.usage?.cachedTokens === undefined).length,
      instanceMissing: answers.filter((a) => a.instance === undefined).length,
      sendLagP50Ms: quantile(lags, 0.5),
      sendLagP99Ms: quantile(lags, 0.99),
      sendLagMaxMs: quantile(lags, 1),
      lateSends: lags.filter((lag) => lag > CLIENT_LAG_TOLERANCE_MS).length,
      keptUp,
      loopLagP50Ms: quantile(loopLags, 0.5),
      loopLagP99Ms: quantile(loopLags, 0.99),
      loopLagMaxMs: quantile(loopLags, 1),
      loopStalledMs: this.#loop.stalledMs(),
      clientBottleneck: !keptUp || !loopKeptUp || this.#clientStalled > 0,
      interrupted: this.#interrupted,
    };
  }
}

/**
 * Feeds every finished request to a metrics collector, as the simulator's
 * instances and router would, in simulated ms (wall offsets from the
 * request's scheduled send, times `speed`).
 */
function collect(sent: readonly Sent[], config: SimulationConfig, speed: number): MetricsCollector {
  let highest = config.instances.count - 1;
  for (const { outcome } of sent) {
    if (outcome?.kind === "completed" && outcome.instance !== undefined) {
      highest = Math.max(highest, outcome.instance);
    }
  }
  const collector = new MetricsCollector(highest + 1, { slo: config.slo, classes: config.workload.classes });
  const kernel = new Kernel({ seed: config.seed });
  const ref = kernel.spawn(ACTOR_NAMES.metrics, collector);
  for (const s of sent) {
    const message = metricsMessage(s, speed);
    if (message !== undefined) kernel.send(ref, message);
  }
  kernel.run();
  return collector;
}

/**
 * What a finished request tells the metrics collector: a completion record;
 * a drop (a refusal the simulator would count as one, see
 * {@linkcode dropReason}); or a final failed attempt, reason `unreachable`
 * (the protocol's reasons are the simulator's; the HTTP kinds are in
 * `load.failedBy`). Undefined for a request aborted by an interrupt.
 */
function metricsMessage(s: Sent, speed: number): MetricsCommand | undefined {
  const o = s.outcome, r = s.request;
  const simMs = (wallMs: number) => r.arrivalMs + (wallMs - s.dueWallMs) * speed;
  const sloClass = r.sloClass === undefined ? {} : { sloClass: r.sloClass };
  if (o?.kind === "completed") {
    const record = {
      requestId: r.id,
      instance: o.instance ?? 0,
      arrivalMs: r.arrivalMs,
      startMs: r.arrivalMs, // unknown client-side: queue wait and busy time are reported null
      firstTokenMs: simMs(o.firstWallMs),
      endMs: simMs(o.endWallMs),
      promptTokens: o.usage?.promptTokens ?? r.prefixTokens + r.suffixTokens,
      cachedTokens: o.usage?.cachedTokens ?? 0,
      outputTokens: o.usage?.completionTokens ?? o.textChunks,
      ...sloClass,
    };
    return { type: "completed", record };
  }
  if (o?.kind !== "failed") return undefined;
  const timeMs = simMs(o.atWallMs);
  if (o.drop !== undefined) {
    return {
      type: "dropped",
      requestId: r.id,
      instance: o.instance ?? -1,
      timeMs,
      reason: o.drop,
      ...sloClass,
    };
  }
  return {
    type: "attempt_failed",
    requestId: r.id,
    instance: o.instance ?? -1,
    timeMs,
    reason: "unreachable",
    attempt: 0,
    final: true,
    arrivalMs: r.arrivalMs,
    ...sloClass,
  };
}

/** The metrics a client cannot measure, null (never 0); hit rates and imbalance too when the server did not say. */
function clientUnmeasured(load: LoadStats) {
  return {
    queueWaitMeanMs: null,
    availableTokenHitRate: null,
    expectedTokenHitRate: null,
    routingRegret: null,
    viewFalsePositiveRate: null,
    busyImbalanceCv: null,
    perInstanceBusyMs: [],
    gpuTokenHitRate: null,
    hostTokenHitRate: null,
    kvUtilizationMean: null,
    preemptions: null,
    retried: null,
    requestsAffected: null,
    recovery: null,
    instanceSeconds: null,
    peakInstances: null,
    ...(load.cachedTokensMissing > 0 && { hitRate: null, tokenHitRate: null }),
    ...(load.instanceMissing > 0 && { imbalance: null, imbalanceCv: null, perInstanceCompleted: [] }),
  } as const;
}

/** The instance that served a response: `x-routed-to` (a gateway's), else `x-sim-instance`; undefined when neither is a whole number. */
export function instanceOf(headers: ClientHeaders): number | undefined {
  for (const name of ["x-routed-to", "x-sim-instance"]) {
    const value = headers.get(name);
    if (value !== null && /^\s*\d+\s*$/.test(value)) return Number(value);
  }
  return undefined;
}

/** Reads a response to its end. @throws {RequestFailure} for an HTTP error, a non-SSE answer or a bad stream. */
async function readAnswer(
  response: ClientResponse,
  endpoint: LoadEndpoint,
  wallTime: WallTime,
  onEvent: () => void,
): Promise<StreamTimes> {
  if (!response.ok) {
    const { message, code } = await errorBody(response);
    throw new RequestFailure(`http ${response.status}`, message, dropReason(response.status, message, code));
  }
  const type = response.headers.get("content-type") ?? "";
  if (!type.includes("text/event-stream")) {
    await response.cancel();
    throw new RequestFailure("bad stream", `expected an SSE stream (text/event-stream), got "${type}"`);
  }
  return await readStream(response.body, endpoint, wallTime, onEvent);
}

/**
 * A refusal a simulator counts as a drop, not a failure: a 503 with code
 * `queue_full` (a full queue), a 400 about the maximum context length
 * (vLLM's words for a prompt too long).
 */
function dropReason(status: number, message: string, code: string | undefined): DropReason | undefined {
  if (status === 503 && code === "queue_full") return "queue_full";
  if (status === 400 && /maximum context length/i.test(message)) return "too_long";
  return undefined;
}

/** The first few KB of an error response: its OpenAI error message and code when it has them. */
async function errorBody(response: ClientResponse): Promise<{ message: string; code: string | undefined }> {
  const reader = response.body.getReader();
  let text = "";
  const decoder = new TextDecoder();
  try {
    for (
      let chunk = await reader.read();
      chunk && !chunk.done && text.length < 4096;
      chunk = await reader.read()
    ) {
      text += decoder.decode(chunk.value, { stream: true });
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
  try {
    const error = JSON.parse(text)?.error;
    if (typeof error?.message === "string") {
      return { message: error.message, code: typeof error.code === "string" ? error.code : undefined };
    }
  } catch {
    // Not JSON: the text itself.
  }
  return { message: text.slice(0, 200) || `HTTP ${response.status}`, code: undefined };
}

/**
 * Reads an SSE stream of completion (or chat) chunks to its end: the wall
 * time of the first and last chunks with text, and the usage chunk; calls
 * `onEvent` as each event is read.
 * @throws {RequestFailure} for an error event, a chunk that is not JSON, a
 * stream without text, or one that ends before `data: [DONE]`.
 */
async function readStream(
  body: ByteStream,
  endpoint: LoadEndpoint,
  wallTime: WallTime,
  onEvent: () => void,
): Promise<StreamTimes> {
  let firstWallMs: number | undefined, endWallMs = 0, textChunks = 0, done = false;
  let usage: StreamUsage | undefined;
  for await (const data of readSseData(body)) {
    onEvent();
    if (done) continue;
    if (data === "[DONE]") {
      done = true;
      continue;
    }
    const chunk = parseChunk(data, endpoint), nowMs = wallTime.now();
    if (chunk.text !== "") {
      firstWallMs ??= nowMs;
      textChunks++;
      endWallMs = nowMs;
    }
    usage = chunk.usage ?? usage;
  }
  if (!done) throw new RequestFailure("dropped", "the stream ended before data: [DONE]");
  if (firstWallMs === undefined) throw new RequestFailure("bad stream", "no chunk carried generated text");
  return { firstWallMs, endWallMs, textChunks, usage };
}

/** One chunk's text and usage. @throws {RequestFailure} for an error event or a chunk that is not a JSON object. */
function parseChunk(data: string, endpoint: LoadEndpoint): { text: string; usage: StreamUsage | undefined } {
  let chunk: unknown;
  try {
    chunk = JSON.parse(data);
  } catch {
    throw new RequestFailure("bad stream", `a chunk is not JSON: ${data.slice(0, 80)}`);
  }
  if (chunk === null || typeof chunk !== "object") {
    throw new RequestFailure("bad stream", `a chunk is not a JSON object: ${data.slice(0, 80)}`);
  }
  const c = chunk as { error?: { message?: unknown }; choices?: unknown; usage?: unknown };
  if (c.error !== undefined) {
    throw new RequestFailure("stream error", String(c.error?.message ?? JSON.stringify(c.error)));
  }
  const choice = Array.isArray(c.choices) ? c.choices[0] : undefined;
  const text = endpoint === "chat" ? choice?.delta?.content : choice?.text;
  return { text: typeof text === "string" ? text : "", usage: usageOf(c.usage) };
}

/** A usage object's counts; undefined when it has none. */
function usageOf(value: unknown): StreamUsage | undefined {
  const u = value as
    | {
      prompt_tokens?: unknown;
      completion_tokens?: unknown;
      prompt_tokens_details?: { cached_tokens?: unknown } | null;
    }
    | null
    | undefined;
  if (typeof u?.prompt_tokens !== "number" || typeof u.completion_tokens !== "number") return undefined;
  const cached = u.prompt_tokens_details?.cached_tokens;
  return {
    promptTokens: u.prompt_tokens,
    completionTokens: u.completion_tokens,
    cachedTokens: typeof cached === "number" ? cached : undefined,
  };
}

/** An error's message on one line. */
function errorText(error: unknown): string {
  return String((error as Error)?.message ?? error).split("\n")[0];
}

/**
 * The human-readable report: `deno task run`'s table (its policy and kernel
 * lines replaced by the load's), then the requests sent, failed and given
 * up, the send lag and the client's loop lag, with
 * {@linkcode clientLimitLines}' warning when the client was the bottleneck.
 */
export function formatLoadReport(result: LoadResult): string {
  const l = result.load;
  const ms = (v: number | null) => v === null ? "n/a" : `${v.toFixed(1)} ms`;
  const table = formatReport(result as unknown as RunReport).split("\n").filter((line) =>
    !line.startsWith("policy ") && !line.startsWith("model:") && !line.startsWith("  kernel") &&
    !line.startsWith("  KV cache")
  ); // the server's policy and model are its own: a client cannot see them
  const kinds = Object.entries(l.failedBy).map(([kind, n]) => `${kind} ${n}`).join(", ");
  const lines = [
    `load · ${l.url} · ${l.endpoint} · model ${l.model} · speed ${l.speed}× · nonce ${l.nonce}`,
    ...table,
    `  load          sent ${l.sent} of ${l.total} · completed ${l.completed} · dropped ${l.dropped} · failed ${l.failed}${
      kinds === "" ? "" : ` (${kinds})`
    } · client stalled ${l.clientStalled} · aborted in flight ${l.inFlight} · ${
      (result.wallMs / 1000).toFixed(1)
    } s wall`,
    `  send lag      p50 ${ms(l.sendLagP50Ms)} · p99 ${ms(l.sendLagP99Ms)} · max ${
      ms(l.sendLagMaxMs)
    } wall behind schedule · ${l.lateSends} sent more than ${CLIENT_LAG_TOLERANCE_MS} ms late`,
    `  client loop   lag p50 ${ms(l.loopLagP50Ms)} · p99 ${ms(l.loopLagP99Ms)} · max ${
      ms(l.loopLagMaxMs)
    } (a ${LOOP_PROBE_MS} ms timer's lateness) · stalled ${l.loopStalledMs.toFixed(0)} ms`,
    ...Object.entries(l.failureExamples).map(([kind, message]) => `  ${kind}: ${message}`),
    ...clientLimitLines(l),
  ];
  if (l.cachedTokensMissing > 0) {
    lines.push(
      `note: ${plural(l.cachedTokensMissing, "answer")} reported no cached tokens, so hit rates are n/a`,
    );
  }
  return lines.join("\n");
}

/**
 * What the client's own limits did to a run, in words: a warning when it was
 * the bottleneck (`load.clientBottleneck`: late sends, a lagging event loop,
 * requests given up while it stalled), a note when only some answers waited
 * through a stall of its loop; none when it kept up.
 */
export function clientLimitLines(l: LoadStats): string[] {
  const ms = (v: number | null) => v === null ? "n/a" : `${v.toFixed(0)} ms`;
  const through =
    `${l.completedThroughStall} completed requests waited through a stall of its loop, so their ` +
    `TTFT and end-to-end include the client's own delay`;
  if (!l.clientBottleneck) {
    return l.completedThroughStall === 0 ? [] : [
      `note: the client's event loop stalled ${l.loopStalledMs.toFixed(0)} ms in all; ${through}`,
    ];
  }
  const facts = [
    `it sent ${l.lateSends} of ${l.sent} requests more than ${CLIENT_LAG_TOLERANCE_MS} ms late ` +
    `(p99 ${ms(l.sendLagP99Ms)}, max ${ms(l.sendLagMaxMs)})`,
    `its event loop lagged p99 ${ms(l.loopLagP99Ms)}, max ${ms(l.loopLagMaxMs)}, stalled ` +
    `${l.loopStalledMs.toFixed(0)} ms in all`,
    ...(l.clientStalled === 0 ? [] : [
      `${plural(l.clientStalled, "request")} ${
        l.clientStalled === 1 ? "was" : "were"
      } given up while it stalled ` +
      `(outcome unknown: counted in flight, ` +
      `not as server failures)`,
    ]),
    ...(l.completedThroughStall === 0 ? [] : [through]),
  ];
  const lighter = l.keptUp ? "" : "the load was lighter than the scenario's and ";
  return [
    `warning: the client was the bottleneck: ${facts.join("; ")}. So ${lighter}the latencies include ` +
    `the client's own delays: lower the rate or the speed, or run the client on another machine`,
  ];
}
