//! Episodes and bounded context (local candidates only, spec: "never the full
//! history"). With a context store attached and a continuity record held for the
//! session whose stored episodes are the request's own (its earlier user messages
//! match them, [`crate::ContextSink::record`]), a local model gets the system text, the
//! record and the current episode, bounded to its window minus the output reserve
//! ([`bound_to_episode`]); without one (context off, no record yet, or another
//! conversation's) it gets the tail of its own history that fits
//! ([`bound_local_context`]). What was left out goes on the route record.

use std::sync::Arc;

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::fit::local_window;
use crate::transform::{
    Bounded, bound_local_context, bound_to_episode, over_local_budget, reads_record,
};
use glider_vocab::ContextLeftOut;

pub(crate) struct BoundedContext;

impl Phase for BoundedContext {
    fn name(&self) -> &'static str {
        "bounded_context"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let Some(decision) = &job.decision else {
            return ready(Flow::Fail(not_routed()));
        };
        let context = &job.runtime.config.context;
        if !context.bound_local || !decision.candidates.iter().any(|c| c.backend.is_local()) {
            return ready(Flow::Continue);
        }
        // Read once, from memory (never the database): the writer keeps it current. Not
        // read at all when bounding would not use it (a session's first turn): a stale
        // record is rendered when read.
        let record: Option<Arc<str>> = match (&job.context, &decision.session) {
            (Some(sink), Some(session)) if reads_record(&job.request, job.compaction) => {
                sink.record(session, &job.request)
            }
            _ => None,
        };
        job.adapted.resize_with(decision.candidates.len(), || None);
        for (candidate, adapted) in decision.candidates.iter().zip(&mut job.adapted) {
            if !candidate.backend.is_local() {
                continue;
            }
            let window = local_window(&job.runtime.config, candidate);
            // The fitted request when fit changed it (fewer tools fit more history):
            // bounded in place, as it is this candidate's own copy.
            let request = adapted.as_ref().unwrap_or(&job.request);
            if record.is_none() && !over_local_budget(request, context, window) {
                // Checked first so the common case (it fits) costs no copy.
                continue;
            }
            let own_copy = adapted.is_some();
            let mut bounded = adapted.take().unwrap_or_else(|| job.request.clone());
            let cut = match &record {
                Some(record) => {
                    bound_to_episode(&mut bounded, record, context, window, job.compaction)
                }
                None => bound_local_context(&mut bounded, context, window),
            };
            tracing::debug!(
                backend = candidate.backend.name(),
                dropped = cut.dropped_turns,
                kept_tokens = cut.kept_tokens,
                record_tokens = cut.record_tokens,
                "local history bounded"
            );
            let cut_any = changed(&cut);
            // Unchanged, a copy of the client's request is dropped: the client's body is
            // then forwarded as it came.
            if own_copy || cut_any {
                *adapted = Some(bounded);
            }
            if cut_any {
                job.tracker.record.context_left_out.push(ContextLeftOut {
                    backend: candidate.backend.name().to_owned(),
                    turns: cut.dropped_turns,
                    tokens: cut.dropped_tokens,
                    record_tokens: cut.record_tokens,
                });
            }
        }
        ready(Flow::Continue)
    }
}

/// Bounding rewrote the request: it dropped turns or added the record.
fn changed(cut: &Bounded) -> bool {
    cut.dropped_turns > 0 || cut.record_tokens > 0
}
