//! `count_tokens`, counted for the model that would answer, as exactly as it can be: an
//! Anthropic backend's own endpoint; a llama.cpp server's tokenizer over its chat
//! template (the request as it would be sent: fitted, system turns first); else
//! Glider's estimate, which is tiktoken for OpenAI models and the byte ratio otherwise
//! ([`crate::tokenizer`]).

use glider_config::BackendKind;
use glider_dialects::codec;
use glider_ngl::{ApiError, Dialect, ErrorKind, Request};
use http::HeaderMap;

use super::Engine;
use super::upstream::{forward_headers, hoist_system_turns};
use crate::fit::{FitTarget, fit_request};

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
                .count_tokens(&upstream_body, forward_headers(headers, backend))
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
        let mut sent = request.clone();
        if runtime.config.fit.enabled {
            let spec = candidate.backend.effective_spec(&candidate.model);
            let target = FitTarget::for_candidate(
                &runtime.config,
                candidate,
                spec.as_ref(),
                Dialect::Anthropic,
            );
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
}
