/**
 * @module
 * `deno task serve` as a user runs it: the task's own `deno run` flags (read
 * from deno.json) on scenarios/serve.ts, as a subprocess. Its printed
 * addresses are parsed and talked to over 127.0.0.1 only; SIGTERM's graceful
 * shutdown, a plugin overrunning its time, and bad input are checked from the
 * outside (exit code, stderr, what HTTP clients see). Every child is killed in
 * a `finally` and every wait is bounded.
 */
import { assert, assertEquals, assertMatch, assertStringIncludes } from "@std/assert";
import { messageLine } from "./_cli.ts";
import { readSseData } from "../scenarios/wire/http.ts";
import { parsePrometheus } from "../scenarios/wire/prometheus.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const SLOW = new URL("./fixtures/serve_slow_decode.json", import.meta.url).pathname;
const FAULTS = new URL("./fixtures/serve_faults.json", import.meta.url).pathname;
const NEVER_RETURNS = new URL("./fixtures/plugin_never_returns.ts", import.meta.url).pathname;

/** The serve task's `deno run …` arguments, exactly as deno.json has them. */
const TASK_ARGS: readonly string[] = (() => {
  const deno = JSON.parse(Deno.readTextFileSync(`${ROOT}deno.json`));
  const words = String(deno.tasks.serve.command ?? deno.tasks.serve).trim().split(/\s+/);
  assertEquals(words[0], "deno");
  return words.slice(1);
})();

/** Wall ms a server may take to start and print its addresses. */
const START_TIMEOUT_MS = 20_000;

/** A `const NAME = <ms>;` of scenarios/serve.ts: its shutdown promises, read from the product's own code. */
function serveConstant(name: string): number {
  const source = Deno.readTextFileSync(`${ROOT}scenarios/serve.ts`);
  const match = new RegExp(`^const ${name} = (\\d+);$`, "m").exec(source);
  assert(match !== null, `scenarios/serve.ts declares no "const ${name} = <ms>;"`);
  return Number(match[1]);
}

/** Wall ms serve's shutdown gives requests in flight before it cuts them. */
const GRACE_MS = serveConstant("GRACE_MS");

/** Wall ms after the signal when serve exits whatever is still open. */
const EXIT_DEADLINE_MS = serveConstant("EXIT_DEADLINE_MS");

/** The fixture's simulated ms per decoded token (served at speed 1). */
const SLOW_DECODE_MS: number = JSON.parse(Deno.readTextFileSync(SLOW)).instances.decodeMsPerToken;

/** A running `deno task serve` and what it printed. */
interface Served {
  readonly child: Deno.ChildProcess;
  /** "instance N: URL" lines' URLs, in order. */
  readonly instances: readonly string[];
  /** The "gateway: URL (...)" line's URL. */
  readonly gateway: string | undefined;
  /**
   * Wall ms from spawn to the serving line: this machine's pace in this run,
   * the slack a bound on the same process's shutdown is given.
   */
  readonly startMs: number;
  /** stdout so far (whole once the child is gone). */
  stdout(): string;
  /** The whole stdout and stderr, once the child has exited. */
  readonly output: Promise<{ stdout: string; stderr: string }>;
}

/** Spawns the serve task with `args`, without waiting for it to be ready. */
function spawnServe(args: readonly string[], env: Record<string, string> = {}): {
  child: Deno.ChildProcess;
  stdout: () => string;
  ready: Promise<void>;
  output: Promise<{ stdout: string; stderr: string }>;
} {
  // A variable the test sets is granted beside the task's own INIT_CWD.
  const taskArgs = TASK_ARGS.map((a) =>
    a === "--allow-env=INIT_CWD" ? ["--allow-env=INIT_CWD", ...Object.keys(env)].join(",") : a
  );
  const child = new Deno.Command("deno", {
    args: [...taskArgs, ...args],
    cwd: ROOT,
    env: { INIT_CWD: ROOT, ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let out = "";
  const ready = Promise.withResolvers<void>();
  const stdoutDone = (async () => {
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      out += chunk;
      if (/^(serving at speed |\{"event":"serving").*\n/m.test(out)) ready.resolve();
    }
    ready.reject(new Error("stdout closed before the serving line"));
    return out;
  })();
  const stderrDone = new Response(child.stderr).text();
  const output = Promise.all([stdoutDone, stderrDone]).then(([stdout, stderr]) => ({ stdout, stderr }));
  ready.promise.catch(() => {});
  return { child, stdout: () => out, ready: ready.promise, output };
}

/** Starts the serve task and waits (bounded) for its "serving at speed" line. */
async function startServe(...args: string[]): Promise<Served> {
  return await startServeWith({}, ...args);
}

/** {@linkcode startServe} with `env` set (and granted). */
async function startServeWith(env: Record<string, string>, ...args: string[]): Promise<Served> {
  const spawning = performance.now();
  const spawned = spawnServe(args, env);
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      spawned.ready,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("serve did not start in time")), START_TIMEOUT_MS);
      }),
    ]);
  } catch (error) {
    await stop(spawned);
    const { stdout, stderr } = await spawned.output;
    throw new Error(`${(error as Error).message}\nstdout:\n${stdout}\nstderr:\n${stderr}`);
  } finally {
    clearTimeout(timer);
  }
  const startMs = performance.now() - spawning;
  const text = spawned.stdout();
  const instances = [...text.matchAll(/^instance (\d+): (\S+)$/gm)].map((m, i) => {
    assertEquals(Number(m[1]), i, text);
    return m[2];
  });
  const gateway = /^gateway: (\S+) \(.*\)$/m.exec(text)?.[1];
  return {
    child: spawned.child,
    instances,
    gateway,
    startMs,
    stdout: spawned.stdout,
    output: spawned.output,
  };
}

/** Kills the child if it still runs, and waits for it and its pipes. */
async function stop(served: { child: Deno.ChildProcess; output: Promise<unknown> }): Promise<void> {
  try {
    served.child.kill("SIGKILL");
  } catch { /* already gone */ }
  await served.child.status;
  await served.output;
}

/** Waits for the child's exit, at most `ms` wall ms; its status and the wall ms waited. */
async function exitWithin(child: Deno.ChildProcess, ms: number): Promise<{ code: number; waitedMs: number }> {
  const started = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the process did not exit within ${ms} ms`)), ms);
  });
  try {
    const status = await Promise.race([child.status, timeout]);
    return { code: status.code, waitedMs: performance.now() - started };
  } finally {
    clearTimeout(timer);
  }
}

/** Wall ms of tokens read before a SIGTERM to measure the stream's pace. */
const PACE_WINDOW_MS = 300;

/**
 * Wall ms after SIGTERM by which `served` must be gone: serve's own exit
 * deadline, plus what this process took to start as the slack for that
 * timer's lateness and the exit itself on this machine now.
 */
function exitBoundMs(served: Served): number {
  return EXIT_DEADLINE_MS + served.startMs;
}

/** Says what the slack was, for a failure's message. */
function startedIn(served: Served): string {
  return `this serve took ${served.startMs.toFixed(0)} ms to start`;
}

/** A POST of `body` as JSON to `url`, bounded by `timeoutMs`. */
function post(url: string, body: unknown, timeoutMs = 10_000): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
}

/** GET `url`'s status, its body consumed. */
async function getStatus(url: string): Promise<number> {
  const response = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  await response.body?.cancel();
  return response.status;
}

/** A streamed completion of exactly `tokens` tokens (ignore_eos). */
function streamBody(tokens: number) {
  return { model: "sim", prompt: "a long story", max_tokens: tokens, ignore_eos: true, stream: true };
}

/** Wall ms {@linkcode untilStatus} waits between two polls. */
const POLL_MS = 10;

/** Polls `url` every {@linkcode POLL_MS} until it answers `status`; the wall ms that took (throws after `ms`). */
async function untilStatus(url: string, status: number, ms: number): Promise<number> {
  const started = performance.now();
  for (;;) {
    if (await getStatus(url) === status) return performance.now() - started;
    if (performance.now() - started > ms) throw new Error(`${url} did not answer ${status} within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** The slowest of `count` GETs of `url` (each answering `status`), in wall ms: a trivial request's cost now. */
async function slowestGet(url: string, status: number, count: number): Promise<number> {
  let slowest = 0;
  for (let k = 0; k < count; k++) {
    const started = performance.now();
    assertEquals(await getStatus(url), status, url);
    slowest = Math.max(slowest, performance.now() - started);
  }
  return slowest;
}

/** Reads text events until `ms` wall ms have passed; how many came. */
async function readTextsFor(events: AsyncGenerator<string>, ms: number): Promise<number> {
  const started = performance.now();
  let texts = 0;
  while (performance.now() - started < ms) {
    const next = await events.next();
    assert(!next.done && next.value !== "[DONE]", "the stream went on");
    if (JSON.parse(next.value).choices?.[0]?.text) texts++;
  }
  return texts;
}

/** The stream's events after the first: texts (and the wall time each came), error events, and whether [DONE] came. */
async function drainStream(events: AsyncGenerator<string>) {
  let texts = 0, done = false;
  const errors: unknown[] = [];
  const times: number[] = [];
  for await (const data of events) {
    if (data === "[DONE]") {
      done = true;
      continue;
    }
    const event = JSON.parse(data);
    if (event.error !== undefined) errors.push(event.error);
    else if (typeof event.choices?.[0]?.text === "string" && event.choices[0].text !== "") {
      texts++;
      times.push(performance.now());
    }
  }
  return { texts, done, errors, times };
}

Deno.test("serve starts N instances and a gateway; a completion through the gateway is routed", async () => {
  const served = await startServe("--instances", "3");
  try {
    assertEquals(served.instances.length, 3, served.stdout());
    for (const url of served.instances) assertMatch(url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert(served.gateway !== undefined, served.stdout());
    assertMatch(served.gateway, /^http:\/\/127\.0\.0\.1:\d+$/);
    assertMatch(served.stdout(), /^gateway: \S+ \(hybrid\(thr=1\), approximate cache view, 3 upstreams\)$/m);
    assertEquals(await getStatus(`${served.gateway}/health`), 200);
    for (const url of served.instances) assertEquals(await getStatus(`${url}/health`), 200);

    const response = await post(`${served.gateway}/v1/completions`, {
      model: "sim",
      prompt: "hello over the wire",
      max_tokens: 5,
      ignore_eos: true,
    });
    const body = await response.json();
    assertEquals(response.status, 200, JSON.stringify(body));
    const routed = Number(response.headers.get("x-routed-to"));
    assert(Number.isInteger(routed) && routed >= 0 && routed < 3, `x-routed-to ${routed}`);
    assertEquals(body.object, "text_completion");
    assertEquals(body.choices[0].finish_reason, "length");
    assertEquals(body.usage.completion_tokens, 5);
    assertEquals(body.usage.prompt_tokens, 4);

    // The routed-to instance served it: its vLLM counters say so; the others saw nothing.
    for (let i = 0; i < 3; i++) {
      const metrics = await (await fetch(`${served.instances[i]}/metrics`)).text();
      const success = parsePrometheus(metrics).filter((s) => s.name === "vllm:request_success_total")
        .reduce((sum, s) => sum + s.value, 0);
      assertEquals(success, i === routed ? 1 : 0, `instance ${i}`);
    }

    const chat = await post(`${served.gateway}/v1/chat/completions`, {
      model: "sim",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 3,
    });
    const chatBody = await chat.json();
    assertEquals(chat.status, 200, JSON.stringify(chatBody));
    assertEquals(chatBody.object, "chat.completion");
    assert(chat.headers.has("x-routed-to"));

    served.child.kill("SIGTERM");
    assertEquals((await exitWithin(served.child, 5_000)).code, 0);
    assertStringIncludes((await served.output).stderr, "SIGTERM: stopped");
  } finally {
    await stop(served);
  }
});

Deno.test("serve --json prints one JSON line with its addresses on start and one with its summary on stop", async () => {
  const served = await startServe("--instances", "2", "--json");
  try {
    const [first, ...rest] = served.stdout().trimEnd().split("\n");
    assertEquals(rest, [], served.stdout()); // nothing but the JSON line
    const start = JSON.parse(first);
    assertEquals([start.event, start.instances.length, start.speed], ["serving", 2, 1]);
    for (const url of start.instances) assertMatch(url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assertMatch(start.gateway.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assertEquals(start.gateway.upstreams, start.instances);
    assertEquals(start.gateway.routing, "hybrid(thr=1)");
    assert(Number.isInteger(start.maxConnectionsPerServer) && start.maxConnectionsPerServer > 0, first);

    const response = await post(`${start.gateway.url}/v1/completions`, {
      model: "sim",
      prompt: "hello as JSON",
      max_tokens: 3,
      ignore_eos: true,
    });
    assertEquals(response.status, 200);
    await response.body?.cancel();

    served.child.kill("SIGTERM");
    assertEquals((await exitWithin(served.child, 5_000)).code, 0);
    const { stdout, stderr } = await served.output;
    const lines = stdout.trimEnd().split("\n");
    assertEquals(lines.length, 2, stdout);
    const stopped = JSON.parse(lines[1]);
    assertEquals([stopped.event, stopped.signal], ["stopped", "SIGTERM"]);
    assertEquals([stopped.requests.received, stopped.requests.completed], [1, 1]);
    assert(stopped.ttftMs.p50 > 0, lines[1]);
    assert(stopped.lag.deliveries > 0 && stopped.lag.p99Ms >= 0, lines[1]);
    assertStringIncludes(stderr, "SIGTERM: stopped"); // the human line stays on stderr
  } finally {
    await stop(served);
  }
});

Deno.test("one instance is one upstream, in the singular", async () => {
  const served = await startServe("--instances", "1");
  try {
    assertMatch(served.stdout(), /^gateway: \S+ \(hybrid\(thr=1\), approximate cache view, 1 upstream\)$/m);
  } finally {
    await stop(served);
  }
});

Deno.test("SIGTERM drains: /health 503 at once, new requests 503, the stream in flight finishes, exit 0", async () => {
  const served = await startServe("--scenario", SLOW);
  const client = new AbortController();
  try {
    const gateway = served.gateway!;
    // 150 tokens at 10 simulated ms each, speed 1: about 1.5 s.
    const stream = await fetch(`${gateway}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(streamBody(150)),
      signal: client.signal,
    });
    assertEquals(stream.status, 200);
    const events = readSseData(stream.body!);
    const first = await events.next();
    assert(!first.done && first.value !== "[DONE]", "the stream opened");
    // "At once": within three polls (the first may race the signal), each given twice what a /health
    // costs now (the slowest of three, measured while the stream runs). Not after the stream drains.
    const healthCostMs = await slowestGet(`${gateway}/health`, 200, 3);
    const healthBoundMs = 3 * (POLL_MS + 2 * healthCostMs);

    served.child.kill("SIGTERM");
    const signalled = performance.now();
    const healthMs = await untilStatus(`${gateway}/health`, 503, healthBoundMs);
    assert(
      healthMs < healthBoundMs,
      `gateway /health took ${healthMs.toFixed(0)} ms to say 503; a /health costs ${
        healthCostMs.toFixed(0)
      } ms`,
    );
    for (const url of served.instances) assertEquals(await getStatus(`${url}/health`), 503, url);
    const refused = await post(`${gateway}/v1/completions`, { model: "sim", prompt: "late", max_tokens: 2 });
    const refusedBody = await refused.json();
    assertEquals(refused.status, 503, JSON.stringify(refusedBody));
    assertEquals(refusedBody.error.type, "service_unavailable");
    const direct = await post(`${served.instances[0]}/v1/completions`, { model: "sim", prompt: "late" });
    await direct.body?.cancel();
    assertEquals(direct.status, 503);

    const rest = await drainStream(events);
    const drained = performance.now();
    assertEquals(rest.errors, []);
    assert(rest.done, "the stream in flight ended with [DONE]");
    assertEquals(rest.texts + 1, 150);
    const { code, waitedMs } = await exitWithin(served.child, exitBoundMs(served) - (drained - signalled));
    // Nothing left in flight: it exits then, not at the end of the grace (its own start is the slack).
    assert(
      performance.now() - drained < served.startMs,
      `exited ${waitedMs.toFixed(0)} ms after the stream drained; ${startedIn(served)}`,
    );
    assertEquals(code, 0);
    const stderr = (await served.output).stderr;
    assertMatch(stderr, /^SIGTERM: stopped in \d+\.\d\d s; the simulated fleet's delivery lag/m);
  } finally {
    client.abort();
    await stop(served);
  }
});

Deno.test("SIGTERM with a stream that would outlast the grace: the process still exits within 5 s", async () => {
  const served = await startServe("--scenario", SLOW);
  const client = new AbortController();
  try {
    // 2000 tokens at 10 simulated ms each: 20 s, far past the 4.5 s grace.
    const sent = performance.now();
    const stream = await fetch(`${served.gateway}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(streamBody(2000)),
      signal: client.signal,
    });
    assertEquals(stream.status, 200);
    const events = readSseData(stream.body!);
    assert(!(await events.next()).done);
    // The pace this machine streams at now, before the signal.
    const paceFrom = performance.now();
    const paced = await readTextsFor(events, PACE_WINDOW_MS);
    const tokensPerMs = paced / (performance.now() - paceFrom);

    served.child.kill("SIGTERM");
    const signalled = performance.now();
    const rest = await drainStream(events);
    const endedMs = performance.now() - signalled;
    const { code } = await exitWithin(served.child, exitBoundMs(served) - (performance.now() - signalled));
    const exitedMs = performance.now() - signalled;
    assertEquals(code, 0);
    assert(
      exitedMs < exitBoundMs(served),
      `exited ${exitedMs.toFixed(0)} ms after SIGTERM; ${startedIn(served)}`,
    );
    // Cut at the grace, not before (and not much after: the slack is what this serve took to start).
    assert(
      endedMs > GRACE_MS - 500 && endedMs < GRACE_MS + served.startMs,
      `the stream ended ${endedMs.toFixed(0)} ms after SIGTERM (grace ${GRACE_MS} ms); ${startedIn(served)}`,
    );
    // Streamed through the grace at the pace it had before the signal (two thirds of it: 300 tokens when
    // idle, as before) ...
    assert(
      rest.texts > tokensPerMs * GRACE_MS * 2 / 3,
      `${rest.texts} tokens after SIGTERM; ${paced} in the ${PACE_WINDOW_MS} ms before it`,
    );
    // ... and never ahead of the wall clock: at speed 1, a token per SLOW_DECODE_MS since the request was sent.
    assert(rest.times.length > 0, "tokens after SIGTERM");
    const dueTokens = (rest.times.at(-1)! - sent) / SLOW_DECODE_MS;
    assert(
      paced + rest.texts <= dueTokens + 1,
      `${paced + rest.texts} tokens after the first, ${dueTokens} due`,
    );
    assert(!rest.done, "no [DONE] for a cut stream");
    assertEquals(rest.errors.length, 1, "the cut stream ends with one error event");
    assertStringIncludes((await served.output).stderr, "SIGTERM: stopped");
  } finally {
    client.abort();
    await stop(served);
  }
});

Deno.test("SIGTERM while a client has stalled mid-body, on the gateway and on an instance: exit within 5 s", async () => {
  const served = await startServe("--instances", "1");
  const stalled: Deno.TcpConn[] = [];
  try {
    for (const url of [served.gateway!, served.instances[0]]) {
      const { port } = new URL(url);
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: Number(port) });
      await conn.write(new TextEncoder().encode(
        `POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n` +
          `content-length: 100\r\n\r\n{"model":`,
      ));
      stalled.push(conn);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
    served.child.kill("SIGTERM");
    const { code, waitedMs } = await exitWithin(served.child, exitBoundMs(served));
    assertEquals(code, 0);
    assert(waitedMs < exitBoundMs(served), `exited after ${waitedMs.toFixed(0)} ms; ${startedIn(served)}`);
    assertStringIncludes((await served.output).stderr, "SIGTERM: stopped");
  } finally {
    for (const conn of stalled) conn.close();
    await stop(served);
  }
});

Deno.test("--no-gateway serves the instances only; --upstream fronts another process's instances", async () => {
  const fleet = await startServe("--instances", "3", "--no-gateway");
  try {
    assertEquals(fleet.instances.length, 3);
    assertEquals(fleet.gateway, undefined);
    assert(!/gateway/.test(fleet.stdout()), fleet.stdout());

    const upstreams = fleet.instances.slice(0, 2);
    const front = await startServe("--upstream", upstreams.join(","), "--policy", "round_robin");
    try {
      assertEquals(front.instances, [], front.stdout());
      assert(front.gateway !== undefined);
      assertMatch(front.stdout(), /^gateway: \S+ \(round_robin, approximate cache view, 2 upstreams\)$/m);
      const seen: number[] = [];
      for (let k = 0; k < 4; k++) {
        const response = await post(`${front.gateway}/v1/completions`, {
          model: "sim",
          prompt: `request ${k}`,
          max_tokens: 2,
        });
        const body = await response.json();
        assertEquals(response.status, 200, JSON.stringify(body));
        seen.push(Number(response.headers.get("x-routed-to")));
      }
      assertEquals([...new Set(seen)].sort(), [0, 1], `round robin over both upstreams: ${seen}`);
      // The two fronted instances served them, the third none.
      const served = await Promise.all(fleet.instances.map(async (url) => {
        const text = await (await fetch(`${url}/metrics`)).text();
        return parsePrometheus(text).filter((s) => s.name === "vllm:request_success_total")
          .reduce((sum, s) => sum + s.value, 0);
      }));
      assertEquals(served[0] + served[1], 4, `${served}`);
      assertEquals(served[2], 0);
      front.child.kill("SIGTERM");
      assertEquals((await exitWithin(front.child, 5_000)).code, 0);
      const stderr = (await front.output).stderr;
      assertMatch(stderr, /^SIGTERM: stopped in \d+\.\d\d s$/m);
    } finally {
      await stop(front);
    }
  } finally {
    await stop(fleet);
  }
});

Deno.test("a plugin that overruns --plugin-timeout-ms: the gateway exits 1 with one line", async () => {
  const served = await startServe(
    "--instances",
    "2",
    "--router",
    NEVER_RETURNS,
    // 2 s, not 300 ms: the timeout bounds the plugin's loading too, over 300 ms on a loaded machine.
    "--plugin-timeout-ms",
    "2000",
  );
  try {
    assertMatch(served.stdout(), /^gateway: \S+ \(plugin never_returns, /m);
    const response = await post(`${served.gateway}/v1/completions`, { model: "sim", prompt: "x" }, 10_000)
      .then(async (r) => {
        await r.body?.cancel();
        return r.status;
      }, () => "no answer");
    const { code } = await exitWithin(served.child, 10_000);
    assertEquals(code, 1);
    const line = messageLine((await served.output).stderr);
    assertMatch(line, /^gateway: the router failed: /);
    assertMatch(line, /plugin_timeout: plugin plugin_never_returns\.ts did not answer .* within 2000 ms/);
    assert(response === "no answer" || response === 503, `the client got ${response}`);
  } finally {
    await stop(served);
  }
});

const FILL_MEMORY = new URL("./fixtures/hostile/fill_memory.ts", import.meta.url).pathname;
const FLOOD = new URL("./fixtures/hostile/flood_in_choose.ts", import.meta.url).pathname;

Deno.test("a plugin past the memory budget ends serve in one line, exit 1, as it ends run", async () => {
  const served = await startServeWith(
    { PLUGIN_MEMORY_BUDGET_MB: "300" },
    "--instances",
    "1",
    "--router",
    FILL_MEMORY,
  );
  try {
    post(`${served.gateway}/v1/completions`, { model: "sim", prompt: "grow" }, 15_000).then(
      (r) => r.body?.cancel(),
      () => {},
    );
    const { code } = await exitWithin(served.child, 15_000);
    assertEquals(code, 1);
    const line = messageLine((await served.output).stderr);
    assertMatch(
      line,
      /^serve: resource_exhausted: the process running plugin fill_memory used \d+ MB, over the 300 MB budget of a plugin run/,
    );
  } finally {
    await stop(served);
  }
});

Deno.test("a plugin that floods its Worker's postMessage cannot starve serve: one line, the process ends", async () => {
  const served = await startServe("--instances", "1", "--router", FLOOD, "--plugin-timeout-ms", "500");
  try {
    const status = await post(`${served.gateway}/v1/completions`, { model: "sim", prompt: "flood" }, 10_000)
      .then(
        async (r) => (await r.body?.cancel(), r.status),
        () => "no answer",
      );
    const { code } = await exitWithin(served.child, 10_000);
    assertEquals(code, 1);
    const line = messageLine((await served.output).stderr);
    assertMatch(
      line,
      /^gateway: the router failed: actor_threw: a router plugin may not post messages \(actor router \(plugin flood_in_choose\.ts\)/,
    );
    assert(status === 503 || status === "no answer", `the client got ${status}`);
  } finally {
    await stop(served);
  }
});

const PATCH_LATER = new URL("./fixtures/hostile/patch_later.ts", import.meta.url).pathname;

Deno.test("a plugin that replaces Array.prototype.push after loading fails the gateway: 503s, one line, exit 1", async () => {
  const served = await startServe("--instances", "1", "--router", PATCH_LATER);
  try {
    const statuses: (number | string)[] = [];
    for (let i = 0; i < 3; i++) {
      statuses.push(
        await post(`${served.gateway}/v1/completions`, { model: "sim", prompt: `p${i}` }, 10_000).then(
          async (r) => (await r.body?.cancel(), r.status),
          () => "no answer",
        ),
      );
    }
    // The first may be answered before the timer patches; none after it is.
    assert(statuses.slice(1).every((s) => s === 503 || s === "no answer"), `statuses ${statuses}`);
    const { code } = await exitWithin(served.child, 10_000);
    assertEquals(code, 1);
    assertMatch(
      messageLine((await served.output).stderr),
      /^gateway: the router failed: actor_threw: a router plugin may not modify built-in objects: Array\.prototype\.push was replaced/,
    );
  } finally {
    await stop(served);
  }
});

/** Runs the serve task to its end (bounded); exit code and the one stderr line. */
async function serveFails(...args: string[]): Promise<{ code: number; line: string; stdout: string }> {
  const spawned = spawnServe(args);
  try {
    const { code } = await exitWithin(spawned.child, 10_000);
    const { stdout, stderr } = await spawned.output;
    return { code, line: messageLine(stderr), stdout };
  } finally {
    await stop(spawned);
  }
}

Deno.test("bad input exits 2 with one line naming the flag", async (t) => {
  const cases: [string, string[], RegExp][] = [
    ["--speed 0", ["--speed", "0"], /^error: --speed: .*"0"/],
    ["--port -1", ["--port=-1"], /^error: --port: .*"-1"/],
    [
      "--scrape-timeout-ms 0",
      ["--scrape-timeout-ms", "0"],
      /^error: --scrape-timeout-ms: expected a number > 0, got "0"/,
    ],
    [
      "--scrape-failures 1.5",
      ["--scrape-failures", "1.5"],
      /^error: --scrape-failures: expected an integer > 0, got "1\.5"/,
    ],
    ["--upstream not-a-url", ["--upstream", "not-a-url"], /^error: --upstream: "not-a-url" is not a URL/],
    [
      "--upstream with --no-gateway",
      ["--upstream", "http://127.0.0.1:9", "--no-gateway"],
      /^error: --upstream: .*--no-gateway/,
    ],
    [
      "--instances with --upstream",
      ["--instances", "2", "--upstream", "http://127.0.0.1:9"],
      /^error: --instances: .*--upstream/,
    ],
    [
      "a disaggregated fleet",
      ["--model", "batching", "--prefill-instances", "1", "--decode-instances", "1"],
      /^error: instances\.pools: .*disaggregated/,
    ],
    ["--faults", ["--faults", FAULTS], /^error: faults: /],
    [
      "--upstream to a host the task may not reach",
      ["--upstream", "http://192.0.2.1:8000"],
      /^error: .*192\.0\.2\.1.*--allow-net/,
    ],
  ];
  for (const [name, args, expected] of cases) {
    await t.step(name, async () => {
      const { code, line, stdout } = await serveFails(...args);
      assertEquals(code, 2, line);
      assertMatch(line, expected);
      assertEquals(stdout, "");
    });
  }
});
