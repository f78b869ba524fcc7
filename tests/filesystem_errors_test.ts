/**
 * File-system failures, as a user meets them in `sweep` and `merge`: one line
 * naming the path and the OS's reason, exit 1 (2 for a bad argument), no
 * stack trace, previous results intact; writes that cannot leave their
 * directory through a symlink; one writer per output directory.
 */
import { assertEquals, assertMatch, assertStringIncludes } from "@std/assert";
import { messageLine, runScript } from "./_cli.ts";
import { writeFilesAtomic } from "../scenarios/cli/atomic_write.ts";
import { fileSystemErrorMessage, withPath } from "../scenarios/cli/file_system_error.ts";
import { OutputLock } from "../scenarios/sweep_runner/output_lock.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/** Two runs of 200 requests: a sweep that takes a fraction of a second. */
const TINY_SPEC = {
  base: { workload: { requests: 200 } },
  axes: { "workload.ratePerSec": [30, 40] },
  policies: [{ name: "round_robin" }],
  seeds: [1],
};

/** A temporary directory holding the tiny spec, and the path of that spec. */
async function workspace(): Promise<{ dir: string; spec: string }> {
  const dir = await Deno.makeTempDir({ prefix: "rrs_fs_" });
  await Deno.writeTextFile(`${dir}/spec.json`, JSON.stringify(TINY_SPEC));
  return { dir, spec: `${dir}/spec.json` };
}

const names = (dir: string) => [...Deno.readDirSync(dir)].map((e) => e.name).sort();

/** `Deno.symlink` needs unscoped permissions, which the tests do not have: a `deno eval` makes the link. */
async function symlink(target: string, path: string): Promise<void> {
  const { code } = await new Deno.Command("deno", {
    args: ["eval", `await Deno.symlink(${JSON.stringify(target)}, ${JSON.stringify(path)})`],
  }).output();
  assertEquals(code, 0, `symlink ${path} -> ${target}`);
}

/** Both shards of the tiny spec, in `shards`. */
async function shardsOf(spec: string, dir: string, shards: string): Promise<void> {
  for (const shard of ["1/2", "2/2"]) {
    const r = await runScript("sweep", dir, "--spec", spec, "--out", shards, "--shard", shard);
    assertEquals(r.code, 0, r.stderr);
  }
}

Deno.test("file-system errors read as one line: what failed, the path and the OS's reason", async (t) => {
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/file`, "x");
  const caught = async (action: () => Promise<unknown>) => {
    try {
      await action();
    } catch (error) {
      return error;
    }
    throw new Error("expected a failure");
  };
  const cases: [string, () => Promise<unknown>, string][] = [
    ["missing", () => Deno.readFile(`${dir}/none`), `cannot read "${dir}/none": No such file or directory`],
    [
      "a file as a directory",
      () => Deno.mkdir(`${dir}/file/sub`),
      `cannot create directory "${dir}/file/sub": Not a directory`,
    ],
    ["exists", () => Deno.mkdir(`${dir}/file`), `cannot create directory "${dir}/file": File exists`],
    ["a directory as a file", () => Deno.writeTextFile(dir, "x"), `cannot write "${dir}": Is a directory`],
    ["replacing a directory", () => Deno.rename(`${dir}/file`, dir), `cannot replace "${dir}":`],
  ];
  for (const [name, action, expected] of cases) {
    await t.step(
      name,
      async () => assertStringIncludes(fileSystemErrorMessage(await caught(action))!, expected),
    );
  }
  await t.step("a full disk and a read-only file system (as Deno reports them)", () => {
    const full = Object.assign(new Error("No space left on device (os error 28): writefile '/r/x.csv'"), {
      code: "ENOSPC",
    });
    assertEquals(fileSystemErrorMessage(full), 'cannot write "/r/x.csv": No space left on device');
    const readOnly = Object.assign(new Error("Read-only file system (os error 30): open '/r/.sweep.lock'"), {
      code: "EROFS",
    });
    assertEquals(fileSystemErrorMessage(readOnly), 'cannot open "/r/.sweep.lock": Read-only file system');
  });
  await t.step("a write error without a path gets the file's", () => {
    const bare = Object.assign(new Error("No space left on device (os error 28)"), { code: "ENOSPC" });
    assertEquals(
      fileSystemErrorMessage(withPath(bare, "write", "/r/sweep_journal.jsonl")),
      'cannot write "/r/sweep_journal.jsonl": No space left on device',
    );
  });
  await t.step("anything else is not a file-system error", () => {
    assertEquals(fileSystemErrorMessage(new TypeError("x is not a function")), undefined);
    assertEquals(fileSystemErrorMessage("a string"), undefined);
  });
  await Deno.remove(dir, { recursive: true });
});

Deno.test("writeFilesAtomic replaces no file unless every file could be written", async () => {
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/a.txt`, "old a");
  // The second target's directory does not exist: its temporary file cannot be created.
  const error = await writeFilesAtomic(
    new Map([[`${dir}/a.txt`, "new a"], [`${dir}/missing/b.txt`, "new b"]]),
  )
    .then(() => undefined, (e) => e);
  assertEquals(
    fileSystemErrorMessage(error),
    `cannot write "${dir}/missing/b.txt": No such file or directory`,
  );
  assertEquals(await Deno.readTextFile(`${dir}/a.txt`), "old a");
  assertEquals(names(dir), ["a.txt"]); // no temporary file left behind
  await writeFilesAtomic(new Map([[`${dir}/a.txt`, "new a"], [`${dir}/b.txt`, "new b"]]));
  assertEquals([await Deno.readTextFile(`${dir}/a.txt`), await Deno.readTextFile(`${dir}/b.txt`)], [
    "new a",
    "new b",
  ]);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("a bad --out exits 2 with one line and writes nothing", async (t) => {
  const { dir, spec } = await workspace();
  await Deno.writeTextFile(`${dir}/a_file`, "x");
  await shardsOf(spec, dir, `${dir}/shards`);
  const cases: [string, string, RegExp][] = [
    ["empty", "", /^error: --out: expected a directory, got ""$/],
    ["a file", `${dir}/a_file`, /^error: --out: ".*a_file" is a file, expected a directory$/],
    ["below a file", `${dir}/a_file/sub`, /^error: --out .*a_file\/sub: a part of the path is a file/],
  ];
  for (const [name, out, message] of cases) {
    await t.step(`sweep --out ${name}`, async () => {
      const { code, stderr } = await runScript("sweep", dir, "--spec", spec, "--out", out);
      assertEquals(code, 2, stderr);
      assertMatch(messageLine(stderr), message);
      assertEquals(names(dir), ["a_file", "shards", "spec.json"]);
      assertEquals(await Deno.readTextFile(`${dir}/a_file`), "x");
    });
    await t.step(`merge --out ${name}`, async () => {
      const { code, stderr } = await runScript("merge", dir, "--out", out, `${dir}/shards`);
      assertEquals(code, 2, stderr);
      assertMatch(messageLine(stderr), message);
      assertEquals(names(dir), ["a_file", "shards", "spec.json"]);
    });
  }
  await Deno.remove(dir, { recursive: true });
});

Deno.test("a failed output write exits 1 in one line, keeps the previous results and the journal", async () => {
  const { dir, spec } = await workspace();
  const out = `${dir}/out`;
  await Deno.mkdir(out);
  await Deno.writeTextFile(`${out}/summary.txt`, "previous results\n");
  await Deno.writeTextFile(`${out}/plots`, "a file where plots/ must go\n");
  const { code, stderr } = await runScript("sweep", dir, "--spec", spec, "--out", out);
  assertEquals(code, 1, stderr);
  assertEquals(messageLine(stderr), `error: cannot create directory "${out}/plots": File exists`);
  assertEquals(await Deno.readTextFile(`${out}/summary.txt`), "previous results\n");
  // Every point is in the journal: after fixing the directory, --resume writes the results.
  assertEquals(names(out), ["plots", "summary.txt", "sweep_journal.jsonl"]);
  await Deno.remove(`${out}/plots`);
  const resumed = await runScript("sweep", dir, "--spec", spec, "--out", out, "--resume");
  assertEquals(resumed.code, 0, resumed.stderr);
  assertStringIncludes(resumed.stderr, "resuming: 2 of 2 points already recorded");
  assertEquals(names(out), ["plots", "report.html", "summary.txt", "sweep_summary.csv"]);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("merge: a failed output write exits 1 in one line and keeps the previous results", async () => {
  const { dir, spec } = await workspace();
  const shards = `${dir}/shards`, out = `${dir}/out`;
  await shardsOf(spec, dir, shards);
  await Deno.mkdir(out);
  await Deno.writeTextFile(`${out}/summary.txt`, "previous results\n");
  await Deno.mkdir(`${out}/report.html`); // a directory where a file must go: its rename fails
  await Deno.writeTextFile(`${out}/report.html/keep`, "");
  const { code, stderr } = await runScript("merge", dir, "--out", out, shards);
  assertEquals(code, 1, stderr);
  assertEquals(messageLine(stderr), `error: cannot replace "${out}/report.html": Is a directory`);
  assertEquals(await Deno.readTextFile(`${out}/summary.txt`), "previous results\n");
  assertEquals(names(out), ["plots", "report.html", "summary.txt"]); // no temporary file left behind
  await Deno.remove(dir, { recursive: true });
});

Deno.test("writes cannot leave their directory through a symlink", async (t) => {
  const { dir, spec } = await workspace();
  const outside = await Deno.makeTempDir({ prefix: "rrs_outside_" }); // not writable by the sweep
  const out = `${dir}/out`;
  await Deno.mkdir(out);
  await symlink(outside, `${dir}/link`);
  await symlink(`${dir}/nowhere`, `${dir}/dangling`);
  const cases: [string, string, RegExp][] = [
    ["--out is a symlink", `${dir}/link`, /leads through a symlink to .*rrs_outside_.*, outside results\//],
    ["--out below a symlink", `${dir}/link/sub`, /leads through a symlink to .*rrs_outside_.*\/sub/],
    ["--out below a dangling symlink", `${dir}/dangling/sub`, /leads through a dangling symlink/],
  ];
  for (const [name, target, message] of cases) {
    await t.step(name, async () => {
      const { code, stderr } = await runScript("sweep", dir, "--spec", spec, "--out", target);
      assertEquals(code, 2, stderr);
      assertMatch(messageLine(stderr), message);
      assertEquals(names(outside), []);
    });
  }
  await t.step("plots/ is a symlink: refused before the first run", async () => {
    await symlink(outside, `${out}/plots`);
    const { code, stderr } = await runScript("sweep", dir, "--spec", spec, "--out", out);
    assertEquals(code, 2, stderr);
    assertMatch(messageLine(stderr), /plots: leads through a symlink to .*rrs_outside_/);
    assertEquals(stderr.includes("sweep: "), false, "runs started");
    assertEquals(names(outside), []);
    await Deno.remove(`${out}/plots`);
  });
  await t.step("the journal is a symlink", async () => {
    await Deno.writeTextFile(`${outside}/target`, "not a journal\n");
    await symlink(`${outside}/target`, `${out}/sweep_journal.jsonl`);
    const { code, stderr } = await runScript("sweep", dir, "--spec", spec, "--out", out, "--fresh");
    assertEquals(code, 2, stderr);
    assertMatch(
      messageLine(stderr),
      /sweep_journal\.jsonl: leads through a symlink to .*rrs_outside_.*\/target/,
    );
    assertEquals(await Deno.readTextFile(`${outside}/target`), "not a journal\n");
  });
  await Deno.remove(dir, { recursive: true });
  await Deno.remove(outside, { recursive: true });
});

Deno.test("while a sweep holds --out, another sweep, --resume, --fresh or a merge there exits 2 naming it", async (t) => {
  const { dir, spec } = await workspace();
  const out = `${dir}/out`;
  await shardsOf(spec, dir, `${dir}/shards`);
  await Deno.mkdir(out);
  await Deno.writeTextFile(`${out}/sweep_journal.jsonl`, "the running sweep's journal\n");
  const lock = await OutputLock.acquire(`${out}/.sweep.lock`, `--out ${out}`, "sweep --spec spec.json");
  for (const extra of [[], ["--resume"], ["--fresh"]]) {
    await t.step(["sweep", ...extra].join(" "), async () => {
      const { code, stderr } = await runScript("sweep", dir, "--spec", spec, "--out", out, ...extra);
      assertEquals(code, 2, stderr);
      assertMatch(
        messageLine(stderr),
        new RegExp(
          `^error: --out .*out is in use by "sweep --spec spec\\.json" \\(pid ${Deno.pid}, started `,
        ),
      );
    });
  }
  await t.step("merge", async () => {
    const { code, stderr } = await runScript("merge", dir, "--out", out, `${dir}/shards`);
    assertEquals(code, 2, stderr);
    assertMatch(messageLine(stderr), /^error: --out .*out is in use by "sweep --spec spec\.json"/);
  });
  assertEquals(await Deno.readTextFile(`${out}/sweep_journal.jsonl`), "the running sweep's journal\n");
  await t.step("a shard has its own lock, so shards may share a directory", async () => {
    const { code, stderr } = await runScript("sweep", dir, "--spec", spec, "--out", out, "--shard", "1/2");
    assertEquals(code, 0, stderr);
  });
  lock.release();
  assertEquals(names(out), ["shard-1-of-2.jsonl", "sweep_journal.jsonl"]); // no lock file left
  await Deno.remove(dir, { recursive: true });
});

Deno.test("the lock dies with its holder: after kill -9 it can be taken again", async () => {
  const dir = await Deno.makeTempDir({ prefix: "rrs_lock_" });
  const holder = `${dir}/holder.ts`;
  await Deno.writeTextFile(
    holder,
    `import { OutputLock } from ${
      JSON.stringify(new URL("../scenarios/sweep_runner/output_lock.ts", import.meta.url).href)
    };
await OutputLock.acquire(${JSON.stringify(`${dir}/.sweep.lock`)}, "--out ${dir}", "holder");
console.log("locked");
setInterval(() => {}, 1000);`,
  );
  const child = new Deno.Command("deno", {
    args: ["run", "--allow-read", `--allow-write=${dir}`, holder],
    cwd: ROOT,
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  assertEquals((await reader.read()).value?.trim(), "locked");
  const held = await OutputLock.acquire(`${dir}/.sweep.lock`, `--out ${dir}`, "test").then(
    () => "acquired",
    (e) => e.message,
  );
  assertMatch(held, /is in use by "holder" \(pid \d+/);
  child.kill("SIGKILL");
  await child.status;
  await reader.cancel();
  // The lock file stays behind (no exit handler ran), but its lock is gone.
  const lock = await OutputLock.acquire(`${dir}/.sweep.lock`, `--out ${dir}`, "test");
  lock.release();
  await Deno.remove(dir, { recursive: true });
});
