/**
 * @module
 * The simulator's version, recorded in sweep journals and shard files so
 * results of different versions are never merged. Kept equal to `deno.json`'s
 * `version` (a test checks it); bump it whenever the model's numbers or a
 * result's fields change (a journal of older results cannot be resumed).
 */

/** The simulator's version. */
export const SIMULATOR_VERSION = "0.8.0";
