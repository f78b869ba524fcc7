/**
 * @module
 * `deno task serve`: the scenario's instances as OpenAI-compatible HTTP
 * servers (scenarios/wire/sim_server.ts), and a gateway in front of them
 * that routes with the scenario's policy or a `--router` plugin
 * (scenarios/wire/gateway.ts) — or, with `--upstream`, a gateway in front of
 * any OpenAI-compatible servers. Prints one line per address, then serves
 * until SIGTERM or Ctrl-C: `/health` answers 503 at once, new requests are
 * refused, requests in flight finish (for at most 4.5 s), and it exits.
 * While it serves, it warns (stderr, live page) when the simulated fleet lags
 * the wall clock; with `--json` it prints one JSON line on start and one on stop.
 */
import { systemWallTime } from "./cli/wall_time.ts";
import { LAG_CHECK_MS, LAG_TOLERANCE_MS, LAG_WARNING_EVERY_MS, LagWatch } from "./wire/lag_watch.ts";
import { plural } from "./cli/plural.ts";
import {
  configFromFlags,
  numberFlag,
  oneLine,
  parseFlags,
  pluginFlag,
  pluginTimeoutMs,
  runCommand,
  SCENARIO_FLAGS_HELP,
  SCENARIO_OPTIONS,
} from "./scenario/command_line.ts";
import { callerDirectory } from "./cli/caller_directory.ts";
import { loadRouterPlugin, type RouterPlugin } from "./workers/router_plugin.ts";
import { watchPluginProcess } from "./workers/plugin_watchdog.ts";
import { UsageError } from "./cli/usage_error.ts";
import { isDisaggregated } from "../actors/instances/instance_model.ts";
import type { SimulationConfig } from "../actors/topology.ts";
import { policyLabel } from "../actors/policies/mod.ts";
import { DEFAULT_MAX_BODY_BYTES } from "./wire/http.ts";
import {
  ConnectionPool,
  DEFAULT_HEADERS_TIMEOUT_MS,
  DEFAULT_IDLE_TIMEOUT_MS,
  FALLBACK_FREE_DESCRIPTORS,
  freeDescriptors,
  RESERVED_DESCRIPTORS,
} from "./wire/http_server.ts";
import { type SimFleet, startSimFleet } from "./wire/sim_server.ts";
import {
  DEFAULT_SCRAPE_FAILURES,
  DEFAULT_SCRAPE_MS,
  DEFAULT_SCRAPE_TIMEOUT_MS,
  type Gateway,
  startGateway,
} from "./wire/gateway.ts";

/** What `--json` does here, in the scenario flags' help column. */
const JSON_HELP = "  --json".padEnd(25) +
  "print one JSON line on stdout on start (the addresses) and one on stop (the summary)\n" +
  " ".repeat(25) + "instead of text; warnings stay on stderr";

/** The lag watch's figures, as the help says them. */
const LAG_TOLERANCE = `${LAG_TOLERANCE_MS} ms`, LAG_WINDOW = `${LAG_CHECK_MS / 1000} s`;
const LAG_LINE_EVERY = `${LAG_WARNING_EVERY_MS / 1000} s`;

const HELP = `Usage: deno task serve [flags]

Starts the scenario's instances (FIFO or batching model) as OpenAI-compatible
HTTP servers on ephemeral ports, each simulated in real time (--speed), and a
gateway on --port that routes to them with the scenario's policy or a --router
plugin. With --upstream the gateway fronts those servers instead (real vLLM or
SGLang): it reads their /metrics for load and keeps an approximate cache view.
Prints "instance N: URL" and "gateway: URL" lines, then serves until SIGTERM or
Ctrl-C (graceful: in-flight streams finish, at most 5 s). While the simulated
fleet falls behind the wall clock (p99 delivery lag past ${LAG_TOLERANCE} over ${LAG_WINDOW}, the
tolerance of deno task realtime), it says so on the gateway's live page and on
stderr, a line at most every ${LAG_LINE_EVERY}: lower --speed or serve fewer instances.

  --speed X                simulated ms per wall ms (default 1: real time)
  --host ADDR              the address every server binds (default 127.0.0.1)
  --port N                 the gateway's port (default 0: an ephemeral port, printed)
  --no-gateway             start the instances only (to put your own router in front)
  --upstream URL,...       no simulated instances: the gateway fronts these servers
  --served-model-name NAME the model the instances serve (default sim); others get 404
  --max-model-len N        largest prompt + completion, tokens (default 32768)
  --max-body-bytes N       largest request body (default 1048576)
  --scrape-ms N            wall ms between the gateway's scrapes of each upstream's /metrics (default 200)
  --scrape-timeout-ms N    wall ms a scrape may take; a busy engine answers late (default 10000)
  --scrape-failures N      failed scrapes in a row, with no request answered between, before an
                           upstream is drained (default 3); a refused connection drains it at once
  --upstream-timeout-ms N  wall ms the gateway waits for an upstream's first byte (default 60000)
  --headers-timeout-ms N   wall ms a client may take to send a request's headers before its connection
                           is closed (default 30000)
  --idle-timeout-ms N      wall ms a keep-alive connection may idle, or a client take to read the next
                           bytes of an answer, before it is closed (default 30000)
  --max-connections N      connections each server holds at most; more wait in the kernel's backlog
                           (default: what the descriptor limit, ulimit -n, leaves: each request through
                           the gateway holds up to 3 descriptors: client, upstream, instance)

Bound to 127.0.0.1 by default, and the task may reach 127.0.0.1 and localhost
only. For other hosts run: deno run --allow-read --allow-net=HOSTS
--unstable-worker-options scenarios/serve.ts --host ... --upstream ...

${SCENARIO_FLAGS_HELP.replace(/^ {2}--json .*$/m, JSON_HELP)}`;

const OPTIONS = {
  ...SCENARIO_OPTIONS,
  speed: { type: "string" },
  host: { type: "string" },
  port: { type: "string" },
  "no-gateway": { type: "boolean" },
  upstream: { type: "string" },
  "served-model-name": { type: "string" },
  "max-model-len": { type: "string" },
  "max-body-bytes": { type: "string" },
  "scrape-ms": { type: "string" },
  "scrape-timeout-ms": { type: "string" },
  "scrape-failures": { type: "string" },
  "upstream-timeout-ms": { type: "string" },
  "headers-timeout-ms": { type: "string" },
  "idle-timeout-ms": { type: "string" },
  "max-connections": { type: "string" },
} as const;

type ServeFlags = ReturnType<typeof parseFlags<typeof OPTIONS>>["values"];

/** Wall ms the shutdown gives requests in flight: the process exits within 5 s of SIGTERM. */
const GRACE_MS = 4500;

/** Wall ms after the signal when the process exits whatever is still open. */
const EXIT_DEADLINE_MS = 4800;

/** `--upstream`'s URLs, each checked. */
function upstreamUrls(raw: string): string[] {
  return raw.split(",").map((part) => part.trim()).filter((part) => part !== "").map((part) => {
    let url: URL;
    try {
      url = new URL(part);
    } catch {
      throw new UsageError(`--upstream: "${part}" is not a URL (expected http://host:port)`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new UsageError(`--upstream: "${part}" is not an http(s) URL`);
    }
    return url.origin + url.pathname.replace(/\/+$/, "");
  });
}

/** What the simulated fleet cannot be over the wire, refused before anything starts. */
function checkServable(config: SimulationConfig, values: ServeFlags, upstreams: readonly string[]): void {
  if (isDisaggregated(config.instances)) {
    throw new UsageError("instances.pools: a disaggregated fleet is not served over HTTP (design.md)");
  }
  if ((config.faults?.length ?? 0) > 0) {
    throw new UsageError("faults: not injected into served instances; stop or kill a server instead");
  }
  if (config.autoscale !== undefined) throw new UsageError("autoscale: not supported by serve");
  if (upstreams.length > 0 && values["no-gateway"]) {
    throw new UsageError("--upstream: needs the gateway; drop --no-gateway");
  }
  if (upstreams.length > 0 && (values as Record<string, unknown>).instances !== undefined) {
    throw new UsageError("--instances: with --upstream no instance is simulated; drop one of them");
  }
  if (values["no-gateway"] && pluginFlag(values) !== undefined) {
    throw new UsageError("--router: needs the gateway; drop --no-gateway");
  }
}

/** Everything `deno task serve` is asked to start, checked. */
async function serveSettings(values: ServeFlags) {
  const config = await configFromFlags(values);
  const upstreams = values.upstream === undefined ? [] : upstreamUrls(values.upstream);
  if (values.upstream !== undefined && upstreams.length === 0) {
    throw new UsageError(`--upstream: expected URL,URL,..., got "${values.upstream}"`);
  }
  for (const url of upstreams) {
    const host = new URL(url).host;
    if (Deno.permissions.querySync({ name: "net", host }).state !== "granted") {
      throw new UsageError(
        `--upstream: not allowed to reach ${host}: the serve task may reach 127.0.0.1 and localhost only; ` +
          `for other hosts run deno run --allow-read --allow-net=127.0.0.1,${host} --allow-env=INIT_CWD ` +
          `--unstable-worker-options scenarios/serve.ts ... (scenarios/README.md, "Over the wire")`,
      );
    }
  }
  checkServable(config, values, upstreams);
  const named = pluginFlag(values);
  if (named?.pool !== undefined) throw new UsageError(`${named.flag}: serve routes one pool; use --router`);
  const timeoutMs = pluginTimeoutMs(values);
  // Counted while nothing else runs: the count takes every free descriptor for a moment.
  const connections = connectionBudget(values, upstreams.length > 0, values["no-gateway"] === true);
  const plugin = named && await loadRouterPlugin(named.path, { timeoutMs, baseDir: callerDirectory() });
  return {
    config,
    upstreams,
    plugin,
    pluginTimeoutMs: timeoutMs,
    speed: numberFlag("--speed", values["speed"], 1),
    host: values.host ?? "127.0.0.1",
    port: numberFlag("--port", values["port"], 0, { integer: true, zero: true }),
    servedModelName: values["served-model-name"] ?? "sim",
    servedModelNameGiven: values["served-model-name"] !== undefined,
    maxModelLen: numberFlag("--max-model-len", values["max-model-len"], 32768, { integer: true }),
    maxBodyBytes: numberFlag("--max-body-bytes", values["max-body-bytes"], DEFAULT_MAX_BODY_BYTES, {
      integer: true,
    }),
    scrapeMs: numberFlag("--scrape-ms", values["scrape-ms"], DEFAULT_SCRAPE_MS),
    scrapeTimeoutMs: numberFlag(
      "--scrape-timeout-ms",
      values["scrape-timeout-ms"],
      DEFAULT_SCRAPE_TIMEOUT_MS,
    ),
    scrapeFailures: numberFlag("--scrape-failures", values["scrape-failures"], DEFAULT_SCRAPE_FAILURES, {
      integer: true,
    }),
    upstreamTimeoutMs: numberFlag("--upstream-timeout-ms", values["upstream-timeout-ms"], 60000),
    connections,
    // What every server (the gateway, each instance) accepts of its clients.
    limits: {
      headersTimeoutMs: numberFlag(
        "--headers-timeout-ms",
        values["headers-timeout-ms"],
        DEFAULT_HEADERS_TIMEOUT_MS,
      ),
      idleTimeoutMs: numberFlag("--idle-timeout-ms", values["idle-timeout-ms"], DEFAULT_IDLE_TIMEOUT_MS),
      maxConnections: connections.perServer,
    },
  };
}

/**
 * How many connections the servers may hold, from the process's descriptor
 * limit less {@linkcode RESERVED_DESCRIPTORS}: a request through the gateway
 * holds a descriptor for its client, one for its upstream and, when the
 * instances are simulated here, one at the instance. So the gateway takes a
 * third of them (half when it fronts remote upstreams) and the instances
 * share the rest (all of them with `--no-gateway`).
 * @throws {UsageError} when `--max-connections` needs more descriptors than the limit leaves.
 */
function connectionBudget(values: ServeFlags, remote: boolean, noGateway: boolean) {
  const counted = freeDescriptors();
  const free = counted?.free ?? FALLBACK_FREE_DESCRIPTORS;
  const available = Math.max(3, free - RESERVED_DESCRIPTORS);
  const perRequest = noGateway ? 1 : remote ? 2 : 3;
  const derived = Math.max(1, Math.floor(available / perRequest));
  const given = values["max-connections"];
  const perServer = numberFlag("--max-connections", given, derived, { integer: true });
  const what = counted === undefined
    ? `${free} free descriptors (assumed: they could not be counted)`
    : counted.limited
    ? `${free} free descriptors (ulimit -n)`
    : `at least ${free} free descriptors`;
  if (given !== undefined && counted?.limited !== false && perServer * perRequest > available) {
    throw new UsageError(
      `--max-connections: ${perServer} needs about ${perServer * perRequest + RESERVED_DESCRIPTORS} ` +
        `descriptors; this process has ${what}: expected at most ${derived}, or raise the limit (ulimit -n)`,
    );
  }
  // The instances together: what the gateway's connections leave (its clients' and its upstream ones).
  const fleetSlots = noGateway ? available : Math.max(1, available - 2 * perServer);
  return { what, perServer, fleetPool: new ConnectionPool(fleetSlots) };
}

type ServeSettings = Awaited<ReturnType<typeof serveSettings>>;

/** Starts the gateway in front of `upstreams`; its live page shows `warning` while it is not null. */
function gatewayFor(
  settings: ServeSettings,
  upstreams: readonly string[],
  plugin: RouterPlugin | undefined,
  warning: () => string | null,
) {
  return startGateway({
    warning,
    config: settings.config,
    upstreams,
    host: settings.host,
    port: settings.port,
    speed: settings.speed,
    wallTime: systemWallTime,
    maxBodyBytes: settings.maxBodyBytes,
    scrapeMs: settings.scrapeMs,
    scrapeTimeoutMs: settings.scrapeTimeoutMs,
    scrapeFailures: settings.scrapeFailures,
    upstreamTimeoutMs: settings.upstreamTimeoutMs,
    connections: { limits: settings.limits },
    // Named on the command line: the gateway itself answers 404 for other models (real upstreams may serve several).
    ...(settings.servedModelNameGiven && { servedModelName: settings.servedModelName }),
    plugin: plugin && {
      url: plugin.url,
      name: plugin.name,
      readPaths: plugin.readPaths,
      timeoutMs: settings.pluginTimeoutMs,
    },
    onFatal: (line) => {
      console.error(oneLine(line));
      // A moment for the 503s the gateway just wrote to reach their clients; then a supervisor restarts us.
      setTimeout(() => Deno.exit(1), 200);
    },
  });
}

/** What the stop says: the signal, how long stopping took, the fleet's lag, and what the gateway served. */
function stopSummary(
  name: string,
  stoppedInS: number,
  fleet: SimFleet | undefined,
  gateway: Gateway | undefined,
) {
  const lag = fleet?.lagStats();
  const snapshot = gateway?.snapshot();
  return {
    event: "stopped",
    signal: name,
    stoppedInS,
    lag: lag === undefined
      ? null
      : { p50Ms: lag.p50Ms, p99Ms: lag.p99Ms, maxMs: lag.maxMs, deliveries: lag.deliveries },
    requests: snapshot?.requests ?? null,
    ttftMs: snapshot?.ttftMs ?? null,
    hitRate: snapshot?.hitRate ?? null,
  };
}

/** The stop summary's line on stderr. */
function stopLine(summary: ReturnType<typeof stopSummary>): string {
  const { lag } = summary;
  return `${summary.signal}: stopped in ${summary.stoppedInS.toFixed(2)} s` +
    (lag
      ? `; the simulated fleet's delivery lag p50 ${lag.p50Ms.toFixed(1)} ms, p99 ${
        lag.p99Ms.toFixed(1)
      } ms, ` +
        `max ${lag.maxMs.toFixed(1)} ms over ${plural(lag.deliveries, "delivery", "deliveries")}`
      : "");
}

/**
 * Waits for SIGTERM or SIGINT, then shuts down gracefully and says what was
 * served (on stderr; with `json`, also as one JSON line on stdout); a second
 * signal exits at once.
 */
async function serveUntilSignal(
  fleet: SimFleet | undefined,
  gateway: Gateway | undefined,
  json: boolean,
): Promise<void> {
  const signal = Promise.withResolvers<string>();
  let stopping = false;
  const listeners = (["SIGTERM", "SIGINT"] as const).map((name) => {
    const listener = () => {
      if (stopping) Deno.exit(name === "SIGINT" ? 130 : 143); // asked twice: now
      stopping = true;
      signal.resolve(name);
    };
    Deno.addSignalListener(name, listener);
    return [name, listener] as const;
  });
  const name = await signal.promise;
  const started = performance.now();
  const stopped = () => {
    const summary = stopSummary(name, (performance.now() - started) / 1000, fleet, gateway);
    console.error(stopLine(summary));
    if (json) console.log(JSON.stringify(summary));
  };
  // Whatever a client still holds open (a stalled upload…), the process is gone within 5 s.
  let done = false;
  const deadline = setTimeout(() => {
    if (!done) stopped();
    Deno.exit(0);
  }, EXIT_DEADLINE_MS);
  Deno.unrefTimer(deadline); // it ends a process that would not end, and keeps none alive
  // /health says 503 everywhere at once; then the gateway lets its streams finish, then the instances.
  gateway?.drain();
  fleet?.drain();
  await gateway?.close(GRACE_MS);
  await fleet?.close(Math.max(0, GRACE_MS - (performance.now() - started)));
  for (const [signalName, listener] of listeners) Deno.removeSignalListener(signalName, listener);
  stopped();
  done = true;
}

/**
 * Checks the simulated fleet's lag every {@linkcode LAG_CHECK_MS} and says on
 * stderr when it falls behind (at most every 10 s) and when it is back.
 */
function watchLag(fleet: SimFleet, speed: number): { watch: LagWatch; stop: () => void } {
  const watch = new LagWatch({
    lagStats: (recent) => fleet.lagStats(recent),
    speed,
    instances: fleet.urls.length,
  });
  const timer = setInterval(() => {
    const { line } = watch.check(performance.now());
    if (line !== undefined) console.error(line);
  }, LAG_CHECK_MS);
  Deno.unrefTimer(timer); // the servers keep the process alive, not this
  return { watch, stop: () => clearInterval(timer) };
}

if (import.meta.main) {
  await runCommand(async () => {
    const { values } = parseFlags(Deno.args, OPTIONS);
    if (values.help) return console.log(HELP);
    const settings = await serveSettings(values);
    const json = values.json === true;
    // A plugin's memory (its own, or a nested allocation) past the budget, or a main thread it
    // starves, ends the process in one line, from a Worker the plugin cannot starve.
    const watchdog = settings.plugin && watchPluginProcess(settings.plugin, { linePrefix: "serve: " });
    let fleet: SimFleet | undefined;
    if (settings.upstreams.length === 0) {
      fleet = await startSimFleet({
        config: settings.config,
        speed: settings.speed,
        host: settings.host,
        servedModelName: settings.servedModelName,
        maxBodyBytes: settings.maxBodyBytes,
        maxModelLen: settings.maxModelLen,
        wallTime: systemWallTime,
        connections: { limits: settings.limits, pool: settings.connections.fleetPool },
        onError: (error) => {
          console.error(`run failed: ${oneLine(error.message)}`);
          Deno.exit(1);
        },
      });
      if (!json) fleet.urls.forEach((url, i) => console.log(`instance ${i}: ${url}`));
    }
    const lag = fleet && watchLag(fleet, settings.speed);
    const upstreams = fleet?.urls ?? settings.upstreams;
    const gateway = values["no-gateway"]
      ? undefined
      : await gatewayFor(settings, upstreams, settings.plugin, () => lag?.watch.warning() ?? null);
    const routing = settings.plugin ? `plugin ${settings.plugin.name}` : policyLabel(settings.config.policy);
    const { connections } = settings;
    if (json) {
      console.log(JSON.stringify({
        event: "serving",
        instances: fleet?.urls ?? [],
        gateway: gateway ? { url: gateway.url, routing, upstreams } : null,
        speed: settings.speed,
        maxConnectionsPerServer: connections.perServer,
      }));
    } else {
      if (gateway) {
        console.log(
          `gateway: ${gateway.url} (${routing}, approximate cache view, ${
            plural(upstreams.length, "upstream")
          })`,
        );
      }
      console.log(
        `serving at speed ${settings.speed}×; at most ${plural(connections.perServer, "connection")} per ` +
          `server (${connections.what}); SIGTERM or Ctrl-C stops`,
      );
    }
    await serveUntilSignal(fleet, gateway, json);
    lag?.stop();
    watchdog?.stop();
  });
}
