//! Route: the router's decision over the runtime's backends and rules, then the warm
//! condition (a cold local model that would wait too long is passed over); a routing
//! flag it found is stripped, since it is the user's instruction to Glider, not the
//! model.

use glider_ngl::ErrorKind;

use super::{Flow, Job, Phase, PhaseFuture, ready};
use crate::router::{RouteDecision, RouteInput, RuleName, explicit, warm};

pub(crate) struct Route;

impl Phase for Route {
    fn name(&self) -> &'static str {
        "route"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let input = RouteInput {
            front: job.front,
            request: &job.request,
            headers: &job.headers,
            model: &job.model,
            estimated_tokens: job.tokens,
        };
        let mut decision = match job.runtime.router(&job.sticky).decide(&input, false) {
            Ok(decision) => decision,
            // No backend serves the model: for MITM that is not a local request, so it
            // belongs to the CLI's origin, which knows every model it offers.
            Err(error) if job.origin_passthrough && error.kind == ErrorKind::NotFound => {
                job.tracker.record.rule = Some(RuleName::Origin.as_str().to_owned());
                job.tracker.record.reason = Some(error.message.clone());
                return ready(Flow::Origin(Box::new(RouteDecision {
                    rule: RuleName::Origin,
                    reason: error.message,
                    score: None,
                    estimated_tokens: job.tokens,
                    session: None,
                    opinions: Vec::new(),
                    candidates: Vec::new(),
                    flag: None,
                    local_reserve: None,
                })));
            }
            Err(error) => return ready(Flow::Fail(error)),
        };
        if let Some(vram) = &job.vram {
            let config = &job.runtime.config;
            let passed_over = warm::pass_over_cold(&mut decision, vram, config);
            if config.vram.background_load {
                for candidate in passed_over {
                    warm::load_in_background(vram.clone(), config.clone(), candidate);
                }
            }
            warm::prewarm_sticky(&decision, &job.request, vram, config);
        }
        if let Some(flag) = &decision.flag {
            explicit::strip_from_request(&mut job.request, flag);
            if let Some(stripped) = job
                .body
                .as_ref()
                .and_then(|body| explicit::strip_from_body(job.front, body, flag))
            {
                job.body = Some(stripped);
            }
        }
        job.tracker.record.rule = Some(decision.rule.as_str().to_owned());
        job.tracker.record.reason = Some(decision.reason.clone());
        job.tracker.record.session = decision.session.clone();
        job.decision = Some(decision);
        ready(Flow::Continue)
    }
}
