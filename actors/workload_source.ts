/**
 * @module
 * The workload source actor: Poisson arrivals of requests whose prompts share
 * a prefix with probability `sharedFrac`, the group drawn by Zipf popularity.
 */
import { type LengthDistribution, sampleExponential, sampleLength, ZipfSampler } from "./distributions.ts";
import { assertNever, type Request, type RouteCommand, type SourceCommand } from "./protocol.ts";
import type { Actor, ActorContext, ActorRef } from "./runtime/kernel.ts";

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
 * distributions only), then the gap to the next arrival.
 */
export class WorkloadSource implements Actor<SourceCommand> {
  readonly #options: WorkloadOptions;
  readonly #router: ActorRef<RouteCommand>;
  readonly #zipf: ZipfSampler;
  readonly #meanGapMs: number;
  readonly #batchSize: number;
  #nextArrivalMs = -1;
  #emitted = 0;

  constructor(options: WorkloadOptions, router: ActorRef<RouteCommand>, batchSize = 64) {
    this.#options = options;
    this.#router = router;
    this.#zipf = new ZipfSampler(options.prefix.groups, options.prefix.zipf);
    this.#meanGapMs = 1000 / options.ratePerSec;
    this.#batchSize = batchSize;
  }

  /** Requests sent to the router so far (some may not have arrived yet). */
  get emitted(): number {
    return this.#emitted;
  }

  handle(message: SourceCommand, ctx: ActorContext<SourceCommand>): void {
    switch (message.type) {
      case "start":
        if (this.#nextArrivalMs < 0) {
          this.#nextArrivalMs = ctx.now() + sampleExponential(this.#meanGapMs, ctx.random);
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
    const { requests, prefix, suffixTokens, outputTokens } = this.#options;
    const now = ctx.now();
    const random = ctx.random;
    const end = Math.min(requests, this.#emitted + this.#batchSize);
    let arrivalMs = this.#nextArrivalMs;
    let lastMs = now;
    while (this.#emitted < end) {
      const shared = random() < prefix.sharedFrac;
      const request: Request = {
        id: this.#emitted,
        arrivalMs,
        prefixGroup: shared ? this.#zipf.sample(random) : -1,
        prefixTokens: prefix.tokens,
        suffixTokens: sampleLength(suffixTokens, random),
        outputTokens: sampleLength(outputTokens, random),
      };
      ctx.send(this.#router, { type: "route", request }, arrivalMs - now);
      this.#emitted++;
      lastMs = arrivalMs;
      arrivalMs += sampleExponential(this.#meanGapMs, random);
    }
    this.#nextArrivalMs = arrivalMs;
    if (this.#emitted < requests) ctx.schedule(lastMs - now, EMIT);
  }
}
