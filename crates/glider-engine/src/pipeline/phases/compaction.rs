//! Compaction answered locally (`context.compaction: local`). A CLI's compaction
//! request ([`compaction_prompt`]: Claude Code's `/compact` and auto-compaction,
//! Codex's checkpoint) repeats the whole conversation — often 150k tokens — to have it
//! summarised. With the policy on, it goes to the local candidates first, and bounded
//! context gives them the continuity record and the current episode instead of the
//! history (the route's cloud candidates stay behind them as the fallback); with no
//! local backend up, Glider answers it itself from the record, in the client's dialect
//! and stream grammar. Without a record it is left to the route. Runs before the
//! origin gate, so the MITM door's compactions are answered here too. It sends nothing
//! itself, so `glider route explain` runs it too (a dry run: the decision then says it
//! would be answered from the record, `answered_by`, instead of answering).

use std::sync::Arc;

use glider_backend::health::HealthStatus;
use glider_config::CompactionPolicy;
use glider_ngl::{Part, Response, StopReason, Usage};
use glider_vocab::estimate::estimate_text;
use glider_vocab::{CompactionPrompt, CompactionSource, compaction_prompt};

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::pipeline::reply::Answered;
use crate::router::Target;

/// The backend and model a reply built from the record is recorded under.
pub(crate) const RECORD_BACKEND: &str = "glider";
pub(crate) const RECORD_MODEL: &str = "continuity-record";

pub(crate) struct Compaction;

impl Phase for Compaction {
    fn name(&self) -> &'static str {
        "compaction"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        if job.runtime.config.context.compaction != CompactionPolicy::Local {
            return ready(Flow::Continue);
        }
        let Some(prompt) = compaction_prompt(&job.request) else {
            return ready(Flow::Continue);
        };
        let Some(mut decision) = job.decision.take() else {
            return ready(Flow::Fail(not_routed()));
        };
        let runtime = job.runtime.clone();
        let router = runtime.router(&job.sticky);
        let local: Vec<_> = router
            .resolve(&Target::Local, &job.request, &job.model)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.backend.health().status != HealthStatus::Down)
            .collect();
        if !local.is_empty() {
            let cloud = decision
                .candidates
                .drain(..)
                .filter(|c| !c.backend.is_local());
            decision.candidates = local.into_iter().chain(cloud).collect();
            decision.reason = format!(
                "a compaction request, answered locally (context.compaction: local); {}",
                decision.reason
            );
            job.adapted.clear();
            job.compaction = true;
            job.tracker.record.reason = Some(decision.reason.clone());
            if let Some(capture) = job.tracker.context_capture() {
                capture.compaction(CompactionSource::LocalModel);
            }
            job.decision = Some(decision);
            return ready(Flow::Continue);
        }
        let record: Option<Arc<str>> = match (&job.context, &decision.session) {
            (Some(sink), Some(session)) => sink.record(session, &job.request),
            _ => None,
        };
        let Some(record) = record else {
            // Nothing to answer from: the route stands.
            job.decision = Some(decision);
            return ready(Flow::Continue);
        };
        decision.reason = format!(
            "a compaction request, answered from the continuity record (context.compaction: local, no local backend up); {}",
            decision.reason
        );
        decision.answered_by = Some(RECORD_MODEL);
        if job.dry_run {
            // Explained, not answered: the decision says who would answer.
            job.decision = Some(decision);
            return ready(Flow::Continue);
        }
        ready(Flow::Answer(Box::new(from_record(
            job, decision, prompt, &record,
        ))))
    }
}

/// The CLI's summary, written from the record in the shape its prompt asks for.
fn summary(prompt: CompactionPrompt, record: &str) -> String {
    let note = "Written by Glider from its continuity record of this session (no model was asked): \
                the user's goals in their words, the files and their latest state, the assistant's \
                closing words of each task, the errors still open and the last exchanges.";
    match prompt {
        CompactionPrompt::ClaudeCode => {
            format!("<analysis>\n{note}\n</analysis>\n\n<summary>\n{record}\n</summary>")
        }
        CompactionPrompt::Codex => format!("{note}\n\n{record}"),
    }
}

/// A reply built here, recorded as local (nothing left the machine).
fn from_record(
    job: &mut Job,
    decision: crate::router::RouteDecision,
    prompt: CompactionPrompt,
    record: &str,
) -> Answered {
    let text = summary(prompt, record);
    let response = Response {
        id: format!("msg_glider_compaction_{}", job.tracker.id()),
        model: job.request.model.clone(),
        usage: Usage {
            output_tokens: estimate_text(&text),
            ..Usage::default()
        },
        parts: vec![Part::text(text)],
        stop_reason: StopReason::EndTurn,
        stop_sequence: None,
    };
    let tracker = &mut job.tracker;
    tracker.record.reason = Some(decision.reason.clone());
    tracker.record.backend = Some(RECORD_BACKEND.into());
    tracker.record.model_used = Some(RECORD_MODEL.into());
    tracker.record.local = Some(true);
    if let Some(capture) = tracker.context_capture() {
        capture.compaction(CompactionSource::Record);
    }
    tracker.announce();
    tracker.first_byte();
    Answered::glider_response(
        RECORD_BACKEND,
        RECORD_MODEL,
        decision,
        job.request.stream,
        response,
    )
}
