//! The configuration schema. Every field has a default, so an empty file is a valid
//! (if useless) config; unknown keys are errors, so a typo is caught at load.
//!
//! One file past 600 lines on purpose: it is the schema's core sections side by side
//! (server, backends, fit, routing, context, delegate, mitm …), each a struct with its
//! defaults, and `Config::problems` over all of them, read as one list against
//! docs/configuration.md (`crates/glider-config/tests/configuration_doc.rs`); the
//! sections added since are files of their own (`fan_out.rs`, `mcp.rs`, `plugins.rs`,
//! `pricing.rs`, `tools.rs`, `vram.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// The embedded default profile (`configs/glider.yaml`), used when no file is given.
pub const DEFAULT_PROFILE: &str = include_str!("../../../configs/glider.yaml");

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Ports and listeners (restart-only).
    pub server: ServerConfig,
    /// Log filter, e.g. `info` or `glider=debug` (hot).
    pub log_level: Option<String>,
    /// Model servers Glider can send requests to, in preference order (hot).
    pub backends: Vec<BackendConfig>,
    /// Client model name → model name Glider asks for instead (hot). A key may be a
    /// `*` pattern (`claude-*`); an exact key wins, then the longest matching pattern.
    pub model_aliases: BTreeMap<String, String>,
    /// How a request picks its backend (hot).
    pub routing: RoutingConfig,
    /// Prompt rewriting for local backends, off by default (hot).
    pub transform: TransformConfig,
    /// History bound for local requests (hot) and the context log (its store's settings
    /// are restart-only).
    pub context: ContextConfig,
    /// Fitting a request to a local model: tool reduction, output cap, what the model
    /// cannot take (hot; see docs/local-models.md).
    pub fit: FitConfig,
    /// The TLS-intercepting proxy (its ports, CA, hosts, transparent settings and way to
    /// the origins are restart-only).
    pub mitm: MitmConfig,
    /// Delegation of `/claude`, `/cursor-agent` and `/agy` messages to another CLI (hot).
    pub delegate: DelegateConfig,
    /// Cloud list prices, for the cost that answering locally avoided (hot; see
    /// docs/dashboard.md).
    pub pricing: crate::pricing::PricingConfig,
    /// GPU memory: the monitor (restart-only) and how local models share it (hot;
    /// docs/vram.md).
    pub vram: crate::vram::VramConfig,
    /// MCP servers whose tools Glider offers on `/mcp` (hot; docs/tools.md).
    pub mcp: crate::mcp::McpConfig,
    /// The internal tools, their sandbox and the tool loop for local answers (hot;
    /// docs/tools.md).
    pub tools: crate::tools::ToolsConfig,
    /// Out-of-process plugins (hot; docs/plugins.md).
    pub plugins: Vec<crate::plugins::PluginConfig>,
    /// Sending a request to more than one candidate: hedge, first (hot;
    /// docs/fan-out.md).
    pub fan_out: crate::fan_out::FanOutConfig,
}

/// Listeners. Changing any of these needs a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address the gateway and dashboard bind to.
    pub bind: String,
    /// Gateway port (OpenAI `/v1/*`, Anthropic `/v1/messages`).
    pub proxy_port: u16,
    /// Dashboard port.
    pub dashboard_port: u16,
    /// Largest request body accepted, in bytes (bigger gets 413 in the caller's dialect).
    pub max_body_bytes: usize,
    /// Token the dashboard requires (`Authorization: Bearer`, `?token=` or its cookie);
    /// `${VAR}` is interpolated. Required when `bind` is not a loopback address.
    pub dashboard_token: Option<Secret>,
    /// Token the gateway requires on every request (`x-glider-token: TOKEN`); `${VAR}`
    /// is interpolated. Unset, the gateway answers only requests addressed to a loopback
    /// host name; set, it also answers other names (when `bind` is not loopback).
    pub gateway_token: Option<Secret>,
    /// Seconds a client has to send a complete request head: from connecting, or from
    /// the first byte of a later request on a kept-alive connection. Past it the
    /// connection closes (every port: gateway, dashboard, MITM and its tunnels).
    pub header_read_timeout_secs: u64,
    /// Seconds from a request's head to the end of its body, for requests whose body
    /// is read whole (the model APIs, the dashboard); past it the reply is a 408 in the
    /// caller's dialect.
    pub body_read_timeout_secs: u64,
    /// Seconds a kept-alive connection with no request in flight may stay silent before
    /// it is closed. A reply that is streaming is never idle.
    pub idle_timeout_secs: u64,
    /// Seconds a stop (SIGTERM, Ctrl-C) waits for open replies; then streams still
    /// open end with their dialect's error event and Glider exits. A second signal
    /// exits at once.
    pub shutdown_grace_secs: u64,
}

impl ServerConfig {
    /// The client-side timeouts every door serves its connections under.
    pub fn client_limits(&self) -> glider_sys::listen::Limits {
        glider_sys::listen::Limits::from_secs(
            self.header_read_timeout_secs,
            self.body_read_timeout_secs,
            self.idle_timeout_secs,
        )
    }

    /// Whether `bind` only accepts connections from this machine.
    pub fn is_loopback(&self) -> bool {
        let host = self.bind.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1".into(),
            proxy_port: 8080,
            dashboard_port: 8081,
            max_body_bytes: 32 * 1024 * 1024,
            dashboard_token: None,
            gateway_token: None,
            header_read_timeout_secs: 30,
            body_read_timeout_secs: 60,
            idle_timeout_secs: 60,
            shutdown_grace_secs: 30,
        }
    }
}

/// The wire protocol a backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Ollama's native `/api/chat`.
    Ollama,
    /// Any OpenAI-compatible server (vLLM, llama.cpp's server, LM Studio): Chat Completions.
    Vllm,
    /// OpenAI's API: Chat Completions and Responses.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
}

impl BackendKind {
    /// Whether every backend of this kind runs on the user's machine (Ollama, an
    /// OpenAI-compatible server); an `anthropic` or `openai` one is local only when its
    /// config says `local: true` ([`BackendConfig::is_local`], which callers should use).
    pub fn is_local(self) -> bool {
        matches!(self, BackendKind::Ollama | BackendKind::Vllm)
    }
}

/// One model a backend serves, written either as a bare name or as a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ModelEntry {
    Name(String),
    Detailed(ModelSpec),
}

/// A model with its limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The name clients ask for; `*` matches any run of characters (`claude-*`).
    pub name: String,
    /// Context window in tokens (defaults to the backend's `context_window`).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Whether the model accepts a thinking/reasoning request. Ollama refuses
    /// `think: true` for a model without it, so Glider strips thinking unless this is set.
    #[serde(default)]
    pub thinking: Option<bool>,
    /// Whether the model can call tools (unset: assumed). A model without tools gets
    /// none on a local route.
    #[serde(default)]
    pub tools: Option<bool>,
    /// Whether the model takes images (unset: assumed not, on a local route: each image
    /// becomes a short text note).
    #[serde(default)]
    pub vision: Option<bool>,
    /// The most tokens the model writes in one reply; a local route caps `max_tokens`
    /// at it.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
}

impl ModelEntry {
    pub fn spec(&self) -> ModelSpec {
        match self {
            ModelEntry::Name(name) => ModelSpec {
                name: name.clone(),
                context_window: None,
                thinking: None,
                tools: None,
                vision: None,
                max_output_tokens: None,
            },
            ModelEntry::Detailed(spec) => spec.clone(),
        }
    }
}

/// One backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// Unique name, used in logs, the dashboard and routing rules.
    pub name: String,
    #[serde(rename = "type")]
    pub kind: BackendKind,
    /// Base URL. Ollama: `http://host:11434`; vLLM/OpenAI: up to and including `/v1`;
    /// Anthropic: without `/v1`. `${VAR}` is interpolated.
    pub base_url: String,
    /// API key; `${VAR}` is interpolated. Never logged.
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Models this backend serves (names or `*` patterns).
    #[serde(default)]
    pub models: Vec<ModelEntry>,
    /// Model to ask for when this backend answers as a fallback for a model it does
    /// not list (for example a local model failed and the cloud takes over).
    #[serde(default)]
    pub default_model: Option<String>,
    /// Default context window of this backend's models, in tokens.
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Seconds to wait for a TCP connection.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// Seconds to wait for the first byte of the reply (model load included).
    #[serde(default = "default_first_byte_timeout")]
    pub first_byte_timeout_secs: u64,
    /// Seconds a stream may stay silent before it is treated as stalled.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_secs: u64,
    /// Extra request headers (values interpolated).
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// Set false to keep this backend in the file but unused.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// How a request is fitted to this backend's models (local backends only).
    #[serde(default)]
    pub fit: BackendFit,
    /// This `anthropic` (or `openai`) backend is a model server on this machine or
    /// network (llama-server or Ollama serving `/v1/messages`), not the vendor's cloud:
    /// it is fitted, bounded, counted as local and never sent a client's credentials,
    /// while its wire stays the kind's. Ollama and vLLM backends are always local.
    #[serde(default)]
    pub local: bool,
    /// A pool: more base URLs serving the same models as `base_url`, which is the
    /// pool's first replica (and where health and model probes go). A session keeps to
    /// one replica (rendezvous hash on its key); a failing replica's sessions move to
    /// the next one (docs/scale.md). Empty (the default): `base_url` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<String>,
}

/// Per-backend limits a local request is fitted to (see docs/local-models.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackendFit {
    /// More tools than this and the set is reduced.
    pub max_tools: usize,
    /// Tool schemas estimated above this many tokens and the set is reduced.
    pub max_tool_schema_tokens: u64,
    /// `max_tokens` sent to this backend is at most this (the client's lower value is
    /// kept; a request without one gets this).
    pub max_output_tokens: u32,
}

impl Default for BackendFit {
    fn default() -> Self {
        BackendFit {
            max_tools: 12,
            max_tool_schema_tokens: 3000,
            max_output_tokens: 4096,
        }
    }
}

/// Fitting requests to local models (`fit:`; hot).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FitConfig {
    /// Fit requests on local routes at all (cloud routes are never fitted).
    pub enabled: bool,
    /// Tools a reduced set always keeps, per client (the key names the client for the
    /// reader; a tool is kept when any list names it). Names are matched exactly.
    pub core_tools: BTreeMap<String, Vec<String>>,
    /// Seconds of generation a local reply may take once the model's speed is measured
    /// (its own replies' tokens per second): the output cap is at most what it
    /// generates in this time (never below 256 tokens).
    pub max_reply_secs: f64,
    /// The share of a local model's context window its system text may take; past it
    /// the system text is cut (its head kept, with a note).
    pub max_system_share: f64,
}

impl Default for FitConfig {
    fn default() -> Self {
        let list = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        FitConfig {
            enabled: true,
            core_tools: BTreeMap::from([
                (
                    "claude-code".to_owned(),
                    list(&["Read", "Edit", "Write", "Bash", "Grep", "Glob"]),
                ),
                ("codex".to_owned(), list(&["exec_command", "apply_patch"])),
            ]),
            max_reply_secs: 60.0,
            max_system_share: 0.25,
        }
    }
}

impl FitConfig {
    /// Whether a reduced tool set keeps `tool` whatever the request did.
    pub fn is_core_tool(&self, tool: &str) -> bool {
        self.core_tools
            .values()
            .any(|names| names.iter().any(|n| n == tool))
    }
}

/// What is wrong with a backend's `replicas`: a URL that is not HTTP, or one listed
/// twice or equal to `base_url` (a duplicate would double its share of the sessions).
fn replica_problems(at: &str, base_url: &str, replicas: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, url) in replicas.iter().enumerate() {
        if !is_http_url(url) {
            problems.push(format!(
                "{at}: replicas[{i}] must start with http:// or https://, got {url:?}"
            ));
        }
        if url == base_url || replicas[..i].contains(url) {
            problems.push(format!("{at}: replicas[{i}] {url:?} is listed twice"));
        }
    }
    problems
}

/// A URL Glider can send HTTP to (or a `${VAR}` that will say so once resolved).
fn is_http_url(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://") || url.starts_with("${")
}

fn default_connect_timeout() -> u64 {
    5
}
fn default_first_byte_timeout() -> u64 {
    300
}
fn default_idle_timeout() -> u64 {
    120
}
fn yes() -> bool {
    true
}

impl BackendConfig {
    /// Whether this backend runs on the user's side (its kind is local, or it says
    /// `local: true`): the meaning behind fitting, bounding, local savings and keyless
    /// credentials.
    pub fn is_local(&self) -> bool {
        self.local || self.kind.is_local()
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs)
    }
    pub fn first_byte_timeout(&self) -> Duration {
        Duration::from_secs(self.first_byte_timeout_secs)
    }
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }

    /// The spec of `model` if this backend lists it (exactly or by pattern).
    pub fn model_spec(&self, model: &str) -> Option<ModelSpec> {
        let specs = self.models.iter().map(ModelEntry::spec);
        let mut fallback = None;
        for spec in specs {
            if spec.name == model {
                return Some(spec);
            }
            if fallback.is_none() && glob_match(&spec.name, model) {
                fallback = Some(ModelSpec {
                    name: model.to_owned(),
                    ..spec
                });
            }
        }
        fallback
    }

    /// Context window of `model` on this backend, if known.
    pub fn context_window_of(&self, model: &str) -> Option<u64> {
        self.model_spec(model)
            .and_then(|s| s.context_window)
            .or(self.context_window)
    }

    /// Names of the concrete (pattern-free) models this backend lists, and its
    /// `default_model`.
    pub fn concrete_models(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .models
            .iter()
            .map(|m| m.spec().name)
            .filter(|n| !n.contains('*'))
            .collect();
        if let Some(default) = &self.default_model
            && !names.contains(default)
        {
            names.push(default.clone());
        }
        names
    }
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return text.is_empty();
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let tail: Vec<&str> = parts.collect();
    if tail.is_empty() {
        return rest.is_empty();
    }
    for (i, piece) in tail.iter().enumerate() {
        if i + 1 == tail.len() {
            return rest.ends_with(piece);
        }
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// A string that may name environment variables as `${VAR}`, resolved when used. Its
/// `Debug` never shows the value, so a key cannot reach a log line by accident.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(****)")
    }
}

impl Secret {
    /// The value with every `${VAR}` replaced, or the name of the first unset variable.
    pub fn resolve(&self) -> Result<String, String> {
        self.lookup().map_err(|e| e.to_string())
    }

    /// [`Secret::resolve`] with the reason kept apart: an unset variable (which a cloud
    /// backend's key may mean on purpose: use the client's own) or a malformed text.
    pub fn lookup(&self) -> Result<String, Unresolved> {
        interpolate_with(&self.0, |name| std::env::var(name).ok())
    }
}

/// Why a `${VAR}` text has no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// The variable it names is unset or empty.
    Unset(String),
    /// The text itself is broken (an unclosed `${`).
    Malformed(String),
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unresolved::Unset(name) => write!(f, "environment variable {name} is not set"),
            Unresolved::Malformed(text) => write!(f, "unclosed ${{ in {text:?}"),
        }
    }
}

/// Replace `${NAME}` using `lookup`; an unset or empty variable is an error naming it.
pub fn interpolate(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    interpolate_with(text, lookup).map_err(|e| e.to_string())
}

fn interpolate_with(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, Unresolved> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(Unresolved::Malformed(text.to_owned()));
        };
        let name = &after[..end];
        match lookup(name).filter(|v| !v.is_empty()) {
            Some(value) => out.push_str(&value),
            None => return Err(Unresolved::Unset(name.to_owned())),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// How a request picks its backend. Rules apply in priority order — explicit, sticky,
/// classifier, Starlark — and the first with an opinion decides the side; then the token
/// limit has the last word (see docs/routing.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoutingConfig {
    /// When a local backend fails or cannot fit a request, let a cloud backend answer
    /// with the user's key. Set false for pure local.
    pub cloud_fallback: bool,
    /// When every cloud candidate of a request chosen for the cloud (by the classifier,
    /// Starlark or the model, not by an explicit `/cloud`) could not be reached at all —
    /// refused, DNS, TLS, a timeout, a breaker such failures opened; never a 4xx or
    /// 5xx answer — let a local backend answer it instead.
    pub local_fallback: bool,
    /// Context window assumed for a local model that states none.
    pub default_local_context: u64,
    /// Explicit requests: a leading `/local` or `/cloud` in the last user message, and
    /// a request header.
    pub explicit: ExplicitConfig,
    /// A session keeps an explicit choice for its follow-on requests.
    pub sticky: StickyConfig,
    /// The scoring classifier.
    pub classifier: ClassifierConfig,
    /// User rules in Starlark.
    pub starlark: StarlarkConfig,
    /// Seconds a request may wait for a cold local model to load (its measured load
    /// time, evictions included) before the next candidate is tried instead.
    pub max_cold_wait_secs: f64,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            cloud_fallback: true,
            local_fallback: false,
            default_local_context: 32_768,
            explicit: ExplicitConfig::default(),
            sticky: StickyConfig::default(),
            classifier: ClassifierConfig::default(),
            starlark: StarlarkConfig::default(),
            max_cold_wait_secs: 30.0,
        }
    }
}

/// The explicit rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExplicitConfig {
    /// Honour `/local`, `/cloud` and `/via <backend>` at the start of the last user
    /// message (stripped before forwarding).
    pub flags: bool,
    /// Request header naming `local`, `cloud` or a backend; empty turns it off.
    pub header: String,
}

impl Default for ExplicitConfig {
    fn default() -> Self {
        ExplicitConfig {
            flags: true,
            header: "x-glider-route".into(),
        }
    }
}

/// The sticky rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StickyConfig {
    /// Apply the sticky rule at all.
    pub enabled: bool,
    /// How long a session keeps an explicit choice after its last use.
    pub ttl_secs: u64,
    /// Sessions remembered at most (the least recently used is forgotten first).
    pub max_sessions: usize,
    /// A sticky-cloud choice younger than this cannot be replaced by a concurrent
    /// sticky-local one (spec: a live StickyCloud is not replaced by a StickyLocal).
    pub cloud_guard_secs: u64,
}

impl Default for StickyConfig {
    fn default() -> Self {
        StickyConfig {
            enabled: true,
            ttl_secs: 1800,
            max_sessions: 10_000,
            cloud_guard_secs: 5,
        }
    }
}

/// The scoring classifier: a weighted sum of request features. A score at or above
/// `local_threshold` says local, at or below `cloud_threshold` says cloud, in between
/// it has no opinion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClassifierConfig {
    /// Run the classifier at all.
    pub enabled: bool,
    /// A score at or above this says local.
    pub local_threshold: f64,
    /// A score at or below this says cloud; it must be below `local_threshold`.
    pub cloud_threshold: f64,
    /// Feature weights; a feature left out keeps its default weight (docs/routing.md).
    pub weights: BTreeMap<String, f64>,
}

/// The classifier's features and their default weights (positive favours local).
/// `routing.classifier.weights` may override any of them by name.
pub const CLASSIFIER_FEATURES: &[(&str, f64)] = &[
    // A title request: no tools, a JSON-schema output with a `title` field.
    ("title_request", 4.0),
    // The last user message asks for a summary of the conversation (compaction).
    ("summary_request", 3.0),
    // The client named a small model class (haiku, mini, nano, flash, small).
    ("small_model", 2.0),
    // The client capped the reply at 1024 tokens or less.
    ("small_max_tokens", 1.0),
    // A short last user message (under 200 characters) without tool traffic.
    ("short_followup", 1.0),
    // The last turn relays a tool result back to the model.
    ("tool_result", 0.5),
    // Tools are offered (an agentic main turn).
    ("has_tools", -1.0),
    // Tools that edit files are offered.
    ("edit_tools", -1.0),
    // Thinking or reasoning was requested.
    ("thinking", -2.0),
    // High reasoning effort or a thinking budget of 16k tokens or more.
    ("heavy_reasoning", -2.0),
    // Images in the conversation.
    ("images", -2.0),
    // Per 10k tokens of conversation (system and tool definitions excluded).
    ("conversation_10k_tokens", -1.0),
    // More than 40 turns of conversation.
    ("long_conversation", -2.0),
];

impl Default for ClassifierConfig {
    fn default() -> Self {
        ClassifierConfig {
            enabled: true,
            local_threshold: 2.0,
            cloud_threshold: -2.0,
            weights: BTreeMap::new(),
        }
    }
}

/// The Starlark rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StarlarkConfig {
    /// A `.star` file defining `route(req)`; relative paths are relative to the config
    /// file. Reloaded when it changes.
    pub file: Option<String>,
    /// Steps one call may take before it is stopped (default 100000).
    pub max_steps: Option<u64>,
    /// Request headers (lowercase names) the script may read as `req["headers"]`.
    pub expose_headers: Vec<String>,
}

/// Optional prompt rewriting for local backends (spec: off when you start).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransformConfig {
    /// Apply the rewrites below to local requests at all.
    pub enabled: bool,
    /// Cap `max_tokens` of a local request to this.
    pub local_max_tokens: Option<u32>,
    /// Replace all system text of a local request with this.
    pub local_system_prompt: Option<String>,
    /// Trim the system text of a local request to this many characters.
    pub local_system_max_chars: Option<usize>,
}

/// How much history a local request keeps (spec: BoundLocalContext, local only), and
/// the context log of what each session did (`crates/glider-context`, docs/context.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// Keep the context log under `GLIDER_HOME/context/` (restart-only). Off: no file
    /// is created and nothing is recorded.
    pub enabled: bool,
    /// Events older than this many days are deleted (restart-only).
    pub retention_days: u64,
    /// The log's live size in MiB beyond which its oldest events are deleted
    /// (restart-only).
    pub max_store_mb: u64,
    /// Events queued for the writer before new ones are dropped and counted in a gap
    /// event (restart-only).
    pub queue_capacity: usize,
    /// Cut the history of a local request to fit its budget.
    pub bound_local: bool,
    /// Budget in tokens; default: the model's context window minus `output_reserve`.
    pub local_budget_tokens: Option<u64>,
    /// Tokens kept free for the reply when the budget is derived from the window.
    pub output_reserve_tokens: u64,
    /// Token budget of the rendered continuity record a local model is given
    /// (restart-only: the writer renders it).
    pub record_max_tokens: u64,
    /// Who answers a CLI's compaction request (Claude Code's `/compact`, Codex's
    /// checkpoint): `auto` (the default: a local model that is up and holds it — the
    /// whole request, or the session's continuity record and the current episode — else
    /// the route; never against the user's explicit or sticky choice), `cloud` (routed
    /// by the rules like any request) or `local` (the local model, given the continuity
    /// record and the current episode; the record itself when no local backend is up).
    pub compaction: CompactionPolicy,
    /// Model turns one episode may take (`docs/context.md`, Budgets). Off by default.
    pub turn_budget: TurnBudget,
    /// End an agent loop that repeats the same tool call. On by default.
    pub loop_guard: LoopGuard,
    /// The summarizer: compacts each session's ended episodes into a narrative, off the
    /// request path (docs/context.md#the-summarizer; hot).
    pub summarizer: SummarizerConfig,
}

/// `context.compaction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionPolicy {
    /// A local model that is up and holds the request or the session's record answers;
    /// else the route stands. The user's explicit or sticky choice is kept.
    #[default]
    Auto,
    /// Routed by the rules like any other request.
    Cloud,
    /// Answered locally from the continuity record.
    Local,
}

/// Model turns (requests) per episode: from `soft` on, a wrap-up note asks the model to
/// finish; past `hard`, Glider answers itself with a final reply naming the limit.
/// Either may be left out (`None`: no such limit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TurnBudget {
    pub soft: Option<u32>,
    pub hard: Option<u32>,
}

/// The repeated-tool-call guard: the same tool called with the same arguments
/// `repeats` times in one episode ends the loop with a final reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoopGuard {
    pub enabled: bool,
    pub repeats: u32,
}

impl Default for LoopGuard {
    fn default() -> Self {
        LoopGuard {
            enabled: true,
            repeats: 5,
        }
    }
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            enabled: true,
            retention_days: 30,
            max_store_mb: 512,
            queue_capacity: 8192,
            bound_local: true,
            local_budget_tokens: None,
            output_reserve_tokens: 4096,
            record_max_tokens: 1500,
            compaction: CompactionPolicy::Auto,
            turn_budget: TurnBudget::default(),
            loop_guard: LoopGuard::default(),
            summarizer: SummarizerConfig::default(),
        }
    }
}

/// `context.summarizer`: which model writes a session's narrative and within what
/// budget. Read at each run, so every key is hot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SummarizerConfig {
    /// Compact sessions at all (needs `context.enabled`).
    pub enabled: bool,
    /// The backend that writes summaries (any configured one, cloud included); unset:
    /// the first enabled local backend.
    pub backend: Option<String>,
    /// The model asked; unset: the backend's `default_model`, else the first model it
    /// lists by name (not a `*` pattern).
    pub model: Option<String>,
    /// `max_tokens` of one summary.
    pub max_tokens: u32,
    /// Most tokens of input (the record and the new turns) sent, estimated at four
    /// characters a token; the oldest new turns are left out first.
    pub max_input_tokens: u64,
    /// Longest one summary may take, in seconds, before it is abandoned (and logged).
    pub timeout_secs: u64,
    /// A session silent this long has its open episode compacted too.
    pub idle_secs: u64,
    /// Drop a summary in flight when a client's request to the same backend starts,
    /// and try it again `idle_secs` later: a local server with one slot otherwise makes
    /// the client's turn wait for the whole summary.
    pub yield_to_clients: bool,
    /// The most of the backend's time summaries may take: after a run that took `t`
    /// seconds (answered, rejected, timed out or yielded), the next waits
    /// `t × (1 − share) / share` (0.1: a 20 s summary, then 180 s without one).
    pub max_busy_share: f64,
}

impl Config {
    /// The backend and model `context.summarizer` names: the configured backend, else
    /// the first enabled local one; the configured model, else that backend's
    /// `default_model`, else the first model it lists by name. The error says what is
    /// missing.
    pub fn summarizer_target(&self) -> Result<(&BackendConfig, String), String> {
        let summarizer = &self.context.summarizer;
        let backend = match &summarizer.backend {
            Some(name) => self
                .backends
                .iter()
                .find(|b| &b.name == name)
                .ok_or_else(|| {
                    format!("context.summarizer.backend: no backend is named {name:?}")
                })?,
            None => self
                .backends
                .iter()
                .find(|b| b.enabled && b.is_local())
                .ok_or(
                    "no enabled local backend to summarize with (set context.summarizer.backend)",
                )?,
        };
        let model = summarizer
            .model
            .clone()
            .or_else(|| backend.default_model.clone())
            .or_else(|| {
                backend
                    .models
                    .iter()
                    .map(ModelEntry::spec)
                    .map(|m| m.name)
                    .find(|name| !name.contains('*'))
            })
            .ok_or_else(|| {
                format!(
                    "backend {} names no model to summarize with (set context.summarizer.model)",
                    backend.name
                )
            })?;
        Ok((backend, model))
    }
}

impl Default for SummarizerConfig {
    fn default() -> Self {
        SummarizerConfig {
            enabled: true,
            backend: None,
            model: None,
            max_tokens: 1024,
            max_input_tokens: 6000,
            timeout_secs: 120,
            idle_secs: 60,
            yield_to_clients: true,
            max_busy_share: 0.1,
        }
    }
}

/// Delegation to another CLI (`crates/glider-delegate`; see docs/delegation.md). Read
/// per request, so every key is hot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DelegateConfig {
    /// Take `/claude`, `/cursor-agent` and `/agy` messages at all (false: they go to the
    /// pipeline like any other text).
    pub enabled: bool,
    /// Working directory a delegate runs in. Required for a headless run: Glider never
    /// runs a delegate in its own working directory by accident; `~` is expanded.
    pub workdir: Option<String>,
    /// Longest a headless run may take, in seconds, before its process group is killed.
    pub timeout_secs: u64,
    /// Most bytes of delegate text relayed to the client; the run is stopped past it.
    pub max_output_bytes: usize,
    /// Longest `<cli> --version` may take during discovery, in seconds.
    pub version_timeout_secs: u64,
    /// How long a delegate's permission question waits for `/<cli> allow|deny`, in
    /// seconds; after it the answer is refused as stale.
    pub ask_ttl_secs: u64,
    /// The command that opens a console for an interactive delegate and returns at once
    /// (default: a detached tmux session). `{session}`, `{workdir}` and `{task}` are
    /// replaced inside items; an item that is exactly `{command}` becomes the CLI's argv.
    pub interactive_command: Vec<String>,
    /// What the reply tells the user to run to reach an interactive delegate.
    pub attach_hint: String,
    /// Claude Code (`/claude`).
    pub claude: DelegateVendorConfig,
    /// Cursor's agent CLI (`/cursor-agent`).
    pub cursor_agent: DelegateVendorConfig,
    /// Antigravity's CLI (`/agy`).
    pub agy: DelegateVendorConfig,
}

impl Default for DelegateConfig {
    fn default() -> Self {
        DelegateConfig {
            enabled: true,
            workdir: None,
            timeout_secs: 600,
            max_output_bytes: 1 << 20,
            version_timeout_secs: 5,
            ask_ttl_secs: 900,
            interactive_command: [
                "tmux",
                "new-session",
                "-d",
                "-s",
                "{session}",
                "-c",
                "{workdir}",
                "{command}",
            ]
            .into_iter()
            .map(str::to_owned)
            .collect(),
            attach_hint: "tmux attach -t {session}".to_owned(),
            claude: DelegateVendorConfig::default(),
            cursor_agent: DelegateVendorConfig::default(),
            agy: DelegateVendorConfig::default(),
        }
    }
}

/// How to start one delegate CLI.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DelegateVendorConfig {
    /// The executable; unset means the CLI's usual name looked up on `PATH`.
    pub path: Option<String>,
    /// Extra arguments put before Glider's own (e.g. `--model`, `--permission-mode`).
    pub args: Vec<String>,
    /// Environment variables set for the delegate (on top of Glider's own environment).
    pub env: BTreeMap<String, String>,
    /// `headless` (Glider runs it and relays its output) or `interactive` (Glider opens a
    /// console running it and returns at once). Unset: interactive for `agy`, headless
    /// for the others.
    pub mode: Option<DelegateMode>,
    /// Tools the delegate may use without asking (Claude Code: `--allowedTools`, e.g.
    /// `Read`, `Bash(git log:*)`). Anything else it asks for comes back to the user.
    pub allowed_tools: Vec<String>,
    /// Let the delegate use every tool without asking (Claude Code
    /// `--dangerously-skip-permissions`, cursor-agent `--force`). Off by default.
    pub allow_all_tools: bool,
}

/// How a delegate CLI is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DelegateMode {
    /// Run by Glider, its output relayed as the reply.
    Headless,
    /// Opened in its own console; the reply says how to reach it.
    Interactive,
}

/// The MITM proxy's settings (`crates/glider-mitm`; see docs/mitm.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MitmConfig {
    /// Run the proxy at all (restart-only).
    pub enabled: bool,
    /// CONNECT proxy port on `server.bind` (restart-only).
    pub port: u16,
    /// Hosts to decrypt; `*.example.com` matches any subdomain (restart-only).
    pub hosts: Vec<String>,
    /// Tunnel (true) or refuse (false) a host that is not listed (hot).
    pub passthrough_default: bool,
    /// A failed local answer goes to the CLI's origin (true, hybrid) or is shown to the
    /// client (false, pure local) (hot).
    pub origin_on_local_error: bool,
    /// Transparent interception (restart-only).
    pub transparent: bool,
    /// Port the transparent redirect sends packets to (restart-only).
    pub transparent_port: u16,
    /// Destination ports the transparent redirect catches (restart-only).
    pub transparent_ports: Vec<u16>,
    /// Process image names transparent mode decrypts, in addition to the vendor
    /// registry's CLI executables (e.g. a test client) (restart-only).
    pub transparent_processes: Vec<String>,
    /// Directory of the CA (`ca.crt`, `ca.key`); default `GLIDER_HOME/mitm` (restart-only).
    pub ca_dir: Option<String>,
    /// Dump every decrypted API request body, and Cursor's Agent RPC appends and reply
    /// frames decoded, under `GLIDER_HOME/mitm/debug/` (hot; the environment variable
    /// `GLIDER_MITM_DEBUG_RPC` does the same). Dumps contain source code and prompts.
    pub debug_agent_rpc: bool,
    /// Cursor Agent RPC: read the origin's relayed RunSSE frames and log its tool calls
    /// by name, from a small map of the usual ToolCall frames; tool turns still go to
    /// the origin (hot; see docs/cursor-rpc.md).
    pub agent_rpc_tool_codec: bool,
    /// Origin host → `ip:port` to connect to instead of resolving the host, for both
    /// decrypted and tunnelled traffic; TLS still names and verifies the host. For tests
    /// and private mirrors (restart-only).
    pub upstream_overrides: BTreeMap<String, String>,
    /// A PEM file of extra CA certificates trusted for origin connections, in addition
    /// to the system's roots (restart-only).
    pub upstream_ca_file: Option<String>,
}

impl Default for MitmConfig {
    fn default() -> Self {
        MitmConfig {
            enabled: false,
            port: 8082,
            hosts: vec!["api.anthropic.com".into(), "api.openai.com".into()],
            passthrough_default: true,
            origin_on_local_error: true,
            transparent: false,
            transparent_port: 8083,
            transparent_ports: vec![443],
            transparent_processes: Vec::new(),
            ca_dir: None,
            debug_agent_rpc: false,
            agent_rpc_tool_codec: false,
            upstream_overrides: BTreeMap::new(),
            upstream_ca_file: None,
        }
    }
}

impl MitmConfig {
    fn problems(&self, problems: &mut Vec<String>) {
        for (i, host) in self.hosts.iter().enumerate() {
            let bare = host.strip_prefix("*.").unwrap_or(host);
            if bare.is_empty() || bare.contains(['*', '/', ':', ' ']) {
                problems.push(format!(
                    "mitm.hosts[{i}]: {host:?} must be a host name or *.domain"
                ));
            }
        }
        for (host, target) in &self.upstream_overrides {
            let valid = target
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !valid {
                problems.push(format!(
                    "mitm.upstream_overrides.{host}: {target:?} must be host:port"
                ));
            }
        }
        if self.enabled && self.transparent {
            if self.transparent_port == 0 {
                problems.push("mitm.transparent_port: must be a fixed port (the redirect rule names it), not 0".into());
            }
            if self.transparent_ports.is_empty() || self.transparent_ports.contains(&0) {
                problems.push(
                    "mitm.transparent_ports: list the destination ports to catch, e.g. [443]"
                        .into(),
                );
            }
            if self.transparent_ports.contains(&self.transparent_port) {
                problems.push(format!(
                    "mitm.transparent_ports: must not contain mitm.transparent_port ({}): the redirect would catch its own target",
                    self.transparent_port
                ));
            }
        }
        for (i, name) in self.transparent_processes.iter().enumerate() {
            if name.trim().is_empty() || name.contains('/') {
                problems.push(format!(
                    "mitm.transparent_processes[{i}]: {name:?} must be an executable name (no path)"
                ));
            }
        }
    }
}

/// A port Glider listens on: its number, the setting that names it, and the `glider
/// serve` flag that overrides it (none for the transparent port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenPort {
    pub port: u16,
    pub setting: &'static str,
    pub flag: Option<&'static str>,
}

impl Config {
    /// The ports Glider listens on with this config: the gateway and the dashboard, and
    /// the MITM proxy's (and its transparent listener's) when they are on.
    pub fn listen_ports(&self) -> Vec<ListenPort> {
        let port = |port, setting, flag| ListenPort {
            port,
            setting,
            flag,
        };
        let mut ports = vec![
            port(self.server.proxy_port, "server.proxy_port", Some("--port")),
            port(
                self.server.dashboard_port,
                "server.dashboard_port",
                Some("--dashboard-port"),
            ),
        ];
        if self.mitm.enabled {
            ports.push(port(self.mitm.port, "mitm.port", Some("--mitm-port")));
            if self.mitm.transparent {
                ports.push(port(
                    self.mitm.transparent_port,
                    "mitm.transparent_port",
                    None,
                ));
            }
        }
        ports
    }

    /// Parse YAML text; `origin` names the source in messages.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = if text.trim().is_empty() {
            Config::default()
        } else {
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
                path: origin.to_owned(),
                message: e.to_string(),
            })?
        };
        let problems = config.problems();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid {
                path: origin.to_owned(),
                problems,
            })
        }
    }

    /// Read and parse a file.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// The embedded default profile.
    pub fn embedded_default() -> Result<Config, ConfigError> {
        Config::parse(DEFAULT_PROFILE, "embedded configs/glider.yaml")
    }

    /// Everything wrong with values that parsed (empty when valid).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut names = std::collections::HashSet::new();
        for (i, backend) in self.backends.iter().enumerate() {
            let at = format!("backends[{i}] ({})", backend.name);
            if backend.name.trim().is_empty() {
                problems.push(format!("backends[{i}]: name must not be empty"));
            }
            if !names.insert(backend.name.as_str()) {
                problems.push(format!("{at}: duplicate backend name"));
            }
            let url = &backend.base_url;
            if !is_http_url(url) {
                problems.push(format!(
                    "{at}: base_url must start with http:// or https://, got {url:?}"
                ));
            }
            problems.extend(replica_problems(&at, url, &backend.replicas));
            if backend.is_local() && backend.models.is_empty() {
                problems.push(format!(
                    "{at}: a local backend must list the models it serves"
                ));
            }
        }
        for (from, to) in &self.model_aliases {
            if from == to {
                problems.push(format!("model_aliases: {from:?} maps to itself"));
            } else if self.model_aliases.contains_key(to) {
                problems.push(format!(
                    "model_aliases: {from:?} → {to:?} chains into another alias"
                ));
            }
        }
        let classifier = &self.routing.classifier;
        for name in classifier.weights.keys() {
            if !CLASSIFIER_FEATURES
                .iter()
                .any(|(feature, _)| feature == name)
            {
                let known: Vec<&str> = CLASSIFIER_FEATURES.iter().map(|(f, _)| *f).collect();
                problems.push(format!(
                    "routing.classifier.weights: unknown feature {name:?} (known: {})",
                    known.join(", ")
                ));
            }
        }
        if classifier.cloud_threshold >= classifier.local_threshold {
            problems
                .push("routing.classifier: cloud_threshold must be below local_threshold".into());
        }
        problems.extend(self.tools.problems());
        let summarizer = &self.context.summarizer;
        if let Some(name) = &summarizer.backend
            && !self.backends.iter().any(|b| &b.name == name)
        {
            problems.push(format!(
                "context.summarizer.backend: no backend is named {name:?}"
            ));
        }
        for (key, value) in [
            (
                "context.summarizer.max_tokens",
                u64::from(summarizer.max_tokens),
            ),
            (
                "context.summarizer.max_input_tokens",
                summarizer.max_input_tokens,
            ),
            ("context.summarizer.timeout_secs", summarizer.timeout_secs),
            ("context.summarizer.idle_secs", summarizer.idle_secs),
        ] {
            if value == 0 {
                problems.push(format!("{key} must be at least 1"));
            }
        }
        problems.extend(self.vram.problems(&self.backends));
        problems.extend(self.mcp.problems());
        crate::plugins::problems(&self.plugins, &mut problems);
        problems.extend(self.fan_out.problems(&self.backends));
        let wait = self.routing.max_cold_wait_secs;
        if !(wait.is_finite() && wait >= 0.0) {
            problems.push("routing.max_cold_wait_secs must be a non-negative number".into());
        }
        let busy = self.context.summarizer.max_busy_share;
        if !(busy.is_finite() && busy > 0.0 && busy <= 1.0) {
            problems.push("context.summarizer.max_busy_share must be above 0 and at most 1".into());
        }
        let reply_secs = self.fit.max_reply_secs;
        if !(reply_secs.is_finite() && reply_secs > 0.0) {
            problems.push("fit.max_reply_secs must be a positive number".into());
        }
        let share = self.fit.max_system_share;
        if !(share.is_finite() && share > 0.0 && share <= 1.0) {
            problems.push("fit.max_system_share must be above 0 and at most 1".into());
        }
        if self.routing.starlark.max_steps == Some(0) {
            problems.push("routing.starlark.max_steps must be at least 1".into());
        }
        if self.server.max_body_bytes < 1024 {
            problems.push("server.max_body_bytes must be at least 1024".into());
        }
        let budget = &self.context.turn_budget;
        if budget.soft == Some(0) || budget.hard == Some(0) {
            problems.push("context.turn_budget: soft and hard must be at least 1".into());
        }
        if let (Some(soft), Some(hard)) = (budget.soft, budget.hard)
            && soft > hard
        {
            problems.push(format!(
                "context.turn_budget: soft ({soft}) must not be above hard ({hard})"
            ));
        }
        if self.context.loop_guard.repeats < 2 {
            problems.push(
                "context.loop_guard.repeats must be at least 2 (one call is not a repeat)".into(),
            );
        }
        for (key, secs) in [
            (
                "server.header_read_timeout_secs",
                self.server.header_read_timeout_secs,
            ),
            (
                "server.body_read_timeout_secs",
                self.server.body_read_timeout_secs,
            ),
            ("server.idle_timeout_secs", self.server.idle_timeout_secs),
        ] {
            if secs == 0 {
                problems.push(format!(
                    "{key} must be at least 1 (a client would be cut off at once)"
                ));
            }
        }
        let ports = [
            ("server.proxy_port", self.server.proxy_port),
            ("server.dashboard_port", self.server.dashboard_port),
        ];
        if ports[0].1 != 0 && ports[0].1 == ports[1].1 {
            problems.push("server.proxy_port and server.dashboard_port must differ".into());
        }
        if !self.server.is_loopback() && self.server.dashboard_token.is_none() {
            problems.push(format!(
                "server.bind is {:?}, reachable from other machines: set server.dashboard_token (e.g. \"${{GLIDER_DASHBOARD_TOKEN}}\") so the dashboard is not open to them",
                self.server.bind
            ));
        }
        if self.mitm.enabled {
            for (name, port) in ports {
                if port != 0 && port == self.mitm.port {
                    problems.push(format!("mitm.port and {name} must differ"));
                }
            }
        }
        self.mitm.problems(&mut problems);
        self.pricing.problems(&mut problems);
        problems
    }

    /// The model Glider asks for when a client names `model`: an exact alias first,
    /// else the longest (most specific) `*` pattern that matches, else `model` itself.
    pub fn resolve_alias<'a>(&'a self, model: &'a str) -> &'a str {
        if let Some(target) = self.model_aliases.get(model) {
            return target;
        }
        self.model_aliases
            .iter()
            .filter(|(pattern, _)| pattern.contains('*') && glob_match(pattern, model))
            .max_by_key(|(pattern, _)| pattern.len())
            .map(|(_, target)| target.as_str())
            .unwrap_or(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_valid() {
        let config = Config::embedded_default().expect("default profile parses");
        assert!(!config.backends.is_empty());
        assert_eq!(config.server.proxy_port, 8080);
    }

    #[test]
    fn profiles_are_valid() {
        for name in ["glider.yaml", "glider.local.yaml", "glider.cloud.yaml"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../configs")
                .join(name);
            Config::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn a_shadow_target_must_be_an_enabled_backend() {
        let yaml = "backends:\n  - {name: off, type: ollama, base_url: 'http://x', models: [a], enabled: false}\n  - {name: local, type: ollama, base_url: 'http://x', models: [b]}\n";
        let disabled = format!("{yaml}fan_out: {{mode: shadow, shadow: {{target: off}}}}\n");
        let Err(ConfigError::Invalid { problems, .. }) = Config::parse(&disabled, "t") else {
            panic!("a disabled shadow target is refused");
        };
        assert!(
            problems.iter().any(|p| p.contains("\"off\" is disabled")),
            "{problems:?}"
        );
        let enabled = format!("{yaml}fan_out: {{mode: shadow, shadow: {{target: local}}}}\n");
        Config::parse(&enabled, "t").expect("an enabled local target is valid");
    }

    #[test]
    fn the_summarizer_defaults_to_the_first_local_backend_and_may_name_any() {
        let yaml = "backends:\n  - {name: cloud, type: openai, base_url: 'https://x', models: ['gpt-*']}\n  - {name: off, type: ollama, base_url: 'http://x', models: [a], enabled: false}\n  - {name: local, type: ollama, base_url: 'http://x', models: ['q*', qwen, llama]}\n";
        let config = Config::parse(yaml, "t").expect("valid");
        let (backend, model) = config.summarizer_target().expect("a local backend");
        assert_eq!((backend.name.as_str(), model.as_str()), ("local", "qwen"));
        let named = format!("{yaml}context: {{summarizer: {{backend: cloud, model: gpt-4.1}}}}\n");
        let config = Config::parse(&named, "t").expect("valid");
        let (backend, model) = config.summarizer_target().expect("named");
        assert_eq!(
            (backend.name.as_str(), model.as_str()),
            ("cloud", "gpt-4.1")
        );
        let patterns_only = format!("{yaml}context: {{summarizer: {{backend: cloud}}}}\n");
        let error = Config::parse(&patterns_only, "t")
            .expect("valid")
            .summarizer_target()
            .expect_err("no model by name");
        assert!(error.contains("context.summarizer.model"), "{error}");
        let unknown = format!("{yaml}context: {{summarizer: {{backend: nope, idle_secs: 0}}}}\n");
        let Err(ConfigError::Invalid { problems, .. }) = Config::parse(&unknown, "t") else {
            panic!("an unknown summarizer backend is refused");
        };
        assert!(
            problems
                .iter()
                .any(|p| p.contains("no backend is named \"nope\"")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("idle_secs must be at least 1")),
            "{problems:?}"
        );
    }

    #[test]
    fn typo_reports_line_and_column() {
        let err = Config::parse("server:\n  proxy_prot: 1\n", "t.yaml").expect_err("unknown key");
        let text = err.to_string();
        assert!(text.contains("proxy_prot"), "{text}");
        assert!(text.contains("line 2") || text.contains("2:"), "{text}");
    }

    #[test]
    fn invalid_values_are_listed() {
        let yaml = "backends:\n  - {name: a, type: ollama, base_url: 'ftp://x'}\n  - {name: a, type: openai, base_url: 'https://x'}\nmodel_aliases: {x: x}\n";
        let Err(ConfigError::Invalid { problems, .. }) = Config::parse(yaml, "t") else {
            panic!("expected invalid");
        };
        assert_eq!(problems.len(), 4, "{problems:?}");
    }

    #[test]
    fn replicas_must_be_http_and_distinct() {
        let yaml = "backends:\n  - {name: p, type: vllm, base_url: 'http://a/v1', models: [m], replicas: ['http://b/v1', 'ftp://c', 'http://b/v1', 'http://a/v1']}\n";
        let Err(ConfigError::Invalid { problems, .. }) = Config::parse(yaml, "t") else {
            panic!("expected invalid");
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].contains("replicas[1] must start with http"),
            "{problems:?}"
        );
        assert!(problems[1].contains("replicas[2] \"http://b/v1\" is listed twice"));
        assert!(problems[2].contains("replicas[3] \"http://a/v1\" is listed twice"));
        let good = "backends:\n  - {name: p, type: vllm, base_url: 'http://a/v1', models: [m], replicas: ['http://b/v1']}\n";
        let config = Config::parse(good, "t").expect("valid pool");
        assert_eq!(config.backends[0].replicas, ["http://b/v1"]);
    }

    #[test]
    fn interpolation_names_the_missing_variable() {
        let lookup = |n: &str| (n == "A").then(|| "1".to_owned());
        assert_eq!(interpolate("x${A}y", lookup).as_deref(), Ok("x1y"));
        assert_eq!(
            interpolate("${B}", lookup),
            Err("environment variable B is not set".to_owned())
        );
        assert!(format!("{:?}", Secret("sk-123".into())).contains("****"));
    }

    #[test]
    fn aliases_match_exactly_then_by_the_longest_pattern() {
        let config = Config::parse(
            "model_aliases: {'claude-*': big, 'claude-*haiku*': small, claude-x: exact}\n",
            "t",
        )
        .expect("valid");
        assert_eq!(config.resolve_alias("claude-x"), "exact");
        assert_eq!(config.resolve_alias("claude-3-5-haiku-latest"), "small");
        assert_eq!(config.resolve_alias("claude-opus-4"), "big");
        assert_eq!(config.resolve_alias("gpt-4o"), "gpt-4o");
    }

    #[test]
    fn glob_patterns() {
        assert!(glob_match("claude-*", "claude-sonnet-4"));
        assert!(glob_match("*haiku*", "claude-3-5-haiku-latest"));
        assert!(glob_match("a*b*c", "a-b-c"));
        assert!(!glob_match("a*b*c", "a-c-b"));
        assert!(!glob_match("gpt-4o", "gpt-4o-mini"));
    }

    #[test]
    fn model_entries_in_both_forms() {
        let yaml = "backends:\n  - name: l\n    type: ollama\n    base_url: http://x\n    context_window: 8192\n    models: [a, {name: b, context_window: 100, thinking: true}, 'q*']\n";
        let config = Config::parse(yaml, "t").expect("valid");
        let b = &config.backends[0];
        assert_eq!(b.context_window_of("a"), Some(8192));
        assert_eq!(b.context_window_of("b"), Some(100));
        assert_eq!(b.model_spec("qwen").map(|s| s.name), Some("qwen".into()));
        assert_eq!(b.model_spec("z"), None);
    }

    #[test]
    fn a_non_loopback_bind_needs_a_dashboard_token() {
        for bind in ["127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"] {
            let yaml = format!("server: {{bind: '{bind}'}}\n");
            Config::parse(&yaml, "t").unwrap_or_else(|e| panic!("{bind}: {e}"));
        }
        let err = Config::parse("server: {bind: 0.0.0.0}\n", "t").expect_err("needs a token");
        assert!(err.to_string().contains("dashboard_token"), "{err}");
        Config::parse("server: {bind: 0.0.0.0, dashboard_token: '${T}'}\n", "t")
            .expect("a token makes it valid");
    }

    #[test]
    fn mitm_upstream_keys_are_restart_only_and_validated() {
        let old = Config::default();
        let mut next = Config::default();
        next.mitm
            .upstream_overrides
            .insert("api.anthropic.com".into(), "127.0.0.1:9".into());
        next.mitm.passthrough_default = false;
        assert_eq!(old.restart_only_changes(&next).len(), 1);
        let applied = old.hot_applicable(next);
        assert!(applied.mitm.upstream_overrides.is_empty());
        assert!(!applied.mitm.passthrough_default);

        let yaml = "mitm: {enabled: true, port: 8080, hosts: ['*.ok.com', 'a/b'], upstream_overrides: {x: 'nope'}}\n";
        let Err(ConfigError::Invalid { problems, .. }) = Config::parse(yaml, "t") else {
            panic!("expected invalid");
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[test]
    fn client_timeouts_default_and_refuse_zero() {
        let server = Config::parse("{}", "t").expect("empty is valid").server;
        assert_eq!(
            server.client_limits(),
            glider_sys::listen::Limits::from_secs(30, 60, 60)
        );
        assert_eq!(server.shutdown_grace_secs, 30);
        let yaml = "server: {header_read_timeout_secs: 0, body_read_timeout_secs: 0, idle_timeout_secs: 0, shutdown_grace_secs: 0}\n";
        let Err(ConfigError::Invalid { problems, .. }) = Config::parse(yaml, "t") else {
            panic!("expected invalid");
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems
                .iter()
                .all(|p| p.contains("_timeout_secs must be at least 1"))
        );
    }

    #[test]
    fn turn_budget_is_off_and_the_loop_guard_on_by_default_and_both_are_checked() {
        let config = Config::parse("{}\n", "t").expect("valid");
        assert_eq!(config.context.turn_budget, TurnBudget::default());
        assert_eq!(
            config.context.loop_guard,
            LoopGuard {
                enabled: true,
                repeats: 5
            }
        );
        let yaml = "context: {turn_budget: {soft: 30, hard: 20}, loop_guard: {repeats: 1}}\n";
        let Err(ConfigError::Invalid { problems, .. }) = Config::parse(yaml, "t") else {
            panic!("expected invalid");
        };
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("soft (30) must not be above hard (20)"));
        assert!(problems[1].contains("loop_guard.repeats must be at least 2"));
    }

    #[test]
    fn transparent_settings_are_checked() {
        let yaml = "mitm: {enabled: true, transparent: true, transparent_port: 443, transparent_ports: [443], transparent_processes: ['/usr/bin/curl', '']}\n";
        let Err(ConfigError::Invalid { problems, .. }) = Config::parse(yaml, "t") else {
            panic!("expected invalid");
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.contains("must not contain mitm.transparent_port"))
        );
        let yaml = "mitm: {enabled: true, transparent: true, transparent_port: 0, transparent_ports: []}\n";
        let Err(ConfigError::Invalid { problems, .. }) = Config::parse(yaml, "t") else {
            panic!("expected invalid");
        };
        assert_eq!(problems.len(), 2, "{problems:?}");
        let ok = "mitm: {enabled: true, transparent: true, transparent_processes: [curl]}\n";
        assert!(Config::parse(ok, "t").is_ok());
        // A transparent setting changed on reload waits for a restart.
        let old = Config::default();
        let mut next = Config::default();
        next.mitm.transparent_processes = vec!["curl".into()];
        assert_eq!(old.restart_only_changes(&next).len(), 1);
    }

    #[test]
    fn restart_only_keys_are_kept_on_reload() {
        let old = Config::default();
        let mut next = Config::default();
        next.server.proxy_port = 9999;
        next.mitm.origin_on_local_error = false;
        next.model_aliases.insert("a".into(), "b".into());
        assert_eq!(old.restart_only_changes(&next).len(), 1);
        let applied = old.hot_applicable(next);
        assert_eq!(applied.server.proxy_port, 8080);
        assert!(!applied.mitm.origin_on_local_error);
        assert_eq!(applied.model_aliases.len(), 1);
    }
}
