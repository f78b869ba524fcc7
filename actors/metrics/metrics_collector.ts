/**
 * @module
 * The metrics collector actor: folds every completion, drop and failure into
 * streaming statistics (no per-request arrays, except the few a fault run's
 * recovery time needs), and summarises them at the end of a run.
 */
import type { AutoscaleConfig, Fault } from "../dynamics/faults.ts";
import {
  assertNever,
  type CompletionRecord,
  type DropReason,
  type FailReason,
  type InstanceStats,
  type MetricsCommand,
  type ScalingDecision,
} from "../protocol.ts";
import { HdrHistogram } from "./hdr_histogram.ts";
import type { RequestClass } from "../workload/request_classes.ts";
import type { Actor, ActorContext } from "../runtime/kernel.ts";

/**
 * Simulated times must stay below 2^43 ms (≈ 279 years): up to there a double
 * resolves 2^-10 ms, finer than the 1 µs unit TTFT is recorded in; beyond it a
 * service time added to the clock is rounded away (at 1e302 ms a 30 ms prefill
 * adds nothing, and TTFT reads 0).
 */
export const MAX_SIMULATED_MS = 2 ** 43;

/** Service-level objectives, ms; a field absent is not checked. */
export interface SloTargets {
  /** Time to first token (arrival to first token), > 0; `Infinity` is met by every completed request. */
  readonly ttftMs?: number;
  /** Time per output token after the first, > 0; a request with at most one output token meets it. */
  readonly tpotMs?: number;
}

/** Options for {@linkcode MetricsCollector}: what it judges requests by. */
export interface MetricsOptions {
  /** SLOs of every request its class does not override. @default none */
  readonly slo?: SloTargets;
  /** The run's request classes, indexed by `sloClass`: their names and SLO overrides. @default none */
  readonly classes?: readonly RequestClass[];
  /**
   * Each instance's pool, when the fleet is split into pools that share work
   * differently (disaggregated prefill and decode): imbalance is measured
   * within each pool and the worst reported. @default one pool
   */
  readonly pools?: readonly number[];
  /**
   * The run's faults: the collector then keeps each request's arrival and
   * TTFT to measure, per fault, the time until TTFT recovers
   * ({@linkcode recoveryTimes}). @default none
   */
  readonly faults?: readonly Fault[];
  /** The run's autoscaler: the collector then records its decisions and the instance-seconds they cost. @default none */
  readonly autoscale?: AutoscaleConfig;
}

/** Why a request failed for good: its last attempt's reason at an instance, or no instance to take it. */
export type FailedReason = FailReason | "no_instance";

/** One fault's effect on TTFT (see {@linkcode recoveryTimes}). */
export interface FaultRecovery {
  /** The fault's index in the scenario's `faults` list. */
  readonly fault: number;
  /** When it started, simulated ms. */
  readonly atMs: number;
  /** TTFT p50 of the requests that arrived in the {@linkcode RECOVERY_WINDOW_MS} before it, ms; null when too few did. */
  readonly preFaultTtftP50Ms: number | null;
  /**
   * From the fault's start to the first window whose TTFT p50 is back within
   * {@linkcode RECOVERY_TOLERANCE} of the pre-fault p50, ms; null when it
   * never is before the last arrival, or there is no pre-fault p50.
   */
  readonly timeToRecoverMs: number | null;
}

/**
 * The summary of one run's requests; each field is defined in design.md.
 * A mean or ratio over completed requests is `null` when it has nothing to
 * average (nothing completed, say) — never 0, which would read as a measurement.
 * Counts and rates per second stay numbers: 0 of them is a true 0.
 */
export interface RequestMetrics {
  /** Requests completed. */
  readonly completed: number;
  /** Requests dropped (refused by an instance: full queue, too long), all reasons. */
  readonly dropped: number;
  /** Drops per reason. */
  readonly droppedByReason: Readonly<Record<DropReason, number>>;
  /** Mean time to first token, ms; null when nothing completed. */
  readonly ttftMeanMs: number | null;
  /** TTFT percentiles, ms (HDR histogram, 3 significant digits); null when nothing completed. */
  readonly ttftP50Ms: number | null;
  readonly ttftP90Ms: number | null;
  readonly ttftP99Ms: number | null;
  /** Mean wait in queue (arrival to start of service), ms; null when nothing completed. */
  readonly queueWaitMeanMs: number | null;
  /** Mean arrival-to-last-token time, ms; null when nothing completed. */
  readonly e2eMeanMs: number | null;
  /** Share of completed requests that found any of their prefix cached; null when nothing completed. */
  readonly hitRate: number | null;
  /** Cached prompt tokens / all prompt tokens, over completed requests; null when they had no prompt tokens. */
  readonly tokenHitRate: number | null;
  /**
   * Longest prefix cached on any instance when each request was routed / all
   * prompt tokens: the token hit rate a perfect router could have had. Null
   * when a completed request lacks it (real-time mode) or none completed.
   */
  readonly availableTokenHitRate: number | null;
  /**
   * Prompt tokens the router's view expected cached on the chosen instance /
   * their prompt tokens, over requests whose policy consulted the view; null
   * when none did (cache-blind policies).
   */
  readonly expectedTokenHitRate: number | null;
  /** `availableTokenHitRate − tokenHitRate`: the hit rate routing left on the table (may be negative); null when either is. */
  readonly routingRegret: number | null;
  /**
   * Expected tokens the chosen instance did not hold / expected tokens: how
   * often the view promised a prefix that was not there; null when nothing
   * was expected or it could not be checked (real-time mode).
   */
  readonly viewFalsePositiveRate: number | null;
  /**
   * (max − min) / mean of per-instance completed counts; null when nothing
   * completed. Disaggregated: within each pool (prefills, decodes), the worse.
   */
  readonly imbalance: number | null;
  /** Coefficient of variation (population) of per-instance completed counts (per pool, the worse); null when nothing completed. */
  readonly imbalanceCv: number | null;
  /** Coefficient of variation of per-instance busy time (per pool, the worse): a time-weighted imbalance; null when no instance was busy. */
  readonly busyImbalanceCv: number | null;
  /** Of `tokenHitRate`, the prompt tokens found in GPU memory; null when it is. */
  readonly gpuTokenHitRate: number | null;
  /** Of `tokenHitRate`, the prompt tokens loaded from a host-memory KV tier; null when it is. */
  readonly hostTokenHitRate: number | null;
  /**
   * Disaggregated: mean KV transfer time, from the decode instance's pull to
   * the KV's arrival, including the wait for the prefill instance's link, ms;
   * null when no request was transferred.
   */
  readonly kvTransferMeanMs: number | null;
  /** Its 99th percentile (HDR histogram, 3 significant digits), ms; null when no request was transferred. */
  readonly kvTransferP99Ms: number | null;
  /** Of `kvTransferMeanMs`, the mean wait for the link, ms; null when no request was transferred. */
  readonly kvQueueMeanMs: number | null;
  /** Completed requests per simulated second, first arrival to last completion. */
  readonly throughputRps: number;
  /**
   * Completed requests that met every SLO set, per simulated second (the same
   * window as `throughputRps`); equal to it when no SLO is set.
   */
  readonly goodputRps: number;
  /**
   * Requests that met every SLO set / (completed + dropped + failed): a drop
   * or a failure misses. Null when no SLO is set (scenario or class) or
   * nothing finished.
   */
  readonly sloAttainment: number | null;
  /**
   * Per class name, the same ratio over that class's requests (null for a
   * class with none finished, or when no SLO is set); null when no classes
   * are configured.
   */
  readonly classAttainment: Readonly<Record<string, number | null>> | null;
  /** Mean time per output token after the first, ms, over requests with more than one output token; null when there were none. */
  readonly tpotMeanMs: number | null;
  /** Output tokens per simulated second (first arrival to last completion). */
  readonly outputTokensPerSec: number;
  /** Prompt plus output tokens per simulated second. */
  readonly tokensPerSec: number;
  /** Time-weighted mean share of KV blocks in use, over instances reporting KV (batching model); null when none did or nothing completed. */
  readonly kvUtilizationMean: number | null;
  /** Preemptions, all instances. */
  readonly preemptions: number;
  /** Completed requests per instance (disaggregated: a prefill instance counts the requests it prefilled). */
  readonly perInstanceCompleted: readonly number[];
  /** Busy time per instance, ms. */
  readonly perInstanceBusyMs: readonly number[];
  /**
   * Requests failed for good (faults): their last attempt failed with no
   * retry left, or no instance could take them. A final state beside
   * completed and dropped, never counted as a drop; 0 without faults.
   */
  readonly failed: number;
  /** Attempts that failed and were retried elsewhere (a request may count several times); 0 without faults. */
  readonly retried: number;
  /** Requests with at least one failed attempt, whether retried, failed or completed in the end; 0 without faults. */
  readonly requestsAffected: number;
  /** `failed` per reason: the reason of the request's last failed attempt (`no_instance`: none could take it). */
  readonly failedByReason: Readonly<Record<FailedReason, number>>;
  /** Per fault, in the scenario's order, how long TTFT took to recover ({@linkcode recoveryTimes}); null without faults. */
  readonly recovery: readonly FaultRecovery[] | null;
  /** The earliest fault's `timeToRecoverMs` (the first in list order among equal starts); null without faults. */
  readonly timeToRecoverMs: number | null;
  /** The autoscaler's decisions in order: one at the start, then every change; null without autoscaling. */
  readonly scaling: readonly ScalingDecision[] | null;
  /**
   * Instances active or provisioning, integrated over simulated time from 0
   * to the last completion, in instance-seconds (what the fleet cost; a
   * fixed fleet's is its size times that time); null when nothing completed.
   */
  readonly instanceSeconds: number | null;
  /** Most instances active or provisioning at once (a fixed fleet's size). */
  readonly peakInstances: number | null;
}

/** The recovery metric's sliding window: TTFT p50 is taken over the requests that arrived within this long, ms. */
export const RECOVERY_WINDOW_MS = 10_000;
/** The recovery metric's window advances by this much at a time, so a time to recover is a multiple of it, ms. */
export const RECOVERY_STEP_MS = 1_000;
/** A window with fewer arrivals than this has no p50 the recovery metric trusts (it is skipped; a pre-fault one is null). */
export const RECOVERY_MIN_REQUESTS = 20;
/** TTFT has recovered when a window's p50 is at most this factor of the pre-fault p50 (within 10%). */
export const RECOVERY_TOLERANCE = 1.1;

/** A histogram of durations in µs (1 µs to 10¹³ µs, 3 significant digits): TTFT's and KV transfers'. */
function microsHistogram(): HdrHistogram {
  return new HdrHistogram(3, 1e13);
}

/** Collects completions and drops from all instances. */
export class MetricsCollector implements Actor<MetricsCommand> {
  readonly #ttftMicros = microsHistogram();
  readonly #perInstanceCompleted: number[];
  readonly #pools: readonly number[] | undefined;
  readonly #transferMicros = microsHistogram();
  #transfers = 0;
  #transferSumMs = 0;
  #transferQueueSumMs = 0;
  #hostCachedTokens = 0;
  readonly #perInstanceBusyMs: number[];
  readonly #droppedByReason: Record<DropReason, number> = { queue_full: 0, too_long: 0 };
  readonly #stats: (InstanceStats | undefined)[];
  #tpotSumMs = 0;
  #tpotCount = 0;
  #outputTokens = 0;
  #completed = 0;
  #dropped = 0;
  #ttftSumMs = 0;
  #waitSumMs = 0;
  #e2eSumMs = 0;
  #hits = 0;
  #promptTokens = 0;
  #cachedTokens = 0;
  /** Routing accounting (see RoutingNote): sums over completed requests. */
  #availableTokens = 0;
  #lackingAvailable = 0;
  #expectedTokens = 0;
  #expectedPromptTokens = 0;
  #expectedCount = 0;
  #falseTokens = 0;
  #uncheckedExpected = 0;
  #firstArrivalMs = Infinity;
  #lastEndMs = 0;
  /** SLO accounting (see MetricsOptions). Targets per class, then one for classless requests; Infinity = not checked. */
  readonly #sloSet: boolean;
  readonly #judging: boolean;
  readonly #classNames: readonly string[] | undefined;
  readonly #ttftTargetMs: number[];
  readonly #tpotTargetMs: number[];
  readonly #classMet: number[];
  readonly #classFinished: number[];
  #met = 0;
  /** Faults and retries (see RequestMetrics). */
  #failed = 0;
  #retried = 0;
  #affected = 0;
  readonly #failedByReason: Record<FailedReason, number> = {
    crash: 0,
    unreachable: 0,
    draining: 0,
    no_instance: 0,
  };
  /** Fault runs only: the faults, and each finished request's arrival and TTFT (Infinity: dropped or failed). */
  readonly #faults: readonly Fault[] | undefined;
  #keptArrivalMs: Float64Array | undefined;
  #keptTtftMs: Float64Array | undefined;
  #kept = 0;
  #recoveryMemo: { readonly kept: number; readonly value: readonly FaultRecovery[] } | undefined;
  /** Autoscaling only: its configuration and its decisions in order. */
  readonly #autoscale: AutoscaleConfig | undefined;
  readonly #scaling: ScalingDecision[] = [];
  /** Requests finished and met as of the last `slo_probe`, for the next window. */
  #probedFinished = 0;
  #probedMet = 0;

  /**
   * @param instanceCount Instances reporting to it.
   * @param options The SLOs and request classes requests are judged by.
   */
  constructor(instanceCount: number, options: MetricsOptions = {}) {
    this.#perInstanceCompleted = new Array(instanceCount).fill(0);
    this.#perInstanceBusyMs = new Array(instanceCount).fill(0);
    this.#stats = new Array(instanceCount).fill(undefined);
    this.#pools = options.pools;
    const { slo = {}, classes = [] } = options;
    const targets = [
      ...classes.map((c) => ({ ttftMs: c.sloTtftMs ?? slo.ttftMs, tpotMs: c.sloTpotMs ?? slo.tpotMs })),
      slo,
    ];
    this.#sloSet = targets.some((t) => t.ttftMs !== undefined || t.tpotMs !== undefined);
    this.#judging = this.#sloSet || classes.length > 0;
    this.#classNames = classes.length > 0 ? classes.map((c) => c.name) : undefined;
    this.#ttftTargetMs = targets.map((t) => t.ttftMs ?? Infinity);
    this.#tpotTargetMs = targets.map((t) => t.tpotMs ?? Infinity);
    this.#classMet = new Array(classes.length).fill(0);
    this.#classFinished = new Array(classes.length).fill(0);
    if (options.faults !== undefined && options.faults.length > 0) {
      this.#faults = options.faults;
      this.#keptArrivalMs = new Float64Array(1024);
      this.#keptTtftMs = new Float64Array(1024);
    }
    this.#autoscale = options.autoscale;
  }

  /** Requests completed so far. */
  get completed(): number {
    return this.#completed;
  }

  /** Requests dropped so far. */
  get dropped(): number {
    return this.#dropped;
  }

  /** Requests failed for good so far (faults). */
  get failed(): number {
    return this.#failed;
  }

  handle(message: MetricsCommand, ctx: ActorContext<MetricsCommand>): void {
    switch (message.type) {
      case "completed": {
        const r = message.record;
        if (!(r.endMs < MAX_SIMULATED_MS)) {
          throw new RangeError(
            `simulated time reached ${r.endMs} ms, past 2^43 ms (≈ 279 years), where time no longer resolves ` +
              `the 1 µs TTFT is measured in: the workload is spread too thin (raise the rate or trace speed)`,
          );
        }
        const ttftMs = r.firstTokenMs - r.arrivalMs;
        this.#completed++;
        this.#ttftSumMs += ttftMs;
        this.#ttftMicros.recordValue(Math.max(1, Math.round(ttftMs * 1000)));
        this.#waitSumMs += r.startMs - r.arrivalMs;
        this.#e2eSumMs += r.endMs - r.arrivalMs;
        if (r.cachedTokens > 0) this.#hits++;
        this.#promptTokens += r.promptTokens;
        this.#cachedTokens += r.cachedTokens;
        this.#account(r);
        this.#outputTokens += r.outputTokens;
        if (r.outputTokens > 1) {
          this.#tpotSumMs += (r.endMs - r.firstTokenMs) / (r.outputTokens - 1);
          this.#tpotCount++;
        }
        this.#perInstanceCompleted[r.instance]++;
        this.#perInstanceBusyMs[r.instance] += r.endMs - r.startMs;
        if (r.hostCachedTokens !== undefined) this.#hostCachedTokens += r.hostCachedTokens;
        if (r.prefillInstance !== undefined) this.#disaggregated(r);
        if (r.arrivalMs < this.#firstArrivalMs) this.#firstArrivalMs = r.arrivalMs;
        if (r.endMs > this.#lastEndMs) this.#lastEndMs = r.endMs;
        if (this.#judging) this.#judge(r, ttftMs);
        if (this.#keptArrivalMs !== undefined) this.#keep(r.arrivalMs, ttftMs);
        break;
      }
      case "dropped":
        this.#dropped++;
        this.#droppedByReason[message.reason]++;
        if (message.sloClass !== undefined) this.#classFinished[message.sloClass]++;
        // A drop happens on the request's arrival at the instance: its time stands for the arrival.
        if (this.#keptArrivalMs !== undefined) this.#keep(message.timeMs, Infinity);
        break;
      case "instance_stats":
        this.#stats[message.instance] = message;
        break;
      case "attempt_failed":
        this.#attemptFailed(message);
        break;
      case "scaled":
        this.#scaling.push(message.decision);
        break;
      case "slo_probe":
        this.#answerSloProbe(message.replyTo, ctx);
        break;
      default:
        assertNever(message);
    }
  }

  /**
   * A failed attempt: a request is affected at its first (attempt 0, also a
   * `no_instance` failure on arrival); a final one fails the request, which
   * misses its SLO like a drop.
   */
  #attemptFailed(m: Extract<MetricsCommand, { type: "attempt_failed" }>): void {
    if (m.attempt === 0) this.#affected++;
    if (!m.final) {
      this.#retried++;
      return;
    }
    this.#failed++;
    this.#failedByReason[m.reason]++;
    if (m.sloClass !== undefined) this.#classFinished[m.sloClass]++;
    if (this.#keptArrivalMs !== undefined) this.#keep(m.arrivalMs, Infinity);
  }

  /**
   * Answers an SLO probe with the requests finished (completed, dropped or
   * failed) since the last one and those of them that met every SLO (every
   * completed one when no SLO is set).
   */
  #answerSloProbe(
    replyTo: Extract<MetricsCommand, { type: "slo_probe" }>["replyTo"],
    ctx: ActorContext<MetricsCommand>,
  ): void {
    const finished = this.#completed + this.#dropped + this.#failed;
    const met = this.#judging ? this.#met : this.#completed;
    ctx.send(replyTo, {
      type: "slo_window",
      finished: finished - this.#probedFinished,
      met: met - this.#probedMet,
    });
    this.#probedFinished = finished;
    this.#probedMet = met;
  }

  /** Keeps one finished request's arrival and TTFT (fault runs), growing the arrays as needed. */
  #keep(arrivalMs: number, ttftMs: number): void {
    let arrivals = this.#keptArrivalMs!, ttfts = this.#keptTtftMs!;
    if (this.#kept === arrivals.length) {
      arrivals = new Float64Array(arrivals.length * 2);
      arrivals.set(this.#keptArrivalMs!);
      ttfts = new Float64Array(arrivals.length);
      ttfts.set(this.#keptTtftMs!);
      this.#keptArrivalMs = arrivals;
      this.#keptTtftMs = ttfts;
    }
    arrivals[this.#kept] = arrivalMs;
    ttfts[this.#kept++] = ttftMs;
  }

  /**
   * Counts a completed request that met every SLO of its class (TTFT, and
   * TPOT when it has more than one output token) toward goodput and attainment.
   */
  #judge(r: CompletionRecord, ttftMs: number): void {
    const c = r.sloClass ?? this.#classFinished.length;
    const classed = r.sloClass !== undefined;
    if (classed) this.#classFinished[c]++;
    if (ttftMs > this.#ttftTargetMs[c]) return;
    const tpotMs = r.outputTokens > 1 ? (r.endMs - r.firstTokenMs) / (r.outputTokens - 1) : 0;
    if (tpotMs > this.#tpotTargetMs[c]) return;
    this.#met++;
    if (classed) this.#classMet[c]++;
  }

  /** Per class name, its requests that met their SLOs / its finished requests; null without classes. */
  #classAttainment(): Record<string, number | null> | null {
    const names = this.#classNames;
    if (names === undefined) return null;
    return Object.fromEntries(
      names.map((name, c) => [name, this.#sloSet ? ratio(this.#classMet[c], this.#classFinished[c]) : null]),
    );
  }

  /** Adds a completed request's routing note to the accounting sums. */
  #account(r: CompletionRecord): void {
    const note = r.routing;
    if (note === undefined || note.availableTokens === null) this.#lackingAvailable++;
    else this.#availableTokens += note.availableTokens;
    if (note === undefined || note.expectedTokens === null) return;
    this.#expectedCount++;
    this.#expectedTokens += note.expectedTokens;
    this.#expectedPromptTokens += r.promptTokens;
    if (note.falseTokens === null) this.#uncheckedExpected++;
    else this.#falseTokens += note.falseTokens;
  }

  /** A disaggregated request: its prefill instance's share of the work, and its KV transfer. */
  #disaggregated(r: CompletionRecord): void {
    this.#perInstanceCompleted[r.prefillInstance!]++;
    if (r.kvTransferMs === undefined) return;
    this.#transfers++;
    this.#transferSumMs += r.kvTransferMs;
    this.#transferQueueSumMs += r.kvQueueMs ?? 0;
    this.#transferMicros.recordValue(Math.max(1, Math.round(r.kvTransferMs * 1000)));
  }

  /** `measure` of each pool's values, the worst (largest); null when every pool's is. */
  #perPool(values: readonly number[], measure: (v: readonly number[]) => number | null): number | null {
    const pools = this.#pools;
    if (pools === undefined) return measure(values);
    let worst: number | null = null;
    for (const pool of new Set(pools)) {
      const m = measure(values.filter((_, i) => pools[i] === pool));
      if (m !== null && (worst === null || m > worst)) worst = m;
    }
    return worst;
  }

  #busyMsPerInstance(): number[] {
    return this.#perInstanceBusyMs.map((ms, i) => this.#stats[i]?.busyMs ?? ms);
  }

  /** The statistics so far: means and ratios are null, not 0 or NaN, when they average nothing. */
  summary(): RequestMetrics {
    const n = this.#completed;
    const h = this.#ttftMicros;
    const percentileMs = (p: number) => n === 0 ? null : h.getValueAtPercentile(p) / 1000;
    const spanMs = this.#lastEndMs - this.#firstArrivalMs;
    const perSec = (count: number) => spanMs > 0 ? count / (spanMs / 1000) : 0;
    const reported = this.#stats.filter((s): s is InstanceStats => s !== undefined && s.kvBlocks > 0);
    const tokenHitRate = ratio(this.#cachedTokens, this.#promptTokens);
    const availableTokenHitRate = this.#lackingAvailable > 0
      ? null
      : ratio(this.#availableTokens, this.#promptTokens);
    return {
      completed: n,
      dropped: this.#dropped,
      droppedByReason: { ...this.#droppedByReason },
      ttftMeanMs: ratio(this.#ttftSumMs, n),
      ttftP50Ms: percentileMs(50),
      ttftP90Ms: percentileMs(90),
      ttftP99Ms: percentileMs(99),
      queueWaitMeanMs: ratio(this.#waitSumMs, n),
      e2eMeanMs: ratio(this.#e2eSumMs, n),
      hitRate: ratio(this.#hits, n),
      tokenHitRate,
      availableTokenHitRate,
      expectedTokenHitRate: this.#expectedCount === 0
        ? null
        : ratio(this.#expectedTokens, this.#expectedPromptTokens),
      routingRegret: availableTokenHitRate === null || tokenHitRate === null
        ? null
        : availableTokenHitRate - tokenHitRate,
      viewFalsePositiveRate: this.#uncheckedExpected > 0
        ? null
        : ratio(this.#falseTokens, this.#expectedTokens),
      imbalance: this.#perPool(this.#perInstanceCompleted, rangeOverMean),
      imbalanceCv: this.#perPool(this.#perInstanceCompleted, coefficientOfVariation),
      // The batching model reports its engine's busy time (its requests overlap);
      // the FIFO model's busy time is the sum of its requests' service times.
      busyImbalanceCv: this.#perPool(this.#busyMsPerInstance(), coefficientOfVariation),
      gpuTokenHitRate: tokenHitRate === null
        ? null
        : ratio(this.#cachedTokens - this.#hostCachedTokens, this.#promptTokens),
      hostTokenHitRate: tokenHitRate === null ? null : ratio(this.#hostCachedTokens, this.#promptTokens),
      kvTransferMeanMs: ratio(this.#transferSumMs, this.#transfers),
      kvTransferP99Ms: this.#transfers === 0 ? null : this.#transferMicros.getValueAtPercentile(99) / 1000,
      kvQueueMeanMs: ratio(this.#transferQueueSumMs, this.#transfers),
      throughputRps: perSec(n),
      // Completions that met every SLO set: every completion when none is set.
      goodputRps: perSec(this.#judging ? this.#met : n),
      sloAttainment: this.#sloSet ? ratio(this.#met, n + this.#dropped + this.#failed) : null,
      classAttainment: this.#classAttainment(),
      tpotMeanMs: ratio(this.#tpotSumMs, this.#tpotCount),
      outputTokensPerSec: perSec(this.#outputTokens),
      tokensPerSec: perSec(this.#outputTokens + this.#promptTokens),
      kvUtilizationMean: reported.length === 0 || spanMs <= 0
        ? null
        : reported.reduce((a, s) => a + s.kvBlockMs / s.kvBlocks, 0) / reported.length / spanMs,
      preemptions: this.#stats.reduce((a, s) => a + (s?.preemptions ?? 0), 0),
      perInstanceCompleted: [...this.#perInstanceCompleted],
      perInstanceBusyMs: this.#busyMsPerInstance(),
      ...this.#faultSummary(),
      ...this.#scalingSummary(),
    };
  }

  /** The summary's fault fields: true zeros and nulls without faults. */
  #faultSummary() {
    const recovery = this.#recovery();
    let first: FaultRecovery | null = null;
    for (const r of recovery ?? []) if (first === null || r.atMs < first.atMs) first = r;
    return {
      failed: this.#failed,
      retried: this.#retried,
      requestsAffected: this.#affected,
      failedByReason: { ...this.#failedByReason },
      recovery,
      timeToRecoverMs: first === null ? null : first.timeToRecoverMs,
    };
  }

  /** Per fault, its recovery, computed once per set of finished requests (a live view asks again and again). */
  #recovery(): readonly FaultRecovery[] | null {
    if (this.#faults === undefined) return null;
    if (this.#recoveryMemo?.kept !== this.#kept) {
      const value = recoveryTimes(
        this.#faults,
        this.#keptArrivalMs!.subarray(0, this.#kept),
        this.#keptTtftMs!.subarray(0, this.#kept),
      );
      this.#recoveryMemo = { kept: this.#kept, value };
    }
    return this.#recoveryMemo.value;
  }

  /** The summary's autoscaling fields: null without autoscaling. */
  #scalingSummary() {
    const config = this.#autoscale;
    const endMs = this.#lastEndMs;
    if (config === undefined) {
      // A fixed fleet costs all of its instances all the time (a crashed one's GPU is still paid for).
      const n = this.#perInstanceCompleted.length;
      return {
        scaling: null,
        instanceSeconds: this.completed > 0 ? n * endMs / 1000 : null,
        peakInstances: n,
      };
    }
    let count = config.initial, fromMs = 0, area = 0, peak = config.initial;
    for (const d of this.#scaling) {
      peak = Math.max(peak, d.instances);
      if (d.timeMs >= endMs) continue;
      area += count * (d.timeMs - fromMs);
      count = d.instances;
      fromMs = d.timeMs;
    }
    area += count * Math.max(0, endMs - fromMs);
    return { scaling: [...this.#scaling], instanceSeconds: area / 1000, peakInstances: peak };
  }
}

/**
 * Per fault, how long TTFT took to recover. The pre-fault p50 is TTFT's
 * median over the requests that arrived in [atMs − W, atMs) (W =
 * {@linkcode RECOVERY_WINDOW_MS}); then windows [atMs + k·S, atMs + k·S + W)
 * (S = {@linkcode RECOVERY_STEP_MS}, k = 0, 1, …) are examined while they
 * start before the last arrival, and the time to recover is k·S of the first
 * with at least {@linkcode RECOVERY_MIN_REQUESTS} requests whose p50 is at
 * most {@linkcode RECOVERY_TOLERANCE} × the pre-fault p50. A dropped or failed
 * request counts as an infinite TTFT in its window. The median is the
 * nearest-rank one (the ⌈m/2⌉-th smallest of m). The pre-fault p50 is null
 * with fewer than RECOVERY_MIN_REQUESTS requests, or when more than half of
 * them were dropped or failed (an infinite p50 is no baseline).
 *
 * @param faults The run's faults, in the scenario's order.
 * @param arrivalMs Each finished request's arrival, ms, in any order.
 * @param ttftMs The same requests' TTFTs, ms; `Infinity` for a dropped or failed one.
 */
export function recoveryTimes(
  faults: readonly Fault[],
  arrivalMs: ArrayLike<number>,
  ttftMs: ArrayLike<number>,
): FaultRecovery[] {
  const n = arrivalMs.length;
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => arrivalMs[a] - arrivalMs[b] || a - b);
  const arrivals = Float64Array.from(order, (i) => arrivalMs[i]);
  const ttfts = Float64Array.from(order, (i) => ttftMs[i]);
  const scratch = new Float64Array(n);
  const lastArrivalMs = n === 0 ? -Infinity : arrivals[n - 1];
  const p50 = (fromMs: number, toMs: number) => windowP50(arrivals, ttfts, fromMs, toMs, scratch);
  return faults.map((fault, index) => {
    const pre = p50(fault.atMs - RECOVERY_WINDOW_MS, fault.atMs);
    const preFaultTtftP50Ms = pre !== null && Number.isFinite(pre) ? pre : null;
    let timeToRecoverMs: number | null = null;
    if (preFaultTtftP50Ms !== null) {
      for (let k = 0; fault.atMs + k * RECOVERY_STEP_MS < lastArrivalMs; k++) {
        const fromMs = fault.atMs + k * RECOVERY_STEP_MS;
        const p = p50(fromMs, fromMs + RECOVERY_WINDOW_MS);
        if (p !== null && p <= RECOVERY_TOLERANCE * preFaultTtftP50Ms) {
          timeToRecoverMs = k * RECOVERY_STEP_MS;
          break;
        }
      }
    }
    return { fault: index, atMs: fault.atMs, preFaultTtftP50Ms, timeToRecoverMs };
  });
}

/** The nearest-rank median TTFT of the requests (sorted by arrival) that arrived in [fromMs, toMs); null when too few did. */
function windowP50(
  arrivals: Float64Array,
  ttfts: Float64Array,
  fromMs: number,
  toMs: number,
  scratch: Float64Array,
): number | null {
  const lo = lowerBound(arrivals, fromMs), hi = lowerBound(arrivals, toMs);
  const m = hi - lo;
  if (m < RECOVERY_MIN_REQUESTS) return null;
  const window = scratch.subarray(0, m);
  window.set(ttfts.subarray(lo, hi));
  window.sort();
  return window[Math.ceil(m / 2) - 1];
}

/** The first index of sorted `values` whose value is >= `x` (`values.length` when none is). */
function lowerBound(values: Float64Array, x: number): number {
  let lo = 0, hi = values.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function ratio(numerator: number, denominator: number): number | null {
  return denominator === 0 ? null : numerator / denominator;
}

/** `dropped / requests`, the share of arrivals refused; null when nothing arrived. */
export function droppedFraction(dropped: number, requests: number): number | null {
  return ratio(dropped, requests);
}

/** `(max − min) / mean`, the original study's imbalance; null for an empty or all-zero list (nothing to balance). */
export function rangeOverMean(values: readonly number[]): number | null {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return !(mean > 0) ? null : (Math.max(...values) - Math.min(...values)) / mean;
}

/** Population standard deviation over mean; null for an empty or all-zero list. */
export function coefficientOfVariation(values: readonly number[]): number | null {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  if (!(mean > 0)) return null;
  const variance = values.reduce((a, v) => a + (v - mean) ** 2, 0) / values.length;
  return Math.sqrt(variance) / mean;
}
