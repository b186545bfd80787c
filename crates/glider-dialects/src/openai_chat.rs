//! OpenAI Chat Completions codec (`POST /v1/chat/completions`), the dialect vLLM and
//! llama.cpp's server speak too: requests, `chat.completion` replies, SSE streams of
//! `chat.completion.chunk` ending in `data: [DONE]`, and `{"error":{...}}` bodies.
//! Also holds the field helpers the Ollama codec shares (same tool and error shapes).
//!
//! Mapping notes (lossy or defaulted):
//! - `system` and `developer` both decode to `Role::System` and encode as `system`.
//! - Consecutive `tool` messages decode into ONE `Role::Tool` turn; encoding writes one
//!   `tool` message (with `tool_call_id`) per `ToolResult`. `is_error` has no OpenAI
//!   field and is dropped; images inside tool results move to a `user` message right
//!   after the tool messages (OpenAI tool messages carry text only).
//! - Message `name`, image `detail`, tool `strict` and `response_format.json_schema.strict`
//!   are dropped. `cache_control` is kept on decode (OpenRouter style) but never encoded.
//! - Thinking parts in history are dropped on encode (backends ignore them); in replies
//!   and streams thinking is `reasoning_content` (decoded from `reasoning` too).
//! - `max_completion_tokens` or `max_tokens` decode to `max_tokens` (the former wins);
//!   encoding always writes `max_tokens`, which vLLM and llama.cpp understand (OpenAI's
//!   o-series want `max_completion_tokens`: callers can pass it through `extra`).
//! - `top_k` (a vLLM/llama.cpp extension) is decoded and encoded; `top_k <= 0` = unset.
//! - `reasoning_effort` <-> `ThinkingConfig.effort`; a budget-only thinking request is
//!   encoded as an effort (<= 4096 low, <= 16384 medium, else high).
//! - `response_format` `json_object` <-> schema `{"type":"object"}` without a name;
//!   `json_schema` without a name is encoded with name `"response"`.
//! - `user` and `metadata` stay verbatim in `extra` (so they reach only OpenAI-chat
//!   backends); `Request.metadata` gets a read-only view: `metadata` plus `"user"`.
//! - Streaming requests always get `stream_options.include_usage = true`; the stream
//!   encoder always writes the trailing usage chunk (`choices: []`) before `[DONE]`.
//! - Usage: ngl `input_tokens` excludes cache reads (Anthropic semantics), so
//!   `prompt_tokens = input + cache_read + cache_write` and `cached_tokens = cache_read`.
//! - Finish reasons: `stop` -> EndTurn (StopSequence when vLLM's `stop_reason` names a
//!   string, ToolUse when tool calls are present), `length` -> MaxTokens, `tool_calls`
//!   -> ToolUse, `content_filter` -> ContentFilter; Refusal encodes as `content_filter`,
//!   PauseTurn and StopSequence as `stop`.
//! - Error types follow OpenAI: 429 is type `requests` with code `rate_limit_exceeded`
//!   (what api.openai.com sends); 401 `authentication_error`/`invalid_api_key`, 403
//!   `permission_error`, 404 `invalid_request_error`/`model_not_found`, 5xx `server_error`.

use std::time::{SystemTime, UNIX_EPOCH};

use glider_ngl::stream::{PartKind, arguments_text, parse_arguments};
use glider_ngl::{
    ApiError, Dialect, DialectExtra, ErrorKind, ImageSource, NativeTool, OutputSchema, Part,
    Request, Response, Role, StopReason, StreamEvent, ThinkingConfig, ToolChoice, ToolDef, Turn,
    Usage,
};
use serde_json::{Map, Value, json};

use crate::framing::{SseParser, write_sse, write_sse_json};
use crate::{Codec, StreamDecoder, StreamEncoder, parse_json};

/// The OpenAI Chat Completions codec (also vLLM and llama.cpp's server).
pub struct OpenAiChat;

// ---------------------------------------------------------------------------------------
// Shared field helpers (also used by the Ollama codec).
// ---------------------------------------------------------------------------------------

/// `path.key`, or `key` at the top level.
pub(crate) fn join_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A 400 naming the offending field.
pub(crate) fn invalid_at(path: &str, what: &str) -> ApiError {
    ApiError::invalid(format!("{path}: {what}")).with_param(path)
}

/// A 502: the backend answered something we cannot read.
pub(crate) fn bad_gateway(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::BadGateway, message)
}

/// Remove `key`; an explicit `null` counts as absent.
pub(crate) fn take(map: &mut Map<String, Value>, key: &str) -> Option<Value> {
    match map.remove(key) {
        None | Some(Value::Null) => None,
        Some(value) => Some(value),
    }
}

/// The value must be an object.
pub(crate) fn expect_object(value: Value, path: &str) -> Result<Map<String, Value>, ApiError> {
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(invalid_at(path, "expected an object")),
    }
}

/// Take `key` and convert it, or say which type was expected.
fn take_as<T>(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
    expected: &str,
    convert: impl FnOnce(Value) -> Option<T>,
) -> Result<Option<T>, ApiError> {
    match take(map, key) {
        None => Ok(None),
        Some(value) => convert(value)
            .map(Some)
            .ok_or_else(|| invalid_at(&join_path(path, key), &format!("expected {expected}"))),
    }
}

pub(crate) fn take_string(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, ApiError> {
    take_as(map, key, path, "a string", |v| match v {
        Value::String(s) => Some(s),
        _ => None,
    })
}

pub(crate) fn take_number(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<f64>, ApiError> {
    take_as(map, key, path, "a number", |v| v.as_f64())
}

pub(crate) fn take_i64(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<i64>, ApiError> {
    take_as(map, key, path, "an integer", |v| v.as_i64())
}

/// A non-negative integer that fits `u32`.
pub(crate) fn take_u32(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<u32>, ApiError> {
    match take_i64(map, key, path)? {
        None => Ok(None),
        Some(i) => u32::try_from(i)
            .map(Some)
            .map_err(|_| invalid_at(&join_path(path, key), "expected a non-negative integer")),
    }
}

pub(crate) fn take_bool(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<bool>, ApiError> {
    take_as(map, key, path, "a boolean", |v| v.as_bool())
}

/// Stop sequences: a string or an array of strings.
pub(crate) fn take_stop(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Vec<String>, ApiError> {
    let here = join_path(path, key);
    match take(map, key) {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s]),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s),
                _ => Err(invalid_at(&format!("{here}.{i}"), "expected a string")),
            })
            .collect(),
        Some(_) => Err(invalid_at(
            &here,
            "expected a string or an array of strings",
        )),
    }
}

/// `top_k`: vLLM and llama.cpp use `-1`/`0` for "disabled", which is ngl's `None`.
pub(crate) fn take_top_k(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<u32>, ApiError> {
    match take_i64(map, key, path)? {
        Some(k) if k > 0 => Ok(Some(u32::try_from(k).unwrap_or(u32::MAX))),
        _ => Ok(None),
    }
}

/// Function tools in the OpenAI shape `{type: "function", function: {...}}` (Ollama uses
/// it too). Other tool types are kept verbatim as `native` tools of `dialect`.
pub(crate) fn decode_tools(
    value: Value,
    path: &str,
    dialect: Dialect,
) -> Result<Vec<ToolDef>, ApiError> {
    let Value::Array(items) = value else {
        return Err(invalid_at(path, "expected an array"));
    };
    let mut tools = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let here = format!("{path}.{i}");
        // Only a tool that is not a function is kept verbatim; cloning every tool (each
        // with its whole JSON schema) just in case doubled the decode's allocations.
        let maybe_function = match item.get("type") {
            Some(Value::String(kind)) => kind == "function",
            Some(_) => true, // not a string: `take_string` below refuses it
            None => item.get("function").is_some(),
        };
        let raw = if maybe_function {
            Value::Null
        } else {
            item.clone()
        };
        let mut tool = expect_object(item, &here)?;
        let kind = take_string(&mut tool, "type", &here)?;
        let is_function = match kind.as_deref() {
            Some("function") => true,
            None => tool.contains_key("function"),
            Some(_) => false,
        };
        if !is_function {
            // `{type: "custom", custom: {name}}` and friends name the tool inside.
            let name = raw
                .get("name")
                .or_else(|| kind.as_deref().and_then(|k| raw.get(k)?.get("name")))
                .and_then(Value::as_str)
                .or(kind.as_deref())
                .unwrap_or("tool")
                .to_owned();
            tools.push(ToolDef {
                name,
                description: None,
                parameters: Value::Null,
                native: Some(NativeTool { dialect, raw }),
            });
            continue;
        }
        let fpath = join_path(&here, "function");
        let function = match take(&mut tool, "function") {
            Some(f) => expect_object(f, &fpath)?,
            None => return Err(invalid_at(&fpath, "required")),
        };
        let mut function = function;
        let name = take_string(&mut function, "name", &fpath)?
            .ok_or_else(|| invalid_at(&join_path(&fpath, "name"), "required"))?;
        let description = take_string(&mut function, "description", &fpath)?;
        let parameters = match take(&mut function, "parameters") {
            None => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p,
            Some(_) => {
                return Err(invalid_at(
                    &join_path(&fpath, "parameters"),
                    "expected an object",
                ));
            }
        };
        tools.push(ToolDef {
            name,
            description,
            parameters,
            native: None,
        });
    }
    Ok(tools)
}

/// Function tools in the OpenAI shape; native tools only when they are `dialect`'s own.
pub(crate) fn encode_tools(tools: &[ToolDef], dialect: Dialect) -> Vec<Value> {
    tools
        .iter()
        .filter_map(|tool| match &tool.native {
            Some(native) if native.dialect == dialect => Some(native.raw.clone()),
            Some(_) => None,
            None => {
                let mut function = Map::new();
                function.insert("name".into(), Value::String(tool.name.clone()));
                if let Some(description) = &tool.description {
                    function.insert("description".into(), Value::String(description.clone()));
                }
                let parameters = if tool.parameters.is_null() {
                    json!({"type": "object", "properties": {}})
                } else {
                    tool.parameters.clone()
                };
                function.insert("parameters".into(), parameters);
                Some(json!({"type": "function", "function": function}))
            }
        })
        .collect()
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Message and param of a backend's error body, whatever its shape
/// (`{"error":{"message"}}`, `{"error":"..."}`, `{"message"}`, `{"detail"}`), else the
/// raw text, else a line naming the status.
pub(crate) fn backend_error(status: u16, body: &[u8]) -> ApiError {
    let kind = ErrorKind::from_status(status);
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let (message, param) = error_fields(&value);
        if let Some(message) = message {
            return ApiError {
                kind,
                message,
                param,
            };
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message = if text.is_empty() {
        format!("backend returned HTTP {status}")
    } else {
        text.chars().take(2000).collect()
    };
    ApiError::new(kind, message)
}

/// Message and param of an error object in any of the usual shapes.
pub(crate) fn error_fields(value: &Value) -> (Option<String>, Option<String>) {
    let param = |v: &Value| v.get("param").and_then(Value::as_str).map(str::to_owned);
    match value.get("error") {
        Some(Value::String(message)) => return (Some(message.clone()), None),
        Some(err @ Value::Object(_)) => {
            if let Some(message) = err.get("message").and_then(Value::as_str) {
                return (Some(message.to_owned()), param(err));
            }
        }
        _ => {}
    }
    for key in ["message", "detail"] {
        if let Some(message) = value.get(key).and_then(Value::as_str) {
            return (Some(message.to_owned()), param(value));
        }
    }
    (None, None)
}

// ---------------------------------------------------------------------------------------
// Request decoding.
// ---------------------------------------------------------------------------------------

/// A request body with its `model` and `messages` taken out, and the rest.
pub(crate) type ChatBody = (Map<String, Value>, String, Vec<Value>);

/// The body as an object with its required `model` and `messages` taken out (the
/// shared start of the Chat Completions and Ollama request decoders).
pub(crate) fn model_and_messages(body: &[u8]) -> Result<ChatBody, ApiError> {
    let Value::Object(mut obj) = parse_json(body)? else {
        return Err(ApiError::invalid("request body: expected a JSON object"));
    };
    let model =
        take_string(&mut obj, "model", "")?.ok_or_else(|| invalid_at("model", "required"))?;
    let messages = match take(&mut obj, "messages") {
        Some(Value::Array(messages)) => messages,
        Some(_) => return Err(invalid_at("messages", "expected an array")),
        None => return Err(invalid_at("messages", "required")),
    };
    Ok((obj, model, messages))
}

fn decode_request(body: &[u8]) -> Result<Request, ApiError> {
    let (mut obj, model, messages) = model_and_messages(body)?;
    let mut req = Request {
        model,
        turns: decode_messages(messages)?,
        ..Request::default()
    };
    if let Some(tools) = take(&mut obj, "tools") {
        req.tools = decode_tools(tools, "tools", Dialect::OpenAiChat)?;
    }
    if let Some(choice) = take(&mut obj, "tool_choice") {
        req.tool_choice = Some(decode_tool_choice(choice)?);
    }
    req.parallel_tool_calls = take_bool(&mut obj, "parallel_tool_calls", "")?;
    let max_completion_tokens = take_u32(&mut obj, "max_completion_tokens", "")?;
    let max_tokens = take_u32(&mut obj, "max_tokens", "")?;
    req.max_tokens = max_completion_tokens.or(max_tokens);
    req.temperature = take_number(&mut obj, "temperature", "")?;
    req.top_p = take_number(&mut obj, "top_p", "")?;
    req.top_k = take_top_k(&mut obj, "top_k", "")?;
    req.seed = take_i64(&mut obj, "seed", "")?;
    req.stop = take_stop(&mut obj, "stop", "")?;
    req.stream = take_bool(&mut obj, "stream", "")?.unwrap_or(false);
    if let Some(effort) = take_string(&mut obj, "reasoning_effort", "")? {
        req.thinking = Some(ThinkingConfig {
            budget_tokens: None,
            effort: Some(effort),
        });
    }
    if let Some(format) = take(&mut obj, "response_format") {
        req.output_schema = decode_response_format(format)?;
    }
    // stream_options, user and metadata stay verbatim in `extra`; check their types.
    match obj.get("stream_options") {
        None | Some(Value::Null | Value::Object(_)) => {}
        Some(_) => return Err(invalid_at("stream_options", "expected an object")),
    }
    let mut view = match obj.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(_) => return Err(invalid_at("metadata", "expected an object")),
    };
    match obj.get("user") {
        None | Some(Value::Null) => {}
        Some(Value::String(user)) => {
            view.get_or_insert_with(Map::new)
                .insert("user".into(), Value::String(user.clone()));
        }
        Some(_) => return Err(invalid_at("user", "expected a string")),
    }
    req.metadata = view.map(Value::Object);
    if !obj.is_empty() {
        req.extra = Some(DialectExtra {
            dialect: Dialect::OpenAiChat,
            fields: obj,
        });
    }
    Ok(req)
}

fn decode_messages(messages: Vec<Value>) -> Result<Vec<Turn>, ApiError> {
    let mut turns: Vec<Turn> = Vec::with_capacity(messages.len());
    for (i, message) in messages.into_iter().enumerate() {
        let path = format!("messages.{i}");
        let mut m = expect_object(message, &path)?;
        let role = take_string(&mut m, "role", &path)?
            .ok_or_else(|| invalid_at(&join_path(&path, "role"), "required"))?;
        let content_path = join_path(&path, "content");
        match role.as_str() {
            "system" | "developer" => {
                let content =
                    take(&mut m, "content").ok_or_else(|| invalid_at(&content_path, "required"))?;
                turns.push(Turn {
                    role: Role::System,
                    parts: decode_content(content, &content_path, false)?,
                });
            }
            "user" => {
                let content =
                    take(&mut m, "content").ok_or_else(|| invalid_at(&content_path, "required"))?;
                turns.push(Turn {
                    role: Role::User,
                    parts: decode_content(content, &content_path, true)?,
                });
            }
            "assistant" => turns.push(decode_assistant(m, &path)?),
            "tool" => {
                let call_id = take_string(&mut m, "tool_call_id", &path)?
                    .ok_or_else(|| invalid_at(&join_path(&path, "tool_call_id"), "required"))?;
                let content = match take(&mut m, "content") {
                    Some(content) => decode_content(content, &content_path, false)?,
                    None => Vec::new(),
                };
                let result = Part::ToolResult {
                    call_id,
                    name: None,
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

/// `content`: a string or an array of parts (`text`, `image_url` when `images`,
/// `refusal` as text).
fn decode_content(content: Value, path: &str, images: bool) -> Result<Vec<Part>, ApiError> {
    let items = match content {
        Value::String(text) => return Ok(vec![Part::text(text)]),
        Value::Array(items) => items,
        _ => return Err(invalid_at(path, "expected a string or an array")),
    };
    let mut parts = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let here = format!("{path}.{i}");
        let mut item = expect_object(item, &here)?;
        let kind = take_string(&mut item, "type", &here)?
            .ok_or_else(|| invalid_at(&join_path(&here, "type"), "required"))?;
        match kind.as_str() {
            "text" => {
                let text = take_string(&mut item, "text", &here)?
                    .ok_or_else(|| invalid_at(&join_path(&here, "text"), "required"))?;
                parts.push(Part::Text {
                    text,
                    cache_control: take(&mut item, "cache_control"),
                });
            }
            "refusal" => {
                let text = take_string(&mut item, "refusal", &here)?
                    .ok_or_else(|| invalid_at(&join_path(&here, "refusal"), "required"))?;
                parts.push(Part::text(text));
            }
            "image_url" if images => {
                let ipath = join_path(&here, "image_url");
                let url = match take(&mut item, "image_url") {
                    Some(Value::String(url)) => url,
                    Some(Value::Object(mut image)) => take_string(&mut image, "url", &ipath)?
                        .ok_or_else(|| invalid_at(&join_path(&ipath, "url"), "required"))?,
                    Some(_) => return Err(invalid_at(&ipath, "expected an object")),
                    None => return Err(invalid_at(&ipath, "required")),
                };
                parts.push(Part::Image {
                    source: image_source(url),
                    cache_control: take(&mut item, "cache_control"),
                });
            }
            "image_url" => {
                return Err(invalid_at(
                    &join_path(&here, "type"),
                    "image parts are only allowed in user messages",
                ));
            }
            other => {
                return Err(invalid_at(
                    &join_path(&here, "type"),
                    &format!("unsupported content part type '{other}'"),
                ));
            }
        }
    }
    Ok(parts)
}

/// A `data:<type>;base64,<data>` URL becomes inline base64; anything else stays a URL.
pub(crate) fn image_source(url: String) -> ImageSource {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((meta, data)) = rest.split_once(',')
        && let Some(media_type) = meta.strip_suffix(";base64")
    {
        let media_type = if media_type.is_empty() {
            "application/octet-stream"
        } else {
            media_type
        };
        return ImageSource::Base64 {
            media_type: media_type.to_owned(),
            data: data.to_owned(),
        };
    }
    ImageSource::Url { url }
}

fn decode_assistant(mut m: Map<String, Value>, path: &str) -> Result<Turn, ApiError> {
    let mut parts = Vec::new();
    let reasoning = match take_string(&mut m, "reasoning_content", path)? {
        Some(text) => Some(text),
        None => take_string(&mut m, "reasoning", path)?,
    };
    if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
        parts.push(Part::Thinking {
            text,
            signature: None,
            redacted: None,
        });
    }
    if let Some(content) = take(&mut m, "content") {
        let content_path = join_path(path, "content");
        for part in decode_content(content, &content_path, false)? {
            if !matches!(&part, Part::Text { text, .. } if text.is_empty()) {
                parts.push(part);
            }
        }
    }
    if let Some(calls) = take(&mut m, "tool_calls") {
        let cpath = join_path(path, "tool_calls");
        let Value::Array(calls) = calls else {
            return Err(invalid_at(&cpath, "expected an array"));
        };
        for (j, call) in calls.into_iter().enumerate() {
            let here = format!("{cpath}.{j}");
            let mut call = expect_object(call, &here)?;
            let id = take_string(&mut call, "id", &here)?
                .ok_or_else(|| invalid_at(&join_path(&here, "id"), "required"))?;
            match take_string(&mut call, "type", &here)?.as_deref() {
                None | Some("function") => {}
                Some(other) => {
                    return Err(invalid_at(
                        &join_path(&here, "type"),
                        &format!("unsupported tool call type '{other}'"),
                    ));
                }
            }
            let fpath = join_path(&here, "function");
            let mut function = match take(&mut call, "function") {
                Some(f) => expect_object(f, &fpath)?,
                None => return Err(invalid_at(&fpath, "required")),
            };
            let name = take_string(&mut function, "name", &fpath)?
                .ok_or_else(|| invalid_at(&join_path(&fpath, "name"), "required"))?;
            let arguments = match take(&mut function, "arguments") {
                None => Value::Object(Map::new()),
                Some(Value::String(text)) => parse_arguments(&text),
                Some(object @ Value::Object(_)) => object,
                Some(_) => {
                    return Err(invalid_at(
                        &join_path(&fpath, "arguments"),
                        "expected a JSON string",
                    ));
                }
            };
            parts.push(Part::ToolCall {
                id,
                name,
                arguments,
            });
        }
    }
    Ok(Turn {
        role: Role::Assistant,
        parts,
    })
}

fn decode_tool_choice(choice: Value) -> Result<ToolChoice, ApiError> {
    match choice {
        Value::String(mode) => match mode.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            other => Err(invalid_at(
                "tool_choice",
                &format!("unsupported value '{other}' (expected auto, none or required)"),
            )),
        },
        Value::Object(mut choice) => {
            match take_string(&mut choice, "type", "tool_choice")?.as_deref() {
                Some("function") => {}
                _ => {
                    return Err(invalid_at(
                        "tool_choice.type",
                        "expected \"function\" for an object tool_choice",
                    ));
                }
            }
            let mut function = match take(&mut choice, "function") {
                Some(f) => expect_object(f, "tool_choice.function")?,
                None => return Err(invalid_at("tool_choice.function", "required")),
            };
            let name = take_string(&mut function, "name", "tool_choice.function")?
                .ok_or_else(|| invalid_at("tool_choice.function.name", "required"))?;
            Ok(ToolChoice::Tool { name })
        }
        _ => Err(invalid_at("tool_choice", "expected a string or an object")),
    }
}

fn decode_response_format(format: Value) -> Result<Option<OutputSchema>, ApiError> {
    let mut format = expect_object(format, "response_format")?;
    let kind = take_string(&mut format, "type", "response_format")?
        .ok_or_else(|| invalid_at("response_format.type", "required"))?;
    match kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(OutputSchema {
            name: None,
            schema: json!({"type": "object"}),
        })),
        "json_schema" => {
            let mut spec = match take(&mut format, "json_schema") {
                Some(spec) => expect_object(spec, "response_format.json_schema")?,
                None => return Err(invalid_at("response_format.json_schema", "required")),
            };
            let name = take_string(&mut spec, "name", "response_format.json_schema")?;
            let schema = match take(&mut spec, "schema") {
                None => json!({"type": "object"}),
                Some(schema @ Value::Object(_)) => schema,
                Some(_) => {
                    return Err(invalid_at(
                        "response_format.json_schema.schema",
                        "expected an object",
                    ));
                }
            };
            Ok(Some(OutputSchema { name, schema }))
        }
        other => Err(invalid_at(
            "response_format.type",
            &format!("unsupported value '{other}'"),
        )),
    }
}

// ---------------------------------------------------------------------------------------
// Request encoding.
// ---------------------------------------------------------------------------------------

fn encode_request(req: &Request) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(req.model.clone()));
    body.insert("messages".into(), Value::Array(encode_messages(&req.turns)));
    let tools = encode_tools(&req.tools, Dialect::OpenAiChat);
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &req.tool_choice {
            body.insert("tool_choice".into(), encode_tool_choice(choice));
        }
        if let Some(parallel) = req.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), Value::Bool(parallel));
        }
    }
    if let Some(max) = req.max_tokens {
        body.insert("max_tokens".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(k) = req.top_k {
        body.insert("top_k".into(), json!(k));
    }
    if let Some(seed) = req.seed {
        body.insert("seed".into(), json!(seed));
    }
    if !req.stop.is_empty() {
        body.insert("stop".into(), json!(req.stop));
    }
    body.insert("stream".into(), Value::Bool(req.stream));
    if let Some(thinking) = &req.thinking
        && let Some(effort) = effort_of(thinking)
    {
        body.insert("reasoning_effort".into(), Value::String(effort));
    }
    if let Some(schema) = &req.output_schema {
        body.insert("response_format".into(), encode_response_format(schema));
    }
    if let Some(extra) = req.extra_for(Dialect::OpenAiChat) {
        for (key, value) in extra {
            body.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    if req.stream {
        let mut options = match body.remove("stream_options") {
            Some(Value::Object(options)) => options,
            _ => Map::new(),
        };
        options.insert("include_usage".into(), Value::Bool(true));
        body.insert("stream_options".into(), Value::Object(options));
    } else {
        // OpenAI rejects stream_options on a non-streamed request.
        body.remove("stream_options");
    }
    Value::Object(body)
}

fn effort_of(thinking: &ThinkingConfig) -> Option<String> {
    if let Some(effort) = &thinking.effort {
        return Some(effort.clone());
    }
    thinking.budget_tokens.map(|budget| {
        match budget {
            0..=4096 => "low",
            4097..=16384 => "medium",
            _ => "high",
        }
        .to_owned()
    })
}

fn encode_tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool { name } => json!({"type": "function", "function": {"name": name}}),
    }
}

fn encode_response_format(schema: &OutputSchema) -> Value {
    if schema.name.is_none() && schema.schema == json!({"type": "object"}) {
        return json!({"type": "json_object"});
    }
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": schema.name.as_deref().unwrap_or("response"),
            "schema": schema.schema,
        }
    })
}

/// The `url` of an `image_url` part: a data URL for inline images.
pub(crate) fn image_url(source: &ImageSource) -> String {
    match source {
        ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        ImageSource::Url { url } => url.clone(),
    }
}

/// A single text part as a plain string, anything else as an array of parts.
fn content_value(items: Vec<Value>) -> Value {
    match items.as_slice() {
        [] => Value::String(String::new()),
        [only] if only.get("type").and_then(Value::as_str) == Some("text") => {
            only.get("text").cloned().unwrap_or_default()
        }
        _ => Value::Array(items),
    }
}

fn text_item(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn image_item(source: &ImageSource) -> Value {
    json!({"type": "image_url", "image_url": {"url": image_url(source)}})
}

fn encode_messages(turns: &[Turn]) -> Vec<Value> {
    let mut messages = Vec::with_capacity(turns.len());
    for turn in turns {
        match turn.role {
            Role::System => {
                let items = turn
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text { text, .. } => Some(text_item(text)),
                        _ => None,
                    })
                    .collect();
                messages.push(json!({"role": "system", "content": content_value(items)}));
            }
            Role::User => {
                let items = turn
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text { text, .. } => Some(text_item(text)),
                        Part::Image { source, .. } => Some(image_item(source)),
                        _ => None,
                    })
                    .collect();
                messages.push(json!({"role": "user", "content": content_value(items)}));
            }
            Role::Assistant => messages.push(encode_assistant(&turn.parts)),
            Role::Tool => {
                // OpenAI tool messages carry text only: images (and any stray text) go
                // to a user message right after the tool messages.
                let mut carried = Vec::new();
                for part in &turn.parts {
                    match part {
                        Part::ToolResult {
                            call_id, content, ..
                        } => {
                            let mut items = Vec::new();
                            for inner in content {
                                match inner {
                                    Part::Text { text, .. } => items.push(text_item(text)),
                                    Part::Image { source, .. } => carried.push(image_item(source)),
                                    _ => {}
                                }
                            }
                            messages.push(json!({
                                "role": "tool",
                                "tool_call_id": call_id,
                                "content": content_value(items),
                            }));
                        }
                        Part::Text { text, .. } => carried.push(text_item(text)),
                        Part::Image { source, .. } => carried.push(image_item(source)),
                        _ => {}
                    }
                }
                if !carried.is_empty() {
                    messages.push(json!({"role": "user", "content": content_value(carried)}));
                }
            }
        }
    }
    messages
}

fn encode_assistant(parts: &[Part]) -> Value {
    let mut text = String::new();
    let mut has_text = false;
    let mut calls = Vec::new();
    for part in parts {
        match part {
            Part::Text { text: t, .. } => {
                if has_text {
                    text.push('\n');
                }
                text.push_str(t);
                has_text = true;
            }
            Part::ToolCall {
                id,
                name,
                arguments,
            } => calls.push(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": arguments_text(arguments)},
            })),
            // Thinking is dropped: OpenAI-style backends do not take it back.
            _ => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = if has_text {
        Value::String(text)
    } else if calls.is_empty() {
        Value::String(String::new())
    } else {
        Value::Null
    };
    message.insert("content".into(), content);
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(message)
}

// ---------------------------------------------------------------------------------------
// Responses.
// ---------------------------------------------------------------------------------------

/// ngl usage from an OpenAI `usage` object (`input_tokens` excludes cache reads).
fn decode_usage(usage: &Value) -> Usage {
    let get = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0);
    let prompt = get(usage, "prompt_tokens");
    let cached = usage
        .get("prompt_tokens_details")
        .map(|d| get(d, "cached_tokens"))
        .unwrap_or(0);
    let reasoning = usage
        .get("completion_tokens_details")
        .map(|d| get(d, "reasoning_tokens"))
        .unwrap_or(0);
    Usage {
        input_tokens: prompt.saturating_sub(cached),
        output_tokens: get(usage, "completion_tokens"),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: reasoning,
    }
}

fn encode_usage(usage: &Usage) -> Value {
    let prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    })
}

fn decode_finish(reason: Option<&str>, stop_sequence: bool, tool_calls: bool) -> StopReason {
    match reason {
        Some("length") => StopReason::MaxTokens,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("content_filter") => StopReason::ContentFilter,
        _ if tool_calls => StopReason::ToolUse,
        _ if stop_sequence => StopReason::StopSequence,
        _ => StopReason::EndTurn,
    }
}

fn encode_finish(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence | StopReason::PauseTurn => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter | StopReason::Refusal => "content_filter",
    }
}

/// OpenAI ids start with `chatcmpl-`.
fn completion_id(id: &str) -> String {
    if id.starts_with("chatcmpl-") {
        id.to_owned()
    } else if id.is_empty() {
        "chatcmpl-glider".to_owned()
    } else {
        format!("chatcmpl-{id}")
    }
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
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| bad_gateway("backend reply has no choices"))?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| bad_gateway("backend reply: choices.0.message missing"))?;
    let mut parts = Vec::new();
    let reasoning = message
        .get("reasoning_content")
        .and_then(Value::as_str)
        .or_else(|| message.get("reasoning").and_then(Value::as_str));
    if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
        parts.push(Part::Thinking {
            text: text.to_owned(),
            signature: None,
            redacted: None,
        });
    }
    match message.get("content") {
        Some(Value::String(text)) if !text.is_empty() => parts.push(Part::text(text.clone())),
        Some(Value::Array(items)) => {
            for item in items {
                if let Some(text) = item.get("text").and_then(Value::as_str) {
                    parts.push(Part::text(text));
                }
            }
        }
        _ => {}
    }
    if let Some(refusal) = message.get("refusal").and_then(Value::as_str) {
        parts.push(Part::text(refusal));
    }
    let mut has_calls = false;
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in calls.iter().enumerate() {
            let function = call.get("function").ok_or_else(|| {
                bad_gateway(format!("backend reply: tool_calls.{i}.function missing"))
            })?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad_gateway(format!("backend reply: tool_calls.{i} has no name")))?;
            let arguments = match function.get("arguments") {
                Some(Value::String(text)) => parse_arguments(text),
                Some(object @ Value::Object(_)) => object.clone(),
                _ => Value::Object(Map::new()),
            };
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("call_{i}"), str::to_owned);
            parts.push(Part::ToolCall {
                id,
                name: name.to_owned(),
                arguments,
            });
            has_calls = true;
        }
    }
    let stop_sequence = choice.get("stop_reason").is_some_and(Value::is_string);
    let stop_reason = decode_finish(
        choice.get("finish_reason").and_then(Value::as_str),
        stop_sequence,
        has_calls,
    );
    let str_of = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(Response {
        id: str_of("id"),
        model: str_of("model"),
        parts,
        stop_reason,
        usage: value.get("usage").map(decode_usage).unwrap_or_default(),
    })
}

fn encode_response(resp: &Response) -> Value {
    let mut text = String::new();
    let mut has_text = false;
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for part in &resp.parts {
        match part {
            Part::Text { text: t, .. } => {
                if has_text {
                    text.push('\n');
                }
                text.push_str(t);
                has_text = true;
            }
            Part::Thinking { text: t, .. } => reasoning.push_str(t),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => calls.push(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": arguments_text(arguments)},
            })),
            Part::Image { .. } | Part::ToolResult { .. } | Part::Native { .. } => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = if has_text || calls.is_empty() {
        Value::String(text)
    } else {
        Value::Null
    };
    message.insert("content".into(), content);
    message.insert("refusal".into(), Value::Null);
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), Value::String(reasoning));
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    json!({
        "id": completion_id(&resp.id),
        "object": "chat.completion",
        "created": now_unix(),
        "model": resp.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": encode_finish(resp.stop_reason),
        }],
        "usage": encode_usage(&resp.usage),
    })
}

// ---------------------------------------------------------------------------------------
// Errors.
// ---------------------------------------------------------------------------------------

fn error_type_and_code(kind: ErrorKind) -> (&'static str, Option<&'static str>) {
    match kind {
        ErrorKind::InvalidRequest => ("invalid_request_error", None),
        ErrorKind::Authentication => ("authentication_error", Some("invalid_api_key")),
        ErrorKind::Permission => ("permission_error", None),
        ErrorKind::NotFound => ("invalid_request_error", Some("model_not_found")),
        ErrorKind::RequestTooLarge => ("invalid_request_error", Some("request_too_large")),
        ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
        ErrorKind::Internal | ErrorKind::BadGateway => ("server_error", None),
        ErrorKind::Unavailable => ("server_error", Some("service_unavailable")),
        ErrorKind::Timeout => ("server_error", Some("timeout")),
        ErrorKind::Overloaded => ("server_error", Some("overloaded")),
    }
}

fn error_object(err: &ApiError) -> Value {
    let (kind, code) = error_type_and_code(err.kind);
    json!({
        "message": err.message,
        "type": kind,
        "param": err.param,
        "code": code,
    })
}

// ---------------------------------------------------------------------------------------
// Stream decoding.
// ---------------------------------------------------------------------------------------

/// The part a stream decoder has open.
#[derive(Debug)]
enum Open {
    Text(usize),
    Thinking(usize),
    /// `wire` is the OpenAI `tool_calls[].index`.
    Tool {
        index: usize,
        wire: u64,
        id: String,
    },
}

#[derive(Debug, Default)]
struct ChatStreamDecoder {
    sse: SseParser,
    started: bool,
    ended: bool,
    open: Option<Open>,
    next_index: usize,
    seen_wire: Vec<u64>,
    finish_reason: Option<String>,
    stop_sequence: bool,
    saw_tool_calls: bool,
    usage: Usage,
}

impl ChatStreamDecoder {
    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(open) = self.open.take() {
            let index = match open {
                Open::Text(i) | Open::Thinking(i) | Open::Tool { index: i, .. } => i,
            };
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

    fn text_index(&mut self, out: &mut Vec<StreamEvent>) -> usize {
        if let Some(Open::Text(i)) = self.open {
            return i;
        }
        let index = self.start_part(PartKind::Text, out);
        self.open = Some(Open::Text(index));
        index
    }

    fn thinking_index(&mut self, out: &mut Vec<StreamEvent>) -> usize {
        if let Some(Open::Thinking(i)) = self.open {
            return i;
        }
        let index = self.start_part(PartKind::Thinking, out);
        self.open = Some(Open::Thinking(index));
        index
    }

    fn tool_fragment(&mut self, call: &Value, out: &mut Vec<StreamEvent>) -> Result<(), ApiError> {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let function = call.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let arguments = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(text)) => text.clone(),
            Some(object @ Value::Object(_)) => object.to_string(),
            _ => String::new(),
        };
        let wire = match call.get("index").and_then(Value::as_u64) {
            Some(wire) => wire,
            // No index: a fragment continues the open call unless it brings a new id.
            None => match &self.open {
                Some(Open::Tool { wire, .. }) if id.is_none() => *wire,
                _ => self.seen_wire.iter().max().map_or(0, |w| w + 1),
            },
        };
        let index = match &self.open {
            Some(Open::Tool {
                index,
                wire: open_wire,
                id: open_id,
            }) if *open_wire == wire && id.is_none_or(|id| id == open_id) => *index,
            _ => {
                if id.is_none() && self.seen_wire.contains(&wire) {
                    return Err(bad_gateway(format!(
                        "backend stream resumed tool call {wire} after another part started"
                    )));
                }
                let id = id.map_or_else(|| format!("call_{wire}"), str::to_owned);
                let kind = PartKind::ToolCall {
                    id: id.clone(),
                    name: name.unwrap_or_default().to_owned(),
                };
                let index = self.start_part(kind, out);
                self.open = Some(Open::Tool { index, wire, id });
                self.seen_wire.push(wire);
                self.saw_tool_calls = true;
                index
            }
        };
        if !arguments.is_empty() {
            out.push(StreamEvent::ToolArgsDelta {
                index,
                json: arguments,
            });
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) {
        self.close(out);
        let stop_reason = decode_finish(
            self.finish_reason.as_deref(),
            self.stop_sequence,
            self.saw_tool_calls,
        );
        out.push(StreamEvent::Finish {
            stop_reason,
            usage: self.usage,
        });
        self.ended = true;
    }

    fn fail(&mut self, message: String, out: &mut Vec<StreamEvent>) {
        out.push(StreamEvent::Error {
            error: bad_gateway(message),
        });
        self.ended = true;
    }

    fn data(&mut self, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), ApiError> {
        if data.trim() == "[DONE]" {
            if self.started {
                self.end(out);
            } else {
                self.fail("backend stream ended before any chunk".into(), out);
            }
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| bad_gateway(format!("malformed backend stream chunk: {e}")))?;
        if !chunk.is_object() {
            return Err(bad_gateway("malformed backend stream chunk: not an object"));
        }
        let is_error = chunk.get("error").is_some_and(|e| !e.is_null())
            || chunk.get("object").and_then(Value::as_str) == Some("error");
        if is_error {
            let (message, _) = error_fields(&chunk);
            self.fail(
                message.unwrap_or_else(|| "backend stream error".to_owned()),
                out,
            );
            return Ok(());
        }
        if !self.started {
            self.started = true;
            let str_of = |key: &str| {
                chunk
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            out.push(StreamEvent::Start {
                id: str_of("id"),
                model: str_of("model"),
                usage: Usage::default(),
            });
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage.merge(&decode_usage(usage));
        }
        let choices = chunk.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.get("delta") {
                let reasoning = delta
                    .get("reasoning_content")
                    .and_then(Value::as_str)
                    .or_else(|| delta.get("reasoning").and_then(Value::as_str));
                if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
                    let index = self.thinking_index(out);
                    out.push(StreamEvent::ThinkingDelta {
                        index,
                        text: text.to_owned(),
                    });
                }
                if let Some(text) = delta
                    .get("content")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    let index = self.text_index(out);
                    out.push(StreamEvent::TextDelta {
                        index,
                        text: text.to_owned(),
                    });
                }
                if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                    for call in calls {
                        self.tool_fragment(call, out)?;
                    }
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
                if choice.get("stop_reason").is_some_and(Value::is_string) {
                    self.stop_sequence = true;
                }
            }
        }
        Ok(())
    }
}

impl StreamDecoder for ChatStreamDecoder {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ApiError> {
        let mut out = Vec::new();
        for event in self.sse.feed(bytes) {
            if self.ended {
                break;
            }
            self.data(&event.data, &mut out)?;
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if let Some(event) = self.sse.finish()
            && !self.ended
            && let Err(error) = self.data(&event.data, &mut out)
        {
            out.push(StreamEvent::Error { error });
            self.ended = true;
        }
        if !self.ended {
            if self.started && self.finish_reason.is_some() {
                self.end(&mut out);
            } else {
                self.fail(
                    "backend stream ended before the completion finished".into(),
                    &mut out,
                );
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Stream encoding.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct ChatStreamEncoder {
    id: String,
    model: String,
    created: u64,
    ended: bool,
    tool_count: usize,
    current_tool: Option<usize>,
    start_usage: Usage,
}

impl ChatStreamEncoder {
    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        })
    }

    fn write(&self, out: &mut Vec<u8>, delta: Value) {
        write_sse_json(out, None, &self.chunk(delta, None));
    }
}

impl StreamEncoder for ChatStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        match event {
            StreamEvent::Start { id, model, usage } => {
                self.id = completion_id(id);
                self.model = model.clone();
                self.created = now_unix();
                self.start_usage = *usage;
                self.write(
                    out,
                    json!({"role": "assistant", "content": "", "refusal": null}),
                );
            }
            StreamEvent::PartStart { kind, .. } => {
                self.current_tool = None;
                if let PartKind::ToolCall { id, name } = kind {
                    let n = self.tool_count;
                    self.tool_count += 1;
                    self.current_tool = Some(n);
                    self.write(
                        out,
                        json!({"tool_calls": [{
                            "index": n,
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }]}),
                    );
                }
            }
            StreamEvent::TextDelta { text, .. } if !text.is_empty() => {
                self.write(out, json!({"content": text}));
            }
            StreamEvent::ThinkingDelta { text, .. } if !text.is_empty() => {
                self.write(out, json!({"reasoning_content": text}));
            }
            StreamEvent::ToolArgsDelta { json: args, .. } if !args.is_empty() => {
                if let Some(n) = self.current_tool {
                    self.write(
                        out,
                        json!({"tool_calls": [{"index": n, "function": {"arguments": args}}]}),
                    );
                }
            }
            StreamEvent::PartStop { .. } => self.current_tool = None,
            StreamEvent::Finish { stop_reason, usage } => {
                write_sse_json(
                    out,
                    None,
                    &self.chunk(json!({}), Some(encode_finish(*stop_reason))),
                );
                let mut total = self.start_usage;
                total.merge(usage);
                let usage_chunk = json!({
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": encode_usage(&total),
                });
                write_sse_json(out, None, &usage_chunk);
                write_sse(out, None, "[DONE]");
                self.ended = true;
            }
            StreamEvent::Error { error } => {
                write_sse_json(out, None, &json!({"error": error_object(error)}));
                self.ended = true;
            }
            StreamEvent::TextDelta { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::ToolArgsDelta { .. }
            | StreamEvent::ThinkingSignature { .. } => {}
        }
    }
}

// ---------------------------------------------------------------------------------------
// The codec.
// ---------------------------------------------------------------------------------------

impl Codec for OpenAiChat {
    fn dialect(&self) -> Dialect {
        Dialect::OpenAiChat
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
        Box::new(ChatStreamDecoder::default())
    }

    fn stream_encoder(&self) -> Box<dyn StreamEncoder> {
        Box::new(ChatStreamEncoder::default())
    }

    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn encode_error(&self, err: &ApiError) -> Value {
        json!({"error": error_object(err)})
    }

    fn decode_error(&self, status: u16, body: &[u8]) -> ApiError {
        backend_error(status, body)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use glider_ngl::ResponseBuilder;
    use glider_ngl::stream::events_of;

    /// Check the ngl stream grammar: Start, sequential parts from 0, Finish or Error last.
    pub(crate) fn assert_grammar(events: &[StreamEvent]) {
        let mut next = 0;
        let mut open: Option<usize> = None;
        let last = events.len().saturating_sub(1);
        for (i, event) in events.iter().enumerate() {
            match event {
                StreamEvent::Start { .. } => assert_eq!(i, 0, "Start must come first"),
                StreamEvent::PartStart { index, .. } => {
                    assert!(i > 0, "PartStart before Start");
                    assert_eq!(open, None, "part opened while another is open");
                    assert_eq!(*index, next, "indices count up from 0");
                    open = Some(*index);
                    next += 1;
                }
                StreamEvent::TextDelta { index, .. }
                | StreamEvent::ThinkingDelta { index, .. }
                | StreamEvent::ThinkingSignature { index, .. }
                | StreamEvent::ToolArgsDelta { index, .. } => {
                    assert_eq!(open, Some(*index), "delta outside its part");
                }
                StreamEvent::PartStop { index } => {
                    assert_eq!(open, Some(*index), "stop of a part that is not open");
                    open = None;
                }
                StreamEvent::Finish { .. } => {
                    assert_eq!(open, None, "Finish with an open part");
                    assert_eq!(i, last, "Finish must be last");
                }
                StreamEvent::Error { .. } => assert_eq!(i, last, "Error must be last"),
            }
        }
    }

    /// Decode `wire` fed in two pieces split at `split`, then finish.
    pub(crate) fn decode_split(codec: &dyn Codec, wire: &[u8], split: usize) -> Vec<StreamEvent> {
        let mut decoder = codec.stream_decoder();
        let mut events = decoder.feed(&wire[..split]).expect("first half");
        events.extend(decoder.feed(&wire[split..]).expect("second half"));
        events.extend(decoder.finish());
        events
    }

    /// Decode at every split point; all must agree and obey the grammar.
    pub(crate) fn decode_every_split(codec: &dyn Codec, wire: &[u8]) -> Vec<StreamEvent> {
        let whole = decode_split(codec, wire, wire.len());
        assert_grammar(&whole);
        for split in 0..wire.len() {
            assert_eq!(decode_split(codec, wire, split), whole, "split at {split}");
        }
        // Byte by byte too.
        let mut decoder = codec.stream_decoder();
        let mut events = Vec::new();
        for byte in wire {
            events.extend(decoder.feed(std::slice::from_ref(byte)).expect("byte"));
        }
        events.extend(decoder.finish());
        assert_eq!(events, whole, "byte by byte");
        whole
    }

    pub(crate) fn encode_stream(codec: &dyn Codec, events: &[StreamEvent]) -> Vec<u8> {
        let mut encoder = codec.stream_encoder();
        let mut out = Vec::new();
        for event in events {
            encoder.encode(event, &mut out);
        }
        out
    }

    fn sse_data(wire: &[u8]) -> Vec<String> {
        let mut parser = SseParser::new();
        let mut events = parser.feed(wire);
        events.extend(parser.finish());
        events.into_iter().map(|e| e.data).collect()
    }

    fn decode(body: Value) -> Result<Request, ApiError> {
        OpenAiChat.decode_request(body.to_string().as_bytes())
    }

    fn full_request() -> Value {
        json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "developer", "content": [{"type": "text", "text": "Prefer Rust."}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in these?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}
                ]},
                {"role": "assistant", "content": null, "reasoning_content": "Need both files.",
                 "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.rs\"}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"b.rs\"}"}}
                 ]},
                {"role": "tool", "tool_call_id": "call_a", "content": "fn a() {}"},
                {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "fn b() {}"}]},
                {"role": "assistant", "content": "Both read."},
                {"role": "user", "content": "Thanks"}
            ],
            "tools": [
                {"type": "function", "function": {
                    "name": "read_file", "description": "Read a file",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
                    "strict": true}},
                {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch"}}
            ],
            "tool_choice": {"type": "function", "function": {"name": "read_file"}},
            "parallel_tool_calls": true,
            "max_completion_tokens": 1024,
            "max_tokens": 99,
            "temperature": 0.2,
            "top_p": 0.9,
            "seed": 42,
            "stop": ["END", "STOP"],
            "stream": true,
            "stream_options": {"include_usage": true},
            "reasoning_effort": "high",
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "answer",
                "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                "strict": true}},
            "user": "user-123",
            "metadata": {"session": "s1"},
            "frequency_penalty": 0.5,
            "logprobs": false
        })
    }

    fn read_call(id: &str, path: &str) -> Part {
        Part::ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: json!({"path": path}),
        }
    }

    fn result(call_id: &str, text: &str) -> Part {
        Part::ToolResult {
            call_id: call_id.into(),
            name: None,
            content: vec![Part::text(text)],
            is_error: false,
        }
    }

    #[test]
    fn decodes_every_request_feature() {
        let req = decode(full_request()).expect("valid request");
        assert_eq!(req.model, "gpt-4o");
        assert_eq!(
            req.turns,
            vec![
                Turn::text(Role::System, "You are terse."),
                Turn::text(Role::System, "Prefer Rust."),
                Turn {
                    role: Role::User,
                    parts: vec![
                        Part::text("What is in these?"),
                        Part::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/png".into(),
                                data: "iVBORw0KGgo=".into()
                            },
                            cache_control: None
                        },
                        Part::Image {
                            source: ImageSource::Url {
                                url: "https://example.com/cat.jpg".into()
                            },
                            cache_control: None
                        },
                    ]
                },
                Turn {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Thinking {
                            text: "Need both files.".into(),
                            signature: None,
                            redacted: None
                        },
                        read_call("call_a", "a.rs"),
                        read_call("call_b", "b.rs"),
                    ]
                },
                Turn {
                    role: Role::Tool,
                    parts: vec![result("call_a", "fn a() {}"), result("call_b", "fn b() {}")]
                },
                Turn::text(Role::Assistant, "Both read."),
                Turn::text(Role::User, "Thanks"),
            ]
        );
        assert_eq!(req.tools.len(), 2);
        assert_eq!(req.tools[0].name, "read_file");
        assert_eq!(req.tools[0].description.as_deref(), Some("Read a file"));
        assert_eq!(
            req.tools[0].parameters,
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
        );
        assert_eq!(req.tools[0].native, None);
        assert_eq!(req.tools[1].name, "apply_patch");
        assert_eq!(
            req.tools[1].native,
            Some(NativeTool {
                dialect: Dialect::OpenAiChat,
                raw: json!({"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch"}})
            })
        );
        assert_eq!(
            req.tool_choice,
            Some(ToolChoice::Tool {
                name: "read_file".into()
            })
        );
        assert_eq!(req.parallel_tool_calls, Some(true));
        assert_eq!(req.max_tokens, Some(1024), "max_completion_tokens wins");
        assert_eq!(req.temperature, Some(0.2));
        assert_eq!(req.top_p, Some(0.9));
        assert_eq!(req.top_k, None);
        assert_eq!(req.seed, Some(42));
        assert_eq!(req.stop, vec!["END".to_owned(), "STOP".to_owned()]);
        assert!(req.stream);
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
                name: Some("answer".into()),
                schema: json!({"type": "object", "properties": {"ok": {"type": "boolean"}}})
            })
        );
        assert_eq!(
            req.metadata,
            Some(json!({"session": "s1", "user": "user-123"}))
        );
        let extra = req.extra_for(Dialect::OpenAiChat).expect("extras");
        assert_eq!(
            Value::Object(extra.clone()),
            json!({
                "stream_options": {"include_usage": true},
                "user": "user-123",
                "metadata": {"session": "s1"},
                "frequency_penalty": 0.5,
                "logprobs": false
            })
        );
    }

    #[test]
    fn decodes_request_variants() {
        let req = decode(json!({
            "model": "qwen3",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "reasoning": "thinking out loud",
                 "tool_calls": [{"id": "c1", "type": "function",
                                 "function": {"name": "ls", "arguments": "not json"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "a b"},
                {"role": "user", "content": [{"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}}]}
            ],
            "stop": "###",
            "max_tokens": 64,
            "top_k": 40,
            "tool_choice": "required",
            "response_format": {"type": "json_object"}
        }))
        .expect("valid");
        assert_eq!(req.stop, vec!["###".to_owned()]);
        assert_eq!(req.max_tokens, Some(64));
        assert_eq!(req.top_k, Some(40));
        assert!(!req.stream);
        assert_eq!(req.tool_choice, Some(ToolChoice::Required));
        assert_eq!(
            req.output_schema,
            Some(OutputSchema {
                name: None,
                schema: json!({"type": "object"})
            })
        );
        assert_eq!(req.extra, None);
        assert_eq!(req.metadata, None);
        assert_eq!(
            req.turns[1].parts,
            vec![
                Part::Thinking {
                    text: "thinking out loud".into(),
                    signature: None,
                    redacted: None
                },
                Part::ToolCall {
                    id: "c1".into(),
                    name: "ls".into(),
                    arguments: json!("not json")
                },
            ]
        );
        assert_eq!(
            req.turns[3].parts,
            vec![Part::Text {
                text: "more".into(),
                cache_control: Some(json!({"type": "ephemeral"}))
            }]
        );
        for (choice, expected) in [
            ("auto", ToolChoice::Auto),
            ("none", ToolChoice::None),
            ("required", ToolChoice::Required),
        ] {
            let req = decode(json!({"model": "m", "messages": [], "tool_choice": choice}))
                .expect("valid");
            assert_eq!(req.tool_choice, Some(expected));
        }
        let req = decode(json!({"model": "m", "messages": [], "top_k": -1,
                                "response_format": {"type": "text"}}))
        .expect("valid");
        assert_eq!(req.top_k, None);
        assert_eq!(req.output_schema, None);
    }

    #[test]
    fn rejects_bad_requests_with_field_names() {
        let cases = [
            (json!({"messages": []}), "model"),
            (json!({"model": "m"}), "messages"),
            (json!({"model": "m", "messages": {}}), "messages"),
            (json!({"model": 5, "messages": []}), "model"),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": 7}]}),
                "messages.0.content",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user"}]}),
                "messages.0.content",
            ),
            (
                json!({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}),
                "messages.0.role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}),
                "messages.0.tool_call_id",
            ),
            (
                json!({"model": "m", "messages": [{"role": "system", "content": [
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}),
                "messages.0.content.0.type",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
                "messages.0.content.0.type",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
                "messages.0.tool_calls.0.id",
            ),
            (
                json!({"model": "m", "messages": [], "tool_choice": "sometimes"}),
                "tool_choice",
            ),
            (
                json!({"model": "m", "messages": [], "tools": [{"type": "function", "function": {}}]}),
                "tools.0.function.name",
            ),
            (json!({"model": "m", "messages": [], "stop": [1]}), "stop.0"),
            (
                json!({"model": "m", "messages": [], "max_tokens": -3}),
                "max_tokens",
            ),
            (
                json!({"model": "m", "messages": [], "temperature": "hot"}),
                "temperature",
            ),
            (
                json!({"model": "m", "messages": [], "stream": "yes"}),
                "stream",
            ),
            (json!({"model": "m", "messages": [], "user": 1}), "user"),
            (
                json!({"model": "m", "messages": [], "response_format": {"type": "yaml"}}),
                "response_format.type",
            ),
        ];
        for (body, field) in cases {
            let err = decode(body.clone()).expect_err(&body.to_string());
            assert_eq!(err.kind, ErrorKind::InvalidRequest, "{body}");
            assert_eq!(err.param.as_deref(), Some(field), "{body}: {}", err.message);
            assert!(err.message.starts_with(field), "{}", err.message);
        }
        let err = OpenAiChat
            .decode_request(b"{\"model\": ")
            .expect_err("bad json");
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert!(err.message.contains("invalid JSON"), "{}", err.message);
        let err = OpenAiChat
            .decode_request(b"[1]")
            .expect_err("not an object");
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
    }

    #[test]
    fn encodes_request_for_openai_style_backends() {
        let req = Request {
            model: "qwen3-coder".into(),
            turns: vec![
                Turn::text(Role::System, "Be brief."),
                Turn {
                    role: Role::User,
                    parts: vec![
                        Part::text("Look:"),
                        Part::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/jpeg".into(),
                                data: "/9j/AAA".into(),
                            },
                            cache_control: Some(json!({"type": "ephemeral"})),
                        },
                    ],
                },
                Turn {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Thinking {
                            text: "hmm".into(),
                            signature: Some("sig".into()),
                            redacted: None,
                        },
                        Part::text("Reading."),
                        read_call("toolu_1", "a.rs"),
                        Part::ToolCall {
                            id: "toolu_2".into(),
                            name: "run".into(),
                            arguments: json!("raw text"),
                        },
                    ],
                },
                Turn {
                    role: Role::Tool,
                    parts: vec![
                        Part::ToolResult {
                            call_id: "toolu_1".into(),
                            name: Some("read_file".into()),
                            content: vec![
                                Part::text("fn a() {}"),
                                Part::Image {
                                    source: ImageSource::Url {
                                        url: "https://x/shot.png".into(),
                                    },
                                    cache_control: None,
                                },
                            ],
                            is_error: false,
                        },
                        Part::ToolResult {
                            call_id: "toolu_2".into(),
                            name: None,
                            content: vec![Part::text("exit 1")],
                            is_error: true,
                        },
                    ],
                },
            ],
            tools: vec![
                ToolDef {
                    name: "read_file".into(),
                    description: Some("Read".into()),
                    parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
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
            parallel_tool_calls: Some(false),
            max_tokens: Some(2048),
            temperature: Some(0.7),
            top_k: Some(20),
            stop: vec!["</done>".into()],
            stream: true,
            thinking: Some(ThinkingConfig {
                budget_tokens: Some(10_000),
                effort: None,
            }),
            output_schema: Some(OutputSchema {
                name: None,
                schema: json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
            }),
            metadata: Some(json!({"user_id": "u1"})),
            extra: Some(DialectExtra {
                dialect: Dialect::Anthropic,
                fields: Map::from_iter([("context_management".to_owned(), json!({}))]),
            }),
            ..Request::default()
        };
        let body = OpenAiChat.encode_request(&req);
        assert_eq!(
            body,
            json!({
                "model": "qwen3-coder",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": [
                        {"type": "text", "text": "Look:"},
                        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/AAA"}}
                    ]},
                    {"role": "assistant", "content": "Reading.", "tool_calls": [
                        {"id": "toolu_1", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\"path\":\"a.rs\"}"}},
                        {"id": "toolu_2", "type": "function",
                         "function": {"name": "run", "arguments": "raw text"}}
                    ]},
                    {"role": "tool", "tool_call_id": "toolu_1", "content": "fn a() {}"},
                    {"role": "tool", "tool_call_id": "toolu_2", "content": "exit 1"},
                    {"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": "https://x/shot.png"}}
                    ]}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "read_file", "description": "Read",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
                "tool_choice": "auto",
                "parallel_tool_calls": false,
                "max_tokens": 2048,
                "temperature": 0.7,
                "top_k": 20,
                "stop": ["</done>"],
                "stream": true,
                "reasoning_effort": "medium",
                "response_format": {"type": "json_schema", "json_schema": {
                    "name": "response",
                    "schema": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn encode_without_tools_or_stream_omits_tool_fields_and_stream_options() {
        let mut req = decode(json!({
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "stream_options": {"include_usage": false},
            "tool_choice": "none",
            "service_tier": "flex"
        }))
        .expect("valid");
        let body = OpenAiChat.encode_request(&req);
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
                   "stream": false, "service_tier": "flex"})
        );
        req.stream = true;
        let body = OpenAiChat.encode_request(&req);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert_eq!(body["service_tier"], json!("flex"));
    }

    #[test]
    fn request_round_trips() {
        let mut source = full_request();
        // Reasoning in history is dropped on encode; everything else survives.
        source["messages"][3]
            .as_object_mut()
            .expect("assistant")
            .remove("reasoning_content");
        let first = decode(source).expect("valid");
        let encoded = OpenAiChat.encode_request(&first);
        let second = OpenAiChat
            .decode_request(encoded.to_string().as_bytes())
            .expect("re-decodes");
        assert_eq!(second, first);
        assert_eq!(encoded["max_tokens"], json!(1024));
        assert_eq!(
            encoded["messages"][1],
            json!({"role": "system", "content": "Prefer Rust."})
        );
    }

    fn full_response() -> Value {
        json!({
            "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
            "object": "chat.completion",
            "created": 1741570283,
            "model": "deepseek-r1",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me look.",
                    "reasoning_content": "User wants a file.",
                    "refusal": null,
                    "tool_calls": [
                        {"id": "call_xyz", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\"path\": \"src/main.rs\"}"}}
                    ],
                    "annotations": []
                },
                "logprobs": null,
                "finish_reason": "tool_calls"
            }],
            "usage": {
                "prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
                "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 12, "audio_tokens": 0}
            },
            "service_tier": "default",
            "system_fingerprint": "fp_fc9f1d7035"
        })
    }

    #[test]
    fn decodes_response() {
        let resp = OpenAiChat
            .decode_response(full_response().to_string().as_bytes())
            .expect("valid");
        assert_eq!(resp.id, "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG");
        assert_eq!(resp.model, "deepseek-r1");
        assert_eq!(
            resp.parts,
            vec![
                Part::Thinking {
                    text: "User wants a file.".into(),
                    signature: None,
                    redacted: None
                },
                Part::text("Let me look."),
                read_call("call_xyz", "src/main.rs"),
            ]
        );
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.usage,
            Usage {
                input_tokens: 93,
                output_tokens: 46,
                cache_read_tokens: 1024,
                cache_write_tokens: 0,
                reasoning_tokens: 12
            }
        );
    }

    #[test]
    fn decodes_finish_reasons() {
        let body = |finish: &str, extra: Value| {
            let mut choice = json!({"index": 0, "message": {"role": "assistant", "content": "x"},
                                    "finish_reason": finish});
            if let (Some(c), Value::Object(more)) = (choice.as_object_mut(), extra) {
                c.extend(more);
            }
            json!({"id": "1", "model": "m", "choices": [choice]}).to_string()
        };
        let reason = |finish: &str, extra: Value| {
            OpenAiChat
                .decode_response(body(finish, extra).as_bytes())
                .expect("valid")
                .stop_reason
        };
        assert_eq!(reason("stop", json!({})), StopReason::EndTurn);
        assert_eq!(
            reason("stop", json!({"stop_reason": "###"})),
            StopReason::StopSequence
        );
        assert_eq!(
            reason("stop", json!({"stop_reason": 128009})),
            StopReason::EndTurn
        );
        assert_eq!(reason("length", json!({})), StopReason::MaxTokens);
        assert_eq!(reason("tool_calls", json!({})), StopReason::ToolUse);
        assert_eq!(
            reason("content_filter", json!({})),
            StopReason::ContentFilter
        );
        // vLLM with a named tool_choice answers "stop" with tool calls.
        let vllm = json!({"id": "1", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]});
        let resp = OpenAiChat
            .decode_response(vllm.to_string().as_bytes())
            .expect("valid");
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.parts,
            vec![Part::ToolCall {
                id: "c".into(),
                name: "f".into(),
                arguments: json!({})
            }]
        );
    }

    #[test]
    fn rejects_garbage_responses_as_bad_gateway() {
        for body in [
            &b"<html>502</html>"[..],
            b"{\"id\": \"x\"}",
            b"{\"choices\": []}",
            b"{\"choices\": [{\"message\": {\"tool_calls\": [{\"function\": {}}]}}]}",
        ] {
            let err = OpenAiChat.decode_response(body).expect_err("garbage");
            assert_eq!(err.kind, ErrorKind::BadGateway);
        }
        let err = OpenAiChat
            .decode_response(
                br#"{"error": {"message": "model overloaded", "type": "server_error"}}"#,
            )
            .expect_err("error body");
        assert_eq!(err.message, "model overloaded");
    }

    #[test]
    fn encodes_response_and_round_trips() {
        let resp = Response {
            id: "msg_01".into(),
            model: "claude-local".into(),
            parts: vec![
                Part::Thinking {
                    text: "plan".into(),
                    signature: Some("s".into()),
                    redacted: None,
                },
                read_call("toolu_9", "x.rs"),
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 7,
                cache_read_tokens: 90,
                cache_write_tokens: 0,
                reasoning_tokens: 3,
            },
        };
        let body = OpenAiChat.encode_response(&resp);
        assert_eq!(body["id"], json!("chatcmpl-msg_01"));
        assert_eq!(body["object"], json!("chat.completion"));
        assert!(body["created"].as_u64().expect("created") > 1_700_000_000);
        assert_eq!(body["model"], json!("claude-local"));
        let choice = &body["choices"][0];
        assert_eq!(choice["index"], json!(0));
        assert_eq!(choice["finish_reason"], json!("tool_calls"));
        assert_eq!(
            choice["message"],
            json!({"role": "assistant", "content": null, "refusal": null,
                   "reasoning_content": "plan",
                   "tool_calls": [{"id": "toolu_9", "type": "function",
                                   "function": {"name": "read_file", "arguments": "{\"path\":\"x.rs\"}"}}]})
        );
        assert_eq!(
            body["usage"],
            json!({"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                   "prompt_tokens_details": {"cached_tokens": 90},
                   "completion_tokens_details": {"reasoning_tokens": 3}})
        );
        let back = OpenAiChat
            .decode_response(body.to_string().as_bytes())
            .expect("valid");
        let mut expected = resp.clone();
        expected.id = "chatcmpl-msg_01".into();
        expected.parts[0] = Part::Thinking {
            text: "plan".into(),
            signature: None,
            redacted: None,
        };
        assert_eq!(back, expected);

        for (reason, wire) in [
            (StopReason::EndTurn, "stop"),
            (StopReason::StopSequence, "stop"),
            (StopReason::PauseTurn, "stop"),
            (StopReason::MaxTokens, "length"),
            (StopReason::ContentFilter, "content_filter"),
            (StopReason::Refusal, "content_filter"),
        ] {
            let plain = Response {
                id: "chatcmpl-1".into(),
                model: "m".into(),
                parts: vec![Part::text("hi")],
                stop_reason: reason,
                usage: Usage::default(),
            };
            let body = OpenAiChat.encode_response(&plain);
            assert_eq!(body["choices"][0]["finish_reason"], json!(wire));
            assert_eq!(body["choices"][0]["message"]["content"], json!("hi"));
            assert_eq!(body["id"], json!("chatcmpl-1"));
        }
    }

    const TEXT_STREAM: &str = concat!(
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there! \u{1F44B}\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[],\"usage\":{\"prompt_tokens\":19,\"completion_tokens\":10,\"total_tokens\":29,\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}\n\n",
        "data: [DONE]\n\n",
    );

    #[test]
    fn decodes_text_stream_at_every_split() {
        let events = decode_every_split(&OpenAiChat, TEXT_STREAM.as_bytes());
        assert_eq!(
            events,
            vec![
                StreamEvent::Start {
                    id: "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT".into(),
                    model: "gpt-4o-2024-08-06".into(),
                    usage: Usage::default()
                },
                StreamEvent::PartStart {
                    index: 0,
                    kind: PartKind::Text
                },
                StreamEvent::TextDelta {
                    index: 0,
                    text: "Hello".into()
                },
                StreamEvent::TextDelta {
                    index: 0,
                    text: " there! \u{1F44B}".into()
                },
                StreamEvent::PartStop { index: 0 },
                StreamEvent::Finish {
                    stop_reason: StopReason::EndTurn,
                    usage: Usage {
                        input_tokens: 19,
                        output_tokens: 10,
                        ..Usage::default()
                    }
                },
            ]
        );
    }

    const TOOL_STREAM: &str = concat!(
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"The user wants\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\" two files.\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Reading both.\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"chatcmpl-tool-a1\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\": \"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"a.rs\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"chatcmpl-tool-b2\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"{\\\"path\\\": \\\"b.rs\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":48,\"total_tokens\":168,\"prompt_tokens_details\":{\"cached_tokens\":100},\"completion_tokens_details\":{\"reasoning_tokens\":20}}}\n\n",
        "data: [DONE]\n\n",
    );

    fn tool_stream_events() -> Vec<StreamEvent> {
        vec![
            StreamEvent::Start {
                id: "chatcmpl-9f2c".into(),
                model: "Qwen/Qwen3-8B".into(),
                usage: Usage::default(),
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Thinking,
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "The user wants".into(),
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: " two files.".into(),
            },
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "Reading both.".into(),
            },
            StreamEvent::PartStop { index: 1 },
            StreamEvent::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "chatcmpl-tool-a1".into(),
                    name: "read_file".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "{\"path\": ".into(),
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "\"a.rs\"}".into(),
            },
            StreamEvent::PartStop { index: 2 },
            StreamEvent::PartStart {
                index: 3,
                kind: PartKind::ToolCall {
                    id: "chatcmpl-tool-b2".into(),
                    name: "read_file".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 3,
                json: "{\"path\": \"b.rs\"}".into(),
            },
            StreamEvent::PartStop { index: 3 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 20,
                    output_tokens: 48,
                    cache_read_tokens: 100,
                    cache_write_tokens: 0,
                    reasoning_tokens: 20,
                },
            },
        ]
    }

    #[test]
    fn decodes_parallel_tool_call_stream_at_every_split() {
        let events = decode_every_split(&OpenAiChat, TOOL_STREAM.as_bytes());
        assert_eq!(events, tool_stream_events());
        let mut builder = ResponseBuilder::new();
        for event in &events {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(resp.parts[2], read_call("chatcmpl-tool-a1", "a.rs"));
        assert_eq!(resp.parts[3], read_call("chatcmpl-tool-b2", "b.rs"));
    }

    #[test]
    fn stream_without_done_finishes_only_after_finish_reason() {
        // Ends after the usage chunk but without [DONE]: still complete.
        let cut = TOOL_STREAM.rfind("data: [DONE]").expect("done line");
        let events = decode_every_split(&OpenAiChat, &TOOL_STREAM.as_bytes()[..cut]);
        assert_eq!(events, tool_stream_events());
        // Cut before finish_reason: an error, never a fabricated Finish.
        let cut = TOOL_STREAM
            .find("\"finish_reason\":\"tool_calls\"")
            .expect("finish");
        let cut = TOOL_STREAM[..cut].rfind("data:").expect("line start");
        let events = decode_every_split(&OpenAiChat, &TOOL_STREAM.as_bytes()[..cut]);
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
        // Nothing at all.
        let mut decoder = OpenAiChat.stream_decoder();
        assert!(matches!(
            decoder.finish().as_slice(),
            [StreamEvent::Error { .. }]
        ));
    }

    #[test]
    fn stream_error_and_malformed_chunks() {
        let wire = concat!(
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
            "data: {\"error\":{\"message\":\"CUDA out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
            "data: [DONE]\n\n",
        );
        let events = decode_every_split(&OpenAiChat, wire.as_bytes());
        assert_eq!(events.len(), 4);
        match &events[3] {
            StreamEvent::Error { error } => {
                assert_eq!(error.message, "CUDA out of memory");
                assert_eq!(error.kind, ErrorKind::BadGateway);
            }
            other => panic!("expected error, got {other:?}"),
        }
        // vLLM's flat error object.
        let wire = b"data: {\"object\":\"error\",\"message\":\"max_tokens too large\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}\n\n";
        let events = decode_every_split(&OpenAiChat, wire);
        assert!(
            matches!(&events[..], [StreamEvent::Error { error }] if error.message == "max_tokens too large")
        );
        // Malformed JSON is an Err from feed.
        let mut decoder = OpenAiChat.stream_decoder();
        let err = decoder
            .feed(b"data: {\"id\": oops}\n\n")
            .expect_err("malformed");
        assert_eq!(err.kind, ErrorKind::BadGateway);
    }

    #[test]
    fn stream_tool_calls_without_index_or_with_reused_index() {
        // Some servers send every call with index 0 but distinct ids.
        let wire = concat!(
            "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{\\\"x\\\":1}\"}}]}}]}\n\n",
            "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let events = decode_every_split(&OpenAiChat, wire.as_bytes());
        let mut builder = ResponseBuilder::new();
        for event in &events {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(
            resp.parts,
            vec![
                Part::ToolCall {
                    id: "a".into(),
                    name: "f".into(),
                    arguments: json!({})
                },
                Part::ToolCall {
                    id: "b".into(),
                    name: "g".into(),
                    arguments: json!({"x": 1})
                },
            ]
        );
        assert_eq!(resp.stop_reason, StopReason::ToolUse, "stop + tool calls");
    }

    fn chunks(wire: &[u8]) -> Vec<Value> {
        sse_data(wire)
            .into_iter()
            .filter(|d| d != "[DONE]")
            .map(|d| serde_json::from_str(&d).expect("chunk JSON"))
            .collect()
    }

    #[test]
    fn encodes_stream_like_openai() {
        let mut events = tool_stream_events();
        if let StreamEvent::Start { usage, .. } = &mut events[0] {
            usage.input_tokens = 5;
        }
        let wire = encode_stream(&OpenAiChat, &events);
        let text = String::from_utf8(wire.clone()).expect("utf8");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(
            text.lines()
                .all(|l| l.is_empty() || l.starts_with("data: "))
        );
        let data = sse_data(&wire);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
        let chunks = chunks(&wire);
        for chunk in &chunks {
            assert_eq!(chunk["id"], json!("chatcmpl-9f2c"));
            assert_eq!(chunk["object"], json!("chat.completion.chunk"));
            assert_eq!(chunk["model"], json!("Qwen/Qwen3-8B"));
            assert!(chunk["created"].as_u64().expect("created") > 1_700_000_000);
        }
        let deltas: Vec<&Value> = chunks.iter().map(|c| &c["choices"][0]["delta"]).collect();
        assert_eq!(chunks.len(), 11);
        assert_eq!(
            *deltas[0],
            json!({"role": "assistant", "content": "", "refusal": null})
        );
        assert_eq!(chunks[0]["choices"][0]["index"], json!(0));
        assert_eq!(chunks[0]["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(*deltas[1], json!({"reasoning_content": "The user wants"}));
        assert_eq!(*deltas[2], json!({"reasoning_content": " two files."}));
        assert_eq!(*deltas[3], json!({"content": "Reading both."}));
        assert_eq!(
            *deltas[4],
            json!({"tool_calls": [{"index": 0, "id": "chatcmpl-tool-a1", "type": "function",
                                   "function": {"name": "read_file", "arguments": ""}}]})
        );
        assert_eq!(
            *deltas[5],
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": "}}]})
        );
        assert_eq!(
            *deltas[6],
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"a.rs\"}"}}]})
        );
        assert_eq!(
            *deltas[7],
            json!({"tool_calls": [{"index": 1, "id": "chatcmpl-tool-b2", "type": "function",
                                   "function": {"name": "read_file", "arguments": ""}}]})
        );
        assert_eq!(
            *deltas[8],
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"path\": \"b.rs\"}"}}]})
        );
        assert_eq!(*deltas[9], json!({}));
        assert_eq!(
            chunks[9]["choices"][0]["finish_reason"],
            json!("tool_calls")
        );
        assert_eq!(chunks[10]["choices"], json!([]));
        assert_eq!(
            chunks[10]["usage"],
            json!({"prompt_tokens": 120, "completion_tokens": 48, "total_tokens": 168,
                   "prompt_tokens_details": {"cached_tokens": 100},
                   "completion_tokens_details": {"reasoning_tokens": 20}})
        );
        // And our own decoder reads it back to the same events.
        let decoded = decode_every_split(&OpenAiChat, &wire);
        assert_eq!(decoded, tool_stream_events());
    }

    #[test]
    fn stream_encode_decode_round_trip_of_a_response() {
        let resp = Response {
            id: "chatcmpl-r".into(),
            model: "m".into(),
            parts: vec![
                Part::Thinking {
                    text: "t".into(),
                    signature: None,
                    redacted: None,
                },
                Part::text("answer"),
                read_call("c1", "a"),
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            },
        };
        let wire = encode_stream(&OpenAiChat, &events_of(&resp));
        let mut builder = ResponseBuilder::new();
        for event in decode_every_split(&OpenAiChat, &wire) {
            builder.push(&event);
        }
        assert_eq!(builder.finish().expect("complete"), resp);
    }

    #[test]
    fn encodes_stream_error_and_stops() {
        let events = vec![
            StreamEvent::Start {
                id: "x".into(),
                model: "m".into(),
                usage: Usage::default(),
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 0,
                text: "par".into(),
            },
            StreamEvent::Error {
                error: ApiError::new(ErrorKind::Timeout, "backend timed out"),
            },
            StreamEvent::Finish {
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
            },
        ];
        let wire = encode_stream(&OpenAiChat, &events);
        let data = sse_data(&wire);
        assert_eq!(data.len(), 3, "{data:?}");
        let error: Value = serde_json::from_str(&data[2]).expect("json");
        assert_eq!(
            error,
            json!({"error": {"message": "backend timed out", "type": "server_error",
                             "param": null, "code": "timeout"}})
        );
        assert_eq!(chunks(&wire)[0]["id"], json!("chatcmpl-x"));
        // Our decoder turns it back into an Error event.
        let decoded = decode_every_split(&OpenAiChat, &wire);
        assert!(
            matches!(decoded.last(), Some(StreamEvent::Error { error }) if error.message == "backend timed out")
        );
    }

    #[test]
    fn error_bodies() {
        let cases = [
            (
                ErrorKind::InvalidRequest,
                "invalid_request_error",
                Value::Null,
            ),
            (
                ErrorKind::Authentication,
                "authentication_error",
                json!("invalid_api_key"),
            ),
            (ErrorKind::Permission, "permission_error", Value::Null),
            (
                ErrorKind::NotFound,
                "invalid_request_error",
                json!("model_not_found"),
            ),
            (
                ErrorKind::RequestTooLarge,
                "invalid_request_error",
                json!("request_too_large"),
            ),
            (
                ErrorKind::RateLimit,
                "requests",
                json!("rate_limit_exceeded"),
            ),
            (ErrorKind::Internal, "server_error", Value::Null),
            (ErrorKind::BadGateway, "server_error", Value::Null),
            (
                ErrorKind::Unavailable,
                "server_error",
                json!("service_unavailable"),
            ),
            (ErrorKind::Overloaded, "server_error", json!("overloaded")),
        ];
        for (kind, wire_type, code) in cases {
            let body = OpenAiChat.encode_error(&ApiError::new(kind, "boom"));
            assert_eq!(
                body,
                json!({"error": {"message": "boom", "type": wire_type, "param": null, "code": code}})
            );
        }
        let body = OpenAiChat.encode_error(
            &ApiError::invalid("messages.0.content: required").with_param("messages.0.content"),
        );
        assert_eq!(body["error"]["param"], json!("messages.0.content"));

        let err = OpenAiChat.decode_error(
            404,
            br#"{"error": {"message": "The model `gpt-5` does not exist", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}"#,
        );
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert_eq!(err.message, "The model `gpt-5` does not exist");
        assert_eq!(err.param.as_deref(), Some("model"));
        let err = OpenAiChat.decode_error(
            400,
            br#"{"object": "error", "message": "This model's maximum context length is 4096 tokens.", "type": "BadRequestError", "param": null, "code": 400}"#,
        );
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert_eq!(
            err.message,
            "This model's maximum context length is 4096 tokens."
        );
        let err = OpenAiChat.decode_error(503, b"<html>Service Unavailable</html>\n");
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert_eq!(err.message, "<html>Service Unavailable</html>");
        let err = OpenAiChat.decode_error(500, b"");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert_eq!(err.message, "backend returned HTTP 500");
        let err = OpenAiChat.decode_error(429, br#"{"detail": "slow down"}"#);
        assert_eq!(err.kind, ErrorKind::RateLimit);
        assert_eq!(err.message, "slow down");
    }

    #[test]
    fn codec_basics() {
        assert_eq!(OpenAiChat.dialect(), Dialect::OpenAiChat);
        assert_eq!(OpenAiChat.stream_content_type(), "text/event-stream");
        assert_eq!(
            image_source("data:;base64,AAAA".into()),
            ImageSource::Base64 {
                media_type: "application/octet-stream".into(),
                data: "AAAA".into()
            }
        );
        assert_eq!(
            image_source("data:text/plain,hello".into()),
            ImageSource::Url {
                url: "data:text/plain,hello".into()
            }
        );
    }
}
