/** The plugin sandbox: the import-graph check, and runs inside the sandboxed Worker. */
import { assert, assertEquals, assertRejects } from "@std/assert";
import { simulate } from "../actors/simulation.ts";
import { checkPluginImports, findImports, pluginImportRules } from "../scenarios/workers/plugin_imports.ts";
import { loadRouterPlugin } from "../scenarios/workers/router_plugin.ts";
import { runPluginScenario } from "../scenarios/workers/run_scenario.ts";
import { parseScenario } from "../scenarios/scenario/scenario.ts";
import { UsageError } from "../scenarios/cli/usage_error.ts";

const ROOT = new URL("..", import.meta.url).pathname;

Deno.test("findImports sees every import form and nothing inside comments or strings", async (t) => {
  const rows: [name: string, source: string, specifiers: (string | undefined)[]][] = [
    ["named", `import { a } from "./a.ts";`, ["./a.ts"]],
    ["default and type", `import b from './b.ts';\nimport type { C } from "./c.ts";`, ["./b.ts"]],
    ["type-only re-export", `export type { D } from "https://evil.example/d.ts";`, []],
    ["a default import named type", `import type from "./type.ts";`, ["./type.ts"]],
    ["side effect", `import "./side.ts";`, ["./side.ts"]],
    ["re-export", `export * from "./all.ts";\nexport { x as y } from "./x.ts";`, ["./all.ts", "./x.ts"]],
    ["multi-line", `import {\n  a,\n  b,\n} from\n  "./ab.ts";`, ["./ab.ts"]],
    ["with attributes", `import t from "/etc/hostname" with { type: "text" };`, ["/etc/hostname"]],
    ["literal dynamic", `const m = await import("./dyn.ts");`, ["./dyn.ts"]],
    ["template dynamic", "const m = await import(`./tpl.ts`);", ["./tpl.ts"]],
    ["computed dynamic", `const m = await import(path);`, [undefined]],
    ["concatenated dynamic", `const m = await import("./a" + suffix);`, [undefined]],
    ["interpolated template", "await import(`./${name}.ts`);", [undefined]],
    ["in a line comment", `// import x from "https://evil.example/x.ts";`, []],
    ["in a block comment", `/* import("https://evil.example/x.ts") */`, []],
    ["in a string", `const s = "import x from 'https://evil.example/x.ts'";`, []],
    ["in a template", 'const s = `from "https://evil.example"`;', []],
    ["a property named import", `obj.import("x"); const from = 1;`, []],
    ["import.meta", `const u = import.meta.url;`, []],
  ];
  for (const [name, source, expected] of rows) {
    await t.step(name, () => {
      const loaded = findImports(source).filter((f) => !f.typeOnly).map((f) => f.specifier);
      assertEquals(loaded.sort(), expected.sort());
    });
  }
});

Deno.test("the import check allows the example plugin, the import map, locked npm packages and actors/", async () => {
  for (const file of ["scenarios/plugins/cache_with_slack.ts", "tests/fixtures/hostile/uses_actors.ts"]) {
    const path = `${ROOT}${file}`;
    await checkPluginImports(path, await pluginImportRules(path));
  }
  const dir = await Deno.makeTempDir();
  const path = `${dir}/mapped.ts`;
  await Deno.writeTextFile(
    path,
    `import mnemonist from "mnemonist";\nimport seedrandom from "npm:seedrandom@3.0.5";\nexport default {};`,
  );
  await checkPluginImports(path, await pluginImportRules(path));
  await Deno.remove(dir, { recursive: true });
});

Deno.test("the import check refuses what a plugin reaches through a file it imports", async () => {
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/plugin.ts`, `import "./helper.ts";\nexport default {};`);
  await Deno.writeTextFile(`${dir}/helper.ts`, `export * from "https://evil.example/x.ts";`);
  const error = await assertRejects(
    async () => checkPluginImports(`${dir}/plugin.ts`, await pluginImportRules(`${dir}/plugin.ts`)),
    UsageError,
  );
  assert(error.message.includes("helper.ts"), error.message);
  assert(error.message.includes('"https://evil.example/x.ts" refused'), error.message);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("a plugin copy of prefix_aware in its sandbox gives the built-in's numbers exactly", async () => {
  const config = parseScenario({
    policy: { name: "prefix_aware" },
    workload: { requests: 3000, prefix: { zipf: 2, sharedFrac: 0.9 } },
  });
  const plugin = await loadRouterPlugin("scenarios/plugins/prefix_aware_copy.ts", { baseDir: ROOT });
  assertEquals(plugin.name, "prefix_aware_copy");
  const sandboxed = await runPluginScenario(config, plugin, 5000);
  const builtIn = simulate(config);
  const { policy: _p, wallMs: _w, scenario: _s, ...sandboxMetrics } = sandboxed;
  const { policy: _q, ...builtInMetrics } = builtIn;
  assertEquals(sandboxMetrics, builtInMetrics);
  assertEquals(sandboxed.policy, "prefix_aware_copy");
});

Deno.test("a symlink beside the plugin opens nothing outside: import refused, read denied", async () => {
  const dir = await Deno.makeTempDir();
  // Deno.symlink needs unscoped write; `deno eval` (all permissions) makes the link.
  const link = `Deno.symlinkSync("/", ${JSON.stringify(`${dir}/root`)})`;
  assertEquals((await new Deno.Command("deno", { args: ["eval", link] }).output()).code, 0);
  // Imported through the link: refused before loading.
  await Deno.writeTextFile(
    `${dir}/imports.ts`,
    `import h from "./root/etc/hostname" with { type: "text" };\nexport default { name: h, choose: () => 0 };`,
  );
  const refused = await assertRejects(() => loadRouterPlugin(`${dir}/imports.ts`), UsageError);
  assert(refused.message.includes("leads through a symlink outside"), refused.message);
  // Read through the link at load time: the Worker may read only the plugin's own files.
  await Deno.writeTextFile(
    `${dir}/reads.ts`,
    `const h = Deno.readTextFileSync(new URL("./root/etc/hostname", import.meta.url));\n` +
      `export default { name: "reads", choose: () => h.length % 2 };`,
  );
  const denied = await assertRejects(() => loadRouterPlugin(`${dir}/reads.ts`), UsageError);
  assert(denied.message.includes('failed to load: Requires read access to "' + dir), denied.message);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("the import check refuses a non-file, a CommonJS module and an oversized module without reading them", async () => {
  const dir = await Deno.makeTempDir();
  await Deno.mkdir(`${dir}/fifo.ts`); // a FIFO would hang a reader; a directory stands in for any non-file
  await Deno.writeTextFile(`${dir}/big.ts`, `export const x = "${"x".repeat(6 * 2 ** 20)}";`);
  await Deno.writeTextFile(`${dir}/old.cjs`, `module.exports = require("node:child_process");`);
  for (
    const [target, why] of [["fifo.ts", "is not a regular file"], ["big.ts", "over the 5 MiB"], [
      "old.cjs",
      "CommonJS",
    ]]
  ) {
    await Deno.writeTextFile(
      `${dir}/p.ts`,
      `import "./${target}";\nexport default { name: "p", choose: () => 0 };`,
    );
    const error = await assertRejects(() => loadRouterPlugin(`${dir}/p.ts`), UsageError);
    assert(error.message.includes(why), error.message);
  }
  await Deno.remove(dir, { recursive: true });
});

Deno.test("a plugin that posts results on its Worker's own channel fails to load: the host hears only our protocol", async () => {
  const error = await assertRejects(
    () => loadRouterPlugin("tests/fixtures/hostile/forged_results.ts", { baseDir: ROOT }),
    UsageError,
  );
  assertEquals(
    error.message,
    `--router: "tests/fixtures/hostile/forged_results.ts" failed to load: a router plugin may not post messages`,
  );
});
