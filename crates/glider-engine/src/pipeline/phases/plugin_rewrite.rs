//! Plugin rewrite: each candidate's request (after fit, bounding and transform) handed
//! to the `rewrite` plugins whose scope covers its route (local, cloud or both); a
//! plugin that fails or times out is gone around, and the record says so.

use glider_plugin::RewriteAsk;

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};

pub(crate) struct PluginRewrite;

impl Phase for PluginRewrite {
    fn name(&self) -> &'static str {
        "plugin_rewrite"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let Some(plugins) = job
            .plugins
            .clone()
            .filter(|p| p.rewrites(true) || p.rewrites(false))
        else {
            return ready(Flow::Continue);
        };
        PhaseFuture::waiting(async move {
            let Some(decision) = &job.decision else {
                return Flow::Fail(not_routed());
            };
            job.adapted.resize_with(decision.candidates.len(), || None);
            let mut notes = Vec::new();
            for (candidate, adapted) in decision.candidates.iter().zip(&mut job.adapted) {
                let local = candidate.backend.is_local();
                if !plugins.rewrites(local) {
                    continue;
                }
                let ask = RewriteAsk {
                    request: adapted.as_ref().unwrap_or(&job.request),
                    backend: candidate.backend.name(),
                    model: &candidate.model,
                    local,
                };
                if let Some(rewritten) = plugins.rewrite(&ask, &mut notes).await {
                    notes.push(format!("{}: rewritten", candidate.backend.name()));
                    *adapted = Some(rewritten);
                }
            }
            job.tracker.record.plugins.extend(notes);
            Flow::Continue
        })
    }
}
