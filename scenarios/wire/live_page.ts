/**
 * @module
 * The gateway's live page (`GET /`): one self-contained HTML document (inline
 * CSS and script, nothing fetched but `/events`) that shows the gateway's
 * snapshot — requests and outcomes, TTFT percentiles, and a row per upstream
 * (queue, in flight, cache hit rate) — redrawn on every server-sent event.
 */

/** The page. Element ids the test reads: `status`, `policy`, `ttft-p50|p90|p99|mean`, `hit-rate`, `requests`, `upstreams` (a row per upstream, `data-upstream` its index). */
export const LIVE_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Gateway · live</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #222; background: #fff; }
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
</style>
</head>
<body>
<h1>Gateway <small id="policy"></small></h1>
<div id="status">connecting to /events…</div>

<h2>Time to first token (simulated ms)</h2>
<div class="cards">
  <div class="card"><b id="ttft-p50">–</b><span>p50</span></div>
  <div class="card"><b id="ttft-p90">–</b><span>p90</span></div>
  <div class="card"><b id="ttft-p99">–</b><span>p99</span></div>
  <div class="card"><b id="ttft-mean">–</b><span>mean</span></div>
  <div class="card"><b id="hit-rate">–</b><span>cache hit rate</span></div>
</div>

<h2>Requests</h2>
<table id="requests"><thead><tr><th>received</th><th>in flight</th><th>completed</th><th>failed</th>
<th>cancelled</th><th>broken</th><th>rejected</th><th>invalid</th><th>unavailable</th><th>retries</th></tr></thead>
<tbody><tr></tr></tbody></table>

<h2>Upstreams</h2>
<table id="upstreams"><thead><tr><th>upstream</th><th>health</th><th>waiting</th><th>running</th>
<th>in flight</th><th>KV use</th><th>routed</th><th>completed</th><th>cache hit rate</th></tr></thead>
<tbody></tbody></table>

<script>
"use strict";
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
  const counts = document.createElement("tr");
  for (const key of REQUEST_KEYS) cell(counts, n(s.requests[key]));
  $("requests").tBodies[0].replaceChildren(counts);
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
  $("upstreams").tBodies[0].replaceChildren(...rows);
}

const events = new EventSource("/events");
events.onmessage = (event) => render(JSON.parse(event.data));
events.onerror = () => {
  $("status").className = "down";
  $("status").textContent = "disconnected from /events (retrying)…";
};
</script>
</body>
</html>
`;
