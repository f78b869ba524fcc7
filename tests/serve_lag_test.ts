/**
 * @module
 * `deno task serve`'s lag watch (scenarios/wire/lag_watch.ts) on made-up
 * delivery lags: a window past the 50 ms tolerance warns, with the lag, the
 * speed and what to do; stderr gets a line at most every 10 s, warning or
 * all-clear; the live page's banner follows every window; an idle window
 * changes nothing.
 */
import { assert, assertEquals, assertMatch } from "@std/assert";
import type { LagStats } from "../actors/runtime/worker_runtime.ts";
import { LAG_TOLERANCE_MS, LAG_WARNING_EVERY_MS, LagWatch } from "../scenarios/wire/lag_watch.ts";
import { plural } from "../scenarios/cli/plural.ts";

/** A fleet whose deliveries' lags the test appends, read as the live runtime reads them (most recent `recent`). */
function fakeFleet() {
  const lags: number[] = [];
  const lagStats = (recent: number): LagStats => {
    const window = recent === 0 ? [] : lags.slice(-recent).sort((a, b) => a - b);
    const at = (q: number) =>
      window.length === 0 ? 0 : window[Math.min(window.length - 1, Math.floor(q * window.length))];
    return {
      deliveries: lags.length,
      p50Ms: at(0.5),
      p99Ms: at(0.99),
      maxMs: Math.max(0, ...lags),
      restamped: 0,
      maxRestampMs: 0,
    };
  };
  return { lags, lagStats, deliver: (lagMs: number, count = 100) => lags.push(...Array(count).fill(lagMs)) };
}

Deno.test("a lagging window warns with the lag, the speed and the advice, a line at most every 10 s; back on schedule says so once", () => {
  const fleet = fakeFleet();
  const watch = new LagWatch({ lagStats: fleet.lagStats, speed: 8, instances: 6 });
  fleet.deliver(2);
  assertEquals(watch.check(0), { p99Ms: 2, deliveries: 100 });
  assertEquals(watch.warning(), null);

  fleet.deliver(1, 90);
  fleet.deliver(320, 10); // p99 of this window: 320 ms, though the fleet's whole history is mostly on time
  const late = watch.check(2000);
  assertEquals([late.p99Ms, late.deliveries], [320, 100]);
  assertEquals(
    late.line,
    "serve: warning: the simulated fleet lags: delivery lag p99 320 ms (over its last 100 deliveries) is past " +
      "the 50 ms tolerance at speed 8×, so clients see latencies the model did not produce: lower --speed " +
      "(now 8) or serve fewer instances (now 6 instances)",
  );
  assertEquals(watch.warning(), late.line!.replace(/^serve: warning: /, ""));

  // Still late 2, 4, ... 8 s later: the banner stays, no new line until 10 s have passed.
  for (let t = 4000; t < 2000 + LAG_WARNING_EVERY_MS; t += 2000) {
    fleet.deliver(90);
    const again = watch.check(t);
    assertEquals([again.p99Ms, again.line], [90, undefined], `at ${t} ms`);
    assertMatch(watch.warning() ?? "", /p99 90 ms/);
  }
  fleet.deliver(75);
  assertMatch(watch.check(2000 + LAG_WARNING_EVERY_MS).line ?? "", /^serve: warning: .*p99 75 ms/);

  // An idle window (nothing delivered) is not late, and clears nothing.
  assertEquals(watch.check(14_000), { p99Ms: null, deliveries: 0 });
  assert(watch.warning() !== null);

  // Back on schedule: the banner goes at once; the all-clear waits for 10 s after the last line, so a
  // lag hovering around the tolerance does not flood stderr.
  const lines: [number, string | undefined, string | null][] = [];
  for (const [t, lagMs] of [[16_000, 3], [18_000, 90], [20_000, 3], [22_000, 3], [24_000, 3]]) {
    fleet.deliver(lagMs);
    lines.push([t, watch.check(t).line, watch.warning() && "banner"]);
  }
  assertEquals(lines, [
    [16_000, undefined, null],
    [18_000, undefined, "banner"],
    [20_000, undefined, null],
    [
      22_000,
      "serve: the simulated fleet is back on schedule: delivery lag p99 3.0 ms over its last 100 deliveries",
      null,
    ],
    [24_000, undefined, null], // said once
  ]);
  // Behind again: warned once 10 s have passed since the all-clear.
  fleet.deliver(60);
  assertEquals(watch.check(26_000).line, undefined);
  fleet.deliver(60);
  assertMatch(watch.check(32_000).line ?? "", /^serve: warning: .*p99 60 ms/);
});

Deno.test("a window exactly at the tolerance is on schedule; one instance is singular", () => {
  const fleet = fakeFleet();
  const watch = new LagWatch({ lagStats: fleet.lagStats, speed: 1, instances: 1 });
  fleet.deliver(LAG_TOLERANCE_MS);
  assertEquals(watch.check(0).line, undefined);
  fleet.deliver(LAG_TOLERANCE_MS + 1);
  assertMatch(watch.check(2000).line ?? "", /\(now 1 instance\)$/);
});

Deno.test("serve's counts read in the singular for one", () => {
  assertEquals(plural(1, "upstream"), "1 upstream");
  assertEquals(plural(2, "upstream"), "2 upstreams");
  assertEquals(plural(0, "connection"), "0 connections");
});
