//! Embeddings on every front that has them: OpenAI's `POST /v1/embeddings`, Ollama's
//! `POST /api/embed` and its older `POST /api/embeddings` (one `prompt`, one
//! `embedding`). The model is resolved as `/v1/models` lists it (an alias to the model
//! it stands for, on the backend that serves it) and asked of that backend
//! ([`glider_backend::Backend::embed`]): Ollama, an OpenAI-compatible server or
//! OpenAI. Not a completion, so not through the pipeline: no routing rule, context
//! fitting or request record applies. Every error is in the front's own shape.

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use glider_ngl::{ApiError, Dialect, ErrorKind};
use serde_json::{Value, json};

use crate::{Gateway, error_response, read_body};

/// A request's inputs: one string or a list of them, under `key`.
fn inputs(body: &Value, key: &str) -> Result<Vec<String>, ApiError> {
    let wrong = || {
        ApiError::invalid(format!("{key}: expected a string or a list of strings")).with_param(key)
    };
    match body.get(key) {
        Some(Value::String(text)) => Ok(vec![text.clone()]),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or_else(wrong))
            .collect(),
        _ => Err(wrong()),
    }
}

/// The vectors for `inputs` by the model the body names, from its backend.
async fn embedded(
    gw: &Gateway,
    body: &Value,
    headers: axum::http::HeaderMap,
    inputs: &[String],
) -> Result<(String, glider_backend::Embedded), ApiError> {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid("model: model is required").with_param("model"))?;
    let info = gw
        .engine
        .model(model)
        .or_else(|| {
            model
                .strip_suffix(":latest")
                .and_then(|m| gw.engine.model(m))
        })
        .ok_or_else(|| {
            ApiError::new(
                ErrorKind::NotFound,
                format!(
                    "model {model:?} is not routed by Glider: /v1/models lists the models it routes"
                ),
            )
            .with_param("model")
        })?;
    let runtime = gw.engine.runtime();
    let backend = runtime.backend(&info.backend).ok_or_else(|| {
        ApiError::new(
            ErrorKind::Unavailable,
            format!("model {model:?} has no backend serving it"),
        )
    })?;
    let target = info.alias_of.clone().unwrap_or_else(|| info.id.clone());
    let headers = backend.client_headers(Dialect::OpenAiChat, &headers);
    let embedded = backend.embed(&target, inputs, headers).await?;
    Ok((model.to_owned(), embedded))
}

/// The body as JSON, or the front's 400.
async fn json_body(
    gw: &Gateway,
    front: Dialect,
    request: Request,
) -> Result<(axum::http::HeaderMap, Value), Response> {
    let (headers, body) = read_body(gw, front, request).await?;
    match serde_json::from_slice::<Value>(&body) {
        Ok(value @ Value::Object(_)) => Ok((headers, value)),
        Ok(_) => Err(error_response(
            front,
            &ApiError::invalid("the body must be a JSON object"),
        )),
        Err(e) => Err(error_response(
            front,
            &ApiError::invalid(format!("invalid JSON body: {e}")),
        )),
    }
}

/// `POST /v1/embeddings` (OpenAI's shape).
pub(crate) async fn openai(State(gw): State<Gateway>, request: Request) -> Response {
    let front = Dialect::OpenAiChat;
    let (headers, body) = match json_body(&gw, front, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let reply = async {
        let inputs = inputs(&body, "input")?;
        // The OpenAI SDKs ask for base64 by default (and decode it themselves).
        let base64 = match body.get("encoding_format").and_then(Value::as_str) {
            None | Some("float") => false,
            Some("base64") => true,
            Some(other) => {
                return Err(ApiError::invalid(format!(
                    "encoding_format: {other:?} is not an encoding; ask for \"float\" or \"base64\""
                ))
                .with_param("encoding_format"));
            }
        };
        if body.get("dimensions").is_some_and(|d| !d.is_null()) {
            return Err(ApiError::invalid(
                "dimensions: not served; the model's own dimension is what comes back",
            )
            .with_param("dimensions"));
        }
        let (model, embedded) = embedded(&gw, &body, headers, &inputs).await?;
        let data: Vec<Value> = embedded
            .vectors
            .iter()
            .enumerate()
            .map(|(index, vector)| {
                let embedding = if base64 {
                    Value::String(base64_f32(vector))
                } else {
                    json!(vector)
                };
                json!({"object": "embedding", "index": index, "embedding": embedding})
            })
            .collect();
        let tokens = embedded.input_tokens.unwrap_or(0);
        Ok(json!({"object": "list", "data": data, "model": model,
                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))
    };
    match reply.await {
        Ok(body) => axum::Json(body).into_response(),
        Err(error) => error_response(front, &error),
    }
}

/// `POST /api/embed` (Ollama's shape: `input`, `embeddings`).
pub(crate) async fn ollama_embed(State(gw): State<Gateway>, request: Request) -> Response {
    let front = Dialect::Ollama;
    let (headers, body) = match json_body(&gw, front, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let reply = async {
        let inputs = inputs(&body, "input")?;
        let (model, embedded) = embedded(&gw, &body, headers, &inputs).await?;
        Ok::<_, ApiError>(json!({"model": model, "embeddings": embedded.vectors,
                                 "prompt_eval_count": embedded.input_tokens.unwrap_or(0)}))
    };
    match reply.await {
        Ok(body) => axum::Json(body).into_response(),
        Err(error) => error_response(front, &error),
    }
}

/// `POST /api/embeddings` (Ollama's older shape: one `prompt`, one `embedding`).
pub(crate) async fn ollama_embeddings(State(gw): State<Gateway>, request: Request) -> Response {
    let front = Dialect::Ollama;
    let (headers, body) = match json_body(&gw, front, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let reply = async {
        let Some(prompt) = body.get("prompt").and_then(Value::as_str) else {
            return Err(ApiError::invalid("prompt: expected a string").with_param("prompt"));
        };
        let (_, embedded) = embedded(&gw, &body, headers, &[prompt.to_owned()]).await?;
        let vector = embedded.vectors.into_iter().next().unwrap_or_default();
        Ok(json!({ "embedding": vector }))
    };
    match reply.await {
        Ok(body) => axum::Json(body).into_response(),
        Err(error) => error_response(front, &error),
    }
}

/// A vector as OpenAI's `encoding_format: "base64"` writes it: little-endian `f32`s,
/// base64 with padding (the SDKs decode it with `np.frombuffer(..., dtype="float32")`).
fn base64_f32(vector: &[f64]) -> String {
    let bytes: Vec<u8> = vector
        .iter()
        .flat_map(|x| (*x as f32).to_le_bytes())
        .collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_little_endian_f32_with_padding() {
        // 1.0f32 = 00 00 80 3f; 2.0f32 = 00 00 00 40.
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(base64_f32(&[]), "");
    }
}
