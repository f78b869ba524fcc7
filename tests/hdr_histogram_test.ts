import { assertEquals, assertThrows } from "@std/assert";
import fc from "fast-check";
import * as hdr from "hdr-histogram-js";
import { HdrHistogram } from "../actors/metrics/hdr_histogram.ts";

/** The metrics' histogram as it was built on hdr-histogram-js: the reference. */
const reference = () =>
  hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 1e13,
    numberOfSignificantValueDigits: 3,
    bitBucketSize: 64,
    useWebAssembly: false,
  });

const PERCENTILES = [0, 0.1, 1, 7, 10, 25, 33.3, 50, 57, 66.6, 75, 90, 95, 99, 99.9, 99.99, 100, 120];

Deno.test("hdr histogram answers every percentile as hdr-histogram-js does", () => {
  // Values across every magnitude, down to 0 and up past the first size (1e13), integers or not.
  const value = fc.oneof(
    fc.integer({ min: 0, max: 5000 }),
    fc.double({ min: 0, max: 52, noNaN: true }).map((e) => Math.floor(2 ** e)),
    fc.double({ min: 0, max: 1e16, noNaN: true }),
    fc.constantFrom(
      1,
      2047,
      2048,
      2049,
      2 ** 31 - 1,
      2 ** 31,
      2 ** 32 - 1,
      2 ** 32,
      2 ** 32 + 1,
      1e13,
      3.6e13,
    ),
  );
  fc.assert(
    fc.property(
      fc.array(value, { minLength: 0, maxLength: 200 }),
      fc.double({ min: 0, max: 100 }),
      (values, p) => {
        const ours = new HdrHistogram(3, 1e13), theirs = reference();
        for (const v of values) {
          ours.recordValue(v);
          theirs.recordValue(v);
        }
        assertEquals(ours.totalCount, theirs.totalCount);
        for (const q of [...PERCENTILES, p]) {
          assertEquals(ours.getValueAtPercentile(q), theirs.getValueAtPercentile(q), `percentile ${q}`);
        }
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("hdr histogram rounds a percentile's count as hdr-histogram-js does (0.07 × 100 is 7.000000000000001)", () => {
  const ours = new HdrHistogram(3, 1e13), theirs = reference();
  for (let v = 1; v <= 100; v++) {
    ours.recordValue(v * 1000);
    theirs.recordValue(v * 1000);
  }
  for (let p = 0; p <= 100; p++) {
    assertEquals(ours.getValueAtPercentile(p), theirs.getValueAtPercentile(p), `p${p}`);
  }
  assertEquals(ours.getValueAtPercentile(7), 7003); // the 7th value's bucket, not the 8th's
});

Deno.test("hdr histogram keeps three significant digits at every magnitude", async (t) => {
  for (const value of [1, 999, 2047, 123_456, 30_612_345, 7.3e12, 4e15]) {
    await t.step(`${value}`, () => {
      const h = new HdrHistogram(3, 1e13);
      h.recordValue(value);
      const high = h.getValueAtPercentile(100), low = h.getValueAtPercentile(0);
      assertEquals(low <= value && value <= high, true, `${low} <= ${value} <= ${high}`);
      assertEquals((high - low) / value < 1e-3, true, `bucket ${low}–${high}`);
    });
  }
});

Deno.test("hdr histogram answers 0 when empty and refuses negative values and bad options", () => {
  assertEquals(new HdrHistogram(3, 1e13).getValueAtPercentile(50), 0);
  assertThrows(() => new HdrHistogram(3, 1e13).recordValue(-1), RangeError, "got -1");
  assertThrows(() => new HdrHistogram(3, 1e13).recordValue(NaN), RangeError, "got NaN");
  assertThrows(() => new HdrHistogram(6, 1e13), RangeError, "significantDigits");
  assertThrows(() => new HdrHistogram(3, 1), RangeError, "highestTrackableValue");
});
