/**
 * @module
 * The gateway's metrics actor: the router's `metrics` ref in `deno task
 * serve`'s gateway. It keeps a {@linkcode MetricsCollector} for the live page
 * and `/metrics`, counts the ends the simulator has no name for (a client
 * that went away, a stream broken mid-way, an upstream's own 4xx), and tells
 * the host about every final failure so that the client gets its answer.
 */
import { type FailedReason, MetricsCollector, type MetricsOptions } from "./metrics_collector.ts";
import {
  assertNever,
  type EndOutcome,
  type GatewayMetricsCommand,
  type MetricsCommand,
  type RequestEnded,
} from "../protocol.ts";
import type { Actor, ActorContext } from "../runtime/kernel.ts";

export type { EndOutcome, GatewayMetricsCommand, RequestEnded };

/** What the gateway's metrics actor tells its host. */
export interface GatewayMetricsHost {
  /** Request `requestId` failed for good (no retry left, or no upstream to take it): answer its client. */
  requestFailed(requestId: number, reason: FailedReason): void;
}

/** Per upstream: what its completed requests brought. */
export interface UpstreamTotals {
  readonly completed: number;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  /** Ends without a completion record, by outcome. */
  readonly ended: Readonly<Record<EndOutcome, number>>;
}

/**
 * The router's metrics ref in the gateway: completions, drops and failed
 * attempts go to its collector; final failures also to the host; request
 * ends without a record are counted per outcome and per upstream.
 *
 * @example
 * ```ts
 * const metrics = new GatewayMetrics(2, { requestFailed: (id) => answer502(id) });
 * runtime.spawnLocal("metrics", metrics);
 * metrics.collector.summary();
 * ```
 */
export class GatewayMetrics implements Actor<GatewayMetricsCommand> {
  /** The collector, with the same summary as a simulated run's. */
  readonly collector: MetricsCollector;
  readonly #host: GatewayMetricsHost;
  readonly #completed: Int32Array;
  readonly #promptTokens: Float64Array;
  readonly #cachedTokens: Float64Array;
  readonly #ended: Record<EndOutcome, number>[];

  /**
   * @param upstreamCount Upstreams the gateway routes to.
   * @param options The SLOs and classes the collector judges by.
   */
  constructor(upstreamCount: number, host: GatewayMetricsHost, options: MetricsOptions = {}) {
    this.collector = new MetricsCollector(upstreamCount, options);
    this.#host = host;
    this.#completed = new Int32Array(upstreamCount);
    this.#promptTokens = new Float64Array(upstreamCount);
    this.#cachedTokens = new Float64Array(upstreamCount);
    this.#ended = Array.from({ length: upstreamCount }, () => ({ cancelled: 0, broken: 0, rejected: 0 }));
  }

  handle(message: GatewayMetricsCommand, ctx: ActorContext<GatewayMetricsCommand>): void {
    switch (message.type) {
      case "request_ended":
        this.#ended[message.instance][message.outcome]++;
        return;
      case "completed": {
        const r = message.record;
        this.#completed[r.instance]++;
        this.#promptTokens[r.instance] += r.promptTokens;
        this.#cachedTokens[r.instance] += r.cachedTokens;
        break;
      }
      case "attempt_failed":
        if (message.final) this.#host.requestFailed(message.requestId, message.reason);
        break;
      case "dropped":
      case "instance_stats":
      case "scaled":
      case "slo_probe":
        break;
      default:
        assertNever(message);
    }
    this.collector.handle(message, ctx as ActorContext<MetricsCommand>);
  }

  /** Ends without a completion record so far, by outcome, over every upstream. */
  ended(): Record<EndOutcome, number> {
    const total: Record<EndOutcome, number> = { cancelled: 0, broken: 0, rejected: 0 };
    for (const e of this.#ended) for (const k of Object.keys(total) as EndOutcome[]) total[k] += e[k];
    return total;
  }

  /** Per upstream, its completed requests' totals and its other ends. */
  perUpstream(): UpstreamTotals[] {
    return Array.from({ length: this.#completed.length }, (_, i) => ({
      completed: this.#completed[i],
      promptTokens: this.#promptTokens[i],
      cachedTokens: this.#cachedTokens[i],
      ended: { ...this.#ended[i] },
    }));
  }
}
