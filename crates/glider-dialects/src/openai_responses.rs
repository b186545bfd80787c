//! OpenAI Responses API codec (`POST /v1/responses`): request bodies, `Response` objects,
//! the typed SSE event stream (`response.created` … `response.completed`) and error
//! bodies, as Codex CLI (`wire_api = "responses"`) and the official `openai` SDK speak
//! them. Mapping choices and losses are listed below.
//!
//! # Requests
//! - `instructions` becomes a leading [`Role::System`] turn; `input` as a string is one
//!   user turn. `developer` and `system` messages become `System` turns in place.
//!   Consecutive assistant-side items (assistant messages, `reasoning`, `function_call`,
//!   `custom_tool_call`, `*_call`) merge into one `Assistant` turn; consecutive outputs
//!   merge into one `Tool` turn.
//! - `function_call` → `ToolCall` (id = `call_id`, arguments parsed). A `namespace` on a
//!   call is folded into the name as `namespace.name` and split again on encode.
//!   `custom_tool_call` → `ToolCall` whose arguments are the raw `input` string.
//!   Client-executed typed calls (`local_shell_call`, `shell_call`, `apply_patch_call`,
//!   `computer_call`, ...) → `ToolCall` named after the type without `_call`, arguments =
//!   the item's remaining fields; their `*_call_output` → `ToolResult` (non-string output
//!   kept as JSON text).
//! - `reasoning` → `Thinking`: text = summary texts joined with a blank line (or the
//!   `reasoning_text` content when there is no summary), `signature` = `encrypted_content`.
//!   The reasoning item `id` is dropped.
//! - Skipped (documented loss): hosted-tool records (`web_search_call`, `file_search_call`,
//!   `image_generation_call`, `code_interpreter_call`, `mcp_*`, `tool_search_*`),
//!   `compaction`, `item_reference`, and any other unknown item type; images given by
//!   `file_id` (Glider cannot fetch stored files); image `detail`; assistant `phase`.
//!   `input_file` and `input_audio` content are rejected with a 400.
//! - `tools`: `function` → [`ToolDef`]; every other type (`custom`, `web_search`,
//!   `namespace`, `local_shell`, `file_search`, `mcp`, ...) → `ToolDef.native` verbatim.
//!   Function `strict` is not kept: encoded function tools always say `strict: false`
//!   (Responses defaults to `true`, which rejects the loose schemas other dialects carry).
//! - `tool_choice` strings and `{type: function|custom, name}` are modelled; hosted-tool
//!   and `allowed_tools` choices stay raw in `extra`. `reasoning.effort` →
//!   [`ThinkingConfig::effort`] (`reasoning` stays in `extra` for `summary`); `text.format`
//!   `json_schema` → [`OutputSchema`] (`text` stays in `extra` for `verbosity`, `strict`).
//!   `metadata` and `user` become `Request.metadata = {"metadata": {...}, "user": "..."}`.
//!   Everything else (`store`, `include`, `prompt_cache_key`, `previous_response_id`,
//!   `service_tier`, `truncation`, ...) goes to `extra`. A decoded request always carries
//!   an `extra` of this dialect, which is how the encoder knows the request is native.
//!
//! # Encoding requests
//! A first all-text `System` turn becomes `instructions` (its text parts joined by a
//! newline); every other `System` turn is a `{role: "system"}` message in place
//! (`developer` is not restored). A call is written as `custom_tool_call` or a typed
//! `<name>_call` only when the request declares a native `custom` tool of that name or a
//! native tool of that type; otherwise it is a `function_call` (and its result a
//! `function_call_output`, as Codex sends for `local_shell`). Thinking is sent back as a
//! `reasoning` item with `encrypted_content` only when it has a signature and the request
//! came in this dialect; otherwise it is dropped (a foreign signature would be rejected).
//! Requests from other dialects get `store: false` and, when thinking is on, `include:
//! ["reasoning.encrypted_content"]`; a `budget_tokens`-only thinking request becomes an
//! effort (≤4096 low, ≤16384 medium, else high); no reasoning `summary` is asked for.
//! Not expressible and dropped: `stop`, `top_k`, `seed`, `ToolResult.is_error` (except
//! `apply_patch_call_output.status`), Anthropic `redacted` thinking, `cache_control`,
//! images inside assistant turns. `tool_choice` is sent only with a non-empty tool list.
//!
//! # Responses and streams
//! Each ngl part becomes one output item: `Text` → a `message` (one `output_text`),
//! `Thinking` → a `reasoning` item (one `summary_text`; signature → `encrypted_content`;
//! Anthropic redacted thinking is carried as `encrypted_content` with a
//! `glider.redacted_thinking:` prefix so it survives a Codex round trip), `ToolCall` → a
//! `function_call`; with no tool list at hand, arguments that are raw text rather than a
//! JSON object (an `apply_patch` patch) make a `custom_tool_call`, and the names
//! `local_shell`/`shell`/`computer` with an `action` object or `apply_patch` with an
//! `operation` object make typed calls. The stream encoder therefore announces a call on
//! its first non-blank argument character (typed names: at the end). Item ids derive
//! from the response id (`resp_<x>` → `msg_<x>_<n>`, ...; other ids get `resp_`).
//! `MaxTokens` / `ContentFilter` end as `status: "incomplete"` (`response.incomplete`).
//! Hosted-tool items in a backend reply (`web_search_call`, ...) are skipped.
//! Usage: OpenAI's `input_tokens` includes `cached_tokens` and `cache_write_tokens`,
//! ngl's does not (ngl follows Anthropic: `input_tokens` + `cache_read_tokens` +
//! `cache_write_tokens` = prompt size); the codec converts both ways. A stream error is
//! written as an `error` event (flat `code`/`message`/`param` as documented, plus the
//! nested `error` object the live API sends and the Python SDK raises on) followed by
//! `response.failed` (what Codex reads). `created_at` is the wall-clock time (the one
//! non-pure read in this module).

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use glider_ngl::stream::{PartKind, arguments_text, parse_arguments};
use glider_ngl::{
    ApiError, Dialect, DialectExtra, ErrorKind, ImageSource, NativeTool, OutputSchema, Part,
    Request, Response, Role, StopReason, StreamEvent, ThinkingConfig, ToolChoice, ToolDef, Turn,
    Usage,
};
use serde_json::{Map, Value, json};

use crate::framing::{SseParser, write_sse_json};
use crate::{Codec, StreamDecoder, StreamEncoder, parse_json};

/// The OpenAI Responses API dialect.
pub struct OpenAiResponses;

/// Prefix marking Anthropic redacted thinking carried in `encrypted_content`.
const REDACTED_PREFIX: &str = "glider.redacted_thinking:";

/// Item types ending in `_call` that record a hosted (server-side) tool run: nothing a
/// client executes, so they are not tool calls in ngl.
const HOSTED_CALLS: &[&str] = &[
    "web_search_call",
    "file_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "mcp_call",
    "tool_search_call",
];

/// Typed client-executed calls recognised in replies (name, the argument key that marks
/// them), so a reply can be re-encoded with its own item type.
const TYPED_CALLS: &[(&str, &str)] = &[
    ("local_shell", "action"),
    ("shell", "action"),
    ("apply_patch", "operation"),
    ("computer", "action"),
];

// ---------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------

fn invalid_at(path: &str, what: &str) -> ApiError {
    ApiError::invalid(format!("{path}: {what}")).with_param(path)
}

fn bad_gateway(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::BadGateway, message)
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `data:<media>;base64,<data>` → a base64 image source; anything else is a URL.
fn image_source(url: &str) -> ImageSource {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((meta, data)) = rest.split_once(',')
        && let Some(media_type) = meta.strip_suffix(";base64")
    {
        return ImageSource::Base64 {
            media_type: media_type.to_owned(),
            data: data.to_owned(),
        };
    }
    ImageSource::Url {
        url: url.to_owned(),
    }
}

fn image_url(source: &ImageSource) -> String {
    match source {
        ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        ImageSource::Url { url } => url.clone(),
    }
}

/// `name`, or `namespace.name` when the item carries a namespace.
fn qualified_name(item: &Value, name: &str) -> String {
    match str_field(item, "namespace").filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{ns}.{name}"),
        None => name.to_owned(),
    }
}

/// Insert `name` (and `namespace`, when the ngl name is `namespace.name`) into `item`.
fn put_name(item: &mut Map<String, Value>, name: &str) {
    match name.split_once('.') {
        Some((ns, tool)) if !ns.is_empty() && !tool.is_empty() => {
            item.insert("name".into(), Value::from(tool));
            item.insert("namespace".into(), Value::from(ns));
        }
        _ => {
            item.insert("name".into(), Value::from(name));
        }
    }
}

/// A thinking signature as it travels in `encrypted_content`, and back.
fn thinking_from_encrypted(text: String, encrypted: Option<&str>) -> Part {
    match encrypted {
        Some(enc) if enc.starts_with(REDACTED_PREFIX) => Part::Thinking {
            text,
            signature: None,
            redacted: Some(enc[REDACTED_PREFIX.len()..].to_owned()),
        },
        other => Part::Thinking {
            text,
            signature: other.map(str::to_owned),
            redacted: None,
        },
    }
}

/// How a tool call is written in this dialect.
#[derive(Debug, Clone, PartialEq)]
enum CallKind {
    Function,
    /// `custom_tool_call` with a free-text `input`.
    Custom,
    /// `<name>_call` with the arguments' fields spread into the item.
    Typed,
}

/// The kind of a call in a reply, where no tool list is at hand: typed names with their
/// marker argument, raw non-object text → custom, everything else → function.
fn reply_call_kind(name: &str, arguments: &Value) -> CallKind {
    if is_typed_call(name, arguments) {
        return CallKind::Typed;
    }
    match arguments {
        Value::String(text) if !starts_like_object(text) => CallKind::Custom,
        _ => CallKind::Function,
    }
}

fn is_typed_call(name: &str, arguments: &Value) -> bool {
    TYPED_CALLS
        .iter()
        .any(|(typed, key)| *typed == name && arguments.get(*key).is_some_and(Value::is_object))
}

fn starts_like_object(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// One output item for a tool call.
fn call_item(
    item_id: &str,
    call_id: &str,
    name: &str,
    arguments: &str,
    kind: &CallKind,
    status: &str,
) -> Value {
    let mut item = Map::new();
    item.insert("id".into(), Value::from(item_id));
    match kind {
        CallKind::Function => {
            item.insert("type".into(), Value::from("function_call"));
            item.insert("status".into(), Value::from(status));
            item.insert("arguments".into(), Value::from(arguments));
            item.insert("call_id".into(), Value::from(call_id));
            put_name(&mut item, name);
        }
        CallKind::Custom => {
            item.insert("type".into(), Value::from("custom_tool_call"));
            item.insert("status".into(), Value::from(status));
            item.insert("call_id".into(), Value::from(call_id));
            put_name(&mut item, name);
            item.insert("input".into(), Value::from(arguments));
        }
        CallKind::Typed => {
            item.insert("type".into(), Value::from(format!("{name}_call")));
            item.insert("status".into(), Value::from(status));
            item.insert("call_id".into(), Value::from(call_id));
            if let Value::Object(fields) = parse_arguments(arguments) {
                for (k, v) in fields {
                    item.entry(k).or_insert(v);
                }
            }
        }
    }
    Value::Object(item)
}

fn item_prefix(kind: &CallKind) -> &'static str {
    match kind {
        CallKind::Function => "fc",
        CallKind::Custom => "ctc",
        CallKind::Typed => "tc",
    }
}

fn message_item(item_id: &str, text: &str, status: &str) -> Value {
    json!({
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

fn reasoning_item(item_id: &str, text: &str, encrypted: Option<String>) -> Value {
    let summary = if text.is_empty() {
        json!([])
    } else {
        json!([{"type": "summary_text", "text": text}])
    };
    let mut item = json!({"id": item_id, "type": "reasoning", "summary": summary});
    if let (Some(enc), Value::Object(map)) = (encrypted, &mut item) {
        map.insert("encrypted_content".into(), Value::from(enc));
    }
    item
}

/// `resp_<x>` for any backend id (kept when it already is one).
fn response_id(id: &str) -> String {
    if id.starts_with("resp_") {
        id.to_owned()
    } else if id.is_empty() {
        "resp_glider".to_owned()
    } else {
        format!("resp_{id}")
    }
}

fn item_id(response_id: &str, prefix: &str, index: usize) -> String {
    let suffix = response_id.strip_prefix("resp_").unwrap_or(response_id);
    format!("{prefix}_{suffix}_{index}")
}

fn encode_usage(u: &Usage) -> Value {
    let input = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens;
    json!({
        "input_tokens": input,
        "input_tokens_details": {
            "cached_tokens": u.cache_read_tokens,
            "cache_write_tokens": u.cache_write_tokens,
        },
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": input + u.output_tokens,
    })
}

fn decode_usage(v: &Value) -> Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let cached = n(v.pointer("/input_tokens_details/cached_tokens"));
    let written = n(v.pointer("/input_tokens_details/cache_write_tokens"));
    Usage {
        input_tokens: n(v.get("input_tokens")).saturating_sub(cached + written),
        output_tokens: n(v.get("output_tokens")),
        cache_read_tokens: cached,
        cache_write_tokens: written,
        reasoning_tokens: n(v.pointer("/output_tokens_details/reasoning_tokens")),
    }
}

/// `(status, incomplete reason)` of a finished reply.
fn status_of(stop: StopReason) -> (&'static str, Option<&'static str>) {
    match stop {
        StopReason::MaxTokens => ("incomplete", Some("max_output_tokens")),
        StopReason::ContentFilter => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

/// The Response object, with every field the SDK's `Response` model declares.
struct ResponseShape<'a> {
    id: &'a str,
    model: &'a str,
    created_at: u64,
    status: &'a str,
    incomplete: Option<&'a str>,
    error: Option<Value>,
    output: Vec<Value>,
    usage: Option<&'a Usage>,
}

impl ResponseShape<'_> {
    fn into_value(self) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "background": false,
            "error": self.error,
            "incomplete_details": self.incomplete.map(|reason| json!({"reason": reason})),
            "instructions": null,
            "max_output_tokens": null,
            "model": self.model,
            "output": self.output,
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null},
            "store": false,
            "temperature": null,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": null,
            "truncation": "disabled",
            "usage": self.usage.map(encode_usage),
            "user": null,
            "metadata": {},
        })
    }
}

/// `(type, code)` of an error body, as the live OpenAI API labels them.
fn error_labels(kind: ErrorKind) -> (&'static str, Option<&'static str>) {
    match kind {
        ErrorKind::InvalidRequest => ("invalid_request_error", None),
        ErrorKind::Authentication => ("invalid_request_error", Some("invalid_api_key")),
        ErrorKind::Permission => ("invalid_request_error", Some("permission_denied")),
        ErrorKind::NotFound => ("invalid_request_error", Some("model_not_found")),
        ErrorKind::RequestTooLarge => ("invalid_request_error", Some("request_too_large")),
        ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
        ErrorKind::Internal
        | ErrorKind::BadGateway
        | ErrorKind::Unavailable
        | ErrorKind::Timeout
        | ErrorKind::Overloaded => ("server_error", None),
    }
}

/// The `code` of a failed response (`ResponseError.code` has a closed set of values).
fn failure_code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::RateLimit => "rate_limit_exceeded",
        ErrorKind::InvalidRequest | ErrorKind::RequestTooLarge => "invalid_prompt",
        _ => "server_error",
    }
}

/// The ngl kind of a streamed or failed-response error code.
fn kind_of_code(code: Option<&str>) -> ErrorKind {
    match code {
        Some("rate_limit_exceeded" | "insufficient_quota" | "too_many_requests") => {
            ErrorKind::RateLimit
        }
        Some(
            "invalid_prompt"
            | "context_length_exceeded"
            | "invalid_request_error"
            | "invalid_image"
            | "invalid_image_format"
            | "invalid_base64_image"
            | "invalid_image_url",
        ) => ErrorKind::InvalidRequest,
        _ => ErrorKind::BadGateway,
    }
}

/// An error carried by a `response.failed` / `error` event or a failed Response.
fn error_from_value(err: &Value, fallback: &str) -> ApiError {
    let code = str_field(err, "code").or_else(|| str_field(err, "type"));
    let message = str_field(err, "message")
        .filter(|m| !m.is_empty())
        .unwrap_or(fallback);
    let mut error = ApiError::new(kind_of_code(code), message);
    error.param = str_field(err, "param").map(str::to_owned);
    error
}

// ---------------------------------------------------------------------------------------
// Request decoding
// ---------------------------------------------------------------------------------------

fn opt_bool(obj: &mut Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match obj.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(b)),
        Some(_) => Err(invalid_at(key, "expected boolean")),
    }
}

fn opt_f64(obj: &mut Map<String, Value>, key: &str) -> Result<Option<f64>, ApiError> {
    match obj.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(_) => Err(invalid_at(key, "expected number")),
    }
}

fn opt_u32(obj: &mut Map<String, Value>, key: &str) -> Result<Option<u32>, ApiError> {
    match obj.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| invalid_at(key, "expected a non-negative integer")),
        Some(_) => Err(invalid_at(key, "expected integer")),
    }
}

fn required_str<'a>(item: &'a Value, path: &str, key: &str) -> Result<&'a str, ApiError> {
    match item.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(invalid_at(&format!("{path}.{key}"), "required")),
        Some(_) => Err(invalid_at(&format!("{path}.{key}"), "expected string")),
    }
}

/// Builds turns from `input` items.
#[derive(Default)]
struct InputDecoder {
    turns: Vec<Turn>,
    /// call id → tool name, so tool results can name their tool.
    call_names: HashMap<String, String>,
}

impl InputDecoder {
    fn push_assistant(&mut self, part: Part) {
        if let Part::ToolCall { id, name, .. } = &part {
            self.call_names.insert(id.clone(), name.clone());
        }
        match self.turns.last_mut() {
            Some(turn) if turn.role == Role::Assistant => turn.parts.push(part),
            _ => self.turns.push(Turn {
                role: Role::Assistant,
                parts: vec![part],
            }),
        }
    }

    fn push_result(&mut self, call_id: &str, content: Vec<Part>, is_error: bool) {
        let part = Part::ToolResult {
            call_id: call_id.to_owned(),
            name: self.call_names.get(call_id).cloned(),
            content,
            is_error,
        };
        match self.turns.last_mut() {
            Some(turn) if turn.role == Role::Tool => turn.parts.push(part),
            _ => self.turns.push(Turn {
                role: Role::Tool,
                parts: vec![part],
            }),
        }
    }

    fn item(&mut self, index: usize, item: &Value) -> Result<(), ApiError> {
        let path = format!("input[{index}]");
        if !item.is_object() {
            return Err(invalid_at(&path, "expected object"));
        }
        let kind = match item.get("type") {
            None | Some(Value::Null) if item.get("role").is_some() => "message",
            None | Some(Value::Null) => {
                return Err(invalid_at(&format!("{path}.type"), "required"));
            }
            Some(Value::String(t)) => t.as_str(),
            Some(_) => return Err(invalid_at(&format!("{path}.type"), "expected string")),
        };
        match kind {
            "message" => self.message(&path, item),
            "function_call" => {
                let call_id = required_str(item, &path, "call_id")?;
                let name = required_str(item, &path, "name")?;
                let arguments = match item.get("arguments") {
                    Some(Value::String(s)) => parse_arguments(s),
                    None | Some(Value::Null) => Value::Object(Map::new()),
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(_) => {
                        return Err(invalid_at(
                            &format!("{path}.arguments"),
                            "expected a JSON string",
                        ));
                    }
                };
                self.push_assistant(Part::ToolCall {
                    id: call_id.to_owned(),
                    name: qualified_name(item, name),
                    arguments,
                });
                Ok(())
            }
            "custom_tool_call" => {
                let call_id = required_str(item, &path, "call_id")?;
                let name = required_str(item, &path, "name")?;
                let input = required_str(item, &path, "input")?;
                self.push_assistant(Part::ToolCall {
                    id: call_id.to_owned(),
                    name: qualified_name(item, name),
                    arguments: Value::String(input.to_owned()),
                });
                Ok(())
            }
            "function_call_output" | "custom_tool_call_output" => {
                let call_id = required_str(item, &path, "call_id")?;
                let (content, is_error) = tool_output(&path, item.get("output"))?;
                self.push_result(call_id, content, is_error);
                Ok(())
            }
            "reasoning" => {
                match reasoning_part(&path, item)? {
                    // A stored item referenced by id alone carries nothing Glider can use.
                    Part::Thinking {
                        text,
                        signature: None,
                        redacted: None,
                    } if text.is_empty() => {}
                    part => self.push_assistant(part),
                }
                Ok(())
            }
            t if t.ends_with("_call_output") => {
                let call_id = match str_field(item, "call_id").or_else(|| str_field(item, "id")) {
                    Some(id) => id,
                    None => return Err(invalid_at(&format!("{path}.call_id"), "required")),
                };
                let content = match item.get("output") {
                    Some(Value::String(s)) => vec![Part::text(s.clone())],
                    None | Some(Value::Null) => vec![Part::text("")],
                    Some(other) => vec![Part::text(other.to_string())],
                };
                let failed = matches!(str_field(item, "status"), Some("failed" | "incomplete"));
                self.push_result(call_id, content, failed);
                Ok(())
            }
            t if t.ends_with("_call") && !HOSTED_CALLS.contains(&t) => {
                let Some(call_id) = str_field(item, "call_id") else {
                    // A call without a call id cannot be answered: not a client call.
                    return Ok(());
                };
                let mut arguments = Map::new();
                if let Some(fields) = item.as_object() {
                    for (k, v) in fields {
                        if !matches!(k.as_str(), "type" | "id" | "call_id" | "status") {
                            arguments.insert(k.clone(), v.clone());
                        }
                    }
                }
                self.push_assistant(Part::ToolCall {
                    id: call_id.to_owned(),
                    name: t.trim_end_matches("_call").to_owned(),
                    arguments: Value::Object(arguments),
                });
                Ok(())
            }
            // Hosted-tool records, compaction, item references, unknown types: skipped.
            _ => Ok(()),
        }
    }

    fn message(&mut self, path: &str, item: &Value) -> Result<(), ApiError> {
        let role = match required_str(item, path, "role")? {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" | "developer" => Role::System,
            other => {
                return Err(invalid_at(
                    &format!("{path}.role"),
                    &format!(
                        "unsupported role `{other}` (expected user, assistant, system or developer)"
                    ),
                ));
            }
        };
        let parts = content_parts(&format!("{path}.content"), item.get("content"))?;
        if role == Role::Assistant {
            for part in parts {
                self.push_assistant(part);
            }
        } else if !parts.is_empty() {
            self.turns.push(Turn { role, parts });
        }
        Ok(())
    }
}

/// Message content: a string, or an array of typed content parts.
fn content_parts(path: &str, content: Option<&Value>) -> Result<Vec<Part>, ApiError> {
    match content {
        Some(Value::String(s)) => Ok(vec![Part::text(s.clone())]),
        Some(Value::Array(items)) => {
            let mut parts = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if let Some(part) = content_part(&format!("{path}[{i}]"), item)? {
                    parts.push(part);
                }
            }
            Ok(parts)
        }
        None | Some(Value::Null) => Err(invalid_at(path, "required")),
        Some(_) => Err(invalid_at(path, "expected string or array")),
    }
}

fn content_part(path: &str, item: &Value) -> Result<Option<Part>, ApiError> {
    if !item.is_object() {
        return Err(invalid_at(path, "expected object"));
    }
    match required_str(item, path, "type")? {
        "input_text" | "output_text" | "text" => {
            Ok(Some(Part::text(required_str(item, path, "text")?)))
        }
        "refusal" => Ok(Some(Part::text(required_str(item, path, "refusal")?))),
        "input_image" => match item.get("image_url") {
            Some(Value::String(url)) => Ok(Some(Part::Image {
                source: image_source(url),
                cache_control: None,
            })),
            Some(Value::Object(obj)) => match obj.get("url").and_then(Value::as_str) {
                Some(url) => Ok(Some(Part::Image {
                    source: image_source(url),
                    cache_control: None,
                })),
                None => Err(invalid_at(&format!("{path}.image_url"), "expected string")),
            },
            // A stored file Glider cannot fetch: dropped (documented loss).
            _ if item.get("file_id").is_some_and(Value::is_string) => Ok(None),
            _ => Err(invalid_at(path, "input_image needs image_url or file_id")),
        },
        other @ ("input_file" | "input_audio") => Err(invalid_at(
            &format!("{path}.type"),
            &format!("`{other}` content is not supported by this gateway"),
        )),
        other => Err(invalid_at(
            &format!("{path}.type"),
            &format!("unsupported content type `{other}`"),
        )),
    }
}

/// A `function_call_output` / `custom_tool_call_output` payload and its error flag.
fn tool_output(path: &str, output: Option<&Value>) -> Result<(Vec<Part>, bool), ApiError> {
    let path = format!("{path}.output");
    match output {
        Some(Value::String(s)) => Ok((vec![Part::text(s.clone())], false)),
        Some(v @ Value::Array(_)) => Ok((content_parts(&path, Some(v))?, false)),
        // Early Codex builds sent `{content, success}`.
        Some(Value::Object(obj)) if obj.get("content").is_some_and(Value::is_string) => {
            let text = obj
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let failed = obj.get("success").and_then(Value::as_bool) == Some(false);
            Ok((vec![Part::text(text)], failed))
        }
        None | Some(Value::Null) => Err(invalid_at(&path, "required")),
        Some(_) => Err(invalid_at(&path, "expected string or array")),
    }
}

fn reasoning_part(path: &str, item: &Value) -> Result<Part, ApiError> {
    let texts = |key: &str| -> Result<Vec<String>, ApiError> {
        match item.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(list)) => Ok(list
                .iter()
                .filter_map(|p| str_field(p, "text"))
                .map(str::to_owned)
                .collect()),
            Some(_) => Err(invalid_at(&format!("{path}.{key}"), "expected array")),
        }
    };
    let summary = texts("summary")?;
    let text = if summary.is_empty() {
        texts("content")?.join("\n\n")
    } else {
        summary.join("\n\n")
    };
    let encrypted = match item.get("encrypted_content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return Err(invalid_at(
                &format!("{path}.encrypted_content"),
                "expected string",
            ));
        }
    };
    Ok(thinking_from_encrypted(text, encrypted))
}

fn decode_tool(index: usize, tool: &Value) -> Result<ToolDef, ApiError> {
    let path = format!("tools[{index}]");
    if !tool.is_object() {
        return Err(invalid_at(&path, "expected object"));
    }
    let kind = required_str(tool, &path, "type")?;
    let description = str_field(tool, "description").map(str::to_owned);
    if kind == "function" {
        let name = required_str(tool, &path, "name")?;
        let parameters = match tool.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(invalid_at(&format!("{path}.parameters"), "expected object")),
        };
        return Ok(ToolDef {
            name: name.to_owned(),
            description,
            parameters,
            native: None,
        });
    }
    Ok(ToolDef {
        name: str_field(tool, "name").unwrap_or(kind).to_owned(),
        description,
        parameters: json!({}),
        native: Some(NativeTool {
            dialect: Dialect::OpenAiResponses,
            raw: tool.clone(),
        }),
    })
}

/// `Ok(None)`: a valid choice ngl cannot model (hosted tool, `allowed_tools`).
fn decode_tool_choice(choice: &Value) -> Result<Option<ToolChoice>, ApiError> {
    match choice {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(Some(ToolChoice::Auto)),
            "none" => Ok(Some(ToolChoice::None)),
            "required" => Ok(Some(ToolChoice::Required)),
            other => Err(invalid_at(
                "tool_choice",
                &format!("unsupported value `{other}` (expected auto, none or required)"),
            )),
        },
        Value::Object(_) => match required_str(choice, "tool_choice", "type")? {
            "function" | "custom" => {
                let name = required_str(choice, "tool_choice", "name")?;
                Ok(Some(ToolChoice::Tool {
                    name: qualified_name(choice, name),
                }))
            }
            _ => Ok(None),
        },
        _ => Err(invalid_at("tool_choice", "expected string or object")),
    }
}

fn decode_text_format(text: &Map<String, Value>) -> Result<Option<OutputSchema>, ApiError> {
    let format = match text.get("format") {
        None | Some(Value::Null) => return Ok(None),
        Some(f @ Value::Object(_)) => f,
        Some(_) => return Err(invalid_at("text.format", "expected object")),
    };
    if str_field(format, "type") != Some("json_schema") {
        return Ok(None);
    }
    let schema = match format.get("schema") {
        Some(s @ (Value::Object(_) | Value::Bool(_))) => s.clone(),
        None | Some(Value::Null) => return Err(invalid_at("text.format.schema", "required")),
        Some(_) => return Err(invalid_at("text.format.schema", "expected object")),
    };
    Ok(Some(OutputSchema {
        name: str_field(format, "name").map(str::to_owned),
        schema,
    }))
}

// ---------------------------------------------------------------------------------------
// Request encoding
// ---------------------------------------------------------------------------------------

fn effort_for_budget(budget: u32) -> &'static str {
    match budget {
        0..=4096 => "low",
        4097..=16384 => "medium",
        _ => "high",
    }
}

/// Is `name` a custom (free-text) tool in `tools`?
fn is_custom_tool(tools: &[ToolDef], name: &str) -> bool {
    tools.iter().any(|t| {
        t.native.as_ref().is_some_and(|n| {
            n.dialect == Dialect::OpenAiResponses
                && str_field(&n.raw, "type") == Some("custom")
                && str_field(&n.raw, "name") == Some(name)
        })
    })
}

/// The kind of a call in a request, decided by the declared tools only (a request may come
/// from any dialect, so argument shapes prove nothing): a native `custom` tool of that
/// name → custom; a native tool whose type is the name (`local_shell`, `shell`,
/// `apply_patch`, `computer_use*` for `computer`) → typed; anything else → function.
fn request_call_kind(tools: &[ToolDef], name: &str) -> CallKind {
    if is_custom_tool(tools, name) {
        return CallKind::Custom;
    }
    let typed = tools.iter().any(|t| {
        t.native.as_ref().is_some_and(|n| {
            let kind = str_field(&n.raw, "type").unwrap_or_default();
            n.dialect == Dialect::OpenAiResponses
                && (kind == name || (name == "computer" && kind.starts_with("computer_use")))
        })
    });
    if typed {
        CallKind::Typed
    } else {
        CallKind::Function
    }
}

fn encode_tool(tool: &ToolDef) -> Option<Value> {
    if let Some(native) = &tool.native {
        return (native.dialect == Dialect::OpenAiResponses).then(|| native.raw.clone());
    }
    let mut def = Map::new();
    def.insert("type".into(), Value::from("function"));
    def.insert("name".into(), Value::from(tool.name.as_str()));
    if let Some(description) = &tool.description {
        def.insert("description".into(), Value::from(description.as_str()));
    }
    def.insert("parameters".into(), tool.parameters.clone());
    def.insert("strict".into(), Value::Bool(false));
    Some(Value::Object(def))
}

/// Writes a request's turns as `instructions` + `input` items.
struct InputEncoder<'a> {
    req: &'a Request,
    native: bool,
    kinds: HashMap<&'a str, CallKind>,
    items: Vec<Value>,
    /// Text/image content waiting to become one message item, and its role.
    pending: Vec<Value>,
    pending_role: &'static str,
}

impl<'a> InputEncoder<'a> {
    fn new(req: &'a Request, native: bool) -> Self {
        let mut kinds = HashMap::new();
        for turn in &req.turns {
            for part in &turn.parts {
                if let Part::ToolCall { id, name, .. } = part {
                    kinds.insert(id.as_str(), request_call_kind(&req.tools, name));
                }
            }
        }
        InputEncoder {
            req,
            native,
            kinds,
            items: Vec::new(),
            pending: Vec::new(),
            pending_role: "user",
        }
    }

    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let content = std::mem::take(&mut self.pending);
            self.items.push(json!({
                "type": "message",
                "role": self.pending_role,
                "content": content,
            }));
        }
    }

    fn content(&mut self, role: &'static str, value: Value) {
        if self.pending_role != role {
            self.flush();
            self.pending_role = role;
        }
        self.pending.push(value);
    }

    fn turn(&mut self, turn: &Turn) {
        let role = match turn.role {
            Role::System => "system",
            Role::Assistant => "assistant",
            Role::User | Role::Tool => "user",
        };
        for part in &turn.parts {
            match part {
                Part::Text { text, .. } if role == "assistant" => self.content(
                    role,
                    json!({"type": "output_text", "text": text, "annotations": []}),
                ),
                Part::Text { text, .. } => {
                    self.content(role, json!({"type": "input_text", "text": text}));
                }
                Part::Image { source, .. } if role != "assistant" => self.content(
                    role,
                    json!({"type": "input_image", "image_url": image_url(source), "detail": "auto"}),
                ),
                Part::Image { .. } => {}
                Part::Native {
                    dialect: Dialect::OpenAiResponses,
                    raw,
                } => {
                    self.flush();
                    self.items.push(raw.clone());
                }
                Part::Native { .. } => {}
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    self.flush();
                    let kind = self.kinds.get(id.as_str()).cloned().unwrap_or(CallKind::Function);
                    let mut item = call_item("", id, name, &arguments_text(arguments), &kind, "completed");
                    if let Value::Object(map) = &mut item {
                        // Input items carry no server id.
                        map.remove("id");
                        if kind != CallKind::Typed {
                            map.remove("status");
                        }
                    }
                    self.items.push(item);
                }
                Part::ToolResult {
                    call_id,
                    content,
                    is_error,
                    ..
                } => {
                    self.flush();
                    self.items.push(self.result_item(call_id, content, *is_error));
                }
                Part::Thinking {
                    text,
                    signature: Some(signature),
                    redacted: None,
                } if self.native => {
                    self.flush();
                    let mut item = reasoning_item("", text, Some(signature.clone()));
                    if let Value::Object(map) = &mut item {
                        map.remove("id");
                    }
                    self.items.push(item);
                }
                Part::Thinking { .. } => {}
            }
        }
        self.flush();
    }

    fn result_item(&self, call_id: &str, content: &[Part], is_error: bool) -> Value {
        let kind = self
            .kinds
            .get(call_id)
            .cloned()
            .unwrap_or(CallKind::Function);
        let name = self
            .req
            .turns
            .iter()
            .flat_map(|t| &t.parts)
            .find_map(|p| match p {
                Part::ToolCall { id, name, .. } if id == call_id => Some(name.as_str()),
                _ => None,
            });
        let texts_only = content.iter().all(|p| matches!(p, Part::Text { .. }));
        let text = Turn {
            role: Role::Tool,
            parts: content.to_vec(),
        }
        .plain_text();
        let rich = || {
            Value::Array(
                content
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text { text, .. } => Some(json!({"type": "input_text", "text": text})),
                        Part::Image { source, .. } => Some(
                            json!({"type": "input_image", "image_url": image_url(source), "detail": "auto"}),
                        ),
                        _ => None,
                    })
                    .collect(),
            )
        };
        let output = if texts_only {
            Value::from(text.clone())
        } else {
            rich()
        };
        match (kind, name) {
            (CallKind::Custom, _) => {
                json!({"type": "custom_tool_call_output", "call_id": call_id, "output": output})
            }
            (CallKind::Typed, Some(name)) if name != "local_shell" => {
                // Non-string outputs were kept as JSON text; give them back their shape.
                let output = match serde_json::from_str::<Value>(&text) {
                    Ok(v @ (Value::Array(_) | Value::Object(_))) if texts_only => v,
                    _ => output,
                };
                let mut item = json!({
                    "type": format!("{name}_call_output"),
                    "call_id": call_id,
                    "output": output,
                });
                if name == "apply_patch"
                    && let Value::Object(map) = &mut item
                {
                    let status = if is_error { "failed" } else { "completed" };
                    map.insert("status".into(), Value::from(status));
                }
                item
            }
            _ => json!({"type": "function_call_output", "call_id": call_id, "output": output}),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Response decoding
// ---------------------------------------------------------------------------------------

fn required_reply_str<'a>(item: &'a Value, key: &str, what: &str) -> Result<&'a str, ApiError> {
    str_field(item, key).ok_or_else(|| bad_gateway(format!("backend {what} item has no `{key}`")))
}

/// One output item of a backend reply as ngl parts.
fn output_item_parts(item: &Value) -> Result<Vec<Part>, ApiError> {
    let kind = str_field(item, "type").unwrap_or_default();
    Ok(match kind {
        "message" => item
            .get("content")
            .and_then(Value::as_array)
            .map(|content| {
                content
                    .iter()
                    .filter_map(|c| match str_field(c, "type") {
                        Some("output_text") => str_field(c, "text").map(Part::text),
                        Some("refusal") => str_field(c, "refusal").map(Part::text),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        "reasoning" => match reasoning_part("output", item).map_err(|e| bad_gateway(e.message))? {
            // Nothing to carry (a stored item without summary or encrypted content).
            Part::Thinking {
                text,
                signature: None,
                redacted: None,
            } if text.is_empty() => Vec::new(),
            part => vec![part],
        },
        "function_call" => {
            let name = required_reply_str(item, "name", kind)?;
            vec![Part::ToolCall {
                id: required_reply_str(item, "call_id", kind)?.to_owned(),
                name: qualified_name(item, name),
                arguments: parse_arguments(str_field(item, "arguments").unwrap_or_default()),
            }]
        }
        "custom_tool_call" => {
            let name = required_reply_str(item, "name", kind)?;
            vec![Part::ToolCall {
                id: required_reply_str(item, "call_id", kind)?.to_owned(),
                name: qualified_name(item, name),
                arguments: Value::String(str_field(item, "input").unwrap_or_default().to_owned()),
            }]
        }
        t if t.ends_with("_call") && !HOSTED_CALLS.contains(&t) => {
            match str_field(item, "call_id") {
                Some(call_id) => vec![Part::ToolCall {
                    id: call_id.to_owned(),
                    name: t.trim_end_matches("_call").to_owned(),
                    arguments: typed_arguments(item),
                }],
                None => Vec::new(),
            }
        }
        _ => Vec::new(),
    })
}

fn typed_arguments(item: &Value) -> Value {
    let mut arguments = Map::new();
    if let Some(fields) = item.as_object() {
        for (k, v) in fields {
            if !matches!(k.as_str(), "type" | "id" | "call_id" | "status") {
                arguments.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(arguments)
}

fn incomplete_stop(response: &Value) -> StopReason {
    match response
        .pointer("/incomplete_details/reason")
        .and_then(Value::as_str)
    {
        Some("content_filter") => StopReason::ContentFilter,
        _ => StopReason::MaxTokens,
    }
}

// ---------------------------------------------------------------------------------------
// Codec
// ---------------------------------------------------------------------------------------

impl Codec for OpenAiResponses {
    fn dialect(&self) -> Dialect {
        Dialect::OpenAiResponses
    }

    fn decode_request(&self, body: &[u8]) -> Result<Request, ApiError> {
        let Value::Object(mut obj) = parse_json(body)? else {
            return Err(ApiError::invalid("request body must be a JSON object"));
        };
        let model = match obj.remove("model") {
            Some(Value::String(m)) if !m.is_empty() => m,
            None | Some(Value::Null | Value::String(_)) => {
                return Err(invalid_at("model", "required"));
            }
            Some(_) => return Err(invalid_at("model", "expected string")),
        };
        let mut input = InputDecoder::default();
        match obj.remove("instructions") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    input.turns.push(Turn::text(Role::System, s));
                }
            }
            Some(_) => return Err(invalid_at("instructions", "expected string")),
        }
        match obj.remove("input") {
            None | Some(Value::Null) => return Err(invalid_at("input", "required")),
            Some(Value::String(s)) => input.turns.push(Turn::text(Role::User, s)),
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    input.item(i, item)?;
                }
            }
            Some(_) => return Err(invalid_at("input", "expected string or array")),
        }
        let tools = match obj.remove("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list
                .iter()
                .enumerate()
                .map(|(i, t)| decode_tool(i, t))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(invalid_at("tools", "expected array")),
        };
        let mut extra = Map::new();
        let tool_choice = match obj.remove("tool_choice") {
            None | Some(Value::Null) => None,
            Some(choice) => match decode_tool_choice(&choice)? {
                Some(choice) => Some(choice),
                None => {
                    extra.insert("tool_choice".into(), choice);
                    None
                }
            },
        };
        let parallel_tool_calls = opt_bool(&mut obj, "parallel_tool_calls")?;
        let max_tokens = opt_u32(&mut obj, "max_output_tokens")?;
        let temperature = opt_f64(&mut obj, "temperature")?;
        let top_p = opt_f64(&mut obj, "top_p")?;
        let stream = opt_bool(&mut obj, "stream")?.unwrap_or(false);
        let thinking = match obj.remove("reasoning") {
            None | Some(Value::Null) => None,
            Some(Value::Object(reasoning)) => {
                let effort = match reasoning.get("effort") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(e)) => Some(e.clone()),
                    Some(_) => return Err(invalid_at("reasoning.effort", "expected string")),
                };
                extra.insert("reasoning".into(), Value::Object(reasoning));
                // `effort: "none"` switches reasoning off.
                (effort.as_deref() != Some("none")).then_some(ThinkingConfig {
                    budget_tokens: None,
                    effort,
                })
            }
            Some(_) => return Err(invalid_at("reasoning", "expected object")),
        };
        let output_schema = match obj.remove("text") {
            None | Some(Value::Null) => None,
            Some(Value::Object(text)) => {
                let schema = decode_text_format(&text)?;
                extra.insert("text".into(), Value::Object(text));
                schema
            }
            Some(_) => return Err(invalid_at("text", "expected object")),
        };
        let mut metadata = Map::new();
        match obj.remove("metadata") {
            None | Some(Value::Null) => {}
            Some(m @ Value::Object(_)) => {
                metadata.insert("metadata".into(), m);
            }
            Some(_) => return Err(invalid_at("metadata", "expected object")),
        }
        match obj.remove("user") {
            None | Some(Value::Null) => {}
            Some(u @ Value::String(_)) => {
                metadata.insert("user".into(), u);
            }
            Some(_) => return Err(invalid_at("user", "expected string")),
        }
        extra.extend(obj);
        Ok(Request {
            model,
            turns: input.turns,
            tools,
            tool_choice,
            parallel_tool_calls,
            max_tokens,
            temperature,
            top_p,
            top_k: None,
            seed: None,
            stop: Vec::new(),
            stream,
            thinking,
            output_schema,
            metadata: (!metadata.is_empty()).then_some(Value::Object(metadata)),
            extra: Some(DialectExtra {
                dialect: Dialect::OpenAiResponses,
                fields: extra,
            }),
        })
    }

    fn encode_request(&self, req: &Request) -> Value {
        let native = req.extra_for(Dialect::OpenAiResponses);
        let mut out = Map::new();
        out.insert("model".into(), Value::from(req.model.as_str()));
        match native {
            Some(extra) => {
                for (k, v) in extra {
                    if !matches!(k.as_str(), "reasoning" | "text") {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            None => {
                out.insert("store".into(), Value::Bool(false));
                if req.thinking.is_some() {
                    out.insert("include".into(), json!(["reasoning.encrypted_content"]));
                }
            }
        }

        let mut turns = req.turns.iter().peekable();
        // The first turn, when it is all-text system, is `instructions` (what a decoded
        // `instructions` field becomes); any other system turn stays a message in place.
        if let Some(turn) = turns.next_if(|t| {
            t.role == Role::System && t.parts.iter().all(|p| matches!(p, Part::Text { .. }))
        }) {
            out.insert("instructions".into(), Value::from(turn.plain_text()));
        }
        let mut input = InputEncoder::new(req, native.is_some());
        for turn in turns {
            input.turn(turn);
        }
        out.insert("input".into(), Value::Array(input.items));

        let tools: Vec<Value> = req.tools.iter().filter_map(encode_tool).collect();
        if tools.is_empty() {
            out.remove("tool_choice");
        } else {
            out.insert("tools".into(), Value::Array(tools));
            if let Some(choice) = &req.tool_choice {
                let value = match choice {
                    ToolChoice::Auto => json!("auto"),
                    ToolChoice::None => json!("none"),
                    ToolChoice::Required => json!("required"),
                    ToolChoice::Tool { name } => {
                        let kind = if is_custom_tool(&req.tools, name) {
                            "custom"
                        } else {
                            "function"
                        };
                        let mut choice = Map::new();
                        choice.insert("type".into(), Value::from(kind));
                        put_name(&mut choice, name);
                        Value::Object(choice)
                    }
                };
                out.insert("tool_choice".into(), value);
            }
        }
        if let Some(parallel) = req.parallel_tool_calls {
            out.insert("parallel_tool_calls".into(), Value::Bool(parallel));
        }
        if let Some(max) = req.max_tokens {
            out.insert("max_output_tokens".into(), Value::from(max));
        }
        if let Some(t) = req.temperature {
            out.insert("temperature".into(), Value::from(t));
        }
        if let Some(p) = req.top_p {
            out.insert("top_p".into(), Value::from(p));
        }

        let native_object = |key: &str| -> Map<String, Value> {
            native
                .and_then(|e| e.get(key))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        if let Some(thinking) = &req.thinking {
            let mut reasoning = native_object("reasoning");
            match (&thinking.effort, thinking.budget_tokens) {
                (Some(effort), _) => {
                    reasoning.insert("effort".into(), Value::from(effort.as_str()));
                }
                (None, Some(budget)) => {
                    reasoning.insert("effort".into(), Value::from(effort_for_budget(budget)));
                }
                (None, None) => {
                    reasoning.remove("effort");
                }
            }
            out.insert("reasoning".into(), Value::Object(reasoning));
        } else {
            let reasoning = native_object("reasoning");
            if reasoning.get("effort").and_then(Value::as_str) == Some("none") {
                out.insert("reasoning".into(), Value::Object(reasoning));
            }
        }

        let mut text = native_object("text");
        let previous = text.remove("format");
        match &req.output_schema {
            Some(schema) => {
                let mut format = match previous {
                    Some(Value::Object(f))
                        if f.get("type").and_then(Value::as_str) == Some("json_schema") =>
                    {
                        f
                    }
                    _ => Map::new(),
                };
                format.insert("type".into(), Value::from("json_schema"));
                let name = schema.name.as_deref().unwrap_or("output_schema");
                format.insert("name".into(), Value::from(name));
                format.insert("schema".into(), schema.schema.clone());
                text.insert("format".into(), Value::Object(format));
            }
            None => {
                if let Some(format) =
                    previous.filter(|f| str_field(f, "type") != Some("json_schema"))
                {
                    text.insert("format".into(), format);
                }
            }
        }
        if !text.is_empty() {
            out.insert("text".into(), Value::Object(text));
        }

        if native.is_some()
            && let Some(meta) = &req.metadata
        {
            if let Some(m) = meta.get("metadata") {
                out.insert("metadata".into(), m.clone());
            }
            if let Some(u) = meta.get("user") {
                out.insert("user".into(), u.clone());
            }
        }
        out.insert("stream".into(), Value::Bool(req.stream));
        Value::Object(out)
    }

    fn decode_response(&self, body: &[u8]) -> Result<Response, ApiError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| bad_gateway(format!("backend sent invalid JSON: {e}")))?;
        if !value.is_object() {
            return Err(bad_gateway("backend response is not a JSON object"));
        }
        let status = str_field(&value, "status");
        if status == Some("failed") {
            let error = value.get("error").cloned().unwrap_or(Value::Null);
            return Err(error_from_value(&error, "backend response failed"));
        }
        let Some(output) = value.get("output").and_then(Value::as_array) else {
            return Err(bad_gateway("backend response has no `output` array"));
        };
        let mut parts = Vec::new();
        for item in output {
            parts.extend(output_item_parts(item)?);
        }
        let stop_reason = if status == Some("incomplete") {
            incomplete_stop(&value)
        } else if parts.iter().any(|p| matches!(p, Part::ToolCall { .. })) {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        };
        Ok(Response {
            id: str_field(&value, "id").unwrap_or_default().to_owned(),
            model: str_field(&value, "model").unwrap_or_default().to_owned(),
            parts,
            stop_reason,
            usage: value.get("usage").map(decode_usage).unwrap_or_default(),
        })
    }

    fn encode_response(&self, resp: &Response) -> Value {
        let id = response_id(&resp.id);
        let mut output = Vec::new();
        for part in &resp.parts {
            let index = output.len();
            let item = match part {
                Part::Text { text, .. } => {
                    message_item(&item_id(&id, "msg", index), text, "completed")
                }
                Part::Thinking {
                    text,
                    signature,
                    redacted,
                } => {
                    let encrypted = match (signature, redacted) {
                        (_, Some(data)) => Some(format!("{REDACTED_PREFIX}{data}")),
                        (Some(sig), None) => Some(sig.clone()),
                        (None, None) => None,
                    };
                    reasoning_item(&item_id(&id, "rs", index), text, encrypted)
                }
                Part::ToolCall {
                    id: call_id,
                    name,
                    arguments,
                } => {
                    let kind = reply_call_kind(name, arguments);
                    call_item(
                        &item_id(&id, item_prefix(&kind), index),
                        call_id,
                        name,
                        &arguments_text(arguments),
                        &kind,
                        "completed",
                    )
                }
                Part::Image { .. } | Part::ToolResult { .. } | Part::Native { .. } => continue,
            };
            output.push(item);
        }
        let (status, incomplete) = status_of(resp.stop_reason);
        ResponseShape {
            id: &id,
            model: &resp.model,
            created_at: now_secs(),
            status,
            incomplete,
            error: None,
            output,
            usage: Some(&resp.usage),
        }
        .into_value()
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(ResponsesStreamDecoder::default())
    }

    fn stream_encoder(&self) -> Box<dyn StreamEncoder> {
        Box::new(ResponsesStreamEncoder::default())
    }

    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn encode_error(&self, err: &ApiError) -> Value {
        let (kind, code) = error_labels(err.kind);
        json!({
            "error": {
                "message": err.message,
                "type": kind,
                "param": err.param,
                "code": code,
            }
        })
    }

    fn decode_error(&self, status: u16, body: &[u8]) -> ApiError {
        let kind = ErrorKind::from_status(status);
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let error = parsed.as_ref().map(|v| v.get("error").unwrap_or(v));
        let message = match error {
            Some(Value::String(s)) => Some(s.clone()),
            Some(e) => str_field(e, "message").map(str::to_owned),
            None => None,
        };
        let message = message.filter(|m| !m.trim().is_empty()).unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() {
                format!("backend returned HTTP {status}")
            } else {
                text.chars().take(500).collect()
            }
        });
        let mut api_error = ApiError::new(kind, message);
        api_error.param = error.and_then(|e| str_field(e, "param")).map(str::to_owned);
        api_error
    }
}

// ---------------------------------------------------------------------------------------
// Stream decoding (backend SSE → ngl events)
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum OpenKind {
    Text,
    Thinking,
    Tool,
}

#[derive(Debug)]
struct OpenPart {
    index: usize,
    kind: OpenKind,
    /// Whether any delta was forwarded (else the `done` events fill the content in).
    streamed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ItemKind {
    Message,
    Reasoning,
    Call,
    Other,
}

#[derive(Debug, Default)]
struct ResponsesStreamDecoder {
    sse: SseParser,
    started: bool,
    terminated: bool,
    next_index: usize,
    open: Option<OpenPart>,
    /// The output item in progress and whether it produced a part yet.
    item: Option<(ItemKind, bool)>,
    saw_tool_call: bool,
}

fn item_kind(item: &Value) -> ItemKind {
    match str_field(item, "type").unwrap_or_default() {
        "message" => ItemKind::Message,
        "reasoning" => ItemKind::Reasoning,
        "function_call" | "custom_tool_call" => ItemKind::Call,
        t if t.ends_with("_call")
            && !HOSTED_CALLS.contains(&t)
            && item.get("call_id").is_some() =>
        {
            ItemKind::Call
        }
        _ => ItemKind::Other,
    }
}

/// The call id and ngl name of a call item.
fn call_identity(item: &Value) -> (String, String) {
    let kind = str_field(item, "type").unwrap_or_default();
    let call_id = str_field(item, "call_id")
        .or_else(|| str_field(item, "id"))
        .unwrap_or_default()
        .to_owned();
    let name = match kind {
        "function_call" | "custom_tool_call" => {
            qualified_name(item, str_field(item, "name").unwrap_or_default())
        }
        t => t.trim_end_matches("_call").to_owned(),
    };
    (call_id, name)
}

/// The complete argument text of a finished call item.
fn call_arguments(item: &Value) -> String {
    match str_field(item, "type").unwrap_or_default() {
        "function_call" => str_field(item, "arguments").unwrap_or_default().to_owned(),
        "custom_tool_call" => str_field(item, "input").unwrap_or_default().to_owned(),
        _ => typed_arguments(item).to_string(),
    }
}

impl ResponsesStreamDecoder {
    fn start(&mut self, out: &mut Vec<StreamEvent>, response: Option<&Value>) {
        if self.started {
            return;
        }
        self.started = true;
        let field = |k: &str| {
            response
                .and_then(|r| str_field(r, k))
                .unwrap_or_default()
                .to_owned()
        };
        out.push(StreamEvent::Start {
            id: field("id"),
            model: field("model"),
            usage: response
                .and_then(|r| r.get("usage"))
                .filter(|u| u.is_object())
                .map(decode_usage)
                .unwrap_or_default(),
        });
    }

    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(open) = self.open.take() {
            out.push(StreamEvent::PartStop { index: open.index });
        }
    }

    fn open(&mut self, out: &mut Vec<StreamEvent>, kind: PartKind) {
        self.start(out, None);
        self.close(out);
        let open_kind = match &kind {
            PartKind::Text => OpenKind::Text,
            PartKind::Thinking => OpenKind::Thinking,
            PartKind::ToolCall { .. } => {
                self.saw_tool_call = true;
                OpenKind::Tool
            }
        };
        let index = self.next_index;
        self.next_index += 1;
        out.push(StreamEvent::PartStart { index, kind });
        self.open = Some(OpenPart {
            index,
            kind: open_kind,
            streamed: false,
        });
        if let Some((_, produced)) = &mut self.item {
            *produced = true;
        }
    }

    /// The open part's index if it is of `kind`, opening one (`make`) otherwise.
    fn ensure(&mut self, out: &mut Vec<StreamEvent>, kind: OpenKind, make: PartKind) -> usize {
        match &self.open {
            Some(open) if open.kind == kind => open.index,
            _ => {
                self.open(out, make);
                self.next_index - 1
            }
        }
    }

    fn delta(&mut self, out: &mut Vec<StreamEvent>, kind: OpenKind, text: &str) {
        let make = match kind {
            OpenKind::Text => PartKind::Text,
            OpenKind::Thinking => PartKind::Thinking,
            // Argument deltas without an announced call cannot be placed: ignore.
            OpenKind::Tool => {
                if !matches!(&self.open, Some(o) if o.kind == OpenKind::Tool) {
                    return;
                }
                PartKind::Text
            }
        };
        let index = self.ensure(out, kind, make);
        if text.is_empty() {
            return;
        }
        if let Some(open) = &mut self.open {
            open.streamed = true;
        }
        out.push(match kind {
            OpenKind::Text => StreamEvent::TextDelta {
                index,
                text: text.to_owned(),
            },
            OpenKind::Thinking => StreamEvent::ThinkingDelta {
                index,
                text: text.to_owned(),
            },
            OpenKind::Tool => StreamEvent::ToolArgsDelta {
                index,
                json: text.to_owned(),
            },
        });
    }

    fn streamed(&self) -> bool {
        self.open.as_ref().is_some_and(|o| o.streamed)
    }

    fn item_done(&mut self, out: &mut Vec<StreamEvent>, item: &Value) {
        let kind = item_kind(item);
        let produced = matches!(self.item, Some((k, true)) if k == kind);
        match kind {
            ItemKind::Message => {
                if !produced {
                    for part in output_item_parts(item).unwrap_or_default() {
                        if let Part::Text { text, .. } = part {
                            self.open(out, PartKind::Text);
                            self.delta(out, OpenKind::Text, &text);
                        }
                    }
                }
                self.close(out);
            }
            ItemKind::Reasoning => {
                let text = match reasoning_part("output", item) {
                    Ok(Part::Thinking { text, .. }) => text,
                    _ => String::new(),
                };
                let encrypted = str_field(item, "encrypted_content");
                let open = matches!(&self.open, Some(o) if o.kind == OpenKind::Thinking);
                if !open && text.is_empty() && encrypted.is_none() {
                    self.item = None;
                    return;
                }
                if !open {
                    self.open(out, PartKind::Thinking);
                }
                if !self.streamed() {
                    self.delta(out, OpenKind::Thinking, &text);
                }
                if let (Some(signature), Some(open)) = (encrypted, &self.open) {
                    out.push(StreamEvent::ThinkingSignature {
                        index: open.index,
                        signature: signature.to_owned(),
                    });
                }
                self.close(out);
            }
            ItemKind::Call => {
                if !matches!(&self.open, Some(o) if o.kind == OpenKind::Tool) || !produced {
                    let (id, name) = call_identity(item);
                    self.open(out, PartKind::ToolCall { id, name });
                }
                if !self.streamed() {
                    self.delta(out, OpenKind::Tool, &call_arguments(item));
                }
                self.close(out);
            }
            ItemKind::Other => {}
        }
        self.item = None;
    }

    fn finish_with(&mut self, out: &mut Vec<StreamEvent>, response: &Value, stop: StopReason) {
        self.start(out, Some(response));
        self.close(out);
        let stop_reason = if stop == StopReason::EndTurn && self.saw_tool_call {
            StopReason::ToolUse
        } else {
            stop
        };
        out.push(StreamEvent::Finish {
            stop_reason,
            usage: response.get("usage").map(decode_usage).unwrap_or_default(),
        });
        self.terminated = true;
    }

    fn fail(&mut self, out: &mut Vec<StreamEvent>, error: ApiError) {
        out.push(StreamEvent::Error { error });
        self.terminated = true;
    }

    fn handle(
        &mut self,
        out: &mut Vec<StreamEvent>,
        name: Option<&str>,
        data: &str,
    ) -> Result<(), ApiError> {
        if self.terminated || data.trim() == "[DONE]" {
            return Ok(());
        }
        let event: Value = serde_json::from_str(data)
            .map_err(|e| bad_gateway(format!("malformed Responses stream event: {e}")))?;
        let kind = str_field(&event, "type")
            .or(name)
            .unwrap_or_default()
            .to_owned();
        let null = Value::Null;
        let response = event.get("response").unwrap_or(&null);
        let text = |key: &str| str_field(&event, key).unwrap_or_default().to_owned();
        match kind.as_str() {
            "response.created" | "response.in_progress" | "response.queued" => {
                self.start(out, Some(response));
            }
            "response.output_item.added" => {
                let item = event.get("item").unwrap_or(&null);
                self.start(out, None);
                self.close(out);
                let kind = item_kind(item);
                self.item = Some((kind, false));
                match kind {
                    // Opened by its first summary part or at its end, so a reasoning
                    // item with nothing to carry makes no empty thinking part.
                    ItemKind::Reasoning => {}
                    ItemKind::Call => {
                        let (id, name) = call_identity(item);
                        self.open(out, PartKind::ToolCall { id, name });
                    }
                    ItemKind::Message | ItemKind::Other => {}
                }
            }
            "response.content_part.added" => {
                let part_type = event.pointer("/part/type").and_then(Value::as_str);
                if matches!(part_type, Some("output_text" | "refusal")) {
                    self.open(out, PartKind::Text);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if matches!(self.item, Some((ItemKind::Message, _)) | None) {
                    self.delta(out, OpenKind::Text, &text("delta"));
                }
            }
            "response.output_text.done" | "response.refusal.done"
                if matches!(&self.open, Some(o) if o.kind == OpenKind::Text)
                    && !self.streamed() =>
            {
                let key = if kind == "response.refusal.done" {
                    "refusal"
                } else {
                    "text"
                };
                self.delta(out, OpenKind::Text, &text(key));
            }
            "response.content_part.done" => {
                if matches!(&self.open, Some(o) if o.kind == OpenKind::Text) {
                    if !self.streamed() {
                        let part = event.get("part").unwrap_or(&null);
                        let full = str_field(part, "text")
                            .or_else(|| str_field(part, "refusal"))
                            .unwrap_or_default()
                            .to_owned();
                        self.delta(out, OpenKind::Text, &full);
                    }
                    self.close(out);
                }
            }
            "response.reasoning_summary_part.added" => {
                let was_streamed =
                    matches!(&self.open, Some(o) if o.kind == OpenKind::Thinking && o.streamed);
                self.ensure(out, OpenKind::Thinking, PartKind::Thinking);
                let summary_index = event
                    .get("summary_index")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                if summary_index > 0 && was_streamed {
                    self.delta(out, OpenKind::Thinking, "\n\n");
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.delta(out, OpenKind::Thinking, &text("delta"));
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                self.delta(out, OpenKind::Tool, &text("delta"));
            }
            "response.function_call_arguments.done" | "response.custom_tool_call_input.done"
                if matches!(&self.open, Some(o) if o.kind == OpenKind::Tool)
                    && !self.streamed() =>
            {
                let key = if kind.ends_with("arguments.done") {
                    "arguments"
                } else {
                    "input"
                };
                self.delta(out, OpenKind::Tool, &text(key));
            }
            "response.output_item.done" => {
                let item = event.get("item").cloned().unwrap_or(Value::Null);
                self.item_done(out, &item);
            }
            "response.completed" => self.finish_with(out, response, StopReason::EndTurn),
            "response.incomplete" => {
                let stop = incomplete_stop(response);
                self.finish_with(out, response, stop);
            }
            "response.failed" => {
                let error = response.get("error").unwrap_or(&null);
                self.fail(out, error_from_value(error, "backend response failed"));
            }
            "error" => {
                let error = event
                    .get("error")
                    .filter(|e| e.is_object())
                    .unwrap_or(&event);
                self.fail(out, error_from_value(error, "backend stream error"));
            }
            _ => {}
        }
        Ok(())
    }
}

impl StreamDecoder for ResponsesStreamDecoder {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ApiError> {
        let mut out = Vec::new();
        for event in self.sse.feed(bytes) {
            self.handle(&mut out, event.event.as_deref(), &event.data)?;
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if let Some(event) = self.sse.finish()
            && let Err(error) = self.handle(&mut out, event.event.as_deref(), &event.data)
        {
            self.fail(&mut out, error);
        }
        if !self.terminated {
            self.fail(
                &mut out,
                bad_gateway("backend stream ended before response.completed"),
            );
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Stream encoding (ngl events → client SSE)
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
enum EncPart {
    Text {
        text: String,
    },
    Thinking {
        text: String,
        signature: Option<String>,
        summary_open: bool,
    },
    Tool {
        call_id: String,
        name: String,
        args: String,
        /// Set once `output_item.added` went out.
        kind: Option<CallKind>,
    },
}

#[derive(Debug)]
struct EncItem {
    item_id: String,
    output_index: usize,
    part: EncPart,
}

#[derive(Debug, Default)]
struct ResponsesStreamEncoder {
    seq: u64,
    id: String,
    model: String,
    created_at: u64,
    started: bool,
    ended: bool,
    output: Vec<Value>,
    open: Option<EncItem>,
}

impl ResponsesStreamEncoder {
    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, body: Value) {
        let mut event = Map::new();
        event.insert("type".into(), Value::from(kind));
        if let Value::Object(fields) = body {
            event.extend(fields);
        }
        event.insert("sequence_number".into(), Value::from(self.seq));
        self.seq += 1;
        write_sse_json(out, Some(kind), &Value::Object(event));
    }

    fn response(
        &self,
        status: &str,
        incomplete: Option<&str>,
        error: Option<Value>,
        usage: Option<&Usage>,
    ) -> Value {
        ResponseShape {
            id: &self.id,
            model: &self.model,
            created_at: self.created_at,
            status,
            incomplete,
            error,
            output: self.output.clone(),
            usage,
        }
        .into_value()
    }

    fn start(&mut self, out: &mut Vec<u8>, id: &str, model: &str) {
        if self.started {
            return;
        }
        self.started = true;
        self.id = response_id(id);
        self.model = model.to_owned();
        self.created_at = now_secs();
        let response = self.response("in_progress", None, None, None);
        self.emit(out, "response.created", json!({"response": response}));
        let response = self.response("in_progress", None, None, None);
        self.emit(out, "response.in_progress", json!({"response": response}));
    }

    fn part_start(&mut self, out: &mut Vec<u8>, kind: &PartKind) {
        if !self.started {
            self.start(out, "", "");
        }
        self.close(out);
        let output_index = self.output.len();
        let (item_id, part) = match kind {
            PartKind::Text => {
                let item_id = item_id(&self.id, "msg", output_index);
                let item = json!({
                    "id": item_id, "type": "message", "status": "in_progress",
                    "role": "assistant", "content": [],
                });
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": item}),
                );
                self.emit(
                    out,
                    "response.content_part.added",
                    json!({
                        "item_id": item_id, "output_index": output_index, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []},
                    }),
                );
                (
                    item_id,
                    EncPart::Text {
                        text: String::new(),
                    },
                )
            }
            PartKind::Thinking => {
                let item_id = item_id(&self.id, "rs", output_index);
                let item = json!({"id": item_id, "type": "reasoning", "summary": []});
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": item}),
                );
                (
                    item_id,
                    EncPart::Thinking {
                        text: String::new(),
                        signature: None,
                        summary_open: false,
                    },
                )
            }
            PartKind::ToolCall { id, name } => (
                String::new(),
                EncPart::Tool {
                    call_id: id.clone(),
                    name: name.clone(),
                    args: String::new(),
                    kind: None,
                },
            ),
        };
        self.open = Some(EncItem {
            item_id,
            output_index,
            part,
        });
    }

    /// Announce the open tool call as `kind` and replay the arguments gathered so far.
    fn announce(&mut self, out: &mut Vec<u8>, kind: CallKind) {
        let Some(mut open) = self.open.take() else {
            return;
        };
        if let EncPart::Tool {
            call_id,
            name,
            args,
            kind: announced,
        } = &mut open.part
        {
            open.item_id = item_id(&self.id, item_prefix(&kind), open.output_index);
            let item = match kind {
                CallKind::Typed => {
                    call_item(&open.item_id, call_id, name, args, &kind, "in_progress")
                }
                _ => call_item(&open.item_id, call_id, name, "", &kind, "in_progress"),
            };
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": open.output_index, "item": item}),
            );
            if kind != CallKind::Typed && !args.is_empty() {
                let delta = args.clone();
                self.args_delta(out, &kind, &open.item_id, open.output_index, &delta);
            }
            *announced = Some(kind);
        }
        self.open = Some(open);
    }

    fn args_delta(
        &mut self,
        out: &mut Vec<u8>,
        kind: &CallKind,
        item_id: &str,
        output_index: usize,
        delta: &str,
    ) {
        let event = match kind {
            CallKind::Custom => "response.custom_tool_call_input.delta",
            _ => "response.function_call_arguments.delta",
        };
        self.emit(
            out,
            event,
            json!({"item_id": item_id, "output_index": output_index, "delta": delta}),
        );
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        let Some(open) = self.open.as_ref() else {
            return;
        };
        // A call still unannounced decides its kind now, from the whole arguments.
        let pending = match &open.part {
            EncPart::Tool {
                name,
                args,
                kind: None,
                ..
            } => Some(if is_typed_call(name, &parse_arguments(args)) {
                CallKind::Typed
            } else if args.trim().is_empty() || starts_like_object(args) {
                CallKind::Function
            } else {
                CallKind::Custom
            }),
            _ => None,
        };
        if let Some(kind) = pending {
            if let Some(EncItem {
                part: EncPart::Tool { args, .. },
                ..
            }) = &mut self.open
                && args.trim().is_empty()
            {
                *args = "{}".to_owned();
            }
            self.announce(out, kind);
        }
        let Some(open) = self.open.take() else {
            return;
        };
        let (item_id, output_index) = (open.item_id, open.output_index);
        let item = match open.part {
            EncPart::Text { text } => {
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({
                        "item_id": item_id, "output_index": output_index,
                        "content_index": 0, "text": text, "logprobs": [],
                    }),
                );
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({
                        "item_id": item_id, "output_index": output_index, "content_index": 0,
                        "part": {"type": "output_text", "text": text, "annotations": []},
                    }),
                );
                message_item(&item_id, &text, "completed")
            }
            EncPart::Thinking {
                text,
                signature,
                summary_open,
            } => {
                if summary_open {
                    self.emit(
                        out,
                        "response.reasoning_summary_text.done",
                        json!({
                            "item_id": item_id, "output_index": output_index,
                            "summary_index": 0, "text": text,
                        }),
                    );
                    self.emit(
                        out,
                        "response.reasoning_summary_part.done",
                        json!({
                            "item_id": item_id, "output_index": output_index, "summary_index": 0,
                            "part": {"type": "summary_text", "text": text},
                        }),
                    );
                }
                reasoning_item(&item_id, &text, signature)
            }
            EncPart::Tool {
                call_id,
                name,
                args,
                kind,
            } => {
                let kind = kind.unwrap_or(CallKind::Function);
                match kind {
                    CallKind::Function => self.emit(
                        out,
                        "response.function_call_arguments.done",
                        json!({"item_id": item_id, "output_index": output_index, "arguments": args}),
                    ),
                    CallKind::Custom => self.emit(
                        out,
                        "response.custom_tool_call_input.done",
                        json!({"item_id": item_id, "output_index": output_index, "input": args}),
                    ),
                    CallKind::Typed => {}
                }
                call_item(&item_id, &call_id, &name, &args, &kind, "completed")
            }
        };
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": output_index, "item": item}),
        );
        self.output.push(item);
    }

    fn text_delta(&mut self, out: &mut Vec<u8>, delta: &str) {
        let Some(open) = &mut self.open else {
            return;
        };
        let (item_id, output_index) = (open.item_id.clone(), open.output_index);
        match &mut open.part {
            EncPart::Text { text } => {
                text.push_str(delta);
                self.emit(
                    out,
                    "response.output_text.delta",
                    json!({
                        "item_id": item_id, "output_index": output_index,
                        "content_index": 0, "delta": delta, "logprobs": [],
                    }),
                );
            }
            EncPart::Thinking {
                text, summary_open, ..
            } => {
                if delta.is_empty() {
                    return;
                }
                text.push_str(delta);
                let first = !*summary_open;
                *summary_open = true;
                if first {
                    self.emit(
                        out,
                        "response.reasoning_summary_part.added",
                        json!({
                            "item_id": item_id, "output_index": output_index, "summary_index": 0,
                            "part": {"type": "summary_text", "text": ""},
                        }),
                    );
                }
                self.emit(
                    out,
                    "response.reasoning_summary_text.delta",
                    json!({
                        "item_id": item_id, "output_index": output_index,
                        "summary_index": 0, "delta": delta,
                    }),
                );
            }
            EncPart::Tool { .. } => {}
        }
    }

    fn tool_delta(&mut self, out: &mut Vec<u8>, delta: &str) {
        let Some(EncItem {
            item_id,
            output_index,
            part: EncPart::Tool {
                name, args, kind, ..
            },
        }) = &mut self.open
        else {
            return;
        };
        args.push_str(delta);
        match kind.clone() {
            Some(CallKind::Typed) => {}
            Some(kind) => {
                let (item_id, output_index) = (item_id.clone(), *output_index);
                self.args_delta(out, &kind, &item_id, output_index, delta);
            }
            None => {
                // Typed calls wait for their whole arguments; others announce on the
                // first non-blank character, which tells JSON from free text.
                let typed = TYPED_CALLS.iter().any(|(t, _)| t == name);
                let first = args.trim_start().chars().next();
                if let (false, Some(c)) = (typed, first) {
                    let kind = if c == '{' {
                        CallKind::Function
                    } else {
                        CallKind::Custom
                    };
                    self.announce(out, kind);
                }
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>, stop: StopReason, usage: &Usage) {
        if !self.started {
            self.start(out, "", "");
        }
        self.close(out);
        let (status, incomplete) = status_of(stop);
        let response = self.response(status, incomplete, None, Some(usage));
        let event = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.emit(out, event, json!({"response": response}));
        self.ended = true;
    }

    fn error(&mut self, out: &mut Vec<u8>, error: &ApiError) {
        let (kind, code) = error_labels(error.kind);
        let code = code.unwrap_or(kind);
        self.emit(
            out,
            "error",
            json!({
                "code": code,
                "message": error.message,
                "param": error.param,
                "error": {"type": kind, "code": code, "message": error.message, "param": error.param},
            }),
        );
        if self.id.is_empty() {
            self.id = response_id("");
        }
        let failure = json!({"code": failure_code(error.kind), "message": error.message});
        let response = self.response("failed", None, Some(failure), None);
        self.emit(out, "response.failed", json!({"response": response}));
        self.ended = true;
    }
}

impl StreamEncoder for ResponsesStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        match event {
            StreamEvent::Start { id, model, .. } => self.start(out, id, model),
            StreamEvent::PartStart { kind, .. } => self.part_start(out, kind),
            StreamEvent::TextDelta { text, .. } | StreamEvent::ThinkingDelta { text, .. } => {
                self.text_delta(out, text);
            }
            StreamEvent::ThinkingSignature { signature, .. } => {
                if let Some(EncItem {
                    part: EncPart::Thinking { signature: sig, .. },
                    ..
                }) = &mut self.open
                {
                    *sig = Some(signature.clone());
                }
            }
            StreamEvent::ToolArgsDelta { json, .. } => self.tool_delta(out, json),
            StreamEvent::PartStop { .. } => self.close(out),
            StreamEvent::Finish { stop_reason, usage } => self.finish(out, *stop_reason, usage),
            StreamEvent::Error { error } => self.error(out, error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::SseEvent;
    use glider_ngl::ResponseBuilder;
    use glider_ngl::stream::events_of;

    fn codec() -> &'static dyn Codec {
        &OpenAiResponses
    }

    fn decode(body: &Value) -> Request {
        codec()
            .decode_request(body.to_string().as_bytes())
            .expect("valid request")
    }

    fn text(t: &str) -> Part {
        Part::text(t)
    }

    /// A request as Codex CLI sends it (`wire_api = "responses"`, ChatGPT-less provider).
    fn codex_request() -> Value {
        json!({
            "model": "gpt-5-codex",
            "instructions": "You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI on a user's computer.",
            "input": [
                {"type": "message", "role": "developer", "content": [
                    {"type": "input_text", "text": "<permissions instructions>\nFilesystem sandboxing: workspace-write.\n</permissions instructions>"}
                ]},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nRun cargo test.\n</INSTRUCTIONS>"},
                    {"type": "input_text", "text": "<environment_context>\n  <cwd>/repo</cwd>\n  <shell>bash</shell>\n</environment_context>"}
                ]},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "Fix the failing test in src/lib.rs"}
                ]},
                {"type": "reasoning", "summary": [
                    {"type": "summary_text", "text": "**Inspecting the test**"},
                    {"type": "summary_text", "text": "**Planning the fix**"}
                ], "content": null, "encrypted_content": "gAAAAABo-enc-1"},
                {"type": "function_call", "name": "shell",
                 "arguments": "{\"command\":[\"bash\",\"-lc\",\"cargo test\"],\"workdir\":\"/repo\"}",
                 "call_id": "call_A1"},
                {"type": "function_call_output", "call_id": "call_A1",
                 "output": "Exit code: 101\nWall time: 2.1 seconds\nOutput:\ntest tests::adds ... FAILED"},
                {"type": "custom_tool_call", "status": "completed", "call_id": "call_B2", "name": "apply_patch",
                 "input": "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-    a - b\n+    a + b\n*** End Patch\n"},
                {"type": "custom_tool_call_output", "call_id": "call_B2",
                 "output": "Success. Updated the following files:\nM src/lib.rs\n"},
                {"type": "web_search_call", "status": "completed",
                 "action": {"type": "search", "query": "rust assert_eq"}},
                {"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": "Fixed the sign in `add`."}
                ]},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "Thanks! Now run the tests again."}
                ]}
            ],
            "tools": [
                {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
                 "strict": false,
                 "parameters": {"type": "object", "properties": {
                     "command": {"type": "array", "items": {"type": "string"}},
                     "workdir": {"type": "string"}
                 }, "required": ["command"], "additionalProperties": false}},
                {"type": "custom", "name": "apply_patch", "description": "Use the `apply_patch` tool to edit files.",
                 "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"}},
                {"type": "web_search"},
                {"type": "namespace", "name": "mcp__github", "description": "GitHub MCP server tools",
                 "tools": [{"type": "function", "name": "get_issue", "description": "Get an issue",
                            "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}}}]}
            ],
            "tool_choice": "auto",
            "parallel_tool_calls": false,
            "reasoning": {"effort": "medium", "summary": "auto"},
            "store": false,
            "stream": true,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "0199a7c2-4d1e-7b40-9c8e-3f2a1b0c9d8e",
            "text": {"verbosity": "low"}
        })
    }

    #[test]
    fn decodes_a_codex_request() {
        let req = decode(&codex_request());
        assert_eq!(req.model, "gpt-5-codex");
        assert!(req.stream);
        assert_eq!(req.parallel_tool_calls, Some(false));
        assert_eq!(req.tool_choice, Some(ToolChoice::Auto));
        assert_eq!(req.max_tokens, None);
        assert_eq!(
            req.thinking,
            Some(ThinkingConfig {
                budget_tokens: None,
                effort: Some("medium".into())
            })
        );

        let roles: Vec<Role> = req.turns.iter().map(|t| t.role).collect();
        use Role::*;
        assert_eq!(
            roles,
            vec![
                System, System, User, User, Assistant, Tool, Assistant, Tool, Assistant, User
            ]
        );
        assert!(req.turns[0].plain_text().starts_with("You are Codex"));
        assert!(req.turns[1].plain_text().contains("workspace-write"));
        assert_eq!(req.turns[2].parts.len(), 2);
        assert_eq!(
            req.turns[4].parts,
            vec![
                Part::Thinking {
                    text: "**Inspecting the test**\n\n**Planning the fix**".into(),
                    signature: Some("gAAAAABo-enc-1".into()),
                    redacted: None,
                },
                Part::ToolCall {
                    id: "call_A1".into(),
                    name: "shell".into(),
                    arguments: json!({"command": ["bash", "-lc", "cargo test"], "workdir": "/repo"}),
                },
            ]
        );
        let Part::ToolResult {
            call_id,
            name,
            content,
            is_error,
        } = &req.turns[5].parts[0]
        else {
            panic!("tool result expected");
        };
        assert_eq!(call_id, "call_A1");
        assert_eq!(name.as_deref(), Some("shell"));
        assert!(!is_error);
        assert!(
            Turn {
                role: Tool,
                parts: content.clone()
            }
            .plain_text()
            .contains("FAILED")
        );
        assert_eq!(
            req.turns[6].parts,
            vec![Part::ToolCall {
                id: "call_B2".into(),
                name: "apply_patch".into(),
                arguments: json!(
                    "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-    a - b\n+    a + b\n*** End Patch\n"
                ),
            }]
        );
        assert!(matches!(
            &req.turns[7].parts[0],
            Part::ToolResult { call_id, name: Some(n), .. } if call_id == "call_B2" && n == "apply_patch"
        ));
        // The web_search_call record is skipped; the assistant message follows.
        assert_eq!(req.turns[8].parts, vec![text("Fixed the sign in `add`.")]);
        assert_eq!(
            req.last_user_text().as_deref(),
            Some("Thanks! Now run the tests again.")
        );

        assert_eq!(req.tools.len(), 4);
        assert_eq!(req.tools[0].name, "shell");
        assert!(req.tools[0].native.is_none());
        assert_eq!(req.tools[0].parameters["required"], json!(["command"]));
        let natives: Vec<(&str, &str)> = req.tools[1..]
            .iter()
            .map(|t| {
                let native = t.native.as_ref().expect("native");
                assert_eq!(native.dialect, Dialect::OpenAiResponses);
                (
                    t.name.as_str(),
                    native.raw["type"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            natives,
            vec![
                ("apply_patch", "custom"),
                ("web_search", "web_search"),
                ("mcp__github", "namespace")
            ]
        );

        let extra = req.extra_for(Dialect::OpenAiResponses).expect("extra");
        assert_eq!(extra["store"], json!(false));
        assert_eq!(extra["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(
            extra["prompt_cache_key"],
            json!("0199a7c2-4d1e-7b40-9c8e-3f2a1b0c9d8e")
        );
        assert_eq!(
            extra["reasoning"],
            json!({"effort": "medium", "summary": "auto"})
        );
        assert_eq!(extra["text"], json!({"verbosity": "low"}));
        assert_eq!(req.metadata, None);
    }

    #[test]
    fn codex_request_round_trips() {
        let req = decode(&codex_request());
        let wire = codec().encode_request(&req);
        assert_eq!(wire["model"], "gpt-5-codex");
        assert!(
            wire["instructions"]
                .as_str()
                .unwrap_or_default()
                .starts_with("You are Codex")
        );
        assert_eq!(wire["store"], json!(false));
        assert_eq!(wire["stream"], json!(true));
        assert_eq!(wire["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(
            wire["prompt_cache_key"],
            json!("0199a7c2-4d1e-7b40-9c8e-3f2a1b0c9d8e")
        );
        assert_eq!(
            wire["reasoning"],
            json!({"effort": "medium", "summary": "auto"})
        );
        assert_eq!(wire["text"], json!({"verbosity": "low"}));
        assert_eq!(wire["tool_choice"], json!("auto"));
        assert_eq!(wire["parallel_tool_calls"], json!(false));
        assert!(wire.get("max_output_tokens").is_none());

        let input = wire["input"].as_array().expect("input");
        let types: Vec<&str> = input
            .iter()
            .map(|i| i["type"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            types,
            vec![
                "message",
                "message",
                "message",
                "reasoning",
                "function_call",
                "function_call_output",
                "custom_tool_call",
                "custom_tool_call_output",
                "message",
                "message"
            ]
        );
        assert_eq!(input[0]["role"], "system");
        assert_eq!(
            input[3],
            json!({"type": "reasoning",
                   "summary": [{"type": "summary_text", "text": "**Inspecting the test**\n\n**Planning the fix**"}],
                   "encrypted_content": "gAAAAABo-enc-1"})
        );
        assert_eq!(input[4]["call_id"], "call_A1");
        assert_eq!(input[4]["name"], "shell");
        let args: Value = serde_json::from_str(input[4]["arguments"].as_str().unwrap_or_default())
            .expect("arguments are JSON text");
        assert_eq!(args["workdir"], "/repo");
        assert_eq!(
            input[5]["output"].as_str().map(|s| s.contains("FAILED")),
            Some(true)
        );
        assert_eq!(input[6]["name"], "apply_patch");
        assert!(
            input[6]["input"]
                .as_str()
                .unwrap_or_default()
                .starts_with("*** Begin Patch")
        );
        assert!(input[6].get("id").is_none());
        assert_eq!(input[8]["role"], "assistant");
        assert_eq!(input[8]["content"][0]["type"], "output_text");

        let tools = wire["tools"].as_array().expect("tools");
        assert_eq!(tools[0]["strict"], json!(false));
        assert_eq!(tools[1]["type"], "custom");
        assert_eq!(tools[2], json!({"type": "web_search"}));
        assert_eq!(tools[3]["type"], "namespace");

        assert_eq!(decode(&wire), req);
    }

    #[test]
    fn decodes_an_sdk_request_with_every_field() {
        let body = json!({
            "model": "gpt-4.1",
            "instructions": "Be terse.",
            "input": [
                {"role": "user", "content": [
                    {"type": "input_text", "text": "What is in these images?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"},
                    {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto"},
                    {"type": "input_image", "file_id": "file-abc123", "detail": "auto"}
                ]},
                {"role": "assistant", "content": "A cat."},
                {"role": "system", "content": "Answer in French from now on."},
                {"role": "user", "content": "And the weather in Paris?"},
                {"type": "function_call", "id": "fc_1", "call_id": "call_w1", "name": "get_weather",
                 "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
                {"type": "function_call", "id": "fc_2", "call_id": "call_w2", "name": "get_time",
                 "arguments": "{\"tz\":\"Europe/Paris\"}", "status": "completed"},
                {"type": "function_call_output", "call_id": "call_w1", "output": "18°C"},
                {"type": "function_call_output", "call_id": "call_w2",
                 "output": [{"type": "input_text", "text": "14:05"}]}
            ],
            "tools": [
                {"type": "function", "name": "get_weather", "description": "Current weather",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"], "additionalProperties": false},
                 "strict": true},
                {"type": "function", "name": "get_time", "parameters": null}
            ],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": true,
            "max_output_tokens": 512,
            "temperature": 0.2,
            "top_p": 0.9,
            "text": {"format": {"type": "json_schema", "name": "weather",
                                "schema": {"type": "object", "properties": {"temp": {"type": "number"}}},
                                "strict": true}},
            "metadata": {"session_id": "s-42"},
            "user": "user-7",
            "service_tier": "flex",
            "truncation": "auto",
            "previous_response_id": "resp_prev",
            "stream": false
        });
        let req = decode(&body);
        assert_eq!(req.turns[0], Turn::text(Role::System, "Be terse."));
        assert_eq!(
            req.turns[1].parts,
            vec![
                text("What is in these images?"),
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
        );
        assert_eq!(req.turns[2], Turn::text(Role::Assistant, "A cat."));
        assert_eq!(
            req.turns[3],
            Turn::text(Role::System, "Answer in French from now on.")
        );
        assert_eq!(
            req.turns[4],
            Turn::text(Role::User, "And the weather in Paris?")
        );
        // Parallel calls share one assistant turn; their outputs share one tool turn.
        assert_eq!(
            req.turns[5].parts,
            vec![
                Part::ToolCall {
                    id: "call_w1".into(),
                    name: "get_weather".into(),
                    arguments: json!({"city": "Paris"})
                },
                Part::ToolCall {
                    id: "call_w2".into(),
                    name: "get_time".into(),
                    arguments: json!({"tz": "Europe/Paris"})
                },
            ]
        );
        assert_eq!(
            req.turns[6],
            Turn {
                role: Role::Tool,
                parts: vec![
                    Part::ToolResult {
                        call_id: "call_w1".into(),
                        name: Some("get_weather".into()),
                        content: vec![text("18°C")],
                        is_error: false
                    },
                    Part::ToolResult {
                        call_id: "call_w2".into(),
                        name: Some("get_time".into()),
                        content: vec![text("14:05")],
                        is_error: false
                    },
                ]
            }
        );
        assert_eq!(req.turns.len(), 7);
        assert_eq!(
            req.tools[1].parameters,
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(req.tools[0].description.as_deref(), Some("Current weather"));
        assert_eq!(
            req.tool_choice,
            Some(ToolChoice::Tool {
                name: "get_weather".into()
            })
        );
        assert_eq!(req.parallel_tool_calls, Some(true));
        assert_eq!(req.max_tokens, Some(512));
        assert_eq!(req.temperature, Some(0.2));
        assert_eq!(req.top_p, Some(0.9));
        assert!(!req.stream);
        assert_eq!(req.thinking, None);
        assert_eq!(
            req.output_schema,
            Some(OutputSchema {
                name: Some("weather".into()),
                schema: json!({"type": "object", "properties": {"temp": {"type": "number"}}})
            })
        );
        assert_eq!(
            req.metadata,
            Some(json!({"metadata": {"session_id": "s-42"}, "user": "user-7"}))
        );
        let extra = req.extra_for(Dialect::OpenAiResponses).expect("extra");
        assert_eq!(extra["service_tier"], "flex");
        assert_eq!(extra["truncation"], "auto");
        assert_eq!(extra["previous_response_id"], "resp_prev");

        // And back: same fields, the json_schema format keeps its `strict`.
        let wire = codec().encode_request(&req);
        assert_eq!(wire["instructions"], "Be terse.");
        assert_eq!(wire["max_output_tokens"], 512);
        assert_eq!(wire["temperature"], 0.2);
        assert_eq!(wire["top_p"], 0.9);
        assert_eq!(
            wire["tool_choice"],
            json!({"type": "function", "name": "get_weather"})
        );
        assert_eq!(wire["metadata"], json!({"session_id": "s-42"}));
        assert_eq!(wire["user"], "user-7");
        assert_eq!(wire["service_tier"], "flex");
        assert_eq!(wire["text"]["format"]["strict"], json!(true));
        assert_eq!(wire["text"]["format"]["name"], "weather");
        assert_eq!(
            wire["input"][0]["content"][1],
            json!({"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"})
        );
        assert_eq!(wire["input"][6]["output"], "18°C");
        assert_eq!(wire["input"][7]["output"], "14:05");
        assert_eq!(decode(&wire), req);
    }

    #[test]
    fn string_input_typed_calls_and_odd_items() {
        let req = decode(&json!({"model": "o4-mini", "input": "Hello"}));
        assert_eq!(req.turns, vec![Turn::text(Role::User, "Hello")]);
        assert!(req.extra_for(Dialect::OpenAiResponses).is_some());

        let req = decode(&json!({
            "model": "codex-mini-latest",
            "input": [
                {"role": "user", "content": "list files"},
                {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_L", "status": "completed",
                 "action": {"type": "exec", "command": ["ls", "-la"], "timeout_ms": 10000,
                            "working_directory": "/repo", "env": {}, "user": null}},
                {"type": "local_shell_call_output", "id": "call_L", "output": "Cargo.toml\nsrc"},
                {"type": "function_call", "call_id": "call_N", "name": "get_issue", "namespace": "mcp__github",
                 "arguments": "{\"number\":7}"},
                {"type": "function_call_output", "call_id": "call_N", "output": {"content": "not found", "success": false}},
                {"type": "reasoning", "id": "rs_x", "summary": [],
                 "content": [{"type": "reasoning_text", "text": "raw chain"}]},
                {"type": "reasoning", "id": "rs_y", "summary": [],
                 "encrypted_content": "glider.redacted_thinking:EmwKAhgBEgy"},
                {"type": "item_reference", "id": "msg_old"},
                {"type": "compaction", "encrypted_content": "gAAAA-compacted"},
                {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}
            ],
            "tools": [{"type": "local_shell"}],
            "tool_choice": {"type": "web_search_preview"},
            "reasoning": {"effort": "none"}
        }));
        assert_eq!(req.thinking, None);
        assert_eq!(req.tool_choice, None);
        let extra = req.extra_for(Dialect::OpenAiResponses).expect("extra");
        assert_eq!(extra["tool_choice"], json!({"type": "web_search_preview"}));
        assert_eq!(
            req.turns[1].parts[0],
            Part::ToolCall {
                id: "call_L".into(),
                name: "local_shell".into(),
                arguments: json!({"action": {"type": "exec", "command": ["ls", "-la"], "timeout_ms": 10000,
                                             "working_directory": "/repo", "env": {}, "user": null}}),
            }
        );
        assert!(matches!(&req.turns[2].parts[0],
            Part::ToolResult { call_id, name: Some(n), is_error: false, .. } if call_id == "call_L" && n == "local_shell"));
        assert_eq!(
            req.turns[3].parts[0],
            Part::ToolCall {
                id: "call_N".into(),
                name: "mcp__github.get_issue".into(),
                arguments: json!({"number": 7})
            }
        );
        assert!(matches!(
            &req.turns[4].parts[0],
            Part::ToolResult { is_error: true, .. }
        ));
        // Assistant-side items after the tool turn merge into one assistant turn.
        assert_eq!(
            req.turns[5].parts,
            vec![
                Part::Thinking {
                    text: "raw chain".into(),
                    signature: None,
                    redacted: None
                },
                Part::Thinking {
                    text: String::new(),
                    signature: None,
                    redacted: Some("EmwKAhgBEgy".into())
                },
                text("I can't."),
            ]
        );
        assert_eq!(req.turns.len(), 6);

        // The namespace and the typed call survive re-encoding.
        let wire = codec().encode_request(&req);
        assert_eq!(wire["tool_choice"], json!({"type": "web_search_preview"}));
        assert_eq!(wire.get("reasoning"), Some(&json!({"effort": "none"})));
        let input = &wire["input"];
        assert_eq!(input[1]["type"], "local_shell_call");
        assert_eq!(input[1]["call_id"], "call_L");
        assert_eq!(input[1]["status"], "completed");
        assert_eq!(input[1]["action"]["command"], json!(["ls", "-la"]));
        assert_eq!(
            input[2],
            json!({"type": "function_call_output", "call_id": "call_L", "output": "Cargo.toml\nsrc"})
        );
        assert_eq!(input[3]["name"], "get_issue");
        assert_eq!(input[3]["namespace"], "mcp__github");
        // Thinking without a signature and redacted thinking are not sent back.
        assert_eq!(input[5]["type"], "message");
        assert_eq!(input.as_array().map(Vec::len), Some(6));
    }

    #[test]
    fn request_errors_name_the_field() {
        let cases = [
            (json!({"input": "hi"}), "model: required", Some("model")),
            (
                json!({"model": 5, "input": "hi"}),
                "model: expected string",
                Some("model"),
            ),
            (json!({"model": "m"}), "input: required", Some("input")),
            (
                json!({"model": "m", "input": 3}),
                "input: expected string or array",
                Some("input"),
            ),
            (
                json!({"model": "m", "input": ["x"]}),
                "input[0]: expected object",
                Some("input[0]"),
            ),
            (
                json!({"model": "m", "input": [{"content": "x"}]}),
                "input[0].type: required",
                Some("input[0].type"),
            ),
            (
                json!({"model": "m", "input": [{"role": "tool", "content": "x"}]}),
                "input[0].role: unsupported role `tool`",
                Some("input[0].role"),
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": 4}]}),
                "input[0].content: expected string or array",
                Some("input[0].content"),
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
                "input[0].content[0].type: `input_file` content is not supported",
                Some("input[0].content[0].type"),
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "video"}]}]}),
                "unsupported content type `video`",
                Some("input[0].content[0].type"),
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
                "input_image needs image_url or file_id",
                Some("input[0].content[0]"),
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
                "input[0].call_id: required",
                Some("input[0].call_id"),
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]}),
                "input[0].output: required",
                Some("input[0].output"),
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"name": "f"}]}),
                "tools[0].type: required",
                Some("tools[0].type"),
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "function"}]}),
                "tools[0].name: required",
                Some("tools[0].name"),
            ),
            (
                json!({"model": "m", "input": "x", "tool_choice": "any"}),
                "tool_choice: unsupported value `any`",
                Some("tool_choice"),
            ),
            (
                json!({"model": "m", "input": "x", "max_output_tokens": -1}),
                "max_output_tokens: expected a non-negative integer",
                Some("max_output_tokens"),
            ),
            (
                json!({"model": "m", "input": "x", "temperature": "hot"}),
                "temperature: expected number",
                Some("temperature"),
            ),
            (
                json!({"model": "m", "input": "x", "stream": "yes"}),
                "stream: expected boolean",
                Some("stream"),
            ),
            (
                json!({"model": "m", "input": "x", "reasoning": {"effort": 3}}),
                "reasoning.effort: expected string",
                Some("reasoning.effort"),
            ),
            (
                json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}),
                "text.format.schema: required",
                Some("text.format.schema"),
            ),
            (
                json!({"model": "m", "input": "x", "metadata": "no"}),
                "metadata: expected object",
                Some("metadata"),
            ),
        ];
        for (body, message, param) in cases {
            let err = codec()
                .decode_request(body.to_string().as_bytes())
                .expect_err(&body.to_string());
            assert_eq!(err.kind, ErrorKind::InvalidRequest, "{body}");
            assert!(err.message.contains(message), "{body}: {}", err.message);
            assert_eq!(err.param.as_deref(), param, "{body}");
        }
        let err = codec()
            .decode_request(b"{\"model\": ")
            .expect_err("malformed");
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert!(err.message.contains("invalid JSON"));
        let err = codec().decode_request(b"[1]").expect_err("not an object");
        assert!(err.message.contains("JSON object"));
    }

    #[test]
    fn encodes_a_foreign_request() {
        let req = Request {
            model: "gpt-5".into(),
            turns: vec![
                Turn {
                    role: Role::System,
                    parts: vec![text("You are Claude Code."), text("Be careful.")],
                },
                Turn {
                    role: Role::User,
                    parts: vec![
                        text("Look at this"),
                        Part::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/jpeg".into(),
                                data: "/9j/4AAQ".into(),
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
                            signature: Some("EqQBCkgIARAB".into()),
                            redacted: None,
                        },
                        text("Reading it."),
                        Part::ToolCall {
                            id: "toolu_01".into(),
                            name: "Read".into(),
                            arguments: json!({"file_path": "/a.rs"}),
                        },
                    ],
                },
                Turn {
                    role: Role::Tool,
                    parts: vec![Part::ToolResult {
                        call_id: "toolu_01".into(),
                        name: None,
                        content: vec![
                            text("fn main() {}"),
                            Part::Image {
                                source: ImageSource::Url {
                                    url: "https://x/y.png".into(),
                                },
                                cache_control: None,
                            },
                        ],
                        is_error: true,
                    }],
                },
                Turn::text(Role::System, "<system-reminder>todo</system-reminder>"),
                Turn::text(Role::User, "go on"),
            ],
            tools: vec![
                ToolDef {
                    name: "Read".into(),
                    description: Some("Read a file".into()),
                    parameters: json!({"type": "object", "properties": {"file_path": {"type": "string"}}}),
                    native: None,
                },
                ToolDef {
                    name: "web_search".into(),
                    description: None,
                    parameters: json!({}),
                    native: Some(NativeTool {
                        dialect: Dialect::Anthropic,
                        raw: json!({"type": "web_search_20250305", "name": "web_search"}),
                    }),
                },
            ],
            tool_choice: Some(ToolChoice::Required),
            parallel_tool_calls: None,
            max_tokens: Some(32000),
            temperature: Some(1.0),
            top_p: None,
            top_k: Some(5),
            seed: Some(1),
            stop: vec!["END".into()],
            stream: true,
            thinking: Some(ThinkingConfig {
                budget_tokens: Some(10000),
                effort: None,
            }),
            output_schema: None,
            metadata: Some(json!({"user_id": "u_1"})),
            extra: Some(DialectExtra {
                dialect: Dialect::Anthropic,
                fields: [("context_management".to_owned(), json!({"edits": []}))]
                    .into_iter()
                    .collect(),
            }),
        };
        let wire = codec().encode_request(&req);
        assert_eq!(
            wire,
            json!({
                "model": "gpt-5",
                "store": false,
                "include": ["reasoning.encrypted_content"],
                "instructions": "You are Claude Code.\nBe careful.",
                "input": [
                    {"type": "message", "role": "user", "content": [
                        {"type": "input_text", "text": "Look at this"},
                        {"type": "input_image", "image_url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "auto"}
                    ]},
                    {"type": "message", "role": "assistant", "content": [
                        {"type": "output_text", "text": "Reading it.", "annotations": []}
                    ]},
                    {"type": "function_call", "arguments": "{\"file_path\":\"/a.rs\"}", "call_id": "toolu_01", "name": "Read"},
                    {"type": "function_call_output", "call_id": "toolu_01", "output": [
                        {"type": "input_text", "text": "fn main() {}"},
                        {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}
                    ]},
                    {"type": "message", "role": "system", "content": [
                        {"type": "input_text", "text": "<system-reminder>todo</system-reminder>"}
                    ]},
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]}
                ],
                "tools": [{"type": "function", "name": "Read", "description": "Read a file",
                           "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}},
                           "strict": false}],
                "tool_choice": "required",
                "max_output_tokens": 32000,
                "temperature": 1.0,
                "reasoning": {"effort": "medium"},
                "stream": true
            })
        );
    }

    #[test]
    fn foreign_calls_are_functions_whatever_their_arguments() {
        // Argument shapes prove nothing in a foreign request: only declared native tools
        // make a call custom or typed.
        let req = Request {
            model: "gpt-5".into(),
            turns: vec![
                Turn::text(Role::User, "run it"),
                Turn {
                    role: Role::Assistant,
                    parts: vec![
                        Part::ToolCall {
                            id: "c1".into(),
                            name: "shell".into(),
                            arguments: json!({"action": {"type": "exec", "command": ["ls"]}}),
                        },
                        Part::ToolCall {
                            id: "c2".into(),
                            name: "note".into(),
                            arguments: json!("not json"),
                        },
                    ],
                },
            ],
            tools: vec![ToolDef {
                name: "shell".into(),
                description: None,
                parameters: json!({"type": "object"}),
                native: None,
            }],
            ..Request::default()
        };
        let wire = codec().encode_request(&req);
        assert_eq!(wire["input"][1]["type"], "function_call");
        assert_eq!(
            wire["input"][1]["arguments"],
            "{\"action\":{\"type\":\"exec\",\"command\":[\"ls\"]}}"
        );
        assert_eq!(wire["input"][2]["type"], "function_call");
        assert_eq!(wire["input"][2]["arguments"], "not json");
    }

    #[test]
    fn output_schema_from_another_dialect() {
        let req = Request {
            model: "gpt-5".into(),
            turns: vec![Turn::text(Role::User, "weather?")],
            output_schema: Some(OutputSchema {
                name: None,
                schema: json!({"type": "object"}),
            }),
            ..Request::default()
        };
        let wire = codec().encode_request(&req);
        assert_eq!(
            wire["text"],
            json!({"format": {"type": "json_schema", "name": "output_schema", "schema": {"type": "object"}}})
        );
        assert!(wire.get("instructions").is_none());
        assert!(wire.get("reasoning").is_none());
        assert!(wire.get("include").is_none());
        assert_eq!(wire["stream"], json!(false));
    }

    fn sample_response() -> Response {
        Response {
            id: "resp_abc".into(),
            model: "gpt-5-codex".into(),
            parts: vec![
                Part::Thinking {
                    text: "**Planning**".into(),
                    signature: Some("gAAAAB-sig".into()),
                    redacted: None,
                },
                text("Applying the fix."),
                Part::ToolCall {
                    id: "call_1".into(),
                    name: "shell".into(),
                    arguments: json!({"command": ["cargo", "test"]}),
                },
                Part::ToolCall {
                    id: "call_2".into(),
                    name: "apply_patch".into(),
                    arguments: json!("*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"),
                },
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 50,
                cache_read_tokens: 20,
                cache_write_tokens: 0,
                reasoning_tokens: 10,
            },
        }
    }

    #[test]
    fn response_encodes_like_the_api_and_round_trips() {
        let resp = sample_response();
        let body = codec().encode_response(&resp);
        for key in [
            "id",
            "object",
            "created_at",
            "status",
            "error",
            "incomplete_details",
            "instructions",
            "metadata",
            "model",
            "output",
            "parallel_tool_calls",
            "temperature",
            "tool_choice",
            "tools",
            "top_p",
            "usage",
        ] {
            assert!(body.get(key).is_some(), "missing {key}");
        }
        assert_eq!(body["id"], "resp_abc");
        assert_eq!(body["object"], "response");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["error"], Value::Null);
        assert_eq!(body["incomplete_details"], Value::Null);
        assert!(body["created_at"].as_u64().unwrap_or(0) > 1_700_000_000);
        assert_eq!(body["model"], "gpt-5-codex");
        assert_eq!(body["tools"], json!([]));
        assert_eq!(
            body["output"],
            json!([
                {"id": "rs_abc_0", "type": "reasoning",
                 "summary": [{"type": "summary_text", "text": "**Planning**"}],
                 "encrypted_content": "gAAAAB-sig"},
                {"id": "msg_abc_1", "type": "message", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Applying the fix.", "annotations": []}]},
                {"id": "fc_abc_2", "type": "function_call", "status": "completed",
                 "arguments": "{\"command\":[\"cargo\",\"test\"]}", "call_id": "call_1", "name": "shell"},
                {"id": "ctc_abc_3", "type": "custom_tool_call", "status": "completed", "call_id": "call_2",
                 "name": "apply_patch", "input": "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"}
            ])
        );
        assert_eq!(
            body["usage"],
            json!({"input_tokens": 120, "input_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 0},
                   "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 10},
                   "total_tokens": 170})
        );
        let back = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(back, resp);
    }

    #[test]
    fn truncated_and_filtered_replies_are_incomplete() {
        let mut resp = sample_response();
        resp.parts.truncate(2);
        resp.stop_reason = StopReason::MaxTokens;
        let body = codec().encode_response(&resp);
        assert_eq!(body["status"], "incomplete");
        assert_eq!(
            body["incomplete_details"],
            json!({"reason": "max_output_tokens"})
        );
        let back = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(back.stop_reason, StopReason::MaxTokens);

        resp.stop_reason = StopReason::ContentFilter;
        let body = codec().encode_response(&resp);
        assert_eq!(
            body["incomplete_details"],
            json!({"reason": "content_filter"})
        );
        let back = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(back.stop_reason, StopReason::ContentFilter);

        // Redacted thinking and a foreign id survive the trip.
        let resp = Response {
            id: "msg_01XYZ".into(),
            model: "claude".into(),
            parts: vec![
                Part::Thinking {
                    text: String::new(),
                    signature: None,
                    redacted: Some("EmwKAhgB".into()),
                },
                text("ok"),
            ],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        };
        let body = codec().encode_response(&resp);
        assert_eq!(body["id"], "resp_msg_01XYZ");
        assert_eq!(body["output"][0]["summary"], json!([]));
        assert_eq!(
            body["output"][0]["encrypted_content"],
            "glider.redacted_thinking:EmwKAhgB"
        );
        let back = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(back.parts, resp.parts);
    }

    #[test]
    fn decodes_an_openai_response() {
        let body = json!({
            "id": "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b",
            "object": "response",
            "created_at": 1756315696,
            "status": "completed",
            "background": false,
            "error": null,
            "incomplete_details": null,
            "instructions": null,
            "max_output_tokens": null,
            "model": "gpt-5-2025-08-07",
            "output": [
                {"id": "rs_68af4030baa48193b0b43b4c2a176a1a05438e46b5f69a3b", "type": "reasoning",
                 "summary": [{"type": "summary_text", "text": "**Considering the weather**"}],
                 "encrypted_content": "gAAAAABor0Aw"},
                {"id": "msg_68af40337e58819392e935fb404414d005438e46b5f69a3b", "type": "message",
                 "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Checking."}]},
                {"id": "fc_68af4033", "type": "function_call", "status": "completed",
                 "arguments": "{\"location\":\"Paris, France\"}", "call_id": "call_9n6RvXfU", "name": "get_weather"},
                {"id": "ws_1", "type": "web_search_call", "status": "completed",
                 "action": {"type": "search", "query": "paris weather"}}
            ],
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "reasoning": {"effort": "medium", "summary": "auto"},
            "store": true,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1024},
                      "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 256},
                      "total_tokens": 1500},
            "user": null,
            "metadata": {}
        });
        let resp = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(
            resp.id,
            "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b"
        );
        assert_eq!(resp.model, "gpt-5-2025-08-07");
        assert_eq!(
            resp.parts,
            vec![
                Part::Thinking {
                    text: "**Considering the weather**".into(),
                    signature: Some("gAAAAABor0Aw".into()),
                    redacted: None
                },
                text("Checking."),
                Part::ToolCall {
                    id: "call_9n6RvXfU".into(),
                    name: "get_weather".into(),
                    arguments: json!({"location": "Paris, France"})
                },
            ]
        );
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.usage,
            Usage {
                input_tokens: 176,
                output_tokens: 300,
                cache_read_tokens: 1024,
                cache_write_tokens: 0,
                reasoning_tokens: 256
            }
        );
    }

    #[test]
    fn bad_backend_replies_are_bad_gateway() {
        for body in [&b"not json"[..], b"[]", b"{\"id\":\"resp_1\"}"] {
            let err = codec().decode_response(body).expect_err("garbage");
            assert_eq!(err.kind, ErrorKind::BadGateway);
        }
        let failed = json!({"id": "resp_1", "status": "failed", "output": [],
                            "error": {"code": "rate_limit_exceeded", "message": "Slow down"}});
        let err = codec()
            .decode_response(failed.to_string().as_bytes())
            .expect_err("failed");
        assert_eq!(err.kind, ErrorKind::RateLimit);
        assert_eq!(err.message, "Slow down");
        let missing_call_id =
            json!({"output": [{"type": "function_call", "name": "f", "arguments": "{}"}]});
        let err = codec()
            .decode_response(missing_call_id.to_string().as_bytes())
            .expect_err("no call id");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert!(err.message.contains("call_id"));
    }

    // --- streams -------------------------------------------------------------------------

    fn sse(events: &[Value]) -> String {
        let mut out = String::new();
        for event in events {
            let kind = event["type"].as_str().unwrap_or_default();
            out.push_str(&format!("event: {kind}\ndata: {event}\n\n"));
        }
        out
    }

    /// A stream shaped like the live API's for a reasoning model calling a function.
    fn captured_stream() -> String {
        let response = json!({"id": "resp_67c9", "object": "response", "created_at": 1741290958,
                              "status": "in_progress", "model": "gpt-5-2025-08-07", "output": [],
                              "usage": null});
        let mut done = response.clone();
        done["status"] = json!("completed");
        done["usage"] = json!({"input_tokens": 300, "input_tokens_details": {"cached_tokens": 100},
                               "output_tokens": 80, "output_tokens_details": {"reasoning_tokens": 40},
                               "total_tokens": 380});
        sse(&[
            json!({"type": "response.created", "sequence_number": 0, "response": response}),
            json!({"type": "response.in_progress", "sequence_number": 1, "response": response}),
            json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
                   "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
            json!({"type": "response.reasoning_summary_part.added", "sequence_number": 3, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
            json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 4, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0, "delta": "**Checking"}),
            json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 5, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0, "delta": " weather**"}),
            json!({"type": "response.reasoning_summary_text.done", "sequence_number": 6, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0, "text": "**Checking weather**"}),
            json!({"type": "response.reasoning_summary_part.done", "sequence_number": 7, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0,
                   "part": {"type": "summary_text", "text": "**Checking weather**"}}),
            json!({"type": "response.reasoning_summary_part.added", "sequence_number": 8, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 1, "part": {"type": "summary_text", "text": ""}}),
            json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 9, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 1, "delta": "Call the tool."}),
            json!({"type": "response.output_item.done", "sequence_number": 10, "output_index": 0,
                   "item": {"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAAA-enc",
                            "summary": [{"type": "summary_text", "text": "**Checking weather**"},
                                        {"type": "summary_text", "text": "Call the tool."}]}}),
            json!({"type": "response.output_item.added", "sequence_number": 11, "output_index": 1,
                   "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant",
                            "content": []}}),
            json!({"type": "response.content_part.added", "sequence_number": 12, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0,
                   "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}}),
            json!({"type": "response.output_text.delta", "sequence_number": 13, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0, "delta": "Let me ", "logprobs": []}),
            json!({"type": "response.output_text.delta", "sequence_number": 14, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0, "delta": "check – ☀️.", "logprobs": []}),
            json!({"type": "response.output_text.done", "sequence_number": 15, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0, "text": "Let me check – ☀️.", "logprobs": []}),
            json!({"type": "response.content_part.done", "sequence_number": 16, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0,
                   "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": "Let me check – ☀️."}}),
            json!({"type": "response.output_item.done", "sequence_number": 17, "output_index": 1,
                   "item": {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "annotations": [], "text": "Let me check – ☀️."}]}}),
            json!({"type": "response.output_item.added", "sequence_number": 18, "output_index": 2,
                   "item": {"id": "fc_1", "type": "function_call", "status": "in_progress", "arguments": "",
                            "call_id": "call_9", "name": "get_weather"}}),
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 19, "item_id": "fc_1",
                   "output_index": 2, "delta": "{\"city\":"}),
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 20, "item_id": "fc_1",
                   "output_index": 2, "delta": "\"Paris\"}"}),
            json!({"type": "response.function_call_arguments.done", "sequence_number": 21, "item_id": "fc_1",
                   "output_index": 2, "arguments": "{\"city\":\"Paris\"}"}),
            json!({"type": "response.output_item.done", "sequence_number": 22, "output_index": 2,
                   "item": {"id": "fc_1", "type": "function_call", "status": "completed",
                            "arguments": "{\"city\":\"Paris\"}", "call_id": "call_9", "name": "get_weather"}}),
            json!({"type": "response.completed", "sequence_number": 23, "response": done}),
        ])
    }

    fn decode_all(wire: &[u8], split: usize) -> Vec<StreamEvent> {
        let mut decoder = codec().stream_decoder();
        let mut events = decoder.feed(&wire[..split]).expect("first half");
        events.extend(decoder.feed(&wire[split..]).expect("second half"));
        events.extend(decoder.finish());
        events
    }

    /// Merge consecutive deltas of the same part so chunking does not matter.
    fn coalesce(events: Vec<StreamEvent>) -> Vec<StreamEvent> {
        let mut out: Vec<StreamEvent> = Vec::new();
        for event in events {
            match (out.last_mut(), &event) {
                (
                    Some(StreamEvent::TextDelta { index: a, text }),
                    StreamEvent::TextDelta {
                        index: b,
                        text: more,
                    },
                )
                | (
                    Some(StreamEvent::ThinkingDelta { index: a, text }),
                    StreamEvent::ThinkingDelta {
                        index: b,
                        text: more,
                    },
                ) if a == b => {
                    text.push_str(more);
                }
                (
                    Some(StreamEvent::ToolArgsDelta { index: a, json }),
                    StreamEvent::ToolArgsDelta {
                        index: b,
                        json: more,
                    },
                ) if a == b => {
                    json.push_str(more);
                }
                _ => out.push(event),
            }
        }
        out
    }

    #[test]
    fn decodes_a_captured_stream_split_anywhere() {
        let wire = captured_stream();
        let wire = wire.as_bytes();
        let expected = vec![
            StreamEvent::Start {
                id: "resp_67c9".into(),
                model: "gpt-5-2025-08-07".into(),
                usage: Usage::default(),
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Thinking,
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "**Checking".into(),
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: " weather**".into(),
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "\n\n".into(),
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "Call the tool.".into(),
            },
            StreamEvent::ThinkingSignature {
                index: 0,
                signature: "gAAAA-enc".into(),
            },
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "Let me ".into(),
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "check – ☀️.".into(),
            },
            StreamEvent::PartStop { index: 1 },
            StreamEvent::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "call_9".into(),
                    name: "get_weather".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "{\"city\":".into(),
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "\"Paris\"}".into(),
            },
            StreamEvent::PartStop { index: 2 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 200,
                    output_tokens: 80,
                    cache_read_tokens: 100,
                    cache_write_tokens: 0,
                    reasoning_tokens: 40,
                },
            },
        ];
        assert_eq!(decode_all(wire, wire.len()), expected);
        for split in 0..=wire.len() {
            assert_eq!(
                coalesce(decode_all(wire, split)),
                coalesce(expected.clone()),
                "split at {split}"
            );
        }
        let mut builder = ResponseBuilder::new();
        for event in &expected {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(resp.plain_text(), "Let me check – ☀️.");
        assert_eq!(
            resp.parts[0],
            Part::Thinking {
                text: "**Checking weather**\n\nCall the tool.".into(),
                signature: Some("gAAAA-enc".into()),
                redacted: None
            }
        );
    }

    #[test]
    fn decodes_custom_calls_done_only_items_and_incomplete() {
        let wire = sse(&[
            json!({"type": "response.created", "sequence_number": 0,
                   "response": {"id": "resp_2", "model": "gpt-5-codex", "status": "in_progress", "output": []}}),
            // A reasoning item with nothing to carry makes no part.
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                   "item": {"id": "rs_0", "type": "reasoning", "summary": []}}),
            json!({"type": "response.output_item.done", "sequence_number": 1, "output_index": 0,
                   "item": {"id": "rs_0", "type": "reasoning", "summary": []}}),
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                   "item": {"id": "ctc_1", "type": "custom_tool_call", "status": "in_progress",
                            "call_id": "call_P", "name": "apply_patch", "input": ""}}),
            json!({"type": "response.custom_tool_call_input.delta", "sequence_number": 2, "item_id": "ctc_1",
                   "output_index": 0, "delta": "*** Begin Patch\n"}),
            json!({"type": "response.custom_tool_call_input.delta", "sequence_number": 3, "item_id": "ctc_1",
                   "output_index": 0, "delta": "*** End Patch\n"}),
            json!({"type": "response.custom_tool_call_input.done", "sequence_number": 4, "item_id": "ctc_1",
                   "output_index": 0, "input": "*** Begin Patch\n*** End Patch\n"}),
            json!({"type": "response.output_item.done", "sequence_number": 5, "output_index": 0,
                   "item": {"id": "ctc_1", "type": "custom_tool_call", "status": "completed",
                            "call_id": "call_P", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch\n"}}),
            // Items that only arrive whole (some servers send no deltas).
            json!({"type": "response.output_item.done", "sequence_number": 6, "output_index": 1,
                   "item": {"id": "msg_2", "type": "message", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": "Done", "annotations": []}]}}),
            json!({"type": "response.output_item.done", "sequence_number": 7, "output_index": 2,
                   "item": {"id": "fc_2", "type": "function_call", "status": "completed", "namespace": "mcp__gh",
                            "call_id": "call_Q", "name": "get_issue", "arguments": "{\"n\":1}"}}),
            json!({"type": "response.output_item.added", "sequence_number": 8, "output_index": 3,
                   "item": {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}}),
            json!({"type": "response.output_item.done", "sequence_number": 9, "output_index": 3,
                   "item": {"id": "ws_1", "type": "web_search_call", "status": "completed",
                            "action": {"type": "search", "query": "q"}}}),
            json!({"type": "response.incomplete", "sequence_number": 10,
                   "response": {"id": "resp_2", "status": "incomplete",
                                "incomplete_details": {"reason": "max_output_tokens"},
                                "usage": {"input_tokens": 10, "output_tokens": 4}}}),
        ]);
        let events = decode_all(wire.as_bytes(), wire.len());
        let mut builder = ResponseBuilder::new();
        for event in &events {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(resp.id, "resp_2");
        assert_eq!(resp.stop_reason, StopReason::MaxTokens);
        assert_eq!(resp.usage.input_tokens, 10);
        assert_eq!(
            resp.parts,
            vec![
                Part::ToolCall {
                    id: "call_P".into(),
                    name: "apply_patch".into(),
                    arguments: json!("*** Begin Patch\n*** End Patch\n")
                },
                text("Done"),
                Part::ToolCall {
                    id: "call_Q".into(),
                    name: "mcp__gh.get_issue".into(),
                    arguments: json!({"n": 1})
                },
            ]
        );
        let starts: Vec<usize> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::PartStart { index, .. } => Some(*index),
                _ => None,
            })
            .collect();
        assert_eq!(starts, vec![0, 1, 2]);
    }

    #[test]
    fn stream_failures_become_errors() {
        // Truncated before response.completed.
        let wire = captured_stream();
        let cut = wire
            .find("event: response.completed")
            .expect("has completed");
        let events = decode_all(&wire.as_bytes()[..cut], cut);
        match events.last() {
            Some(StreamEvent::Error { error }) => {
                assert_eq!(error.kind, ErrorKind::BadGateway);
                assert!(error.message.contains("stream ended before"));
            }
            other => panic!("expected error, got {other:?}"),
        }
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::Finish { .. }))
        );

        // The live API's nested error event.
        let wire = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_3\",\"model\":\"m\"}}\n\nevent: error\ndata: {\"type\":\"error\",\"sequence_number\":1,\"error\":{\"type\":\"too_many_requests\",\"code\":\"too_many_requests\",\"message\":\"Too Many Requests\",\"param\":null}}\n\n";
        let events = decode_all(wire.as_bytes(), 10);
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[1],
            StreamEvent::Error {
                error: ApiError::new(ErrorKind::RateLimit, "Too Many Requests")
            }
        );

        // The documented flat error event.
        let wire = "event: error\ndata: {\"type\":\"error\",\"sequence_number\":0,\"code\":\"server_error\",\"message\":\"boom\",\"param\":null}\n\n";
        let events = decode_all(wire.as_bytes(), 5);
        assert_eq!(
            events,
            vec![StreamEvent::Error {
                error: ApiError::new(ErrorKind::BadGateway, "boom")
            }]
        );

        // response.failed carries the error on the response.
        let wire = sse(&[
            json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_4", "model": "m"}}),
            json!({"type": "response.failed", "sequence_number": 1,
                   "response": {"id": "resp_4", "status": "failed",
                                "error": {"code": "server_error", "message": "The model crashed"}}}),
        ]);
        let events = decode_all(wire.as_bytes(), 3);
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Error {
                error: ApiError::new(ErrorKind::BadGateway, "The model crashed")
            })
        );
        assert_eq!(events.len(), 2);

        // Malformed JSON is an error from feed.
        let mut decoder = codec().stream_decoder();
        let err = decoder
            .feed(b"event: response.created\ndata: {not json\n\n")
            .expect_err("malformed");
        assert_eq!(err.kind, ErrorKind::BadGateway);
    }

    fn parse_sse(bytes: &[u8]) -> Vec<(String, Value)> {
        let mut parser = SseParser::new();
        let mut events: Vec<SseEvent> = parser.feed(bytes);
        events.extend(parser.finish());
        events
            .into_iter()
            .map(|e| {
                let data: Value = serde_json::from_str(&e.data).expect("JSON data");
                (e.event.unwrap_or_default(), data)
            })
            .collect()
    }

    fn encode_events(events: &[StreamEvent]) -> Vec<u8> {
        let mut encoder = codec().stream_encoder();
        let mut out = Vec::new();
        for event in events {
            encoder.encode(event, &mut out);
        }
        out
    }

    #[test]
    fn stream_encoding_matches_the_api() {
        let resp = sample_response();
        let wire = encode_events(&events_of(&resp));
        let events = parse_sse(&wire);
        for (i, (name, data)) in events.iter().enumerate() {
            assert_eq!(data["type"].as_str(), Some(name.as_str()), "event {i}");
            assert_eq!(data["sequence_number"], json!(i), "event {i}");
        }
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.reasoning_summary_part.added",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.done",
                "response.reasoning_summary_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.custom_tool_call_input.delta",
                "response.custom_tool_call_input.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let data = |i: usize| &events[i].1;
        assert_eq!(data(0)["response"]["id"], "resp_abc");
        assert_eq!(data(0)["response"]["status"], "in_progress");
        assert_eq!(data(0)["response"]["output"], json!([]));
        assert_eq!(data(0)["response"]["usage"], Value::Null);
        assert_eq!(data(0)["response"]["model"], "gpt-5-codex");
        assert_eq!(
            data(2)["item"],
            json!({"id": "rs_abc_0", "type": "reasoning", "summary": []})
        );
        assert_eq!(data(2)["output_index"], 0);
        assert_eq!(data(3)["part"], json!({"type": "summary_text", "text": ""}));
        assert_eq!(data(4)["delta"], "**Planning**");
        assert_eq!(data(4)["summary_index"], 0);
        assert_eq!(data(4)["item_id"], "rs_abc_0");
        assert_eq!(data(5)["text"], "**Planning**");
        assert_eq!(data(7)["item"]["encrypted_content"], "gAAAAB-sig");
        assert_eq!(
            data(8)["item"],
            json!({"id": "msg_abc_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []})
        );
        assert_eq!(data(8)["output_index"], 1);
        assert_eq!(
            data(9)["part"],
            json!({"type": "output_text", "text": "", "annotations": []})
        );
        assert_eq!(data(10)["item_id"], "msg_abc_1");
        assert_eq!(data(10)["output_index"], 1);
        assert_eq!(data(10)["content_index"], 0);
        assert_eq!(data(10)["delta"], "Applying the fix.");
        assert_eq!(data(11)["text"], "Applying the fix.");
        assert_eq!(data(12)["part"]["text"], "Applying the fix.");
        assert_eq!(data(13)["item"]["status"], "completed");
        assert_eq!(
            data(14)["item"],
            json!({"id": "fc_abc_2", "type": "function_call", "status": "in_progress",
                   "arguments": "", "call_id": "call_1", "name": "shell"})
        );
        assert_eq!(data(15)["delta"], "{\"command\":[\"cargo\",\"test\"]}");
        assert_eq!(data(16)["arguments"], "{\"command\":[\"cargo\",\"test\"]}");
        assert_eq!(
            data(17)["item"]["arguments"],
            "{\"command\":[\"cargo\",\"test\"]}"
        );
        assert_eq!(data(18)["item"]["type"], "custom_tool_call");
        assert_eq!(data(18)["item"]["input"], "");
        assert_eq!(
            data(20)["input"],
            "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
        );
        let done = &data(22)["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["usage"]["input_tokens"], 120);
        assert_eq!(done["usage"]["total_tokens"], 170);
        // The final object equals the non-streamed one (bar the clock).
        let mut whole = codec().encode_response(&resp);
        whole["created_at"] = done["created_at"].clone();
        assert_eq!(done, &whole);

        // Our own decoder reads it back to the same reply.
        let mut builder = ResponseBuilder::new();
        for event in decode_all(&wire, wire.len() / 2) {
            builder.push(&event);
        }
        assert_eq!(builder.finish().expect("complete"), resp);
    }

    #[test]
    fn stream_encoder_picks_the_call_kind_from_the_arguments() {
        let start = StreamEvent::Start {
            id: "chatcmpl-9".into(),
            model: "qwen3".into(),
            usage: Usage::default(),
        };
        let call = |index, id: &str, name: &str| StreamEvent::PartStart {
            index,
            kind: PartKind::ToolCall {
                id: id.into(),
                name: name.into(),
            },
        };
        let args = |index, json: &str| StreamEvent::ToolArgsDelta {
            index,
            json: json.into(),
        };
        let wire = encode_events(&[
            start,
            // A call whose first fragment is empty still announces on its first brace.
            call(0, "c1", "read"),
            args(0, ""),
            args(0, " {\"path\""),
            args(0, ":\"a\"}"),
            StreamEvent::PartStop { index: 0 },
            // No arguments at all: `{}`.
            call(1, "c2", "list"),
            StreamEvent::PartStop { index: 1 },
            // Free text: a custom tool call.
            call(2, "c3", "apply_patch"),
            args(2, "*** Begin Patch"),
            StreamEvent::PartStop { index: 2 },
            // A typed call waits for its whole arguments.
            call(3, "c4", "local_shell"),
            args(3, "{\"action\":{\"type\":\"exec\","),
            args(3, "\"command\":[\"ls\"]}}"),
            StreamEvent::PartStop { index: 3 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                usage: Usage::default(),
            },
        ]);
        let events = parse_sse(&wire);
        let added: Vec<&Value> = events
            .iter()
            .filter(|(n, _)| n == "response.output_item.added")
            .map(|(_, d)| &d["item"])
            .collect();
        assert_eq!(added[0]["type"], "function_call");
        assert_eq!(added[0]["id"], "fc_chatcmpl-9_0");
        assert_eq!(added[1]["type"], "function_call");
        assert_eq!(added[2]["type"], "custom_tool_call");
        assert_eq!(added[3]["type"], "local_shell_call");
        assert_eq!(added[3]["action"]["command"], json!(["ls"]));
        let deltas: Vec<&Value> = events
            .iter()
            .filter(|(n, _)| n == "response.function_call_arguments.delta")
            .map(|(_, d)| &d["delta"])
            .collect();
        assert_eq!(
            deltas,
            vec![&json!(" {\"path\""), &json!(":\"a\"}"), &json!("{}")]
        );
        let done = &events.last().expect("completed").1["response"];
        assert_eq!(done["id"], "resp_chatcmpl-9");
        assert_eq!(done["output"][1]["arguments"], "{}");
        assert_eq!(
            done["output"][3],
            json!({"id": "tc_chatcmpl-9_3", "type": "local_shell_call", "status": "completed",
                   "call_id": "c4", "action": {"type": "exec", "command": ["ls"]}})
        );
    }

    #[test]
    fn stream_encoder_ends_incomplete_and_on_error() {
        let mut resp = sample_response();
        resp.parts.truncate(2);
        resp.stop_reason = StopReason::MaxTokens;
        let events = parse_sse(&encode_events(&events_of(&resp)));
        let (name, last) = events.last().expect("events");
        assert_eq!(name, "response.incomplete");
        assert_eq!(last["response"]["status"], "incomplete");
        assert_eq!(
            last["response"]["incomplete_details"],
            json!({"reason": "max_output_tokens"})
        );

        let mut events = events_of(&sample_response());
        events.truncate(5);
        events.push(StreamEvent::Error {
            error: ApiError::new(ErrorKind::Overloaded, "all backends are busy"),
        });
        // Anything after an error is ignored.
        events.push(StreamEvent::Finish {
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        });
        let wire = encode_events(&events);
        let parsed = parse_sse(&wire);
        let n = parsed.len();
        let (name, error) = &parsed[n - 2];
        assert_eq!(name, "error");
        assert_eq!(error["type"], "error");
        assert_eq!(error["code"], "server_error");
        assert_eq!(error["message"], "all backends are busy");
        assert_eq!(error["param"], Value::Null);
        assert_eq!(error["sequence_number"], json!(n - 2));
        assert_eq!(
            error["error"],
            json!({"type": "server_error", "code": "server_error", "message": "all backends are busy", "param": null})
        );
        let (name, failed) = &parsed[n - 1];
        assert_eq!(name, "response.failed");
        assert_eq!(failed["response"]["status"], "failed");
        assert_eq!(
            failed["response"]["error"],
            json!({"code": "server_error", "message": "all backends are busy"})
        );
        // Our decoder surfaces it.
        let decoded = decode_all(&wire, 1);
        assert_eq!(
            decoded.last(),
            Some(&StreamEvent::Error {
                error: ApiError::new(ErrorKind::BadGateway, "all backends are busy")
            })
        );

        // An error before anything else still reads as an error.
        let parsed = parse_sse(&encode_events(&[StreamEvent::Error {
            error: ApiError::new(ErrorKind::RateLimit, "slow down"),
        }]));
        assert_eq!(parsed[0].0, "error");
        assert_eq!(parsed[0].1["code"], "rate_limit_exceeded");
        assert_eq!(parsed[0].1["sequence_number"], 0);
        assert_eq!(
            parsed[1].1["response"]["error"]["code"],
            "rate_limit_exceeded"
        );
    }

    #[test]
    fn error_bodies() {
        let err = ApiError::new(ErrorKind::NotFound, "The model `gpt-9` does not exist");
        assert_eq!(
            codec().encode_error(&err),
            json!({"error": {"message": "The model `gpt-9` does not exist",
                             "type": "invalid_request_error", "param": null, "code": "model_not_found"}})
        );
        let err = ApiError::invalid("input: required").with_param("input");
        assert_eq!(
            codec().encode_error(&err),
            json!({"error": {"message": "input: required", "type": "invalid_request_error",
                             "param": "input", "code": null}})
        );
        let body = codec().encode_error(&ApiError::new(ErrorKind::RateLimit, "Rate limit reached"));
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        let body = codec().encode_error(&ApiError::new(ErrorKind::BadGateway, "upstream died"));
        assert_eq!(body["error"]["type"], "server_error");

        let real = br#"{"error": {"message": "Incorrect API key provided: sk-***", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}"#;
        let err = codec().decode_error(401, real);
        assert_eq!(err.kind, ErrorKind::Authentication);
        assert_eq!(err.message, "Incorrect API key provided: sk-***");
        let err = codec().decode_error(
            400,
            br#"{"error": {"message": "Invalid value: 'x'.", "type": "invalid_request_error", "param": "input[0].content[0].type", "code": "invalid_value"}}"#,
        );
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert_eq!(err.param.as_deref(), Some("input[0].content[0].type"));
        let err = codec().decode_error(429, br#"{"error": {"message": "Rate limit reached for gpt-5", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}"#);
        assert_eq!(err.kind, ErrorKind::RateLimit);
        let err = codec().decode_error(502, b"<html>Bad Gateway</html>");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert_eq!(err.message, "<html>Bad Gateway</html>");
        let err = codec().decode_error(503, b"");
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert_eq!(err.message, "backend returned HTTP 503");
        // Our own error body reads back to the same error.
        let original = ApiError::invalid("tools[0].name: required").with_param("tools[0].name");
        let body = codec().encode_error(&original).to_string();
        assert_eq!(codec().decode_error(400, body.as_bytes()), original);
    }

    #[test]
    fn content_type_is_sse() {
        assert_eq!(codec().stream_content_type(), "text/event-stream");
        assert_eq!(codec().dialect(), Dialect::OpenAiResponses);
    }
}
