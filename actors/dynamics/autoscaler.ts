/**
 * @module
 * The autoscaler actor: Kubernetes' horizontal pod autoscaler (autoscaling/v2,
 * with its `behavior` rules) over the simulated fleet (actors/dynamics/README.md, "Autoscaling").
 */
import type { AutoscaleConfig, ScalingPolicy, ScalingRules } from "./faults.ts";
import {
  assertNever,
  type AutoscalerCommand,
  type InstanceStatus,
  type LifecycleCommand,
  type MetricsCommand,
  type Probe,
  type ScalingDecision,
} from "../protocol.ts";
import type { Actor, ActorContext, ActorRef } from "../runtime/kernel.ts";

/** Everything the autoscaler accepts: its commands, and `start` (sent once, at time 0). */
export type AutoscalerMessage = AutoscalerCommand | { readonly type: "start" };

/** No change while the signal is within this share of its target (Kubernetes HPA's default tolerance). */
export const HPA_TOLERANCE = 0.1;

/** HPA's default sync period (`--horizontal-pod-autoscaler-sync-period`): the default `intervalMs`. */
export const HPA_SYNC_PERIOD_MS = 15_000;

/**
 * HPA's default scale-down stabilisation window
 * (`--horizontal-pod-autoscaler-downscale-stabilization`): the default `cooldownMs`.
 */
export const HPA_DOWNSCALE_STABILIZATION_MS = 300_000;

/** The longest stabilisation window autoscaling/v2 accepts (`MaxStabilizationWindowSeconds`, 3600 s). */
export const HPA_MAX_STABILIZATION_WINDOW_MS = 3_600_000;

/** The longest policy period autoscaling/v2 accepts (`MaxPeriodSeconds`, 1800 s). */
export const HPA_MAX_POLICY_PERIOD_MS = 1_800_000;

/** A behavior's rules with every field filled in. */
export type ResolvedScalingRules = Required<ScalingRules>;

/** A behavior with both directions' rules filled in. */
export interface ResolvedBehavior {
  readonly scaleUp: ResolvedScalingRules;
  readonly scaleDown: ResolvedScalingRules;
}

const POLICY_TYPES: readonly string[] = ["Pods", "Percent"];
const SELECT_POLICIES: readonly string[] = ["Max", "Min", "Disabled"];

/** autoscaling/v2's default scale-up policies: 4 instances or 100% per 15 s, whichever is more. */
const SCALE_UP_POLICIES: readonly ScalingPolicy[] = Object.freeze([
  Object.freeze({ type: "Pods", value: 4, periodMs: 15_000 } as const),
  Object.freeze({ type: "Percent", value: 100, periodMs: 15_000 } as const),
]);

/** autoscaling/v2's default scale-down policy: 100% per 15 s. */
const SCALE_DOWN_POLICIES: readonly ScalingPolicy[] = Object.freeze([
  Object.freeze({ type: "Percent", value: 100, periodMs: 15_000 } as const),
]);

/**
 * A config's `behavior` with autoscaling/v2's defaults in every absent field
 * (pkg/apis/autoscaling/v2/defaults.go, `SetDefaults_HorizontalPodAutoscalerBehavior`;
 * the scale-down window defaults to `cooldownMs`, as horizontal.go's
 * `maybeInitScaleDownStabilizationWindow` takes the controller's flag).
 * @returns undefined without a `behavior`.
 *
 * @example
 * ```ts
 * import { assertEquals } from "@std/assert";
 * const behavior = resolveBehavior({ cooldownMs: 300_000, behavior: { scaleUp: { selectPolicy: "Min" } } });
 * assertEquals(behavior?.scaleUp.stabilizationWindowMs, 0);
 * assertEquals(behavior?.scaleDown.stabilizationWindowMs, 300_000);
 * ```
 */
export function resolveBehavior(
  config: Pick<AutoscaleConfig, "behavior" | "cooldownMs">,
): ResolvedBehavior | undefined {
  const b = config.behavior;
  if (b === undefined) return undefined;
  return {
    scaleUp: {
      stabilizationWindowMs: b.scaleUp?.stabilizationWindowMs ?? 0,
      selectPolicy: b.scaleUp?.selectPolicy ?? "Max",
      policies: b.scaleUp?.policies ?? SCALE_UP_POLICIES,
    },
    scaleDown: {
      stabilizationWindowMs: b.scaleDown?.stabilizationWindowMs ?? config.cooldownMs,
      selectPolicy: b.scaleDown?.selectPolicy ?? "Max",
      policies: b.scaleDown?.policies ?? SCALE_DOWN_POLICIES,
    },
  };
}

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

/** A time and a count: a recommendation, or a scaling change. */
type Stamped = [timeMs: number, count: number];

/** What one probe round read: the answers' sum and number, the probed that did not answer, the not ready. */
interface Round {
  readonly sum: number;
  readonly replies: number;
  readonly missing: number;
  readonly unready: number;
}

/**
 * Checks an autoscaler configuration against a fleet of `instanceCount`.
 * @throws {RangeError} naming the field, the value and what was expected.
 */
export function checkAutoscaleConfig(config: AutoscaleConfig, instanceCount: number): void {
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
  for (const direction of ["scaleUp", "scaleDown"] as const) {
    const rules = config.behavior?.[direction];
    if (rules !== undefined) checkScalingRules(rules, `behavior.${direction}`);
  }
}

function fail(field: string, value: unknown, expected: string): never {
  const shown = typeof value === "string" ? JSON.stringify(value) : Array.isArray(value) ? "[]" : value;
  throw new RangeError(`autoscale.${field}: expected ${expected}, got ${shown}`);
}

/** autoscaling/v2's checks on one direction's rules (pkg/apis/autoscaling/validation, `validateScalingRules`). */
function checkScalingRules(rules: ScalingRules, at: string): void {
  const window = rules.stabilizationWindowMs;
  if (window !== undefined && !(window >= 0 && window <= HPA_MAX_STABILIZATION_WINDOW_MS)) {
    fail(`${at}.stabilizationWindowMs`, window, `a number in [0, ${HPA_MAX_STABILIZATION_WINDOW_MS}] (ms)`);
  }
  if (rules.selectPolicy !== undefined && !SELECT_POLICIES.includes(rules.selectPolicy)) {
    fail(`${at}.selectPolicy`, rules.selectPolicy, '"Max", "Min" or "Disabled"');
  }
  const policies = rules.policies;
  if (policies === undefined) return;
  if (policies.length === 0) fail(`${at}.policies`, policies, "at least one policy");
  policies.forEach((p, i) => {
    if (!POLICY_TYPES.includes(p.type)) fail(`${at}.policies[${i}].type`, p.type, '"Pods" or "Percent"');
    if (!Number.isInteger(p.value) || p.value < 1) {
      fail(`${at}.policies[${i}].value`, p.value, "an integer >= 1");
    }
    if (!(p.periodMs > 0 && p.periodMs <= HPA_MAX_POLICY_PERIOD_MS)) {
      fail(`${at}.policies[${i}].periodMs`, p.periodMs, `a number in (0, ${HPA_MAX_POLICY_PERIOD_MS}] (ms)`);
    }
  });
}

/** ⌈x⌉, forgiving a rounding error just above a whole number. */
const ceil = (x: number) => Math.ceil(x - SLACK);

const withinTolerance = (ratio: number) => Math.abs(ratio - 1) <= HPA_TOLERANCE + SLACK;

/**
 * The instances a probe round proposes (replica_calculator.go, `calcPlainMetricReplicas`;
 * see {@linkcode Autoscaler}).
 */
function proposeReplicas(round: Round, target: number, current: number): number {
  const ratio = round.sum / round.replies / target;
  const upWithUnready = round.unready > 0 && ratio > 1;
  if (!upWithUnready && round.missing === 0) {
    return withinTolerance(ratio) ? current : ceil(ratio * round.replies);
  }
  // Missing instances at target scaling down, at 0 otherwise (HPA's `else`: a ratio of exactly 1 too);
  // unready ones at 0, scaling up only.
  let sum = round.sum, counted = round.replies + round.missing;
  if (round.missing > 0 && ratio < 1) sum += round.missing * target;
  if (upWithUnready) counted += round.unready;
  const newRatio = sum / counted / target;
  if (withinTolerance(newRatio) || (ratio < 1 && newRatio > 1) || (ratio > 1 && newRatio < 1)) return current;
  const replicas = ceil(newRatio * counted);
  if ((newRatio < 1 && replicas > current) || (newRatio > 1 && replicas < current)) return current;
  return replicas;
}

/** The instances changed strictly less than `periodMs` before `nowMs` (horizontal.go, `getReplicasChangePerPeriod`). */
function changedWithin(events: readonly Stamped[], periodMs: number, nowMs: number): number {
  let n = 0;
  for (const [t, change] of events) if (t > nowMs - periodMs) n += change;
  return n;
}

/**
 * The most instances the scale-up rules allow now (horizontal.go,
 * `calculateScaleUpLimitWithScalingRules`): per policy, from the count at the
 * start of its period; the largest (`Max`) or smallest (`Min`) of them.
 */
function scaleUpLimit(
  current: number,
  rules: ResolvedScalingRules,
  added: readonly Stamped[],
  removed: readonly Stamped[],
  nowMs: number,
): number {
  if (rules.selectPolicy === "Disabled") return current;
  const pick = rules.selectPolicy === "Min" ? Math.min : Math.max;
  let limit = rules.selectPolicy === "Min" ? Infinity : -Infinity;
  for (const p of rules.policies) {
    const start = current - changedWithin(added, p.periodMs, nowMs) +
      changedWithin(removed, p.periodMs, nowMs);
    // As HPA rounds it, float for float (25 × (1 + 12/100) is 28.000000000000004: 29).
    limit = pick(limit, p.type === "Pods" ? start + p.value : Math.ceil(start * (1 + p.value / 100)));
  }
  return limit;
}

/**
 * The fewest instances the scale-down rules allow now (horizontal.go,
 * `calculateScaleDownLimitWithBehaviors`): per policy, from the count at the
 * start of its period; the largest change (`Max`: the fewest) or the smallest.
 */
function scaleDownLimit(
  current: number,
  rules: ResolvedScalingRules,
  added: readonly Stamped[],
  removed: readonly Stamped[],
  nowMs: number,
): number {
  if (rules.selectPolicy === "Disabled") return current;
  const pick = rules.selectPolicy === "Min" ? Math.max : Math.min;
  let limit = rules.selectPolicy === "Min" ? -Infinity : Infinity;
  for (const p of rules.policies) {
    const start = current - changedWithin(added, p.periodMs, nowMs) +
      changedWithin(removed, p.periodMs, nowMs);
    // Float for float too (10 × (1 − 80/100) is 1.9999999999999996: 1).
    limit = pick(limit, p.type === "Pods" ? start - p.value : Math.trunc(start * (1 - p.value / 100)));
  }
  return limit;
}

/**
 * Scales the fleet between `min` and `max` instances on one signal, as
 * Kubernetes' HPA does. The fleet is built with every instance it may start;
 * the first `initial` are active at the start. Every `intervalMs` (HPA's sync
 * period) it reads its signal the way a real one does — it probes the
 * instances (queue depth, concurrency, KV use) or asks the metrics collector
 * (SLO attainment) — and starts or stops instances.
 *
 * One sync, as `reconcileAutoscaler` (pkg/controller/podautoscaler/horizontal.go):
 *
 * 1. Proposal. `queue_depth` / `concurrency` / `kv_utilization`: the mean of
 *    `waiting` (vLLM's `num_requests_waiting`), of `waiting + running` or of
 *    `kvUtilization` over the instances that answered, as replica_calculator.go's
 *    `calcPlainMetricReplicas`: ratio = mean ÷ target; within
 *    {@linkcode HPA_TOLERANCE} of 1 it proposes the current count, else
 *    ⌈ratio × answered⌉. Instances still provisioning are HPA's unready pods,
 *    those probed that did not answer (crashed, partitioned) its missing pods:
 *    with any missing, or unready on a scale-up, the ratio is recomputed with
 *    the missing at 0 (scale-up) or at target (scale-down) and the unready at
 *    0 (scale-up only); a result within tolerance, or across 1 from the first
 *    ratio, or moving the count against the ratio, proposes the current count;
 *    else ⌈new ratio × instances counted⌉. No answer at all: no decision.
 *    `slo_attainment` (a project invention, not HPA's): below target, the ready
 *    instances times the miss ratio over the one allowed, (1 − value) ÷
 *    (1 − target), at least one more unless some are provisioning; at or above
 *    it, one fewer; nothing finished: no decision.
 * 2. Stabilisation. Every proposal is remembered (the first sync also
 *    remembers the starting count, `recordInitialRecommendation`). Without
 *    `behavior` (`stabilizeRecommendation`): the highest proposal of the last
 *    `cooldownMs`. With it (`stabilizeRecommendationWithBehaviors`): the current
 *    count raised to the lowest proposal of the last `scaleUp` window, lowered
 *    to the highest of the last `scaleDown` window.
 * 3. Limits. Without `behavior` (`convertDesiredReplicasWithRules`): clamped to
 *    [min, min(max, max(2 × current, 4))] (`calculateScaleUpLimit`). With it
 *    (`convertDesiredReplicasWithBehaviorRate`): each policy measures its
 *    period back from now; the count at the period's start is the current one
 *    less the instances added within it plus those removed; `Pods` allows that
 *    ± value, `Percent` ⌈start × (1 + value/100)⌉ up and start × (1 − value/100)
 *    truncated down; `selectPolicy` takes the largest change (`Max`), the smallest
 *    (`Min`) or none (`Disabled`) (`calculateScaleUpLimitWithScalingRules`,
 *    `calculateScaleDownLimitWithBehaviors`); then clamped to [min, max].
 * 4. Action. Up: `provision` to the lowest-index unprovisioned instances,
 *    ready `provisionMs` later (cold). Down: `decommission` in a ReplicaSet's
 *    order (`ActivePodsWithRanks`): instances not ready first (their
 *    provisioning cancelled at once), then the most recently provisioned, which
 *    drain, then stop. There is no
 *    cooldown after an action (autoscaling/v2 has none). A decommissioned
 *    instance is provisioned again only once it has stopped — the autoscaler
 *    probes it every tick and takes it as stopped when it answers with nothing
 *    waiting or running, or does not answer by the next tick. One `scaled`
 *    record goes to the metrics at the start and one after every change.
 *
 * A window or period counts what happened strictly less than its length ago:
 * a recommendation or a change exactly one window old no longer counts (in
 * HPA's wall-clock time the boundary is a matter of nanoseconds; in virtual
 * time it must be decided, and a 15 s period then spans one 15 s sync).
 *
 * Probe rounds. Each tick sends one probe per active, ready instance and
 * decides as soon as every one has answered; probes that are still
 * unanswered at the next tick are given up and the round is decided then on
 * the replies that came, the silent instances counted missing. A reply
 * counts in the round open when it arrives (probes carry no round id), so the
 * instances' network delay is assumed shorter than `intervalMs`.
 *
 * @example
 * ```ts ignore
 * const ref = kernel.spawn("autoscaler", new Autoscaler(config, instanceRefs, routerRef, metricsRef));
 * kernel.send(ref, { type: "start" });
 * ```
 */
export class Autoscaler implements Actor<AutoscalerMessage> {
  readonly #config: AutoscaleConfig;
  readonly #behavior: ResolvedBehavior | undefined;
  /** How long a scaling change can matter to a policy, ms. */
  readonly #longestPeriodMs: number;
  readonly #instances: readonly ActorRef<LifecycleCommand>[];
  readonly #router: ActorRef<InstanceStatus>;
  readonly #metrics: ActorRef<MetricsCommand>;
  readonly #slots: Slot[];
  readonly #readyAtMs: Float64Array;
  /** Instances active or provisioning, in the order they were provisioned (the initial ones by index). */
  readonly #order: number[] = [];
  #probe: Probe | undefined;
  #started = false;
  /** The proposals still inside a stabilisation window (the starting count first), oldest first. */
  readonly #recommendations: Stamped[] = [];
  #initialRecorded = false;
  /** With a behavior: the instances added and removed, per change, still inside a policy's period. */
  readonly #added: Stamped[] = [];
  readonly #removed: Stamped[] = [];
  /** The open probe round: deciding on it, replies awaited, what came so far, the instances not ready. */
  #deciding = false;
  #awaiting = 0;
  #sum = 0;
  #replies = 0;
  #unready = 0;
  readonly #probed: Uint8Array;
  readonly #answered: Uint8Array;

  /**
   * @param config Bounds, signal, pace and behavior (checked: see {@linkcode checkAutoscaleConfig}).
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
    this.#behavior = resolveBehavior(config);
    const b = this.#behavior;
    this.#longestPeriodMs = b === undefined
      ? 0
      : Math.max(...[...b.scaleUp.policies, ...b.scaleDown.policies].map((p) => p.periodMs));
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
      case "slo_window": {
        const value = message.finished === 0 ? null : message.met / message.finished;
        this.#decide(value === null ? null : this.#sloProposal(value, ctx.now()), value, ctx);
        break;
      }
      default:
        assertNever(message);
    }
  }

  /** Closes the last round, then reads the signal afresh. */
  #tick(ctx: ActorContext<AutoscalerMessage>): void {
    if (this.#deciding) this.#closeRound(ctx);
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
    this.#awaiting =
      this.#sum =
      this.#replies =
      this.#unready =
        0;
    for (let i = 0; i < slots.length; i++) {
      if (slots[i] === Slot.Provisioning) this.#unready++;
      if (slots[i] === Slot.Draining || (probeActive && slots[i] === Slot.Active)) {
        this.#probed[i] = slots[i] === Slot.Active ? PROBED_ACTIVE : PROBED_DRAINING;
        if (slots[i] === Slot.Active) this.#awaiting++;
        ctx.send(this.#instances[i], this.#probe!);
      }
    }
    if (!probeActive) ctx.send(this.#metrics, { type: "slo_probe", replyTo: ctx.self });
    else if (this.#awaiting === 0) this.#closeRound(ctx);
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
    if (--this.#awaiting === 0) this.#closeRound(ctx);
  }

  /** Decides on the round's answers; the probes still unanswered are HPA's missing pods. */
  #closeRound(ctx: ActorContext<AutoscalerMessage>): void {
    const round: Round = {
      sum: this.#sum,
      replies: this.#replies,
      missing: this.#awaiting,
      unready: this.#unready,
    };
    if (round.replies === 0) return this.#decide(null, null, ctx);
    const proposal = proposeReplicas(round, this.#config.target, this.#order.length);
    this.#decide(proposal, round.sum / round.replies, ctx);
  }

  /**
   * The SLO signal's proposal (a project invention): below target, the ready
   * instances times the miss ratio over the one allowed (as HPA's usage over
   * target), at least one more unless some are still provisioning (they count
   * as idle, as HPA's unready pods); at or above it, one fewer — which the
   * scale-down stabilisation lets through once a whole window has been so.
   */
  #sloProposal(value: number, now: number): number {
    const current = this.#order.length, target = this.#config.target;
    if (value >= target) return current - 1;
    const provisioning = this.#provisioning(now);
    const ratio = (1 - value) / (1 - target);
    return Math.max(current + (provisioning > 0 ? 0 : 1), ceil((current - provisioning) * ratio));
  }

  /**
   * One sync's decision on a proposal (null: nothing to read — HPA's metrics
   * error, no decision): stabilised, limited, acted on and recorded on a change.
   */
  #decide(proposal: number | null, signal: number | null, ctx: ActorContext<AutoscalerMessage>): void {
    this.#deciding = false;
    const now = ctx.now(), current = this.#order.length;
    if (!this.#initialRecorded) {
      // horizontal.go `recordInitialRecommendation`: the starting count is the first recommendation.
      this.#initialRecorded = true;
      this.#recommendations.push([now, current]);
    }
    if (proposal === null) return;
    const desired = this.#behavior === undefined
      ? this.#normalize(proposal, current, now)
      : this.#normalizeWithBehavior(proposal, current, now, this.#behavior);
    let changed = 0;
    if (desired > current) changed = this.#scaleOut(desired - current, ctx);
    else if (desired < current) changed = -this.#scaleIn(current - desired, ctx);
    if (changed === 0) return;
    if (this.#behavior !== undefined) {
      (changed > 0 ? this.#added : this.#removed).push([now, Math.abs(changed)]);
      for (const events of [this.#added, this.#removed]) {
        while (events.length > 0 && events[0][0] <= now - this.#longestPeriodMs) events.shift();
      }
    }
    this.#record(ctx, signal, changed > 0 ? "up" : "down");
  }

  /**
   * Without a behavior (horizontal.go `normalizeDesiredReplicas`): the highest
   * proposal of the last `cooldownMs` (`stabilizeRecommendation`), clamped to
   * [min, min(max, max(2 × current, 4))] (`convertDesiredReplicasWithRules`,
   * `calculateScaleUpLimit`).
   */
  #normalize(proposal: number, current: number, now: number): number {
    const { min, max, cooldownMs } = this.#config;
    const [, highest] = this.#stabilise(proposal, now, 0, cooldownMs);
    const ceiling = Math.min(max, Math.max(2 * current, 4));
    return highest < min ? min : highest > ceiling ? ceiling : highest;
  }

  /**
   * With a behavior (horizontal.go `normalizeDesiredReplicasWithBehaviors`):
   * the current count raised to the lowest proposal of the scale-up window and
   * lowered to the highest of the scale-down window
   * (`stabilizeRecommendationWithBehaviors`), then held within the policies'
   * limits and [min, max] (`convertDesiredReplicasWithBehaviorRate`).
   */
  #normalizeWithBehavior(proposal: number, current: number, now: number, b: ResolvedBehavior): number {
    const { min, max } = this.#config;
    const [lowest, highest] = this.#stabilise(
      proposal,
      now,
      b.scaleUp.stabilizationWindowMs,
      b.scaleDown.stabilizationWindowMs,
    );
    const stabilised = Math.min(Math.max(current, lowest), highest);
    if (stabilised > current) {
      const limit = Math.max(current, scaleUpLimit(current, b.scaleUp, this.#added, this.#removed, now));
      return Math.min(stabilised, max, limit);
    }
    if (stabilised < current) {
      const limit = Math.min(current, scaleDownLimit(current, b.scaleDown, this.#added, this.#removed, now));
      return Math.max(stabilised, min, limit);
    }
    return current;
  }

  /**
   * The lowest proposal of the last `upWindowMs` and the highest of the last
   * `downWindowMs`, this one included; then remembers this one.
   */
  #stabilise(proposal: number, now: number, upWindowMs: number, downWindowMs: number): [number, number] {
    const recent = this.#recommendations;
    let lowest = proposal, highest = proposal;
    for (const [t, n] of recent) {
      if (t > now - upWindowMs) lowest = Math.min(lowest, n);
      if (t > now - downWindowMs) highest = Math.max(highest, n);
    }
    recent.push([now, proposal]);
    const horizon = now - Math.max(upWindowMs, downWindowMs);
    while (recent.length > 0 && recent[0][0] <= horizon) recent.shift();
    return [lowest, highest];
  }

  /** Instances provisioned and not ready yet. */
  #provisioning(now: number): number {
    let n = 0;
    for (const i of this.#order) if (!this.#ready(i, now)) n++;
    return n;
  }

  #ready(i: number, now: number): boolean {
    return this.#slots[i] === Slot.Active ||
      (this.#slots[i] === Slot.Provisioning && this.#readyAtMs[i] <= now);
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

  /**
   * Decommissions `count` instances in a ReplicaSet's order (pkg/controller
   * `ActivePodsWithRanks`: not ready before ready, then the most recently
   * provisioned first); returns how many. One not ready yet stops at once (its
   * provisioning is cancelled); a ready one drains first.
   */
  #scaleIn(count: number, ctx: ActorContext<AutoscalerMessage>): number {
    const order = this.#order, now = ctx.now();
    let done = 0;
    for (const ready of [false, true]) {
      for (let k = order.length - 1; k >= 0 && done < count; k--) {
        const i = order[k];
        if (this.#ready(i, now) !== ready) continue;
        this.#slots[i] = ready ? Slot.Draining : Slot.Off;
        order.splice(k, 1);
        ctx.send(this.#instances[i], { type: "decommission", replyTo: this.#router });
        done++;
      }
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
