/** `kill -9` of the `deno task` wrapper stops its sweep as Ctrl-C does, instead of leaving an orphan running. */
import { assert, assertEquals, assertStringIncludes } from "@std/assert";
import { PARENT_POLL_MS } from "../scenarios/cli/parent_watch.ts";
import { readJournal } from "../scenarios/sweep_runner/sweep_journal.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/** 96 runs of 50,000 requests on one Worker: several seconds, far longer than the test waits. */
const LONG_SPEC = {
  base: { workload: { requests: 50_000 } },
  axes: { "workload.ratePerSec": [20, 30, 40, 50, 60, 70] },
  policies: [{ name: "round_robin" }, { name: "least_load" }],
  seeds: [1, 2, 3, 4, 5, 6, 7, 8],
};

Deno.test({
  name: "kill -9 of the deno task wrapper stops the sweep within 2 s and keeps its journal",
  ignore: Deno.build.os === "windows", // no SIGKILL
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "rrs_orphan_" });
    const out = `${dir}/out`;
    await Deno.writeTextFile(`${dir}/spec.json`, JSON.stringify(LONG_SPEC));
    // A deno.json whose task starts the sweep as the repository's `sweep` task does, writing to `out`.
    const run = [
      "deno run",
      `--config ${ROOT}deno.json`,
      `--allow-read --allow-write=${out} --allow-ffi --allow-sys`,
      `${ROOT}scenarios/sweep.ts --spec ${dir}/spec.json --out ${out} --workers 1`,
    ].join(" ");
    await Deno.writeTextFile(`${dir}/deno.json`, JSON.stringify({ tasks: { sweep: run } }));
    const spawnedAt = performance.now();
    const wrapper = new Deno.Command("deno", {
      args: ["task", "sweep"],
      cwd: dir,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const reader = wrapper.stderr.pipeThrough(new TextDecoderStream()).getReader();
    let stderr = "";
    while (!stderr.includes("sweep: ")) { // the first progress line: the sweep is running
      const chunk = await reader.read();
      if (chunk.done) break;
      stderr += chunk.value;
    }
    // How long this machine took, just now, to start deno task, the sweep and its Worker: its speed
    // at the moment, measured in this run. Stopping is the same kind of work (a Worker ended, a
    // journal closed, a process gone), so a machine slow to start is as slow to stop.
    const startedAfterMs = performance.now() - spawnedAt;
    const holder = JSON.parse(await Deno.readTextFile(`${out}/.sweep.lock`));
    assert(
      typeof holder.pid === "number" && holder.pid !== wrapper.pid,
      "the sweep runs in the wrapper's child",
    );

    wrapper.kill("SIGKILL");
    await wrapper.status;
    const killedAt = performance.now();
    // The orphaned sweep holds the stderr pipe: it closes (end of stream) when the sweep ends.
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) stderr += chunk.value;
    const stoppedAfterMs = performance.now() - killedAt;

    // One poll of the parent, then at most 1.5 s, or as long as starting took if that was longer.
    // Without the watch the sweep runs on through its 96 runs, far longer than starting it took.
    const boundMs = PARENT_POLL_MS + Math.max(1500, startedAfterMs);
    assert(
      stoppedAfterMs < boundMs,
      `the sweep ran on for ${stoppedAfterMs.toFixed(0)} ms after its wrapper died ` +
        `(bound ${boundMs.toFixed(0)} ms: it took ${startedAfterMs.toFixed(0)} ms to start)`,
    );
    const messages = stderr.split("\n").filter((l) =>
      l.trim() !== "" && !l.startsWith("sweep: ") && !l.includes("Task")
    );
    assertEquals(messages.length, 1, stderr);
    assertStringIncludes(messages[0], "interrupted (the process that started this sweep is gone): ");
    assertStringIncludes(messages[0], "run the same command with --resume");
    const journal = await readJournal(`${out}/sweep_journal.jsonl`);
    assertEquals(journal.torn, false);
    assert(journal.points.size < 6, `${journal.points.size} points: the sweep was not stopped`);
    assertEquals([...Deno.readDirSync(out)].map((e) => e.name), ["sweep_journal.jsonl"]);
    await Deno.remove(dir, { recursive: true });
  },
});
