/** `deno task sweep` as a user runs it: bad input, and Ctrl-C mid-sweep. */
import { assert, assertEquals, assertStringIncludes } from "@std/assert";
import { readJournal } from "../scenarios/sweep_journal.ts";
import { interruptWhenSeen } from "./_interrupt.ts";

const ROOT = new URL("..", import.meta.url).pathname;

function sweep(out: string, ...args: string[]) {
  return new Deno.Command("deno", {
    args: [
      "run",
      "--allow-read",
      `--allow-write=${out}`,
      "--allow-ffi",
      "--allow-sys",
      "scenarios/sweep.ts",
      "--out",
      out,
      ...args,
    ],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  });
}

Deno.test("an invalid sweep spec exits 2 naming the field and writes nothing", async () => {
  const out = await Deno.makeTempDir();
  const spec = `${out}/bad.json`;
  await Deno.writeTextFile(
    spec,
    JSON.stringify({ axes: { "workload.prefix.zipf": [-1] }, policies: [{ name: "random" }], seeds: [1] }),
  );
  const { code, stderr } = await sweep(out, "--spec", spec).output();
  const text = new TextDecoder().decode(stderr);
  assertEquals(code, 2, text);
  assertStringIncludes(text, 'sweep.axes["workload.prefix.zipf"][0]: expected a number >= 0, got -1');
  assertEquals([...Deno.readDirSync(out)].map((e) => e.name), ["bad.json"]);
  await Deno.remove(out, { recursive: true });
});

Deno.test("Ctrl-C during a sweep exits 130 and leaves the previous results untouched", async () => {
  const out = await Deno.makeTempDir();
  await Deno.writeTextFile(`${out}/summary.txt`, "previous results\n");
  const child = sweep(out, "--quick", "--workers", "1").spawn();
  // The first progress line shows the sweep is running.
  const { code, stderr: seen } = await interruptWhenSeen(child, "runs");
  assertEquals(code, 130, seen);
  assertStringIncludes(seen, "interrupted");
  assertEquals(await Deno.readTextFile(`${out}/summary.txt`), "previous results\n");
  const names = [...Deno.readDirSync(out)].map((e) => e.name);
  assert(names.every((n) => !n.includes(".tmp-")), `leftover temp files: ${names}`);
  // The previous results are untouched; the journal of finished points stays for --resume.
  assertEquals(names.sort(), ["summary.txt", "sweep_journal.jsonl"]);
  assertStringIncludes(seen, "--resume");
  const journal = await readJournal(`${out}/sweep_journal.jsonl`);
  assertEquals(journal.torn, false);
  await Deno.remove(out, { recursive: true });
});

Deno.test("sweep --router adds the plugin as one more policy, in the CSV and the summary tables", async () => {
  const out = await Deno.makeTempDir();
  const { code, stderr } = await sweep(out, "--quick", "--router", "scenarios/plugins/cache_with_slack.ts")
    .output();
  assertEquals(code, 0, new TextDecoder().decode(stderr));
  const csv = await Deno.readTextFile(`${out}/sweep_summary.csv`);
  assertEquals(csv.split("\n").filter((line) => line.includes(",cache_with_slack,")).length, 8);
  assertStringIncludes(await Deno.readTextFile(`${out}/summary.txt`), "cache_with_slack");
  await Deno.remove(out, { recursive: true });
});
