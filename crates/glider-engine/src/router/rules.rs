//! The routing rules as values: each rule is one type behind [`Rule`], and
//! [`PRIORITY`] lists them in the spec's order — explicit, sticky, classifier, a
//! plugin's opinion, Starlark. [`RuleName`] names every rule a decision can cite, with the strings the
//! wire carries (`x-glider-route`, the request history, `/ws`, `/api`).

use std::time::Duration;

use glider_ngl::ApiError;
use glider_vocab::RuleName;

use super::classifier::features;
use super::explicit::{self, Flag};
use super::{RouteInput, Router, Target, starlark_view};

/// One rule's answer.
pub enum Verdict {
    /// The rule wants the request there, and why.
    Wants(Target, String),
    /// The rule looked and has no opinion; the detail says what it saw.
    Abstains(String),
    /// The rule does not apply to this request ("no opinion").
    Silent,
}

/// What rules work out for one request besides their verdicts; later rules and the
/// decision read it.
#[derive(Default)]
pub struct Deliberation {
    pub session: Option<String>,
    /// A routing flag to strip before forwarding (explicit).
    pub flag: Option<Flag>,
    /// The model a `backend/model` name asked for (explicit).
    pub model_override: Option<String>,
    /// The classifier's score, when it ran (Starlark reads it).
    pub score: Option<f64>,
}

/// One routing rule.
pub trait Rule: Send + Sync {
    fn name(&self) -> RuleName;

    /// Whether to ask this rule, given whether an earlier rule already `decided` and
    /// whether every rule is being asked (`explain`).
    fn asked(&self, router: &Router, decided: bool, explain: bool) -> bool;

    /// The rule's verdict on `input`. `Err`: the request itself is invalid (e.g. it
    /// names a backend that is not configured) and fails.
    fn opinion(
        &self,
        router: &Router,
        input: &RouteInput,
        notes: &mut Deliberation,
    ) -> Result<Verdict, ApiError>;
}

/// The rules in priority order: the first with a resolvable opinion decides.
pub static PRIORITY: &[&dyn Rule] = &[&Explicit, &Sticky, &Classifier, &Plugin, &Starlark];

/// A plugin's opinion, when the route phase asked the plugins (only when no rule above
/// this one decided: a plugin is not called for nothing).
pub struct Plugin;

impl Rule for Plugin {
    fn name(&self) -> RuleName {
        RuleName::Plugin
    }

    fn asked(&self, _: &Router, decided: bool, explain: bool) -> bool {
        explain || !decided
    }

    fn opinion(
        &self,
        router: &Router,
        input: &RouteInput,
        _: &mut Deliberation,
    ) -> Result<Verdict, ApiError> {
        let Some(opinion) = input.plugin else {
            return Ok(Verdict::Silent);
        };
        let Some(target) = Target::parse(&opinion.target) else {
            return Ok(Verdict::Abstains(format!(
                "plugin {} named no target",
                opinion.plugin
            )));
        };
        if router.require_backend(&target, "plugin").is_err() {
            return Ok(Verdict::Abstains(format!(
                "plugin {} named {:?}, which is not configured",
                opinion.plugin, opinion.target
            )));
        }
        let detail = format!("plugin {}: {}", opinion.plugin, opinion.reason);
        Ok(Verdict::Wants(target, detail))
    }
}

/// A flag, the header, or a model naming a backend.
pub struct Explicit;

impl Rule for Explicit {
    fn name(&self) -> RuleName {
        RuleName::Explicit
    }

    fn asked(&self, _: &Router, _: bool, _: bool) -> bool {
        true
    }

    fn opinion(
        &self,
        router: &Router,
        input: &RouteInput,
        notes: &mut Deliberation,
    ) -> Result<Verdict, ApiError> {
        let config = &router.config.routing.explicit;
        if config.flags
            && let Some(found) = explicit::find_flag(input.request)
        {
            let detail = format!("flag {}", found.prefix.trim());
            let target = found.target.clone();
            router.require_backend(&target, "flag")?;
            notes.flag = Some(found);
            return Ok(Verdict::Wants(target, detail));
        }
        if let Some(target) = explicit::header_target(input.headers, &config.header) {
            router.require_backend(&target, &format!("header {}", config.header))?;
            let detail = format!("header {}: {}", config.header, target.label());
            return Ok(Verdict::Wants(target, detail));
        }
        let names: Vec<&str> = router.backends.iter().map(|b| b.name()).collect();
        if let Some((target, model)) = explicit::model_target(input.model, &names) {
            notes.model_override = model;
            let detail = format!("model {} names a backend", input.model);
            return Ok(Verdict::Wants(target, detail));
        }
        Ok(Verdict::Silent)
    }
}

/// An explicit choice earlier in this session.
pub struct Sticky;

impl Rule for Sticky {
    fn name(&self) -> RuleName {
        RuleName::Sticky
    }

    fn asked(&self, router: &Router, decided: bool, explain: bool) -> bool {
        router.config.routing.sticky.enabled && (explain || !decided)
    }

    fn opinion(
        &self,
        router: &Router,
        _: &RouteInput,
        notes: &mut Deliberation,
    ) -> Result<Verdict, ApiError> {
        let ttl = Duration::from_secs(router.config.routing.sticky.ttl_secs);
        let kept = notes
            .session
            .as_deref()
            .and_then(|s| router.sticky.get(s, ttl));
        Ok(match kept {
            Some((target, age)) => {
                let detail = format!(
                    "session kept {} (chosen {}s ago)",
                    target.label(),
                    age.as_secs()
                );
                Verdict::Wants(target, detail)
            }
            None => Verdict::Silent,
        })
    }
}

/// A weighted score of the request's features.
pub struct Classifier;

impl Rule for Classifier {
    fn name(&self) -> RuleName {
        RuleName::Classifier
    }

    /// Also after a decision when Starlark is configured: its view includes the score.
    fn asked(&self, router: &Router, decided: bool, explain: bool) -> bool {
        router.config.routing.classifier.enabled
            && (explain || !decided || router.starlark.is_some())
    }

    fn opinion(
        &self,
        router: &Router,
        input: &RouteInput,
        notes: &mut Deliberation,
    ) -> Result<Verdict, ApiError> {
        let classifier = router.classifier;
        let scored = classifier.score(&features(input.request));
        notes.score = Some(scored.score);
        let (local, cloud) = (classifier.local_threshold(), classifier.cloud_threshold());
        let score = scored.score;
        // The score and the threshold exactly as compared: a 1.9987 never reads as 2.0.
        let (comparison, target) = if score >= local {
            (
                format!(">= local_threshold {local:?}: local"),
                Some(Target::Local),
            )
        } else if score <= cloud {
            (
                format!("<= cloud_threshold {cloud:?}: cloud"),
                Some(Target::Cloud),
            )
        } else {
            (
                format!(
                    "between cloud_threshold {cloud:?} and local_threshold {local:?}: no opinion"
                ),
                None,
            )
        };
        let detail = format!("score {score:?} {comparison} ({})", scored.explain());
        Ok(match target {
            Some(target) => Verdict::Wants(target, detail),
            None => Verdict::Abstains(detail),
        })
    }
}

/// The user's `route(req)`; an error never fails the request.
pub struct Starlark;

impl Rule for Starlark {
    fn name(&self) -> RuleName {
        RuleName::Starlark
    }

    fn asked(&self, router: &Router, decided: bool, explain: bool) -> bool {
        router.starlark.is_some() && (explain || !decided)
    }

    fn opinion(
        &self,
        router: &Router,
        input: &RouteInput,
        notes: &mut Deliberation,
    ) -> Result<Verdict, ApiError> {
        let Some(rules) = router.starlark else {
            return Ok(Verdict::Silent);
        };
        let config = &router.config.routing.starlark;
        let view = starlark_view(input, &notes.session, notes.score, &config.expose_headers);
        let steps = config
            .max_steps
            .unwrap_or(glider_starlark::DEFAULT_MAX_STEPS);
        Ok(match rules.route(&view, steps) {
            Ok(answer) => match answer.as_deref().and_then(Target::parse) {
                Some(target) => Verdict::Wants(target, format!("{} returned it", rules.name())),
                None => Verdict::Abstains(format!("{} returned None", rules.name())),
            },
            Err(error) => {
                tracing::warn!(rules = rules.name(), %error, "starlark rule failed; falling through");
                Verdict::Abstains(format!("error, ignored: {error}"))
            }
        })
    }
}
