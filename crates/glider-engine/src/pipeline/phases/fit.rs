//! Fit (local candidates only, `fit.enabled`): each local candidate's request is fitted
//! to its model — tools within the backend's budget, output capped, what the model
//! cannot take dropped — and every change goes on the record ([`crate::fit`]).

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::fit::{FitTarget, fit_request};

pub(crate) struct Fit;

impl Phase for Fit {
    fn name(&self) -> &'static str {
        "fit"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let Some(decision) = &job.decision else {
            return ready(Flow::Fail(not_routed()));
        };
        let config = &job.runtime.config;
        job.adapted.resize_with(decision.candidates.len(), || None);
        if !config.fit.enabled {
            return ready(Flow::Continue);
        }
        for (candidate, adapted) in decision.candidates.iter().zip(&mut job.adapted) {
            let backend = &candidate.backend;
            if !backend.kind().is_local() {
                continue;
            }
            let spec = backend.config.model_spec(&candidate.model);
            let target = FitTarget {
                fit: &config.fit,
                backend: &backend.config.fit,
                model: spec.as_ref(),
                dialect: backend.dialect_for(job.front),
                kind: backend.kind(),
            };
            let earlier = adapted.is_some();
            let mut request = adapted.take().unwrap_or_else(|| job.request.clone());
            let mut notes = fit_request(&mut request, &target);
            if earlier || !notes.is_empty() {
                *adapted = Some(request);
            }
            if job.headers.contains_key("anthropic-beta") {
                // Never forwarded to a local backend (upstream::forward_headers): said here.
                notes.push("anthropic-beta header not sent".into());
            }
            job.tracker
                .record
                .fitted
                .extend(notes.iter().map(|n| format!("{}: {n}", backend.name())));
        }
        ready(Flow::Continue)
    }
}
