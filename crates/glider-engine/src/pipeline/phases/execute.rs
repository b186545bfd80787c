//! Execute: the backup sequence over the prepared requests (breaker, health, warm
//! first); the attempt that answered, or the one error every failure adds up to.

use glider_backend::execute_prepared;
use glider_backend::executor::summarise;

use super::{Flow, Job, Phase, PhaseFuture, not_routed};

pub(crate) struct Execute;

impl Phase for Execute {
    fn name(&self) -> &'static str {
        "execute"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        PhaseFuture::waiting(async move {
            let Some(decision) = &job.decision else {
                return Flow::Fail(not_routed());
            };
            job.tracker.announce();
            let executed = execute_prepared(&decision.candidates, &job.upstream).await;
            let failures = match &executed {
                Ok(executed) => &executed.failures,
                Err(failures) => failures,
            };
            job.tracker.record.fallbacks = failures.iter().map(ToString::to_string).collect();
            match executed {
                Ok(executed) => {
                    job.executed = Some(executed);
                    Flow::Continue
                }
                Err(failures) => Flow::Fail(summarise(&failures)),
            }
        })
    }
}
