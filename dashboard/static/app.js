// sanqos dashboard: one EventSource, a few canvas line charts, one table.
// No libraries (the machines here have no internet and the page must stay
// small enough to read). Data: "history" (array of frames) once, then a
// "frame" per second; see package dashboard for the fields.
"use strict";

const WINDOW_S = 300;         // charts show the last five minutes
const hist = new Map();       // resource name -> array of {t, ...ResourcePoint}
let frames = 0;
let consumers = [];
let sortKey = "write_mb_s", sortDir = -1;

const $ = (sel) => document.querySelector(sel);

function addPoint(f) {
  const t = Date.parse(f.t) / 1000;
  for (const r of f.resources || []) {
    if (!hist.has(r.name)) hist.set(r.name, []);
    const a = hist.get(r.name);
    const p = Object.assign({ t }, r);
    for (const [addr, v] of Object.entries(r.writers || {})) p["w:" + addr] = v;
    a.push(p);
    while (a.length && a[0].t < t - WINDOW_S) a.shift();
  }
}

// ---- charts -----------------------------------------------------------

// draw plots series [{name, color, dash, key}] of points pts on canvas.
function draw(canvas, pts, series, unit) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const L = 44, R = 8, T = 18, B = 18;
  const now = pts.length ? pts[pts.length - 1].t : Date.now() / 1000;
  const t0 = now - WINDOW_S;
  let ymax = 0;
  for (const p of pts) for (const s of series) if (Number.isFinite(p[s.key])) ymax = Math.max(ymax, p[s.key]);
  ymax = niceMax(ymax);
  const x = (t) => L + (w - L - R) * (t - t0) / WINDOW_S;
  const y = (v) => h - B - (h - T - B) * v / ymax;
  // grid and labels
  g.strokeStyle = "#e0e0e0"; g.fillStyle = "#666"; g.font = "11px sans-serif"; g.lineWidth = 1;
  // Four or five grid steps, whichever gives round labels (20 → 5s, 25 → 5s).
  const m = ymax / Math.pow(10, Math.floor(Math.log10(ymax)));
  const div = m === 2 ? 4 : 5;
  for (let i = 0; i <= div; i++) {
    const v = ymax * i / div;
    g.beginPath(); g.moveTo(L, y(v)); g.lineTo(w - R, y(v)); g.stroke();
    g.fillText(fmt(v), 2, y(v) + 4);
  }
  for (let s = 0; s <= WINDOW_S; s += 60) {
    g.fillText(s === WINDOW_S ? "now" : "-" + (WINDOW_S - s) / 60 + "m", x(t0 + s) - 10, h - 4);
  }
  g.fillText(unit, L, 11);
  // lines, then legend
  let lx = L + 40;
  for (const s of series) {
    g.strokeStyle = s.color; g.lineWidth = 1.6; g.setLineDash(s.dash || []);
    g.beginPath();
    let pen = false;
    for (const p of pts) {
      const v = p[s.key];
      if (!Number.isFinite(v) || p.t < t0) { pen = false; continue; }
      if (pen) g.lineTo(x(p.t), y(v)); else g.moveTo(x(p.t), y(v));
      pen = true;
    }
    g.stroke(); g.setLineDash([]);
    g.fillStyle = s.color; g.fillRect(lx, 4, 10, 3); g.fillStyle = "#333";
    g.fillText(s.name, lx + 13, 11); lx += g.measureText(s.name).width + 30;
  }
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v * 1.1 <= m * e) return m * e;
  return 10 * e;
}

function fmt(v) { if (!Number.isFinite(v)) return "–"; return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2); }

const CHARTS = [
  { id: "wait", title: "Read wait vs threshold", unit: "ms", series: [
    { key: "indicator_ms", name: "indicator (EWMA)", color: "#1565c0" },
    { key: "raw_wait_ms", name: "raw", color: "#90caf9" },
    { key: "threshold_ms", name: "threshold", color: "#c62828", dash: [6, 4] }] },
  { id: "delay", title: "Applied write delay", unit: "ms", series: [
    { key: "delay_ms", name: "delay", color: "#ef6c00" }] },
  { id: "rates", title: "Write rate per consumer, total read", unit: "MB/s", series: [
    { key: "read_mb_s", name: "read (all)", color: "#2e7d32" }] },
];

// The rate chart gets one line per writing consumer (the heaviest few, by
// their latest rate), so the page shows who is slowed, as in thesis Fig 5.13.
const WRITER_COLORS = ["#6a1b9a", "#ad1457", "#00838f", "#4e342e", "#f9a825", "#283593"];
function writerSeries(pts) {
  const last = new Map();
  for (const p of pts) for (const [a, v] of Object.entries(p.writers || {})) last.set(a, v);
  return [...last.entries()].sort((a, b) => b[1] - a[1]).slice(0, WRITER_COLORS.length)
    .map(([addr], i) => ({ key: "w:" + addr, name: addr, color: WRITER_COLORS[i], writer: addr }));
}

function card(name) {
  let el = document.getElementById("res-" + name);
  if (el) return el;
  el = document.createElement("div");
  el.className = "resource"; el.id = "res-" + name; el.dataset.resource = name;
  el.innerHTML = "<h2></h2><div class=charts></div>";
  el.querySelector("h2").textContent = name;
  const badge = document.createElement("span"); badge.className = "badge"; el.querySelector("h2").append(badge);
  const info = document.createElement("span"); info.className = "info"; el.querySelector("h2").append(info);
  for (const c of CHARTS) {
    const d = document.createElement("div"); d.className = "chart";
    d.innerHTML = "<h3></h3><canvas></canvas>";
    d.querySelector("h3").textContent = c.title;
    d.querySelector("canvas").dataset.chart = c.id;
    el.querySelector(".charts").append(d);
  }
  $("#resources").append(el);
  return el;
}

function render() {
  $("#no-resources").hidden = hist.size > 0;
  for (const [name, pts] of hist) {
    const el = card(name);
    const last = pts[pts.length - 1];
    const badge = el.querySelector(".badge");
    const state = last.indicator_ms > last.threshold_ms ? "above" : last.delay_ms > 0 ? "throttling" : "ok";
    badge.className = "badge " + state;
    badge.textContent = state === "above" ? "above threshold" : state === "throttling" ? "holding" : "ok";
    // Does the threshold hold? The share of the shown window the indicator
    // spent above 1.2 × threshold (the lab's pct_time_above_1_2x_threshold).
    const measured = pts.filter((p) => Number.isFinite(p.indicator_ms));
    const above = measured.filter((p) => p.indicator_ms > 1.2 * p.threshold_ms).length;
    const held = measured.length ? `${Math.round(100 * above / measured.length)}% of the last ${Math.ceil((last.t - pts[0].t + 1) / 60)} min above 1.2× threshold` : "no reads yet";
    el.querySelector(".info").textContent =
      `wait ${fmt(last.indicator_ms)} / ${fmt(last.threshold_ms)} ms${last.floor_ms ? ` (floor ${fmt(last.floor_ms)})` : ""} · delay ${fmt(last.delay_ms)} ms (step ${last.step}) · throttleable ${last.throttleable} · ${held}`;
    el.dataset.pctAbove = measured.length ? Math.round(100 * above / measured.length) : "";
    el.dataset.points = pts.length;
    for (const c of CHARTS) {
      const series = c.id === "rates" ? writerSeries(pts).concat(c.series) : c.series;
      draw(el.querySelector(`canvas[data-chart=${c.id}]`), pts, series, c.unit);
    }
  }
}

// ---- consumers table ----------------------------------------------------

function stateOf(c) {
  if (c.important) return "important";
  if (c.held) return "held";
  if (c.write_delay_ms > 0 || c.read_delay_ms > 0 || c.rate_cap_mb_s > 0) return "slowed";
  return c.throttleable ? "throttleable" : "";
}

// A consumer's cost on the resource in % of its time, by direction: who
// saturates it and which way it is slowed.
function loadOf(c) {
  const r = (c.load_read || 0) * 100, w = (c.load_write || 0) * 100;
  if (r + w < 0.5) return "-";
  return `${r.toFixed(0)}% r / ${w.toFixed(0)}% w`;
}

function renderTable() {
  const key = sortKey, dir = sortDir;
  const val = (c) => key === "state" ? stateOf(c) : key === "resources" ? c.resources.join(",") :
    key === "load" ? (c.load_read || 0) + (c.load_write || 0) : c[key] ?? 0;
  const rows = consumers.slice().sort((a, b) => {
    const x = val(a), y = val(b);
    return (x < y ? -1 : x > y ? 1 : 0) * dir || (a.addr < b.addr ? -1 : 1);
  });
  const tb = $("#consumers tbody");
  tb.replaceChildren(...rows.map((c) => {
    const tr = document.createElement("tr");
    tr.dataset.consumer = c.addr;
    const st = stateOf(c);
    if (st === "slowed") tr.className = "slowed";
    const cells = [
      ["addr", c.addr], ["resources", c.resources.join(", ") || "-"],
      ["write_mb_s", fmt(c.write_mb_s), 1], ["read_mb_s", fmt(c.read_mb_s), 1],
      ["write_delay_ms", c.write_delay_ms ? c.write_delay_ms.toFixed(1) : "-", 1],
      ["read_delay_ms", c.read_delay_ms ? c.read_delay_ms.toFixed(1) : "-", 1],
      ["rate_cap_mb_s", c.rate_cap_mb_s ? fmt(c.rate_cap_mb_s) : "-", 1],
      ["queue", fmt(c.queue), 1], ["load", loadOf(c), 1], ["state", st]];
    for (const [col, text, num] of cells) {
      const td = document.createElement("td");
      td.dataset.col = col; td.textContent = text;
      if (num) td.className = "num";
      tr.append(td);
    }
    return tr;
  }));
  for (const th of document.querySelectorAll("#consumers th")) {
    th.setAttribute("aria-sort", th.dataset.sort === key ? (dir > 0 ? "ascending" : "descending") : "none");
  }
}

for (const th of document.querySelectorAll("#consumers th")) {
  th.addEventListener("click", () => {
    const k = th.dataset.sort;
    // Numbers sort largest first on the first click (who is heaviest/slowest).
    if (sortKey === k) sortDir = -sortDir; else { sortKey = k; sortDir = th.classList.contains("num") ? -1 : 1; }
    renderTable();
  });
}

// ---- events -------------------------------------------------------------

// The agent's event history (agent events.go): fetched when a frame's
// event_seq moves, shown newest first.
let eventSeq = 0;

function eventWait(e) {
  if (!Number.isFinite(e.indicator_ms)) return `no read wait yet, threshold ${e.threshold_ms} ms`;
  return `${e.indicator_ms.toFixed(1)} ms ${e.indicator_ms > e.threshold_ms ? ">" : "≤"} ${e.threshold_ms} ms`;
}

function eventDelays(e) {
  const p = [];
  if (e.read_delay_ms > 0) p.push(`read ${e.read_delay_ms.toFixed(1)} ms`);
  if (e.write_delay_ms > 0) p.push(`write ${e.write_delay_ms.toFixed(1)} ms`);
  return p.join(", ") || "-";
}

function renderEvents(evs) {
  $("#no-events").hidden = evs.length > 0;
  $("#throttle-events").hidden = evs.length === 0;
  $("#throttle-events tbody").replaceChildren(...evs.slice().reverse().map((e) => {
    const tr = document.createElement("tr");
    tr.dataset.seq = e.seq; tr.dataset.kind = e.kind; tr.dataset.consumer = e.consumer;
    const cells = [["time", new Date(e.time).toLocaleTimeString()], ["resource", e.resource], ["consumer", e.consumer],
      ["kind", e.kind], ["delays", eventDelays(e)], ["wait", eventWait(e)], ["share", `${Math.round(100 * e.share)}%`, 1], ["reason", e.reason]];
    for (const [col, text, num] of cells) {
      const td = document.createElement("td");
      td.dataset.col = col; td.textContent = text;
      if (num) td.className = "num";
      tr.append(td);
    }
    return tr;
  }));
}

function fetchEvents(seq) {
  if (!seq || seq === eventSeq) return;
  eventSeq = seq;
  fetch("api/throttle-events").then((r) => r.json()).then(renderEvents).catch(() => { eventSeq = 0; });
}

// ---- data ----------------------------------------------------------------

function onFrame(f) {
  frames++;
  addPoint(f);
  consumers = f.consumers || [];
  $("#frames").textContent = frames;
  $("#backend").textContent = f.backend;
  $("#updated").textContent = new Date(f.t).toLocaleTimeString();
  const d = $("#discovery");
  d.hidden = !f.discovery_error;
  d.textContent = f.discovery_error ? "discovery: " + f.discovery_error : "";
  render();
  renderTable();
  fetchEvents(f.event_seq);
}

const es = new EventSource("api/events");
es.addEventListener("history", (e) => {
  hist.clear();
  for (const f of JSON.parse(e.data) || []) addPoint(f);
  render();
});
es.addEventListener("frame", (e) => onFrame(JSON.parse(e.data)));
es.onopen = () => { $("#conn").dataset.state = "live"; $("#conn").textContent = "live"; };
es.onerror = () => { $("#conn").dataset.state = "lost"; $("#conn").textContent = "agent unreachable, retrying…"; };
window.addEventListener("resize", render);
