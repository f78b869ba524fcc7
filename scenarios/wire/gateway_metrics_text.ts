/**
 * @module
 * The gateway's `/metrics`: its own counters (requests by outcome, retries,
 * routing decisions and requests in flight per upstream, time to first
 * token), then every upstream's `vllm:*`, `sglang:*` and `llamacpp:*` gauges
 * from its last good scrape, under their own names, labelled
 * `upstream="<url>"` and `source="gateway"`: a Prometheus scraping both the
 * fleet and the gateway tells the copies apart by that label
 * (`sum(vllm:num_requests_waiting{source!="gateway"})` counts each engine once).
 */
import { type BucketHistogram, type LabeledValue, PromText, type Sample } from "./prometheus.ts";

/** One upstream's last good scrape. */
export interface UpstreamScrape {
  readonly samples: readonly Sample[];
  /** Its `# TYPE`s (family → type). */
  readonly types: ReadonlyMap<string, string>;
}

/** What the exposition is written from. */
export interface GatewayMetricsState {
  readonly upstreams: readonly string[];
  /** Requests to the completion endpoints by outcome. */
  readonly outcomes: Readonly<Record<string, number>>;
  readonly retries: number;
  /** Per upstream: routing decisions, requests in flight, taken as alive, scrapes failed in a row. */
  readonly routed: ArrayLike<number>;
  readonly inFlight: ArrayLike<number>;
  readonly up: readonly boolean[];
  readonly failedScrapes: ArrayLike<number>;
  /** Time to first token, simulated seconds. */
  readonly ttft: BucketHistogram;
  /** Per upstream, its last good scrape (undefined: none, or not an exposition). */
  readonly scrapes: readonly (UpstreamScrape | undefined)[];
  /** The gateway server's connections (see scenarios/wire/http_server.ts). */
  readonly connections?: {
    readonly open: number;
    readonly headersTimedOut: number;
    readonly idleTimedOut: number;
    readonly descriptorErrors: number;
  };
  /** This process's resident memory, bytes: Prometheus's own process_resident_memory_bytes. */
  readonly residentBytes?: number;
  /** The main thread's V8 heap in use, bytes. */
  readonly heapUsedBytes?: number;
}

const ENGINE_GAUGE = /^(vllm|sglang|llamacpp):/;

/** Whether an upstream's sample is one of its engine's gauges (typed so, or untyped without a counter/histogram suffix). */
function isEngineGauge(sample: Sample, types: ReadonlyMap<string, string>): boolean {
  if (!ENGINE_GAUGE.test(sample.name)) return false;
  const type = types.get(sample.name);
  return type === undefined ? !/_(total|bucket|sum|count|created)$/.test(sample.name) : type === "gauge";
}

/** The label every re-exported upstream gauge carries, so that a sum over the fleet can leave the copies out. */
export const REEXPORT_LABEL = { source: "gateway" } as const;

/**
 * Every upstream's engine gauges, labelled `upstream` and
 * {@linkcode REEXPORT_LABEL}, one family per name in order of first appearance.
 */
function upstreamGauges(s: GatewayMetricsState): Map<string, LabeledValue[]> {
  const families = new Map<string, LabeledValue[]>();
  s.scrapes.forEach((scrape, i) => {
    if (scrape === undefined) return;
    for (const sample of scrape.samples) {
      if (!isEngineGauge(sample, scrape.types)) continue;
      let family = families.get(sample.name);
      if (family === undefined) families.set(sample.name, family = []);
      family.push({
        labels: { ...sample.labels, upstream: s.upstreams[i], ...REEXPORT_LABEL },
        value: sample.value,
      });
    }
  });
  return families;
}

/** The gateway's `/metrics` text (exposition format 0.0.4). */
export function gatewayMetricsText(s: GatewayMetricsState): string {
  const perUpstream = (values: ArrayLike<number>) =>
    s.upstreams.map((upstream, i) => ({ labels: { upstream }, value: values[i] }));
  const text = new PromText()
    .counter(
      "gateway_requests_total",
      "Requests to the completion endpoints, by how they ended.",
      Object.entries(s.outcomes).map(([outcome, value]) => ({ labels: { outcome }, value })),
    )
    .counter("gateway_retries_total", "Attempts sent to another upstream after one failed.", [
      { labels: {}, value: s.retries },
    ])
    .counter(
      "gateway_routed_total",
      "Routing decisions, by upstream (retries included).",
      perUpstream(s.routed),
    )
    .gauge("gateway_in_flight", "Requests forwarded and not finished, by upstream.", perUpstream(s.inFlight))
    .gauge(
      "gateway_upstream_up",
      "1 while the gateway takes the upstream as alive (routable), else 0.",
      perUpstream(s.up.map(Number)),
    )
    .gauge(
      "gateway_upstream_failed_scrapes",
      "/metrics scrapes of the upstream failed in a row (timed out or 5xx) since its last sign of life.",
      perUpstream(s.failedScrapes),
    )
    .gauge(
      "gateway_connections_open",
      "Client connections the gateway's server holds now.",
      s.connections === undefined ? [] : [{ labels: {}, value: s.connections.open }],
    )
    .counter(
      "gateway_connections_closed_total",
      "Client connections the gateway closed for a timeout: headers not sent in time, or idle.",
      s.connections === undefined ? [] : [
        { labels: { reason: "headers_timeout" }, value: s.connections.headersTimedOut },
        { labels: { reason: "idle_timeout" }, value: s.connections.idleTimedOut },
      ],
    )
    .counter(
      "gateway_accept_descriptor_errors_total",
      "Accepts that failed for want of file descriptors (EMFILE, ENFILE); the gateway waits and accepts again.",
      s.connections === undefined ? [] : [{ labels: {}, value: s.connections.descriptorErrors }],
    )
    .gauge(
      "process_resident_memory_bytes",
      "Resident memory size in bytes.",
      s.residentBytes === undefined ? [] : [{ labels: {}, value: s.residentBytes }],
    )
    .gauge(
      "deno_heap_used_bytes",
      "The main thread's V8 heap in use, bytes (Deno.memoryUsage().heapUsed).",
      s.heapUsedBytes === undefined ? [] : [{ labels: {}, value: s.heapUsedBytes }],
    )
    .histogram(
      "gateway_time_to_first_token_seconds",
      "From a request's arrival at the gateway to the upstream's first generated text, simulated seconds.",
      [{ labels: {}, histogram: s.ttft }],
    );
  for (const [name, samples] of upstreamGauges(s)) {
    text.gauge(
      name,
      `Each upstream's ${name} (label upstream) from the gateway's last good scrape of its /metrics, ` +
        `labelled source="gateway": leave these out of a sum over the fleet ({source!="gateway"}).`,
      samples,
    );
  }
  return text.text();
}
