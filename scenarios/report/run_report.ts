/**
 * @module
 * The human-readable report of one run, shared by `deno task run` and
 * `deno task realtime`.
 */
import { meanOf } from "../../actors/workload/distributions.ts";
import { instanceModel } from "../../actors/instances/instance_models.ts";
import { policyDescriptor, policyLabel } from "../../actors/policies/mod.ts";
import type { RunResult, SimulationConfig } from "../../actors/simulation.ts";
import { hasDynamics, hasLifecycle } from "../../actors/topology.ts";
import { plural } from "../cli/plural.ts";

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

/** Whether `config` sets any SLO, in `slo` or a class. */
function sloSet(config: SimulationConfig): boolean {
  const set = (ttftMs?: number, tpotMs?: number) => ttftMs !== undefined || tpotMs !== undefined;
  return set(config.slo?.ttftMs, config.slo?.tpotMs) ||
    (config.workload.classes ?? []).some((c) => set(c.sloTtftMs, c.sloTpotMs));
}

/** `TTFT ≤ 500 ms, TPOT ≤ 50 ms` (the fields set; `inf` for Infinity), or undefined when neither is. */
function describeSlo(ttftMs: number | undefined, tpotMs: number | undefined): string | undefined {
  const bound = (name: string, ms: number | undefined) =>
    ms === undefined ? [] : [`${name} ≤ ${ms === Infinity ? "inf" : ms} ms`];
  const parts = [...bound("TTFT", ttftMs), ...bound("TPOT", tpotMs)];
  return parts.length === 0 ? undefined : parts.join(", ");
}

/**
 * The report's SLO lines: the SLOs and the attainment when any is set, and
 * one entry per request class (`name: X%`, with the SLOs it overrides).
 */
function sloLines(report: RunReport, percent: (v: number | null) => string): string[] {
  const c = report.scenario, lines: string[] = [];
  if (sloSet(c)) {
    const slo = describeSlo(c.slo?.ttftMs, c.slo?.tpotMs);
    lines.push(`  SLO           ${slo ?? "set per class"} · SLO attainment ${percent(report.sloAttainment)}`);
  }
  const attainment = report.classAttainment, classes = c.workload.classes;
  if (attainment !== null && classes !== undefined) {
    const entries = classes.map((k) => {
      const own = describeSlo(k.sloTtftMs, k.sloTpotMs);
      return `${k.name}: ${percent(attainment[k.name] ?? null)}${own === undefined ? "" : ` (${own})`}`;
    });
    lines.push(`  classes       ${entries.join(" · ")}`);
  }
  return lines;
}

/** The `model:` lines: the model and its settings, one line per pool when the fleet has pools. */
function describeFleet(c: SimulationConfig): string[] {
  const model = instanceModel(c.instances.model), pools = c.instances.pools;
  if (pools === undefined) return [`model: ${model.describe(c.instances)}`];
  return pools.map((p) =>
    `${p.name === p.role ? p.role : `${p.role === "both" ? "pool" : p.role} ${p.name}`} ×${p.count}: ${
      model.describe({ ...c.instances, engine: p.engine })
    }${
      (p.engine.hostKvBlocks ?? 0) > 0
        ? ` + host tier ${p.engine.hostKvBlocks} blocks at ${p.engine.hostKvGbps} Gb/s`
        : ""
    }`
  );
}

/**
 * The `router view:` line: which cache view the run's router kept and how
 * stale its reports were — by default what the policy's real system keeps
 * (design.md, "What each router sees").
 */
export function describeRouterView(c: SimulationConfig): string {
  const r = c.router, blocks = instanceModel(c.instances.model).cacheUnit === "blocks";
  const status = r.statusIntervalMs > 0 ? `status every ${r.statusIntervalMs} ms` : "status on every change";
  const ttl = r.statusTtlMs;
  const delay = (r.networkDelayMs > 0 ? ` + ${r.networkDelayMs} ms network delay` : "") +
    (ttl !== undefined && Number.isFinite(ttl) ? ` · probes every ${ttl / 2} ms (status TTL ${ttl} ms)` : "");
  const reads = policyDescriptor(c.policy.name)?.reads;
  const pools = c.prefillPolicy !== undefined || c.decodePolicy !== undefined;
  if (reads !== undefined && !reads.blocks && !pools) {
    return `no cache view (the policy reads none) · ${status}${delay}`;
  }
  const cache = r.cacheView === "exact"
    ? "exact (the engines' own cache events)"
    : `approximate (a router-side index updated at routing, ${describeIndex(r, blocks)})`;
  return `${cache} · ${status}${delay}`;
}

/** The approximate index's size and matching rules, in words. */
function describeIndex(r: SimulationConfig["router"], blocks: boolean): string {
  const size = r.approxCapacity === null
    ? "never evicted"
    : r.approxCapacity === undefined
    ? "as large as each engine's cache, LRU"
    : `${r.approxCapacity} ${blocks ? "blocks" : "groups"} per instance, LRU`;
  const rules = [size];
  if (blocks && (r.indexChunkBlocks ?? 1) > 1) {
    rules.push(`matched in chunks of ${r.indexChunkBlocks} blocks`);
  }
  if (blocks && r.indexMaxBlocks != null) rules.push(`first ${r.indexMaxBlocks} blocks of a prompt`);
  return rules.join(", ");
}

/** ` · prefill P · decode D` when a disaggregated fleet's pools have policies of their own. */
function poolPolicies(c: SimulationConfig): string {
  return (c.prefillPolicy ? ` · prefill ${policyLabel(c.prefillPolicy)}` : "") +
    (c.decodePolicy ? ` · decode ${policyLabel(c.decodePolicy)}` : "");
}

/** Whether any instance has a host-memory KV tier. */
function hostTier(c: SimulationConfig): boolean {
  const engines = c.instances.pools?.map((p) => p.engine) ?? [c.instances.engine];
  return instanceModel(c.instances.model).cacheUnit === "blocks" &&
    engines.some((e) => (e.hostKvBlocks ?? 0) > 0);
}

/** The lines of a run with faults, an autoscaler or router replicas: what failed, how long recovery took, what scaling cost. */
function dynamicsLines(report: RunReport): string[] {
  const c = report.scenario;
  if (!hasDynamics(c)) return [];
  const lines: string[] = [];
  if ((c.router.replicas ?? 1) > 1) {
    const sync = c.router.replicaSyncMs;
    lines.push(
      `  replicas      ${c.router.replicas} (${c.router.replicaSpread ?? "random"} spread, ${
        sync === undefined ? "independent views" : sync === 0 ? "one shared view" : `sync every ${sync} ms`
      })`,
    );
  }
  if (hasLifecycle(c)) {
    const reasons = Object.entries(report.failedByReason).filter(([, n]) => n > 0).map(([r, n]) =>
      `${r} ${n}`
    );
    lines.push(
      `  faults        ${
        c.faults?.length ?? 0
      } · affected ${report.requestsAffected} · retried ${report.retried} · failed ${report.failed}${
        reasons.length > 0 ? ` (${reasons.join(", ")})` : ""
      } · time to recover ${formatMetric(report.timeToRecoverMs, 0, " ms")}`,
    );
  }
  if (c.autoscale !== undefined) {
    const moves = (report.scaling ?? []).filter((d) => d.action !== "hold").length;
    const peak = report.peakInstances ?? null;
    lines.push(
      `  autoscaling   ${c.autoscale.signal} target ${c.autoscale.target} · ${
        plural(moves, "decision")
      } · peak ${peak === null ? "n/a instances" : plural(peak, "instance")} · ${
        formatMetric(report.instanceSeconds, 0, " instance·s")
      }`,
    );
  }
  return lines;
}

/**
 * The routing-accounting lines. `available` (like the hit rates above) counts
 * every prompt token; `expected` counts only the prompt tokens of requests
 * whose policy consulted the router's view, so the two have different
 * denominators and each line says which it uses.
 */
function routingLines(report: RunReport): string[] {
  const f3 = (v: number | null) => formatMetric(v, 3);
  return [
    `  routing       available ${
      f3(report.availableTokenHitRate)
    } of all prompt tokens (the most any instance ` +
    `held) · regret ${f3(report.routingRegret)}`,
    `                expected ${f3(report.expectedTokenHitRate)} of the prompt tokens of requests the view ` +
    `routed (the router's belief) · view false positives ${f3(report.viewFalsePositiveRate)}`,
  ];
}

/** Whether the run replayed a trace with `skipInvalid` (or skipped lines anyway): its table then says how many, even 0. */
function skipsInvalid(report: RunReport): boolean {
  return report.scenario.workload.trace?.skipInvalid === true || report.skippedInvalid > 0;
}

/**
 * The stderr notice of a run that replayed a trace with `--skip-invalid`:
 * how many malformed lines it skipped (0 included), so a skipped line is
 * never silent; undefined when the run did not skip.
 *
 * @param tracePath the trace as the user typed it (`--trace`'s value or the
 * scenario file's field); the scenario's own (absolute) path without it.
 * @example
 * ```ts ignore
 * const notice = skippedLinesNotice(report, "trace.jsonl");
 * if (notice) console.error(notice); // "skipped 2 malformed lines of trace.jsonl (--skip-invalid)"
 * ```
 */
export function skippedLinesNotice(
  report: RunReport,
  tracePath: string | undefined = report.scenario.workload.trace?.path,
): string | undefined {
  if (!skipsInvalid(report)) return undefined;
  return `skipped ${plural(report.skippedInvalid, "malformed line")} of ${
    tracePath ?? "the trace"
  } (--skip-invalid)`;
}

/** The KV-transfer line of a disaggregated run: the flow, the link, and the transfers' times. */
function transferLines(report: RunReport): string[] {
  const c = report.scenario, link = c.instances.kvTransfer;
  if (link === undefined) return [];
  const ms = (v: number | null) => formatMetric(v, 2, " ms");
  const gbps = link.gbps === Infinity ? "unlimited" : `${link.gbps} Gb/s`;
  return [
    `  KV transfer   mean ${ms(report.kvTransferMeanMs)} (link wait ${ms(report.kvQueueMeanMs)}) · p99 ${
      ms(report.kvTransferP99Ms)
    } · ${c.router.pdFlow ?? "prefill-first"} · link ${gbps} + ${link.latencyMs} ms`,
  ];
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
  const model = describeFleet(c);
  const workload = w.trace?.generate !== undefined
    ? `generated trace (${plural(w.trace.generate.requests, "request")} at ${
      Number(w.trace.generate.ratePerSec.toPrecision(4))
    } req/s, seed ${w.trace.generate.seed}; mooncake, speed ${w.trace.speed}×)`
    : w.trace
    ? `trace ${w.trace.path} (${w.trace.format}, speed ${w.trace.speed}×)`
    : `${
      plural(w.requests, "request")
    } at ${w.ratePerSec} req/s, zipf ${p.zipf}, shared ${p.sharedFrac} over ${p.groups} groups, ` +
      `prefix ${p.tokens} + suffix ${suffix} tokens`;
  const lines = [
    `policy ${runPolicyLabel(report)}${poolPolicies(c)} · ${
      plural(c.instances.count, "instance")
    } · seed ${c.seed}`,
    ...model,
    `workload: ${workload}`,
    `router view: ${describeRouterView(c)}`,
    "",
    `  requests      ${report.requests}  completed ${report.completed}  dropped ${report.dropped} (${
      percent(report.droppedFraction)
    })${hasDynamics(c) ? `  failed ${report.failed}` : ""}  in flight ${report.inFlight}` +
    (skipsInvalid(report) ? `  (skipped ${plural(report.skippedInvalid, "malformed trace line")})` : ""),
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
    `  hit rate      ${f3(report.hitRate)} of requests, ${f3(report.tokenHitRate)} of prompt tokens${
      hostTier(c) ? ` (GPU ${f3(report.gpuTokenHitRate)}, host ${f3(report.hostTokenHitRate)})` : ""
    }`,
    ...transferLines(report),
    ...dynamicsLines(report),
    ...routingLines(report),
    `  imbalance     ${f3(report.imbalance)} (max-min)/mean · cv ${f3(report.imbalanceCv)} · busy-time cv ${
      f3(report.busyImbalanceCv)
    }`,
    `  throughput    ${report.throughputRps.toFixed(2)} req/s over ${
      (report.simulatedMs / 1000).toFixed(1)
    } s simulated · goodput ${report.goodputRps.toFixed(2)} req/s${sloSet(c) ? "" : " (no SLO set)"}`,
    ...sloLines(report, percent),
    `  kernel        ${plural(report.messages, "message")} in ${report.wallMs.toFixed(0)} ms wall (${
      (report.requests / report.wallMs * 1000).toFixed(0)
    } requests/s)`,
  );
  return lines.join("\n");
}
