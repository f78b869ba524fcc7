/**
 * The cluster files agree with each other and with the repository: the
 * Kubernetes manifests run the image scenarios/cluster/Containerfile builds
 * (its name, its working directory), every command they run is a deno task,
 * and the Deno they use is the version CI pins. (The image itself is never
 * built here: no container engine or registry.)
 */
import { assert, assertEquals, assertMatch } from "@std/assert";

const ROOT = new URL("..", import.meta.url);
const read = (path: string) => Deno.readTextFile(new URL(path, ROOT));

const config = JSON.parse(await read("deno.json"));
const TASKS = new Set(Object.keys(config.tasks));
const CONTAINERFILE = await read("scenarios/cluster/Containerfile");
const MANIFESTS = ["scenarios/cluster/sweep-indexed-job.yaml", "scenarios/cluster/merge-job.yaml"];
const SLURM = ["scenarios/cluster/sweep-array.slurm", "scenarios/cluster/merge.slurm"];
const PINNED_DENO = /^DENO_VERSION=(\S+)$/m.exec(await read(".ci/run"))![1];

/** The Containerfile's instructions (comments and continuation lines aside), as [keyword, rest]. */
function instructions(text: string): [string, string][] {
  return text.split("\n").filter((line) => /^[A-Z]+ /.test(line)).map((line) => {
    const [, keyword, rest] = /^([A-Z]+) (.*)$/.exec(line)!;
    return [keyword, rest.trim()];
  });
}

/** Every `deno task NAME` a text runs, in shell or in a JSON-style command array. */
function tasksRun(text: string): string[] {
  const shell = [...text.matchAll(/\bdeno(?:@[\d.]+)? task ([\w-]+)/g)].map((m) => m[1]);
  const array = [...text.matchAll(/"deno", "task", "([\w-]+)"/g)].map((m) => m[1]);
  return [...shell, ...array];
}

/** The values of every `key: value` line of a manifest, comments stripped. */
function fieldValues(yaml: string, key: string): string[] {
  return [...yaml.matchAll(new RegExp(`^\\s*(?:- )?${key}: *([^#\\n]*?) *(?:#.*)?$`, "gm"))].map((m) => m[1]);
}

const steps = instructions(CONTAINERFILE);
const workdir = steps.find(([k]) => k === "WORKDIR")?.[1];
/** The name the Containerfile says to build the image under (`-t NAME`, the same in every example). */
const imageNames = [...CONTAINERFILE.matchAll(/ build -f scenarios\/cluster\/Containerfile -t (\S+) \./g)]
  .map((m) => m[1]);

Deno.test("the Containerfile installs the pinned Deno, copies the repository to /app and caches its packages frozen", () => {
  assertMatch(steps[0][1], /^(docker\.io\/library\/)?node:\S+$/);
  const run = steps.filter(([k]) => k === "RUN").map(([, rest]) => rest).join("\n");
  assertMatch(run, new RegExp(`npm install --global deno@${PINNED_DENO.replaceAll(".", "\\.")} `));
  assertEquals(workdir, "/app");
  assert(steps.some(([k, rest]) => k === "COPY" && rest === ". /app"), "COPY . /app");
  assertMatch(run, /deno install --frozen/);
  const cmd = JSON.parse(steps.find(([k]) => k === "CMD")![1]) as string[];
  assertEquals(cmd.slice(0, 2), ["deno", "task"]);
  assert(TASKS.has(cmd[2]), `CMD runs task "${cmd[2]}", which deno.json does not define`);
  assertMatch(CONTAINERFILE, /never been built here/);
});

Deno.test("the Kubernetes manifests run the Containerfile's image, in its working directory, on deno tasks", async (t) => {
  assertEquals(new Set(imageNames).size, 1, `one image name in the build examples, got ${imageNames}`);
  const [image] = imageNames;
  // The tag names the simulator version the image holds.
  assertEquals(image, `request-routing-sim:${config.version}`);
  for (const path of MANIFESTS) {
    await t.step(path, async () => {
      const yaml = await read(path);
      const images = fieldValues(yaml, "image");
      assert(images.length > 0, "no container");
      assertEquals(images, images.map(() => image));
      assertEquals(fieldValues(yaml, "workingDir"), images.map(() => workdir));
      for (const mount of fieldValues(yaml, "mountPath")) assert(mount.startsWith(`${workdir}/`), mount);
      const tasks = tasksRun(yaml);
      assert(tasks.length > 0, "runs no deno task");
      for (const task of tasks) {
        assert(TASKS.has(task), `runs task "${task}", which deno.json does not define`);
      }
      assert(!/\bnpx\b/.test(yaml), "the image has Deno: no npx");
    });
  }
});

Deno.test("the Slurm scripts run deno tasks with the pinned Deno", async (t) => {
  for (const path of SLURM) {
    await t.step(path, async () => {
      const script = await read(path);
      const tasks = tasksRun(script);
      assert(tasks.length > 0, "runs no deno task");
      for (const task of tasks) {
        assert(TASKS.has(task), `runs task "${task}", which deno.json does not define`);
      }
      for (const [, version] of script.matchAll(/deno@([\d.]+)/g)) assertEquals(version, PINNED_DENO);
    });
  }
});

Deno.test("the checks above can fail: a manifest on another image or an unknown task is caught", () => {
  const yaml =
    `containers:\n  - name: x\n    image: node:20 # other\n    command: ["deno", "task", "sweeep"]\n`;
  assertEquals(fieldValues(yaml, "image"), ["node:20"]);
  assertEquals(tasksRun(yaml), ["sweeep"]);
  assert(!TASKS.has("sweeep"));
  assertEquals(tasksRun("npx -y deno@2.9.6 task merge results/shards"), ["merge"]);
});
