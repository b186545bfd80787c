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
        job.adapted = decision
            .candidates
            .iter()
            .map(|candidate| {
                let window = local_window(&job.runtime.config, candidate);
                // Checked first so the common case (it fits) costs no copy.
                if !candidate.backend.kind().is_local()
                    || !over_local_budget(&job.request, context, window)
                {
                    return None;
                }
                let mut bounded = job.request.clone();
                let cut = bound_local_context(&mut bounded, context, window);
                tracing::debug!(
                    backend = candidate.backend.name(),
                    dropped = cut.dropped_turns,
                    kept_tokens = cut.kept_tokens,
                    "local history bounded"
                );
                (cut.dropped_turns > 0).then_some(bounded)
            })
            .collect();
        ready(Flow::Continue)
    }
}
