/**
 * SLOs and request classes: goodput counts only completions that met every
 * SLO, attainment counts a drop as a miss, classes are drawn by share from a
 * stream of their own (arrivals unchanged), and the FIFO model serves the
 * higher priority first.
 */
import { record as completionRecord } from "./_records.ts";
import {
  assert,
  assertAlmostEquals,
  assertEquals,
  assertGreater,
  assertLess,
  assertStringIncludes,
} from "@std/assert";
import { MetricsCollector } from "../actors/metrics/metrics_collector.ts";
import { PriorityFifo } from "../actors/instances/priority_fifo.ts";
import type { AnyMessage, CompletionRecord, MetricsCommand, Request } from "../actors/protocol.ts";
import type { RequestClass } from "../actors/workload/request_classes.ts";
import { Kernel } from "../actors/runtime/kernel.ts";
import { type RunResult, simulate, type SimulationConfig } from "../actors/simulation.ts";
import { runCli } from "./_cli.ts";
import { scenario } from "./_scenarios.ts";

/** What a run's deliveries say per class: arrivals, completions, drops, TTFT and queue wait sums. */
interface ClassTally {
  readonly arrivals: Request[];
  readonly completed: number[];
  readonly dropped: number[];
  readonly ttftSumMs: number[];
  readonly waitSumMs: number[];
}

/** Runs `config`, tallying every request by class (index `classes`, i.e. the last, for a classless one). */
function runTallied(config: SimulationConfig): { result: RunResult; tally: ClassTally } {
  const n = (config.workload.classes?.length ?? 0) + 1;
  const zeros = () => new Array<number>(n).fill(0);
  const tally = {
    arrivals: [] as Request[],
    completed: zeros(),
    dropped: zeros(),
    ttftSumMs: zeros(),
    waitSumMs: zeros(),
  };
  const result = simulate(config, {
    onDeliver: (message) => {
      const m = message as AnyMessage;
      if (m.type === "route") tally.arrivals.push(m.request);
      else if (m.type === "dropped") tally.dropped[m.sloClass ?? n - 1]++;
      else if (m.type === "completed") {
        const c = m.record.sloClass ?? n - 1;
        tally.completed[c]++;
        tally.ttftSumMs[c] += m.record.firstTokenMs - m.record.arrivalMs;
        tally.waitSumMs[c] += m.record.startMs - m.record.arrivalMs;
      }
    },
  });
  return { result, tally };
}

const TWO_CLASSES: RequestClass[] = [{ name: "a", share: 1 }, { name: "b", share: 3 }];

Deno.test("infinite SLOs give attainment 1 and goodput equal to throughput", async (t) => {
  await t.step("FIFO, TTFT and TPOT infinite", () => {
    const r = simulate(
      scenario({ workload: { requests: 500 }, slo: { ttftMs: Infinity, tpotMs: Infinity } }),
    );
    assertEquals([r.completed, r.dropped, r.sloAttainment], [500, 0, 1]);
    assertEquals(r.goodputRps, r.throughputRps);
  });
  await t.step("batching (TPOT defined), TTFT and TPOT infinite", () => {
    const r = simulate(
      scenario({
        instances: { model: "batching" },
        workload: { requests: 300 },
        slo: { ttftMs: Infinity, tpotMs: Infinity },
      }),
    );
    assertGreater(r.tpotMeanMs!, 0);
    assertEquals([r.completed, r.sloAttainment], [300, 1]);
    assertEquals(r.goodputRps, r.throughputRps);
  });
});

Deno.test("with no SLO set goodput equals throughput and attainment is null", () => {
  const r = simulate(scenario({ workload: { requests: 500 } }));
  assertEquals(r.goodputRps, r.throughputRps);
  assertEquals([r.sloAttainment, r.classAttainment], [null, null]);
  const classed = simulate(scenario({ workload: { requests: 500, classes: TWO_CLASSES } }));
  assertEquals(classed.goodputRps, classed.throughputRps);
  assertEquals([classed.sloAttainment, classed.classAttainment], [null, { a: null, b: null }]);
});

Deno.test("a TTFT SLO at the median TTFT gives attainment near 0.5 and goodput below throughput", () => {
  const base = simulate(scenario({ workload: { requests: 4000, ratePerSec: 45 } }));
  const r = simulate(
    scenario({ workload: { requests: 4000, ratePerSec: 45 }, slo: { ttftMs: base.ttftP50Ms! } }),
  );
  assertEquals(r.dropped, 0);
  assertAlmostEquals(r.sloAttainment!, 0.5, 0.02);
  assertLess(r.goodputRps, r.throughputRps);
  // Same window: goodput / throughput is the share of completions that met the SLO.
  assertAlmostEquals(r.goodputRps / r.throughputRps, r.sloAttainment!, 1e-12);
  assertEquals(r.ttftMeanMs, base.ttftMeanMs, "an SLO changes what is counted, not the run");
});

Deno.test("a TPOT SLO below every request's TPOT is missed by all, one above it met by all", () => {
  const run = (tpotMs: number) =>
    simulate(scenario({ instances: { model: "batching" }, workload: { requests: 200 }, slo: { tpotMs } }));
  const tight = run(1e-6), loose = run(1e6);
  assertEquals([tight.sloAttainment, tight.goodputRps], [0, 0]);
  assertEquals(loose.sloAttainment, 1);
});

Deno.test("classes are drawn in proportion to their shares, every request carrying its class and priority", () => {
  const config = scenario({
    workload: { requests: 8000, classes: [{ name: "a", share: 1, priority: 2 }, { name: "b", share: 3 }] },
  });
  const { tally } = runTallied(config);
  const b = tally.arrivals.filter((r) => r.sloClass === 1).length / tally.arrivals.length;
  // σ = √(0.75 × 0.25 / 8000) ≈ 0.005: a tolerance of 4σ.
  assertAlmostEquals(b, 0.75, 0.02);
  for (const r of tally.arrivals) assertEquals(r.priority, r.sloClass === 0 ? 2 : 0);
  const plain = runTallied(scenario({ workload: { requests: 50 } })).tally.arrivals;
  assert(plain.every((r) => !("sloClass" in r) && !("priority" in r)), "no classes: the fields are absent");
});

Deno.test("classes change no arrival, length or timing (their own stream), synthetic or replayed", async (t) => {
  const cases = {
    synthetic: { workload: { requests: 2000 } },
    sessions: {
      instances: { model: "batching" },
      workload: { requests: 600, sessions: { turnsMean: 3, thinkTimeMs: 2000 } },
    },
    "generated trace": {
      instances: { model: "batching" },
      workload: { trace: { generate: { requests: 300 } } },
    },
  } as const;
  for (const [name, input] of Object.entries(cases)) {
    await t.step(name, () => {
      const without = runTallied(scenario(input));
      const withClasses = runTallied(
        scenario({ ...input, workload: { ...input.workload, classes: TWO_CLASSES } }),
      );
      const strip = (r: Request) => ({ ...r, sloClass: undefined, priority: undefined });
      assertEquals(withClasses.tally.arrivals.map(strip), without.tally.arrivals.map(strip));
      assert(withClasses.tally.arrivals.every((r) => r.sloClass !== undefined));
      for (
        const key of [
          "completed",
          "ttftMeanMs",
          "ttftP99Ms",
          "tpotMeanMs",
          "simulatedMs",
          "messages",
        ] as const
      ) {
        assertEquals(withClasses.result[key], without.result[key], key);
      }
    });
  }
});

Deno.test("the FIFO model serves a higher-priority class first: lower mean TTFT under load", () => {
  const run = (priority: number) => {
    const classes = [{ name: "hi", share: 1, priority }, { name: "lo", share: 1 }];
    const { tally } = runTallied(scenario({ workload: { requests: 4000, ratePerSec: 48, classes } }));
    const mean = (sums: number[], c: number) => sums[c] / tally.completed[c];
    return {
      ttft: [mean(tally.ttftSumMs, 0), mean(tally.ttftSumMs, 1)],
      wait: [mean(tally.waitSumMs, 0), mean(tally.waitSumMs, 1)],
    };
  };
  const prioritised = run(1), equal = run(0);
  assertLess(prioritised.ttft[0] + 20, prioritised.ttft[1]);
  assertLess(prioritised.wait[0], 0.5 * prioritised.wait[1]);
  // Without a difference in priority the two classes wait alike.
  assertAlmostEquals(equal.wait[0] / equal.wait[1], 1, 0.1);
});

Deno.test("PriorityFifo dequeues the highest priority first, in arrival order within a priority", () => {
  const queue = new PriorityFifo<{ id: number; priority?: number }>((item) => item.priority);
  const items = [{ id: 0 }, { id: 1, priority: -1 }, { id: 2, priority: 3 }, { id: 3, priority: 0 }, {
    id: 4,
    priority: 3,
  }, {
    id: 5,
    priority: 1,
  }];
  for (const item of items) queue.enqueue(item);
  assertEquals(queue.size, 6);
  const order: number[] = [];
  for (let item = queue.dequeue(); item !== undefined; item = queue.dequeue()) order.push(item.id);
  assertEquals(order, [2, 4, 5, 0, 3, 1]);
  assertEquals(queue.size, 0);
});

Deno.test("per-class attainment uses each class's own SLO, and the classes add up to the whole", () => {
  const classes = [{ name: "tight", share: 1, sloTtftMs: 60 }, { name: "free", share: 1 }];
  const { result, tally } = runTallied(scenario({ workload: { requests: 3000, ratePerSec: 45, classes } }));
  const attainment = result.classAttainment!;
  assertEquals(Object.keys(attainment), ["tight", "free"]);
  assertEquals(attainment.free, 1, "a class with no SLO of its own (and none set for the scenario) meets it");
  assertGreater(attainment.tight!, 0);
  assertLess(attainment.tight!, 0.9);
  const met = attainment.tight! * (tally.completed[0] + tally.dropped[0]) + tally.completed[1] +
    tally.dropped[1];
  assertAlmostEquals(result.sloAttainment!, met / (result.completed + result.dropped), 1e-12);
});

Deno.test("a dropped request misses its SLO, overall and in its class", () => {
  const classes = [{ name: "a", share: 1 }, { name: "b", share: 1 }];
  const { result, tally } = runTallied(scenario({
    instances: { maxQueue: 0 },
    workload: { requests: 2000, ratePerSec: 60, classes },
    slo: { ttftMs: Infinity },
  }));
  assertGreater(result.dropped, 100);
  assertAlmostEquals(result.sloAttainment!, result.completed / (result.completed + result.dropped), 1e-12);
  for (const [c, name] of ["a", "b"].entries()) {
    assertGreater(tally.dropped[c], 0);
    assertAlmostEquals(
      result.classAttainment![name]!,
      tally.completed[c] / (tally.completed[c] + tally.dropped[c]),
      1e-12,
    );
  }
});

Deno.test("the collector's SLO rule: TTFT ≤ its SLO, and TPOT ≤ its SLO unless one output token", () => {
  const kernel = new Kernel();
  const collector = new MetricsCollector(1, {
    slo: { ttftMs: 10, tpotMs: 2 },
    classes: [{ name: "x", share: 1, sloTtftMs: 5 }, { name: "y", share: 1 }],
  });
  const ref = kernel.spawn<MetricsCommand>("metrics", collector);
  const record = (over: Partial<CompletionRecord>): CompletionRecord =>
    completionRecord({ promptTokens: 1, ...over });
  const records = [
    record({ sloClass: 1 }), // TTFT 10 = SLO, one output token: met
    record({ sloClass: 1, outputTokens: 3, endMs: 14 }), // TPOT 2 = SLO: met
    record({ sloClass: 1, outputTokens: 3, endMs: 15 }), // TPOT 2.5: missed
    record({ sloClass: 0 }), // TTFT 10 over the class's 5: missed
    record({ sloClass: 0, firstTokenMs: 5, endMs: 5 }), // met
  ];
  for (const r of records) kernel.send(ref, { type: "completed", record: r });
  kernel.send(ref, {
    type: "dropped",
    requestId: 9,
    instance: 0,
    timeMs: 1,
    reason: "queue_full",
    sloClass: 0,
  });
  kernel.run();
  const s = collector.summary();
  assertEquals(s.sloAttainment, 3 / 6);
  assertEquals(s.classAttainment, { x: 1 / 3, y: 2 / 3 });
  assertAlmostEquals(s.goodputRps, 3 / 0.015);
});

Deno.test("--slo-ttft-ms: inf runs with attainment 1; 0 and abc exit 2 naming the flag, value and expectation", async (t) => {
  await t.step("inf", async () => {
    const { code, stdout, stderr } = await runCli(
      "--requests",
      "300",
      "--slo-ttft-ms",
      "inf",
      "--slo-tpot-ms",
      "50",
      "--json",
    );
    assertEquals(code, 0, stderr);
    const r = JSON.parse(stdout);
    assertEquals([r.sloAttainment, r.goodputRps], [1, r.throughputRps]);
  });
  await t.step("the table shows the SLO and its attainment", async () => {
    const { code, stdout, stderr } = await runCli("--requests", "300", "--slo-ttft-ms", "inf");
    assertEquals(code, 0, stderr);
    assertStringIncludes(stdout, "SLO           TTFT ≤ inf ms · SLO attainment 100.0%");
    assert(!stdout.includes("no SLO set"), stdout);
  });
  for (
    const [value, message] of [
      ["0", "error: --slo-ttft-ms: expected a number > 0, got 0"],
      ["abc", 'error: --slo-ttft-ms: expected a number or inf, got "abc"'],
      ["-5", "error: --slo-ttft-ms: expected a number > 0, got -5"],
    ]
  ) {
    await t.step(value, async () => {
      const { code, stdout, stderr } = await runCli("--slo-ttft-ms", value);
      assertEquals([code, stdout], [2, ""]);
      assertEquals(stderr.trim(), message);
    });
  }
});
