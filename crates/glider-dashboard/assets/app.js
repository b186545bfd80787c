// Glider dashboard: reads /api/* once, then follows /ws. No framework, no build step.
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
};

// ---- backends --------------------------------------------------------------------

function renderBackends() {
  const body = $("backends").tBodies[0];
  body.replaceChildren();
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
  return el("td", { title: r.error || "" }, el("span", { class: `pill pill-${kind}` }, String(code)), r.error ? el("div", { class: "problem small" }, r.error) : null);
}

function requestRow(key, r) {
  const fallbacks = (r.fallbacks || []).length ? el("div", { class: "small problem" }, `after: ${r.fallbacks.join("; ")}`) : null;
  return el("tr", { "data-key": key, "data-id": r.id, class: r.live ? "live" : "" },
    el("td", { class: "mono" }, fmt.time(r.started_at_ms)),
    el("td", { class: "small clip", title: r.client || "" }, r.client || "–"),
    el("td", {}, r.front),
    el("td", { class: "mono" }, r.model_requested || "–"),
    el("td", { class: "mono" }, r.model_used || "–"),
    el("td", {}, r.backend || "–", r.backend && r.local !== null && r.local !== undefined ? el("span", { class: `tag ${r.local ? "local" : "cloud"}` }, r.local ? "local" : "cloud") : null, fallbacks),
    el("td", { title: r.reason || "" }, r.rule || "–", r.reason ? el("div", { class: "small muted" }, r.reason) : null),
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
    ));
  }
}

async function loadStats() {
  const s = await api("/api/stats");
  const t = s.totals;
  $("sum-requests").textContent = fmt.int(t.requests);
  $("sum-local").textContent = fmt.share(t.local_share);
  $("sum-errors").textContent = fmt.int(t.errors);
  $("sum-tokens").textContent = `${fmt.int(t.tokens_in)} / ${fmt.int(t.tokens_out)}`;
  $("sum-latency").textContent = t.latency_ms ? `${fmt.ms(t.latency_ms.p50)} / ${fmt.ms(t.latency_ms.p90)}` : "–";
  statsRows("by-backend", s.backends);
  statsRows("by-route", s.routes);
}

let statsTimer = null;
function refreshStatsSoon() {
  if (statsTimer) return;
  statsTimer = setTimeout(() => { statsTimer = null; loadStats().catch(showError); }, 300);
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
      break;
    }
    case "backend_state_changed": {
      const prior = state.backends.get(event.backend.backend) || {};
      state.backends.set(event.backend.backend, Object.assign({}, prior, event.backend));
      renderBackends();
      break;
    }
    case "config_reloaded":
      loadConfig().catch(showError);
      loadBackends().catch(showError);
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
    Promise.all([loadStatus(), loadBackends(), loadVendors(), loadRequests(), loadStats(), loadConfig()]).catch(showError);
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
setInterval(() => { if (document.visibilityState === "visible") loadStatus().catch(() => {}); }, 10000);
connect();
