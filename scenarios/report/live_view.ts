/**
 * @module
 * The real-time mode's live terminal view: one bar per instance (queue
 * depth), rolling TTFT p50/p99 over the last completions, hit rate,
 * imbalance, requests done and lag — redrawn at most 4 times a second.
 */
import type { MetricsCollector } from "../../actors/metrics/metrics_collector.ts";
import type { AnyMessage } from "../../actors/protocol.ts";
import type { Message } from "../../actors/runtime/kernel.ts";
import { formatMetric } from "./run_report.ts";

const WINDOW = 500;

/** Feeds on the kernel's deliveries and renders the view on demand. */
export class LiveView {
  readonly #waiting: number[];
  readonly #running: number[];
  readonly #ttfts: number[] = [];
  #next = 0;
  #simMs = 0;
  #lines = 0;
  #metrics: MetricsCollector | undefined;

  constructor(readonly instanceCount: number, readonly requests: number, readonly title: string) {
    this.#waiting = new Array(instanceCount).fill(0);
    this.#running = new Array(instanceCount).fill(0);
  }

  /** The collector whose totals the view shows. */
  attach(metrics: MetricsCollector): void {
    this.#metrics = metrics;
  }

  /** A kernel delivery tap. */
  observe = (message: Message, _to: number, timeMs: number): void => {
    this.#simMs = timeMs;
    const m = message as AnyMessage;
    if (m.type === "status") {
      this.#waiting[m.instance] = m.waiting;
      this.#running[m.instance] = m.running;
    } else if (m.type === "completed") {
      const ttft = m.record.firstTokenMs - m.record.arrivalMs;
      if (this.#ttfts.length < WINDOW) this.#ttfts.push(ttft);
      else this.#ttfts[this.#next] = ttft;
      this.#next = (this.#next + 1) % WINDOW;
    }
  };

  /** The view as text lines. */
  render(wallMs: number, lagP99Ms: number): string[] {
    const s = this.#metrics?.summary();
    const sorted = [...this.#ttfts].sort((a, b) => a - b);
    const pct = (q: number) =>
      sorted.length === 0 ? null : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
    const depth = this.#waiting.map((w, i) => w + this.#running[i]);
    const scale = Math.max(10, ...depth);
    const lines = [
      `${this.title} · sim ${(this.#simMs / 1000).toFixed(1)} s · wall ${(wallMs / 1000).toFixed(1)} s`,
      ...depth.map((d, i) => {
        const width = Math.round((d / scale) * 30);
        return `  instance ${String(i).padStart(2)} ${"█".repeat(width)}${
          "·".repeat(30 - width)
        } ${d} (waiting ${this.#waiting[i]})`;
      }),
      `  done ${s?.completed ?? 0}/${this.requests} · dropped ${s?.dropped ?? 0} · TTFT p50 ${
        formatMetric(pct(0.5), 0, " ms")
      } p99 ${formatMetric(pct(0.99), 0, " ms")} (last ${sorted.length})` +
      ` · hit ${formatMetric(s?.hitRate ?? null, 3)} · imbalance ${
        formatMetric(s?.imbalance ?? null, 3)
      } · lag p99 ${lagP99Ms.toFixed(1)} ms`,
    ];
    return lines;
  }

  /** Redraws in place on a terminal (ANSI cursor-up), or prints a line otherwise. */
  draw(write: (text: string) => void, terminal: boolean, wallMs: number, lagP99Ms: number): void {
    const lines = this.render(wallMs, lagP99Ms);
    if (!terminal) {
      write(`${lines[0]} | ${lines[lines.length - 1].trim()}\n`);
      return;
    }
    const up = this.#lines > 0 ? `\x1b[${this.#lines}A` : "";
    write(up + lines.map((l) => `\x1b[2K${l}`).join("\n") + "\n");
    this.#lines = lines.length;
  }
}
