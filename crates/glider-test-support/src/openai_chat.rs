//! OpenAI Chat Completions (also what vLLM, llama.cpp and Ollama's `/v1` serve):
//! request validation with OpenAI's error shapes, `chat.completion` objects and
//! `chat.completion.chunk` SSE streams ending in `data: [DONE]`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::clock;
use crate::script::{self, Conversation, Reply};
use crate::server::{Ctx, Incoming, Refusal};
use crate::state::MockState;
use crate::stream::{self, Frame, SSE_CONTENT_TYPE};

pub(crate) const PARSE_ERROR: &str = "We could not parse the JSON body of your request. \
(HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API \
expects a JSON payload, but what was sent was not valid JSON. If you have trouble \
figuring out how to fix this, please contact us through our help center at \
help.openai.com.)";

/// An OpenAI-shaped error: `{"error":{"message","type","param","code"}}`.
pub(crate) fn error(
    status: u16,
    message: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Response {
    let (ty, default_code) = match status {
        401 => ("invalid_request_error", Some("invalid_api_key")),
        429 => ("requests", Some("rate_limit_exceeded")),
        500..=599 => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    let body = json!({
        "error": {
            "message": message,
            "type": ty,
            "param": param,
            "code": code.or(default_code),
        }
    });
    stream::json_response(status, &body, &[])
}

pub(crate) fn missing(param: &str) -> Response {
    error(
        400,
        &format!("Missing required parameter: '{param}'."),
        Some(param),
        Some("missing_required_parameter"),
    )
}

pub(crate) fn invalid_type(param: &str, expected: &str, got: &Value) -> Response {
    error(
        400,
        &format!(
            "Invalid type for '{param}': expected {expected}, but got {} instead.",
            kind_phrase(got)
        ),
        Some(param),
        Some("invalid_type"),
    )
}

pub(crate) fn model_not_found(model: &str) -> Response {
    error(
        404,
        &format!("The model `{model}` does not exist or you do not have access to it."),
        Some("model"),
        Some("model_not_found"),
    )
}

/// How OpenAI names a JSON value's type in its error messages.
pub(crate) fn kind_phrase(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn exact(model: &str) -> String {
    model.to_string()
}

/// Text of an OpenAI `content`: a string, or the `text` of each part of an array.
pub(crate) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn non_empty_array(v: Option<&Value>) -> bool {
    v.and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// `GET /v1/models`.
pub(crate) async fn models(State(state): State<Arc<MockState>>, _inc: Incoming) -> Response {
    let data: Vec<Value> = state
        .all_models()
        .into_iter()
        .map(|id| {
            let mut entry = json!({"id": id, "object": "model", "created": 1_700_000_000, "owned_by": "glider-mock"});
            if let Some(window) = state.config.context_window {
                // vLLM's addition to OpenAI's model object.
                entry["max_model_len"] = json!(window);
            }
            entry
        })
        .collect();
    stream::json_response(200, &json!({"object": "list", "data": data}), &[])
}

fn validate(body: &Value) -> Result<Conversation, Refusal> {
    let messages = match body.get("messages") {
        None | Some(Value::Null) => return Err(Box::new(missing("messages"))),
        Some(Value::Array(a)) => a,
        Some(other) => return Err(Box::new(invalid_type("messages", "an array", other))),
    };
    if messages.is_empty() {
        return Err(Box::new(error(
            400,
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            Some("messages"),
            Some("empty_array"),
        )));
    }
    let mut conv = Conversation {
        has_tools: non_empty_array(body.get("tools")) || non_empty_array(body.get("functions")),
        ..Conversation::default()
    };
    let mut answering_calls = false;
    for (i, m) in messages.iter().enumerate() {
        let Some(role) = m.get("role").and_then(Value::as_str) else {
            return Err(Box::new(missing(&format!("messages[{i}].role"))));
        };
        match role {
            "system" | "developer" | "function" => {
                answering_calls = false;
                conv.trailing_tool_results.clear();
            }
            "user" => {
                answering_calls = false;
                conv.last_user_text = content_text(m.get("content"));
                conv.tool_result_after_user = false;
                conv.trailing_tool_results.clear();
            }
            "assistant" => {
                conv.trailing_tool_results.clear();
                answering_calls = false;
                if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                    for (j, call) in calls.iter().enumerate() {
                        if call.get("id").and_then(Value::as_str).is_none() {
                            return Err(Box::new(missing(&format!(
                                "messages[{i}].tool_calls[{j}].id"
                            ))));
                        }
                        let param = format!("messages[{i}].tool_calls[{j}].function.arguments");
                        match call.get("function").and_then(|f| f.get("arguments")) {
                            Some(Value::String(_)) => {}
                            None => return Err(Box::new(missing(&param))),
                            Some(other) => {
                                return Err(Box::new(invalid_type(&param, "a string", other)));
                            }
                        }
                    }
                    answering_calls = !calls.is_empty();
                }
            }
            "tool" => {
                if m.get("tool_call_id").and_then(Value::as_str).is_none() {
                    return Err(Box::new(missing(&format!("messages[{i}].tool_call_id"))));
                }
                if !answering_calls {
                    return Err(Box::new(error(
                        400,
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
                        Some(&format!("messages.[{i}].role")),
                        None,
                    )));
                }
                conv.tool_result_after_user = true;
                conv.trailing_tool_results
                    .push(content_text(m.get("content")));
            }
            other => {
                return Err(Box::new(error(
                    400,
                    &format!(
                        "Invalid value: '{other}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."
                    ),
                    Some(&format!("messages[{i}].role")),
                    Some("invalid_value"),
                )));
            }
        }
    }
    Ok(conv)
}

fn usage(input: u64, reply: &Reply) -> Value {
    let output = reply.output_tokens();
    json!({
        "prompt_tokens": input,
        "completion_tokens": output,
        "total_tokens": input + output,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens()},
    })
}

fn finish_reason(reply: &Reply) -> &'static str {
    if reply.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

pub(crate) async fn handle(ctx: Ctx<'_>) -> Response {
    let Ctx {
        state,
        inc,
        stream,
        close_after,
    } = ctx;
    let body = &inc.body;
    if inc.parse_error.is_some() || !body.is_object() {
        return error(400, PARSE_ERROR, None, None);
    }
    let model = match body.get("model").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => m,
        _ => return error(400, "you must provide a model parameter", None, None),
    };
    let conv = match validate(body) {
        Ok(conv) => conv,
        Err(resp) => return *resp,
    };
    if !state.knows_model(model, exact) {
        return model_not_found(model);
    }
    let thinking = body
        .get("reasoning_effort")
        .and_then(Value::as_str)
        .is_some_and(|e| e != "none");
    let reply = state.plan(&conv, thinking);
    state.mark_warm(model);
    let seq = state.next_id();
    let id = format!("chatcmpl-mock-{seq}");
    let created = clock::unix_secs();
    let input = script::input_tokens(inc.body_len);
    let headers = [("x-request-id", format!("req_mock_{seq}"))];
    let deltas = state.config.deltas;
    if stream {
        let include_usage = body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true);
        let frames = stream_frames(&id, created, model, &reply, input, include_usage, deltas);
        stream::streamed(state, SSE_CONTENT_TYPE, frames, close_after, &headers)
    } else {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert(
            "content".into(),
            if reply.tool_calls.is_empty() {
                json!(reply.text)
            } else {
                Value::Null
            },
        );
        message.insert("refusal".into(), Value::Null);
        if let Some(t) = &reply.thinking {
            message.insert("reasoning_content".into(), json!(t));
        }
        if !reply.tool_calls.is_empty() {
            let calls: Vec<Value> = reply
                .tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.call_id(),
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments_string()},
                    })
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let out = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish_reason(&reply),
            }],
            "usage": usage(input, &reply),
            "system_fingerprint": null,
        });
        let n = script::split(&reply.text, deltas).len();
        stream::complete(state, &out, n, close_after.is_some(), &headers).await
    }
}

fn stream_frames(
    id: &str,
    created: u64,
    model: &str,
    reply: &Reply,
    input: u64,
    include_usage: bool,
    deltas: usize,
) -> Vec<Frame> {
    let chunk = |delta: Value, finish: Option<&str>| -> Value {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage && let Some(obj) = c.as_object_mut() {
            obj.insert("usage".into(), Value::Null);
        }
        c
    };
    let mut frames = vec![Frame::meta(stream::sse(
        None,
        &chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        ),
    ))];
    if let Some(thinking) = &reply.thinking {
        for piece in script::split(thinking, 2) {
            frames.push(Frame::delta(stream::sse(
                None,
                &chunk(json!({"reasoning_content": piece}), None),
            )));
        }
    }
    for piece in script::split(&reply.text, deltas) {
        frames.push(Frame::delta(stream::sse(
            None,
            &chunk(json!({"content": piece}), None),
        )));
    }
    for (i, call) in reply.tool_calls.iter().enumerate() {
        frames.push(Frame::delta(stream::sse(
            None,
            &chunk(
                json!({"tool_calls": [{
                    "index": i,
                    "id": call.call_id(),
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]}),
                None,
            ),
        )));
        let args = call.arguments_string();
        for piece in script::split(&args, 2) {
            frames.push(Frame::delta(stream::sse(
                None,
                &chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                    None,
                ),
            )));
        }
    }
    frames.push(Frame::meta(stream::sse(
        None,
        &chunk(json!({}), Some(finish_reason(reply))),
    )));
    if include_usage {
        frames.push(Frame::meta(stream::sse(
            None,
            &json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": null,
                "choices": [],
                "usage": usage(input, reply),
            }),
        )));
    }
    frames.push(Frame::meta(bytes::Bytes::from_static(b"data: [DONE]\n\n")));
    frames
}
