/**
 * @module
 * What every command-line tool shares: the scenario flags (a contract later
 * tools rely on), turning flags plus an optional scenario file into a
 * validated config, and the exit-code discipline (0 ok, 1 run failure, 2 bad
 * usage, no stack trace for a user's mistake).
 */
import { parseArgs, type ParseArgsConfig } from "node:util";
import type { SimulationConfig } from "../actors/simulation.ts";
import { SimulationError } from "../actors/runtime/simulation_error.ts";
import { TraceFormatError } from "../actors/trace_reader.ts";
import {
  checkTraceFile,
  deepMerge,
  parseScenario,
  readJsonFile,
  resolveTracePath,
  scenarioPath,
} from "./scenario.ts";
import { fileSystemErrorMessage } from "./file_system_error.ts";
import { UsageError } from "./usage_error.ts";

/** A numeric scenario flag: where it lands in the scenario and whether it must be whole. */
interface NumericFlag {
  readonly path: readonly string[];
  readonly integer: boolean;
}

/** The numeric flags that override scenario fields. */
export const NUMERIC_FLAGS: Readonly<Record<string, NumericFlag>> = {
  threshold: { path: ["policy", "threshold"], integer: false },
  instances: { path: ["instances", "count"], integer: true },
  rate: { path: ["workload", "ratePerSec"], integer: false },
  requests: { path: ["workload", "requests"], integer: true },
  zipf: { path: ["workload", "prefix", "zipf"], integer: false },
  "prefix-frac": { path: ["workload", "prefix", "sharedFrac"], integer: false },
  "prefix-groups": { path: ["workload", "prefix", "groups"], integer: true },
  "prefix-tokens": { path: ["workload", "prefix", "tokens"], integer: true },
  "suffix-tokens": { path: ["workload", "suffixTokens"], integer: true },
  "cache-capacity": { path: ["instances", "cacheCapacity"], integer: true },
  "trace-speed": { path: ["workload", "trace", "speed"], integer: false },
  seed: { path: ["seed"], integer: true },
};

/** Flags every scenario-running tool accepts, in `node:util` `parseArgs` form. */
export const SCENARIO_OPTIONS = {
  policy: { type: "string" },
  router: { type: "string" },
  "plugin-timeout-ms": { type: "string" },
  model: { type: "string" },
  preset: { type: "string" },
  trace: { type: "string" },
  "skip-invalid": { type: "boolean" },
  scenario: { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  ...Object.fromEntries(Object.keys(NUMERIC_FLAGS).map((name) => [name, { type: "string" }])),
} as const satisfies ParseArgsConfig["options"];

/** Help text for the scenario flags. */
export const SCENARIO_FLAGS_HELP = `Scenario flags (override the scenario file; defaults in README):
  --scenario FILE        JSON scenario file (see scenarios/example.json)
  --policy NAME          round_robin | least_load | prefix_aware | hybrid | random | sglang_cache_aware |
                         llmd_weighted | dynamo_kv | power_of_two | chwbl | preble_e2 | vllm_prefix
  --router FILE.ts       use a router plugin instead of --policy (see README)
  --plugin-timeout-ms N  wall ms a plugin may take to load or to make one routing decision (default 5000)
  --model M              instance model: fifo (the original study's) | batching
  --preset NAME          batching engine: qwen2.5-7b | llama-3.1-8b | qwen3-14b | llama-3.3-70b-tp4
  --trace FILE           replay a trace (Mooncake .jsonl, Azure .csv) instead of the synthetic workload
  --trace-speed X        compress trace time by X (2 = twice the load), > 0
  --skip-invalid         skip malformed trace lines (and report how many) instead of failing
  --threshold N          hybrid's queue-depth gate, >= 0: follow the longest cached prefix only while
                         fewer than N requests are queued there (fifo: waiting behind the one in service;
                         batching: still owed their first token, waiting or in prefill)
  --instances N          number of serving instances, integer >= 1
  --rate R               arrival rate, requests per second, > 0
  --requests N           requests to simulate, integer >= 1
  --zipf S               Zipf exponent of prefix-group popularity, >= 0
  --prefix-frac F        share of requests with a shared prefix, in [0, 1]
  --prefix-groups N      number of shared prefix groups, integer >= 1
  --prefix-tokens N      prefix length in tokens, integer >= 0
  --suffix-tokens N      mean suffix length in tokens (keeps its distribution; > 0 if exponential)
  --cache-capacity N     prefix groups each instance's LRU cache holds, integer >= 0
  --seed N               seed of every random stream, integer >= 0
  --json                 print JSON instead of a table
  -h, --help             show this help`;

/**
 * Parses argv strictly: an unknown flag, a missing value or a stray argument
 * is a {@linkcode UsageError}.
 */
export function parseFlags<O extends ParseArgsConfig["options"]>(
  args: readonly string[],
  options: O,
  allowPositionals = false,
) {
  try {
    return parseArgs({
      args: joinNegativeValues(args, options),
      options,
      strict: true,
      allowPositionals,
    });
  } catch (error) {
    const message = (error as Error).message;
    const unknown = /Unknown option '([^']+)'/.exec(message);
    if (unknown) throw new UsageError(`unknown flag ${unknown[1]} (see --help)`);
    const positional = /Unexpected argument '([^']+)'/.exec(message);
    if (positional) {
      throw new UsageError(`unexpected argument "${positional[1]}" (flags start with --; see --help)`);
    }
    const missing = /Option '(--[^ ']+)[^']*' argument missing/.exec(message);
    if (missing) throw new UsageError(`${missing[1]}: expected a value after the flag`);
    throw new UsageError(message.split("\n")[0]);
  }
}

/**
 * Turns `--rate -3` into `--rate=-3`, so a negative number reaches validation
 * (and its clear message) instead of `parseArgs`'s "ambiguous" complaint.
 */
function joinNegativeValues(args: readonly string[], options: ParseArgsConfig["options"]): string[] {
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const name = args[i].startsWith("--") ? args[i].slice(2) : undefined;
    const next = args[i + 1];
    if (name && options?.[name]?.type === "string" && next !== undefined && /^-\d|^-\.\d/.test(next)) {
      joined.push(`${args[i]}=${next}`);
      i++;
    } else {
      joined.push(args[i]);
    }
  }
  return joined;
}

/**
 * Builds the validated config from the scenario file (if any) and the flags,
 * which win over the file. Errors from a flag's value name the flag. Relative
 * paths (`--scenario`, `--trace`, a trace in the file) are relative to the
 * caller's directory; the returned trace path is absolute.
 */
export async function configFromFlags(values: Record<string, unknown>): Promise<SimulationConfig> {
  const file = typeof values.scenario === "string" ? await readJsonFile(values.scenario) : {};
  // --policy naming another policy replaces the file's policy with its
  // parameters (a hybrid threshold in the file does not follow --policy round_robin).
  const filePolicy = (file as { policy?: { name?: unknown } } | null)?.policy;
  const base = typeof values.policy === "string" && filePolicy !== undefined &&
      (filePolicy?.name ?? "hybrid") !== values.policy
    ? Object.fromEntries(Object.entries(file as object).filter(([key]) => key !== "policy"))
    : file;
  const overrides: Record<string, unknown> = {};
  const flagOfPath = new Map<string, string>();
  const strings: [flag: string, path: string[]][] = [
    ["policy", ["policy", "name"]],
    ["model", ["instances", "model"]],
    ["preset", ["instances", "engine", "preset"]],
    ["trace", ["workload", "trace", "path"]],
  ];
  for (const [flag, path] of strings) {
    if (typeof values[flag] !== "string") continue;
    setAt(overrides, path, values[flag]);
    flagOfPath.set(path.join("."), `--${flag}`);
  }
  if (values["skip-invalid"] === true) {
    setAt(overrides, ["workload", "trace", "skipInvalid"], true);
    flagOfPath.set("workload.trace.skipInvalid", "--skip-invalid");
  }
  for (const [name, flag] of Object.entries(NUMERIC_FLAGS)) {
    const raw = values[name];
    if (typeof raw !== "string") continue;
    const value = parseNumber(`--${name}`, raw, flag.integer);
    flagOfPath.set(flag.path.join("."), `--${name}`);
    if (name === "suffix-tokens") setAt(overrides, flag.path, withMean(`--${name}`, base, value));
    else setAt(overrides, flag.path, value);
  }
  // With a trace, --requests caps how many of its requests are replayed.
  const trace =
    (deepMerge(base, overrides) as { workload?: { trace?: { path?: unknown; generate?: unknown } } })
      .workload?.trace;
  if (trace !== undefined && typeof values.requests === "string") {
    setAt(overrides, ["workload", "trace", "maxRequests"], Number(values.requests));
    delete (overrides.workload as Record<string, unknown>).requests;
    flagOfPath.set("workload.trace.maxRequests", "--requests");
  }
  for (const flag of ["--trace-speed", "--skip-invalid"]) {
    const set = flag === "--trace-speed"
      ? typeof values["trace-speed"] === "string"
      : values["skip-invalid"] === true;
    if (set && trace?.path === undefined && trace?.generate === undefined) {
      throw new UsageError(`${flag}: needs --trace FILE (or workload.trace in the scenario file)`);
    }
  }
  if (
    typeof values.router === "string" &&
    (typeof values.policy === "string" || typeof values.threshold === "string")
  ) {
    throw new UsageError(
      `--router: replaces the built-in policy; drop ${
        typeof values.policy === "string" ? "--policy" : "--threshold"
      }`,
    );
  }
  const merged = deepMerge(base, overrides);
  const config = parseScenario(merged, (path) => {
    for (let n = path.length; n > 0; n--) {
      const flag = flagOfPath.get(path.slice(0, n).join("."));
      if (flag) return flag;
    }
    // A whole section the user set through one of its flags (e.g. --preset for instances.engine).
    const field = path.join(".");
    for (const [flagPath, flag] of flagOfPath) if (flagPath.startsWith(`${field}.`)) return flag;
    return scenarioPath(path);
  });
  if (typeof values.threshold === "string" && config.policy.name !== "hybrid") {
    throw new UsageError(
      `--threshold: only hybrid has a threshold, and this run's policy is "${config.policy.name}"`,
    );
  }
  await checkTraceFile(
    config,
    flagOfPath.has("workload.trace.path") ? "--trace" : "scenario.workload.trace.path",
  );
  return resolveTracePath(config);
}

/**
 * `--plugin-timeout-ms`: any finite number > 0, default 5000; an error
 * without `--router`, where it would be ignored.
 */
export function pluginTimeoutMs(values: Record<string, unknown>): number {
  const raw = values["plugin-timeout-ms"];
  if (raw === undefined) return 5000;
  if (typeof values.router !== "string") throw new UsageError("--plugin-timeout-ms: needs --router FILE.ts");
  const value = parseNumber("--plugin-timeout-ms", String(raw), false);
  if (!(value > 0)) throw new UsageError(`--plugin-timeout-ms: expected a number > 0, got ${raw}`);
  return value;
}

function parseNumber(flag: string, raw: string, integer: boolean): number {
  const value = raw.trim() === "" ? NaN : Number(raw);
  if (!Number.isFinite(value)) throw new UsageError(`${flag}: expected a number, got "${raw}"`);
  if (integer && !Number.isInteger(value)) throw new UsageError(`${flag}: expected an integer, got ${raw}`);
  return value;
}

/** The suffix distribution of `base` with its mean set to `mean`. */
function withMean(flag: string, base: unknown, mean: number): unknown {
  const current = (base as { workload?: { suffixTokens?: { dist?: string } } })?.workload?.suffixTokens;
  switch (current?.dist ?? "exponential") {
    case "constant":
      return { dist: "constant", value: mean };
    case "exponential":
      return { dist: "exponential", mean };
    default:
      throw new UsageError(
        `${flag}: cannot set the mean of a "${current?.dist}" suffix distribution; edit workload.suffixTokens in the scenario file`,
      );
  }
}

function setAt(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) node = (node[key] ??= {}) as Record<string, unknown>;
  node[path[path.length - 1]] = value;
}

/** A message on one line: text a plugin (or a file) put on several lines is joined with " / ". */
export function oneLine(message: string): string {
  return message.replace(/\s*\n\s*/g, " / ");
}

/**
 * Runs a command-line entry point with the exit-code contract: a
 * {@linkcode UsageError} prints one line and exits 2, a
 * {@linkcode SimulationError} or a file-system error (path and OS reason)
 * prints one line and exits 1.
 */
export async function runCommand(main: () => Promise<void> | void): Promise<void> {
  // An error thrown later by a plugin's own timer or promise is still a run failure, in one line.
  const uncaught = (message: string) => {
    console.error(`run failed: uncaught error (from a router plugin?): ${message}`);
    Deno.exit(1);
  };
  globalThis.addEventListener("error", (event) => {
    event.preventDefault();
    uncaught(event.message.replace(/^Uncaught (\(in promise\) )?/, ""));
  });
  globalThis.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    uncaught(String((event.reason as Error)?.message ?? event.reason));
  });
  try {
    await main();
  } catch (error) {
    if (error instanceof Deno.errors.NotCapable) {
      const path = /"([^"]+)"/.exec((error as Error).message)?.[1];
      console.error(
        `error: not allowed to ${/write/.test((error as Error).message) ? "write" : "access"} ${
          path ?? "that path"
        }: ` +
          `the tasks may write only under results/ (use --out results/NAME)`,
      );
      Deno.exit(2);
    }
    if (error instanceof UsageError) {
      console.error(`error: ${oneLine(error.message)}`);
      Deno.exit(2);
    }
    const traceError = error instanceof TraceFormatError
      ? error
      : error instanceof SimulationError && error.cause instanceof TraceFormatError
      ? error.cause
      : undefined;
    if (traceError) {
      console.error(`error: ${oneLine(traceError.message)}`);
      Deno.exit(2);
    }
    if (error instanceof SimulationError) {
      console.error(`run failed: ${oneLine(error.message)}`);
      Deno.exit(1);
    }
    // A full disk, a read-only directory…: the path and the OS's reason, not a stack trace.
    const fileSystem = fileSystemErrorMessage(error);
    if (fileSystem !== undefined) {
      console.error(`error: ${fileSystem}`);
      Deno.exit(1);
    }
    // Anything else is our bug, not the user's: keep the stack for the report.
    console.error(`internal error (please report): ${(error as Error)?.stack ?? error}`);
    Deno.exit(1);
  }
}
