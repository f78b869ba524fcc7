/**
 * @module
 * The real-time runtime: the same central kernel, paced by a wall clock,
 * delivering to actors hosted in Deno Workers — many actors per Worker, in a
 * pool sized to the cores, or one actor in a Worker of its own. Each
 * Worker-hosted actor is represented in the kernel by a proxy that posts the
 * message to its Worker; the reply carries what the actor sent, which the
 * kernel stamps and queues. Deliveries that cannot affect one another go out
 * together, one post per Worker, and answers are applied in delivery order,
 * so the order is exactly the virtual kernel's (design.md, "The real-time mode").
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
/** One message for an actor a Worker hosts (`actor`: its index among them), stamped `timeMs`. */
export interface HostDelivery {
  readonly actor: number;
  readonly message: Message;
  readonly timeMs: number;
}

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
  /** Deliveries to handle in this order, in one post. */
  | { readonly type: "deliver"; readonly deliveries: readonly HostDelivery[] };

/** One effect of a handler, as the Worker reports it. */
export type Outgoing =
  | { readonly op: "send"; readonly to: number; readonly message: Message; readonly delayMs: number }
  | {
    readonly op: "schedule";
    readonly timer: number;
    readonly message: Message;
    readonly delayMs: number;
    /** The instant it was scheduled at (`scheduleAt`), kept exact rather than rebuilt from the delay. */
    readonly atMs?: number;
    /** A background timer (it keeps no run alive). */
    readonly background?: boolean;
  }
  | { readonly op: "cancel"; readonly timer: number };

/**
 * Worker → main. A Worker answers its commands in order: `building` then
 * `ready` or `spawn_failed` for a spawn; for a batch of deliveries, one
 * `handled` with an outbox per delivery handled (in order), followed by
 * `failed` for the delivery that threw, if one did; `crashed` reports an
 * error outside any handler.
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
  | { readonly type: "handled"; readonly outboxes: readonly (readonly Outgoing[])[] }
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
   * The actor's lookahead for `message`: the least delay, in simulated ms,
   * of anything its handler may send or schedule (`Infinity`: it sends
   * nothing). While that delivery is unanswered the runtime goes on
   * delivering messages stamped up to the delivery's time + lookahead, to
   * other actors and other Workers (design.md, "The real-time mode"); an
   * answer that breaks the declaration fails the run (`invariant_broken`).
   * @default 0 for every message (only same-instant messages go out beside it)
   */
  readonly lookaheadMs?: (message: Message) => number;
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

/**
 * Wall ms a Worker's deliveries declared to send nothing may wait to be
 * posted while the run waits for another Worker: they then ride along with
 * the next post to their Worker (one wake-up of its thread for several).
 */
const SILENT_HOLD_MS = 2;

/** The reason a wait is cut short by an answer: a constant, so no `DOMException` is built per wake-up. */
const WOKEN = Symbol("woken");

/**
 * A delivery handed out and not yet applied: a Worker's, until its answer
 * comes back; a local actor's, when it had to wait its turn.
 */
interface InFlight {
  /** The Worker-hosted actor it went to; undefined for a local actor's. */
  readonly proxy: RemoteProxy | undefined;
  /** The local actor it waits for, run when its turn comes. */
  readonly local: LocalProxy | undefined;
  readonly message: Message;
  readonly timeMs: number;
  /** When it was posted to its Worker (its time budget runs from there); NaN until then. */
  postedWallMs: number;
  /** What the handler may send at the earliest: `timeMs` + the declared lookahead. */
  readonly horizonMs: number;
  /**
   * Declared to send nothing (lookahead `Infinity`): it stays out of the
   * window, so nothing waits for its answer, which must be empty.
   */
  readonly silent: boolean;
  /** The Worker's answer, once it came. */
  outbox: readonly Outgoing[] | undefined;
  /** Its failure, once it came: the run fails with it when its turn comes (an earlier one's wins). */
  failure: Error | undefined;
}

/** One Worker and the actors it hosts; its replies answer its deliveries in order. */
class HostWorker {
  readonly worker: Worker;
  readonly actors: RemoteProxy[] = [];
  /** Deliveries posted and not yet answered, oldest first. */
  readonly pending: InFlight[] = [];
  #pendingHead = 0;
  /** Deliveries handed out and not yet posted (the next post takes them all). */
  outgoing: HostDelivery[] = [];
  /** Whether one of them is awaited (not declared to send nothing): it is posted at the next wait. */
  urgent = false;
  /** When the first of them was handed out. */
  outgoingSinceWallMs = 0;
  /** The actor whose handler ran last here (to name one in a crash that came after its reply). */
  lastActor: RemoteProxy | undefined;
  constructor(readonly name: string, entry: URL, permissions: Deno.PermissionOptions) {
    this.worker = new Worker(entry, { type: "module", name, deno: { permissions } });
  }
  post(command: HostCommand): void {
    this.worker.postMessage(command);
  }
  /** The oldest unanswered delivery. */
  get oldest(): InFlight | undefined {
    return this.pending[this.#pendingHead];
  }
  /** Takes the oldest unanswered delivery: the one the next answer is for. */
  takeOldest(): InFlight | undefined {
    const head = this.#pendingHead;
    if (head === this.pending.length) return undefined;
    const delivery = this.pending[head];
    if (head + 1 === this.pending.length) {
      this.pending.length = 0;
      this.#pendingHead = 0;
    } else this.#pendingHead = head + 1;
    return delivery;
  }
  /** Posts the deliveries handed out since the last post, in one message, at `nowMs`. */
  flush(nowMs: number): void {
    const deliveries = this.outgoing;
    this.outgoing = [];
    this.urgent = false;
    const pending = this.pending;
    for (let i = pending.length - deliveries.length; i < pending.length; i++) pending[i].postedWallMs = nowMs;
    this.post({ type: "deliver", deliveries });
  }
}

/** The kernel's stand-in for an actor in a Worker. */
class RemoteProxy implements Actor<Message> {
  /**
   * The Worker's timer ids → the kernel's timer, the message it carries and
   * its time, and back (each scheduled message is a fresh object); entries
   * leave when the timer fires or is cancelled.
   */
  readonly timers = new Map<
    number,
    { readonly id: TimerId; readonly message: Message; readonly timeMs: number }
  >();
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
    this.runtime.handOut(this, message, ctx.now());
  }
  /** Whether one of its timers is due by `timeMs` (a handler of its still running could cancel it). */
  hasTimerBy(timeMs: number): boolean {
    if (this.timers.size === 0) return false;
    for (const timer of this.timers.values()) if (timer.timeMs <= timeMs) return true;
    return false;
  }
  /** Who failed, for error details: the label (`plugin x.ts`) or `the actor`. */
  get who(): string {
    return this.spec.label ?? "the actor";
  }
}

/** Options for {@linkcode WorkerRuntime.spawnLocal}. */
export interface LocalActorOptions {
  /**
   * The actor's lookahead for `message`, as {@linkcode RemoteActorSpec.lookaheadMs}:
   * `Infinity` declares that its handler sends, schedules and cancels
   * nothing (checked), so it runs at once even while Workers are still
   * answering; otherwise it waits for every delivery before it to be applied.
   * @default 0 for every message
   */
  readonly lookaheadMs?: (message: Message) => number;
}

/**
 * The kernel's stand-in for an actor in this thread. It hands the message
 * to its actor at once when no Worker owes an answer (or the actor declared
 * it sends nothing for it); else the delivery waits its turn, so that what
 * the actor sends is queued after what deliveries before it sent.
 */
class LocalProxy implements Actor<Message> {
  ref = -1;
  /** The actor's context for a message it declared it sends nothing for: any effect fails the run. */
  #silent: ActorContext<Message> | undefined;
  /** The type of the message it handles through that context, for the error. */
  #handling = "";
  constructor(
    readonly runtime: WorkerRuntime,
    readonly actor: Actor<Message>,
    readonly lookaheadMs: ((message: Message) => number) | undefined,
  ) {}
  handle(message: Message, ctx: ActorContext<Message>): void {
    if (this.lookaheadMs !== undefined && this.lookaheadMs(message) === Infinity) {
      this.#handling = message.type;
      return this.actor.handle(message, this.#silent ??= silentContext(ctx, () => this.#handling));
    }
    if (this.runtime.idle) return this.actor.handle(message, ctx);
    this.runtime.defer(this, message, ctx.now());
  }
}

/** `ctx` for a handler that declared it sends nothing: sending, scheduling or cancelling breaks the declaration. */
function silentContext(ctx: ActorContext<Message>, handling: () => string): ActorContext<Message> {
  const broken = (what: string): never => {
    throw new SimulationError(
      "invariant_broken",
      `${what}, though it declared a lookahead of Infinity (it sends nothing) for this message`,
      { actor: ctx.name, messageType: handling(), timeMs: ctx.now() },
    );
  };
  return {
    self: ctx.self,
    name: ctx.name,
    now: () => ctx.now(),
    random: () => ctx.random(),
    send: (_to, message) => broken(`it sent "${message.type}"`),
    schedule: (_delayMs, message) => broken(`it scheduled "${message.type}"`),
    scheduleAt: (_timeMs, message) => broken(`it scheduled "${message.type}"`),
    scheduleBackground: (_delayMs, message) => broken(`it scheduled "${message.type}"`),
    cancel: () => broken("it cancelled a timer"),
  };
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
  /**
   * Deliveries handed out and not yet applied, in delivery order (from
   * `#windowHead`): answers are applied strictly in this order, whichever
   * Worker answers first.
   */
  #window: (InFlight | undefined)[] = [];
  #windowHead = 0;
  /** Deliveries of the window applied so far (an answer that applies none wakes nothing). */
  #applied = 0;
  /** The earliest time an unapplied delivery may send for: no message stamped later is handed out. */
  #horizonMs = Infinity;
  /** Local deliveries waiting their turn: nothing more is handed out until they ran. */
  #deferred = 0;
  /** Workers with deliveries handed out and not yet posted. */
  #unposted: HostWorker[] = [];
  /** Deliveries posted (or about to be) whose answer has not come. */
  #awaiting = 0;
  /** The one host timer armed for the run's waits, and when it fires. */
  #timer: AbortController | undefined;
  #timerAtMs = Infinity;
  /** Deliveries since the run last waited: it yields to the event loop after {@linkcode DELIVERIES_PER_TURN}. */
  #burst = 0;
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
  spawnLocal<M extends Message>(name: string, actor: Actor<M>, options: LocalActorOptions = {}): ActorRef<M> {
    const proxy = new LocalProxy(this, actor as unknown as Actor<Message>, options.lookaheadMs);
    proxy.ref = this.kernel.spawn(name, proxy);
    return proxy.ref as ActorRef<M>;
  }

  /** True when every delivery handed out (but those declared to send nothing) has been applied. */
  get idle(): boolean {
    return this.#windowHead === this.#window.length;
  }

  /** @internal A proxy's delivery to its Worker: queued for the next post, awaited in order. */
  handOut(proxy: RemoteProxy, message: Message, timeMs: number): void {
    const lookahead = proxy.spec.lookaheadMs?.(message) ?? 0;
    const delivery: InFlight = {
      proxy,
      local: undefined,
      message,
      timeMs,
      postedWallMs: NaN,
      horizonMs: timeMs + (lookahead >= 0 ? lookahead : 0),
      silent: lookahead === Infinity,
      outbox: undefined,
      failure: undefined,
    };
    const host = proxy.host;
    host.pending.push(delivery);
    this.#awaiting++;
    if (host.outgoing.length === 0) {
      this.#unposted.push(host);
      host.outgoingSinceWallMs = this.wallNowMs();
    }
    host.outgoing.push({ actor: proxy.index, message, timeMs });
    if (delivery.silent) return;
    host.urgent = true;
    this.#window.push(delivery);
    if (delivery.horizonMs < this.#horizonMs) this.#horizonMs = delivery.horizonMs;
  }

  /** @internal A local actor's delivery that must wait for the deliveries before it to be applied. */
  defer(local: LocalProxy, message: Message, timeMs: number): void {
    this.#window.push({
      proxy: undefined,
      local,
      message,
      timeMs,
      postedWallMs: NaN,
      horizonMs: timeMs,
      silent: false,
      outbox: undefined,
      failure: undefined,
    });
    this.#deferred++;
    if (timeMs < this.#horizonMs) this.#horizonMs = timeMs;
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
      this.#disarm();
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
      await this.kernel.runWithClock(this.#conservative(clock), {
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
      this.#disarm();
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
   * The kernel's clock in real time: the wall clock, and the Workers'
   * answers. A delivery still unanswered may send something the virtual
   * kernel would deliver before the next queued message — but never stamped
   * before its own time + its actor's lookahead — or cancel one of its own
   * actor's timers. So the next message is handed out while others are
   * unanswered only when it is stamped no later than every unanswered
   * delivery's horizon, no local delivery is waiting its turn, and no actor
   * with an unanswered delivery has a timer due by then; else the run waits
   * for answers (posting what it handed out first, one message per Worker).
   * Answers are applied in delivery order, so order and stamps stay exactly
   * the virtual kernel's; a slow Worker shows up as lag, not as changed
   * results. A failure (an actor's, a timeout, an abort) ends the run by
   * throwing from here.
   */
  #conservative(clock: WallClock): Clock {
    this.#burst = 0;
    return {
      synchronize: (timeMs: number): SyncStatus | Promise<void> => {
        if (this.#failure) throw this.#failure;
        const busy = this.#awaiting !== 0 || !this.idle;
        let deadline = Infinity;
        if (busy) {
          deadline = this.#checkTimeouts() ?? Infinity;
          if (this.#failure) throw this.#failure;
          if (timeMs === Infinity || (!this.idle && !this.#mayHandOut(timeMs))) {
            return this.#sleepOrWake(deadline - this.wallNowMs());
          }
        } // An open run waits for an injection; a closed one ends with nothing due.
        else if (timeMs === Infinity) return this.#open ? this.#sleepOrWake(MAX_SLEEP_MS) : SYNCHRONIZED;
        // Let the event loop breathe (replies, timers, signals) every so often.
        if (this.#burst === DELIVERIES_PER_TURN) return this.#sleepOrWake(0);
        const wait = clock.wallMsUntil(timeMs);
        if (wait > 0) return this.#sleepOrWake(Math.min(wait, deadline - this.wallNowMs()));
        this.#burst++;
        return { lagMs: -wait };
      },
    };
  }

  /** Whether a message stamped `timeMs` may be handed out while deliveries are unanswered. */
  #mayHandOut(timeMs: number): boolean {
    if (this.#deferred !== 0 || timeMs > this.#horizonMs) return false;
    const window = this.#window;
    for (let i = this.#windowHead; i < window.length; i++) {
      if (window[i]!.proxy?.hasTimerBy(timeMs)) return false;
    }
    return true;
  }

  /**
   * Applies the answered deliveries at the head of the window, in order: a
   * Worker's answer, or a local actor's delivery that waited its turn. Stops
   * at the first still unanswered; fails the run at the first failure.
   */
  #applyAnswered(): void {
    const window = this.#window;
    let head = this.#windowHead;
    let horizonPassed = false;
    while (head < window.length && this.#failure === undefined) {
      const delivery = window[head]!;
      if (delivery.failure !== undefined) return this.#fail(delivery.failure);
      if (delivery.local !== undefined) {
        this.#deferred--;
        this.#runDeferred(delivery.local, delivery);
      } else if (delivery.outbox !== undefined) this.#apply(delivery, delivery.outbox);
      else break;
      window[head++] = undefined;
      this.#applied++;
      if (delivery.horizonMs === this.#horizonMs) horizonPassed = true;
    }
    if (head === window.length) {
      window.length = 0;
      this.#windowHead = 0;
      this.#horizonMs = Infinity;
      return;
    }
    this.#windowHead = head;
    if (horizonPassed) {
      let horizon = Infinity;
      for (let i = head; i < window.length; i++) horizon = Math.min(horizon, window[i]!.horizonMs);
      this.#horizonMs = horizon;
    }
  }

  /** Runs a local actor's delivery that waited its turn (the kernel's clock is still at its time). */
  #runDeferred(local: LocalProxy, delivery: InFlight): void {
    const ctx = this.kernel.context(local.ref);
    try {
      local.actor.handle(delivery.message, ctx);
    } catch (error) {
      this.#fail(
        error instanceof SimulationError ? error : new SimulationError(
          "actor_threw",
          error instanceof Error ? error.message : String(error),
          { actor: ctx.name, messageType: delivery.message.type, timeMs: delivery.timeMs, cause: error },
        ),
      );
    }
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
        // One outbox per delivery handled, in order (a forged answer for none is ignored).
        const outboxes = Array.isArray(reply.outboxes) ? reply.outboxes : [reply.outboxes];
        const applied = this.#applied;
        for (const outbox of outboxes) {
          const delivery = host.takeOldest();
          if (delivery === undefined) break;
          this.#awaiting--;
          host.lastActor = delivery.proxy;
          if (delivery.silent) this.#checkSilent(delivery, outbox);
          else delivery.outbox = outbox;
        }
        this.#applyAnswered();
        // Only progress wakes the run: an answer behind an unanswered one changes nothing yet.
        if (this.#applied !== applied || this.#awaiting === 0 || this.#failure) this.#wake?.();
        return;
      }
      case "failed": {
        const delivery = host.takeOldest();
        if (delivery === undefined) return this.#crash(host, reply.message);
        this.#awaiting--;
        // A kind outside the catalogue (a forged reply) is the actor's own failure.
        const kind = SIMULATION_ERROR_KINDS.includes(reply.kind) ? reply.kind : "actor_threw";
        const proxy = delivery.proxy!;
        delivery.failure = this.#errorAt(
          proxy,
          delivery,
          kind,
          reply.message,
          this.#revive(proxy, reply.error),
        );
        // Nothing waits for a silent delivery's answer: its failure is the run's at once.
        if (delivery.silent) this.#fail(delivery.failure);
        else this.#applyAnswered();
        break;
      }
      case "crashed":
        this.#crash(host, reply.message);
        break;
    }
    this.#wake?.();
  }

  /** Fails the run when a delivery declared to send nothing was answered with anything. */
  #checkSilent(delivery: InFlight, outbox: readonly Outgoing[]): void {
    if (Array.isArray(outbox) && outbox.length === 0) return;
    const proxy = delivery.proxy!;
    const what = Array.isArray(outbox) ? `"${outbox[0]?.op}" of "${outbox[0]?.message?.type}"` : "not a list";
    this.#fail(
      new SimulationError(
        "invariant_broken",
        `its answer (${what}) breaks its declared lookahead of Infinity (it sends nothing) for this message`,
        { actor: proxy.name, messageType: delivery.message.type, timeMs: delivery.timeMs },
      ),
    );
  }

  /**
   * Queues what a handler sent, scheduled or cancelled, stamped as the
   * virtual kernel stamps it: its delivery's time + the delay, or the
   * instant it scheduled at.
   */
  #apply(delivery: InFlight, outbox: readonly Outgoing[]): void {
    const kernel = this.kernel;
    const proxy = delivery.proxy!;
    const ctx = kernel.context(proxy.ref);
    const fail = (detail: string, kind: SimulationErrorKind = "actor_threw") =>
      this.#fail(
        new SimulationError(kind, detail, {
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
        const intended = out.op === "schedule" && out.atMs !== undefined
          ? out.atMs
          : delivery.timeMs + out.delayMs;
        if (intended < delivery.horizonMs) {
          return fail(
            `it sent "${out.message?.type}" for t=${intended} ms, earlier than its declared lookahead allows ` +
              `(t=${delivery.horizonMs} ms)`,
            "invariant_broken",
          );
        }
        const late = kernel.nowMs - intended;
        if (late > 0) {
          this.#restamped++;
          if (late > this.#maxRestampMs) this.#maxRestampMs = late;
        }
        const timeMs = late > 0 ? kernel.nowMs : intended;
        if (out.op === "send") kernel.enqueueAt(out.to, out.message, timeMs, proxy.ref);
        else {
          const message = { ...out.message };
          const id = (out.background === true
            // By delay, as the virtual kernel queues one: exact while the clock is at the delivery's time.
            ? kernel.enqueueBackground(
              proxy.ref,
              message,
              kernel.nowMs === delivery.timeMs && late <= 0 ? out.delayMs : timeMs - kernel.nowMs,
              proxy.ref,
            )
            : kernel.enqueueAt(proxy.ref, message, timeMs, proxy.ref)) as TimerId;
          proxy.timers.set(out.timer, { id, message, timeMs });
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
    const delivery = host.oldest;
    if (delivery !== undefined) return void this.#failAt(delivery.proxy!, delivery, "worker_crashed", detail);
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
    delivery: InFlight | undefined,
    kind: SimulationErrorKind,
    detail: string,
    cause?: Error,
  ): void {
    this.#fail(this.#errorAt(proxy, delivery, kind, detail, cause));
  }

  /** The error {@linkcode WorkerRuntime.#failAt} fails the run with. */
  #errorAt(
    proxy: RemoteProxy,
    delivery: InFlight | undefined,
    kind: SimulationErrorKind,
    detail: string,
    cause?: Error,
  ): SimulationError {
    return new SimulationError(kind, detail, {
      actor: proxy.name,
      messageType: delivery?.message.type,
      timeMs: delivery?.timeMs ?? this.kernel.nowMs,
      cause: cause instanceof SimulationError ? cause.cause : cause,
    });
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
      const oldest = host.oldest;
      // Unposted yet (held, declared to send nothing): its budget has not started.
      if (oldest === undefined || Number.isNaN(oldest.postedWallMs)) continue;
      const proxy = oldest.proxy!;
      const deadline = oldest.postedWallMs + proxy.timeoutMs;
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

  /**
   * Posts what was handed out (one message per Worker), then sleeps up to
   * `ms` of wall time (at most {@linkcode MAX_SLEEP_MS}), or until an answer
   * (or an injection, a failure) wakes it. One host timer serves every wait:
   * it is re-armed only when it would fire too late, so a run waiting on
   * Workers sets no timer per delivery (an early firing only costs a look).
   */
  #sleepOrWake(ms: number): Promise<void> {
    const now = this.wallNowMs();
    this.#burst = 0;
    if (this.#unposted.length !== 0) {
      this.#post(now);
      // What was just posted starts its time budget now: wake in time to judge it.
      const deadline = this.#checkTimeouts();
      if (deadline !== undefined) ms = Math.min(ms, deadline - now);
    }
    const atMs = now + Math.min(Math.max(0, ms), MAX_SLEEP_MS);
    if (!(this.#timerAtMs <= atMs)) this.#arm(now, atMs);
    return new Promise<void>((resolve) => {
      this.#wake = () => {
        this.#wake = undefined;
        resolve();
      };
    });
  }

  /**
   * Posts what was handed out, one message per Worker. A Worker whose
   * deliveries were all declared to send nothing keeps them a little while
   * the run waits on another Worker's answer (they wait for nothing).
   */
  #post(now: number): void {
    const hold = !this.idle;
    let kept = 0;
    const unposted = this.#unposted;
    for (let i = 0; i < unposted.length; i++) {
      const host = unposted[i];
      if (host.urgent || !hold || now - host.outgoingSinceWallMs > SILENT_HOLD_MS) host.flush(now);
      else unposted[kept++] = host;
    }
    unposted.length = kept;
  }

  /** Arms the run's host timer for `atMs` (disarming the one that would fire later). */
  #arm(now: number, atMs: number): void {
    this.#disarm();
    const timer = new AbortController();
    this.#timer = timer;
    this.#timerAtMs = atMs;
    this.#time.sleep(atMs - now, timer.signal).then(() => {
      if (this.#timer !== timer) return; // disarmed
      this.#timer = undefined;
      this.#timerAtMs = Infinity;
      this.#wake?.();
    });
  }

  /** Disarms the run's host timer, if one is armed. */
  #disarm(): void {
    const timer = this.#timer;
    if (timer === undefined) return;
    this.#timer = undefined;
    this.#timerAtMs = Infinity;
    timer.abort(WOKEN);
  }
}
