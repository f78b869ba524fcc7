/**
 * @module
 * The over-the-wire parts of `deno task bench` (scenarios/bench.ts): whether
 * the live runtime keeps real time under load (`serve`), how many
 * requests per second the gateway alone passes through (`gateway`), what it
 * adds to a stream's first event (`stream`), whether it holds steady for
 * minutes beside idle and slow connections (`soak`), and what it adds in
 * front of one instance beside nginx, the proxy floor (`proxy`).
 * Loopback only.
 */
import type { SimulationConfig } from "../../actors/topology.ts";
import { parseScenario } from "../scenario/scenario.ts";
import { runScenario } from "../workers/run_scenario.ts";
import { systemWallTime } from "../cli/wall_time.ts";
import { startGateway } from "./gateway.ts";
import { runLoad } from "./load_generator.ts";
import { startSimFleet } from "./sim_server.ts";
import { parsePrometheus, type Sample } from "./prometheus.ts";
import { HttpClient } from "./http_client.ts";
import { promptText } from "./tokenizer.ts";
import { fileURLToPath } from "node:url";

/** A gateway on loopback in front of `upstreams`, at real time, with `deno task serve`'s defaults. */
function loopbackGateway(config: SimulationConfig, upstreams: readonly string[]) {
  return startGateway({
    config,
    upstreams,
    host: "127.0.0.1",
    port: 0,
    speed: 1,
    wallTime: systemWallTime,
    maxBodyBytes: 1 << 20,
    scrapeMs: 200,
    upstreamTimeoutMs: 60_000,
    onFatal: (line) => console.error(line),
  });
}

/** `config`'s workload sent to `url` at real time (speed 1), completions, with `load`'s defaults. */
function loadInRealTime(url: string, config: SimulationConfig) {
  return runLoad({
    url,
    config,
    speed: 1,
    endpoint: "completion",
    model: "sim",
    nonce: 1,
    requestTimeoutMs: 60_000,
    wallTime: systemWallTime,
  });
}

/**
 * `serve`: 8 batching instances behind the gateway, at 50 requests/s of the
 * synthetic workload in real time (speed 1) for 20 s, the load generator in
 * this process too: the fleet's delivery lag (target p99 < 50 ms), the
 * generator's own send lag, and what the clients measured.
 */
export async function serveLagBench(): Promise<void> {
  const config = parseScenario({
    policy: { name: "prefix_aware" },
    router: { cacheView: "approximate" },
    instances: { count: 8, model: "batching" },
    workload: { requests: 1000, ratePerSec: 50 },
  });
  const fleet = await startSimFleet({
    config,
    speed: 1,
    host: "127.0.0.1",
    servedModelName: "sim",
    maxBodyBytes: 1 << 20,
    maxModelLen: 32768,
    wallTime: systemWallTime,
  });
  const gateway = await loopbackGateway(config, fleet.urls);
  const start = performance.now();
  try {
    const result = await loadInRealTime(gateway.url, config);
    const lag = fleet.lagStats();
    // The gateway's load is a 200 ms scrape: `run` with status as stale.
    const sim = runScenario({ ...config, router: { ...config.router, statusIntervalMs: 200 } });
    const f = (ms: number | null) => ms === null ? "n/a" : `${ms.toFixed(1)} ms`;
    console.log("serve: 8 batching instances behind the gateway, 50 requests/s, speed 1, 1,000 requests:");
    console.log(
      `  fleet delivery lag   p50 ${f(lag.p50Ms)}, p99 ${f(lag.p99Ms)}, max ${f(lag.maxMs)} ` +
        `over ${lag.deliveries} deliveries (target p99 < 50 ms)`,
    );
    console.log(
      `  load generator       sent ${result.load.sent} in ${
        ((performance.now() - start) / 1000).toFixed(1)
      } s, ` +
        `send lag p99 ${
          f(result.load.sendLagP99Ms)
        }; completed ${result.completed}, failed ${result.failed}, ` +
        `dropped ${result.dropped}`,
    );
    console.log(
      `  clients measured     TTFT mean ${f(result.ttftMeanMs)}, p99 ${f(result.ttftP99Ms)}, ` +
        `token hit rate ${result.tokenHitRate?.toFixed(3) ?? "n/a"}`,
    );
    console.log(
      `  deno task run        TTFT mean ${f(sim.ttftMeanMs)}, p99 ${f(sim.ttftP99Ms)}, ` +
        `token hit rate ${
          sim.tokenHitRate?.toFixed(3) ?? "n/a"
        } (the same scenario, virtual clock, status every 200 ms)`,
    );
  } finally {
    await gateway.close(1000);
    await fleet.close(1000);
  }
}

/** A trivial upstream: every completion answered at once with a fixed body, and an empty /metrics. */
function trivialUpstream(): Deno.HttpServer<Deno.NetAddr> {
  const body = JSON.stringify({
    id: "cmpl-0",
    object: "text_completion",
    created: 0,
    model: "sim",
    choices: [{ index: 0, text: " ok", logprobs: null, finish_reason: "length" }],
    usage: {
      prompt_tokens: 8,
      completion_tokens: 1,
      total_tokens: 9,
      prompt_tokens_details: { cached_tokens: 0 },
    },
  });
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (request) => {
    const path = new URL(request.url).pathname;
    if (path === "/metrics") {
      return new Response("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n");
    }
    return new Response(body, { headers: { "content-type": "application/json" } });
  });
}

/**
 * `gateway`: requests/s through the gateway alone (prefix_aware, a built-in
 * router on this thread) to two trivial upstreams, 64 clients at a time,
 * non-streaming; and the same straight to an upstream, for the HTTP floor.
 */
export async function gatewayBench(requests = 20_000, clients = 64): Promise<void> {
  const upstreams = [trivialUpstream(), trivialUpstream()];
  const config = parseScenario({ policy: { name: "prefix_aware" }, router: { cacheView: "approximate" } });
  const gateway = await loopbackGateway(config, upstreams.map((u) => `http://127.0.0.1:${u.addr.port}`));
  try {
    const prompt = Array.from({ length: 64 }, (_, i) => `w${i}`).join(" ");
    const body = JSON.stringify({ model: "sim", prompt, max_tokens: 1 });
    const through = async (url: string) => {
      let next = 0, failed = 0;
      const start = performance.now();
      await Promise.all(Array.from({ length: clients }, async () => {
        while (next++ < requests) {
          const response = await fetch(`${url}/v1/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body,
          });
          if (!response.ok) failed++;
          await response.arrayBuffer();
        }
      }));
      return { perSec: requests / ((performance.now() - start) / 1000), failed };
    };
    await through(gateway.url); // warm-up
    const direct = await through(`http://127.0.0.1:${upstreams[0].addr.port}`);
    const routed = await through(gateway.url);
    console.log(`gateway (prefix_aware, 2 trivial upstreams, ${clients} clients, ${requests} requests):`);
    console.log(
      `  through the gateway  ${(routed.perSec / 1e3).toFixed(2)}k requests/s (${routed.failed} failed)`,
    );
    console.log(`  straight upstream    ${(direct.perSec / 1e3).toFixed(2)}k requests/s (the HTTP floor)`);
  } finally {
    await gateway.close(1000);
    await Promise.all(upstreams.map((u) => u.shutdown()));
  }
}

/** A streaming upstream: each completion streams `tokens` events `gapMs` apart, the first at once. */
function streamingUpstream(tokens: number, gapMs: number): Deno.HttpServer<Deno.NetAddr> {
  const encoder = new TextEncoder();
  const chunk = (i: number) =>
    encoder.encode(`data: ${
      JSON.stringify({
        id: "cmpl-0",
        object: "text_completion",
        created: 0,
        model: "sim",
        choices: [{
          index: 0,
          text: ` t${i}`,
          logprobs: null,
          finish_reason: i === tokens - 1 ? "length" : null,
        }],
      })
    }\n\n`);
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (request) => {
    if (new URL(request.url).pathname === "/metrics") return new Response("vllm:num_requests_waiting 0\n");
    let i = 0;
    let timer: ReturnType<typeof setInterval> | undefined;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(chunk(i++));
        timer = setInterval(() => {
          if (i < tokens) return controller.enqueue(chunk(i++));
          clearInterval(timer);
          controller.enqueue(encoder.encode("data: [DONE]\n\n"));
          controller.close();
        }, gapMs);
      },
      cancel: () => clearInterval(timer),
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  });
}

/** Wall ms from sending a streamed completion to its first `data:` bytes; then reads it to the end. */
async function timeToFirstEvent(url: string): Promise<number> {
  const start = performance.now();
  const response = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "sim", prompt: `hello ${Math.random()}`, max_tokens: 8, stream: true }),
  });
  const reader = response.body!.getReader();
  await reader.read();
  const ms = performance.now() - start;
  while (!(await reader.read()).done) { /* to the end */ }
  return ms;
}

/**
 * `stream`: what the gateway adds to a streamed request's time to first
 * event: 500 streamed requests at 50 requests/s (8 events 5 ms apart each)
 * to a streaming upstream, straight and through the gateway, one after the
 * other in this process; the percentiles of each and of the difference.
 */
export async function streamBench(requests = 500, ratePerSec = 50): Promise<void> {
  const upstream = streamingUpstream(8, 5);
  const url = `http://127.0.0.1:${upstream.addr.port}`;
  const config = parseScenario({ policy: { name: "round_robin" }, router: { cacheView: "approximate" } });
  const gateway = await loopbackGateway(config, [url]);
  const run = async (target: string) => {
    const times: Promise<number>[] = [];
    const start = performance.now();
    for (let i = 0; i < requests; i++) {
      const wait = start + (i * 1000) / ratePerSec - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      times.push(timeToFirstEvent(target));
    }
    return (await Promise.all(times)).sort((a, b) => a - b);
  };
  try {
    await run(gateway.url); // warm-up
    const direct = await run(url);
    const routed = await run(gateway.url);
    const q = (v: number[], p: number) => v[Math.min(v.length - 1, Math.floor(p * v.length))].toFixed(1);
    console.log(
      `stream (${requests} streamed requests at ${ratePerSec}/s, time to the first event, wall ms):`,
    );
    console.log(
      `  straight upstream    p50 ${q(direct, 0.5)}, p90 ${q(direct, 0.9)}, p99 ${q(direct, 0.99)}`,
    );
    console.log(
      `  through the gateway  p50 ${q(routed, 0.5)}, p90 ${q(routed, 0.9)}, p99 ${q(routed, 0.99)}`,
    );
  } finally {
    await gateway.close(1000);
    await upstream.shutdown();
  }
}

/**
 * Every 5 s, 50 idle connections and 5 that send a header byte a second, to
 * `port`, each closed here once the server closes it (the client's
 * descriptors are this process's too); `stop` ends them all.
 */
function hostileClients(port: number, perRound = 55) {
  const counts = { idle: 0, slow: 0, refused: 0 };
  const held = new Set<Deno.Conn>();
  const stopped = new AbortController();
  const close = (c: Deno.Conn) => {
    held.delete(c);
    try {
      c.close();
    } catch { /* closed */ }
  };
  const hold = (c: Deno.Conn) => {
    held.add(c);
    c.read(new Uint8Array(1024)).catch(() => null).finally(() => close(c));
  };
  const head = new TextEncoder().encode("GET /health HTTP/1.1\r\nhost: soak\r\nx-slow: yes\r\n\r\n");
  const trickle = async (c: Deno.Conn) => {
    for (const byte of head) {
      if (stopped.signal.aborted || !await c.write(Uint8Array.of(byte)).then(() => true, () => false)) return;
      await new Promise((r) => setTimeout(r, 1000));
    }
  };
  const opener = setInterval(() => {
    for (let i = 0; i < perRound; i++) {
      Deno.connect({ port }).then((c) => {
        hold(c);
        if (i < 50) {
          counts.idle++;
        } else {
          counts.slow++;
          trickle(c);
        }
      }, () => counts.refused++);
    }
  }, 5000);
  return {
    counts,
    stop() {
      clearInterval(opener);
      stopped.abort();
      for (const c of [...held]) close(c);
    },
  };
}

/** The serve task's `deno run` arguments, from deno.json, with `args` after them. */
function serveTaskArgs(args: readonly string[]): string[] {
  const deno = JSON.parse(Deno.readTextFileSync(new URL("../../deno.json", import.meta.url)));
  return [...String(deno.tasks.serve.command ?? deno.tasks.serve).trim().split(/\s+/).slice(1), ...args];
}

/** One figure of `samples`: the sum over the series of `name` whose labels include `labels`. */
function figure(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples.filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))
    .reduce((sum, x) => sum + x.value, 0);
}

/**
 * `soak`: `deno task serve` (the gateway and 4 simulated batching instances,
 * real time) as a process of its own, under a steady 20 streamed requests/s
 * from this process for `seconds` (SOAK_SECONDS, default 180), while every
 * 5 s 50 idle connections and 5 clients sending a header byte a second are
 * opened beside them (none with SOAK_QUIET=1) and left to the servers'
 * timeouts (30 s). Every 15 s one line from the gateway's `/metrics`: the
 * server process's resident memory, requests (ok, failed), connections open
 * and closed by the headers and idle timeouts, accepts that found no
 * descriptor. A leak shows as a figure that grows line after line; a bound,
 * as one that levels off.
 */
export async function soakBench(seconds = Number(Deno.env.get("SOAK_SECONDS") ?? 180)): Promise<void> {
  const rate = 20;
  const scenario = {
    policy: { name: "prefix_aware" },
    router: { cacheView: "approximate" },
    instances: { count: 4, model: "batching" },
    workload: { requests: rate * seconds, ratePerSec: rate },
  } as const;
  const config = parseScenario(scenario);
  const served = await spawnServeWithInstances([
    "--model",
    "batching",
    "--instances",
    "4",
    "--policy",
    "prefix_aware",
  ]);
  const quiet = Deno.env.get("SOAK_QUIET") === "1";
  const hostile = hostileClients(Number(new URL(served.gateway).port), quiet ? 0 : 55);
  const start = performance.now();
  const line = async () => {
    const samples = parsePrometheus(await (await fetch(`${served.gateway}/metrics`)).text());
    const ok = figure(samples, "gateway_requests_total", { outcome: "completed" });
    const failed = ["failed", "broken", "unavailable"].reduce(
      (sum, outcome) => sum + figure(samples, "gateway_requests_total", { outcome }),
      0,
    );
    console.log(
      `  ${((performance.now() - start) / 1000).toFixed(0).padStart(4)} s  serve rss ${
        (figure(samples, "process_resident_memory_bytes") / 2 ** 20).toFixed(0).padStart(4)
      } MB (heap ${
        (figure(samples, "deno_heap_used_bytes") / 2 ** 20).toFixed(0)
      } MB)  requests ok ${ok} failed ${failed}  connections open ${
        figure(samples, "gateway_connections_open")
      }, closed: headers timeout ${
        figure(samples, "gateway_connections_closed_total", { reason: "headers_timeout" })
      }, idle ${figure(samples, "gateway_connections_closed_total", { reason: "idle_timeout" })}  ` +
        `descriptor errors ${figure(samples, "gateway_accept_descriptor_errors_total")}`,
    );
  };
  console.log(
    `soak (deno task serve: gateway + 4 batching instances; ${rate} streamed requests/s for ${seconds} s` +
      `${quiet ? "" : ", 50 idle and 5 slow-header connections opened every 5 s"}):`,
  );
  const sampler = setInterval(
    () => line().catch((e) => console.log(`  /metrics failed: ${e.message}`)),
    15_000,
  );
  try {
    const result = await loadInRealTime(served.gateway, config);
    await line();
    console.log(
      `  load: ${result.completed} completed, ${result.failed} failed, ${result.dropped} dropped of ` +
        `${result.requests}; idle connections opened ${hostile.counts.idle}, slow ${hostile.counts.slow}, ` +
        `refused ${hostile.counts.refused}`,
    );
  } finally {
    hostile.stop();
    clearInterval(sampler);
    served.child.kill("SIGTERM");
    await served.child.status;
  }
}

/** nginx's configuration: one worker proxying `listenPort` to `upstreamPort` over kept-alive HTTP/1.1, unbuffered. */
function nginxConf(dir: string, listenPort: number, upstreamPort: number): string {
  return `worker_processes 1;
master_process off;
error_log ${dir}/error.log warn;
pid ${dir}/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  client_max_body_size 1m;
  client_body_buffer_size 1m;
  upstream instance { server 127.0.0.1:${upstreamPort}; keepalive 128; }
  server {
    listen 127.0.0.1:${listenPort};
    location / {
      proxy_pass http://instance;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`;
}

/** Why nginx cannot be run here (one line), or undefined when it can. */
async function nginxUnavailable(): Promise<string | undefined> {
  if (Deno.permissions.querySync({ name: "run", command: "nginx" }).state !== "granted") {
    return "this process may not run nginx (give it --allow-run=nginx)";
  }
  try {
    await new Deno.Command("nginx", { args: ["-v"], stdout: "null", stderr: "null" }).output();
    return undefined;
  } catch {
    return "nginx is not installed (Debian: apt-get install nginx-light)";
  }
}

/** A free loopback port, by binding one and letting it go. */
function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  return port;
}

/** Starts nginx in front of `upstreamPort`; its port, and a stop that ends it and removes its files. */
async function startNginx(upstreamPort: number): Promise<{ port: number; stop: () => Promise<void> }> {
  await Deno.mkdir("results/.bench", { recursive: true });
  const dir = await Deno.makeTempDir({ dir: "results/.bench", prefix: "nginx-" });
  const absolute = await Deno.realPath(dir);
  const port = freePort();
  await Deno.writeTextFile(`${dir}/nginx.conf`, nginxConf(absolute, port, upstreamPort));
  const child = new Deno.Command("nginx", {
    args: ["-p", absolute, "-c", `${absolute}/nginx.conf`, "-g", "daemon off;"],
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  const stop = async () => {
    try {
      child.kill("SIGTERM");
    } catch { /* ended */ }
    await child.status;
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  };
  for (let tries = 0; tries < 100; tries++) { // nginx listens within a few ms
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return { port, stop };
    } catch {
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  await stop();
  throw new Error(`nginx did not listen on 127.0.0.1:${port}`);
}

/** The percentiles of `values` (sorted here), ms with one decimal. */
function percentiles(values: number[]): { p50: number; p90: number; p99: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { p50: at(0.5), p90: at(0.9), p99: at(0.99) };
}

/**
 * `Deno.loadavg()`'s one-minute figure, for the line beside a figure (others
 * may share the machine); "n/a" without `--allow-sys=loadavg`.
 */
function loadNow(): string {
  if (Deno.permissions.querySync({ name: "sys", kind: "loadavg" }).state !== "granted") return "loadavg n/a";
  return `loadavg ${Deno.loadavg()[0].toFixed(2)}`;
}

/** A one-token completion body for the `proxy` part: prompt `i` of 1,280 tokens (a 1,024-token prefix of one of 100 groups). */
function proxyBody(i: number, stream: boolean): string {
  const request = {
    id: i,
    arrivalMs: 0,
    prefixGroup: i % 100,
    prefixTokens: 1024,
    suffixTokens: 256,
    outputTokens: 1,
  };
  return JSON.stringify({
    model: "sim",
    prompt: promptText(request, 1),
    max_tokens: 1,
    ...(stream && { stream: true, stream_options: { include_usage: true } }),
  });
}

/** Wall ms from sending `body` to the whole answer (or, streamed, its first event); the rest is read too. */
async function timeOnce(client: HttpClient, url: string, body: string, stream: boolean): Promise<number> {
  const start = performance.now();
  const response = await client.request(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}: ${await response.text()}`);
  const reader = response.body.getReader();
  await reader.read();
  const firstMs = performance.now() - start;
  while (!(await reader.read()).done) { /* to the end */ }
  return stream ? firstMs : performance.now() - start;
}

/** `requests` requests to `url` at `ratePerSec`, open loop: the percentiles of {@linkcode timeOnce}. */
async function openLoop(
  client: HttpClient,
  url: string,
  stream: boolean,
  requests: number,
  ratePerSec: number,
) {
  const bodies = Array.from({ length: requests }, (_, i) => proxyBody(i, stream));
  const times: Promise<number>[] = [];
  const start = performance.now();
  for (let i = 0; i < requests; i++) {
    const wait = start + (i * 1000) / ratePerSec - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    times.push(timeOnce(client, url, bodies[i], stream));
  }
  return percentiles(await Promise.all(times));
}

/** Requests/s to `url` with `clients` clients each sending its next request when its last is answered. */
async function closedLoop(client: HttpClient, url: string, total: number, clients = 32): Promise<number> {
  const bodies = Array.from({ length: 64 }, (_, i) => proxyBody(i, false));
  let next = 0;
  const start = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    while (next < total) await timeOnce(client, url, bodies[next++ % bodies.length], false);
  }));
  return total / ((performance.now() - start) / 1000);
}

/** Each path's p50s over `rounds` rounds (paths alternating within a round), a line per path and round. */
async function latencyRounds(
  client: HttpClient,
  paths: Readonly<Record<string, string>>,
  requests: number,
  ratePerSec: number,
  rounds: number,
) {
  const latency = new Map<string, { whole: number[]; streamed: number[]; loads: string[] }>();
  for (let round = 0; round < rounds; round++) {
    for (const [name, url] of Object.entries(paths)) {
      const figures = latency.get(name) ?? { whole: [], streamed: [], loads: [] };
      const whole = await openLoop(client, url, false, requests, ratePerSec);
      const streamed = await openLoop(client, url, true, requests, ratePerSec);
      figures.whole.push(whole.p50);
      figures.streamed.push(streamed.p50);
      figures.loads.push(loadNow());
      latency.set(name, figures);
      const f = (p: { p50: number; p90: number; p99: number }) =>
        `p50 ${p.p50.toFixed(2)}, p90 ${p.p90.toFixed(2)}, p99 ${p.p99.toFixed(2)} ms`;
      console.log(
        `  round ${round + 1} ${name.padEnd(25)} whole ${f(whole)}; streamed (first event) ${
          f(streamed)
        }; ${loadNow()}`,
      );
    }
  }
  return latency;
}

/**
 * `proxy`: what a proxy adds in front of one simulated instance — nginx (the
 * floor: a C proxy, one worker, kept-alive upstream connections, unbuffered)
 * beside our gateway — non-streamed and streamed. `deno task serve` runs as
 * a process of its own (one FIFO instance at speed 100,000, so service time
 * is ≈ 0, one output token, and its gateway); nginx fronts the same
 * instance. At `ratePerSec` open loop, each path in turn (three rounds,
 * alternating), the wall ms to the whole answer or to the first streamed
 * event; then each path's requests/s with 32 clients. Skipped, in one line,
 * where nginx cannot be run.
 */
export async function proxyBench(requests = 1000, ratePerSec = 200, rounds = 3): Promise<void> {
  const unavailable = await nginxUnavailable();
  if (unavailable !== undefined) return console.log(`proxy: skipped: ${unavailable}`);
  const scenario = fileURLToPath(new URL("./one_token.json", import.meta.url));
  const served = await spawnServeWithInstances([
    "--scenario",
    scenario,
    "--instances",
    "1",
    "--speed",
    "100000",
  ]);
  const nginx = await startNginx(Number(new URL(served.instances[0]).port));
  const client = new HttpClient();
  const direct = "straight to the instance";
  const paths = {
    [direct]: served.instances[0],
    "through nginx": `http://127.0.0.1:${nginx.port}`,
    "through the gateway": served.gateway,
  };
  try {
    for (const url of Object.values(paths)) await openLoop(client, url, true, requests, ratePerSec); // warm-up
    const latency = await latencyRounds(client, paths, requests, ratePerSec, rounds);
    const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
    const base = latency.get(direct)!;
    console.log(
      `proxy (one FIFO instance at speed 100000, one output token, 1,280-token prompts; ${requests} requests at ` +
        `${ratePerSec}/s per path and round; median over ${rounds} rounds of each round's p50):`,
    );
    for (const [name, f] of latency) {
      const added = name === direct
        ? ""
        : `; adds whole ${(median(f.whole) - median(base.whole)).toFixed(2)} ms, ` +
          `streamed ${(median(f.streamed) - median(base.streamed)).toFixed(2)} ms`;
      console.log(
        `  ${name.padEnd(25)} whole p50 ${median(f.whole).toFixed(2)} ms, streamed p50 ${
          median(f.streamed).toFixed(2)
        } ms${added} (${f.loads.join(", ")})`,
      );
    }
    for (const [name, url] of Object.entries(paths)) {
      const perSec = await closedLoop(client, url, 5000);
      console.log(
        `  ${name.padEnd(25)} ${(perSec / 1000).toFixed(2)}k requests/s whole, 32 clients (${loadNow()})`,
      );
    }
  } finally {
    client.close();
    await nginx.stop();
    served.child.kill("SIGTERM");
    await served.child.status;
  }
}

/**
 * Starts `deno task serve` with `args` as a child; its gateway's URL and its
 * instances' URLs once it serves (its later output is read and dropped).
 */
async function spawnServeWithInstances(
  args: readonly string[],
): Promise<{ child: Deno.ChildProcess; gateway: string; instances: string[] }> {
  const child = new Deno.Command("deno", {
    args: serveTaskArgs(args),
    cwd: new URL("../../", import.meta.url),
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  let out = "";
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  while (true) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`serve ended before it served:\n${out}`);
    out += value;
    const gateway = /^gateway: (\S+)/m.exec(out)?.[1];
    if (gateway !== undefined && /^serving at/m.test(out)) {
      (async () => {
        while (!(await reader.read()).done) { /* serve's later lines */ }
      })();
      return { child, gateway, instances: [...out.matchAll(/^instance \d+: (\S+)/gm)].map((m) => m[1]) };
    }
  }
}
