/**
 * @module
 * How an instance tells the router about itself: on every change (the
 * default, an exact view) or at most once per interval like a metrics scrape,
 * each report delayed by the network — so a router can be made to decide on
 * stale queue depths and cache contents.
 */
import type { FirstToken, InstanceStatus, ReportTick } from "./protocol.ts";
import type { ActorContext, ActorRef } from "./runtime/kernel.ts";

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
  readonly #runs = new Map<number, number>();
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

  /** State changed: report now, or at the next tick. */
  changed(ctx: ActorContext<ReportTick>, replyTo: ActorRef<InstanceStatus>): void {
    this.#replyTo = replyTo;
    if (this.#options.intervalMs === 0) {
      this.#send(ctx);
      return;
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
  #send(ctx: ActorContext<ReportTick>): void {
    const replyTo = this.#replyTo;
    if (replyTo === undefined) return;
    const base = this.#snapshot();
    const delay = this.#options.delayMs;
    if (this.#prefilled.length > 0) {
      (base as { prefilledIds?: readonly number[] }).prefilledIds = this.#prefilled;
      this.#prefilled = [];
    }
    if (this.#finished.length > 0) {
      (base as { finishedIds?: readonly number[] }).finishedIds = this.#finished;
      this.#finished = [];
    }
    if (this.#groups.size === 0 && this.#runs.size === 0) {
      ctx.send(replyTo, base, delay); // the common case: counts only, one object
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
      this.#runs.clear();
    }
    if (this.#groups.size === 0) {
      // Block events only (the batching model's usual report): one object.
      (base as { cachedRuns?: readonly number[] }).cachedRuns = cachedRuns;
      ctx.send(replyTo, base, delay);
      return;
    }
    const added: number[] = [], evicted: number[] = [];
    for (const [group, cached] of this.#groups) (cached ? added : evicted).push(group);
    this.#groups.clear();
    const count = Math.max(1, added.length, evicted.length);
    for (let i = 0; i < count; i++) {
      const status: { -readonly [K in keyof InstanceStatus]: InstanceStatus[K] } = { ...base };
      if (i < added.length) status.cacheAdded = added[i];
      if (i < evicted.length) status.cacheEvicted = evicted[i];
      if (i === 0 && cachedRuns !== undefined) status.cachedRuns = cachedRuns;
      ctx.send(replyTo, status, delay);
    }
  }
}
