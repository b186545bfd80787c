//! Embeddings as Ollama (`POST /api/embed`: `{model, input}` → `{model, embeddings,
//! prompt_eval_count}`) and OpenAI-compatible servers (`POST /v1/embeddings`: `{model,
//! input}` → `{object: "list", data: [{index, embedding}], usage}`) answer them. The
//! vector of a text is derived from its bytes (length, byte sum, vowels), so a test
//! can tell which input a vector belongs to; the request is recorded like the others.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::{Value, json};

use crate::server::Incoming;
use crate::state::MockState;
use crate::stream;

/// The mock's vector for `text`: `[bytes, byte sum % 1000, vowels]`.
pub fn vector_of(text: &str) -> Vec<f64> {
    let sum: u64 = text.bytes().map(u64::from).sum();
    let vowels = text.chars().filter(|c| "aeiouAEIOU".contains(*c)).count();
    vec![text.len() as f64, (sum % 1000) as f64, vowels as f64]
}

/// The inputs of a request: one string or a list of them; `None` for anything else.
fn inputs(body: &Value) -> Option<Vec<String>> {
    match &body["input"] {
        Value::String(text) => Some(vec![text.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect(),
        _ => None,
    }
}

/// Tokens the mock counts for `inputs`: a quarter of their bytes, at least one each.
fn tokens(inputs: &[String]) -> u64 {
    inputs.iter().map(|t| (t.len() as u64 / 4).max(1)).sum()
}

pub(crate) async fn ollama(State(_): State<Arc<MockState>>, inc: Incoming) -> Response {
    let Some(inputs) = inputs(&inc.body) else {
        return stream::json_response(400, &json!({"error": "invalid input type"}), &[]);
    };
    let vectors: Vec<Vec<f64>> = inputs.iter().map(|t| vector_of(t)).collect();
    stream::json_response(
        200,
        &json!({"model": inc.body["model"], "embeddings": vectors,
                "total_duration": 1000, "load_duration": 0,
                "prompt_eval_count": tokens(&inputs)}),
        &[],
    )
}

pub(crate) async fn openai(State(_): State<Arc<MockState>>, inc: Incoming) -> Response {
    let Some(inputs) = inputs(&inc.body) else {
        return stream::json_response(
            400,
            &json!({"error": {"message": "'input' must be a string or a list of strings",
                              "type": "invalid_request_error", "param": "input", "code": null}}),
            &[],
        );
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, t)| json!({"object": "embedding", "index": index, "embedding": vector_of(t)}))
        .collect();
    let count = tokens(&inputs);
    stream::json_response(
        200,
        &json!({"object": "list", "data": data, "model": inc.body["model"],
                "usage": {"prompt_tokens": count, "total_tokens": count}}),
        &[],
    )
}
