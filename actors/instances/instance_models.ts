/**
 * @module
 * The registry of instance models. Each model file exports an
 * {@linkcode InstanceModel} as `model`; adding one is that file plus one
 * import and one entry in {@linkcode MODELS} (and its settings in the
 * scenario schema, if it has new ones).
 */
import { model as batching } from "./batching_instance.ts";
import type { InstanceModel } from "./instance_model.ts";
import { model as fifo } from "./serving_instance.ts";
import { model as slots } from "./slot_instance.ts";

/** Every instance model, the default (the original study's) first. */
export const MODELS = [fifo, batching, slots] as const satisfies readonly InstanceModel[];

/** A registered model's name. */
export type ModelName = typeof MODELS[number]["name"];

/** Names of the registered models. */
export const MODEL_NAMES: readonly [ModelName, ...ModelName[]] = MODELS.map((m) => m.name) as [
  ModelName,
  ...ModelName[],
];

/**
 * The model named `name`.
 * @throws {RangeError} when no model has that name.
 */
export function instanceModel(name: string): InstanceModel {
  const found = MODELS.find((m) => m.name === name);
  if (found === undefined) {
    throw new RangeError(`unknown instance model "${name}" (models: ${MODEL_NAMES.join(", ")})`);
  }
  return found;
}
