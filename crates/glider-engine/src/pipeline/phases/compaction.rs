//! Compaction answered locally (`context.compaction`, `auto` by default). A CLI's
//! compaction request ([`compaction_prompt`]: Claude Code's `/compact` and
//! auto-compaction, Codex's checkpoint) repeats the whole conversation — often 150k
//! tokens — to have it summarised. With `auto` it goes to the local candidates first
//! when one is up and holds it — the request as sent, or the session's continuity record
//! and the current episode once bounded (the record is the summary's best input) — and
//! only when the user did not choose the side (`/cloud`, the header, a sticky choice);
//! else the route stands. With `local` it goes to the local candidates first whatever
//! the route, and with no local backend up Glider answers it itself from the record, in
//! the client's dialect and stream grammar (without a record it is left to the route).
//! Either way bounded context gives the local model the record and the current episode
//! instead of the history, and the route's cloud candidates stay behind as the fallback.
//! Runs before the origin gate, so the MITM door's compactions are answered here too.
//! It sends nothing itself, so `glider route explain` runs it too (a dry run: the
//! decision then says it would be answered from the record, `answered_by`, instead of
//! answering).

use std::sync::Arc;

use glider_backend::health::HealthStatus;
use glider_config::CompactionPolicy;
use glider_ngl::{Part, Response, StopReason, Usage};
use glider_vocab::estimate::estimate_text;
use glider_vocab::{CompactionPrompt, CompactionSource, RuleName, compaction_prompt};

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::fit::local_window;
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
        let policy = job.runtime.config.context.compaction;
        if policy == CompactionPolicy::Cloud {
            return ready(Flow::Continue);
        }
        let Some(prompt) = compaction_prompt(&job.request) else {
            return ready(Flow::Continue);
        };
        let Some(mut decision) = job.decision.take() else {
            return ready(Flow::Fail(not_routed()));
        };
        let by_user = matches!(decision.rule, RuleName::Explicit | RuleName::Sticky);
        if policy == CompactionPolicy::Auto && by_user {
            // The user chose the side: the default policy does not overrule them.
            job.decision = Some(decision);
            return ready(Flow::Continue);
        }
        let runtime = job.runtime.clone();
        let config = &runtime.config;
        let router = runtime.router(&job.sticky);
        let mut local: Vec<_> = router
            .resolve(&Target::Local, &job.request, &job.model)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.backend.is_local() && c.backend.health().status != HealthStatus::Down)
            .collect();
        let mut record: Option<Option<Arc<str>>> = None;
        let mut session_record = |job: &Job, session: &Option<String>| -> Option<Arc<str>> {
            record
                .get_or_insert_with(|| match (&job.context, session) {
                    (Some(sink), Some(session)) => sink.record(session, &job.request),
                    _ => None,
                })
                .clone()
        };
        if policy == CompactionPolicy::Auto {
            // A local model that sees the whole conversation, or the record in its place.
            let bounded = config.context.bound_local
                && local.iter().any(|c| job.tokens > local_window(config, c))
                && session_record(job, &decision.session).is_some();
            local.retain(|c| bounded || job.tokens <= local_window(config, c));
        }
        if !local.is_empty() {
            let cloud = decision
                .candidates
                .drain(..)
                .filter(|c| !c.backend.is_local());
            decision.candidates = local.into_iter().chain(cloud).collect();
            decision.reason = format!(
                "a compaction request, answered locally (context.compaction: {}); {}",
                policy_name(policy),
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
        if policy == CompactionPolicy::Auto {
            // No local model up that holds it: the route stands.
            job.decision = Some(decision);
            return ready(Flow::Continue);
        }
        let Some(record) = session_record(job, &decision.session) else {
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

/// The policy as `context.compaction` spells it.
fn policy_name(policy: CompactionPolicy) -> &'static str {
    match policy {
        CompactionPolicy::Auto => "auto",
        CompactionPolicy::Cloud => "cloud",
        CompactionPolicy::Local => "local",
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
