//! Execute: the backup sequence over the prepared requests (breaker, health, warm
//! first, a local reserve last); the attempt that answered, or the one error every
//! failure adds up to. When the reserve answered, the decision is re-stated as
//! `local_fallback` with why, for the route header, the record and the history. With
//! VRAM attached, the local model tried first is reserved and made room for (a planned
//! eviction and load) before it is sent; the one that answered stays reserved until its
//! body ends or is dropped (docs/vram.md). A route with `fan_out` on sends to more than
//! one candidate at once instead ([`super::super::fan_out`]); one with `mode: shadow`
//! answers as usual and sends a copy off the request path ([`super::super::shadow`]).

use glider_backend::executor::{attempt_order, summarise};
use glider_backend::{AttemptFailure, Executed, execute_prepared};
use glider_vram::{Reservation, ReservedStream};

use glider_backend::UpstreamRequest;
use glider_config::{FanOutConfig, FanOutPolicy};
use glider_vocab::{FanOutRecord, RuleName};

use super::super::fan_out::{self, TtftBook};
use super::super::shadow::ShadowRequest;
use super::super::upstream;
use super::{Flow, Job, Phase, PhaseFuture, not_routed};
use crate::events::Tracker;
use crate::router::RouteDecision;

pub(crate) struct Execute;

impl Phase for Execute {
    fn name(&self) -> &'static str {
        "execute"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        PhaseFuture::waiting(execute(job))
    }
}

/// The phase's steps in order: make room on the GPU, send, keep the GPU held while the
/// reply streams, copy to the shadow, and settle the record.
async fn execute(job: &mut Job) -> Flow {
    let Some(decision) = &mut job.decision else {
        return Flow::Fail(not_routed());
    };
    job.tracker.announce();
    // Checked once: without a GPU (or with `vram.enabled: false`) a request pays for no
    // reservation, no attempt order and no wrapped body.
    let vram = job
        .vram
        .as_ref()
        .filter(|vram| !vram.steps_aside(&job.runtime.config.vram));
    let first = match vram {
        Some(vram) => reserve_first(vram, &job.runtime, decision, &mut job.tracker).await,
        None => None,
    };
    let fan_out = &job.runtime.config.fan_out;
    let policy = fan_out.policy_for(decision.rule.as_str());
    let primary_started = std::time::Instant::now();
    let mut executed = send(fan_out, policy, decision, &job.upstream, &job.ttft).await;
    if let (Some(vram), Ok((executed, _))) = (vram, &mut executed) {
        hold_while_streaming(vram, decision, executed, first);
    }
    let mut executed = executed.map(|(executed, fanned_out)| {
        if let Some(record) = fanned_out {
            job.tracker.record.fan_out = Some(record);
        }
        executed
    });
    // (A request the user sent somewhere themselves is never shadowed: `policy_for`.)
    if let (glider_config::FanOutMode::Shadow, Ok(executed)) = (policy.mode, &mut executed)
        && let Some(decision) = &job.decision
    {
        let shadowed = send_shadow(job, decision, executed, primary_started, vram);
        job.tracker.record.fan_out = Some(shadowed);
    }
    settle(job, executed)
}

/// Reserve and make room for the local model tried first; what was unloaded or put to
/// sleep for it, by backend, goes in the route record with the rest of the decision.
async fn reserve_first(
    vram: &std::sync::Arc<glider_vram::Vram>,
    runtime: &crate::pipeline::runtime::Runtime,
    decision: &mut RouteDecision,
    tracker: &mut Tracker,
) -> Option<(usize, Reservation)> {
    let (first, made_room) = make_room_first(vram, runtime, decision).await;
    if let Some(made_room) = made_room {
        decision.reason = format!("{}; VRAM: {made_room}", decision.reason);
        tracker.record.reason = Some(decision.reason.clone());
    }
    first
}

/// Send as the route's fan-out policy says: to several candidates at once (with what
/// the fan-out did), or through the backup sequence.
async fn send(
    fan_out: &FanOutConfig,
    policy: FanOutPolicy,
    decision: &RouteDecision,
    upstream: &[UpstreamRequest],
    ttft: &TtftBook,
) -> Result<(Executed, Option<FanOutRecord>), Vec<AttemptFailure>> {
    match fan_out::applies(policy.mode, &decision.candidates, decision.local_reserve) {
        Some(order) => {
            let local = decision.candidates[order[0]].backend.name();
            let delay = fan_out::hedge_delay(fan_out, policy.delay, ttft, local);
            let ran = fan_out::run(
                policy.mode,
                &decision.candidates,
                upstream,
                order,
                delay,
                ttft,
            )
            .await;
            ran.map(|(executed, record)| (executed, Some(record)))
        }
        None => execute_prepared(&decision.candidates, upstream, decision.local_reserve)
            .await
            .map(|executed| (executed, None)),
    }
}

/// Send the shadow copy of the answered request (off the request path); the fan-out
/// record that says which backend was the primary.
fn send_shadow(
    job: &Job,
    decision: &RouteDecision,
    executed: &mut Executed,
    primary_started: std::time::Instant,
    vram: Option<&std::sync::Arc<glider_vram::Vram>>,
) -> FanOutRecord {
    let shadowed = FanOutRecord::shadowed(decision.candidates[executed.index].backend.name());
    let (front, headers, body, request) =
        (job.front, &job.headers, job.body.as_ref(), &job.request);
    let session = decision.session.as_deref();
    let outside_request = |candidate: &glider_backend::Candidate| {
        upstream::for_candidate(front, headers, body, request, None, candidate, session)
    };
    ShadowRequest {
        budget: &job.shadow,
        config: &job.runtime.config.fan_out.shadow,
        bus: job.tracker.bus().clone(),
        request_id: job.tracker.id(),
        route: decision.rule.as_str(),
        kind: decision.kind,
        candidates: &decision.candidates,
        requests: &job.upstream,
        failures: &executed.failures,
        backends: &job.runtime.backends,
        outside_request: &outside_request,
        primary_started,
        vram,
        request: &job.request,
        context: job.context.as_ref(),
    }
    .send(executed.index, &mut executed.response);
    shadowed
}

/// The record's fallbacks, and the flow: the attempt that answered (re-stated as
/// `local_fallback` when the reserve answered), or the error every failure adds up
/// to, filed under the backend whose failure ended the sequence.
fn settle(job: &mut Job, executed: Result<Executed, Vec<AttemptFailure>>) -> Flow {
    let Some(decision) = &mut job.decision else {
        return Flow::Fail(not_routed());
    };
    let failures = match &executed {
        Ok(executed) => &executed.failures,
        Err(failures) => failures,
    };
    job.tracker.record.fallbacks = failures.iter().map(ToString::to_string).collect();
    match executed {
        Ok(executed) => {
            if decision
                .local_reserve
                .is_some_and(|reserve| executed.index >= reserve)
            {
                answered_by_reserve(decision, &executed.failures);
                job.tracker.record.rule = Some(decision.rule.as_str().to_owned());
                job.tracker.record.reason = Some(decision.reason.clone());
            }
            job.executed = Some(executed);
            Flow::Continue
        }
        Err(failures) => {
            // Filed under the backend whose failure ended the sequence, never under no
            // backend at all.
            let last = failures.last().and_then(|failure| {
                decision
                    .candidates
                    .iter()
                    .find(|c| c.backend.name() == failure.backend)
            });
            if let Some(candidate) = last {
                job.tracker.record.backend = Some(candidate.backend.name().to_owned());
                job.tracker.record.local = Some(candidate.backend.is_local());
            }
            Flow::Fail(summarise(&failures))
        }
    }
}

/// Reserve the local model the backup sequence tries first and make room for it
/// (among the models of every configured backend); its index and the reservation, and
/// the plan's outcome when it had to unload or put to sleep another model.
async fn make_room_first(
    vram: &std::sync::Arc<glider_vram::Vram>,
    runtime: &crate::pipeline::runtime::Runtime,
    decision: &RouteDecision,
) -> (Option<(usize, Reservation)>, Option<String>) {
    let reserve = decision.local_reserve.unwrap_or(decision.candidates.len());
    let Some(&index) = attempt_order(&decision.candidates, reserve).first() else {
        return (None, None);
    };
    let candidate = &decision.candidates[index];
    if !candidate.backend.is_local() {
        return (None, None);
    }
    let reservation = vram.reserve(candidate.backend.name(), &candidate.model);
    let record = vram
        .make_room(
            &runtime.config.vram,
            &candidate.backend,
            &candidate.model,
            glider_vram::Cause::Request,
            &runtime.backends,
        )
        .await;
    let made_room = record
        .filter(|r| matches!(r.plan, glider_vram::planner::Plan::Evict { .. }))
        .map(|r| r.outcome);
    (Some((index, reservation)), made_room)
}

/// The local model that answered stays reserved for as long as its body lives.
fn hold_while_streaming(
    vram: &glider_vram::Vram,
    decision: &RouteDecision,
    executed: &mut Executed,
    first: Option<(usize, Reservation)>,
) {
    let candidate = &decision.candidates[executed.index];
    if !candidate.backend.is_local() {
        return;
    }
    let reservation = match first {
        Some((index, reservation)) if index == executed.index => reservation,
        _ => vram.reserve(candidate.backend.name(), &candidate.model),
    };
    let rest = std::mem::replace(
        &mut executed.response.rest,
        Box::pin(futures_util::stream::empty()),
    );
    executed.response.rest = Box::pin(ReservedStream::new(rest, reservation));
}

/// A local model of the reserve answered: the decision says so, with what the cloud
/// attempts ran into and what the route was before.
fn answered_by_reserve(decision: &mut RouteDecision, failures: &[AttemptFailure]) {
    let unreachable: Vec<String> = failures.iter().map(ToString::to_string).collect();
    decision.reason = format!(
        "the cloud was unreachable ({}), so a local model answered (routing.local_fallback); chosen by {}: {}",
        unreachable.join("; "),
        decision.rule,
        decision.reason
    );
    decision.rule = RuleName::LocalFallback;
}
