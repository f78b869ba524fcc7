/**
 * @module
 * `deno task calibrate --url URL[,URL…]`: measures OpenAI-compatible engines
 * through their public API, fits the batching engine's coefficients with
 * confidence intervals, finds what it can of the cache, and writes an engine
 * preset file that `run`, `sweep`, `realtime` and `serve` take as
 * `instances.engine.preset`. scenarios/wire/README.md,
 * "`deno task calibrate`".
 */
import { join } from "node:path";
import * as Plot from "@observablehq/plot";
import { numberFlag, parseFlags, reachableUrls, runCommand } from "./scenario/command_line.ts";
import { writeFilesAtomic } from "./cli/atomic_write.ts";
import { toolOutputDirectory } from "./sweep_runner/output_directory.ts";
import { figure, plot, SERIES_COLORS } from "./report/chart.ts";
import { toPng } from "./report/png.ts";
import { UsageError } from "./cli/usage_error.ts";
import {
  calibrate,
  type Calibration,
  CalibrationError,
  type FittedPoint,
  formatCalibration,
} from "./wire/calibration.ts";

const HELP = `Usage: deno task calibrate --url URL[,URL…] [flags]

Measures OpenAI-compatible engines (vLLM, SGLang, llama.cpp's llama-server,
deno task serve) through their public API: streamed completions whose
prompts are token ids — a ladder of prompt lengths, each then reused with a
suffix; groups of requests decoding together; bursts of long prompts — round
after round until every coefficient is known to --tolerance. Fits the
simulator's engine (step, prefill per token, decode per sequence, request
overhead, step budget) with 95% intervals, probes the cache (per-slot or a
shared pool, block size, capacity), and writes to --out:
  preset.json        an engine preset: instances.engine.preset in a scenario
  calibration.json   every measurement, the fit, its residuals, what was assumed
  fit.svg, fit.png   measured against fitted times
This task may connect to 127.0.0.1 and localhost only.

  --url URL[,URL…]       the engines' base URLs (required); all are measured and fitted as one
  --model NAME           the requests' "model" (default: the first /v1/models lists)
  --out DIR              output directory under results/ (default results/calibration)
  --name NAME            the preset's name (default calibrated-<server>)
  --min-rounds N         rounds before the estimates may be called stable (default 3)
  --max-rounds N         rounds at most (default 8)
  --tolerance X          stable when each 95% interval moves its step by at most X (default 0.1)
  --max-prompt-tokens N  the longest prompt (default 4119; capped by the slot context an engine reports)
  --decode-tokens N      output tokens per decode measurement (default 32)
  --max-concurrency N    most requests decoding together (default 8; capped by the slots found)
  --slot-probe N         most distinct prompts between a prompt and its reuse (default 16)
  --request-timeout-ms N wall ms one request may take (default 120000)
  --nonce N              makes this calibration's prompts its own (default: random)
  --json                 print calibration.json's content instead of the table`;

const OPTIONS = {
  help: { type: "boolean", short: "h" },
  url: { type: "string" },
  model: { type: "string" },
  out: { type: "string" },
  name: { type: "string" },
  "min-rounds": { type: "string" },
  "max-rounds": { type: "string" },
  tolerance: { type: "string" },
  "max-prompt-tokens": { type: "string" },
  "decode-tokens": { type: "string" },
  "max-concurrency": { type: "string" },
  "slot-probe": { type: "string" },
  "request-timeout-ms": { type: "string" },
  nonce: { type: "string" },
  json: { type: "boolean" },
} as const;

/** Measured against fitted times, one colour per kind of point, the line y = x. */
export function fitChart(c: Calibration): string {
  const kinds: FittedPoint["kind"][] = ["lone prefill", "decode gap", "burst prefill"];
  const colors = kinds.map((_, i) => SERIES_COLORS[i]);
  const positive = c.points.flatMap((p) => [p.measuredMs, p.fittedMs]).filter((v) => v > 0);
  const domain = [Math.min(...positive, 1) * 0.8, Math.max(...positive, 1) * 1.2];
  const svg = plot({
    x: {
      label: "fitted (ms)",
      type: "log",
      domain,
      grid: true,
    },
    y: { label: "measured (ms)", type: "log", domain, grid: true },
    color: { domain: kinds, range: colors },
    marks: [
      Plot.line(domain.map((v) => [v, v]), { stroke: "#999", strokeDasharray: "4,3" }),
      Plot.dot(c.points.filter((p) => p.fittedMs > 0 && p.measuredMs > 0), {
        x: "fittedMs",
        y: "measuredMs",
        stroke: "kind",
        r: 3,
      }),
    ],
  });
  return figure(
    "Measured against fitted step times",
    `${c.facts.server} · ${c.requests} requests · dashed: measured = fitted`,
    kinds.map((k, i) => ({ label: k, color: colors[i] })),
    svg,
  );
}

function integerFlag(flag: string, raw: string | undefined, fallback: number): number {
  return numberFlag(flag, raw, fallback, { integer: true });
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    const urls = await reachableUrls("--url", values.url, "calibrate");
    const tolerance = numberFlag("--tolerance", values.tolerance, 0.1);
    const minRounds = integerFlag("--min-rounds", values["min-rounds"], 3);
    const maxRounds = integerFlag("--max-rounds", values["max-rounds"], 8);
    if (maxRounds < minRounds) {
      throw new UsageError(`--max-rounds: expected at least --min-rounds (${minRounds}), got ${maxRounds}`);
    }
    const nonce = values.nonce === undefined
      ? crypto.getRandomValues(new Uint32Array(1))[0]
      : integerFlag("--nonce", values.nonce, 0);
    if (values.name !== undefined && !/^[\w.-]+$/.test(values.name)) {
      throw new UsageError(`--name: expected letters, digits, ".", "_" or "-", got "${values.name}"`);
    }
    const decodeTokens = integerFlag("--decode-tokens", values["decode-tokens"], 32);
    if (decodeTokens < 2) {
      throw new UsageError(
        `--decode-tokens: expected an integer >= 2 (a gap needs two tokens), got ${decodeTokens}`,
      );
    }
    const out = await toolOutputDirectory(values.out, "calibration");
    const abort = new AbortController();
    const onInterrupt = () => abort.abort();
    Deno.addSignalListener("SIGINT", onInterrupt);
    let result: Calibration;
    try {
      result = await calibrate({
        urls,
        ...(values.model !== undefined && { model: values.model }),
        minRounds,
        maxRounds,
        tolerance,
        maxPromptTokens: integerFlag("--max-prompt-tokens", values["max-prompt-tokens"], 4119),
        decodeTokens,
        maxConcurrency: integerFlag("--max-concurrency", values["max-concurrency"], 8),
        slotProbe: integerFlag("--slot-probe", values["slot-probe"], 16),
        requestTimeoutMs: numberFlag("--request-timeout-ms", values["request-timeout-ms"], 120_000),
        nonce,
        signal: abort.signal,
        onProgress: (line) => console.error(line),
      });
    } catch (error) {
      if (!(error instanceof CalibrationError)) throw error;
      console.error(`calibrate: ${error.message}`);
      Deno.exit(1);
    } finally {
      Deno.removeSignalListener("SIGINT", onInterrupt);
    }
    const preset = values.name === undefined ? result.preset : { ...result.preset, name: values.name };
    const svg = fitChart(result);
    const files = new Map<string, string | Uint8Array>([
      [join(out, "preset.json"), JSON.stringify(preset, null, 2) + "\n"],
      [join(out, "calibration.json"), JSON.stringify({ ...result, preset }, null, 2) + "\n"],
      [join(out, "fit.svg"), svg],
      [join(out, "fit.png"), toPng(svg)],
    ]);
    await writeFilesAtomic(files);
    console.log(
      values.json
        ? JSON.stringify({ ...result, preset }, null, 2)
        : formatCalibration(result, [...files.keys()]),
    );
  });
}
