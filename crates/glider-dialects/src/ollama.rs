//! Ollama native chat codec (`POST /api/chat`): requests (string content, base64
//! `images`, `thinking`, object tool arguments, `tool_name`, `options`, `format`, `think`),
//! replies, NDJSON streams (one JSON object a line, the last with `done: true`) and
//! `{"error":"..."}` bodies, to and from ngl.
//!
//! Mapping notes (lossy or defaulted):
//! - Ollama content is one string: text parts are joined with `"\n"`; URL images cannot
//!   be sent (Ollama takes base64 only) and are dropped; base64 images go to `images`
//!   (their media type is sniffed from the data on decode, `image/png` when unknown).
//! - Tool arguments are always a JSON object: a string that parses to an object is sent
//!   parsed; any other non-object (e.g. non-JSON text kept by ngl) is sent as `{}`.
//! - Ollama has no tool-call ids before v0.12: decoding uses the call's `id` when present,
//!   else synthesizes `call_{message}_{n}` (requests) or `call_{stamp}_{n}` (replies and
//!   streams, `stamp` = digits of `created_at`). Tool results link to calls by
//!   `tool_call_id` when given, else by `tool_name`, else by order. Encoding sends `id`,
//!   `tool_call_id` (ignored by older servers) and `tool_name` (from `ToolResult.name`,
//!   else the name of the matching earlier call). Consecutive tool messages form one
//!   `Role::Tool` turn. `is_error` is dropped.
//! - `tool_choice` and `parallel_tool_calls` have no Ollama field: `none` is honoured by
//!   not sending tools, the rest is dropped. Native (non-function) tools are dropped.
//! - `think: true` is sent only when `Request.thinking` is set (effort and budget are not
//!   sent); decoding maps `think: "low"|"medium"|"high"` to an effort and keeps an explicit
//!   `think: false` in `extra`. A `format` of `"json"` <-> schema `{"type":"object"}`.
//! - `options`: `num_predict`, `temperature`, `top_p`, `top_k`, `seed`, `stop` are modelled
//!   (`num_predict < 0` = unlimited = unset); other options stay in `extra.options`.
//! - `stream` defaults to `true` as in Ollama. `prompt_eval_count` is the whole prompt
//!   (ngl input + cache read + cache write on encode, all `input_tokens` on decode);
//!   the reply's durations are encoded as 0. `done_reason` `length` <-> MaxTokens, every
//!   other stop reason encodes as `stop`; tool calls in a reply mean ToolUse.

use std::time::{SystemTime, UNIX_EPOCH};

use glider_ngl::stream::{PartKind, parse_arguments};
use glider_ngl::{
    ApiError, Dialect, DialectExtra, ImageSource, OutputSchema, Part, Request, Response, Role,
    StopReason, StreamEvent, ThinkingConfig, ToolChoice, Turn, Usage,
};
use serde_json::{Map, Value, json};

use crate::framing::LineSplitter;
use crate::openai_chat::{
    backend_error, bad_gateway, decode_tools, encode_tools, error_fields, expect_object,
    image_source, invalid_at, join_path, model_and_messages, take, take_bool, take_i64,
    take_number, take_stop, take_string, take_top_k,
};
use crate::{Codec, StreamDecoder, StreamEncoder};

/// The Ollama native chat codec.
pub struct Ollama;

// ---------------------------------------------------------------------------------------
// Small helpers.
// ---------------------------------------------------------------------------------------

/// The current time as RFC 3339 UTC with microseconds, as Ollama writes `created_at`.
fn rfc3339_now() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs(), now.subsec_micros())
}

fn rfc3339(secs: u64, micros: u32) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The digits of a `created_at` timestamp (a deterministic, usually unique stamp).
fn stamp_of(created_at: &str) -> String {
    created_at.chars().filter(char::is_ascii_digit).collect()
}

/// A synthesized tool call id for the `n`th call of a reply stamped `stamp`.
fn reply_call_id(stamp: &str, n: usize) -> String {
    if stamp.is_empty() {
        format!("call_{n}")
    } else {
        format!("call_{stamp}_{n}")
    }
}

/// A response id: Ollama has none, so one is made from `created_at`.
fn response_id(created_at: &str) -> String {
    let stamp = stamp_of(created_at);
    if stamp.is_empty() {
        "ollama".to_owned()
    } else {
        format!("ollama-{stamp}")
    }
}

/// Media type from the first bytes of base64 image data.
fn sniff_media_type(data: &str) -> &'static str {
    if data.starts_with("/9j/") {
        "image/jpeg"
    } else if data.starts_with("R0lGOD") {
        "image/gif"
    } else if data.starts_with("UklGR") {
        "image/webp"
    } else {
        "image/png"
    }
}

/// Tool arguments as the JSON object Ollama requires.
fn arguments_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(parsed @ Value::Object(_)) => parsed,
            _ => Value::Object(Map::new()),
        },
        _ => Value::Object(Map::new()),
    }
}

/// Text parts joined with newlines; base64 images; thinking text.
fn flatten(parts: &[Part]) -> (String, Vec<Value>, String) {
    let mut text = String::new();
    let mut has_text = false;
    let mut images = Vec::new();
    let mut thinking = String::new();
    for part in parts {
        match part {
            Part::Text { text: t, .. } => {
                if has_text {
                    text.push('\n');
                }
                text.push_str(t);
                has_text = true;
            }
            Part::Image {
                source: ImageSource::Base64 { data, .. },
                ..
            } => images.push(Value::String(data.clone())),
            Part::Thinking { text: t, .. } => thinking.push_str(t),
            _ => {}
        }
    }
    (text, images, thinking)
}

// ---------------------------------------------------------------------------------------
// Request decoding.
// ---------------------------------------------------------------------------------------

fn decode_request(body: &[u8]) -> Result<Request, ApiError> {
    let (mut obj, model, messages) = model_and_messages(body)?;
    let mut req = Request {
        model,
        turns: decode_messages(messages)?,
        ..Request::default()
    };
    if let Some(tools) = take(&mut obj, "tools") {
        req.tools = decode_tools(tools, "tools", Dialect::Ollama)?;
    }
    req.stream = take_bool(&mut obj, "stream", "")?.unwrap_or(true);
    match take(&mut obj, "format") {
        None => {}
        Some(Value::String(format)) if format.is_empty() => {}
        Some(Value::String(format)) if format == "json" => {
            req.output_schema = Some(OutputSchema {
                name: None,
                schema: json!({"type": "object"}),
            });
        }
        Some(schema @ Value::Object(_)) => {
            req.output_schema = Some(OutputSchema { name: None, schema });
        }
        Some(_) => {
            return Err(invalid_at(
                "format",
                "expected \"json\" or a JSON schema object",
            ));
        }
    }
    if let Some(options) = take(&mut obj, "options") {
        let mut options = expect_object(options, "options")?;
        req.max_tokens =
            take_i64(&mut options, "num_predict", "options")?.and_then(|n| u32::try_from(n).ok());
        req.temperature = take_number(&mut options, "temperature", "options")?;
        req.top_p = take_number(&mut options, "top_p", "options")?;
        req.top_k = take_top_k(&mut options, "top_k", "options")?;
        req.seed = take_i64(&mut options, "seed", "options")?;
        req.stop = take_stop(&mut options, "stop", "options")?;
        if !options.is_empty() {
            obj.insert("options".into(), Value::Object(options));
        }
    }
    match take(&mut obj, "think") {
        None => {}
        Some(Value::Bool(true)) => req.thinking = Some(ThinkingConfig::default()),
        Some(Value::Bool(false)) => {
            obj.insert("think".into(), Value::Bool(false));
        }
        Some(Value::String(effort)) if matches!(effort.as_str(), "low" | "medium" | "high") => {
            req.thinking = Some(ThinkingConfig {
                budget_tokens: None,
                effort: Some(effort),
            });
        }
        Some(_) => {
            return Err(invalid_at(
                "think",
                "expected a boolean or \"low\", \"medium\", \"high\"",
            ));
        }
    }
    if !obj.is_empty() {
        req.extra = Some(DialectExtra {
            dialect: Dialect::Ollama,
            fields: obj,
        });
    }
    Ok(req)
}

fn decode_images(m: &mut Map<String, Value>, path: &str) -> Result<Vec<Part>, ApiError> {
    let ipath = join_path(path, "images");
    let Some(images) = take(m, "images") else {
        return Ok(Vec::new());
    };
    let Value::Array(images) = images else {
        return Err(invalid_at(&ipath, "expected an array of base64 strings"));
    };
    images
        .into_iter()
        .enumerate()
        .map(|(i, image)| match image {
            Value::String(data) if data.starts_with("data:") => Ok(Part::Image {
                source: image_source(data),
                cache_control: None,
            }),
            Value::String(data) => Ok(Part::Image {
                source: ImageSource::Base64 {
                    media_type: sniff_media_type(&data).to_owned(),
                    data,
                },
                cache_control: None,
            }),
            _ => Err(invalid_at(
                &format!("{ipath}.{i}"),
                "expected a base64 string",
            )),
        })
        .collect()
}

fn decode_messages(messages: Vec<Value>) -> Result<Vec<Turn>, ApiError> {
    let mut turns: Vec<Turn> = Vec::with_capacity(messages.len());
    // Calls of the latest assistant message not yet answered: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    for (i, message) in messages.into_iter().enumerate() {
        let path = format!("messages.{i}");
        let mut m = expect_object(message, &path)?;
        let role = take_string(&mut m, "role", &path)?
            .ok_or_else(|| invalid_at(&join_path(&path, "role"), "required"))?;
        let content = match take(&mut m, "content") {
            None => None,
            Some(Value::String(text)) => Some(text),
            Some(_) => {
                return Err(invalid_at(
                    &join_path(&path, "content"),
                    "expected a string (Ollama content is plain text)",
                ));
            }
        };
        let images = decode_images(&mut m, &path)?;
        match role.as_str() {
            "system" | "user" => {
                let mut parts: Vec<Part> = content.map(Part::text).into_iter().collect();
                parts.extend(images);
                let role = if role == "system" {
                    Role::System
                } else {
                    Role::User
                };
                turns.push(Turn { role, parts });
            }
            "assistant" => {
                let mut parts = Vec::new();
                if let Some(text) =
                    take_string(&mut m, "thinking", &path)?.filter(|t| !t.is_empty())
                {
                    parts.push(Part::Thinking {
                        text,
                        signature: None,
                        redacted: None,
                    });
                }
                if let Some(text) = content.filter(|t| !t.is_empty()) {
                    parts.push(Part::text(text));
                }
                let calls = decode_request_tool_calls(&mut m, &path, i)?;
                if !calls.is_empty() {
                    pending.clear();
                }
                for part in calls {
                    if let Part::ToolCall { id, name, .. } = &part {
                        pending.push((id.clone(), name.clone()));
                    }
                    parts.push(part);
                }
                turns.push(Turn {
                    role: Role::Assistant,
                    parts,
                });
            }
            "tool" => {
                let call_id = take_string(&mut m, "tool_call_id", &path)?;
                let tool_name = match take_string(&mut m, "tool_name", &path)? {
                    Some(name) => Some(name),
                    None => take_string(&mut m, "name", &path)?,
                };
                let position = match (&call_id, &tool_name) {
                    (Some(id), _) => pending.iter().position(|(p, _)| p == id),
                    (None, Some(name)) => pending.iter().position(|(_, n)| n == name),
                    (None, None) => (!pending.is_empty()).then_some(0),
                };
                let linked = position.map(|p| pending.remove(p));
                let (call_id, name) = match (call_id, linked) {
                    (Some(id), linked) => (id, tool_name.or(linked.map(|(_, n)| n))),
                    (None, Some((id, name))) => (id, tool_name.or(Some(name))),
                    (None, None) => (format!("call_{i}"), tool_name),
                };
                let mut content: Vec<Part> = content.map(Part::text).into_iter().collect();
                content.extend(images);
                let result = Part::ToolResult {
                    call_id,
                    name,
                    content,
                    is_error: false,
                };
                glider_ngl::push_tool_result(&mut turns, result);
            }
            other => {
                return Err(invalid_at(
                    &join_path(&path, "role"),
                    &format!("unsupported role '{other}'"),
                ));
            }
        }
    }
    Ok(turns)
}

fn decode_request_tool_calls(
    m: &mut Map<String, Value>,
    path: &str,
    message: usize,
) -> Result<Vec<Part>, ApiError> {
    let cpath = join_path(path, "tool_calls");
    let Some(calls) = take(m, "tool_calls") else {
        return Ok(Vec::new());
    };
    let Value::Array(calls) = calls else {
        return Err(invalid_at(&cpath, "expected an array"));
    };
    let mut parts = Vec::with_capacity(calls.len());
    for (n, call) in calls.into_iter().enumerate() {
        let here = format!("{cpath}.{n}");
        let mut call = expect_object(call, &here)?;
        let id = take_string(&mut call, "id", &here)?;
        let fpath = join_path(&here, "function");
        let mut function = match take(&mut call, "function") {
            Some(f) => expect_object(f, &fpath)?,
            None => return Err(invalid_at(&fpath, "required")),
        };
        let name = take_string(&mut function, "name", &fpath)?
            .ok_or_else(|| invalid_at(&join_path(&fpath, "name"), "required"))?;
        let arguments = match take(&mut function, "arguments") {
            None => Value::Object(Map::new()),
            Some(object @ Value::Object(_)) => object,
            Some(Value::String(text)) => parse_arguments(&text),
            Some(_) => {
                return Err(invalid_at(
                    &join_path(&fpath, "arguments"),
                    "expected an object",
                ));
            }
        };
        parts.push(Part::ToolCall {
            id: id.unwrap_or_else(|| format!("call_{message}_{n}")),
            name,
            arguments,
        });
    }
    Ok(parts)
}

// ---------------------------------------------------------------------------------------
// Request encoding.
// ---------------------------------------------------------------------------------------

/// The name of the call `call_id` in `turns` (the latest match wins).
fn call_name(turns: &[Turn], call_id: &str) -> Option<String> {
    turns.iter().rev().find_map(|turn| {
        turn.parts.iter().find_map(|part| match part {
            Part::ToolCall { id, name, .. } if id == call_id => Some(name.clone()),
            _ => None,
        })
    })
}

fn tool_call_value(id: &str, name: &str, arguments: &Value, index: Option<usize>) -> Value {
    let mut function = Map::new();
    if let Some(index) = index {
        function.insert("index".into(), json!(index));
    }
    function.insert("name".into(), Value::String(name.to_owned()));
    function.insert("arguments".into(), arguments_object(arguments));
    json!({"id": id, "function": function})
}

fn encode_messages(turns: &[Turn]) -> Vec<Value> {
    let mut messages = Vec::with_capacity(turns.len());
    for (t, turn) in turns.iter().enumerate() {
        match turn.role {
            Role::System | Role::User => {
                let (text, images, _) = flatten(&turn.parts);
                let role = if turn.role == Role::System {
                    "system"
                } else {
                    "user"
                };
                let mut message = json!({"role": role, "content": text});
                if !images.is_empty() {
                    message["images"] = Value::Array(images);
                }
                messages.push(message);
            }
            Role::Assistant => {
                let (text, _, thinking) = flatten(&turn.parts);
                let mut message = json!({"role": "assistant", "content": text});
                if !thinking.is_empty() {
                    message["thinking"] = Value::String(thinking);
                }
                let calls: Vec<Value> = turn
                    .parts
                    .iter()
                    .filter_map(|part| match part {
                        Part::ToolCall {
                            id,
                            name,
                            arguments,
                        } => Some(tool_call_value(id, name, arguments, None)),
                        _ => None,
                    })
                    .collect();
                if !calls.is_empty() {
                    message["tool_calls"] = Value::Array(calls);
                }
                messages.push(message);
            }
            Role::Tool => {
                for part in &turn.parts {
                    match part {
                        Part::ToolResult {
                            call_id,
                            name,
                            content,
                            ..
                        } => {
                            let (text, images, _) = flatten(content);
                            let mut message = json!({"role": "tool", "content": text});
                            let name = name.clone().or_else(|| call_name(&turns[..t], call_id));
                            if let Some(name) = name {
                                message["tool_name"] = Value::String(name);
                            }
                            message["tool_call_id"] = Value::String(call_id.clone());
                            if !images.is_empty() {
                                message["images"] = Value::Array(images);
                            }
                            messages.push(message);
                        }
                        Part::Text { text, .. } => {
                            messages.push(json!({"role": "user", "content": text}));
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    messages
}

fn encode_request(req: &Request) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(req.model.clone()));
    body.insert("messages".into(), Value::Array(encode_messages(&req.turns)));
    if req.tool_choice != Some(ToolChoice::None) {
        let tools = encode_tools(&req.tools, Dialect::Ollama);
        if !tools.is_empty() {
            body.insert("tools".into(), Value::Array(tools));
        }
    }
    body.insert("stream".into(), Value::Bool(req.stream));
    if let Some(schema) = &req.output_schema {
        let format = if schema.schema == json!({"type": "object"}) {
            json!("json")
        } else {
            schema.schema.clone()
        };
        body.insert("format".into(), format);
    }
    let mut options = Map::new();
    if let Some(max) = req.max_tokens {
        options.insert("num_predict".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        options.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        options.insert("top_p".into(), json!(p));
    }
    if let Some(k) = req.top_k {
        options.insert("top_k".into(), json!(k));
    }
    if let Some(seed) = req.seed {
        options.insert("seed".into(), json!(seed));
    }
    if !req.stop.is_empty() {
        options.insert("stop".into(), json!(req.stop));
    }
    let extra = req.extra_for(Dialect::Ollama);
    if let Some(Value::Object(more)) = extra.and_then(|e| e.get("options")) {
        for (key, value) in more {
            options.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    if !options.is_empty() {
        body.insert("options".into(), Value::Object(options));
    }
    if req.thinking.is_some() {
        body.insert("think".into(), Value::Bool(true));
    }
    if let Some(extra) = extra {
        for (key, value) in extra {
            body.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    Value::Object(body)
}

// ---------------------------------------------------------------------------------------
// Responses.
// ---------------------------------------------------------------------------------------

fn count(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn decode_stop(done_reason: Option<&str>, tool_calls: bool) -> StopReason {
    if tool_calls {
        StopReason::ToolUse
    } else if done_reason == Some("length") {
        StopReason::MaxTokens
    } else {
        StopReason::EndTurn
    }
}

fn encode_stop(reason: StopReason) -> &'static str {
    match reason {
        StopReason::MaxTokens => "length",
        _ => "stop",
    }
}

/// Tool calls of a reply message (`stamp` makes synthesized ids).
fn decode_reply_calls(message: &Value, stamp: &str, first: usize) -> Result<Vec<Part>, ApiError> {
    let Some(calls) = message.get("tool_calls").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let function = call.get("function").ok_or_else(|| {
                bad_gateway(format!("backend reply: tool_calls.{i}.function missing"))
            })?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad_gateway(format!("backend reply: tool_calls.{i} has no name")))?;
            let arguments = match function.get("arguments") {
                Some(object @ Value::Object(_)) => object.clone(),
                Some(Value::String(text)) => parse_arguments(text),
                _ => Value::Object(Map::new()),
            };
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map_or_else(|| reply_call_id(stamp, first + i), str::to_owned);
            Ok(Part::ToolCall {
                id,
                name: name.to_owned(),
                arguments,
            })
        })
        .collect()
}

fn decode_response(body: &[u8]) -> Result<Response, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| bad_gateway(format!("backend reply is not valid JSON: {e}")))?;
    if value.get("error").is_some_and(|e| !e.is_null()) {
        let (message, _) = error_fields(&value);
        return Err(bad_gateway(
            message.unwrap_or_else(|| "backend reply is an error".to_owned()),
        ));
    }
    let message = value
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| bad_gateway("backend reply has no message"))?;
    let created_at = value
        .get("created_at")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut parts = Vec::new();
    if let Some(text) = message
        .get("thinking")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        parts.push(Part::Thinking {
            text: text.to_owned(),
            signature: None,
            redacted: None,
        });
    }
    if let Some(text) = message
        .get("content")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        parts.push(Part::text(text));
    }
    let calls = decode_reply_calls(message, &stamp_of(created_at), 0)?;
    let stop_reason = decode_stop(
        value.get("done_reason").and_then(Value::as_str),
        !calls.is_empty(),
    );
    parts.extend(calls);
    Ok(Response {
        id: response_id(created_at),
        model: value
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        parts,
        stop_reason,
        usage: Usage {
            input_tokens: count(&value, "prompt_eval_count"),
            output_tokens: count(&value, "eval_count"),
            ..Usage::default()
        },
    })
}

/// The closing fields of a reply: `done_reason`, `done`, durations and counts.
fn final_fields(body: &mut Map<String, Value>, stop_reason: StopReason, usage: &Usage) {
    let prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
    body.insert("done_reason".into(), json!(encode_stop(stop_reason)));
    body.insert("done".into(), json!(true));
    body.insert("total_duration".into(), json!(0));
    body.insert("load_duration".into(), json!(0));
    body.insert("prompt_eval_count".into(), json!(prompt));
    body.insert("prompt_eval_duration".into(), json!(0));
    body.insert("eval_count".into(), json!(usage.output_tokens));
    body.insert("eval_duration".into(), json!(0));
}

fn encode_response(resp: &Response) -> Value {
    let (text, _, thinking) = flatten(&resp.parts);
    let mut message = json!({"role": "assistant", "content": text});
    if !thinking.is_empty() {
        message["thinking"] = Value::String(thinking);
    }
    let calls: Vec<Value> = resp
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some((id, name, arguments)),
            _ => None,
        })
        .enumerate()
        .map(|(n, (id, name, arguments))| tool_call_value(id, name, arguments, Some(n)))
        .collect();
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(resp.model));
    body.insert("created_at".into(), json!(rfc3339_now()));
    body.insert("message".into(), message);
    final_fields(&mut body, resp.stop_reason, &resp.usage);
    Value::Object(body)
}

// ---------------------------------------------------------------------------------------
// Stream decoding.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenKind {
    Text,
    Thinking,
}

#[derive(Debug, Default)]
struct OllamaStreamDecoder {
    lines: LineSplitter,
    started: bool,
    ended: bool,
    open: Option<(usize, OpenKind)>,
    next_index: usize,
    stamp: String,
    tool_calls: usize,
}

impl OllamaStreamDecoder {
    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some((index, _)) = self.open.take() {
            out.push(StreamEvent::PartStop { index });
        }
    }

    fn start_part(&mut self, kind: PartKind, out: &mut Vec<StreamEvent>) -> usize {
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        out.push(StreamEvent::PartStart { index, kind });
        index
    }

    fn ensure(&mut self, kind: OpenKind, out: &mut Vec<StreamEvent>) -> usize {
        if let Some((index, open)) = self.open
            && open == kind
        {
            return index;
        }
        let part = match kind {
            OpenKind::Text => PartKind::Text,
            OpenKind::Thinking => PartKind::Thinking,
        };
        let index = self.start_part(part, out);
        self.open = Some((index, kind));
        index
    }

    fn line(&mut self, line: &str, out: &mut Vec<StreamEvent>) -> Result<(), ApiError> {
        let chunk: Value = serde_json::from_str(line)
            .map_err(|e| bad_gateway(format!("malformed backend stream line: {e}")))?;
        if !chunk.is_object() {
            return Err(bad_gateway("malformed backend stream line: not an object"));
        }
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            let (message, _) = error_fields(&chunk);
            out.push(StreamEvent::Error {
                error: bad_gateway(message.unwrap_or_else(|| "backend stream error".to_owned())),
            });
            self.ended = true;
            return Ok(());
        }
        if !self.started {
            self.started = true;
            let created_at = chunk
                .get("created_at")
                .and_then(Value::as_str)
                .unwrap_or_default();
            self.stamp = stamp_of(created_at);
            out.push(StreamEvent::Start {
                id: response_id(created_at),
                model: chunk
                    .get("model")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                usage: Usage::default(),
            });
        }
        if let Some(message) = chunk.get("message") {
            if let Some(text) = message
                .get("thinking")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                let index = self.ensure(OpenKind::Thinking, out);
                out.push(StreamEvent::ThinkingDelta {
                    index,
                    text: text.to_owned(),
                });
            }
            if let Some(text) = message
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                let index = self.ensure(OpenKind::Text, out);
                out.push(StreamEvent::TextDelta {
                    index,
                    text: text.to_owned(),
                });
            }
            for call in decode_reply_calls(message, &self.stamp, self.tool_calls)? {
                let Part::ToolCall {
                    id,
                    name,
                    arguments,
                } = call
                else {
                    continue;
                };
                let index = self.start_part(PartKind::ToolCall { id, name }, out);
                out.push(StreamEvent::ToolArgsDelta {
                    index,
                    json: glider_ngl::stream::arguments_text(&arguments),
                });
                out.push(StreamEvent::PartStop { index });
                self.tool_calls += 1;
            }
        }
        if chunk.get("done").and_then(Value::as_bool) == Some(true) {
            self.close(out);
            out.push(StreamEvent::Finish {
                stop_reason: decode_stop(
                    chunk.get("done_reason").and_then(Value::as_str),
                    self.tool_calls > 0,
                ),
                usage: Usage {
                    input_tokens: count(&chunk, "prompt_eval_count"),
                    output_tokens: count(&chunk, "eval_count"),
                    ..Usage::default()
                },
            });
            self.ended = true;
        }
        Ok(())
    }
}

impl StreamDecoder for OllamaStreamDecoder {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ApiError> {
        let mut out = Vec::new();
        for line in self.lines.feed(bytes) {
            if self.ended {
                break;
            }
            self.line(&line, &mut out)?;
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if let Some(line) = self.lines.finish()
            && !self.ended
            && let Err(error) = self.line(&line, &mut out)
        {
            out.push(StreamEvent::Error { error });
            self.ended = true;
        }
        if !self.ended {
            out.push(StreamEvent::Error {
                error: bad_gateway("backend stream ended before the reply was done"),
            });
            self.ended = true;
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Stream encoding.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct OllamaStreamEncoder {
    model: String,
    created_at: String,
    ended: bool,
    /// The tool call being streamed: (id, name, argument text so far).
    pending: Option<(String, String, String)>,
    tool_calls: usize,
    start_usage: Usage,
}

impl OllamaStreamEncoder {
    fn write(&mut self, out: &mut Vec<u8>, body: Map<String, Value>) {
        out.extend_from_slice(Value::Object(body).to_string().as_bytes());
        out.push(b'\n');
    }

    fn head(&mut self, message: Value) -> Map<String, Value> {
        if self.created_at.is_empty() {
            self.created_at = rfc3339_now();
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("created_at".into(), json!(self.created_at));
        body.insert("message".into(), message);
        body
    }

    fn chunk(&mut self, out: &mut Vec<u8>, message: Value) {
        let mut body = self.head(message);
        body.insert("done".into(), json!(false));
        self.write(out, body);
    }
}

impl StreamEncoder for OllamaStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        match event {
            StreamEvent::Start { model, usage, .. } => {
                self.model = model.clone();
                self.created_at = rfc3339_now();
                self.start_usage = *usage;
            }
            StreamEvent::PartStart {
                kind: PartKind::ToolCall { id, name },
                ..
            } => self.pending = Some((id.clone(), name.clone(), String::new())),
            StreamEvent::PartStart { .. } => self.pending = None,
            StreamEvent::TextDelta { text, .. } if !text.is_empty() => {
                self.chunk(out, json!({"role": "assistant", "content": text}));
            }
            StreamEvent::ThinkingDelta { text, .. } if !text.is_empty() => {
                self.chunk(
                    out,
                    json!({"role": "assistant", "content": "", "thinking": text}),
                );
            }
            StreamEvent::ToolArgsDelta { json: args, .. } => {
                if let Some((_, _, buffer)) = &mut self.pending {
                    buffer.push_str(args);
                }
            }
            StreamEvent::PartStop { .. } => {
                if let Some((id, name, args)) = self.pending.take() {
                    let call =
                        tool_call_value(&id, &name, &parse_arguments(&args), Some(self.tool_calls));
                    self.tool_calls += 1;
                    self.chunk(
                        out,
                        json!({"role": "assistant", "content": "", "tool_calls": [call]}),
                    );
                }
            }
            StreamEvent::Finish { stop_reason, usage } => {
                let mut total = self.start_usage;
                total.merge(usage);
                let mut body = self.head(json!({"role": "assistant", "content": ""}));
                final_fields(&mut body, *stop_reason, &total);
                self.write(out, body);
                self.ended = true;
            }
            StreamEvent::Error { error } => {
                let mut body = Map::new();
                body.insert("error".into(), json!(error.message));
                self.write(out, body);
                self.ended = true;
            }
            StreamEvent::TextDelta { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::ThinkingSignature { .. } => {}
        }
    }
}

// ---------------------------------------------------------------------------------------
// The codec.
// ---------------------------------------------------------------------------------------

impl Codec for Ollama {
    fn dialect(&self) -> Dialect {
        Dialect::Ollama
    }

    fn decode_request(&self, body: &[u8]) -> Result<Request, ApiError> {
        decode_request(body)
    }

    fn encode_request(&self, req: &Request) -> Value {
        encode_request(req)
    }

    fn decode_response(&self, body: &[u8]) -> Result<Response, ApiError> {
        decode_response(body)
    }

    fn encode_response(&self, resp: &Response) -> Value {
        encode_response(resp)
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(OllamaStreamDecoder::default())
    }

    fn stream_encoder(&self) -> Box<dyn StreamEncoder> {
        Box::new(OllamaStreamEncoder::default())
    }

    fn stream_content_type(&self) -> &'static str {
        "application/x-ndjson"
    }

    fn encode_error(&self, err: &ApiError) -> Value {
        json!({"error": err.message})
    }

    fn decode_error(&self, status: u16, body: &[u8]) -> ApiError {
        backend_error(status, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai_chat::tests::{decode_every_split, encode_stream};
    use glider_ngl::stream::events_of;
    use glider_ngl::{ErrorKind, NativeTool, ResponseBuilder, ToolDef};

    fn decode(body: Value) -> Result<Request, ApiError> {
        Ollama.decode_request(body.to_string().as_bytes())
    }

    fn call(id: &str, name: &str, arguments: Value) -> Part {
        Part::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }

    fn backend_request() -> Request {
        Request {
            model: "qwen3:8b".into(),
            turns: vec![
                Turn::text(Role::System, "You are a coding agent."),
                Turn {
                    role: Role::User,
                    parts: vec![
                        Part::text("Fix the bug."),
                        Part::text("Here is a screenshot:"),
                        Part::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/png".into(),
                                data: "iVBORw0KGgoAAA".into(),
                            },
                            cache_control: None,
                        },
                        Part::Image {
                            source: ImageSource::Url {
                                url: "https://example.com/x.png".into(),
                            },
                            cache_control: None,
                        },
                    ],
                },
                Turn {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Thinking {
                            text: "Read first.".into(),
                            signature: Some("sig".into()),
                            redacted: None,
                        },
                        Part::text("Reading."),
                        call("toolu_1", "read_file", json!({"path": "src/lib.rs"})),
                        call("toolu_2", "bash", json!("{\"cmd\": \"ls\"}")),
                        call("toolu_3", "bash", json!("not json at all")),
                    ],
                },
                Turn {
                    role: Role::Tool,
                    parts: vec![
                        Part::ToolResult {
                            call_id: "toolu_1".into(),
                            name: None,
                            content: vec![Part::text("pub fn f() {}")],
                            is_error: false,
                        },
                        Part::ToolResult {
                            call_id: "toolu_2".into(),
                            name: Some("bash".into()),
                            content: vec![Part::text("Cargo.toml"), Part::text("src")],
                            is_error: false,
                        },
                        Part::ToolResult {
                            call_id: "unknown".into(),
                            name: None,
                            content: vec![],
                            is_error: true,
                        },
                    ],
                },
            ],
            tools: vec![
                ToolDef {
                    name: "read_file".into(),
                    description: Some("Read a file".into()),
                    parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
                    native: None,
                },
                ToolDef {
                    name: "web_search".into(),
                    description: None,
                    parameters: Value::Null,
                    native: Some(NativeTool {
                        dialect: Dialect::Anthropic,
                        raw: json!({"type": "web_search_20250305", "name": "web_search"}),
                    }),
                },
            ],
            tool_choice: Some(ToolChoice::Auto),
            parallel_tool_calls: Some(true),
            max_tokens: Some(4096),
            temperature: Some(0.6),
            top_p: Some(0.95),
            top_k: Some(20),
            seed: Some(7),
            stop: vec!["<|im_end|>".into()],
            stream: true,
            thinking: Some(ThinkingConfig {
                budget_tokens: Some(8000),
                effort: None,
            }),
            output_schema: Some(OutputSchema {
                name: Some("fix".into()),
                schema: json!({"type": "object", "properties": {"patch": {"type": "string"}}}),
            }),
            metadata: Some(json!({"user_id": "u"})),
            extra: Some(DialectExtra {
                dialect: Dialect::OpenAiChat,
                fields: Map::from_iter([("logprobs".to_owned(), json!(true))]),
            }),
        }
    }

    #[test]
    fn encodes_backend_request() {
        let body = Ollama.encode_request(&backend_request());
        assert_eq!(
            body,
            json!({
                "model": "qwen3:8b",
                "messages": [
                    {"role": "system", "content": "You are a coding agent."},
                    {"role": "user", "content": "Fix the bug.\nHere is a screenshot:",
                     "images": ["iVBORw0KGgoAAA"]},
                    {"role": "assistant", "content": "Reading.", "thinking": "Read first.",
                     "tool_calls": [
                        {"id": "toolu_1", "function": {"name": "read_file", "arguments": {"path": "src/lib.rs"}}},
                        {"id": "toolu_2", "function": {"name": "bash", "arguments": {"cmd": "ls"}}},
                        {"id": "toolu_3", "function": {"name": "bash", "arguments": {}}}
                     ]},
                    {"role": "tool", "content": "pub fn f() {}", "tool_name": "read_file",
                     "tool_call_id": "toolu_1"},
                    {"role": "tool", "content": "Cargo.toml\nsrc", "tool_name": "bash",
                     "tool_call_id": "toolu_2"},
                    {"role": "tool", "content": "", "tool_call_id": "unknown"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "read_file", "description": "Read a file",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],
                "stream": true,
                "format": {"type": "object", "properties": {"patch": {"type": "string"}}},
                "options": {"num_predict": 4096, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
                            "seed": 7, "stop": ["<|im_end|>"]},
                "think": true
            })
        );
        // Arguments are never strings on the Ollama wire.
        for call in body["messages"][2]["tool_calls"].as_array().expect("calls") {
            assert!(call["function"]["arguments"].is_object());
        }
    }

    #[test]
    fn encodes_minimal_request_and_tool_choice_none() {
        let mut req = Request {
            model: "llama3.2".into(),
            turns: vec![Turn::text(Role::User, "hi")],
            tools: backend_request().tools,
            tool_choice: Some(ToolChoice::None),
            output_schema: Some(OutputSchema {
                name: None,
                schema: json!({"type": "object"}),
            }),
            ..Request::default()
        };
        assert_eq!(
            Ollama.encode_request(&req),
            json!({"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}],
                   "stream": false, "format": "json"})
        );
        req.tool_choice = None;
        req.output_schema = None;
        let body = Ollama.encode_request(&req);
        assert_eq!(body["tools"].as_array().map(Vec::len), Some(1));
        assert!(body.get("think").is_none());
        assert!(body.get("options").is_none());
    }

    fn client_request() -> Value {
        json!({
            "model": "llama3.1:8b",
            "messages": [
                {"role": "system", "content": "Be helpful."},
                {"role": "user", "content": "What's in this image, and the weather in Paris and Tokyo?",
                 "images": ["/9j/4AAQSkZJRg", "iVBORw0KGgo"]},
                {"role": "assistant", "content": "", "thinking": "Two cities.",
                 "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                    {"function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}
                 ]},
                {"role": "tool", "content": "18C", "tool_name": "get_weather"},
                {"role": "tool", "content": "25C", "tool_name": "get_weather"},
                {"role": "assistant", "content": "Paris 18C, Tokyo 25C."},
                {"role": "user", "content": "Thanks"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather", "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
            "format": {"type": "object", "properties": {"answer": {"type": "string"}}},
            "options": {"num_predict": 256, "temperature": 0.1, "top_p": 0.8, "top_k": 40,
                        "seed": 123, "stop": ["\n\n"], "num_ctx": 8192},
            "think": true,
            "keep_alive": "10m"
        })
    }

    #[test]
    fn decodes_client_request() {
        let req = decode(client_request()).expect("valid");
        assert_eq!(req.model, "llama3.1:8b");
        assert_eq!(
            req.turns,
            vec![
                Turn::text(Role::System, "Be helpful."),
                Turn {
                    role: Role::User,
                    parts: vec![
                        Part::text("What's in this image, and the weather in Paris and Tokyo?"),
                        Part::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/jpeg".into(),
                                data: "/9j/4AAQSkZJRg".into()
                            },
                            cache_control: None
                        },
                        Part::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/png".into(),
                                data: "iVBORw0KGgo".into()
                            },
                            cache_control: None
                        },
                    ]
                },
                Turn {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Thinking {
                            text: "Two cities.".into(),
                            signature: None,
                            redacted: None
                        },
                        call("call_2_0", "get_weather", json!({"city": "Paris"})),
                        call("call_2_1", "get_weather", json!({"city": "Tokyo"})),
                    ]
                },
                Turn {
                    role: Role::Tool,
                    parts: vec![
                        Part::ToolResult {
                            call_id: "call_2_0".into(),
                            name: Some("get_weather".into()),
                            content: vec![Part::text("18C")],
                            is_error: false
                        },
                        Part::ToolResult {
                            call_id: "call_2_1".into(),
                            name: Some("get_weather".into()),
                            content: vec![Part::text("25C")],
                            is_error: false
                        },
                    ]
                },
                Turn::text(Role::Assistant, "Paris 18C, Tokyo 25C."),
                Turn::text(Role::User, "Thanks"),
            ]
        );
        assert_eq!(req.tools.len(), 1);
        assert_eq!(req.tools[0].name, "get_weather");
        assert_eq!(
            req.tools[0].description.as_deref(),
            Some("Weather for a city")
        );
        assert!(req.stream, "Ollama streams by default");
        assert_eq!(
            req.output_schema,
            Some(OutputSchema {
                name: None,
                schema: json!({"type": "object", "properties": {"answer": {"type": "string"}}})
            })
        );
        assert_eq!(req.max_tokens, Some(256));
        assert_eq!(req.temperature, Some(0.1));
        assert_eq!(req.top_p, Some(0.8));
        assert_eq!(req.top_k, Some(40));
        assert_eq!(req.seed, Some(123));
        assert_eq!(req.stop, vec!["\n\n".to_owned()]);
        assert_eq!(req.thinking, Some(ThinkingConfig::default()));
        assert_eq!(
            req.extra,
            Some(DialectExtra {
                dialect: Dialect::Ollama,
                fields: Map::from_iter([
                    ("options".to_owned(), json!({"num_ctx": 8192})),
                    ("keep_alive".to_owned(), json!("10m")),
                ])
            })
        );
    }

    #[test]
    fn links_tool_results_by_id_name_or_order() {
        let req = decode(json!({
            "model": "m",
            "stream": false,
            "messages": [
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_x", "function": {"index": 0, "name": "a", "arguments": {}}},
                    {"function": {"index": 1, "name": "b", "arguments": "{\"k\": 1}"}},
                    {"function": {"index": 2, "name": "c", "arguments": {}}}
                ]},
                {"role": "tool", "content": "B", "tool_name": "b"},
                {"role": "tool", "content": "A", "tool_call_id": "call_x"},
                {"role": "tool", "content": "C"},
                {"role": "tool", "content": "orphan"}
            ],
            "format": "json",
            "think": "high",
            "options": {"num_predict": -1}
        }))
        .expect("valid");
        assert!(!req.stream);
        assert_eq!(req.max_tokens, None);
        assert_eq!(
            req.thinking,
            Some(ThinkingConfig {
                budget_tokens: None,
                effort: Some("high".into())
            })
        );
        assert_eq!(
            req.output_schema,
            Some(OutputSchema {
                name: None,
                schema: json!({"type": "object"})
            })
        );
        assert_eq!(
            req.turns[0].parts[1],
            call("call_0_1", "b", json!({"k": 1}))
        );
        let links: Vec<(String, Option<String>)> = req.turns[1]
            .parts
            .iter()
            .map(|p| match p {
                Part::ToolResult { call_id, name, .. } => (call_id.clone(), name.clone()),
                other => panic!("not a result: {other:?}"),
            })
            .collect();
        assert_eq!(
            links,
            vec![
                ("call_0_1".to_owned(), Some("b".to_owned())),
                ("call_x".to_owned(), Some("a".to_owned())),
                ("call_0_2".to_owned(), Some("c".to_owned())),
                ("call_4".to_owned(), None),
            ]
        );
        // An explicit `think: false` survives for an Ollama backend.
        let req = decode(json!({"model": "m", "messages": [], "think": false})).expect("valid");
        assert_eq!(req.thinking, None);
        assert_eq!(Ollama.encode_request(&req)["think"], json!(false));
    }

    #[test]
    fn request_round_trips() {
        let first = decode(client_request()).expect("valid");
        let encoded = Ollama.encode_request(&first);
        assert_eq!(
            encoded["options"],
            json!({"num_predict": 256, "temperature": 0.1, "top_p": 0.8, "top_k": 40,
                   "seed": 123, "stop": ["\n\n"], "num_ctx": 8192})
        );
        assert_eq!(encoded["keep_alive"], json!("10m"));
        assert_eq!(encoded["messages"][3]["tool_call_id"], json!("call_2_0"));
        let second = Ollama
            .decode_request(encoded.to_string().as_bytes())
            .expect("re-decodes");
        assert_eq!(second, first);
    }

    #[test]
    fn rejects_bad_requests_with_field_names() {
        let cases = [
            (json!({"messages": []}), "model"),
            (json!({"model": "m"}), "messages"),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}),
                "messages.0.content",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x", "images": [1]}]}),
                "messages.0.images.0",
            ),
            (
                json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}),
                "messages.0.role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]}),
                "messages.0.tool_calls.0.function.name",
            ),
            (
                json!({"model": "m", "messages": [], "think": "max"}),
                "think",
            ),
            (json!({"model": "m", "messages": [], "format": 3}), "format"),
            (
                json!({"model": "m", "messages": [], "options": []}),
                "options",
            ),
            (
                json!({"model": "m", "messages": [], "options": {"temperature": "warm"}}),
                "options.temperature",
            ),
        ];
        for (body, field) in cases {
            let err = decode(body.clone()).expect_err(&body.to_string());
            assert_eq!(err.kind, ErrorKind::InvalidRequest, "{body}");
            assert_eq!(err.param.as_deref(), Some(field), "{body}: {}", err.message);
        }
        let err = Ollama.decode_request(b"not json").expect_err("bad json");
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
    }

    fn tool_reply() -> Value {
        json!({
            "model": "qwen3:8b",
            "created_at": "2025-04-11T18:18:52.293545Z",
            "message": {
                "role": "assistant",
                "content": "",
                "thinking": "Need disk usage.",
                "tool_calls": [
                    {"function": {"name": "run_command", "arguments": {"command": "df -h"}}}
                ]
            },
            "done_reason": "stop",
            "done": true,
            "total_duration": 2347998750u64,
            "load_duration": 19605625,
            "prompt_eval_count": 155,
            "prompt_eval_duration": 321024542,
            "eval_count": 81,
            "eval_duration": 2005950875u64
        })
    }

    #[test]
    fn decodes_response() {
        let resp = Ollama
            .decode_response(tool_reply().to_string().as_bytes())
            .expect("valid");
        assert_eq!(resp.id, "ollama-20250411181852293545");
        assert_eq!(resp.model, "qwen3:8b");
        assert_eq!(
            resp.parts,
            vec![
                Part::Thinking {
                    text: "Need disk usage.".into(),
                    signature: None,
                    redacted: None
                },
                call(
                    "call_20250411181852293545_0",
                    "run_command",
                    json!({"command": "df -h"})
                ),
            ]
        );
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.usage,
            Usage {
                input_tokens: 155,
                output_tokens: 81,
                ..Usage::default()
            }
        );
        let length = json!({"model": "m", "created_at": "2025-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": "truncated"},
            "done": true, "done_reason": "length", "prompt_eval_count": 3, "eval_count": 10});
        let resp = Ollama
            .decode_response(length.to_string().as_bytes())
            .expect("valid");
        assert_eq!(resp.stop_reason, StopReason::MaxTokens);
        assert_eq!(resp.parts, vec![Part::text("truncated")]);
        for garbage in [&b"oops"[..], b"{\"done\": true}", b"[]"] {
            let err = Ollama.decode_response(garbage).expect_err("garbage");
            assert_eq!(err.kind, ErrorKind::BadGateway);
        }
        let err = Ollama
            .decode_response(br#"{"error": "model 'nope' not found"}"#)
            .expect_err("error");
        assert_eq!(err.message, "model 'nope' not found");
    }

    #[test]
    fn encodes_response_and_round_trips() {
        let resp = Response {
            id: "msg_1".into(),
            model: "qwen3:8b".into(),
            parts: vec![
                Part::Thinking {
                    text: "hmm".into(),
                    signature: None,
                    redacted: None,
                },
                Part::text("Running."),
                call("toolu_1", "bash", json!({"cmd": "ls"})),
                call("toolu_2", "bash", json!({"cmd": "pwd"})),
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 12,
                output_tokens: 30,
                cache_read_tokens: 8,
                ..Usage::default()
            },
        };
        let body = Ollama.encode_response(&resp);
        let created_at = body["created_at"].as_str().expect("created_at").to_owned();
        assert_eq!(created_at.len(), "2025-04-11T18:18:52.293545Z".len());
        assert!(created_at.ends_with('Z') && created_at.as_bytes()[10] == b'T');
        assert_eq!(
            body,
            json!({
                "model": "qwen3:8b",
                "created_at": created_at,
                "message": {"role": "assistant", "content": "Running.", "thinking": "hmm",
                    "tool_calls": [
                        {"id": "toolu_1", "function": {"index": 0, "name": "bash", "arguments": {"cmd": "ls"}}},
                        {"id": "toolu_2", "function": {"index": 1, "name": "bash", "arguments": {"cmd": "pwd"}}}
                    ]},
                "done_reason": "stop",
                "done": true,
                "total_duration": 0,
                "load_duration": 0,
                "prompt_eval_count": 20,
                "prompt_eval_duration": 0,
                "eval_count": 30,
                "eval_duration": 0
            })
        );
        let back = Ollama
            .decode_response(body.to_string().as_bytes())
            .expect("valid");
        assert_eq!(back.parts, resp.parts);
        assert_eq!(back.model, resp.model);
        assert_eq!(back.stop_reason, StopReason::ToolUse);
        assert_eq!(back.usage.input_tokens, 20);
        assert_eq!(back.usage.output_tokens, 30);
        let long = Response {
            stop_reason: StopReason::MaxTokens,
            parts: vec![Part::text("x")],
            ..resp
        };
        assert_eq!(
            Ollama.encode_response(&long)["done_reason"],
            json!("length")
        );
    }

    const THINKING_STREAM: &str = concat!(
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.1Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\"Okay,\"},\"done\":false}\n",
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.2Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\" simple.\"},\"done\":false}\n",
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.3Z\",\"message\":{\"role\":\"assistant\",\"content\":\"Hello\"},\"done\":false}\n",
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.4Z\",\"message\":{\"role\":\"assistant\",\"content\":\" \u{00E9}t\u{00E9}!\"},\"done\":false}\n",
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.5Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done_reason\":\"stop\",\"done\":true,\"total_duration\":4883583458,\"load_duration\":1334875,\"prompt_eval_count\":26,\"prompt_eval_duration\":342546000,\"eval_count\":282,\"eval_duration\":4535599000}\n",
    );

    #[test]
    fn decodes_thinking_stream_at_every_split() {
        let events = decode_every_split(&Ollama, THINKING_STREAM.as_bytes());
        assert_eq!(
            events,
            vec![
                StreamEvent::Start {
                    id: "ollama-202506011000001".into(),
                    model: "qwen3:8b".into(),
                    usage: Usage::default()
                },
                StreamEvent::PartStart {
                    index: 0,
                    kind: PartKind::Thinking
                },
                StreamEvent::ThinkingDelta {
                    index: 0,
                    text: "Okay,".into()
                },
                StreamEvent::ThinkingDelta {
                    index: 0,
                    text: " simple.".into()
                },
                StreamEvent::PartStop { index: 0 },
                StreamEvent::PartStart {
                    index: 1,
                    kind: PartKind::Text
                },
                StreamEvent::TextDelta {
                    index: 1,
                    text: "Hello".into()
                },
                StreamEvent::TextDelta {
                    index: 1,
                    text: " \u{00E9}t\u{00E9}!".into()
                },
                StreamEvent::PartStop { index: 1 },
                StreamEvent::Finish {
                    stop_reason: StopReason::EndTurn,
                    usage: Usage {
                        input_tokens: 26,
                        output_tokens: 282,
                        ..Usage::default()
                    }
                },
            ]
        );
    }

    const TOOL_STREAM: &str = concat!(
        "{\"model\":\"llama3.1\",\"created_at\":\"2025-06-01T10:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"Checking.\"},\"done\":false}\n",
        "{\"model\":\"llama3.1\",\"created_at\":\"2025-06-01T10:00:01Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}},{\"id\":\"call_k9\",\"function\":{\"index\":1,\"name\":\"get_weather\",\"arguments\":{\"city\":\"Tokyo\"}}}]},\"done\":false}\n",
        "{\"model\":\"llama3.1\",\"created_at\":\"2025-06-01T10:00:02Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done_reason\":\"stop\",\"done\":true,\"total_duration\":1,\"prompt_eval_count\":90,\"eval_count\":25}\n",
    );

    fn tool_stream_events() -> Vec<StreamEvent> {
        vec![
            StreamEvent::Start {
                id: "ollama-20250601100000".into(),
                model: "llama3.1".into(),
                usage: Usage::default(),
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 0,
                text: "Checking.".into(),
            },
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::ToolCall {
                    id: "call_20250601100000_0".into(),
                    name: "get_weather".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 1,
                json: "{\"city\":\"Paris\"}".into(),
            },
            StreamEvent::PartStop { index: 1 },
            StreamEvent::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "call_k9".into(),
                    name: "get_weather".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "{\"city\":\"Tokyo\"}".into(),
            },
            StreamEvent::PartStop { index: 2 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 90,
                    output_tokens: 25,
                    ..Usage::default()
                },
            },
        ]
    }

    #[test]
    fn decodes_tool_stream_at_every_split() {
        let events = decode_every_split(&Ollama, TOOL_STREAM.as_bytes());
        assert_eq!(events, tool_stream_events());
    }

    #[test]
    fn truncated_error_and_malformed_streams() {
        let cut = THINKING_STREAM.rfind("{\"model\"").expect("last line");
        let events = decode_every_split(&Ollama, &THINKING_STREAM.as_bytes()[..cut]);
        match events.last() {
            Some(StreamEvent::Error { error }) => {
                assert_eq!(error.kind, ErrorKind::BadGateway);
                assert!(error.message.contains("ended before"), "{}", error.message);
            }
            other => panic!("expected an error, got {other:?}"),
        }
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::Finish { .. }))
        );
        // The last line without its newline still counts.
        let events = decode_every_split(&Ollama, THINKING_STREAM.trim_end().as_bytes());
        assert!(matches!(events.last(), Some(StreamEvent::Finish { .. })));

        let wire = concat!(
            "{\"model\":\"m\",\"created_at\":\"2025-06-01T10:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n",
            "{\"error\":\"an error was encountered while running the model: unexpected EOF\"}\n",
        );
        let events = decode_every_split(&Ollama, wire.as_bytes());
        assert_eq!(events.len(), 4);
        assert!(matches!(&events[3], StreamEvent::Error { error }
            if error.message == "an error was encountered while running the model: unexpected EOF"));

        let mut decoder = Ollama.stream_decoder();
        let err = decoder.feed(b"{\"model\": nope}\n").expect_err("malformed");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        let mut decoder = Ollama.stream_decoder();
        assert!(matches!(
            decoder.finish().as_slice(),
            [StreamEvent::Error { .. }]
        ));
    }

    fn lines(wire: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(wire).expect("utf8");
        assert!(text.ends_with('\n'));
        text.lines()
            .map(|l| serde_json::from_str(l).expect("line JSON"))
            .collect()
    }

    #[test]
    fn encodes_stream_like_ollama() {
        let events = vec![
            StreamEvent::Start {
                id: "x".into(),
                model: "qwen3:8b".into(),
                usage: Usage {
                    input_tokens: 40,
                    ..Usage::default()
                },
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Thinking,
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "plan".into(),
            },
            StreamEvent::ThinkingSignature {
                index: 0,
                signature: "sig".into(),
            },
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "Let me run it.".into(),
            },
            StreamEvent::PartStop { index: 1 },
            StreamEvent::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "toolu_1".into(),
                    name: "bash".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "{\"cmd\":".into(),
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: " \"ls\"}".into(),
            },
            StreamEvent::PartStop { index: 2 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    output_tokens: 17,
                    ..Usage::default()
                },
            },
        ];
        let wire = encode_stream(&Ollama, &events);
        let lines = lines(&wire);
        assert_eq!(lines.len(), 4);
        let created_at = lines[0]["created_at"].clone();
        assert!(created_at.as_str().is_some_and(|s| s.ends_with('Z')));
        assert_eq!(
            lines[0],
            json!({"model": "qwen3:8b", "created_at": created_at,
                   "message": {"role": "assistant", "content": "", "thinking": "plan"}, "done": false})
        );
        assert_eq!(
            lines[1],
            json!({"model": "qwen3:8b", "created_at": created_at,
                   "message": {"role": "assistant", "content": "Let me run it."}, "done": false})
        );
        assert_eq!(
            lines[2],
            json!({"model": "qwen3:8b", "created_at": created_at,
                   "message": {"role": "assistant", "content": "", "tool_calls": [
                       {"id": "toolu_1", "function": {"index": 0, "name": "bash", "arguments": {"cmd": "ls"}}}
                   ]}, "done": false})
        );
        assert_eq!(
            lines[3],
            json!({"model": "qwen3:8b", "created_at": created_at,
                   "message": {"role": "assistant", "content": ""},
                   "done_reason": "stop", "done": true, "total_duration": 0, "load_duration": 0,
                   "prompt_eval_count": 40, "prompt_eval_duration": 0, "eval_count": 17,
                   "eval_duration": 0})
        );
    }

    #[test]
    fn stream_encode_decode_round_trip_of_a_response() {
        let resp = Response {
            id: "r".into(),
            model: "m".into(),
            parts: vec![
                Part::Thinking {
                    text: "t".into(),
                    signature: None,
                    redacted: None,
                },
                Part::text("answer"),
                call("c1", "f", json!({"a": [1, 2]})),
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            },
        };
        let wire = encode_stream(&Ollama, &events_of(&resp));
        let mut builder = ResponseBuilder::new();
        for event in decode_every_split(&Ollama, &wire) {
            builder.push(&event);
        }
        let back = builder.finish().expect("complete");
        assert_eq!(back.parts, resp.parts);
        assert_eq!(back.usage, resp.usage);
        assert_eq!(back.stop_reason, resp.stop_reason);
        assert!(back.id.starts_with("ollama-"));
    }

    #[test]
    fn encodes_stream_error_and_stops() {
        let events = vec![
            StreamEvent::Start {
                id: "x".into(),
                model: "m".into(),
                usage: Usage::default(),
            },
            StreamEvent::Error {
                error: ApiError::new(ErrorKind::BadGateway, "backend died"),
            },
            StreamEvent::Finish {
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
            },
        ];
        let wire = encode_stream(&Ollama, &events);
        assert_eq!(lines(&wire), vec![json!({"error": "backend died"})]);
    }

    #[test]
    fn error_bodies() {
        assert_eq!(
            Ollama.encode_error(&ApiError::new(
                ErrorKind::NotFound,
                "model \"x\" not found, try pulling it first"
            )),
            json!({"error": "model \"x\" not found, try pulling it first"})
        );
        let err = Ollama.decode_error(
            404,
            br#"{"error":"model \"llama9\" not found, try pulling it first"}"#,
        );
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert_eq!(
            err.message,
            "model \"llama9\" not found, try pulling it first"
        );
        let err = Ollama.decode_error(500, b"Internal Server Error");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert_eq!(err.message, "Internal Server Error");
        let err = Ollama.decode_error(400, br#"{"error": {"message": "bad"}}"#);
        assert_eq!(err.message, "bad");
    }

    #[test]
    fn codec_basics_and_time() {
        assert_eq!(Ollama.dialect(), Dialect::Ollama);
        assert_eq!(Ollama.stream_content_type(), "application/x-ndjson");
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339(1_744_395_532, 293_545),
            "2025-04-11T18:18:52.293545Z"
        );
        assert_eq!(rfc3339(951_782_400, 1), "2000-02-29T00:00:00.000001Z");
        assert_eq!(sniff_media_type("R0lGODlh"), "image/gif");
        assert_eq!(sniff_media_type("UklGRiQ"), "image/webp");
        assert_eq!(arguments_object(&json!([1])), json!({}));
    }
}
