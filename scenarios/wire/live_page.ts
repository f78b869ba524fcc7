/**
 * @module
 * The gateway's live page (`GET /`): one self-contained HTML document (inline
 * CSS and script, nothing fetched but `/events`) that shows the gateway's
 * snapshot — requests and outcomes, TTFT percentiles, a row per upstream
 * (queue, in flight, cache hit rate), and a warning while the simulated fleet
 * lags. The server renders the snapshot of the moment into the document
 * ({@linkcode livePageHtml}), so its first paint has numbers, scripts or
 * not; the script redraws it on every server-sent event.
 */

/** The request counts' keys, in the columns' order (the script has the same list). */
const REQUEST_KEYS = [
  "received",
  "inFlight",
  "completed",
  "failed",
  "cancelled",
  "broken",
  "rejected",
  "invalid",
  "unavailable",
  "retries",
] as const;

/** A figure the page shows: "–" when n/a. */
type Figure = number | null;

/**
 * What the page draws: the fields of the gateway's `GatewaySnapshot` it
 * reads (declared here, structurally, as gateway.ts imports this module).
 */
export interface LiveSnapshot {
  readonly timeMs: number;
  readonly policy: string;
  readonly draining: boolean;
  readonly requests: Readonly<Record<(typeof REQUEST_KEYS)[number], number>>;
  readonly ttftMs: {
    readonly mean: Figure;
    readonly p50: Figure;
    readonly p90: Figure;
    readonly p99: Figure;
  };
  readonly hitRate: Figure;
  readonly upstreams: readonly {
    readonly url: string;
    readonly healthy: boolean;
    readonly waiting: Figure;
    readonly running: Figure;
    readonly kvUsage: Figure;
    readonly inFlight: number;
    readonly routed: number;
    readonly completed: number;
    readonly hitRate: Figure;
  }[];
  readonly warning: string | null;
}

/** A latency as the page shows it: 2 decimals under 10 ms, none above; "–" when n/a. */
function ms(v: number | null | undefined): string {
  return v === null || v === undefined ? "–" : v.toFixed(v < 10 ? 2 : 0);
}

/** A share as a percentage with one decimal; "–" when n/a. */
function pct(v: number | null | undefined): string {
  return v === null || v === undefined ? "–" : (100 * v).toFixed(1) + " %";
}

/** A count; "–" when n/a. */
function n(v: number | null | undefined): string {
  return v === null || v === undefined ? "–" : String(v);
}

/** `text` safe inside an element or a quoted attribute. */
function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** One `<td>`, marked bad (red) when asked. */
function cell(text: string, bad = false): string {
  return `<td${bad ? ' class="bad"' : ""}>${escapeHtml(text)}</td>`;
}

/** What the server writes into the page: a snapshot's text, element by element. */
interface FirstPaint {
  readonly policy: string;
  readonly status: string;
  readonly warning: string | null;
  readonly cards: Readonly<Record<"ttft-p50" | "ttft-p90" | "ttft-p99" | "ttft-mean" | "hit-rate", string>>;
  /** The requests table's one row, and the upstreams' rows, as HTML. */
  readonly requests: string;
  readonly upstreams: string;
}

/** The page before any state: dashes, and a status that waits for `/events`. */
const EMPTY: FirstPaint = {
  policy: "",
  status: "connecting to /events…",
  warning: null,
  cards: { "ttft-p50": "–", "ttft-p90": "–", "ttft-p99": "–", "ttft-mean": "–", "hit-rate": "–" },
  requests: "<tr></tr>",
  upstreams: "",
};

/** `s` as the script's `render(s)` draws it, as HTML text. */
function firstPaint(s: LiveSnapshot): FirstPaint {
  const upstreams = s.upstreams.map((u, i) =>
    `<tr data-upstream="${i}">` +
    [
      cell(u.url),
      cell(u.healthy ? "up" : "down", !u.healthy),
      cell(n(u.waiting)),
      cell(n(u.running)),
      cell(n(u.inFlight)),
      cell(pct(u.kvUsage)),
      cell(n(u.routed)),
      cell(n(u.completed)),
      cell(pct(u.hitRate)),
    ].join("") + "</tr>"
  ).join("");
  return {
    policy: "· " + s.policy + (s.draining ? " · draining" : ""),
    status: "as served · simulated time " + (s.timeMs / 1000).toFixed(1) + " s (live once /events connects)",
    warning: s.warning,
    cards: {
      "ttft-p50": ms(s.ttftMs.p50),
      "ttft-p90": ms(s.ttftMs.p90),
      "ttft-p99": ms(s.ttftMs.p99),
      "ttft-mean": ms(s.ttftMs.mean),
      "hit-rate": pct(s.hitRate),
    },
    requests: "<tr>" + REQUEST_KEYS.map((key) => cell(n(s.requests[key]))).join("") + "</tr>",
    upstreams,
  };
}

/**
 * The live page with `snapshot` already in it (element ids as
 * {@linkcode LIVE_PAGE_HTML}'s); the script then redraws it from `/events`.
 */
export function livePageHtml(snapshot: LiveSnapshot): string {
  return page(firstPaint(snapshot));
}

/** The page's inline style sheet. */
const PAGE_STYLE =
  `  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #222; background: #fff; }
  h1 { font-size: 1.3rem; margin: 0 0 .3rem; }
  h2 { font-size: 1.05rem; margin: 1.4rem 0 .4rem; }
  #status { color: #666; }
  #status.down { color: #b00020; font-weight: 600; }
  table { border-collapse: collapse; }
  th, td { padding: .25rem .7rem; border-bottom: 1px solid #ddd; text-align: right; }
  th:first-child, td:first-child { text-align: left; }
  th { background: #f4f4f4; font-weight: 600; }
  td.bad { color: #b00020; font-weight: 600; }
  .cards { display: flex; flex-wrap: wrap; gap: .8rem; }
  .card { border: 1px solid #ddd; border-radius: 6px; padding: .5rem .9rem; min-width: 7rem; }
  .card b { display: block; font-size: 1.25rem; }
  .card span { color: #666; font-size: .85rem; }
  #warning { margin: .6rem 0; padding: .5rem .8rem; border: 1px solid #e0a800; background: #fff8e1; color: #5d4200; }
`;

/** The page's script: redraws every element from each `/events` snapshot (the same texts as {@linkcode firstPaint}). */
const PAGE_SCRIPT = `"use strict";
const $ = (id) => document.getElementById(id);
const ms = (v) => v === null || v === undefined ? "–" : v.toFixed(v < 10 ? 2 : 0);
const pct = (v) => v === null || v === undefined ? "–" : (100 * v).toFixed(1) + " %";
const n = (v) => v === null || v === undefined ? "–" : String(v);
const REQUEST_KEYS = ["received", "inFlight", "completed", "failed", "cancelled", "broken", "rejected",
  "invalid", "unavailable", "retries"];

function cell(row, text, bad) {
  const td = document.createElement("td");
  td.textContent = text;
  if (bad) td.className = "bad";
  row.appendChild(td);
}

function render(s) {
  $("policy").textContent = "· " + s.policy + (s.draining ? " · draining" : "");
  $("status").className = "";
  $("status").textContent = "live · simulated time " + (s.timeMs / 1000).toFixed(1) + " s";
  $("ttft-p50").textContent = ms(s.ttftMs.p50);
  $("ttft-p90").textContent = ms(s.ttftMs.p90);
  $("ttft-p99").textContent = ms(s.ttftMs.p99);
  $("ttft-mean").textContent = ms(s.ttftMs.mean);
  $("hit-rate").textContent = pct(s.hitRate);
  $("warning").hidden = s.warning === null || s.warning === undefined;
  $("warning").textContent = s.warning ?? "";
  const counts = document.createElement("tr");
  for (const key of REQUEST_KEYS) cell(counts, n(s.requests[key]));
  document.querySelector("#requests tbody").replaceChildren(counts);
  const rows = s.upstreams.map((u, i) => {
    const row = document.createElement("tr");
    row.dataset.upstream = String(i);
    cell(row, u.url);
    cell(row, u.healthy ? "up" : "down", !u.healthy);
    cell(row, n(u.waiting));
    cell(row, n(u.running));
    cell(row, n(u.inFlight));
    cell(row, pct(u.kvUsage));
    cell(row, n(u.routed));
    cell(row, n(u.completed));
    cell(row, pct(u.hitRate));
    return row;
  });
  document.querySelector("#upstreams tbody").replaceChildren(...rows);
}

const events = new EventSource("/events");
events.onmessage = (event) => render(JSON.parse(event.data));
events.onerror = () => {
  $("status").className = "down";
  $("status").textContent = "disconnected from /events (retrying)…";
};
`;

/** The page from its first paint's parts. */
function page(p: FirstPaint): string {
  const card = (id: keyof FirstPaint["cards"], label: string) =>
    `<div class="card"><b id="${id}">${escapeHtml(p.cards[id])}</b><span>${label}</span></div>`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Gateway · live</title>
<style>
${PAGE_STYLE}</style>
</head>
<body>
<h1>Gateway <small id="policy">${escapeHtml(p.policy)}</small></h1>
<div id="status">${escapeHtml(p.status)}</div>
<div id="warning"${p.warning === null ? " hidden" : ""}>${escapeHtml(p.warning ?? "")}</div>

<h2>Time to first token (simulated ms)</h2>
<div class="cards">
  ${card("ttft-p50", "p50")}
  ${card("ttft-p90", "p90")}
  ${card("ttft-p99", "p99")}
  ${card("ttft-mean", "mean")}
  ${card("hit-rate", "cache hit rate")}
</div>

<h2>Requests</h2>
<table id="requests"><thead><tr><th>received</th><th>in flight</th><th>completed</th><th>failed</th>
<th>cancelled</th><th>broken</th><th>rejected</th><th>invalid</th><th>unavailable</th><th>retries</th></tr></thead>
<tbody>${p.requests}</tbody></table>

<h2>Upstreams</h2>
<table id="upstreams"><thead><tr><th>upstream</th><th>health</th><th>waiting</th><th>running</th>
<th>in flight</th><th>KV use</th><th>routed</th><th>completed</th><th>cache hit rate</th></tr></thead>
<tbody>${p.upstreams}</tbody></table>

<script>
${PAGE_SCRIPT}</script>
</body>
</html>
`;
}

/** The page with no state in it yet (dashes, "connecting to /events…"): what a snapshot fills in. */
export const LIVE_PAGE_HTML: string = page(EMPTY);
