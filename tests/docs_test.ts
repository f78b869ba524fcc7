/**
 * The documentation stays true: README.md stays a newcomer's page (short,
 * its recipes near the top), every relative link in it and in the folder
 * pages it introduces reaches a file and a heading that exist, every
 * `scenarios/…` or `actors/…` path it names exists, and scenarios/README.md's
 * tool reference is the one generated from the tools' own help and from the
 * interfaces `--json` serialises, covering every key a run prints.
 */
import { assert, assertEquals } from "@std/assert";
import { parseScenario } from "../scenarios/scenario/scenario.ts";
import { runScenario } from "../scenarios/workers/run_scenario.ts";
import { findSection } from "../scenarios/docs/markdown.ts";
import {
  runJsonKeys,
  TOOL_REFERENCE_MARKERS,
  TOOL_REFERENCE_PAGE,
  toolReferenceSection,
} from "../scenarios/docs/tool_docs.ts";

const ROOT = new URL("..", import.meta.url);

/** The top-level pages checked, beside every .md file under {@linkcode PAGE_DIRS}. */
const TOP_PAGES = ["README.md", "design.md"];
/** The folders whose .md files (the folder pages, the studies' notes) are checked; results/ is generated. */
const PAGE_DIRS = ["actors", "scenarios"];
/** The folders whose .ts and .md files may point at a section of design.md. */
const POINTER_DIRS = ["actors", "scenarios", "tests"];

/** Every file under `dir` (repository-relative) whose name ends in one of `extensions`, sorted. */
async function filesUnder(dir: string, extensions: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  for await (const entry of Deno.readDir(new URL(`${dir}/`, ROOT))) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) found.push(...await filesUnder(path, extensions));
    else if (extensions.some((e) => entry.name.endsWith(e))) found.push(path);
  }
  return found.sort();
}

/** The pages checked: the README, design.md and every .md file of actors/ and scenarios/. */
async function pages(): Promise<string[]> {
  const nested = await Promise.all(PAGE_DIRS.map((dir) => filesUnder(dir, [".md"])));
  return [...TOP_PAGES, ...nested.flat()];
}

/** README's most: a page a newcomer reads to the end. */
const README_MAX_LINES = 250;
/** The line by which each recipe must have started, so a newcomer meets them before the tour. */
const RECIPES_BEFORE_LINE = 120;

async function read(path: string): Promise<string> {
  return await Deno.readTextFile(new URL(path, ROOT));
}

/** The page's lines outside fenced code blocks, with their 1-based line numbers. */
function proseLines(page: string): { line: number; text: string }[] {
  let fenced = false;
  return page.split("\n").flatMap((text, i) => {
    if (/^\s*```/.test(text)) {
      fenced = !fenced;
      return [];
    }
    return fenced ? [] : [{ line: i + 1, text }];
  });
}

/** A heading's anchor as GitHub makes it: lower case, punctuation but `-` and `_` dropped, spaces as `-`. */
function headingAnchor(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
}

/** Every anchor a markdown page offers, repeated headings numbered as GitHub numbers them. */
function anchors(page: string): Set<string> {
  const seen = new Map<string, number>(), result = new Set<string>();
  for (const { text } of proseLines(page)) {
    const heading = /^#{1,6}\s+(.*)$/.exec(text);
    if (!heading) continue;
    const anchor = headingAnchor(heading[1]);
    const count = seen.get(anchor) ?? 0;
    seen.set(anchor, count + 1);
    result.add(count === 0 ? anchor : `${anchor}-${count}`);
  }
  return result;
}

/** Relative link targets in a page's prose (inline code stripped), with their line numbers. */
function relativeLinks(page: string): { line: number; target: string }[] {
  return proseLines(page).flatMap(({ line, text }) =>
    [
      ...text.replace(/`[^`]*`/g, (code) => code.includes("](") ? "" : code)
        .matchAll(/\]\(([^)\s]+)\)/g),
    ]
      .map((m) => ({ line, target: m[1] }))
      .filter(({ target }) => !/^[a-z]+:/.test(target))
  );
}

async function exists(url: URL): Promise<boolean> {
  try {
    await Deno.stat(url);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

Deno.test("README.md is at most 250 lines and its three recipes start before line 120", async () => {
  const lines = (await read("README.md")).trimEnd().split("\n");
  assert(
    lines.length <= README_MAX_LINES,
    `README.md has ${lines.length} lines, expected at most ${README_MAX_LINES}`,
  );
  const recipes = lines.flatMap((text, i) => /^## Recipe: /.test(text) ? [{ line: i + 1, text }] : []);
  assertEquals(recipes.length, 3, `expected three "## Recipe: …" headings, got ${JSON.stringify(recipes)}`);
  for (const recipe of recipes) {
    assert(recipe.line < RECIPES_BEFORE_LINE, `"${recipe.text}" starts at line ${recipe.line}`);
  }
  assert(lines.some((text) => text.includes("deno task sweep")), "the quick start lacks deno task sweep");
  assert(lines.some((text) => text.includes("deno task test")), "the quick start lacks deno task test");
});

Deno.test("every relative link in README.md, design.md and every page of actors/ and scenarios/ reaches a file and a heading that exist", async (t) => {
  for (const path of await pages()) {
    await t.step(path, async () => {
      const base = new URL(path, ROOT);
      const broken: string[] = [];
      for (const { line, target } of relativeLinks(await read(path))) {
        const [file, anchor] = target.split("#", 2);
        const url = file === "" ? base : new URL(file, base);
        if (!await exists(url)) {
          broken.push(`${path}:${line}: ${target}: no such file`);
        } else if (anchor !== undefined && url.pathname.endsWith(".md")) {
          const offered = anchors(await Deno.readTextFile(url));
          if (!offered.has(anchor)) broken.push(`${path}:${line}: ${target}: no heading with that anchor`);
        }
      }
      assertEquals(broken, []);
    });
  }
});

/**
 * The sections of design.md a file points at in words — `design.md, "Heading"`,
 * `design.md ("Heading", "Other")`, `design.md, "A" and "B"` — with their line
 * numbers; a quoted heading may wrap onto a comment's next line.
 */
function designPointers(source: string): { line: number; heading: string }[] {
  const quoted = String.raw`"((?:[^"\n]|\n[ \t]*(?:\*|\/\/|#)?[ \t]*)+)"`;
  const pointer = new RegExp(
    String.raw`design\.md(?:, | \()` + quoted + String.raw`((?:(?:,\s*| and\s+)` +
      quoted.replace("(", "(?:") + ")*)",
    "g",
  );
  const found: { line: number; heading: string }[] = [];
  for (const match of source.matchAll(pointer)) {
    const line = source.slice(0, match.index).split("\n").length;
    const rest = [...match[2].matchAll(new RegExp(quoted, "g"))].map((m) => m[1]);
    for (const heading of [match[1], ...rest]) {
      found.push({ line, heading: heading.replace(/\n[ \t]*(?:\*|\/\/|#)?[ \t]*/g, " ").trim() });
    }
  }
  return found;
}

Deno.test('every design.md, "Heading" pointer names a heading of design.md (a prefix counts)', async () => {
  const headings = proseLines(await read("design.md")).flatMap(({ text }) => {
    const heading = /^#{1,6}\s+(.*)$/.exec(text);
    return heading ? [heading[1].trim()] : [];
  });
  const nested = await Promise.all(POINTER_DIRS.map((dir) => filesUnder(dir, [".ts", ".md"])));
  const stale: string[] = [];
  let pointers = 0;
  // This file's own comments show the pattern with placeholder headings.
  for (const path of [...TOP_PAGES, ...nested.flat()].filter((p) => p !== "tests/docs_test.ts")) {
    for (const { line, heading } of designPointers(await read(path))) {
      pointers++;
      if (!headings.some((h) => h.startsWith(heading))) {
        stale.push(`${path}:${line}: design.md, "${heading}": no heading of design.md starts so`);
      }
    }
  }
  assert(pointers > 0, "no design.md pointer found: the pattern no longer matches the sources");
  assertEquals(stale, []);
});

Deno.test("every scenarios/… or actors/… path README.md names in backticks exists", async () => {
  const named = proseLines(await read("README.md")).flatMap(({ line, text }) =>
    [...text.matchAll(/`((?:scenarios|actors)\/[^`\s]*)`/g)].map((m) => ({ line, path: m[1] }))
  );
  assert(named.length > 0, "README.md names no scenarios/ or actors/ path");
  const missing: string[] = [];
  for (const { line, path } of named) {
    if (!await exists(new URL(path, ROOT))) missing.push(`README.md:${line}: ${path}`);
  }
  assertEquals(missing, []);
});

Deno.test("scenarios/README.md's tool reference is the one generated from the tools' help and --json types", async () => {
  const expected = await toolReferenceSection();
  const actual = findSection(await read(TOOL_REFERENCE_PAGE), TOOL_REFERENCE_MARKERS, TOOL_REFERENCE_PAGE);
  assert(
    actual === expected,
    `${TOOL_REFERENCE_PAGE}'s tool reference is stale; rewrite it with ` +
      "deno run --allow-read --allow-run=deno --allow-write=scenarios/README.md scenarios/docs/tool_docs.ts --write",
  );
});

Deno.test("the reference documents exactly the keys deno task run --json prints", async () => {
  const report = runScenario(parseScenario({ workload: { requests: 50 } }));
  const printed = Object.keys(JSON.parse(JSON.stringify(report))).sort();
  const documented = (await runJsonKeys()).sort();
  assertEquals(printed, documented);
});
