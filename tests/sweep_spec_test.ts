import { assertEquals, assertThrows } from "@std/assert";
import { parseSweep } from "../scenarios/sweep_spec.ts";
import { UsageError } from "../scenarios/usage_error.ts";

const valid = {
  axes: { "workload.ratePerSec": [10, 20], "instances.count": [2, 4, 8] },
  policies: [{ name: "round_robin" }, { name: "hybrid", thresholds: [0, 1] }],
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
    [{ ...valid, policies: [{ name: "hybrid", thresholds: [-1] }] }, "sweep.policies[0].thresholds[0]"],
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
      { ...valid, policies: [{ name: "round_robin", thresholds: [1, 2] }] },
      "sweep.policies[0].thresholds: only hybrid has thresholds",
    ],
    [{ ...valid, seeds: [1.5] }, "sweep.seeds[0]: expected an integer, got 1.5"],
    [{ policies: valid.policies, seeds: [1] }, "sweep.axes: expected an object, got nothing"],
    [
      { ...valid, base: { workload: { requests: 0 } } },
      "sweep.base.workload.requests: expected a number >= 1, got 0",
    ],
  ];
  for (const [input, message] of cases) {
    await t.step(message, () => {
      assertThrows(() => parseSweep(input), UsageError, message);
    });
  }
});
