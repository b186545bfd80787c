//! OpenAI Responses API: `input` item validation, `response` objects, and the full SSE
//! event sequence (created, in_progress, output items, content parts, text / argument /
//! reasoning-summary deltas, completed) with `sequence_number`s.

use std::collections::HashSet;

use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::clock;
use crate::openai_chat::{
    PARSE_ERROR, content_text, error, exact, invalid_type, missing, model_not_found,
};
use crate::script::{self, Conversation, Reply};
use crate::server::{Ctx, Refusal};
use crate::stream::{self, Frame, SSE_CONTENT_TYPE};

fn validate(body: &Value) -> Result<Conversation, Refusal> {
    let mut conv = Conversation {
        has_tools: body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty()),
        ..Conversation::default()
    };
    let items = match body.get("input") {
        None | Some(Value::Null) => return Ok(conv),
        Some(Value::String(s)) => {
            conv.last_user_text = s.clone();
            return Ok(conv);
        }
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(Box::new(invalid_type(
                "input",
                "a string or an array",
                other,
            )));
        }
    };
    let chained = body
        .get("previous_response_id")
        .and_then(Value::as_str)
        .is_some();
    let mut call_ids: HashSet<&str> = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let ty = match item.get("type").and_then(Value::as_str) {
            Some(t) => t,
            None if item.get("role").is_some() => "message",
            None => return Err(Box::new(missing(&format!("input[{i}].type")))),
        };
        match ty {
            "message" => {
                conv.trailing_tool_results.clear();
                match item.get("role").and_then(Value::as_str) {
                    Some("user") => {
                        conv.last_user_text = content_text(item.get("content"));
                        conv.tool_result_after_user = false;
                    }
                    Some("assistant" | "system" | "developer") => {}
                    Some(other) => {
                        return Err(Box::new(error(
                            400,
                            &format!(
                                "Invalid value: '{other}'. Supported values are: 'assistant', 'system', 'developer', and 'user'."
                            ),
                            Some(&format!("input[{i}].role")),
                            Some("invalid_value"),
                        )));
                    }
                    None => return Err(Box::new(missing(&format!("input[{i}].role")))),
                }
            }
            "function_call" | "custom_tool_call" => {
                conv.trailing_tool_results.clear();
                let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
                    return Err(Box::new(missing(&format!("input[{i}].call_id"))));
                };
                if ty == "function_call" {
                    let param = format!("input[{i}].arguments");
                    match item.get("arguments") {
                        Some(Value::String(_)) => {}
                        None => return Err(Box::new(missing(&param))),
                        Some(other) => {
                            return Err(Box::new(invalid_type(&param, "a string", other)));
                        }
                    }
                }
                call_ids.insert(call_id);
            }
            "function_call_output" | "custom_tool_call_output" => {
                let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
                    return Err(Box::new(missing(&format!("input[{i}].call_id"))));
                };
                if !chained && !call_ids.contains(call_id) {
                    return Err(Box::new(error(
                        400,
                        &format!(
                            "No tool call found for function call output with call_id {call_id}."
                        ),
                        Some("input"),
                        None,
                    )));
                }
                conv.tool_result_after_user = true;
                conv.trailing_tool_results
                    .push(content_text(item.get("output")));
            }
            _ => {}
        }
    }
    Ok(conv)
}

fn usage(input: u64, reply: &Reply) -> Value {
    let output = reply.output_tokens();
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens()},
        "total_tokens": input + output,
    })
}

struct Meta<'a> {
    body: &'a Value,
    id: String,
    created: u64,
    model: &'a str,
}

fn response_object(meta: &Meta<'_>, status: &str, output: Vec<Value>, usage: Value) -> Value {
    let b = meta.body;
    let or = |key: &str, default: Value| b.get(key).cloned().unwrap_or(default);
    let reasoning = b.get("reasoning").map_or_else(
        || json!({"effort": null, "summary": null}),
        |r| {
            json!({
                "effort": r.get("effort").cloned().unwrap_or(Value::Null),
                "summary": r.get("summary").cloned().unwrap_or(Value::Null),
            })
        },
    );
    json!({
        "id": meta.id,
        "object": "response",
        "created_at": meta.created,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": or("instructions", Value::Null),
        "max_output_tokens": or("max_output_tokens", Value::Null),
        "model": meta.model,
        "output": output,
        "parallel_tool_calls": or("parallel_tool_calls", json!(true)),
        "previous_response_id": or("previous_response_id", Value::Null),
        "reasoning": reasoning,
        "store": or("store", json!(true)),
        "temperature": or("temperature", json!(1.0)),
        "text": or("text", json!({"format": {"type": "text"}})),
        "tool_choice": or("tool_choice", json!("auto")),
        "tools": or("tools", json!([])),
        "top_p": or("top_p", json!(1.0)),
        "truncation": "disabled",
        "usage": usage,
        "user": null,
        "metadata": or("metadata", json!({})),
    })
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"id": id, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]})
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

fn message_item(id: &str, status: &str, content: Vec<Value>) -> Value {
    json!({"id": id, "type": "message", "status": status, "content": content, "role": "assistant"})
}

fn call_item(call: &script::ToolCall, status: &str, arguments: &str) -> Value {
    json!({
        "id": format!("fc_mock_{}", call.seq),
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call.call_id(),
        "name": call.name,
    })
}

fn output_items(seq: u64, reply: &Reply) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(t) = &reply.thinking {
        out.push(reasoning_item(&format!("rs_mock_{seq}"), t));
    }
    if reply.tool_calls.is_empty() {
        out.push(message_item(
            &format!("msg_mock_{seq}"),
            "completed",
            vec![text_part(&reply.text)],
        ));
    }
    for call in &reply.tool_calls {
        out.push(call_item(call, "completed", &call.arguments_string()));
    }
    out
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
        _ => return missing("model"),
    };
    let conv = match validate(body) {
        Ok(conv) => conv,
        Err(resp) => return *resp,
    };
    if !state.knows_model(model, exact) {
        return model_not_found(model);
    }
    let thinking = body
        .get("reasoning")
        .filter(|r| r.is_object())
        .is_some_and(|r| r.get("effort").and_then(Value::as_str) != Some("none"));
    let reply = state.plan(&conv, thinking);
    state.mark_warm(model);
    let seq = state.next_id();
    let meta = Meta {
        body,
        id: format!("resp_mock_{seq}"),
        created: clock::unix_secs(),
        model,
    };
    let input = script::input_tokens(inc.body_len);
    let headers = [("x-request-id", format!("req_mock_{seq}"))];
    let deltas = state.config.deltas;
    if stream {
        let frames = stream_frames(&meta, seq, &reply, input, deltas);
        stream::streamed(state, SSE_CONTENT_TYPE, frames, close_after, &headers)
    } else {
        let out = response_object(
            &meta,
            "completed",
            output_items(seq, &reply),
            usage(input, &reply),
        );
        let n = script::split(&reply.text, deltas).len();
        stream::complete(state, &out, n, close_after.is_some(), &headers).await
    }
}

struct Events {
    seq: u64,
    frames: Vec<Frame>,
}

impl Events {
    fn push(&mut self, ty: &str, fields: Value, delta: bool) {
        let mut obj = Map::new();
        obj.insert("type".into(), json!(ty));
        if let Value::Object(fields) = fields {
            obj.extend(fields);
        }
        obj.insert("sequence_number".into(), json!(self.seq));
        self.seq += 1;
        let bytes = stream::sse(Some(ty), &Value::Object(obj));
        self.frames.push(Frame { bytes, delta });
    }
}

fn stream_frames(
    meta: &Meta<'_>,
    seq: u64,
    reply: &Reply,
    input: u64,
    deltas: usize,
) -> Vec<Frame> {
    let mut ev = Events {
        seq: 0,
        frames: Vec::new(),
    };
    let pending = response_object(meta, "in_progress", Vec::new(), Value::Null);
    ev.push("response.created", json!({"response": pending}), false);
    ev.push("response.in_progress", json!({"response": pending}), false);
    let mut index = 0;
    if let Some(thinking) = &reply.thinking {
        let id = format!("rs_mock_{seq}");
        ev.push(
            "response.output_item.added",
            json!({"output_index": index, "item": {"id": id, "type": "reasoning", "summary": []}}),
            false,
        );
        ev.push(
            "response.reasoning_summary_part.added",
            json!({"item_id": id, "output_index": index, "summary_index": 0,
                   "part": {"type": "summary_text", "text": ""}}),
            false,
        );
        for piece in script::split(thinking, 2) {
            ev.push(
                "response.reasoning_summary_text.delta",
                json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": piece}),
                true,
            );
        }
        ev.push(
            "response.reasoning_summary_text.done",
            json!({"item_id": id, "output_index": index, "summary_index": 0, "text": thinking}),
            false,
        );
        ev.push(
            "response.reasoning_summary_part.done",
            json!({"item_id": id, "output_index": index, "summary_index": 0,
                   "part": {"type": "summary_text", "text": thinking}}),
            false,
        );
        ev.push(
            "response.output_item.done",
            json!({"output_index": index, "item": reasoning_item(&id, thinking)}),
            false,
        );
        index += 1;
    }
    if reply.tool_calls.is_empty() {
        let id = format!("msg_mock_{seq}");
        ev.push(
            "response.output_item.added",
            json!({"output_index": index, "item": message_item(&id, "in_progress", Vec::new())}),
            false,
        );
        ev.push(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part("")}),
            false,
        );
        for piece in script::split(&reply.text, deltas) {
            ev.push(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "delta": piece, "logprobs": []}),
                true,
            );
        }
        ev.push(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0,
                   "text": reply.text, "logprobs": []}),
            false,
        );
        ev.push(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0,
                   "part": text_part(&reply.text)}),
            false,
        );
        ev.push(
            "response.output_item.done",
            json!({"output_index": index,
                   "item": message_item(&id, "completed", vec![text_part(&reply.text)])}),
            false,
        );
    }
    for call in &reply.tool_calls {
        let id = format!("fc_mock_{}", call.seq);
        let args = call.arguments_string();
        ev.push(
            "response.output_item.added",
            json!({"output_index": index, "item": call_item(call, "in_progress", "")}),
            false,
        );
        for piece in script::split(&args, 2) {
            ev.push(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": piece}),
                true,
            );
        }
        ev.push(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "name": call.name, "arguments": args}),
            false,
        );
        ev.push(
            "response.output_item.done",
            json!({"output_index": index, "item": call_item(call, "completed", &args)}),
            false,
        );
        index += 1;
    }
    let done = response_object(
        meta,
        "completed",
        output_items(seq, reply),
        usage(input, reply),
    );
    ev.push("response.completed", json!({"response": done}), false);
    ev.frames
}
