import { assertAlmostEquals, assertEquals } from "@std/assert";
import { ci95HalfWidth, mean } from "../scenarios/report/statistics.ts";

Deno.test("ci95HalfWidth is t(0.975, n−1) × s / √n", () => {
  // values 1, 2, 3: s = 1, n = 3, t = 4.303 → 4.303 / √3
  assertAlmostEquals(ci95HalfWidth([1, 2, 3]), 4.303 / Math.sqrt(3), 1e-9);
  assertAlmostEquals(ci95HalfWidth([5, 7]), 12.706 * Math.SQRT2 / Math.SQRT2, 1e-9);
  assertEquals(ci95HalfWidth([4]), 0);
  assertEquals(mean([]), 0);
});
