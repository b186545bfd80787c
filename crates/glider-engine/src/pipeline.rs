//! `PipelineCompleter`: decode → alias → token estimate → route → build per candidate →
//! executor → a reply the door can render. Same dialect on both sides and nothing to
//! rewrite but the model: the body and the reply are forwarded as bytes.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use glider_backend::executor::summarise;
use glider_backend::{AttemptFailure, Backend, BodyStream, Candidate, UpstreamRequest};
use glider_config::{BackendKind, Config, ConfigHandle};
use glider_ngl::{ApiError, Dialect, ErrorKind, Request, Response, Role, StreamEvent, Turn};
use glider_starlark::Rules;
use glider_dialects::{StreamDecoder, codec};
use http::HeaderMap;
use serde::Serialize;

use crate::events::{Bus, PipelineEvent, Tracker, unix_ms};
use crate::router::classifier::{Classifier, ScoringClassifier};
use crate::router::sticky::StickyStore;
use crate::router::{self, RouteDecision, RouteInput, Router, explicit};
use crate::tokenizer::estimate_request_tokens;
use crate::transform;

/// A request as a door received it.
#[derive(Debug, Clone)]
pub struct CompletionRequest {
    pub front: Dialect,
    pub body: Bytes,
    pub headers: HeaderMap,
    /// Which door took it (`gateway`, `mitm`), for the record.
    pub door: &'static str,
    /// MITM only: a request that is not for a local backend is not executed; the
    /// pipeline answers [`CompleteError::OriginPassthrough`] and the door forwards the
    /// original request to the CLI's origin with its credentials unchanged. Cloud
    /// fallback is the origin's job then, so only local candidates are tried.
    pub origin_passthrough: bool,
}

impl CompletionRequest {
    /// A gateway request.
    pub fn gateway(front: Dialect, body: Bytes, headers: HeaderMap) -> Self {
        CompletionRequest {
            front,
            body,
            headers,
            door: "gateway",
            origin_passthrough: false,
        }
    }
}

/// Why the pipeline did not produce a reply.
pub enum CompleteError {
    /// Show this error to the client, in its dialect.
    Api(ApiError),
    /// MITM only: not a local request; forward it to the origin. The tracker records
    /// the request; the door fills in the origin's status before dropping it.
    OriginPassthrough {
        decision: Box<RouteDecision>,
        tracker: Box<Tracker>,
    },
}

impl From<ApiError> for CompleteError {
    fn from(error: ApiError) -> Self {
        CompleteError::Api(error)
    }
}

impl std::fmt::Debug for CompleteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompleteError::Api(error) => write!(f, "Api({error})"),
            CompleteError::OriginPassthrough { decision, .. } => {
                write!(
                    f,
                    "OriginPassthrough({}: {})",
                    decision.rule, decision.reason
                )
            }
        }
    }
}

/// How the reply body reaches the client.
pub enum CompletionBody {
    /// The backend speaks the client's dialect: its bytes, untouched.
    Raw {
        content_type: Option<String>,
        first_chunk: Bytes,
        rest: BodyStream,
    },
    /// A translated stream of ngl events (encode with the front codec).
    Events(Pin<Box<dyn Stream<Item = StreamEvent> + Send>>),
    /// A translated whole reply.
    Whole(Response),
}

/// A reply with the decision that produced it.
pub struct Completion {
    /// The request's id on the event bus.
    pub id: u64,
    pub decision: RouteDecision,
    /// The backend and model that answered.
    pub backend: String,
    pub model: String,
    /// Whether the client asked for a stream.
    pub stream: bool,
    pub body: CompletionBody,
    /// Attempts that failed before the one that answered.
    pub failures: Vec<AttemptFailure>,
}

impl Completion {
    /// The `x-glider-route` header value.
    pub fn route_header(&self) -> String {
        self.decision.header_value(&self.backend, &self.model)
    }
}

/// Backends built from one config; replaced whole on reload.
pub struct Runtime {
    pub config: Arc<Config>,
    pub backends: Vec<Arc<Backend>>,
    /// The classifier built from `routing.classifier` (rebuilt on reload: the hot swap).
    pub classifier: Box<dyn Classifier>,
    /// The compiled Starlark rules, if configured and valid.
    pub starlark: Option<Arc<Rules>>,
    /// Why the configured Starlark file is not in use, if so.
    pub starlark_error: Option<String>,
}

impl Runtime {
    /// Build from `config`, reusing `previous` backends whose config did not change (so
    /// their breaker and health survive the reload). `base` is the directory relative
    /// paths in the config are read from.
    fn build(config: Arc<Config>, previous: Option<&Runtime>, base: &Path) -> Runtime {
        let backends = config
            .backends
            .iter()
            .map(|bc| {
                previous
                    .and_then(|p| {
                        p.backends
                            .iter()
                            .find(|b| b.config.name == bc.name && raw_config_eq(b, bc))
                    })
                    .cloned()
                    .unwrap_or_else(|| Backend::new(bc.clone()))
            })
            .collect();
        let classifier = Box::new(ScoringClassifier::from_config(&config.routing.classifier));
        let (starlark, starlark_error) = match load_rules(&config, base) {
            Ok(rules) => (rules.map(Arc::new), None),
            Err(error) => {
                tracing::error!(%error, "starlark rules not loaded; the rule is skipped");
                (None, Some(error))
            }
        };
        Runtime {
            config,
            backends,
            classifier,
            starlark,
            starlark_error,
        }
    }

    /// The router over this snapshot.
    pub fn router<'a>(&'a self, sticky: &'a StickyStore) -> Router<'a> {
        Router {
            config: &self.config,
            backends: &self.backends,
            classifier: self.classifier.as_ref(),
            starlark: self.starlark.as_deref(),
            sticky,
        }
    }

    pub fn backend(&self, name: &str) -> Option<&Arc<Backend>> {
        self.backends.iter().find(|b| b.name() == name)
    }
}

/// The directory of the config file (relative paths in it are read from there).
fn config_dir(config: &ConfigHandle) -> PathBuf {
    config
        .path()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The path of the configured Starlark file, relative paths read from `base`.
pub fn rules_path(config: &Config, base: &Path) -> Option<PathBuf> {
    let file = config.routing.starlark.file.as_ref()?;
    let path = Path::new(file);
    Some(if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    })
}

fn load_rules(config: &Config, base: &Path) -> Result<Option<Rules>, String> {
    let Some(path) = rules_path(config, base) else {
        return Ok(None);
    };
    let source = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Rules::compile(&path.display().to_string(), &source).map(Some)
}

fn raw_config_eq(backend: &Backend, config: &glider_config::BackendConfig) -> bool {
    // `Backend` stores its base URL resolved; compare with the config as written.
    let resolved = glider_config::Secret(config.base_url.clone())
        .resolve()
        .map(|u| u.trim_end_matches('/').to_owned())
        .unwrap_or_else(|_| config.base_url.clone());
    let written = glider_config::BackendConfig {
        base_url: resolved,
        ..config.clone()
    };
    backend.config == written
}

/// One model as `/v1/models` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    pub id: String,
    pub backend: String,
    /// An alias names the model it stands for.
    pub alias_of: Option<String>,
    /// Why this model cannot be served now, if so.
    pub unavailable: Option<String>,
}

/// The pipeline, shared by every door. Stateless per request.
pub struct Engine {
    config: ConfigHandle,
    runtime: ArcSwap<Runtime>,
    bus: Bus,
    sticky: StickyStore,
}

/// How often local backends are probed.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(10);

impl Engine {
    pub fn new(config: ConfigHandle) -> Arc<Engine> {
        let runtime = Runtime::build(config.snapshot(), None, &config_dir(&config));
        Arc::new(Engine {
            config,
            runtime: ArcSwap::from_pointee(runtime),
            bus: Bus::default(),
            sticky: StickyStore::default(),
        })
    }

    /// The backends and config a request should use.
    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.load_full()
    }

    pub fn config(&self) -> &ConfigHandle {
        &self.config
    }

    /// The event bus every request is reported on.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// Follow config reloads and probe local backends, until the engine is dropped.
    pub fn spawn_background(self: &Arc<Self>) {
        self.follow_config();
        self.spawn_health_probes();
    }

    /// Rebuild the runtime whenever the config changes (backends whose settings did not
    /// change keep their breaker and health), then say so on the bus.
    pub fn follow_config(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let mut changes = self.config.subscribe();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let Some(engine) = weak.upgrade() else { break };
                let config = changes.borrow_and_update().clone();
                engine.rebuild(config);
            }
        });
    }

    /// Build a new runtime from `config` (keeping unchanged backends) and publish it.
    fn rebuild(&self, config: Arc<Config>) {
        let next = Runtime::build(config, Some(&self.runtime()), &config_dir(&self.config));
        let backends = next.backends.iter().map(|b| b.name().to_owned()).collect();
        self.runtime.store(Arc::new(next));
        self.bus.publish(PipelineEvent::ConfigReloaded {
            at_ms: unix_ms(),
            backends,
        });
    }

    /// Recompile the Starlark rules whenever their file changes (the file named by the
    /// config at start; a config reload that names another file recompiles at once).
    /// Returns the OS watcher, which must be kept alive.
    pub fn watch_rules(self: &Arc<Self>) -> Option<glider_config::FileWatcher> {
        let path = rules_path(&self.runtime().config, &config_dir(&self.config))?;
        let weak = Arc::downgrade(self);
        match glider_config::watch_path(&path, move || {
            let Some(engine) = weak.upgrade() else {
                return false;
            };
            engine.rebuild(engine.runtime().config.clone());
            tracing::info!("starlark rules reloaded");
            true
        }) {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                tracing::warn!(%error, "cannot watch the starlark rules file");
                None
            }
        }
    }

    /// Probe every backend now and every [`HEALTH_INTERVAL`].
    pub fn spawn_health_probes(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HEALTH_INTERVAL);
            loop {
                tick.tick().await;
                let Some(engine) = weak.upgrade() else { break };
                engine.probe_all().await;
            }
        });
    }

    /// Probe every backend once (concurrently).
    pub async fn probe_all(&self) {
        let runtime = self.runtime();
        futures_util::future::join_all(runtime.backends.iter().map(|b| b.probe())).await;
    }

    /// Every model a client can ask for, with aliases and what is missing.
    pub fn models(&self) -> Vec<ModelInfo> {
        let runtime = self.runtime();
        let mut models = Vec::new();
        for backend in runtime.backends.iter().filter(|b| b.config.enabled) {
            let health = backend.health();
            let unavailable = backend.unavailable.clone().or(health.detail.clone());
            for id in backend.config.concrete_models() {
                models.push(ModelInfo {
                    id,
                    backend: backend.name().to_owned(),
                    alias_of: None,
                    unavailable: unavailable.clone(),
                });
            }
        }
        // Pattern aliases (`claude-*`) are not models a client can pick from a list.
        for (alias, target) in runtime
            .config
            .model_aliases
            .iter()
            .filter(|(a, _)| !a.contains('*'))
        {
            let backend = models.iter().find(|m| &m.id == target).cloned();
            models.push(ModelInfo {
                id: alias.clone(),
                backend: backend
                    .as_ref()
                    .map(|m| m.backend.clone())
                    .unwrap_or_default(),
                alias_of: Some(target.clone()),
                unavailable: backend.and_then(|m| m.unavailable),
            });
        }
        models
    }

    /// Decode a request in its dialect, apply the alias and estimate its tokens.
    pub fn prepare(&self, front: Dialect, body: &[u8]) -> Result<(Request, String, u64), ApiError> {
        let request = codec(front).decode_request(body)?;
        let runtime = self.runtime();
        let model = runtime.config.resolve_alias(&request.model).to_owned();
        let (tokens, _) = estimate_request_tokens(&request, &model);
        Ok((request, model, tokens))
    }

    /// Route a prepared request. With `explain`, every rule gives its opinion.
    pub fn decide(
        &self,
        front: Dialect,
        request: &Request,
        headers: &HeaderMap,
        model: &str,
        tokens: u64,
        explain: bool,
    ) -> Result<RouteDecision, ApiError> {
        let runtime = self.runtime();
        let input = RouteInput {
            front,
            request,
            headers,
            model,
            estimated_tokens: tokens,
        };
        runtime.router(&self.sticky).decide(&input, explain)
    }

    /// `glider route explain`: decode, alias, estimate and route a body without sending
    /// it anywhere.
    pub fn explain(
        &self,
        front: Dialect,
        body: &[u8],
        headers: &HeaderMap,
    ) -> Result<RouteDecision, ApiError> {
        let (request, model, tokens) = self.prepare(front, body)?;
        self.decide(front, &request, headers, &model, tokens, true)
    }

    /// Run one completion through the pipeline. Every call is reported on the bus.
    pub async fn complete(&self, incoming: CompletionRequest) -> Result<Completion, CompleteError> {
        let client = incoming
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut tracker = self.bus.start(incoming.door, incoming.front, client);
        match self.run(&incoming, &mut tracker).await {
            Ok(Run::Answered(parts)) => Ok(parts.finish(tracker)),
            Ok(Run::Origin(decision)) => {
                tracker.record.backend = Some("origin".into());
                tracker.record.local = Some(false);
                tracker.announce();
                Err(CompleteError::OriginPassthrough {
                    decision,
                    tracker: Box::new(tracker),
                })
            }
            Err(error) => {
                tracing::info!(front = incoming.front.as_str(), kind = ?error.kind, message = %error.message, "request failed");
                tracker.fail(error.kind.status(), &error.message);
                Err(CompleteError::Api(error))
            }
        }
    }

    async fn run(
        &self,
        incoming: &CompletionRequest,
        tracker: &mut Tracker,
    ) -> Result<Run, ApiError> {
        let front = incoming.front;
        let (mut request, model, tokens) = self.prepare(front, &incoming.body)?;
        tracker.record.model_requested = request.model.clone();
        tracker.record.stream = request.stream;
        tracker.record.estimated_tokens = tokens;
        let mut decision =
            match self.decide(front, &request, &incoming.headers, &model, tokens, false) {
                // No backend serves the model: for MITM that is not a local request, so
                // it belongs to the CLI's origin, which knows every model it offers.
                Err(error) if incoming.origin_passthrough && error.kind == ErrorKind::NotFound => {
                    tracker.record.rule = Some("origin".into());
                    tracker.record.reason = Some(error.message.clone());
                    return Ok(Run::Origin(Box::new(RouteDecision {
                        rule: "origin",
                        reason: error.message,
                        score: None,
                        estimated_tokens: tokens,
                        session: None,
                        opinions: Vec::new(),
                        candidates: Vec::new(),
                        flag: None,
                    })));
                }
                other => other?,
            };
        // A routing flag is the user's instruction to Glider, not to the model.
        let mut body = incoming.body.clone();
        if let Some(flag) = &decision.flag {
            explicit::strip_from_request(&mut request, flag);
            if let Some(stripped) = explicit::strip_from_body(front, &body, flag) {
                body = stripped;
            }
        }
        let runtime = self.runtime();
        tracker.record.rule = Some(decision.rule.to_owned());
        tracker.record.reason = Some(decision.reason.clone());
        if incoming.origin_passthrough {
            decision.candidates.retain(|c| c.backend.kind().is_local());
            if decision.candidates.is_empty() {
                return Ok(Run::Origin(Box::new(decision)));
            }
        }
        tracker.announce();
        let stream = request.stream;
        let executed = glider_backend::execute(&decision.candidates, |candidate| {
            Ok(build_upstream(
                front, incoming, &body, &request, candidate, &runtime,
            ))
        })
        .await;
        let executed = match executed {
            Ok(executed) => executed,
            Err(failures) => {
                tracker.record.fallbacks = failures.iter().map(ToString::to_string).collect();
                let (kind, message) = summarise(&failures);
                return Err(ApiError::new(kind, message));
            }
        };
        let candidate = &decision.candidates[executed.index];
        tracker.record.fallbacks = executed.failures.iter().map(ToString::to_string).collect();
        tracker.record.backend = Some(candidate.backend.name().to_owned());
        tracker.record.model_used = Some(candidate.model.clone());
        tracker.record.local = Some(candidate.backend.kind().is_local());
        tracker.first_byte();
        let backend_dialect = candidate.backend.dialect_for(front);
        let response = executed.response;
        tracing::info!(
            front = front.as_str(),
            requested = %request.model,
            backend = candidate.backend.name(),
            model = %candidate.model,
            rule = decision.rule,
            tokens,
            stream,
            fallbacks = executed.failures.len(),
            "completion routed"
        );
        let body = if backend_dialect == front {
            tracker.observe_raw_in(backend_dialect, stream);
            CompletionBody::Raw {
                content_type: response.content_type,
                first_chunk: response.first_chunk,
                rest: response.rest,
            }
        } else if stream {
            CompletionBody::Events(decode_events(
                codec(backend_dialect).stream_decoder(),
                response.first_chunk,
                response.rest,
            ))
        } else {
            let body = response
                .collect()
                .await
                .map_err(|f| ApiError::new(f.kind, f.to_string()))?;
            CompletionBody::Whole(codec(backend_dialect).decode_response(&body)?)
        };
        Ok(Run::Answered(Box::new(Answered {
            backend: candidate.backend.name().to_owned(),
            model: candidate.model.clone(),
            decision,
            stream,
            body,
            failures: executed.failures,
        })))
    }

    /// Count input tokens: an Anthropic backend that serves the model counts exactly;
    /// otherwise Glider estimates (local dialects have no counting endpoint).
    pub async fn count_tokens(&self, body: &[u8], headers: &HeaderMap) -> Result<u64, ApiError> {
        // count_tokens bodies carry no max_tokens; the Messages decoder wants one.
        let mut value = glider_dialects::parse_json(body)?;
        if let Some(map) = value.as_object_mut() {
            map.entry("max_tokens").or_insert(1.into());
        }
        let normalized = serde_json::to_vec(&value)
            .map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))?;
        let (_, model, tokens) = self.prepare(Dialect::Anthropic, &normalized)?;
        let runtime = self.runtime();
        let exact = runtime.backends.iter().find(|b| {
            b.kind() == BackendKind::Anthropic
                && b.unavailable.is_none()
                && b.config.model_spec(&model).is_some()
        });
        if let Some(backend) = exact {
            let mut upstream_body = value;
            upstream_body["model"] = model.clone().into();
            if let Some(map) = upstream_body.as_object_mut() {
                map.remove("max_tokens");
            }
            match backend
                .count_tokens(&upstream_body, forward_headers(headers, backend))
                .await
            {
                Ok(count) => return Ok(count),
                Err(e) => {
                    tracing::warn!(backend = backend.name(), error = %e, "count_tokens upstream failed; estimating")
                }
            }
        }
        Ok(tokens)
    }
}

enum Run {
    Answered(Box<Answered>),
    Origin(Box<RouteDecision>),
}

/// A completion before its body is wrapped for tracking.
struct Answered {
    backend: String,
    model: String,
    decision: RouteDecision,
    stream: bool,
    body: CompletionBody,
    failures: Vec<AttemptFailure>,
}

impl Answered {
    /// Hand the tracker to the body, so the request is recorded when the reply ends
    /// (or when the client drops it).
    fn finish(self, mut tracker: Tracker) -> Completion {
        let id = tracker.id();
        let body = match self.body {
            CompletionBody::Raw {
                content_type,
                first_chunk,
                rest,
            } => {
                tracker.raw_bytes(&first_chunk);
                CompletionBody::Raw {
                    content_type,
                    first_chunk,
                    rest: Box::pin(tracked(rest, tracker, |t, chunk| match chunk {
                        Ok(bytes) => t.raw_bytes(bytes),
                        Err(failure) => t.record.error = Some(failure.to_string()),
                    })),
                }
            }
            CompletionBody::Events(events) => {
                CompletionBody::Events(Box::pin(tracked(events, tracker, Tracker::event)))
            }
            CompletionBody::Whole(response) => {
                tracker.response(&response);
                tracker.end();
                CompletionBody::Whole(response)
            }
        };
        Completion {
            id,
            backend: self.backend,
            model: self.model,
            decision: self.decision,
            stream: self.stream,
            body,
            failures: self.failures,
        }
    }
}

/// `stream`, with each item shown to the tracker, which ends with the stream (or is
/// dropped with it, which records a client that went away).
fn tracked<S, T>(
    stream: S,
    tracker: Tracker,
    observe: fn(&mut Tracker, &T),
) -> impl Stream<Item = T> + Send
where
    S: Stream<Item = T> + Send + Unpin + 'static,
    T: Send + 'static,
{
    futures_util::stream::unfold(
        (stream, Some(tracker)),
        move |(mut stream, mut tracker)| async move {
            match stream.next().await {
                Some(item) => {
                    if let Some(t) = &mut tracker {
                        observe(t, &item);
                    }
                    Some((item, (stream, tracker)))
                }
                None => {
                    if let Some(mut t) = tracker.take() {
                        t.end();
                    }
                    None
                }
            }
        },
    )
}

/// The request body and headers for one candidate. `body` is the client's body (with
/// any routing flag already stripped).
fn build_upstream(
    front: Dialect,
    incoming: &CompletionRequest,
    body: &Bytes,
    request: &Request,
    candidate: &Candidate,
    runtime: &Runtime,
) -> UpstreamRequest {
    let backend = &candidate.backend;
    let dialect = backend.dialect_for(front);
    let strip_thinking = backend.kind() == BackendKind::Ollama
        && request.thinking.is_some()
        && backend
            .config
            .model_spec(&candidate.model)
            .and_then(|s| s.thinking)
            != Some(true);
    let local = backend.kind().is_local();
    let mut adapted = None;
    let window = router::local_window(&runtime.config, candidate);
    let config = &runtime.config;
    if local && transform::needs_rewrite(request, &config.context, &config.transform, window) {
        // Local only (spec): a bounded history, then the opt-in transform.
        let mut local_request = request.clone();
        let cut =
            transform::bound_local_context(&mut local_request, &runtime.config.context, window);
        let transformed = transform::apply(&mut local_request, &runtime.config.transform);
        if cut.dropped_turns > 0 {
            tracing::debug!(
                backend = backend.name(),
                dropped = cut.dropped_turns,
                kept_tokens = cut.kept_tokens,
                "local history bounded"
            );
        }
        if cut.dropped_turns > 0 || transformed {
            adapted = Some(local_request);
        }
    }
    let body = match adapted {
        None if dialect == front && !strip_thinking => {
            rewrite_model(body, &request.model, &candidate.model)
        }
        adapted => {
            let mut adapted = adapted.unwrap_or_else(|| request.clone());
            adapted.model = candidate.model.clone();
            if strip_thinking {
                adapted.thinking = None;
            }
            if local {
                hoist_system_turns(&mut adapted.turns);
            }
            Bytes::from(codec(dialect).encode_request(&adapted).to_string())
        }
    };
    UpstreamRequest {
        dialect,
        body,
        stream: request.stream,
        headers: forward_headers(&incoming.headers, backend),
    }
}

/// Gather every system turn into one leading turn. Claude Code puts a system entry
/// after the user turn; many local chat templates refuse a system message anywhere but
/// first ("System message must be at the beginning").
fn hoist_system_turns(turns: &mut Vec<Turn>) {
    let later_system = turns.iter().skip(1).any(|t| t.role == Role::System);
    if !later_system {
        return;
    }
    let (system, rest): (Vec<Turn>, Vec<Turn>) = std::mem::take(turns)
        .into_iter()
        .partition(|t| t.role == Role::System);
    let parts = system.into_iter().flat_map(|t| t.parts).collect();
    turns.push(Turn {
        role: Role::System,
        parts,
    });
    turns.extend(rest);
}

/// Client headers a backend should see: Anthropic's beta flags to Anthropic, and the
/// client's own credentials to a cloud backend that has no key configured (so a CLI's
/// key keeps working through Glider).
fn forward_headers(client: &HeaderMap, backend: &Backend) -> HeaderMap {
    let mut out = HeaderMap::new();
    let mut copy = |name: &str| {
        for value in client.get_all(name) {
            if let Ok(name) = http::HeaderName::try_from(name) {
                out.append(name, value.clone());
            }
        }
    };
    if backend.kind() == BackendKind::Anthropic {
        copy("anthropic-beta");
    }
    if !backend.kind().is_local() && !backend.has_api_key() {
        match backend.kind() {
            BackendKind::Anthropic => {
                copy("x-api-key");
                copy("authorization");
            }
            _ => copy("authorization"),
        }
    }
    out
}

/// The body with its top-level `model` replaced; untouched bytes when it is unchanged.
fn rewrite_model(body: &Bytes, from: &str, to: &str) -> Bytes {
    if from == to {
        return body.clone();
    }
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body) {
        Ok(mut map) => {
            map.insert("model".into(), to.into());
            serde_json::to_vec(&map)
                .map(Bytes::from)
                .unwrap_or_else(|_| body.clone())
        }
        Err(_) => body.clone(),
    }
}

/// Decode a backend's raw stream into ngl events; a transport failure or a truncated
/// stream ends with an `Error` event.
/// A backend's raw streamed reply as ngl events, decoded by `decoder` as the bytes
/// arrive; a transport or decode failure ends the stream with `StreamEvent::Error`.
pub fn decode_events(
    decoder: Box<dyn StreamDecoder>,
    first_chunk: Bytes,
    rest: BodyStream,
) -> Pin<Box<dyn Stream<Item = StreamEvent> + Send>> {
    struct State {
        decoder: Box<dyn StreamDecoder>,
        first: Option<Bytes>,
        rest: BodyStream,
        queue: VecDeque<StreamEvent>,
        done: bool,
    }
    let state = State {
        decoder,
        first: Some(first_chunk),
        rest,
        queue: VecDeque::new(),
        done: false,
    };
    Box::pin(futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.queue.pop_front() {
                if matches!(event, StreamEvent::Error { .. }) {
                    s.done = true;
                    s.queue.clear();
                }
                return Some((event, s));
            }
            if s.done {
                return None;
            }
            let chunk = match s.first.take() {
                Some(first) => Some(Ok(first)),
                None => s.rest.next().await,
            };
            match chunk {
                Some(Ok(bytes)) => match s.decoder.feed(&bytes) {
                    Ok(events) => s.queue.extend(events),
                    Err(error) => s.queue.push_back(StreamEvent::Error { error }),
                },
                Some(Err(failure)) => s.queue.push_back(StreamEvent::Error {
                    error: ApiError::new(failure.kind, format!("backend stream failed: {failure}")),
                }),
                None => {
                    s.queue.extend(s.decoder.finish());
                    s.done = true;
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_turns_are_hoisted_in_order() {
        let mut turns = vec![
            Turn::text(Role::System, "a"),
            Turn::text(Role::User, "q"),
            Turn::text(Role::System, "b"),
        ];
        hoist_system_turns(&mut turns);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].role, Role::System);
        assert_eq!(turns[0].plain_text(), "a\nb");
        assert_eq!(turns[1].plain_text(), "q");
    }

    #[test]
    fn model_rewrite_keeps_untouched_bytes_when_unchanged() {
        let body = Bytes::from_static(b"{\"model\":\"a\",  \"x\":1}");
        assert_eq!(rewrite_model(&body, "a", "a"), body);
        let rewritten: serde_json::Value =
            serde_json::from_slice(&rewrite_model(&body, "a", "b")).expect("json");
        assert_eq!(rewritten, serde_json::json!({"model": "b", "x": 1}));
    }
}
