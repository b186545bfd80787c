//! Anthropic Messages API: header checks (`x-api-key`/`authorization`,
//! `anthropic-version`), request validation with Anthropic's error shapes, `message`
//! objects, the SSE event sequence, and `count_tokens`.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::{Value, json};

use crate::openai_chat::exact;
use crate::script::{self, Conversation, Reply};
use crate::server::{Ctx, Incoming, Refusal};
use crate::state::MockState;
use crate::stream::{self, Frame, SSE_CONTENT_TYPE};

/// The signature every mock thinking block carries.
pub(crate) const SIGNATURE: &str = "mock-signature";

fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// `{"type":"error","error":{"type","message"},"request_id"}` with the type that goes
/// with `status`.
pub(crate) fn error(status: u16, message: &str) -> Response {
    let body = json!({
        "type": "error",
        "error": {"type": error_type(status), "message": message},
        "request_id": "req_mock_error",
    });
    stream::json_response(status, &body, &[("request-id", "req_mock_error".into())])
}

fn invalid(message: &str) -> Response {
    error(400, message)
}

/// Authentication (unless the mock is `anthropic_keyless`) and version headers,
/// checked before the body.
fn check_headers(state: &MockState, inc: &Incoming) -> Result<(), Refusal> {
    let present = |name: &str| inc.header(name).is_some_and(|v| !v.trim().is_empty());
    if !state.config.anthropic_keyless && !present("x-api-key") && !present("authorization") {
        return Err(Box::new(error(401, "x-api-key header is required")));
    }
    if !present("anthropic-version") {
        return Err(Box::new(invalid("anthropic-version: header is required")));
    }
    Ok(())
}

fn check_body(inc: &Incoming) -> Result<&Value, Refusal> {
    if let Some(e) = &inc.parse_error {
        return Err(Box::new(invalid(&format!(
            "There was an error parsing the body: {e}"
        ))));
    }
    if !inc.body.is_object() {
        return Err(Box::new(invalid("Input should be a valid dictionary")));
    }
    Ok(&inc.body)
}

fn block_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Validate `messages` and extract the conversation.
fn validate_messages(body: &Value) -> Result<Conversation, Refusal> {
    let messages = match body.get("messages") {
        None | Some(Value::Null) => return Err(Box::new(invalid("messages: Field required"))),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(Box::new(invalid("messages: Input should be a valid list"))),
    };
    let mut conv = Conversation {
        has_tools: body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty()),
        ..Conversation::default()
    };
    let mut tool_use_ids: HashSet<&str> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r @ ("user" | "assistant" | "system")) => r,
            Some(_) => {
                return Err(Box::new(invalid(&format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant'"
                ))));
            }
            None => {
                return Err(Box::new(invalid(&format!(
                    "messages.{i}.role: Field required"
                ))));
            }
        };
        let content = match m.get("content") {
            None => {
                return Err(Box::new(invalid(&format!(
                    "messages.{i}.content: Field required"
                ))));
            }
            Some(c @ (Value::String(_) | Value::Array(_))) => c,
            Some(_) => {
                return Err(Box::new(invalid(&format!(
                    "messages.{i}.content: Input should be a valid list"
                ))));
            }
        };
        let mut results = Vec::new();
        if let Value::Array(blocks) = content {
            for (j, block) in blocks.iter().enumerate() {
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let Some(id) = block.get("id").and_then(Value::as_str) else {
                            return Err(Box::new(invalid(&format!(
                                "messages.{i}.content.{j}.tool_use.id: Field required"
                            ))));
                        };
                        if !block.get("input").is_some_and(Value::is_object) {
                            return Err(Box::new(invalid(&format!(
                                "messages.{i}.content.{j}.tool_use.input: Input should be a valid dictionary"
                            ))));
                        }
                        tool_use_ids.insert(id);
                    }
                    Some("tool_result") => {
                        let id = block
                            .get("tool_use_id")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        if !tool_use_ids.contains(id) {
                            return Err(Box::new(invalid(&format!(
                                "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                            ))));
                        }
                        results.push(block_text(block.get("content")));
                    }
                    Some(_) => {}
                    None => {
                        return Err(Box::new(invalid(&format!(
                            "messages.{i}.content.{j}.type: Field required"
                        ))));
                    }
                }
            }
        }
        match role {
            "user" if !results.is_empty() => {
                conv.tool_result_after_user = true;
                conv.trailing_tool_results = results;
            }
            "user" => {
                conv.last_user_text = block_text(Some(content));
                conv.tool_result_after_user = false;
                conv.trailing_tool_results.clear();
            }
            // Claude Code sends a `system` message after the user turn; it changes
            // nothing about who spoke last.
            "system" => {}
            _ => conv.trailing_tool_results.clear(),
        }
    }
    Ok(conv)
}

fn usage(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
    })
}

fn stop_reason(reply: &Reply) -> &'static str {
    if reply.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

pub(crate) async fn handle(ctx: Ctx<'_>) -> Response {
    let Ctx {
        state,
        inc,
        stream,
        close_after,
    } = ctx;
    if let Err(resp) = check_headers(state, inc) {
        return *resp;
    }
    let body = match check_body(inc) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let model = match body.get("model") {
        Some(Value::String(m)) => m.as_str(),
        _ => return invalid("model: Field required"),
    };
    match body.get("max_tokens") {
        None => return invalid("max_tokens: Field required"),
        Some(v) if v.as_u64().is_none() => {
            return invalid("max_tokens: Input should be a valid integer");
        }
        Some(_) => {}
    }
    let conv = match validate_messages(body) {
        Ok(c) => c,
        Err(resp) => return *resp,
    };
    if !state.knows_model(model, exact) {
        return error(404, &format!("model: {model}"));
    }
    let thinking = body
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t == "enabled" || t == "adaptive");
    let reply = state.plan(&conv, thinking);
    state.mark_warm(model);
    let seq = state.next_id();
    let id = format!("msg_mock_{seq}");
    let input = script::input_tokens(inc.body_len);
    let headers = [("request-id", format!("req_mock_{seq}"))];
    let deltas = state.config.deltas;
    if stream {
        let frames = stream_frames(&id, model, &reply, input, deltas);
        stream::streamed(state, SSE_CONTENT_TYPE, frames, close_after, &headers)
    } else {
        let mut content = Vec::new();
        if let Some(t) = &reply.thinking {
            content.push(json!({"type": "thinking", "thinking": t, "signature": SIGNATURE}));
        }
        if reply.tool_calls.is_empty() {
            content.push(json!({"type": "text", "text": reply.text}));
        }
        for call in &reply.tool_calls {
            content.push(json!({
                "type": "tool_use",
                "id": call.toolu_id(),
                "name": call.name,
                "input": call.arguments,
            }));
        }
        let out = json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason(&reply),
            "stop_sequence": null,
            "usage": usage(input, reply.output_tokens()),
        });
        let n = script::split(&reply.text, deltas).len();
        stream::complete(state, &out, n, close_after.is_some(), &headers).await
    }
}

fn ev(name: &str, data: Value, delta: bool) -> Frame {
    Frame {
        bytes: stream::sse(Some(name), &data),
        delta,
    }
}

fn stream_frames(id: &str, model: &str, reply: &Reply, input: u64, deltas: usize) -> Vec<Frame> {
    let mut frames = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": usage(input, 1),
            }}),
            false,
        ),
        ev("ping", json!({"type": "ping"}), false),
    ];
    let mut index = 0;
    let start = |index: usize, block: Value| {
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
            false,
        )
    };
    let delta = |index: usize, d: Value, counts: bool| {
        ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": d}),
            counts,
        )
    };
    let stop = |index: usize| {
        ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
            false,
        )
    };
    if let Some(thinking) = &reply.thinking {
        frames.push(start(
            index,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ));
        for piece in script::split(thinking, 2) {
            frames.push(delta(
                index,
                json!({"type": "thinking_delta", "thinking": piece}),
                true,
            ));
        }
        frames.push(delta(
            index,
            json!({"type": "signature_delta", "signature": SIGNATURE}),
            false,
        ));
        frames.push(stop(index));
        index += 1;
    }
    if reply.tool_calls.is_empty() {
        frames.push(start(index, json!({"type": "text", "text": ""})));
        for piece in script::split(&reply.text, deltas) {
            frames.push(delta(
                index,
                json!({"type": "text_delta", "text": piece}),
                true,
            ));
        }
        frames.push(stop(index));
    }
    for call in &reply.tool_calls {
        frames.push(start(
            index,
            json!({"type": "tool_use", "id": call.toolu_id(), "name": call.name, "input": {}}),
        ));
        frames.push(delta(
            index,
            json!({"type": "input_json_delta", "partial_json": ""}),
            false,
        ));
        let args = call.arguments_string();
        for piece in script::split(&args, 2) {
            frames.push(delta(
                index,
                json!({"type": "input_json_delta", "partial_json": piece}),
                true,
            ));
        }
        frames.push(stop(index));
        index += 1;
    }
    frames.push(ev(
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(reply), "stop_sequence": null},
            "usage": {"output_tokens": reply.output_tokens()},
        }),
        false,
    ));
    frames.push(ev("message_stop", json!({"type": "message_stop"}), false));
    frames
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": body bytes / 4}`.
pub(crate) async fn count_tokens(State(state): State<Arc<MockState>>, inc: Incoming) -> Response {
    if let Err(resp) = check_headers(&state, &inc) {
        return *resp;
    }
    let body = match check_body(&inc) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let model = match body.get("model") {
        Some(Value::String(m)) => m.as_str(),
        _ => return invalid("model: Field required"),
    };
    if let Err(resp) = validate_messages(body) {
        return *resp;
    }
    if !state.knows_model(model, exact) {
        return error(404, &format!("model: {model}"));
    }
    stream::json_response(
        200,
        &json!({"input_tokens": script::input_tokens(inc.body_len)}),
        &[],
    )
}
