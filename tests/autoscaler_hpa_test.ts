/**
 * The autoscaler against Kubernetes' HPA (autoscaling/v2): replica counts
 * under a step and a ramp of load checked against hand-derived sequences and
 * against a small reference model written here from the HPA's rules
 * (replica_calculator.go `calcPlainMetricReplicas`, horizontal.go's
 * stabilisation and limits), unready and missing instances, the `behavior`
 * block, the defaults and the refusals.
 */
import { assert, assertAlmostEquals, assertEquals, assertStringIncludes, assertThrows } from "@std/assert";
import {
  Autoscaler,
  type AutoscalerMessage,
  HPA_DOWNSCALE_STABILIZATION_MS,
  HPA_SYNC_PERIOD_MS,
  resolveBehavior,
} from "../actors/dynamics/autoscaler.ts";
import type {
  AutoscaleBehavior,
  AutoscaleConfig,
  ScalingPolicy,
  SelectPolicy,
} from "../actors/dynamics/faults.ts";
import type {
  InstanceStatus,
  LifecycleCommand,
  MetricsCommand,
  ScalingDecision,
  SloWindow,
} from "../actors/protocol.ts";
import { type Actor, type ActorContext, type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import type { ScenarioInput } from "../scenarios/scenario/scenario.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";
import { scenario } from "./_scenarios.ts";
import { status } from "./_status.ts";

const NETWORK_MS = 10;

/** What every fake instance of a run shares: its answers, and the log of scaling commands. */
interface Fleet {
  /** An active instance's answer to a probe at `t` (undefined: silent); `ready(t)` counts the active ones. */
  readonly reply: (
    instance: number,
    t: number,
    ready: (t: number) => number,
  ) => Partial<InstanceStatus> | undefined;
  readonly log: [timeMs: number, instance: number, type: string][];
  readonly instances: FakeInstance[];
}

/**
 * A fake instance: ready `readyInMs` after a `provision`, answering probes
 * `NETWORK_MS` later while active; decommissioned, it stops at once (a
 * provisioning one never starts).
 */
class FakeInstance implements Actor<LifecycleCommand> {
  #state: "off" | "provisioning" | "active" | "stopping";
  #readyAtMs = 0;
  constructor(readonly index: number, active: boolean, readonly fleet: Fleet) {
    this.#state = active ? "active" : "off";
  }
  /** Active (ready and not decommissioned) at `t`. */
  activeAt(t: number): boolean {
    return this.#state === "active" || (this.#state === "provisioning" && t >= this.#readyAtMs);
  }
  handle(m: LifecycleCommand, ctx: ActorContext<LifecycleCommand>): void {
    const now = ctx.now();
    if (this.#state === "provisioning" && now >= this.#readyAtMs) this.#state = "active";
    else if (this.#state === "stopping") this.#state = "off";
    switch (m.type) {
      case "probe": {
        const ready = (t: number) => this.fleet.instances.filter((f) => f.activeAt(t)).length;
        const reply = this.#state === "active" ? this.fleet.reply(this.index, now, ready) : undefined;
        if (reply !== undefined) ctx.send(m.replyTo, status(this.index, reply), NETWORK_MS);
        break;
      }
      case "provision":
        this.fleet.log.push([now, this.index, m.type]);
        this.#state = "provisioning";
        this.#readyAtMs = now + m.readyInMs;
        break;
      case "decommission":
        this.fleet.log.push([now, this.index, m.type]);
        this.#state = this.#state === "provisioning" ? "off" : "stopping";
        break;
      default: // faults: not exercised here
    }
  }
}

/** A fake metrics collector: keeps the decisions, answers SLO probes from a list (then with nothing finished). */
class FakeMetrics implements Actor<MetricsCommand> {
  readonly decisions: ScalingDecision[] = [];
  #next = 0;
  constructor(readonly windows: readonly (readonly [finished: number, met: number])[]) {}
  handle(m: MetricsCommand, ctx: ActorContext<MetricsCommand>): void {
    if (m.type === "scaled") this.decisions.push(m.decision);
    else if (m.type === "slo_probe") {
      const [finished, met] = this.windows[this.#next++] ?? [0, 0];
      ctx.send(m.replyTo, { type: "slo_window", finished, met } satisfies SloWindow);
    }
  }
}

/** Runs an autoscaler over a fake fleet (with spare instances beyond `max`) until `untilMs`. */
function run(
  config: AutoscaleConfig,
  reply: Fleet["reply"],
  untilMs: number,
  windows: readonly (readonly [number, number])[] = [],
) {
  const kernel = new Kernel();
  const fleet: Fleet = { reply, log: [], instances: [] };
  const metrics = new FakeMetrics(windows);
  const metricsRef = kernel.spawn<MetricsCommand>("metrics", metrics);
  const routerRef = kernel.spawn<InstanceStatus>("router", { handle() {} });
  const refs: ActorRef<LifecycleCommand>[] = [];
  for (let i = 0; i < config.max + 10; i++) {
    const instance = new FakeInstance(i, i < config.initial, fleet);
    fleet.instances.push(instance);
    refs.push(kernel.spawn(`instance/${i}`, instance));
  }
  const ref = kernel.spawn<AutoscalerMessage>(
    "autoscaler",
    new Autoscaler(config, refs, routerRef, metricsRef),
  );
  kernel.send(kernel.spawn("keep-alive", { handle() {} }), { type: "wake" }, untilMs);
  kernel.send(ref, { type: "start" });
  kernel.run();
  return { decisions: metrics.decisions, log: fleet.log };
}

/** A total load `load(t)` (requests waiting) shared evenly by the active instances: the HPA proposes ⌈load / target⌉. */
const shared = (load: (t: number) => number): Fleet["reply"] => (_i, t, ready) => ({
  waiting: load(t) / ready(t),
});

/** The instances after each of the first `syncs` syncs (the k-th decides at k × interval + the network delay). */
function countsAtSyncs(decisions: readonly ScalingDecision[], intervalMs: number, syncs: number): number[] {
  return Array.from({ length: syncs }, (_, k) => {
    const at = (k + 1) * intervalMs + NETWORK_MS;
    return decisions.filter((d) => d.timeMs <= at).at(-1)!.instances;
  });
}

// ---------------------------------------------------------------------------------------------------
// A reference model of the HPA, written from its rules rather than from actors/dynamics/autoscaler.ts: the load
// is a whole number of requests, the target 1, so every ratio is a fraction of whole numbers and the
// tolerance test is exact; the count at a policy period's start is read off the history of counts.

/** One direction's rules, spelled out. */
interface Rules {
  readonly windowMs: number;
  readonly select: SelectPolicy;
  readonly policies: readonly ScalingPolicy[];
}

interface ReferenceRun {
  readonly initial: number;
  readonly min: number;
  readonly max: number;
  readonly intervalMs: number;
  /** The scale-down stabilisation window without a behavior. */
  readonly windowMs: number;
  readonly provisionMs: number;
  /** Requests waiting in all, a whole number, read at each sync's probes. */
  readonly load: (t: number) => number;
  readonly syncs: number;
  /** A behavior's rules, both directions spelled out (absent: HPA without a behavior). */
  readonly rules?: { readonly up: Rules; readonly down: Rules };
}

/** The instances after each sync, as the HPA computes them (target 1). */
function referenceHpa(r: ReferenceRun): number[] {
  let pods: number[] = Array(r.initial).fill(0); // each one's ready time, in creation order
  const proposals: [number, number][] = [];
  const history: [number, number][] = [[-Infinity, r.initial]]; // [from when, how many]
  const countAt = (t: number) => history.filter(([from]) => from <= t).at(-1)![1];
  const counts: number[] = [];
  for (let k = 1; k <= r.syncs; k++) {
    const tick = k * r.intervalMs, now = tick + NETWORK_MS, current = pods.length;
    if (k === 1) proposals.push([now, current]);
    const ready = pods.filter((at) => at <= tick).length, unready = current - ready;
    const load = r.load(tick);
    if (ready > 0) {
      // Within 10%: |load − n| ≤ n / 10. Scaling up with unready pods, they count as idle: the ratio is load / current.
      const within = (n: number) => 10 * Math.abs(load - n) <= n;
      const proposal = unready > 0 && load > ready
        ? (within(current) || load < current ? current : load)
        : (within(ready) ? current : load);
      const inWindow = (w: number) => proposals.filter(([t]) => t > now - w).map(([, n]) => n);
      let desired: number;
      if (r.rules === undefined) {
        const highest = Math.max(proposal, ...inWindow(r.windowMs));
        desired = Math.max(r.min, Math.min(highest, r.max, Math.max(2 * current, 4)));
      } else {
        const { up, down } = r.rules;
        const lowest = Math.min(proposal, ...inWindow(up.windowMs));
        const highest = Math.max(proposal, ...inWindow(down.windowMs));
        const stabilised = current < lowest ? lowest : current > highest ? highest : current;
        const bound = (rules: Rules, sign: 1 | -1) => {
          if (rules.select === "Disabled") return current;
          const each = rules.policies.map((p) => {
            const start = countAt(now - p.periodMs);
            if (p.type === "Pods") return start + sign * p.value;
            return sign > 0
              ? Math.ceil(start * (1 + p.value / 100))
              : Math.trunc(start * (1 - p.value / 100));
          });
          // The largest change is the highest bound up, the lowest down.
          return (rules.select === "Max") === (sign > 0) ? Math.max(...each) : Math.min(...each);
        };
        desired = stabilised > current
          ? Math.min(stabilised, r.max, Math.max(current, bound(up, 1)))
          : stabilised < current
          ? Math.max(stabilised, r.min, Math.min(current, bound(down, -1)))
          : current;
      }
      proposals.push([now, proposal]);
      while (pods.length < desired) pods.push(now + r.provisionMs);
      while (pods.length > desired) {
        // A ReplicaSet removes pods not ready first, the newest first.
        const notReady = pods.findLastIndex((at) => at > now);
        pods = pods.toSpliced(notReady >= 0 ? notReady : pods.length - 1, 1);
      }
      if (desired !== current) history.push([now, desired]);
    }
    counts.push(pods.length);
  }
  return counts;
}

const HPA: Omit<AutoscaleConfig, "initial" | "min" | "max"> = {
  provisionMs: 30_000,
  signal: "queue_depth",
  target: 1,
  intervalMs: HPA_SYNC_PERIOD_MS,
  cooldownMs: HPA_DOWNSCALE_STABILIZATION_MS,
};

/** 2 requests waiting, 24 from 50 s, 3 from 200 s. */
const step = (t: number) => t < 50_000 ? 2 : t < 200_000 ? 24 : 3;

Deno.test("under a step of load the HPA doubles at most per sync, counts unready instances as idle and holds 5 min before scaling in", () => {
  // Syncs every 15 s, decisions 10 ms later; new instances are ready 30 s after the decision (two syncs unready).
  // 60 s: 24 waiting on 2 → 24 proposed, max(2 × 2, 4) = 4. 75 s: 2 ready, 2 unready (as idle): 24/4 > 1 → 24,
  // limit 8. 90 s: → 16. 105 s: 4 ready, 12 unready: 24/16 = 1.5 → 24, max 20. Then 24 on 20 (ratio 1.2) holds
  // at max. From 210 s, 3 waiting proposes 3, but 24 was proposed at 195 s: the count holds until 495 s.
  const config: AutoscaleConfig = { ...HPA, initial: 2, min: 1, max: 20 };
  const expected = [2, 2, 2, 4, 8, 16, ...Array(26).fill(20), 3, 3];
  const { decisions } = run(config, shared(step), 34 * 15_000 + 100);
  assertEquals(countsAtSyncs(decisions, 15_000, 34), expected);
  assertEquals(
    referenceHpa({ ...config, windowMs: config.cooldownMs, load: step, syncs: 34 }),
    expected,
    "the reference model agrees",
  );
  const last = decisions.at(-1)!;
  assertEquals([last.timeMs, last.instances, last.action], [495_010, 3, "down"]);
  assertAlmostEquals(last.signal!, 3 / 20, 1e-12);
});

Deno.test("an empty behavior block takes autoscaling/v2's defaults: up by max(4 instances, 100%) per 15 s", () => {
  // 60 s: max(2 + 4, 2 × 2) = 6. 75 s: the last change is 15 s old, outside the period: max(6 + 4, 12) = 12.
  // 90 s: max(16, 24), at most 20. The scale-down window is cooldownMs, and 100% per 15 s lets 20 → 3 at once.
  const config: AutoscaleConfig = { ...HPA, initial: 2, min: 1, max: 20, behavior: {} };
  const expected = [2, 2, 2, 6, 12, ...Array(27).fill(20), 3, 3];
  const { decisions } = run(config, shared(step), 34 * 15_000 + 100);
  assertEquals(countsAtSyncs(decisions, 15_000, 34), expected);
  const b = resolveBehavior(config)!;
  const rules = (r: typeof b.scaleUp): Rules => ({
    windowMs: r.stabilizationWindowMs,
    select: r.selectPolicy,
    policies: r.policies,
  });
  const reference = { up: rules(b.scaleUp), down: rules(b.scaleDown) };
  assertEquals(referenceHpa({ ...config, windowMs: 0, load: step, syncs: 34, rules: reference }), expected);
});

/** Up from 2 to 40 waiting by one per 10 s, 40 until 500 s, down to 4 by one per 10 s. */
const ramp = (t: number) =>
  t < 500_000
    ? Math.min(40, 2 + Math.floor(t / 10_000))
    : Math.max(4, 40 - Math.floor((t - 500_000) / 10_000));

Deno.test("under a ramp of load the HPA's counts match the reference model and settle within tolerance", () => {
  const config: AutoscaleConfig = { ...HPA, initial: 2, min: 1, max: 60, cooldownMs: 120_000 };
  const syncs = 70;
  const counts = countsAtSyncs(run(config, shared(ramp), syncs * 15_000 + 100).decisions, 15_000, syncs);
  assertEquals(counts, referenceHpa({ ...config, windowMs: config.cooldownMs, load: ramp, syncs }));
  const at = (s: number) => counts[s / 15 - 1];
  for (let k = 1; k < 25; k++) {
    assert(counts[k] >= counts[k - 1], `no scale-in while the load rises (sync ${k + 1})`);
  }
  assert(at(495) >= 37 && at(495) <= 44, `40 waiting within 10% of 1 per instance: ${at(495)} instances`);
  assertEquals(at(1050), 4, "4 waiting, two minutes after the ramp's end");
  assert(counts.some((n, k) => k > 0 && n < counts[k - 1] - 1), "it scales in by more than one at a time");
});

Deno.test("under a ramp of load a behavior's windows and policies match the reference model", () => {
  const behavior: AutoscaleBehavior = {
    scaleUp: {
      stabilizationWindowMs: 30_000,
      selectPolicy: "Min",
      policies: [{ type: "Pods", value: 3, periodMs: 30_000 }, {
        type: "Percent",
        value: 50,
        periodMs: 60_000,
      }],
    },
    scaleDown: { stabilizationWindowMs: 60_000, policies: [{ type: "Pods", value: 2, periodMs: 45_000 }] },
  };
  const config: AutoscaleConfig = { ...HPA, initial: 2, min: 1, max: 60, behavior };
  const syncs = 100;
  const counts = countsAtSyncs(run(config, shared(ramp), syncs * 15_000 + 100).decisions, 15_000, syncs);
  const reference = referenceHpa({
    ...config,
    windowMs: 0,
    load: ramp,
    syncs,
    rules: {
      up: { windowMs: 30_000, select: "Min", policies: behavior.scaleUp!.policies! },
      down: { windowMs: 60_000, select: "Max", policies: behavior.scaleDown!.policies! },
    },
  });
  assertEquals(counts, reference);
  const withStart = [2, ...counts];
  for (let k = 2; k < withStart.length; k++) {
    assert(withStart[k] - withStart[k - 2] <= 3, `at most 3 more per 30 s (sync ${k})`);
  }
  for (let k = 3; k < withStart.length; k++) {
    assert(withStart[k - 3] - withStart[k] <= 2, `at most 2 fewer per 45 s (sync ${k})`);
  }
  assertEquals(counts.at(-1), 4, "4 waiting, once 2 per 45 s have brought the count down");
});

// ---------------------------------------------------------------------------------------------------
// Unready and missing instances (replica_calculator.go, calcPlainMetricReplicas), on a fast clock.

const FAST: AutoscaleConfig = {
  min: 1,
  max: 12,
  initial: 4,
  provisionMs: 5000,
  signal: "queue_depth",
  target: 1,
  intervalMs: 1000,
  cooldownMs: 0,
};

Deno.test("an instance that does not answer counts at target scaling in and as idle scaling out", async (t) => {
  // Instance 3 never answers; the others report `depth`. The round is decided at the next tick (2 s); the run
  // stops before the round of 2 s is decided.
  const rows: [depth: number, instances: number | null, why: string][] = [
    [0.5, 3, "ratio 0.5: the silent one at target, (1.5 + 1) / 4 = 0.625 → ceil(2.5) = 3, not ceil(1.5) = 2"],
    [1.4, null, "ratio 1.4: the silent one idle, 4.2 / 4 = 1.05 is within 10%: hold, not ceil(4 × 1.4) = 6"],
    [3, 8, "ratio 3: the silent one idle, 9 / 4 → ceil(9) = 9, at most max(2 × 4, 4) = 8"],
    [1, 3, "ratio exactly 1: HPA counts the silent one idle (its scale-up branch), 3 / 4 → 3"],
  ];
  for (const [depth, instances, why] of rows) {
    await t.step(why, () => {
      const { decisions } = run(FAST, (i) => i === 3 ? undefined : { waiting: depth }, 2005);
      assertEquals(
        decisions.slice(1).filter((d) => d.timeMs <= 2000).map((d) => [d.timeMs, d.instances, d.signal]),
        instances === null ? [] : [[2000, instances, depth]],
      );
    });
  }
});

Deno.test("instances still provisioning count as idle scaling out, and a flip of direction holds", async (t) => {
  await t.step(
    "3 waiting on each ready instance: 4, then 6 (2 ready, 2 unready: 6 / 4), then 8 once ready",
    () => {
      // 1 s: ceil(2 × 3) = 6, at most 4. 2 s: 6 / 4 = 1.5 → 6. 3–6 s: 6 / 6 = 1: hold. 7 s: the first two are
      // ready (at 6.01 s): 12 on 4 ready, 2 unready: 12 / 6 = 2 → 12, at most 8.
      const { decisions } = run({ ...FAST, initial: 2, max: 8 }, () => ({ waiting: 3 }), 7500);
      assertEquals(decisions.slice(1).map((d) => [d.timeMs, d.instances]), [[1010, 4], [2010, 6], [7010, 8]]);
    },
  );
  await t.step(
    "1.5 waiting on each of 2 ready, 2 unready: 3 / 4 = 0.75 would scale in: hold until they are ready",
    () => {
      // 1 s: 3 on 2 → 4. 2–6 s: ratio 1.5, but with the unready as idle 3 / 4 = 0.75 < 1: hold.
      // 7 s: 4 ready at 1.5: ceil(6) = 6.
      const depth = (t: number) => t < 1500 ? 3 : 1.5;
      const { decisions } = run({ ...FAST, initial: 2, max: 8 }, (_i, t) => ({ waiting: depth(t) }), 7500);
      assertEquals(decisions.slice(1).map((d) => [d.timeMs, d.instances]), [[1010, 4], [7010, 6]]);
    },
  );
});

Deno.test("scaling in removes instances not ready first, which stop at once, then the most recent ready", () => {
  // 1 s: 3 waiting on 2 → 4 (instances 2 and 3 provisioning until 6 s). 2 s: 0.5 on the 2 ready → ceil(1) = 1.
  // Instances 3 and 2 are cancelled (free at once), then 1 drains. 3 s: 3 waiting → 3: instances 2 and 3 again.
  const depth = (t: number) => t < 1500 ? 3 : t < 2500 ? 0.5 : 3;
  const { decisions, log } = run({ ...FAST, initial: 2, max: 8 }, (_i, t) => ({ waiting: depth(t) }), 3500);
  assertEquals(decisions.slice(1).map((d) => [d.timeMs, d.instances, d.action]), [
    [1010, 4, "up"],
    [2010, 1, "down"],
    [3010, 3, "up"],
  ]);
  assertEquals(log, [
    [1010, 2, "provision"],
    [1010, 3, "provision"],
    [2010, 3, "decommission"],
    [2010, 2, "decommission"],
    [2010, 1, "decommission"],
    [3010, 2, "provision"],
    [3010, 3, "provision"],
  ]);
});

// ---------------------------------------------------------------------------------------------------
// The behavior block: policies, selectPolicy and windows (horizontal.go, calculateScaleUpLimitWithScalingRules,
// calculateScaleDownLimitWithBehaviors, stabilizeRecommendationWithBehaviors). Syncs every 15 s; new instances
// are ready before the next sync.

/** The counts after each sync of a behavior under a constant load. */
function behaviorCounts(behavior: AutoscaleBehavior, load: number, initial: number, syncs: number): number[] {
  const config: AutoscaleConfig = { ...HPA, provisionMs: 500, initial, min: 1, max: 100, behavior };
  return countsAtSyncs(run(config, shared(() => load), syncs * 15_000 + 100).decisions, 15_000, syncs);
}

const pods = (value: number, periodMs = 15_000): ScalingPolicy => ({ type: "Pods", value, periodMs });
const percent = (value: number, periodMs = 15_000): ScalingPolicy => ({ type: "Percent", value, periodMs });

Deno.test("scale-up policies: Pods adds a number, Percent a share, selectPolicy picks the larger or smaller", async (t) => {
  const rows: [string, AutoscaleBehavior, number[]][] = [
    ["Max of Pods 4 and Percent 100: 2+4, 6×2, 12×2, …", { scaleUp: { policies: [pods(4), percent(100)] } }, [
      6,
      12,
      24,
      48,
      96,
      100,
    ]],
    [
      "Min of Pods 4 and Percent 100: 2×2, 4+4, 8+4, …",
      { scaleUp: { selectPolicy: "Min", policies: [pods(4), percent(100)] } },
      [4, 8, 12, 16, 20, 24],
    ],
    ["Pods 3", { scaleUp: { policies: [pods(3)] } }, [5, 8, 11, 14, 17, 20]],
    ["Percent 50, rounded up: ceil(3), ceil(4.5), ceil(7.5), …", { scaleUp: { policies: [percent(50)] } }, [
      3,
      5,
      8,
      12,
      18,
      27,
    ]],
    ["Pods 2 per 60 s: 2 more each fourth sync", { scaleUp: { policies: [pods(2, 60_000)] } }, [
      4,
      4,
      4,
      4,
      6,
      6,
    ]],
    ["Disabled: never up", { scaleUp: { selectPolicy: "Disabled" } }, [2, 2, 2, 2, 2, 2]],
  ];
  for (const [name, behavior, expected] of rows) {
    await t.step(name, () => assertEquals(behaviorCounts(behavior, 1000, 2, 6), expected));
  }
});

Deno.test("Percent limits are computed in floating point as HPA computes them, rounding artefacts included", async (t) => {
  await t.step("up: 25 × (1 + 12/100) = 28.000000000000004 allows 29, not 28", () => {
    assertEquals(behaviorCounts({ scaleUp: { policies: [percent(12)] } }, 1000, 25, 1), [29]);
  });
  await t.step("down: 10 × (1 − 80/100) = 1.9999999999999996 truncates to 1, not 2", () => {
    const scaleDown = { stabilizationWindowMs: 0, policies: [percent(80)] };
    assertEquals(behaviorCounts({ scaleDown }, 0, 10, 1), [1]);
  });
});

Deno.test("scale-down policies count from the instances at the period's start and truncate", async (t) => {
  // Nothing waiting: HPA proposes 0, min is 1; no scale-down window.
  const rows: [string, AutoscaleBehavior["scaleDown"], number[]][] = [
    ["Percent 50 per 30 s: 16 → 8, hold, 4, hold, 2, hold, 1", { policies: [percent(50, 30_000)] }, [
      8,
      8,
      4,
      4,
      2,
      2,
      1,
    ]],
    ["Pods 5", { policies: [pods(5)] }, [11, 6, 1, 1]],
    ["Max of Pods 5 and Percent 50: the larger change", { policies: [pods(5), percent(50)] }, [8, 3, 1, 1]],
    ["Min of Pods 5 and Percent 50: the smaller change", {
      selectPolicy: "Min",
      policies: [pods(5), percent(50)],
    }, [11, 6, 3, 1]],
    ["Disabled: never down", { selectPolicy: "Disabled" }, [16, 16, 16, 16]],
  ];
  for (const [name, scaleDown, expected] of rows) {
    await t.step(name, () => {
      const counts = behaviorCounts(
        { scaleDown: { stabilizationWindowMs: 0, ...scaleDown } },
        0,
        16,
        expected.length,
      );
      assertEquals(counts, expected);
    });
  }
});

Deno.test("a scale-up window takes the lowest proposal in it, a scale-down window the highest", async (t) => {
  await t.step(
    "scale-up window 45 s: the step at 50 s is acted on at 90 s, when the window holds only 24s",
    () => {
      const config: AutoscaleConfig = {
        ...HPA,
        provisionMs: 500,
        initial: 2,
        min: 1,
        max: 30,
        behavior: { scaleUp: { stabilizationWindowMs: 45_000 } },
      };
      const load = (t: number) => t < 50_000 ? 2 : 24;
      const counts = countsAtSyncs(run(config, shared(load), 8 * 15_000 + 100).decisions, 15_000, 8);
      assertEquals(counts, [2, 2, 2, 2, 2, 6, 12, 24]);
    },
  );
  await t.step(
    "scale-down window 30 s (over a cooldownMs of 5 min): down at the second sync after the drop",
    () => {
      const config: AutoscaleConfig = {
        ...HPA,
        provisionMs: 500,
        initial: 10,
        min: 1,
        max: 30,
        behavior: { scaleDown: { stabilizationWindowMs: 30_000 } },
      };
      const load = (t: number) => t < 50_000 ? 10 : 2;
      const counts = countsAtSyncs(run(config, shared(load), 6 * 15_000 + 100).decisions, 15_000, 6);
      assertEquals(counts, [10, 10, 10, 10, 2, 2]);
    },
  );
});

Deno.test("the SLO signal keeps its own proposal but follows the sync period, windows and policies", () => {
  // Half the requests met the SLO (target 90%): ceil(2 × 5) = 10 proposed, one instance per 15 s allowed.
  const config: AutoscaleConfig = {
    ...HPA,
    signal: "slo_attainment",
    target: 0.9,
    provisionMs: 0,
    initial: 2,
    min: 1,
    max: 6,
    behavior: { scaleUp: { policies: [pods(1)] } },
  };
  const windows = Array(5).fill([10, 5] as const);
  const { decisions } = run(config, () => undefined, 5 * 15_000 + 100, windows);
  assertEquals(decisions.slice(1).map((d) => [d.timeMs, d.instances]), [
    [15_000, 3],
    [30_000, 4],
    [45_000, 5],
    [60_000, 6],
  ]);
});

// ---------------------------------------------------------------------------------------------------
// Defaults and refusals.

Deno.test("autoscaling/v2's defaults fill a behavior's absent fields", async (t) => {
  const up = [pods(4), percent(100)], down = [percent(100)];
  await t.step("no behavior: none", () => assertEquals(resolveBehavior({ cooldownMs: 1 }), undefined));
  await t.step("an empty one: every default, the scale-down window from cooldownMs", () => {
    assertEquals(resolveBehavior({ cooldownMs: 120_000, behavior: {} }), {
      scaleUp: { stabilizationWindowMs: 0, selectPolicy: "Max", policies: up },
      scaleDown: { stabilizationWindowMs: 120_000, selectPolicy: "Max", policies: down },
    });
  });
  await t.step("given fields are kept, the others defaulted", () => {
    const behavior: AutoscaleBehavior = {
      scaleUp: { selectPolicy: "Min" },
      scaleDown: { stabilizationWindowMs: 0, policies: [pods(1, 60_000)] },
    };
    assertEquals(resolveBehavior({ cooldownMs: 300_000, behavior }), {
      scaleUp: { stabilizationWindowMs: 0, selectPolicy: "Min", policies: up },
      scaleDown: { stabilizationWindowMs: 0, selectPolicy: "Max", policies: [pods(1, 60_000)] },
    });
  });
});

Deno.test("a scenario's autoscale block defaults to HPA's 15 s sync and 5 min scale-down window", () => {
  const config = scenario({ instances: { count: 2 }, autoscale: { min: 1, max: 4, target: 2 } }).autoscale!;
  assertEquals([config.intervalMs, config.cooldownMs, config.behavior], [15_000, 300_000, undefined]);
  const { decisions } = run(config, () => ({ waiting: 8 }), 31_000);
  assertEquals(decisions.slice(1).map((d) => [d.timeMs, d.instances]), [[15_010, 4]]);
  const withBehavior = scenario({
    instances: { count: 2 },
    autoscale: { min: 1, max: 4, target: 2, behavior: { scaleUp: { selectPolicy: "Min" } } },
  }).autoscale!;
  assertEquals(withBehavior.behavior, { scaleUp: { selectPolicy: "Min" } });
});

function refusal(autoscale: unknown): string {
  const input = { instances: { count: 2 }, autoscale: { min: 1, max: 4, target: 2, ...autoscale as object } };
  return assertThrows(() => scenario(input as ScenarioInput), UsageError).message;
}

Deno.test("a scenario's behavior block refuses bad input naming the field, the value and what was expected", () => {
  const at = "scenario.autoscale.behavior";
  const rows: [unknown, string][] = [
    [
      { scaleUp: { selectPolicy: "max" } },
      `${at}.scaleUp.selectPolicy: expected one of "Max", "Min", "Disabled", got "max"`,
    ],
    [
      { scaleUp: { stabilizationWindowMs: -1 } },
      `${at}.scaleUp.stabilizationWindowMs: expected a number >= 0, got -1`,
    ],
    [
      { scaleDown: { stabilizationWindowMs: 3_600_001 } },
      `${at}.scaleDown.stabilizationWindowMs: expected a number <= 3600000, got 3600001`,
    ],
    [{ scaleDown: { policies: [] } }, `${at}.scaleDown.policies: expected at least 1 item(s), got []`],
    [
      { scaleUp: { policies: [{ type: "Percentage", value: 10, periodMs: 15_000 }] } },
      `${at}.scaleUp.policies[0].type: expected one of "Pods", "Percent", got "Percentage"`,
    ],
    [
      { scaleUp: { policies: [{ type: "Pods", value: 0, periodMs: 15_000 }] } },
      `${at}.scaleUp.policies[0].value: expected a number >= 1, got 0`,
    ],
    [
      { scaleUp: { policies: [{ type: "Pods", value: 1.5, periodMs: 15_000 }] } },
      `${at}.scaleUp.policies[0].value: expected an integer, got 1.5`,
    ],
    [
      { scaleDown: { policies: [{ type: "Pods", value: 1, periodMs: 1_800_001 }] } },
      `${at}.scaleDown.policies[0].periodMs: expected a number <= 1800000, got 1800001`,
    ],
    [
      { scaleUp: { stabilizationWindowSeconds: 60 } },
      `${at}.scaleUp.stabilizationWindowSeconds: unknown field`,
    ],
  ];
  for (const [behavior, message] of rows) assertStringIncludes(refusal({ behavior }), message);
});

Deno.test("the autoscaler refuses a bad behavior naming the field, the value and what was expected", () => {
  const refs = [0, 1, 2, 3] as ActorRef<LifecycleCommand>[];
  const rows: [AutoscaleBehavior, string][] = [
    [
      { scaleUp: { selectPolicy: "Maximum" as SelectPolicy } },
      'autoscale.behavior.scaleUp.selectPolicy: expected "Max", "Min" or "Disabled", got "Maximum"',
    ],
    [
      { scaleDown: { stabilizationWindowMs: Infinity } },
      "autoscale.behavior.scaleDown.stabilizationWindowMs: expected a number in [0, 3600000] (ms), got Infinity",
    ],
    [
      { scaleDown: { policies: [] } },
      "autoscale.behavior.scaleDown.policies: expected at least one policy, got []",
    ],
    [
      { scaleUp: { policies: [pods(4), { type: "Nodes" as "Pods", value: 1, periodMs: 1 }] } },
      'autoscale.behavior.scaleUp.policies[1].type: expected "Pods" or "Percent", got "Nodes"',
    ],
    [
      { scaleUp: { policies: [pods(0)] } },
      "autoscale.behavior.scaleUp.policies[0].value: expected an integer >= 1, got 0",
    ],
    [
      { scaleUp: { policies: [pods(1, 0)] } },
      "autoscale.behavior.scaleUp.policies[0].periodMs: expected a number in (0, 1800000] (ms), got 0",
    ],
  ];
  for (const [behavior, message] of rows) {
    assertThrows(() => new Autoscaler({ ...FAST, max: 4, behavior }, refs, 0, 0), RangeError, message);
  }
});
