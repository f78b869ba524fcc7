/**
 * @module
 * The sweep format: a base scenario, axes (any scenario field, by dot path,
 * with the values to try), policy variants, seeds and the report sections to
 * write. Validated with errors that name the field; expanded into the list of runs.
 */
import { z } from "zod";
import { POLICY_NAMES } from "../../actors/policies/mod.ts";
import {
  checkTraceFile,
  deepMerge,
  describeIssue,
  parseScenario,
  resolveTracePath,
  scenarioPath,
} from "../scenario/scenario.ts";
import {
  expandPolicy,
  pluginVariant,
  type PolicyEntry,
  type PolicyVariant,
} from "../scenario/policy_variants.ts";
import { REPORT_NAMES, reportSection, type ReportSubject } from "../report/sections.ts";
import type { Sweep, SweepPlugin, SweepPoint, SweepRun } from "../scenario/sweep_types.ts";
import { UsageError } from "../cli/usage_error.ts";

/**
 * A named axis value: a name for the CSV and the charts, and scenario fields
 * merged over the base (`{ "name": "4P+4D", "scenario": { "instances": … } }`),
 * for an axis that changes several fields at once (a fleet's shape, a
 * workload). Its axis is a name, not a scenario field.
 */
const namedValue = z.strictObject({
  name: z.string().min(1),
  scenario: z.record(z.string(), z.unknown()),
});

const sweepSchema = z.strictObject({
  description: z.string().default(""),
  base: z.record(z.string(), z.unknown()).default({}),
  axes: z.record(z.string(), z.array(z.union([z.number(), z.string(), namedValue])).min(1)).refine(
    (axes) => Object.keys(axes).length > 0,
    { message: "expected at least one axis" },
  ),
  // Parameters are checked against the policy registry in expandPolicy, which names the bounds.
  policies: z.array(z.object({ name: z.enum(POLICY_NAMES) }).catchall(z.unknown())).min(1),
  seeds: z.array(z.number().int().min(0)).min(1),
  focus: z.string().optional(),
  // Names from the report-section registry (scenarios/report/sections.ts), checked in checkReport.
  report: z.array(z.string()).optional(),
});

/** A sweep spec as the schema reads it, before its checks against the scenario, registries and itself. */
type SweepSpec = z.output<typeof sweepSchema>;

export type { PolicyVariant, Sweep, SweepPlugin, SweepPoint, SweepRun } from "../scenario/sweep_types.ts";

/** A named axis value, as the schema reads it. */
type NamedValue = z.output<typeof namedValue>;

/** An axis value: a scenario field's value, or a named set of fields. */
type AxisValue = SweepSpec["axes"][string][number];

const isNamed = (value: AxisValue): value is NamedValue => typeof value === "object";

/** What an axis value sets in the scenario: the field at the axis's path, or a named value's fields. */
function axisFields(axis: string, value: AxisValue): Record<string, unknown> {
  return isNamed(value) ? value.scenario : nested(axis, value);
}

/** An axis value as the CSV and the charts show it: a named value's name. */
const axisLabel = (value: AxisValue): number | string => isNamed(value) ? value.name : value;

/** Axes that are not scenario fields: seeds and policies have lists of their own. */
const isReservedAxis = (axis: string) => axis === "seed" || axis === "policy" || axis.startsWith("policy.");

/**
 * Most runs a sweep may expand to unless raised (`deno task sweep --max-runs N`):
 * 100,000, about 17 times the default grid's 6,000. The default sweep simulates
 * ≈ 190 runs/s on 2 cores and a sweep holds ≈ 2 kB per run (its parsed scenario
 * and its result) until it writes, so 100,000 runs take ≈ 9 minutes and
 * ≈ 200 MB there; a grid ten times that is an hour and a half and gigabytes, more
 * often a slip (one axis too many, a list of a thousand) than an intent.
 */
export const MAX_RUNS = 100_000;

/** How many runs a sweep expands to, and why: exact (the product of a few long lists passes 2^53). */
export interface RunCount {
  /** Points of the grid: the product of the axes' lengths. */
  readonly points: bigint;
  /** Policy variants: per entry of `policies`, the product of its parameter lists' lengths; a plugin adds one. */
  readonly variants: bigint;
  /** Seeds: the length of `seeds`. */
  readonly seeds: bigint;
  /** points × variants × seeds. */
  readonly runs: bigint;
}

/**
 * Counts the runs of a sweep spec from the lengths of its lists alone,
 * expanding nothing, so a grid too large to expand is refused at once.
 * @param plugin Whether a router plugin adds a variant.
 * @throws {UsageError} naming the first field the schema refuses.
 * @example
 * ```ts
 * countRuns({ axes: { "workload.ratePerSec": [10, 20] }, policies: [{ name: "hybrid", threshold: [0, 1, 2] }], seeds: [1, 2] }).runs; // 12n
 * ```
 */
export function countRuns(input: unknown, plugin = false): RunCount {
  return runCountOf(readSpec(input), plugin);
}

/** {@linkcode countRuns} of a spec the schema has read. */
function runCountOf(spec: SweepSpec, plugin: boolean): RunCount {
  const points = Object.values(spec.axes).reduce((n, values) => n * BigInt(values.length), 1n);
  const variants = spec.policies.reduce(
    (n, { name: _, ...params }) =>
      n + Object.values(params).reduce<bigint>((m, v) => m * BigInt(Array.isArray(v) ? v.length : 1), 1n),
    plugin ? 1n : 0n,
  );
  const seeds = BigInt(spec.seeds.length);
  return { points, variants, seeds, runs: points * variants * seeds };
}

/**
 * Refuses a sweep of more than `maxRuns` runs, in one line naming its size,
 * how it comes about and the limit.
 * @throws {UsageError} when `count.runs` exceeds `maxRuns`.
 */
export function checkRunCount(count: RunCount, maxRuns: number): void {
  if (count.runs <= BigInt(maxRuns)) return;
  const n = (x: bigint | number) => x.toLocaleString("en-US");
  const of = (x: bigint, what: string) => `${n(x)} ${what}${x === 1n ? "" : "s"}`;
  const why = [of(count.points, "point"), of(count.variants, "policy variant"), of(count.seeds, "seed")];
  throw new UsageError(
    `sweep: ${n(count.runs)} runs (${why.join(" × ")}), expected at most ${n(maxRuns)}; ` +
      `shorten the axes, policies or seeds, or raise the limit with --max-runs N`,
  );
}

/** Options of {@linkcode parseSweep}. */
export interface ParseSweepOptions {
  /** Most runs the sweep may expand to; a larger grid is refused before anything is expanded. @default MAX_RUNS */
  readonly maxRuns?: number;
}

/**
 * Validates a sweep spec and expands it. Its size is checked first, from
 * the lengths of its lists (see {@linkcode countRuns}); then every run's
 * scenario is parsed, and its trace path (if any) resolved against the
 * caller's directory.
 * @throws {UsageError} naming the invalid field (`sweep.axes["workload.prefix.zipf"][2]: …`),
 *   or for a grid of more than `options.maxRuns` runs.
 */
export function parseSweep(input: unknown, plugin?: SweepPlugin, options: ParseSweepOptions = {}): Sweep {
  const spec = readSpec(input);
  checkRunCount(runCountOf(spec, plugin !== undefined), options.maxRuns ?? MAX_RUNS);
  const axes = Object.keys(spec.axes);
  checkAxes(spec, axes);
  const variants = spec.policies.flatMap((entry, i) => expandPolicy(entry as PolicyEntry, i));
  if (plugin) variants.push(pluginVariant(plugin));
  const labels = variants.map((v) => v.label);
  const duplicate = labels.find((l, i) => labels.indexOf(l) !== i);
  if (duplicate) throw new UsageError(`sweep.policies: ${duplicate} is listed twice`);
  const report = spec.report ?? [];
  checkReport(report, { axes, variants, focus: spec.focus });
  const points = gridPoints(spec, axes);
  return {
    description: spec.description,
    focus: spec.focus,
    report,
    axes,
    axisColumns: columnNames(axes),
    points,
    variants,
    seeds: spec.seeds,
    runs: expandRuns(spec, axes, points, variants),
  };
}

/** The spec as the schema reads it. @throws {UsageError} naming the first invalid field. */
function readSpec(input: unknown): SweepSpec {
  const proto = protoKeyPath(input, ["sweep"]);
  if (proto !== undefined) {
    throw new UsageError(`${proto}: not a field (a sweep file never sets an object's prototype)`);
  }
  const base = (input as { base?: unknown } | null)?.base;
  if (base !== null && typeof base === "object" && Object.hasOwn(base, "policy")) {
    throw new UsageError(
      "sweep.base.policy: not a sweep field; each run's policy is one variant of sweep.policies (list its parameters there)",
    );
  }
  const parsed = sweepSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const path = issue.code === "unrecognized_keys" ? [...issue.path, issue.keys[0]] : issue.path;
  const name = fieldName(["sweep", ...path.map((k) => typeof k === "symbol" ? String(k) : k)]);
  throw new UsageError(`${name}: ${describeIssue(issue, input, path)}`);
}

/** The path of the first own `__proto__` key in `value` (JSON.parse makes one an own property), if any. */
function protoKeyPath(value: unknown, path: readonly (string | number)[]): string | undefined {
  if (value === null || typeof value !== "object") return undefined;
  for (const [key, child] of Object.entries(value)) {
    const here = [...path, Array.isArray(value) ? Number(key) : key];
    if (key === "__proto__") return fieldName(here);
    const found = protoKeyPath(child, here);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** `sweep.policies[0].threshold`, `sweep.axes["workload.prefix.zipf"]`: a path as messages name it. */
function fieldName(path: readonly (string | number)[]): string {
  return path.map((k, i) =>
    typeof k === "number"
      ? `[${k}]`
      : i === 0
      ? String(k)
      : /^[A-Za-z_]\w*$/.test(String(k))
      ? `.${String(k)}`
      : `[${JSON.stringify(k)}]`
  ).join("");
}

/**
 * Checks the base and every axis value as a scenario, the focus, and that no
 * axis or seed is listed twice.
 * @throws {UsageError} naming the axis (and the value's index).
 */
function checkAxes(spec: SweepSpec, axes: readonly string[]): void {
  for (const axis of axes) {
    if (isReservedAxis(axis)) {
      throw new UsageError(`sweep.axes["${axis}"]: not an axis; use sweep.seeds and sweep.policies instead`);
    }
  }
  // Validate the base, then every axis value on its own, naming the axis.
  parseScenario(spec.base, (path) => `sweep.base${scenarioPath(path).slice("scenario".length)}`);
  for (const axis of axes) {
    spec.axes[axis].forEach((value, i) => {
      parseScenario(deepMerge(spec.base, axisFields(axis, value)), (path) => {
        if (isNamed(value)) return `sweep.axes["${axis}"][${i}].${scenarioPath(path)}`;
        const field = path.join(".");
        return field === axis || axis.startsWith(`${field}.`)
          ? `sweep.axes["${axis}"][${i}]`
          : `sweep.axes["${axis}"] (unknown scenario field ${scenarioPath(path)})`;
      });
    });
  }
  if (spec.focus !== undefined && !axes.includes(spec.focus)) {
    throw new UsageError(
      `sweep.focus: expected one of the axes (${axes.join(", ")}), got ${JSON.stringify(spec.focus)}`,
    );
  }
  for (const axis of axes) {
    const values = spec.axes[axis].map((v) => JSON.stringify(axisLabel(v)));
    const twice = values.find((v, i) => values.indexOf(v) !== i);
    if (twice) throw new UsageError(`sweep.axes["${axis}"]: lists ${twice} twice`);
  }
  const seedTwice = spec.seeds.find((v, i) => spec.seeds.indexOf(v) !== i);
  if (seedTwice !== undefined) throw new UsageError(`sweep.seeds: lists ${seedTwice} twice`);
}

/**
 * Checks the report sections a sweep declares: each is one of the registry's,
 * listed once, and has what it needs (axes, policies, focus); no two draw the same chart.
 * @throws {UsageError} naming `sweep.report[i]`, the value and the valid names or what is lacking.
 */
function checkReport(report: readonly string[], subject: ReportSubject): void {
  const drawnBy = new Map<string, string>();
  report.forEach((name, i) => {
    const section = reportSection(name);
    if (section === undefined) {
      throw new UsageError(
        `sweep.report[${i}]: unknown report section ${JSON.stringify(name)} (report sections: ${
          REPORT_NAMES.join(", ")
        })`,
      );
    }
    if (report.indexOf(name) !== i) throw new UsageError(`sweep.report[${i}]: lists "${name}" twice`);
    const lacking = section.check(subject);
    if (lacking !== undefined) throw new UsageError(`sweep.report[${i}]: "${name}" ${lacking}`);
    for (const chart of section.charts) {
      const other = drawnBy.get(chart);
      if (other !== undefined) {
        throw new UsageError(
          `sweep.report[${i}]: "${name}" and "${other}" both draw plots/${chart}; declare one of them`,
        );
      }
      drawnBy.set(chart, name);
    }
  });
}

/** Every point of the grid, the first axis varying slowest. */
function gridPoints(spec: SweepSpec, axes: readonly string[]): SweepPoint[] {
  const points: SweepPoint[] = [];
  const grid = (i: number, values: Record<string, number | string>) => {
    if (i === axes.length) {
      points.push({ index: points.length, values: { ...values } });
      return;
    }
    for (const value of spec.axes[axes[i]]) grid(i + 1, { ...values, [axes[i]]: axisLabel(value) });
  };
  grid(0, {});
  return points;
}

/** Every run: by point, then variant, then seed; each scenario parsed and its trace path resolved. */
function expandRuns(
  spec: SweepSpec,
  axes: readonly string[],
  points: readonly SweepPoint[],
  variants: readonly PolicyVariant[],
): SweepRun[] {
  const runs: SweepRun[] = [];
  for (const point of points) {
    let scenario = spec.base as unknown;
    for (const axis of axes) {
      const value = spec.axes[axis].find((v) => axisLabel(v) === point.values[axis])!;
      scenario = deepMerge(scenario, axisFields(axis, value));
    }
    variants.forEach((variant, v) => {
      // A plugin replaces the scenario's policy.
      const policy = variant.pluginUrl ? {} : { name: variant.name, ...variant.params };
      for (const seed of spec.seeds) {
        const config = resolveTracePath(parseScenario(deepMerge(scenario, { seed, policy })));
        runs.push({ point: point.index, variant: v, seed, config, pluginUrl: variant.pluginUrl });
      }
    });
  }
  return runs;
}

/**
 * Checks what a sweep's runs read before the first one starts: every trace
 * file exists and is a file (every point's scenario already parsed in
 * {@linkcode parseSweep}).
 * @throws {UsageError} naming the spec field and the path.
 */
export async function checkSweepInputs(sweep: Sweep): Promise<void> {
  const checked = new Set<string>();
  for (const run of sweep.runs) {
    const path = run.config.workload.trace?.path;
    if (path === undefined || checked.has(path)) continue;
    checked.add(path);
    const field = "workload.trace.path";
    const axis = sweep.axes.find((a) => a === field || field.startsWith(`${a}.`));
    await checkTraceFile(
      run.config,
      axis === undefined ? "sweep.base.workload.trace.path" : `sweep.axes["${axis}"]`,
    );
  }
}

function nested(path: string, value: unknown): Record<string, unknown> {
  return path.split(".").reduceRight<unknown>((inner, key) => ({ [key]: inner }), value) as Record<
    string,
    unknown
  >;
}

function columnNames(axes: readonly string[]): string[] {
  const last = axes.map((a) => a.split(".").pop()!);
  return axes.map((a, i) => last.indexOf(last[i]) === last.lastIndexOf(last[i]) ? last[i] : a);
}
