import { assertEquals, assertThrows } from "@std/assert";
import { Autoscaler, type AutoscalerMessage } from "../actors/dynamics/autoscaler.ts";
import type { AutoscaleConfig } from "../actors/dynamics/faults.ts";
import type {
  InstanceStatus,
  LifecycleCommand,
  MetricsCommand,
  ScalingDecision,
  SloWindow,
} from "../actors/protocol.ts";
import { type Actor, type ActorContext, type ActorRef, Kernel } from "../actors/runtime/kernel.ts";
import { Recorder } from "./_recorder.ts";
import { status } from "./_status.ts";

/** What an instance was told, when. */
interface Command {
  readonly timeMs: number;
  readonly instance: number;
  readonly type: "provision" | "decommission";
  readonly readyInMs?: number;
  readonly replyTo: number;
}

/** How the fake fleet behaves: each active instance's reply to a probe at `timeMs` (undefined: silent). */
interface FleetScript {
  readonly reply: (instance: number, timeMs: number) => Partial<InstanceStatus> | undefined;
  /** How long a decommissioned instance drains (answering probes with one request running). @default 0 */
  readonly drainMs?: (instance: number) => number;
}

const NETWORK_MS = 10;

/**
 * A fake instance: answers probes `NETWORK_MS` later while active (with the
 * script's counts) or draining (one running), is silent while
 * unprovisioned or not yet ready, and records scaling commands.
 */
class FakeInstance implements Actor<LifecycleCommand> {
  #state: "off" | "provisioning" | "active" | "draining";
  #untilMs = 0;
  constructor(
    readonly index: number,
    active: boolean,
    readonly script: FleetScript,
    readonly log: Command[],
  ) {
    this.#state = active ? "active" : "off";
  }
  handle(m: LifecycleCommand, ctx: ActorContext<LifecycleCommand>): void {
    const now = ctx.now(), i = this.index;
    if (this.#state === "provisioning" && now >= this.#untilMs) this.#state = "active";
    if (this.#state === "draining" && now >= this.#untilMs) this.#state = "off";
    switch (m.type) {
      case "probe": {
        const reply = this.#state === "active"
          ? this.script.reply(i, now)
          : this.#state === "draining"
          ? { running: 1, draining: true }
          : undefined;
        if (reply !== undefined) ctx.send(m.replyTo, status(i, reply), NETWORK_MS);
        break;
      }
      case "provision":
        this.log.push({ timeMs: now, instance: i, type: m.type, readyInMs: m.readyInMs, replyTo: m.replyTo });
        this.#state = "provisioning";
        this.#untilMs = now + m.readyInMs;
        break;
      case "decommission":
        this.log.push({ timeMs: now, instance: i, type: m.type, replyTo: m.replyTo });
        this.#state = "draining";
        this.#untilMs = now + (this.script.drainMs?.(i) ?? 0);
        break;
      default: // faults: not exercised here
    }
  }
}

/** A fake metrics collector: records decisions, answers SLO probes from a list (then with nothing finished). */
class FakeMetrics implements Actor<MetricsCommand> {
  readonly decisions: ScalingDecision[] = [];
  #next = 0;
  constructor(readonly windows: readonly (readonly [finished: number, met: number])[] = []) {}
  handle(m: MetricsCommand, ctx: ActorContext<MetricsCommand>): void {
    if (m.type === "scaled") this.decisions.push(m.decision);
    else if (m.type === "slo_probe") {
      const [finished, met] = this.windows[this.#next++] ?? [0, 0];
      ctx.send(m.replyTo, { type: "slo_window", finished, met } satisfies SloWindow);
    }
  }
}

const BASE: AutoscaleConfig = {
  min: 1,
  max: 8,
  initial: 2,
  provisionMs: 500,
  signal: "queue_depth",
  target: 2,
  intervalMs: 1000,
  cooldownMs: 10_000,
};

/**
 * Runs an autoscaler over a fake fleet of `fleet` instances, kept alive by a
 * live timer at `untilMs` (its ticks alone keep no run going).
 */
function scale(
  config: AutoscaleConfig,
  script: FleetScript,
  options: { fleet?: number; untilMs?: number; windows?: readonly (readonly [number, number])[] } = {},
) {
  const kernel = new Kernel();
  const log: Command[] = [];
  const metrics = new FakeMetrics(options.windows);
  const metricsRef = kernel.spawn<MetricsCommand>("metrics", metrics);
  const routerRef = kernel.spawn<InstanceStatus>("router", new Recorder<InstanceStatus>());
  const refs: ActorRef<LifecycleCommand>[] = [];
  for (let i = 0; i < (options.fleet ?? config.max); i++) {
    refs.push(kernel.spawn(`instance/${i}`, new FakeInstance(i, i < config.initial, script, log)));
  }
  const ref = kernel.spawn<AutoscalerMessage>(
    "autoscaler",
    new Autoscaler(config, refs, routerRef, metricsRef),
  );
  if (options.untilMs !== undefined) {
    const keepAlive = kernel.spawn("keep-alive", { handle() {} });
    kernel.send(keepAlive, { type: "wake" }, options.untilMs);
  }
  kernel.send(ref, { type: "start" });
  kernel.run();
  return { kernel, log, decisions: metrics.decisions, routerRef };
}

const everyone = (waiting: number | ((timeMs: number) => number)): FleetScript => ({
  reply: (_i, t) => ({ waiting: typeof waiting === "number" ? waiting : waiting(t) }),
});

const START: ScalingDecision = { timeMs: 0, instances: 2, signal: null, action: "hold" };

Deno.test("the autoscaler scales out to HPA's ceil(current × value / target), at most max(2 × current, 4) per sync", () => {
  // Mean queue 5 against a target of 2: 2 → ceil(2 × 2.5) = 5, limited to max(2 × 2, 4) = 4 at
  // the first round; then ceil(4 × 2.5) = 10, limited to max(8, 4) = 8 = max; at 8 it holds (no record).
  const { log, decisions, routerRef } = scale(BASE, everyone(5), { untilMs: 3500 });
  assertEquals(decisions, [
    START,
    { timeMs: 1010, instances: 4, signal: 5, action: "up" },
    { timeMs: 2010, instances: 8, signal: 5, action: "up" },
  ]);
  assertEquals(log.map((c) => [c.timeMs, c.instance, c.type, c.readyInMs]), [
    [1010, 2, "provision", 500],
    [1010, 3, "provision", 500],
    [2010, 4, "provision", 500],
    [2010, 5, "provision", 500],
    [2010, 6, "provision", 500],
    [2010, 7, "provision", 500],
  ]);
  assertEquals(new Set(log.map((c) => c.replyTo)), new Set([routerRef])); // a started instance reports to the router
});

Deno.test("the autoscaler holds while the signal is within 10% of its target", async (t) => {
  const rows: [depth: number, instances: number | null][] = [
    [2.2, null], // ratio 1.1: inside the band
    [1.8, null], // ratio 0.9: inside the band
    [2.3, 5], // ceil(4 × 1.15) = 5
    [1.4, 3], // ceil(4 × 0.7) = 3 (no cooldown here)
    [0, 1], // nothing waiting: min
  ];
  for (const [depth, instances] of rows) {
    await t.step(`mean queue ${depth} with 4 instances and target 2 → ${instances ?? "hold"}`, () => {
      const config = { ...BASE, initial: 4, cooldownMs: 0 };
      const { decisions } = scale(config, everyone(depth), { untilMs: 1500 });
      assertEquals(decisions.slice(1).map((d) => d.instances), instances === null ? [] : [instances]);
    });
  }
});

Deno.test("the autoscaler reads mean KV utilisation on the kv_utilization signal", () => {
  const config: AutoscaleConfig = { ...BASE, signal: "kv_utilization", target: 0.6 };
  const script: FleetScript = { reply: (i) => ({ kvUtilization: i === 0 ? 0.8 : 1.0, waiting: 100 }) };
  const { decisions } = scale(config, script, { untilMs: 1500 });
  assertEquals(decisions.slice(1), [{ timeMs: 1010, instances: 3, signal: 0.9, action: "up" }]);
});

Deno.test("the autoscaler scales in to the highest proposal of its window, with no cooldown after a change", () => {
  // Each instance's queue: 2 until 1.5 s, 0.5 until 2.5 s, then 0.25; a window (cooldownMs) of 1.5 s.
  // 1 s: ceil(3 × 2) = 6 → 6. 2 s: ceil(6 × 0.5) = 3, but 6 was proposed within 1.5 s: hold.
  // 3 s: ceil(6 × 0.25) = 2, the window holds 3 and 2: → 3. 4 s: ceil(3 × 0.25) = 1, the window
  // holds 2 and 1: → 2 — one second after the last change. 5 s: ceil(2 × 0.25) = 1 → 1.
  const config = { ...BASE, initial: 3, max: 6, target: 1, cooldownMs: 1500 };
  const depth = (t: number) => t < 1500 ? 2 : t < 2500 ? 0.5 : 0.25;
  const { log, decisions } = scale(config, everyone(depth), { untilMs: 5500 });
  assertEquals(decisions, [
    { ...START, instances: 3 },
    { timeMs: 1010, instances: 6, signal: 2, action: "up" },
    { timeMs: 3010, instances: 3, signal: 0.25, action: "down" },
    { timeMs: 4010, instances: 2, signal: 0.25, action: "down" },
    { timeMs: 5010, instances: 1, signal: 0.25, action: "down" },
  ]);
  assertEquals(log.filter((c) => c.type === "decommission").map((c) => [c.timeMs, c.instance]), [
    [3010, 5],
    [3010, 4],
    [3010, 3],
    [4010, 2],
    [5010, 1],
  ]);
});

Deno.test("the autoscaler provisions the lowest stopped instance and decommissions the most recent", () => {
  // Instance 1 drains until 3.5 s, instance 2 stops at once. Scaling out at 3 s takes 2
  // (1 is still draining), at 5 s takes 1; scaling in at 6 s removes 1, the most recently
  // provisioned, though 2 has the higher index.
  const depth = (t: number) =>
    t < 1500 ? 0 : t < 2500 ? 1 : t < 3500 ? 2 : t < 4500 ? 1 : t < 5500 ? 1.5 : 0.5;
  const config = { ...BASE, initial: 3, max: 3, target: 1, cooldownMs: 0 };
  const script: FleetScript = { ...everyone(depth), drainMs: (i) => i === 1 ? 2490 : 0 };
  const { log, decisions } = scale(config, script, { untilMs: 6500 });
  assertEquals(log.map((c) => [c.timeMs, c.instance, c.type]), [
    [1010, 2, "decommission"],
    [1010, 1, "decommission"],
    [3010, 2, "provision"],
    [5010, 1, "provision"],
    [6010, 1, "decommission"],
  ]);
  assertEquals(decisions.map((d) => [d.timeMs, d.instances, d.signal, d.action]), [
    [0, 3, null, "hold"],
    [1010, 1, 0, "down"],
    [3010, 2, 2, "up"],
    [5010, 3, 1.5, "up"],
    [6010, 2, 0.5, "down"],
  ]);
});

Deno.test("the autoscaler decides at the next tick on the replies that came when an instance is silent", () => {
  // Instance 1 never answers (crashed): the round of 1 s is decided at 2 s on instance 0's queue alone.
  const config = { ...BASE, max: 3, target: 1 };
  const script: FleetScript = { reply: (i) => i === 1 ? undefined : { waiting: 4 } };
  const { log, decisions } = scale(config, script, { untilMs: 2500 });
  assertEquals(decisions.slice(1), [{ timeMs: 2000, instances: 3, signal: 4, action: "up" }]);
  assertEquals(log.map((c) => [c.timeMs, c.instance, c.type]), [[2000, 2, "provision"]]);
});

Deno.test("the autoscaler holds when no instance answers", () => {
  const { log, decisions } = scale({ ...BASE, cooldownMs: 0 }, { reply: () => undefined }, { untilMs: 5500 });
  assertEquals([log, decisions], [[], [START]]);
});

Deno.test("on SLO attainment the autoscaler adds instances below target and removes one per window above", () => {
  // Readings at 1, 2, 3, … s: 0.5 (ceil(2 × 5) = 10 proposed, max 3), 0.5 (15 proposed, at max: hold),
  // then 1s proposing one fewer — held until the window (2.5 s) holds none higher: 5 s (down), nothing
  // finished (hold, nothing proposed), 1, 1 (at 8 s the last proposal of 2, at 5 s, is out: down), 1 (at min:
  // hold).
  const config: AutoscaleConfig = {
    ...BASE,
    signal: "slo_attainment",
    target: 0.9,
    max: 3,
    cooldownMs: 2500,
  };
  const windows = [[10, 5], [10, 5], [10, 10], [10, 10], [10, 10], [0, 0], [4, 4], [4, 4], [4, 4]] as const;
  const { log, decisions } = scale(config, { reply: () => undefined }, { untilMs: 9500, windows });
  assertEquals(decisions, [
    START,
    { timeMs: 1000, instances: 3, signal: 0.5, action: "up" },
    { timeMs: 5000, instances: 2, signal: 1, action: "down" },
    { timeMs: 8000, instances: 1, signal: 1, action: "down" },
  ]);
  assertEquals(log.map((c) => [c.timeMs, c.instance, c.type]), [
    [1000, 2, "provision"],
    [5000, 2, "decommission"],
    [8000, 1, "decommission"],
  ]);
});

Deno.test("the autoscaler's ticks keep no run alive", async (t) => {
  await t.step("alone, the run ends at the start", () => {
    const { kernel, decisions } = scale(BASE, everyone(5));
    assertEquals([kernel.nowMs, kernel.liveCount, kernel.pendingCount], [0, 0, 1]);
    assertEquals(decisions, [START]);
  });
  await t.step("the run ends with the last live message, the next tick still pending", () => {
    const { kernel } = scale(BASE, everyone(1), { untilMs: 3200 });
    assertEquals([kernel.nowMs, kernel.liveCount, kernel.pendingCount], [3200, 0, 1]);
  });
});

Deno.test("the autoscaler refuses a configuration outside its fleet or bounds", async (t) => {
  const refs = [0, 1, 2] as ActorRef<LifecycleCommand>[];
  const rows: [Partial<AutoscaleConfig>, string][] = [
    [{ min: -1 }, "autoscale.min: expected an integer >= 0, got -1"],
    [{ max: 4 }, "autoscale.max: expected at most the fleet's 3 instances, got 4"],
    [{ min: 2, max: 1 }, "autoscale.max: expected an integer >= max(min, 1) = 2, got 1"],
    [{ initial: 0 }, "autoscale.initial: expected an integer in [1, 3], got 0"],
    [{ intervalMs: 0 }, "autoscale.intervalMs: expected a finite number > 0, got 0"],
    [{ cooldownMs: -5 }, "autoscale.cooldownMs: expected a finite number >= 0, got -5"],
    [{ provisionMs: Infinity }, "autoscale.provisionMs: expected a finite number >= 0, got Infinity"],
    [{ target: 0 }, "autoscale.target: expected a finite number > 0, got 0"],
    [{ signal: "slo_attainment", target: 1.5 }, "autoscale.target: expected a share in (0, 1), got 1.5"],
  ];
  for (const [over, message] of rows) {
    await t.step(message, () => {
      assertThrows(() => new Autoscaler({ ...BASE, max: 3, ...over }, refs, 0, 0), RangeError, message);
    });
  }
});
