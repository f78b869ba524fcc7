/** `deno task sweep` as a user runs it: bad input, and Ctrl-C mid-sweep. */
import { assert, assertEquals, assertStringIncludes } from "@std/assert";
import { readJournal } from "../scenarios/sweep_runner/sweep_journal.ts";
import { interruptWhenSeen } from "./_interrupt.ts";
import { taskFrom } from "./_cli.ts";

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

Deno.test("deno task sweep started from another directory writes where --out says, inside results/", async () => {
  const caller = await Deno.makeTempDir();
  // Under results/quick/ (git-ignored), which the task may write; not the home of a committed sweep.
  const name = `quick/test_caller_${crypto.randomUUID().slice(0, 8)}`;
  const task = (out: string) => taskFrom(caller, "sweep", "--quick", "--workers", "1", "--out", out);
  try {
    const absolute = await task(`${ROOT}results/${name}`);
    assertEquals(absolute.code, 0, new TextDecoder().decode(absolute.stderr));
    assert((await Deno.stat(`${ROOT}results/${name}/summary.txt`)).isFile);
    // A relative --out is the caller's: from elsewhere, results/NAME is not the repository's results/.
    const relative = await task(`results/${name}`);
    const text = new TextDecoder().decode(relative.stderr);
    assertEquals(relative.code, 2, text);
    assertStringIncludes(text, `--out results/${name}: outside results/`);
  } finally {
    // The tests may write only /tmp: `deno eval` (all permissions) removes what the task wrote.
    const remove = `Deno.removeSync(${JSON.stringify(`${ROOT}results/${name}`)}, { recursive: true })`;
    await new Deno.Command("deno", { args: ["eval", remove], stderr: "null" }).output();
    await Deno.remove(caller, { recursive: true });
  }
});
