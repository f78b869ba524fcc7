/**
 * @module
 * The live runtime: every actor in this thread on one kernel, paced by the
 * wall clock, and open to the world — a message from outside (a request off
 * the network) is stamped with the wall clock's simulated now and delivered
 * at once, with everything else already due. `deno task serve` runs its
 * simulated instances so (design.md, "Over the wire").
 *
 * Unlike the Worker runtime's conservative delivery, nothing here waits for another
 * thread: a delivery is late only when this thread is busy. The order of
 * deliveries is still the kernel's (time, then send order); what is not
 * reproducible is when the outside sends.
 */
import type { Actor, ActorRef, DeliveryTap, Message } from "./kernel.ts";
import { Kernel } from "./kernel.ts";
import { WallClock, type WallTime } from "./wall_clock.ts";
import type { LagStats } from "./worker_runtime.ts";

/** The reason a pacer's sleep is cut short: an injection woke it. */
const WOKEN = Symbol("woken");
/** Options for {@linkcode LiveRuntime}. */
export interface LiveRuntimeOptions {
  /** Seed of every actor's random stream. */
  readonly seed: number;
  /** The wall time source, supplied by the program (scenarios/cli/wall_time.ts). */
  readonly wallTime: WallTime;
  /** Simulated ms per wall ms; 1 is real time. */
  readonly speed: number;
  /** Observes every delivery. */
  readonly onDeliver?: DeliveryTap;
  /** Called once when an actor throws: the runtime stops delivering. */
  readonly onError?: (error: Error) => void;
}

/** Longest single wait, wall ms: a short poll costs nothing and keeps a host timer in range. */
const MAX_SLEEP_MS = 1000;

/** Lag samples kept for the figures (the most recent ones). */
const LAG_WINDOW = 1 << 16;

/**
 * A kernel that runs against the wall clock in this thread, fed from outside.
 *
 * @example
 * ```ts
 * const live = new LiveRuntime({ seed: 1, wallTime: systemWallTime, speed: 1 });
 * const ref = live.spawn("echo", { handle: () => {} });
 * live.start();
 * live.inject(ref, { type: "ping" }); // delivered before inject returns
 * live.stop();
 * ```
 */
export class LiveRuntime {
  readonly kernel: Kernel;
  readonly #clock: WallClock;
  readonly #time: WallTime;
  readonly #onError: ((error: Error) => void) | undefined;
  readonly #lags = new Float64Array(LAG_WINDOW);
  #lagCount = 0;
  #maxLagMs = 0;
  #running = false;
  #pumping = false;
  #failure: Error | undefined;
  #wake: (() => void) | undefined;
  #loop: Promise<void> | undefined;

  /** @throws {RangeError} when speed is not a finite number > 0. */
  constructor(options: LiveRuntimeOptions) {
    this.#time = options.wallTime;
    this.#clock = new WallClock(options.wallTime, options.speed);
    this.#onError = options.onError;
    const tap = options.onDeliver;
    this.kernel = new Kernel({
      seed: options.seed,
      onDeliver: (message, to, timeMs) => {
        this.#recordLag(-this.#clock.wallMsUntil(timeMs));
        tap?.(message, to, timeMs);
      },
    });
  }

  /** Registers an actor (see {@linkcode Kernel.spawn}). */
  spawn<M extends Message>(name: string, actor: Actor<M>): ActorRef<M> {
    return this.kernel.spawn(name, actor);
  }

  /** Makes simulated time 0 due now (only before the first delivery) and starts pacing. */
  start(): void {
    if (this.#running) return;
    if (this.kernel.messagesDelivered === 0) this.#clock.restart();
    this.#running = true;
    this.#loop = this.#pace();
  }

  /** The simulated time the wall has reached. */
  simNowMs(): number {
    return this.#clock.simNowMs();
  }

  /** The stamp an injection now gets: the wall's simulated now, never before the kernel's own. */
  nowMs(): number {
    return Math.max(this.kernel.nowMs, this.#clock.simNowMs());
  }

  /** The error an actor threw, once one did (the runtime then delivers nothing more). */
  get failure(): Error | undefined {
    return this.#failure;
  }

  /**
   * Sends `message` to `to` from outside, stamped `atMs` (default
   * {@linkcode LiveRuntime.nowMs}: what a caller that stamps the message
   * itself reads first), and delivers everything due — this message
   * included — before returning. (Injected from inside a delivery, by a host
   * callback an actor called, it is delivered by the pacer's next turn.)
   * @throws {RangeError} when the runtime is not started, or `atMs` is before the kernel's now.
   */
  inject<M extends Message>(to: ActorRef<M>, message: M, atMs: number = this.nowMs()): void {
    if (!this.#running) throw new RangeError("LiveRuntime.inject: the runtime is not running");
    this.kernel.enqueueAt(to, message, atMs, -1);
    this.#pump();
    this.#wake?.(); // what it scheduled may be due before the pacer's wake-up
  }

  /** Stops pacing; resolves once the pacer has let go of its timer. */
  async stop(): Promise<void> {
    this.#running = false;
    this.#wake?.();
    await this.#loop;
  }

  /** Lag figures over the most recent deliveries (at most `recent`, at most 65,536). */
  lagStats(recent = LAG_WINDOW): LagStats {
    const n = Math.min(recent, this.#lagCount, LAG_WINDOW);
    const sorted = new Float64Array(n);
    for (let i = 0; i < n; i++) sorted[i] = this.#lags[(this.#lagCount - 1 - i) & (LAG_WINDOW - 1)];
    sorted.sort();
    const at = (q: number) => n === 0 ? 0 : sorted[Math.min(n - 1, Math.floor(q * n))];
    return {
      deliveries: this.#lagCount,
      p50Ms: at(0.5),
      p99Ms: at(0.99),
      maxMs: this.#maxLagMs,
      restamped: 0,
      maxRestampMs: 0,
    };
  }

  #recordLag(lagMs: number): void {
    const lag = lagMs > 0 ? lagMs : 0;
    this.#lags[this.#lagCount++ & (LAG_WINDOW - 1)] = lag;
    if (lag > this.#maxLagMs) this.#maxLagMs = lag;
  }

  /** Delivers everything due by the wall's simulated now. */
  #pump(): void {
    if (this.#pumping || this.#failure !== undefined) return;
    this.#pumping = true;
    try {
      this.kernel.run({ untilMs: this.#clock.simNowMs() });
    } catch (error) {
      this.#failure = error instanceof Error ? error : new Error(String(error));
      this.#running = false;
      this.#onError?.(this.#failure);
    } finally {
      this.#pumping = false;
    }
  }

  /** The pacer: delivers what falls due, sleeping (or woken by an injection) in between. */
  async #pace(): Promise<void> {
    while (this.#running) {
      this.#pump();
      const next = this.kernel.nextTimeMs();
      const wait = next === Infinity ? MAX_SLEEP_MS : Math.min(MAX_SLEEP_MS, this.#clock.wallMsUntil(next));
      const woken = new AbortController();
      // A constant reason: abort() without one builds a DOMException (with its stack) per wake-up.
      this.#wake = () => woken.abort(WOKEN);
      await this.#time.sleep(Math.max(0, wait), woken.signal);
      this.#wake = undefined;
    }
  }
}
