/**
 * @module
 * The autoscaler actor: every `intervalMs` it reads its signal the way a real
 * one does — it probes the instances (queue depth, KV use) or asks the metrics
 * collector (SLO attainment) — and starts or stops instances (design.md, "Autoscaling").
 *
 * Decision rule. `queue_depth` / `concurrency` / `kv_utilization`: the
 * signal is the mean of `waiting` (vLLM's `num_requests_waiting`), of
 * `waiting + running` (plus `num_requests_running`) or of `kvUtilization` over the
 * active instances that answered this round's probes; the instances wanted
 * are Kubernetes HPA's `ceil(current × value / target)`, unchanged while
 * `value / target` is within {@linkcode HPA_TOLERANCE} of 1 (HPA's default
 * tolerance), clamped to [min, max] — scaling out, instances still
 * provisioning count as idle, as HPA counts a not-yet-ready pod.
 * `slo_attainment`: the signal is the share of requests finished since the
 * last probe that met every SLO; below target, the ready instances times
 * the miss ratio over the one allowed ((1 − value) ÷ (1 − target), as HPA's
 * usage over target), at least one more unless some are still provisioning;
 * one fewer once it has been at or above target for a whole cooldown, clamped. `current` counts the instances
 * active or provisioning. No value to read (no reply, nothing finished): hold.
 *
 * Actions. Scale-out is immediate: `provision` to the lowest-index
 * unprovisioned instances, ready `provisionMs` later (cold). Scale-in only
 * when `cooldownMs` has passed since the last action (the start counts as
 * one), and — queue and KV signals — only down to the highest count
 * recommended over the last `cooldownMs` (HPA's scale-down stabilisation
 * window): `decommission` the most recently provisioned ready instances (they
 * drain, then stop). A decommissioned instance is provisioned again only once
 * it has stopped — the autoscaler probes it every tick and takes it as stopped
 * when it answers with nothing waiting or running, or does not answer by the
 * next tick. One `scaled` record goes to the metrics at the start and one
 * after every change.
 *
 * Probe rounds. Each tick sends one probe per active, ready instance and
 * decides as soon as every one has answered; probes that are still
 * unanswered at the next tick (a crashed or partitioned instance) are given
 * up and the round is decided on the replies that came. A reply counts in
 * the round open when it arrives (probes carry no round id), so the
 * instances' network delay is assumed shorter than `intervalMs`.
 */
import type { AutoscaleConfig } from "./faults.ts";
import {
  assertNever,
  type AutoscalerCommand,
  type InstanceStatus,
  type LifecycleCommand,
  type MetricsCommand,
  type Probe,
  type ScalingDecision,
} from "./protocol.ts";
import type { Actor, ActorContext, ActorRef } from "./runtime/kernel.ts";

/** Everything the autoscaler accepts: its commands, and `start` (sent once, at time 0). */
export type AutoscalerMessage = AutoscalerCommand | { readonly type: "start" };

/** No change while the signal is within this share of its target (Kubernetes HPA's default tolerance). */
export const HPA_TOLERANCE = 0.1;

/**
 * Slack on the rule's comparisons against rounding: 3 × 0.3 / 0.1 =
 * 9.000000000000002 wants 9 instances, not 10, and 2.2 / 2 − 1 =
 * 0.10000000000000009 is within the 10% band.
 */
const SLACK = 1e-9;

const TICK = Object.freeze({ type: "scale_tick" } as const);

/**
 * What the autoscaler believes of one instance. `Off`: unprovisioned, may be
 * provisioned. `Provisioning`: ready at its `readyAtMs`. `Active`: ready and
 * serving. `Draining`: decommissioned, not yet stopped. The middle two are
 * the instances it counts as current.
 */
const Slot = { Off: 0, Provisioning: 1, Active: 2, Draining: 3 } as const;
type Slot = typeof Slot[keyof typeof Slot];

/** Why an instance was probed this round: for the signal, or to see whether it stopped draining. */
const PROBED_ACTIVE = 1, PROBED_DRAINING = 2;

/**
 * Checks an autoscaler configuration against a fleet of `instanceCount`.
 * @throws {RangeError} naming the field, the value and what was expected.
 */
export function checkAutoscaleConfig(config: AutoscaleConfig, instanceCount: number): void {
  const fail = (field: string, value: unknown, expected: string): never => {
    throw new RangeError(`autoscale.${field}: expected ${expected}, got ${value}`);
  };
  const { min, max, initial, provisionMs, intervalMs, cooldownMs, target, signal } = config;
  if (!Number.isInteger(min) || min < 0) fail("min", min, "an integer >= 0");
  if (!Number.isInteger(max) || max < Math.max(min, 1)) {
    fail("max", max, `an integer >= max(min, 1) = ${Math.max(min, 1)}`);
  }
  if (max > instanceCount) fail("max", max, `at most the fleet's ${instanceCount} instances`);
  if (!Number.isInteger(initial) || initial < min || initial > max) {
    fail("initial", initial, `an integer in [${min}, ${max}]`);
  }
  if (!(provisionMs >= 0 && provisionMs < Infinity)) fail("provisionMs", provisionMs, "a finite number >= 0");
  if (!(intervalMs > 0 && intervalMs < Infinity)) fail("intervalMs", intervalMs, "a finite number > 0");
  if (!(cooldownMs >= 0 && cooldownMs < Infinity)) fail("cooldownMs", cooldownMs, "a finite number >= 0");
  if (signal === "slo_attainment" ? !(target > 0 && target < 1) : !(target > 0 && target < Infinity)) {
    fail("target", target, signal === "slo_attainment" ? "a share in (0, 1)" : "a finite number > 0");
  }
}

/**
 * Scales the fleet between `min` and `max` instances on one signal (see the
 * module doc for the rule). The fleet is built with every instance it may
 * start; the first `initial` are active at the start.
 *
 * @example
 * ```ts ignore
 * const ref = kernel.spawn("autoscaler", new Autoscaler(config, instanceRefs, routerRef, metricsRef));
 * kernel.send(ref, { type: "start" });
 * ```
 */
export class Autoscaler implements Actor<AutoscalerMessage> {
  readonly #config: AutoscaleConfig;
  readonly #instances: readonly ActorRef<LifecycleCommand>[];
  readonly #router: ActorRef<InstanceStatus>;
  readonly #metrics: ActorRef<MetricsCommand>;
  readonly #slots: Slot[];
  readonly #readyAtMs: Float64Array;
  /** Instances active or provisioning, in the order they were provisioned (the initial ones by index). */
  readonly #order: number[] = [];
  #probe: Probe | undefined;
  #started = false;
  #lastActionMs = 0;
  /** Attainment: when it was last read below target. */
  #lastBelowMs = -Infinity;
  /** Queue and KV signals: the recommendations of the last `cooldownMs`, as [time, instances]. */
  readonly #recent: [number, number][] = [];
  /** The open probe round: deciding on it, replies awaited, and what came so far. */
  #deciding = false;
  #awaiting = 0;
  #sum = 0;
  #replies = 0;
  readonly #probed: Uint8Array;
  readonly #answered: Uint8Array;

  /**
   * @param config Bounds, signal and pace (checked: see {@linkcode checkAutoscaleConfig}).
   * @param instances Every instance it may start or stop, by index.
   * @param router Where a started or stopped instance reports (the `replyTo` of its commands).
   * @param metrics Where its decisions go, and whom it asks for SLO attainment.
   */
  constructor(
    config: AutoscaleConfig,
    instances: readonly ActorRef<LifecycleCommand>[],
    router: ActorRef<InstanceStatus>,
    metrics: ActorRef<MetricsCommand>,
  ) {
    checkAutoscaleConfig(config, instances.length);
    this.#config = config;
    this.#instances = instances;
    this.#router = router;
    this.#metrics = metrics;
    const n = instances.length;
    this.#slots = Array.from({ length: n }, (_, i) => i < config.initial ? Slot.Active : Slot.Off);
    this.#readyAtMs = new Float64Array(n);
    for (let i = 0; i < config.initial; i++) this.#order.push(i);
    this.#probed = new Uint8Array(n);
    this.#answered = new Uint8Array(n);
  }

  /** Instances active or provisioning now. */
  get instances(): number {
    return this.#order.length;
  }

  handle(message: AutoscalerMessage, ctx: ActorContext<AutoscalerMessage>): void {
    switch (message.type) {
      case "start":
        if (this.#started) return;
        this.#started = true;
        this.#probe = Object.freeze({ type: "probe", replyTo: ctx.self });
        this.#lastActionMs = ctx.now();
        this.#record(ctx, null, "hold");
        ctx.scheduleBackground(this.#config.intervalMs, TICK);
        break;
      case "scale_tick":
        ctx.scheduleBackground(this.#config.intervalMs, TICK);
        this.#tick(ctx);
        break;
      case "status":
        this.#reply(message, ctx);
        break;
      case "slo_window":
        this.#decide(message.finished === 0 ? null : message.met / message.finished, ctx);
        break;
      default:
        assertNever(message);
    }
  }

  /** Closes the last round, then reads the signal afresh. */
  #tick(ctx: ActorContext<AutoscalerMessage>): void {
    if (this.#deciding) this.#decide(this.#replies === 0 ? null : this.#sum / this.#replies, ctx);
    const now = ctx.now(), slots = this.#slots;
    for (let i = 0; i < slots.length; i++) {
      // A draining instance that did not answer last round has stopped.
      if (this.#probed[i] === PROBED_DRAINING && this.#answered[i] === 0) slots[i] = Slot.Off;
      if (slots[i] === Slot.Provisioning && this.#readyAtMs[i] <= now) slots[i] = Slot.Active;
    }
    this.#probed.fill(0);
    this.#answered.fill(0);
    const probeActive = this.#config.signal !== "slo_attainment";
    this.#deciding = probeActive;
    this.#awaiting = this.#sum = this.#replies = 0;
    for (let i = 0; i < slots.length; i++) {
      if (slots[i] === Slot.Draining || (probeActive && slots[i] === Slot.Active)) {
        this.#probed[i] = slots[i] === Slot.Active ? PROBED_ACTIVE : PROBED_DRAINING;
        if (slots[i] === Slot.Active) this.#awaiting++;
        ctx.send(this.#instances[i], this.#probe!);
      }
    }
    if (!probeActive) ctx.send(this.#metrics, { type: "slo_probe", replyTo: ctx.self });
    else if (this.#awaiting === 0) this.#decide(null, ctx);
  }

  /** A probe's answer: a draining instance's progress, or one value of the round's signal. */
  #reply(status: InstanceStatus, ctx: ActorContext<AutoscalerMessage>): void {
    const i = status.instance;
    if (this.#probed[i] === 0 || this.#answered[i] === 1) return; // late, or not asked
    this.#answered[i] = 1;
    if (this.#probed[i] === PROBED_DRAINING) {
      if (this.#slots[i] === Slot.Draining && status.waiting === 0 && status.running === 0) {
        this.#slots[i] = Slot.Off;
      }
      return;
    }
    if (!this.#deciding || this.#slots[i] !== Slot.Active) return;
    const signal = this.#config.signal;
    this.#sum += signal === "queue_depth"
      ? status.waiting
      : signal === "concurrency"
      ? status.waiting + status.running
      : status.kvUtilization;
    this.#replies++;
    if (--this.#awaiting === 0) this.#decide(this.#sum / this.#replies, ctx);
  }

  /** Applies the decision rule to one reading of the signal (null: none), acting and recording on a change. */
  #decide(signal: number | null, ctx: ActorContext<AutoscalerMessage>): void {
    this.#deciding = false;
    const now = ctx.now(), current = this.#order.length;
    const wanted = signal === null ? current : this.#stabilised(
      this.#wanted(signal, current, now, this.#provisioning(now)),
      now,
    );
    let changed = 0;
    if (wanted > current) changed = this.#scaleOut(wanted - current, ctx);
    else if (wanted < current && now - this.#lastActionMs >= this.#config.cooldownMs) {
      changed = -this.#scaleIn(current - wanted, ctx);
    }
    if (changed === 0) return;
    this.#lastActionMs = now;
    this.#record(ctx, signal, changed > 0 ? "up" : "down");
  }

  /**
   * Kubernetes HPA's scale-down stabilisation (queue and KV signals): the
   * count wanted is the highest recommendation of the last `cooldownMs`, so
   * one quiet reading in a busy stretch does not shed the fleet. Scale-out
   * is never held back.
   */
  #stabilised(wanted: number, now: number): number {
    if (this.#config.signal === "slo_attainment") return wanted;
    const recent = this.#recent, window = this.#config.cooldownMs;
    recent.push([now, wanted]);
    while (recent.length > 0 && recent[0][0] < now - window) recent.shift();
    let most = wanted;
    for (const [, n] of recent) most = Math.max(most, n);
    return most;
  }

  /** Instances provisioned and not ready yet. */
  #provisioning(now: number): number {
    let n = 0;
    for (const i of this.#order) if (this.#slots[i] === Slot.Provisioning && this.#readyAtMs[i] > now) n++;
    return n;
  }

  /**
   * The instances the rule wants for a reading (clamped to [min, max]),
   * before the cooldown. Scaling out, instances still provisioning count as
   * idle (HPA takes a not-yet-ready pod as using nothing), so the
   * instances already coming are not asked for again: without it the rule
   * would multiply the fleet every tick until the first new one is ready.
   * Attainment holds while any is still provisioning, for the same reason.
   */
  #wanted(signal: number, current: number, now: number, provisioning: number): number {
    const { min, max, target } = this.#config;
    let wanted: number;
    if (this.#config.signal === "slo_attainment") {
      if (signal < target) {
        // The miss ratio over the one allowed, as HPA's usage over target; instances still coming count as idle.
        this.#lastBelowMs = now;
        const ratio = (1 - signal) / (1 - target);
        wanted = Math.max(
          current + (provisioning > 0 ? 0 : 1),
          Math.ceil((current - provisioning) * ratio - SLACK),
        );
      } else wanted = now - this.#lastBelowMs >= this.#config.cooldownMs ? current - 1 : current;
    } else {
      const ratio = signal / target;
      const ready = current - provisioning;
      wanted = Math.abs(ratio - 1) <= HPA_TOLERANCE + SLACK
        ? current
        : ratio > 1
        ? Math.max(current, Math.ceil(current * (ratio * ready / current) - SLACK))
        : Math.ceil(current * ratio - SLACK);
    }
    return Math.min(max, Math.max(min, wanted));
  }

  /** Provisions up to `count` unprovisioned instances, lowest index first; returns how many. */
  #scaleOut(count: number, ctx: ActorContext<AutoscalerMessage>): number {
    const slots = this.#slots, readyInMs = this.#config.provisionMs;
    let done = 0;
    for (let i = 0; i < slots.length && done < count; i++) {
      if (slots[i] !== Slot.Off) continue;
      slots[i] = Slot.Provisioning;
      this.#readyAtMs[i] = ctx.now() + readyInMs;
      this.#order.push(i);
      ctx.send(this.#instances[i], { type: "provision", readyInMs, replyTo: this.#router });
      done++;
    }
    return done;
  }

  /** Decommissions up to `count` ready instances, the most recently provisioned first; returns how many. */
  #scaleIn(count: number, ctx: ActorContext<AutoscalerMessage>): number {
    const order = this.#order;
    let done = 0;
    for (let k = order.length - 1; k >= 0 && done < count; k--) {
      const i = order[k];
      const ready = this.#slots[i] === Slot.Active ||
        (this.#slots[i] === Slot.Provisioning && this.#readyAtMs[i] <= ctx.now());
      if (!ready) continue;
      this.#slots[i] = Slot.Draining;
      order.splice(k, 1);
      ctx.send(this.#instances[i], { type: "decommission", replyTo: this.#router });
      done++;
    }
    return done;
  }

  #record(
    ctx: ActorContext<AutoscalerMessage>,
    signal: number | null,
    action: ScalingDecision["action"],
  ): void {
    const decision: ScalingDecision = { timeMs: ctx.now(), instances: this.#order.length, signal, action };
    ctx.send(this.#metrics, { type: "scaled", decision });
  }
}
