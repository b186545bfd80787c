//! Transform (local candidates only, opt-in `transform:`): caps and system-prompt
//! rewrites applied to the (bounded) request each local candidate gets.

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::transform::apply;

pub(crate) struct Transform;

impl Phase for Transform {
    fn name(&self) -> &'static str {
        "transform"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let config = &job.runtime.config.transform;
        if !config.enabled {
            return ready(Flow::Continue);
        }
        let Some(decision) = &job.decision else {
            return ready(Flow::Fail(not_routed()));
        };
        job.adapted.resize_with(decision.candidates.len(), || None);
        for (candidate, adapted) in decision.candidates.iter().zip(&mut job.adapted) {
            if !candidate.backend.is_local() {
                continue;
            }
            let bounded = adapted.is_some();
            let mut request = adapted.take().unwrap_or_else(|| job.request.clone());
            if apply(&mut request, config) || bounded {
                *adapted = Some(request);
            }
        }
        ready(Flow::Continue)
    }
}
