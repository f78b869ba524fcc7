/** Sweeps across shards and across crashes give the single run's bytes. */
import { assert, assertEquals, assertStringIncludes } from "@std/assert";
import { SIMULATOR_VERSION } from "../actors/version.ts";
import { OutputLock } from "../scenarios/sweep_runner/output_lock.ts";
import { messageLine, runScript, taskFrom } from "./_cli.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const decode = (b: Uint8Array) => new TextDecoder().decode(b);

function task(script: string, out: string, ...args: string[]) {
  return new Deno.Command("deno", {
    args: ["run", "--allow-read", `--allow-write=${out}`, "--allow-ffi", "--allow-sys", script, ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  });
}
const sweep = (out: string, ...args: string[]) =>
  task("scenarios/sweep.ts", out, "--quick", "--out", out, ...args);
const merge = (out: string, ...dirs: string[]) => task("scenarios/merge.ts", out, "--out", out, ...dirs);

async function ok(command: Deno.Command) {
  const r = await command.output();
  assertEquals(r.code, 0, decode(r.stderr));
  return decode(r.stderr);
}

let single: string | undefined;
async function singleRunCsv(): Promise<string> {
  if (single === undefined) {
    const out = await Deno.makeTempDir();
    await ok(sweep(out));
    single = await Deno.readTextFile(`${out}/sweep_summary.csv`);
    await Deno.remove(out, { recursive: true });
  }
  return single;
}

Deno.test("deno.json's version is the simulator version recorded in journals", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("../deno.json", import.meta.url)));
  assertEquals(config.version, SIMULATOR_VERSION);
});

Deno.test("three shards merged give the single run's CSV, byte for byte, and the same summary", async () => {
  const shards = await Deno.makeTempDir(), out = await Deno.makeTempDir();
  for (const i of [1, 2, 3]) {
    const log = await ok(sweep(shards, "--shard", `${i}/3`));
    assertStringIncludes(log, `shard ${i}/3 done`);
  }
  assertEquals([...Deno.readDirSync(shards)].map((e) => e.name).sort(), [
    "shard-1-of-3.jsonl",
    "shard-2-of-3.jsonl",
    "shard-3-of-3.jsonl",
  ]);
  await ok(merge(out, shards));
  assertEquals(await Deno.readTextFile(`${out}/sweep_summary.csv`), await singleRunCsv());
  assert((await Deno.stat(`${out}/report.html`)).size > 10_000);
  await Deno.remove(shards, { recursive: true });
  await Deno.remove(out, { recursive: true });
});

Deno.test("a sweep killed with SIGKILL midway, with a torn last record, resumes to the uninterrupted CSV", async () => {
  const out = await Deno.makeTempDir();
  const child = sweep(out, "--workers", "1").spawn();
  const journal = `${out}/sweep_journal.jsonl`;
  // Wait until at least two points are recorded, then kill without warning.
  for (let i = 0; i < 400; i++) {
    await new Promise((r) => setTimeout(r, 50));
    const lines = await Deno.readTextFile(journal).then((t) => t.split("\n").length - 2).catch(() => 0);
    if (lines >= 2) break;
  }
  child.kill("SIGKILL");
  await child.status;
  await child.stdout.cancel();
  await child.stderr.cancel();
  const recorded = (await Deno.readTextFile(journal)).split("\n").filter((l) => l !== "").length - 1;
  assert(recorded >= 2 && recorded < 8, `recorded ${recorded} points`);
  // Running again without --resume must not silently throw the finished points away.
  const again = await sweep(out).output();
  assertEquals(again.code, 2);
  assertStringIncludes(
    decode(again.stderr),
    "records an unfinished sweep: add --resume to finish it, or --fresh",
  );
  // Simulate a crash mid-write: half a record at the end.
  await Deno.writeTextFile(journal, '{"point":7,"crc":"deadbeef","runs":[{"poli', { append: true });
  const log = await ok(sweep(out, "--resume"));
  assertStringIncludes(
    log,
    `resuming: ${recorded} of 8 points already recorded (a torn or corrupt record was found`,
  );
  assertEquals(await Deno.readTextFile(`${out}/sweep_summary.csv`), await singleRunCsv());
  assertEquals([...Deno.readDirSync(out)].some((e) => e.name === "sweep_journal.jsonl"), false);
  await Deno.remove(out, { recursive: true });
});

Deno.test("merge refuses overlapping, missing, incomplete and incompatible shards with one clear line", async (t) => {
  const a = await Deno.makeTempDir(), b = await Deno.makeTempDir(), out = await Deno.makeTempDir();
  await ok(sweep(a, "--shard", "1/2"));
  await ok(sweep(a, "--shard", "2/2"));
  await Deno.copyFile(`${a}/shard-2-of-2.jsonl`, `${b}/shard-2-of-2.jsonl`);
  const refuse = async (dirs: string[], message: string) => {
    const r = await merge(out, ...dirs).output();
    assertEquals(r.code, 2, decode(r.stderr));
    assertStringIncludes(decode(r.stderr), message);
    assertEquals(decode(r.stderr).trim().split("\n").length, 1);
  };
  await t.step("overlapping", () => refuse([a, b], "overlapping shards: shard 2/2 is both"));
  await Deno.remove(`${a}/shard-2-of-2.jsonl`);
  await t.step("missing", () => refuse([a], "missing shards: 2/2"));
  const text = await Deno.readTextFile(`${b}/shard-2-of-2.jsonl`);
  await Deno.writeTextFile(`${b}/shard-2-of-2.jsonl`, text.split("\n").slice(0, 2).join("\n") + "\n");
  await t.step("incomplete", () => refuse([a, b], "shard-2-of-2.jsonl: incomplete (1 of 4 points)"));
  const header = JSON.parse(text.split("\n")[0]);
  const rest = text.split("\n").slice(1).join("\n");
  await Deno.writeTextFile(
    `${b}/shard-2-of-2.jsonl`,
    JSON.stringify({ ...header, specHash: "00000000" }) + "\n" + rest,
  );
  await t.step("different sweep", () => refuse([a, b], "belongs to a different sweep"));
  await Deno.writeTextFile(
    `${b}/shard-2-of-2.jsonl`,
    JSON.stringify({ ...header, version: "0.0.1" }) + "\n" + rest,
  );
  await t.step("different version", () => refuse([a, b], "written by simulator version 0.0.1"));
  for (const dir of [a, b, out]) await Deno.remove(dir, { recursive: true });
});

/** Two runs of 200 requests, one point per shard of two: shards made in a fraction of a second. */
const TINY_SPEC = {
  base: { workload: { requests: 200 } },
  axes: { "workload.ratePerSec": [30, 40] },
  policies: [{ name: "round_robin" }],
  seeds: [1],
};

/** A temporary directory holding the tiny spec and, made by `deno run scenarios/sweep.ts`, its shards 1/2 and 2/2 in `shards/`. */
async function tinyShards(): Promise<{ dir: string; shards: string }> {
  const dir = await Deno.makeTempDir({ prefix: "rrs_merge_" });
  await Deno.writeTextFile(`${dir}/spec.json`, JSON.stringify(TINY_SPEC));
  for (const shard of ["1/2", "2/2"]) {
    const r = await runScript(
      "sweep",
      dir,
      "--spec",
      `${dir}/spec.json`,
      "--out",
      `${dir}/shards`,
      "--shard",
      shard,
    );
    assertEquals(r.code, 0, r.stderr);
  }
  return { dir, shards: `${dir}/shards` };
}

Deno.test("merge against a directory a running sweep holds names that sweep, not a lack of shard files", async (t) => {
  const { dir } = await tinyShards();
  const out = `${dir}/out`;
  await Deno.mkdir(out);
  await Deno.writeTextFile(`${out}/sweep_journal.jsonl`, "the running sweep's journal\n");
  const lock = await OutputLock.acquire(`${out}/.sweep.lock`, `--out ${out}`, `sweep --out ${out}`);
  const holder = `"sweep --out ${out}" (pid ${Deno.pid}, started `;
  await t.step(
    "--out held: the directory, its holder and what to do, before any shard is looked for",
    async () => {
      const { code, stderr } = await runScript("merge", dir, "--out", out, out);
      assertEquals(code, 2, stderr);
      const line = messageLine(stderr);
      assertStringIncludes(line, `error: --out ${out} is in use by ${holder}`);
      assertStringIncludes(
        line,
        `; lock ${out}/.sweep.lock): another sweep or merge holds its lock; ` +
          "wait for it to finish or stop it, then run this command again",
      );
    },
  );
  await t.step("a directory to merge held, with no shard files: the sweep running there", async () => {
    const { code, stderr } = await runScript("merge", dir, out);
    assertEquals(code, 2, stderr);
    const line = messageLine(stderr);
    assertStringIncludes(
      line,
      `error: no shard files (shard-*-of-*.jsonl) in ${out}: it is in use by ${holder}`,
    );
    assertStringIncludes(
      line,
      "wait for it to finish (merge combines the shard files of sweeps run with --shard i/n)",
    );
  });
  assertEquals(await Deno.readTextFile(`${out}/sweep_journal.jsonl`), "the running sweep's journal\n");
  lock.release();
  await t.step("once the sweep is gone, only the lack of shard files is left to say", async () => {
    const { code, stderr } = await runScript("merge", dir, "--out", out, out);
    assertEquals(code, 2, stderr);
    assertEquals(messageLine(stderr), `error: no shard files (shard-*-of-*.jsonl) in ${out}`);
  });
  await Deno.remove(dir, { recursive: true });
});

Deno.test("an incomplete shard whose sweep still runs is named running, not sent to --resume", async () => {
  const { dir, shards } = await tinyShards();
  const out = `${dir}/out`;
  const header = (await Deno.readTextFile(`${shards}/shard-2-of-2.jsonl`)).split("\n")[0];
  await Deno.writeTextFile(`${shards}/shard-2-of-2.jsonl`, header + "\n"); // started, no point recorded yet
  const merge = () => runScript("merge", dir, "--out", out, shards);
  const lock = await OutputLock.acquire(`${shards}/.shard-2-of-2.lock`, "--out shards", "sweep --shard 2/2");
  const running = await merge();
  lock.release();
  assertEquals(running.code, 2, running.stderr);
  assertStringIncludes(
    messageLine(running.stderr),
    `error: ${shards}/shard-2-of-2.jsonl: incomplete (0 of 1 points); shard 2/2 is still running, ` +
      `by "sweep --shard 2/2" (pid ${Deno.pid}, started `,
  );
  assertStringIncludes(running.stderr, "wait for it to finish, then merge");
  const stopped = await merge();
  assertEquals(stopped.code, 2, stopped.stderr);
  assertEquals(
    messageLine(stopped.stderr),
    `error: ${shards}/shard-2-of-2.jsonl: incomplete (0 of 1 points); finish it with --resume`,
  );
  await Deno.remove(dir, { recursive: true });
});

Deno.test("deno task merge names shard files under the directories as typed, relative to where it ran", async () => {
  const { dir, shards } = await tinyShards();
  await Deno.mkdir(`${dir}/copy`);
  await Deno.copyFile(`${shards}/shard-2-of-2.jsonl`, `${dir}/copy/shard-2-of-2.jsonl`);
  await Deno.writeTextFile(`${dir}/copy/shard-1-of-1.jsonl`, "not a journal\n{}\n");
  // `deno task` prints its command line first: the message is the one line that starts with "error: ".
  const refusal = async (...dirs: string[]) => {
    const { code, stderr } = await taskFrom(dir, "merge", ...dirs);
    const text = decode(stderr);
    assertEquals(code, 2, text);
    assert(!text.includes(dir), `an absolute path in:\n${text}`);
    const lines = text.split("\n").filter((line) => line.startsWith("error: "));
    assertEquals(lines.length, 1, text);
    return lines[0];
  };
  assertEquals(
    await refusal("shards", "./copy"),
    'error: "copy/shard-1-of-1.jsonl" is not a sweep journal (its first line is not JSON)',
  );
  await Deno.remove(`${dir}/copy/shard-1-of-1.jsonl`);
  assertEquals(
    await refusal("shards", "copy"),
    "error: overlapping shards: shard 2/2 is both shards/shard-2-of-2.jsonl and copy/shard-2-of-2.jsonl",
  );
  await Deno.remove(dir, { recursive: true });
});
