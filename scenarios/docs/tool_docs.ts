/**
 * @module
 * The command-line tools as scenarios/README.md documents them: every task's
 * `--help`, as the task prints it, and the keys of `--json`, from the doc
 * comments of the interfaces the tools serialise. A test keeps the page equal
 * to it; `deno run --allow-read --allow-run=deno scenarios/docs/tool_docs.ts`
 * prints it, and with `--write` (and `--allow-write=scenarios/README.md`)
 * puts it in the page.
 */
import config from "../../deno.json" with { type: "json" };
import { SCENARIO_FLAGS_HELP } from "../scenario/command_line.ts";
import { markdownTable, markedSection, replaceSection, type SectionMarkers } from "./markdown.ts";

/** The comments scenarios/README.md's generated tool reference sits between. */
export const TOOL_REFERENCE_MARKERS: SectionMarkers = {
  begin: "<!-- tools:begin -->",
  end: "<!-- tools:end -->",
};

/** The page the tool reference lives in, relative to the repository root. */
export const TOOL_REFERENCE_PAGE = "scenarios/README.md";

/** The order the reference lists the tasks in: the everyday ones first; a task not named here comes last. */
const READING_ORDER = [
  "run",
  "sweep",
  "realtime",
  "serve",
  "load",
  "merge",
  "trace-gen",
  "calibrate",
  "validate",
];

/** The tasks documented: every task deno.json declares but `test` (which is `deno test`'s), in reading order. */
export const TOOL_TASKS: readonly string[] = Object.keys(config.tasks)
  .filter((task) => task !== "test")
  .sort((a, b) => rank(a) - rank(b));

function rank(task: string): number {
  const i = READING_ORDER.indexOf(task);
  return i < 0 ? READING_ORDER.length : i;
}

const ROOT = new URL("../../", import.meta.url);

/**
 * What `deno task TASK --help` prints, run from the repository root with the
 * task's own permissions (the tools keep their help text private, and some
 * load FFI modules on import, so running them is the one way to read it).
 * @throws {Error} naming the task when it exits non-zero.
 */
export async function taskHelp(task: string): Promise<string> {
  const output = await new Deno.Command("deno", {
    args: ["task", "--quiet", task, "--help"],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  if (!output.success) {
    throw new Error(
      `deno task ${task} --help exited ${output.code}: ${text(output.stderr).trim().split("\n")[0]}`,
    );
  }
  return text(output.stdout).trimEnd();
}

/** Every task's help, in {@linkcode TOOL_TASKS} order, read two at a time (the machine is shared). */
export async function allTaskHelp(): Promise<ReadonlyMap<string, string>> {
  const helps = new Map<string, string>();
  for (let i = 0; i < TOOL_TASKS.length; i += 2) {
    const pair = TOOL_TASKS.slice(i, i + 2);
    const texts = await Promise.all(pair.map(taskHelp));
    pair.forEach((task, k) => helps.set(task, texts[k]));
  }
  return helps;
}

/** One documented key of a serialised interface: its name (dotted under a parent) and its doc comment. */
export interface DocumentedKey {
  /** The keys this row covers: one, or a run of related keys under one comment. */
  readonly keys: readonly string[];
  /** The doc comment, on one line, `{@linkcode X}` as `` `X` ``. */
  readonly doc: string;
  /** The declared types, one per key, as written. */
  readonly types: readonly string[];
}

/**
 * Keys whose interface gives them no comment of their own and whose meaning
 * is not the comment above them: what they mean, as the tool sets them.
 */
const UNDOCUMENTED: Readonly<Record<string, string>> = {
  "LoadStats.endpoint": "`completion` or `chat` (`--endpoint`).",
  "LoadStats.model": "The requests' `model` field (`--model`).",
  "LoadStats.speed": "Simulated ms per wall ms (`--speed`).",
  "LoadStats.nonce": "The number that made this run's unique prompt tokens its own (`--nonce`).",
  "LoadStats.completed": "Requests completed.",
  "RealtimeResult.lag": "How far behind schedule the wall clock delivered messages (`lag.*` below).",
  "RealtimeResult.speed": "Simulated ms per wall ms (`--speed`).",
};

/**
 * The properties of `export interface NAME` in `file` (relative to the
 * repository root), each with its doc comment. A property without a comment
 * of its own shares the one above it — the house writes one comment over a
 * run of related keys (`ttftP50Ms`, `ttftP90Ms`, `ttftP99Ms`) — unless
 * {@linkcode UNDOCUMENTED} says what it means.
 * @throws {RangeError} when the file has no such interface, or its first property has no comment.
 */
export async function documentedKeys(file: string, name: string): Promise<DocumentedKey[]> {
  const lines = (await Deno.readTextFile(new URL(file, ROOT))).split("\n");
  const start = lines.findIndex((line) => new RegExp(`^export interface ${name}\\b`).test(line));
  if (start < 0) throw new RangeError(`${file}: expected an exported interface ${name}`);
  const rows: { keys: string[]; doc: string; types: string[] }[] = [];
  let comment: string[] | undefined, inComment = false;
  for (const line of lines.slice(start + 1)) {
    if (line === "}") break;
    const trimmed = line.trim();
    if (trimmed.startsWith("/**")) [comment, inComment] = [[], true];
    if (inComment) {
      comment!.push(trimmed.replace(/^\/\*\*/, "").replace(/\*\/$/, "").replace(/^\*/, "").trim());
      if (trimmed.endsWith("*/")) inComment = false;
      continue;
    }
    const property = /^ {2}readonly (\w+)\??: (.*?);?$/.exec(line);
    if (!property) continue;
    const [, key, type] = property;
    const fallback = UNDOCUMENTED[`${name}.${key}`];
    if (comment || fallback) {
      rows.push({ keys: [key], doc: comment ? oneLine(comment) : fallback, types: [type] });
    } else if (rows.length > 0) {
      rows[rows.length - 1].keys.push(key);
      rows[rows.length - 1].types.push(type);
    } else {
      throw new RangeError(`${file}: ${name}.${key} has no doc comment`);
    }
    comment = undefined;
  }
  return rows;
}

function oneLine(comment: readonly string[]): string {
  return comment.filter((part) => part.length > 0 && !part.startsWith("@")).join(" ")
    .replace(/\{@link(?:code)? ([^}]+)\}/g, "`$1`");
}

/** Where each part of `deno task run --json`'s object is declared, in the order the reference lists them. */
export const RUN_JSON_SOURCES = [
  { file: "actors/simulation.ts", name: "RunResult" },
  { file: "actors/metrics/metrics_collector.ts", name: "RequestMetrics" },
  { file: "scenarios/report/run_report.ts", name: "RunReport" },
] as const;

/** Every key `deno task run --json` prints, from {@linkcode RUN_JSON_SOURCES} (the key `poolPlugin` aside). */
export async function runJsonKeys(): Promise<string[]> {
  const parts = await Promise.all(RUN_JSON_SOURCES.map(({ file, name }) => documentedKeys(file, name)));
  return parts.flat().flatMap((row) => row.keys);
}

/** The `poolPlugin` key both `run` and `realtime` add for a plugin that routes one pool only. */
const POOL_PLUGIN_ROW = [
  "`poolPlugin`",
  "With `--prefill-policy FILE` or `--decode-policy FILE` only: `{ pool, name, path }` of the plugin that routed that pool.",
];

function keyRows(rows: readonly DocumentedKey[], prefix = ""): string[][] {
  return rows.map((row) => [row.keys.map((key) => `\`${prefix}${key}\``).join(", "), row.doc]);
}

/** The `--json` part of the reference: run's and realtime's keys, load's additions, the rest by pointer. */
export async function jsonReference(): Promise<string> {
  const run = (await Promise.all(RUN_JSON_SOURCES.map(({ file, name }) => documentedKeys(file, name))))
    .flat();
  const realtime = await documentedKeys("actors/realtime_simulation.ts", "RealtimeResult");
  const lag = await documentedKeys("actors/runtime/worker_runtime.ts", "LagStats");
  const loadResult = await documentedKeys("scenarios/wire/load_generator.ts", "LoadResult");
  const load = await documentedKeys("scenarios/wire/load_generator.ts", "LoadStats");
  const nulls = loadResult.flatMap((row) => row.keys.filter((_, k) => row.types[k] === "null"));
  return [
    "### The keys of `--json`",
    "",
    "`deno task run --json` prints one object; every key below is always there, a",
    "metric that cannot be computed for the run is `null`, never 0. The",
    "metrics are defined in [design.md](../design.md#metrics).",
    "",
    markdownTable([["key", "meaning"], ...keyRows(run), POOL_PLUGIN_ROW]),
    "",
    "`deno task realtime --json` prints the same keys and these:",
    "",
    markdownTable([["key", "meaning"], ...keyRows(realtime), ...keyRows(lag, "lag.")]),
    "",
    "`deno task load --json` prints run's keys (policy `remote`), `null` where a",
    `client cannot see (${nulls.map((key) => `\`${key}\``).join(", ")}), and \`load\`:`,
    "",
    markdownTable([["key", "meaning"], ...keyRows(load, "load.")]),
    "",
    "`deno task calibrate --json` and `deno task validate --json` print the",
    "content of the `calibration.json` and `validation.json` they write.",
  ].join("\n");
}

/** One task's help as a section; the scenario flags every scenario-taking tool repeats are listed once, apart. */
function taskSection(task: string, help: string): string {
  const shared = help.includes(SCENARIO_FLAGS_HELP);
  const own = help.replace(SCENARIO_FLAGS_HELP, "").trimEnd();
  return [
    `### \`deno task ${task}\``,
    "",
    "```text",
    own,
    "```",
    ...(shared ? ["", "It takes every one of the [scenario flags](#scenario-flags) too."] : []),
  ].join("\n");
}

/** The whole generated reference: every task's help, the shared scenario flags, the `--json` keys. */
export async function toolReference(): Promise<string> {
  const helps = await allTaskHelp();
  return [
    ...TOOL_TASKS.map((task) => taskSection(task, helps.get(task)!)),
    ["### Scenario flags", "", "```text", SCENARIO_FLAGS_HELP, "```"].join("\n"),
    await jsonReference(),
  ].join("\n\n");
}

/** The reference between its markers, as scenarios/README.md should hold it. */
export async function toolReferenceSection(): Promise<string> {
  return markedSection(TOOL_REFERENCE_MARKERS, await toolReference());
}

if (import.meta.main) {
  const section = await toolReferenceSection();
  if (Deno.args.includes("--write")) {
    const page = new URL(TOOL_REFERENCE_PAGE, ROOT);
    const text = await Deno.readTextFile(page);
    await Deno.writeTextFile(
      page,
      replaceSection(text, TOOL_REFERENCE_MARKERS, section, TOOL_REFERENCE_PAGE),
    );
    console.log(`wrote the tool reference into ${TOOL_REFERENCE_PAGE}`);
  } else {
    console.log(section);
  }
}
