/**
 * @module
 * `deno task validate --url URL[,URL…] --preset FILE`: replays one workload
 * through the gateway to real upstreams and through the simulator with the
 * calibrated engine, for each policy named, repeated; prints sim against
 * real per metric with the real runs' spread as the noise floor, and whether
 * the policies rank alike; writes JSON and plots. scenarios/wire/README.md,
 * "`deno task validate`".
 */
import { join } from "node:path";
import * as Plot from "@observablehq/plot";
import {
  configFromFlags,
  numberFlag,
  parseFlags,
  reachableUrls,
  runCommand,
  SCENARIO_FLAGS_HELP,
  SCENARIO_OPTIONS,
} from "./scenario/command_line.ts";
import { writeFilesAtomic } from "./cli/atomic_write.ts";
import { toolOutputDirectory } from "./sweep_runner/output_directory.ts";
import { figure, plot, SERIES_COLORS } from "./report/chart.ts";
import { toPng } from "./report/png.ts";
import { UsageError } from "./cli/usage_error.ts";
import { systemWallTime } from "./cli/wall_time.ts";
import { DEFAULT_SCRAPE_MS } from "./wire/gateway.ts";
import { formatValidation, validate, type Validation } from "./wire/validation.ts";

const HELP = `Usage: deno task validate --url URL[,URL…] --preset FILE [flags]

Replays the scenario's workload through a gateway (as deno task serve
--upstream runs one) to the real engines at URL,…, for each policy, --repeat
times, with prompts sent as token ids; simulates the same workload on as many
instances of the calibrated engine (--preset, from deno task calibrate) with
the router the gateway runs (approximate cache view, load as fresh as its
scrapes); and prints, per policy and metric, sim against the real mean, the
error, and the real runs' spread (the noise floor: an error inside it is said
to be so), then whether the policies rank alike by mean TTFT. Writes
validation.json and plots to --out. This task may connect to 127.0.0.1 and
localhost only.

  --url URL[,URL…]       the real engines (required); instances.count is their number
  --policies P,P,…       built-in policies to compare (default round_robin,prefix_aware,sglang_cache_aware)
  --repeat N             real runs per policy (default 3)
  --scrape-ms N          the gateway's wall ms between scrapes, and the simulated status interval (default ${DEFAULT_SCRAPE_MS})
  --model NAME           the requests' "model" (default: the first the engine's /v1/models lists)
  --nonce N              makes the real runs' prompts their own (default: random)
  --request-timeout-ms N wall ms one request may take (default 120000)
  --out DIR              output directory under results/ (default results/validation)
  --json                 print validation.json's content instead of the table

${SCENARIO_FLAGS_HELP}`;

const OPTIONS = {
  ...SCENARIO_OPTIONS,
  url: { type: "string" },
  policies: { type: "string" },
  repeat: { type: "string" },
  "scrape-ms": { type: "string" },
  nonce: { type: "string" },
  "request-timeout-ms": { type: "string" },
  out: { type: "string" },
} as const;

/** Mean TTFT per policy: each real run a dot, the simulator a cross. */
export function validationChart(v: Validation, metric: "ttftMeanMs" | "tokenHitRate"): string {
  const rows = v.policies.flatMap((p) => [
    ...p.real.map((r, i) => ({ policy: p.policy, source: "real", run: i + 1, value: r.metrics[metric] })),
    { policy: p.policy, source: "sim", run: 0, value: p.sim.metrics[metric] },
  ]).filter((r) => r.value !== null);
  const colors = { domain: ["real", "sim"], range: [SERIES_COLORS[0], SERIES_COLORS[2]] };
  const svg = plot({
    x: { label: null, domain: v.policies.map((p) => p.policy) },
    y: { label: metric === "ttftMeanMs" ? "mean TTFT (ms)" : "token hit rate", grid: true, zero: true },
    color: colors,
    marks: [
      Plot.dot(rows.filter((r) => r.source === "real"), { x: "policy", y: "value", stroke: "source", r: 4 }),
      Plot.dot(rows.filter((r) => r.source === "sim"), {
        x: "policy",
        y: "value",
        stroke: "source",
        symbol: "times",
        r: 7,
        strokeWidth: 2.5,
      }),
    ],
  });
  return figure(
    metric === "ttftMeanMs" ? "Mean TTFT: simulated against real" : "Token hit rate: simulated against real",
    `${v.urls.length} engine(s) · ${v.repeat} real runs per policy (dots) · simulator (cross)`,
    [{ label: "real run", color: colors.range[0] }, { label: "simulated", color: colors.range[1] }],
    svg,
  );
}

/** The model the engine lists first, for requests that must name it. */
async function listedModel(url: string): Promise<string> {
  const response = await fetch(`${url}/v1/models`, { signal: AbortSignal.timeout(30_000) }).catch((error) => {
    throw new UsageError(`--url: cannot reach ${url}/v1/models: ${(error as Error).message}`);
  });
  const body = await response.json().catch(() => undefined) as { data?: { id?: unknown }[] } | undefined;
  const id = body?.data?.[0]?.id;
  if (typeof id !== "string") {
    throw new UsageError(`--model: ${url}/v1/models lists no model; give --model NAME`);
  }
  return id;
}

/** The parsed flags of `deno task validate`. */
type ValidateFlags = ReturnType<typeof parseFlags<typeof OPTIONS>>["values"];

/** What `deno task validate` is asked to do, checked. */
async function validateSettings(values: ValidateFlags) {
  const urls = reachableUrls("--url", values.url, "validate");
  const given = (values as Record<string, unknown>).instances;
  if (given !== undefined && Number(given) !== urls.length) {
    throw new UsageError(`--instances: the fleet is the --url engines (${urls.length}); got ${given}`);
  }
  const names = (values.policies ?? "round_robin,prefix_aware,sglang_cache_aware").split(",").map((s) =>
    s.trim()
  );
  if (names.some((n) => n === "")) {
    throw new UsageError(`--policies: expected P,P,…, got "${values.policies}"`);
  }
  const repeat = numberFlag("--repeat", values.repeat, 3, { integer: true });
  const scrapeMs = numberFlag("--scrape-ms", values["scrape-ms"], DEFAULT_SCRAPE_MS);
  const requestTimeoutMs = numberFlag("--request-timeout-ms", values["request-timeout-ms"], 120_000);
  const nonce = values.nonce === undefined
    ? crypto.getRandomValues(new Uint32Array(1))[0] % 1_000_000_000
    : numberFlag("--nonce", values.nonce, 0, { integer: true, zero: true });
  // --model is the requests' model name here: the instance model comes from the preset.
  const {
    url: _u,
    policies: _p,
    repeat: _r,
    "scrape-ms": _s,
    nonce: _n,
    "request-timeout-ms": _t,
    out: _o,
    model: _m,
    ...rest
  } = values;
  const flags = { ...rest, instances: String(urls.length) };
  const configs = await Promise.all(names.map((name) => configFromFlags({ ...flags, policy: name })));
  const engine = configs[0].instances.engine;
  if (engine.presetFile === undefined) {
    throw new UsageError(
      "--preset: required: the engine preset file deno task calibrate wrote for these engines " +
        "(the simulator must run the engine measured, not a built-in preset)",
    );
  }
  const out = await toolOutputDirectory(values.out, "validation");
  return { urls, configs, repeat, scrapeMs, requestTimeoutMs, nonce, out };
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    const { urls, configs, repeat, scrapeMs, requestTimeoutMs, nonce, out } = await validateSettings(values);
    const model = values.model ?? await listedModel(urls[0]);
    const abort = new AbortController();
    const onInterrupt = () => abort.abort();
    Deno.addSignalListener("SIGINT", onInterrupt);
    let result: Validation;
    try {
      result = await validate({
        urls,
        configs,
        repeat,
        scrapeMs,
        model,
        nonce,
        requestTimeoutMs,
        wallTime: systemWallTime,
        signal: abort.signal,
        onProgress: (line) => console.error(line),
      });
    } finally {
      Deno.removeSignalListener("SIGINT", onInterrupt);
    }
    const ttft = validationChart(result, "ttftMeanMs"), hit = validationChart(result, "tokenHitRate");
    const files = new Map<string, string | Uint8Array>([
      [join(out, "validation.json"), JSON.stringify(result, null, 2) + "\n"],
      [join(out, "validation.txt"), formatValidation(result) + "\n"],
      [join(out, "ttft.svg"), ttft],
      [join(out, "ttft.png"), toPng(ttft)],
      [join(out, "hit_rate.svg"), hit],
      [join(out, "hit_rate.png"), toPng(hit)],
    ]);
    await writeFilesAtomic(files);
    console.log(values.json ? JSON.stringify(result, null, 2) : formatValidation(result));
    for (const file of files.keys()) console.error(`validate: wrote ${file}`);
    if (abort.signal.aborted) Deno.exit(130);
  });
}
