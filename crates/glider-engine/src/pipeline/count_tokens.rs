//! `count_tokens`, counted for the model that would answer, as exactly as it can be: an
//! Anthropic backend's own endpoint; a llama.cpp server's tokenizer over its chat
//! template (the request as it would be sent: fitted, system turns first); else
//! Glider's estimate, which is tiktoken for OpenAI models and the byte ratio otherwise
//! ([`crate::tokenizer`]). The same exact count settles the token limit near a local
//! window's edge ([`near_limit`]).

use std::sync::Arc;

use glider_backend::{Backend, Candidate};
use glider_config::{BackendKind, Config};
use glider_dialects::codec;
use glider_ngl::{ApiError, Dialect, ErrorKind, Request};
use http::HeaderMap;

use super::Engine;
use super::runtime::Runtime;
use super::upstream::{forward_headers, hoist_system_turns};
use crate::fit::local_window;
use crate::fit::{FitTarget, fit_request};
use crate::tokenizer::within_margin;

impl Engine {
    /// Count input tokens: exactly where a backend can (Anthropic's endpoint for a
    /// model an Anthropic backend serves, a llama.cpp server's tokenizer for a request
    /// routed to it), else Glider's estimate.
    pub async fn count_tokens(&self, body: &[u8], headers: &HeaderMap) -> Result<u64, ApiError> {
        // count_tokens bodies carry no max_tokens; the Messages decoder wants one.
        let mut value = glider_dialects::parse_json(body)?;
        if let Some(map) = value.as_object_mut() {
            map.entry("max_tokens").or_insert(1.into());
        }
        let normalized = serde_json::to_vec(&value)
            .map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))?;
        let (request, model, tokens) = self.prepare(Dialect::Anthropic, &normalized)?;
        let runtime = self.runtime();
        let exact = runtime.backends.iter().find(|b| {
            b.kind() == BackendKind::Anthropic
                && b.unavailable.is_none()
                && b.config.model_spec(&model).is_some()
        });
        if let Some(backend) = exact {
            let mut upstream_body = value;
            upstream_body["model"] = model.clone().into();
            if let Some(map) = upstream_body.as_object_mut() {
                map.remove("max_tokens");
            }
            match backend
                .count_tokens(
                    &upstream_body,
                    forward_headers(Dialect::Anthropic, headers, backend),
                )
                .await
            {
                Ok(count) => return Ok(count),
                Err(e) => {
                    tracing::warn!(backend = backend.name(), error = %e, "count_tokens upstream failed; estimating")
                }
            }
        }
        Ok(self
            .count_with_local_tokenizer(&request, &model, tokens, headers)
            .await
            .unwrap_or(tokens))
    }

    /// The exact count on the llama.cpp server the request routes to first, if it does
    /// route to one (`None`: another backend, or the server could not count it).
    async fn count_with_local_tokenizer(
        &self,
        request: &Request,
        model: &str,
        tokens: u64,
        headers: &HeaderMap,
    ) -> Option<u64> {
        let decision = self
            .decide(Dialect::Anthropic, request, headers, model, tokens, false)
            .ok()?;
        let candidate = decision
            .candidates
            .first()
            .filter(|c| c.backend.has_tokenizer())?;
        let runtime = self.runtime();
        let fit = runtime.config.fit.enabled.then_some(&*runtime.config);
        exact_count(candidate, request, fit).await
    }
}

/// `request`'s exact input tokens on `candidate`'s llama.cpp server, as it would be
/// sent: fitted to it when `fit` (the config) is given, system turns first. `None`
/// when the server cannot count it (logged).
async fn exact_count(
    candidate: &Candidate,
    request: &Request,
    fit: Option<&Config>,
) -> Option<u64> {
    let mut sent = request.clone();
    if let Some(config) = fit {
        let spec = candidate.backend.effective_spec(&candidate.model);
        let target = FitTarget::for_candidate(config, candidate, spec.as_ref(), Dialect::Anthropic);
        fit_request(&mut sent, &target);
    }
    sent.model = candidate.model.clone();
    hoist_system_turns(&mut sent.turns);
    let chat = codec(Dialect::OpenAiChat).encode_request(&sent);
    match candidate.backend.count_chat_tokens(&chat).await {
        Ok(count) => Some(count),
        Err(e) => {
            tracing::warn!(backend = candidate.backend.name(), error = %e, "llama.cpp token count failed; estimating");
            None
        }
    }
}

/// The llama.cpp backend serving `model` whose window `estimate` is within
/// [`NEAR_LIMIT_MARGIN`](crate::tokenizer::NEAR_LIMIT_MARGIN) of (either side), if any: there the estimate's error could
/// decide the token limit wrongly, so the exact count is worth its two requests.
pub(crate) fn near_limit(
    config: &Config,
    backends: &[Arc<Backend>],
    model: &str,
    estimate: u64,
) -> Option<Candidate> {
    backends
        .iter()
        .filter(|b| b.config.enabled && b.has_tokenizer() && b.config.model_spec(model).is_some())
        .map(|b| Candidate {
            backend: b.clone(),
            model: model.to_owned(),
        })
        .find(|c| within_margin(estimate, local_window(config, c)))
}

/// Whether the router could decide `model`'s request differently for an estimate near
/// `estimate`: a Starlark rule is configured (it may compare `tokens` with anything),
/// or `estimate` is within [`NEAR_LIMIT_MARGIN`](crate::tokenizer::NEAR_LIMIT_MARGIN) of an enabled local backend's window
/// (the token limit and the local reserve read those). Only then is the exact count
/// worth what it costs.
pub(crate) fn near_a_routing_limit(runtime: &Runtime, model: &str, estimate: u64) -> bool {
    runtime.starlark.is_some()
        || runtime
            .backends
            .iter()
            .filter(|b| b.config.enabled && b.is_local())
            .any(|b| {
                let candidate = Candidate {
                    backend: b.clone(),
                    model: model.to_owned(),
                };
                within_margin(estimate, local_window(&runtime.config, &candidate))
            })
}

/// The exact count on `candidate` of the request as the client sent it, for the token
/// limit (which fits a request over the window itself).
pub(crate) async fn exact_near_limit(candidate: &Candidate, request: &Request) -> Option<u64> {
    exact_count(candidate, request, None).await
}
