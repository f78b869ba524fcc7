/**
 * @module
 * How an instance tells the router about itself: on every change (the
 * default, an exact view) or at most once per interval like a metrics scrape,
 * each report delayed by the network — so a router can be made to decide on
 * stale queue depths and cache contents.
 */
import type { InstanceStatus, ReportTick } from "./protocol.ts";
import type { ActorContext, ActorRef } from "./runtime/kernel.ts";

/** Options for {@linkcode StatusReporter}. */
export interface StatusReportingOptions {
  /** 0: report on every change. > 0: report at most once per this many ms (a scrape). @default 0 */
  readonly intervalMs: number;
  /** Network delay of every report, ms. @default 0 */
  readonly delayMs: number;
  /** Include block-level cache events (the router's exact view of a batching instance). @default false */
  readonly blockEvents: boolean;
}

/** The counts part of a status report. */
export type StatusCounts = Omit<
  InstanceStatus,
  "type" | "instance" | "cacheAdded" | "cacheEvicted" | "blocksAdded" | "blocksEvicted"
>;

const TICK: ReportTick = Object.freeze({ type: "report_tick" });

/**
 * Collects an instance's cache events and sends status reports. The instance
 * calls `changed` after every state change and routes `report_tick` to `tick`.
 */
export class StatusReporter {
  readonly #instance: number;
  readonly #options: StatusReportingOptions;
  readonly #snapshot: () => StatusCounts;
  #replyTo: ActorRef<InstanceStatus> | undefined;
  #groupsAdded: number[] = [];
  #groupsEvicted: number[] = [];
  #blocksAdded: number[] = [];
  #blocksEvicted: number[] = [];
  #ticking = false;
  #dirty = false;

  constructor(instance: number, options: StatusReportingOptions, snapshot: () => StatusCounts) {
    this.#instance = instance;
    this.#options = options;
    this.#snapshot = snapshot;
  }

  /** Whether block-level events are wanted (so the instance can skip collecting them). */
  get wantsBlockEvents(): boolean {
    return this.#options.blockEvents;
  }

  /** Whether cache events wait to be reported. */
  get hasEvents(): boolean {
    return this.#groupsAdded.length + this.#groupsEvicted.length + this.#blocksAdded.length +
        this.#blocksEvicted.length > 0;
  }

  /** Records a group the instance advertises. */
  groupAdded(group: number): void {
    this.#groupsAdded.push(group);
  }

  /** Records a group whose first block was evicted. */
  groupEvicted(group: number): void {
    this.#groupsEvicted.push(group);
  }

  /** Records a block key that became cached. */
  blockAdded(key: number): void {
    if (this.#options.blockEvents) this.#blocksAdded.push(key);
  }

  /** Records an evicted block key. */
  blockEvicted(key: number): void {
    if (this.#options.blockEvents) this.#blocksEvicted.push(key);
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

  #send(ctx: ActorContext<ReportTick>): void {
    const replyTo = this.#replyTo;
    if (replyTo === undefined) return;
    const base: InstanceStatus = { type: "status", instance: this.#instance, ...this.#snapshot() };
    const added = this.#groupsAdded, evicted = this.#groupsEvicted;
    const delay = this.#options.delayMs;
    let status: InstanceStatus = base;
    if (
      added.length > 0 || evicted.length > 0 || this.#blocksAdded.length > 0 || this.#blocksEvicted.length > 0
    ) {
      status = {
        ...base,
        ...(added.length > 0 ? { cacheAdded: added[0] } : {}),
        ...(evicted.length > 0 ? { cacheEvicted: evicted[0] } : {}),
        ...(this.#blocksAdded.length > 0 ? { blocksAdded: this.#blocksAdded } : {}),
        ...(this.#blocksEvicted.length > 0 ? { blocksEvicted: this.#blocksEvicted } : {}),
      };
      this.#blocksAdded = [];
      this.#blocksEvicted = [];
    }
    ctx.send(replyTo, status, delay);
    // More than one group event at once (rare): one extra report each.
    for (let i = 1; i < Math.max(added.length, evicted.length); i++) {
      ctx.send(replyTo, {
        ...base,
        ...(i < added.length ? { cacheAdded: added[i] } : {}),
        ...(i < evicted.length ? { cacheEvicted: evicted[i] } : {}),
      }, delay);
    }
    if (added.length > 0) this.#groupsAdded = [];
    if (evicted.length > 0) this.#groupsEvicted = [];
  }
}
