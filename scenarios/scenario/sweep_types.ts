/**
 * @module
 * The shapes of a parsed sweep — its grid points, runs and policy variants —
 * kept apart from the parser (sweep_spec.ts) so that the report sections,
 * which read a sweep, and the parser, which checks a sweep's report sections
 * against their registry, do not import each other.
 */
import type { SimulationConfig } from "../../actors/simulation.ts";
import type { PolicyVariant } from "./policy_variants.ts";

export type { PolicyVariant };

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
  /**
   * The report sections the sweep declares, in order. Without any, its report
   * is what every sweep gets: the CSV, the summary's header and all-policies
   * comparison, and `report.html` with no charts.
   */
  readonly report: readonly string[];
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
