/** `deno task realtime` and `--router` as a user runs them. */
import { assert, assertEquals, assertStringIncludes } from "@std/assert";
import { interruptWhenSeen } from "./_interrupt.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const decode = (b: Uint8Array) => new TextDecoder().decode(b);

function command(script: string, ...args: string[]) {
  return new Deno.Command("deno", {
    args: ["run", "--allow-read=.", "--unstable-worker-options", script, ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  });
}

Deno.test("realtime prints the run summary plus lag figures", async () => {
  const out = await command("scenarios/realtime.ts", "--requests", "150", "--speed", "10").output();
  const stdout = decode(out.stdout);
  assertEquals(out.code, 0, decode(out.stderr));
  assertStringIncludes(stdout, "policy hybrid(thr=1)");
  assertStringIncludes(stdout, "completed 150");
  assert(/lag +p50 [\d.]+ ms · p99 [\d.]+ ms · max [\d.]+ ms/.test(stdout), stdout);
});

Deno.test("realtime with an impossible speed warns that the speed is too high", async () => {
  const out = await command(
    "scenarios/realtime.ts",
    "--requests",
    "300",
    "--speed",
    "500",
    "--lag-tolerance-ms",
    "5",
  )
    .output();
  assertEquals(out.code, 0, decode(out.stderr));
  assertStringIncludes(decode(out.stdout), "is too high for this machine");
});

Deno.test("run and realtime take --router; a bad plugin exits 2 with one line", async () => {
  const ok = await command(
    "scenarios/run.ts",
    "--router",
    "scenarios/plugins/cache_with_slack.ts",
    "--requests",
    "500",
  )
    .output();
  assertEquals(ok.code, 0);
  assertStringIncludes(decode(ok.stdout), "policy plugin cache_with_slack");
  for (const script of ["scenarios/run.ts", "scenarios/realtime.ts"]) {
    const bad = await command(script, "--router", "deno.json").output();
    assertEquals(bad.code, 2);
    assertStringIncludes(decode(bad.stderr), '--router: "deno.json" is not a router plugin');
    assertEquals(decode(bad.stderr).trim().split("\n").length, 1);
  }
});

Deno.test("a realtime plugin fault exits 1 naming the plugin, the message type and the time", async () => {
  const out = await command(
    "scenarios/realtime.ts",
    "--router",
    "tests/fixtures/plugin_throws.ts",
    "--speed",
    "20",
  ).output();
  const stderr = decode(out.stderr);
  assertEquals(out.code, 1, stderr);
  assertStringIncludes(
    stderr,
    'run failed: actor_threw: plugin exploded (actor router (plugin plugin_throws.ts), message "route", at t=',
  );
});

Deno.test("Ctrl-C during a realtime run exits 130 after printing what finished", async () => {
  const child = command("scenarios/realtime.ts", "--requests", "20000", "--speed", "1").spawn();
  // Its first live-view frame (drawn every 2 s off a terminal) shows the run is live.
  const { code, stderr } = await interruptWhenSeen(child, "realtime · ");
  assertEquals(code, 130, stderr);
  assert(/interrupted after [\d.]+ s wall: \d+ requests completed/.test(stderr), stderr);
});
