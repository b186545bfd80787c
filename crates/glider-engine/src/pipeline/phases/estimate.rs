//! Estimate: the request's input tokens, which routing and the token limit read.

use super::{Flow, Job, Phase, PhaseFuture, ready};
use crate::tokenizer::estimate_request_tokens;

pub(crate) struct Estimate;

impl Phase for Estimate {
    fn name(&self) -> &'static str {
        "estimate"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        (job.tokens, _) = estimate_request_tokens(&job.request, &job.model);
        job.tracker.record.estimated_tokens = job.tokens;
        ready(Flow::Continue)
    }
}
