/**
 * @module
 * An instance that can fail or come and go: it wraps a model's instance and
 * plays the faults and scaling commands of a run that has them, as a real
 * engine would show them to its router (actors/dynamics/README.md, "Faults").
 */
import { FinishCounts, type ModelInstance, type ServingActor } from "../instances/instance_model.ts";
import {
  assertNever,
  type FailReason,
  type FaultCommand,
  type InstanceStats,
  type InstanceStatus,
  type KvArrived,
  type KvPull,
  type LifecycleCommand,
  type MetricsCommand,
  type PdAbandoned,
  type Request,
  type RequestFailed,
  type ScalingCommand,
  type ServeCommand,
} from "../protocol.ts";
import type { BlockKeys } from "../kv_cache/prefix_keys.ts";
import { withRequestEvents } from "../instances/status_reporter.ts";
import type { Actor, ActorContext, ActorRef, Message, TimerId } from "../runtime/kernel.ts";

/** The wrapper's own timers. */
export type FaultyInstanceTimer =
  /** A timer of model instance generation `epoch`; one of an older generation (before a restart) is ignored. */
  | { readonly type: "inner_timer"; readonly epoch: number; readonly message: Message }
  /** Provisioning is over: the instance starts. */
  | { readonly type: "provisioned" };

/** Everything a faulty instance accepts: its model's commands, the lifecycle's, and its own timers. */
export type FaultyInstanceCommand =
  | ServeCommand
  | LifecycleCommand
  | KvPull
  | KvArrived
  | PdAbandoned
  | FaultyInstanceTimer;

/** Where an instance is in its life (the autoscaler's view of it). */
export type InstanceLifecycle = "active" | "provisioning" | "decommissioning" | "off";

/** Options for {@linkcode FaultyInstance}. */
export interface FaultyInstanceOptions {
  /** Active from the start; false: unprovisioned until a `provision`. @default true */
  readonly active?: boolean;
  /** Network delay of its failures and of the reports it sends itself, ms (the model's reporter's). @default 0 */
  readonly delayMs?: number;
}

/** What the wrapper looks at in what a model instance sends (anything else passes as it is). */
type Outgoing =
  | InstanceStatus
  | InstanceStats
  | Extract<MetricsCommand, { type: "completed" | "dropped" }>
  | { readonly type: "other" };

const PROVISIONED: FaultyInstanceTimer = Object.freeze({ type: "provisioned" });

/**
 * The context a model instance acts through: the wrapper's, with its sends
 * passed to the wrapper first (`outgoing`) and its timers tagged with its
 * generation. `real` is the wrapper's context of the delivery in progress.
 */
class InnerContext implements ActorContext<Message> {
  real!: ActorContext<Message>;

  constructor(
    readonly epoch: number,
    readonly outgoing: (
      ctx: ActorContext<Message>,
      to: ActorRef<Message>,
      message: Message,
      delayMs: number,
    ) => void,
  ) {}

  get self(): ActorRef<Message> {
    return this.real.self;
  }
  get name(): string {
    return this.real.name;
  }
  now(): number {
    return this.real.now();
  }
  send<T extends Message>(to: ActorRef<T>, message: T, delayMs = 0): void {
    this.outgoing(this.real, to as ActorRef<Message>, message, delayMs);
  }
  schedule(delayMs: number, message: Message): TimerId {
    return this.real.schedule(delayMs, this.#tag(message));
  }
  scheduleAt(timeMs: number, message: Message): TimerId {
    return this.real.scheduleAt(timeMs, this.#tag(message));
  }
  scheduleBackground(delayMs: number, message: Message): TimerId {
    return this.real.scheduleBackground(delayMs, this.#tag(message));
  }
  cancel(timer: TimerId): void {
    this.real.cancel(timer);
  }
  /** The wrapper's stream: a wrapped instance draws what a bare one would. */
  readonly random = (): number => this.real.random();

  #tag(message: Message): FaultyInstanceTimer {
    return { type: "inner_timer", epoch: this.epoch, message };
  }
}

/**
 * A serving instance that can crash, slow down, drain, be cut off, and be
 * provisioned and decommissioned. Runs without faults or autoscaling never
 * build one.
 *
 * Faults, as the router sees them:
 * - `crash`: every request accepted and not finished fails (`request_failed`,
 *   reason `crash`, in accept order); the instance then answers nothing and
 *   refuses every `serve` (`crash`) until it recovers, cold: a new model
 *   instance, empty cache, announced by a status with `restarted: true`.
 * - `slow`: the model's service (FIFO) or step (batching) time is
 *   multiplied by the fault's factor; `recover` restores it.
 * - `drain`: a status with `draining: true` at once (and on every later
 *   report); new `serve`s are refused (`draining`); those running finish.
 *   `recover` reports without `draining`.
 * - `partition`: no status report crosses (nor a probe's answer); `serve`s
 *   are refused (`unreachable`), and a request that completes in the window
 *   fails instead (`unreachable`: its response is lost). `recover` reports.
 *
 * Lifecycle (the autoscaler): built with `active: false`, the instance is
 * unprovisioned — `serve`s fail (`unreachable`), probes go unanswered —
 * until a `provision`, after whose `readyInMs` it starts cold and reports
 * `restarted: true`. `decommission` drains it for good: once its last
 * request finishes it reports a last time and is unprovisioned again.
 *
 * Overlapping faults: windows of one kind nest (the kind lasts until each
 * has recovered; a `slow` keeps the latest factor), kinds are independent
 * (`recover` ends only its own kind), and a crash dominates: while down,
 * the instance neither sends nor answers anything, and the other kinds'
 * state carries over to the restarted instance (its slowdown, its drain,
 * its partition — a restart hidden by a partition is announced by the
 * first report after it). A `recover` with no open window of its kind is
 * ignored.
 *
 * Every failure counts as finished (so routed − finished stays right for the
 * router), failures leave with the reporter's network delay and before any
 * status of the same handler, and the counts, `waiting`, `running`,
 * `cachedPrefixTokens` and `stopAt` always describe the live model instance
 * (a down or unprovisioned one holds nothing). A failure reaches the router
 * even across a partition (it stands for the router's own connection
 * timeout). Timers a discarded model instance scheduled carry its
 * generation and are ignored when they fire; its running totals
 * (`instance_stats`) are kept and added to its successors'.
 *
 * @example
 * ```ts
 * const instance = new FaultyInstance(0, () => model.create(0, config, metrics, reporting), { delayMs: 0 });
 * kernel.spawn("instance/0", instance);
 * ```
 */
export class FaultyInstance implements ServingActor {
  /** This instance's index among the instances. */
  readonly index: number;
  readonly #create: () => ModelInstance;
  readonly #delayMs: number;
  /** Finished requests across every model instance it ran (they count into it). */
  readonly #counts = new FinishCounts();
  /** Commands the model instance accepted and has not finished, by request id, in accept order. */
  readonly #accepted = new Map<number, ServeCommand>();
  #inner: ModelInstance | undefined;
  #innerCtx: InnerContext | undefined;
  /** The model instance's generation: one more each time one is discarded. */
  #epoch = 0;
  #lifecycle: InstanceLifecycle;
  #provisionTimer: TimerId | undefined;
  /** The router, as the last scaling command named it. */
  #scalingReplyTo: ActorRef<InstanceStatus> | undefined;
  /** Open windows of each fault kind. */
  #crashes = 0;
  #slows = 0;
  #drains = 0;
  #partitions = 0;
  #slowFactor = 1;
  /** A restart not yet announced (a partition hid it). */
  #restartUnreported = false;
  /** The running totals of the model instances discarded so far, added to the live one's. */
  #statsBase: InstanceStats | undefined;
  /** The last totals sent (base included). */
  #lastStats: InstanceStats | undefined;

  /**
   * @param create Builds a cold model instance of this index (each call a new one).
   */
  constructor(index: number, create: () => ModelInstance, options: FaultyInstanceOptions = {}) {
    this.index = index;
    this.#create = create;
    this.#delayMs = options.delayMs ?? 0;
    this.#lifecycle = options.active === false ? "off" : "active";
    if (this.#lifecycle === "active") this.#build();
  }

  /** The live model instance (undefined while down or unprovisioned). */
  get inner(): ModelInstance | undefined {
    return this.#inner;
  }

  /** Where it is in its life. */
  get lifecycle(): InstanceLifecycle {
    return this.#lifecycle;
  }

  /** Whether a crash holds it down. */
  get down(): boolean {
    return this.#crashes > 0;
  }

  /** Requests finished here so far (completed, dropped or failed), across restarts. */
  get finished(): number {
    return this.#counts.total;
  }

  /** Requests waiting at the live model instance (0 while down or unprovisioned). */
  get waiting(): number {
    return this.#inner?.waiting ?? 0;
  }

  /** Requests in service at the live model instance (0 while down or unprovisioned). */
  get running(): number {
    return this.#inner?.running ?? 0;
  }

  /** What the live model instance would find cached (0 while down or unprovisioned: nothing is). */
  cachedPrefixTokens(request: Request, keys?: BlockKeys, nowMs?: number): number {
    return this.#inner?.cachedPrefixTokens(request, keys, nowMs) ?? 0;
  }

  /** The live model instance's deferred work, applied up to `untilMs` (`-Infinity` when none). */
  stopAt(untilMs: number): number {
    return this.#inner?.stopAt(untilMs) ?? -Infinity;
  }

  /** Plays a fault or scaling command, or passes a message on to the live model instance (as the faults allow). */
  handle(message: FaultyInstanceCommand, ctx: ActorContext<FaultyInstanceCommand>): void {
    const c = ctx as ActorContext<Message>;
    switch (message.type) {
      case "serve":
        return this.#serve(message, c);
      case "probe":
        // Down, unprovisioned or cut off: the probe goes unanswered.
        if (this.#inner !== undefined && this.#partitions === 0) this.#deliver(message, c);
        return;
      case "inner_timer":
        if (message.epoch === this.#epoch && this.#inner !== undefined) this.#deliver(message.message, c);
        return;
      case "kv_pull":
      case "kv_arrived":
        if (this.#inner !== undefined) this.#deliver(message, c);
        return;
      case "pd_abandoned":
        // Finished here either way: the router counted it routed here.
        if (this.#inner !== undefined) this.#deliver(message, c);
        else this.#counts.count(message.replica);
        return;
      case "fault":
        return this.#fault(message, c);
      case "recover":
        return this.#recover(message, c);
      case "provision":
      case "decommission":
        return this.#scale(message, c);
      case "provisioned":
        return this.#provisioned(c);
      default:
        assertNever(message);
    }
  }

  /** A request: refused (a failure, counted as finished) or passed to the model instance. */
  #serve(command: ServeCommand, ctx: ActorContext<Message>): void {
    const reason = this.#refusal();
    if (reason !== undefined) {
      this.#counts.count(command.replica);
      this.#fail(command, reason, ctx);
      return;
    }
    this.#accepted.set(command.request.id, command);
    this.#deliver(command, ctx);
  }

  /** Why a new request cannot be taken now, if it cannot. */
  #refusal(): FailReason | undefined {
    if (this.#crashes > 0) return "crash";
    if (this.#inner === undefined || this.#partitions > 0) return "unreachable";
    return this.#refusesNew ? "draining" : undefined;
  }

  /** It takes no new requests, and says so (a drain fault, or scaling in). */
  get #refusesNew(): boolean {
    return this.#drains > 0 || this.#lifecycle === "decommissioning";
  }

  /** Hands `message` to the live model instance; a decommissioned one that is now empty stops. */
  #deliver(message: Message, ctx: ActorContext<Message>): void {
    const innerCtx = this.#innerCtx!;
    innerCtx.real = ctx;
    (this.#inner as unknown as Actor<Message>).handle(message, innerCtx);
    if (this.#lifecycle === "decommissioning" && this.#accepted.size === 0) this.#stop(ctx);
  }

  /** Tells `command.replyTo` its attempt failed here. */
  #fail(command: ServeCommand, reason: FailReason, ctx: ActorContext<Message>): void {
    const failure: RequestFailed = { type: "request_failed", command, instance: this.index, reason };
    ctx.send(command.replyTo as unknown as ActorRef<RequestFailed>, failure, this.#delayMs);
  }

  /**
   * What the model instance sends, on its way out: reports are lost across
   * a partition and say `draining` while it refuses new requests; a
   * completion across a partition becomes a failure; its totals include
   * those of the instances it replaced.
   */
  readonly #outgoing = (
    ctx: ActorContext<Message>,
    to: ActorRef<Message>,
    message: Message,
    delayMs: number,
  ) => {
    const m = message as Outgoing;
    switch (m.type) {
      case "status":
        if (this.#partitions > 0) {
          // The report is lost, but not the request events it carried: the next one that gets through does.
          this.#heldPrefilled.push(...(m.prefilledIds ?? []));
          this.#heldFinished.push(...(m.finishedIds ?? []));
          return;
        }
        {
          const status = withRequestEvents(m, this.#heldPrefilled, this.#heldFinished);
          this.#heldPrefilled = [];
          this.#heldFinished = [];
          message = this.#refusesNew ? { ...status, draining: true } : status;
        }
        break;
      case "completed": {
        const command = this.#accepted.get(m.record.requestId);
        this.#accepted.delete(m.record.requestId);
        if (this.#partitions > 0 && command !== undefined) return this.#fail(command, "unreachable", ctx);
        break;
      }
      case "dropped":
        this.#accepted.delete(m.requestId);
        break;
      case "instance_stats":
        message = this.#lastStats = addStats(this.#statsBase, m);
        break;
    }
    ctx.send(to, message, delayMs);
  };

  /** Request events of reports a partition swallowed, for the next report that gets through. */
  #heldPrefilled: number[] = [];
  #heldFinished: number[] = [];

  /** Builds a cold model instance (a new generation), counting into this wrapper's counts. */
  #build(): ModelInstance {
    const inner = this.#inner = this.#create();
    inner.shareCounts(this.#counts);
    this.#innerCtx = new InnerContext(this.#epoch, this.#outgoing);
    return inner;
  }

  /** Starts a cold model instance (a restart, or provisioning done) and announces it to `replyTo`. */
  #restart(ctx: ActorContext<Message>, replyTo: ActorRef<InstanceStatus>): void {
    const inner = this.#build();
    if (this.#slowFactor !== 1) {
      this.#innerCtx!.real = ctx;
      inner.setSlowdown(this.#slowFactor, this.#innerCtx!);
    }
    this.#restartUnreported = true;
    this.#report(ctx, replyTo);
  }

  /** Discards the live model instance (its totals kept); its pending timers will be ignored. */
  #discard(ctx: ActorContext<Message>): void {
    const inner = this.#inner;
    if (inner === undefined) return;
    this.#innerCtx!.real = ctx;
    inner.retire(this.#innerCtx!);
    if (this.#lastStats !== undefined) this.#statsBase = this.#lastStats;
    this.#inner = undefined;
    this.#innerCtx = undefined;
    this.#epoch++;
  }

  /**
   * Sends `replyTo` the status now — `draining` while it refuses new
   * requests, `restarted` if a restart is unannounced — unless it is down,
   * unprovisioned or cut off.
   */
  #report(ctx: ActorContext<Message>, replyTo: ActorRef<InstanceStatus>): void {
    if (this.#inner === undefined || this.#partitions > 0) return;
    const status = this.#inner.snapshot() as { -readonly [K in keyof InstanceStatus]: InstanceStatus[K] };
    if (this.#refusesNew) status.draining = true;
    if (this.#restartUnreported) {
      status.restarted = true;
      this.#restartUnreported = false;
    }
    ctx.send(replyTo, status as InstanceStatus, this.#delayMs);
  }

  #fault(fault: Extract<FaultCommand, { type: "fault" }>, ctx: ActorContext<Message>): void {
    switch (fault.kind) {
      case "crash":
        if (this.#crashes++ === 0) this.#crash(ctx);
        return;
      case "slow":
        this.#slows++;
        return this.#slow(fault.factor ?? 2, ctx);
      case "drain":
        if (this.#drains++ === 0) this.#report(ctx, fault.replyTo);
        return;
      case "partition":
        this.#partitions++;
        return;
      default:
        assertNever(fault.kind);
    }
  }

  #recover(recover: Extract<FaultCommand, { type: "recover" }>, ctx: ActorContext<Message>): void {
    switch (recover.kind) {
      case "crash":
        if (this.#crashes > 0 && --this.#crashes === 0 && this.#lifecycle === "active") {
          this.#restart(ctx, recover.replyTo);
        }
        return;
      case "slow":
        if (this.#slows > 0 && --this.#slows === 0) this.#slow(1, ctx);
        return;
      case "drain":
        if (this.#drains > 0 && --this.#drains === 0) this.#report(ctx, recover.replyTo);
        return;
      case "partition":
        if (this.#partitions > 0 && --this.#partitions === 0) this.#report(ctx, recover.replyTo);
        return;
      default:
        assertNever(recover.kind);
    }
  }

  /** Every accepted request fails, in accept order; the model instance is gone. */
  #crash(ctx: ActorContext<Message>): void {
    for (const command of this.#accepted.values()) {
      this.#counts.count(command.replica);
      this.#fail(command, "crash", ctx);
    }
    this.#accepted.clear();
    this.#discard(ctx);
    // Scaling in and now empty: it is unprovisioned.
    if (this.#lifecycle === "decommissioning") this.#lifecycle = "off";
  }

  #slow(factor: number, ctx: ActorContext<Message>): void {
    this.#slowFactor = factor;
    if (this.#inner === undefined) return; // the next model instance starts slowed
    this.#innerCtx!.real = ctx;
    this.#inner.setSlowdown(factor, this.#innerCtx!);
  }

  #scale(command: ScalingCommand, ctx: ActorContext<Message>): void {
    this.#scalingReplyTo = command.replyTo;
    if (command.type === "provision") {
      if (this.#lifecycle === "off") {
        this.#lifecycle = "provisioning";
        this.#provisionTimer = ctx.schedule(command.readyInMs, PROVISIONED);
      } else if (this.#lifecycle === "decommissioning") {
        // Scaled out again before it emptied: it simply stays.
        this.#lifecycle = "active";
        this.#report(ctx, command.replyTo);
      }
      return;
    }
    if (this.#lifecycle === "provisioning") {
      ctx.cancel(this.#provisionTimer!);
      this.#lifecycle = "off";
    } else if (this.#lifecycle === "active") {
      this.#lifecycle = "decommissioning";
      if (this.#inner === undefined) this.#lifecycle = "off"; // down: nothing runs
      else if (this.#accepted.size === 0) this.#stop(ctx);
      else this.#report(ctx, command.replyTo);
    }
  }

  #provisioned(ctx: ActorContext<Message>): void {
    this.#provisionTimer = undefined;
    if (this.#lifecycle !== "provisioning") return;
    this.#lifecycle = "active";
    if (this.#crashes === 0) this.#restart(ctx, this.#scalingReplyTo!);
  }

  /** Decommissioned and empty: a last report (draining), then unprovisioned. */
  #stop(ctx: ActorContext<Message>): void {
    this.#report(ctx, this.#scalingReplyTo!);
    this.#discard(ctx);
    this.#lifecycle = "off";
  }
}

/** `s` with the totals of discarded model instances (`base`) added. */
function addStats(base: InstanceStats | undefined, s: InstanceStats): InstanceStats {
  if (base === undefined) return s;
  return {
    ...s,
    kvBlockMs: base.kvBlockMs + s.kvBlockMs,
    preemptions: base.preemptions + s.preemptions,
    steps: base.steps + s.steps,
    busyMs: base.busyMs + s.busyMs,
  };
}
