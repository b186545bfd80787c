//! Shadow comparison (fan-out `shadow`): the primary answers the client through the
//! backup sequence exactly as with fan-out off, and a copy of the request goes to a
//! second candidate in a task of its own, so it never blocks or delays the client's
//! reply. The primary's reply chunks are kept as they pass to the client (cheap
//! `Bytes` clones, never a copy of their bytes); once both have ended the two answers
//! are compared ([`super::compare`]; a compaction's against what its conversation's
//! graph says it must name, from the context store) and published as a
//! [`ShadowSample`] on the bus (the dashboard stores it, `/api/shadow` and
//! `glider shadow report` read it). A budget (`fan_out.shadow`: sample rate, max at
//! once, max per minute) bounds the copies, and with VRAM attached a local shadow model
//! that is serving a request already is left alone (the copy holds a reservation on it
//! while it runs); a copy skipped or failed is published too, counted and never fatal.
//! docs/fan-out.md#mode-shadow.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::Stream;
use glider_backend::executor::{attempt, attempt_order};
use glider_backend::{
    AttemptFailure, Backend, BodyStream, Candidate, UpstreamRequest, UpstreamResponse,
};
use glider_config::ShadowConfig;
use glider_ngl::Request;
use glider_vocab::{ContextSink, ShadowOutcome, ShadowSample};
use tokio::sync::oneshot;

use super::compare::Answer;
use super::fan_out::read_whole;
use crate::events::{Bus, PipelineEvent, unix_ms};
use crate::router::RequestKind;

/// Largest primary reply kept for the comparison; a longer one is not compared (its
/// chunks would stay alive until the shadow's answer ends).
const MAX_KEPT_BODY: usize = 8 * 1024 * 1024;
/// The window `max_per_minute` counts over.
const MINUTE: Duration = Duration::from_secs(60);

/// The shadow copies' budget: how many run now, when the last minute's started, and
/// how many requests were offered (for the deterministic sample rate).
#[derive(Default)]
pub struct ShadowBudget {
    running: AtomicUsize,
    offered: AtomicU64,
    started: Mutex<VecDeque<Instant>>,
}

/// A running shadow copy's place in the budget, given back when dropped.
struct Slot(Arc<ShadowBudget>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ShadowBudget {
    /// A slot for one more copy, or the limit that refuses it.
    fn admit(self: &Arc<Self>, config: &ShadowConfig) -> Result<Slot, &'static str> {
        let offered = self.offered.fetch_add(1, Ordering::Relaxed);
        if !sampled(offered, config.sample_rate) {
            return Err("sample_rate");
        }
        let took = self
            .running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running < config.max_concurrent).then_some(running + 1)
            });
        if took.is_err() {
            return Err("max_concurrent");
        }
        let slot = Slot(self.clone());
        let now = Instant::now();
        let mut started = self
            .started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while started
            .front()
            .is_some_and(|at| now.duration_since(*at) >= MINUTE)
        {
            started.pop_front();
        }
        if started.len() >= config.max_per_minute {
            return Err("max_per_minute");
        }
        started.push_back(now);
        Ok(slot)
    }
}

/// Whether the `offered`-th request (from 0) is in the sample: with rate r, the one at
/// which floor(n * r) steps up, so exactly r of every run of requests, evenly spaced.
fn sampled(offered: u64, rate: f64) -> bool {
    let step = |n: u64| (n as f64 * rate).floor() as u64;
    step(offered + 1) > step(offered)
}

/// Where a request's copy goes.
#[derive(Clone)]
enum Target {
    /// One of the route's candidates (its index).
    Candidate(usize),
    /// `fan_out.shadow.target`, a backend the route did not pick, asked for this model.
    Outside(Candidate),
}

/// The candidate a request's copy goes to, relative to the one that `answered`: the
/// first in attempt order that neither answered nor failed on this request (after a
/// fallback the backend that just failed is never the shadow), local unless
/// `allow_cloud` (the user's cloud key is not spent on a copy unless the config says so).
fn target(
    candidates: &[Candidate],
    answered: usize,
    failures: &[AttemptFailure],
    config: &ShadowConfig,
) -> Option<usize> {
    let failed = |i: usize| {
        failures
            .iter()
            .any(|f| f.backend == candidates[i].backend.name())
    };
    attempt_order(candidates, candidates.len())
        .into_iter()
        .find(|&i| {
            i != answered && !failed(i) && (config.allow_cloud || candidates[i].backend.is_local())
        })
}

/// The configured `fan_out.shadow.target` backend (enabled, not the one that
/// answered), asked for the primary's model when it serves it, else its default, else
/// the first it lists. Among the route's candidates it is that candidate (its prepared
/// request is reused). A cloud target is only valid with `allow_cloud` (checked at load).
fn configured_target(
    config: &ShadowConfig,
    backends: &[Arc<Backend>],
    candidates: &[Candidate],
    answered: usize,
) -> Option<Target> {
    let name = config.target.as_deref()?;
    if candidates[answered].backend.name() == name {
        return None;
    }
    if let Some(index) = candidates.iter().position(|c| c.backend.name() == name) {
        return Some(Target::Candidate(index));
    }
    let backend = backends
        .iter()
        .find(|b| b.config.enabled && b.name() == name)?;
    let model = crate::router::Router::model_on(backend, &[candidates[answered].model.as_str()])?;
    Some(Target::Outside(Candidate {
        backend: backend.clone(),
        model,
    }))
}

/// What the execute phase hands over for one request whose primary answered.
pub(crate) struct ShadowRequest<'a> {
    pub budget: &'a Arc<ShadowBudget>,
    pub config: &'a ShadowConfig,
    pub bus: Bus,
    pub request_id: u64,
    pub route: &'a str,
    /// The request's kind: how the answers are compared, and what the sample says.
    pub kind: RequestKind,
    pub candidates: &'a [Candidate],
    pub requests: &'a [UpstreamRequest],
    /// What the candidates tried before the primary ran into (never the shadow).
    pub failures: &'a [AttemptFailure],
    /// Every configured backend (a `fan_out.shadow.target` outside the route).
    pub backends: &'a [Arc<Backend>],
    /// Encodes the request for a target outside the route's candidates; called only
    /// for a copy the budget admits.
    pub outside_request: &'a (dyn Fn(&Candidate) -> UpstreamRequest + Sync),
    /// The primary's attempt started then (its latency is measured from there).
    pub primary_started: Instant,
    /// GPU memory, when attached: a local shadow model in use is not sent a copy.
    pub vram: Option<&'a Arc<glider_vram::Vram>>,
    /// The request as decoded, and the context store when one is attached: what a
    /// compaction's summary must name is read from them.
    pub request: &'a Request,
    pub context: Option<&'a Arc<dyn ContextSink>>,
}

impl ShadowRequest<'_> {
    /// Send the copy (or publish why not) for the primary `answered`, whose reply is
    /// `response`: its body is copied as it passes, and the copy runs in its own task.
    pub fn send(self, answered: usize, response: &mut UpstreamResponse) {
        let chosen = match self.config.target {
            Some(_) => configured_target(self.config, self.backends, self.candidates, answered),
            None => {
                target(self.candidates, answered, self.failures, self.config).map(Target::Candidate)
            }
        };
        let Some(chosen) = chosen else {
            return;
        };
        let primary = &self.candidates[answered];
        let shadow = match &chosen {
            Target::Candidate(index) => self.candidates[*index].clone(),
            Target::Outside(candidate) => candidate.clone(),
        };
        let mut sample = ShadowSample {
            request_id: self.request_id,
            at_ms: unix_ms(),
            route: self.route.to_owned(),
            kind: Some(self.kind.as_str().to_owned()),
            primary_backend: primary.backend.name().to_owned(),
            shadow_backend: shadow.backend.name().to_owned(),
            outcome: ShadowOutcome::Skipped,
            skipped_by: None,
            primary: None,
            shadow: None,
            agreement: None,
        };
        let vram = self.vram.filter(|_| shadow.backend.is_local());
        let admitted = match vram {
            // The copy must not queue behind (or slow) a request the model is serving.
            Some(vram) if vram.in_flight(shadow.backend.name(), &shadow.model) > 0 => {
                Err("local_busy")
            }
            _ => self.budget.admit(self.config),
        };
        let shadow_request = match &chosen {
            Target::Candidate(index) => self.requests.get(*index).cloned(),
            Target::Outside(candidate) if admitted.is_ok() => {
                Some((self.outside_request)(candidate))
            }
            Target::Outside(_) => None,
        };
        let (slot, primary_request, shadow_request) =
            match (admitted, self.requests.get(answered), shadow_request) {
                (Ok(slot), Some(primary), Some(shadow)) => (slot, primary.clone(), shadow),
                (Err(limit), ..) => {
                    sample.skipped_by = Some(limit.to_owned());
                    self.bus.publish(PipelineEvent::ShadowSampled(sample));
                    return;
                }
                // A candidate without a prepared request is the pipeline's own bug; the
                // copy is left out rather than sent something else.
                _ => return,
            };
        // Read on the request path, for an admitted compaction's copy only (rare): the
        // conversation's fold needs the request, which the copy's task does not own.
        let must_name = match self.context {
            Some(context) if self.kind == RequestKind::Compaction => {
                context.must_cover(self.request)
            }
            _ => Vec::new(),
        };
        let (copied, primary_body) = oneshot::channel();
        let rest = std::mem::replace(&mut response.rest, Box::pin(futures_util::stream::empty()));
        response.rest = Box::pin(KeptBody {
            rest,
            kept: response.first_chunk.len(),
            chunks: vec![response.first_chunk.clone()],
            started: self.primary_started,
            copied: Some(copied),
        });
        let primary_model = primary.model.clone();
        let bus = self.bus;
        let kind = self.kind;
        // Held while the copy runs: the model is busy for the next request's copy, and
        // the VRAM planner does not evict it under the copy.
        let held = vram.map(|vram| vram.reserve(shadow.backend.name(), &shadow.model));
        tokio::spawn(async move {
            let _held = (slot, held);
            let started = Instant::now();
            let shadow_answer = match shadow_attempt(&shadow, &shadow_request).await {
                Ok(body) => Answer::decode(
                    shadow.backend.name(),
                    &shadow.model,
                    &shadow_request,
                    &body,
                    started.elapsed(),
                ),
                Err(failure) => Answer::failed(
                    shadow.backend.name(),
                    &shadow.model,
                    failure.to_string(),
                    started.elapsed(),
                ),
            };
            let primary_answer = primary_body.await.ok().map(|(chunks, took)| {
                let body = joined(chunks);
                Answer::decode(
                    &sample.primary_backend,
                    &primary_model,
                    &primary_request,
                    &body,
                    took,
                )
            });
            sample.at_ms = unix_ms();
            sample.outcome = match &primary_answer {
                None => ShadowOutcome::PrimaryUnfinished,
                Some(_) if shadow_answer.summary.error.is_some() => ShadowOutcome::Failed,
                Some(primary) => {
                    sample.agreement = shadow_answer.against_as(primary, kind, &must_name);
                    ShadowOutcome::Compared
                }
            };
            sample.primary = primary_answer.map(|answer| answer.summary);
            sample.shadow = Some(shadow_answer.summary);
            bus.publish(PipelineEvent::ShadowSampled(sample));
        });
    }
}

/// The copy's whole reply body.
async fn shadow_attempt(
    candidate: &Candidate,
    request: &UpstreamRequest,
) -> Result<Bytes, AttemptFailure> {
    let response = attempt(candidate, || Ok(std::borrow::Cow::Borrowed(request))).await?;
    Ok(read_whole(response).await?.first_chunk)
}

/// The chunks as one buffer: the one chunk itself when there is one (a reply read
/// whole), else joined here, in the shadow's task, off the client's path.
fn joined(chunks: Vec<Bytes>) -> Bytes {
    match <[Bytes; 1]>::try_from(chunks) {
        Ok([only]) => only,
        Err(chunks) => Bytes::from(chunks.concat()),
    }
}

/// The primary's body on its way to the client, each chunk kept as it passes (a
/// refcounted clone); at its end the chunks (and how long the primary took) go to the
/// shadow task. Dropped before the end, or longer than [`MAX_KEPT_BODY`], it sends
/// nothing and lets go of what it kept.
struct KeptBody {
    rest: BodyStream,
    chunks: Vec<Bytes>,
    kept: usize,
    started: Instant,
    copied: Option<oneshot::Sender<(Vec<Bytes>, Duration)>>,
}

impl Stream for KeptBody {
    type Item = Result<Bytes, AttemptFailure>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.rest.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) if self.copied.is_some() => {
                self.kept += chunk.len();
                if self.kept > MAX_KEPT_BODY {
                    self.copied = None;
                    self.chunks = Vec::new();
                } else {
                    self.chunks.push(chunk.clone());
                }
            }
            Poll::Ready(Some(Ok(_))) | Poll::Pending => {}
            Poll::Ready(Some(Err(_))) => {
                self.copied = None;
                self.chunks = Vec::new();
            }
            Poll::Ready(None) => {
                if let Some(copied) = self.copied.take() {
                    let chunks = std::mem::take(&mut self.chunks);
                    // The shadow task may be gone (the runtime shutting down).
                    let _ = copied.send((chunks, self.started.elapsed()));
                }
            }
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rate: f64, at_once: usize, per_minute: usize) -> ShadowConfig {
        ShadowConfig {
            sample_rate: rate,
            max_concurrent: at_once,
            max_per_minute: per_minute,
            allow_cloud: false,
            target: None,
        }
    }

    #[test]
    fn a_copy_goes_to_another_local_candidate_and_to_the_cloud_only_when_allowed() {
        let parsed = glider_config::Config::parse(
            "backends:\n\
             \x20 - {name: local, type: ollama, base_url: 'http://127.0.0.1:9', models: [m]}\n\
             \x20 - {name: cloud, type: anthropic, base_url: 'http://127.0.0.1:9', api_key: k, models: [c]}\n",
            "t",
        )
        .expect("valid");
        let candidates: Vec<Candidate> = parsed
            .backends
            .iter()
            .map(|b| Candidate {
                backend: glider_backend::Backend::new(b.clone()),
                model: "m".into(),
            })
            .collect();
        let local_only = config(1.0, 1, 10);
        // The local answered: the only other candidate is the cloud, not allowed.
        assert_eq!(target(&candidates, 0, &[], &local_only), None);
        let cloud_allowed = ShadowConfig {
            allow_cloud: true,
            ..local_only.clone()
        };
        assert_eq!(target(&candidates, 0, &[], &cloud_allowed), Some(1));
        // The cloud answered: the copy goes to the local.
        assert_eq!(target(&candidates, 1, &[], &local_only), Some(0));
        // ... unless the local is what failed before the cloud answered.
        let failed = AttemptFailure::new(
            "local",
            glider_ngl::ErrorKind::Unavailable,
            "connection refused",
            true,
        );
        assert_eq!(target(&candidates, 1, &[failed], &local_only), None);
    }

    #[test]
    fn kept_chunks_are_the_chunks_themselves_and_join_only_when_there_are_several() {
        let one = Bytes::from_static(b"whole reply");
        let joined_one = joined(vec![one.clone()]);
        assert_eq!(joined_one.as_ptr(), one.as_ptr(), "one chunk is not copied");
        let parts = vec![
            Bytes::from_static(b"data: a\n\n"),
            Bytes::from_static(b"data: b\n\n"),
        ];
        assert_eq!(&joined(parts)[..], b"data: a\n\ndata: b\n\n");
    }

    #[test]
    fn the_sample_rate_takes_evenly_spaced_requests() {
        let taken: Vec<u64> = (0..12).filter(|&n| sampled(n, 0.25)).collect();
        assert_eq!(taken, vec![3, 7, 11]);
        assert!((0..50).all(|n| sampled(n, 1.0)));
        assert!((0..50).all(|n| !sampled(n, 0.0)));
    }

    #[test]
    fn the_budget_refuses_past_each_limit_and_frees_a_slot_when_a_copy_ends() {
        let budget = Arc::new(ShadowBudget::default());
        let at_once = config(1.0, 1, 10);
        let first = budget.admit(&at_once).expect("the first fits");
        assert_eq!(budget.admit(&at_once).err(), Some("max_concurrent"));
        drop(first);
        let second = budget.admit(&at_once).expect("its slot came back");
        drop(second);
        // Two started this minute already (the ones above): a third is one too many.
        assert_eq!(
            budget.admit(&config(1.0, 5, 2)).err(),
            Some("max_per_minute")
        );
        assert_eq!(budget.running.load(Ordering::Acquire), 0);
        assert_eq!(budget.admit(&config(0.0, 5, 10)).err(), Some("sample_rate"));
    }
}
