/**
 * @module
 * What every command-line tool shares: the scenario flags (a contract later
 * tools rely on), turning flags plus an optional scenario file into a
 * validated config, and the exit-code discipline (0 ok, 1 run failure, 2 bad
 * usage, no stack trace for a user's mistake).
 */
import { parseArgs, type ParseArgsConfig } from "node:util";
import type { SimulationConfig } from "../../actors/simulation.ts";
import { SimulationError } from "../../actors/runtime/simulation_error.ts";
import { TraceFormatError } from "../../actors/traces/trace_reader.ts";
import { describeBounds, POLICIES, POLICY_NAMES } from "../../actors/policies/mod.ts";
import { MODEL_NAMES, MODELS } from "../../actors/instances/instance_models.ts";
import type { PoolRole } from "../../actors/instances/instance_model.ts";
import {
  checkTraceFile,
  deepMerge,
  DEFAULT_POLICY,
  parseScenario,
  readJsonFile,
  resolveTracePath,
  scenarioPath,
} from "./scenario.ts";
import { fileSystemErrorMessage, osErrorCode } from "../cli/file_system_error.ts";
import { UsageError } from "../cli/usage_error.ts";
import { unknownFlagMessage } from "../cli/flag_suggestion.ts";

/** A numeric scenario flag: where it lands in the scenario, whether it must be whole, whether `inf` is accepted. */
interface NumericFlag {
  readonly path: readonly string[];
  readonly integer: boolean;
  /** `inf` means Infinity (a scenario file cannot hold it). @default false */
  readonly infinite?: boolean;
}

/** The numeric flags that override scenario fields, besides the policies' parameter flags. */
export const NUMERIC_FLAGS: Readonly<Record<string, NumericFlag>> = {
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
  "slo-ttft-ms": { path: ["slo", "ttftMs"], integer: false, infinite: true },
  "slo-tpot-ms": { path: ["slo", "tpotMs"], integer: false, infinite: true },
  "kv-transfer-gbps": { path: ["instances", "kvTransfer", "gbps"], integer: false, infinite: true },
  "kv-transfer-latency-ms": { path: ["instances", "kvTransfer", "latencyMs"], integer: false },
  "pd-local-prefill-tokens": { path: ["router", "pdLocalPrefillTokens"], integer: true },
  "host-kv-blocks": { path: ["instances", "engine", "hostKvBlocks"], integer: true },
  "host-kv-gbps": { path: ["instances", "engine", "hostKvGbps"], integer: false, infinite: true },
  "router-replicas": { path: ["router", "replicas"], integer: true },
  "replica-sync-ms": { path: ["router", "replicaSyncMs"], integer: false },
  "status-ttl-ms": { path: ["router", "statusTtlMs"], integer: false, infinite: true },
  "retry-budget": { path: ["router", "retryBudget"], integer: true },
  burstiness: { path: ["workload", "arrivals", "burstiness"], integer: false },
  "burst-ms": { path: ["workload", "arrivals", "burstMs"], integer: false },
};

/** The flags that split the fleet into a prefill pool and a decode pool (both needed). */
const POOL_FLAGS = ["prefill-instances", "decode-instances"] as const;

/**
 * What a pool's policy flag's value must end in to name a router plugin file
 * rather than a built-in policy (no policy's name has a dot).
 */
export const PLUGIN_FILE_EXTENSIONS = [".ts", ".mts", ".js", ".mjs"] as const;

/** {@linkcode PLUGIN_FILE_EXTENSIONS}, for messages. */
const PLUGIN_FILES = PLUGIN_FILE_EXTENSIONS.join(", ");

/** The pool policy flags (without `--`), each with its pool and scenario field. */
const POOL_POLICY_FLAGS: readonly {
  readonly flag: string;
  readonly pool: PoolName;
  readonly field: "prefillPolicy" | "decodePolicy";
}[] = [
  { flag: "prefill-policy", pool: "prefill", field: "prefillPolicy" },
  { flag: "decode-policy", pool: "decode", field: "decodePolicy" },
];

/** A pool of a disaggregated fleet that a policy flag may name a plugin for. */
export type PoolName = Exclude<PoolRole, "both">;

/** The run's router plugin file as the flags name it. */
export interface PluginFlag {
  /** The flag that names it, with its `--` (for messages). */
  readonly flag: string;
  /** The file, as given. */
  readonly path: string;
  /** The pool it routes (`--prefill-policy` / `--decode-policy`); absent: every pool (`--router`). */
  readonly pool?: PoolName;
}

/**
 * Whether a pool policy flag's value names a router plugin file: it is no
 * built-in policy's name and ends in one of {@linkcode PLUGIN_FILE_EXTENSIONS}.
 */
export function isPluginFile(value: string): boolean {
  return !(POLICY_NAMES as readonly string[]).includes(value) &&
    PLUGIN_FILE_EXTENSIONS.some((extension) => value.endsWith(extension));
}

/**
 * The router plugin the flags name: `--router FILE.ts` (every pool without a
 * built-in policy of its own) or a plugin file as `--prefill-policy` or
 * `--decode-policy` (that pool only); undefined when none does.
 * @throws {UsageError} when they name two: a run has one plugin sandbox.
 */
export function pluginFlag(values: Record<string, unknown>): PluginFlag | undefined {
  const named: PluginFlag[] = typeof values.router === "string"
    ? [{ flag: "--router", path: values.router }]
    : [];
  for (const { flag, pool } of POOL_POLICY_FLAGS) {
    const value = values[flag];
    if (typeof value === "string" && isPluginFile(value)) {
      named.push({ flag: `--${flag}`, path: value, pool });
    }
  }
  if (named.length > 1) {
    const [first, second] = named;
    const hint = first.pool === undefined
      ? `give the ${second.pool} pool a built-in policy, or leave it to --router's plugin`
      : first.path === second.path
      ? `to route both pools with it, use --router ${first.path}`
      : "give one pool a built-in policy";
    throw new UsageError(
      `${second.flag}: "${second.path}" would be a second router plugin beside ${first.flag}'s; ` +
        `a run has one plugin sandbox, so at most one plugin file (${hint})`,
    );
  }
  return named[0];
}

/** A policy parameter's flag, without `--`: its name in kebab case (`balanceAbs` → `balance-abs`). */
export function parameterFlag(parameter: string): string {
  return parameter.replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`);
}

/**
 * Every built-in policy's parameter flags (without `--`), each to the
 * parameter it sets (`policy.<parameter>`), derived from the registry. A flag
 * is accepted only with a policy that has the parameter.
 */
export const PARAMETER_FLAGS: Readonly<Record<string, string>> = Object.fromEntries(
  POLICIES.flatMap((descriptor) => Object.keys(descriptor.params).map((key) => [parameterFlag(key), key])),
);

/** Flags every scenario-running tool accepts, in `node:util` `parseArgs` form. */
export const SCENARIO_OPTIONS = {
  policy: { type: "string" },
  router: { type: "string" },
  "plugin-timeout-ms": { type: "string" },
  "prefill-policy": { type: "string" },
  "decode-policy": { type: "string" },
  "pd-flow": { type: "string" },
  "replica-spread": { type: "string" },
  arrivals: { type: "string" },
  faults: { type: "string" },
  "prefill-instances": { type: "string" },
  "decode-instances": { type: "string" },
  model: { type: "string" },
  preset: { type: "string" },
  trace: { type: "string" },
  "skip-invalid": { type: "boolean" },
  scenario: { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  ...Object.fromEntries(Object.keys(NUMERIC_FLAGS).map((name) => [name, { type: "string" }])),
  ...Object.fromEntries(Object.keys(PARAMETER_FLAGS).map((name) => [name, { type: "string" }])),
} as const satisfies ParseArgsConfig["options"];

/** Width of the help text, and the column its descriptions start at. */
const HELP_WIDTH = 110, HELP_COLUMN = 25;

/**
 * `label`, then `text` from column {@linkcode HELP_COLUMN}, wrapped at
 * {@linkcode HELP_WIDTH}; a label too long for the column puts the text on
 * the next line.
 */
function helpEntry(label: string, text: string): string {
  const indent = " ".repeat(HELP_COLUMN);
  const lines: string[] = [];
  let line = indent;
  if (label.length + 2 <= HELP_COLUMN) line = label.padEnd(HELP_COLUMN);
  else lines.push(label);
  for (const word of text.split(" ")) {
    if (line.length > HELP_COLUMN && line.length + 1 + word.length > HELP_WIDTH) {
      lines.push(line);
      line = indent;
    }
    line += line.length === HELP_COLUMN ? word : ` ${word}`;
  }
  lines.push(line);
  return lines.join("\n");
}

/** The built-in policies and their parameter flags with defaults and bounds, from the registry. */
function policiesHelp(): string {
  return POLICIES.flatMap((descriptor) => [
    helpEntry(`    ${descriptor.name}`, descriptor.summary),
    ...Object.entries(descriptor.params).map(([key, parameter]) =>
      helpEntry(
        `      --${parameterFlag(key)} ${parameter.integer ? "N" : "X"}`,
        `${parameter.doc}; default ${parameter.default}, ${describeBounds(parameter)}`,
      )
    ),
  ]).join("\n");
}

/** One help line per registered instance model: its name and summary. */
function modelsHelp(): string {
  return MODELS.map((m) => `${" ".repeat(25)}${m.name}: ${m.summary}`).join("\n");
}

/** Help text for the scenario flags. */
export const SCENARIO_FLAGS_HELP =
  `Scenario flags (override the scenario file; defaults in scenarios/README.md):
  --scenario FILE        JSON scenario file (see scenarios/example.json)
  --policy NAME          a built-in routing policy (default ${DEFAULT_POLICY}); each policy's parameter flags
                         are accepted only with it:
${policiesHelp()}
  --router FILE.ts       use a router plugin instead of --policy (see actors/policies/README.md)
  --plugin-timeout-ms N  wall ms a plugin may take to load or to make one routing decision (default 5000)
  --model M              instance model (default ${MODEL_NAMES[0]}):
${modelsHelp()}
  --preset NAME|FILE     engine of the batching and slots models: qwen2.5-7b | llama-3.1-8b | qwen3-14b |
                         llama-3.3-70b-tp4, or an engine preset file (.json, e.g. written by deno task calibrate;
                         its model is the run's unless --model names it)
  --trace FILE           replay a trace (Mooncake .jsonl, Azure .csv) instead of the synthetic workload
  --trace-speed X        compress trace time by X (2 = twice the load), > 0
  --skip-invalid         skip malformed trace lines (and report how many) instead of failing
  --instances N          number of serving instances, integer >= 1
  --prefill-instances N  disaggregated serving (batching): N prefill instances, with --decode-instances M
  --decode-instances M   ... and M decode instances, instead of --instances
  --pd-flow F            prefill-first (default: the decode instance is picked when the prefill is done) or
                         decode-first (llm-d: decode instance first, then a prefill instance)
  --pd-local-prefill-tokens N  decode-first: prefill on the decode instance when fewer prompt tokens than
                         this are uncached there (default 0: never)
  --prefill-policy P     the prefill pool's policy (default: --policy): a built-in name, or a router plugin
                         file (ending in ${PLUGIN_FILES}) for this pool only; one plugin per run
  --decode-policy P      the decode pool's policy (default: --policy), likewise
  --kv-transfer-gbps X   each prefill instance's outbound KV link, gigabits/s, > 0 or inf (default 400)
  --kv-transfer-latency-ms X  fixed latency of each KV transfer, ms, >= 0 (default 0.02)
  --host-kv-blocks N     host-memory KV tier per instance, blocks (batching; default 0: none)
  --host-kv-gbps X       host tier load bandwidth, gigabits/s, > 0 or inf (default 512, PCIe Gen5 x16)
  --rate R               arrival rate, requests per second, > 0
  --requests N           requests to simulate, integer >= 1
  --zipf S               Zipf exponent of prefix-group popularity, >= 0
  --prefix-frac F        share of requests with a shared prefix, in [0, 1]
  --prefix-groups N      number of shared prefix groups, integer >= 1
  --prefix-tokens N      prefix length in tokens, integer >= 0
  --suffix-tokens N      mean suffix length in tokens (keeps its distribution; > 0 if exponential)
  --cache-capacity N     prefix groups each instance's LRU cache holds, integer >= 0
  --seed N               seed of every random stream, integer >= 0
  --slo-ttft-ms N        TTFT SLO in ms, > 0 or inf; goodput and attainment count requests meeting every SLO
  --slo-tpot-ms N        TPOT SLO in ms, > 0 or inf (a request with one output token meets it)
  --arrivals P           synthetic arrival process: poisson (default), gamma (renewal, gap CV² = --burstiness)
                         or mmpp (two-state Markov-modulated; high/low rate ratio = --burstiness)
  --burstiness X         gamma: CV² of the gaps (> 0; 1 is Poisson); mmpp: rate ratio (>= 1); default 1
  --burst-ms X           mmpp: mean time in each state, ms (default 10000)
  --router-replicas N    router replicas, each with its own view (default 1; see scenarios/README.md,
                         "Router replicas, faults, autoscaling and bursty arrivals")
  --replica-spread S     how arrivals are spread over replicas: random (default) or session
  --replica-sync-ms X    replicas exchange what they routed every X ms; 0 = one shared view (default: never)
  --faults FILE          a JSON list of instance faults {instance, kind, atMs, forMs}: kind crash, slow
                         (with factor), drain or partition
  --status-ttl-ms X      the router probes instances and avoids one whose last report is older (default inf)
  --retry-budget N       retries of a request whose attempt failed at an instance (default 1)
  --json                 print JSON instead of a table
  -h, --help             show this help`;

/**
 * Parses argv strictly: an unknown flag (naming the nearest known one, if
 * any), a missing value or a stray argument is a {@linkcode UsageError}.
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
    if (unknown) throw new UsageError(unknownFlagMessage(unknown[1], Object.keys(options ?? {})));
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
 * Turns `--rate -3` into `--rate=-3` (and `-inf`), so a negative number reaches validation
 * (and its clear message) instead of `parseArgs`'s "ambiguous" complaint.
 */
function joinNegativeValues(args: readonly string[], options: ParseArgsConfig["options"]): string[] {
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const name = args[i].startsWith("--") ? args[i].slice(2) : undefined;
    const next = args[i + 1];
    if (name && options?.[name]?.type === "string" && next !== undefined && /^-\d|^-\.\d|^-inf/i.test(next)) {
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
  return (await scenarioFromFlags(values)).config;
}

/** A scenario built from the flags, and its trace's path as the user typed it. */
export interface FlagScenario {
  /** The validated config; its trace path (if any) is absolute. */
  readonly config: SimulationConfig;
  /**
   * The trace's path as typed — `--trace`'s value or the scenario file's
   * `workload.trace.path` — for the lines a tool prints; undefined without a
   * trace file.
   */
  readonly typedTracePath?: string;
}

/**
 * {@linkcode configFromFlags}, keeping the trace's path as the user typed it,
 * so a notice names the file the way the command line or the scenario did.
 */
export async function scenarioFromFlags(values: Record<string, unknown>): Promise<FlagScenario> {
  const pluginPool = pluginFlag(values)?.pool;
  const file = typeof values.scenario === "string" ? await readJsonFile(values.scenario) : {};
  const base = withoutFileCount(
    withoutPoolPolicy(withoutOtherPolicy(file, values.policy), pluginPool),
    values,
  );
  const flags = new FlagOverrides();
  setStringFlags(values, flags);
  setPoolPolicyFlags(values, flags, pluginPool);
  setNumericFlags(values, base, flags);
  setTraceFlags(values, base, flags);
  setPoolFlags(values, flags);
  if (typeof values.faults === "string") {
    flags.set("--faults", ["faults"], await readJsonFile(values.faults, "--faults", "array"));
  }
  refuseBesideRouter(values);
  const config = parseScenario(deepMerge(base, flags.overrides), (path) => flags.nameOf(path));
  await checkTraceFile(
    config,
    flags.sets("workload.trace.path") ? "--trace" : "scenario.workload.trace.path",
  );
  return {
    config: resolveTracePath(withoutPoolPolicy(config, pluginPool) as SimulationConfig),
    typedTracePath: config.workload.trace?.path,
  };
}

/** Flags whose value is a file of scenario data: an error inside names the field too. */
const FILE_FLAGS: ReadonlySet<string> = new Set(["--faults"]);

/** The scenario fields the flags set, and which flag set each (to name it in errors). */
class FlagOverrides {
  /** The fields the flags set, nested as in a scenario. */
  readonly overrides: Record<string, unknown> = {};
  readonly #flagOfPath = new Map<string, string>();

  /** Sets the field at `path` from `flag` (with its `--`). */
  set(flag: string, path: readonly string[], value: unknown): void {
    setAt(this.overrides, path, value);
    this.#flagOfPath.set(path.join("."), flag);
  }

  /** Removes the field at `path` (set by a flag that, in this run, means another field). */
  unset(path: readonly string[]): void {
    const parent = path.slice(0, -1).reduce<Record<string, unknown> | undefined>(
      (node, key) => node?.[key] as Record<string, unknown> | undefined,
      this.overrides,
    );
    if (parent) delete parent[path[path.length - 1]];
    this.#flagOfPath.delete(path.join("."));
  }

  /** Whether a flag set the field `path` (dotted). */
  sets(path: string): boolean {
    return this.#flagOfPath.has(path);
  }

  /** The flag that set `path` (or the section holding it), else its `scenario.…` name. */
  nameOf(path: readonly PropertyKey[]): string {
    for (let n = path.length; n > 0; n--) {
      const flag = this.#flagOfPath.get(path.slice(0, n).join("."));
      // A flag that reads a file (`--faults`) names the field inside it too: `--faults [0].forMs`.
      if (flag && n < path.length && FILE_FLAGS.has(flag)) {
        return `${flag} ${scenarioPath(path.slice(n)).replace(/^scenario\.?/, "")}`;
      }
      if (flag) return flag;
    }
    // A whole section the user set through one of its flags (e.g. --preset for instances.engine).
    const field = path.join(".");
    for (const [flagPath, flag] of this.#flagOfPath) if (flagPath.startsWith(`${field}.`)) return flag;
    return scenarioPath(path);
  }
}

/**
 * The scenario file without its policy when `--policy` names another one: a
 * policy's parameters do not follow `--policy` to a different policy.
 */
function withoutOtherPolicy(file: unknown, policy: unknown): unknown {
  const filePolicy = (file as { policy?: { name?: unknown } } | null)?.policy;
  if (typeof policy !== "string" || filePolicy === undefined) return file;
  if ((filePolicy?.name ?? DEFAULT_POLICY) === policy) return file;
  return Object.fromEntries(Object.entries(file as object).filter(([key]) => key !== "policy"));
}

/**
 * `value` (a scenario) without the policy field of the pool a plugin routes:
 * the plugin replaces the file's policy for that pool, and leaves the
 * checked config without one (see {@linkcode setPoolPolicyFlags}).
 */
function withoutPoolPolicy(value: unknown, pool: PoolName | undefined): unknown {
  const field = POOL_POLICY_FLAGS.find((p) => p.pool === pool)?.field;
  if (field === undefined || value === null || typeof value !== "object") return value;
  return Object.fromEntries(Object.entries(value).filter(([key]) => key !== field));
}

/**
 * `--prefill-policy` and `--decode-policy`. A built-in name sets the pool's
 * policy. A plugin file (the pool `pluginPool`) gives the pool a policy of
 * its own too, which the scenario check must see — a fleet that is not split
 * is refused by the same check, in the same words, as for a built-in — so a
 * built-in stands in for it there, removed once the scenario is checked.
 * @throws {UsageError} for a value that looks like a file but not a plugin's.
 */
function setPoolPolicyFlags(
  values: Record<string, unknown>,
  flags: FlagOverrides,
  pluginPool?: PoolName,
): void {
  for (const { flag, pool, field } of POOL_POLICY_FLAGS) {
    const value = values[flag];
    if (typeof value !== "string") continue;
    if (pool === pluginPool) {
      flags.set(`--${flag}`, [field], { name: DEFAULT_POLICY });
    } else if (/[./\\]/.test(value)) {
      throw new UsageError(
        `--${flag}: "${value}" is neither a built-in policy nor a router plugin file (which ends in ${PLUGIN_FILES})`,
      );
    } else {
      flags.set(`--${flag}`, [field, "name"], value);
    }
  }
}

/** `--policy`, `--model`, `--preset`, `--trace`, `--pd-flow` and `--skip-invalid`. */
function setStringFlags(values: Record<string, unknown>, flags: FlagOverrides): void {
  const strings: [flag: string, path: string[]][] = [
    ["policy", ["policy", "name"]],
    ["model", ["instances", "model"]],
    ["preset", ["instances", "engine", "preset"]],
    ["trace", ["workload", "trace", "path"]],
    ["pd-flow", ["router", "pdFlow"]],
    ["replica-spread", ["router", "replicaSpread"]],
    ["arrivals", ["workload", "arrivals", "process"]],
  ];
  for (const [flag, path] of strings) {
    if (typeof values[flag] === "string") flags.set(`--${flag}`, path, values[flag]);
  }
  if (values["skip-invalid"] === true) {
    flags.set("--skip-invalid", ["workload", "trace", "skipInvalid"], true);
  }
}

/** The numeric flags and the policy parameter flags (their bounds are the schema's to check). */
function setNumericFlags(values: Record<string, unknown>, base: unknown, flags: FlagOverrides): void {
  for (const [name, flag] of Object.entries(NUMERIC_FLAGS)) {
    const raw = values[name];
    if (typeof raw !== "string") continue;
    const value = parseNumber(`--${name}`, raw, flag.integer, flag.infinite);
    flags.set(`--${name}`, flag.path, name === "suffix-tokens" ? withMean(`--${name}`, base, value) : value);
  }
  for (const [name, parameter] of Object.entries(PARAMETER_FLAGS)) {
    const raw = values[name];
    if (typeof raw === "string") {
      flags.set(`--${name}`, ["policy", parameter], parseNumber(`--${name}`, raw, false));
    }
  }
}

/** With a trace, `--requests` caps how many of its requests are replayed; `--trace-speed` and `--skip-invalid` need one. */
function setTraceFlags(values: Record<string, unknown>, base: unknown, flags: FlagOverrides): void {
  const trace =
    (deepMerge(base, flags.overrides) as { workload?: { trace?: { path?: unknown; generate?: unknown } } })
      .workload?.trace;
  if (trace !== undefined && typeof values.requests === "string") {
    flags.unset(["workload", "requests"]);
    flags.set("--requests", ["workload", "trace", "maxRequests"], Number(values.requests));
  }
  for (const flag of ["--trace-speed", "--skip-invalid"]) {
    const set = flag === "--trace-speed"
      ? typeof values["trace-speed"] === "string"
      : values["skip-invalid"] === true;
    if (set && trace?.path === undefined && trace?.generate === undefined) {
      throw new UsageError(`${flag}: needs --trace FILE (or workload.trace in the scenario file)`);
    }
  }
}

/** The scenario file without its `instances.count` when the pool flags replace the fleet (as `--instances` would). */
function withoutFileCount(file: unknown, values: Record<string, unknown>): unknown {
  const instances = (file as { instances?: Record<string, unknown> } | null)?.instances;
  if (!POOL_FLAGS.some((flag) => typeof values[flag] === "string") || instances?.count === undefined) {
    return file;
  }
  const { count: _count, ...rest } = instances;
  return { ...(file as Record<string, unknown>), instances: rest };
}

/** `--prefill-instances N --decode-instances M`: a prefill pool and a decode pool, replacing the file's pools. */
function setPoolFlags(values: Record<string, unknown>, flags: FlagOverrides): void {
  const given = POOL_FLAGS.filter((flag) => typeof values[flag] === "string");
  if (given.length === 0) return;
  if (given.length === 1) {
    const other = POOL_FLAGS.find((flag) => flag !== given[0]);
    throw new UsageError(`--${given[0]}: needs --${other} too (a disaggregated fleet has both pools)`);
  }
  if (typeof values.instances === "string") {
    throw new UsageError(
      "--instances: not used with --prefill-instances and --decode-instances (the fleet is their total)",
    );
  }
  const [prefill, decode] = POOL_FLAGS.map((flag) => parseNumber(`--${flag}`, String(values[flag]), true));
  flags.set("--prefill-instances", ["instances", "pools"], [
    { name: "prefill", role: "prefill", count: prefill },
    { name: "decode", role: "decode", count: decode },
  ]);
}

/** `--router` replaces the built-in policy: `--policy` or a parameter flag beside it is an error. */
function refuseBesideRouter(values: Record<string, unknown>): void {
  if (typeof values.router !== "string") return;
  const policyFlag = ["policy", ...Object.keys(PARAMETER_FLAGS)].find((name) =>
    typeof values[name] === "string"
  );
  if (policyFlag !== undefined) {
    throw new UsageError(`--router: replaces the built-in policy; drop --${policyFlag}`);
  }
}

/**
 * `--plugin-timeout-ms`: any finite number > 0, default 5000; an error
 * without a router plugin (`--router`, or a pool's), where it would be ignored.
 */
export function pluginTimeoutMs(values: Record<string, unknown>): number {
  const raw = values["plugin-timeout-ms"];
  if (raw === undefined) return 5000;
  if (pluginFlag(values) === undefined) {
    throw new UsageError(
      "--plugin-timeout-ms: needs --router FILE.ts (or, in run and realtime, a plugin file as --prefill-policy or --decode-policy)",
    );
  }
  const value = parseNumber("--plugin-timeout-ms", String(raw), false);
  if (!(value > 0)) throw new UsageError(`--plugin-timeout-ms: expected a number > 0, got ${raw}`);
  return value;
}

/**
 * A tool's own number flag (`--speed`, `--port`…): finite and > 0 (≥ 0 with
 * `zero`), whole with `integer`; `fallback` when absent.
 * @throws {UsageError} naming the flag, the value and what was expected.
 */
export function numberFlag(
  flag: string,
  raw: string | undefined,
  fallback: number,
  { integer = false, zero = false } = {},
): number {
  if (raw === undefined) return fallback;
  const value = raw.trim() === "" ? NaN : Number(raw);
  if (!(Number.isFinite(value) && (zero ? value >= 0 : value > 0) && (!integer || Number.isInteger(value)))) {
    throw new UsageError(
      `${flag}: expected ${integer ? "an integer" : "a number"} ${zero ? ">= 0" : "> 0"}, got "${raw}"`,
    );
  }
  return value;
}

/** A flag's number; with `infinite`, `inf` (or `infinity`, any case) is Infinity. */
function parseNumber(flag: string, raw: string, integer: boolean, infinite = false): number {
  if (infinite && /^\s*inf(inity)?\s*$/i.test(raw)) return Infinity;
  const value = raw.trim() === "" ? NaN : Number(raw);
  if (!Number.isFinite(value)) {
    throw new UsageError(`${flag}: expected a number${infinite ? " or inf" : ""}, got "${raw}"`);
  }
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

/** The operating system's resource errors, by code: what ran out, and what to do about it. */
const OS_RESOURCES: Readonly<Record<string, string>> = {
  EMFILE:
    "the process ran out of file descriptors (Too many open files): raise `ulimit -n` or lower the connections",
  ENFILE:
    "the system ran out of file descriptors (Too many open files in system): close other programs or lower the connections",
  ENOMEM: "the system ran out of memory (Cannot allocate memory)",
  ENOSPC: "the disk is full (No space left on device)",
  EAGAIN:
    "the system refused a resource for now (Resource temporarily unavailable): lower the load and retry",
};

/**
 * What an operating-system resource error (`EMFILE`, Deno's `Too many open
 * files (os error 24)`…) says in plain words, or undefined for any other error.
 */
export function osResourceMessage(error: unknown): string | undefined {
  const code = osErrorCode(error);
  return code !== undefined && Object.hasOwn(OS_RESOURCES, code) ? OS_RESOURCES[code] : undefined;
}

/**
 * Runs a command-line entry point with the exit-code contract: a
 * {@linkcode UsageError} prints one line and exits 2, a
 * {@linkcode SimulationError} or a file-system error (path and OS reason)
 * prints one line and exits 1.
 */
export async function runCommand(main: () => Promise<void> | void): Promise<void> {
  // An error no caller awaited (a server's accept loop, a timer) still ends the command in one
  // line. A router plugin's never arrive here: they stay in its Worker, whose host reports them.
  const uncaught = (error: unknown, message: string) => {
    const resource = osResourceMessage(error);
    console.error(
      resource === undefined ? `run failed: uncaught error: ${oneLine(message)}` : `error: ${resource}`,
    );
    Deno.exit(1);
  };
  globalThis.addEventListener("error", (event) => {
    event.preventDefault();
    uncaught(event.error, event.message.replace(/^Uncaught (\(in promise\) )?/, ""));
  });
  globalThis.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    uncaught(event.reason, String((event.reason as Error)?.message ?? event.reason));
  });
  try {
    await main();
  } catch (error) {
    if (error instanceof Deno.errors.NotCapable && /net access/.test((error as Error).message)) {
      const host = /"([^"]+)"/.exec((error as Error).message)?.[1];
      console.error(
        `error: not allowed to reach ${host ?? "that host"}: the serve and load tasks may reach 127.0.0.1 ` +
          `and localhost only (for other hosts run deno run --allow-net=HOSTS …; scenarios/README.md, "Over the wire")`,
      );
      Deno.exit(2);
    }
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
    // Out of file descriptors or memory: what ran out, whichever call noticed it.
    const resource = osResourceMessage(error);
    if (resource !== undefined && !/\(os error \d+\): \w+ '/.test(String((error as Error)?.message))) {
      console.error(`error: ${resource}`);
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

/**
 * A flag's comma-separated http(s) base URLs (trailing slashes dropped), each
 * one this process may connect to: the tasks that talk to servers may reach
 * 127.0.0.1 and localhost only unless the user grants more (README, "Over the wire").
 * @throws {UsageError} naming the flag when it is absent, empty, not URLs, or a host is not granted.
 */
export function reachableUrls(flag: string, raw: string | undefined, task: string): string[] {
  if (raw === undefined || raw.trim() === "") {
    throw new UsageError(
      `${flag}: required: the servers' base URLs, e.g. http://127.0.0.1:8080,http://127.0.0.1:8081`,
    );
  }
  return raw.split(",").map((part) => {
    let url: URL;
    try {
      url = new URL(part.trim());
    } catch {
      throw new UsageError(`${flag}: expected http(s) URLs separated by commas, got "${part}"`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new UsageError(`${flag}: expected http(s) URLs separated by commas, got "${part}"`);
    }
    if (Deno.permissions.querySync({ name: "net", host: url.host }).state !== "granted") {
      throw new UsageError(
        `${flag}: not allowed to reach ${url.host}: the ${task} task may reach 127.0.0.1 and localhost only; ` +
          `for other hosts run it with deno run --allow-net=127.0.0.1,localhost,${url.host} and the task's other ` +
          `permissions (deno.json; scenarios/README.md, "Over the wire")`,
      );
    }
    return url.href.replace(/\/+$/, "");
  });
}
