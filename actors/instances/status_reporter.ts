/**
 * @module
 * How an instance tells the router about itself: on every change (the
 * default, an exact view) or at most once per interval like a metrics scrape,
 * each report delayed by the network — so a router can be made to decide on
 * stale queue depths and cache contents. In a virtual run where nothing is
 * stale, reports go on a {@linkcode StatusBoard} the router reads before each
 * decision instead of travelling as messages (design.md, "Reports pulled").
 */
import type { FirstToken, InstanceStatus, ReportTick } from "../protocol.ts";
import type { ActorContext, ActorRef } from "../runtime/kernel.ts";

/** Status on every change, no delay, no block events: the router sees the instance exactly. */
export const EVENT_DRIVEN: StatusReportingOptions = Object.freeze({
  intervalMs: 0,
  delayMs: 0,
  blockEvents: false,
});

/** Options for {@linkcode StatusReporter}. */
export interface StatusReportingOptions {
  /** 0: report on every change. > 0: report at most once per this many ms (a scrape). @default 0 */
  readonly intervalMs: number;
  /** Network delay of every report, ms. @default 0 */
  readonly delayMs: number;
  /** Include block-level cache events (the router's exact view of a batching instance). @default false */
  readonly blockEvents: boolean;
  /** Report whenever pending prefill, decode blocks or KV utilisation change, not only the counts. @default false */
  readonly loadSignals?: boolean;
  /**
   * Include the ids of requests that produced their first token or finished
   * since the last report (a router's own per-request accounting). @default false
   */
  readonly requestEvents?: boolean;
  /**
   * With `requestEvents`: report at each first token even when no count
   * changed, so the router's active prefill is current (a built-in policy
   * that reads `requests`). Without it the ids ride on the next report.
   * @default false
   */
  readonly firstTokenReports?: boolean;
  /** Where to announce each request's first token (`deno task serve`'s streaming). @default nowhere */
  readonly firstTokensTo?: ActorRef<FirstToken>;
  /**
   * Post every report on this board instead of sending it (a virtual run
   * whose reports are neither periodic nor delayed: {@linkcode StatusBoard}).
   * @default none: reports are messages
   */
  readonly board?: StatusBoard;
}

/** The clock a {@linkcode StatusBoard} stamps reports with: the kernel's. */
export interface BoardClock {
  /** Simulated time, ms. */
  now(): number;
  /** Which delivery is being handled (the kernel's count of deliveries so far): orders reports within one instant. */
  delivery(): number;
}

/**
 * Where the instances of a virtual run post their status reports when
 * nothing makes them stale (no interval, no delay), so that a report costs
 * no message: the router reads the board right before it handles each of
 * its messages ({@linkcode drain}) and applies exactly the reports that, as
 * messages, would have been delivered before that one — those posted at an
 * earlier time, and, for a message sent at this very instant (it went through
 * the kernel's lane), those posted before it was sent — in the order they
 * were posted. An instance in a decode stretch whose load signals the router
 * reads is asked ({@linkcode watch}) to post the step boundaries it skipped.
 * Same process only: Workers keep messages.
 */
export class StatusBoard {
  readonly #clock: BoardClock;
  /** Reports posted and not yet applied, with the time and delivery they were posted at. */
  #statuses: InstanceStatus[] = [];
  #times: number[] = [];
  #deliveries: number[] = [];
  /** Instances whose skipped step boundaries the router must hear of: each one's puller. */
  readonly #watched = new Map<number, (nowMs: number) => boolean>();
  /** Messages to the router sent for now, by the delivery that sent them. */
  readonly #lane = new Map<object, number>();

  constructor(clock: BoardClock) {
    this.#clock = clock;
  }

  /** Posts `status` as a report sent at `timeMs` (default now) from the delivery being handled. */
  post(status: InstanceStatus, timeMs: number = this.#clock.now()): void {
    this.#statuses.push(status);
    this.#times.push(timeMs);
    this.#deliveries.push(this.#clock.delivery());
  }

  /**
   * Until `pull` returns false, calls it with the time of each router message
   * before its reports are applied: the instance posts what changed at the
   * step boundaries before that time (a decode stretch runs them as one event).
   */
  watch(instance: number, pull: (nowMs: number) => boolean): void {
    this.#watched.set(instance, pull);
  }

  /** `message` goes to the router with no delay from the delivery being handled (the kernel delivers it this instant, in send order). */
  markLane(message: object): void {
    this.#lane.set(message, this.#clock.delivery());
  }

  /**
   * Applies, in the order posted, the reports that would have reached the
   * router before `message`, delivered at `nowMs`: posted earlier, or, when
   * `message` was sent this instant, posted before it was sent.
   */
  drain(message: object, nowMs: number, apply: (status: InstanceStatus, timeMs: number) => void): void {
    let sentBy = -1;
    if (this.#lane.size > 0) {
      sentBy = this.#lane.get(message) ?? -1;
      if (sentBy >= 0) this.#lane.delete(message);
    }
    if (this.#watched.size > 0) {
      for (const [instance, pull] of this.#watched) if (!pull(nowMs)) this.#watched.delete(instance);
    }
    const statuses = this.#statuses, times = this.#times, deliveries = this.#deliveries;
    const n = statuses.length;
    if (n === 0) return;
    let kept = 0;
    for (let k = 0; k < n; k++) {
      const t = times[k];
      if (t < nowMs || (t === nowMs && deliveries[k] < sentBy)) apply(statuses[k], t);
      else {
        statuses[kept] = statuses[k];
        times[kept] = t;
        deliveries[kept++] = deliveries[k];
      }
    }
    if (kept === 0) {
      // Fresh arrays: the old ones would hold their reports until they next grew.
      this.#statuses = [];
      this.#times = [];
      this.#deliveries = [];
    } else statuses.length = times.length = deliveries.length = kept;
  }

  /** Applies every report still on the board (the run is over: a test may compare the router's view). */
  drainAll(apply: (status: InstanceStatus, timeMs: number) => void): void {
    this.#statuses.forEach((status, k) => apply(status, this.#times[k]));
    this.#statuses = [];
    this.#times = [];
    this.#deliveries = [];
  }
}

const TICK: ReportTick = Object.freeze({ type: "report_tick" });

/**
 * `status` with the request events `prefilled` and `finished` in front of
 * its own (a copy; `status` itself when both are empty): for a sender that
 * collects events beside its reports (a gateway's upstream) or holds back
 * those of reports it swallowed (a partitioned instance).
 */
export function withRequestEvents(
  status: InstanceStatus,
  prefilled: readonly number[],
  finished: readonly number[],
): InstanceStatus {
  if (prefilled.length === 0 && finished.length === 0) return status;
  const prefilledIds = [...prefilled, ...(status.prefilledIds ?? [])];
  const finishedIds = [...finished, ...(status.finishedIds ?? [])];
  return {
    ...status,
    ...(prefilledIds.length > 0 && { prefilledIds }),
    ...(finishedIds.length > 0 && { finishedIds }),
  };
}

/**
 * Collects an instance's cache events and sends status reports. The instance
 * calls `changed` after every state change and routes `report_tick` to `tick`.
 */
export class StatusReporter {
  readonly #instance: number;
  readonly #options: StatusReportingOptions;
  readonly #snapshot: () => InstanceStatus;
  #replyTo: ActorRef<InstanceStatus> | undefined;
  /** Net cache events since the last report: group → true (now cached) or false (now evicted). */
  #groups = new Map<number, boolean>();
  /** Net block-run events since the last report: run key → blocks cached now. */
  #runs = new Map<number, number>();
  /** Requests whose first token came since the last report (with `requestEvents`). */
  #prefilled: number[] = [];
  /** Requests that finished since the last report (with `requestEvents`). */
  #finished: number[] = [];
  #ticking = false;
  #dirty = false;

  /**
   * @param snapshot Builds the instance's current status (counts, no cache
   *   events); the reporter adds the events.
   */
  constructor(instance: number, options: StatusReportingOptions, snapshot: () => InstanceStatus) {
    this.#instance = instance;
    this.#options = options;
    this.#snapshot = snapshot;
  }

  /** Whether block-level events are wanted (so the instance can skip collecting them). */
  get wantsBlockEvents(): boolean {
    return this.#options.blockEvents;
  }

  /** Whether load signals (pending prefill, decode blocks, KV utilisation) must be kept fresh. */
  get wantsLoadSignals(): boolean {
    return this.#options.loadSignals === true;
  }

  /** Whether a first token must be reported at once, though no count changed (see `firstTokenReports`). */
  get wantsFirstTokenReports(): boolean {
    return this.#options.requestEvents === true && this.#options.firstTokenReports === true;
  }

  /** Whether cache or request events wait to be reported. */
  get hasEvents(): boolean {
    return this.#groups.size + this.#runs.size + this.#prefilled.length + this.#finished.length > 0;
  }

  /** Records a group the instance advertises. */
  groupAdded(group: number): void {
    this.#groups.delete(group); // re-inserted last: events keep their order
    this.#groups.set(group, true);
  }

  /** Records a group whose first block was evicted. */
  groupEvicted(group: number): void {
    this.#groups.delete(group);
    this.#groups.set(group, false);
  }

  /** Records that request `requestId` produced its first token (reported with `requestEvents`). */
  prefilled(requestId: number): void {
    if (this.#options.requestEvents === true) this.#prefilled.push(requestId);
  }

  /** Records that request `requestId` finished here (reported with `requestEvents`). */
  finished(requestId: number): void {
    if (this.#options.requestEvents === true) this.#finished.push(requestId);
  }

  /** Records that run `key` now has its leading `cachedBlocks` blocks cached (0: evicted). */
  runChanged(key: number, cachedBlocks: number): void {
    if (this.#options.blockEvents) this.#runs.set(key, cachedBlocks);
  }

  /** Whether reports go on a board (pulled by the router), not in messages. */
  get pulled(): boolean {
    return this.#options.board !== undefined;
  }

  /** The board reports go on, if any. */
  get board(): StatusBoard | undefined {
    return this.#options.board;
  }

  /**
   * State changed: report now, or at the next tick. On a board, `ctx` may be
   * absent and `atMs` may name the earlier instant the report stands for (a
   * step boundary a decode stretch skipped).
   */
  changed(ctx: ActorContext<ReportTick> | undefined, replyTo: ActorRef<InstanceStatus>, atMs?: number): void {
    this.#replyTo = replyTo;
    if (this.#options.intervalMs === 0) {
      this.#send(ctx, atMs);
      return;
    }
    if (ctx === undefined) {
      throw new TypeError("StatusReporter.changed: periodic reports need the actor's context");
    }
    this.#dirty = true;
    if (!this.#ticking) {
      this.#ticking = true;
      ctx.schedule(this.#options.intervalMs, TICK);
    }
  }

  /** The periodic report: sends what changed since the last one, and keeps ticking while things change. */
  tick(ctx: ActorContext<ReportTick>): void {
    if (!this.#dirty) {
      this.#ticking = false;
      return;
    }
    this.#dirty = false;
    this.#send(ctx);
    ctx.schedule(this.#options.intervalMs, TICK);
  }

  /**
   * Sends the counts with the net cache events since the last report: each
   * key appears once, as added or as evicted (whichever happened last), so
   * the router's view ends where the instance's cache is, whatever the order
   * the router applies them in.
   */
  #send(ctx: ActorContext<ReportTick> | undefined, atMs?: number): void {
    const replyTo = this.#replyTo;
    if (replyTo === undefined) return;
    const base = this.#snapshot();
    const delay = this.#options.delayMs, board = this.#options.board;
    const deliver = (status: InstanceStatus) =>
      board === undefined ? ctx!.send(replyTo, status, delay) : board.post(status, atMs);
    if (this.#prefilled.length > 0) {
      (base as { prefilledIds?: readonly number[] }).prefilledIds = this.#prefilled;
      this.#prefilled = [];
    }
    if (this.#finished.length > 0) {
      (base as { finishedIds?: readonly number[] }).finishedIds = this.#finished;
      this.#finished = [];
    }
    if (this.#groups.size === 0 && this.#runs.size === 0) {
      deliver(base); // the common case: counts only, one object
      return;
    }
    let cachedRuns: number[] | undefined;
    if (this.#runs.size > 0) {
      const runs: number[] = cachedRuns = new Array(2 * this.#runs.size);
      let j = 0;
      this.#runs.forEach((cached, key) => {
        runs[j++] = key;
        runs[j++] = cached;
      });
      this.#runs = new Map();
    }
    if (this.#groups.size === 0) {
      // Block events only (the batching model's usual report): one object.
      (base as { cachedRuns?: readonly number[] }).cachedRuns = cachedRuns;
      deliver(base);
      return;
    }
    const added: number[] = [], evicted: number[] = [];
    for (const [group, cached] of this.#groups) (cached ? added : evicted).push(group);
    this.#groups = new Map();
    const count = Math.max(1, added.length, evicted.length);
    for (let i = 0; i < count; i++) {
      const status: { -readonly [K in keyof InstanceStatus]: InstanceStatus[K] } = { ...base };
      if (i < added.length) status.cacheAdded = added[i];
      if (i < evicted.length) status.cacheEvicted = evicted[i];
      if (i === 0 && cachedRuns !== undefined) status.cachedRuns = cachedRuns;
      deliver(status);
    }
  }
}
