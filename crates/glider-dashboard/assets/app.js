// Glider dashboard: reads /api/* once, then follows /ws. No framework, no build step;
// the charts are drawn by the vendored uPlot (window.uPlot, /assets/uplot.js).
"use strict";

const MAX_ROWS = 200;
const $ = (id) => document.getElementById(id);

const state = {
  backends: new Map(), // name -> backend object
  rows: new Map(),     // "live:<id>" | "seq:<seq>" -> record
  oldest: null,        // next_before for "Older requests"
  dropped: 0,
  socket: null,
  retry: 0,
  stats: null,          // the last /api/stats
  view: "overview",
  charts: {},           // name -> uPlot
  routeReportStale: false, // a request finished since the routing evidence was read
  sessions: null,       // the last /api/context/sessions list, once the view was opened
  selected: null,       // the session shown in detail
};

// A token given as ?token= is now a cookie: take it out of the address bar.
if (new URLSearchParams(location.search).has("token")) {
  history.replaceState(null, "", location.pathname);
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ credentials: "same-origin", cache: "no-store" }, options));
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (body.error && body.error.message) || response.statusText;
    throw Object.assign(new Error(message), { status: response.status, body });
  }
  return body;
}

const fmt = {
  int: (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US")),
  ms: (n) => (n === null || n === undefined ? "–" : n < 1000 ? `${n} ms` : `${(n / 1000).toFixed(n < 10000 ? 2 : 1)} s`),
  share: (x) => (x === null || x === undefined ? "–" : `${Math.round(x * 100)}%`),
  time: (ms) => {
    const d = new Date(ms);
    const pad = (v) => String(v).padStart(2, "0");
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  },
  tokensIn: (u) => (u ? u.input_tokens + (u.cache_read_tokens || 0) + (u.cache_write_tokens || 0) : 0),
  usd: (x) => (x === null || x === undefined ? "–" : x > 0 && x < 0.01 ? `$${x.toFixed(4)}` : `$${x.toFixed(2)}`),
  when: (ms) => {
    if (!ms) return "–";
    const d = new Date(ms);
    const today = new Date().toDateString() === d.toDateString();
    return today ? fmt.time(ms) : `${d.toISOString().slice(0, 10)} ${fmt.time(ms)}`;
  },
};

// ---- backends --------------------------------------------------------------------

function renderBackends() {
  const body = $("backends").tBodies[0];
  body.replaceChildren();
  // The GPU panel's "Loaded" column reads the backends' health.
  if (state.vram) renderVram(state.vram);
  for (const b of state.backends.values()) {
    const problem = b.unavailable || b.detail || "";
    const reset = b.breaker !== "closed"
      ? el("button", { class: "btn small", onclick: () => resetBreaker(b.backend) }, "Reset breaker")
      : null;
    body.append(el("tr", { "data-backend": b.backend },
      el("td", {}, el("strong", {}, b.backend), b.local ? el("span", { class: "tag local" }, "local") : el("span", { class: "tag cloud" }, "cloud")),
      el("td", {}, b.type),
      el("td", {}, el("span", { class: `pill pill-${b.health}` }, b.health)),
      el("td", {}, el("span", { class: `pill pill-${b.breaker}` }, b.breaker.replace("_", "-"))),
      el("td", {}, (b.warm_models || []).length ? b.warm_models.join(", ") : el("span", { class: "muted" }, b.local ? "none loaded" : "n/a")),
      el("td", { class: "small" }, (b.models || []).join(", ")),
      el("td", { class: "problem small" }, b.enabled === false ? "disabled" : problem),
      el("td", {}, reset),
    ));
  }
}

async function loadBackends() {
  const data = await api("/api/backends");
  state.backends = new Map(data.backends.map((b) => [b.backend, b]));
  renderBackends();
}

// ---- Local models: speed and fit (/api/fit) ---------------------------------------

const perSec = (x) => (x === null || x === undefined ? "–" : `${x < 10 ? x.toFixed(1) : Math.round(x)} tok/s`);

async function loadFit() {
  const data = await api("/api/fit");
  const body = $("fit").tBodies[0];
  body.replaceChildren();
  for (const m of data.models || []) {
    const speed = m.speed || {};
    const cap = m.output_cap;
    body.append(el("tr", { "data-backend": m.backend, "data-model": m.model },
      el("td", {}, m.backend),
      el("td", {}, m.model),
      el("td", { class: "num" }, fmt.int(m.window)),
      el("td", { class: "num" }, perSec(speed.prompt_per_sec)),
      el("td", { class: "num" }, perSec(speed.generated_per_sec)),
      el("td", { class: "num" }, String(speed.samples || 0)),
      el("td", { class: "num" }, cap ? fmt.int(cap.tokens) : "–"),
      el("td", { class: "small" }, cap ? cap.setting : el("span", { class: "muted" }, "fit off")),
      el("td", { class: "num" }, m.system_budget_tokens === null ? "–" : `${fmt.int(m.system_budget_tokens)} tokens`),
    ));
  }
  if (!body.rows.length) {
    body.append(el("tr", {}, el("td", { colspan: "9", class: "muted" }, "no local backend")));
  }
  $("fit-note").textContent = data.enabled
    ? `A reply is capped at ${data.max_reply_secs} s of generation once its model's speed is measured (fit.max_reply_secs); system text may take ${fmt.share(data.max_system_share)} of the window (fit.max_system_share).`
    : "Fitting is off (fit.enabled: false): local requests go as the client sent them.";
}

let fitTimer = null;
function refreshFitSoon() {
  if (fitTimer) return;
  fitTimer = setTimeout(() => { fitTimer = null; loadFit().catch(showError); }, 500);
}

// ---- GPU memory (/api/vram) ------------------------------------------------------

// The GPU line, from /api/vram's `gpu` or a `sample` event (the same fields).
function renderGpus(gpu) {
  const gpus = (gpu && gpu.gpus) || [];
  $("vram-gpus").textContent = gpus.length
    ? gpus.map((g) => `GPU ${g.index}: ${g.used_mib} / ${g.total_mib} MiB used, ${g.total_mib - g.used_mib} free` + (g.utilization_pct === null ? "" : `, ${g.utilization_pct}% busy`)).join(" · ") + ` (${gpu.source})`
    : `${noGpu(gpu && gpu.detected)}: VRAM rules step aside`;
}

// `detected` says what was looked for; in auto mode it already reads "no GPU (…)".
function noGpu(detected) {
  if (!detected) return "no GPU";
  return /^no GPU\b/i.test(detected) ? detected : `no GPU (${detected})`;
}

// Whether a model is in memory. A backend that is not up cannot say: what was last
// seen there is not shown as "yes".
function loadedCell(m) {
  const backend = state.backends.get(m.backend);
  if (backend && backend.health !== "up") {
    return el("span", { class: "muted", title: backend.detail || "" }, backend.health === "down" ? "unknown (backend down)" : "unknown (backend not probed yet)");
  }
  if (m.loaded) return "yes";
  return el("span", { class: "muted" }, m.sleep_level ? `asleep (level ${m.sleep_level})` : "no");
}

function renderVram(v) {
  state.vram = v;
  renderGpus(v.gpu);
  const body = $("vram").tBodies[0];
  body.replaceChildren();
  for (const m of v.models || []) {
    body.append(el("tr", {},
      el("td", {}, m.backend),
      el("td", {}, m.model),
      el("td", {}, loadedCell(m)),
      el("td", { class: "num" }, m.memory_mib === null ? "–" : `${m.memory_mib} MiB`),
      el("td", { class: "num" }, m.load_secs === null ? "–" : `${m.load_secs.toFixed(1)} s`),
      el("td", { class: "num" }, m.wake_secs === null ? "–" : `${m.wake_secs.toFixed(2)} s`),
      el("td", { class: "num" }, String(m.in_flight)),
      el("td", {}, m.reserve ? "reserved" : ""),
    ));
  }
  const p = v.last_plan;
  $("vram-plan").textContent = p ? `Last plan (${fmt.when(p.at_ms)}): ${p.model} on ${p.backend}, ${p.plan.plan.replace("_", " ")}` + (p.plan.victims ? ` (${p.plan.victims.join(", ")})` : "") + ` — ${p.outcome}` : "";
}

async function loadVram() {
  renderVram(await api("/api/vram"));
}

// ---- MCP servers (/api/mcp) ------------------------------------------------------

function mcpState(st) {
  if (st.state === "failed") return `failed: ${st.why} (retry in ${st.retry_in_secs.toFixed(1)} s)`;
  if (st.state === "restarting") return `restarting (try ${st.attempt})`;
  return st.state;
}

async function loadMcp() {
  const data = await api("/api/mcp");
  const body = $("mcp").tBodies[0];
  body.replaceChildren();
  for (const s of data.servers || []) {
    body.append(el("tr", {},
      el("td", {}, s.name),
      el("td", {}, s.transport),
      el("td", {}, mcpState(s.state)),
      el("td", {}, s.tools.length ? s.tools.join(", ") : el("span", { class: "muted" }, "none")),
      el("td", { class: "num" }, String(s.calls)),
      el("td", { class: "num" }, String(s.errors)),
      el("td", {}, s.last_restart ? fmt.when(s.last_restart * 1000) : "–"),
    ));
  }
  if (!body.rows.length) {
    body.append(el("tr", {}, el("td", { colspan: "7", class: "muted" }, "no MCP server configured (mcp.servers in the config)")));
  }
}

// ---- Shadow comparisons (/api/shadow) ---------------------------------------------

async function loadShadow() {
  const data = await api("/api/shadow?limit=0");
  const body = $("shadow").tBodies[0];
  body.replaceChildren();
  const pct = (v) => (v == null ? "–" : `${Math.round(v * 100)}%`);
  const ms = (v) => (v == null ? "–" : `${v} ms`);
  for (const r of data.summary || []) {
    body.append(el("tr", {},
      el("td", {}, r.shadow_models.length ? `${r.shadow_backend} (${r.shadow_models.join(", ")})` : r.shadow_backend),
      el("td", {}, r.route),
      el("td", {}, r.kind || "–"),
      el("td", {}, r.primary_backend),
      el("td", { class: "num" }, String(r.samples)),
      el("td", { class: "num" }, String(r.compared)),
      el("td", { class: "num" }, pct(r.agreement)),
      el("td", { class: "num" }, r.mean_text_similarity == null ? "–" : r.mean_text_similarity.toFixed(2)),
      el("td", { class: "num" }, r.by_coverage ? `${r.primary_named - r.missed} of ${r.primary_named} named` : "–"),
      el("td", { class: "num" }, String(r.failed)),
      el("td", { class: "num" }, String(r.skipped)),
      el("td", { class: "num" }, `${ms(r.shadow_p50_ms)} / ${ms(r.primary_p50_ms)}`),
    ));
  }
  if (!body.rows.length) {
    body.append(el("tr", {}, el("td", { colspan: "12", class: "muted" }, "no samples (fan_out.mode: shadow)")));
  }
}

// ---- Routing evidence (/api/route-report) ---------------------------------------

// One bar per kind of request, as long as its share of the largest kind's tokens, split
// into what went local and what went to the cloud; the table under it has the figures.
async function loadRouteReport() {
  const data = await api("/api/route-report");
  const kinds = (data.by_kind || []).slice().sort((a, b) => b.all.tokens - a.all.tokens);
  const widest = Math.max(1, ...kinds.map((k) => k.all.tokens));
  const pct = (part, whole) => (whole ? `${Math.round((part / whole) * 100)}%` : "–");
  $("route-kinds").replaceChildren(...kinds.map((k) => {
    const cloud = k.all.tokens - k.local.tokens;
    const bar = el("div", { class: "kind-bar", style: `width: ${(k.all.tokens / widest) * 100}%` },
      el("span", { class: "kind-local", style: `flex-grow: ${k.local.tokens}` }),
      el("span", { class: "kind-cloud", style: `flex-grow: ${cloud}` }));
    return el("div", { class: "kind-row", "data-kind": k.kind, "data-local-tokens": String(k.local.tokens), "data-cloud-tokens": String(cloud),
      title: `${k.kind}: ${fmt.int(k.local.tokens)} tokens local, ${fmt.int(cloud)} to the cloud` },
      el("span", { class: "kind-name" }, k.kind), el("div", { class: "kind-track" }, bar),
      el("span", { class: "kind-share small" }, `${pct(k.local.tokens, k.all.tokens)} local`));
  }));
  if (!kinds.length) $("route-kinds").append(el("p", { class: "muted" }, "no requests in the history yet"));
  const body = $("route-report").tBodies[0];
  body.replaceChildren(...kinds.map((k) => el("tr", { "data-kind": k.kind },
    el("td", {}, k.kind),
    el("td", { class: "num" }, fmt.int(k.all.requests)),
    el("td", { class: "num" }, fmt.int(k.all.tokens)),
    el("td", { class: "num" }, `${fmt.int(k.local.tokens)} (${pct(k.local.tokens, k.all.tokens)})`),
    el("td", { class: "num" }, fmt.int(k.compared)),
    el("td", { class: "num" }, k.compared ? `${pct(k.agreed, k.compared)} of ${fmt.int(k.compared)}` : "–"),
  )));
  const suggested = data.suggested_local_threshold;
  $("route-suggestion").textContent = suggested === null || suggested === undefined
    ? `No threshold change suggested: each kind it would move needs ${data.bar.min_samples} compared shadow samples and ${Math.round(data.bar.min_agreement * 100)}% agreement (local_threshold is ${data.local_threshold}).`
    : `Suggested: routing.classifier.local_threshold ${data.local_threshold} → ${suggested} (glider route report --apply writes it).`;
}

// ---- Hot swap (/api/hotswap) -----------------------------------------------------

function swapOutcome(swap) {
  return swap.outcome === "ok"
    ? el("span", { class: "pill pill-ok" }, "ok")
    : el("span", {}, el("span", { class: "pill pill-down" }, "failed"), " ", el("span", { class: "problem small" }, swap.why || ""));
}

async function loadHotswap() {
  const data = await api("/api/hotswap");
  const swaps = data.swaps || [];
  const last = {};
  for (const swap of swaps) last[swap.module] = swap;
  $("hotswap").tBodies[0].replaceChildren(...(data.modules || []).map((module) => el("tr", { "data-module": module },
    el("td", {}, el("strong", {}, module)),
    el("td", { class: "num" }, String(data.versions?.[module] ?? 1)),
    el("td", {}, last[module] ? fmt.when(last[module].at_ms) : el("span", { class: "muted" }, "since start")),
    el("td", {}, last[module] ? swapOutcome(last[module]) : "–"),
  )));
  const recent = $("hotswap-recent").tBodies[0];
  recent.replaceChildren(...swaps.slice(-10).reverse().map((swap) => el("tr", { "data-module": swap.module },
    el("td", {}, fmt.when(swap.at_ms)),
    el("td", {}, swap.module),
    el("td", { class: "num" }, String(swap.version)),
    el("td", {}, swapOutcome(swap)),
  )));
  if (!recent.rows.length) {
    recent.append(el("tr", {}, el("td", { colspan: "4", class: "muted" }, "no reload yet")));
  }
}

async function resetBreaker(name) {
  try {
    await api(`/api/backends/${encodeURIComponent(name)}/reset`, { method: "POST" });
    await loadBackends();
  } catch (e) {
    alert(`Reset failed: ${e.message}`);
  }
}

// ---- delegate CLIs ---------------------------------------------------------------

function renderVendors(data) {
  const body = $("vendors").tBodies[0];
  body.replaceChildren(...data.vendors.map((v) => el("tr", { "data-vendor": v.vendor },
    el("td", {}, el("strong", {}, v.vendor)),
    el("td", {}, el("code", {}, v.flag)),
    el("td", {}, v.mode),
    el("td", {}, v.available ? el("span", { class: "pill pill-ok" }, v.version) : el("span", { class: "pill pill-down" }, "unavailable")),
    el("td", { class: "small" }, v.path || "–"),
    el("td", { class: "problem small" }, v.problem || ""),
  )));
  $("discover-result").textContent = data.discovered_at_ms ? `found at ${fmt.time(data.discovered_at_ms)}` : "not looked for yet";
}

async function loadVendors() {
  renderVendors(await api("/api/vendors"));
}

async function discoverVendors() {
  $("discover-result").textContent = "looking…";
  try {
    renderVendors(await api("/api/vendors/discover", { method: "POST" }));
  } catch (e) {
    $("discover-result").textContent = `Failed: ${e.message}`;
  }
}

// ---- requests --------------------------------------------------------------------

function statusCell(r) {
  if (r.live) return el("td", {}, el("span", { class: "pill pill-wait" }, "in flight"));
  const code = r.status;
  const kind = code >= 200 && code < 400 ? "ok" : code === 499 ? "gone" : "err";
  return el("td", { class: "status", title: r.error || "" }, el("span", { class: `pill pill-${kind}` }, String(code)), r.error ? el("div", { class: "problem small" }, r.error) : null);
}

// What was fitted for a local model, one change a line: the fit phase's `fitted`
// (tools cut, output cap, system text trimmed, images replaced) and bounded context's
// `context_left_out` (earlier turns left out, the continuity record given instead).
function fittedLines(r) {
  const lines = (r.fitted || []).map((line) => `fitted: ${line}`);
  for (const c of r.context_left_out || []) {
    if (!c.turns) continue;
    const record = c.record_tokens ? `, continuity record given instead (~${fmt.int(c.record_tokens)} tokens)` : "";
    lines.push(`fitted: ${c.backend}: ${c.turns} earlier turn${c.turns === 1 ? "" : "s"} left out (~${fmt.int(c.tokens)} tokens)${record}`);
  }
  if (!lines.length) return null;
  return el("ul", { class: "small fitted" }, lines.map((line) => el("li", {}, line)));
}

function requestRow(key, r) {
  // The backends that failed before the one that answered; a request that failed
  // names them in its error already (the Status column), so they are not said twice.
  const before = (r.fallbacks || []).filter((f) => !(r.error || "").includes(f));
  const fallbacks = before.length ? el("div", { class: "small problem" }, `after: ${before.join("; ")}`) : null;
  // What the fit phase changed for a local model (the record's `fitted`).
  const fitted = fittedLines(r);
  const toolRuns = (r.tool_calls || []).length ? el("div", { class: "small muted", title: r.tool_calls.map((c) => `${c.turn}. ${c.tool} ${c.arguments}${c.error ? ` — ${c.error}` : ""}`).join("\n") }, `tools run by Glider: ${r.tool_calls.map((c) => c.ok ? c.tool : `${c.tool} (failed)`).join(", ")}`) : null;
  return el("tr", { "data-key": key, "data-id": r.id, class: r.live ? "live" : "" },
    el("td", { class: "mono" }, fmt.time(r.started_at_ms)),
    el("td", { class: "small clip", title: r.client || "" }, r.client || "–"),
    el("td", {}, r.front),
    el("td", { class: "mono" }, r.model_requested || "–"),
    el("td", { class: "mono" }, r.model_used || "–"),
    el("td", {}, r.backend || "–", r.backend && r.local !== null && r.local !== undefined ? el("span", { class: `tag ${r.local ? "local" : "cloud"}` }, r.local ? "local" : "cloud") : null, fallbacks),
    el("td", { title: r.reason || "" }, r.rule || "–", r.reason && r.reason !== r.error ? el("div", { class: "small muted" }, r.reason) : null, fitted, toolRuns),
    el("td", { class: "num" }, r.live ? `~${fmt.int(r.estimated_tokens)}` : fmt.int(fmt.tokensIn(r.usage))),
    el("td", { class: "num" }, r.live ? "–" : fmt.int(r.usage && r.usage.output_tokens)),
    el("td", { class: "num" }, fmt.ms(r.ttft_ms)),
    el("td", { class: "num" }, fmt.ms(r.total_ms)),
    statusCell(r),
  );
}

function renderRequests() {
  const rows = [...state.rows.entries()].sort((a, b) => {
    if (a[1].live !== b[1].live) return a[1].live ? -1 : 1;
    return (b[1].seq || 0) - (a[1].seq || 0) || b[1].started_at_ms - a[1].started_at_ms;
  });
  const body = $("requests").tBodies[0];
  body.replaceChildren(...rows.map(([key, r]) => requestRow(key, r)));
  $("requests-empty").hidden = rows.length > 0;
  $("sum-inflight").textContent = rows.filter(([, r]) => r.live).length;
}

function trimRows() {
  const finished = [...state.rows.entries()].filter(([, r]) => !r.live).sort((a, b) => b[1].seq - a[1].seq);
  for (const [key] of finished.slice(MAX_ROWS)) state.rows.delete(key);
}

async function loadRequests() {
  const page = await api("/api/requests?limit=100");
  state.rows.clear();
  for (const r of page.in_flight) state.rows.set(`live:${r.id}`, Object.assign({ live: true }, r));
  for (const r of page.requests) state.rows.set(`seq:${r.seq}`, r);
  state.oldest = page.next_before;
  $("older").hidden = !state.oldest;
  renderRequests();
}

async function loadOlder() {
  if (!state.oldest) return;
  const page = await api(`/api/requests?limit=100&before=${state.oldest}`);
  for (const r of page.requests) state.rows.set(`seq:${r.seq}`, r);
  state.oldest = page.next_before;
  $("older").hidden = !state.oldest;
  renderRequests();
}

// ---- totals ----------------------------------------------------------------------

function statsRows(table, groups) {
  const body = $(table).tBodies[0];
  body.replaceChildren();
  for (const [name, g] of Object.entries(groups)) {
    const lat = g.latency_ms ? `${fmt.ms(g.latency_ms.p50)} / ${fmt.ms(g.latency_ms.p90)}` : "–";
    body.append(el("tr", { "data-group": name },
      el("td", {}, name),
      el("td", { class: "num" }, fmt.int(g.requests)),
      el("td", { class: "num" + (g.errors ? " problem" : "") }, fmt.int(g.errors)),
      el("td", { class: "num" }, fmt.int(g.tokens_in)),
      el("td", { class: "num" }, fmt.int(g.tokens_out)),
      el("td", { class: "num" }, fmt.share(g.local_share)),
      el("td", { class: "num" }, lat),
      el("td", { class: "num" }, g.ttft_ms ? fmt.ms(g.ttft_ms.p50) : "–"),
      el("td", { class: "num", title: savedTitle(g.saved) }, g.saved && g.saved.requests ? fmt.usd(g.saved.cost_usd) : "–"),
    ));
  }
}

function savedTitle(saved) {
  if (!saved || !saved.requests) return "";
  const unpriced = saved.unpriced ? `; ${saved.unpriced} of them asked for a model with no price` : "";
  return `${saved.requests} answered locally: ${fmt.int(saved.tokens_in)} tokens in, ${fmt.int(saved.tokens_out)} out${unpriced}`;
}

async function loadStats() {
  const s = await api("/api/stats");
  const t = s.totals;
  $("sum-requests").textContent = fmt.int(t.requests);
  $("sum-local").textContent = fmt.share(t.local_share);
  $("sum-errors").textContent = fmt.int(t.errors);
  $("sum-tokens").textContent = `${fmt.int(t.tokens_in)} / ${fmt.int(t.tokens_out)}`;
  $("sum-latency").textContent = t.latency_ms ? `${fmt.ms(t.latency_ms.p50)} / ${fmt.ms(t.latency_ms.p90)}` : "–";
  $("sum-saved-tokens").textContent = fmt.int(t.saved.tokens_in + t.saved.tokens_out);
  $("sum-saved-cost").textContent = fmt.usd(t.saved.cost_usd);
  $("summary-since").textContent = `since Glider started at ${fmt.when(s.since_ms)} (this run; the charts below read the history on disk)`;
  statsRows("by-backend", s.backends);
  statsRows("by-route", s.routes);
  state.stats = s;
  if (state.sessions) renderSessions();
}

// ---- charts ----------------------------------------------------------------------

const COLORS = { requests: "#2f6fde", local: "#1f8a4c", p50: "#2f6fde", p90: "#b7791f", p99: "#c53030", tokens: "#6a3bb5", cost: "#1f8a4c" };

function chartWidth(target) {
  return Math.max(280, target.clientWidth || 400);
}

// The time each chart spans: the series' own [from, to), so the bucket in progress is
// not drawn on the edge.
const spans = {};
const spanOf = (name) => () => spans[name];

// Draw `name` into its box (over `series`' time span), or give the chart it already
// has new data.
function drawChart(name, options, data, series) {
  spans[name] = [series.from_ms / 1000, series.to_ms / 1000];
  options.scales = Object.assign({ x: { time: true, range: spanOf(name) } }, options.scales);
  const target = $(`chart-${name}`);
  // What the first series adds up to: lets a reader (and the browser test) see that the
  // chart holds the ledger's numbers, not only axes.
  target.dataset.sum = data[1].reduce((sum, v) => sum + (v || 0), 0);
  const chart = state.charts[name];
  if (chart) {
    chart.setData(data);
    return;
  }
  state.charts[name] = new uPlot(Object.assign({ width: chartWidth(target), height: 190, legend: { live: false } }, options), data, target);
}

const seconds = (points) => points.map((p) => p.t_ms / 1000);
// Buckets between gaps are single points: draw each one, so a lone minute shows.
const DOTS = { show: true, size: 5 };

function drawActivity(series) {
  const p = series.points;
  drawChart("requests", {
    series: [{}, { label: "requests", stroke: COLORS.requests, fill: "rgba(47,111,222,.12)", width: 1.5 },
      { label: "local %", stroke: COLORS.local, scale: "%", width: 1.5, points: DOTS, value: (u, v) => (v === null ? "–" : `${Math.round(v)}%`) }],
    scales: { "%": { range: [0, 100] } },
    axes: [{}, { label: "requests" }, { scale: "%", side: 1, grid: { show: false }, values: (u, ticks) => ticks.map((v) => `${v}%`) }],
  }, [seconds(p), p.map((x) => x.requests), p.map((x) => (x.local_share === null ? null : x.local_share * 100))], series);
  const latency = (q) => p.map((x) => (x.latency_ms ? x.latency_ms[q] : null));
  drawChart("latency", {
    series: [{}, { label: "p50", stroke: COLORS.p50, width: 1.5, points: DOTS }, { label: "p90", stroke: COLORS.p90, width: 1.5, points: DOTS },
      { label: "p99", stroke: COLORS.p99, width: 1.5, points: DOTS }],
    axes: [{}, { size: 64, values: (u, ticks) => ticks.map((v) => fmt.ms(v)) }],
  }, [seconds(p), latency("p50"), latency("p90"), latency("p99")], series);
}

function drawSaved(days) {
  const p = days.points;
  drawChart("saved", {
    series: [{ value: (u, v) => (v === null ? "–" : new Date(v * 1000).toISOString().slice(0, 10)) },
      { label: "tokens saved", stroke: COLORS.tokens, fill: "rgba(106,59,181,.35)", paths: uPlot.paths.bars({ size: [0.6, 40] }), points: { show: false } },
      { label: "cost avoided", stroke: COLORS.cost, scale: "usd", width: 2, value: (u, v) => (v === null ? "–" : fmt.usd(v)) }],
    scales: { usd: { range: (u, min, max) => [0, Math.max(max, 0.01)] } },
    axes: [{ values: (u, ticks) => ticks.map((v) => new Date(v * 1000).toISOString().slice(5, 10)) }, { label: "tokens" },
      { scale: "usd", side: 1, size: 64, grid: { show: false }, values: (u, ticks) => ticks.map((v) => fmt.usd(v)) }],
  }, [seconds(p), p.map((x) => x.saved.tokens_in + x.saved.tokens_out), p.map((x) => x.saved.cost_usd)], days);
}

async function loadCharts() {
  if (typeof uPlot === "undefined") throw new Error("the chart library (/assets/uplot.js) did not load");
  const [minutes, days] = await Promise.all([api("/api/stats/series?bucket=60s&window=1h"), api("/api/stats/series?bucket=1d&window=30d")]);
  drawActivity(minutes);
  drawSaved(days);
}

let chartsTimer = null;
function refreshChartsSoon() {
  if (chartsTimer) return;
  chartsTimer = setTimeout(() => { chartsTimer = null; loadCharts().catch(showError); }, 1000);
}

window.addEventListener("resize", () => {
  for (const [name, chart] of Object.entries(state.charts)) {
    chart.setSize({ width: chartWidth($(`chart-${name}`)), height: 190 });
  }
});

let statsTimer = null;
function refreshStatsSoon() {
  if (statsTimer) return;
  statsTimer = setTimeout(() => { statsTimer = null; loadStats().catch(showError); }, 300);
}

// ---- sessions --------------------------------------------------------------------

function sessionSaved(id) {
  const totals = state.stats && state.stats.sessions ? state.stats.sessions[id] : null;
  return totals ? totals.saved : null;
}

function renderSessions() {
  const list = state.sessions || [];
  const body = $("sessions").tBodies[0];
  body.replaceChildren(...list.map((s) => {
    const saved = sessionSaved(s.session);
    return el("tr", { "data-session": s.session, class: "clickable" + (s.session === state.selected ? " selected" : ""), onclick: () => selectSession(s.session) },
      el("td", { class: "mono clip-wide", title: s.session }, s.session),
      el("td", {}, fmt.when(s.first_ms)),
      el("td", {}, fmt.when(s.last_ms)),
      el("td", { class: "num" }, fmt.int(s.requests)),
      el("td", { class: "num" }, fmt.int(s.events)),
      el("td", { class: "num" }, saved && saved.requests ? fmt.int(saved.tokens_in + saved.tokens_out) : "–"),
      el("td", { class: "num" }, saved && saved.requests ? fmt.usd(saved.cost_usd) : "–"),
    );
  }));
  $("sessions-empty").hidden = list.length > 0;
}

async function loadSessions() {
  const notice = $("sessions-notice");
  try {
    const data = await api("/api/context/sessions");
    // A read error is over once a read succeeds; what a forget said stays.
    if (notice.dataset.kind === "error") notice.hidden = true;
    state.sessions = data.sessions;
  } catch (e) {
    // The log is off (context.enabled: false) or unreadable: say so in the view.
    state.sessions = [];
    notice.hidden = false;
    notice.dataset.kind = "error";
    notice.textContent = e.message;
  }
  renderSessions();
}

let sessionsTimer = null;
function refreshSessionsSoon() {
  if (sessionsTimer) return;
  sessionsTimer = setTimeout(() => { sessionsTimer = null; loadSessions().catch(showError); }, 300);
}

const opPast = { read: "read", edited: "edited", written: "written", created: "created", deleted: "deleted" };

function stepRow(step) {
  const where = step.backend
    ? [step.backend, step.local === null || step.local === undefined ? null : el("span", { class: `tag ${step.local ? "local" : "cloud"}` }, step.local ? "local" : "cloud")]
    : el("span", { class: "muted" }, "no answer yet");
  const status = step.status === null || step.status === undefined ? el("span", { class: "pill pill-wait" }, "open")
    : el("span", { class: `pill pill-${step.status >= 200 && step.status < 400 ? "ok" : step.status === 499 ? "gone" : "err"}` }, String(step.status));
  return el("tr", { class: "step", "data-local": step.local ? "true" : "false" },
    el("td", { class: "mono" }, fmt.time(step.at_ms)),
    el("td", { class: "mono" }, step.model),
    el("td", {}, where),
    el("td", { title: step.reason || "" }, step.rule),
    el("td", { class: "num" }, fmt.int(step.input_tokens)),
    el("td", { class: "num" }, fmt.int(step.output_tokens)),
    el("td", { class: "small" }, step.budget_stop ? el("span", { class: "pill pill-err", title: step.budget_stop.tool ? `${step.budget_stop.tool} ×${step.budget_stop.repeats}` : "" }, `loop stopped: ${step.budget_stop.limit}`)
      : step.tool_calls.length ? step.tool_calls.join(", ") : el("span", { class: "muted" }, step.stop_reason || "")),
    el("td", {}, status),
  );
}

// An episode's title: the user's words that began it, without Claude Code's notes.
function goalLine(goal) {
  if (!goal) return null;
  const words = userWords(goal);
  if (!words) return el("div", { class: "goal muted" }, "(the turn held only Claude Code's <system-reminder> notes)");
  return el("div", { class: "goal", title: words.length > 400 ? words : "" }, words.length > 400 ? `${words.slice(0, 400)}…` : words);
}

function renderEpisodes(episodes) {
  const box = $("episodes");
  if (!episodes.length) {
    box.replaceChildren(el("p", { class: "empty" }, "No episodes recorded."));
    return;
  }
  box.replaceChildren(...episodes.map((ep, i) => el("div", { class: "episode", "data-family": ep.family },
    el("div", { class: "episode-head" },
      el("strong", {}, `Episode ${i + 1}`), " ", el("span", { class: "muted small" }, `${fmt.when(ep.started_ms)} · ${ep.steps.length} request${ep.steps.length === 1 ? "" : "s"}`),
      goalLine(ep.goal)),
    el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, ["Time", "Model", "Answered by", "Rule", "Tokens in", "Tokens out", "Tools called", "Status"].map((h, j) => el("th", { class: j === 4 || j === 5 ? "num" : "" }, h)))),
      el("tbody", {}, ep.steps.map(stepRow))),
    (ep.delegate_runs || []).length ? el("ul", { class: "delegate-runs small" }, ep.delegate_runs.map((r) =>
      el("li", {}, `${fmt.time(r.at_ms)} delegate run: ${r.vendor}, ${r.exit_code === null ? (r.error || "did not exit") : `exit ${r.exit_code}`}, ${fmt.int(r.duration_ms)} ms`))) : null,
  )));
}

function renderFiles(files) {
  const body = $("session-files").tBodies[0];
  body.replaceChildren(...files.map((f) => {
    const last = f.changes[f.changes.length - 1];
    return el("tr", { "data-path": f.path },
      el("td", { class: "mono" }, f.path),
      el("td", {}, el("span", { class: `op op-${last ? last.op : "none"}` }, last ? opPast[last.op] || last.op : "–")),
      el("td", { class: "small muted" }, f.changes.map((c) => `${opPast[c.op] || c.op} ${fmt.time(c.at_ms)}`).join(" → ")),
    );
  }));
  if (!files.length) body.append(el("tr", {}, el("td", { colspan: 3, class: "muted" }, "none seen")));
}

function renderCommands(commands) {
  const body = $("session-commands").tBodies[0];
  body.replaceChildren(...commands.map((c) => {
    const code = c.exit_code === null || c.exit_code === undefined ? null : c.exit_code;
    // A command is listed once its result was read: not failed means it succeeded,
    // whether or not the result printed an exit code (Claude Code's Bash prints one
    // only on failure).
    const outcome = c.failed ? el("span", { class: "pill pill-err" }, code === null ? "failed" : `exit ${code}`)
      : el("span", { class: "pill pill-ok", title: code === null ? "the result showed no exit code" : "" }, code === null ? "succeeded" : `exit ${code}`);
    return el("tr", { "data-command": c.command },
      el("td", { class: "mono clip-wide", title: c.command }, c.command),
      el("td", {}, outcome),
      el("td", { class: "mono" }, fmt.time(c.at_ms)),
    );
  }));
  if (!commands.length) body.append(el("tr", {}, el("td", { colspan: 3, class: "muted" }, "none seen")));
}

function renderErrors(errors) {
  const open = errors.filter((e) => !e.closed_ms);
  const body = $("session-errors").tBodies[0];
  body.replaceChildren(...open.map((e) => el("tr", { class: "open-error" },
    el("td", { class: "mono" }, e.subject),
    el("td", { class: "problem small" }, e.reason),
    el("td", { class: "mono" }, fmt.time(e.opened_ms)),
  )));
  if (!open.length) body.append(el("tr", {}, el("td", { colspan: 3, class: "muted" }, "none open")));
  const closed = errors.length - open.length;
  $("errors-closed").textContent = closed ? `${closed} closed by a later success` : "";
}

// The continuity record as the local model receives it (the text the running server
// holds for the session's next local request, else the one rebuilt from the log), and
// what was left out of it and why: the counts its headings carry, and the sections the
// token budget dropped whole (`record` is /api/context/sessions/{id}'s `record`).
function recordLeftOut(record, text) {
  const counted = (title, what) => {
    const found = text.match(new RegExp(`${title.replace(/[()]/g, "\\$&")}; (\\d+) ${what} left out\\)`));
    return found ? Number(found[1]) : 0;
  };
  const out = [];
  const goals = counted("Goals, in the user's words (oldest first", "earlier");
  if (goals) out.push(`${goals} earlier goal${goals === 1 ? "" : "s"}: the newest are kept within 8 KiB of goals and the token budget`);
  const files = counted("Files (latest known state, newest first", "more");
  if (files) out.push(`${files} file${files === 1 ? "" : "s"} touched longer ago: at most 40 are listed, fewer when the token budget is reached`);
  const errors = counted("Open errors (newest last", "older");
  if (errors) out.push(`${errors} older open error${errors === 1 ? "" : "s"}: at most 12 are listed, the newest kept first`);
  if ((record.recent || []).length && !text.includes("Last exchanges:")) {
    out.push(`the last ${record.recent.length} exchange${record.recent.length === 1 ? "" : "s"}: left out first to fit the token budget`);
  }
  if ((record.decisions || []).length && !text.includes("What the assistant said when each task ended")) {
    out.push(`the assistant's closing words of ${record.decisions.length} task${record.decisions.length === 1 ? "" : "s"}: left out to fit the token budget`);
  }
  if (text.includes("(record cut to its token budget)")) out.push("the end of the text: cut at the token budget");
  return out;
}

function renderRecord(record) {
  const text = record.live || record.text || "";
  const left = recordLeftOut(record, text);
  return [
    el("p", { class: "small muted" }, record.live
      ? "The text the running Glider holds for this session's next local request:"
      : "The text a local model taking this session over would receive (rebuilt from the context log):"),
    el("pre", { class: "record-text", id: "record-text" }, text),
    el("h4", {}, "Left out"),
    left.length
      ? el("ul", { id: "record-left-out", class: "small" }, left.map((line) => el("li", {}, line)))
      : el("p", { id: "record-left-out", class: "small muted" }, "nothing: the whole record fits its token budget (context.record_max_tokens)"),
  ];
}

// The user's words of a turn: Claude Code puts `<system-reminder>` blocks (its own
// notes to the model) into the user's message; they are not what the user typed.
function userWords(text) {
  const words = String(text || "").replace(/<system-reminder>[\s\S]*?(<\/system-reminder>|$)/g, "").trim();
  return words;
}

// `view`: the session's summary fields (`session`, `first_ms`, `last_ms`, `events`,
// `requests`), its `graph`, and its `record` when the context log has one.
function renderSession(view) {
  const s = view;
  $("session").hidden = false;
  $("session-title").textContent = s.session;
  $("session-result").textContent = "";
  const saved = sessionSaved(s.session);
  $("session-meta").textContent = `first seen ${fmt.when(s.first_ms)} · last active ${fmt.when(s.last_ms)} · ${fmt.int(s.requests)} requests · ${fmt.int(s.events)} events`
    + (saved && saved.requests ? ` · answered locally: ${saved.requests} (${fmt.int(saved.tokens_in + saved.tokens_out)} tokens, ${fmt.usd(saved.cost_usd)} avoided)` : "");
  const record = $("session-record");
  record.hidden = view.record === undefined || view.record === null;
  if (!record.hidden) $("record-body").replaceChildren(...renderRecord(view.record));
  const g = view.graph;
  renderEpisodes(g.episodes);
  renderFiles(g.files);
  renderCommands(g.commands);
  renderErrors(g.errors);
}

async function loadSession(id) {
  try {
    renderSession(await api(`/api/context/sessions/${encodeURIComponent(id)}`));
  } catch (e) {
    if (e.status === 404 && state.selected === id) {
      clearSession(`Session ${id} is no longer in the context log.`);
    } else {
      throw e;
    }
  }
}

function clearSession(message) {
  state.selected = null;
  $("session").hidden = true;
  const notice = $("sessions-notice");
  notice.hidden = !message;
  notice.dataset.kind = "info";
  notice.textContent = message || "";
  renderSessions();
}

function selectSession(id) {
  state.selected = id;
  renderSessions();
  loadSession(id).catch(showError);
}

let sessionTimer = null;
function refreshSessionSoon() {
  if (sessionTimer) return;
  sessionTimer = setTimeout(() => {
    sessionTimer = null;
    if (state.selected) loadSession(state.selected).catch(showError);
  }, 300);
}

async function forgetSession() {
  const id = state.selected;
  if (!id) return;
  if (!confirm(`Forget session ${id}? Its events are deleted from the context log; this cannot be undone.`)) return;
  try {
    const r = await api(`/api/context/sessions/${encodeURIComponent(id)}`, { method: "DELETE" });
    clearSession(`Forgot ${id} (${r.deleted} events deleted).`);
    await loadSessions();
  } catch (e) {
    $("session-result").textContent = `Not forgotten: ${e.message}`;
  }
}

// ---- views -----------------------------------------------------------------------

function showView() {
  const name = location.hash === "#sessions" ? "sessions" : "overview";
  state.view = name;
  for (const view of ["overview", "sessions"]) $(`view-${view}`).hidden = view !== name;
  for (const tab of document.querySelectorAll("#tabs a")) tab.classList.toggle("active", tab.dataset.view === name);
  if (name === "sessions") loadSessions().catch(showError);
  // A chart drawn while hidden has no width: fit them to the view now shown.
  if (name === "overview") window.dispatchEvent(new Event("resize"));
}

// ---- config ----------------------------------------------------------------------

function yaml(value, indent) {
  const pad = "  ".repeat(indent);
  if (Array.isArray(value)) {
    if (!value.length) return " []";
    return value.map((v) => {
      const inner = yaml(v, indent + 1);
      return `\n${pad}-${typeof v === "object" && v !== null && !Array.isArray(v) ? inner.replace(/^\n\s*/, " ") : inner}`;
    }).join("");
  }
  if (value && typeof value === "object") {
    const keys = Object.keys(value);
    if (!keys.length) return " {}";
    return keys.map((k) => `\n${pad}${k}:${yaml(value[k], indent + 1)}`).join("");
  }
  return ` ${value === null ? "null" : JSON.stringify(value)}`;
}

async function loadConfig() {
  const c = await api("/api/config");
  $("config-path").textContent = c.path ? c.path : "embedded default profile";
  $("config").textContent = yaml(c.running, 0).replace(/^\n/, "");
  const r = c.restart;
  const box = $("restart");
  box.className = "restart";
  if (r.file === "none") {
    box.textContent = "Running the embedded default profile: nothing on disk to compare. Start with -c FILE to edit a config.";
  } else if (r.file === "invalid") {
    box.className = "restart warn";
    box.textContent = `The file on disk does not load (the running config stays): ${r.error}`;
  } else if (r.pending.length) {
    box.className = "restart warn";
    box.replaceChildren(el("strong", {}, "Restart needed: "), `the file changes ${r.pending.join("; ")}. These keys keep their running values until Glider restarts.`);
  } else if (r.reload_pending) {
    box.className = "restart warn";
    box.textContent = "The file has changes not applied yet: reload to apply them.";
  } else {
    box.className = "restart ok";
    box.textContent = "The running config matches the file; nothing needs a restart.";
  }
  box.append(el("div", { class: "small muted" }, `Restart-only keys: ${c.restart_only.join(", ")}. Everything else applies live.`));
}

async function reloadConfig() {
  const out = $("reload-result");
  try {
    const r = await api("/api/config/reload", { method: "POST" });
    out.textContent = r.outcome === "applied" ? "Applied." : "No change.";
  } catch (e) {
    out.textContent = `Not applied: ${e.message}`;
  }
  loadConfig().catch(showError);
  loadHotswap().catch(showError);
}

// ---- status ----------------------------------------------------------------------

async function loadStatus() {
  const s = await api("/api/status");
  $("version").textContent = `v${s.version}`;
  $("doors").replaceChildren(...s.doors.map((d) => el("span", { class: "door" }, `${d.name} `, el("code", {}, d.url))));
  $("footer").textContent = `GLIDER_HOME ${s.glider_home} · history ${s.history.dir} (${fmt.int(s.history.written)} written${s.history.errors ? `, ${s.history.errors} errors: ${s.history.last_error}` : ""})`;
}

// ---- live ------------------------------------------------------------------------

function setConn(kind, text) {
  const pill = $("conn");
  pill.className = `pill pill-${kind}`;
  pill.textContent = text + (state.dropped ? ` · ${state.dropped} dropped` : "");
}

function showError(e) {
  const n = $("notice");
  n.hidden = false;
  n.textContent = e.message || String(e);
}

function onEvent(event) {
  switch (event.type) {
    case "hello":
      break;
    case "request_started":
      state.rows.set(`live:${event.request.id}`, Object.assign({ live: true }, event.request));
      renderRequests();
      break;
    case "request_finished": {
      const r = event.request;
      state.rows.delete(`live:${r.id}`);
      state.rows.set(`seq:${r.seq}`, r);
      trimRows();
      renderRequests();
      refreshStatsSoon();
      refreshChartsSoon();
      // A local reply may be a new speed sample, and so a new cap.
      if (r.local) refreshFitSoon();
      // The routing evidence reads the history on disk: read again only after a
      // request finished, and at most every 10 s (the interval below).
      state.routeReportStale = true;
      break;
    }
    case "backend_state_changed": {
      const prior = state.backends.get(event.backend.backend) || {};
      state.backends.set(event.backend.backend, Object.assign({}, prior, event.backend));
      renderBackends();
      break;
    }
    case "vram":
      // A sample carries the GPUs itself; a plan, load or unload changes the models.
      if (event.event === "sample") renderGpus(event);
      else loadVram().catch(showError);
      break;
    case "config_reloaded":
      loadConfig().catch(showError);
      loadBackends().catch(showError);
      loadHotswap().catch(showError);
      loadFit().catch(showError);
      break;
    case "session":
      if (state.sessions) refreshSessionsSoon();
      if (event.session === state.selected) {
        if (event.change === "forgotten") clearSession(`Session ${event.session} was forgotten.`);
        else refreshSessionSoon();
      }
      break;
    case "dropped":
      state.dropped += event.count;
      setConn("ok", "live");
      // Our view has a hole: read the list again.
      loadRequests().catch(showError);
      refreshStatsSoon();
      break;
  }
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/ws`);
  state.socket = socket;
  socket.onopen = () => {
    state.retry = 0;
    setConn("ok", "live");
    $("notice").hidden = true;
    // Read everything after the socket is open, so nothing falls between the two.
    Promise.all([loadStatus(), loadBackends(), loadFit(), loadVram(), loadMcp(), loadShadow(), loadRouteReport(), loadHotswap(), loadVendors(), loadRequests(), loadStats(), loadConfig(), loadCharts()]).catch(showError);
    if (state.view === "sessions") {
      loadSessions().catch(showError);
      if (state.selected) loadSession(state.selected).catch(showError);
    }
  };
  socket.onmessage = (message) => {
    try { onEvent(JSON.parse(message.data)); } catch (e) { showError(e); }
  };
  socket.onclose = () => {
    if (state.socket !== socket) return;
    state.retry = Math.min(state.retry + 1, 5);
    setConn("down", "reconnecting");
    setTimeout(connect, 500 * state.retry);
  };
}

$("older").addEventListener("click", () => loadOlder().catch(showError));
$("reload").addEventListener("click", reloadConfig);
$("discover").addEventListener("click", discoverVendors);
$("forget").addEventListener("click", forgetSession);
window.addEventListener("hashchange", showView);
showView();
setInterval(() => { if (document.visibilityState === "visible") loadStatus().catch(() => {}); }, 10000);
setInterval(() => { if (document.visibilityState === "visible") loadMcp().catch(() => {}); }, 5000);
setInterval(() => { if (document.visibilityState === "visible") loadShadow().catch(() => {}); }, 5000);
setInterval(() => {
  if (document.visibilityState !== "visible" || state.view !== "overview" || !state.routeReportStale) return;
  state.routeReportStale = false;
  loadRouteReport().catch(() => {});
}, 10000);
setInterval(() => { if (document.visibilityState === "visible") loadHotswap().catch(() => {}); }, 5000);
// A window the health probe discovers changes the caps too.
setInterval(() => { if (document.visibilityState === "visible") loadFit().catch(() => {}); }, 10000);
// The charts' buckets move on with time even when no request finishes.
setInterval(() => { if (document.visibilityState === "visible" && state.view === "overview") loadCharts().catch(() => {}); }, 30000);
connect();
