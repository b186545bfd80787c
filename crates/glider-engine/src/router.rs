//! Choosing candidates for a request (spec package `router`). This first router decides
//! by model: the backends that list the (aliased) model answer it; a request over a
//! local model's context window goes to the cloud; when cloud fallback is on, cloud
//! backends stand behind local ones. The rule engine (explicit, sticky, classifier,
//! Starlark) slots in ahead of these rules and produces the same [`RouteDecision`].

use std::sync::Arc;

use glider_backend::{Backend, Candidate};
use glider_config::Config;
use glider_ngl::{ApiError, ErrorKind};
use serde::Serialize;

/// Why a request went where it went; returned in `x-glider-route` and kept for the
/// dashboard.
#[derive(Debug, Clone, Serialize)]
pub struct RouteDecision {
    /// The rule that decided (`model`, `context_limit`).
    pub rule: &'static str,
    /// A short human reason.
    pub reason: String,
    /// Input tokens estimated for the request.
    pub estimated_tokens: u64,
    /// Candidates in the order the executor should consider them.
    #[serde(skip)]
    pub candidates: Vec<Candidate>,
}

impl RouteDecision {
    /// The `x-glider-route` header value.
    pub fn header_value(&self, backend: &str, model: &str) -> String {
        let value = format!(
            "rule={}; backend={backend}; model={model}; reason={}",
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

/// What the router needs to know about a request.
pub struct RouteInput<'a> {
    /// The model the client asked for.
    pub requested_model: &'a str,
    /// After `model_aliases`.
    pub model: &'a str,
    pub estimated_tokens: u64,
}

/// Decide the candidates for `input` among `backends`.
pub fn route(
    config: &Config,
    backends: &[Arc<Backend>],
    input: &RouteInput,
) -> Result<RouteDecision, ApiError> {
    let serving: Vec<&Arc<Backend>> = backends
        .iter()
        .filter(|b| b.config.enabled && b.config.model_spec(input.model).is_some())
        .collect();
    if serving.is_empty() {
        let known: Vec<String> = backends
            .iter()
            .flat_map(|b| b.config.concrete_models())
            .collect();
        return Err(ApiError::new(
            ErrorKind::NotFound,
            format!(
                "model {:?} is not served by any configured backend (known models: {})",
                input.model,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        )
        .with_param("model"));
    }

    let mut candidates = Vec::new();
    let mut too_long = Vec::new();
    for backend in &serving {
        if backend.kind().is_local() {
            let window = backend
                .config
                .context_window_of(input.model)
                .unwrap_or(config.routing.default_local_context);
            if input.estimated_tokens > window {
                too_long.push(format!("{} holds {window}", backend.name()));
                continue;
            }
        }
        candidates.push(Candidate {
            backend: (*backend).clone(),
            model: input.model.to_owned(),
        });
    }
    let any_local = serving.iter().any(|b| b.kind().is_local());
    if any_local && config.routing.cloud_fallback {
        push_cloud_fallbacks(backends, input, &mut candidates);
    }
    let (rule, reason) = if too_long.is_empty() {
        (
            "model",
            format!("{} is served by {}", input.model, names(&candidates)),
        )
    } else {
        (
            "context_limit",
            format!(
                "~{} tokens exceed the local context ({})",
                input.estimated_tokens,
                too_long.join(", ")
            ),
        )
    };
    if candidates.is_empty() {
        return Err(ApiError::invalid(format!(
            "{reason}, and cloud fallback is off (routing.cloud_fallback: false)"
        )));
    }
    Ok(RouteDecision {
        rule,
        reason,
        estimated_tokens: input.estimated_tokens,
        candidates,
    })
}

/// Cloud backends behind the local ones: first those serving the model the client
/// named (before any alias), then any with a `default_model`.
fn push_cloud_fallbacks(
    backends: &[Arc<Backend>],
    input: &RouteInput,
    candidates: &mut Vec<Candidate>,
) {
    let cloud = || {
        backends
            .iter()
            .filter(|b| b.config.enabled && !b.kind().is_local())
    };
    for backend in cloud() {
        if backend.config.model_spec(input.requested_model).is_some()
            && !contains(candidates, backend)
        {
            candidates.push(Candidate {
                backend: backend.clone(),
                model: input.requested_model.to_owned(),
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

fn contains(candidates: &[Candidate], backend: &Arc<Backend>) -> bool {
    candidates.iter().any(|c| Arc::ptr_eq(&c.backend, backend))
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

    fn setup(yaml: &str) -> (Config, Vec<Arc<Backend>>) {
        let config = Config::parse(yaml, "t").expect("valid");
        let backends = config.backends.iter().cloned().map(Backend::new).collect();
        (config, backends)
    }

    const YAML: &str = "backends:\n  - {name: local, type: ollama, base_url: 'http://127.0.0.1:1', models: [{name: qwen, context_window: 1000}]}\n  - {name: claude, type: anthropic, base_url: 'http://127.0.0.1:2', models: ['claude-*'], default_model: claude-x}\n";

    fn input<'a>(requested: &'a str, model: &'a str, tokens: u64) -> RouteInput<'a> {
        RouteInput {
            requested_model: requested,
            model,
            estimated_tokens: tokens,
        }
    }

    fn order(decision: &RouteDecision) -> Vec<(String, String)> {
        decision
            .candidates
            .iter()
            .map(|c| (c.backend.name().to_owned(), c.model.clone()))
            .collect()
    }

    #[test]
    fn local_first_then_cloud_with_the_requested_model() {
        let (config, backends) = setup(YAML);
        let decision =
            route(&config, &backends, &input("claude-sonnet", "qwen", 10)).expect("routes");
        assert_eq!(decision.rule, "model");
        assert_eq!(
            order(&decision),
            vec![
                ("local".into(), "qwen".into()),
                ("claude".into(), "claude-sonnet".into())
            ]
        );
    }

    #[test]
    fn over_the_context_window_goes_to_the_cloud() {
        let (config, backends) = setup(YAML);
        let decision = route(&config, &backends, &input("qwen", "qwen", 5000)).expect("routes");
        assert_eq!(decision.rule, "context_limit");
        assert_eq!(order(&decision), vec![("claude".into(), "claude-x".into())]);
    }

    #[test]
    fn pure_local_refuses_what_does_not_fit() {
        let (config, backends) = setup(&format!("{YAML}routing: {{cloud_fallback: false}}\n"));
        let err = route(&config, &backends, &input("qwen", "qwen", 5000)).expect_err("refused");
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert!(
            err.message.contains("cloud fallback is off"),
            "{}",
            err.message
        );
        let decision = route(&config, &backends, &input("qwen", "qwen", 10)).expect("routes");
        assert_eq!(order(&decision), vec![("local".into(), "qwen".into())]);
    }

    #[test]
    fn unknown_model_is_not_found() {
        let (config, backends) = setup(YAML);
        let err = route(&config, &backends, &input("gpt-9", "gpt-9", 10)).expect_err("unknown");
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert!(err.message.contains("qwen"), "{}", err.message);
    }
}
