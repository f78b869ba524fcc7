import { assert, assertEquals, assertThrows } from "@std/assert";
import { variantParameter } from "../scenarios/scenario/policy_variants.ts";
import { REPORT_NAMES } from "../scenarios/report/sections.ts";
import { policyCell } from "../scenarios/report/sweep_summary.ts";
import { countRuns, MAX_RUNS, parseSweep } from "../scenarios/sweep_runner/sweep_spec.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";

const valid = {
  axes: { "workload.ratePerSec": [10, 20], "instances.count": [2, 4, 8] },
  policies: [{ name: "round_robin" }, { name: "hybrid", threshold: [0, 1] }],
  seeds: [1, 2],
};

Deno.test("a sweep expands to points × policy variants × seeds, first axis slowest", () => {
  const sweep = parseSweep(valid);
  assertEquals(sweep.points.length, 6);
  assertEquals(sweep.variants.map((v) => v.label), ["round_robin", "hybrid(thr=0)", "hybrid(thr=1)"]);
  assertEquals(sweep.runs.length, 36);
  assertEquals(sweep.points[1].values, { "workload.ratePerSec": 10, "instances.count": 4 });
  assertEquals(sweep.axisColumns, ["ratePerSec", "count"]);
  const run = sweep.runs[5];
  assertEquals([run.point, run.variant, run.seed], [0, 2, 2]);
  assertEquals([run.config.seed, run.config.policy, run.config.instances.count], [2, {
    name: "hybrid",
    threshold: 1,
    hostCredit: 0.8,
  }, 2]);
});

Deno.test("policy parameters become variants with their own labels and reach the scenario", () => {
  const sweep = parseSweep({
    ...valid,
    policies: [{ name: "llmd_weighted" }, { name: "llmd_weighted", prefixWeight: 1 }],
  });
  assertEquals(sweep.variants.map((v) => v.label), ["llmd_weighted", "llmd_weighted(prefixWeight=1)"]);
  assertEquals(sweep.runs.find((r) => r.variant === 1)!.config.policy.prefixWeight, 1);
});

Deno.test("any policy parameter may list values: one variant per combination, first parameter slowest", () => {
  const sweep = parseSweep({
    ...valid,
    policies: [{ name: "llmd_weighted", prefixWeight: [1, 2], queueWeight: [0, 2], kvWeight: 1 }, {
      name: "hybrid",
    }],
  });
  assertEquals(sweep.variants.map((v) => v.label), [
    "llmd_weighted(prefixWeight=1,queueWeight=0,kvWeight=1)",
    "llmd_weighted(prefixWeight=1,kvWeight=1)",
    "llmd_weighted(prefixWeight=2,queueWeight=0,kvWeight=1)",
    "llmd_weighted(prefixWeight=2,kvWeight=1)",
    "hybrid(thr=1)",
  ]);
  assertEquals(sweep.variants[1].params, { prefixWeight: 1, queueWeight: 2, kvWeight: 1 });
  assertEquals(sweep.variants[4].params, {});
  const policy = sweep.runs.find((r) => r.variant === 2)!.config.policy;
  assertEquals([policy.prefixWeight, policy.queueWeight, policy.kvWeight], [2, 0, 1]);
});

Deno.test("the summary CSV's policy and threshold cells: the label less the threshold, and the threshold", () => {
  const sweep = parseSweep({
    ...valid,
    policies: [{ name: "round_robin" }, { name: "hybrid" }, { name: "hybrid", threshold: 2 }, {
      name: "sglang_cache_aware",
      balanceAbs: 32,
    }],
  });
  const cells = sweep.variants.map((v) => [policyCell(v), variantParameter(v, "threshold")]);
  assertEquals(cells, [
    ["round_robin", undefined],
    ["hybrid", 1],
    ["hybrid", 2],
    ["sglang_cache_aware(balanceAbs=32)", undefined],
  ]);
});

Deno.test("a sweep declares its report sections; none by default", () => {
  assertEquals(parseSweep(valid).report, []);
  const sweep = parseSweep({
    ...valid,
    axes: { "workload.ratePerSec": [10, 20] },
    policies: [{ name: "round_robin" }, { name: "least_load" }, { name: "prefix_aware" }, {
      name: "hybrid",
      threshold: [1, 2],
    }],
    report: ["original-study", "load"],
  });
  assertEquals(sweep.report, ["original-study", "load"]);
});

Deno.test("the committed sweeps are valid and declare known report sections", async () => {
  for await (const entry of Deno.readDir(new URL("../scenarios/sweeps/", import.meta.url))) {
    if (!entry.name.endsWith(".json")) continue; // a study's prose sits beside its sweep file
    const sweep = parseSweep(
      JSON.parse(await Deno.readTextFile(new URL(`../scenarios/sweeps/${entry.name}`, import.meta.url))),
    );
    assertEquals(sweep.report.length > 0, true, entry.name);
  }
});

Deno.test("the committed default and quick sweeps are valid and quick is a corner of default", async () => {
  const read = async (name: string) =>
    parseSweep(
      JSON.parse(await Deno.readTextFile(new URL(`../scenarios/sweeps/${name}.json`, import.meta.url))),
    );
  const full = await read("default"), quick = await read("quick");
  assertEquals(full.points.length, 200);
  assertEquals(full.variants.length, 10);
  assertEquals(full.seeds, [1, 2, 3]);
  const key = (p: { values: Record<string, unknown> }) => JSON.stringify(p.values);
  const fullKeys = new Set(full.points.map(key));
  assertEquals(quick.points.every((p) => fullKeys.has(key(p))), true);
});

Deno.test("invalid sweep specs name the field", async (t) => {
  const cases: [unknown, string][] = [
    [
      { ...valid, axes: { "workload.colour": [1] } },
      'sweep.axes["workload.colour"][0]: unknown field',
    ],
    [{ ...valid, axes: { "workload.prefix.zipf": [] } }, 'sweep.axes["workload.prefix.zipf"]'],
    [
      { ...valid, axes: { "workload.prefix.zipf": [1, -2] } },
      'sweep.axes["workload.prefix.zipf"][1]: expected a number >= 0, got -2',
    ],
    [{ ...valid, axes: {} }, "sweep.axes: expected at least one axis"],
    [{ ...valid, axes: { seed: [1, 2] } }, 'sweep.axes["seed"]: not an axis'],
    [{ ...valid, seeds: [] }, "sweep.seeds"],
    [
      { ...valid, policies: [{ name: "hybrid", threshold: [1, -1] }] },
      "sweep.policies[0].threshold[1]: expected a number >= 0, got -1",
    ],
    [
      { ...valid, policies: [{ name: "sglang_cache_aware", cacheThreshold: 2 }] },
      "sweep.policies[0].cacheThreshold: expected a number in [0, 1], got 2",
    ],
    [
      { ...valid, policies: [{ name: "chwbl", ringPoints: [8, 2.5] }] },
      "sweep.policies[0].ringPoints[1]: expected an integer >= 1, got 2.5",
    ],
    [
      { ...valid, policies: [{ name: "hybrid", threshold: [] }] },
      "sweep.policies[0].threshold: expected a number or a non-empty list of numbers, got []",
    ],
    [
      { ...valid, policies: [{ name: "hybrid", threshold: "1" }] },
      'sweep.policies[0].threshold: expected a number or a non-empty list of numbers, got "1"',
    ],
    [
      { ...valid, policies: [{ name: "hybrid", thresholds: [1, 2] }] },
      "sweep.policies[0].thresholds: not a parameter of hybrid (its parameters: threshold, hostCredit)",
    ],
    [
      { ...valid, policies: [{ name: "hybrid", threshold: [1, 1] }] },
      "sweep.policies: hybrid(thr=1) is listed twice",
    ],
    [{ ...valid, policies: [{ name: "teleport" }] }, "sweep.policies[0].name"],
    [{ ...valid, extra: true }, "sweep.extra: unknown field"],
    [
      { ...valid, policies: [{ name: "chwbl", prefixWeight: 2 }] },
      "sweep.policies[0].prefixWeight: not a parameter of chwbl",
    ],
    [{ ...valid, focus: "router.cacheView" }, "sweep.focus: expected one of the axes"],
    [
      { ...valid, axes: { "workload.prefix.zipf": [1, 1] } },
      'sweep.axes["workload.prefix.zipf"]: lists 1 twice',
    ],
    [{ ...valid, seeds: [1, 1] }, "sweep.seeds: lists 1 twice"],
    [
      { ...valid, policies: [{ name: "round_robin", threshold: [1, 2] }] },
      "sweep.policies[0].threshold: not a parameter of round_robin (its parameters: none)",
    ],
    [
      { ...valid, report: ["load", "charts"] },
      `sweep.report[1]: unknown report section "charts" (report sections: ${REPORT_NAMES.join(", ")})`,
    ],
    [{ ...valid, report: ["load", "load"] }, 'sweep.report[1]: lists "load" twice'],
    [
      { ...valid, report: ["original-study"] },
      'sweep.report[0]: "original-study" needs the policies of the original study; the sweep lacks least_load, prefix_aware',
    ],
    [
      { ...valid, report: ["original-charts"] },
      'sweep.report[0]: "original-charts" needs the axes workload.ratePerSec, workload.prefix.zipf, ' +
      "workload.prefix.sharedFrac and the policies of the original study; the sweep lacks workload.prefix.zipf",
    ],
    [
      { ...valid, axes: { "instances.count": [2, 4] }, report: ["load"] },
      'sweep.report[0]: "load" needs a load axis (workload.ratePerSec or workload.trace.speed)',
    ],
    [{ ...valid, report: ["focus"] }, 'sweep.report[0]: "focus" needs sweep.focus, the axis to chart'],
    [
      {
        ...valid,
        axes: {
          "workload.ratePerSec": [10],
          "workload.prefix.zipf": [1],
          "workload.prefix.sharedFrac": [0.5],
        },
        policies: [{ name: "round_robin" }, { name: "least_load" }, { name: "prefix_aware" }, {
          name: "hybrid",
        }],
        report: ["original-charts", "load"],
      },
      'sweep.report[1]: "load" and "original-charts" both draw plots/load_imbalance.png; declare one of them',
    ],
    [{ ...valid, report: "load" }, "sweep.report: expected an array"],
    [{ ...valid, seeds: [1.5] }, "sweep.seeds[0]: expected an integer, got 1.5"],
    [{ policies: valid.policies, seeds: [1] }, "sweep.axes: expected an object, got nothing"],
    [
      { ...valid, base: { workload: { requests: 0 } } },
      "sweep.base.workload.requests: expected a number >= 1, got 0",
    ],
    // The base's policy would leak into every variant that leaves a parameter out.
    [
      { ...valid, base: { policy: { name: "hybrid", threshold: 8 } } },
      "sweep.base.policy: not a sweep field; each run's policy is one variant of sweep.policies",
    ],
    [
      { ...valid, axes: { "policy.balanceAbs": [8, 16] } },
      'sweep.axes["policy.balanceAbs"]: not an axis; use sweep.seeds and sweep.policies instead',
    ],
    // JSON.parse makes `__proto__` an own key, which a schema would drop silently.
    [
      { ...valid, policies: [JSON.parse('{"name": "hybrid", "__proto__": {"threshold": 5}}')] },
      "sweep.policies[0].__proto__: not a field",
    ],
    [
      { ...valid, policies: [{ name: "hybrid", threshold: [1, "2"] }] },
      'sweep.policies[0].threshold[1]: expected a number, got "2"',
    ],
  ];
  for (const [input, message] of cases) {
    await t.step(message, () => {
      assertThrows(() => parseSweep(input), UsageError, message);
    });
  }
});

Deno.test("a plugin cannot pass for a built-in policy in a sweep: its name is its label", () => {
  const spec = { axes: { "workload.ratePerSec": [10] }, policies: [{ name: "round_robin" }], seeds: [1] };
  for (
    const [name, message] of [
      ["least_load", "the plugin's name \"least_load\" is a built-in policy's"],
      ["hybrid(thr=1)", "the plugin's name \"hybrid(thr=1)\" looks like a built-in policy's label"],
    ]
  ) {
    assertThrows(() => parseSweep(spec, { name, url: "file:///tmp/plugin.ts" }), UsageError, message);
  }
  assertEquals(
    parseSweep(spec, { name: "mine", url: "file:///tmp/plugin.ts" }).variants.map((v) => v.label),
    [
      "round_robin",
      "mine",
    ],
  );
});

Deno.test("a named axis value sets several scenario fields at once; the CSV shows its name", () => {
  const sweep = parseSweep({
    axes: {
      fleet: [
        { name: "4 aggregated", scenario: { instances: { model: "batching", count: 4 } } },
        {
          name: "2P+2D",
          scenario: {
            instances: {
              model: "batching",
              pools: [{ role: "prefill", count: 2 }, { role: "decode", count: 2 }],
            },
            decodePolicy: { name: "least_load" },
          },
        },
      ],
      "workload.ratePerSec": [10, 20],
    },
    policies: [{ name: "round_robin" }],
    seeds: [1],
  });
  assertEquals(sweep.points.map((p) => p.values.fleet), ["4 aggregated", "4 aggregated", "2P+2D", "2P+2D"]);
  assertEquals(sweep.axisColumns, ["fleet", "ratePerSec"]);
  const split = sweep.runs[2].config;
  assertEquals([split.instances.count, split.instances.pools?.map((p) => p.role), split.decodePolicy?.name], [
    4,
    ["prefill", "decode"],
    "least_load",
  ]);
  assertEquals(sweep.runs[3].config.workload.ratePerSec, 20);
  assertEquals(sweep.runs[0].config.instances.pools, undefined);
});

Deno.test("named axis values are validated as scenarios and by name", async (t) => {
  const named = (values: unknown[]) => ({
    axes: { fleet: values },
    policies: [{ name: "round_robin" }],
    seeds: [1],
  });
  const cases: [unknown, string][] = [
    [
      named([{ name: "bad", scenario: { instances: { count: 0 } } }]),
      'sweep.axes["fleet"][0].scenario.instances.count: expected a number >= 1, got 0',
    ],
    [
      named([{ name: "a", scenario: {} }, { name: "a", scenario: { seed: 2 } }]),
      'sweep.axes["fleet"]: lists "a" twice',
    ],
    [named([{ name: "", scenario: {} }]), 'sweep.axes.fleet[0].name: expected a value >= 1, got ""'],
    [named([{ name: "x", scenario: {}, extra: 1 }]), "sweep.axes.fleet[0].extra: unknown field"],
  ];
  for (const [input, message] of cases) {
    await t.step(message, () => {
      assertThrows(() => parseSweep(input), UsageError, message);
    });
  }
});

Deno.test("the committed disaggregation studies are valid sweeps with the disaggregation report", async () => {
  for (const name of ["disaggregation", "disaggregation_conversation"]) {
    const sweep = parseSweep(
      JSON.parse(await Deno.readTextFile(new URL(`../scenarios/sweeps/${name}.json`, import.meta.url))),
    );
    assertEquals(sweep.report, ["disaggregation"]);
    assertEquals(sweep.axes[0], "fleet");
    // Every fleet has 8 instances: the comparison is at equal GPU count.
    for (const run of sweep.runs) assertEquals(run.config.instances.count, 8);
  }
});

Deno.test("a sweep's run count is points × policy variants × seeds, counted from its lists as it expands", async (t) => {
  const plugin = { name: "mine", url: "file:///tmp/plugin.ts" };
  const cases: [string, unknown, typeof plugin | undefined, [bigint, bigint, bigint]][] = [
    ["two axes, a parameter list", valid, undefined, [6n, 3n, 2n]],
    [
      "two parameter lists multiply",
      {
        ...valid,
        policies: [{ name: "round_robin" }, { name: "hybrid", threshold: [0, 1, 2], hostCredit: [0.5, 1] }],
      },
      undefined,
      [6n, 7n, 2n],
    ],
    ["a plugin adds a variant", valid, plugin, [6n, 4n, 2n]],
  ];
  for (const [name, spec, withPlugin, [points, variants, seeds]] of cases) {
    await t.step(name, () => {
      const count = countRuns(spec, withPlugin !== undefined);
      assertEquals([count.points, count.variants, count.seeds], [points, variants, seeds]);
      assertEquals(count.runs, points * variants * seeds);
      assertEquals(BigInt(parseSweep(spec, withPlugin).runs.length), count.runs);
    });
  }
});

Deno.test("a sweep past maxRuns is refused in one line naming its size and the limit; at the limit it expands", () => {
  assertThrows(
    () => parseSweep(valid, undefined, { maxRuns: 35 }),
    UsageError,
    "sweep: 36 runs (6 points × 3 policy variants × 2 seeds), expected at most 35; " +
      "shorten the axes, policies or seeds, or raise the limit with --max-runs N",
  );
  assertEquals(parseSweep(valid, undefined, { maxRuns: 36 }).runs.length, 36);
});

Deno.test("a grid past 2^53 runs is counted exactly and refused before any axis is expanded or checked", () => {
  // Nine axes of 99 values: 99^9 runs, which a double rounds (to …640,960); the axes are not even
  // scenario fields, so only a check made before the axes are read can give this message.
  const axes = Object.fromEntries([...Array(9).keys()].map((i) => [`a${i}`, [...Array(99).keys()]]));
  const spec = { axes, policies: [{ name: "round_robin" }], seeds: [1] };
  assertEquals(countRuns(spec).runs, 99n ** 9n);
  assertThrows(
    () => parseSweep(spec),
    UsageError,
    "sweep: 913,517,247,483,640,899 runs (913,517,247,483,640,899 points × 1 policy variant × 1 seed), " +
      "expected at most 100,000;",
  );
});

Deno.test("every committed sweep is a tenth of MAX_RUNS or less, and its count is its expansion", async (t) => {
  const dir = new URL("../scenarios/sweeps/", import.meta.url);
  const files = [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => n.endsWith(".json")).sort();
  assert(files.includes("default.json") && files.length >= 10, `sweep files: ${files}`);
  for (const file of files) {
    await t.step(file, async () => {
      const spec = JSON.parse(await Deno.readTextFile(new URL(file, dir)));
      const runs = countRuns(spec).runs;
      assert(runs * 10n <= BigInt(MAX_RUNS), `${file}: ${runs} runs, limit ${MAX_RUNS}`);
      assertEquals(BigInt(parseSweep(spec).runs.length), runs);
    });
  }
});
