//! Episodes and bounded context (local candidates only, spec: "never the full
//! history"): a local model gets the tail of the history that fits its budget.

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::router::local_window;
use crate::transform::{bound_local_context, over_local_budget};

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
        job.adapted.resize_with(decision.candidates.len(), || None);
        for (candidate, adapted) in decision.candidates.iter().zip(&mut job.adapted) {
            if !candidate.backend.kind().is_local() {
                continue;
            }
            let window = local_window(&job.runtime.config, candidate);
            // The fitted request when fit changed it (fewer tools fit more history).
            let request = adapted.as_ref().unwrap_or(&job.request);
            // Checked first so the common case (it fits) costs no copy.
            if !over_local_budget(request, context, window) {
                continue;
            }
            let mut bounded = request.clone();
            let cut = bound_local_context(&mut bounded, context, window);
            tracing::debug!(
                backend = candidate.backend.name(),
                dropped = cut.dropped_turns,
                kept_tokens = cut.kept_tokens,
                "local history bounded"
            );
            if cut.dropped_turns > 0 {
                *adapted = Some(bounded);
            }
        }
        ready(Flow::Continue)
    }
}
