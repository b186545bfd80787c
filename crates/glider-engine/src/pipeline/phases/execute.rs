//! Execute: the backup sequence over the prepared requests (breaker, health, warm
//! first, a local reserve last); the attempt that answered, or the one error every
//! failure adds up to. When the reserve answered, the decision is re-stated as
//! `local_fallback` with why, for the route header, the record and the history.

use glider_backend::executor::summarise;
use glider_backend::{AttemptFailure, execute_prepared};

use super::{Flow, Job, Phase, PhaseFuture, not_routed};
use crate::router::{RouteDecision, RuleName};

pub(crate) struct Execute;

impl Phase for Execute {
    fn name(&self) -> &'static str {
        "execute"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        PhaseFuture::waiting(async move {
            let Some(decision) = &mut job.decision else {
                return Flow::Fail(not_routed());
            };
            job.tracker.announce();
            let executed =
                execute_prepared(&decision.candidates, &job.upstream, decision.local_reserve).await;
            let failures = match &executed {
                Ok(executed) => &executed.failures,
                Err(failures) => failures,
            };
            job.tracker.record.fallbacks = failures.iter().map(ToString::to_string).collect();
            match executed {
                Ok(executed) => {
                    if decision
                        .local_reserve
                        .is_some_and(|reserve| executed.index >= reserve)
                    {
                        answered_by_reserve(decision, &executed.failures);
                        job.tracker.record.rule = Some(decision.rule.as_str().to_owned());
                        job.tracker.record.reason = Some(decision.reason.clone());
                    }
                    job.executed = Some(executed);
                    Flow::Continue
                }
                Err(failures) => {
                    // Filed under the backend whose failure ended the sequence, never
                    // under no backend at all.
                    let last = failures.last().and_then(|failure| {
                        decision
                            .candidates
                            .iter()
                            .find(|c| c.backend.name() == failure.backend)
                    });
                    if let Some(candidate) = last {
                        job.tracker.record.backend = Some(candidate.backend.name().to_owned());
                        job.tracker.record.local = Some(candidate.backend.is_local());
                    }
                    Flow::Fail(summarise(&failures))
                }
            }
        })
    }
}

/// A local model of the reserve answered: the decision says so, with what the cloud
/// attempts ran into and what the route was before.
fn answered_by_reserve(decision: &mut RouteDecision, failures: &[AttemptFailure]) {
    let unreachable: Vec<String> = failures.iter().map(ToString::to_string).collect();
    decision.reason = format!(
        "the cloud was unreachable ({}), so a local model answered (routing.local_fallback); chosen by {}: {}",
        unreachable.join("; "),
        decision.rule,
        decision.reason
    );
    decision.rule = RuleName::LocalFallback;
}
