/**
 * @module
 * The human-readable report of one run, shared by `deno task run` and
 * `deno task realtime`.
 */
import { meanOf } from "../../actors/distributions.ts";
import { instanceModel } from "../../actors/instance_models.ts";
import { policyLabel } from "../../actors/policies/mod.ts";
import type { RunResult, SimulationConfig } from "../../actors/simulation.ts";

/** One run's report: the result plus its wall time and resolved scenario. */
export interface RunReport extends RunResult {
  /** Wall-clock time of the simulation, ms (not deterministic). */
  readonly wallMs: number;
  /** The scenario as run, every default filled in. */
  readonly scenario: SimulationConfig;
}

/**
 * The run's policy in its report: its label (`hybrid(thr=1)`,
 * `sglang_cache_aware(balanceAbs=32)`, `round_robin`), or `plugin NAME`.
 */
export function runPolicyLabel(report: RunResult & { readonly scenario: SimulationConfig }): string {
  const { policy } = report.scenario;
  return report.policy !== policy.name ? `plugin ${report.policy}` : policyLabel(policy);
}

/** `value` to `digits` decimals, or `n/a` when the metric is undefined for this run (null). */
export function formatMetric(value: number | null, digits: number, unit = ""): string {
  return value === null ? "n/a" : `${value.toFixed(digits)}${unit}`;
}

/** The human-readable table of one run; a metric the run cannot define (null) reads `n/a`. */
export function formatReport(report: RunReport): string {
  const c = report.scenario, w = c.workload, p = w.prefix;
  const ms = (v: number | null) => formatMetric(v, 1);
  const f3 = (v: number | null) => formatMetric(v, 3);
  const percent = (v: number | null) => formatMetric(v === null ? null : v * 100, 1, "%");
  const suffix = w.suffixTokens.dist === "constant"
    ? `${w.suffixTokens.value}`
    : `${w.suffixTokens.dist}(mean ${meanOf(w.suffixTokens)})`;
  const instances = instanceModel(c.instances.model);
  const model = instances.describe(c.instances);
  const workload = w.trace?.generate !== undefined
    ? `generated trace (${w.trace.generate.requests} requests at ${
      Number(w.trace.generate.ratePerSec.toPrecision(4))
    } req/s, seed ${w.trace.generate.seed}; mooncake, speed ${w.trace.speed}×)`
    : w.trace
    ? `trace ${w.trace.path} (${w.trace.format}, speed ${w.trace.speed}×)`
    : `${w.requests} requests at ${w.ratePerSec} req/s, zipf ${p.zipf}, shared ${p.sharedFrac} over ${p.groups} groups, ` +
      `prefix ${p.tokens} + suffix ${suffix} tokens`;
  const lines = [
    `policy ${runPolicyLabel(report)} · ${c.instances.count} instances · seed ${c.seed}`,
    `model: ${model}`,
    `workload: ${workload}`,
    "",
    `  requests      ${report.requests}  completed ${report.completed}  dropped ${report.dropped} (${
      percent(report.droppedFraction)
    })  in flight ${report.inFlight}` +
    (report.skippedInvalid > 0 ? `  (skipped ${report.skippedInvalid} malformed trace lines)` : ""),
    `  TTFT ms       mean ${ms(report.ttftMeanMs)}  p50 ${ms(report.ttftP50Ms)}  p90 ${
      ms(report.ttftP90Ms)
    }  p99 ${ms(report.ttftP99Ms)}`,
    `  queue wait    mean ${formatMetric(report.queueWaitMeanMs, 1, " ms")}`,
  ];
  if (instances.decodes) {
    lines.push(
      `  TPOT          mean ${formatMetric(report.tpotMeanMs, 2, " ms")} · end-to-end mean ${
        formatMetric(report.e2eMeanMs, 1, " ms")
      }`,
      `  tokens/s      ${report.outputTokensPerSec.toFixed(0)} output · ${
        report.tokensPerSec.toFixed(0)
      } total`,
      `  KV cache      mean utilisation ${
        percent(report.kvUtilizationMean)
      } · preemptions ${report.preemptions}`,
    );
  }
  lines.push(
    `  hit rate      ${f3(report.hitRate)} of requests, ${f3(report.tokenHitRate)} of prompt tokens`,
    `  routing       available ${f3(report.availableTokenHitRate)} · expected ${
      f3(report.expectedTokenHitRate)
    } of prompt tokens · regret ${f3(report.routingRegret)} · view false positives ${
      f3(report.viewFalsePositiveRate)
    }`,
    `  imbalance     ${f3(report.imbalance)} (max-min)/mean · cv ${f3(report.imbalanceCv)} · busy-time cv ${
      f3(report.busyImbalanceCv)
    }`,
    `  throughput    ${report.throughputRps.toFixed(2)} req/s over ${
      (report.simulatedMs / 1000).toFixed(1)
    } s simulated · goodput ${report.goodputRps.toFixed(2)} req/s (no SLO set)`,
    `  kernel        ${report.messages} messages in ${report.wallMs.toFixed(0)} ms wall (${
      (report.requests / report.wallMs * 1000).toFixed(0)
    } requests/s)`,
  );
  return lines.join("\n");
}
