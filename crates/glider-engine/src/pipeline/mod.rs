//! `PipelineCompleter`: every door hands a request to [`Engine::complete`], which runs
//! the [`phases`] in order — the deciding ones ([`Engine::prepare_completion`]), then
//! those that carry the decision out ([`Engine::complete_prepared`]). Same dialect on
//! both sides and nothing to rewrite but the model: the body and the reply are
//! forwarded as bytes.

mod compare;
mod count_tokens;
mod fan_out;
mod models;
mod phases;
mod probes;
mod reply;
mod request;
mod runtime;
mod shadow;
mod stops;
mod upstream;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use glider_config::ConfigHandle;
use glider_dialects::codec;
use glider_ngl::{ApiError, Dialect, ErrorKind, Request};
use glider_vocab::{ContextSink, DecidedTurn, Door, SessionBudget, UNSESSIONED};
use http::HeaderMap;

pub use fan_out::TtftBook;
pub use models::ModelInfo;
pub use probes::HEALTH_INTERVAL;
pub use reply::{CompleteError, Completion, CompletionBody, decode_events, stream_error_event};
pub use request::CompletionRequest;
pub use runtime::{Runtime, rules_path};
pub use shadow::ShadowBudget;

use crate::context::ReplyCapture;
use crate::contextkit::ContextKit;
use crate::events::{Bus, Tracker};
use crate::hotswap::{Registry, Swap};
use crate::router::sticky::StickyStore;
use crate::router::{RouteDecision, RouteInput};
use crate::tokenizer::estimate_request_tokens;
use phases::{CARRYING_OUT, DECIDING, Flow, Job};
use runtime::{RuntimeModule, config_dir};

/// The pipeline, shared by every door. Stateless per request.
pub struct Engine {
    config: ConfigHandle,
    runtime: Arc<Swap<Runtime>>,
    /// Rebuilds `runtime`; holds the tool providers attached to it.
    runtime_module: Arc<RuntimeModule>,
    /// Every module a config reload is handed to (the runtime, today).
    hotswap: Registry,
    bus: Bus,
    sticky: Arc<StickyStore>,
    /// Told of every request once decided and once recorded (`glider-context`).
    context: OnceLock<Arc<dyn ContextSink>>,
    /// Each session's and episode's spend, for the turn budget and the loop guard.
    kit: Arc<ContextKit>,
    /// GPU memory for local models (docs/vram.md), when attached.
    vram: OnceLock<Arc<glider_vram::Vram>>,
    /// The configured plugins (docs/plugins.md), once attached.
    plugins: OnceLock<Arc<Swap<glider_plugin::Plugins>>>,
    /// Each backend's measured time to first byte, for the hedge's delay.
    ttft: Arc<TtftBook>,
    /// Each local model's measured speed (the fit phase caps replies by it).
    speed: Arc<crate::speed::SpeedBook>,
    /// The shadow copies' budget (fan-out `shadow`).
    shadow: Arc<ShadowBudget>,
}

/// A request decoded, aliased, estimated and routed: the decision is made once, and
/// [`Engine::complete_prepared`] carries out exactly that decision. Dropping it
/// records the request as abandoned by the client; [`Prepared::into_origin`] records
/// it as handed to the origin.
pub struct Prepared {
    /// The request, held out of `job` until it is carried out.
    decision: RouteDecision,
    job: Job,
}

impl Prepared {
    pub fn front(&self) -> Dialect {
        self.job.front
    }

    /// The decoded request (any routing flag stripped).
    pub fn request(&self) -> &Request {
        &self.job.request
    }

    /// The model after `model_aliases`.
    pub fn model(&self) -> &str {
        &self.job.model
    }

    pub fn estimated_tokens(&self) -> u64 {
        self.job.tokens
    }

    pub fn decision(&self) -> &RouteDecision {
        &self.decision
    }

    /// The client's body (routing flag stripped); `None` when prepared from ngl.
    pub fn body(&self) -> Option<&Bytes> {
        self.job.body.as_ref()
    }

    pub fn door(&self) -> Door {
        self.job.door
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.job.headers
    }

    /// Not carried out, and not recorded either: the decision was only wanted to see
    /// where the request goes, and someone else (the CLI's origin) answers it.
    pub fn discard(self) {
        self.job.tracker.forget();
    }

    /// Time the request from now, when it was prepared ahead of being carried out.
    pub fn restart_clock(&mut self) {
        self.job.tracker.restart_clock();
    }

    /// Not run here: the door forwards the request to the CLI's origin, and the record
    /// says so ([`CompleteError::OriginPassthrough`]).
    pub fn into_origin(self) -> CompleteError {
        to_origin(Box::new(self.decision), self.job.tracker)
    }
}

impl Engine {
    pub fn new(config: ConfigHandle) -> Arc<Engine> {
        let runtime_module = Arc::new(RuntimeModule::start(config.snapshot(), config_dir(&config)));
        let runtime = runtime_module.current.clone();
        let hotswap = Registry::default();
        for module in runtime_module.modules() {
            hotswap.register(module);
        }
        Arc::new(Engine {
            config,
            runtime,
            runtime_module,
            hotswap,
            bus: Bus::default(),
            sticky: Arc::default(),
            context: OnceLock::new(),
            kit: Arc::default(),
            vram: OnceLock::new(),
            plugins: OnceLock::new(),
            ttft: Arc::default(),
            speed: Arc::default(),
            shadow: Arc::default(),
        })
    }

    /// Start the plugins of `plugins:` and follow reloads of it (once; a second call
    /// does nothing). `pids` records each plugin's process group.
    pub fn attach_plugins(&self, pids: Option<glider_sys::runstate::DelegatePids>) {
        if self.plugins.get().is_some() {
            return;
        }
        let (current, module) = crate::plugins::attach(
            &self.runtime().config,
            config_dir(&self.config),
            pids,
            &self.bus,
        );
        if self.plugins.set(current).is_ok() {
            self.hotswap.register(module);
        }
    }

    /// The plugins now configured (empty when none are attached).
    pub fn plugins(&self) -> Arc<glider_plugin::Plugins> {
        self.plugins.get().map(|p| p.snapshot()).unwrap_or_default()
    }

    /// The tools Glider serves now: the runtime's set (internal, attached providers)
    /// and after them the ones the configured plugins declare — what `/mcp` offers.
    pub fn served_tools(&self) -> glider_tools::ToolSet {
        crate::plugins::with_plugin_tools(&self.runtime().tools, Some(&self.plugins()))
    }

    /// Say `shutdown` to every plugin and end their processes (Glider is stopping).
    pub async fn stop_plugins(&self) {
        self.plugins().stop().await;
    }

    /// Offer `provider`'s tools (after the internal tools and those attached before)
    /// in every runtime's tool set from now on: the tool loop's, and `/mcp`'s.
    pub fn attach_tools(&self, provider: Arc<dyn glider_tools::ToolProvider>) {
        self.runtime_module.attach_tools(provider);
    }

    /// Plan GPU memory with `vram` from now on (once: a second is handed back).
    pub fn attach_vram(&self, vram: Arc<glider_vram::Vram>) -> Result<(), Arc<glider_vram::Vram>> {
        self.vram.set(vram)
    }

    /// The VRAM state attached, if any (the dashboard shows it).
    pub fn vram(&self) -> Option<&Arc<glider_vram::Vram>> {
        self.vram.get()
    }

    /// Register a module outside the engine (the MCP hub) with the hot-swap registry:
    /// every config reload is handed to it after the engine's own modules.
    pub fn register_hotswap(&self, module: Arc<dyn crate::hotswap::HotSwap>) {
        self.hotswap.register(module);
    }

    /// The backends and config a request should use.
    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.snapshot()
    }

    pub fn config(&self) -> &ConfigHandle {
        &self.config
    }

    /// The event bus every request is reported on.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// Tell `sink` of every request from now on (once: a second sink is refused and
    /// handed back).
    pub fn attach_context(&self, sink: Arc<dyn ContextSink>) -> Result<(), Arc<dyn ContextSink>> {
        self.context.set(sink)
    }

    /// The context sink attached, if any (a delegate run is told to it too).
    pub fn context_sink(&self) -> Option<Arc<dyn ContextSink>> {
        self.context.get().cloned()
    }

    /// What `session` has spent (turns, tokens per backend, local share) and its
    /// current episode, while it is remembered in memory.
    pub fn session_budget(&self, session: &str) -> Option<SessionBudget> {
        self.kit.session(session)
    }

    /// The modules a config reload is handed to.
    pub fn hotswap(&self) -> &Registry {
        &self.hotswap
    }

    /// Follow config reloads and probe local backends, until the engine is dropped.
    pub fn spawn_background(self: &Arc<Self>) {
        self.follow_config();
        self.spawn_health_probes();
        self.speed.follow(&self.bus);
    }

    /// `backend`'s `model`'s measured speed, if any reply of it was measured.
    pub fn speed(&self, backend: &str, model: &str) -> Option<crate::speed::Speed> {
        self.speed.get(backend, model)
    }

    /// Each local backend's models — those it lists, then any other one of it whose
    /// speed was measured — with what fitting gives each ([`crate::fit::LocalFit`]):
    /// backends in config order.
    pub fn local_fits(&self) -> Vec<crate::fit::LocalFit> {
        let runtime = self.runtime();
        let mut fits = Vec::new();
        for backend in runtime.backends.iter().filter(|b| b.is_local()) {
            let mut models: Vec<String> = backend
                .config
                .models
                .iter()
                .map(|m| m.spec().name)
                .collect();
            for measured in self.speed.models_of(backend.name()) {
                if !models.contains(&measured) {
                    models.push(measured);
                }
            }
            for model in models {
                let speed = self.speed(backend.name(), &model);
                let candidate = glider_backend::Candidate {
                    backend: backend.clone(),
                    model,
                };
                fits.push(crate::fit::LocalFit::of(&runtime.config, &candidate, speed));
            }
        }
        fits
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
            plugin: None,
            kind: crate::router::kind_of(request),
        };
        let mut decision = runtime.router(&self.sticky).decide(&input, explain)?;
        if let Some(vram) = self.vram.get() {
            crate::router::warm::pass_over_cold(
                &mut decision,
                vram,
                &runtime.config,
                &runtime.backends,
            );
        }
        Ok(decision)
    }

    /// `glider route explain`: the decision `serve` would carry out for `body`, made on
    /// the same path as a gateway request's — the deciding phases, then the carrying-out
    /// phases that may still change it (compaction) — as a dry run: every rule gives its
    /// opinion, nothing is sent, nothing goes on the bus, no sticky choice is set, no
    /// model is loaded, no plugin is asked or told, the context sink is only read. A
    /// compaction Glider would answer from its continuity record says so in
    /// [`RouteDecision::answered_by`].
    pub async fn explain(
        &self,
        front: Dialect,
        body: &[u8],
        headers: &HeaderMap,
    ) -> Result<RouteDecision, ApiError> {
        let request = codec(front).decode_request(body)?;
        // A bus nobody reads: the dry run's record goes nowhere.
        let tracker = Bus::default().start_for(Door::Gateway, front, headers);
        let mut job = self
            .job(
                tracker,
                front,
                Door::Gateway,
                headers.clone(),
                false,
                Some(Bytes::copy_from_slice(body)),
                request,
            )
            .dry_run();
        let flow = match phases::run(DECIDING, &mut job).await {
            Flow::Continue => phases::run(phases::decision_changing(), &mut job).await,
            stop => stop,
        };
        let Job {
            tracker, decision, ..
        } = job;
        tracker.forget();
        match flow {
            Flow::Continue => decision.ok_or_else(phases::not_routed),
            Flow::Origin(decision) => Ok(*decision),
            Flow::Fail(error) => Err(error),
            Flow::Answer(_) => Err(ApiError::new(
                ErrorKind::Internal,
                "a phase answered a dry run",
            )),
        }
    }

    /// Run one completion through the pipeline. Every call is reported on the bus.
    pub async fn complete(&self, incoming: CompletionRequest) -> Result<Completion, CompleteError> {
        let prepared = self.prepare_completion(incoming).await?;
        self.complete_prepared(prepared).await
    }

    /// Decode a door's request and run the deciding phases on it.
    pub async fn prepare_completion(
        &self,
        incoming: CompletionRequest,
    ) -> Result<Prepared, CompleteError> {
        let tracker = self.start(incoming.door, incoming.front, &incoming.headers);
        let request = match codec(incoming.front).decode_request(&incoming.body) {
            Ok(request) => request,
            Err(error) => return Err(failed(error, tracker, incoming.front)),
        };
        let job = self.job(
            tracker,
            incoming.front,
            incoming.door,
            incoming.headers,
            incoming.origin_passthrough,
            Some(incoming.body),
            request,
        );
        decided(job, self.context.get()).await
    }

    /// Run the deciding phases on a request built as ngl (no client body: every
    /// candidate gets it re-encoded in its dialect).
    pub async fn prepare_decoded(
        &self,
        front: Dialect,
        request: Request,
        headers: HeaderMap,
        door: Door,
        origin_passthrough: bool,
    ) -> Result<Prepared, CompleteError> {
        let tracker = self.start(door, front, &headers);
        let job = self.job(
            tracker,
            front,
            door,
            headers,
            origin_passthrough,
            None,
            request,
        );
        decided(job, self.context.get()).await
    }

    /// Carry out a prepared request's decision: the remaining phases, on exactly the
    /// candidates it was routed to.
    pub async fn complete_prepared(&self, prepared: Prepared) -> Result<Completion, CompleteError> {
        let mut job = prepared.job;
        job.decision = Some(prepared.decision);
        let flow = phases::run(CARRYING_OUT, &mut job).await;
        match flow {
            Flow::Answer(answered) => Ok(answered.finish(job.tracker)),
            Flow::Origin(decision) => Err(to_origin(decision, job.tracker)),
            Flow::Fail(mut error) => {
                if let Some(decision) = &job.decision {
                    error.route = Some(decision.failure_header_value());
                }
                Err(failed(error, job.tracker, job.front))
            }
            Flow::Continue => Err(failed(
                ApiError::new(ErrorKind::Internal, "the pipeline ended without a reply"),
                job.tracker,
                job.front,
            )),
        }
    }

    /// A request's record on the bus, from the moment its door hands it over.
    fn start(&self, door: Door, front: Dialect, headers: &HeaderMap) -> Tracker {
        self.bus.start_for(door, front, headers)
    }

    #[allow(clippy::too_many_arguments)]
    fn job(
        &self,
        tracker: Tracker,
        front: Dialect,
        door: Door,
        headers: HeaderMap,
        origin_passthrough: bool,
        body: Option<Bytes>,
        request: Request,
    ) -> Job {
        Job {
            runtime: self.runtime(),
            sticky: self.sticky.clone(),
            kit: self.kit.clone(),
            tracker,
            front,
            door,
            headers,
            origin_passthrough,
            body,
            request,
            model: String::new(),
            tokens: 0,
            decision: None,
            adapted: Vec::new(),
            endings: Vec::new(),
            upstream: Vec::new(),
            executed: None,
            context: self.context.get().cloned(),
            compaction: false,
            vram: self.vram.get().cloned(),
            plugins: self.plugins.get().map(|p| p.snapshot()),
            ttft: self.ttft.clone(),
            speed: self.speed.clone(),
            shadow: self.shadow.clone(),
            dry_run: false,
        }
    }
}

/// Run the deciding phases; they end with a decision, or the request goes no further.
/// A decided request is told to the context sink, if any.
async fn decided(
    mut job: Job,
    context: Option<&Arc<dyn ContextSink>>,
) -> Result<Prepared, CompleteError> {
    match phases::run(DECIDING, &mut job).await {
        Flow::Continue => match job.decision.take() {
            Some(decision) => {
                if let Some(sink) = context {
                    tell_decided(sink, &mut job, &decision);
                }
                Ok(Prepared { decision, job })
            }
            None => Err(failed(phases::not_routed(), job.tracker, job.front)),
        },
        Flow::Origin(decision) => {
            if let Some(sink) = context {
                tell_decided(sink, &mut job, &decision);
            }
            Err(to_origin(decision, job.tracker))
        }
        Flow::Fail(error) => Err(failed(error, job.tracker, job.front)),
        Flow::Answer(_) => Err(failed(
            ApiError::new(ErrorKind::Internal, "a deciding phase answered the request"),
            job.tracker,
            job.front,
        )),
    }
}

/// Tell the sink of a decided request, and have its tracker keep the reply's tool calls
/// for the sink's second call.
fn tell_decided(sink: &Arc<dyn ContextSink>, job: &mut Job, decision: &RouteDecision) {
    let session = decision.session.as_deref().unwrap_or(UNSESSIONED);
    let key = sink.decided(&DecidedTurn {
        request_id: job.tracker.id(),
        session,
        door: job.door,
        front: job.front,
        request: &job.request,
        model: &job.model,
        rule: decision.rule,
        reason: &decision.reason,
        estimated_tokens: decision.estimated_tokens,
        backend: decision
            .candidates
            .first()
            .map(|c| (c.backend.name(), c.backend.is_local())),
    });
    job.tracker.capture_context(ReplyCapture::new(
        Some((sink.clone(), key)),
        session.to_owned(),
    ));
}

/// The request goes to the CLI's origin; the door fills in the origin's status.
fn to_origin(decision: Box<RouteDecision>, mut tracker: Tracker) -> CompleteError {
    tracker.record.backend = Some("origin".into());
    tracker.record.local = Some(false);
    tracker.announce();
    CompleteError::OriginPassthrough {
        decision,
        tracker: Box::new(tracker),
    }
}

/// The request failed before any reply.
fn failed(error: ApiError, mut tracker: Tracker, front: Dialect) -> CompleteError {
    tracing::info!(front = front.as_str(), kind = ?error.kind, message = %error.message, "request failed");
    tracker.fail(error.kind.status(), &error.message);
    CompleteError::Api(error)
}

#[cfg(test)]
mod tests {
    use glider_config::Config;
    use glider_test_support::captured::captured_file;
    use glider_test_support::{MockConfig, MockVendor};

    use super::*;
    use glider_vocab::RuleName;

    fn engine(mock: &MockVendor) -> Arc<Engine> {
        let yaml = format!(
            "backends:\n\
             \x20 - {{name: local, type: ollama, base_url: '{0}', models: [qwen]}}\n\
             \x20 - {{name: claude, type: anthropic, base_url: '{0}', api_key: k, models: ['claude-*']}}\n",
            mock.base_url()
        );
        let config = Config::parse(&yaml, "t").expect("valid");
        Engine::new(ConfigHandle::new(config, None))
    }

    fn engine_of(yaml: &str) -> Arc<Engine> {
        let config = Config::parse(yaml, "t").expect("valid");
        Engine::new(ConfigHandle::new(config, None))
    }

    fn ask(model: &str) -> Request {
        let body = serde_json::json!({
            "model": model, "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
        });
        codec(Dialect::Anthropic)
            .decode_request(body.to_string().as_bytes())
            .expect("decodes")
    }

    #[tokio::test]
    async fn a_request_prepared_from_ngl_is_routed_once_and_re_encoded() {
        let mock = MockVendor::start(MockConfig::default()).await;
        let engine = engine(&mock);
        let prepared = engine
            .prepare_decoded(
                Dialect::Anthropic,
                ask("qwen"),
                HeaderMap::new(),
                Door::Mitm,
                true,
            )
            .await
            .expect("routes");
        assert!(prepared.body().is_none());
        assert_eq!(prepared.door(), Door::Mitm);
        assert_eq!(prepared.model(), "qwen");
        assert_eq!(prepared.decision().rule, RuleName::Model);
        let completion = engine.complete_prepared(prepared).await.expect("answers");
        assert_eq!(
            (completion.backend.as_str(), completion.model.as_str()),
            ("local", "qwen")
        );
        assert!(matches!(completion.body, CompletionBody::Whole(_)));
        let sent = mock.requests();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].path, "/api/chat", "re-encoded for Ollama");
        assert_eq!(sent[0].body["model"], "qwen");
    }

    #[tokio::test]
    async fn a_prepared_cloud_request_can_go_to_the_origin_unsent() {
        let mock = MockVendor::start(MockConfig::default()).await;
        let engine = engine(&mock);
        let prepared = engine
            .prepare_completion(CompletionRequest::mitm(
                Dialect::Anthropic,
                Bytes::from(
                    serde_json::json!({"model": "claude-x", "max_tokens": 10,
                        "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
                ),
                HeaderMap::new(),
                true,
            ))
            .await
            .expect("routes");
        assert!(prepared.body().is_some());
        assert_eq!(prepared.decision().candidates[0].backend.name(), "claude");
        let CompleteError::OriginPassthrough { decision, .. } = prepared.into_origin() else {
            panic!("to the origin");
        };
        assert_eq!(decision.rule, RuleName::Model);
        assert!(mock.requests().is_empty(), "nothing was sent");
    }

    #[tokio::test]
    async fn an_openai_model_is_counted_with_tiktoken_only_near_a_local_window() {
        use crate::tokenizer::{Method, estimate_for_routing};
        let mock = MockVendor::start(MockConfig::default()).await;
        // ~4,800 bytes: ~1,376 tokens by the byte ratio, about 800 by tiktoken.
        let text = "hello world ".repeat(400);
        let body = serde_json::json!({"model": "gpt-4.1",
            "messages": [{"role": "user", "content": text}]})
        .to_string();
        for (window, near) in [(1_000_000, false), (1_400, true)] {
            let yaml = format!(
                "backends:\n\
                 \x20 - {{name: local, type: vllm, base_url: '{}/v1', models: [{{name: gpt-4.1, context_window: {window}}}]}}\n",
                mock.base_url()
            );
            let config = Config::parse(&yaml, "t").expect("valid");
            let engine = Engine::new(ConfigHandle::new(config, None));
            let prepared = engine
                .prepare_completion(CompletionRequest::gateway(
                    Dialect::OpenAiChat,
                    Bytes::from(body.clone()),
                    HeaderMap::new(),
                ))
                .await
                .expect("routes");
            let exact = estimate_request_tokens(prepared.request(), "gpt-4.1");
            let rough = estimate_for_routing(prepared.request(), "gpt-4.1", |_| false);
            assert_eq!((exact.1, rough.1), (Method::Tiktoken, Method::ByteRatio));
            assert!(exact.0 < rough.0, "{exact:?} {rough:?}");
            let expected = if near { exact.0 } else { rough.0 };
            assert_eq!(prepared.estimated_tokens(), expected, "window {window}");
            prepared.discard();
        }
    }

    /// A Codex turn (an ~80 KB Responses body with a `gpt-*` model) far from every limit
    /// is estimated by the byte ratio alone: no tiktoken pass (issue 20 item 2). The
    /// turn is Codex 0.171.0's captured `plain` one (38 KB, `gpt-5.5`) with 40 KB of
    /// history added before its prompt: the captures hold no turn that large (and
    /// no larger, or it nears the 32k window a local backend is taken to have).
    #[tokio::test]
    async fn a_large_codex_turn_far_from_limits_costs_no_tiktoken_pass() {
        use crate::tokenizer::{Method, estimate_for_routing};
        let mock = MockVendor::start(MockConfig::default()).await;
        let mut body = captured_file("codex", "plain", "001-responses").body;
        assert_eq!(body["model"], "gpt-5.5");
        let history = "let total = items.iter().map(|i| i.price).sum::<u64>();\n".repeat(700);
        let input = body["input"].as_array_mut().expect("input items");
        input.insert(
            input.len() - 1,
            serde_json::json!({"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": history}]}),
        );
        let body = body.to_string();
        assert!(body.len() > 75_000, "{} bytes", body.len());
        let yaml = format!(
            "backends:\n\
             \x20 - {{name: openai, type: openai, base_url: '{0}/v1', api_key: k, models: ['gpt-*']}}\n\
             \x20 - {{name: local, type: vllm, base_url: '{0}/v1', models: [{{name: qwen, context_window: 131072}}]}}\n",
            mock.base_url()
        );
        let engine = engine_of(&yaml);
        let prepared = engine
            .prepare_completion(CompletionRequest::gateway(
                Dialect::OpenAiResponses,
                Bytes::from(body),
                HeaderMap::new(),
            ))
            .await
            .expect("routes");
        let rough = estimate_for_routing(prepared.request(), "gpt-5.5", |_| false);
        let exact = estimate_request_tokens(prepared.request(), "gpt-5.5");
        assert_eq!((rough.1, exact.1), (Method::ByteRatio, Method::Tiktoken));
        assert_ne!(rough.0, exact.0, "the two counts can be told apart");
        assert_eq!(prepared.estimated_tokens(), rough.0);
        assert_eq!(prepared.decision().candidates[0].backend.name(), "openai");
        prepared.discard();
    }

    /// A forwarded reply, whole or streamed, with no context sink attached is read for
    /// its usage by a scan (issue 20 item 3): the record's usage is what a full decode
    /// of the bytes the client got reads.
    #[tokio::test]
    async fn a_forwarded_reply_records_the_usage_a_full_decode_reads() {
        use crate::events::PipelineEvent;
        use futures_util::StreamExt;
        let mock = MockVendor::start(MockConfig::default()).await;
        let yaml = format!(
            "backends:\n\
             \x20 - {{name: claude, type: anthropic, base_url: '{0}', api_key: k, models: ['claude-*']}}\n\
             \x20 - {{name: openai, type: openai, base_url: '{0}/v1', api_key: k, models: ['gpt-*']}}\n",
            mock.base_url()
        );
        let engine = engine_of(&yaml);
        let mut bus = engine.bus().subscribe();
        let cases = [
            (
                Dialect::Anthropic,
                serde_json::json!({"model": "claude-x", "max_tokens": 50,
                "messages": [{"role": "user", "content": "hello there"}]}),
            ),
            (
                Dialect::OpenAiResponses,
                serde_json::json!({"model": "gpt-4.1",
                "input": [{"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": "hello there"}]}]}),
            ),
            (
                Dialect::OpenAiChat,
                serde_json::json!({"model": "gpt-4.1",
                "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": "hello there"}]}),
            ),
        ];
        for (front, body) in cases {
            for stream in [false, true] {
                let mut body = body.clone();
                body["stream"] = stream.into();
                let completion = engine
                    .complete(CompletionRequest::gateway(
                        front,
                        Bytes::from(body.to_string()),
                        HeaderMap::new(),
                    ))
                    .await
                    .expect("answers");
                let CompletionBody::Raw {
                    first_chunk,
                    mut rest,
                    ..
                } = completion.body
                else {
                    panic!("{front:?}: forwarded as bytes");
                };
                let mut wire = first_chunk.to_vec();
                while let Some(chunk) = rest.next().await {
                    wire.extend_from_slice(&chunk.expect("reply"));
                }
                drop(rest);
                let decoded = if stream {
                    let mut decoder = codec(front).stream_decoder();
                    let mut events = decoder.feed(&wire).expect("a stream");
                    events.extend(decoder.finish());
                    let mut usage = glider_ngl::Usage::default();
                    for event in events {
                        if let glider_ngl::StreamEvent::Start { usage: u, .. }
                        | glider_ngl::StreamEvent::Finish { usage: u, .. } = event
                        {
                            usage.merge(&u);
                        }
                    }
                    usage
                } else {
                    codec(front).decode_response(&wire).expect("a reply").usage
                };
                let record = loop {
                    let event = bus.recv().await.expect("bus");
                    if let PipelineEvent::RequestFinished(record) = event.as_ref() {
                        break record.clone();
                    }
                };
                assert_eq!(record.status, Some(200), "{front:?} stream {stream}");
                assert!(
                    decoded.input_tokens > 0,
                    "{front:?} stream {stream}: {decoded:?}"
                );
                assert_eq!(record.usage, decoded, "{front:?} stream {stream}");
            }
        }
    }

    /// A forwarded request reaches the backend as the client's bytes with only `model`
    /// replaced (aliased here), whatever the spacing, key order or escapes around it.
    #[tokio::test]
    async fn a_forwarded_body_is_the_clients_bytes_but_the_model() {
        let mock = MockVendor::start(MockConfig::default()).await;
        let yaml = format!(
            "model_aliases: {{fast: claude-x}}\n\
             backends:\n\
             \x20 - {{name: claude, type: anthropic, base_url: '{0}', api_key: k, models: ['claude-*']}}\n",
            mock.base_url()
        );
        let engine = engine_of(&yaml);
        let body = "{ \"max_tokens\" :50,\n  \"messages\":[{\"role\":\"user\",\"content\":\"say \\\"model\\\": \\u00e9 1.50\"}],\n  \"model\" : \"fast\", \"metadata\":{\"model\":\"fast\"}}";
        let completion = engine
            .complete(CompletionRequest::gateway(
                Dialect::Anthropic,
                Bytes::from(body),
                HeaderMap::new(),
            ))
            .await
            .expect("answers");
        assert_eq!(completion.model, "claude-x");
        let sent = mock.requests();
        let expected = body.replacen("\"model\" : \"fast\"", "\"model\" : \"claude-x\"", 1);
        assert_ne!(expected, body);
        assert_eq!(String::from_utf8_lossy(&sent[0].raw_body), expected);
    }

    /// A local Ollama backend and a cloud Anthropic one on `mock`, with `extra` config.
    fn local_and_claude(mock: &MockVendor, extra: &str) -> Arc<Engine> {
        engine_of(&format!(
            "backends:\n\
             \x20 - {{name: local, type: ollama, base_url: '{0}', models: [qwen], context_window: 131072}}\n\
             \x20 - {{name: claude, type: anthropic, base_url: '{0}', api_key: k, models: ['claude-*']}}\n\
             {extra}",
            mock.base_url()
        ))
    }

    fn session_of(body: &serde_json::Value) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let user_id: serde_json::Value = serde_json::from_str(
            body["metadata"]["user_id"]
                .as_str()
                .expect("a user_id string"),
        )
        .expect("user_id is JSON");
        let session = user_id["session_id"].as_str().expect("a session id");
        headers.insert(
            "x-claude-code-session-id",
            session.parse().expect("a header value"),
        );
        headers
    }

    /// `glider route explain` decides on serve's path (issue 49 item 6). Claude Code
    /// 2.1.197's captured `/compact` with `context.compaction: local` (and `auto`, the
    /// default, since the local model is up and holds it): the route alone
    /// sends it to the cloud (the classifier scores it about -1.2, no opinion, so the
    /// model decides); the compaction phase then puts the local backend first. Explain
    /// stopped at the route and showed `claude`; serve sent it to `local`. Now both say
    /// `local`, and the explain left no trace: nothing sent, nothing on the bus.
    #[tokio::test]
    async fn explain_shows_the_compaction_serve_sends_to_the_local_model() {
        let mock = MockVendor::start(MockConfig::default()).await;
        let compact = captured_file("claude-code", "compact", "002-compact");
        let headers = session_of(&compact.body);
        let bytes = compact.body_bytes();
        for (policy, first) in [("cloud", "claude"), ("local", "local"), ("auto", "local")] {
            let engine = local_and_claude(&mock, &format!("context: {{compaction: {policy}}}\n"));
            let mut bus = engine.bus().subscribe();
            let explained = engine
                .explain(Dialect::Anthropic, &bytes, &headers)
                .await
                .expect("explains");
            assert_eq!(explained.rule, RuleName::Model, "{explained:#?}");
            assert_eq!(
                explained.candidates[0].backend.name(),
                first,
                "compaction: {policy}: {explained:#?}"
            );
            assert_eq!(
                explained
                    .reason
                    .contains("a compaction request, answered locally"),
                policy != "cloud",
                "{}",
                explained.reason
            );
            assert!(explained.answered_by.is_none());
            // Every rule gave its view, as explain always showed.
            assert!(explained.opinions.len() >= 3, "{:?}", explained.opinions);
            assert!(mock.requests().is_empty(), "explain sent nothing");
            assert!(
                matches!(
                    bus.try_recv(),
                    Err(tokio::sync::broadcast::error::TryRecvError::Empty)
                ),
                "explain put nothing on the bus"
            );

            let completion = engine
                .complete(CompletionRequest::gateway(
                    Dialect::Anthropic,
                    Bytes::from(bytes.clone()),
                    headers.clone(),
                ))
                .await
                .expect("answers");
            assert_eq!(completion.backend, first, "served, compaction: {policy}");
            drop(completion);
            let sent = mock.requests();
            let path = if first == "local" {
                "/api/chat"
            } else {
                "/v1/messages"
            };
            assert_eq!(sent.last().map(|r| r.path.as_str()), Some(path));
            mock.clear_requests();
        }
    }

    /// The dry run remembers nothing: a captured `/cloud` turn explained does not stick
    /// the session to the cloud; served, it does, and explain then shows the sticky rule
    /// for the session's next plain turn.
    #[tokio::test]
    async fn explain_sets_no_sticky_choice_and_serve_does() {
        let mock = MockVendor::start(MockConfig::default()).await;
        let engine = local_and_claude(&mock, "");
        let flagged = captured_file("claude-code", "cloud-flag", "002-messages");
        let plain = captured_file("claude-code", "plain", "002-messages");
        let headers = session_of(&flagged.body);
        let explain = |body: Vec<u8>| {
            let engine = engine.clone();
            let headers = headers.clone();
            async move {
                engine
                    .explain(Dialect::Anthropic, &body, &headers)
                    .await
                    .expect("explains")
            }
        };
        let decision = explain(flagged.body_bytes()).await;
        assert_eq!(
            (decision.rule, decision.candidates[0].backend.name()),
            (RuleName::Explicit, "claude")
        );
        assert_ne!(explain(plain.body_bytes()).await.rule, RuleName::Sticky);

        let completion = engine
            .complete(CompletionRequest::gateway(
                Dialect::Anthropic,
                Bytes::from(flagged.body_bytes()),
                headers.clone(),
            ))
            .await
            .expect("answers");
        assert_eq!(completion.backend, "claude");
        drop(completion);
        let decision = explain(plain.body_bytes()).await;
        assert_eq!(
            (decision.rule, decision.candidates[0].backend.name()),
            (RuleName::Sticky, "claude"),
            "{decision:#?}"
        );
    }

    #[test]
    fn a_dry_run_runs_only_the_carrying_out_phases_that_send_nothing() {
        let names: Vec<&str> = phases::decision_changing()
            .iter()
            .map(|p| p.name())
            .collect();
        // Budget counts the request in its session: never in a dry run.
        assert_eq!(names, ["compaction"]);
    }

    /// The phase table of docs/pipeline.md: each row's phase and list, in order.
    fn documented_phases(doc: &str) -> Vec<(String, String)> {
        doc.lines()
            .skip_while(|line| line.trim() != "| phase | list | what it does |")
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
                (cells[0].trim_matches('`').to_owned(), cells[1].to_owned())
            })
            .collect()
    }

    #[test]
    fn the_phase_table_of_the_docs_is_the_code() {
        let doc = include_str!("../../../../docs/pipeline.md");
        let listed = |phases: &[&dyn phases::Phase], list: &str| -> Vec<(String, String)> {
            phases
                .iter()
                .map(|p| (p.name().to_owned(), list.to_owned()))
                .collect()
        };
        let mut code = listed(DECIDING, "deciding");
        code.extend(listed(CARRYING_OUT, "carrying out"));
        assert_eq!(
            documented_phases(doc),
            code,
            "docs/pipeline.md's phase table"
        );
        // A phase left out of the table, or put in the wrong list, is caught.
        let without_budget: String = doc
            .lines()
            .filter(|line| !line.starts_with("| `budget` |"))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_ne!(documented_phases(&without_budget), code);
        let misplaced = doc.replace("| `route` | deciding |", "| `route` | carrying out |");
        assert_ne!(documented_phases(&misplaced), code);
    }

    #[test]
    fn phases_run_in_the_specs_order() {
        let names = |phases: &[&dyn phases::Phase]| -> Vec<&str> {
            phases.iter().map(|p| p.name()).collect()
        };
        assert_eq!(names(DECIDING), ["alias", "estimate", "route"]);
        assert_eq!(
            names(CARRYING_OUT),
            [
                "compaction",
                "budget",
                "origin_gate",
                "fit",
                "bounded_context",
                "transform",
                "plugin_rewrite",
                "carry",
                "tool_loop",
                "encode",
                "execute",
                "record"
            ]
        );
    }
}
