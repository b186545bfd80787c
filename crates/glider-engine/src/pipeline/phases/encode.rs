//! Encode: each candidate's upstream request, prepared before anything is sent (the
//! executor only sends them).

use std::iter;

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::pipeline::upstream;

pub(crate) struct Encode;

impl Phase for Encode {
    fn name(&self) -> &'static str {
        "encode"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let Some(decision) = &job.decision else {
            return ready(Flow::Fail(not_routed()));
        };
        let adapted = std::mem::take(&mut job.adapted);
        job.upstream = decision
            .candidates
            .iter()
            .zip(adapted.into_iter().chain(iter::repeat_with(|| None)))
            .map(|(candidate, adapted)| {
                upstream::for_candidate(
                    job.front,
                    &job.headers,
                    job.body.as_ref(),
                    &job.request,
                    adapted,
                    candidate,
                    decision.session.as_deref(),
                )
            })
            .collect();
        ready(Flow::Continue)
    }
}
