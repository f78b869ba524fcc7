/**
 * The gateway's live page (scenarios/wire/live_page.ts): the first paint the
 * server renders into the HTML (read with scripts off), the page's own script
 * redrawing the same snapshot identically (run on linkedom's DOM), and, in
 * headless Chromium against a running gateway, the DOM filled from
 * `/events`. Without Chromium that last test says so and is ignored.
 */
import { assert, assertEquals, assertMatch } from "@std/assert";
import { DOMParser } from "linkedom";
import { LIVE_PAGE_HTML, livePageHtml } from "../scenarios/wire/live_page.ts";
import type { GatewaySnapshot } from "../scenarios/wire/gateway.ts";
import { FAKE_MODEL, startFakeUpstream } from "./_fake_upstream.ts";
import { scenario } from "./_scenarios.ts";
import { loopbackGateway } from "./_wire.ts";

/** Chromium's version line, or undefined when it cannot be run here. */
async function chromiumVersion(): Promise<string | undefined> {
  try {
    const { success, stdout } = await new Deno.Command("chromium", { args: ["--version"], stderr: "null" })
      .output();
    return success ? new TextDecoder().decode(stdout).trim() : undefined;
  } catch {
    return undefined;
  }
}

const CHROMIUM = await chromiumVersion();
if (CHROMIUM === undefined) {
  console.warn(
    "gateway_live_page_test: Chromium (`chromium`) is not installed or may not run: the live page test is IGNORED",
  );
}

/** Chromium's DevTools port, from the line it prints on stderr once listening. */
async function devToolsPort(stderr: ReadableStream<Uint8Array>): Promise<number> {
  const lines = stderr.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  for (;;) {
    const { done, value } = await lines.read();
    if (done) throw new Error(`chromium exited before listening: ${text}`);
    text += value;
    const match = /DevTools listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(text);
    if (match !== null) {
      // Keep draining its stderr so that it never blocks on a full pipe.
      (async () => {
        while (!(await lines.read()).done);
      })().catch(() => {});
      return Number(match[1]);
    }
  }
}

/** Evaluates `expression` in the page over the DevTools protocol (one request, one answer). */
function evaluate(socket: WebSocket, id: number, expression: string): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const onMessage = (event: MessageEvent) => {
      const reply = JSON.parse(event.data);
      if (reply.id !== id) return;
      socket.removeEventListener("message", onMessage);
      if (reply.error || reply.result?.exceptionDetails) reject(new Error(JSON.stringify(reply)));
      else resolve(reply.result.result.value);
    };
    socket.addEventListener("message", onMessage);
    socket.send(
      JSON.stringify({ id, method: "Runtime.evaluate", params: { expression, returnByValue: true } }),
    );
  });
}

/**
 * Opens `url` in headless Chromium and returns the page's HTML once `ready`
 * (a script expression) is true — the page keeps its `/events` stream open,
 * so `--dump-dom` (which waits for the network to settle) cannot be used.
 */
async function renderedHtml(url: string, ready: string, timeoutMs: number): Promise<string> {
  const profile = await Deno.makeTempDir({ prefix: "gateway_live_page_" });
  const child = new Deno.Command("chromium", {
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      `--user-data-dir=${profile}`,
      "--remote-debugging-address=127.0.0.1",
      "--remote-debugging-port=0",
      url,
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let socket: WebSocket | undefined;
  try {
    const port = await devToolsPort(child.stderr);
    const pages = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
    const page = pages.find((p: { type: string; url: string }) => p.type === "page" && p.url.startsWith(url));
    assert(page !== undefined, `no page at ${url}: ${JSON.stringify(pages)}`);
    socket = new WebSocket(page.webSocketDebuggerUrl);
    await new Promise((resolve, reject) => {
      socket!.onopen = resolve;
      socket!.onerror = reject;
    });
    const started = performance.now();
    for (let id = 1;; id++) {
      if (await evaluate(socket, id, ready) === true) break;
      if (performance.now() - started > timeoutMs) {
        throw new Error(`the page was not ready within ${timeoutMs} ms`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    return await evaluate(socket, 0, "document.documentElement.outerHTML") as string;
  } finally {
    socket?.close();
    if (socket !== undefined) {
      await new Promise((r) =>
        socket!.readyState === WebSocket.CLOSED ? r(0) : socket!.addEventListener("close", r)
      );
    }
    child.kill("SIGKILL");
    await child.status;
    await Deno.remove(profile, { recursive: true }).catch(() => {});
  }
}

Deno.test("the live page is one self-contained document: nothing loaded but /events", () => {
  assert(!/\b(src|href)\s*=/.test(LIVE_PAGE_HTML), "the page loads an external resource");
  assertMatch(LIVE_PAGE_HTML, /new EventSource\("\/events"\)/);
});

/** Four completions through the gateway at `url`, each answered 200, their bodies dropped. */
async function sendFour(url: string): Promise<void> {
  for (let i = 0; i < 4; i++) {
    const response = await fetch(`${url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: FAKE_MODEL, prompt: `request ${i} with a few words`, max_tokens: 4 }),
    });
    assertEquals(response.status, 200);
    await response.body?.cancel();
  }
}

Deno.test({
  name: "headless Chromium shows a row per upstream and the request counts, filled from /events",
  ignore: CHROMIUM === undefined,
  async fn() {
    const fakes = [startFakeUpstream({ waiting: 3 }), startFakeUpstream({ waiting: 1, cachedTokens: 8 })];
    const config = scenario({ policy: { name: "round_robin" } });
    const gateway = await loopbackGateway(config, fakes.map((f) => f.url), 1, {
      maxBodyBytes: 65_536,
      upstreamTimeoutMs: 5000,
    });
    try {
      await sendFour(gateway.url);
      const ready = `document.querySelectorAll("#upstreams tbody tr").length === 2`;
      const html = await renderedHtml(`${gateway.url}/`, ready, 15_000);
      const document = new DOMParser().parseFromString(html, "text/html");
      const rows = [...document.querySelectorAll("#upstreams tbody tr")];
      assertEquals(rows.length, 2, `rows in ${html.slice(0, 2000)}`);
      const cells = rows.map((row) => [...row.querySelectorAll("td")].map((td) => td.textContent));
      assertEquals(cells.map((c) => c[0]), fakes.map((f) => f.url));
      assertEquals(cells.map((c) => c[1]), ["up", "up"]);
      assertEquals(cells.map((c) => c[2]), ["3", "1"]); // waiting, from each upstream's /metrics
      assertEquals(cells.map((c) => c[6]), ["2", "2"]); // routed
      assertEquals(cells.map((c) => c[7]), ["2", "2"]); // completed
      assertEquals(cells[0][8], "0.0 %");
      assertMatch(cells[1][8], /^\d+\.\d %$/);
      assert(cells[1][8] !== "0.0 %", "the second upstream's cached tokens do not show");
      const counts = [...document.querySelectorAll("#requests tbody td")].map((td) => td.textContent);
      assertEquals(counts.slice(0, 3), ["4", "0", "4"]); // received, in flight, completed
      assertMatch(document.getElementById("ttft-p50")?.textContent ?? "", /^\d/);
      assertMatch(document.getElementById("status")?.textContent ?? "", /^live/);
      assertMatch(document.getElementById("policy")?.textContent ?? "", /round_robin/);
    } finally {
      await gateway.close(1000);
      await Promise.all(fakes.map((f) => f.close()));
    }
  },
});

/** A snapshot with every kind of cell: a down upstream, n/a figures, markup in a URL, a warning, draining. */
const SNAPSHOT: GatewaySnapshot = {
  timeMs: 12_345,
  policy: "prefix_aware",
  draining: true,
  requests: {
    received: 9,
    inFlight: 1,
    completed: 6,
    failed: 1,
    cancelled: 0,
    broken: 0,
    rejected: 0,
    invalid: 1,
    unavailable: 0,
    retries: 2,
  },
  ttftMs: { mean: 123.4, p50: 8.25, p90: 150, p99: null },
  hitRate: 0.4567,
  upstreams: [
    {
      url: "http://127.0.0.1:8001",
      healthy: true,
      failedScrapes: 0,
      waiting: 2,
      running: 3,
      kvUsage: 0.125,
      inFlight: 1,
      routed: 5,
      completed: 4,
      hitRate: 0.5,
    },
    {
      url: 'http://h/<b>&"x"',
      healthy: false,
      failedScrapes: 3,
      waiting: null,
      running: null,
      kvUsage: null,
      inFlight: 0,
      routed: 2,
      completed: 2,
      hitRate: null,
    },
  ],
  warning: "the simulated fleet lags: <p99> 80 ms & more",
};

/** The texts a reader sees, element by element (the status line aside: it says where the numbers come from). */
function shown(document: ReturnType<DOMParser["parseFromString"]>) {
  const text = (id: string) => document.getElementById(id)?.textContent ?? null;
  const cells = (selector: string) =>
    [...document.querySelectorAll(selector)].map((row) =>
      [...row.querySelectorAll("td")].map((td) => [td.textContent, td.getAttribute("class") || null])
    );
  const warning = document.getElementById("warning");
  return {
    policy: text("policy"),
    cards: ["ttft-p50", "ttft-p90", "ttft-p99", "ttft-mean", "hit-rate"].map(text),
    warning: [warning?.hasAttribute("hidden"), warning?.textContent],
    requests: cells("#requests tbody tr"),
    upstreams: cells("#upstreams tbody tr"),
    rowIndexes: [...document.querySelectorAll("#upstreams tbody tr")].map((r) =>
      r.getAttribute("data-upstream")
    ),
  };
}

/** The empty page after its script has drawn `snapshot` from one `/events` message (on linkedom's DOM). */
function redrawnByScript(snapshot: GatewaySnapshot) {
  const document = new DOMParser().parseFromString(LIVE_PAGE_HTML, "text/html");
  let onmessage: ((event: { data: string }) => void) | undefined;
  class FakeEventSource {
    onerror: unknown = null;
    constructor(readonly url: string) {}
    set onmessage(f: (event: { data: string }) => void) {
      onmessage = f;
    }
  }
  new Function("document", "EventSource", document.querySelector("script")!.textContent!)(
    document,
    FakeEventSource,
  );
  assert(onmessage !== undefined, "the script did not listen to /events");
  onmessage({ data: JSON.stringify(snapshot) });
  return document;
}

Deno.test("the first paint the server writes is what the script draws from the same snapshot", async (t) => {
  const cases: [string, GatewaySnapshot][] = [
    ["draining, a down upstream, n/a cells, markup in a URL and a warning", SNAPSHOT],
    ["no warning, nothing routed yet", {
      ...SNAPSHOT,
      draining: false,
      warning: null,
      ttftMs: { mean: null, p50: null, p90: null, p99: null },
      hitRate: null,
    }],
  ];
  for (const [name, snapshot] of cases) {
    await t.step(name, () => {
      const served = new DOMParser().parseFromString(livePageHtml(snapshot), "text/html");
      const drawn = shown(redrawnByScript(snapshot));
      assertEquals(shown(served), drawn);
      assertEquals(drawn.upstreams.length, 2);
    });
  }
  const served = shown(new DOMParser().parseFromString(livePageHtml(SNAPSHOT), "text/html"));
  assertEquals(served.upstreams[1][0], ['http://h/<b>&"x"', null]);
  assertEquals(served.upstreams[1][1], ["down", "bad"]);
  assertEquals(served.cards, ["8.25", "150", "–", "123", "45.7 %"]);
  assertEquals(served.warning, [false, "the simulated fleet lags: <p99> 80 ms & more"]);
  assertEquals(served.policy, "· prefix_aware · draining");
});

Deno.test("GET / has the gateway's current numbers and warning in its HTML, before any script runs", async () => {
  const fakes = [startFakeUpstream({ waiting: 3 }), startFakeUpstream({ waiting: 1, cachedTokens: 8 })];
  let warning: string | null = null;
  const gateway = await loopbackGateway(
    scenario({ policy: { name: "round_robin" } }),
    fakes.map((f) => f.url),
    1,
    {
      maxBodyBytes: 65_536,
      upstreamTimeoutMs: 5000,
      warning: () => warning,
    },
  );
  try {
    const page = async () =>
      new DOMParser().parseFromString(await (await fetch(`${gateway.url}/`)).text(), "text/html");
    const before = await page();
    assertEquals(before.querySelectorAll("#upstreams tbody tr").length, 2);
    assert(before.getElementById("warning")?.hasAttribute("hidden"), "a warning shows with none to show");
    await sendFour(gateway.url);
    warning = "the simulated fleet lags: delivery lag p99 80 ms";
    const document = await page();
    const { upstreams, requests, cards, policy, warning: shownWarning } = shown(document);
    assertEquals(upstreams.map((c) => c[0][0]), fakes.map((f) => f.url));
    assertEquals(upstreams.map((c) => c[1][0]), ["up", "up"]);
    assertEquals(upstreams.map((c) => c[2][0]), ["3", "1"]); // waiting, from each upstream's /metrics
    assertEquals(upstreams.map((c) => c[6][0]), ["2", "2"]); // routed
    assertEquals(requests[0].slice(0, 3).map((c) => c[0]), ["4", "0", "4"]); // received, in flight, completed
    assertMatch(cards[0] ?? "", /^\d/);
    assertMatch(policy ?? "", /round_robin/);
    assertMatch(document.getElementById("status")?.textContent ?? "", /simulated time \d+\.\d s/);
    assertEquals(shownWarning, [false, warning]);
    assertEquals(gateway.snapshot().warning, warning);
  } finally {
    await gateway.close(1000);
    await Promise.all(fakes.map((f) => f.close()));
  }
});
