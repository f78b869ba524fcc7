/**
 * @module
 * Whether `deno task serve`'s simulated fleet keeps up with the wall clock,
 * told while it serves: the p99 delivery lag (wall ms behind schedule) over
 * the deliveries of the last check window, against the 50 ms tolerance of
 * `deno task realtime`, as a rate-limited warning line and a live-page banner.
 */
import type { LagStats } from "../../actors/runtime/worker_runtime.ts";
import { plural } from "../cli/plural.ts";

/** The p99 lag, wall ms, past which the fleet is lagging: `deno task realtime`'s default `--lag-tolerance-ms`. */
export const LAG_TOLERANCE_MS = 50;

/** Wall ms between two checks: each judges the deliveries since the one before. */
export const LAG_CHECK_MS = 2000;

/** Wall ms at least between two warnings while the fleet stays behind. */
export const LAG_WARNING_EVERY_MS = 10_000;

/** Options for {@linkcode LagWatch}. */
export interface LagWatchOptions {
  /** The fleet's lag figures over its most recent `recent` deliveries (`deliveries` counts them all). */
  readonly lagStats: (recent: number) => LagStats;
  /** Simulated ms per wall ms, for the advice. */
  readonly speed: number;
  /** Instances simulated in this process, for the advice. */
  readonly instances: number;
  /** p99 lag past which a window is late, wall ms. @default LAG_TOLERANCE_MS */
  readonly toleranceMs?: number;
  /** Least wall ms between two warnings. @default LAG_WARNING_EVERY_MS */
  readonly warnEveryMs?: number;
}

/** One check's verdict. */
export interface LagCheck {
  /** The window's p99 lag, wall ms; null when nothing was delivered in it. */
  readonly p99Ms: number | null;
  /** Deliveries in the window. */
  readonly deliveries: number;
  /** A line for stderr now (a warning, or the all-clear after one); undefined: say nothing. */
  readonly line?: string;
}

/**
 * Judges the fleet's lag one window at a time: {@linkcode LagWatch.check}
 * (every {@linkcode LAG_CHECK_MS}) takes the deliveries since the last check;
 * a p99 past the tolerance makes the window late. {@linkcode LagWatch.warning}
 * (the live page's banner) follows every window; the lines for stderr come
 * at most one per `warnEveryMs`: a warning when the fleet falls behind (again
 * each `warnEveryMs` while it stays behind), and one all-clear when it is back
 * on schedule — so a lag that hovers around the tolerance does not flood
 * stderr. A window with no delivery is idle, not late, and changes nothing.
 *
 * @example
 * ```ts
 * const watch = new LagWatch({ lagStats: (n) => fleet.lagStats(n), speed: 4, instances: 8 });
 * setInterval(() => {
 *   const { line } = watch.check(performance.now());
 *   if (line !== undefined) console.error(line);
 * }, LAG_CHECK_MS);
 * ```
 */
export class LagWatch {
  readonly #o: LagWatchOptions;
  readonly #toleranceMs: number;
  readonly #warnEveryMs: number;
  #seen = 0;
  #lastLineMs = -Infinity;
  /** What stderr was last told: that the fleet lags, or nothing yet / that it is back. */
  #announcedLagging = false;
  #warning: string | null = null;

  constructor(options: LagWatchOptions) {
    this.#o = options;
    this.#toleranceMs = options.toleranceMs ?? LAG_TOLERANCE_MS;
    this.#warnEveryMs = options.warnEveryMs ?? LAG_WARNING_EVERY_MS;
  }

  /** The current warning (while the fleet lags), for the live page; null when on schedule. */
  warning(): string | null {
    return this.#warning;
  }

  /** Judges the deliveries since the last check, at wall ms `nowMs`. */
  check(nowMs: number): LagCheck {
    const total = this.#o.lagStats(0).deliveries;
    const fresh = total - this.#seen;
    this.#seen = total;
    if (fresh <= 0) return { p99Ms: null, deliveries: 0 };
    const p99Ms = this.#o.lagStats(fresh).p99Ms;
    const window = plural(fresh, "delivery", "deliveries");
    const lagging = p99Ms > this.#toleranceMs;
    const { speed, instances } = this.#o;
    this.#warning = lagging
      ? `the simulated fleet lags: delivery lag p99 ${
        p99Ms.toFixed(0)
      } ms (over its last ${window}) is past ` +
        `the ${this.#toleranceMs} ms tolerance at speed ${speed}×, so clients see latencies the model did not ` +
        `produce: lower --speed (now ${speed}) or serve fewer instances (now ${
          plural(instances, "instance")
        })`
      : null;
    const quiet = nowMs - this.#lastLineMs < this.#warnEveryMs;
    if (quiet || (!lagging && !this.#announcedLagging)) return { p99Ms, deliveries: fresh };
    this.#lastLineMs = nowMs;
    this.#announcedLagging = lagging;
    const line = lagging
      ? `serve: warning: ${this.#warning}`
      : `serve: the simulated fleet is back on schedule: delivery lag p99 ${p99Ms.toFixed(1)} ms over its ` +
        `last ${window}`;
    return { p99Ms, deliveries: fresh, line };
  }
}
