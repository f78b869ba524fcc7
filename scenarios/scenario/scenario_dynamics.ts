/**
 * @module
 * The scenario's parts for a fleet that changes (issue 14): router replicas
 * and health checks (`router.*`), instance `faults`, the `autoscale` block,
 * and bursty or time-varying `workload.arrivals` — their zod schemas and the
 * checks that span sections (an instance index within the fleet, a signal
 * the model can give). scenarios/scenario/scenario.ts assembles them.
 */
import { z } from "zod";
import type { SimulationConfig } from "../../actors/simulation.ts";
import { isDisaggregated } from "../../actors/instances/instance_model.ts";
import { instanceModel, MODELS } from "../../actors/instances/instance_models.ts";
import type { AutoscaleConfig } from "../../actors/dynamics/faults.ts";
import {
  HPA_DOWNSCALE_STABILIZATION_MS,
  HPA_MAX_POLICY_PERIOD_MS,
  HPA_MAX_STABILIZATION_WINDOW_MS,
  HPA_SYNC_PERIOD_MS,
} from "../../actors/dynamics/autoscaler.ts";
import { count, positiveOrInfinite } from "./schema_numbers.ts";

/** The router fields for replicas, health checks and retries (merged into `router`). */
export const routerDynamics = {
  replicas: count(1).max(64).optional(),
  replicaSpread: z.enum(["random", "session"]).optional(),
  replicaSyncMs: z.number().min(0).optional(),
  replicaDelaysMs: z.array(z.number().min(0)).min(1).max(64).optional(),
  statusTtlMs: positiveOrInfinite.optional(),
  retryBudget: count(0).max(10).optional(),
};

/** `faults`: up to 10,000 faults; `forMs` absent lasts to the end of the run. */
export const faults = z.array(z.strictObject({
  instance: count(0),
  kind: z.enum(["crash", "slow", "drain", "partition"]),
  atMs: z.number().min(0),
  forMs: positiveOrInfinite.default(Infinity),
  factor: z.number().gt(0).max(1000).optional(),
})).max(10_000);

/**
 * One direction of `autoscale.behavior`: autoscaling/v2's `HPAScalingRules`
 * with its bounds (pkg/apis/autoscaling/validation), times in ms. Absent
 * fields take autoscaling/v2's defaults when the autoscaler resolves them
 * (actors/dynamics/autoscaler.ts, `resolveBehavior`).
 */
const scalingRules = z.strictObject({
  stabilizationWindowMs: z.number().min(0).max(HPA_MAX_STABILIZATION_WINDOW_MS).optional(),
  selectPolicy: z.enum(["Max", "Min", "Disabled"]).optional(),
  policies: z.array(z.strictObject({
    type: z.enum(["Pods", "Percent"]),
    value: count(1).max(1_000_000),
    periodMs: z.number().gt(0).max(HPA_MAX_POLICY_PERIOD_MS),
  })).min(1).max(100).optional(),
});

/**
 * `autoscale`: its `initial` is the scenario's `instances.count` (set when the
 * scenario is resolved). The defaults are Kubernetes HPA's: a 15 s sync period
 * (`intervalMs`), a 5 min scale-down stabilisation window (`cooldownMs`), no
 * `behavior` (at most max(2 × current, 4) instances per sync up).
 */
export const autoscale = z.strictObject({
  min: count(1),
  max: count(1).max(10_000),
  provisionMs: z.number().min(0).default(60_000),
  signal: z.enum(["queue_depth", "concurrency", "kv_utilization", "slo_attainment"]).default("concurrency"),
  target: z.number().gt(0),
  intervalMs: z.number().gt(0).default(HPA_SYNC_PERIOD_MS),
  cooldownMs: z.number().min(0).default(HPA_DOWNSCALE_STABILIZATION_MS),
  behavior: z.strictObject({ scaleUp: scalingRules.optional(), scaleDown: scalingRules.optional() })
    .optional(),
});

/** `workload.arrivals`: the arrival process and an optional rate profile. */
export const arrivals = z.strictObject({
  process: z.enum(["poisson", "gamma", "mmpp"]).default("poisson"),
  burstiness: z.number().gt(0).default(1),
  burstMs: z.number().gt(0).default(10_000),
  profile: z.strictObject({
    points: z.array(z.strictObject({ atMs: z.number().min(0), factor: z.number().min(0) })).min(1).max(
      10_000,
    ),
    periodMs: z.number().gt(0).optional(),
  }).optional(),
});

/** A config before its autoscaler is resolved (`instances.count` is still the starting count). */
type Unresolved = Omit<SimulationConfig, "autoscale"> & { autoscale?: Omit<AutoscaleConfig, "initial"> };

type Issue = { path: (string | number)[]; message: string };

/**
 * The checks that span sections: replica settings that need replicas,
 * a TTL the probes can meet, faults on instances that exist (and a fleet
 * that is not split), an autoscaler's bounds around the starting count and a
 * signal the run can give, and a sound rate profile.
 */
export function dynamicsIssues(s: Unresolved): Issue[] {
  return [...replicaIssues(s), ...faultIssues(s), ...autoscaleIssues(s), ...arrivalIssues(s)];
}

function replicaIssues(s: Unresolved): Issue[] {
  const r = s.router, issues: Issue[] = [];
  const replicas = r.replicas ?? 1;
  // Replica settings with one replica change nothing (one replica is in sync with itself): a sweep may cross them.
  if (r.replicaDelaysMs !== undefined && r.replicaDelaysMs.length !== replicas) {
    issues.push({
      path: ["router", "replicaDelaysMs"],
      message: `expected one delay per replica (${replicas} numbers >= 0)`,
    });
  }
  const ttl = r.statusTtlMs;
  const answerMs = r.networkDelayMs + Math.max(0, ...(r.replicaDelaysMs ?? []));
  if (ttl !== undefined && Number.isFinite(ttl) && !(ttl > 2 * answerMs)) {
    issues.push({
      path: ["router", "statusTtlMs"],
      message: `expected a number > ${2 * answerMs} (the router probes every TTL/2, and each answer must ` +
        `reach every replica before the next probe: router.networkDelayMs + the largest router.replicaDelaysMs, twice)`,
    });
  }
  return issues;
}

function faultIssues(s: Unresolved): Issue[] {
  const list = s.faults ?? [], issues: Issue[] = [];
  if (list.length > 0 && isDisaggregated(s.instances)) {
    issues.push({
      path: ["faults"],
      message:
        'not modelled for a disaggregated fleet yet (a crash would strand KV transfers; actors/dynamics/README.md, "Faults")',
    });
  }
  const fleet = s.autoscale?.max ?? s.instances.count;
  list.forEach((fault, i) => {
    if (fault.instance >= fleet) {
      issues.push({
        path: ["faults", i, "instance"],
        message: `expected an instance index below ${fleet} (the fleet's size${
          s.autoscale ? ", autoscale.max" : ""
        })`,
      });
    }
    if (fault.factor !== undefined && fault.kind !== "slow") {
      issues.push({ path: ["faults", i, "factor"], message: 'used only by a fault of kind "slow"' });
    }
  });
  return issues;
}

function autoscaleIssues(s: Unresolved): Issue[] {
  const a = s.autoscale;
  if (a === undefined) return [];
  const issues: Issue[] = [];
  const initial = s.instances.count;
  if (a.min > a.max) {
    issues.push({
      path: ["autoscale", "min"],
      message: `expected at most autoscale.max (${a.max})`,
    });
  } else if (initial < a.min || initial > a.max) {
    issues.push({
      path: ["instances", "count"],
      message: `expected a starting count within autoscale's [${a.min}, ${a.max}]`,
    });
  }
  if (s.instances.pools !== undefined) {
    issues.push({
      path: ["autoscale"],
      message: 'not modelled for a fleet of pools yet (actors/dynamics/README.md, "Autoscaling")',
    });
  }
  if (!(a.intervalMs > s.router.networkDelayMs)) {
    issues.push({
      path: ["autoscale", "intervalMs"],
      message:
        `expected a number > router.networkDelayMs (${s.router.networkDelayMs}): the instances' answers ` +
        `to one round of probes must arrive before the next`,
    });
  }
  if (a.signal === "kv_utilization" && !instanceModel(s.instances.model).decodes) {
    issues.push({
      path: ["autoscale", "signal"],
      message: `expected "queue_depth", "concurrency" or "slo_attainment": only ${
        MODELS.filter((m) => m.decodes).map((m) => `the ${m.name} model`).join(" and ")
      } report KV utilisation`,
    });
  }
  if (a.signal === "slo_attainment") {
    if (
      s.slo === undefined &&
      !(s.workload.classes ?? []).some((c) => c.sloTtftMs !== undefined || c.sloTpotMs !== undefined)
    ) {
      issues.push({
        path: ["autoscale", "signal"],
        message: "needs an SLO (slo, or a class's) to measure attainment",
      });
    }
    if (a.target >= 1) {
      issues.push({
        path: ["autoscale", "target"],
        message: `expected a share in (0, 1) (the share of requests allowed to miss must be > 0)`,
      });
    }
  }
  return issues;
}

function arrivalIssues(s: Unresolved): Issue[] {
  const a = s.workload.arrivals;
  if (a === undefined) return [];
  const issues: Issue[] = [];
  if (s.workload.trace !== undefined) {
    issues.push({ path: ["workload", "arrivals"], message: "not used when workload.trace replays a trace" });
  }
  if (a.process === "mmpp" && a.burstiness < 1) {
    issues.push({
      path: ["workload", "arrivals", "burstiness"],
      message: `expected a number >= 1 for "mmpp" (the high state's rate over the low state's)`,
    });
  }
  const points = a.profile?.points ?? [];
  if (points.length > 0 && points[0].atMs !== 0) {
    issues.push({
      path: ["workload", "arrivals", "profile", "points", 0, "atMs"],
      message: `expected 0 (the profile starts at time 0)`,
    });
  }
  for (let i = 1; i < points.length; i++) {
    if (!(points[i].atMs > points[i - 1].atMs)) {
      issues.push({
        path: ["workload", "arrivals", "profile", "points", i, "atMs"],
        message: `expected a time after the previous point's (${points[i - 1].atMs})`,
      });
      break;
    }
  }
  if (points.length > 0 && points.every((p) => p.factor === 0)) {
    issues.push({
      path: ["workload", "arrivals", "profile", "points"],
      message: "expected some factor > 0 (a profile of zeros never lets a request arrive)",
    });
  }
  const period = a.profile?.periodMs;
  if (period !== undefined && points.length > 0 && !(period > points[points.length - 1].atMs)) {
    issues.push({
      path: ["workload", "arrivals", "profile", "periodMs"],
      message: `expected a number > the last point's atMs (${points[points.length - 1].atMs})`,
    });
  }
  if (period === undefined && points.length > 0 && points[points.length - 1].factor === 0) {
    issues.push({
      path: ["workload", "arrivals", "profile", "points", points.length - 1, "factor"],
      message:
        "expected a number > 0 for the last point of a profile without periodMs (it holds forever after)",
    });
  }
  return issues;
}

/** The scenario with its autoscaler resolved: the fleet is built at `max`, `initial` of them active. */
export function resolveAutoscale<
  S extends { instances: { count: number }; autoscale?: z.output<typeof autoscale> },
>(
  s: S,
): Omit<S, "autoscale"> & { autoscale?: AutoscaleConfig } {
  const a = s.autoscale;
  if (a === undefined) return s as Omit<S, "autoscale">;
  return {
    ...s,
    instances: { ...s.instances, count: a.max },
    autoscale: { ...a, initial: s.instances.count },
  };
}
