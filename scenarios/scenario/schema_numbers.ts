/**
 * @module
 * Number schemas every part of the scenario format shares.
 */
import { z } from "zod";

/** A whole number >= `min`. */
export const count = (min: number) => z.number().int().min(min);

/** A number > 0, or `Infinity` (the command line's `inf`; JSON cannot hold it). */
export const positiveOrInfinite = z.union([z.number().gt(0), z.custom<number>((v) => v === Infinity)], {
  error: "expected a number > 0",
});
