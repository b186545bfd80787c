//! Ollama native API: `/api/chat` (NDJSON stream by default, one JSON object with
//! `stream:false`) with Go-decoder-style refusals, plus `/api/tags`, `/api/ps`,
//! `/api/version` and `GET /`. Models load and unload as Ollama's do (a request with no
//! messages loads, one with `keep_alive: 0` unloads), with memory accounted on a fake
//! GPU and a load time ([`crate::MockConfig::gpu_total_mib`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::clock;
use crate::script::{self, Conversation, Reply};
use crate::server::{Ctx, Incoming};
use crate::state::MockState;
use crate::stream::{self, Frame, NDJSON_CONTENT_TYPE};

const MIB: u64 = 1024 * 1024;

/// The version `/api/version` reports.
pub(crate) const VERSION: &str = "0.12.6";

/// `{"error": message}`.
pub(crate) fn error(status: u16, message: &str) -> Response {
    stream::json_response(status, &json!({"error": message}), &[])
}

/// Ollama's model-name normalisation: a name without a tag means `:latest`.
pub(crate) fn normalize(model: &str) -> String {
    let last = model.rsplit('/').next().unwrap_or(model);
    if last.contains(':') {
        model.to_string()
    } else {
        format!("{model}:latest")
    }
}

/// Go's `encoding/json` name for a JSON value's kind.
fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn unmarshal(v: &Value, field: &str, ty: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field {field} of type {ty}",
        go_kind(v)
    )
}

/// The type errors Go's decoder raises when binding an `api.ChatRequest`.
fn decode_error(body: &Value) -> Option<String> {
    if !body.is_object() {
        return Some(format!(
            "json: cannot unmarshal {} into Go value of type api.ChatRequest",
            go_kind(body)
        ));
    }
    if let Some(m) = body.get("model")
        && !(m.is_string() || m.is_null())
    {
        return Some(unmarshal(m, "ChatRequest.model", "string"));
    }
    let messages = match body.get("messages") {
        None | Some(Value::Null) => return None,
        Some(Value::Array(a)) => a,
        Some(other) => return Some(unmarshal(other, "ChatRequest.messages", "[]api.Message")),
    };
    for m in messages {
        if m.is_null() {
            continue;
        }
        if !m.is_object() {
            return Some(unmarshal(m, "ChatRequest.messages", "api.Message"));
        }
        if let Some(c) = m.get("content")
            && !(c.is_string() || c.is_null())
        {
            return Some(unmarshal(c, "Message.messages.content", "string"));
        }
        if let Some(calls) = m.get("tool_calls") {
            let calls = match calls {
                Value::Null => continue,
                Value::Array(a) => a,
                other => {
                    return Some(unmarshal(
                        other,
                        "Message.messages.tool_calls",
                        "[]api.ToolCall",
                    ));
                }
            };
            for call in calls {
                if let Some(args) = call.get("function").and_then(|f| f.get("arguments"))
                    && !(args.is_object() || args.is_null())
                {
                    return Some(unmarshal(
                        args,
                        "ToolCallFunction.messages.tool_calls.function.arguments",
                        "api.ToolCallFunctionArguments",
                    ));
                }
            }
        }
    }
    None
}

/// `think`: `true`/`false` or `"high"`/`"medium"`/`"low"`.
fn wants_thinking(body: &Value) -> Result<bool, String> {
    match body.get("think") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if matches!(s.as_str(), "high" | "medium" | "low") => Ok(true),
        Some(other) => Err(format!(
            "invalid think value: {other} (must be \"high\", \"medium\", \"low\", true, or false)"
        )),
    }
}

fn conversation(body: &Value, messages: &[Value]) -> Conversation {
    let mut conv = Conversation {
        has_tools: body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty()),
        ..Conversation::default()
    };
    for m in messages {
        let content = m.get("content").and_then(Value::as_str).unwrap_or_default();
        match m.get("role").and_then(Value::as_str) {
            Some("user") => {
                conv.last_user_text = content.to_string();
                conv.tool_result_after_user = false;
                conv.trailing_tool_results.clear();
            }
            Some("tool") => {
                conv.tool_result_after_user = true;
                conv.trailing_tool_results.push(content.to_string());
            }
            _ => conv.trailing_tool_results.clear(),
        }
    }
    conv
}

fn keep_alive_zero(body: &Value) -> bool {
    match body.get("keep_alive") {
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::String(s)) => matches!(s.as_str(), "0" | "0s" | "0m"),
        _ => false,
    }
}

fn stats(input: u64, output: u64) -> [(&'static str, u64); 6] {
    let prompt_ns = input * 100_000;
    let eval_ns = output * 1_000_000;
    let load_ns = 1_000_000;
    [
        ("total_duration", load_ns + prompt_ns + eval_ns),
        ("load_duration", load_ns),
        ("prompt_eval_count", input),
        ("prompt_eval_duration", prompt_ns),
        ("eval_count", output),
        ("eval_duration", eval_ns),
    ]
}

fn tool_call_json(index: usize, call: &script::ToolCall) -> Value {
    json!({
        "id": call.call_id(),
        "function": {"index": index, "name": call.name, "arguments": call.arguments},
    })
}

fn done_object(model: &str, message: Value, input: u64, output: u64) -> Value {
    let mut obj = Map::new();
    obj.insert("model".into(), json!(model));
    obj.insert("created_at".into(), json!(clock::rfc3339_now()));
    obj.insert("message".into(), message);
    obj.insert("done_reason".into(), json!("stop"));
    obj.insert("done".into(), json!(true));
    for (k, v) in stats(input, output) {
        obj.insert(k.into(), json!(v));
    }
    Value::Object(obj)
}

pub(crate) async fn handle(ctx: Ctx<'_>) -> Response {
    let Ctx {
        state,
        inc,
        stream,
        close_after,
    } = ctx;
    if inc.body_len == 0 {
        return error(400, "missing request body");
    }
    if let Some(e) = &inc.parse_error {
        return error(400, e);
    }
    let body = &inc.body;
    if let Some(e) = decode_error(body) {
        return error(400, &e);
    }
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if model.is_empty() {
        return error(400, "model is required");
    }
    if !state.knows_model(model, normalize) {
        return error(
            404,
            &format!("model \"{model}\" not found, try pulling it first"),
        );
    }
    let messages: &[Value] = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    if messages.is_empty() {
        let reason = if keep_alive_zero(body) {
            state.unload(model);
            "unload"
        } else {
            if let Err(e) = state.load(model).await {
                return error(500, &e);
            }
            "load"
        };
        let out = json!({
            "model": model,
            "created_at": clock::rfc3339_now(),
            "message": {"role": "assistant", "content": ""},
            "done_reason": reason,
            "done": true,
        });
        return stream::json_response(200, &out, &[]);
    }
    let thinking = match wants_thinking(body) {
        Ok(t) => t,
        Err(e) => return error(400, &e),
    };
    if thinking {
        let wanted = normalize(model);
        if !state
            .config
            .thinking_models
            .iter()
            .any(|m| normalize(m) == wanted)
        {
            return error(400, &format!("\"{model}\" does not support thinking"));
        }
    }
    let conv = conversation(body, messages);
    let busy = state.busy(model);
    if let Err(e) = state.load(model).await {
        return error(500, &e);
    }
    let reply = state.plan(&conv, thinking);
    let input = script::input_tokens(inc.body_len);
    let output = reply.output_tokens();
    let deltas = state.config.deltas;
    if stream {
        let frames = stream_frames(model, &reply, input, output, deltas);
        stream::streamed_busy(
            state,
            NDJSON_CONTENT_TYPE,
            frames,
            close_after,
            &[],
            Some(busy),
        )
    } else {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), json!(reply.text));
        if let Some(t) = &reply.thinking {
            message.insert("thinking".into(), json!(t));
        }
        if !reply.tool_calls.is_empty() {
            let calls: Vec<Value> = reply
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, c)| tool_call_json(i, c))
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let out = done_object(model, Value::Object(message), input, output);
        let n = script::split(&reply.text, deltas).len();
        let response = stream::complete(state, &out, n, close_after.is_some(), &[]).await;
        drop(busy);
        response
    }
}

fn stream_frames(model: &str, reply: &Reply, input: u64, output: u64, deltas: usize) -> Vec<Frame> {
    let created_at = clock::rfc3339_now();
    let chunk = |message: Value| {
        Frame::delta(stream::ndjson(&json!({
            "model": model,
            "created_at": created_at,
            "message": message,
            "done": false,
        })))
    };
    let mut frames = Vec::new();
    if let Some(thinking) = &reply.thinking {
        for piece in script::split(thinking, 2) {
            frames.push(chunk(
                json!({"role": "assistant", "content": "", "thinking": piece}),
            ));
        }
    }
    for piece in script::split(&reply.text, deltas) {
        frames.push(chunk(json!({"role": "assistant", "content": piece})));
    }
    for (i, call) in reply.tool_calls.iter().enumerate() {
        frames.push(chunk(json!({
            "role": "assistant",
            "content": "",
            "tool_calls": [tool_call_json(i, call)],
        })));
    }
    frames.push(Frame::meta(stream::ndjson(&done_object(
        model,
        json!({"role": "assistant", "content": ""}),
        input,
        output,
    ))));
    frames
}

fn model_entry(state: &MockState, name: &str) -> Value {
    let name = normalize(name);
    json!({
        "name": name,
        "model": name,
        "modified_at": "2025-01-01T00:00:00Z",
        "size": state.memory_mib(&name) * MIB,
        "digest": digest(&name),
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "llama",
            "families": ["llama"],
            "parameter_size": "8.0B",
            "quantization_level": "Q4_K_M",
        },
    })
}

/// A stable fake sha256-looking digest of `name` (FNV-1a, four seeds).
fn digest(name: &str) -> String {
    let mut out = String::with_capacity(64);
    for seed in 0u64..4 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for b in name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

/// `GET /api/tags`.
pub(crate) async fn tags(State(state): State<Arc<MockState>>, _inc: Incoming) -> Response {
    let models: Vec<Value> = state
        .all_models()
        .iter()
        .map(|m| model_entry(&state, m))
        .collect();
    stream::json_response(200, &json!({"models": models}), &[])
}

/// `GET /api/ps`: the models loaded now (by a request or a load), with their memory.
pub(crate) async fn ps(State(state): State<Arc<MockState>>, _inc: Incoming) -> Response {
    let expires = clock::rfc3339(clock::unix_secs() + 300, 0);
    let models: Vec<Value> = state
        .warm_models()
        .iter()
        .map(|m| {
            let mut entry = model_entry(&state, m);
            if let Some(obj) = entry.as_object_mut() {
                obj.remove("modified_at");
                obj.insert("expires_at".into(), json!(expires));
                obj.insert("size_vram".into(), json!(state.memory_mib(m) * MIB));
                obj.insert(
                    "context_length".into(),
                    json!(state.config.context_window.unwrap_or(4096)),
                );
            }
            entry
        })
        .collect();
    stream::json_response(200, &json!({"models": models}), &[])
}

/// `POST /api/show`: what a model is and can do, in Ollama's shape (`capabilities`,
/// `model_info` with the trained context, Modelfile `parameters`); 404 for a model the
/// mock does not list.
pub(crate) async fn show(State(state): State<Arc<MockState>>, inc: Incoming) -> Response {
    let model = inc
        .body
        .get("model")
        .or(inc.body.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if model.is_empty() {
        return error(400, "model is required");
    }
    if !state.knows_model(model, normalize) {
        return error(404, &format!("model '{model}' not found"));
    }
    let wanted = normalize(model);
    let is = |list: &[String]| list.iter().any(|m| normalize(m) == wanted);
    let mut capabilities = vec!["completion"];
    if !is(&state.config.tool_less_models) {
        capabilities.push("tools");
    }
    if is(&state.config.thinking_models) {
        capabilities.push("thinking");
    }
    let mut parameters = vec!["stop \"<|eot_id|>\"".to_owned()];
    if let Some(window) = state.config.context_window {
        parameters.push(format!("num_ctx {window}"));
    }
    let entry = model_entry(&state, model);
    let body = json!({
        "modelfile": format!("FROM {wanted}\n"),
        "parameters": parameters.join("\n"),
        "template": "{{ .Prompt }}",
        "details": entry["details"],
        "model_info": {
            "general.architecture": "llama",
            "general.parameter_count": 8_030_261_248u64,
            "llama.context_length": 131_072,
        },
        "capabilities": capabilities,
        "modified_at": entry["modified_at"],
    });
    stream::json_response(200, &body, &[])
}

/// `GET /api/version`.
pub(crate) async fn version(_inc: Incoming) -> Response {
    stream::json_response(200, &json!({"version": VERSION}), &[])
}

/// `GET /`: Ollama's liveness answer.
pub(crate) async fn root(_inc: Incoming) -> Response {
    let mut resp = "Ollama is running".into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}
