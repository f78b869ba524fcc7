/**
 * @module
 * The kernel: it owns virtual time and delivers timestamped messages to actors
 * in one total order, `(timeMs, seq)`. Actors see the world only through the
 * {@linkcode ActorContext} it hands them.
 */
import type { Clock, SyncStatus } from "./clock.ts";
import { EventQueue } from "./event_queue.ts";
import { createRandomStream, type RandomStream } from "./random_stream.ts";
import { SimulationError } from "./simulation_error.ts";

/** Every message names its kind in `type`. */
export interface Message {
  readonly type: string;
}

/**
 * The address of an actor that accepts messages of type `M`. At run time it is
 * a small integer; the type parameter only lets the compiler check `send`
 * (contravariantly: a router that accepts more than `InstanceStatus` may still
 * be handed out as an `ActorRef<InstanceStatus>`).
 */
export type ActorRef<M extends Message> = number & {
  readonly __accepts?: (message: M) => void;
};

/** A handle on a pending timer, for {@linkcode ActorContext.cancel}. */
export type TimerId = number & { readonly __timer?: true };

/** An actor: a handler over its own state. */
export interface Actor<M extends Message> {
  /** Processes one message. Everything it does to the world goes through `ctx`. */
  handle(message: M, ctx: ActorContext<M>): void;
}

/** The only door from an actor to the world. */
export interface ActorContext<M extends Message> {
  /** This actor's own address. */
  readonly self: ActorRef<M>;
  /** This actor's unique name, such as `instance/3`. */
  readonly name: string;
  /** Current simulated time in milliseconds. */
  now(): number;
  /**
   * Sends `message` to `to`, delivered `delayMs` from now (default 0).
   * @throws {RangeError} when `delayMs` is negative or not finite.
   */
  send<T extends Message>(to: ActorRef<T>, message: T, delayMs?: number): void;
  /** Sends `message` to this actor after `delayMs`; returns a cancellable id. */
  schedule(delayMs: number, message: M): TimerId;
  /**
   * Sends `message` to this actor at the absolute time `timeMs` (>= now):
   * for an actor that computed a future instant itself, so that no
   * `now + (timeMs − now)` rounding moves it. Returns a cancellable id.
   */
  scheduleAt(timeMs: number, message: M): TimerId;
  /**
   * Like `schedule`, for a timer that keeps no run alive: a run whose only
   * pending messages are background timers is over. For periodic work that
   * would otherwise never end — a health probe, a metrics scrape, an
   * autoscaler's tick. Returns a cancellable id.
   */
  scheduleBackground(delayMs: number, message: M): TimerId;
  /** Cancels a timer; a cancelled timer never fires. Cancelling twice is harmless. */
  cancel(timer: TimerId): void;
  /** A uniform draw in [0, 1) from this actor's own seeded stream. */
  random(): number;
}

/** Called for every delivery, before the actor handles the message. */
export type DeliveryTap = (message: Message, to: ActorRef<Message>, timeMs: number) => void;

/** Options for {@linkcode Kernel}. */
export interface KernelOptions {
  /** Seed from which every actor's random stream is derived. @default 0 */
  readonly seed?: number;
  /**
   * Observes every delivery (live views, tracing). It must not send: it sees
   * the world, it does not act in it. @default undefined
   */
  readonly onDeliver?: DeliveryTap;
}

/** Options for {@linkcode Kernel.run}. */
export interface RunOptions {
  /** Stop before delivering any message stamped later than this. @default Infinity */
  readonly untilMs?: number;
  /** Return after delivering this many messages (run again to go on): a slice, for progress reports. @default Infinity */
  readonly maxDeliveries?: number;
}

class KernelContext<M extends Message> implements ActorContext<M> {
  readonly random: RandomStream;
  constructor(
    readonly kernel: Kernel,
    readonly self: ActorRef<M>,
    readonly name: string,
    seed: number,
  ) {
    this.random = createRandomStream(seed, name);
  }
  now(): number {
    return this.kernel.nowMs;
  }
  send<T extends Message>(to: ActorRef<T>, message: T, delayMs = 0): void {
    this.kernel.enqueue(to, message, delayMs, this.self);
  }
  schedule(delayMs: number, message: M): TimerId {
    return this.kernel.enqueue(this.self, message, delayMs, this.self) as TimerId;
  }
  scheduleAt(timeMs: number, message: M): TimerId {
    return this.kernel.enqueueAt(this.self, message, timeMs, this.self) as TimerId;
  }
  scheduleBackground(delayMs: number, message: M): TimerId {
    return this.kernel.enqueueBackground(this.self, message, delayMs, this.self) as TimerId;
  }
  cancel(timer: TimerId): void {
    this.kernel.cancelTimer(timer);
  }
}

/**
 * A discrete-event kernel: spawn actors, inject messages, run.
 *
 * Ordering contract: messages are delivered by increasing `timeMs`; messages
 * with equal `timeMs` are delivered in the order they were sent (a per-kernel
 * counter `seq` breaks the tie), so the order is total and reproducible.
 *
 * @example
 * ```ts
 * const kernel = new Kernel({ seed: 1 });
 * const ref = kernel.spawn("echo", { handle: (m: { type: "ping" }) => {} });
 * kernel.send(ref, { type: "ping" }, 5);
 * kernel.run();
 * kernel.nowMs; // 5
 * ```
 */
export class Kernel {
  readonly #seed: number;
  readonly #onDeliver: DeliveryTap | undefined;
  readonly #queue = new EventQueue<Message>();
  /**
   * Messages stamped with the current time, in send order: most messages
   * (replies, reports) are sent for now, and a FIFO takes them in O(1)
   * instead of the heap's O(log n). Exact: every queued entry stamped now
   * was sent before the clock got here, so before any of these (design.md).
   */
  readonly #laneSeq: number[] = [];
  readonly #laneTo: number[] = [];
  readonly #laneItem: (Message | undefined)[] = [];
  #laneHead = 0;
  #laneTail = 0;
  /** The message `#take` took: the one being delivered. */
  #takenSeq = -1;
  #takenTo = 0;
  #takenMessage: Message | undefined;
  #takenTimeMs = 0;
  readonly #actors: Actor<Message>[] = [];
  readonly #contexts: KernelContext<Message>[] = [];
  readonly #names = new Set<string>();
  readonly #cancelled = new Set<number>();
  /** Seqs of pending background timers: they keep no run alive. */
  readonly #background = new Set<number>();
  /** `#background.size`, kept in a field: the delivery loop reads it every time. */
  #backgroundPending = 0;
  #seq = 0;
  #now = 0;
  #delivered = 0;

  constructor(options: KernelOptions = {}) {
    this.#seed = options.seed ?? 0;
    this.#onDeliver = options.onDeliver;
  }

  /** Current simulated time in milliseconds. */
  get nowMs(): number {
    return this.#now;
  }

  /** Messages delivered so far (cancelled timers excluded). */
  get messagesDelivered(): number {
    return this.#delivered;
  }

  /**
   * The context an actor acts through. A stand-in for an actor that lives
   * elsewhere (a Worker's proxy) uses it to send and schedule on that actor's
   * behalf when its answers come back.
   */
  context<M extends Message>(ref: ActorRef<M>): ActorContext<M> {
    const context = this.#contexts[ref];
    if (context === undefined) throw new SimulationError("unknown_actor", `no actor has address ${ref}`);
    return context as unknown as ActorContext<M>;
  }

  /** Messages and timers waiting to be delivered. */
  get pendingCount(): number {
    return this.#queue.size + this.#laneTail - this.#laneHead;
  }

  /** Pending messages that keep the run alive: all but background timers. The run is over at 0. */
  get liveCount(): number {
    return this.#queue.size + this.#laneTail - this.#laneHead - this.#backgroundPending;
  }

  /**
   * Registers an actor under a unique name and returns its address.
   * @throws {TypeError} when the name is already taken.
   */
  spawn<M extends Message>(name: string, actor: Actor<M>): ActorRef<M> {
    if (this.#names.has(name)) {
      throw new TypeError(`Kernel.spawn: an actor named "${name}" already exists`);
    }
    this.#names.add(name);
    const ref = this.#actors.length as ActorRef<M>;
    this.#actors.push(actor as unknown as Actor<Message>);
    this.#contexts.push(new KernelContext(this, ref, name, this.#seed) as KernelContext<Message>);
    return ref;
  }

  /** The name an address was spawned under. */
  nameOf(ref: ActorRef<Message>): string {
    return this.#contexts[ref]?.name ?? `#${ref}`;
  }

  /** The actor behind an address, for reading its state after a run. */
  actorOf<A extends Actor<Message>>(ref: ActorRef<Message>): A {
    return this.#actors[ref] as A;
  }

  /**
   * Sends a message from outside any actor, `delayMs` from now.
   * @returns its id, which {@linkcode Kernel.cancel} accepts.
   */
  send<M extends Message>(to: ActorRef<M>, message: M, delayMs = 0): TimerId {
    return this.enqueue(to, message, delayMs, -1) as TimerId;
  }

  /** Cancels a message sent with {@linkcode Kernel.send} before it is delivered. */
  cancel(id: TimerId): void {
    this.cancelTimer(id);
  }

  /** @internal Used by contexts; returns the message's `seq`. */
  enqueue(to: number, message: Message, delayMs: number, from: number): number {
    return this.enqueueAt(to, message, this.#now + delayMs, from, delayMs);
  }

  /** @internal Like `enqueue`, at an absolute time; returns the message's `seq`. */
  enqueueAt(
    to: number,
    message: Message,
    timeMs: number,
    from: number,
    delayMs: number = timeMs - this.#now,
  ): number {
    if (!(delayMs >= 0) || delayMs === Infinity || !(timeMs >= this.#now)) {
      throw new RangeError(
        `send: delayMs must be a finite number >= 0 (time never moves backwards), got ${delayMs}` +
          ` (from ${from < 0 ? "outside" : this.nameOf(from)}, message "${message.type}")`,
      );
    }
    if (!(to >= 0 && to < this.#actors.length)) {
      throw new SimulationError("unknown_actor", `no actor has address ${to}`, {
        actor: from < 0 ? undefined : this.nameOf(from),
        messageType: message.type,
        timeMs: this.#now,
      });
    }
    const seq = this.#seq++;
    if (timeMs === this.#now) {
      const tail = this.#laneTail++;
      this.#laneSeq[tail] = seq;
      this.#laneTo[tail] = to;
      this.#laneItem[tail] = message;
    } else this.#queue.push(timeMs, seq, to, message);
    return seq;
  }

  /** @internal Like `enqueue`, for a background timer (see {@linkcode ActorContext.scheduleBackground}). */
  enqueueBackground(to: number, message: Message, delayMs: number, from: number): number {
    const seq = this.enqueue(to, message, delayMs, from);
    this.#background.add(seq);
    this.#backgroundPending++;
    return seq;
  }

  /** @internal */
  cancelTimer(timer: TimerId): void {
    if (timer >= 0 && timer < this.#seq) this.#cancelled.add(timer);
  }

  /** Visits every message still waiting, in no particular order. */
  forEachPending(visit: (message: Message, to: ActorRef<Message>, timeMs: number) => void): void {
    const cancelled = this.#cancelled;
    this.#queue.forEach((message, to, timeMs, seq) => {
      if (!cancelled.has(seq)) visit(message, to, timeMs);
    });
    for (let i = this.#laneHead; i < this.#laneTail; i++) {
      if (!cancelled.has(this.#laneSeq[i])) visit(this.#laneItem[i]!, this.#laneTo[i], this.#now);
    }
  }

  /** Delivery time of the next message, or `Infinity` when none is waiting. */
  nextTimeMs(): number {
    if (this.#backgroundPending !== 0 && this.liveCount === 0) return Infinity;
    return this.#laneHead < this.#laneTail ? this.#now : this.#queue.peekTimeMs();
  }

  /**
   * Delivers messages in order until none is left or the next is later than
   * `untilMs`. Runs synchronously: this is the virtual clock.
   */
  run(options: RunOptions = {}): void {
    const untilMs = options.untilMs ?? Infinity;
    const stopAt = this.#delivered + (options.maxDeliveries ?? Infinity);
    const actors = this.#actors, contexts = this.#contexts, cancelled = this.#cancelled;
    const background = this.#background;
    let handling = false;
    try {
      // With background timers pending, stop once nothing else is (they keep no run alive).
      while (
        this.#delivered < stopAt && (this.#backgroundPending === 0 || this.liveCount > 0) &&
        this.#take(untilMs)
      ) {
        const seq = this.#takenSeq;
        if (this.#backgroundPending !== 0 && background.delete(seq)) this.#backgroundPending--;
        if (cancelled.size !== 0 && cancelled.delete(seq)) continue;
        const to = this.#takenTo, message = this.#takenMessage!;
        this.#now = this.#takenTimeMs;
        this.#delivered++;
        if (this.#onDeliver !== undefined) this.#onDeliver(message, to, this.#now);
        handling = true;
        actors[to].handle(message, contexts[to]);
        handling = false;
      }
    } catch (error) {
      // A tap's error is the caller's own; a handler's fails the run, naming it.
      throw handling ? this.#failure(error) : error;
    }
  }

  /**
   * Like {@linkcode Kernel.run}, but asks `clock` before every delivery
   * ({@linkcode Clock.synchronize}): a wall clock sleeps until the deadline,
   * and may hold the run while work outside the kernel (an actor in a
   * Worker) is still answering. The queue is read again after every wait.
   * `onSync` sees each delivery's status (how late it is). Resolves when
   * the clock answers `Infinity` (nothing due by `untilMs`) with a status.
   */
  async runWithClock(
    clock: Clock,
    options: RunOptions & { readonly onSync?: (status: SyncStatus, timeMs: number) => void } = {},
  ): Promise<void> {
    const untilMs = options.untilMs ?? Infinity;
    for (;;) {
      const next = this.nextTimeMs();
      const due = next <= untilMs ? next : Infinity;
      const answer = clock.synchronize(due);
      // Anything but a status (a promise, native or not) means "wait, then ask again".
      if (typeof (answer as Partial<SyncStatus>).lagMs !== "number") {
        await answer;
        continue;
      }
      if (due === Infinity) return;
      const delivered = this.#delivered;
      this.step();
      // A step that only skipped cancelled timers delivered nothing: no lag to report.
      if (this.#delivered !== delivered) options.onSync?.(answer as SyncStatus, due);
    }
  }

  /**
   * Delivers the next message, if any (skipping cancelled ones stamped the
   * same instant). Returns false when the queue is empty.
   */
  step(): boolean {
    if (this.liveCount === 0) return false;
    this.run({ untilMs: this.nextTimeMs(), maxDeliveries: 1 });
    return true;
  }

  /**
   * Takes the next message due by `untilMs` into `#taken*` (the caller
   * advances the clock to it, unless it was cancelled); false when there is
   * none. Queued entries stamped now (in the event queue's heap or its
   * run) come before the lane (they were sent earlier), the lane before
   * later times.
   */
  #take(untilMs: number): boolean {
    const queue = this.#queue;
    const next = queue.peekTimeMs(); // Infinity when empty
    const head = this.#laneHead;
    if (head < this.#laneTail && next !== this.#now) {
      if (this.#now > untilMs) return false;
      this.#takenSeq = this.#laneSeq[head];
      this.#takenTimeMs = this.#now;
      this.#takenTo = this.#laneTo[head];
      this.#takenMessage = this.#laneItem[head];
      this.#laneItem[head] = undefined;
      if (head + 1 === this.#laneTail) this.#laneHead = this.#laneTail = 0;
      else this.#laneHead = head + 1;
      return true;
    }
    if (queue.size === 0 || next > untilMs) return false;
    this.#takenMessage = queue.pop();
    this.#takenSeq = queue.poppedSeq;
    this.#takenTo = queue.poppedTo;
    this.#takenTimeMs = queue.poppedTimeMs;
    return true;
  }

  /** The error a delivery's handler threw, as the run's failure (naming the actor, message and time). */
  #failure(error: unknown): SimulationError {
    if (error instanceof SimulationError) return error;
    return new SimulationError(
      "actor_threw",
      error instanceof Error ? error.message : String(error),
      {
        actor: this.#contexts[this.#takenTo].name,
        messageType: this.#takenMessage!.type,
        timeMs: this.#now,
        cause: error,
      },
    );
  }
}
