//! Route: the router's decision over the runtime's backends and rules, then the warm
//! condition (a cold local model that would wait too long is passed over); a routing
//! flag it found is stripped, since it is the user's instruction to Glider, not the
//! model. When a plugin gives routing opinions and no rule above the `plugin` rule
//! decided, the plugins are asked (within their deadlines) and the router decides again
//! with their opinion; the decision and the tool calls the request carries are told to
//! the observing plugins. A dry run (`glider route explain`) asks every rule and
//! remembers, loads and tells nothing.

use glider_ngl::{ErrorKind, Part};
use glider_plugin::{RouteAsk, RouteOpinion};
use glider_vocab::RuleName;

use super::{Flow, Job, Phase, PhaseFuture, ready};
use crate::router::{RouteDecision, RouteInput, explicit, warm};

pub(crate) struct Route;

impl Phase for Route {
    fn name(&self) -> &'static str {
        "route"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        let Some(plugins) = job.plugins.clone().filter(|p| !p.is_empty()) else {
            return ready(decide(job, None).map_or_else(|stop| stop, |d| settle(job, d)));
        };
        PhaseFuture::waiting(async move {
            let first = match decide(job, None) {
                Ok(decision) => decision,
                Err(stop) => return stop,
            };
            let above_plugins = matches!(
                first.rule,
                RuleName::Explicit | RuleName::Sticky | RuleName::Classifier
            );
            let mut decision = first;
            if plugins.routes() && !above_plugins {
                let mut notes = Vec::new();
                let ask = RouteAsk {
                    request: &job.request,
                    model: &job.model,
                    front: job.front.as_str(),
                    estimated_tokens: job.tokens,
                    session: decision.session.as_deref(),
                };
                let opinion = plugins.route(&ask, &mut notes).await;
                job.tracker.record.plugins.extend(notes);
                if let Some(opinion) = opinion {
                    match decide(job, Some(&opinion)) {
                        Ok(again) => decision = again,
                        Err(stop) => return stop,
                    }
                }
            }
            plugins.observe("route_decided", || {
                serde_json::json!({"request_id": job.tracker.record.id, "decision": &decision,
                    "candidates": decision.candidates.iter().map(|c| serde_json::json!({
                        "backend": c.backend.name(), "model": c.model, "local": c.backend.is_local()})).collect::<Vec<_>>()})
            });
            observe_tool_calls(job, &plugins);
            settle(job, decision)
        })
    }
}

/// The router's decision, with `plugin`'s opinion when one was given; `Err` is where
/// the request goes instead (the origin, or a failure).
fn decide(job: &mut Job, plugin: Option<&RouteOpinion>) -> Result<RouteDecision, Flow> {
    let input = RouteInput {
        front: job.front,
        request: &job.request,
        headers: &job.headers,
        model: &job.model,
        estimated_tokens: job.tokens,
        plugin,
        kind: crate::router::kind_of(&job.request),
    };
    match job.runtime.router(&job.sticky).decide(&input, job.dry_run) {
        Ok(decision) => Ok(decision),
        // No backend serves the model: for MITM that is not a local request, so it
        // belongs to the CLI's origin, which knows every model it offers.
        Err(error) if job.origin_passthrough && error.kind == ErrorKind::NotFound => {
            job.tracker.record.rule = Some(RuleName::Origin.as_str().to_owned());
            job.tracker.record.reason = Some(error.message.clone());
            Err(Flow::Origin(Box::new(RouteDecision {
                rule: RuleName::Origin,
                reason: error.message,
                score: None,
                kind: input.kind,
                estimated_tokens: job.tokens,
                session: None,
                opinions: Vec::new(),
                candidates: Vec::new(),
                flag: None,
                local_reserve: None,
                answered_by: None,
            })))
        }
        Err(error) => Err(Flow::Fail(error)),
    }
}

/// The warm condition (a dry run loads nothing), the routing flag stripped, the record
/// written: the decision stands.
fn settle(job: &mut Job, mut decision: RouteDecision) -> Flow {
    if let Some(vram) = &job.vram {
        let config = &job.runtime.config;
        let backends = &job.runtime.backends;
        let passed_over = warm::pass_over_cold(&mut decision, vram, config, backends);
        // A dry run loads nothing: it only says which models were passed over.
        if !job.dry_run {
            if config.vram.background_load {
                for candidate in passed_over {
                    warm::load_in_background(vram.clone(), config.clone(), candidate, backends);
                }
            }
            warm::prewarm_sticky(&decision, &job.request, vram, config, backends);
        }
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
    job.tracker.record.kind = Some(decision.kind.as_str());
    job.tracker.record.score = decision.score;
    job.tracker.record.session = decision.session.clone();
    job.decision = Some(decision);
    Flow::Continue
}

/// The tool calls of the request's last assistant turn (the ones the client has just
/// run): their ids and names, never their arguments.
fn observe_tool_calls(job: &Job, plugins: &glider_plugin::Plugins) {
    let Some(last) = job
        .request
        .turns
        .iter()
        .rev()
        .find(|t| t.role == glider_ngl::Role::Assistant)
    else {
        return;
    };
    for part in &last.parts {
        if let Part::ToolCall { id, name, .. } = part {
            plugins.observe("tool_call", || {
                serde_json::json!({"request_id": job.tracker.record.id, "id": id, "name": name,
                    "session": job.tracker.record.session})
            });
        }
    }
}
