//! Fit (local candidates only, `fit.enabled`; with it off, only thinking a model cannot
//! do is dropped): each local candidate's request is fitted
//! to its model — tools within the backend's budget, output capped, what the model
//! cannot take dropped — and every change goes on the record ([`crate::fit`]). How
//! each local candidate's reply must end is kept ([`LocalEnding`]: an output cap
//! Glider set, a schema sent as a tool), for the record phase.

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};
use crate::fit::{FitTarget, drop_thinking, fit_request, thinking_unsupported};
use crate::local_reply::LocalEnding;

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
        job.endings = vec![None; decision.candidates.len()];
        let enabled = config.fit.enabled;
        for ((candidate, adapted), ending) in decision
            .candidates
            .iter()
            .zip(&mut job.adapted)
            .zip(&mut job.endings)
        {
            let backend = &candidate.backend;
            if !backend.is_local() {
                continue;
            }
            *ending = Some(LocalEnding::default());
            // Configured capabilities, filled in with what the server says.
            let spec = backend.effective_spec(&candidate.model);
            let target = FitTarget {
                speed: job.speed.get(backend.name(), &candidate.model),
                ..FitTarget::for_candidate(config, candidate, spec.as_ref(), job.front)
            };
            // With fitting off only thinking the model cannot do is dropped (a model
            // that refuses it would fail the request); nothing else is copied or changed.
            if !enabled && !thinking_unsupported(&job.request, &target) {
                continue;
            }
            let earlier = adapted.is_some();
            let mut request = adapted.take().unwrap_or_else(|| job.request.clone());
            let mut notes = if enabled {
                let fitted = fit_request(&mut request, &target);
                *ending = Some(LocalEnding {
                    cap: fitted.output_cap,
                    schema_tool: fitted.schema_tool,
                });
                fitted.notes
            } else {
                drop_thinking(&mut request, &target).into_iter().collect()
            };
            if earlier || !notes.is_empty() {
                *adapted = Some(request);
            }
            if enabled && job.headers.contains_key("anthropic-beta") {
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
