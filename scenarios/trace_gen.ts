/**
 * @module
 * `deno task trace-gen --out FILE`: writes a generated Mooncake trace
 * (actors/traces/trace_generator.ts), streamed to a temporary file and renamed into
 * place, in constant memory whatever its length.
 */
import { basename, dirname } from "node:path";
import {
  checkParameter,
  describeBounds,
  resolveTraceGeneratorOptions,
  TRACE_GENERATOR_PARAMETER_NAMES,
  TRACE_GENERATOR_PARAMETERS,
  TraceGenerator,
  type TraceGeneratorOptions,
} from "../actors/traces/trace_generator.ts";
import { writeChunksAtomic } from "./cli/atomic_write.ts";
import { formatSummary, traceChunks, TraceTally } from "./scenario/trace_file.ts";
import { fromCaller } from "./cli/caller_directory.ts";
import { parseFlags, runCommand } from "./scenario/command_line.ts";
import { assertInsideResults, makeDirectoryInside } from "./sweep_runner/output_directory.ts";
import { UsageError } from "./cli/usage_error.ts";

const OPTIONS = {
  out: { type: "string" },
  help: { type: "boolean", short: "h" },
  // One string flag per generator parameter: --rate, --agent-frac…
  ...Object.fromEntries(Object.values(TRACE_GENERATOR_PARAMETERS).map((p) => [p.flag, { type: "string" }])),
} as const;

function flagHelp(): string {
  return TRACE_GENERATOR_PARAMETER_NAMES.map((name) => {
    const p = TRACE_GENERATOR_PARAMETERS[name];
    return `  --${p.flag} ${p.placeholder}  default ${p.shownDefault ?? p.default}; ${
      describeBounds(p)
    }; scenario: generate.${name}\n      ${p.doc}`;
  }).join("\n");
}

const HELP = `Usage: deno task trace-gen --out FILE [flags]

Writes a generated Mooncake trace (JSONL rows of timestamp, input_length,
output_length, hash_ids) shaped like chat and agent traffic: shared system
prompts, multi-turn sessions whose turns extend their previous context, a
share of agent sessions with short tool-call waits (model and defaults in
design.md, "Generated traces"). The same flags write the same file, byte for
byte; the file appears whole or not at all. Defaults: about 12,000 requests
over an hour, prompts of about 12,000 tokens sharing a system-prompt block 0,
about 340 output tokens.

  --out FILE  the trace file to write, inside results/ (e.g. results/traces/chat.jsonl)
${flagHelp()}
  -h, --help  show this help

A scenario or sweep names the same trace by its parameters, without a file:
  "workload": { "trace": { "generate": { "seed": 2, "agentFrac": 0.5 }, "speed": 1 } }`;

/**
 * The generator's options from the flags (defaults for the others).
 * @throws {UsageError} naming the flag, its value and what was expected.
 */
export function generatorOptionsFromFlags(values: Record<string, unknown>): TraceGeneratorOptions {
  const given: Partial<Record<keyof TraceGeneratorOptions, number>> = {};
  for (const name of TRACE_GENERATOR_PARAMETER_NAMES) {
    const parameter = TRACE_GENERATOR_PARAMETERS[name];
    const raw = values[parameter.flag];
    if (typeof raw !== "string") continue;
    const value = raw.trim() === "" ? NaN : Number(raw);
    const problem = checkParameter(parameter, value);
    if (problem) {
      throw new UsageError(
        `--${parameter.flag}: ${problem}, got ${Number.isFinite(value) ? raw : JSON.stringify(raw)}`,
      );
    }
    given[name] = value;
  }
  try {
    return resolveTraceGeneratorOptions(given);
  } catch (error) {
    // A check across parameters (rate against requests): name the flag, not the option.
    const m = /^trace generator: (\w+): (.*)$/.exec((error as Error).message);
    const parameter = m && TRACE_GENERATOR_PARAMETERS[m[1] as keyof TraceGeneratorOptions];
    if (error instanceof RangeError && parameter) throw new UsageError(`--${parameter.flag}: ${m![2]}`);
    throw error;
  }
}

/**
 * Where `--out` writes: resolved against the caller's directory, a file (not
 * a directory), not `.csv` (which the trace reader takes for Azure), inside
 * `results/`; its directory is created.
 * @throws {UsageError} naming `--out`.
 */
async function outputFile(out: string | undefined): Promise<string> {
  if (out === undefined) throw new UsageError("--out: expected the file to write (see --help)");
  if (out.trim() === "" || out.endsWith("/")) throw new UsageError(`--out: expected a file, got "${out}"`);
  if (out.endsWith(".csv")) {
    throw new UsageError(
      `--out: expected a .jsonl file (a Mooncake trace; a .csv trace is read as Azure's), got "${out}"`,
    );
  }
  const path = fromCaller(out);
  if ((await Deno.stat(path).catch(() => undefined))?.isDirectory) {
    throw new UsageError(`--out: "${out}" is a directory, expected a file`);
  }
  await assertInsideResults(path, `--out ${out}`);
  await makeDirectoryInside(dirname(path), `--out ${out}`);
  await assertInsideResults(path, `--out ${out}`); // a symlink may have appeared meanwhile
  return path;
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    const options = generatorOptionsFromFlags(values);
    const path = await outputFile(values.out);
    const generator = new TraceGenerator(options);
    const tally = new TraceTally();
    const interrupt = new AbortController();
    const onInterrupt = () => interrupt.abort();
    Deno.addSignalListener("SIGINT", onInterrupt);
    try {
      await writeChunksAtomic(path, traceChunks(generator, tally), interrupt.signal);
    } catch (error) {
      if (!interrupt.signal.aborted) throw error;
      console.error(`trace-gen: interrupted; ${basename(path)} not written`);
      Deno.exit(130);
    } finally {
      Deno.removeSignalListener("SIGINT", onInterrupt);
    }
    console.log(formatSummary(values.out!, tally.summary(generator.sessions)));
  });
}
