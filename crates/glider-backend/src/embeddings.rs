//! Embeddings from one backend: Ollama's `POST /api/embed`, an OpenAI-compatible or
//! OpenAI server's `POST /embeddings` under its base URL. Anthropic's API has none, so a
//! model served only there is refused with a 400 that says where embeddings can come
//! from. The vectors come back as the server wrote them; each front writes its own
//! shape around them (`glider-gateway`'s `embeddings` module).

use glider_config::BackendKind;
use glider_ngl::{ApiError, ErrorKind};
use http::HeaderMap;
use serde_json::{Value, json};

use crate::client::{Backend, snippet};

/// What a backend answered for a list of inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    /// One vector per input, in order.
    pub vectors: Vec<Vec<f64>>,
    /// The input tokens the server counted, when it said.
    pub input_tokens: Option<u64>,
}

impl Backend {
    /// The embeddings of `inputs` by `model` on this backend. `headers`: the client's
    /// headers this backend may see (its credentials rule).
    pub async fn embed(
        &self,
        model: &str,
        inputs: &[String],
        headers: HeaderMap,
    ) -> Result<Embedded, ApiError> {
        if let Some(why) = &self.unavailable {
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                format!("backend {} is not configured: {why}", self.name()),
            ));
        }
        if let Some(missing) = self.missing_credentials(&headers) {
            return Err(ApiError::new(ErrorKind::Authentication, missing.message));
        }
        let (request, body) = match self.kind() {
            BackendKind::Ollama => (
                self.at_root(reqwest::Method::POST, "/api/embed"),
                json!({"model": model, "input": inputs}),
            ),
            BackendKind::Vllm | BackendKind::Openai => (
                self.post("/embeddings"),
                json!({"model": model, "input": inputs, "encoding_format": "float"}),
            ),
            BackendKind::Anthropic => {
                return Err(ApiError::invalid(format!(
                    "model: {model} is served by backend {} (type anthropic), and Anthropic's \
                     API has no embeddings; ask for an embedding model of an ollama, vllm or \
                     openai backend",
                    self.name()
                ))
                .with_param("model"));
            }
        };
        let response = request
            .headers(headers)
            .json(&body)
            .timeout(self.config.first_byte_timeout())
            .send()
            .await
            .map_err(|e| {
                ApiError::new(
                    ErrorKind::BadGateway,
                    format!(
                        "backend {}: {}",
                        self.name(),
                        crate::health::error_chain(&e)
                    ),
                )
            })?;
        let status = response.status();
        let text = response.bytes().await.map_err(|e| {
            ApiError::new(
                ErrorKind::BadGateway,
                format!("backend {}: {e}", self.name()),
            )
        })?;
        if !status.is_success() {
            let dialect = self.dialect_for(glider_ngl::Dialect::OpenAiChat);
            let mut error = glider_dialects::codec(dialect).decode_error(status.as_u16(), &text);
            error.message = format!("backend {}: {}", self.name(), error.message);
            return Err(error);
        }
        let reply: Value = serde_json::from_slice(&text).map_err(|_| {
            ApiError::new(
                ErrorKind::BadGateway,
                format!(
                    "backend {} answered embeddings with: {}",
                    self.name(),
                    snippet(&text)
                ),
            )
        })?;
        read_vectors(self.kind(), &reply, inputs.len()).ok_or_else(|| {
            ApiError::new(
                ErrorKind::BadGateway,
                format!(
                    "backend {} answered embeddings without {} vectors: {}",
                    self.name(),
                    inputs.len(),
                    snippet(&text)
                ),
            )
        })
    }
}

/// The vectors of a server's embeddings reply, `None` unless there is one per input.
fn read_vectors(kind: BackendKind, reply: &Value, count: usize) -> Option<Embedded> {
    let vector =
        |v: &Value| -> Option<Vec<f64>> { v.as_array()?.iter().map(Value::as_f64).collect() };
    let (vectors, input_tokens) = match kind {
        BackendKind::Ollama => (
            reply["embeddings"]
                .as_array()?
                .iter()
                .map(vector)
                .collect::<Option<Vec<_>>>()?,
            reply["prompt_eval_count"].as_u64(),
        ),
        _ => {
            let mut data: Vec<&Value> = reply["data"].as_array()?.iter().collect();
            data.sort_by_key(|item| item["index"].as_u64().unwrap_or(0));
            (
                data.into_iter()
                    .map(|item| vector(&item["embedding"]))
                    .collect::<Option<Vec<_>>>()?,
                reply["usage"]["prompt_tokens"].as_u64(),
            )
        }
    };
    (vectors.len() == count).then_some(Embedded {
        vectors,
        input_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_read_from_each_wire_and_counted() {
        let ollama =
            json!({"model": "m", "embeddings": [[0.1, 0.2], [0.3, 0.4]], "prompt_eval_count": 4});
        assert_eq!(
            read_vectors(BackendKind::Ollama, &ollama, 2),
            Some(Embedded {
                vectors: vec![vec![0.1, 0.2], vec![0.3, 0.4]],
                input_tokens: Some(4)
            })
        );
        let openai = json!({"object": "list", "data": [
            {"object": "embedding", "index": 1, "embedding": [0.3]},
            {"object": "embedding", "index": 0, "embedding": [0.1]}],
            "usage": {"prompt_tokens": 3, "total_tokens": 3}});
        assert_eq!(
            read_vectors(BackendKind::Vllm, &openai, 2).map(|e| e.vectors),
            Some(vec![vec![0.1], vec![0.3]])
        );
        // One vector short, or a vector that is not numbers: not a reply.
        assert_eq!(read_vectors(BackendKind::Vllm, &openai, 3), None);
        let garbled = json!({"embeddings": [["x"]]});
        assert_eq!(read_vectors(BackendKind::Ollama, &garbled, 1), None);
    }
}
