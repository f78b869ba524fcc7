/**
 * @module
 * Faults and autoscaling, as a scenario describes them: which instance
 * misbehaves, how, when and for how long; and the autoscaler's bounds,
 * signal and pace (design.md, "Faults" and "Autoscaling").
 */
import type { FaultKind } from "./protocol.ts";

export type { FaultKind } from "./protocol.ts";

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

/**
 * The autoscaler: every `intervalMs` it reads its signal and sets the
 * instances wanted, between `min` and `max` (design.md, "Autoscaling").
 * The fleet is built with `max` instances; `initial` of them are active at
 * the start, the rest are unprovisioned until the autoscaler starts them.
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
  /** Between decisions, ms. */
  readonly intervalMs: number;
  /** No scale-in within this long of the last scaling action, ms. */
  readonly cooldownMs: number;
}
