import { assert, assertAlmostEquals, assertEquals, assertMatch, assertThrows } from "@std/assert";
import fc from "fast-check";
import {
  BucketHistogram,
  formatValue,
  parsePrometheus,
  parseTypes,
  PromText,
  readLoad,
  relabel,
  relabelAll,
  type Sample,
  VLLM_LATENCY_BUCKETS_S,
  VLLM_TPOT_BUCKETS_S,
  VLLM_TTFT_BUCKETS_S,
  VLLM_VERSION,
  vllmCacheConfigLabels,
  VllmMetrics,
  vllmOneTwoFiveBuckets,
} from "../scenarios/wire/prometheus.ts";

/** A simulated instance's metrics as the sim server builds them: Qwen2.5-7B's KV, `--max-model-len` 32768. */
function simMetrics(modelName = "sim"): VllmMetrics {
  return new VllmMetrics(modelName, {
    maxModelLen: 32768,
    cacheConfig: { blockSize: 16, numGpuBlocks: 67659, enablePrefixCaching: true },
  });
}

/** The samples named `name` whose labels include `labels`. */
function pick(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): Sample[] {
  return samples.filter((s) =>
    s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)
  );
}

/** The one sample named `name` with `labels`' value (fails unless exactly one). */
function value(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = pick(samples, name, labels);
  assertEquals(found.length, 1, `${name} ${JSON.stringify(labels)}: ${found.length} samples`);
  return found[0].value;
}

/** A histogram's cumulative bucket counts from parsed samples, keyed by `le`. */
function buckets(samples: readonly Sample[], name: string): Map<string, number> {
  return new Map(pick(samples, `${name}_bucket`).map((s) => [s.labels.le, s.value]));
}

/** A trimmed but real-looking vLLM 0.10 `/metrics` (python_gc/process lines, `_created`, two DP engines). */
const VLLM_FIXTURE = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12187.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.75536352294e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.9
vllm:gpu_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.9
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.75
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.234567e+06
# HELP vllm:prefix_cache_hits_created Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_created gauge
vllm:prefix_cache_hits_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7553635318437e+09
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 41.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="2560.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 48.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 48.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 48.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.830418825149536
`;

/** A trimmed SGLang `/metrics` (gauges from `SchedulerMetricsCollector`). */
const SGLANG_FIXTURE = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 5.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 0.42
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 11.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 0.6
`;

Deno.test("vllm metrics: observed values parse back as exact bucket counts, sums, counters and gauges", () => {
  const metrics = simMetrics();
  metrics.setLoad({ running: 3, waiting: 7, kvUsage: 0.375 });
  const base = { promptTokens: 100, cachedTokens: 64, outputTokens: 5, e2eS: 1, queueS: 0.5 } as const;
  metrics.observe({ ...base, ttftS: 0.003, tpotS: 0.05, finishReason: "stop" }); // 0.05 is a bound: inclusive
  metrics.observe({ ...base, cachedTokens: 0, ttftS: 0.25, tpotS: 0.2, finishReason: "length" });
  metrics.observe({
    ...base,
    outputTokens: 1,
    ttftS: 3000,
    tpotS: null,
    e2eS: 9000,
    queueS: null,
    finishReason: "stop",
  });
  metrics.observeAborted();
  const samples = parsePrometheus(metrics.text());
  const labels = { model_name: "sim", engine: "0" };

  assertEquals(value(samples, "vllm:num_requests_running", labels), 3);
  assertEquals(value(samples, "vllm:num_requests_waiting", labels), 7);
  assertEquals(value(samples, "vllm:kv_cache_usage_perc", labels), 0.375);
  assertEquals(value(samples, "vllm:gpu_cache_usage_perc", labels), 0.375);
  assertEquals(value(samples, "vllm:prefix_cache_queries_total", labels), 300);
  assertEquals(value(samples, "vllm:prefix_cache_hits_total", labels), 128);
  assertEquals(value(samples, "vllm:gpu_prefix_cache_hits_total", labels), 128);
  assertEquals(value(samples, "vllm:prompt_tokens_total", labels), 300);
  assertEquals(value(samples, "vllm:generation_tokens_total", labels), 11);
  assertEquals(value(samples, "vllm:request_success_total", { finished_reason: "stop" }), 2);
  assertEquals(value(samples, "vllm:request_success_total", { finished_reason: "length" }), 1);
  assertEquals(value(samples, "vllm:request_success_total", { finished_reason: "abort" }), 1);

  const ttft = buckets(samples, "vllm:time_to_first_token_seconds");
  assertEquals([ttft.get("0.001"), ttft.get("0.005"), ttft.get("0.1"), ttft.get("0.25")], [0, 1, 1, 2]);
  assertEquals([ttft.get("2560.0"), ttft.get("+Inf")], [2, 3]);
  assertEquals(value(samples, "vllm:time_to_first_token_seconds_count"), 3);
  assertAlmostEquals(value(samples, "vllm:time_to_first_token_seconds_sum"), 3000.253, 1e-9);

  // TPOT: one observation per inter-token interval (outputTokens - 1), none for a 1-token answer.
  const tpot = buckets(samples, "vllm:time_per_output_token_seconds");
  assertEquals([tpot.get("0.025"), tpot.get("0.05"), tpot.get("0.15"), tpot.get("0.2"), tpot.get("+Inf")], [
    0,
    4,
    4,
    8,
    8,
  ]);
  assertAlmostEquals(value(samples, "vllm:time_per_output_token_seconds_sum"), 4 * 0.05 + 4 * 0.2, 1e-12);

  const e2e = buckets(samples, "vllm:e2e_request_latency_seconds");
  assertEquals([e2e.get("0.8"), e2e.get("1.0"), e2e.get("7680.0"), e2e.get("+Inf")], [0, 2, 2, 3]);
  assertEquals(value(samples, "vllm:request_queue_time_seconds_count"), 2); // null queue time not observed
  assertEquals(value(samples, "vllm:request_queue_time_seconds_sum"), 1);
});

Deno.test("vllm metrics: every family has HELP and TYPE, counters end in _total, buckets are vLLM's", () => {
  const text = simMetrics().text();
  assertEquals(VLLM_VERSION, "0.10.1");
  const lines = text.trimEnd().split("\n");
  const declared = new Map<string, string>();
  for (let i = 0; i < lines.length; i++) {
    const help = /^# HELP (\S+) /.exec(lines[i]);
    if (help === null) continue;
    const type = /^# TYPE (\S+) (\w+)$/.exec(lines[i + 1]);
    assert(type !== null && type[1] === help[1], `HELP without its TYPE at line ${i + 1}`);
    declared.set(help[1], type[2]);
  }
  for (const [name, type] of declared) if (type === "counter") assertMatch(name, /_total$/);
  assertEquals(parseTypes(text), declared);
  for (
    const name of [
      "vllm:num_requests_running",
      "vllm:num_requests_waiting",
      "vllm:kv_cache_usage_perc",
      "vllm:gpu_cache_usage_perc",
    ]
  ) {
    assertEquals(declared.get(name), "gauge", name);
  }
  for (
    const name of [
      "vllm:prefix_cache_queries_total",
      "vllm:prefix_cache_hits_total",
      "vllm:prompt_tokens_total",
    ]
  ) {
    assertEquals(declared.get(name), "counter", name);
  }
  // Every sample belongs to a declared family (histogram suffixes included).
  for (const s of parsePrometheus(text)) {
    const family = declared.has(s.name) ? s.name : s.name.replace(/_(bucket|count|sum)$/, "");
    assert(declared.has(family), `${s.name} has no HELP/TYPE`);
    // vLLM labels its info gauge with the cache config and `engine` only (`log_metrics_info`).
    assertEquals(s.labels.model_name, s.name === "vllm:cache_config_info" ? undefined : "sim");
    assertEquals(s.labels.engine, "0");
  }
  const samples = parsePrometheus(text);
  for (
    const [name, bounds] of [
      ["vllm:time_to_first_token_seconds", VLLM_TTFT_BUCKETS_S],
      ["vllm:time_per_output_token_seconds", VLLM_TPOT_BUCKETS_S],
      ["vllm:e2e_request_latency_seconds", VLLM_LATENCY_BUCKETS_S],
      ["vllm:request_queue_time_seconds", VLLM_LATENCY_BUCKETS_S],
    ] as const
  ) {
    assertEquals(declared.get(name), "histogram");
    const les = pick(samples, `${name}_bucket`).map((s) => s.labels.le);
    assertEquals(les, [...bounds.map(formatValue), "+Inf"], name);
  }
  assertEquals(VLLM_TTFT_BUCKETS_S.length, 22);
  assertEquals(VLLM_TPOT_BUCKETS_S.length, 19);
  assertEquals(VLLM_LATENCY_BUCKETS_S.length, 21);
  assertMatch(
    text,
    /^vllm:time_to_first_token_seconds_bucket\{engine="0",le="0\.001",model_name="sim"\} 0\.0$/m,
  );
});

/**
 * The families `PrometheusStatLogger` registers (stored `vllm/v1/metrics/loggers.py`, `__init__` and
 * `log_metrics_info`; a Counter `x` is exposed as `x_total`) that the twin exposes, with their types.
 * vLLM's others are not modelled: `vllm:iteration_tokens_total`, `vllm:request_max_num_generation_tokens`,
 * `vllm:request_params_n`, `vllm:request_params_max_tokens`,
 * `vllm:request_{inference,prefill,decode}_time_seconds`, the spec-decoding and LoRA families.
 */
const VLLM_FAMILIES: readonly [string, string][] = [
  ["vllm:num_requests_running", "gauge"],
  ["vllm:num_requests_waiting", "gauge"],
  ["vllm:gpu_cache_usage_perc", "gauge"],
  ["vllm:gpu_prefix_cache_queries_total", "counter"],
  ["vllm:gpu_prefix_cache_hits_total", "counter"],
  ["vllm:kv_cache_usage_perc", "gauge"],
  ["vllm:prefix_cache_queries_total", "counter"],
  ["vllm:prefix_cache_hits_total", "counter"],
  ["vllm:num_preemptions_total", "counter"],
  ["vllm:prompt_tokens_total", "counter"],
  ["vllm:generation_tokens_total", "counter"],
  ["vllm:request_success_total", "counter"],
  ["vllm:request_prompt_tokens", "histogram"],
  ["vllm:request_generation_tokens", "histogram"],
  ["vllm:time_to_first_token_seconds", "histogram"],
  ["vllm:time_per_output_token_seconds", "histogram"],
  ["vllm:e2e_request_latency_seconds", "histogram"],
  ["vllm:request_queue_time_seconds", "histogram"],
  ["vllm:cache_config_info", "gauge"],
];

Deno.test("vllm metrics: the families are vLLM's names and types, in its registration order", () => {
  assertEquals([...parseTypes(simMetrics().text())], VLLM_FAMILIES);
});

Deno.test("vllm metrics: token-count histograms use vLLM's 1-2-5 buckets up to max_model_len", () => {
  assertEquals(vllmOneTwoFiveBuckets(100), [1, 2, 5, 10, 20, 50, 100]);
  assertEquals(vllmOneTwoFiveBuckets(99), [1, 2, 5, 10, 20, 50]);
  assertEquals(vllmOneTwoFiveBuckets(32768).slice(-4), [2000, 5000, 10000, 20000]);
  assertEquals(vllmOneTwoFiveBuckets(32768).length, 14);
  const metrics = simMetrics();
  const base = {
    cachedTokens: 0,
    ttftS: 0.1,
    tpotS: null,
    e2eS: 1,
    queueS: 0,
    finishReason: "stop",
  } as const;
  metrics.observe({ ...base, promptTokens: 100, outputTokens: 1 });
  metrics.observe({ ...base, promptTokens: 30000, outputTokens: 7 });
  metrics.observe({ ...base, promptTokens: 40000, outputTokens: 20 }); // above the top bucket: only in +Inf
  const samples = parsePrometheus(metrics.text());
  const prompt = buckets(samples, "vllm:request_prompt_tokens");
  assertEquals([...prompt.keys()], [...vllmOneTwoFiveBuckets(32768).map(formatValue), "+Inf"]);
  assertEquals([prompt.get("50.0"), prompt.get("100.0"), prompt.get("20000.0"), prompt.get("+Inf")], [
    0,
    1,
    1,
    3,
  ]);
  assertEquals(value(samples, "vllm:request_prompt_tokens_sum"), 70100);
  const output = buckets(samples, "vllm:request_generation_tokens");
  assertEquals([output.get("1.0"), output.get("5.0"), output.get("10.0"), output.get("20.0")], [1, 1, 2, 3]);
  assertEquals(value(samples, "vllm:request_generation_tokens_count"), 3);
});

Deno.test("vllm metrics: cache_config_info is 1, labelled by CacheConfig.metrics_info() and engine, not model_name", () => {
  const samples = pick(parsePrometheus(simMetrics().text()), "vllm:cache_config_info");
  assertEquals(samples.length, 1);
  assertEquals(samples[0].value, 1);
  assertEquals(samples[0].labels, {
    block_size: "16",
    cache_dtype: "auto",
    calculate_kv_scales: "False",
    cpu_kvcache_space_bytes: "None",
    cpu_offload_gb: "0",
    enable_prefix_caching: "True",
    engine: "0",
    gpu_memory_utilization: "0.9",
    is_attention_free: "False",
    mamba_page_size_padded: "None",
    num_cpu_blocks: "0",
    num_gpu_blocks: "67659",
    num_gpu_blocks_override: "None",
    prefix_caching_hash_algo: "builtin",
    sliding_window: "None",
    swap_space: "4",
    swap_space_bytes: "4294967296",
  });
  const off = vllmCacheConfigLabels({ blockSize: 32, numGpuBlocks: 9, enablePrefixCaching: false }, "3");
  assertEquals([off.block_size, off.num_gpu_blocks, off.enable_prefix_caching, off.engine], [
    "32",
    "9",
    "False",
    "3",
  ]);
});

Deno.test("vllm metrics: num_preemptions_total is the engine's count, and a counter never goes back", () => {
  const metrics = simMetrics();
  assertEquals(value(parsePrometheus(metrics.text()), "vllm:num_preemptions_total"), 0);
  metrics.setPreemptions(3);
  metrics.setPreemptions(3);
  assertEquals(value(parsePrometheus(metrics.text()), "vllm:num_preemptions_total"), 3);
  assertThrows(() => metrics.setPreemptions(2), RangeError, "expected a total >= 3, got 2");
});

Deno.test("histogram exposition is cumulative and matches a naive count for any observations", () => {
  fc.assert(
    fc.property(fc.array(fc.double({ min: 0, max: 10_000, noNaN: true }), { maxLength: 60 }), (values) => {
      const histogram = new BucketHistogram(VLLM_TTFT_BUCKETS_S);
      for (const v of values) histogram.observe(v);
      const samples = parsePrometheus(
        new PromText().histogram("h_seconds", "h", [{ labels: { a: "b" }, histogram }]).text(),
      );
      const parsed = pick(samples, "h_seconds_bucket");
      for (let i = 0; i < VLLM_TTFT_BUCKETS_S.length; i++) {
        assertEquals(parsed[i].value, values.filter((v) => v <= VLLM_TTFT_BUCKETS_S[i]).length);
      }
      assertEquals(parsed.at(-1)!.labels.le, "+Inf");
      assertEquals(parsed.at(-1)!.value, values.length);
      assertEquals(value(samples, "h_seconds_count"), values.length);
      assertEquals(value(samples, "h_seconds_sum"), values.reduce((a, b) => a + b, 0));
    }),
    { numRuns: 200 },
  );
});

Deno.test("label values with quotes, backslashes and newlines are escaped and parse back", async (t) => {
  const nasty = 'a "quoted" back\\slash\nnew line';
  await t.step("in VllmMetrics", () => {
    const text = simMetrics(nasty).text();
    assert(text.includes('model_name="a \\"quoted\\" back\\\\slash\\nnew line"'));
    assertEquals(text.split("\n").filter((l) => l.startsWith("vllm:num_requests_running")).length, 1);
    const samples = parsePrometheus(text);
    assertEquals(value(samples, "vllm:num_requests_running", { model_name: nasty }), 0);
  });
  await t.step("in PromText, with escaped HELP", () => {
    const text = new PromText().gauge("g", "line one\nback\\slash", [{ labels: { x: nasty }, value: 2 }])
      .text();
    assertMatch(text, /^# HELP g line one\\nback\\\\slash$/m);
    assertEquals(parsePrometheus(text), [{ name: "g", labels: { x: nasty }, value: 2 }]);
  });
});

Deno.test("parser handles special values, timestamps, comments, CRLF, spacing and trailing commas", () => {
  const text = [
    "# a free comment",
    "# EOF-ish",
    "",
    'a_bucket{le="+Inf"} +Inf',
    "b -Inf 1700000000000",
    "c NaN",
    'd{x="1", y = "2",} 1.5e-3\r',
    "  e\t42\t-5",
    "f{} 7",
    "g_total 0x10",
  ];
  assertThrows(() => parsePrometheus(text.join("\n")), SyntaxError, "line 10");
  const samples = parsePrometheus(text.slice(0, -1).join("\n"));
  assertEquals(samples.length, 6);
  assertEquals(samples[0], { name: "a_bucket", labels: { le: "+Inf" }, value: Infinity });
  assertEquals(samples[1].value, -Infinity);
  assert(Number.isNaN(samples[2].value));
  assertEquals(samples[3], { name: "d", labels: { x: "1", y: "2" }, value: 0.0015 });
  assertEquals(samples[4], { name: "e", labels: {}, value: 42 });
  assertEquals(samples[5], { name: "f", labels: {}, value: 7 });
});

Deno.test("parser rejects malformed lines, naming the line and what was expected", async (t) => {
  for (
    const [line, expected] of [
      ['m{a="1"', '"," or "}"'],
      ['m{a="unterminated} 1', 'closing "'],
      ['m{a="\\t"} 1', "escape"],
      ['m{a="1",a="2"} 1', "label a only once"],
      ["m", "a value"],
      ["m 1 2 3", "a value"],
      ["m 1 1.5", "a value"],
      ["9m 1", "a metric name"],
      ['m{1a="x"} 1', "label name"],
    ]
  ) {
    await t.step(line, () => {
      assertThrows(() => parsePrometheus(`ok 1\n${line}\n`), SyntaxError, "line 2");
      assertThrows(() => parsePrometheus(line), SyntaxError, expected);
    });
  }
});

Deno.test("a real-looking vLLM /metrics parses, and readLoad sums engines and averages KV usage", () => {
  const samples = parsePrometheus(VLLM_FIXTURE);
  assertEquals(value(samples, "python_gc_objects_collected_total", { generation: "0" }), 12187);
  assertEquals(value(samples, "process_start_time_seconds"), 1755363522.94);
  assertEquals(value(samples, "vllm:prefix_cache_hits_total"), 1234567);
  assertEquals(value(samples, "vllm:request_success_total", { finished_reason: "length" }), 7);
  assertEquals(buckets(samples, "vllm:time_to_first_token_seconds").get("2560.0"), 48);
  assertEquals(readLoad(samples), { running: 7, waiting: 2, kvUsage: 0.5 });
  // Without the new name, the deprecated gauge is used.
  const old = samples.filter((s) => s.name !== "vllm:kv_cache_usage_perc");
  assertEquals(readLoad(old), { running: 7, waiting: 2, kvUsage: 0.9 });
  const noKv = old.filter((s) => s.name !== "vllm:gpu_cache_usage_perc");
  assertEquals(readLoad(noKv), { running: 7, waiting: 2, kvUsage: null });
  // Our own exposition reads back the load it was given.
  const ours = simMetrics();
  ours.setLoad({ running: 4, waiting: 9, kvUsage: 0.125 });
  assertEquals(readLoad(parsePrometheus(ours.text())), { running: 4, waiting: 9, kvUsage: 0.125 });
});

Deno.test("readLoad reads SGLang's gauges, and returns undefined when neither server's are present", () => {
  assertEquals(readLoad(parsePrometheus(SGLANG_FIXTURE)), { running: 5, waiting: 11, kvUsage: 0.42 });
  assertEquals(readLoad([]), undefined);
  assertEquals(readLoad(parsePrometheus('# nothing\nup 1\nother_gauge{a="b"} 3\n')), undefined);
  // Half a family is not a family.
  assertEquals(readLoad(parsePrometheus('vllm:num_requests_running{engine="0"} 2\n')), undefined);
  // vLLM wins when both are exposed.
  const both = parsePrometheus(SGLANG_FIXTURE + simMetrics().text());
  assertEquals(readLoad(both), { running: 0, waiting: 0, kvUsage: 0 });
});

Deno.test("relabel adds the upstream label, keeps families contiguous and typed once, and parses back", async (t) => {
  const a = parsePrometheus(VLLM_FIXTURE), b = parsePrometheus(simMetrics().text());
  await t.step("one source", () => {
    const text = relabel(parsePrometheus('vllm:num_requests_waiting{engine="0",upstream="old"} 2\n'), {
      upstream: "http://127.0.0.1:8001",
    });
    assertEquals(text, 'vllm:num_requests_waiting{engine="0",upstream="http://127.0.0.1:8001"} 2.0\n');
  });
  await t.step("many sources, gauges only", () => {
    const isGauge = (types: Map<string, string>) => (s: Sample) => types.get(s.name) === "gauge";
    const typesA = parseTypes(VLLM_FIXTURE), typesB = parseTypes(simMetrics().text());
    const keep = (s: Sample) => /^(vllm|sglang):/.test(s.name) && (isGauge(typesA)(s) || isGauge(typesB)(s));
    const text = relabelAll([
      { samples: a, labels: { upstream: "u0" }, types: typesA },
      { samples: b, labels: { upstream: "u1" }, types: typesB },
    ], { keep });
    const lines = text.trimEnd().split("\n");
    const typeLines = lines.filter((l) => l.startsWith("# TYPE"));
    // prometheus_client types a counter's `_created` series as a gauge family of its own.
    assertEquals(typeLines, [
      "# TYPE vllm:num_requests_running gauge",
      "# TYPE vllm:num_requests_waiting gauge",
      "# TYPE vllm:gpu_cache_usage_perc gauge",
      "# TYPE vllm:kv_cache_usage_perc gauge",
      "# TYPE vllm:prefix_cache_hits_created gauge",
      "# TYPE vllm:cache_config_info gauge",
    ]);
    // Contiguous: the sequence of family names never returns to an earlier one.
    const names = lines.filter((l) => !l.startsWith("#")).map((l) => l.slice(0, l.search(/[{ ]/)));
    const runs = names.filter((n, i) => i === 0 || n !== names[i - 1]);
    assertEquals(new Set(runs).size, runs.length);
    const samples = parsePrometheus(text);
    assertEquals(samples.length, 2 * 4 + 1 + 4 + 1); // the fixture has two engines, ours one and its info gauge
    assertEquals(value(samples, "vllm:num_requests_running", { upstream: "u1" }), 0);
    assertEquals(pick(samples, "vllm:num_requests_running", { upstream: "u0" }).map((s) => s.value), [3, 4]);
    assertEquals(readLoad(samples.filter((s) => s.labels.upstream === "u0")), {
      running: 7,
      waiting: 2,
      kvUsage: 0.5,
    });
  });
  await t.step("histogram suffixes stay under their family's one TYPE", () => {
    const text = relabelAll([
      { samples: a, labels: { upstream: "u0" }, types: parseTypes(VLLM_FIXTURE) },
      { samples: b, labels: { upstream: "u1" }, types: parseTypes(simMetrics().text()) },
    ], { keep: (s) => s.name.startsWith("vllm:time_to_first_token_seconds") });
    assertEquals(text.split("\n").filter((l) => l.startsWith("# TYPE")), [
      "# TYPE vllm:time_to_first_token_seconds histogram",
    ]);
    const samples = parsePrometheus(text);
    assertEquals(value(samples, "vllm:time_to_first_token_seconds_count", { upstream: "u0" }), 48);
    assertEquals(value(samples, "vllm:time_to_first_token_seconds_count", { upstream: "u1" }), 0);
  });
});

Deno.test("PromText and BucketHistogram reject bad names and bounds, naming the value", () => {
  assertThrows(() => new PromText().counter("requests", "h", []), TypeError, '"requests"');
  assertThrows(() => new PromText().gauge("bad-name", "h", []), TypeError, '"bad-name"');
  assertThrows(
    () => new PromText().gauge("g", "h", [{ labels: { "a-b": "x" }, value: 1 }]),
    TypeError,
    '"a-b"',
  );
  assertThrows(() => new BucketHistogram([1, 1]), RangeError, "bounds[1]");
  assertThrows(() => new BucketHistogram([1, Infinity]), RangeError, "bounds[1]");
  assertThrows(
    () =>
      simMetrics().observe({
        promptTokens: 1,
        cachedTokens: 0,
        outputTokens: 1,
        ttftS: 1,
        tpotS: null,
        e2eS: 1,
        queueS: null,
        finishReason: "eos" as "stop",
      }),
    TypeError,
    '"eos"',
  );
});

Deno.test("values are written as prometheus_client writes them and parse back exactly", () => {
  const cases: [number, string][] = [
    [0, "0.0"],
    [3, "3.0"],
    [0.25, "0.25"],
    [2560, "2560.0"],
    [999999, "999999.0"],
    [1234567, "1.234567e+06"],
    [1e6, "1e+06"],
    [1.5e21, "1.5e+21"],
    [Infinity, "+Inf"],
    [-Infinity, "-Inf"],
    [-2, "-2.0"],
  ];
  for (const [v, text] of cases) {
    assertEquals(formatValue(v), text);
    assertEquals(parsePrometheus(`m ${text}`)[0].value, v);
  }
  assertEquals(formatValue(NaN), "NaN");
  fc.assert(fc.property(fc.double({ noNaN: true }), (v) => {
    assertEquals(parsePrometheus(`m ${formatValue(v)}`)[0].value, v === 0 ? 0 : v);
  }));
});
