/**
 * @module
 * `deno task load`: replays a scenario's workload (synthetic or a trace),
 * open loop, against any OpenAI-compatible server and prints the metrics of
 * `deno task run`, measured client-side. Each run draws a fresh `--nonce`
 * (printed) so a warm server never sees the same prompts twice unless asked.
 */
import {
  configFromFlags,
  numberFlag,
  parseFlags,
  runCommand,
  SCENARIO_FLAGS_HELP,
  SCENARIO_OPTIONS,
} from "./scenario/command_line.ts";
import { UsageError } from "./cli/usage_error.ts";
import { systemWallTime } from "./cli/wall_time.ts";
import { plural } from "./cli/plural.ts";
import {
  clientLimitLines,
  endpointUrl,
  formatLoadReport,
  type LoadEndpoint,
  type LoadProgress,
  type LoadResult,
  runLoad,
} from "./wire/load_generator.ts";

/**
 * The scenario flags load reads: the workload (synthetic or trace), its seed
 * and SLOs, and the flags it shares with every tool. Its own `--model` is the
 * requests' model name, listed in its own help.
 */
const WORKLOAD_FLAGS: ReadonlySet<string> = new Set([
  "scenario",
  "trace",
  "trace-speed",
  "skip-invalid",
  "rate",
  "requests",
  "arrivals",
  "burstiness",
  "burst-ms",
  "zipf",
  "prefix-frac",
  "prefix-groups",
  "prefix-tokens",
  "suffix-tokens",
  "seed",
  "slo-ttft-ms",
  "slo-tpot-ms",
  "json",
  "help",
  "model",
]);

/**
 * Every other scenario flag configures the serving side (routing, the fleet,
 * its engines, faults), which a load generator does not run: refused, never
 * silently ignored.
 */
const SERVING_ONLY: readonly string[] = Object.keys(SCENARIO_OPTIONS).filter((flag) =>
  !WORKLOAD_FLAGS.has(flag)
);

/** The flags load lists in its own part of the help, left out of the scenario part. */
const OWN_HELP = new Set(["model", "json"]);

/**
 * The scenario flags' help cut to {@linkcode WORKLOAD_FLAGS}, each flag
 * listed once: an entry is a line starting `  --flag` (or `  -h, --help`)
 * and the more-indented lines under it.
 */
export function workloadFlagsHelp(): string {
  const [, ...lines] = SCENARIO_FLAGS_HELP.split("\n");
  const kept: string[] = [];
  let keep = false;
  for (const line of lines) {
    const entry = /^ {2}(?:-\w, )?--([a-z0-9-]+)/.exec(line);
    if (entry !== null) keep = WORKLOAD_FLAGS.has(entry[1]) && !OWN_HELP.has(entry[1]);
    else if (!line.startsWith("   ")) keep = false;
    if (keep) kept.push(line);
  }
  return [
    "Workload flags (override the scenario file; defaults in scenarios/README.md). Load reads the scenario's workload,",
    "seed and SLOs only; routing and fleet flags (--policy, --instances, --preset, ...) belong to serve:",
    ...kept,
  ].join("\n");
}

const HELP = `Usage: deno task load --url URL [flags]

Sends the scenario's requests to an OpenAI-compatible server at their
simulated arrival times over --speed, open loop (a slow answer never delays
a later request), each a streaming request whose prompt text reproduces the
scenario's prefix sharing. TTFT is measured from the request's scheduled send
to its first streamed token, in simulated ms. The client measures its own
limits too (how late it sent, how late its event loop ran) and says when it,
not the server, was the bottleneck. This task may connect to 127.0.0.1 and
localhost only.

  --url URL              the server (required): a base URL such as http://127.0.0.1:8000, or the
                         endpoint's own URL (/v1/completions or /v1/chat/completions)
  --speed X              simulated ms per wall ms, > 0 (default 1; 2 sends twice as fast)
  --endpoint E           completion (default) or chat
  --model NAME           the requests' "model" field (default sim); here --model is not the instance model
  --prompt-ids           send each prompt as token ids in [1000, 32000) instead of words, so an engine
                         with its own tokenizer (vLLM, SGLang, llama.cpp) sees exactly the simulated
                         tokens (completion endpoint only)
  --nonce N              makes this run's unique prompt tokens its own, integer >= 0 (default: drawn
                         fresh for each run, not from the seed, and printed on stderr and in --json's
                         load.nonce); give a printed nonce again to send exactly that run's prompts
  --request-timeout-ms N wall ms a request may go without a sign of life (from its send to its
                         headers, then between events of its stream) before it fails as timeout,
                         > 0 (default 60000); ms this client's own event loop spent stalled do not
                         count, and a request silent for 3 x N ms without N ms of the client's
                         attention is counted "client stalled" (in flight), not failed
  --progress             show progress on stderr even when it is not a terminal
  --json                 print the same keys as deno task run --json, plus "load"

Exits 0 when the run is done, 1 when every request sent failed, 2 on a bad flag, 130 on Ctrl-C.

${workloadFlagsHelp()}`;

const OPTIONS = {
  ...SCENARIO_OPTIONS,
  url: { type: "string" },
  speed: { type: "string" },
  endpoint: { type: "string" },
  nonce: { type: "string" },
  "request-timeout-ms": { type: "string" },
  progress: { type: "boolean" },
  "prompt-ids": { type: "boolean" },
} as const;

/** A fresh nonce: 32 random bits from the system's generator, never the seed. */
function freshNonce(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0];
}

/** The parsed flags of `deno task load`. */
type LoadFlags = ReturnType<typeof parseFlags<typeof OPTIONS>>["values"];

/** `--endpoint`: completion or chat; when absent, the one `--url` names, else completion. */
function endpointFlag(raw: string | undefined, url: string): LoadEndpoint {
  if (raw === undefined) return /\/chat\/completions\/?$/.test(new URL(url).pathname) ? "chat" : "completion";
  if (raw !== "completion" && raw !== "chat") {
    throw new UsageError(`--endpoint: expected completion or chat, got "${raw}"`);
  }
  return raw;
}

/** `--url`, checked: an http(s) URL this process may connect to. */
async function urlFlag(raw: string | undefined): Promise<string> {
  if (raw === undefined) {
    throw new UsageError("--url: required: the OpenAI-compatible server to load, e.g. http://127.0.0.1:8000");
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(`--url: expected an http(s) URL, got "${raw}"`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new UsageError(`--url: expected an http(s) URL, got "${raw}"`);
  }
  const { state } = await Deno.permissions.query({ name: "net", host: url.host });
  if (state !== "granted") {
    throw new UsageError(
      `--url: this task may connect only to 127.0.0.1 and localhost, not ${url.hostname}; ` +
        `for another host run deno run --allow-read --allow-net=${url.host} scenarios/load.ts`,
    );
  }
  return raw;
}

/** What `deno task load` is asked to do, checked. */
async function loadSettings(values: LoadFlags) {
  const given = SERVING_ONLY.find((flag) => (values as Record<string, unknown>)[flag] !== undefined);
  if (given !== undefined) {
    throw new UsageError(
      `--${given}: configures the serving side: load replays the workload only; routing and fleet flags ` +
        `belong to serve (give --${given} to deno task serve, not load)`,
    );
  }
  const url = await urlFlag(values.url);
  const endpoint = endpointFlag(values.endpoint, url);
  try {
    endpointUrl(url, endpoint);
  } catch (error) {
    throw new UsageError(`--${(error as Error).message}`);
  }
  const speed = numberFlag("--speed", values.speed, 1);
  const requestTimeoutMs = numberFlag("--request-timeout-ms", values["request-timeout-ms"], 60_000);
  // --model is the requests' model name here: the instance model comes from the scenario file.
  const { model, ...scenarioFlags } = values;
  const config = await configFromFlags(scenarioFlags);
  const nonce = values.nonce === undefined
    ? freshNonce()
    : values.nonce.trim() === ""
    ? NaN
    : Number(values.nonce);
  if (!Number.isSafeInteger(nonce) || nonce < 0) {
    throw new UsageError(`--nonce: expected an integer >= 0, got "${values.nonce}"`);
  }
  const promptIds = values["prompt-ids"] ?? false;
  if (promptIds && endpoint === "chat") {
    throw new UsageError("--prompt-ids: token ids need the completion endpoint, not --endpoint chat");
  }
  return {
    url,
    endpoint,
    speed,
    requestTimeoutMs,
    config,
    nonce,
    nonceGiven: values.nonce !== undefined,
    promptIds,
    model: model ?? "sim",
  };
}

/** One progress line: how many requests were sent and how they ended. */
function progressLine(p: LoadProgress, wallMs: number): string {
  const open = p.sent - p.completed - p.dropped - p.failed - p.clientStalled;
  return `load: ${p.sent} of ${p.total} sent, ${p.completed} completed, ${p.dropped} dropped, ${p.failed} failed, ` +
    `${p.clientStalled} client stalled, ${open} in flight, ${(wallMs / 1000).toFixed(0)} s wall`;
}

/**
 * The last line of a run in which every request sent failed (it exits 1), with
 * how they failed; undefined when any got an answer, or none was sent.
 */
export function allFailedLine(l: LoadResult["load"]): string | undefined {
  if (l.sent === 0 || l.failed < l.sent) return undefined;
  const kinds = Object.entries(l.failedBy).map(([kind, n]) => `${kind} ${n}`).join(", ");
  const example = Object.values(l.failureExamples)[0];
  return `load: every request failed (${l.failed} of ${l.sent}${kinds === "" ? "" : `: ${kinds}`})` +
    `${example === undefined ? "" : `, e.g. ${example}`}; is the server at ${l.url} up and serving model ` +
    `"${l.model}"? exit 1`;
}

/** The report as the flags ask: JSON (with the client's limits on stderr too), or the table. */
function printReport(result: LoadResult, json: boolean | undefined): void {
  console.log(json ? JSON.stringify(result, null, 2) : formatLoadReport(result));
  if (!json) return;
  for (const line of clientLimitLines(result.load)) console.error(`load: ${line}`);
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    const settings = await loadSettings(values);
    const terminal = Deno.stderr.isTerminal(), start = performance.now();
    let latest: LoadProgress | undefined, lastLine = start;
    const timer = (terminal || values.progress) && setInterval(() => {
      const now = performance.now();
      if (latest === undefined || now - lastLine < (terminal ? 1000 : 10_000)) return;
      lastLine = now;
      console.error(progressLine(latest, now - start));
    }, 250);
    const abort = new AbortController();
    const onInterrupt = () => abort.abort();
    Deno.addSignalListener("SIGINT", onInterrupt);
    try {
      const { nonceGiven: _nonceGiven, ...options } = settings;
      const result = await runLoad({
        ...options,
        signal: abort.signal,
        wallTime: systemWallTime,
        onStart: (total, url) =>
          console.error(
            `load: sending ${
              plural(total, "request")
            } to ${url} at speed ${settings.speed}×, nonce ${settings.nonce}` +
              (settings.nonceGiven ? "" : ` (drawn fresh; --nonce ${settings.nonce} repeats these prompts)`),
          ),
        onProgress: (_done, _total, progress) => latest = progress,
      });
      printReport(result, values.json);
      if (result.load.interrupted) {
        const l = result.load;
        console.error(
          `load: interrupted after ${
            (result.wallMs / 1000).toFixed(1)
          } s wall: ${l.sent} of ${l.total} sent, ` +
            `${l.inFlight} in flight aborted`,
        );
        Deno.exit(130);
      }
      const failedLine = allFailedLine(result.load);
      if (failedLine !== undefined) {
        console.error(failedLine);
        Deno.exit(1);
      }
    } finally {
      if (timer !== false) clearInterval(timer);
      Deno.removeSignalListener("SIGINT", onInterrupt);
    }
  });
}
