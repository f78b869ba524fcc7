/**
 * The layering of the sources (design.md, "Layering"), enforced on every
 * import — static, type-only, `export … from`, `import("…")` types and
 * literal dynamic `import("…")` — of every .ts file under actors/ and
 * scenarios/, parsed by Deno's own parser (through the lint plugin API).
 */
import { assert, assertEquals } from "@std/assert";
import { dirname, join, normalize, relative } from "node:path";

const ROOT = new URL("..", import.meta.url).pathname;
const IMPORT_MAP: Readonly<Record<string, string>> = JSON.parse(
  await Deno.readTextFile(join(ROOT, "deno.json")),
).imports;

/** One import of a file: the line it is on and what it names. */
interface Import {
  readonly line: number;
  readonly specifier: string;
}

/** Collects every import of a module as a lint report (the message is the specifier). */
const IMPORTS: Deno.lint.Plugin = {
  name: "layering",
  rules: {
    imports: {
      create(context) {
        const report = (node: Deno.lint.Node, source: Deno.lint.Node | null | undefined) => {
          if (source?.type === "Literal" && typeof source.value === "string") {
            context.report({ node, message: source.value });
          }
        };
        return {
          ImportDeclaration: (node) => report(node, node.source),
          ExportNamedDeclaration: (node) => report(node, node.source),
          ExportAllDeclaration: (node) => report(node, node.source),
          ImportExpression: (node) => report(node, node.source),
          TSImportType: (node) =>
            report(node, node.argument.type === "TSLiteralType" ? node.argument.literal : undefined),
        };
      },
    },
  },
};

/** Every import of `source` (at `path`), with its line. */
function importsOf(path: string, source: string): Import[] {
  return Deno.lint.runPlugin(IMPORTS, path, source).map((d) => ({
    line: source.slice(0, d.range[0]).split("\n").length,
    specifier: d.message,
  }));
}

/**
 * Where `specifier`, imported by `from` (repository-relative), points: a
 * repository-relative path, or undefined for a package (`npm:`, `node:`,
 * `jsr:`, or a bare specifier deno.json maps to one).
 */
function resolveImport(from: string, specifier: string): string | undefined {
  let target = specifier;
  if (!/^\.{0,2}\//.test(target) && !target.startsWith("file:")) {
    const key = Object.keys(IMPORT_MAP).find((k) =>
      k === target || (k.endsWith("/") && target.startsWith(k))
    );
    if (key === undefined) return /^(npm|node|jsr):/.test(target) ? undefined : `(unmapped) ${target}`;
    target = IMPORT_MAP[key] + target.slice(key.length);
    if (!target.startsWith(".")) return undefined; // a package
    return normalize(target);
  }
  if (target.startsWith("file:")) return relative(ROOT, new URL(target).pathname);
  return target.startsWith("/") ? relative(ROOT, target) : normalize(join(dirname(from), target));
}

/** One layering rule: which files it binds and what they may import. */
interface LayerRule {
  readonly rule: string;
  readonly binds: (file: string) => boolean;
  readonly allows: (target: string) => boolean;
}

const inside = (dir: string) => (path: string) => path.startsWith(dir);

/** The rules, as design.md states them ("Layering") and actors/README.md and scenarios/README.md draw them. */
const LAYER_RULES: readonly LayerRule[] = [
  {
    rule: "nothing in actors/runtime/ imports outside actors/runtime/",
    binds: inside("actors/runtime/"),
    allows: inside("actors/runtime/"),
  },
  {
    rule: "nothing in actors/policies/ imports from actors/runtime/",
    binds: inside("actors/policies/"),
    allows: (target) => !target.startsWith("actors/runtime/"),
  },
  {
    rule: "actors/policies/ imports only actors/protocol.ts and actors/policies/",
    binds: inside("actors/policies/"),
    allows: (target) => target === "actors/protocol.ts" || target.startsWith("actors/policies/"),
  },
  {
    rule:
      "a concept folder under actors/ takes only actors/protocol.ts from actors/'s top level (the wiring)",
    binds: (file) => /^actors\/[^/]+\//.test(file),
    allows: (target) => !/^actors\/[^/]+\.ts$/.test(target) || target === "actors/protocol.ts",
  },
  {
    rule: "actors/kv_cache/ imports only actors/protocol.ts and actors/kv_cache/",
    binds: inside("actors/kv_cache/"),
    allows: (target) => target === "actors/protocol.ts" || target.startsWith("actors/kv_cache/"),
  },
  {
    rule:
      "actors/instances/ never imports actors/router/ or actors/policies/: an instance knows the router by its messages",
    binds: inside("actors/instances/"),
    allows: (target) => !target.startsWith("actors/router/") && !target.startsWith("actors/policies/"),
  },
  {
    rule: "actors/router/ imports only the protocol, the runtime, the policies, the KV cache keys and itself",
    binds: inside("actors/router/"),
    allows: (target) =>
      target === "actors/protocol.ts" ||
      ["actors/runtime/", "actors/policies/", "actors/kv_cache/", "actors/router/"].some((d) =>
        target.startsWith(d)
      ),
  },
  {
    rule:
      "actors/workload/ and actors/traces/ never import the instances, the router, the policies, dynamics or metrics",
    binds: (file) => file.startsWith("actors/workload/") || file.startsWith("actors/traces/"),
    allows: (target) =>
      !["actors/instances/", "actors/router/", "actors/policies/", "actors/dynamics/", "actors/metrics/"]
        .some((d) => target.startsWith(d)),
  },
  {
    rule: "actors/metrics/ never imports actors/instances/ or actors/router/",
    binds: inside("actors/metrics/"),
    allows: (target) => !target.startsWith("actors/instances/") && !target.startsWith("actors/router/"),
  },
  {
    rule: "nothing under actors/ imports from scenarios/",
    binds: inside("actors/"),
    allows: (target) => !target.startsWith("scenarios/"),
  },
  {
    rule: "scenarios/cli/ imports nothing else of scenarios/: it is the tools' common ground",
    binds: inside("scenarios/cli/"),
    allows: (target) => !target.startsWith("scenarios/") || target.startsWith("scenarios/cli/"),
  },
  {
    rule: "scenarios/scenario/ imports from scenarios/ only scenarios/cli/ and itself",
    binds: inside("scenarios/scenario/"),
    allows: (target) =>
      !target.startsWith("scenarios/") || target.startsWith("scenarios/cli/") ||
      target.startsWith("scenarios/scenario/"),
  },
  {
    rule:
      "scenarios/report/ never imports scenarios/sweep_runner/: it reads a sweep's shape in scenarios/scenario/sweep_types.ts",
    binds: inside("scenarios/report/"),
    allows: (target) => !target.startsWith("scenarios/sweep_runner/"),
  },
  {
    rule: "nothing under actors/ or scenarios/ imports from tests/",
    binds: (file) => file.startsWith("actors/") || file.startsWith("scenarios/"),
    allows: (target) => !target.startsWith("tests/"),
  },
];

/** The breaches of {@linkcode LAYER_RULES} in `files` (repository-relative path → source), one line each. */
function layeringViolations(files: ReadonlyMap<string, string>): string[] {
  const violations: string[] = [];
  for (const [path, source] of files) {
    const rules = LAYER_RULES.filter((r) => r.binds(path));
    if (rules.length === 0) continue;
    for (const { line, specifier } of importsOf(path, source)) {
      const target = resolveImport(path, specifier);
      if (target === undefined) continue;
      for (const r of rules) {
        if (!r.allows(target)) {
          violations.push(`${path}:${line}: imports "${specifier}" (${target}): ${r.rule}`);
        }
      }
    }
  }
  return violations;
}

async function sources(dir: string, into = new Map<string, string>()): Promise<Map<string, string>> {
  for await (const entry of Deno.readDir(join(ROOT, dir))) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) await sources(path, into);
    else if (entry.name.endsWith(".ts")) into.set(path, await Deno.readTextFile(join(ROOT, path)));
  }
  return into;
}

Deno.test("actors/ and scenarios/ keep to the layering: runtime alone, policies on the protocol, each concept folder within its rule, actors never on scenarios, nothing on tests", async () => {
  const files = await sources("actors");
  await sources("scenarios", files);
  assert(files.size > 50, `only ${files.size} files found`);
  for (const r of LAYER_RULES) {
    const bound = [...files.keys()].filter(r.binds);
    assert(bound.length >= 3, `rule "${r.rule}" binds only ${bound}`);
  }
  assertEquals(layeringViolations(files), []);
});

Deno.test("the layering check sees every kind of import and names file, line and path", () => {
  const files = new Map([
    [
      "actors/runtime/clock_probe.ts",
      [
        `import { EventQueue } from "./event_queue.ts";`,
        `import type { SimulationConfig } from "../simulation.ts";`,
        `import seedrandom from "seedrandom";`,
        `import { parse } from "node:path";`,
        `export { UsageError } from "../../scenarios/usage_error.ts";`,
        `export * from "@std/assert";`,
        `type View = import("../policies/policy.ts").RouterView;`,
        `const later = () => import("../protocol.ts");`,
        "const computed = (name: string) => import(name);",
      ].join("\n"),
    ],
    [
      "actors/policies/sneaky.ts",
      [
        `import type { Request } from "../protocol.ts";`,
        `import {`,
        `  pickBy,`,
        `} from "./_pick.ts";`,
        `import type { RandomStream } from "../runtime/random_stream.ts";`,
        `import { Router } from "../router/router.ts";`,
      ].join("\n"),
    ],
    ["actors/instances/peek.ts", `import type { FleetIndex } from "../router/fleet_index.ts";`],
    [
      "actors/kv_cache/keys.ts",
      `import type { Request } from "../protocol.ts";\nimport { TraceReader } from "../traces/trace_reader.ts";`,
    ],
    [
      "scenarios/cli/up.ts",
      `import { parseScenario } from "../scenario/scenario.ts";\nimport { atomicWrite } from "./atomic_write.ts";`,
    ],
    [
      "scenarios/report/deep.ts",
      `import type { Sweep } from "../scenario/sweep_types.ts";\nimport { parseSweep } from "../sweep_runner/sweep_spec.ts";`,
    ],
    ["scenarios/free.ts", `import { Kernel } from "../actors/runtime/kernel.ts";`],
    ["scenarios/testing.ts", `\n\nimport { assert } from "../tests/_std_assert.ts";`],
  ]);
  assertEquals(layeringViolations(files), [
    `actors/runtime/clock_probe.ts:2: imports "../simulation.ts" (actors/simulation.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/runtime/clock_probe.ts:2: imports "../simulation.ts" (actors/simulation.ts): a concept folder under actors/ takes only actors/protocol.ts from actors/'s top level (the wiring)`,
    `actors/runtime/clock_probe.ts:5: imports "../../scenarios/usage_error.ts" (scenarios/usage_error.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/runtime/clock_probe.ts:5: imports "../../scenarios/usage_error.ts" (scenarios/usage_error.ts): nothing under actors/ imports from scenarios/`,
    `actors/runtime/clock_probe.ts:6: imports "@std/assert" (tests/_std_assert.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/runtime/clock_probe.ts:6: imports "@std/assert" (tests/_std_assert.ts): nothing under actors/ or scenarios/ imports from tests/`,
    `actors/runtime/clock_probe.ts:7: imports "../policies/policy.ts" (actors/policies/policy.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/runtime/clock_probe.ts:8: imports "../protocol.ts" (actors/protocol.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/policies/sneaky.ts:5: imports "../runtime/random_stream.ts" (actors/runtime/random_stream.ts): nothing in actors/policies/ imports from actors/runtime/`,
    `actors/policies/sneaky.ts:5: imports "../runtime/random_stream.ts" (actors/runtime/random_stream.ts): actors/policies/ imports only actors/protocol.ts and actors/policies/`,
    `actors/policies/sneaky.ts:6: imports "../router/router.ts" (actors/router/router.ts): actors/policies/ imports only actors/protocol.ts and actors/policies/`,
    `actors/instances/peek.ts:1: imports "../router/fleet_index.ts" (actors/router/fleet_index.ts): actors/instances/ never imports actors/router/ or actors/policies/: an instance knows the router by its messages`,
    `actors/kv_cache/keys.ts:2: imports "../traces/trace_reader.ts" (actors/traces/trace_reader.ts): actors/kv_cache/ imports only actors/protocol.ts and actors/kv_cache/`,
    `scenarios/cli/up.ts:1: imports "../scenario/scenario.ts" (scenarios/scenario/scenario.ts): scenarios/cli/ imports nothing else of scenarios/: it is the tools' common ground`,
    `scenarios/report/deep.ts:2: imports "../sweep_runner/sweep_spec.ts" (scenarios/sweep_runner/sweep_spec.ts): scenarios/report/ never imports scenarios/sweep_runner/: it reads a sweep's shape in scenarios/scenario/sweep_types.ts`,
    `scenarios/testing.ts:3: imports "../tests/_std_assert.ts" (tests/_std_assert.ts): nothing under actors/ or scenarios/ imports from tests/`,
  ]);
});

/** The breaches of "no module imports a command-line tool" (a file with a top-level `if (import.meta.main)`). */
function cliImports(files: ReadonlyMap<string, string>): string[] {
  const clis = new Set(
    [...files].filter(([, source]) => /^if \(import\.meta\.main\)/m.test(source)).map(([p]) => p),
  );
  const violations: string[] = [];
  for (const [path, source] of files) {
    for (const { line, specifier } of importsOf(path, source)) {
      const target = resolveImport(path, specifier);
      if (target !== undefined && clis.has(target)) {
        violations.push(`${path}:${line}: imports the command-line tool ${target}`);
      }
    }
  }
  return violations;
}

Deno.test("no module imports a command-line tool: what two tools share lives in a module of its own", async () => {
  const files = await sources("scenarios");
  await sources("actors", files);
  const clis = [...files].filter(([, source]) => /^if \(import\.meta\.main\)/m.test(source)).map(([p]) => p);
  assert(clis.includes("scenarios/sweep.ts") && clis.includes("scenarios/run.ts"), `tools found: ${clis}`);
  assertEquals(cliImports(files), []);
  // The check has power: a module that imports a tool is named.
  const probe = new Map([...files, ["scenarios/probe.ts", `import { x } from "./sweep.ts";`]]);
  assertEquals(cliImports(probe), [`scenarios/probe.ts:1: imports the command-line tool scenarios/sweep.ts`]);
});

/**
 * The import circles among `files` (repository-relative path → source): each
 * strongly connected component of more than one module, or a module importing
 * itself, as "a → b → … → a" along real imports. Type-only imports count: a
 * circle of types is still two files that cannot be read one without the other.
 */
function importCircles(files: ReadonlyMap<string, string>): string[] {
  return circlesOf(importGraph(files, (path) => path));
}

/**
 * Who imports whom among `files`, each file counted as the node `nodeOf`
 * names: node → the other nodes its files import (a file importing itself
 * stays an edge, so a module's own circle is seen).
 */
function importGraph(
  files: ReadonlyMap<string, string>,
  nodeOf: (path: string) => string,
): Map<string, string[]> {
  const edges = new Map<string, Set<string>>();
  for (const [path, source] of files) {
    const from = nodeOf(path);
    const targets = edges.get(from) ?? edges.set(from, new Set()).get(from)!;
    for (const { specifier } of importsOf(path, source)) {
      const target = resolveImport(path, specifier);
      if (target === undefined || !files.has(target)) continue;
      if (nodeOf(target) !== from || target === path) targets.add(nodeOf(target));
    }
  }
  return new Map([...edges].map(([node, targets]) => [node, [...targets]]));
}

/** The circles of a graph (node → the nodes it points to), each "a → b → … → a", sorted. */
function circlesOf(edges: ReadonlyMap<string, readonly string[]>): string[] {
  // Tarjan's strongly connected components.
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const circles: string[] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v)!) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || edges.get(v)!.includes(v)) circles.push(circleThrough(component, edges));
  };
  for (const v of [...edges.keys()].sort()) if (!index.has(v)) visit(v);
  return circles.sort();
}

/** One circle through a strongly connected `component`, from its first module in sort order. */
function circleThrough(component: readonly string[], edges: ReadonlyMap<string, readonly string[]>): string {
  const members = new Set(component);
  const start = [...component].sort()[0];
  // Breadth-first from start back to start, within the component.
  const from = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift()!;
    for (const w of edges.get(v)!) {
      if (!members.has(w)) continue;
      if (w === start) {
        const path = [start];
        for (let u = v; u !== start; u = from.get(u)!) path.splice(1, 0, u);
        return [...path, start].join(" → ");
      }
      if (!from.has(w)) {
        from.set(w, v);
        queue.push(w);
      }
    }
  }
  return component.join(" ↔ ");
}

Deno.test("no import circle among actors/ and scenarios/, type-only imports included", async () => {
  const files = await sources("actors");
  await sources("scenarios", files);
  assertEquals(importCircles(files), []);
  // The check has power on the real tree: the protocol importing the wiring back closes a circle.
  const probe = new Map(files).set(
    "actors/protocol.ts",
    `${files.get("actors/protocol.ts")}\nimport type { SimulationConfig } from "./simulation.ts";`,
  );
  assert(
    importCircles(probe).some((c) => c.includes("actors/protocol.ts")),
    "a circle through the protocol was missed",
  );
});

Deno.test("the circle check finds a circle of type-only imports and names it along its imports", () => {
  const files = new Map([
    ["actors/workload/a.ts", `import type { B } from "./b.ts";\nexport interface A { b?: B }`],
    ["actors/workload/b.ts", `export type { C } from "../traces/c.ts";\nexport interface B {}`],
    ["actors/traces/c.ts", `type A = import("../workload/a.ts").A;\nexport interface C { a?: A }`],
    ["actors/traces/d.ts", `import type { C } from "./c.ts";`],
    ["actors/self.ts", `import { x } from "./self.ts";\nexport const x = 1;`],
  ]);
  assertEquals(importCircles(files), [
    "actors/self.ts → actors/self.ts",
    "actors/traces/c.ts → actors/workload/a.ts → actors/workload/b.ts → actors/traces/c.ts",
  ]);
});

Deno.test("the folder tree reads as the architecture: at most 12 files at the top of actors/, 14 at the top of scenarios/, every .ts in a concept folder", async () => {
  const top = async (dir: string) => {
    const files: string[] = [];
    for await (const e of Deno.readDir(join(ROOT, dir))) if (e.isFile) files.push(e.name);
    return files.sort();
  };
  const actors = await top("actors"), scenarios = await top("scenarios");
  assert(actors.length <= 12, `${actors.length} files at the top of actors/: ${actors}`);
  assert(scenarios.length <= 14, `${scenarios.length} files at the top of scenarios/: ${scenarios}`);
  // The top of actors/ is the wiring; of scenarios/, the command-line tools (a file with `import.meta.main`).
  const wiring = ["actor_factories.ts", "client_bridge.ts", "mod.ts", "model_worker.ts", "protocol.ts"]
    .concat(["realtime_simulation.ts", "simulation.ts", "topology.ts", "version.ts"]);
  assertEquals(actors.filter((f) => f.endsWith(".ts") && !wiring.includes(f)), []);
  for (const f of scenarios.filter((f) => f.endsWith(".ts"))) {
    const source = await Deno.readTextFile(join(ROOT, "scenarios", f));
    assert(
      /^if \(import\.meta\.main\)/m.test(source),
      `scenarios/${f} is not a command-line tool: move it into its folder`,
    );
  }
});

/**
 * The folder a file belongs to, as a node of the folder graph: its concept
 * folder (`actors/router/`, `scenarios/report/`), `actors/protocol.ts` on its
 * own (every folder speaks it), or the top level of `actors/` (the wiring)
 * and of `scenarios/` (the tools).
 */
function folderOf(path: string): string {
  if (path === "actors/protocol.ts") return path;
  const parts = path.split("/");
  return parts.length > 2 ? `${parts[0]}/${parts[1]}/` : `${parts[0]}/ (top level)`;
}

/** The circles among folders — files of one folder importing another's, round — type imports included. */
function folderCircles(files: ReadonlyMap<string, string>): string[] {
  return circlesOf(importGraph(files, folderOf));
}

Deno.test("no import circle among the folders either: each concept folder is a layer", async () => {
  const files = await sources("actors");
  await sources("scenarios", files);
  assertEquals(folderCircles(files), []);
  // The check has power: the KV cache importing the router closes a circle of folders.
  const probe = new Map(files).set(
    "actors/kv_cache/probe.ts",
    `import type { Router } from "../router/router.ts";`,
  );
  assertEquals(folderCircles(probe), ["actors/kv_cache/ → actors/router/ → actors/kv_cache/"]);
});
