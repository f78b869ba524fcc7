/**
 * The project's lint rules (tests/lint/project_rules.ts): `max-function-lines`
 * reports a product function of 81 lines and not one of 80, and `deno lint`
 * runs it through deno.json's `lint.plugins`.
 */
import { assertEquals } from "@std/assert";
import plugin, { MAX_FUNCTION_LINES } from "./lint/project_rules.ts";

const RULES = new URL("./lint/project_rules.ts", import.meta.url).pathname;
const CODE = "project/max-function-lines";

/** A function declaration spanning exactly `lines` lines (at least 4), first to last. */
function functionOf(lines: number, name = "f"): string {
  const body = ["  let x = 0;", ...Array(lines - 4).fill("  x++;"), "  return x;"];
  return [`export function ${name}(): number {`, ...body, "}"].join("\n");
}

/** The messages the rule reports for `source` at `path`. */
function lint(path: string, source: string): string[] {
  return Deno.lint.runPlugin(plugin, path, source).map((d) => d.message);
}

Deno.test("the test's functions span the lines they are asked to", () => {
  for (const lines of [80, 81]) assertEquals(functionOf(lines).split("\n").length, lines);
});

Deno.test("max-function-lines reports an 81-line product function and not an 80-line one", async (t) => {
  const limit = MAX_FUNCTION_LINES;
  assertEquals(limit, 80);
  const rows: [what: string, path: string, source: string, expected: string[]][] = [
    ["80 lines under scenarios/", "/tmp/x/scenarios/a.ts", functionOf(80), []],
    ["81 lines under scenarios/", "/tmp/x/scenarios/a.ts", functionOf(81), [
      "function f spans 81 lines; the limit is 80",
    ]],
    ["81 lines under actors/", "/tmp/x/actors/runtime/a.ts", functionOf(81), [
      "function f spans 81 lines; the limit is 80",
    ]],
    ["81 lines outside product code (tests/)", "/tmp/x/tests/a_test.ts", functionOf(81), []],
    [
      "an 81-line arrow function",
      "/tmp/x/scenarios/a.ts",
      `export const g = () => {\n${"  1;\n".repeat(79)}};`,
      ["arrow function spans 81 lines; the limit is 80"],
    ],
    [
      "an 81-line method, reported once",
      "/tmp/x/scenarios/a.ts",
      `export class C {\n  m(): void {\n${"    1;\n".repeat(79)}  }\n}`,
      ["method m spans 81 lines; the limit is 80"],
    ],
    [
      "an 81-line if (import.meta.main) block",
      "/tmp/x/scenarios/a.ts",
      `if (import.meta.main) {\n${"  1;\n".repeat(79)}}`,
      ["if (import.meta.main) spans 81 lines; the limit is 80"],
    ],
  ];
  for (const [what, path, source, expected] of rows) {
    await t.step(what, () => assertEquals(lint(path, source), expected));
  }
});

Deno.test("deno lint runs the rule from lint.plugins: the 81-line file is reported, the 80-line one is not", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("../deno.json", import.meta.url)));
  assertEquals(config.lint.plugins, ["./tests/lint/project_rules.ts"]);

  const dir = await Deno.makeTempDir();
  try {
    await Deno.mkdir(`${dir}/scenarios`);
    await Deno.writeTextFile(`${dir}/scenarios/long.ts`, `${functionOf(81, "long")}\n`);
    await Deno.writeTextFile(`${dir}/scenarios/short.ts`, `${functionOf(80, "short")}\n`);
    await Deno.writeTextFile(`${dir}/deno.json`, JSON.stringify({ lint: { plugins: [RULES] } }));
    const output = await new Deno.Command("deno", {
      args: ["lint", "--config", `${dir}/deno.json`, "--json", `${dir}/scenarios`],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const report = JSON.parse(new TextDecoder().decode(output.stdout));
    const reported = report.diagnostics
      .filter((d: { code: string }) => d.code === CODE)
      .map((d: { filename: string; message: string }) => `${d.filename.split("/").pop()}: ${d.message}`);
    assertEquals(reported, ["long.ts: function long spans 81 lines; the limit is 80"]);
    assertEquals(output.code, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
