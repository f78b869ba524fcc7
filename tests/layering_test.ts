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

/** The rules, as design.md states them. */
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
    rule: "nothing under actors/ imports from scenarios/",
    binds: inside("actors/"),
    allows: (target) => !target.startsWith("scenarios/"),
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

Deno.test("actors/ and scenarios/ keep to the layering: runtime alone, policies on the protocol, actors never on scenarios, nothing on tests", async () => {
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
        `import { Router } from "../router.ts";`,
      ].join("\n"),
    ],
    ["scenarios/free.ts", `import { Kernel } from "../actors/runtime/kernel.ts";`],
    ["scenarios/testing.ts", `\n\nimport { assert } from "../tests/_std_assert.ts";`],
  ]);
  assertEquals(layeringViolations(files), [
    `actors/runtime/clock_probe.ts:2: imports "../simulation.ts" (actors/simulation.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/runtime/clock_probe.ts:5: imports "../../scenarios/usage_error.ts" (scenarios/usage_error.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/runtime/clock_probe.ts:5: imports "../../scenarios/usage_error.ts" (scenarios/usage_error.ts): nothing under actors/ imports from scenarios/`,
    `actors/runtime/clock_probe.ts:6: imports "@std/assert" (tests/_std_assert.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/runtime/clock_probe.ts:6: imports "@std/assert" (tests/_std_assert.ts): nothing under actors/ or scenarios/ imports from tests/`,
    `actors/runtime/clock_probe.ts:7: imports "../policies/policy.ts" (actors/policies/policy.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/runtime/clock_probe.ts:8: imports "../protocol.ts" (actors/protocol.ts): nothing in actors/runtime/ imports outside actors/runtime/`,
    `actors/policies/sneaky.ts:5: imports "../runtime/random_stream.ts" (actors/runtime/random_stream.ts): nothing in actors/policies/ imports from actors/runtime/`,
    `actors/policies/sneaky.ts:5: imports "../runtime/random_stream.ts" (actors/runtime/random_stream.ts): actors/policies/ imports only actors/protocol.ts and actors/policies/`,
    `actors/policies/sneaky.ts:6: imports "../router.ts" (actors/router.ts): actors/policies/ imports only actors/protocol.ts and actors/policies/`,
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
