//! Estimate: the request's input tokens, which routing and the token limit read. The
//! byte ratio, counted with tiktoken (OpenAI models) only near a routing limit; near a
//! llama.cpp backend's window the estimate is replaced by that server's exact count.

use super::{Flow, Job, Phase, PhaseFuture, ready};
use crate::pipeline::count_tokens::{exact_near_limit, near_a_routing_limit, near_limit};
use crate::tokenizer::estimate_for_routing;

pub(crate) struct Estimate;

impl Phase for Estimate {
    fn name(&self) -> &'static str {
        "estimate"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let runtime = &job.runtime;
        (job.tokens, _) = estimate_for_routing(&job.request, &job.model, |rough| {
            near_a_routing_limit(runtime, &job.model, rough)
        });
        job.tracker.record.estimated_tokens = job.tokens;
        let Some(near) = near_limit(&runtime.config, &runtime.backends, &job.model, job.tokens)
        else {
            return ready(Flow::Continue);
        };
        PhaseFuture::waiting(async move {
            if let Some(exact) = exact_near_limit(&near, &job.request).await {
                tracing::debug!(
                    estimate = job.tokens,
                    exact,
                    backend = near.backend.name(),
                    "exact count near the window"
                );
                job.tokens = exact;
                job.tracker.record.estimated_tokens = exact;
            }
            Flow::Continue
        })
    }
}
