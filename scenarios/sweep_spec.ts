/**
 * @module
 * The sweep format: a base scenario, axes (any scenario field, by dot path,
 * with the values to try), policy variants and seeds. Validated with errors
 * that name the field; expanded into the list of runs.
 */
import { z } from "zod";
import { POLICY_NAMES, POLICY_PARAMETERS } from "../actors/policies/mod.ts";
import type { SimulationConfig } from "../actors/simulation.ts";
import {
  checkTraceFile,
  deepMerge,
  describeIssue,
  parseScenario,
  resolveTracePath,
  scenarioPath,
} from "./scenario.ts";
import { UsageError } from "./usage_error.ts";

const sweepSchema = z.strictObject({
  description: z.string().default(""),
  base: z.record(z.string(), z.unknown()).default({}),
  axes: z.record(z.string(), z.array(z.union([z.number(), z.string()])).min(1)).refine(
    (axes) => Object.keys(axes).length > 0,
    { message: "expected at least one axis" },
  ),
  policies: z.array(
    z.object({
      name: z.enum(POLICY_NAMES),
      threshold: z.number().min(0).optional(),
      thresholds: z.array(z.number().min(0)).min(1).optional(),
    }).catchall(z.number()),
  ).min(1),
  seeds: z.array(z.number().int().min(0)).min(1),
  focus: z.string().optional(),
});

/** One policy variant of a sweep: a built-in policy (e.g. `hybrid` with threshold 2) or a plugin. */
export interface PolicyVariant {
  /** Built-in policy name, or the plugin's `name`. */
  readonly name: string;
  /** Hybrid's threshold; undefined otherwise. */
  readonly threshold?: number;
  /** `hybrid(thr=2)`, `round_robin`, a plugin's name… */
  readonly label: string;
  /** The plugin module (`file:` URL), for a plugin variant. */
  readonly pluginUrl?: string;
  /** Policy parameters other than hybrid's threshold. */
  readonly params?: Readonly<Record<string, number>>;
}

/** A router plugin to add to a sweep's policies. */
export interface SweepPlugin {
  readonly name: string;
  readonly url: string;
}

/** One point of the grid: a value for every axis. */
export interface SweepPoint {
  readonly index: number;
  /** Axis path → value, in axis order. */
  readonly values: Readonly<Record<string, number | string>>;
}

/** One simulation to run. */
export interface SweepRun {
  readonly point: number;
  readonly variant: number;
  readonly seed: number;
  readonly config: SimulationConfig;
  /** Plugin module that replaces `config.policy`, if any. */
  readonly pluginUrl?: string;
}

/** A validated, expanded sweep. */
export interface Sweep {
  readonly description: string;
  /** The axis whose effect the summary reports policy by policy, if any. */
  readonly focus?: string;
  /** Axis paths, in order (the first varies slowest). */
  readonly axes: readonly string[];
  /** Column name of each axis in the CSV (its last path segment, unless two collide). */
  readonly axisColumns: readonly string[];
  readonly points: readonly SweepPoint[];
  readonly variants: readonly PolicyVariant[];
  readonly seeds: readonly number[];
  /** Every run, by point, then variant, then seed. */
  readonly runs: readonly SweepRun[];
}

const RESERVED_AXES = ["seed", "policy", "policy.name", "policy.threshold"];

/**
 * Validates a sweep spec and expands it. Every run's scenario is parsed, and
 * its trace path (if any) resolved against the caller's directory.
 * @throws {UsageError} naming the invalid field (`sweep.axes["workload.prefix.zipf"][2]: …`).
 */
export function parseSweep(input: unknown, plugin?: SweepPlugin): Sweep {
  const parsed = sweepSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path = issue.code === "unrecognized_keys" ? [...issue.path, issue.keys[0]] : issue.path;
    const name = ["sweep", ...path].map((k, i) =>
      typeof k === "number"
        ? `[${k}]`
        : i === 0
        ? String(k)
        : /^[A-Za-z_]\w*$/.test(String(k))
        ? `.${String(k)}`
        : `[${JSON.stringify(k)}]`
    ).join("");
    const what = describeIssue(issue, input, path);
    throw new UsageError(`${name}: ${what}`);
  }
  const spec = parsed.data;
  const axes = Object.keys(spec.axes);
  for (const axis of axes) {
    if (RESERVED_AXES.includes(axis)) {
      throw new UsageError(`sweep.axes["${axis}"]: not an axis; use sweep.seeds and sweep.policies instead`);
    }
  }
  // Validate the base, then every axis value on its own, naming the axis.
  parseScenario(spec.base, (path) => `sweep.base${scenarioPath(path).slice("scenario".length)}`);
  for (const axis of axes) {
    spec.axes[axis].forEach((value, i) => {
      parseScenario(deepMerge(spec.base, nested(axis, value)), (path) => {
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
    const values = spec.axes[axis].map((v) => JSON.stringify(v));
    const twice = values.find((v, i) => values.indexOf(v) !== i);
    if (twice) throw new UsageError(`sweep.axes["${axis}"]: lists ${twice} twice`);
  }
  const seedTwice = spec.seeds.find((v, i) => spec.seeds.indexOf(v) !== i);
  if (seedTwice !== undefined) throw new UsageError(`sweep.seeds: lists ${seedTwice} twice`);
  const variants: PolicyVariant[] = spec.policies.flatMap((p, i): PolicyVariant[] => {
    const { name, threshold, thresholds, ...params } = p;
    if (name !== "hybrid" && (threshold !== undefined || thresholds !== undefined)) {
      throw new UsageError(
        `sweep.policies[${i}].${
          threshold !== undefined ? "threshold" : "thresholds"
        }: only hybrid has thresholds`,
      );
    }
    const allowed = POLICY_PARAMETERS[name];
    for (const key of Object.keys(params)) {
      if (!allowed.includes(key)) {
        throw new UsageError(
          `sweep.policies[${i}].${key}: not a parameter of ${name} (its parameters: ${
            allowed.join(", ") || "none"
          })`,
        );
      }
    }
    if (name !== "hybrid") {
      const shown = Object.entries(params).map(([k, v]) => `${k}=${v}`).join(",");
      return [{ name, label: shown ? `${name}(${shown})` : name, params }];
    }
    return (thresholds ?? [threshold ?? 1]).map((t) => ({ name, threshold: t, label: `hybrid(thr=${t})` }));
  });
  if (plugin) variants.push({ name: plugin.name, label: plugin.name, pluginUrl: plugin.url });
  const labels = variants.map((v) => v.label);
  const duplicate = labels.find((l, i) => labels.indexOf(l) !== i);
  if (duplicate) throw new UsageError(`sweep.policies: ${duplicate} is listed twice`);

  const points: SweepPoint[] = [];
  const grid = (i: number, values: Record<string, number | string>) => {
    if (i === axes.length) {
      points.push({ index: points.length, values: { ...values } });
      return;
    }
    for (const value of spec.axes[axes[i]]) grid(i + 1, { ...values, [axes[i]]: value });
  };
  grid(0, {});

  const runs: SweepRun[] = [];
  for (const point of points) {
    let scenario = spec.base as unknown;
    for (const axis of axes) scenario = deepMerge(scenario, nested(axis, point.values[axis]));
    variants.forEach((variant, v) => {
      for (const seed of spec.seeds) {
        const policy = variant.pluginUrl
          ? {} // the plugin replaces the scenario's policy
          : variant.name === "hybrid"
          ? { name: variant.name, threshold: variant.threshold }
          : { name: variant.name, ...variant.params };
        const config = resolveTracePath(parseScenario(deepMerge(scenario, { seed, policy })));
        runs.push({ point: point.index, variant: v, seed, config, pluginUrl: variant.pluginUrl });
      }
    });
  }
  return {
    description: spec.description,
    focus: spec.focus,
    axes,
    axisColumns: columnNames(axes),
    points,
    variants,
    seeds: spec.seeds,
    runs,
  };
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
