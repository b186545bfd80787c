//! The `fan_out:` section: whether a request goes to more than one candidate at once
//! (`hedge`: the next candidate starts when the local one is slow to its first byte;
//! `first`: every candidate starts and the first complete answer wins; `all`: every
//! candidate answers and the route's own choice is kept, the others recorded beside it;
//! `shadow`: the primary answers as usual and a copy goes to a second candidate off the
//! request path, within `shadow`'s budget), by default and per route (the rule that
//! decided). docs/fan-out.md says what each key does.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Route names a `fan_out.routes` key may use: the rules that decide a request.
pub const FAN_OUT_ROUTES: &[&str] = &[
    "explicit",
    "sticky",
    "classifier",
    "starlark",
    "model",
    "token_limit",
];

/// The routes the user chose (`/cloud`, `/local`, `/via`, the route header, a session
/// sticky to such a choice): never shadowed, whatever `fan_out` says, since the user
/// decided and there is nothing to learn.
pub const USER_ROUTES: &[&str] = &["explicit", "sticky"];

/// How many candidates a request is sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FanOutMode {
    /// One at a time: the backup sequence.
    #[default]
    Off,
    /// A local candidate with no first byte by the delay also starts the next
    /// candidate; the first to send a byte answers, the other is cancelled.
    Hedge,
    /// Every usable candidate starts at once (non-streamed replies); the first
    /// complete answer wins and the others are cancelled.
    First,
    /// Every usable candidate answers (read whole); the client gets the route's own
    /// choice and every other answer is recorded beside it for comparison.
    All,
    /// The primary answers exactly as with fan-out off; a copy goes to a second
    /// candidate off the request path, within the budget, and the two are compared.
    Shadow,
}

/// The budget that keeps `mode: shadow` bounded, and whose key it may spend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShadowConfig {
    /// The share of eligible requests copied, 0.0 to 1.0 (deterministic: with 0.25,
    /// every fourth one).
    pub sample_rate: f64,
    /// Shadow copies running at once; a request past it is skipped.
    pub max_concurrent: usize,
    /// Shadow copies started per minute (a sliding minute); past it a request is skipped.
    pub max_per_minute: usize,
    /// Whether a cloud backend may be the shadow (spending its key). Off: only local
    /// backends shadow.
    pub allow_cloud: bool,
    /// A backend (by name) that takes every copy instead of the route's next
    /// candidate, even when the route did not pick it; unset: the route's next
    /// candidate. A cloud backend here needs `allow_cloud`.
    pub target: Option<String>,
}

impl Default for ShadowConfig {
    fn default() -> Self {
        ShadowConfig {
            sample_rate: 1.0,
            max_concurrent: 1,
            max_per_minute: 10,
            allow_cloud: false,
            target: None,
        }
    }
}

/// One route's fan-out; a key left out takes the section's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FanOutRoute {
    pub mode: Option<FanOutMode>,
    pub delay_ms: Option<u64>,
}

/// The `fan_out:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FanOutConfig {
    /// The mode of a route not listed in `routes`.
    pub mode: FanOutMode,
    /// Hedge: milliseconds without a first byte before the next candidate starts.
    /// Unset: the local backend's measured p95 time to first byte.
    pub delay_ms: Option<u64>,
    /// Hedge, `delay_ms` unset: the delay used until the local backend has
    /// `min_samples` measured first bytes.
    pub initial_delay_ms: u64,
    /// Hedge: first-byte times measured before their p95 replaces `initial_delay_ms`.
    pub min_samples: usize,
    /// Per route (the rule that decided: explicit, sticky, classifier, starlark,
    /// model, token_limit): its own mode and delay.
    pub routes: BTreeMap<String, FanOutRoute>,
    /// `mode: shadow`: the budget and which backends may shadow.
    pub shadow: ShadowConfig,
}

impl Default for FanOutConfig {
    fn default() -> Self {
        FanOutConfig {
            mode: FanOutMode::Off,
            delay_ms: None,
            initial_delay_ms: 1000,
            min_samples: 20,
            routes: BTreeMap::new(),
            shadow: ShadowConfig::default(),
        }
    }
}

/// What one request's route does: its mode and, for a hedge, a fixed delay if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FanOutPolicy {
    pub mode: FanOutMode,
    pub delay: Option<Duration>,
}

impl FanOutConfig {
    /// The policy of a request decided by `route` (a rule name); `shadow` is `off` for
    /// the [`USER_ROUTES`].
    pub fn policy_for(&self, route: &str) -> FanOutPolicy {
        let own = self.routes.get(route);
        let mode = own.and_then(|r| r.mode).unwrap_or(self.mode);
        FanOutPolicy {
            mode: match mode {
                FanOutMode::Shadow if USER_ROUTES.contains(&route) => FanOutMode::Off,
                mode => mode,
            },
            delay: own
                .and_then(|r| r.delay_ms)
                .or(self.delay_ms)
                .map(Duration::from_millis),
        }
    }

    /// Everything wrong with the section (empty when valid); `backends` are the
    /// configured ones a `shadow.target` must name.
    pub fn problems(&self, backends: &[crate::BackendConfig]) -> Vec<String> {
        let mut problems = Vec::new();
        for route in self.routes.keys() {
            if !FAN_OUT_ROUTES.contains(&route.as_str()) {
                problems.push(format!(
                    "fan_out.routes.{route}: not a route; use one of {}",
                    FAN_OUT_ROUTES.join(", ")
                ));
            }
        }
        if self.min_samples == 0 {
            problems.push("fan_out.min_samples must be at least 1".to_owned());
        }
        if !(0.0..=1.0).contains(&self.shadow.sample_rate) {
            problems.push(format!(
                "fan_out.shadow.sample_rate is {}; it must be between 0.0 and 1.0",
                self.shadow.sample_rate
            ));
        }
        if let Some(name) = &self.shadow.target {
            match backends.iter().find(|b| &b.name == name) {
                None => problems.push(format!(
                    "fan_out.shadow.target: no backend is named {name:?}"
                )),
                Some(backend) if !backend.enabled => problems.push(format!(
                    "fan_out.shadow.target: {name:?} is disabled (enabled: false)"
                )),
                Some(backend) if !backend.is_local() && !self.shadow.allow_cloud => {
                    problems.push(format!(
                        "fan_out.shadow.target: {name:?} is a cloud backend; a copy spends its key only with fan_out.shadow.allow_cloud: true"
                    ))
                }
                Some(_) => {}
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_inherits_what_it_leaves_out() {
        let mut config = FanOutConfig {
            mode: FanOutMode::Hedge,
            delay_ms: Some(300),
            ..FanOutConfig::default()
        };
        config.routes.insert(
            "explicit".into(),
            FanOutRoute {
                mode: Some(FanOutMode::Off),
                delay_ms: None,
            },
        );
        config.routes.insert(
            "classifier".into(),
            FanOutRoute {
                mode: None,
                delay_ms: Some(50),
            },
        );
        assert_eq!(config.policy_for("explicit").mode, FanOutMode::Off);
        let classifier = config.policy_for("classifier");
        assert_eq!(classifier.mode, FanOutMode::Hedge);
        assert_eq!(classifier.delay, Some(Duration::from_millis(50)));
        assert_eq!(
            config.policy_for("model").delay,
            Some(Duration::from_millis(300))
        );
        assert!(config.problems(&[]).is_empty());
    }

    #[test]
    fn what_the_user_routed_is_never_shadowed() {
        let config = FanOutConfig {
            mode: FanOutMode::Shadow,
            ..FanOutConfig::default()
        };
        assert_eq!(config.policy_for("explicit").mode, FanOutMode::Off);
        assert_eq!(config.policy_for("sticky").mode, FanOutMode::Off);
        assert_eq!(config.policy_for("classifier").mode, FanOutMode::Shadow);
    }

    #[test]
    fn an_unknown_route_is_named() {
        let mut config = FanOutConfig::default();
        config
            .routes
            .insert("clasifier".into(), FanOutRoute::default());
        let problems = config.problems(&[]);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("fan_out.routes.clasifier"),
            "{problems:?}"
        );
    }
}
