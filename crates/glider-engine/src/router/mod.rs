//! Choosing where a request goes (spec package `router`). Rules apply in the spec's
//! priority order — explicit, sticky, classifier, a plugin's opinion, Starlark — and the first with an
//! opinion picks the side (local, cloud, or a named backend); with no opinion the model
//! decides (the backends that list it). Then the token limit has the last word: a local
//! model whose context window the request exceeds is dropped in favour of the cloud, or
//! the request is refused in pure-local mode. Every decision says which rule made it
//! and why (`x-glider-route`, the dashboard, `glider route explain`).
//!
//! One file, past 600 lines, on purpose: it is the one `Router::decide` and the steps
//! it takes in order (the rules' opinion, the candidates by model, the cloud fallbacks,
//! the token limit); each rule, the classifier and the request's kind are already their
//! own modules beside it, and splitting the steps would scatter one decision.

pub mod classifier;
pub mod explicit;
pub mod kind;
pub mod rules;
pub mod sticky;
pub mod warm;

use std::sync::Arc;
use std::time::Duration;

use glider_backend::{Backend, Candidate};
use glider_config::Config;
use glider_ngl::{ApiError, Dialect, ErrorKind, Request};
use glider_starlark::Rules;
use http::HeaderMap;
use serde::Serialize;

use crate::fit::{FitTarget, fit_request, local_window};
use crate::tokenizer::estimate_request_tokens;
use crate::transform::bound_local_context;
use classifier::Classifier;
use explicit::Flag;
pub use glider_vocab::RuleName;
pub use kind::{RequestKind, kind_of};
use rules::{Deliberation, PRIORITY, Verdict};
use sticky::StickyStore;

/// Where a rule wants a request to go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Local,
    Cloud,
    Backend(String),
}

impl Target {
    /// `local`, `cloud` or a backend name.
    pub fn parse(text: &str) -> Option<Target> {
        match text.trim() {
            "" => None,
            "local" => Some(Target::Local),
            "cloud" => Some(Target::Cloud),
            name => Some(Target::Backend(name.to_owned())),
        }
    }

    pub fn label(&self) -> String {
        match self {
            Target::Local => "local".into(),
            Target::Cloud => "cloud".into(),
            Target::Backend(name) => name.clone(),
        }
    }
}

/// The first rule with an opinion some backend can serve, and those candidates.
struct Decided {
    rule: RuleName,
    target: Target,
    detail: String,
    candidates: Vec<Candidate>,
}

/// One rule's view of a request.
#[derive(Debug, Clone, Serialize)]
pub struct Opinion {
    pub rule: RuleName,
    /// `local`, `cloud`, a backend name, or `None` (no opinion).
    pub target: Option<String>,
    pub detail: String,
}

/// Why a request went where it went; returned in `x-glider-route` and kept for the
/// dashboard.
#[derive(Debug, Clone, Serialize)]
pub struct RouteDecision {
    /// The rule that decided: `explicit`, `sticky`, `classifier`, `starlark`, `model`
    /// (no rule had an opinion) or `token_limit`.
    pub rule: RuleName,
    /// A short human reason.
    pub reason: String,
    /// The classifier's score, when it ran.
    pub score: Option<f64>,
    /// What kind of request it is (docs/routing.md, "The default policy").
    pub kind: RequestKind,
    /// Input tokens estimated for the request.
    pub estimated_tokens: u64,
    /// The session the request belongs to.
    pub session: Option<String>,
    /// The opinions gathered (all rules when explaining; up to the deciding one otherwise).
    pub opinions: Vec<Opinion>,
    /// Candidates in the order the executor should consider them.
    #[serde(skip)]
    pub candidates: Vec<Candidate>,
    /// A routing flag to strip from the request before it is forwarded.
    #[serde(skip)]
    pub flag: Option<Flag>,
    /// Candidates from this index on are local models that answer only if no cloud
    /// candidate before them could be reached (`routing.local_fallback`).
    #[serde(skip)]
    pub local_reserve: Option<usize>,
    /// Set when Glider answers the request itself instead of any candidate: what it
    /// answers from (`continuity-record`: a compaction with `context.compaction: local`
    /// and no local backend up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<&'static str>,
}

impl RouteDecision {
    /// Keep only what a request sent to a CLI's origin may try (the MITM door's rule):
    /// the local candidates before any local reserve, since the reserve stands in for a
    /// cloud that is, there, the origin itself. Empty: the origin answers.
    pub fn keep_origin_local(&mut self) {
        if let Some(reserve) = self.local_reserve.take() {
            self.candidates.truncate(reserve);
        }
        self.candidates.retain(|c| c.backend.is_local());
    }

    /// Whether [`keep_origin_local`](Self::keep_origin_local) would leave a candidate.
    pub fn has_origin_local(&self) -> bool {
        let before_reserve = self.local_reserve.unwrap_or(self.candidates.len());
        self.candidates[..before_reserve.min(self.candidates.len())]
            .iter()
            .any(|c| c.backend.is_local())
    }

    /// The `x-glider-route` header value of a request that failed: the first candidate
    /// it was routed to (the reason and the error say the rest).
    pub fn failure_header_value(&self) -> String {
        match self.candidates.first() {
            Some(first) => self.header_value(first.backend.name(), &first.model),
            None => self.header_value("-", "-"),
        }
    }

    /// The `x-glider-route` header value.
    pub fn header_value(&self, backend: &str, model: &str) -> String {
        // The score exactly as compared with the thresholds: rounded, 1.99 would read
        // as a 2.0 that should have gone local.
        let score = self
            .score
            .map(|s| format!("; score={s:?}"))
            .unwrap_or_default();
        let value = format!(
            "rule={}; backend={backend}; model={model}{score}; reason={}",
            self.rule, self.reason
        );
        // Header values must be visible ASCII; most already are.
        if value.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return value;
        }
        value
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect()
    }
}

/// What the router reads of a request.
pub struct RouteInput<'a> {
    pub front: Dialect,
    pub request: &'a Request,
    pub headers: &'a HeaderMap,
    /// After `model_aliases`.
    pub model: &'a str,
    pub estimated_tokens: u64,
    /// A plugin's opinion, asked for by the route phase (the `plugin` rule reads it).
    pub plugin: Option<&'a glider_plugin::RouteOpinion>,
    /// The request's kind ([`kind_of`]), read once by whoever builds the input: the
    /// decision, Starlark's view and an origin-bound record all carry this one.
    pub kind: RequestKind,
}

/// The router's parts for one request: config, backends and rules of one snapshot,
/// and the sticky store that outlives snapshots.
pub struct Router<'a> {
    pub config: &'a Config,
    pub backends: &'a [Arc<Backend>],
    pub classifier: &'a dyn Classifier,
    pub starlark: Option<&'a Rules>,
    pub sticky: &'a StickyStore,
}

impl Router<'_> {
    /// Decide: ask the rules in priority order, then let the token limit have the last
    /// word. With `explain` (`glider route explain`'s dry run) every rule gives its
    /// opinion and nothing is remembered: an explicit choice does not stick to the
    /// session.
    pub fn decide(&self, input: &RouteInput, explain: bool) -> Result<RouteDecision, ApiError> {
        let routing = &self.config.routing;
        let mut notes = Deliberation {
            session: sticky::session_id(input.request, input.headers),
            ..Deliberation::default()
        };
        let mut opinions = Vec::new();
        let mut decided: Option<Decided> = None;
        for rule in PRIORITY {
            if !rule.asked(self, decided.is_some(), explain) {
                continue;
            }
            let verdict = rule.opinion(self, input, &mut notes)?;
            let model = notes.model_override.as_deref().unwrap_or(input.model);
            self.note(
                (input.request, model),
                &mut opinions,
                &mut decided,
                rule.name(),
                verdict,
            );
        }

        let Deliberation {
            session,
            flag,
            model_override,
            score,
        } = notes;
        let model = model_override.as_deref().unwrap_or(input.model);
        let (rule, reason, mut candidates, explicit_target) = match decided {
            Some(Decided {
                rule,
                target,
                detail,
                candidates,
            }) => (
                rule,
                detail,
                candidates,
                (rule == RuleName::Explicit).then_some(target),
            ),
            None => {
                let candidates = self.by_model(input.request, model)?;
                let reason = format!("{model} is served by {}", names(&candidates));
                (RuleName::Model, reason, candidates, None)
            }
        };
        if !explain && let (Some(session), Some(target)) = (&session, explicit_target) {
            let sticky = &routing.sticky;
            self.sticky.set(
                session,
                target,
                Duration::from_secs(sticky.ttl_secs),
                Duration::from_secs(sticky.cloud_guard_secs),
                sticky.max_sessions,
            );
        }

        // The token limit: a local model must hold the request.
        let (rule, reason) = self.token_limit(input, &mut candidates, rule, reason)?;
        if candidates.is_empty() {
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                format!("{reason}; no backend can take it"),
            ));
        }
        let chosen_by_user = matches!(rule, RuleName::Explicit | RuleName::Sticky);
        let local_reserve = (routing.local_fallback && !chosen_by_user)
            .then(|| self.push_local_reserve(input, model, &mut candidates))
            .flatten();
        Ok(RouteDecision {
            rule,
            reason,
            score,
            kind: input.kind,
            estimated_tokens: input.estimated_tokens,
            session,
            opinions,
            candidates,
            flag,
            local_reserve,
            answered_by: None,
        })
    }

    /// Behind an all-cloud list, the local models that hold the request, as a reserve
    /// for a cloud that cannot be reached; the index where the reserve starts, if any.
    fn push_local_reserve(
        &self,
        input: &RouteInput,
        model: &str,
        candidates: &mut Vec<Candidate>,
    ) -> Option<usize> {
        if candidates.iter().any(|c| c.backend.is_local()) {
            return None;
        }
        let start = candidates.len();
        let preferred = [model, input.request.model.as_str()];
        let local = self
            .backends
            .iter()
            .filter(|b| b.config.enabled && b.is_local());
        for backend in local {
            let Some(model) = Self::model_on(backend, &preferred) else {
                continue;
            };
            let candidate = Candidate {
                backend: backend.clone(),
                model,
            };
            // As the token limit counts: a CLI's main turn (~22k tokens as sent) fits a
            // small model's window once fitted, and the reserve answers when nothing
            // else can, so bounding its history is fair too.
            if !matches!(self.holds(input, &candidate, true), Holds::TooLong(_)) {
                candidates.push(candidate);
            }
        }
        (candidates.len() > start).then_some(start)
    }

    /// Record a rule's verdict; the first resolvable opinion decides.
    fn note(
        &self,
        scope: (&Request, &str),
        opinions: &mut Vec<Opinion>,
        decided: &mut Option<Decided>,
        rule: RuleName,
        verdict: Verdict,
    ) {
        let (target, detail) = match verdict {
            Verdict::Wants(target, detail) => (target, detail),
            Verdict::Abstains(detail) => {
                opinions.push(Opinion {
                    rule,
                    target: None,
                    detail,
                });
                return;
            }
            Verdict::Silent => {
                opinions.push(Opinion {
                    rule,
                    target: None,
                    detail: "no opinion".into(),
                });
                return;
            }
        };
        let (request, model) = scope;
        let candidates = self.resolve(&target, request, model);
        let resolvable = candidates.is_some();
        let detail = if resolvable {
            detail
        } else {
            format!("{detail}, but no enabled backend can serve it there")
        };
        opinions.push(Opinion {
            rule,
            target: Some(target.label()),
            detail: detail.clone(),
        });
        if let Some(candidates) = candidates
            && decided.is_none()
        {
            *decided = Some(Decided {
                rule,
                target,
                detail,
                candidates,
            });
        }
    }

    pub(crate) fn require_backend(&self, target: &Target, source: &str) -> Result<(), ApiError> {
        match target {
            Target::Backend(name) if self.backend(name).is_none() => {
                let known: Vec<&str> = self.backends.iter().map(|b| b.name()).collect();
                Err(ApiError::invalid(format!(
                    "{source} names backend {name:?}, which is not configured (known: local, cloud, {})",
                    known.join(", ")
                )))
            }
            _ => Ok(()),
        }
    }

    fn backend(&self, name: &str) -> Option<&Arc<Backend>> {
        self.backends
            .iter()
            .find(|b| b.config.enabled && b.name() == name)
    }

    /// The model a backend should be asked for: the request's if it serves it, else its
    /// default, else the first it lists.
    pub(crate) fn model_on(backend: &Backend, preferred: &[&str]) -> Option<String> {
        preferred
            .iter()
            .find(|m| backend.config.model_spec(m).is_some())
            .map(|m| (*m).to_owned())
            .or_else(|| backend.config.default_model.clone())
            .or_else(|| backend.config.concrete_models().into_iter().next())
    }

    /// Candidates for a chosen side.
    pub(crate) fn resolve(
        &self,
        target: &Target,
        request: &Request,
        model: &str,
    ) -> Option<Vec<Candidate>> {
        let preferred = [model, request.model.as_str()];
        let on_side = |local: bool| -> Vec<Candidate> {
            let enabled = || {
                self.backends
                    .iter()
                    .filter(|b| b.config.enabled && b.is_local() == local)
            };
            // Backends serving the model first, then the others with their own model.
            let serving =
                enabled().filter(|b| preferred.iter().any(|m| b.config.model_spec(m).is_some()));
            let others =
                enabled().filter(|b| !preferred.iter().any(|m| b.config.model_spec(m).is_some()));
            serving
                .chain(others)
                .filter_map(|b| {
                    Self::model_on(b, &preferred).map(|model| Candidate {
                        backend: b.clone(),
                        model,
                    })
                })
                .collect()
        };
        let mut candidates = match target {
            Target::Local => on_side(true),
            Target::Cloud => on_side(false),
            Target::Backend(name) => {
                let backend = self.backend(name)?;
                vec![Candidate {
                    backend: backend.clone(),
                    model: Self::model_on(backend, &preferred)?,
                }]
            }
        };
        if candidates.first().is_some_and(|c| c.backend.is_local())
            && self.config.routing.cloud_fallback
        {
            self.push_cloud_fallbacks(request, &mut candidates);
        }
        (!candidates.is_empty()).then_some(candidates)
    }

    /// No rule had an opinion: the backends that list the model answer it.
    fn by_model(&self, request: &Request, model: &str) -> Result<Vec<Candidate>, ApiError> {
        let mut candidates: Vec<Candidate> = self
            .backends
            .iter()
            .filter(|b| b.config.enabled && b.config.model_spec(model).is_some())
            .map(|b| Candidate {
                backend: b.clone(),
                model: model.to_owned(),
            })
            .collect();
        if candidates.is_empty() {
            let known: Vec<String> = self
                .backends
                .iter()
                .flat_map(|b| b.config.concrete_models())
                .collect();
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!(
                    "model {model:?} is not served by any configured backend (known models: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            )
            .with_param("model"));
        }
        if candidates.iter().any(|c| c.backend.is_local()) && self.config.routing.cloud_fallback {
            self.push_cloud_fallbacks(request, &mut candidates);
        }
        Ok(candidates)
    }

    /// Cloud backends behind local ones: first those serving the model the client named
    /// (before any alias), then any with a `default_model`.
    fn push_cloud_fallbacks(&self, request: &Request, candidates: &mut Vec<Candidate>) {
        let cloud = || {
            self.backends
                .iter()
                .filter(|b| b.config.enabled && !b.is_local())
        };
        let contains = |candidates: &[Candidate], b: &Arc<Backend>| {
            candidates.iter().any(|c| Arc::ptr_eq(&c.backend, b))
        };
        for backend in cloud() {
            if backend.config.model_spec(&request.model).is_some() && !contains(candidates, backend)
            {
                candidates.push(Candidate {
                    backend: backend.clone(),
                    model: request.model.clone(),
                });
            }
        }
        for backend in cloud() {
            if let Some(model) = &backend.config.default_model
                && !contains(candidates, backend)
            {
                candidates.push(Candidate {
                    backend: backend.clone(),
                    model: model.clone(),
                });
            }
        }
    }

    /// Drop local candidates whose context window the request exceeds, as it will be
    /// sent: a request over the window is fitted to the candidate (what the fit phase
    /// will do, only on this rare path) and counted again, so one that fits once its
    /// tools are reduced stays local. When the user chose local themselves (`/local`,
    /// or a session sticky to it), a request that fits once bounded to the candidate's
    /// budget (what the bounded-context phase will do) stays local too: the user asked
    /// for the local model, and bounding exists to make the long history fit.
    fn token_limit(
        &self,
        input: &RouteInput,
        candidates: &mut Vec<Candidate>,
        rule: RuleName,
        reason: String,
    ) -> Result<(RuleName, String), ApiError> {
        let tokens = input.estimated_tokens;
        let chosen_by_user = matches!(rule, RuleName::Explicit | RuleName::Sticky);
        let mut too_long = Vec::new();
        let mut fitted_in = Vec::new();
        candidates.retain(|c| {
            if !c.backend.is_local() {
                return true;
            }
            match self.holds(input, c, chosen_by_user) {
                Holds::AsSent => true,
                Holds::Fitted(how) => {
                    fitted_in.push(how);
                    true
                }
                Holds::TooLong(why) => {
                    too_long.push(why);
                    false
                }
            }
        });
        let reason = match fitted_in.is_empty() {
            true => reason,
            false => format!(
                "{reason}; ~{tokens} tokens as sent, {}",
                fitted_in.join(", ")
            ),
        };
        if too_long.is_empty() {
            return Ok((rule, reason));
        }
        let why = format!(
            "~{tokens} tokens exceed the local context ({})",
            too_long.join(", ")
        );
        if candidates.is_empty() {
            let hint = if self.config.routing.cloud_fallback {
                "and no cloud backend can take it"
            } else {
                "and cloud fallback is off (routing.cloud_fallback: false)"
            };
            return Err(ApiError::invalid(format!("{why}, {hint}")));
        }
        if candidates.first().is_some_and(|c| c.backend.is_local()) {
            // A local backend with a larger window still takes it.
            return Ok((rule, format!("{reason}; {why}")));
        }
        Ok((
            RuleName::TokenLimit,
            format!("{why} (chosen by {rule}: {reason})"),
        ))
    }

    /// Whether local `candidate` holds the request as it will be sent: as it came, once
    /// fitted (what the fit phase will do), or — with `may_bound` and
    /// `context.bound_local` — once bounded to its budget (what the bounded-context
    /// phase will do). Fitting runs only for a request over the window (a rare path).
    fn holds(&self, input: &RouteInput, candidate: &Candidate, may_bound: bool) -> Holds {
        let window = self.local_window(candidate);
        if input.estimated_tokens <= window {
            return Holds::AsSent;
        }
        let name = candidate.backend.name();
        // One fitted copy serves both counts: bounding cuts the request the fit phase
        // would send, so it is fitted once and bounded in place.
        let bound = may_bound && self.config.context.bound_local;
        if self.config.fit.enabled || bound {
            let mut request = self.fitted(input, candidate);
            if self.config.fit.enabled {
                let fitted = estimate_request_tokens(&request, input.model).0;
                if fitted <= window {
                    return Holds::Fitted(format!(
                        "{name} holds {window} after fitting (~{fitted} tokens)"
                    ));
                }
            }
            if bound {
                // As a local model counts them: the byte ratio, no model tokenizer.
                bound_local_context(&mut request, &self.config.context, window);
                let bounded = estimate_request_tokens(&request, "").0;
                if bounded <= window {
                    return Holds::Fitted(format!(
                        "{name} holds {window} once bounded to its budget (~{bounded} tokens, context.bound_local)"
                    ));
                }
            }
        }
        Holds::TooLong(format!("{name} holds {window}"))
    }

    fn local_window(&self, candidate: &Candidate) -> u64 {
        local_window(self.config, candidate)
    }

    /// The request as the fit phase sends it to `candidate` (as it came with fitting
    /// off).
    fn fitted(&self, input: &RouteInput, candidate: &Candidate) -> Request {
        let mut request = input.request.clone();
        if self.config.fit.enabled {
            let spec = candidate.backend.effective_spec(&candidate.model);
            let target =
                FitTarget::for_candidate(self.config, candidate, spec.as_ref(), input.front);
            fit_request(&mut request, &target);
        }
        request
    }
}

/// Whether a local candidate holds a request ([`Router::holds`]).
enum Holds {
    AsSent,
    /// Once fitted or bounded, said how.
    Fitted(String),
    /// Not even then, said why.
    TooLong(String),
}

/// The read-only request view a Starlark `route(req)` gets.
pub(crate) fn starlark_view(
    input: &RouteInput,
    session: &Option<String>,
    score: Option<f64>,
    expose: &[String],
) -> serde_json::Value {
    let request = input.request;
    let headers: serde_json::Map<String, serde_json::Value> = expose
        .iter()
        .filter_map(|name| {
            let value = input.headers.get(name.as_str())?.to_str().ok()?;
            Some((name.clone(), value.into()))
        })
        .collect();
    serde_json::json!({
        "front": input.front.as_str(),
        "model": input.model,
        "requested_model": request.model,
        "tokens": input.estimated_tokens,
        "tools": request.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
        "tool_count": request.tools.len(),
        "last_user_text": request.last_user_text().unwrap_or_default(),
        "turns": request.turns.len(),
        "stream": request.stream,
        "max_tokens": request.max_tokens,
        "thinking": request.thinking.is_some(),
        "session": session,
        "score": score,
        "kind": input.kind.as_str(),
        "headers": headers,
    })
}

fn names(candidates: &[Candidate]) -> String {
    candidates
        .iter()
        .map(|c| c.backend.name())
        .collect::<Vec<_>>()
        .join(" -> ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_header_prints_the_score_exactly_as_compared() {
        let decision = RouteDecision {
            rule: RuleName::Model,
            reason: "r".into(),
            // Just under a local threshold of 2.0: rounded it would read as 2.0.
            score: Some(2.0 - 143.0 / 10_000.0),
            kind: RequestKind::MainTurn,
            estimated_tokens: 143,
            session: None,
            opinions: Vec::new(),
            candidates: Vec::new(),
            flag: None,
            local_reserve: None,
            answered_by: None,
        };
        let header = decision.header_value("claude", "m");
        assert!(header.contains("; score=1.9857;"), "{header}");
        let whole = RouteDecision {
            score: Some(5.0),
            ..decision
        };
        assert!(whole.header_value("b", "m").contains("; score=5.0;"));
        assert!(
            whole
                .failure_header_value()
                .starts_with("rule=model; backend=-")
        );
    }
}
