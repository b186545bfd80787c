//! `count_tokens`: exact from an Anthropic backend that serves the model, else
//! Glider's estimate.

use glider_config::BackendKind;
use glider_ngl::{ApiError, Dialect, ErrorKind};
use http::HeaderMap;

use super::Engine;
use super::upstream::forward_headers;

impl Engine {
    /// Count input tokens: an Anthropic backend that serves the model counts exactly;
    /// otherwise Glider estimates (local dialects have no counting endpoint).
    pub async fn count_tokens(&self, body: &[u8], headers: &HeaderMap) -> Result<u64, ApiError> {
        // count_tokens bodies carry no max_tokens; the Messages decoder wants one.
        let mut value = glider_dialects::parse_json(body)?;
        if let Some(map) = value.as_object_mut() {
            map.entry("max_tokens").or_insert(1.into());
        }
        let normalized = serde_json::to_vec(&value)
            .map_err(|e| ApiError::new(ErrorKind::Internal, e.to_string()))?;
        let (_, model, tokens) = self.prepare(Dialect::Anthropic, &normalized)?;
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
        Ok(tokens)
    }
}
