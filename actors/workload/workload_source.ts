/**
 * @module
 * The workload source actor: Poisson, bursty or time-varying arrivals of
 * requests whose prompts share a prefix with probability `sharedFrac`, the
 * group drawn by Zipf popularity.
 */
import { type ArrivalOptions, type ArrivalProcess, createArrivalProcess } from "./arrival_process.ts";

export type { ArrivalOptions, RateProfile } from "./arrival_process.ts";
import { type LengthDistribution, sampleExponential, sampleLength, ZipfSampler } from "./distributions.ts";
import { assertNever, type Request, type RouteCommand, type SourceCommand } from "../protocol.ts";
import type { Actor, ActorContext, ActorRef } from "../runtime/kernel.ts";
import { EventQueue } from "../runtime/event_queue.ts";
import { GROUP_KEY_STRIDE } from "../kv_cache/prefix_keys.ts";
import type { RequestClass, RequestClasses } from "./request_classes.ts";

/** The shared-prefix part of the workload. */
export interface PrefixOptions {
  /** Number of shared prefix groups in the catalogue. */
  readonly groups: number;
  /** Zipf exponent of group popularity; 0 is uniform. */
  readonly zipf: number;
  /** Share of requests whose prefix is shared (the rest are unique). */
  readonly sharedFrac: number;
  /** Prefix length in tokens, the same for shared and unique prefixes. */
  readonly tokens: number;
}

/** Options for {@linkcode WorkloadSource}. */
export interface WorkloadOptions {
  /** Requests to emit in total. */
  readonly requests: number;
  /** Poisson arrival rate, requests per simulated second. */
  readonly ratePerSec: number;
  /** Prefix sharing and popularity. */
  readonly prefix: PrefixOptions;
  /** Tokens after the prefix. */
  readonly suffixTokens: LengthDistribution;
  /** Tokens generated per request. */
  readonly outputTokens: LengthDistribution;
  /** Multi-turn chat sessions instead of independent requests (batching model). */
  readonly sessions?: SessionOptions;
  /** Request classes (shares, priorities, SLOs), synthetic or replayed; absent: requests carry no class. */
  readonly classes?: readonly RequestClass[];
  /** How arrivals (or session starts) are spaced in time. @default Poisson at `ratePerSec`, constant */
  readonly arrivals?: ArrivalOptions;
}

/**
 * Multi-turn sessions. Arrivals (at `ratePerSec`, spaced by `arrivals`) start sessions; each has a
 * geometric number of turns (mean `turnsMean`), spaced by exponential think
 * times (open loop: a turn does not wait for the previous answer). Turn k's
 * prompt is turn k−1's prompt and answer plus a new message (`suffixTokens`),
 * so each turn extends the previous turn's context and can reuse its cache.
 */
export interface SessionOptions {
  /** Mean turns per session, >= 1. */
  readonly turnsMean: number;
  /** Mean think time between a turn's arrival and the next's, ms. */
  readonly thinkTimeMs: number;
  /** Tokens each prefix key covers; must be a multiple of the instance's block size. @default 16 */
  readonly keyTokens: number;
}

/** Group g's chunk j (the same keys the batching model derives for group prefixes). */
const groupKey = (group: number, chunk: number) => (group + 1) * GROUP_KEY_STRIDE + chunk;
/** Session s's chunk j: a separate (negative) key space. */
const sessionKey = (session: number, chunk: number) => -((session + 1) * GROUP_KEY_STRIDE + chunk);

interface SessionTurn {
  readonly session: number;
  readonly group: number;
  /** Turns still to come, this one included. */
  readonly turnsLeft: number;
  /** Tokens of context before this turn's message. */
  readonly contextTokens: number;
  /** Tokens of the shared group prefix at the start of the context. */
  readonly sharedTokens: number;
}

const EMIT: SourceCommand = Object.freeze({ type: "emit" });

/**
 * Emits `requests` arrivals to the router. To keep the kernel's queue busy
 * with useful work, it draws arrivals in batches of `batchSize` and sends each
 * with the delay to its own arrival time; a timer brings it back at the last
 * one. Batching changes no arrival time and no draw.
 *
 * Draw order per request, from the source's own stream: shared-or-unique,
 * Zipf group (if shared), suffix length and output length (non-constant
 * distributions only), then the gap to the next arrival (the draws of
 * {@linkcode createArrivalProcess}: one exponential for Poisson arrivals).
 * A request's class, when classes are configured, comes from their own
 * stream (`classes`), so the draws above are the same with or without them.
 */
export class WorkloadSource implements Actor<SourceCommand> {
  readonly #options: WorkloadOptions;
  readonly #router: ActorRef<RouteCommand>;
  readonly #zipf: ZipfSampler;
  readonly #arrivals: ArrivalProcess;
  readonly #batchSize: number;
  readonly #classes: RequestClasses | undefined;
  #nextArrivalMs = -1;
  #emitted = 0;
  readonly #turns = new EventQueue<SessionTurn>();
  #turnSeq = 0;
  #sessions = 0;

  /**
   * @param options The workload.
   * @param router Where the requests go.
   * @param batchSize Arrivals sent per handler call.
   * @param classes Draws each request's class; absent: requests carry none.
   * @throws {RangeError} for arrival options the process cannot run on (see {@linkcode createArrivalProcess}).
   */
  constructor(
    options: WorkloadOptions,
    router: ActorRef<RouteCommand>,
    batchSize = 64,
    classes?: RequestClasses,
  ) {
    this.#options = options;
    this.#router = router;
    this.#zipf = new ZipfSampler(options.prefix.groups, options.prefix.zipf);
    this.#arrivals = createArrivalProcess(options.ratePerSec, options.arrivals);
    this.#batchSize = batchSize;
    this.#classes = classes;
  }

  /** Requests sent to the router so far (some may not have arrived yet). */
  get emitted(): number {
    return this.#emitted;
  }

  handle(message: SourceCommand, ctx: ActorContext<SourceCommand>): void {
    switch (message.type) {
      case "start":
        if (this.#nextArrivalMs < 0) {
          this.#nextArrivalMs = this.#arrivals.first(ctx.now(), ctx.random);
          this.#emitBatch(ctx);
        }
        break;
      case "emit":
        this.#emitBatch(ctx);
        break;
      default:
        assertNever(message);
    }
  }

  #emitBatch(ctx: ActorContext<SourceCommand>): void {
    if (this.#options.sessions) return this.#emitSessionBatch(ctx, this.#options.sessions);
    const { requests, prefix, suffixTokens, outputTokens } = this.#options;
    const now = ctx.now();
    const random = ctx.random;
    const end = Math.min(requests, this.#emitted + this.#batchSize);
    let arrivalMs = this.#nextArrivalMs;
    let lastMs = now;
    while (this.#emitted < end) {
      const shared = random() < prefix.sharedFrac;
      let request: Request = {
        id: this.#emitted,
        arrivalMs,
        prefixGroup: shared ? this.#zipf.sample(random) : -1,
        prefixTokens: prefix.tokens,
        suffixTokens: sampleLength(suffixTokens, random),
        outputTokens: sampleLength(outputTokens, random),
      };
      if (this.#classes !== undefined) request = this.#classes.assign(request);
      ctx.send(this.#router, { type: "route", request }, arrivalMs - now);
      this.#emitted++;
      lastMs = arrivalMs;
      arrivalMs = this.#arrivals.next(random);
    }
    this.#nextArrivalMs = arrivalMs;
    if (this.#emitted < requests) ctx.schedule(lastMs - now, EMIT);
  }

  /**
   * Session mode: the arrival process spaces session starts. Draw order: at
   * each session start, shared-or-unique, Zipf group, number of turns, gap to
   * the next session start; at each turn, message length, output length,
   * think time to the next turn. Each request carries its session's index.
   */
  #emitSessionBatch(ctx: ActorContext<SourceCommand>, sessions: SessionOptions): void {
    const { requests, prefix, suffixTokens, outputTokens } = this.#options;
    const now = ctx.now(), random = ctx.random, pending = this.#turns;
    const end = Math.min(requests, this.#emitted + this.#batchSize);
    let lastMs = now;
    while (this.#emitted < end) {
      if (pending.size === 0 || this.#nextArrivalMs <= pending.peekTimeMs()) {
        // A new session starts.
        const shared = random() < prefix.sharedFrac;
        const group = shared ? this.#zipf.sample(random) : -1;
        const p = 1 / sessions.turnsMean;
        const turns = p >= 1 ? 1 : 1 + Math.floor(Math.log(1 - random()) / Math.log(1 - p));
        const session = this.#sessions++;
        pending.push(this.#nextArrivalMs, this.#turnSeq++, 0, {
          session,
          group,
          turnsLeft: turns,
          contextTokens: prefix.tokens,
          sharedTokens: shared ? prefix.tokens : 0,
        });
        this.#nextArrivalMs = this.#arrivals.next(random);
        continue;
      }
      const turn = pending.pop();
      const arrivalMs = pending.poppedTimeMs;
      const message = sampleLength(suffixTokens, random);
      const output = sampleLength(outputTokens, random);
      const prompt = turn.contextTokens + message;
      const k = sessions.keyTokens;
      const sharedChunks = Math.floor(turn.sharedTokens / k);
      const prefixKeys = Array.from(
        { length: Math.floor(prompt / k) },
        (_, j) => j < sharedChunks ? groupKey(turn.group, j) : sessionKey(turn.session, j),
      );
      let request: Request = {
        id: this.#emitted,
        arrivalMs,
        prefixGroup: turn.group >= 0 ? turn.group : prefix.groups + turn.session,
        prefixTokens: turn.contextTokens,
        suffixTokens: message,
        outputTokens: output,
        prefixKeys,
        keyTokens: k,
        session: turn.session,
      };
      if (this.#classes !== undefined) request = this.#classes.assign(request);
      ctx.send(this.#router, { type: "route", request }, arrivalMs - now);
      this.#emitted++;
      lastMs = arrivalMs;
      if (turn.turnsLeft > 1) {
        pending.push(arrivalMs + sampleExponential(sessions.thinkTimeMs, random), this.#turnSeq++, 0, {
          ...turn,
          turnsLeft: turn.turnsLeft - 1,
          contextTokens: prompt + output,
        });
      }
    }
    if (this.#emitted < requests) ctx.schedule(lastMs - now, EMIT);
  }
}
