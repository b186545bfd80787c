//! Origin gate (MITM only): only local candidates are tried; with none, the request
//! goes to the CLI's origin, whose job cloud fallback is then. A local reserve for an
//! unreachable cloud is dropped: the cloud here is the origin, reached by the CLI's own
//! route, not Glider's cloud backends.

use super::{Flow, Job, Phase, PhaseFuture, not_routed, ready};

pub(crate) struct OriginGate;

impl Phase for OriginGate {
    fn name(&self) -> &'static str {
        "origin_gate"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        if !job.origin_passthrough {
            return ready(Flow::Continue);
        }
        let Some(mut decision) = job.decision.take() else {
            return ready(Flow::Fail(not_routed()));
        };
        decision.keep_origin_local();
        if decision.candidates.is_empty() {
            return ready(Flow::Origin(Box::new(decision)));
        }
        job.decision = Some(decision);
        ready(Flow::Continue)
    }
}
