/**
 * @module
 * A serving instance with the original study's FIFO model: one request at a
 * time; time to first token = queue wait + overhead + prefill of the uncached
 * prompt tokens; an optional decode phase keeps the instance busy afterwards.
 */
import { sampleExponential } from "../workload/distributions.ts";
import { NO_EVICTION, PrefixCache } from "../kv_cache/prefix_cache.ts";
import { type FifoInstanceOptions, InstanceActor, type InstanceModel } from "./instance_model.ts";

export type { FifoInstanceOptions };
import { PriorityFifo } from "./priority_fifo.ts";
import {
  assertNever,
  type CompletionRecord,
  type DropReason,
  type InstanceCommand,
  type InstanceStatus,
  type MetricsCommand,
  type Request,
  type ServeCommand,
} from "../protocol.ts";
import type { ActorContext, ActorRef } from "../runtime/kernel.ts";
import { EVENT_DRIVEN, type StatusReportingOptions } from "./status_reporter.ts";

/** The FIFO model's own timers. */
type FifoTimer = Exclude<InstanceCommand, ServeCommand | { type: "report_tick" }>;

const PREFILL_DONE: FifoTimer = Object.freeze({ type: "prefill_done" });
const DECODE_DONE: FifoTimer = Object.freeze({ type: "decode_done" });

/**
 * Serves requests one at a time in arrival order — highest priority first
 * when requests carry one (request classes), in arrival order within a
 * priority. It reports its state to the
 * router (`status`) whenever it accepts, and whenever it finishes a request,
 * and each finished request to the metrics collector.
 */
export class ServingInstance extends InstanceActor<FifoTimer> {
  readonly #options: FifoInstanceOptions;
  readonly #queue = new PriorityFifo<ServeCommand>((command) => command.request.priority);
  readonly cache: PrefixCache;
  #current: ServeCommand | undefined;
  #startMs = 0;
  #firstTokenMs = 0;
  #cachedTokens = 0;
  #busyMs = 0;
  #queuedPromptTokens = 0;
  #prefillTokens = 0;
  /** The factor on service time of requests that start from now on (a `slow` fault); 1: none. */
  #slowdown = 1;
  /** The factor the request in service started with: its decode keeps it. */
  #currentSlowdown = 1;

  constructor(
    index: number,
    options: FifoInstanceOptions,
    metrics: ActorRef<MetricsCommand>,
    reporting: StatusReportingOptions = EVENT_DRIVEN,
  ) {
    super(index, metrics, reporting);
    this.#options = options;
    this.cache = new PrefixCache(options.cacheCapacity);
  }

  /** Requests waiting, not counting the one in service. */
  get waiting(): number {
    return this.#queue.size;
  }

  /** Requests in service (0 or 1). */
  get running(): number {
    return this.#current === undefined ? 0 : 1;
  }

  /**
   * Prompt tokens this instance would find cached for `request` now: its whole
   * prefix while the group is held (computed, or committed to by a request
   * ahead of it in this FIFO queue). No side effects: the router's accounting
   * reads it.
   */
  cachedPrefixTokens(request: Request, _keys?: unknown, _nowMs?: number): number {
    return request.prefixGroup >= 0 && this.cache.has(request.prefixGroup) ? request.prefixTokens : 0;
  }

  /** Total time spent serving, in ms. */
  get busyMs(): number {
    return this.#busyMs;
  }

  /** Nothing is deferred: a stopped run needs no catching up. */
  stopAt(_untilMs: number): number {
    return -Infinity;
  }

  protected onOwn(message: FifoTimer, ctx: ActorContext<InstanceCommand>): void {
    switch (message.type) {
      case "prefill_done":
        this.#prefillDone(ctx);
        break;
      case "decode_done":
        this.#finish(ctx);
        break;
      default:
        assertNever(message);
    }
  }

  /**
   * Slows the requests that start from now on: their prefill and decode
   * times are multiplied by `factor`; the request in service keeps its
   * timer and its decode time.
   */
  protected slowed(factor: number, _ctx: ActorContext<InstanceCommand>): void {
    this.#slowdown = factor;
  }

  /** Busy with one request and the queue behind it full: `queue_full`. */
  protected refusal(_request: Request): DropReason | undefined {
    return this.#current !== undefined && this.#queue.size >= this.#options.maxQueue
      ? "queue_full"
      : undefined;
  }

  protected admit(command: ServeCommand, ctx: ActorContext<InstanceCommand>): void {
    const reporter = this.reporter;
    const group = command.request.prefixGroup;
    if (group >= 0 && this.cache.capacity > 0) {
      if (!this.cache.has(group)) reporter.groupAdded(group);
      const evicted = this.cache.insert(group);
      if (evicted !== NO_EVICTION) reporter.groupEvicted(evicted);
    }
    if (this.#current === undefined) this.#start(command, ctx);
    else {
      this.#queue.enqueue(command);
      this.#queuedPromptTokens += command.request.prefixTokens + command.request.suffixTokens;
    }
  }

  /** Starts serving; re-inserts the group if it was evicted while waiting. */
  #start(command: ServeCommand, ctx: ActorContext<InstanceCommand>): void {
    const { request } = command;
    const group = request.prefixGroup;
    let cachedTokens = 0;
    if (group >= 0 && this.cache.capacity > 0) {
      if (this.cache.hitComputed(group)) {
        cachedTokens = request.prefixTokens;
      } else if (!this.cache.has(group)) {
        this.reporter.groupAdded(group);
        const evicted = this.cache.insert(group);
        if (evicted !== NO_EVICTION) this.reporter.groupEvicted(evicted);
      }
    }
    const options = this.#options;
    const uncached = request.prefixTokens + request.suffixTokens - cachedTokens;
    const meanPrefillMs = options.overheadMs + options.prefillMsPerToken * uncached;
    const prefillMs = options.serviceTime === "exponential"
      ? sampleExponential(meanPrefillMs, ctx.random)
      : meanPrefillMs;
    const slowdown = this.#currentSlowdown = this.#slowdown;
    this.#current = command;
    this.#startMs = ctx.now();
    this.#cachedTokens = cachedTokens;
    this.#prefillTokens = uncached;
    ctx.schedule(prefillMs * slowdown, PREFILL_DONE);
  }

  #prefillDone(ctx: ActorContext<InstanceCommand>): void {
    const current = this.#current!;
    this.#firstTokenMs = ctx.now();
    this.#prefillTokens = 0;
    if (current.request.prefixGroup >= 0) this.cache.markComputed(current.request.prefixGroup);
    const decodeMs = this.#options.decodeMsPerToken * current.request.outputTokens * this.#currentSlowdown;
    this.firstToken(current.request.id, 0, decodeMs / Math.max(1, current.request.outputTokens - 1), ctx);
    // Counts did not change, but a router counting its own active prefill waits for this first token.
    if (this.reporter.wantsFirstTokenReports) this.reporter.changed(ctx, current.replyTo);
    if (decodeMs > 0) ctx.schedule(decodeMs, DECODE_DONE);
    else this.#finish(ctx);
  }

  #finish(ctx: ActorContext<InstanceCommand>): void {
    const current = this.#current!;
    const { request, replyTo } = current;
    const now = ctx.now();
    this.#busyMs += now - this.#startMs;
    const record: CompletionRecord = {
      requestId: request.id,
      instance: this.index,
      arrivalMs: request.arrivalMs,
      startMs: this.#startMs,
      firstTokenMs: this.#firstTokenMs,
      endMs: now,
      promptTokens: request.prefixTokens + request.suffixTokens,
      cachedTokens: this.#cachedTokens,
      outputTokens: request.outputTokens,
      routing: current.routing,
      ...(request.sloClass !== undefined && { sloClass: request.sloClass }),
    };
    this.complete(record, current, ctx);
    this.#current = undefined;
    const next = this.#queue.dequeue();
    if (next !== undefined) {
      this.#queuedPromptTokens -= next.request.prefixTokens + next.request.suffixTokens;
      this.#start(next, ctx);
    }
    this.reporter.changed(ctx, replyTo);
  }

  protected status(): InstanceStatus {
    return {
      type: "status",
      instance: this.index,
      waiting: this.#queue.size,
      running: this.#current === undefined ? 0 : 1,
      queued: this.#queue.size,
      finished: this.finished,
      pendingPrefillTokens: this.#queuedPromptTokens + this.#prefillTokens,
      decodeBlocks: 0,
      kvUtilization: 0,
    };
  }
}

/** The original study's model, described for the registry (actors/instances/instance_models.ts). */
export const model: InstanceModel<"fifo"> = {
  name: "fifo",
  summary: "one request at a time in arrival order; TTFT = wait + overhead + prefill of the uncached prompt",
  cacheUnit: "groups",
  decodes: false,
  describe: (c) =>
    `fifo (${c.overheadMs} ms + ${c.prefillMsPerToken} ms/uncached token, cache ${c.cacheCapacity} groups)`,
  cacheCapacity: (config) => config.cacheCapacity,
  create: (index, config, metrics, reporting) => new ServingInstance(index, config, metrics, reporting),
};
