/**
 * @module
 * Prometheus text exposition (format 0.0.4): vLLM's `/metrics` for a simulated
 * instance, a parser for any server's `/metrics`, and the load it reports.
 *
 * Names, types, labels and buckets are those of vLLM {@linkcode VLLM_VERSION}'s
 * V1 engine, checked against `vllm/v1/metrics/loggers.py` (`PrometheusStatLogger`,
 * the DP-aware version that labels every series `model_name` and `engine`,
 * but for the `vllm:cache_config_info` info gauge, labelled by the cache
 * config and `engine` only: `log_metrics_info`) and docs.vllm.ai "Production
 * Metrics". That release still emits the
 * deprecated `vllm:gpu_cache_usage_perc` and `vllm:gpu_prefix_cache_*` (renamed
 * in 0.9, hidden from 0.11) beside their new names, so routers reading either
 * find them. The text mimics Python's `prometheus_client` (labels sorted, a
 * counter's HELP/TYPE named with `_total`, `1.0`-style numbers, buckets then
 * `_count` then `_sum`) but omits its `_created` series. SGLang's load gauges
 * (`sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage`)
 * are from `python/sglang/srt/metrics/collector.py` (`SchedulerMetricsCollector`);
 * llama.cpp's (`llamacpp:requests_processing`, `llamacpp:requests_deferred`,
 * `llamacpp:kv_cache_usage_ratio`) from llama-server's `handle_metrics`
 * (examples/server/server.cpp), recorded in tests/fixtures/llama_cpp/metrics.txt.
 */

/** The vLLM release whose metric names, labels and buckets {@linkcode VllmMetrics} copies. */
export const VLLM_VERSION = "0.10.1";

/** vLLM's `vllm:time_to_first_token_seconds` buckets, seconds. */
export const VLLM_TTFT_BUCKETS_S: readonly number[] = [
  0.001,
  0.005,
  0.01,
  0.02,
  0.04,
  0.06,
  0.08,
  0.1,
  0.25,
  0.5,
  0.75,
  1.0,
  2.5,
  5.0,
  7.5,
  10.0,
  20.0,
  40.0,
  80.0,
  160.0,
  640.0,
  2560.0,
];

/** vLLM's `vllm:time_per_output_token_seconds` buckets, seconds. */
export const VLLM_TPOT_BUCKETS_S: readonly number[] = [
  0.01,
  0.025,
  0.05,
  0.075,
  0.1,
  0.15,
  0.2,
  0.3,
  0.4,
  0.5,
  0.75,
  1.0,
  2.5,
  5.0,
  7.5,
  10.0,
  20.0,
  40.0,
  80.0,
];

/** vLLM's request-latency buckets (`e2e_request_latency`, `request_queue_time`, …), seconds. */
export const VLLM_LATENCY_BUCKETS_S: readonly number[] = [
  0.3,
  0.5,
  0.8,
  1.0,
  1.5,
  2.0,
  2.5,
  5.0,
  10.0,
  15.0,
  20.0,
  30.0,
  40.0,
  50.0,
  60.0,
  120.0,
  240.0,
  480.0,
  960.0,
  1920.0,
  7680.0,
];

/**
 * vLLM's `build_1_2_5_buckets(max_value)` (`vllm/v1/metrics/loggers.py`):
 * 1, 2, 5, 10, 20, 50, … up to `maxValue` inclusive — the buckets of its
 * token-count histograms (`vllm:request_prompt_tokens`,
 * `vllm:request_generation_tokens`), built with `max_model_len`.
 *
 * @example
 * ```ts
 * vllmOneTwoFiveBuckets(100); // [1, 2, 5, 10, 20, 50, 100]
 * ```
 */
export function vllmOneTwoFiveBuckets(maxValue: number): number[] {
  const buckets: number[] = [];
  for (let scale = 1;; scale *= 10) {
    for (const m of [1, 2, 5]) {
      if (m * scale > maxValue) return buckets;
      buckets.push(m * scale);
    }
  }
}

/** The KV-cache settings `vllm:cache_config_info` carries, for {@linkcode VllmMetricsOptions}. */
export interface VllmCacheConfig {
  /** Tokens per KV block (label `block_size`). */
  readonly blockSize: number;
  /** KV blocks on the GPU (label `num_gpu_blocks`). */
  readonly numGpuBlocks: number;
  /** Whether prefix caching is on (label `enable_prefix_caching`). */
  readonly enablePrefixCaching: boolean;
}

/**
 * The labels of `vllm:cache_config_info`: vLLM's `CacheConfig.metrics_info()`
 * — every attribute of the config as Python's `str()` writes it, so `True`,
 * `None`, `0.9` — plus `engine` (`PrometheusStatLogger.log_metrics_info`),
 * and no `model_name`. Attributes other than the three given are vLLM's
 * defaults for an engine without CPU offload or swap use (`swap_space` 4 GiB
 * is reserved but unused by V1, whose `num_cpu_blocks` is 0). Read from the
 * stored `vllm/config.py` `CacheConfig` (fields, then `swap_space_bytes` from
 * `__post_init__`); the 0.10.1 tag could not be pinned (design.md).
 */
export function vllmCacheConfigLabels(config: VllmCacheConfig, engine: string): Record<string, string> {
  return {
    block_size: String(config.blockSize),
    gpu_memory_utilization: "0.9",
    swap_space: "4",
    cache_dtype: "auto",
    is_attention_free: "False",
    num_gpu_blocks_override: "None",
    sliding_window: "None",
    enable_prefix_caching: config.enablePrefixCaching ? "True" : "False",
    prefix_caching_hash_algo: "builtin",
    cpu_offload_gb: "0",
    calculate_kv_scales: "False",
    cpu_kvcache_space_bytes: "None",
    mamba_page_size_padded: "None",
    num_gpu_blocks: String(config.numGpuBlocks),
    num_cpu_blocks: "0",
    swap_space_bytes: String(4 * 2 ** 30),
    engine,
  };
}

/** One sample of an exposition: a series name, its labels and its value. */
export interface Sample {
  /** The series name, with any `_bucket`/`_sum`/`_count`/`_total` suffix. */
  readonly name: string;
  /** Label names to (unescaped) values. */
  readonly labels: Readonly<Record<string, string>>;
  /** The value (`+Inf`, `-Inf` and `NaN` included). */
  readonly value: number;
}

/** A series' labels and value, for {@linkcode PromText.counter} and {@linkcode PromText.gauge}. */
export interface LabeledValue {
  /** Label names to values. */
  readonly labels: Readonly<Record<string, string>>;
  /** The value. */
  readonly value: number;
}

/** A series of a histogram family, for {@linkcode PromText.histogram}. */
export interface LabeledHistogram {
  /** Label names to values (without `le`). */
  readonly labels: Readonly<Record<string, string>>;
  /** The observations. */
  readonly histogram: BucketHistogram;
}

/** The load a server reports on `/metrics`, as {@linkcode readLoad} reads it. */
export interface ServerLoad {
  /** Requests running (in the batch), summed over label sets. */
  readonly running: number;
  /** Requests waiting, summed over label sets. */
  readonly waiting: number;
  /** KV-cache usage 0..1 (the mean over label sets), or null when not exposed. */
  readonly kvUsage: number | null;
}

/** A finished request, for {@linkcode VllmMetrics.observe}. */
export interface FinishedRequestStats {
  /** Prompt length, tokens. */
  readonly promptTokens: number;
  /** Prompt tokens found in the prefix cache. */
  readonly cachedTokens: number;
  /** Tokens generated. */
  readonly outputTokens: number;
  /** Time to first token, s. */
  readonly ttftS: number;
  /** Mean time per output token after the first, s; null with fewer than 2 output tokens. */
  readonly tpotS: number | null;
  /** Arrival to last token, s. */
  readonly e2eS: number;
  /** Time spent waiting before scheduling, s; null when unknown (not observed). */
  readonly queueS: number | null;
  /** Why it stopped (vLLM's `finished_reason` label). */
  readonly finishReason: "stop" | "length" | "abort";
}

/** Instantaneous scheduler state, for {@linkcode VllmMetrics.setLoad}. */
export interface InstanceLoad {
  /** Requests running. */
  readonly running: number;
  /** Requests waiting. */
  readonly waiting: number;
  /** KV-cache usage, 0..1. */
  readonly kvUsage: number;
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/**
 * Fixed-bucket histogram (Prometheus `le` semantics: a value lands in the first
 * bucket whose bound is ≥ it, or in `+Inf`). Observing allocates nothing.
 */
export class BucketHistogram {
  /** Upper bounds, strictly increasing, finite. */
  readonly bounds: readonly number[];
  readonly #counts: Float64Array;
  #sum = 0;
  #count = 0;

  /** @param bounds finite, strictly increasing upper bounds (`+Inf` is implicit) */
  constructor(bounds: readonly number[]) {
    for (let i = 0; i < bounds.length; i++) {
      if (!Number.isFinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
        throw new RangeError(
          `histogram bounds[${i}]: expected a finite number above the previous bound, got ${bounds[i]}`,
        );
      }
    }
    this.bounds = [...bounds];
    this.#counts = new Float64Array(bounds.length + 1);
  }

  /** Records `times` observations of `value` (default once); a NaN value or a non-positive `times` is ignored. */
  observe(value: number, times = 1): void {
    if (Number.isNaN(value) || !(times > 0)) return;
    let i = 0;
    while (i < this.bounds.length && value > this.bounds[i]) i++;
    this.#counts[i] += times;
    this.#count += times;
    this.#sum += value * times;
  }

  /** Observations recorded. */
  get count(): number {
    return this.#count;
  }

  /** Sum of the observed values. */
  get sum(): number {
    return this.#sum;
  }

  /** Cumulative count of bucket `i` (`i = bounds.length` is `+Inf`, the total). */
  cumulative(i: number): number {
    let total = 0;
    for (let j = 0; j <= i && j < this.#counts.length; j++) total += this.#counts[j];
    return total;
  }
}

/**
 * A number as Python's `prometheus_client` writes it (Go's float format):
 * `3.0`, `0.25`, `1.234567e+06`, `+Inf`, `NaN`.
 */
export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  if (Math.abs(value) >= 1e6) {
    return value.toExponential().replace(/e([+-])(\d)$/, "e$10$2");
  }
  const text = String(value);
  return Number.isInteger(value) ? `${text}.0` : text;
}

/** A label value escaped for the text format (`\` → `\\`, `"` → `\"`, newline → `\n`). */
export function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => c === "\n" ? "\\n" : `\\${c}`);
}

function escapeHelp(help: string): string {
  return help.replace(/[\\\n]/g, (c) => c === "\n" ? "\\n" : "\\\\");
}

function checkMetricName(name: string): void {
  if (!METRIC_NAME.test(name)) {
    throw new TypeError(`metric name: expected [a-zA-Z_:][a-zA-Z0-9_:]*, got ${JSON.stringify(name)}`);
  }
}

/** `{a="1",b="2"}` with label names sorted (as `prometheus_client` writes them); "" for no labels. */
export function renderLabels(labels: Readonly<Record<string, string>>): string {
  const names = Object.keys(labels).sort();
  if (names.length === 0) return "";
  let out = "{";
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    if (!LABEL_NAME.test(name)) {
      throw new TypeError(`label name: expected [a-zA-Z_][a-zA-Z0-9_]*, got ${JSON.stringify(name)}`);
    }
    out += `${i === 0 ? "" : ","}${name}="${escapeLabelValue(String(labels[name]))}"`;
  }
  return out + "}";
}

/**
 * A builder of exposition text: one family per call, each with `# HELP` and
 * `# TYPE`; {@linkcode PromText.text} joins them.
 *
 * @example
 * ```ts
 * const text = new PromText()
 *   .counter("gateway_requests_total", "Requests by outcome.", [{ labels: { outcome: "ok" }, value: 3 }])
 *   .gauge("gateway_in_flight", "Requests in flight.", [{ labels: {}, value: 1 }])
 *   .text();
 * ```
 */
export class PromText {
  #out = "";

  /** A counter family; `name` must end in `_total` (the HELP/TYPE lines use it whole, as `prometheus_client` does). */
  counter(name: string, help: string, samples: readonly LabeledValue[]): this {
    if (!name.endsWith("_total")) {
      throw new TypeError(`counter name: expected a name ending in "_total", got ${JSON.stringify(name)}`);
    }
    return this.#family(name, help, "counter", samples);
  }

  /** A gauge family. */
  gauge(name: string, help: string, samples: readonly LabeledValue[]): this {
    return this.#family(name, help, "gauge", samples);
  }

  /** A histogram family: per series, cumulative `_bucket{le}` lines ending in `+Inf`, then `_count` and `_sum`. */
  histogram(name: string, help: string, series: readonly LabeledHistogram[]): this {
    this.#header(name, help, "histogram");
    for (const { labels, histogram } of series) {
      const { bounds } = histogram;
      for (let i = 0; i <= bounds.length; i++) {
        const le = i < bounds.length ? formatValue(bounds[i]) : "+Inf";
        this.#out += `${name}_bucket${renderLabels({ ...labels, le })} ${
          formatValue(histogram.cumulative(i))
        }\n`;
      }
      const rendered = renderLabels(labels);
      this.#out += `${name}_count${rendered} ${formatValue(histogram.count)}\n`;
      this.#out += `${name}_sum${rendered} ${formatValue(histogram.sum)}\n`;
    }
    return this;
  }

  /** Appends text written elsewhere (e.g. {@linkcode relabelAll}'s), adding a final newline if missing. */
  raw(text: string): this {
    this.#out += text.length === 0 || text.endsWith("\n") ? text : `${text}\n`;
    return this;
  }

  /** The exposition so far. */
  text(): string {
    return this.#out;
  }

  #header(name: string, help: string, type: string): void {
    checkMetricName(name);
    this.#out += `# HELP ${name} ${escapeHelp(help)}\n# TYPE ${name} ${type}\n`;
  }

  #family(name: string, help: string, type: string, samples: readonly LabeledValue[]): this {
    this.#header(name, help, type);
    for (const { labels, value } of samples) {
      this.#out += `${name}${renderLabels(labels)} ${formatValue(value)}\n`;
    }
    return this;
  }
}

/** The `finished_reason` label values of `vllm:request_success_total`. */
const FINISH_REASONS = ["stop", "length", "abort"] as const;

/** Options for {@linkcode VllmMetrics}. */
export interface VllmMetricsOptions {
  /** The engine index (label `engine`). @default "0" */
  readonly engine?: string;
  /** The server's `max_model_len`: the top of the token-count histograms' 1-2-5 buckets. */
  readonly maxModelLen: number;
  /** The instance's KV-cache settings, for `vllm:cache_config_info`. */
  readonly cacheConfig: VllmCacheConfig;
}

/**
 * One simulated instance's vLLM `/metrics`: gauges set by
 * {@linkcode VllmMetrics.setLoad}, the preemption counter by
 * {@linkcode VllmMetrics.setPreemptions}, counters and fixed-bucket
 * histograms fed by {@linkcode VllmMetrics.observe} (which allocates
 * nothing), and the `vllm:cache_config_info` info gauge.
 *
 * Deviations from vLLM, all documented: prefix-cache queries/hits (tokens, as
 * vLLM counts them) are added when a request finishes, not when it is
 * scheduled; TPOT is the request's mean inter-token time observed once per
 * interval (outputTokens − 1 times), where vLLM observes each interval; no
 * `_created` series; no `iteration_tokens_total`, `request_max_num_generation_tokens`,
 * `request_params_*` or `request_{inference,prefill,decode}_time_seconds` histograms.
 */
export class VllmMetrics {
  readonly #labels: Readonly<Record<string, string>>;
  readonly #info: Readonly<Record<string, string>>;
  readonly #load = { running: 0, waiting: 0, kvUsage: 0 };
  #preemptions = 0;
  #promptTokens = 0;
  #cachedTokens = 0;
  #generationTokens = 0;
  readonly #success = new Float64Array(FINISH_REASONS.length);
  readonly #ttft = new BucketHistogram(VLLM_TTFT_BUCKETS_S);
  readonly #tpot = new BucketHistogram(VLLM_TPOT_BUCKETS_S);
  readonly #e2e = new BucketHistogram(VLLM_LATENCY_BUCKETS_S);
  readonly #queue = new BucketHistogram(VLLM_LATENCY_BUCKETS_S);
  readonly #promptLengths: BucketHistogram;
  readonly #outputLengths: BucketHistogram;

  /**
   * @param modelName the served model name (label `model_name`)
   * @param options the engine index, `max_model_len` and KV-cache settings
   */
  constructor(modelName: string, options: VllmMetricsOptions) {
    const engine = options.engine ?? "0";
    this.#labels = { model_name: modelName, engine };
    this.#info = vllmCacheConfigLabels(options.cacheConfig, engine);
    const lengths = vllmOneTwoFiveBuckets(options.maxModelLen);
    this.#promptLengths = new BucketHistogram(lengths);
    this.#outputLengths = new BucketHistogram(lengths);
  }

  /** Sets the scheduler gauges (running, waiting, KV-cache usage 0..1). */
  setLoad(load: InstanceLoad): void {
    this.#load.running = load.running;
    this.#load.waiting = load.waiting;
    this.#load.kvUsage = load.kvUsage;
  }

  /**
   * Sets `vllm:num_preemptions_total` to the engine's preemptions so far.
   * @throws {RangeError} when `total` is below the count already set (a counter never decreases).
   */
  setPreemptions(total: number): void {
    if (!(total >= this.#preemptions)) {
      throw new RangeError(`preemptions: expected a total >= ${this.#preemptions}, got ${total}`);
    }
    this.#preemptions = total;
  }

  /** Records a finished request: token counters, `request_success`, token-count and TTFT/TPOT/e2e/queue histograms. */
  observe(done: FinishedRequestStats): void {
    this.#promptTokens += done.promptTokens;
    this.#cachedTokens += done.cachedTokens;
    this.#generationTokens += done.outputTokens;
    const reason = FINISH_REASONS.indexOf(done.finishReason);
    if (reason < 0) {
      throw new TypeError(
        `finishReason: expected "stop", "length" or "abort", got ${JSON.stringify(done.finishReason)}`,
      );
    }
    this.#success[reason]++;
    this.#promptLengths.observe(done.promptTokens);
    this.#outputLengths.observe(done.outputTokens);
    this.#ttft.observe(done.ttftS);
    if (done.tpotS !== null) this.#tpot.observe(done.tpotS, done.outputTokens - 1);
    this.#e2e.observe(done.e2eS);
    if (done.queueS !== null) this.#queue.observe(done.queueS);
  }

  /** Counts a request aborted before it produced anything (`request_success_total{finished_reason="abort"}`). */
  observeAborted(): void {
    this.#success[FINISH_REASONS.indexOf("abort")]++;
  }

  /** The exposition, format 0.0.4. */
  text(): string {
    const labels = this.#labels, one = (value: number) => [{ labels, value }];
    const out = new PromText()
      .gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        one(this.#load.running),
      )
      .gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        one(this.#load.waiting),
      )
      .gauge(
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
        one(this.#load.kvUsage),
      )
      .counter(
        "vllm:gpu_prefix_cache_queries_total",
        "GPU prefix cache queries, in terms of number of queried tokens. DEPRECATED: Use vllm:prefix_cache_queries instead.",
        one(this.#promptTokens),
      )
      .counter(
        "vllm:gpu_prefix_cache_hits_total",
        "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
        one(this.#cachedTokens),
      )
      .gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        one(this.#load.kvUsage),
      )
      .counter(
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        one(this.#promptTokens),
      )
      .counter(
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        one(this.#cachedTokens),
      )
      .counter(
        "vllm:num_preemptions_total",
        "Cumulative number of preemption from the engine.",
        one(this.#preemptions),
      )
      .counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", one(this.#promptTokens))
      .counter(
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        one(this.#generationTokens),
      )
      .counter(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        FINISH_REASONS.map((reason, i) => ({
          labels: { ...labels, finished_reason: reason },
          value: this.#success[i],
        })),
      );
    // Registered last in vLLM (at `log_engine_initialized`), so exposed last.
    return this.#histograms(out)
      .gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", [{
        labels: this.#info,
        value: 1,
      }])
      .text();
  }

  #histograms(out: PromText): PromText {
    const labels = this.#labels, one = (histogram: BucketHistogram) => [{ labels, histogram }];
    return out
      .histogram(
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        one(this.#promptLengths),
      )
      .histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        one(this.#outputLengths),
      )
      .histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        one(this.#ttft),
      )
      .histogram(
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        one(this.#tpot),
      )
      .histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        one(this.#e2e),
      )
      .histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        one(this.#queue),
      );
  }
}

// ---------------------------------------------------------------- parsing

function parseError(lineNo: number, line: string, expected: string): SyntaxError {
  const shown = line.length > 80 ? `${line.slice(0, 77)}...` : line;
  return new SyntaxError(
    `prometheus text line ${lineNo}: expected ${expected}, got ${JSON.stringify(shown)}`,
  );
}

/** A sample value: a float, `+Inf`/`-Inf`/`Inf`, or `NaN`. */
function parseNumber(token: string): number | undefined {
  if (/^[+-]?inf$/i.test(token)) return token.startsWith("-") ? -Infinity : Infinity;
  if (/^nan$/i.test(token)) return NaN;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(token)) return undefined;
  return Number(token);
}

/** Reads `{name="value",...}` starting at `line[start] === "{"`; returns the labels and the index after `}`. */
function parseLabels(line: string, start: number, lineNo: number): [Record<string, string>, number] {
  const labels: Record<string, string> = {};
  const label = /\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"/y;
  let i = start + 1;
  for (;;) {
    while (line[i] === " " || line[i] === "\t") i++;
    if (line[i] === "}") return [labels, i + 1];
    label.lastIndex = i;
    const match = label.exec(line);
    if (match === null) throw parseError(lineNo, line, 'a label name=\\"value\\" or "}"');
    let value = "";
    for (i = label.lastIndex;; i++) {
      const c = line[i];
      if (c === undefined) throw parseError(lineNo, line, 'a closing " for a label value');
      if (c === '"') break;
      if (c !== "\\") {
        value += c;
        continue;
      }
      const next = line[++i];
      if (next === "n") value += "\n";
      else if (next === "\\" || next === '"') value += next;
      else throw parseError(lineNo, line, 'an escape \\\\, \\" or \\n in a label value');
    }
    if (Object.hasOwn(labels, match[1])) throw parseError(lineNo, line, `label ${match[1]} only once`);
    labels[match[1]] = value;
    i++;
    while (line[i] === " " || line[i] === "\t") i++;
    if (line[i] === ",") i++;
    else if (line[i] !== "}") throw parseError(lineNo, line, '"," or "}" after a label');
  }
}

function parseSampleLine(line: string, lineNo: number): Sample {
  const nameMatch = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
  if (nameMatch === null) throw parseError(lineNo, line, "a metric name");
  let labels: Record<string, string> = {};
  let i = nameMatch[0].length;
  while (line[i] === " " || line[i] === "\t") i++;
  if (line[i] === "{") [labels, i] = parseLabels(line, i, lineNo);
  const rest = line.slice(i).trim().split(/[ \t]+/);
  const value = parseNumber(rest[0] ?? "");
  if (value === undefined || rest.length > 2 || (rest.length === 2 && !/^-?\d+$/.test(rest[1]))) {
    throw parseError(lineNo, line, "a value and an optional integer timestamp after the labels");
  }
  return { name: nameMatch[0], labels, value };
}

/**
 * Parses Prometheus text exposition (0.0.4; OpenMetrics' `# EOF` is a comment):
 * every sample line, in order. Comment lines (`# HELP`, `# TYPE`, others) and
 * blank lines are skipped; label values are unescaped; timestamps are
 * accepted and dropped.
 *
 * @throws {SyntaxError} naming the line number and what was expected
 * @example
 * ```ts
 * parsePrometheus('up{job="a"} 1\n'); // [{ name: "up", labels: { job: "a" }, value: 1 }]
 * ```
 */
export function parsePrometheus(text: string): Sample[] {
  const samples: Sample[] = [];
  const lines = text.split("\n");
  for (let n = 0; n < lines.length; n++) {
    const line = lines[n].endsWith("\r") ? lines[n].slice(0, -1) : lines[n];
    const trimmed = line.trimStart();
    if (trimmed === "" || trimmed.startsWith("#")) continue;
    samples.push(parseSampleLine(trimmed, n + 1));
  }
  return samples;
}

/**
 * The `# TYPE` of each family in an exposition (family name → `counter`,
 * `gauge`, `histogram`, `summary` or `untyped`), for re-exposing samples typed.
 */
export function parseTypes(text: string): Map<string, string> {
  const types = new Map<string, string>();
  for (const match of text.matchAll(/^[ \t]*#[ \t]+TYPE[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]+(\w+)/gm)) {
    types.set(match[1], match[2]);
  }
  return types;
}

// ---------------------------------------------------------------- load

interface Tally {
  sum: number;
  n: number;
}

function tally(samples: readonly Sample[], name: string): Tally {
  const t = { sum: 0, n: 0 };
  for (const s of samples) {
    if (s.name === name && !Number.isNaN(s.value)) {
      t.sum += s.value;
      t.n++;
    }
  }
  return t;
}

function loadFrom(
  samples: readonly Sample[],
  running: string,
  waiting: string,
  kv: readonly string[],
): ServerLoad | undefined {
  const r = tally(samples, running), w = tally(samples, waiting);
  if (r.n === 0 || w.n === 0) return undefined;
  let kvUsage: number | null = null;
  for (const name of kv) {
    const t = tally(samples, name);
    if (t.n > 0) {
      kvUsage = t.sum / t.n;
      break;
    }
  }
  return { running: r.sum, waiting: w.sum, kvUsage };
}

/**
 * A server's load from its `/metrics` samples: vLLM's gauges
 * (`vllm:num_requests_running`, `vllm:num_requests_waiting`; KV usage from
 * `vllm:kv_cache_usage_perc`, else `vllm:gpu_cache_usage_perc`), else SGLang's
 * (`sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage`),
 * else llama.cpp's (`llamacpp:requests_processing`: slots busy;
 * `llamacpp:requests_deferred`: tasks waiting for a slot;
 * `llamacpp:kv_cache_usage_ratio`: KV cells used ÷ context size).
 * Running and waiting are summed over label sets (data-parallel engines);
 * KV usage is their mean (each engine has its own cache). A family counts only
 * when both its running and waiting gauges are present; NaN samples are skipped.
 *
 * @returns undefined when no family is present
 */
export function readLoad(samples: readonly Sample[]): ServerLoad | undefined {
  return loadFrom(samples, "vllm:num_requests_running", "vllm:num_requests_waiting", [
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
  ]) ??
    loadFrom(samples, "sglang:num_running_reqs", "sglang:num_queue_reqs", ["sglang:token_usage"]) ??
    loadFrom(samples, "llamacpp:requests_processing", "llamacpp:requests_deferred", [
      "llamacpp:kv_cache_usage_ratio",
    ]);
}

// ---------------------------------------------------------------- relabel

/** One upstream's samples and the labels to add to each, for {@linkcode relabelAll}. */
export interface RelabelSource {
  /** The samples (as {@linkcode parsePrometheus} returns them). */
  readonly samples: readonly Sample[];
  /** Labels added to every sample, replacing a sample's own label of the same name. */
  readonly labels: Readonly<Record<string, string>>;
  /** The source's `# TYPE`s ({@linkcode parseTypes}); families found here get a `# TYPE` line. */
  readonly types?: ReadonlyMap<string, string>;
}

/** Options of {@linkcode relabelAll}. */
export interface RelabelOptions {
  /** Keeps only the samples this accepts. @default every sample */
  readonly keep?: (sample: Sample) => boolean;
}

/**
 * Several sources' samples as one exposition, each sample with its source's
 * extra labels (e.g. `upstream="<url>"`), grouped by series name in order of
 * first appearance so every family is contiguous and typed at most once
 * (`# TYPE` when a source's `types` names the series; else the lines are
 * untyped, which format 0.0.4 allows). Suffixed series (`_bucket`, `_sum`,
 * `_count`) of a typed histogram family go under that family's one header.
 */
export function relabelAll(sources: readonly RelabelSource[], options: RelabelOptions = {}): string {
  const groups = new Map<string, string[]>();
  const familyType = new Map<string, string>();
  for (const { samples, labels, types } of sources) {
    for (const sample of samples) {
      if (options.keep !== undefined && !options.keep(sample)) continue;
      const family = types === undefined ? sample.name : familyOf(sample.name, types);
      if (types?.has(family) && !familyType.has(family)) familyType.set(family, types.get(family)!);
      let lines = groups.get(family);
      if (lines === undefined) groups.set(family, lines = []);
      lines.push(
        `${sample.name}${renderLabels({ ...sample.labels, ...labels })} ${formatValue(sample.value)}\n`,
      );
    }
  }
  let out = "";
  for (const [family, lines] of groups) {
    const type = familyType.get(family);
    if (type !== undefined) out += `# TYPE ${family} ${type}\n`;
    out += lines.join("");
  }
  return out;
}

/** The family a series belongs to: itself, or the typed histogram/summary its suffix names. */
function familyOf(name: string, types: ReadonlyMap<string, string>): string {
  if (types.has(name)) return name;
  const match = /^(.*)_(bucket|sum|count)$/.exec(name);
  return match !== null && types.has(match[1]) ? match[1] : name;
}

/**
 * One source's samples as exposition lines with `extra` labels added —
 * {@linkcode relabelAll} for a single source, untyped.
 *
 * @example
 * ```ts
 * relabel(parsePrometheus('vllm:num_requests_waiting{engine="0"} 2\n'), { upstream: "http://127.0.0.1:8001" });
 * // 'vllm:num_requests_waiting{engine="0",upstream="http://127.0.0.1:8001"} 2.0\n'
 * ```
 */
export function relabel(
  samples: readonly Sample[],
  extra: Readonly<Record<string, string>>,
  options: RelabelOptions = {},
): string {
  return relabelAll([{ samples, labels: extra }], options);
}
