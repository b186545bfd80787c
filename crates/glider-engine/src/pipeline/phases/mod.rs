//! The pipeline as named phases, in the spec's order: alias → estimate → route →
//! compaction (a CLI's compaction answered locally, when the policy says so) → budget
//! (turn budget and loop guard) → origin gate → fit → episodes and bounded context →
//! transform → plugin rewrite → carry (every candidate held to the parameter rule) →
//! tool loop (`tools.loop`: encode and execute once per model
//! turn) → encode → execute → record. Each phase is one type behind [`Phase`]; a new
//! phase (a VRAM gate, hedging, a plugin hook) is one new file here, one line in
//! [`DECIDING`] or [`CARRYING_OUT`], and one row in docs/pipeline.md's phase table (a
//! test compares the two).

mod alias;
mod bounded_context;
mod budget;
mod carry;
mod compaction;
mod encode;
mod estimate;
mod execute;
mod fit;
mod origin_gate;
mod plugin_rewrite;
mod record;
mod route;
mod tool_loop;
mod transform;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use glider_backend::{Executed, UpstreamRequest};
use glider_ngl::{ApiError, Dialect, ErrorKind, Request};
use http::HeaderMap;

use super::reply::Answered;
use super::runtime::Runtime;
use crate::contextkit::ContextKit;
use crate::events::Tracker;
use crate::local_reply::LocalEnding;
use crate::router::RouteDecision;
use crate::router::sticky::StickyStore;
use glider_vocab::{ContextSink, Door};

/// The phases that decide where a request goes; `Engine::prepare_*` runs them, and the
/// decision they leave is the one the request is carried out on.
pub(crate) static DECIDING: &[&dyn Phase] = &[&alias::Alias, &estimate::Estimate, &route::Route];

/// The phases that carry a decision out; `Engine::complete_prepared` runs them. The
/// first [`DECISION_CHANGING`] of them may still change the decision.
pub(crate) static CARRYING_OUT: &[&dyn Phase] = &[
    &compaction::Compaction,
    &budget::Budget,
    &origin_gate::OriginGate,
    &fit::Fit,
    &bounded_context::BoundedContext,
    &transform::Transform,
    &plugin_rewrite::PluginRewrite,
    &carry::Carry,
    &tool_loop::ToolLoop,
    &encode::Encode,
    &execute::Execute,
    &record::Record,
];

/// How many of [`CARRYING_OUT`]'s phases, from its start, may change the decision
/// while sending nothing and counting the request nowhere (compaction, which puts the
/// local candidates first or answers from the continuity record). `Engine::explain`
/// runs [`DECIDING`] and these on a [dry-run](Job::dry_run) job, so `glider route
/// explain` shows the decision `serve` carries out. A phase placed before budget must
/// keep to that, and this count says whether explain runs it.
pub(crate) const DECISION_CHANGING: usize = 1;

/// The carrying-out phases a dry run goes through (see [`DECISION_CHANGING`]).
pub(crate) fn decision_changing() -> &'static [&'static dyn Phase] {
    &CARRYING_OUT[..DECISION_CHANGING]
}

/// What a phase says happens next.
pub(crate) enum Flow {
    /// This phase is done; run the next one.
    Continue,
    /// The reply is ready; no later phase runs.
    Answer(Box<Answered>),
    /// Not a local request: the door forwards it to the CLI's origin on this decision.
    Origin(Box<RouteDecision>),
    /// The request fails with this error, shown to the client in its dialect.
    Fail(ApiError),
}

/// One step of the pipeline.
pub(crate) trait Phase: Send + Sync {
    /// The phase's name, for logs.
    fn name(&self) -> &'static str;

    /// Run on `job`, reading what earlier phases left there and leaving what later ones
    /// need; the [`Flow`] says whether the pipeline goes on.
    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a>;
}

/// What a phase's `run` returns: its flow at once (most phases; no allocation on the
/// hot path), or a future for a phase that waits (execute, record).
pub(crate) enum PhaseFuture<'a> {
    Ready(Option<Flow>),
    Waiting(Pin<Box<dyn Future<Output = Flow> + Send + 'a>>),
}

impl<'a> PhaseFuture<'a> {
    /// A phase that waits, e.g. on the backend.
    fn waiting(future: impl Future<Output = Flow> + Send + 'a) -> Self {
        PhaseFuture::Waiting(Box::pin(future))
    }
}

impl Future for PhaseFuture<'_> {
    type Output = Flow;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Flow> {
        match self.get_mut() {
            PhaseFuture::Ready(flow) => std::task::Poll::Ready(flow.take().unwrap_or_else(|| {
                Flow::Fail(ApiError::new(
                    ErrorKind::Internal,
                    "a phase was polled after it finished",
                ))
            })),
            PhaseFuture::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}

/// A phase's flow, for phases that finish without waiting.
fn ready<'a>(flow: Flow) -> PhaseFuture<'a> {
    PhaseFuture::Ready(Some(flow))
}

/// Run `phases` in order until one does not say [`Flow::Continue`].
pub(crate) async fn run(phases: &[&dyn Phase], job: &mut Job) -> Flow {
    for phase in phases {
        match phase.run(job).await {
            Flow::Continue => {}
            stop => {
                tracing::trace!(phase = phase.name(), "pipeline stopped");
                return stop;
            }
        }
    }
    Flow::Continue
}

/// One request on its way through the phases: what the door gave, and what each phase
/// has worked out so far.
pub(crate) struct Job {
    /// The config, backends and rules this request uses from start to end.
    pub runtime: Arc<Runtime>,
    pub sticky: Arc<StickyStore>,
    /// Every session's spend (the budget phase counts this request in it).
    pub kit: Arc<ContextKit>,
    pub tracker: Tracker,
    pub front: Dialect,
    pub door: Door,
    pub headers: HeaderMap,
    pub origin_passthrough: bool,
    /// The client's body (routing flag stripped after routing); `None` for a request
    /// built as ngl, which every candidate gets re-encoded.
    pub body: Option<Bytes>,
    pub request: Request,
    /// Alias: the model after `model_aliases`.
    pub model: String,
    /// Estimate: the request's input tokens.
    pub tokens: u64,
    /// Route: where it goes; the candidates are final after the origin gate.
    pub decision: Option<RouteDecision>,
    /// Fit, bounding and transform: each candidate's request when they changed it
    /// (same order as the candidates).
    pub adapted: Vec<Option<Request>>,
    /// Fit: how each local candidate's reply may need to end (same order as the
    /// candidates; `None` for a cloud one).
    pub endings: Vec<Option<LocalEnding>>,
    /// Encode: each candidate's upstream request (same order as the candidates).
    pub upstream: Vec<UpstreamRequest>,
    /// Execute: the attempt that answered.
    pub executed: Option<Executed>,
    /// The context store, when one is attached: bounded context reads the session's
    /// continuity record from it.
    pub context: Option<Arc<dyn ContextSink>>,
    /// Compaction: a CLI's compaction request sent to the local candidates (its
    /// instruction is the last turn; the episode it summarises is the one before).
    pub compaction: bool,
    /// GPU memory for local models, when attached: route passes over a cold model
    /// that would wait too long; execute makes room and reserves the model.
    pub vram: Option<Arc<glider_vram::Vram>>,
    /// The plugins this request uses from start to end, when attached.
    pub plugins: Option<Arc<glider_plugin::Plugins>>,
    /// Each backend's measured time to first byte (the hedge's delay).
    pub ttft: Arc<super::TtftBook>,
    pub speed: Arc<crate::speed::SpeedBook>,
    /// The shadow copies' budget (fan-out `shadow`).
    pub shadow: Arc<super::ShadowBudget>,
    /// `glider route explain`: decide exactly as a served request is decided, and leave
    /// no trace (see [`Job::dry_run`]).
    pub dry_run: bool,
}

impl Job {
    /// This job as a dry run: every rule gives its opinion, an explicit choice does not
    /// stick to the session, no cold model is loaded nor a sticky one prewarmed, no
    /// plugin is asked or told (`plugins` is dropped), and compaction says it would
    /// answer from the continuity record rather than answering. The tracker it is
    /// given should be on a bus nobody reads; the context sink is only read.
    pub(crate) fn dry_run(mut self) -> Job {
        self.dry_run = true;
        self.plugins = None;
        self
    }
}

pub(crate) fn not_routed() -> ApiError {
    ApiError::new(
        ErrorKind::Internal,
        "pipeline phases out of order: the request was not routed",
    )
}
