/**
 * @module
 * Faults and autoscaling, as a scenario describes them: which instance
 * misbehaves, how, when and for how long; and the autoscaler's bounds,
 * signal and pace (actors/dynamics/README.md, "Faults" and "Autoscaling").
 */
import type { FaultKind } from "../protocol.ts";

export type { FaultKind } from "../protocol.ts";

/** One fault of one instance. */
export interface Fault {
  /** The instance's index in the fleet. */
  readonly instance: number;
  /**
   * `crash`: its in-flight requests fail, it is down for the window and
   * comes back cold (empty cache). `slow`: its service (FIFO) or step
   * (batching) time is multiplied by `factor`. `drain`: it takes no new
   * requests, running ones finish. `partition`: messages between it and
   * the router are lost (its reports, the router's probes and requests).
   */
  readonly kind: FaultKind;
  /** When it starts, simulated ms. */
  readonly atMs: number;
  /** How long it lasts, ms; `Infinity`: to the end of the run. */
  readonly forMs: number;
  /** `slow` only: the factor on service or step time, > 0. @default 2 */
  readonly factor?: number;
}

/** What the autoscaler reads. */
export type AutoscaleSignal = "queue_depth" | "concurrency" | "kv_utilization" | "slo_attainment";

/** How a scaling policy bounds a change: in instances, or in percent of the count at the start of its period. */
export type ScalingPolicyType = "Pods" | "Percent";

/**
 * Which policy applies when several do (autoscaling/v2 `selectPolicy`):
 * `Max` the one allowing the largest change, `Min` the smallest,
 * `Disabled` none (no scaling in that direction).
 */
export type SelectPolicy = "Max" | "Min" | "Disabled";

/** One autoscaling/v2 `HPAScalingPolicy`, its period in ms. */
export interface ScalingPolicy {
  readonly type: ScalingPolicyType;
  /** Instances (`Pods`) or percent of the count at the start of the period (`Percent`): an integer >= 1. */
  readonly value: number;
  /** The window the change is counted over, ms, in (0, 1 800 000] (autoscaling/v2: 1 to 1800 s). */
  readonly periodMs: number;
}

/** One direction's autoscaling/v2 `HPAScalingRules`; an absent field takes autoscaling/v2's default. */
export interface ScalingRules {
  /**
   * Recommendations of the last this-many ms are considered, in [0, 3 600 000]
   * (autoscaling/v2 `stabilizationWindowSeconds`, in ms): scaling up takes
   * their lowest, scaling down their highest.
   * @default scaleUp 0; scaleDown the config's `cooldownMs`
   */
  readonly stabilizationWindowMs?: number;
  /** @default "Max" */
  readonly selectPolicy?: SelectPolicy;
  /**
   * At least one.
   * @default scaleUp: Pods 4 and Percent 100, each per 15 000 ms; scaleDown: Percent 100 per 15 000 ms
   */
  readonly policies?: readonly ScalingPolicy[];
}

/** autoscaling/v2 `HorizontalPodAutoscalerBehavior`: the rules for each direction (absent: the defaults). */
export interface AutoscaleBehavior {
  readonly scaleUp?: ScalingRules;
  readonly scaleDown?: ScalingRules;
}

/**
 * The autoscaler: Kubernetes' HPA (autoscaling/v2) — every `intervalMs` it
 * reads its signal and sets the instances wanted, between `min` and `max`
 * (actors/dynamics/README.md, "Autoscaling"). The fleet is built with `max` instances;
 * `initial` of them are active at the start, the rest are unprovisioned
 * until the autoscaler starts them.
 */
export interface AutoscaleConfig {
  readonly min: number;
  readonly max: number;
  /** Instances active at the start (the scenario's `instances.count`). */
  readonly initial: number;
  /** From the decision to add an instance to its being ready (cold), ms. */
  readonly provisionMs: number;
  /**
   * `queue_depth`: mean requests waiting per active instance (it reads 0 at
   * any load the fleet keeps up with); `concurrency`: mean requests waiting
   * or running (it follows the load); `kv_utilization`:
   * mean KV use (batching model); `slo_attainment`: share of requests
   * finished since the last decision that met every SLO.
   */
  readonly signal: AutoscaleSignal;
  /** The signal's target: queue depth and KV use scale out above it, attainment below it. */
  readonly target: number;
  /** Between decisions, ms: HPA's sync period (`--horizontal-pod-autoscaler-sync-period`, 15 s by default). */
  readonly intervalMs: number;
  /**
   * The scale-down stabilisation window, ms: scaling in goes only down to the
   * highest recommendation of this long (HPA's
   * `--horizontal-pod-autoscaler-downscale-stabilization`, 5 min by default;
   * with `behavior`, the default of `behavior.scaleDown.stabilizationWindowMs`).
   */
  readonly cooldownMs: number;
  /**
   * autoscaling/v2 `behavior`: per-direction stabilisation windows and rate
   * policies. Absent, HPA's behaviour without one: at most max(2 × current, 4)
   * instances per sync up, no limit down.
   * @default none
   */
  readonly behavior?: AutoscaleBehavior;
}
