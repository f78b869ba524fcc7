/**
 * @module
 * An upstream server as the gateway's router sees it: an actor that takes the
 * router's `serve`, asks its host to forward the HTTP request, and turns what
 * the host reports back (first token, finish, failure, `/metrics` scrape)
 * into the protocol's status reports, failures and completion records, and
 * judges from them whether the upstream is alive.
 */
import { FinishCounts } from "./instance_model.ts";
import {
  assertNever,
  type CompletionRecord,
  type EndOutcome,
  type GatewayMetricsCommand,
  type InstanceStatus,
  type Probe,
  type RequestFailed,
  type ServeCommand,
} from "../protocol.ts";
import { withRequestEvents } from "./status_reporter.ts";
import type { Actor, ActorContext, ActorRef } from "../runtime/kernel.ts";

/** What an upstream's `/metrics` showed of its load. */
export interface UpstreamLoad {
  /** Requests in service. */
  readonly running: number;
  /** Requests queued. */
  readonly waiting: number;
  /** KV cache in use, 0..1; null when the upstream does not say. */
  readonly kvUsage: number | null;
}

/**
 * Why an exchange with an upstream (a request or a scrape) failed:
 * - `connection`: no connection, or it broke (refused, reset, unknown host):
 *   the process is gone, and the upstream is taken as down at once;
 * - `answer`: it answered, badly (a 5xx, a 429, a body or event we cannot
 *   read): it is alive;
 * - `timeout`: it stayed silent longer than allowed: busy or hung, unknown.
 */
export type FailureCause = "connection" | "answer" | "timeout";

/**
 * What the host reports of one upstream, injected into the kernel:
 * - `upstream_first_token`: the first generated text of request `requestId`
 *   came back (streaming: the first chunk with text; otherwise the response).
 * - `upstream_finished`: it completed, with the upstream's usage (or the
 *   host's own counts where the upstream gave none).
 * - `upstream_failed`: it failed before any byte went to the client, for
 *   `cause`: the router may retry.
 * - `upstream_ended`: it ended otherwise once bytes had gone to the client
 *   (see {@linkcode EndOutcome}): nothing to retry; `cause` when the upstream
 *   broke it.
 * - `upstream_scraped`: a `/metrics` scrape answered; `load` null when it
 *   carries no load metrics we read.
 * - `upstream_scrape_failed`: a scrape failed, for `cause`; `heard` when the
 *   upstream sent bytes on a request meanwhile (a sign of life: the failure
 *   is not counted, only the load is stale).
 */
export type UpstreamEvent =
  | { readonly type: "upstream_first_token"; readonly requestId: number }
  | {
    readonly type: "upstream_finished";
    readonly requestId: number;
    readonly promptTokens: number;
    readonly cachedTokens: number;
    readonly outputTokens: number;
  }
  | { readonly type: "upstream_failed"; readonly requestId: number; readonly cause: FailureCause }
  | {
    readonly type: "upstream_ended";
    readonly requestId: number;
    readonly outcome: EndOutcome;
    readonly cause?: FailureCause;
  }
  | { readonly type: "upstream_scraped"; readonly load: UpstreamLoad | null }
  | { readonly type: "upstream_scrape_failed"; readonly cause: FailureCause; readonly heard?: boolean };

/** Commands an {@linkcode UpstreamInstance} accepts. */
export type UpstreamCommand = ServeCommand | Probe | UpstreamEvent;

/** The host's side: where an upstream's requests go over the network. */
export interface UpstreamHost {
  /**
   * Forward `command`'s request to upstream `index`; report what happens
   * with `upstream_*` events for `command.request.id` (exactly one of
   * finished, failed or ended).
   */
  forward(index: number, command: ServeCommand): void;
}

/** The default of {@linkcode UpstreamInstanceOptions.scrapeFailures}. */
export const DEFAULT_SCRAPE_FAILURES = 3;

/** Options for {@linkcode UpstreamInstance}. */
export interface UpstreamInstanceOptions {
  /**
   * Consecutive failed scrapes (timed out, or a 5xx) after which the upstream
   * is taken as down, counted since its last sign of life (see the class's
   * "Health"). A refused or reset connection takes it down at once.
   * @default 3
   */
  readonly scrapeFailures?: number;
  /** Where completion records and other ends go. */
  readonly metrics: ActorRef<GatewayMetricsCommand>;
  /**
   * Report at each request's first token too (its id in `prefilledIds`), for
   * a router that counts its own active prefill (a policy reading
   * `requests`, such as Dynamo's). Ids ride on every report either way.
   * @default false
   */
  readonly requestEvents?: boolean;
}

/** One request forwarded and not finished. */
interface Open {
  readonly command: ServeCommand;
  readonly forwardedMs: number;
  firstTokenMs: number | undefined;
}

/**
 * Stands for upstream `index` in the gateway's kernel. Status reports go to
 * the router after every finish and every scrape: waiting, running and KV
 * usage from the latest scrape (without load metrics: its own requests in
 * flight as running), finished counts (per router replica) from its own
 * bookkeeping, and no cache events — the gateway's view is approximate.
 *
 * Health: the upstream is alive until a connection to it is refused or reset
 * (a request's or a scrape's), or `scrapeFailures` scrapes in a row fail with
 * no sign of life between them; it is alive again at its next sign of life: a
 * scrape that answers; a request's first token, finish, own 4xx or bad
 * answer; bytes on a request while a scrape waited. While down it reports
 * `draining` and answers no probe; while alive it answers every probe, so a
 * stale scrape never makes it unroutable — its load is only older. A failure
 * before the first byte goes back to the router as `request_failed` (reason
 * `unreachable`): the router retries it elsewhere; unless the connection
 * failed, a report follows at once, so the upstream is routable again for the
 * requests after it.
 *
 * @example
 * ```ts
 * const up = new UpstreamInstance(0, host, { metrics });
 * const ref = kernel.spawn("upstream/0", up);
 * up.reportTo(router);
 * ```
 */
export class UpstreamInstance implements Actor<UpstreamCommand> {
  readonly #requestEvents: boolean;
  /** Requests whose first token came back since the last report (reported once, by id). */
  #prefilledIds: number[] = [];
  /** Requests closed (finished, failed or ended) since the last report. */
  #finishedIds: number[] = [];
  /** The upstream's index among the gateway's upstreams. */
  readonly index: number;
  readonly #host: UpstreamHost;
  readonly #scrapeFailures: number;
  readonly #metrics: ActorRef<GatewayMetricsCommand>;
  readonly #counts = new FinishCounts();
  readonly #open = new Map<number, Open>();
  #router: ActorRef<InstanceStatus> | undefined;
  #load: UpstreamLoad | null = null;
  #alive = true;
  #failedScrapes = 0;

  constructor(index: number, host: UpstreamHost, options: UpstreamInstanceOptions) {
    const failures = options.scrapeFailures ?? DEFAULT_SCRAPE_FAILURES;
    if (!(Number.isInteger(failures) && failures >= 1)) {
      throw new RangeError(`UpstreamInstance.scrapeFailures: expected an integer >= 1, got ${failures}`);
    }
    this.index = index;
    this.#host = host;
    this.#scrapeFailures = failures;
    this.#requestEvents = options.requestEvents === true;
    this.#metrics = options.metrics;
  }

  /** Names the router its reports go to before it first hears from it (a `serve`'s or probe's `replyTo`). */
  reportTo(router: ActorRef<InstanceStatus>): void {
    this.#router = router;
  }

  /** Requests forwarded and not finished. */
  get inFlight(): number {
    return this.#open.size;
  }

  /** Requests finished here so far (completed, failed or ended). */
  get finished(): number {
    return this.#counts.total;
  }

  /** Whether the upstream is taken as alive (routable): see the class's "Health". */
  get alive(): boolean {
    return this.#alive;
  }

  /** Scrapes failed in a row since its last sign of life. */
  get failedScrapes(): number {
    return this.#failedScrapes;
  }

  /** The latest scrape's load (null before one, or without load metrics). */
  get load(): UpstreamLoad | null {
    return this.#load;
  }

  handle(message: UpstreamCommand, ctx: ActorContext<UpstreamCommand>): void {
    switch (message.type) {
      case "serve":
        this.#router = message.replyTo;
        this.#counts.see(message.replica);
        this.#open.set(message.request.id, {
          command: message,
          forwardedMs: ctx.now(),
          firstTokenMs: undefined,
        });
        this.#host.forward(this.index, message);
        return;
      case "probe":
        this.#router = message.replyTo;
        if (this.#alive) ctx.send(message.replyTo, this.#withEvents(this.status()));
        return;
      case "upstream_first_token": {
        const open = this.#open.get(message.requestId);
        if (open === undefined || open.firstTokenMs !== undefined) return;
        open.firstTokenMs = ctx.now();
        // A router that counts its own active prefill (Dynamo) lets go of it at the first token.
        this.#prefilledIds.push(message.requestId);
        if (this.#heard() || this.#requestEvents) this.#report(ctx);
        return;
      }
      case "upstream_finished":
        return this.#finished(message, ctx);
      case "upstream_failed":
        return this.#failed(message.requestId, message.cause, ctx);
      case "upstream_ended":
        return this.#ended(message, ctx);
      case "upstream_scraped":
        this.#heard();
        this.#load = message.load;
        return this.#report(ctx);
      case "upstream_scrape_failed":
        if (message.cause === "connection") {
          if (this.#down()) this.#report(ctx);
        } else if (message.heard === true) {
          if (this.#heard()) this.#report(ctx);
        } else if (++this.#failedScrapes >= this.#scrapeFailures && this.#down()) {
          this.#report(ctx);
        }
        return;
      default:
        assertNever(message);
    }
  }

  /** The status a report carries now. */
  status(): InstanceStatus {
    const load = this.#load, by = this.#counts.byReplica;
    const waiting = load?.waiting ?? 0;
    const base: InstanceStatus = {
      type: "status",
      instance: this.index,
      waiting,
      running: load?.running ?? this.#open.size,
      queued: waiting,
      finished: this.#counts.total,
      pendingPrefillTokens: 0,
      decodeBlocks: 0,
      kvUtilization: load?.kvUsage ?? 0,
    };
    const withReplicas = by === undefined ? base : { ...base, finishedBy: [...by] };
    return this.#alive ? withReplicas : { ...withReplicas, draining: true };
  }

  /** A sign of life: the failed scrapes are forgiven; true when the upstream was down (now alive again). */
  #heard(): boolean {
    this.#failedScrapes = 0;
    if (this.#alive) return false;
    this.#alive = true;
    return true;
  }

  /** Takes the upstream as down; true when it was alive. */
  #down(): boolean {
    if (!this.#alive) return false;
    this.#alive = false;
    return true;
  }

  /** Takes request `requestId` off the open ones, counting it finished; undefined when it is not open (a late report). */
  #close(requestId: number): Open | undefined {
    const open = this.#open.get(requestId);
    if (open === undefined) return undefined;
    this.#open.delete(requestId);
    this.#counts.count(open.command.replica);
    this.#finishedIds.push(requestId);
    return open;
  }

  #finished(
    m: Extract<UpstreamEvent, { type: "upstream_finished" }>,
    ctx: ActorContext<UpstreamCommand>,
  ): void {
    const open = this.#close(m.requestId);
    if (open === undefined) return;
    this.#heard();
    const request = open.command.request, endMs = ctx.now();
    const record: CompletionRecord = {
      requestId: request.id,
      instance: this.index,
      arrivalMs: request.arrivalMs,
      startMs: open.forwardedMs,
      firstTokenMs: open.firstTokenMs ?? endMs,
      endMs,
      promptTokens: m.promptTokens,
      cachedTokens: Math.min(m.cachedTokens, m.promptTokens),
      outputTokens: m.outputTokens,
      ...(open.command.routing !== undefined && { routing: open.command.routing }),
      ...(request.sloClass !== undefined && { sloClass: request.sloClass }),
    };
    ctx.send(this.#metrics, { type: "completed", record });
    this.#report(ctx);
  }

  /**
   * A failure before any byte reached the client: the router's to retry (it
   * takes the upstream down for that retry). A failed connection keeps it
   * down; otherwise a report follows, after the retry was placed, and the
   * upstream is routable again.
   */
  #failed(requestId: number, cause: FailureCause, ctx: ActorContext<UpstreamCommand>): void {
    const open = this.#close(requestId);
    if (open === undefined) return;
    const command = open.command;
    const failure: RequestFailed = {
      type: "request_failed",
      command,
      instance: this.index,
      reason: "unreachable",
    };
    ctx.send(command.replyTo as unknown as ActorRef<RequestFailed>, failure);
    if (cause === "connection") {
      if (this.#down()) this.#report(ctx);
      return;
    }
    if (cause === "answer") this.#heard();
    if (this.#alive) this.#report(ctx);
  }

  #ended(m: Extract<UpstreamEvent, { type: "upstream_ended" }>, ctx: ActorContext<UpstreamCommand>): void {
    if (this.#close(m.requestId) === undefined) return;
    if (m.cause === "connection") this.#down();
    else if (m.outcome === "rejected" || m.cause === "answer") this.#heard();
    ctx.send(this.#metrics, {
      type: "request_ended",
      requestId: m.requestId,
      instance: this.index,
      timeMs: ctx.now(),
      outcome: m.outcome,
    });
    this.#report(ctx);
  }

  #report(ctx: ActorContext<UpstreamCommand>): void {
    if (this.#router !== undefined) ctx.send(this.#router, this.#withEvents(this.status()));
  }

  /**
   * `status` with the ids of the requests that produced their first token or
   * finished since the last report, for a router that accounts per request
   * (each id is reported once).
   */
  #withEvents(status: InstanceStatus): InstanceStatus {
    const events = withRequestEvents(status, this.#prefilledIds, this.#finishedIds);
    this.#prefilledIds = [];
    this.#finishedIds = [];
    return events;
  }
}
