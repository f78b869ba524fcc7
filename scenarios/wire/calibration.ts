/**
 * @module
 * `deno task calibrate`'s measuring: it drives OpenAI-compatible engines
 * (vLLM, SGLang, llama.cpp's server, our own `serve`) through their public
 * API only — streamed completions whose prompts are token ids, so the engine
 * computes exactly the tokens asked for — and fits the batching engine's
 * coefficients (`calibration_fit.ts`), finds what it can of the cache, and
 * says what it had to assume. scenarios/wire/README.md,
 * "`deno task calibrate`".
 */
import {
  blockSizeOf,
  type BudgetChoice,
  burstFit,
  type BurstPoint,
  chooseBudget,
  type CoefficientFit,
  contextPairs,
  type DecodePoint,
  type EngineCoefficients,
  type Estimate,
  fitCoefficients,
  fittedGap,
  fittedTtft,
  mean,
  pairsAttention,
  type PrefillPoint,
  type Residuals,
  residuals,
  stable,
  type StepAttention,
} from "./calibration_fit.ts";
import { cachedTokensOf } from "./cached_tokens.ts";
import { readSseData } from "./http.ts";
import { tokenId } from "./tokenizer.ts";
import { kvAttentionWork, SLOT_DEFAULTS } from "../../actors/instances/slot_instance.ts";
import { VLLM_H100_SCHEDULER } from "../../actors/instances/engine_presets.ts";

/** What a calibration is asked to do. */
export interface CalibrateOptions {
  /** Base URLs of the engines (`http://127.0.0.1:8080`); all are measured and fitted as one kind. */
  readonly urls: readonly string[];
  /** The requests' `model` field; absent: the first id the engine's `/v1/models` lists. */
  readonly model?: string;
  /** Rounds of the ladder before the estimates may be called stable. @default 3 */
  readonly minRounds: number;
  /** Rounds at most, stable or not. @default 8 */
  readonly maxRounds: number;
  /** Stable when every coefficient's 95% interval moves its step by at most this share. @default 0.1 */
  readonly tolerance: number;
  /** The longest prompt sent, tokens (capped by the context an engine reports). @default 4119 */
  readonly maxPromptTokens: number;
  /** Output tokens of each decode measurement. @default 32 */
  readonly decodeTokens: number;
  /** Most requests decoding together (capped by the slots found). @default 8 */
  readonly maxConcurrency: number;
  /** Most distinct prompts sent between a prompt and its reuse when looking for per-slot caches. @default 16 */
  readonly slotProbe: number;
  /** Wall ms one request may take. @default 120000 */
  readonly requestTimeoutMs: number;
  /** Makes this calibration's prompts its own (another run's cache never matches them). */
  readonly nonce: number;
  /** Aborting stops after the request in flight. */
  readonly signal?: AbortSignal;
  /** One line per step of the work, for a progress display. */
  readonly onProgress?: (line: string) => void;
}

/** What is known of an engine before measuring: from `/v1/models`, `/props` (llama.cpp) and `/metrics`. */
export interface EngineFacts {
  /** `llama.cpp`, `vllm`, `sglang`, or `unknown`, from the metric names (or `/props`). */
  readonly server: "llama.cpp" | "vllm" | "sglang" | "unknown";
  /** The model id used in requests. */
  readonly model: string;
  /** llama.cpp's slot count (`/props` `total_slots`), when exposed. */
  readonly slots?: number;
  /** Context per slot (llama.cpp `/props` `default_generation_settings.n_ctx`), tokens, when exposed. */
  readonly slotContext?: number;
  /** KV capacity in tokens (`vllm:cache_config_info` blocks × block size; `sglang:max_total_num_tokens`), when exposed. */
  readonly kvTokens?: number;
  /** Block size from `vllm:cache_config_info`, when exposed. */
  readonly blockSize?: number;
}

/** What the cache probe found. */
export interface CacheFindings {
  /** Whether the engine reports cached prompt tokens (usage `prompt_tokens_details.cached_tokens`, or llama.cpp's `timings.prompt_n`). */
  readonly reportsCached: boolean;
  /** Whether a reused prefix was found cached at all. */
  readonly prefixCaching: boolean;
  /** `slots`: each of N slots keeps its last prompt; `pool`: a shared pool of blocks. */
  readonly kind: "slots" | "pool";
  /** Slots found: the fewest distinct prompts after which a prompt was no longer cached. */
  readonly slots?: number;
  /** For a pool: distinct prompts the probe sent while the first stayed cached. */
  readonly heldPrompts?: number;
  /** Block size from the cached counts (gcd), tokens. */
  readonly blockSize?: number;
  /** How each finding was made, one line each. */
  readonly evidence: readonly string[];
}

/** One measured request. */
interface Answer {
  readonly ttftMs: number;
  /** Wall times of the streamed tokens, ms from the send. */
  readonly tokenMs: readonly number[];
  readonly promptTokens: number;
  /** Cached prompt tokens as the engine reports them; null when it does not. */
  readonly cachedTokens: number | null;
  /** KV tokens the engine's other slots held when it took this request (per-slot engines, once their slots are known; else 0). */
  readonly kvOther: number;
}

/** A measured point and what the fit predicts for it, for the residuals and the plot. */
export interface FittedPoint {
  readonly kind: "lone prefill" | "decode gap" | "burst prefill";
  /** What varies: prefill tokens, sequences, or the burst's total tokens. */
  readonly x: number;
  readonly measuredMs: number;
  readonly fittedMs: number;
  /** Which URL it was measured on (its index in `urls`). */
  readonly url: number;
}

/** A calibration's outcome. */
export interface Calibration {
  readonly urls: readonly string[];
  readonly facts: EngineFacts;
  readonly cache: CacheFindings;
  readonly coefficients: EngineCoefficients;
  readonly budget: BudgetChoice;
  /** Rounds run, and whether the estimates met the tolerance. */
  readonly rounds: number;
  readonly stable: boolean;
  readonly requests: number;
  readonly points: readonly FittedPoint[];
  readonly residuals: Readonly<Record<FittedPoint["kind"], Residuals | null>>;
  /** Per URL, the mean residual of its lone prefills, ms (one engine slower than the rest shows here). */
  readonly meanResidualByUrl: readonly number[];
  /** What could not be observed and was assumed, one line each. */
  readonly assumed: readonly string[];
  /** The engine preset file's content. */
  readonly preset: EnginePresetFile;
}

/** An engine preset file as `deno task calibrate` writes it (scenarios/scenario/engine_preset_file.ts reads it). */
export interface EnginePresetFile {
  readonly kind: "request-routing-sim engine preset";
  readonly version: 1;
  readonly name: string;
  readonly model: "slots" | "batching";
  readonly engine: Readonly<Record<string, number | boolean>>;
  readonly source: string;
  readonly calibration: Readonly<Record<string, unknown>>;
}

/** The engine's default step budget: llama.cpp's `n_batch`, or vLLM's on an H100. */
function defaultBudget(perSlot: boolean): number {
  return perSlot ? SLOT_DEFAULTS.maxBatchTokens : VLLM_H100_SCHEDULER.maxBatchTokens;
}
/**
 * Prompt lengths of the ladder, roughly doubling. None is a multiple of a
 * block size, and their whole-block parts for blocks of 8, 16, 32 or 64
 * (40 or 32, 80 or 64, 128, …) have that block as greatest common divisor,
 * so the cached counts show the block size.
 */
const LADDER = [47, 87, 135, 263, 519, 1031, 2055, 4103];
/** Tokens added to a prompt to reuse its prefix. */
const SUFFIX = 16;
/** Tokens of each prompt of the cache probe. */
const PROBE_TOKENS = 263;
/** The slots model's block size: llama.cpp matches per token; the simulator per block of this many. */
const SLOT_BLOCK_TOKENS = 16;

/** Thrown between requests once the caller's signal aborted: the round stops, what was measured is kept. */
class Interrupted extends Error {
  override readonly name = "Interrupted";
}

/** A calibration failed for a reason a user can act on (unreachable engine, an error answer). */
export class CalibrationError extends Error {
  override readonly name = "CalibrationError";
}

/**
 * Measures the engines and fits them.
 * @throws {CalibrationError} when an engine cannot be reached or answers an error.
 */
export async function calibrate(options: CalibrateOptions): Promise<Calibration> {
  return await new Calibrator(options).run();
}

class Calibrator {
  readonly #o: CalibrateOptions;
  #prompts = 0;
  #requests = 0;
  readonly #prefills: (PrefillPoint & { url: number })[] = [];
  readonly #decodes: (DecodePoint & { url: number })[] = [];
  readonly #bursts: (BurstPoint & { url: number })[] = [];
  readonly #cached: number[] = [];
  #reportsCached = true;
  #model = "";
  /** Per URL, what its slots hold, once the probe found per-slot caches. */
  #trackers: SlotTracker[] | undefined;
  /** Whether the engine keeps per-slot caches (llama.cpp): attention then spans every slot's KV. */
  get #perSlot(): boolean {
    return this.#trackers !== undefined;
  }
  /** Prompts sent (and tokens generated) before then, in order: all to the first URL, one at a time. */
  readonly #history: [readonly number[], number][] = [];

  constructor(options: CalibrateOptions) {
    this.#o = options;
  }

  async run(): Promise<Calibration> {
    const o = this.#o;
    const progress = o.onProgress ?? (() => {});
    const facts = await this.#facts(o.urls[0]);
    this.#model = facts.model;
    progress(
      `calibrate: ${o.urls.length} engine(s), ${facts.server}, model "${facts.model}"` +
        (facts.slots !== undefined ? `, ${facts.slots} slots of ${facts.slotContext} tokens (/props)` : ""),
    );
    const cache = await this.#probeCache(facts, progress).catch((error) => {
      throw error instanceof Interrupted
        ? new CalibrationError("interrupted while probing the cache")
        : error;
    });
    for (const line of cache.evidence) progress(`calibrate: cache: ${line}`);
    if (cache.kind === "slots") {
      this.#trackers = o.urls.map(() => new SlotTracker(cache.slots!, SLOT_DEFAULTS.slotSimilarity));
      for (const [prompt, generated] of this.#history) {
        this.#trackers[0].release(this.#trackers[0].take(prompt).slot, generated);
      }
    }
    const maxPrompt = Math.min(
      o.maxPromptTokens,
      (facts.slotContext ?? Infinity) - o.decodeTokens - SUFFIX - 1,
    );
    const lengths = LADDER.filter((l) => l + SUFFIX <= maxPrompt);
    if (lengths.length < 3) {
      throw new CalibrationError(
        `the longest prompt allowed (${maxPrompt} tokens) leaves fewer than 3 steps of the ladder (${
          LADDER.join(", ")
        })`,
      );
    }
    const slots = cache.kind === "slots" ? cache.slots! : Infinity;
    const levels = [1, 2, 4, 8, 16, 32].filter((c) => c <= Math.min(o.maxConcurrency, slots));
    if (levels.length < 2) levels.push(levels[0] + 1); // a line needs two levels; one queues: it still measures β0 + β2
    const bursts = [[2, 1031], [2, 2055], [4, 1031]].filter(([c, l]) => c <= slots && l <= maxPrompt);
    let fit: CoefficientFit | undefined, rounds = 0, isStable = false;
    while (rounds < o.maxRounds && !o.signal?.aborted) {
      rounds++;
      try {
        await this.#round(bursts, levels, lengths);
      } catch (error) {
        if (error instanceof Interrupted) break;
        throw error;
      }
      if (this.#decodes.length < 3 || this.#prefills.length < 3) continue; // too few points for a line yet
      try {
        fit = fitCoefficients(this.#prefills, this.#decodes);
      } catch (error) {
        throw new CalibrationError(`the measurements admit no fit: ${(error as Error).message}`);
      }
      isStable = rounds >= o.minRounds && stable(fit, this.#prefills, this.#decodes, o.tolerance);
      const c = fit.coefficients;
      progress(
        `calibrate: round ${rounds}/${o.maxRounds}: ${this.#requests} requests; step ${show(c.stepMs)} ms, ` +
          `prefill ${show(c.prefillMsPerToken, 5)} ms/token, decode ${show(c.decodeMsPerSeq)} ms/seq, ` +
          `overhead ${show(c.requestOverheadMs)} ms${isStable ? " — stable" : ""}`,
      );
      if (isStable) break;
    }
    if (fit === undefined) throw new CalibrationError("interrupted before the first round finished");
    return this.#result(facts, this.#withBlockSize(cache), fit, rounds, isStable);
  }

  /** One round on every engine: bursts, decode groups, the ladder. */
  async #round(
    bursts: readonly number[][],
    levels: readonly number[],
    lengths: readonly number[],
  ): Promise<void> {
    for (const u of this.#o.urls.keys()) {
      // Bursts first: after them the slots hold long prompts, and a per-slot engine's first
      // smaller prompt attends cells up to the highest occupied, more than the occupancy
      // (design.md); the most sequences decoding together then replace every slot's prompt.
      for (const [c, l] of bursts) await this.#burst(u, c, l);
      for (const c of levels.toReversed()) await this.#decode(u, c);
      for (const length of lengths) await this.#lonePrefill(u, length);
    }
  }

  #result(
    facts: EngineFacts,
    cache: CacheFindings,
    fit: CoefficientFit,
    rounds: number,
    isStable: boolean,
  ): Calibration {
    const o = this.#o, c = fit.coefficients;
    const budget = chooseBudget(
      this.#bursts,
      c,
      defaultBudget(cache.kind === "slots"),
      this.#stepAttention(),
    );
    const points = this.#points(fit, budget);
    const byKind = (kind: FittedPoint["kind"]) => {
      const of = points.filter((p) => p.kind === kind);
      return of.length === 0 ? null : residuals(of.map((p) => p.measuredMs), of.map((p) => p.fittedMs));
    };
    const meanResidualByUrl = o.urls.map((_, u) => {
      const of = points.filter((p) => p.kind === "lone prefill" && p.url === u);
      return mean(of.map((p) => p.measuredMs - p.fittedMs));
    });
    const { preset, assumed } = presetOf(facts, cache, c, budget, o.urls.length);
    return {
      urls: o.urls,
      facts,
      cache,
      coefficients: c,
      budget,
      rounds,
      stable: isStable,
      requests: this.#requests,
      points,
      residuals: {
        "lone prefill": byKind("lone prefill"),
        "decode gap": byKind("decode gap"),
        "burst prefill": byKind("burst prefill"),
      },
      meanResidualByUrl,
      assumed,
      preset: {
        ...preset,
        calibration: {
          urls: o.urls,
          server: facts.server,
          model: facts.model,
          rounds,
          stable: isStable,
          requests: this.#requests,
          coefficients: c,
          cache,
          budget: { budget: budget.budget ?? null, atLeast: budget.atLeast },
          assumed,
        },
      },
    };
  }

  /** A burst step's attention work, as this engine computes it. */
  #stepAttention(): StepAttention {
    if (!this.#perSlot) return pairsAttention;
    return (chunks, computedBefore, kvOther) =>
      kvAttentionWork(
        kvOther + computedBefore.reduce((a, b) => a + b, 0),
        chunks.reduce((a, ch) => a + ch.take, 0),
      );
  }

  /** Every measured point beside what the fit predicts for it. */
  #points(fit: CoefficientFit, budget: BudgetChoice): FittedPoint[] {
    const c = fit.coefficients;
    return [
      ...this.#prefills.map((p) => ({
        kind: "lone prefill" as const,
        x: p.prefillTokens,
        measuredMs: p.ttftMs,
        fittedMs: fittedTtft(fit, p),
        url: p.url,
      })),
      ...this.#decodes.map((d) => ({
        kind: "decode gap" as const,
        x: d.sequences,
        measuredMs: d.gapMs,
        fittedMs: fittedGap(fit, d),
        url: d.url,
      })),
      ...this.#bursts.flatMap((b) => {
        const { predicted } = burstFit(b, budget.budget ?? budget.atLeast, c, this.#stepAttention());
        return b.ttftsMs.map((t, i) => ({
          kind: "burst prefill" as const,
          x: b.prompts.reduce((s, p) => s + p, 0),
          measuredMs: t,
          fittedMs: predicted[i],
          url: b.url,
        }));
      }),
    ];
  }

  /** What `/v1/models`, `/props` and `/metrics` say. */
  async #facts(url: string): Promise<EngineFacts> {
    const models = await this.#getJson(url, "/v1/models") as { data?: { id?: unknown }[] } | undefined;
    const listed = models?.data?.[0]?.id;
    const model = this.#o.model ?? (typeof listed === "string" ? listed : undefined);
    if (model === undefined) {
      throw new CalibrationError(`${url}/v1/models lists no model; give the model's name with --model`);
    }
    const props = await this.#getJson(url, "/props") as {
      total_slots?: unknown;
      default_generation_settings?: { n_ctx?: unknown };
    } | undefined;
    const metrics = await this.#getText(url, "/metrics");
    const server = metrics?.includes("llamacpp:") || typeof props?.total_slots === "number"
      ? "llama.cpp"
      : metrics?.includes("vllm:")
      ? "vllm"
      : metrics?.includes("sglang:")
      ? "sglang"
      : "unknown";
    const slots = typeof props?.total_slots === "number" ? props.total_slots : undefined;
    const n = props?.default_generation_settings?.n_ctx;
    const info = metrics === undefined ? undefined : /^vllm:cache_config_info\{([^}]*)\}/m.exec(metrics)?.[1];
    const label = (name: string) =>
      info === undefined ? undefined : Number(new RegExp(`${name}="(\\d+)"`).exec(info)?.[1]);
    const blocks = label("num_gpu_blocks"), blockSize = label("block_size");
    const sglangTokens = metrics === undefined
      ? undefined
      : Number(/^sglang:max_total_num_tokens(?:\{[^}]*\})? ([0-9.e+]+)/m.exec(metrics)?.[1]);
    const kvTokens = blocks! > 0 && blockSize! > 0
      ? blocks! * blockSize!
      : sglangTokens! > 0
      ? sglangTokens
      : undefined;
    return {
      server,
      model,
      ...(slots !== undefined && { slots }),
      ...(typeof n === "number" && { slotContext: n }),
      ...(kvTokens !== undefined && { kvTokens }),
      ...(blockSize! > 0 && { blockSize }),
    };
  }

  /**
   * Per-slot caches or a pool: prompt A, then k distinct prompts, then A
   * again with a suffix, for k = 1, 2, 4, … up to `slotProbe`, then halving
   * between the last k that kept A and the first that lost it. A per-slot
   * engine whose idle slots are reused least recently used first loses A
   * after as many distinct prompts as it has slots; a pool keeps it.
   */
  async #probeCache(facts: EngineFacts, progress: (line: string) => void): Promise<CacheFindings> {
    const evidence: string[] = [];
    const kept = async (k: number): Promise<boolean> => {
      const a = this.#fresh(PROBE_TOKENS);
      const first = await this.#send(0, a, 1);
      for (let j = 0; j < k; j++) await this.#send(0, this.#fresh(PROBE_TOKENS), 1);
      const again = await this.#send(0, [...a, ...this.#fresh(SUFFIX)], 1);
      if (again.cachedTokens === null) return again.ttftMs < 0.6 * first.ttftMs;
      this.#cached.push(again.cachedTokens);
      return again.cachedTokens >= PROBE_TOKENS / 2;
    };
    progress(
      `calibrate: probing the cache (a prompt, then 0–${this.#o.slotProbe} others, then the prompt again)`,
    );
    if (!await kept(0)) {
      evidence.push("a prompt sent twice in a row was not found cached: no prefix caching");
      return { reportsCached: this.#reportsCached, prefixCaching: false, kind: "pool", evidence };
    }
    let keptUpTo = 0, lostAt: number | undefined;
    for (let k = 1; k <= this.#o.slotProbe; k *= 2) {
      if (await kept(k)) keptUpTo = k;
      else {
        lostAt = k;
        break;
      }
    }
    if (lostAt === undefined && keptUpTo < this.#o.slotProbe && await kept(this.#o.slotProbe)) {
      keptUpTo = this.#o.slotProbe;
    }
    if (lostAt === undefined) {
      evidence.push(
        `a prompt stayed cached after ${keptUpTo} distinct prompts of ${PROBE_TOKENS} tokens: a shared pool, not per-slot caches`,
      );
      return {
        reportsCached: this.#reportsCached,
        prefixCaching: true,
        kind: "pool",
        heldPrompts: keptUpTo,
        evidence,
      };
    }
    while (lostAt - keptUpTo > 1) {
      const mid = Math.floor((keptUpTo + lostAt) / 2);
      if (await kept(mid)) keptUpTo = mid;
      else lostAt = mid;
    }
    evidence.push(
      `a prompt stayed cached after ${keptUpTo} distinct prompts and was lost after ${lostAt}: ` +
        `${lostAt} slots, each keeping its last prompt (least recently used reused first)`,
    );
    if (facts.slots !== undefined) {
      evidence.push(
        facts.slots === lostAt
          ? `/props total_slots ${facts.slots} agrees`
          : `/props says total_slots ${facts.slots}: the probe's ${lostAt} is used (what the cache does)`,
      );
    }
    return {
      reportsCached: this.#reportsCached,
      prefixCaching: true,
      kind: "slots",
      slots: lostAt,
      evidence,
    };
  }

  /** The cache findings with the block size every cached count so far shows. */
  #withBlockSize(cache: CacheFindings): CacheFindings {
    const blockSize = blockSizeOf(this.#cached);
    if (blockSize === undefined) return cache;
    return {
      ...cache,
      blockSize,
      evidence: [
        ...cache.evidence,
        `cached counts ${
          [...new Set(this.#cached)].slice(0, 6).join(", ")
        }… have greatest common divisor ${blockSize}: ` +
        (blockSize === 1 ? "cached per token" : `blocks of ${blockSize} tokens`),
      ],
    };
  }

  /** A fresh prompt of `length` tokens, then its prefix reused with a suffix. */
  async #lonePrefill(u: number, length: number): Promise<void> {
    const prompt = this.#fresh(length);
    const first = await this.#send(u, prompt, 1);
    this.#prefills.push(this.#prefillPoint(first, first.cachedTokens ?? 0, u));
    const again = await this.#send(u, [...prompt, ...this.#fresh(SUFFIX)], 1);
    if (again.cachedTokens === null) return; // the computed count is unknown: only uncached prompts are used
    this.#cached.push(again.cachedTokens);
    this.#prefills.push(this.#prefillPoint(again, again.cachedTokens, u));
  }

  /**
   * A lone prefill's point: its computed tokens and their attention work —
   * on a per-slot engine every token against every KV cell in use
   * (`kvAttentionWork`: the other slots' and its own), else against its own
   * context (`contextPairs`).
   */
  #prefillPoint(a: Answer, cached: number, u: number): PrefillPoint & { url: number } {
    const n = a.promptTokens - cached;
    // The engine's default budget: the budget itself is chosen from the bursts, after the fit.
    const budget = defaultBudget(this.#perSlot);
    return {
      prefillTokens: n,
      steps: Math.max(1, Math.ceil(n / budget)),
      attention: this.#perSlot ? kvAttentionWork(a.kvOther + cached, n) : contextPairs(cached, n),
      ttftMs: a.ttftMs,
      url: u,
    };
  }

  /**
   * `c` short prompts decoding `decodeTokens` tokens together: the mean gap
   * between their tokens, and (per-slot engines) a step's attention work
   * halfway through, when the KV holds the other slots', the prompts and
   * half the tokens.
   */
  async #decode(u: number, c: number): Promise<void> {
    const g = this.#o.decodeTokens;
    const answers = await Promise.all(Array.from({ length: c }, () => this.#send(u, this.#fresh(32), g)));
    const gaps = answers.map((a) => {
      const t = a.tokenMs;
      return t.length < 2 ? NaN : (t[t.length - 1] - t[0]) / (t.length - 1);
    }).filter((gap) => gap >= 0);
    const attention = this.#perSlot ? kvAttentionWork(outside(answers, 32) + c * (32 + g / 2), c) : 0;
    if (gaps.length > 0) this.#decodes.push({ sequences: c, attention, gapMs: mean(gaps), url: u });
  }

  /** `c` fresh prompts of `length` tokens sent together. */
  async #burst(u: number, c: number, length: number): Promise<void> {
    const answers = await Promise.all(Array.from({ length: c }, () => this.#send(u, this.#fresh(length), 1)));
    const sorted = answers.toSorted((a, b) => a.ttftMs - b.ttftMs);
    this.#bursts.push({
      prompts: sorted.map((a) => a.promptTokens - (a.cachedTokens ?? 0)),
      ttftsMs: sorted.map((a) => a.ttftMs),
      kvOther: outside(answers, length),
      url: u,
    });
  }

  /** `length` token ids no earlier prompt of this calibration (or another nonce's) starts with. */
  #fresh(length: number): number[] {
    const key = this.#o.nonce * 2 ** 20 + this.#prompts++;
    return Array.from({ length }, (_, t) => tokenId(key, t));
  }

  /** One streamed completion with `maxTokens` output tokens (EOS ignored), measured. */
  async #send(u: number, prompt: readonly number[], maxTokens: number): Promise<Answer> {
    this.#requests++;
    const url = this.#o.urls[u], model = this.#model;
    const tracker = this.#trackers?.[u];
    const taken = tracker?.take(prompt);
    // An interrupt stops between requests (the one in flight finishes): what was measured is kept.
    if (this.#o.signal?.aborted) throw new Interrupted();
    const signal = AbortSignal.timeout(this.#o.requestTimeoutMs);
    const start = performance.now();
    let response: Response;
    try {
      response = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model,
          prompt,
          max_tokens: maxTokens,
          ignore_eos: true,
          temperature: 0,
          stream: true,
          stream_options: { include_usage: true },
        }),
        signal,
      });
    } catch (error) {
      throw new CalibrationError(`${url}: cannot send a completion: ${(error as Error).message}`);
    }
    if (!response.ok) {
      const text = (await response.text().catch(() => "")).slice(0, 300);
      throw new CalibrationError(
        `${url}/v1/completions answered ${response.status} to a ${prompt.length}-token prompt: ${text}`,
      );
    }
    const tokenMs: number[] = [];
    let usage: Usage | undefined, timings: { prompt_n?: unknown } | undefined;
    try {
      for await (const data of readSseData(response.body!)) {
        if (data === "[DONE]") break;
        const chunk = JSON.parse(data) as {
          choices?: { text?: unknown }[];
          usage?: Usage;
          timings?: typeof timings;
        };
        if ((chunk.choices?.length ?? 0) > 0 && typeof chunk.choices![0].text === "string") {
          if (chunk.usage === undefined || chunk.choices![0].text !== "") {
            tokenMs.push(performance.now() - start);
          }
        }
        if (chunk.usage) usage = chunk.usage;
        if (chunk.timings) timings = chunk.timings;
      }
    } catch (error) {
      throw new CalibrationError(`${url}: the stream of a completion broke: ${(error as Error).message}`);
    }
    if (tokenMs.length === 0) throw new CalibrationError(`${url}: a completion streamed no token`);
    if (typeof usage?.prompt_tokens !== "number") {
      throw new CalibrationError(
        `${url}: a completion's stream carried no usage.prompt_tokens (stream_options.include_usage)`,
      );
    }
    const cachedTokens = cachedTokensOf(usage, timings) ?? null;
    if (cachedTokens === null) this.#reportsCached = false;
    const generated = Math.max(1, tokenMs.length);
    if (tracker !== undefined) tracker.release(taken!.slot, generated);
    else if (u === 0) this.#history.push([prompt, generated]);
    return {
      ttftMs: tokenMs[0],
      tokenMs,
      promptTokens: usage.prompt_tokens,
      cachedTokens,
      kvOther: taken?.kvOther ?? 0,
    };
  }

  async #getJson(url: string, path: string): Promise<unknown> {
    const text = await this.#getText(url, path);
    if (text === undefined) return undefined;
    try {
      return JSON.parse(text);
    } catch {
      return undefined;
    }
  }

  /** A GET's body, or undefined when the path is not served; unreachable is an error. */
  async #getText(url: string, path: string): Promise<string | undefined> {
    let response: Response;
    try {
      response = await fetch(`${url}${path}`, { signal: AbortSignal.timeout(this.#o.requestTimeoutMs) });
    } catch (error) {
      throw new CalibrationError(`${url}${path}: cannot connect: ${(error as Error).message}`);
    }
    try {
      const text = await response.text();
      return response.ok ? text : undefined;
    } catch (error) {
      throw new CalibrationError(`${url}${path}: the answer broke off: ${(error as Error).message}`);
    }
  }
}

/** A completion's usage, as far as the engines agree. */
interface Usage {
  readonly prompt_tokens?: unknown;
  readonly prompt_tokens_details?: { readonly cached_tokens?: unknown } | null;
}

/** An estimate as `value ± half-width`. */
function show(e: { value: number; ci95: number }, digits = 3): string {
  return `${e.value.toPrecision(digits)} ± ${e.ci95.toPrecision(2)}`;
}

/** The preset file's content, and what had to be assumed for it. */
function presetOf(
  facts: EngineFacts,
  cache: CacheFindings,
  c: EngineCoefficients,
  budget: BudgetChoice,
  engines: number,
): { preset: Omit<EnginePresetFile, "calibration">; assumed: string[] } {
  const assumed: string[] = [];
  const nonNegative = (name: string, e: { value: number }) => {
    if (e.value >= 0) return round(e.value);
    assumed.push(`${name} came out ${e.value.toPrecision(3)} (negative: noise); 0 is used`);
    return 0;
  };
  const slots = cache.kind === "slots";
  const engineBudget = defaultBudget(slots);
  let maxBatchTokens: number;
  if (budget.budget !== undefined) maxBatchTokens = budget.budget;
  else {
    maxBatchTokens = Math.max(engineBudget, budget.atLeast);
    const best = budget.rmsByBudget.reduce((a, b) => b.rmsMs < a.rmsMs ? b : a);
    const used = budget.rmsByBudget.find((r) => r.budget === maxBatchTokens);
    assumed.push(
      `maxBatchTokens: ${maxBatchTokens} (${slots ? "llama.cpp's n_batch default" : "vLLM's H100 default"}${
        maxBatchTokens > engineBudget ? ", raised to the largest burst" : ""
      }): ` + (best.budget < budget.atLeast && used !== undefined
        ? `the bursts fit ${best.budget} best (RMS ${best.rmsMs.toFixed(1)} against ${
          used.rmsMs.toFixed(1)
        } ms), not clearly enough to leave the default`
        : `the bursts only show it is at least ${budget.atLeast} tokens`),
    );
  }
  const engine: Record<string, number | boolean> = {
    stepMs: nonNegative("stepMs", c.stepMs),
    prefillMsPerToken: nonNegative("prefillMsPerToken", c.prefillMsPerToken),
    decodeMsPerSeq: nonNegative("decodeMsPerSeq", c.decodeMsPerSeq),
    requestOverheadMs: nonNegative("requestOverheadMs", c.requestOverheadMs),
    ...(c.attention.value > 0 &&
      { [slots ? "attentionMsPerKvToken" : "prefillMsPerContextToken"]: round(c.attention.value) }),
    maxBatchTokens,
    prefixCaching: cache.prefixCaching,
  };
  Object.assign(engine, slots ? slotEngine(facts, cache, assumed) : poolEngine(facts, cache, assumed));
  return {
    preset: {
      kind: "request-routing-sim engine preset",
      version: 1,
      name: `calibrated-${facts.server}`,
      model: slots ? "slots" : "batching",
      engine,
      source: `deno task calibrate against ${engines} ${facts.server} engine(s) serving "${facts.model}"`,
    },
    assumed,
  };
}

/** The slots model's engine fields: per-slot caches as found. */
function slotEngine(facts: EngineFacts, cache: CacheFindings, assumed: string[]): Record<string, number> {
  const engine: Record<string, number> = {};
  const context = facts.slotContext ?? 4096;
  if (facts.slotContext === undefined) {
    assumed.push("slot context: not exposed (no /props); 4096 tokens per slot assumed");
  }
  engine.blockTokens = SLOT_BLOCK_TOKENS;
  engine.slots = cache.slots!;
  engine.kvBlocks = Math.floor(cache.slots! * context / SLOT_BLOCK_TOKENS);
  engine.maxSeqs = cache.slots!;
  engine.slotSimilarity = SLOT_DEFAULTS.slotSimilarity;
  assumed.push(
    `slotSimilarity: not observable through the API; llama.cpp's default ${SLOT_DEFAULTS.slotSimilarity} (--slot-prompt-similarity)`,
  );
  if (cache.blockSize === 1) {
    assumed.push(
      `blockTokens ${SLOT_BLOCK_TOKENS}: the engine caches per token; the simulator matches slots per block of ${SLOT_BLOCK_TOKENS} tokens`,
    );
  }
  return engine;
}

/** The batching model's engine fields: a shared pool of blocks. */
function poolEngine(facts: EngineFacts, cache: CacheFindings, assumed: string[]): Record<string, number> {
  const engine: Record<string, number> = {};
  const blockTokens = facts.blockSize ?? cache.blockSize ?? 16;
  if (facts.blockSize === undefined && cache.blockSize === undefined) {
    assumed.push("blockTokens: no cached counts to read it from; 16 assumed (vLLM's default block size)");
  }
  engine.blockTokens = blockTokens;
  if (facts.kvTokens !== undefined) engine.kvBlocks = Math.floor(facts.kvTokens / blockTokens);
  else {
    const held = (cache.heldPrompts ?? 1) * (PROBE_TOKENS + SUFFIX);
    engine.kvBlocks = Math.max(1, Math.ceil(held / blockTokens));
    assumed.push(
      `kvBlocks: capacity not exposed (no vllm:cache_config_info or sglang:max_total_num_tokens); ` +
        `the probe only shows at least ${held} tokens held, so ${engine.kvBlocks} blocks (a lower bound) are used`,
    );
  }
  engine.maxSeqs = VLLM_H100_SCHEDULER.maxSeqs;
  assumed.push(`maxSeqs: not measured; vLLM's H100 default ${VLLM_H100_SCHEDULER.maxSeqs} is used`);
  return engine;
}

/** Six significant digits: a preset file is read by people too. */
function round(value: number): number {
  return Number(value.toPrecision(6));
}

/** The calibration as a table: coefficients, residuals, cache findings, assumptions. */
export function formatCalibration(c: Calibration, files: readonly string[] = []): string {
  const row = (name: string, e: Estimate, unit: string, digits = 4) =>
    `  ${name.padEnd(24)}${e.value.toPrecision(digits).padStart(12)}  ± ${e.ci95.toPrecision(2).padEnd(9)}` +
    `(${(e.value - e.ci95).toPrecision(3)} – ${(e.value + e.ci95).toPrecision(3)})  ${unit}`;
  const k = c.coefficients;
  const lines = [
    `calibration · ${c.urls.join(", ")} · ${c.facts.server} · model "${c.facts.model}"`,
    `${c.requests} requests in ${c.rounds} rounds: ${
      c.stable ? "stable" : "NOT stable at the tolerance (more rounds, or a quieter machine)"
    }`,
    "",
    "coefficient               value  95% interval                    unit",
    row("stepMs", k.stepMs, "ms per step (β0)"),
    row("prefillMsPerToken", k.prefillMsPerToken, "ms per prefill token (β1)"),
    row("decodeMsPerSeq", k.decodeMsPerSeq, "ms per decoding sequence (β2)"),
    row("requestOverheadMs", k.requestOverheadMs, "ms outside the steps (α)"),
    k.attention.value > 0
      ? row(
        c.preset.model === "slots" ? "attentionMsPerKvToken" : "prefillMsPerContextToken",
        k.attention,
        c.preset.model === "slots"
          ? "ms per step token per KV token held (γ)"
          : "ms per prefill token per context token (γ)",
      )
      : "  attention (γ)                      0  (not significant: step time is linear in tokens)",
    `  maxBatchTokens      ${
      c.budget.budget !== undefined
        ? String(c.budget.budget).padStart(12)
        : `≥ ${c.budget.atLeast}`.padStart(12)
    }  (bursts: ${c.budget.rmsByBudget.map((r) => `${r.budget}→${r.rmsMs.toFixed(1)} ms`).join(", ")})`,
    "",
    "residuals            n      rms ms   rms/mean   max |ms|",
    ...(["lone prefill", "decode gap", "burst prefill"] as const).map((kind) => {
      const r = c.residuals[kind];
      return `  ${kind.padEnd(16)}` +
        (r === null
          ? "  n/a"
          : `${String(r.n).padStart(5)} ${r.rmsMs.toFixed(2).padStart(10)} ${
            (100 * r.relativeRms).toFixed(1).padStart(9)
          }% ${r.maxAbsMs.toFixed(1).padStart(10)}`);
    }),
    ...(c.urls.length > 1
      ? [
        `  mean lone-prefill residual per engine: ${
          c.meanResidualByUrl.map((m) => `${m.toFixed(1)} ms`).join(", ")
        }`,
      ]
      : []),
    "",
    `cache: ${c.cache.kind === "slots" ? `per slot, ${c.cache.slots} slots` : "a shared pool"}${
      c.cache.prefixCaching ? "" : ", no prefix caching"
    }${c.cache.blockSize !== undefined ? `, block ${c.cache.blockSize}` : ""}${
      c.cache.reportsCached ? "" : " (cached tokens not reported: judged by TTFT)"
    }`,
    ...c.cache.evidence.map((e) => `  - ${e}`),
    "assumed (not observable through the API):",
    ...(c.assumed.length === 0 ? ["  nothing"] : c.assumed.map((a) => `  - ${a}`)),
    "",
    `preset: model "${c.preset.model}", ${JSON.stringify(c.preset.engine)}`,
    ...files.map((f) => `wrote ${f}`),
  ];
  return lines.join("\n");
}

/**
 * What a per-slot engine's slots hold, as the calibration's own requests
 * left them: llama.cpp's `get_available_slot` (the snapshot's rule) takes
 * the idle slot sharing the longest prefix with the prompt when that share
 * of the slot's cache exceeds the similarity threshold, else the least
 * recently used idle slot.
 */
class SlotTracker {
  readonly #slots: { prompt: readonly number[]; tokens: number; lastUsed: number; busy: boolean }[];
  readonly #similarity: number;
  #clock = 0;

  constructor(slots: number, similarity: number) {
    this.#slots = Array.from({ length: slots }, () => ({ prompt: [], tokens: 0, lastUsed: -1, busy: false }));
    this.#similarity = similarity;
  }

  /** Takes a slot for `prompt`; returns it and the KV tokens the other slots hold. */
  take(prompt: readonly number[]): { slot: number; kvOther: number } {
    let best = -1, bestCommon = 0;
    for (const [i, s] of this.#slots.entries()) {
      if (s.busy || s.tokens === 0) continue;
      const common = commonPrefix(prompt, s.prompt);
      if (common > bestCommon && common / s.tokens > this.#similarity) [best, bestCommon] = [i, common];
    }
    if (best < 0) {
      for (const [i, s] of this.#slots.entries()) {
        if (!s.busy && (best < 0 || s.lastUsed < this.#slots[best].lastUsed)) best = i;
      }
    }
    if (best < 0) best = 0; // every slot busy: the request waits; the first slot stands in
    const slot = this.#slots[best];
    const kvOther = this.#slots.reduce((sum, s, i) => i === best ? sum : sum + s.tokens, 0);
    Object.assign(slot, { prompt, tokens: prompt.length, busy: true });
    return { slot: best, kvOther };
  }

  /** The request on `slot` ended after `generated` tokens: it keeps the prompt and them. */
  release(slot: number, generated: number): void {
    const s = this.#slots[slot];
    Object.assign(s, { tokens: s.prompt.length + generated, lastUsed: this.#clock++, busy: false });
  }
}

/**
 * KV tokens held by the slots outside a group of requests taken together
 * (in order), each with a prompt of `length`: what the last one saw held
 * by the others, less the group's earlier prompts.
 */
function outside(group: readonly Answer[], length: number): number {
  return Math.max(0, group[group.length - 1].kvOther - (group.length - 1) * length);
}

/** How many leading tokens `a` and `b` share. */
function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
