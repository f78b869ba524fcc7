/**
 * @module
 * A sweep's policy variants. Each entry of `sweep.policies` is checked
 * against the policy registry and expands into one variant per combination
 * of its parameters' listed values; a router plugin adds one more.
 */
import {
  describeBounds,
  inBounds,
  parameterList,
  type PolicyDescriptor,
  policyDescriptor,
  policyLabel,
  type PolicyName,
} from "../../actors/policies/mod.ts";
import { UsageError } from "../cli/usage_error.ts";
import { show } from "./scenario.ts";

/** One policy variant of a sweep: a built-in policy with one value per parameter it sets, or a plugin. */
export interface PolicyVariant {
  /** Built-in policy name, or the plugin's `name`. */
  readonly name: string;
  /** `hybrid(thr=2)`, `round_robin`, `llmd_weighted(prefixWeight=1)`, a plugin's name… */
  readonly label: string;
  /** The parameters the sweep sets (the others take the policy's defaults); empty for a plugin. */
  readonly params: Readonly<Record<string, number>>;
  /** The plugin module (`file:` URL), for a plugin variant. */
  readonly pluginUrl?: string;
}

/** One entry of `sweep.policies`: a policy name and, per parameter, a value or a list of values. */
export interface PolicyEntry {
  readonly name: PolicyName;
  readonly [parameter: string]: unknown;
}

/** `.key`, or `["key"]` when the key is not an identifier. */
function field(key: string): string {
  return /^[A-Za-z_]\w*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/**
 * The values an entry lists for one parameter, each checked against its bounds.
 * @throws {UsageError} naming `sweep.policies[i].key` (and the list index), the value and the bounds.
 */
function parameterValues(descriptor: PolicyDescriptor, key: string, value: unknown, where: string): number[] {
  const parameter = Object.hasOwn(descriptor.params, key) ? descriptor.params[key] : undefined;
  if (parameter === undefined) {
    throw new UsageError(
      `${where}: not a parameter of ${descriptor.name} (its parameters: ${parameterList(descriptor)})`,
    );
  }
  const list: unknown[] = Array.isArray(value) ? value : [value];
  if (list.length === 0 || !Array.isArray(value) && typeof value !== "number") {
    throw new UsageError(`${where}: expected a number or a non-empty list of numbers, got ${show(value)}`);
  }
  list.forEach((v, j) => {
    const at = Array.isArray(value) ? `${where}[${j}]` : where;
    // Not a number, or one beyond a double's range (kept as written: see scenario.ts).
    if (typeof v !== "number") throw new UsageError(`${at}: expected a number, got ${show(v)}`);
    if (!inBounds(parameter, v)) {
      throw new UsageError(`${at}: expected ${describeBounds(parameter)}, got ${v}`);
    }
  });
  return list as number[];
}

/**
 * Expands entry `index` of `sweep.policies` into its variants: one per
 * combination of the listed parameter values (the cartesian product, the
 * first parameter varying slowest, each list in the order given), labelled by
 * {@linkcode policyLabel}.
 * @throws {UsageError} for a parameter the policy lacks or a value out of its bounds.
 * @example
 * ```ts
 * expandPolicy({ name: "hybrid", threshold: [0, 1] }, 3).map((v) => v.label); // ["hybrid(thr=0)", "hybrid(thr=1)"]
 * ```
 */
export function expandPolicy(entry: PolicyEntry, index: number): PolicyVariant[] {
  const { name, ...given } = entry;
  const descriptor = policyDescriptor(name)!;
  let combinations: Record<string, number>[] = [{}];
  for (const [key, value] of Object.entries(given)) {
    const values = parameterValues(descriptor, key, value, `sweep.policies[${index}]${field(key)}`);
    combinations = combinations.flatMap((c) => values.map((v) => ({ ...c, [key]: v })));
  }
  return combinations.map((params) => ({ name, label: policyLabel({ name, ...params }), params }));
}

/** The variant of a router plugin added to a sweep: labelled by its name, with no parameters. */
export function pluginVariant(plugin: { readonly name: string; readonly url: string }): PolicyVariant {
  // Its name is its label: it must not pass for a built-in policy (or one of its variants).
  if (policyDescriptor(plugin.name) !== undefined || /[()]/.test(plugin.name)) {
    throw new UsageError(
      `--router: the plugin's name "${plugin.name}" ${
        /[()]/.test(plugin.name) ? "looks like a built-in policy's label" : "is a built-in policy's"
      }; give it a name of its own`,
    );
  }
  return { name: plugin.name, label: plugin.name, params: {}, pluginUrl: plugin.url };
}

/**
 * The value of parameter `key` in a variant: the one it sets, else the
 * policy's default; undefined when the policy has no such parameter (or is a plugin).
 */
export function variantParameter(variant: PolicyVariant, key: string): number | undefined {
  if (variant.pluginUrl !== undefined) return undefined;
  return variant.params[key] ?? policyDescriptor(variant.name)?.params[key]?.default;
}
