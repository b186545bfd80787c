//! Budget (contextkit): the request is counted in its session's episode; past the
//! episode's turn budget, or when the model repeats the same tool call
//! `context.loop_guard.repeats` times, Glider answers it itself — a well-formed final
//! assistant message in the client's dialect and stream grammar, `end_turn`, naming the
//! limit and the key that raises it — so a runaway loop ends cleanly, never with a 5xx.
//! From the soft limit on, the request carries a wrap-up note for the model. It runs
//! before the origin gate, so the stops also cover what the MITM proxy would forward
//! to the CLI's origin (the note does not: the origin gets the client's own bytes).

use glider_ngl::{Role, Turn};
use glider_vocab::{BUDGET_BACKEND, BudgetStop};

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::contextkit::Verdict;
use crate::pipeline::reply::Answered;

pub(crate) struct Budget;

impl Phase for Budget {
    fn name(&self) -> &'static str {
        "budget"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let Some(decision) = &job.decision else {
            return ready(Flow::Fail(not_routed()));
        };
        // A request with no user turn has no session to count it in.
        let Some(session) = decision.session.clone() else {
            return ready(Flow::Continue);
        };
        let config = &job.runtime.config.context;
        let admission = job
            .kit
            .admit(&session, job.tracker.id(), &job.request, config);
        match admission.verdict {
            Verdict::Go => {}
            Verdict::WrapUp(note) => add_note(job, note),
            Verdict::Stop(stop) => return ready(stopped(job, stop)),
        }
        job.tracker
            .count_in(job.kit.clone(), &session, admission.family);
        ready(Flow::Continue)
    }
}

/// The wrap-up note goes in as a system turn after the request's own system text (every
/// dialect carries one there). The client's bytes no longer say what is sent, so every
/// candidate gets the request re-encoded.
fn add_note(job: &mut Job, note: String) {
    let at = job
        .request
        .turns
        .iter()
        .take_while(|t| t.role == Role::System)
        .count();
    job.request.turns.insert(at, Turn::text(Role::System, note));
    job.body = None;
}

/// The loop's final reply, on the record as a budget stop.
fn stopped(job: &mut Job, stop: BudgetStop) -> Flow {
    let Some(decision) = job.decision.take() else {
        return Flow::Fail(not_routed());
    };
    tracing::info!(
        session = decision.session.as_deref().unwrap_or_default(),
        limit = stop.limit.as_str(),
        turns = stop.turns,
        tool = stop.tool.as_deref().unwrap_or_default(),
        "agent loop stopped by its budget"
    );
    let record = &mut job.tracker.record;
    record.backend = Some(BUDGET_BACKEND.to_owned());
    record.model_used = Some(job.model.clone());
    // Answered on this machine, no cloud spent: counted with the local answers.
    record.local = Some(true);
    let text = stop.message.clone();
    record.budget_stop = Some(stop);
    job.tracker.first_byte();
    let id = format!("glider-budget-{}", job.tracker.id());
    Flow::Answer(Box::new(Answered::from_glider(
        BUDGET_BACKEND,
        &job.model,
        decision,
        job.request.stream,
        id,
        text,
    )))
}
