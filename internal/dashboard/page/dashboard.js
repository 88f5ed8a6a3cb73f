// The tashkent dashboard: polls api/cluster (internal/dashboard), keeps the
// last minutes of samples, and draws the tables, the alerts and small SVG
// charts. Plain JavaScript, no library: the page must work offline.
"use strict";

const POLL_MS = 1000;
const HISTORY = 300; // samples kept for the charts: five minutes at one a second
const RATE_SPAN = 5; // samples a rate is averaged over
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

const samples = []; // {t: ms, c: Cluster}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function fmtInt(n) { return n === undefined || n === null ? "–" : Number(n).toLocaleString("en-US"); }
function fmtRate(x) { return x === null || !isFinite(x) ? "–" : x < 10 ? x.toFixed(1) : Math.round(x).toLocaleString("en-US"); }
function fmtPct(x) { return x === null || !isFinite(x) ? "–" : (100 * x).toFixed(x < 0.01 ? 2 : 1) + "%"; }
function fmtBytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + " " + units[i];
}

// past returns the sample n polls ago (or the oldest there is).
function past(n) { return samples[Math.max(0, samples.length - 1 - n)]; }

function replicaOf(c, name) { return (c.replicas || []).find((r) => r.name === name && r.reachable); }

// replicaRates are a replica's commits/s, abort rate and applied/s over
// the last RATE_SPAN samples, from its counters; null when unknown (the
// agent restarted, or it was not reachable then).
function replicaRates(name) {
  const now = samples[samples.length - 1], then = past(RATE_SPAN);
  const a = replicaOf(then.c, name), b = replicaOf(now.c, name);
  const none = { commits: null, abortRate: null, applied: null };
  if (!a || !b || now === then || b.commits < a.commits || b.remote_applied < a.remote_applied) return none;
  const secs = (now.t - then.t) / 1000;
  const commits = b.commits - a.commits, aborts = b.aborts - a.aborts;
  return {
    commits: commits / secs,
    abortRate: commits + aborts > 0 ? aborts / (commits + aborts) : null,
    applied: (b.remote_applied - a.remote_applied) / secs,
  };
}

function renderAlerts(c) {
  const box = document.getElementById("alerts");
  box.replaceChildren();
  if (!c.alerts || c.alerts.length === 0) {
    box.append(el("div", { class: "none" }, "No alerts: every replica serves and keeps up; the certifier answers."));
    return;
  }
  for (const a of c.alerts) {
    box.append(el("div", { class: "alert " + a.severity, "data-subject": a.subject }, el("b", {}, a.subject), " ", a.text));
  }
}

function stateCell(state, why) {
  return el("td", {}, el("span", { class: "state " + state }, state.replace("_", " ")), why ? el("div", { class: "why" }, why) : null);
}

function renderReplicas(c) {
  const body = document.querySelector("#replicas tbody");
  body.replaceChildren();
  for (const r of c.replicas || []) {
    const rates = replicaRates(r.name);
    const bad = r.state !== "serving" || r.flow_control_pausing;
    const why = r.reachable ? r.why : r.error;
    body.append(el("tr", { "data-replica": r.name, "data-state": r.state, class: bad ? "bad" : "" },
      el("td", {}, el("b", {}, r.name)),
      stateCell(r.state, why),
      el("td", { class: "num", "data-field": "version" }, r.reachable ? fmtInt(r.version) : "–"),
      el("td", { class: "num", "data-field": "lag" }, r.reachable ? fmtInt(r.lag) : "–"),
      el("td", { class: "num" }, fmtRate(rates.commits)),
      el("td", { class: "num" }, fmtPct(rates.abortRate)),
      el("td", { class: "num" }, fmtRate(rates.applied)),
      el("td", {}, r.flow_control_pausing ? "engaged" : r.reachable ? "–" : ""),
      el("td", { class: "num" }, r.reachable ? r.backends : "–"),
      el("td", {}, r.status_addr ? el("a", { href: "http://" + r.status_addr + "/" }, r.status_addr) : "",
        r.connected ? "" : el("div", { class: "why" }, "no certifier session"))));
  }
}

function renderCertifier(c) {
  const cv = c.certifier, l = cv.leader, sum = document.getElementById("certifier-summary");
  sum.replaceChildren();
  if (!l) {
    sum.append(el("span", { class: "state unreachable" }, cv.reachable ? "no leader" : "unreachable"));
  } else {
    const rate = l.certifications ? l.aborts / l.certifications : null;
    const parts = [["version", fmtInt(l.version)], ["durable version", fmtInt(l.durable_version)],
      ["low-water mark", fmtInt(l.low_water_mark)], ["log from version", fmtInt(l.log_first_version)],
      ["log", fmtBytes(l.log_bytes)], ["log kept for", l.log_kept_for || "–"], ["certifications/s", fmtRate(l.certifications_per_second)],
      ["abort rate since start", fmtPct(rate)], ["entries/fsync", l.entries_per_fsync.toFixed(1)]];
    for (const [k, v] of parts) sum.append(k + " ", el("b", {}, v), "   ");
  }
  const body = document.querySelector("#members tbody");
  body.replaceChildren();
  for (const m of cv.members || []) {
    const role = m.reachable ? m.role : "unreachable";
    body.append(el("tr", { "data-member": m.addr, class: m.reachable ? "" : "bad" },
      el("td", {}, m.id ? String(m.id) : "–"),
      el("td", {}, m.addr),
      stateCell(role, m.reachable ? "" : m.error),
      el("td", { class: "num" }, m.reachable ? fmtInt(m.term) : "–"),
      el("td", { class: "num" }, m.reachable ? fmtInt(m.durable_version) : "–"),
      el("td", { class: "num" }, m.reachable ? fmtInt(m.applied_index) : "–"),
      el("td", { class: "num" }, m.reachable ? m.entries_per_fsync.toFixed(1) : "–"),
      el("td", { class: "num" }, m.reachable ? fmtRate(m.certifications_per_second) : "–"),
      el("td", {}, m.reachable ? "ok" : "no answer")));
  }
}

// series derives one chart value per sample.
function series(f) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const v = f(samples[i - 1], samples[i]);
    out.push({ t: samples[i].t, v: v === null || v === undefined || !isFinite(v) ? null : v });
  }
  return out;
}

function totalCommits(c) {
  let n = 0, a = 0;
  for (const r of c.replicas || []) if (r.reachable) { n += r.commits; a += r.aborts; }
  return { n, a };
}

function commitsPerSec(p, s) {
  const a = totalCommits(p.c), b = totalCommits(s.c);
  return b.n >= a.n ? (b.n - a.n) / ((s.t - p.t) / 1000) : null;
}

function abortPct(p, s) {
  const a = totalCommits(p.c), b = totalCommits(s.c);
  const commits = b.n - a.n, aborts = b.a - a.a;
  return commits >= 0 && aborts >= 0 && commits + aborts > 0 ? 100 * aborts / (commits + aborts) : 0;
}

function entriesPerFsync(p, s) {
  const a = p.c.certifier.leader, b = s.c.certifier.leader;
  if (!a || !b || b.fsyncs <= a.fsyncs) return null;
  return (b.entries_per_fsync * b.fsyncs - a.entries_per_fsync * a.fsyncs) / (b.fsyncs - a.fsyncs);
}

function lagOf(name) {
  return (p, s) => { const r = replicaOf(s.c, name); return r ? r.lag : null; };
}

// drawChart draws lines (each {color, points}) into an SVG of 320x120 user units.
function drawChart(svg, lines) {
  const W = 320, H = 120, top = 12, bottom = 4;
  svg.replaceChildren();
  const ns = "http://www.w3.org/2000/svg";
  let max = 0, t0 = Infinity, t1 = -Infinity;
  for (const l of lines) for (const p of l.points) {
    if (p.v !== null) max = Math.max(max, p.v);
    t0 = Math.min(t0, p.t); t1 = Math.max(t1, p.t);
  }
  const yMax = max > 0 ? max * 1.1 : 1;
  const grid = document.createElementNS(ns, "line");
  for (const [k, v] of Object.entries({ x1: 0, x2: W, y1: H - bottom, y2: H - bottom, stroke: "#dde" })) grid.setAttribute(k, v);
  svg.append(grid);
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", 2); label.setAttribute("y", 10);
  label.textContent = "max " + fmtRate(max);
  svg.append(label);
  if (!(t1 > t0)) return;
  for (const l of lines) {
    let d = "", pen = false;
    for (const p of l.points) {
      if (p.v === null) { pen = false; continue; }
      const x = ((p.t - t0) / (t1 - t0)) * W, y = H - bottom - (p.v / yMax) * (H - top - bottom);
      d += (pen ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
      pen = true;
    }
    const path = document.createElementNS(ns, "path");
    for (const [k, v] of Object.entries({ d, fill: "none", stroke: l.color, "stroke-width": 1.5, "vector-effect": "non-scaling-stroke" })) path.setAttribute(k, v);
    svg.append(path);
  }
}

function renderCharts(c) {
  drawChart(document.getElementById("chart-commits"), [{ color: COLORS[0], points: series(commitsPerSec) }]);
  drawChart(document.getElementById("chart-aborts"), [{ color: COLORS[1], points: series(abortPct) }]);
  drawChart(document.getElementById("chart-fsync"), [{ color: COLORS[2], points: series(entriesPerFsync) }]);
  const names = (c.replicas || []).map((r) => r.name);
  const legend = document.getElementById("legend");
  legend.replaceChildren("lag: ");
  drawChart(document.getElementById("chart-lag"), names.map((name, i) => {
    const color = COLORS[i % COLORS.length];
    legend.append(el("span", { style: "color:" + color }, "■ " + name));
    return { color, points: series(lagOf(name)) };
  }));
}

function render(c) {
  document.getElementById("served-by").textContent = "served by " + c.served_by;
  document.getElementById("updated").textContent = "· " + new Date(c.time).toLocaleTimeString();
  renderAlerts(c);
  renderReplicas(c);
  renderCertifier(c);
  renderCharts(c);
}

function setLive(ok, why) {
  const dot = document.getElementById("live");
  dot.className = "dot " + (ok ? "live" : "stale");
  dot.title = ok ? "live" : "no answer from this process: " + why;
  if (!ok) document.getElementById("updated").textContent = "· no answer from this process (" + why + ")";
}

async function poll() {
  try {
    const resp = await fetch("api/cluster", { cache: "no-store" });
    if (!resp.ok) throw new Error(resp.status + " " + resp.statusText);
    const c = await resp.json();
    const t = Date.parse(c.time);
    // The server answers from one gathering for half a second: a repeated
    // one is no new sample.
    if (samples.length === 0 || t > samples[samples.length - 1].t) samples.push({ t, c });
    if (samples.length > HISTORY) samples.shift();
    render(c);
    setLive(true);
  } catch (e) {
    setLive(false, e.message);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
