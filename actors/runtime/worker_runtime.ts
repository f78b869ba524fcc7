/**
 * @module
 * The real-time runtime: the same central kernel, paced by a wall clock,
 * delivering to actors that live in Deno Workers. Each Worker-hosted actor is
 * represented in the kernel by a proxy that posts the message to its Worker;
 * the Worker's reply carries what the actor sent, which the kernel stamps and
 * queues. Ordering here is FIFO per channel only (design.md).
 */
import {
  type Actor,
  type ActorContext,
  type ActorRef,
  type DeliveryTap,
  Kernel,
  type Message,
  type TimerId,
} from "./kernel.ts";
import { SimulationError, type SimulationErrorKind } from "./simulation_error.ts";
import type { WallClock } from "./wall_clock.ts";

/** Main → Worker. */
export type HostCommand =
  | {
    readonly type: "init";
    readonly name: string;
    readonly seed: number;
    readonly self: number;
    readonly factory: string;
    readonly args: readonly unknown[];
  }
  | { readonly type: "deliver"; readonly message: Message; readonly timeMs: number };

/** One effect of a handler, as the Worker reports it. */
export type Outgoing =
  | { readonly op: "send"; readonly to: number; readonly message: Message; readonly delayMs: number }
  | { readonly op: "schedule"; readonly timer: number; readonly message: Message; readonly delayMs: number }
  | { readonly op: "cancel"; readonly timer: number };

/** Worker → main. */
export type HostReply =
  | { readonly type: "ready" }
  | { readonly type: "handled"; readonly outbox: readonly Outgoing[] }
  | { readonly type: "failed"; readonly kind: SimulationErrorKind; readonly message: string };

/** Where and how to run one actor in its own Worker. */
export interface RemoteActorSpec {
  /** URL of the Worker entry module (it calls `serveActor`). */
  readonly entry: URL;
  /** Name of the factory the entry offers. */
  readonly factory: string;
  /** The factory's arguments; structured-cloneable. */
  readonly args: readonly unknown[];
  /** The Worker's permissions (needs `--unstable-worker-options`). @default "none" */
  readonly permissions?: Deno.PermissionOptions;
  /** Extra text naming this actor in errors, such as `plugin my_router`. */
  readonly label?: string;
}

/** Options for {@linkcode WorkerRuntime}. */
export interface WorkerRuntimeOptions {
  /** Seed of every actor's random stream (same derivation as the virtual kernel). */
  readonly seed: number;
  /** Observes every delivery. */
  readonly onDeliver?: DeliveryTap;
  /** A Worker that has not answered a delivery after this many wall ms fails the run. @default 5000 */
  readonly handlerTimeoutMs?: number;
}

/** Options for {@linkcode WorkerRuntime.run}. */
export interface RealtimeRunOptions {
  /** Aborting stops the run with an `AbortError`. */
  readonly signal?: AbortSignal;
  /** Stop before delivering messages stamped later than this. @default Infinity */
  readonly untilMs?: number;
}

/** How far behind the wall clock deliveries were. */
export interface LagStats {
  /** Deliveries measured. */
  readonly deliveries: number;
  /** Wall ms between a message's deadline and its delivery: median, 99th percentile, maximum. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** Replies whose stamp had already passed when they reached the kernel, and were re-stamped later. */
  readonly restamped: number;
  /** Largest such shift, in simulated ms. */
  readonly maxRestampMs: number;
}

interface PendingDelivery {
  readonly type: string;
  readonly timeMs: number;
  readonly sentWallMs: number;
}

class RemoteProxy implements Actor<Message> {
  readonly pending: PendingDelivery[] = [];
  /** The Worker's timer ids → kernel message ids, and back; entries leave when the timer fires or is cancelled. */
  readonly timers = new Map<number, TimerId>();
  readonly timerOfSeq = new Map<number, number>();
  ref = -1;
  constructor(readonly runtime: WorkerRuntime, readonly name: string, readonly worker: Worker) {}
  handle(message: Message, ctx: ActorContext<Message>): void {
    const timer = this.timerOfSeq.get(this.runtime.kernel.deliveringSeq);
    if (timer !== undefined) {
      this.timerOfSeq.delete(this.runtime.kernel.deliveringSeq);
      this.timers.delete(timer);
    }
    this.pending.push({ type: message.type, timeMs: ctx.now(), sentWallMs: this.runtime.wallNowMs() });
    this.worker.postMessage({ type: "deliver", message, timeMs: ctx.now() } satisfies HostCommand);
  }
}

/**
 * A kernel whose actors may live in Workers, run against a wall clock.
 *
 * @example
 * ```ts
 * const runtime = new WorkerRuntime({ seed: 1 });
 * const ref = runtime.spawnRemote("pinger", { entry, factory: "createPinger", args: [] });
 * await runtime.start();
 * runtime.kernel.send(ref, { type: "ping" });
 * await runtime.run(new WallClock(wallTime, 10));
 * runtime.terminate();
 * ```
 */
export class WorkerRuntime {
  readonly kernel: Kernel;
  readonly #seed: number;
  readonly #handlerTimeoutMs: number;
  readonly #proxies: RemoteProxy[] = [];
  readonly #ready: Promise<void>[] = [];
  readonly #lags: number[] = [];
  #clock: WallClock | undefined;
  #failure: Error | undefined;
  #wake: (() => void) | undefined;
  #restamped = 0;
  #maxRestampMs = 0;

  constructor(options: WorkerRuntimeOptions) {
    this.#seed = options.seed;
    this.#handlerTimeoutMs = options.handlerTimeoutMs ?? 5000;
    this.kernel = new Kernel({ seed: options.seed, onDeliver: options.onDeliver });
  }

  /** Wall time of the clock in use (0 before `run`). */
  wallNowMs(): number {
    return this.#clock?.wallNowMs() ?? 0;
  }

  /** Runs `actor` in this thread. */
  spawnLocal<M extends Message>(name: string, actor: Actor<M>): ActorRef<M> {
    return this.kernel.spawn(name, actor);
  }

  /** Runs an actor in its own Worker; returns its address. */
  spawnRemote<M extends Message>(name: string, spec: RemoteActorSpec): ActorRef<M> {
    const worker = new Worker(spec.entry, {
      type: "module",
      name,
      deno: { permissions: spec.permissions ?? "none" },
    });
    const label = spec.label ? `${name} (${spec.label})` : name;
    const proxy = new RemoteProxy(this, label, worker);
    const ref = this.kernel.spawn(name, proxy);
    proxy.ref = ref;
    this.#proxies.push(proxy);
    this.#ready.push(
      new Promise<void>((resolve, reject) => {
        worker.onmessage = (event: MessageEvent<HostReply>) => {
          const reply = event.data;
          if (reply.type === "ready") {
            worker.onmessage = (e: MessageEvent<HostReply>) => this.#onReply(proxy, e.data);
            resolve();
          } else if (reply.type === "failed") {
            reject(new SimulationError(reply.kind, reply.message, { actor: label }));
          }
        };
        worker.onerror = (event) => {
          event.preventDefault();
          const error = this.#crash(proxy, event.message);
          reject(error);
        };
      }),
    );
    worker.postMessage(
      {
        type: "init",
        name,
        seed: this.#seed,
        self: ref,
        factory: spec.factory,
        args: spec.args,
      } satisfies HostCommand,
    );
    return ref as ActorRef<M>;
  }

  /** Resolves when every Worker has built its actor. */
  async start(): Promise<void> {
    await Promise.all(this.#ready);
  }

  /**
   * Delivers messages as the wall clock reaches their time, until nothing is
   * pending anywhere (kernel queue empty, every Worker answered) or `untilMs`.
   * @throws {SimulationError} when an actor fails, times out or its Worker crashes.
   */
  async run(clock: WallClock, options: RealtimeRunOptions = {}): Promise<void> {
    this.#clock = clock;
    const untilMs = options.untilMs ?? Infinity;
    const kernel = this.kernel;
    const onAbort = () => this.#fail(new DOMException("interrupted", "AbortError"));
    options.signal?.addEventListener("abort", onAbort);
    if (options.signal?.aborted) onAbort();
    try {
      for (;;) {
        if (this.#failure) throw this.#failure;
        this.#checkTimeouts();
        const next = kernel.nextTimeMs();
        // Lock-step: while a Worker handles a message, it may still send or
        // cancel something that the virtual kernel would deliver (or drop)
        // before the next queued message — even at the same instant. So the
        // next delivery waits for its answer. Order and stamps stay exactly
        // the virtual kernel's; a slow Worker shows up as lag, not as changed
        // results.
        const awaiting = this.#awaitingReply();
        if (next === Infinity || next > untilMs || awaiting) {
          if (!awaiting) break;
          await this.#sleepOrWake(this.#handlerTimeoutMs);
          continue;
        }
        const wait = clock.wallMsUntil(next);
        if (wait > 0) {
          await this.#sleepOrWake(wait);
          continue;
        }
        const simNow = clock.simNowMs();
        let delivered = 0;
        while (delivered < 256) {
          const due = kernel.nextTimeMs();
          if (due > simNow || due > untilMs || this.#awaitingReply()) break;
          this.#lags.push(Math.max(0, (simNow - due) / clock.speed));
          kernel.step();
          delivered++;
        }
        if (delivered === 256) await this.#sleepOrWake(0);
      }
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Lag figures of the run so far, or of its last `recent` deliveries. */
  lagStats(recent = Infinity): LagStats {
    const lags = this.#lags;
    const sorted = Float64Array.from(recent < lags.length ? lags.slice(lags.length - recent) : lags).sort();
    const at = (q: number) =>
      sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
    return {
      deliveries: sorted.length,
      p50Ms: at(0.5),
      p99Ms: at(0.99),
      maxMs: sorted.length === 0 ? 0 : sorted[sorted.length - 1],
      restamped: this.#restamped,
      maxRestampMs: this.#maxRestampMs,
    };
  }

  /** Terminates every Worker. Safe to call more than once. */
  terminate(): void {
    for (const proxy of this.#proxies) proxy.worker.terminate();
  }

  #onReply(proxy: RemoteProxy, reply: HostReply): void {
    const delivery = proxy.pending.shift();
    if (reply.type === "failed") {
      this.#failAt(proxy, delivery, reply.kind, reply.message);
      return;
    }
    if (reply.type !== "handled" || delivery === undefined) return;
    const kernel = this.kernel;
    try {
      for (const out of reply.outbox) {
        if (out.op === "cancel") {
          const id = proxy.timers.get(out.timer);
          if (id !== undefined) {
            kernel.cancel(id);
            proxy.timerOfSeq.delete(id);
          }
          proxy.timers.delete(out.timer);
          continue;
        }
        const intended = delivery.timeMs + out.delayMs;
        const late = kernel.nowMs - intended;
        if (late > 0) {
          this.#restamped++;
          if (late > this.#maxRestampMs) this.#maxRestampMs = late;
        }
        const delayMs = Math.max(0, -late);
        if (out.op === "send") kernel.enqueue(out.to, out.message, delayMs, proxy.ref);
        else {
          const id = kernel.enqueue(proxy.ref, out.message, delayMs, proxy.ref) as TimerId;
          proxy.timers.set(out.timer, id);
          proxy.timerOfSeq.set(id, out.timer);
        }
      }
    } catch (error) {
      this.#fail(error as Error);
    }
    this.#wake?.();
  }

  #crash(proxy: RemoteProxy, detail: string): SimulationError {
    return this.#failAt(proxy, proxy.pending[0], "worker_crashed", detail);
  }

  /**
   * Fails the run with an error naming `proxy`'s actor and the delivery it
   * came from. A crash can arrive after the actor's last reply, with nothing
   * pending: it then happened at the current virtual time.
   */
  #failAt(
    proxy: RemoteProxy,
    delivery: PendingDelivery | undefined,
    kind: SimulationErrorKind,
    detail: string,
  ): SimulationError {
    const error = new SimulationError(kind, detail, {
      actor: proxy.name,
      messageType: delivery?.type,
      timeMs: delivery?.timeMs ?? this.kernel.nowMs,
    });
    this.#fail(error);
    return error;
  }

  #awaitingReply(): boolean {
    for (const proxy of this.#proxies) if (proxy.pending.length > 0) return true;
    return false;
  }

  #checkTimeouts(): void {
    const now = this.wallNowMs();
    for (const proxy of this.#proxies) {
      const oldest = proxy.pending[0];
      if (oldest && now - oldest.sentWallMs > this.#handlerTimeoutMs) {
        this.#failAt(
          proxy,
          oldest,
          "actor_timeout",
          `no answer within ${this.#handlerTimeoutMs} ms of wall time`,
        );
      }
    }
  }

  #fail(error: Error): void {
    if (this.#failure === undefined) this.#failure = error;
    this.terminate();
    this.#wake?.();
  }

  #sleepOrWake(ms: number): Promise<void> {
    const woken = new AbortController();
    this.#wake = () => woken.abort();
    return this.#clock!.sleep(ms, woken.signal).then(() => {
      this.#wake = undefined;
    });
  }
}
