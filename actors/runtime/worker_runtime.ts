/**
 * @module
 * The real-time runtime: the same central kernel, paced by a wall clock,
 * delivering to actors hosted in Deno Workers — many actors per Worker, in a
 * pool sized to the cores, or one actor in a Worker of its own. Each
 * Worker-hosted actor is represented in the kernel by a proxy that posts the
 * message to its Worker; the reply carries what the actor sent, which the
 * kernel stamps and queues. Delivery is lock-stepped (design.md).
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
import {
  type ErrorData,
  errorFromData,
  type ErrorReviver,
  SIMULATION_ERROR_KINDS,
  SimulationError,
  type SimulationErrorKind,
} from "./simulation_error.ts";
import type { WallClock, WallTime } from "./wall_clock.ts";
import { type Clock, SYNCHRONIZED, type SyncStatus } from "./clock.ts";

/** Delivery lags an open run keeps (and up to twice as many): its memory stays bounded however long it serves. */
const OPEN_RUN_LAG_WINDOW = 1 << 16;
/** Main → Worker. `actor` is the actor's index among those its Worker hosts. */
export type HostCommand =
  | {
    readonly type: "spawn";
    readonly actor: number;
    readonly name: string;
    readonly seed: number;
    readonly self: number;
    readonly factory: string;
    readonly args: readonly unknown[];
  }
  | { readonly type: "deliver"; readonly actor: number; readonly message: Message; readonly timeMs: number };

/** One effect of a handler, as the Worker reports it. */
export type Outgoing =
  | { readonly op: "send"; readonly to: number; readonly message: Message; readonly delayMs: number }
  | {
    readonly op: "schedule";
    readonly timer: number;
    readonly message: Message;
    readonly delayMs: number;
    /** A background timer (it keeps no run alive). */
    readonly background?: boolean;
  }
  | { readonly op: "cancel"; readonly timer: number };

/**
 * Worker → main. A Worker answers its commands in order: `building` then
 * `ready` or `spawn_failed` for a spawn, `handled` or `failed` for a
 * delivery; `crashed` reports an error outside any handler.
 */
export type HostReply =
  | { readonly type: "building"; readonly actor: number }
  | { readonly type: "ready"; readonly actor: number; readonly about?: string }
  | {
    readonly type: "spawn_failed";
    readonly actor: number;
    readonly message: string;
    readonly error?: ErrorData;
  }
  | { readonly type: "handled"; readonly outbox: readonly Outgoing[] }
  | {
    readonly type: "failed";
    readonly kind: SimulationErrorKind;
    readonly message: string;
    readonly error?: ErrorData;
  }
  | { readonly type: "crashed"; readonly message: string };

/** Where and how to run one actor in a Worker. */
export interface RemoteActorSpec {
  /** URL of the Worker entry module (it calls `serveActor`). */
  readonly entry: URL;
  /** Name of the factory the entry offers. */
  readonly factory: string;
  /** The factory's arguments; structured-cloneable. */
  readonly args: readonly unknown[];
  /**
   * The Worker's permissions (needs `--unstable-worker-options`). Actors
   * with the same entry and permissions share the pool's Workers.
   * @default "none"
   */
  readonly permissions?: Deno.PermissionOptions;
  /** Host the actor in a Worker of its own instead of the pool. @default false */
  readonly ownWorker?: boolean;
  /** Extra text naming this actor in errors, such as `plugin my_router.ts`. */
  readonly label?: string;
  /**
   * Wall ms the actor may take to be built (from the moment its Worker
   * starts building it) and to handle each message.
   * @default the runtime's `handlerTimeoutMs`
   */
  readonly timeoutMs?: number;
  /** The error kind when it takes longer. @default "actor_timeout" */
  readonly timeoutKind?: "actor_timeout" | "plugin_timeout";
  /** Names a message in a timeout error, such as `routing request 17`. @default `message "<type>"` */
  readonly describe?: (message: Message) => string | undefined;
  /**
   * For an actor running code we did not write (a router plugin): what its
   * handler may send, schedule or cancel. Anything else — including what a
   * plugin forges on its Worker's channel — fails the run, naming the actor.
   */
  readonly mayEmit?: (out: Outgoing) => boolean;
  /**
   * Marks the Worker as running our own code, and names the error classes
   * (beyond JavaScript's, Deno's and {@linkcode SimulationError}) it may
   * throw: its errors then arrive as thrown — a factory's as is, a handler's
   * as the cause of the run's `actor_threw` — so a malformed trace read in a
   * Worker ends the run as it would in the host. Absent (a plugin's Worker,
   * whose word is not taken): only the message and a SimulationError's kind
   * cross. @default untrusted
   */
  readonly revivers?: Readonly<Record<string, ErrorReviver>>;
}

/** A Worker's permissions with everything denied; spread it and grant `read` where needed. */
export const NO_PERMISSIONS = {
  read: false,
  write: false,
  net: false,
  env: false,
  run: false,
  ffi: false,
  sys: false,
  import: false,
} as const satisfies Deno.PermissionOptionsObject;

/** Options for {@linkcode WorkerRuntime}. */
export interface WorkerRuntimeOptions {
  /** Seed of every actor's random stream (same derivation as the virtual kernel). */
  readonly seed: number;
  /** The wall time source; bounds loading before `run` supplies its clock. */
  readonly wallTime: WallTime;
  /** Observes every delivery. */
  readonly onDeliver?: DeliveryTap;
  /** A Worker that has not answered a delivery after this many wall ms fails the run. @default 5000 */
  readonly handlerTimeoutMs?: number;
  /** Workers in each pool. @default navigator.hardwareConcurrency, at least 1 */
  readonly poolSize?: number;
}

/** Options for {@linkcode WorkerRuntime.run}. */
export interface RealtimeRunOptions {
  /** Aborting stops the run with an `AbortError`. */
  readonly signal?: AbortSignal;
  /** Stop before delivering messages stamped later than this. @default Infinity */
  readonly untilMs?: number;
  /**
   * An open run (a gateway's): with nothing pending it waits for an
   * {@linkcode WorkerRuntime.inject} instead of ending, and `untilMs` is
   * ignored; it resolves after {@linkcode WorkerRuntime.close}. @default false
   */
  readonly open?: boolean;
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

/** Longest single wait, wall ms: a host timer overflows past 2^31 ms, and a short poll costs nothing. */
const MAX_SLEEP_MS = 1000;

/** Deliveries in a row before the run yields to the event loop. */
const DELIVERIES_PER_TURN = 256;

interface PendingDelivery {
  readonly proxy: RemoteProxy;
  readonly message: Message;
  readonly timeMs: number;
  readonly sentWallMs: number;
}

/** One Worker and the actors it hosts; its replies answer its commands in order. */
class HostWorker {
  readonly worker: Worker;
  readonly actors: RemoteProxy[] = [];
  readonly pending: PendingDelivery[] = [];
  /** The actor whose handler ran last here (to name one in a crash that came after its reply). */
  lastActor: RemoteProxy | undefined;
  constructor(readonly name: string, entry: URL, permissions: Deno.PermissionOptions) {
    this.worker = new Worker(entry, { type: "module", name, deno: { permissions } });
  }
  post(command: HostCommand): void {
    this.worker.postMessage(command);
  }
}

/** The kernel's stand-in for an actor in a Worker. */
class RemoteProxy implements Actor<Message> {
  /**
   * The Worker's timer ids → the kernel's timer and the message it carries,
   * and back (each scheduled message is a fresh object); entries leave when
   * the timer fires or is cancelled.
   */
  readonly timers = new Map<number, { readonly id: TimerId; readonly message: Message }>();
  readonly timerOfMessage = new Map<Message, number>();
  ref = -1;
  state: "spawning" | "building" | "ready" = "spawning";
  buildStartedWallMs = 0;
  /** What its factory said about it (a plugin's name). */
  about: string | undefined;
  constructor(
    readonly runtime: WorkerRuntime,
    readonly name: string,
    readonly host: HostWorker,
    readonly index: number,
    readonly spec: RemoteActorSpec,
    readonly timeoutMs: number,
  ) {}
  handle(message: Message, ctx: ActorContext<Message>): void {
    const timer = this.timerOfMessage.get(message);
    if (timer !== undefined) {
      this.timerOfMessage.delete(message);
      this.timers.delete(timer);
    }
    const timeMs = ctx.now();
    this.host.pending.push({ proxy: this, message, timeMs, sentWallMs: this.runtime.wallNowMs() });
    this.host.post({ type: "deliver", actor: this.index, message, timeMs });
  }
  /** Who failed, for error details: the label (`plugin x.ts`) or `the actor`. */
  get who(): string {
    return this.spec.label ?? "the actor";
  }
}

/**
 * A kernel whose actors may live in Workers, run against a wall clock.
 *
 * @example
 * ```ts
 * const runtime = new WorkerRuntime({ seed: 1, wallTime });
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
  readonly #time: WallTime;
  readonly #handlerTimeoutMs: number;
  readonly #poolSize: number;
  readonly #hosts: HostWorker[] = [];
  readonly #pools = new Map<string, { workers: HostWorker[]; spawned: number }>();
  readonly #proxies: RemoteProxy[] = [];
  readonly #proxyOf = new Map<number, RemoteProxy>();
  readonly #lags: number[] = [];
  #spawning = 0;
  #failure: Error | undefined;
  #wake: (() => void) | undefined;
  #restamped = 0;
  #maxRestampMs = 0;
  /** The clock of the run going on (for `inject`), and whether it is open. */
  #clock: WallClock | undefined;
  #open = false;

  constructor(options: WorkerRuntimeOptions) {
    this.#seed = options.seed;
    this.#time = options.wallTime;
    this.#handlerTimeoutMs = options.handlerTimeoutMs ?? 5000;
    const cores = globalThis.navigator?.hardwareConcurrency ?? 1;
    this.#poolSize = Math.max(1, Math.floor(options.poolSize ?? cores));
    this.kernel = new Kernel({ seed: options.seed, onDeliver: options.onDeliver });
  }

  /** Wall time now, from the injected source. */
  wallNowMs(): number {
    return this.#time.now();
  }

  /** Workers started so far (the pools' and the own ones). */
  get workerCount(): number {
    return this.#hosts.length;
  }

  /** Runs `actor` in this thread. */
  spawnLocal<M extends Message>(name: string, actor: Actor<M>): ActorRef<M> {
    return this.kernel.spawn(name, actor);
  }

  /**
   * Hosts an actor in a Worker — a pool's (assigned round-robin) or, with
   * `ownWorker`, its own — and returns its address.
   */
  spawnRemote<M extends Message>(name: string, spec: RemoteActorSpec): ActorRef<M> {
    const host = spec.ownWorker ? this.#newHost(name, spec) : this.#pooledHost(spec);
    const label = spec.label ? `${name} (${spec.label})` : name;
    const proxy = new RemoteProxy(
      this,
      label,
      host,
      host.actors.length,
      spec,
      spec.timeoutMs ?? this.#handlerTimeoutMs,
    );
    const ref = this.kernel.spawn(name, proxy);
    proxy.ref = ref;
    host.actors.push(proxy);
    this.#proxies.push(proxy);
    this.#proxyOf.set(ref, proxy);
    this.#spawning++;
    host.post({
      type: "spawn",
      actor: proxy.index,
      name,
      seed: this.#seed,
      self: ref,
      factory: spec.factory,
      args: spec.args,
    });
    return ref as ActorRef<M>;
  }

  /** What a remote actor's factory said about it (such as a plugin's name), once it is ready. */
  aboutOf<M extends Message>(ref: ActorRef<M>): string | undefined {
    return this.#proxyOf.get(ref)?.about;
  }

  /**
   * Resolves when every Worker has built its actors.
   * @throws {SimulationError} when one fails to build, crashes, or takes
   *   longer than its timeout once its Worker started building it (the
   *   Worker is not awaited: one spinning in user code cannot stop this).
   */
  async start(options: { readonly signal?: AbortSignal } = {}): Promise<void> {
    const stop = this.#abortOn(options.signal);
    try {
      await this.#awaitBuilt();
    } finally {
      stop();
    }
  }

  /** Fails the run with an `AbortError` when `signal` aborts; returns what stops watching. */
  #abortOn(signal: AbortSignal | undefined): () => void {
    const onAbort = () => this.#fail(new DOMException("interrupted", "AbortError"));
    signal?.addEventListener("abort", onAbort);
    if (signal?.aborted) onAbort();
    return () => signal?.removeEventListener("abort", onAbort);
  }

  async #awaitBuilt(): Promise<void> {
    for (;;) {
      if (this.#failure) throw this.#failure;
      if (this.#spawning === 0) return;
      const now = this.wallNowMs();
      let nextDeadline = Infinity;
      for (const proxy of this.#proxies) {
        if (proxy.state !== "building") continue;
        const deadline = proxy.buildStartedWallMs + proxy.timeoutMs;
        if (now > deadline) {
          this.#fail(
            new SimulationError(
              proxy.spec.timeoutKind ?? "actor_timeout",
              `${proxy.who} timed out while loading: not ready within ${proxy.timeoutMs} ms of wall time`,
              { actor: proxy.name, timeMs: this.kernel.nowMs },
            ),
          );
          break;
        }
        if (deadline < nextDeadline) nextDeadline = deadline;
      }
      if (this.#failure) continue;
      await this.#sleepOrWake(nextDeadline - now);
    }
  }

  /**
   * Delivers messages as the wall clock reaches their time, until nothing is
   * pending anywhere (kernel queue empty, every Worker answered) or `untilMs`.
   * @throws {SimulationError} when an actor fails, times out or its Worker crashes.
   */
  async run(clock: WallClock, options: RealtimeRunOptions = {}): Promise<void> {
    const stop = this.#abortOn(options.signal);
    this.#clock = clock;
    this.#open = options.open ?? false;
    try {
      await this.kernel.runWithClock(this.#lockStep(clock), {
        untilMs: this.#open ? Infinity : options.untilMs,
        onSync: (status) => {
          const lags = this.#lags;
          lags.push(status.lagMs);
          // An open run (the gateway's router) may serve for days: it keeps its recent lags only.
          if (this.#open && lags.length >= 2 * OPEN_RUN_LAG_WINDOW) {
            lags.splice(0, lags.length - OPEN_RUN_LAG_WINDOW);
          }
        },
      });
    } finally {
      this.#clock = undefined;
      stop();
    }
  }

  /**
   * Sends `message` to `to` from outside the simulation (a request off the
   * network), stamped with the run's simulated now — the wall clock's, never
   * before the kernel's own — and wakes the run to deliver it.
   * @throws {RangeError} when no run is going on.
   */
  inject<M extends Message>(to: ActorRef<M>, message: M): void {
    const clock = this.#clock;
    if (clock === undefined) throw new RangeError("WorkerRuntime.inject: no run is going on");
    const kernel = this.kernel;
    kernel.enqueueAt(to, message, Math.max(kernel.nowMs, clock.simNowMs()), -1);
    this.#wake?.();
  }

  /** Ends an open run: it resolves once the messages already due are delivered. */
  close(): void {
    this.#open = false;
    this.#wake?.();
  }

  /**
   * The kernel's clock in real time: the wall clock, in lock-step with the
   * Workers. While a Worker handles a message, it may still send or cancel
   * something that the virtual kernel would deliver (or drop) before the
   * next queued message — even at the same instant. So no delivery is due
   * until every Worker has answered; the kernel then reads its queue again.
   * Order and stamps stay exactly the virtual kernel's; a slow Worker shows
   * up as lag, not as changed results. A failure (an actor's, a timeout, an
   * abort) ends the run by throwing from here.
   */
  #lockStep(clock: WallClock): Clock {
    let burst = 0;
    return {
      synchronize: (timeMs: number): SyncStatus | Promise<void> => {
        if (this.#failure) throw this.#failure;
        const deadline = this.#checkTimeouts();
        if (this.#failure) throw this.#failure;
        if (deadline !== undefined) return this.#sleepOrWake(deadline - this.wallNowMs());
        // An open run waits for an injection; a closed one ends with nothing due.
        if (timeMs === Infinity) return this.#open ? this.#sleepOrWake(MAX_SLEEP_MS) : SYNCHRONIZED;
        // Let the event loop breathe (replies, timers, signals) every so often.
        if (burst === DELIVERIES_PER_TURN) {
          burst = 0;
          return this.#sleepOrWake(0);
        }
        const wait = clock.wallMsUntil(timeMs);
        if (wait > 0) return this.#sleepOrWake(wait);
        burst++;
        return { lagMs: -wait };
      },
    };
  }

  /** Lag figures of the run so far (of an open run: of its last 65,536 to 131,072 deliveries), or of its last `recent` deliveries. */
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

  /**
   * Terminates every Worker. Safe to call more than once. Returns at once; a
   * Worker spinning in user code may keep its thread, so a command-line tool
   * that saw a timeout must end its process.
   */
  terminate(): void {
    for (const host of this.#hosts) host.worker.terminate();
  }

  #pooledHost(spec: RemoteActorSpec): HostWorker {
    const permissions = spec.permissions ?? "none";
    // Trusted and restricted actors never share a Worker with others: one Worker's
    // answers are all believed (or all checked) alike.
    const trust = `${spec.revivers === undefined ? "untrusted" : "trusted"} ${
      spec.mayEmit ? "checked" : "free"
    }`;
    const key = `${spec.entry.href} ${JSON.stringify(permissions)} ${trust}`;
    let pool = this.#pools.get(key);
    if (pool === undefined) {
      pool = { workers: [], spawned: 0 };
      this.#pools.set(key, pool);
    }
    const slot = pool.spawned++ % this.#poolSize;
    if (slot === pool.workers.length) {
      pool.workers.push(this.#newHost(`pool ${this.#pools.size}/${slot}`, spec));
    }
    return pool.workers[slot];
  }

  #newHost(name: string, spec: RemoteActorSpec): HostWorker {
    const host = new HostWorker(name, spec.entry, spec.permissions ?? "none");
    host.worker.onmessage = (event: MessageEvent<HostReply>) => this.#onReply(host, event.data);
    host.worker.onerror = (event) => {
      event.preventDefault();
      this.#crash(host, event.message);
    };
    this.#hosts.push(host);
    return host;
  }

  #onReply(host: HostWorker, reply: HostReply): void {
    if (this.#failure) return;
    switch (reply?.type) {
      case "building":
      case "ready":
      case "spawn_failed": {
        const proxy = host.actors[reply.actor];
        if (proxy === undefined || proxy.state === "ready") return;
        if (reply.type === "building") {
          // Once only: a plugin repeating it must not keep pushing its load deadline back.
          if (proxy.state !== "spawning") return;
          proxy.state = "building";
          proxy.buildStartedWallMs = this.wallNowMs();
        } else if (reply.type === "ready") {
          proxy.state = "ready";
          proxy.about = reply.about;
          this.#spawning--;
        } else {
          const cause = this.#revive(proxy, reply.error);
          this.#fail(
            cause !== undefined && !(cause instanceof SimulationError)
              ? cause
              : new SimulationError("actor_threw", `could not start: ${reply.message}`, {
                actor: proxy.name,
                timeMs: this.kernel.nowMs,
                cause,
              }),
          );
        }
        break;
      }
      case "handled": {
        const delivery = host.pending.shift();
        if (delivery === undefined) return;
        host.lastActor = delivery.proxy;
        this.#apply(delivery, reply.outbox);
        break;
      }
      case "failed": {
        const delivery = host.pending.shift();
        if (delivery === undefined) return this.#crash(host, reply.message);
        // A kind outside the catalogue (a forged reply) is the actor's own failure.
        const kind = SIMULATION_ERROR_KINDS.includes(reply.kind) ? reply.kind : "actor_threw";
        this.#failAt(
          delivery.proxy,
          delivery,
          kind,
          reply.message,
          this.#revive(delivery.proxy, reply.error),
        );
        break;
      }
      case "crashed":
        this.#crash(host, reply.message);
        break;
    }
    this.#wake?.();
  }

  /** Queues what a handler sent, scheduled or cancelled, stamped from its delivery. */
  #apply(delivery: PendingDelivery, outbox: readonly Outgoing[]): void {
    const kernel = this.kernel;
    const proxy = delivery.proxy;
    const ctx = kernel.context(proxy.ref);
    const fail = (detail: string) =>
      this.#fail(
        new SimulationError("actor_threw", detail, {
          actor: proxy.name,
          messageType: delivery.message.type,
          timeMs: delivery.timeMs,
        }),
      );
    if (!Array.isArray(outbox) || (proxy.spec.mayEmit && !outbox.every((out) => proxy.spec.mayEmit!(out)))) {
      return fail("its Worker answered with messages this actor may not send");
    }
    try {
      for (const out of outbox) {
        if (out.op === "cancel") {
          const timer = proxy.timers.get(out.timer);
          if (timer !== undefined) {
            ctx.cancel(timer.id);
            proxy.timerOfMessage.delete(timer.message);
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
        if (out.op === "send") ctx.send(out.to as ActorRef<Message>, out.message, delayMs);
        else {
          const message = { ...out.message };
          const id = out.background === true
            ? ctx.scheduleBackground(delayMs, message)
            : ctx.schedule(delayMs, message);
          proxy.timers.set(out.timer, { id, message });
          proxy.timerOfMessage.set(message, out.timer);
        }
      }
    } catch (error) {
      if (error instanceof SimulationError) this.#fail(error);
      else fail(`its Worker answered with an invalid message: ${(error as Error)?.message ?? error}`);
    }
  }

  /**
   * Fails the run for an error outside any handler in `host`'s Worker. It
   * names the actor whose delivery was pending there; else the one being
   * built; else the one that handled a message there last (the crash came
   * after its reply, at the current virtual time), saying which Worker it was
   * when that Worker hosts others too.
   */
  #crash(host: HostWorker, detail: string): void {
    const delivery = host.pending[0];
    if (delivery !== undefined) return void this.#failAt(delivery.proxy, delivery, "worker_crashed", detail);
    const building = host.actors.find((proxy) => proxy.state !== "ready");
    const proxy = building ?? host.lastActor ?? host.actors[0];
    const shared = host.actors.length > 1 && building === undefined
      ? ` (Worker ${host.name}, which hosts ${host.actors.length} actors; ${proxy.name} handled its last message)`
      : "";
    this.#failAt(proxy, undefined, "worker_crashed", detail + shared);
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
    cause?: Error,
  ): void {
    this.#fail(
      new SimulationError(kind, detail, {
        actor: proxy.name,
        messageType: delivery?.message.type,
        timeMs: delivery?.timeMs ?? this.kernel.nowMs,
        cause: cause instanceof SimulationError ? cause.cause : cause,
      }),
    );
  }

  /** The error a trusted Worker's reply describes, rebuilt; undefined for an untrusted one (or none given). */
  #revive(proxy: RemoteProxy, data: ErrorData | undefined): Error | undefined {
    const revivers = proxy.spec.revivers;
    return revivers === undefined || data === undefined ? undefined : errorFromData(data, revivers);
  }

  /**
   * Fails the run when a pending delivery is past its actor's timeout.
   * @returns the earliest wall deadline still ahead, or undefined when no reply is awaited.
   */
  #checkTimeouts(): number | undefined {
    const now = this.wallNowMs();
    let earliest: number | undefined;
    for (const host of this.#hosts) {
      const oldest = host.pending[0];
      if (oldest === undefined) continue;
      const { proxy } = oldest;
      const deadline = oldest.sentWallMs + proxy.timeoutMs;
      if (now > deadline) {
        const what = proxy.spec.describe?.(oldest.message) ?? `message "${oldest.message.type}"`;
        this.#failAt(
          proxy,
          oldest,
          proxy.spec.timeoutKind ?? "actor_timeout",
          `${proxy.who} did not answer ${what} within ${proxy.timeoutMs} ms of wall time`,
        );
        return undefined;
      }
      if (earliest === undefined || deadline < earliest) earliest = deadline;
    }
    return earliest;
  }

  #fail(error: Error): void {
    if (this.#failure === undefined) this.#failure = error;
    this.terminate();
    this.#wake?.();
  }

  /** Sleeps up to `ms` of wall time (at most {@linkcode MAX_SLEEP_MS}), or until a reply wakes it. */
  #sleepOrWake(ms: number): Promise<void> {
    const woken = new AbortController();
    this.#wake = () => woken.abort();
    const wait = Math.min(Math.max(0, ms), MAX_SLEEP_MS);
    return this.#time.sleep(wait, woken.signal).then(() => {
      this.#wake = undefined;
    });
  }
}
