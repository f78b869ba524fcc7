/**
 * @module
 * `deno task validate`'s work: one workload replayed, for each policy named,
 * through the gateway to real upstreams (repeated, each repetition with
 * prompts of its own), and simulated with the calibrated engine; sim against
 * real per metric, with the spread between the real repetitions as the noise
 * floor. scenarios/wire/README.md, "`deno task validate`".
 */
import type { SimulationConfig } from "../../actors/topology.ts";
import type { WallTime } from "../../actors/runtime/wall_clock.ts";
import { runScenario } from "../workers/run_scenario.ts";
import { type Gateway, startGateway } from "./gateway.ts";
import { runLoad } from "./load_generator.ts";
import { tokenId } from "./tokenizer.ts";

/** What a validation is asked to do. */
export interface ValidateOptions {
  /** The real engines' base URLs. */
  readonly urls: readonly string[];
  /**
   * One scenario per policy compared, in order: the same workload, the
   * calibrated engine (`instances.engine.preset`), `instances.count` = the
   * URLs; each its policy and that policy's resolved router view (its index
   * capacity and unit are the policy's own).
   */
  readonly configs: readonly SimulationConfig[];
  /** Real runs of each policy. @default 3 */
  readonly repeat: number;
  /** The gateway's wall ms between scrapes; the simulated router's status interval. */
  readonly scrapeMs: number;
  /** The requests' `model`. */
  readonly model: string;
  /** Makes each real run's prompts its own: run r of policy p uses nonce + 1000·r + p. */
  readonly nonce: number;
  /** Wall ms a request may take. */
  readonly requestTimeoutMs: number;
  readonly wallTime: WallTime;
  readonly signal?: AbortSignal;
  /** One line per run, for progress. */
  readonly onProgress?: (line: string) => void;
  /**
   * Empties the engines' caches before each real run (see {@linkcode resetEngines}), so
   * that every run starts as a simulation does; returns one line saying what was done.
   * @default resetEngines
   */
  readonly reset?: (urls: readonly string[], model: string, nonce: number) => Promise<string>;
  /** Starts the gateway (tests inject their own); default {@linkcode startGateway} on an ephemeral loopback port. */
  readonly gateway?: (config: SimulationConfig, policyIndex: number) => Promise<Gateway>;
}

/** The metrics compared. */
export const METRICS = [
  "ttftMeanMs",
  "ttftP50Ms",
  "ttftP90Ms",
  "ttftP99Ms",
  "tpotMeanMs",
  "tokenHitRate",
] as const;

/** A compared metric's name. */
export type MetricName = typeof METRICS[number];

/** What a run measured of the compared metrics, with its per-instance share and its failures. */
export interface RunFigures {
  readonly metrics: Readonly<Record<MetricName, number | null>>;
  /** Each instance's share of the completed requests; null when the instance is unknown. */
  readonly share: readonly number[] | null;
  readonly completed: number;
  readonly dropped: number;
  readonly failed: number;
}

/** Sim against real for one metric of one policy. */
export interface MetricComparison {
  readonly metric: MetricName;
  readonly sim: number | null;
  /** Mean over the real repetitions (null when none measured it). */
  readonly real: number | null;
  readonly realMin: number | null;
  readonly realMax: number | null;
  /**
   * Sim minus real: relative to real for times (0.1 = 10% over), absolute for
   * the hit rate; null when either side is null.
   */
  readonly error: number | null;
  /** The real repetitions' range in the same unit as `error` (relative or absolute); null with fewer than 2. */
  readonly noise: number | null;
  /** Whether |error| is within the noise floor; null when either is unknown. */
  readonly withinNoise: boolean | null;
}

/** One policy's outcome. */
export interface PolicyValidation {
  readonly policy: string;
  readonly real: readonly RunFigures[];
  readonly sim: RunFigures;
  readonly comparisons: readonly MetricComparison[];
  /** Largest |sim share − real mean share| over the instances; null without instance headers. */
  readonly shareError: number | null;
}

/** A validation's outcome. */
export interface Validation {
  readonly urls: readonly string[];
  readonly repeat: number;
  /** What was done to empty the engines' caches before each real run. */
  readonly reset: string;
  readonly policies: readonly PolicyValidation[];
  /** Policies by mean TTFT, best first: as the real runs rank them (mean of repetitions) and as the simulator does. */
  readonly ranking: Ranking;
}

/**
 * How the policies rank by mean TTFT, best first, in the real runs (their
 * mean) and in the simulator. Two policies whose real runs' ranges overlap
 * are not told apart by the real engines: their order is a tie, and the
 * simulator may order them either way.
 */
export interface Ranking {
  readonly real: readonly string[];
  readonly sim: readonly string[];
  /** Pairs the real runs do not tell apart (overlapping ranges). */
  readonly ties: readonly (readonly [string, string])[];
  /** Whether the simulator orders every pair the real runs tell apart as they do; null when a mean TTFT is unknown. */
  readonly agrees: boolean | null;
}

/** The ranking of `results` by mean TTFT, real and simulated, with the real runs' ties. */
export function rank(results: readonly PolicyValidation[]): Ranking {
  const of = (v: PolicyValidation) => v.comparisons.find((c) => c.metric === "ttftMeanMs")!;
  const order = (pick: (c: MetricComparison) => number | null) =>
    results.filter((v) => pick(of(v)) !== null).toSorted((a, b) => pick(of(a))! - pick(of(b))!)
      .map((v) => v.policy);
  const ties: [string, string][] = [];
  let agrees = true, unknown = false;
  for (let i = 0; i < results.length; i++) {
    for (let j = i + 1; j < results.length; j++) {
      const a = of(results[i]), b = of(results[j]);
      if (a.real === null || b.real === null || a.sim === null || b.sim === null) {
        unknown = true;
        continue;
      }
      if (a.realMax! >= b.realMin! && b.realMax! >= a.realMin!) {
        ties.push([results[i].policy, results[j].policy]);
        continue;
      }
      if (Math.sign(a.real - b.real) !== Math.sign(a.sim - b.sim)) agrees = false;
    }
  }
  return { real: order((c) => c.real), sim: order((c) => c.sim), ties, agrees: unknown ? null : agrees };
}

/** Whether a metric is a time (compared relatively) rather than a rate (compared absolutely). */
function relative(metric: MetricName): boolean {
  return metric !== "tokenHitRate";
}

/** The figures of a run report (load's or run's: the same keys). */
function figures(
  report:
    & {
      readonly [K in MetricName]: number | null;
    }
    & {
      readonly perInstanceCompleted: readonly number[];
      readonly completed: number;
      readonly dropped: number;
      readonly failed: number;
    },
  instanceKnown: boolean,
): RunFigures {
  const metrics = Object.fromEntries(METRICS.map((m) => [m, report[m]])) as Record<MetricName, number | null>;
  const total = report.perInstanceCompleted.reduce((a, b) => a + b, 0);
  return {
    metrics,
    share: !instanceKnown || total === 0 ? null : report.perInstanceCompleted.map((c) => c / total),
    completed: report.completed,
    dropped: report.dropped,
    failed: report.failed,
  };
}

/** Compares the simulated value of `metric` with the real repetitions'. */
export function compareMetric(
  metric: MetricName,
  sim: number | null,
  reals: readonly (number | null)[],
): MetricComparison {
  const values = reals.filter((v): v is number => v !== null);
  const real = values.length === 0 ? null : values.reduce((a, b) => a + b, 0) / values.length;
  const realMin = values.length === 0 ? null : Math.min(...values);
  const realMax = values.length === 0 ? null : Math.max(...values);
  const scale = (x: number) => relative(metric) ? x / real! : x;
  const error = sim === null || real === null || (relative(metric) && real === 0) ? null : scale(sim - real);
  const noise = values.length < 2 || real === null || (relative(metric) && real === 0)
    ? null
    : scale(realMax! - realMin!);
  return {
    metric,
    sim,
    real,
    realMin,
    realMax,
    error,
    noise,
    withinNoise: error === null || noise === null ? null : Math.abs(error) <= noise,
  };
}

/**
 * Runs the validation: per policy, `repeat` real runs through a fresh
 * gateway, then one simulated run (deterministic: one is enough).
 */
export async function validate(options: ValidateOptions): Promise<Validation> {
  const o = options;
  const progress = o.onProgress ?? (() => {});
  const results: PolicyValidation[] = [];
  let reset = "";
  for (const [p, scenario] of o.configs.entries()) {
    const config: SimulationConfig = {
      ...scenario,
      // What the gateway's router sees: an approximate view, and load as fresh as its scrapes.
      router: { ...scenario.router, cacheView: "approximate", statusIntervalMs: o.scrapeMs },
    };
    const sim = runScenario(config);
    const simFigures = figures(sim, true);
    const real: RunFigures[] = [];
    for (let r = 0; r < o.repeat && !o.signal?.aborted; r++) {
      reset = await (o.reset ?? resetEngines)(o.urls, o.model, o.nonce + 1000 * r + p);
      const gateway = await (o.gateway ?? defaultGateway(o))(config, p);
      try {
        const load = await runLoad({
          url: gateway.url,
          config,
          speed: 1,
          endpoint: "completion",
          model: o.model,
          nonce: o.nonce + 1000 * r + p,
          promptIds: true,
          freshPrefixes: true,
          requestTimeoutMs: o.requestTimeoutMs,
          wallTime: o.wallTime,
          ...(o.signal !== undefined && { signal: o.signal }),
        });
        real.push(figures(load, load.load.instanceMissing === 0));
        progress(
          `validate: ${sim.policy} run ${
            r + 1
          }/${o.repeat}: ${load.completed} completed, ${load.dropped} dropped, ` +
            `${load.failed} failed; mean TTFT ${load.ttftMeanMs?.toFixed(1) ?? "n/a"} ms (sim ${
              sim.ttftMeanMs?.toFixed(1) ?? "n/a"
            }), token hit rate ${load.tokenHitRate?.toFixed(3) ?? "n/a"} (sim ${
              sim.tokenHitRate?.toFixed(3) ?? "n/a"
            })`,
        );
      } finally {
        await gateway.close(1000);
      }
    }
    const comparisons = METRICS.map((m) =>
      compareMetric(m, simFigures.metrics[m], real.map((f) => f.metrics[m]))
    );
    const shares = real.map((f) => f.share).filter((s): s is readonly number[] => s !== null);
    const shareError = shares.length === 0 || simFigures.share === null ? null : Math.max(
      ...simFigures.share.map((s, i) => Math.abs(s - shares.reduce((a, sh) => a + sh[i], 0) / shares.length)),
    );
    results.push({ policy: sim.policy, real, sim: simFigures, comparisons, shareError });
  }
  return { urls: o.urls, repeat: o.repeat, reset, policies: results, ranking: rank(results) };
}

/**
 * Empties each engine's prompt cache through its public API, so a real run
 * starts as a simulated one, with nothing held: fresh prompts keep an earlier
 * run's prefixes from hitting, but not its KV from occupying the cache, and
 * llama.cpp's attention spans every occupied cell. A llama-server (its
 * `/props` gives `total_slots`) gets as many one-token requests at once, so
 * that each slot's cache is replaced by one token (its
 * `/slots/{id}?action=erase` needs `--slot-save-path`, and in the 2025-02
 * snapshot hung when asked twice). vLLM: `POST /reset_prefix_cache` (with
 * `VLLM_SERVER_DEV_MODE=1`); SGLang: `POST /flush_cache`; a pool holds
 * cached blocks as evictable, so without them only the cold prompts count.
 * Returns one line per kind of outcome.
 */
export async function resetEngines(urls: readonly string[], model: string, nonce: number): Promise<string> {
  const outcomes = await Promise.all(urls.map(async (url, u) => {
    const post = async (path: string, body?: unknown) => {
      try {
        const response = await fetch(`${url}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(30_000),
        });
        await response.body?.cancel();
        return response.ok;
      } catch {
        return false;
      }
    };
    const props = await fetch(`${url}/props`, { signal: AbortSignal.timeout(30_000) })
      .then((r) => r.ok ? r.json() : r.body?.cancel().then(() => undefined)).catch(() => undefined) as
        | { total_slots?: unknown }
        | undefined;
    if (typeof props?.total_slots === "number") {
      const done = await Promise.all(
        Array.from({ length: props.total_slots }, (_, slot) =>
          post("/v1/completions", {
            model,
            prompt: [tokenId(nonce * 64 + u, slot)],
            max_tokens: 1,
          })),
      );
      return done.every(Boolean)
        ? "llama.cpp slots emptied (a one-token prompt each)"
        : "llama.cpp slots not emptied";
    }
    if (await post("/reset_prefix_cache")) return "vLLM prefix cache reset";
    if (await post("/flush_cache")) return "SGLang cache flushed";
    return "no cache reset offered (cold prompts only)";
  }));
  const counts = new Map<string, number>();
  for (const o of outcomes) counts.set(o, (counts.get(o) ?? 0) + 1);
  return [...counts].map(([o, n]) => `${o} (${n} of ${urls.length})`).join("; ");
}

/** A gateway as `deno task serve --upstream` starts one, on an ephemeral loopback port. */
function defaultGateway(o: ValidateOptions): (config: SimulationConfig) => Promise<Gateway> {
  return (config) =>
    startGateway({
      config,
      upstreams: o.urls,
      host: "127.0.0.1",
      port: 0,
      speed: 1,
      wallTime: o.wallTime,
      maxBodyBytes: 1 << 22,
      scrapeMs: o.scrapeMs,
      upstreamTimeoutMs: o.requestTimeoutMs,
      onFatal: (line) => console.error(line),
    });
}

/** A comparison's error as a reader wants it: "+12.3%" or "+0.021". */
export function showError(c: MetricComparison, value: number | null = c.error): string {
  if (value === null) return "n/a";
  return relative(c.metric)
    ? `${value >= 0 ? "+" : ""}${(100 * value).toFixed(1)}%`
    : `${value >= 0 ? "+" : ""}${value.toFixed(3)}`;
}

/** The validation as a table: per policy and metric, sim, real (min–max), error, noise floor. */
export function formatValidation(v: Validation): string {
  const lines = [
    `validation · ${v.urls.join(", ")} · ${v.repeat} real runs per policy`,
    `before each real run: ${v.reset}`,
  ];
  const num = (x: number | null, metric: MetricName) =>
    x === null ? "n/a" : metric === "tokenHitRate" ? x.toFixed(3) : x.toFixed(1);
  for (const p of v.policies) {
    const failed = p.real.reduce((a, r) => a + r.failed, 0),
      dropped = p.real.reduce((a, r) => a + r.dropped, 0);
    lines.push(
      "",
      `${p.policy}: real ${
        p.real.map((r) => r.completed).join("/")
      } completed, ${dropped} dropped, ${failed} failed; ` +
        `sim ${p.sim.completed} completed, ${p.sim.dropped} dropped`,
      "  metric            sim        real (min – max)              error     noise    verdict",
    );
    for (const c of p.comparisons) {
      const range = c.realMin === null ? "" : `(${num(c.realMin, c.metric)} – ${num(c.realMax, c.metric)})`;
      const verdict = c.withinNoise === null ? "n/a" : c.withinNoise ? "within noise" : "outside noise";
      lines.push(
        `  ${c.metric.padEnd(14)}${num(c.sim, c.metric).padStart(9)} ${num(c.real, c.metric).padStart(10)} ${
          range.padEnd(20)
        }${showError(c).padStart(10)}${showError(c, c.noise).padStart(10)}    ${verdict}`,
      );
    }
    const shares = (s: readonly number[] | null) => s === null ? "n/a" : s.map((x) => x.toFixed(2)).join("/");
    lines.push(
      `  per-instance share: sim ${shares(p.sim.share)}, real ${
        p.real.map((r) => shares(r.share)).join(", ")
      }; ` +
        `largest gap ${p.shareError === null ? "n/a" : p.shareError.toFixed(3)}`,
    );
  }
  lines.push(
    "",
    `ranking by mean TTFT: real ${v.ranking.real.join(" < ")}; sim ${v.ranking.sim.join(" < ")}: ${
      v.ranking.agrees === null ? "n/a (a mean TTFT is unknown)" : v.ranking.agrees ? "agree" : "DISAGREE"
    }${
      v.ranking.ties.length === 0
        ? ""
        : ` (the real runs do not tell apart ${v.ranking.ties.map(([a, b]) => `${a} and ${b}`).join(", ")})`
    }`,
  );
  return lines.join("\n");
}
