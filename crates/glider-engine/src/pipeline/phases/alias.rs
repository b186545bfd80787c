//! Alias: the model the client named, after `model_aliases`.

use super::{Flow, Job, Phase, PhaseFuture, ready};

pub(crate) struct Alias;

impl Phase for Alias {
    fn name(&self) -> &'static str {
        "alias"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        job.model = job
            .runtime
            .config
            .resolve_alias(&job.request.model)
            .to_owned();
        job.tracker.record.model_requested = job.request.model.clone();
        job.tracker.record.stream = job.request.stream;
        ready(Flow::Continue)
    }
}
