/**
 * @module
 * Writes the sim-to-real study's `summary.txt` from what `run.sh` measured:
 * the calibration (`DIR/calibration/calibration.json`) and the validation
 * (`DIR/validation/validation.json`), against the study's targets — mean
 * TTFT within 15% and token hit rate within 0.03 for every policy, and the
 * real engines' policy ranking — with the real runs' spread as the noise
 * floor. What causes the rest is in scenarios/sim2real/README.md,
 * "The sim-to-real study".
 *
 * Usage: deno run --allow-read --allow-write=results scenarios/sim2real/summarise.ts results/sim2real
 */
import { join } from "node:path";
import { writeFileAtomic } from "../cli/atomic_write.ts";
import { type Calibration, formatCalibration } from "../wire/calibration.ts";
import { formatValidation, type MetricComparison, showError, type Validation } from "../wire/validation.ts";

/** The study's targets (issue 24). */
const TTFT_TARGET = 0.15, HIT_TARGET = 0.03;

/** One policy's verdict line against the targets and the noise floor. */
function verdict(name: string, c: MetricComparison, target: number): string {
  const error = c.error === null ? null : Math.abs(c.error);
  const inTarget = error === null ? "n/a" : error <= target ? "within the target" : "OUTSIDE the target";
  const noise = c.noise === null
    ? "no noise floor (one run)"
    : `noise floor ${showError(c, c.noise)}${c.withinNoise ? " (the error is inside it)" : ""}`;
  const wider = c.noise !== null && c.noise > target ? "; the noise floor is wider than the target" : "";
  return `  ${name}: error ${showError(c)} — ${inTarget} (±${
    c.metric === "tokenHitRate" ? target.toFixed(2) : `${100 * target}%`
  }); ${noise}${wider}`;
}

/** The summary's text. */
export function summary(calibration: Calibration, validation: Validation): string {
  const lines = [
    "The sim-to-real study: the simulator against llama.cpp's llama-server",
    "=====================================================================",
    "",
    `Engines: ${calibration.urls.length} llama-server instances (CPU, one thread each, a random-weight`,
    "llama model: real prefill, decode, KV cache and prefix reuse; gibberish text), on loopback.",
    'Made by scenarios/sim2real/run.sh; scenarios/sim2real/README.md, "The sim-to-real study", says what it means.',
    "",
    "Targets: mean TTFT within 15% and token hit rate within 0.03 for every policy, and the same",
    "policy ranking as the real engines. The noise floor is the range of the real runs of a policy",
    "(the same workload, each run with prompts of its own).",
    "",
    "Verdicts",
    "--------",
  ];
  for (const p of validation.policies) {
    lines.push(`${p.policy}:`);
    lines.push(verdict("mean TTFT", p.comparisons.find((c) => c.metric === "ttftMeanMs")!, TTFT_TARGET));
    lines.push(
      verdict("token hit rate", p.comparisons.find((c) => c.metric === "tokenHitRate")!, HIT_TARGET),
    );
  }
  lines.push(
    `ranking by mean TTFT: real ${validation.ranking.real.join(" < ")}; simulated ${
      validation.ranking.sim.join(" < ")
    } — ${
      validation.ranking.agrees === null
        ? "n/a (a mean TTFT is unknown)"
        : validation.ranking.agrees
        ? validation.ranking.ties.length > 0
          ? "no pair the real runs tell apart is ordered otherwise"
          : "the same"
        : "NOT the same"
    }`,
    "",
    'What causes the rest (scenarios/sim2real/README.md, "What the study found", weighs each against the figures above):',
    "- the calibration measures each engine alone; in the validation the engines, the gateway and the",
    "  load generator share the machine's cores, so prefill and decode run slower than calibrated;",
    "- near saturation (an instance holding three of the four prefixes) queueing multiplies any",
    "  service-time error, and llama-server's own behaviour there is modelled only in part (its",
    "  deferred queue is not first come first served; attention up to the highest occupied KV cell;",
    "  requests arriving together share a step);",
    "- prefix-aware placement is chaotic: a few ms decide which instance a prefix lands on, so one",
    "  simulated run is one draw;",
    "- a synthetic request keys only its shared prefix, where an engine caches (and a router",
    "  indexes) every full block of the prompt.",
    "",
    "Validation",
    "----------",
    formatValidation(validation),
    "",
    "Calibration",
    "-----------",
    formatCalibration(calibration),
    "",
  );
  return lines.join("\n");
}

if (import.meta.main) {
  const dir = Deno.args[0];
  if (dir === undefined) {
    console.error("usage: summarise.ts DIR (the study's results directory, e.g. results/sim2real)");
    Deno.exit(2);
  }
  const read = async (path: string) => JSON.parse(await Deno.readTextFile(join(dir, path)));
  const text = summary(await read("calibration/calibration.json"), await read("validation/validation.json"));
  await writeFileAtomic(join(dir, "summary.txt"), text);
  console.log(text);
}
