//! Anthropic Messages API codec (`POST /v1/messages`): decodes and encodes requests,
//! non-streamed replies, SSE streams and error bodies between Anthropic's wire format and
//! ngl, keeping Claude Code's shapes (`cache_control`, signed thinking, `role: "system"`
//! entries inside `messages`, server tools) wherever ngl can carry them.
//!
//! # Defaults
//! - A request without `max_tokens` is encoded with [`DEFAULT_MAX_TOKENS`] (8192), since
//!   the API requires the field.
//! - An effort-only [`ThinkingConfig`] (OpenAI `reasoning_effort`) becomes
//!   `thinking: {type: enabled, budget_tokens}` with low 2048, medium 8192 (also any
//!   unknown effort), high/xhigh/max 24576; `none`/`minimal` mean no thinking. It is sent
//!   only when `max_tokens` exceeds the budget and the sampling parameters allow thinking
//!   (temperature unset or 1, no `top_k`, `top_p` unset or >= 0.95); else it is omitted.
//!   A config with neither budget nor effort is Anthropic's `{type: adaptive}`.
//! - `EndTurn` on a reply that contains tool calls is sent as `tool_use`, so clients run
//!   the tools; `ContentFilter` is sent as `refusal`. Unknown stop reasons decode as
//!   `EndTurn`, `model_context_window_exceeded` as `MaxTokens`.
//! - Reply ids that do not start with `msg_` are prefixed with it.
//!
//! # Lossy mappings
//! - Assistant thinking without a signature (from other dialects) is dropped on encode:
//!   the API rejects unsigned thinking. Thinking with an empty signature decodes unsigned.
//! - `redacted_thinking` survives requests and whole replies, but a streamed one is
//!   skipped: ngl's stream grammar has no event for its data.
//! - `server_tool_use` reply blocks decode as ordinary tool calls; their
//!   `*_tool_result` blocks (web search results, ...) and `citations` are dropped.
//! - Request content blocks other than text, image, tool_use, tool_result, thinking and
//!   redacted_thinking (`document`, `search_result`, `file` sources, ...) are rejected
//!   with a 400, as ngl cannot carry them.
//! - `cache_control` is kept on text and image parts. A `tool_result`'s `cache_control`
//!   moves onto the last part of its content and back on encode (lost if the result is
//!   empty); on `tool_use` blocks and tool definitions it is dropped, as are custom
//!   tools' `strict`, `cache_control` and other extra keys.
//! - `stop_sequence` (which sequence matched) is not modelled: encoded replies say null.
//! - `metadata` is re-emitted only as `{user_id}` (the only key the API accepts);
//!   `seed` is dropped (no Anthropic counterpart); `thinking: {type: disabled}` decodes
//!   as no thinking config and so is omitted on encode.
//! - Tool call ids are sanitised to `[A-Za-z0-9_-]` on request encode (the API's
//!   pattern); non-object tool arguments are sent as `{}`; image `data:` URLs are sent
//!   as base64 sources.
//! - Usage keeps Anthropic's meaning: `input_tokens` excludes cache reads and writes.

use std::collections::HashMap;

use glider_ngl::stream::PartKind;
use glider_ngl::{
    ApiError, Dialect, DialectExtra, ErrorKind, ImageSource, NativeTool, OutputSchema, Part,
    Request, Response, Role, StopReason, StreamEvent, ThinkingConfig, ToolChoice, ToolDef, Turn,
    Usage,
};
use serde_json::{Map, Value, json};

use crate::framing::{SseEvent, SseParser, write_sse_json};
use crate::{Codec, StreamDecoder, StreamEncoder, parse_json};

/// The Anthropic Messages dialect.
pub struct Anthropic;

/// `max_tokens` sent when the request has none (the API requires the field).
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Top-level request fields ngl models; everything else goes to `Request.extra`.
/// `output_config` and `output_format` are read *and* kept in `extra`.
const MODELLED_FIELDS: &[&str] = &[
    "model",
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "stream",
    "metadata",
];

/// Longest backend error text kept when the body is not Anthropic's error JSON.
const MAX_ERROR_TEXT: usize = 500;

impl Codec for Anthropic {
    fn dialect(&self) -> Dialect {
        Dialect::Anthropic
    }

    fn decode_request(&self, body: &[u8]) -> Result<Request, ApiError> {
        decode_request(&parse_json(body)?)
    }

    fn encode_request(&self, req: &Request) -> Value {
        encode_request(req)
    }

    fn decode_response(&self, body: &[u8]) -> Result<Response, ApiError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::new(
                ErrorKind::BadGateway,
                format!("anthropic response is not JSON: {e}"),
            )
        })?;
        decode_response(&value)
    }

    fn encode_response(&self, resp: &Response) -> Value {
        encode_response(resp)
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(AnthropicStreamDecoder::default())
    }

    fn stream_encoder(&self) -> Box<dyn StreamEncoder> {
        Box::new(AnthropicStreamEncoder::default())
    }

    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn encode_error(&self, err: &ApiError) -> Value {
        error_body(err)
    }

    fn decode_error(&self, status: u16, body: &[u8]) -> ApiError {
        decode_error(status, body)
    }
}

// ---------------------------------------------------------------------------------------
// Field helpers (request decoding: errors are 400s naming the field)
// ---------------------------------------------------------------------------------------

type Object = Map<String, Value>;

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn field_err(path: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("{path}: {message}")).with_param(path)
}

fn as_object<'a>(value: &'a Value, path: &str) -> Result<&'a Object, ApiError> {
    value
        .as_object()
        .ok_or_else(|| field_err(path, "expected object"))
}

/// A field that may be absent or null.
fn present<'a>(obj: &'a Object, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn required<'a>(obj: &'a Object, key: &str, path: &str) -> Result<&'a Value, ApiError> {
    present(obj, key).ok_or_else(|| field_err(&join(path, key), "Field required"))
}

fn required_str<'a>(obj: &'a Object, key: &str, path: &str) -> Result<&'a str, ApiError> {
    required(obj, key, path)?
        .as_str()
        .ok_or_else(|| field_err(&join(path, key), "expected string"))
}

fn optional_str<'a>(obj: &'a Object, key: &str, path: &str) -> Result<Option<&'a str>, ApiError> {
    match present(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(field_err(&join(path, key), "expected string")),
    }
}

fn optional_u32(obj: &Object, key: &str, path: &str) -> Result<Option<u32>, ApiError> {
    match present(obj, key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| field_err(&join(path, key), "expected a non-negative integer")),
    }
}

fn optional_f64(obj: &Object, key: &str, path: &str) -> Result<Option<f64>, ApiError> {
    match present(obj, key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| field_err(&join(path, key), "expected number")),
    }
}

fn optional_bool(obj: &Object, key: &str, path: &str) -> Result<Option<bool>, ApiError> {
    match present(obj, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(field_err(&join(path, key), "expected boolean")),
    }
}

fn cache_control(obj: &Object) -> Option<Value> {
    present(obj, "cache_control").cloned()
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

// ---------------------------------------------------------------------------------------
// Request decoding
// ---------------------------------------------------------------------------------------

fn decode_request(value: &Value) -> Result<Request, ApiError> {
    let obj = value
        .as_object()
        .ok_or_else(|| ApiError::invalid("request body: expected a JSON object"))?;
    let model = required_str(obj, "model", "")?.to_owned();
    let max_tokens = optional_u32(obj, "max_tokens", "")?
        .ok_or_else(|| field_err("max_tokens", "Field required"))?;
    if max_tokens == 0 {
        return Err(field_err(
            "max_tokens",
            "Input should be greater than or equal to 1",
        ));
    }
    let messages = required(obj, "messages", "")?
        .as_array()
        .ok_or_else(|| field_err("messages", "expected array"))?;

    let mut turns = decode_system(present(obj, "system"))?;
    turns.extend(decode_messages(messages)?);
    let (tool_choice, parallel_tool_calls) = decode_tool_choice(present(obj, "tool_choice"))?;
    let metadata = match present(obj, "metadata") {
        None => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(_) => return Err(field_err("metadata", "expected object")),
    };
    let fields: Object = obj
        .iter()
        .filter(|(key, _)| !MODELLED_FIELDS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();

    Ok(Request {
        model,
        turns,
        tools: decode_tools(present(obj, "tools"))?,
        tool_choice,
        parallel_tool_calls,
        max_tokens: Some(max_tokens),
        temperature: optional_f64(obj, "temperature", "")?,
        top_p: optional_f64(obj, "top_p", "")?,
        top_k: optional_u32(obj, "top_k", "")?,
        seed: None,
        stop: decode_stop_sequences(present(obj, "stop_sequences"))?,
        stream: optional_bool(obj, "stream", "")?.unwrap_or(false),
        thinking: decode_thinking(present(obj, "thinking"))?,
        output_schema: decode_output_schema(obj)?,
        metadata,
        extra: (!fields.is_empty()).then(|| DialectExtra {
            dialect: Dialect::Anthropic,
            fields,
        }),
    })
}

/// Top-level `system` (string or text blocks) → one leading System turn.
fn decode_system(system: Option<&Value>) -> Result<Vec<Turn>, ApiError> {
    let Some(system) = system else {
        return Ok(Vec::new());
    };
    let parts = match system {
        Value::String(s) if s.is_empty() => Vec::new(),
        _ => decode_text_content(system, "system")?,
    };
    Ok(if parts.is_empty() {
        Vec::new()
    } else {
        vec![Turn {
            role: Role::System,
            parts,
        }]
    })
}

/// System content: a string or an array of text blocks.
fn decode_text_content(content: &Value, path: &str) -> Result<Vec<Part>, ApiError> {
    match content {
        Value::String(s) => Ok(vec![Part::text(s.clone())]),
        Value::Array(blocks) => blocks
            .iter()
            .enumerate()
            .map(|(i, block)| {
                let path = format!("{path}.{i}");
                let obj = as_object(block, &path)?;
                let kind = required_str(obj, "type", &path)?;
                if kind != "text" {
                    return Err(field_err(
                        &join(&path, "type"),
                        format!("expected 'text', got '{kind}'"),
                    ));
                }
                Ok(Part::Text {
                    text: required_str(obj, "text", &path)?.to_owned(),
                    cache_control: cache_control(obj),
                })
            })
            .collect(),
        _ => Err(field_err(path, "expected string or array")),
    }
}

fn decode_messages(messages: &[Value]) -> Result<Vec<Turn>, ApiError> {
    let mut turns = Vec::new();
    // tool_use id → tool name, so tool results can carry the name (Ollama wants it).
    let mut tool_names: HashMap<String, String> = HashMap::new();
    for (i, message) in messages.iter().enumerate() {
        let path = format!("messages.{i}");
        let obj = as_object(message, &path)?;
        let role = required_str(obj, "role", &path)?;
        let content = required(obj, "content", &path)?;
        let content_path = join(&path, "content");
        match role {
            "system" => turns.push(Turn {
                role: Role::System,
                parts: decode_text_content(content, &content_path)?,
            }),
            "assistant" => turns.push(Turn {
                role: Role::Assistant,
                parts: decode_content(content, &content_path, &mut tool_names)?,
            }),
            "user" => {
                let parts = decode_content(content, &content_path, &mut tool_names)?;
                let (results, rest): (Vec<Part>, Vec<Part>) = parts
                    .into_iter()
                    .partition(|p| matches!(p, Part::ToolResult { .. }));
                let had_results = !results.is_empty();
                if had_results {
                    turns.push(Turn {
                        role: Role::Tool,
                        parts: results,
                    });
                }
                if !rest.is_empty() || !had_results {
                    turns.push(Turn {
                        role: Role::User,
                        parts: rest,
                    });
                }
            }
            other => {
                return Err(field_err(
                    &join(&path, "role"),
                    format!("expected 'user', 'assistant' or 'system', got '{other}'"),
                ));
            }
        }
    }
    Ok(turns)
}

fn decode_content(
    content: &Value,
    path: &str,
    tool_names: &mut HashMap<String, String>,
) -> Result<Vec<Part>, ApiError> {
    match content {
        Value::String(s) => Ok(vec![Part::text(s.clone())]),
        Value::Array(blocks) => blocks
            .iter()
            .enumerate()
            .map(|(i, block)| decode_block(block, &format!("{path}.{i}"), tool_names))
            .collect(),
        _ => Err(field_err(path, "expected string or array")),
    }
}

fn decode_block(
    block: &Value,
    path: &str,
    tool_names: &mut HashMap<String, String>,
) -> Result<Part, ApiError> {
    let obj = as_object(block, path)?;
    match required_str(obj, "type", path)? {
        "text" => Ok(Part::Text {
            text: required_str(obj, "text", path)?.to_owned(),
            cache_control: cache_control(obj),
        }),
        "image" => decode_image(obj, path),
        "tool_use" => {
            let id = required_str(obj, "id", path)?.to_owned();
            let name = required_str(obj, "name", path)?.to_owned();
            tool_names.insert(id.clone(), name.clone());
            Ok(Part::ToolCall {
                id,
                name,
                arguments: present(obj, "input").cloned().unwrap_or_else(empty_object),
            })
        }
        "tool_result" => decode_tool_result(obj, path, tool_names),
        "thinking" => Ok(Part::Thinking {
            text: required_str(obj, "thinking", path)?.to_owned(),
            signature: optional_str(obj, "signature", path)?
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            redacted: None,
        }),
        "redacted_thinking" => Ok(Part::Thinking {
            text: String::new(),
            signature: None,
            redacted: Some(required_str(obj, "data", path)?.to_owned()),
        }),
        _ => Ok(native(block)),
    }
}

/// A block ngl does not model, kept for an Anthropic backend.
fn native(block: &Value) -> Part {
    Part::Native {
        dialect: Dialect::Anthropic,
        raw: block.clone(),
    }
}

fn decode_image(obj: &Object, path: &str) -> Result<Part, ApiError> {
    let source_path = join(path, "source");
    let source = as_object(required(obj, "source", path)?, &source_path)?;
    let source = match required_str(source, "type", &source_path)? {
        "base64" => ImageSource::Base64 {
            media_type: required_str(source, "media_type", &source_path)?.to_owned(),
            data: required_str(source, "data", &source_path)?.to_owned(),
        },
        "url" => ImageSource::Url {
            url: required_str(source, "url", &source_path)?.to_owned(),
        },
        other => {
            return Err(field_err(
                &join(&source_path, "type"),
                format!("unsupported image source type '{other}' (expected 'base64' or 'url')"),
            ));
        }
    };
    Ok(Part::Image {
        source,
        cache_control: cache_control(obj),
    })
}

fn decode_tool_result(
    obj: &Object,
    path: &str,
    tool_names: &HashMap<String, String>,
) -> Result<Part, ApiError> {
    let call_id = required_str(obj, "tool_use_id", path)?.to_owned();
    let content_path = join(path, "content");
    let mut content = match present(obj, "content") {
        None => Vec::new(),
        Some(Value::String(s)) if s.is_empty() => Vec::new(),
        Some(Value::String(s)) => vec![Part::text(s.clone())],
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(i, block)| {
                let path = format!("{content_path}.{i}");
                let inner = as_object(block, &path)?;
                match required_str(inner, "type", &path)? {
                    "text" => Ok(Part::Text {
                        text: required_str(inner, "text", &path)?.to_owned(),
                        cache_control: cache_control(inner),
                    }),
                    "image" => decode_image(inner, &path),
                    _ => Ok(native(block)),
                }
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(field_err(&content_path, "expected string or array")),
    };
    // The block's cache breakpoint moves onto its last content part (see module doc).
    if let Some(marker) = cache_control(obj) {
        match content.last_mut() {
            Some(Part::Text { cache_control, .. } | Part::Image { cache_control, .. })
                if cache_control.is_none() =>
            {
                *cache_control = Some(marker);
            }
            _ => {}
        }
    }
    Ok(Part::ToolResult {
        name: tool_names.get(&call_id).cloned(),
        call_id,
        content,
        is_error: optional_bool(obj, "is_error", path)?.unwrap_or(false),
    })
}

fn decode_tools(tools: Option<&Value>) -> Result<Vec<ToolDef>, ApiError> {
    let Some(tools) = tools else {
        return Ok(Vec::new());
    };
    let tools = tools
        .as_array()
        .ok_or_else(|| field_err("tools", "expected array"))?;
    tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let path = format!("tools.{i}");
            let obj = as_object(tool, &path)?;
            let description = optional_str(obj, "description", &path)?.map(str::to_owned);
            match optional_str(obj, "type", &path)? {
                None | Some("custom") => {
                    let schema = required(obj, "input_schema", &path)?;
                    if !schema.is_object() {
                        return Err(field_err(&join(&path, "input_schema"), "expected object"));
                    }
                    Ok(ToolDef {
                        name: required_str(obj, "name", &path)?.to_owned(),
                        description,
                        parameters: schema.clone(),
                        native: None,
                    })
                }
                Some(kind) => Ok(ToolDef {
                    name: optional_str(obj, "name", &path)?.unwrap_or(kind).to_owned(),
                    description,
                    parameters: present(obj, "input_schema")
                        .cloned()
                        .unwrap_or_else(empty_object),
                    native: Some(NativeTool {
                        dialect: Dialect::Anthropic,
                        raw: tool.clone(),
                    }),
                }),
            }
        })
        .collect()
}

fn decode_tool_choice(
    choice: Option<&Value>,
) -> Result<(Option<ToolChoice>, Option<bool>), ApiError> {
    let Some(choice) = choice else {
        return Ok((None, None));
    };
    let path = "tool_choice";
    let obj = as_object(choice, path)?;
    let choice = match required_str(obj, "type", path)? {
        "auto" => ToolChoice::Auto,
        "any" => ToolChoice::Required,
        "none" => ToolChoice::None,
        "tool" => ToolChoice::Tool {
            name: required_str(obj, "name", path)?.to_owned(),
        },
        other => {
            return Err(field_err(
                "tool_choice.type",
                format!("expected 'auto', 'any', 'tool' or 'none', got '{other}'"),
            ));
        }
    };
    let parallel = optional_bool(obj, "disable_parallel_tool_use", path)?.map(|off| !off);
    Ok((Some(choice), parallel))
}

fn decode_thinking(thinking: Option<&Value>) -> Result<Option<ThinkingConfig>, ApiError> {
    let Some(thinking) = thinking else {
        return Ok(None);
    };
    let path = "thinking";
    let obj = as_object(thinking, path)?;
    match required_str(obj, "type", path)? {
        "enabled" => {
            let budget = optional_u32(obj, "budget_tokens", path)?
                .ok_or_else(|| field_err("thinking.budget_tokens", "Field required"))?;
            Ok(Some(ThinkingConfig {
                budget_tokens: Some(budget),
                effort: None,
            }))
        }
        "adaptive" => Ok(Some(ThinkingConfig::default())),
        "disabled" => Ok(None),
        other => Err(field_err(
            "thinking.type",
            format!("expected 'enabled', 'disabled' or 'adaptive', got '{other}'"),
        )),
    }
}

fn decode_stop_sequences(stop: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let Some(stop) = stop else {
        return Ok(Vec::new());
    };
    stop.as_array()
        .ok_or_else(|| field_err("stop_sequences", "expected array"))?
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| field_err(&format!("stop_sequences.{i}"), "expected string"))
        })
        .collect()
}

/// `output_config.format` (GA) or `output_format` (beta) with `type: json_schema`.
fn decode_output_schema(obj: &Object) -> Result<Option<OutputSchema>, ApiError> {
    let mut schema = None;
    if let Some(format) = present(obj, "output_format") {
        schema = json_schema_format(format, "output_format")?;
    }
    if let Some(config) = present(obj, "output_config") {
        let config = as_object(config, "output_config")?;
        if let Some(format) = present(config, "format") {
            schema = json_schema_format(format, "output_config.format")?.or(schema);
        }
    }
    Ok(schema)
}

fn json_schema_format(format: &Value, path: &str) -> Result<Option<OutputSchema>, ApiError> {
    let obj = as_object(format, path)?;
    if required_str(obj, "type", path)? != "json_schema" {
        return Ok(None);
    }
    let schema = required(obj, "schema", path)?;
    if !schema.is_object() {
        return Err(field_err(&join(path, "schema"), "expected object"));
    }
    Ok(Some(OutputSchema {
        name: None,
        schema: schema.clone(),
    }))
}

// ---------------------------------------------------------------------------------------
// Request encoding
// ---------------------------------------------------------------------------------------

fn encode_request(req: &Request) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    let max_tokens = req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    body.insert("max_tokens".into(), json!(max_tokens));
    let (system, messages) = encode_turns(&req.turns);
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    let tools: Vec<Value> = req.tools.iter().filter_map(encode_tool).collect();
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        // The API refuses tool_choice without tools.
        if let Some(choice) = encode_tool_choice(req) {
            body.insert("tool_choice".into(), choice);
        }
    }
    if let Some(thinking) = encode_thinking(req, max_tokens) {
        body.insert("thinking".into(), thinking);
    }
    if !req.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(req.stop));
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
    if req.stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    if let Some(user_id) = req
        .metadata
        .as_ref()
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)
    {
        body.insert("metadata".into(), json!({ "user_id": user_id }));
    }

    let mut extra = req
        .extra_for(Dialect::Anthropic)
        .cloned()
        .unwrap_or_default();
    let format = req
        .output_schema
        .as_ref()
        .map(|s| json!({ "type": "json_schema", "schema": s.schema }));
    if extra.contains_key("output_format") {
        // The request came with the beta field: answer in kind.
        match format {
            Some(format) => extra.insert("output_format".into(), format),
            None => extra.remove("output_format"),
        };
    } else {
        let mut config = match extra.remove("output_config") {
            Some(Value::Object(config)) => config,
            _ => Map::new(),
        };
        match format {
            Some(format) => config.insert("format".into(), format),
            None => config.remove("format"),
        };
        if !config.is_empty() {
            extra.insert("output_config".into(), Value::Object(config));
        }
    }
    for (key, value) in extra {
        body.entry(key).or_insert(value);
    }
    Value::Object(body)
}

/// Leading System turns → top-level `system` blocks; the rest → `messages`, with Tool
/// turns carried in user messages and consecutive user messages merged.
fn encode_turns(turns: &[Turn]) -> (Vec<Value>, Vec<Value>) {
    let lead = turns.iter().take_while(|t| t.role == Role::System).count();
    let system: Vec<Value> = turns[..lead]
        .iter()
        .flat_map(|t| &t.parts)
        .filter_map(encode_system_part)
        .collect();

    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for turn in &turns[lead..] {
        let (role, blocks): (&'static str, Vec<Value>) = match turn.role {
            Role::System => (
                "system",
                turn.parts.iter().filter_map(encode_system_part).collect(),
            ),
            Role::User | Role::Tool => (
                "user",
                turn.parts
                    .iter()
                    .filter_map(|p| encode_part(p, false))
                    .collect(),
            ),
            Role::Assistant => (
                "assistant",
                turn.parts
                    .iter()
                    .filter_map(|p| encode_part(p, true))
                    .collect(),
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last, previous)) if *last == "user" && role == "user" => {
                previous.extend(blocks);
            }
            _ => messages.push((role, blocks)),
        }
    }
    let messages = messages
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // tool_result blocks must open the message that answers the calls.
                let (mut results, rest): (Vec<Value>, Vec<Value>) =
                    blocks.into_iter().partition(|b| b["type"] == "tool_result");
                results.extend(rest);
                blocks = results;
            }
            json!({ "role": role, "content": content_value(blocks) })
        })
        .collect();
    (system, messages)
}

/// A lone plain text block is sent as a string; anything else as an array.
fn content_value(mut blocks: Vec<Value>) -> Value {
    if blocks.len() == 1
        && blocks[0]["type"] == "text"
        && blocks[0].get("cache_control").is_none()
        && let Some(Value::String(text)) = blocks[0].get_mut("text").map(Value::take)
    {
        return Value::String(text);
    }
    Value::Array(blocks)
}

fn text_block(text: &str, cache_control: &Option<Value>) -> Value {
    let mut block = json!({ "type": "text", "text": text });
    if let (Some(marker), Value::Object(obj)) = (cache_control, &mut block) {
        obj.insert("cache_control".into(), marker.clone());
    }
    block
}

fn encode_system_part(part: &Part) -> Option<Value> {
    match part {
        Part::Text {
            text,
            cache_control,
        } if !text.trim().is_empty() => Some(text_block(text, cache_control)),
        _ => None,
    }
}

fn encode_part(part: &Part, assistant: bool) -> Option<Value> {
    match part {
        Part::Native {
            dialect: Dialect::Anthropic,
            raw,
        } => Some(raw.clone()),
        Part::Native { .. } => None,
        Part::Text {
            text,
            cache_control,
        } => (!text.trim().is_empty()).then(|| text_block(text, cache_control)),
        Part::Image {
            source,
            cache_control,
        } => (!assistant).then(|| image_block(source, cache_control)),
        Part::ToolCall {
            id,
            name,
            arguments,
        } => Some(json!({
            "type": "tool_use",
            "id": sanitize_id(id),
            "name": name,
            "input": tool_input(arguments),
        })),
        Part::ToolResult {
            call_id,
            content,
            is_error,
            ..
        } => Some(encode_tool_result(call_id, content, *is_error)),
        Part::Thinking {
            text,
            signature,
            redacted,
        } => {
            if !assistant {
                None
            } else if let Some(data) = redacted {
                Some(json!({ "type": "redacted_thinking", "data": data }))
            } else {
                // Unsigned thinking is rejected by the API: drop it.
                signature
                    .as_ref()
                    .filter(|s| !s.is_empty())
                    .map(|s| json!({ "type": "thinking", "thinking": text, "signature": s }))
            }
        }
    }
}

fn image_block(source: &ImageSource, cache_control: &Option<Value>) -> Value {
    let source = match source {
        ImageSource::Base64 { media_type, data } => {
            json!({ "type": "base64", "media_type": media_type, "data": data })
        }
        ImageSource::Url { url } => match parse_data_url(url) {
            Some((media_type, data)) => {
                json!({ "type": "base64", "media_type": media_type, "data": data })
            }
            None => json!({ "type": "url", "url": url }),
        },
    };
    let mut block = json!({ "type": "image", "source": source });
    if let (Some(marker), Value::Object(obj)) = (cache_control, &mut block) {
        obj.insert("cache_control".into(), marker.clone());
    }
    block
}

/// `data:image/png;base64,AAAA` → (`image/png`, `AAAA`).
fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let (header, data) = url.strip_prefix("data:")?.split_once(',')?;
    let media_type = header.strip_suffix(";base64")?;
    Some((media_type, data))
}

fn encode_tool_result(call_id: &str, content: &[Part], is_error: bool) -> Value {
    let mut blocks: Vec<Value> = content
        .iter()
        .filter_map(|part| match part {
            Part::Text {
                text,
                cache_control,
            } if !text.trim().is_empty() => Some(text_block(text, cache_control)),
            Part::Image {
                source,
                cache_control,
            } => Some(image_block(source, cache_control)),
            _ => None,
        })
        .collect();
    // The last part's cache breakpoint goes back onto the block (see decode).
    let marker = blocks
        .last_mut()
        .and_then(Value::as_object_mut)
        .and_then(|b| b.remove("cache_control"));
    let mut block = Map::new();
    block.insert("type".into(), json!("tool_result"));
    block.insert("tool_use_id".into(), json!(sanitize_id(call_id)));
    if !blocks.is_empty() {
        block.insert("content".into(), content_value(blocks));
    }
    if is_error {
        block.insert("is_error".into(), Value::Bool(true));
    }
    if let Some(marker) = marker {
        block.insert("cache_control".into(), marker);
    }
    Value::Object(block)
}

/// Tool ids must match `^[a-zA-Z0-9_-]+$`; other characters become `_`.
fn sanitize_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `tool_use.input` must be an object.
fn tool_input(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(parsed @ Value::Object(_)) => parsed,
            _ => empty_object(),
        },
        _ => empty_object(),
    }
}

fn encode_tool(tool: &ToolDef) -> Option<Value> {
    if let Some(native) = &tool.native {
        return (native.dialect == Dialect::Anthropic).then(|| native.raw.clone());
    }
    let mut schema = match &tool.parameters {
        Value::Object(schema) => schema.clone(),
        _ => Map::new(),
    };
    // The API requires `input_schema.type` ("object").
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".into()));
    let mut out = Map::new();
    out.insert("name".into(), json!(tool.name));
    if let Some(description) = &tool.description {
        out.insert("description".into(), json!(description));
    }
    out.insert("input_schema".into(), Value::Object(schema));
    Some(Value::Object(out))
}

fn encode_tool_choice(req: &Request) -> Option<Value> {
    let mut choice = match &req.tool_choice {
        Some(ToolChoice::None) => return Some(json!({ "type": "none" })),
        Some(ToolChoice::Auto) => json!({ "type": "auto" }),
        Some(ToolChoice::Required) => json!({ "type": "any" }),
        Some(ToolChoice::Tool { name }) => json!({ "type": "tool", "name": name }),
        None if req.parallel_tool_calls == Some(false) => json!({ "type": "auto" }),
        None => return None,
    };
    let disable = match req.parallel_tool_calls {
        Some(false) => Some(true),
        Some(true) if req.tool_choice.is_some() => Some(false),
        _ => None,
    };
    if let (Some(disable), Value::Object(obj)) = (disable, &mut choice) {
        obj.insert("disable_parallel_tool_use".into(), Value::Bool(disable));
    }
    Some(choice)
}

/// The thinking budget an OpenAI-style effort maps to (`None`: no thinking).
fn effort_budget(effort: &str) -> Option<u32> {
    match effort {
        "none" | "minimal" => None,
        "low" => Some(2048),
        "high" | "xhigh" | "max" => Some(24576),
        _ => Some(8192),
    }
}

fn encode_thinking(req: &Request, max_tokens: u32) -> Option<Value> {
    let config = req.thinking.as_ref()?;
    if let Some(budget) = config.budget_tokens {
        return Some(json!({ "type": "enabled", "budget_tokens": budget }));
    }
    let Some(effort) = &config.effort else {
        return Some(json!({ "type": "adaptive" }));
    };
    let budget = effort_budget(effort)?;
    // Thinking requires default sampling; the API rejects the combination otherwise.
    let sampling_ok = req.temperature.is_none_or(|t| t == 1.0)
        && req.top_k.is_none()
        && req.top_p.is_none_or(|p| p >= 0.95);
    (max_tokens > budget && sampling_ok)
        .then(|| json!({ "type": "enabled", "budget_tokens": budget }))
}

// ---------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------

fn bad_gateway(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::BadGateway, message)
}

fn decode_response(value: &Value) -> Result<Response, ApiError> {
    let obj = value
        .as_object()
        .ok_or_else(|| bad_gateway("anthropic response: expected a JSON object"))?;
    if obj.get("type").and_then(Value::as_str) == Some("error") {
        return Err(error_from_json(value, 502)
            .unwrap_or_else(|| bad_gateway("anthropic response: error without a message")));
    }
    let content = obj
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| bad_gateway("anthropic response: missing `content` array"))?;
    let mut parts = Vec::new();
    for (i, block) in content.iter().enumerate() {
        if let Some(part) = decode_reply_block(block)
            .map_err(|e| bad_gateway(format!("anthropic response: content.{i}: {e}")))?
        {
            parts.push(part);
        }
    }
    Ok(Response {
        id: str_of(obj, "id").to_owned(),
        model: str_of(obj, "model").to_owned(),
        parts,
        stop_reason: obj
            .get("stop_reason")
            .and_then(Value::as_str)
            .map_or(StopReason::EndTurn, decode_stop_reason),
        usage: obj.get("usage").map(decode_usage).unwrap_or_default(),
    })
}

fn str_of<'a>(obj: &'a Object, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// One content block of a reply; `None` for blocks ngl does not model.
fn decode_reply_block(block: &Value) -> Result<Option<Part>, String> {
    let obj = block.as_object().ok_or("expected object")?;
    let text_field = |key: &str| -> Result<String, String> {
        obj.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("missing string `{key}`"))
    };
    Ok(match obj.get("type").and_then(Value::as_str) {
        Some("text") => Some(Part::text(text_field("text")?)),
        Some("thinking") => Some(Part::Thinking {
            text: text_field("thinking")?,
            signature: obj
                .get("signature")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            redacted: None,
        }),
        Some("redacted_thinking") => Some(Part::Thinking {
            text: String::new(),
            signature: None,
            redacted: Some(text_field("data")?),
        }),
        Some("tool_use" | "server_tool_use") => Some(Part::ToolCall {
            id: text_field("id")?,
            name: text_field("name")?,
            arguments: present(obj, "input").cloned().unwrap_or_else(empty_object),
        }),
        Some(_) => None,
        None => return Err("missing `type`".into()),
    })
}

fn decode_stop_reason(reason: &str) -> StopReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "tool_use" => StopReason::ToolUse,
        "pause_turn" => StopReason::PauseTurn,
        "refusal" => StopReason::Refusal,
        _ => StopReason::EndTurn,
    }
}

fn stop_reason_str(reason: StopReason, has_tool_calls: bool) -> &'static str {
    match reason {
        StopReason::EndTurn if has_tool_calls => "tool_use",
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ToolUse => "tool_use",
        StopReason::ContentFilter | StopReason::Refusal => "refusal",
        StopReason::PauseTurn => "pause_turn",
    }
}

fn decode_usage(usage: &Value) -> Usage {
    let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read_tokens: n("cache_read_input_tokens"),
        cache_write_tokens: n("cache_creation_input_tokens"),
        reasoning_tokens: 0,
    }
}

fn usage_value(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": usage.output_tokens,
    })
}

/// Anthropic message ids start with `msg_`; SDKs and CLIs expect that.
fn message_id(id: &str) -> String {
    if id.starts_with("msg_") {
        id.to_owned()
    } else if id.is_empty() {
        "msg_glider".to_owned()
    } else {
        format!("msg_{id}")
    }
}

fn encode_response(resp: &Response) -> Value {
    let content: Vec<Value> = resp
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::Native {
                dialect: Dialect::Anthropic,
                raw,
            } => Some(raw.clone()),
            Part::Native { .. } => None,
            Part::Text { text, .. } => Some(json!({ "type": "text", "text": text })),
            Part::Thinking {
                redacted: Some(data),
                ..
            } => Some(json!({ "type": "redacted_thinking", "data": data })),
            Part::Thinking {
                text, signature, ..
            } => Some(json!({
                "type": "thinking",
                "thinking": text,
                "signature": signature.clone().unwrap_or_default(),
            })),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(json!({
                "type": "tool_use",
                "id": id,
                "name": name,
                "input": tool_input(arguments),
            })),
            Part::Image { .. } | Part::ToolResult { .. } => None,
        })
        .collect();
    let has_tool_calls = resp
        .parts
        .iter()
        .any(|p| matches!(p, Part::ToolCall { .. }));
    json!({
        "id": message_id(&resp.id),
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": content,
        "stop_reason": stop_reason_str(resp.stop_reason, has_tool_calls),
        "stop_sequence": null,
        "usage": usage_value(&resp.usage),
    })
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::Permission => "permission_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::RequestTooLarge => "request_too_large",
        ErrorKind::RateLimit => "rate_limit_error",
        ErrorKind::Internal | ErrorKind::BadGateway | ErrorKind::Timeout => "api_error",
        ErrorKind::Unavailable | ErrorKind::Overloaded => "overloaded_error",
    }
}

/// Anthropic's error type → kind (`api_error` is the backend's own fault: bad gateway).
fn kind_of_error_type(kind: &str) -> Option<ErrorKind> {
    Some(match kind {
        "invalid_request_error" => ErrorKind::InvalidRequest,
        "authentication_error" => ErrorKind::Authentication,
        "permission_error" | "billing_error" => ErrorKind::Permission,
        "not_found_error" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::RequestTooLarge,
        "rate_limit_error" => ErrorKind::RateLimit,
        "api_error" => ErrorKind::BadGateway,
        "timeout_error" => ErrorKind::Timeout,
        "overloaded_error" => ErrorKind::Overloaded,
        _ => return None,
    })
}

fn error_body(err: &ApiError) -> Value {
    json!({
        "type": "error",
        "error": { "type": error_type(err.kind), "message": err.message },
    })
}

/// `{"type":"error","error":{"type","message"}}` (or a bare `{"error": "..."}`).
fn error_from_json(value: &Value, status: u16) -> Option<ApiError> {
    let error = value.get("error")?;
    let (kind, message) = match error {
        Value::String(message) => (None, message.clone()),
        Value::Object(obj) => (
            obj.get("type").and_then(Value::as_str),
            obj.get("message").and_then(Value::as_str)?.to_owned(),
        ),
        _ => return None,
    };
    let kind = kind
        .and_then(kind_of_error_type)
        .unwrap_or_else(|| ErrorKind::from_status(status));
    Some(ApiError::new(kind, message))
}

fn decode_error(status: u16, body: &[u8]) -> ApiError {
    if let Some(err) = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| error_from_json(&v, status))
    {
        return err;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message = if text.is_empty() {
        format!("backend returned HTTP {status}")
    } else {
        truncate_chars(text, MAX_ERROR_TEXT)
    };
    ApiError::new(ErrorKind::from_status(status), message)
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// Stream decoding
// ---------------------------------------------------------------------------------------

/// Anthropic SSE → ngl events. Anthropic block indices map onto sequential ngl indices;
/// blocks ngl cannot carry (redacted thinking, server tool results) are skipped.
#[derive(Default)]
struct AnthropicStreamDecoder {
    sse: SseParser,
    started: bool,
    done: bool,
    /// Anthropic block index → ngl part index (`None`: a skipped block).
    blocks: HashMap<u64, Option<usize>>,
    /// The open part: (Anthropic index, ngl index).
    open: Option<(u64, usize)>,
    next_index: usize,
    usage: Usage,
    stop_reason: Option<StopReason>,
}

impl AnthropicStreamDecoder {
    fn ensure_started(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: String::new(),
                model: String::new(),
                usage: Usage::default(),
            });
        }
    }

    fn close_open(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some((_, index)) = self.open.take() {
            out.push(StreamEvent::PartStop { index });
        }
    }

    fn handle(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), ApiError> {
        if self.done || event.data.trim().is_empty() || event.data.trim() == "[DONE]" {
            return Ok(());
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| bad_gateway(format!("anthropic stream: event data is not JSON: {e}")))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                let message = data.get("message").unwrap_or(&Value::Null);
                let usage = message.get("usage").map(decode_usage).unwrap_or_default();
                self.usage.merge(&usage);
                if !self.started {
                    self.started = true;
                    let text = |key: &str| {
                        message
                            .get(key)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    out.push(StreamEvent::Start {
                        id: text("id"),
                        model: text("model"),
                        usage: Usage {
                            output_tokens: 0,
                            ..usage
                        },
                    });
                }
            }
            "content_block_start" => {
                self.ensure_started(out);
                let block_index = block_index(&data)?;
                if self.blocks.contains_key(&block_index) {
                    return Ok(());
                }
                self.close_open(out);
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let text = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let index = self.next_index;
                let (kind, first) = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let t = text("text");
                        let first =
                            (!t.is_empty()).then_some(StreamEvent::TextDelta { index, text: t });
                        (PartKind::Text, first)
                    }
                    Some("thinking") => {
                        let t = text("thinking");
                        let first = (!t.is_empty())
                            .then_some(StreamEvent::ThinkingDelta { index, text: t });
                        (PartKind::Thinking, first)
                    }
                    Some("tool_use" | "server_tool_use") => {
                        let first = block
                            .get("input")
                            .and_then(Value::as_object)
                            .filter(|input| !input.is_empty())
                            .map(|input| StreamEvent::ToolArgsDelta {
                                index,
                                json: Value::Object(input.clone()).to_string(),
                            });
                        (
                            PartKind::ToolCall {
                                id: text("id"),
                                name: text("name"),
                            },
                            first,
                        )
                    }
                    _ => {
                        self.blocks.insert(block_index, None);
                        return Ok(());
                    }
                };
                self.blocks.insert(block_index, Some(index));
                self.open = Some((block_index, index));
                self.next_index += 1;
                out.push(StreamEvent::PartStart { index, kind });
                out.extend(first);
            }
            "content_block_delta" => {
                let block_index = block_index(&data)?;
                let Some(Some(index)) = self.blocks.get(&block_index).copied() else {
                    return Ok(());
                };
                if self.open.map(|(_, open)| open) != Some(index) {
                    return Ok(());
                }
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let field = |key: &str| {
                    delta
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let event = match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => StreamEvent::TextDelta {
                        index,
                        text: field("text"),
                    },
                    Some("thinking_delta") => StreamEvent::ThinkingDelta {
                        index,
                        text: field("thinking"),
                    },
                    Some("signature_delta") => StreamEvent::ThinkingSignature {
                        index,
                        signature: field("signature"),
                    },
                    Some("input_json_delta") => {
                        let json = field("partial_json");
                        if json.is_empty() {
                            return Ok(());
                        }
                        StreamEvent::ToolArgsDelta { index, json }
                    }
                    _ => return Ok(()),
                };
                out.push(event);
            }
            "content_block_stop" => {
                let block_index = block_index(&data)?;
                if self.open.map(|(open, _)| open) == Some(block_index) {
                    self.close_open(out);
                }
            }
            "message_delta" => {
                self.ensure_started(out);
                if let Some(reason) = data
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(decode_stop_reason(reason));
                }
                if let Some(usage) = data.get("usage") {
                    self.usage.merge(&decode_usage(usage));
                }
            }
            "message_stop" => {
                self.ensure_started(out);
                self.close_open(out);
                out.push(StreamEvent::Finish {
                    stop_reason: self.stop_reason.unwrap_or(StopReason::EndTurn),
                    usage: self.usage,
                });
                self.done = true;
            }
            "error" => {
                let error = error_from_json(&data, 502).unwrap_or_else(|| {
                    bad_gateway(format!("anthropic stream error: {}", event.data))
                });
                out.push(StreamEvent::Error { error });
                self.done = true;
            }
            _ => {} // ping and future event types
        }
        Ok(())
    }
}

fn block_index(data: &Value) -> Result<u64, ApiError> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad_gateway("anthropic stream: content block event without `index`"))
}

impl StreamDecoder for AnthropicStreamDecoder {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ApiError> {
        let mut out = Vec::new();
        for event in self.sse.feed(bytes) {
            if let Err(err) = self.handle(event, &mut out) {
                self.done = true;
                return Err(err);
            }
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if let Some(event) = self.sse.finish()
            && let Err(error) = self.handle(event, &mut out)
        {
            self.done = true;
            out.push(StreamEvent::Error { error });
        }
        if !self.done {
            self.done = true;
            out.push(StreamEvent::Error {
                error: bad_gateway("anthropic stream ended before message_stop"),
            });
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Stream encoding
// ---------------------------------------------------------------------------------------

/// ngl events → Anthropic SSE exactly as the API writes it (`message_start`, `ping`,
/// `content_block_*`, `message_delta`, `message_stop`, `error`).
#[derive(Default)]
struct AnthropicStreamEncoder {
    started: bool,
    done: bool,
    open: Option<usize>,
    saw_tool_call: bool,
}

impl AnthropicStreamEncoder {
    fn start(&mut self, id: &str, model: &str, usage: &Usage, out: &mut Vec<u8>) {
        self.started = true;
        let start = json!({
            "type": "message_start",
            "message": {
                "id": message_id(id),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": usage_value(usage),
            },
        });
        write_sse_json(out, Some("message_start"), &start);
        write_sse_json(out, Some("ping"), &json!({ "type": "ping" }));
    }

    fn stop_open(&mut self, out: &mut Vec<u8>) {
        if let Some(index) = self.open.take() {
            write_sse_json(
                out,
                Some("content_block_stop"),
                &json!({ "type": "content_block_stop", "index": index }),
            );
        }
    }
}

fn block_delta(out: &mut Vec<u8>, index: usize, delta: Value) {
    write_sse_json(
        out,
        Some("content_block_delta"),
        &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
    );
}

impl StreamEncoder for AnthropicStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if !self.started && !matches!(event, StreamEvent::Start { .. } | StreamEvent::Error { .. })
        {
            self.start("", "", &Usage::default(), out);
        }
        match event {
            StreamEvent::Start { id, model, usage } => {
                if !self.started {
                    self.start(id, model, usage, out);
                }
            }
            StreamEvent::PartStart { index, kind } => {
                self.stop_open(out);
                let block = match kind {
                    PartKind::Text => json!({ "type": "text", "text": "" }),
                    PartKind::Thinking => {
                        json!({ "type": "thinking", "thinking": "", "signature": "" })
                    }
                    PartKind::ToolCall { id, name } => {
                        self.saw_tool_call = true;
                        json!({ "type": "tool_use", "id": id, "name": name, "input": {} })
                    }
                };
                write_sse_json(
                    out,
                    Some("content_block_start"),
                    &json!({ "type": "content_block_start", "index": index, "content_block": block }),
                );
                self.open = Some(*index);
            }
            StreamEvent::TextDelta { index, text } => {
                block_delta(out, *index, json!({ "type": "text_delta", "text": text }));
            }
            StreamEvent::ThinkingDelta { index, text } => {
                block_delta(
                    out,
                    *index,
                    json!({ "type": "thinking_delta", "thinking": text }),
                );
            }
            StreamEvent::ThinkingSignature { index, signature } => {
                block_delta(
                    out,
                    *index,
                    json!({ "type": "signature_delta", "signature": signature }),
                );
            }
            StreamEvent::ToolArgsDelta { index, json } => {
                block_delta(
                    out,
                    *index,
                    json!({ "type": "input_json_delta", "partial_json": json }),
                );
            }
            StreamEvent::PartStop { index } => {
                if self.open == Some(*index) {
                    self.stop_open(out);
                }
            }
            StreamEvent::Finish { stop_reason, usage } => {
                self.stop_open(out);
                write_sse_json(
                    out,
                    Some("message_delta"),
                    &json!({
                        "type": "message_delta",
                        "delta": {
                            "stop_reason": stop_reason_str(*stop_reason, self.saw_tool_call),
                            "stop_sequence": null,
                        },
                        "usage": usage_value(usage),
                    }),
                );
                write_sse_json(
                    out,
                    Some("message_stop"),
                    &json!({ "type": "message_stop" }),
                );
                self.done = true;
            }
            StreamEvent::Error { error } => {
                write_sse_json(out, Some("error"), &error_body(error));
                self.done = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::stream::events_of;
    use glider_ngl::{ResponseBuilder, StreamEvent as E};

    fn decode(body: &Value) -> Request {
        Anthropic
            .decode_request(body.to_string().as_bytes())
            .expect("request decodes")
    }

    fn decode_err(body: &Value) -> ApiError {
        Anthropic
            .decode_request(body.to_string().as_bytes())
            .expect_err("request is rejected")
    }

    fn ephemeral() -> Option<Value> {
        Some(json!({"type": "ephemeral"}))
    }

    fn cc_text(text: &str) -> Part {
        Part::Text {
            text: text.into(),
            cache_control: ephemeral(),
        }
    }

    fn bash_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to execute"},
                "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
                "description": {"type": "string", "description": "Clear, concise description of what this command does in 5-10 words."},
                "run_in_background": {"type": "boolean"}
            },
            "required": ["command"],
            "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"
        })
    }

    /// Shaped like a Claude Code turn: cached system blocks, a `role: system` reminder
    /// after the user turn, signed and redacted thinking, parallel tool calls, tool
    /// results with an error and a cache breakpoint, images, many tools, extras.
    fn claude_code_request() -> Value {
        json!({
            "model": "claude-sonnet-4-5-20250929",
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\nRun `cargo test` before committing.\n</system-reminder>\n"},
                    {"type": "text", "text": "fix the failing test in src/lib.rs", "cache_control": {"type": "ephemeral"}}
                ]},
                {"role": "system", "content": "<system-reminder>This is a reminder that your todo list is currently empty.</system-reminder>"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "The user wants the failing test fixed. Read the file and run the tests.", "signature": "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1ZsQ8r2nRZ0Jr3h6vJ4Qp9m5bZ"},
                    {"type": "text", "text": "I'll read the file and run the tests."},
                    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "Read", "input": {"file_path": "/repo/src/lib.rs"}},
                    {"type": "tool_use", "id": "toolu_01B2xkMvXq7nD4s8aLkPzR3c", "name": "Bash", "input": {"command": "cargo test 2>&1 | tail -20", "description": "Run the test suite"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "     1\tpub fn add(a: i32, b: i32) -> i32 {\n     2\t    a - b\n     3\t}\n"},
                    {"type": "tool_result", "tool_use_id": "toolu_01B2xkMvXq7nD4s8aLkPzR3c", "content": [{"type": "text", "text": "test tests::adds ... FAILED\nerror: test failed, to rerun pass `--lib`"}], "is_error": true, "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "the test lives in tests/add.rs"}
                ]},
                {"role": "assistant", "content": [
                    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
                    {"type": "tool_use", "id": "toolu_01C7Fr3nQ2fY8JmW4sTz9KpL", "name": "Edit", "input": {"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01C7Fr3nQ2fY8JmW4sTz9KpL", "content": "The file /repo/src/lib.rs has been updated."},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/screenshot.png"}},
                    {"type": "text", "text": "here is what the UI shows now", "cache_control": {"type": "ephemeral"}}
                ]}
            ],
            "temperature": 1,
            "system": [
                {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "\nYou are an interactive CLI tool that helps users with software engineering tasks.", "cache_control": {"type": "ephemeral"}}
            ],
            "tools": [
                {"name": "Task", "description": "Launch a new agent to handle complex, multi-step tasks autonomously.", "input_schema": {"type": "object", "properties": {"description": {"type": "string"}, "prompt": {"type": "string"}, "subagent_type": {"type": "string"}}, "required": ["description", "prompt", "subagent_type"], "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}},
                {"name": "Bash", "description": "Executes a given bash command in a persistent shell session.", "input_schema": bash_schema()},
                {"name": "Glob", "description": "Fast file pattern matching tool.", "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}}, "required": ["pattern"]}},
                {"name": "Grep", "description": "A powerful search tool built on ripgrep.", "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}, "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]}}, "required": ["pattern"]}},
                {"name": "Read", "description": "Reads a file from the local filesystem.", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}, "offset": {"type": "number"}, "limit": {"type": "number"}}, "required": ["file_path"]}},
                {"name": "Edit", "description": "Performs exact string replacements in files.", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}, "replace_all": {"type": "boolean", "default": false}}, "required": ["file_path", "old_string", "new_string"]}},
                {"name": "TodoWrite", "description": "Create and manage a structured task list.", "input_schema": {"type": "object", "properties": {"todos": {"type": "array", "items": {"type": "object"}}}, "required": ["todos"]}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 8}
            ],
            "metadata": {"user_id": "user_9f2c4e_account__session_1b7d7c0e-54f2-4d1e-9a55-3c1f0e2b8a11"},
            "max_tokens": 32000,
            "thinking": {"type": "enabled", "budget_tokens": 31999},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "stream": true
        })
    }

    #[test]
    fn decodes_a_claude_code_request() {
        let req = decode(&claude_code_request());
        assert_eq!(req.model, "claude-sonnet-4-5-20250929");
        assert_eq!(req.max_tokens, Some(32000));
        assert_eq!(req.temperature, Some(1.0));
        assert!(req.stream);
        assert_eq!(
            req.thinking,
            Some(ThinkingConfig {
                budget_tokens: Some(31999),
                effort: None
            })
        );
        assert_eq!(
            req.metadata,
            Some(
                json!({"user_id": "user_9f2c4e_account__session_1b7d7c0e-54f2-4d1e-9a55-3c1f0e2b8a11"})
            )
        );
        let extra = req.extra_for(Dialect::Anthropic).expect("extras kept");
        assert_eq!(extra.len(), 1);
        assert_eq!(
            extra["context_management"],
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]})
        );
        assert_eq!(req.tool_choice, None);
        assert_eq!(req.parallel_tool_calls, None);

        let roles: Vec<Role> = req.turns.iter().map(|t| t.role).collect();
        assert_eq!(
            roles,
            vec![
                Role::System,
                Role::User,
                Role::System,
                Role::Assistant,
                Role::Tool,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::User,
            ]
        );
        assert_eq!(
            req.turns[0].parts,
            vec![
                cc_text("You are Claude Code, Anthropic's official CLI for Claude."),
                cc_text(
                    "\nYou are an interactive CLI tool that helps users with software engineering tasks."
                ),
            ]
        );
        assert_eq!(req.turns[1].parts.len(), 2);
        assert_eq!(
            req.turns[1].parts[1],
            cc_text("fix the failing test in src/lib.rs")
        );
        assert_eq!(
            req.turns[2],
            Turn::text(
                Role::System,
                "<system-reminder>This is a reminder that your todo list is currently empty.</system-reminder>"
            )
        );
        assert_eq!(
            req.turns[3].parts,
            vec![
                Part::Thinking {
                    text: "The user wants the failing test fixed. Read the file and run the tests."
                        .into(),
                    signature: Some(
                        "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1ZsQ8r2nRZ0Jr3h6vJ4Qp9m5bZ".into()
                    ),
                    redacted: None,
                },
                Part::text("I'll read the file and run the tests."),
                Part::ToolCall {
                    id: "toolu_01A09q90qw90lq917835lq9".into(),
                    name: "Read".into(),
                    arguments: json!({"file_path": "/repo/src/lib.rs"}),
                },
                Part::ToolCall {
                    id: "toolu_01B2xkMvXq7nD4s8aLkPzR3c".into(),
                    name: "Bash".into(),
                    arguments: json!({"command": "cargo test 2>&1 | tail -20", "description": "Run the test suite"}),
                },
            ]
        );
        // Tool results come first, in their own turn, named from the matching calls;
        // the block's cache_control sits on the last content part.
        assert_eq!(
            req.turns[4].parts,
            vec![
                Part::ToolResult {
                    call_id: "toolu_01A09q90qw90lq917835lq9".into(),
                    name: Some("Read".into()),
                    content: vec![Part::text(
                        "     1\tpub fn add(a: i32, b: i32) -> i32 {\n     2\t    a - b\n     3\t}\n"
                    )],
                    is_error: false,
                },
                Part::ToolResult {
                    call_id: "toolu_01B2xkMvXq7nD4s8aLkPzR3c".into(),
                    name: Some("Bash".into()),
                    content: vec![cc_text(
                        "test tests::adds ... FAILED\nerror: test failed, to rerun pass `--lib`"
                    )],
                    is_error: true,
                },
            ]
        );
        assert_eq!(
            req.turns[5],
            Turn::text(Role::User, "the test lives in tests/add.rs")
        );
        assert_eq!(
            req.turns[6].parts[0],
            Part::Thinking {
                text: String::new(),
                signature: None,
                redacted: Some(
                    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".into()
                ),
            }
        );
        assert_eq!(
            req.turns[8].parts,
            vec![
                Part::Image {
                    source: ImageSource::Base64 {
                        media_type: "image/png".into(),
                        data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk".into(),
                    },
                    cache_control: None,
                },
                Part::Image {
                    source: ImageSource::Url {
                        url: "https://example.com/screenshot.png".into()
                    },
                    cache_control: None,
                },
                cc_text("here is what the UI shows now"),
            ]
        );
        assert_eq!(
            req.last_user_text().as_deref(),
            Some("here is what the UI shows now")
        );

        assert_eq!(req.tools.len(), 8);
        assert_eq!(req.tools[1].name, "Bash");
        assert_eq!(
            req.tools[1].description.as_deref(),
            Some("Executes a given bash command in a persistent shell session.")
        );
        assert_eq!(req.tools[1].parameters, bash_schema());
        assert_eq!(req.tools[1].native, None);
        assert_eq!(req.tools[7].name, "web_search");
        assert_eq!(
            req.tools[7].native,
            Some(NativeTool {
                dialect: Dialect::Anthropic,
                raw: json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 8}),
            })
        );
    }

    #[test]
    fn decodes_system_string_and_skips_empty_system() {
        let req = decode(&json!({
            "model": "claude-haiku-4-5", "max_tokens": 512, "system": "Be terse.",
            "messages": [{"role": "user", "content": "hi"}]
        }));
        assert_eq!(
            req.turns,
            vec![
                Turn::text(Role::System, "Be terse."),
                Turn::text(Role::User, "hi")
            ]
        );
        assert!(!req.stream);
        assert_eq!(req.extra, None);
        for system in [json!(""), json!([]), Value::Null] {
            let req = decode(&json!({
                "model": "m", "max_tokens": 1, "system": system,
                "messages": [{"role": "user", "content": "hi"}]
            }));
            assert_eq!(req.turns, vec![Turn::text(Role::User, "hi")]);
        }
    }

    #[test]
    fn decodes_tool_choice_and_parallel_flag() {
        let cases = [
            (json!({"type": "auto"}), ToolChoice::Auto, None),
            (
                json!({"type": "auto", "disable_parallel_tool_use": true}),
                ToolChoice::Auto,
                Some(false),
            ),
            (
                json!({"type": "any", "disable_parallel_tool_use": false}),
                ToolChoice::Required,
                Some(true),
            ),
            (
                json!({"type": "tool", "name": "Bash"}),
                ToolChoice::Tool {
                    name: "Bash".into(),
                },
                None,
            ),
            (json!({"type": "none"}), ToolChoice::None, None),
        ];
        for (wire, choice, parallel) in cases {
            let req = decode(&json!({
                "model": "m", "max_tokens": 100, "tool_choice": wire,
                "tools": [{"name": "Bash", "input_schema": bash_schema()}],
                "messages": [{"role": "user", "content": "list files"}]
            }));
            assert_eq!(req.tool_choice, Some(choice), "{wire}");
            assert_eq!(req.parallel_tool_calls, parallel, "{wire}");
            // And back.
            let back = Anthropic.encode_request(&req);
            assert_eq!(back["tool_choice"], wire);
        }
    }

    #[test]
    fn decodes_thinking_variants() {
        let thinking = |t: Value| {
            decode(&json!({
                "model": "m", "max_tokens": 4096, "thinking": t,
                "messages": [{"role": "user", "content": "x"}]
            }))
            .thinking
        };
        assert_eq!(
            thinking(json!({"type": "enabled", "budget_tokens": 1024})),
            Some(ThinkingConfig {
                budget_tokens: Some(1024),
                effort: None
            })
        );
        assert_eq!(thinking(json!({"type": "disabled"})), None);
        assert_eq!(
            thinking(json!({"type": "adaptive"})),
            Some(ThinkingConfig::default())
        );
    }

    #[test]
    fn decodes_claude_code_title_request_with_output_config() {
        let schema = json!({
            "type": "object",
            "properties": {"title": {"type": "string"}},
            "required": ["title"],
            "additionalProperties": false
        });
        let body = json!({
            "model": "claude-haiku-4-5-20251001",
            "max_tokens": 512,
            "system": [{"type": "text", "text": "Generate a concise, sentence-case title (3-7 words) for this coding session."}],
            "messages": [{"role": "user", "content": "fix the failing test in src/lib.rs"}],
            "temperature": 0,
            "output_config": {"format": {"type": "json_schema", "schema": schema}},
            "metadata": {"user_id": "user_9f2c4e_account__session_1b7d"},
            "stream": false
        });
        let req = decode(&body);
        assert_eq!(
            req.output_schema,
            Some(OutputSchema {
                name: None,
                schema: schema.clone()
            })
        );
        assert_eq!(req.temperature, Some(0.0));
        assert_eq!(
            req.extra_for(Dialect::Anthropic).expect("extra")["output_config"],
            json!({"format": {"type": "json_schema", "schema": schema}})
        );
        let encoded = Anthropic.encode_request(&req);
        assert_eq!(
            encoded["output_config"],
            json!({"format": {"type": "json_schema", "schema": schema}})
        );
        assert_eq!(encoded.get("output_format"), None);
        assert_eq!(encoded.get("stream"), None);
        assert_eq!(decode(&encoded), req);

        // Other keys of output_config (effort) survive; the schema follows output_schema.
        let mut req = decode(&json!({
            "model": "claude-opus-4-5", "max_tokens": 2048,
            "output_config": {"effort": "medium"},
            "messages": [{"role": "user", "content": "x"}]
        }));
        assert_eq!(req.output_schema, None);
        req.output_schema = Some(OutputSchema {
            name: Some("title".into()),
            schema: schema.clone(),
        });
        assert_eq!(
            Anthropic.encode_request(&req)["output_config"],
            json!({"effort": "medium", "format": {"type": "json_schema", "schema": schema}})
        );
    }

    #[test]
    fn decodes_beta_output_format_and_answers_in_kind() {
        let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
        let req = decode(&json!({
            "model": "claude-sonnet-4-5", "max_tokens": 1024,
            "output_format": {"type": "json_schema", "schema": schema},
            "messages": [{"role": "user", "content": "ok?"}]
        }));
        assert_eq!(req.output_schema.as_ref().map(|s| &s.schema), Some(&schema));
        let encoded = Anthropic.encode_request(&req);
        assert_eq!(
            encoded["output_format"],
            json!({"type": "json_schema", "schema": schema})
        );
        assert_eq!(encoded.get("output_config"), None);
    }

    #[test]
    fn decodes_sampling_stop_sequences_and_extras() {
        let req = decode(&json!({
            "model": "claude-3-5-haiku-20241022", "max_tokens": 300,
            "temperature": 0.2, "top_p": 0.9, "top_k": 40,
            "stop_sequences": ["\n\nHuman:", "</answer>"],
            "service_tier": "auto",
            "container": "container_011CQ",
            "mcp_servers": [{"type": "url", "url": "https://mcp.example.com/sse", "name": "docs"}],
            "messages": [
                {"role": "user", "content": "answer in tags"},
                {"role": "assistant", "content": "<answer>"}
            ]
        }));
        assert_eq!(req.temperature, Some(0.2));
        assert_eq!(req.top_p, Some(0.9));
        assert_eq!(req.top_k, Some(40));
        assert_eq!(req.stop, vec!["\n\nHuman:", "</answer>"]);
        assert_eq!(req.turns[1], Turn::text(Role::Assistant, "<answer>"));
        let extra = req.extra_for(Dialect::Anthropic).expect("extra");
        assert_eq!(
            extra.keys().collect::<Vec<_>>(),
            vec!["service_tier", "container", "mcp_servers"]
        );
        let encoded = Anthropic.encode_request(&req);
        assert_eq!(
            encoded["stop_sequences"],
            json!(["\n\nHuman:", "</answer>"])
        );
        assert_eq!(encoded["top_k"], json!(40));
        assert_eq!(encoded["top_p"], json!(0.9));
        assert_eq!(encoded["service_tier"], json!("auto"));
        assert_eq!(encoded["mcp_servers"][0]["name"], json!("docs"));
        assert_eq!(decode(&encoded), req);
    }

    #[test]
    fn rejects_invalid_requests_naming_the_field() {
        let user = json!([{"role": "user", "content": "hi"}]);
        let cases = [
            (
                json!({"model": "m", "messages": user}),
                "max_tokens: Field required",
                Some("max_tokens"),
            ),
            (
                json!({"max_tokens": 5, "messages": user}),
                "model: Field required",
                Some("model"),
            ),
            (
                json!({"model": "m", "max_tokens": 5}),
                "messages: Field required",
                Some("messages"),
            ),
            (
                json!({"model": "m", "max_tokens": "5", "messages": user}),
                "max_tokens: expected a non-negative integer",
                Some("max_tokens"),
            ),
            (
                json!({"model": "m", "max_tokens": 0, "messages": user}),
                "max_tokens: Input should be greater than or equal to 1",
                Some("max_tokens"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": {"role": "user"}}),
                "messages: expected array",
                Some("messages"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": 7}]}),
                "messages.1.content: expected string or array",
                Some("messages.1.content"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "a"}]}),
                "messages.0.role: expected 'user', 'assistant' or 'system', got 'tool'",
                Some("messages.0.role"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "messages.0.content.0.text: Field required",
                Some("messages.0.content.0.text"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}),
                "messages.0.content.0.source.type: unsupported image source type 'file' (expected 'base64' or 'url')",
                Some("messages.0.content.0.source.type"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": user, "tool_choice": {"type": "tool"}}),
                "tool_choice.name: Field required",
                Some("tool_choice.name"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": user, "thinking": {"type": "enabled"}}),
                "thinking.budget_tokens: Field required",
                Some("thinking.budget_tokens"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": user, "tools": [{"name": "Bash"}]}),
                "tools.0.input_schema: Field required",
                Some("tools.0.input_schema"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": user, "system": 3}),
                "system: expected string or array",
                Some("system"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": user, "stop_sequences": ["a", 1]}),
                "stop_sequences.1: expected string",
                Some("stop_sequences.1"),
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": user, "stream": "yes"}),
                "stream: expected boolean",
                Some("stream"),
            ),
        ];
        for (body, message, param) in cases {
            let err = decode_err(&body);
            assert_eq!(err.kind, ErrorKind::InvalidRequest, "{body}");
            assert_eq!(err.message, message, "{body}");
            assert_eq!(err.param.as_deref(), param, "{body}");
        }
        let err = Anthropic
            .decode_request(b"{\"model\": \"m\", ")
            .expect_err("malformed JSON");
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert!(
            err.message.starts_with("invalid JSON body"),
            "{}",
            err.message
        );
        let err = Anthropic.decode_request(b"[1]").expect_err("not an object");
        assert_eq!(err.message, "request body: expected a JSON object");
    }

    #[test]
    fn request_round_trips_and_encodes_claude_code_shapes() {
        let req = decode(&claude_code_request());
        let encoded = Anthropic.encode_request(&req);
        assert_eq!(decode(&encoded), req);

        assert_eq!(encoded["model"], json!("claude-sonnet-4-5-20250929"));
        assert_eq!(encoded["max_tokens"], json!(32000));
        assert_eq!(encoded["stream"], json!(true));
        assert_eq!(
            encoded["thinking"],
            json!({"type": "enabled", "budget_tokens": 31999})
        );
        assert_eq!(
            encoded["system"][0],
            json!({"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}})
        );
        assert_eq!(
            encoded["metadata"],
            json!({"user_id": "user_9f2c4e_account__session_1b7d7c0e-54f2-4d1e-9a55-3c1f0e2b8a11"})
        );
        assert_eq!(
            encoded["context_management"],
            json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]})
        );
        assert_eq!(encoded.get("tool_choice"), None);
        let messages = encoded["messages"].as_array().expect("messages");
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().expect("role"))
            .collect();
        assert_eq!(
            roles,
            vec!["user", "system", "assistant", "user", "assistant", "user"]
        );
        assert_eq!(
            messages[1]["content"],
            json!(
                "<system-reminder>This is a reminder that your todo list is currently empty.</system-reminder>"
            )
        );
        // Tool results and the user's text are one message again, results first, and the
        // cache breakpoint is back on the tool_result block.
        assert_eq!(
            messages[3]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "     1\tpub fn add(a: i32, b: i32) -> i32 {\n     2\t    a - b\n     3\t}\n"},
                {"type": "tool_result", "tool_use_id": "toolu_01B2xkMvXq7nD4s8aLkPzR3c", "content": "test tests::adds ... FAILED\nerror: test failed, to rerun pass `--lib`", "is_error": true, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "the test lives in tests/add.rs"}
            ])
        );
        assert_eq!(
            messages[4]["content"][0],
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"})
        );
        assert_eq!(
            messages[2]["content"][0]["signature"],
            json!("EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1ZsQ8r2nRZ0Jr3h6vJ4Qp9m5bZ")
        );
        assert_eq!(
            messages[5]["content"][2],
            json!({"type": "image", "source": {"type": "url", "url": "https://example.com/screenshot.png"}})
        );
        let tools = encoded["tools"].as_array().expect("tools");
        assert_eq!(tools.len(), 8);
        assert_eq!(
            tools[7],
            json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 8})
        );
        assert_eq!(tools[1]["input_schema"], bash_schema());
    }

    #[test]
    fn encodes_requests_from_other_dialects() {
        let req = Request {
            model: "claude-sonnet-4-5".into(),
            turns: vec![
                Turn::text(Role::System, "You are a coding agent."),
                Turn::text(Role::System, "Prefer small diffs."),
                Turn {
                    role: Role::User,
                    parts: vec![
                        Part::text("what is in this picture?"),
                        Part::Image {
                            source: ImageSource::Url {
                                url: "data:image/jpeg;base64,/9j/4AAQSkZJRg==".into(),
                            },
                            cache_control: None,
                        },
                    ],
                },
                Turn {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Thinking {
                            text: "unsigned reasoning from an OpenAI model".into(),
                            signature: None,
                            redacted: None,
                        },
                        Part::text("Let me check."),
                        Part::ToolCall {
                            id: "functions.Read:0".into(),
                            name: "Read".into(),
                            arguments: json!("{not json"),
                        },
                        Part::ToolCall {
                            id: "call_2".into(),
                            name: "Glob".into(),
                            arguments: json!("{\"pattern\": \"*.rs\"}"),
                        },
                    ],
                },
                Turn {
                    role: Role::Tool,
                    parts: vec![Part::ToolResult {
                        call_id: "functions.Read:0".into(),
                        name: Some("Read".into()),
                        content: vec![Part::text("")],
                        is_error: false,
                    }],
                },
                Turn {
                    role: Role::Tool,
                    parts: vec![Part::ToolResult {
                        call_id: "call_2".into(),
                        name: None,
                        content: vec![Part::text("a.rs"), Part::text("b.rs")],
                        is_error: false,
                    }],
                },
                Turn::text(Role::User, "now summarise"),
                Turn {
                    role: Role::Assistant,
                    parts: vec![Part::Thinking {
                        text: "only unsigned thinking".into(),
                        signature: None,
                        redacted: None,
                    }],
                },
                Turn::text(Role::User, "and be brief"),
            ],
            tools: vec![
                ToolDef {
                    name: "Read".into(),
                    description: Some("Read a file".into()),
                    parameters: json!({"properties": {"path": {"type": "string"}}}),
                    native: None,
                },
                ToolDef {
                    name: "Glob".into(),
                    description: None,
                    parameters: Value::Null,
                    native: None,
                },
                ToolDef {
                    name: "web_search".into(),
                    description: None,
                    parameters: json!({}),
                    native: Some(NativeTool {
                        dialect: Dialect::OpenAiResponses,
                        raw: json!({"type": "web_search"}),
                    }),
                },
            ],
            parallel_tool_calls: Some(false),
            thinking: Some(ThinkingConfig {
                budget_tokens: None,
                effort: Some("high".into()),
            }),
            seed: Some(7),
            metadata: Some(json!({"user": "alice", "user_id": "u-1"})),
            extra: Some(DialectExtra {
                dialect: Dialect::OpenAiChat,
                fields: [("store".to_owned(), json!(true))].into_iter().collect(),
            }),
            ..Request::default()
        };
        let body = Anthropic.encode_request(&req);
        assert_eq!(body["max_tokens"], json!(DEFAULT_MAX_TOKENS));
        assert_eq!(
            body["system"],
            json!([
                {"type": "text", "text": "You are a coding agent."},
                {"type": "text", "text": "Prefer small diffs."}
            ])
        );
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [
                    {"type": "text", "text": "what is in this picture?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQSkZJRg=="}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "functions_Read_0", "name": "Read", "input": {}},
                    {"type": "tool_use", "id": "call_2", "name": "Glob", "input": {"pattern": "*.rs"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "functions_Read_0"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": [
                        {"type": "text", "text": "a.rs"}, {"type": "text", "text": "b.rs"}
                    ]},
                    {"type": "text", "text": "now summarise"},
                    {"type": "text", "text": "and be brief"}
                ]}
            ])
        );
        assert_eq!(
            body["tools"],
            json!([
                {"name": "Read", "description": "Read a file", "input_schema": {"properties": {"path": {"type": "string"}}, "type": "object"}},
                {"name": "Glob", "input_schema": {"type": "object"}}
            ])
        );
        assert_eq!(
            body["tool_choice"],
            json!({"type": "auto", "disable_parallel_tool_use": true})
        );
        // high effort → 24576, which does not fit under the default 8192 max_tokens.
        assert_eq!(body.get("thinking"), None);
        assert_eq!(body["metadata"], json!({"user_id": "u-1"}));
        assert_eq!(body.get("seed"), None);
        assert_eq!(body.get("store"), None);
        assert_eq!(body.get("stream"), None);
    }

    #[test]
    fn maps_effort_to_a_thinking_budget() {
        let thinking = |effort: &str, max_tokens: u32, temperature: Option<f64>| {
            let req = Request {
                model: "claude-opus-4-1".into(),
                turns: vec![Turn::text(Role::User, "x")],
                max_tokens: Some(max_tokens),
                temperature,
                thinking: Some(ThinkingConfig {
                    budget_tokens: None,
                    effort: Some(effort.into()),
                }),
                ..Request::default()
            };
            Anthropic.encode_request(&req).get("thinking").cloned()
        };
        let enabled = |b: u32| Some(json!({"type": "enabled", "budget_tokens": b}));
        assert_eq!(thinking("low", 16000, None), enabled(2048));
        assert_eq!(thinking("medium", 16000, Some(1.0)), enabled(8192));
        assert_eq!(thinking("high", 32000, None), enabled(24576));
        assert_eq!(thinking("high", 24576, None), None);
        assert_eq!(thinking("medium", 16000, Some(0.3)), None);
        assert_eq!(thinking("minimal", 16000, None), None);
        // No budget and no effort is Anthropic's adaptive thinking.
        let req = Request {
            thinking: Some(ThinkingConfig::default()),
            ..Request::default()
        };
        assert_eq!(
            Anthropic.encode_request(&req)["thinking"],
            json!({"type": "adaptive"})
        );
    }

    fn response_fixture() -> Value {
        json!({
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [
                {"type": "thinking", "thinking": "The operator is wrong.", "signature": "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs"},
                {"type": "text", "text": "Fixing the operator.", "citations": null},
                {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "Edit", "input": {"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "container": null,
            "usage": {
                "input_tokens": 12,
                "cache_creation_input_tokens": 2048,
                "cache_read_input_tokens": 18432,
                "cache_creation": {"ephemeral_5m_input_tokens": 2048, "ephemeral_1h_input_tokens": 0},
                "output_tokens": 89,
                "service_tier": "standard"
            }
        })
    }

    fn expected_response() -> Response {
        Response {
            id: "msg_01XFDUDYJgAACzvnptvVoYEL".into(),
            model: "claude-sonnet-4-5-20250929".into(),
            parts: vec![
                Part::Thinking {
                    text: "The operator is wrong.".into(),
                    signature: Some("EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs".into()),
                    redacted: None,
                },
                Part::text("Fixing the operator."),
                Part::ToolCall {
                    id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                    name: "Edit".into(),
                    arguments: json!({"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}),
                },
            ],
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 12,
                output_tokens: 89,
                cache_read_tokens: 18432,
                cache_write_tokens: 2048,
                reasoning_tokens: 0,
            },
        }
    }

    #[test]
    fn response_decodes_and_round_trips() {
        let resp = Anthropic
            .decode_response(response_fixture().to_string().as_bytes())
            .expect("decodes");
        assert_eq!(resp, expected_response());
        let encoded = Anthropic.encode_response(&resp);
        assert_eq!(
            encoded,
            json!({
                "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [
                    {"type": "thinking", "thinking": "The operator is wrong.", "signature": "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs"},
                    {"type": "text", "text": "Fixing the operator."},
                    {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "Edit", "input": {"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}}
                ],
                "stop_reason": "tool_use",
                "stop_sequence": null,
                "usage": {"input_tokens": 12, "cache_creation_input_tokens": 2048, "cache_read_input_tokens": 18432, "output_tokens": 89}
            })
        );
        let again = Anthropic
            .decode_response(encoded.to_string().as_bytes())
            .expect("decodes again");
        assert_eq!(again, resp);
    }

    #[test]
    fn response_encode_normalises_foreign_replies() {
        let resp = Response {
            id: "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG".into(),
            model: "gpt-5".into(),
            parts: vec![
                Part::Thinking {
                    text: "reasoning".into(),
                    signature: None,
                    redacted: None,
                },
                Part::Thinking {
                    text: String::new(),
                    signature: None,
                    redacted: Some("opaque".into()),
                },
                Part::ToolCall {
                    id: "call_abc".into(),
                    name: "Bash".into(),
                    arguments: json!("{\"command\":\"ls\"}"),
                },
            ],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        };
        let body = Anthropic.encode_response(&resp);
        assert_eq!(
            body["id"],
            json!("msg_chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG")
        );
        assert_eq!(body["stop_reason"], json!("tool_use"));
        assert_eq!(
            body["content"],
            json!([
                {"type": "thinking", "thinking": "reasoning", "signature": ""},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "call_abc", "name": "Bash", "input": {"command": "ls"}}
            ])
        );
        let filtered = Response {
            parts: vec![Part::text("I can't help with that.")],
            stop_reason: StopReason::ContentFilter,
            ..resp
        };
        assert_eq!(
            Anthropic.encode_response(&filtered)["stop_reason"],
            json!("refusal")
        );
    }

    #[test]
    fn response_decode_handles_server_tools_stop_reasons_and_garbage() {
        let body = json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-opus-4-1",
            "content": [
                {"type": "server_tool_use", "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "name": "web_search", "input": {"query": "rust 1.90 release"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "content": [{"type": "web_search_result", "url": "https://blog.rust-lang.org", "title": "Rust"}]},
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "text", "text": "Rust 1.90 shipped."}
            ],
            "stop_reason": "pause_turn", "stop_sequence": null,
            "usage": {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": null, "cache_read_input_tokens": null}
        });
        let resp = Anthropic
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(resp.stop_reason, StopReason::PauseTurn);
        assert_eq!(
            resp.parts,
            vec![
                Part::ToolCall {
                    id: "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE".into(),
                    name: "web_search".into(),
                    arguments: json!({"query": "rust 1.90 release"}),
                },
                Part::Thinking {
                    text: String::new(),
                    signature: None,
                    redacted: Some("EmwKAhgB".into()),
                },
                Part::text("Rust 1.90 shipped."),
            ]
        );
        assert_eq!(resp.usage.input_tokens, 100);
        assert_eq!(resp.usage.cache_read_tokens, 0);

        for (wire, reason) in [
            ("end_turn", StopReason::EndTurn),
            ("max_tokens", StopReason::MaxTokens),
            ("stop_sequence", StopReason::StopSequence),
            ("tool_use", StopReason::ToolUse),
            ("pause_turn", StopReason::PauseTurn),
            ("refusal", StopReason::Refusal),
            ("model_context_window_exceeded", StopReason::MaxTokens),
        ] {
            assert_eq!(decode_stop_reason(wire), reason);
        }

        for garbage in [
            &b"<html>502 Bad Gateway</html>"[..],
            br#"{"id": "msg_1", "type": "message"}"#,
            br#"{"id": "msg_1", "content": [{"text": "no type"}]}"#,
            br#"{"id": "msg_1", "content": [{"type": "tool_use", "name": "x"}]}"#,
        ] {
            let err = Anthropic.decode_response(garbage).expect_err("garbage");
            assert_eq!(err.kind, ErrorKind::BadGateway, "{err}");
        }
        let err = Anthropic
            .decode_response(
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
            .expect_err("error body");
        assert_eq!(err, ApiError::new(ErrorKind::Overloaded, "Overloaded"));
    }

    const CAPTURED_STREAM: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":2048,\"cache_read_input_tokens\":18432,\"output_tokens\":1,\"service_tier\":\"standard\"}}}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\
\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"The test expects add\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\" to sum, so fix the operator.\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"The operator is wrong \u{2014} \"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"fixing it.\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"Edit\",\"input\":{}}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"file_path\\\": \\\"/repo/src/lib.rs\\\", \"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"old_string\\\": \\\"a - b\\\", \\\"new_string\\\": \\\"a + b\\\"}\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":2}\n\
\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\
\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\
\n";

    fn captured_events() -> Vec<StreamEvent> {
        vec![
            E::Start {
                id: "msg_01XFDUDYJgAACzvnptvVoYEL".into(),
                model: "claude-sonnet-4-5-20250929".into(),
                usage: Usage {
                    input_tokens: 12,
                    output_tokens: 0,
                    cache_read_tokens: 18432,
                    cache_write_tokens: 2048,
                    reasoning_tokens: 0,
                },
            },
            E::PartStart {
                index: 0,
                kind: PartKind::Thinking,
            },
            E::ThinkingDelta {
                index: 0,
                text: "The test expects add".into(),
            },
            E::ThinkingDelta {
                index: 0,
                text: " to sum, so fix the operator.".into(),
            },
            E::ThinkingSignature {
                index: 0,
                signature: "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs".into(),
            },
            E::PartStop { index: 0 },
            E::PartStart {
                index: 1,
                kind: PartKind::Text,
            },
            E::TextDelta {
                index: 1,
                text: "The operator is wrong \u{2014} ".into(),
            },
            E::TextDelta {
                index: 1,
                text: "fixing it.".into(),
            },
            E::PartStop { index: 1 },
            E::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                    name: "Edit".into(),
                },
            },
            E::ToolArgsDelta {
                index: 2,
                json: "{\"file_path\": \"/repo/src/lib.rs\", ".into(),
            },
            E::ToolArgsDelta {
                index: 2,
                json: "\"old_string\": \"a - b\", \"new_string\": \"a + b\"}".into(),
            },
            E::PartStop { index: 2 },
            E::Finish {
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 12,
                    output_tokens: 89,
                    cache_read_tokens: 18432,
                    cache_write_tokens: 2048,
                    reasoning_tokens: 0,
                },
            },
        ]
    }

    fn decode_stream(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut decoder = Anthropic.stream_decoder();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(decoder.feed(chunk).expect("well-formed stream"));
        }
        events.extend(decoder.finish());
        events
    }

    #[test]
    fn stream_decodes_at_every_split_point() {
        let wire = CAPTURED_STREAM.as_bytes();
        let expected = captured_events();
        for split in 0..=wire.len() {
            let events = decode_stream(&[&wire[..split], &wire[split..]]);
            assert_eq!(events, expected, "split at {split}");
        }
        let bytes: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(decode_stream(&bytes), expected);
        let crlf = CAPTURED_STREAM.replace('\n', "\r\n");
        assert_eq!(decode_stream(&[crlf.as_bytes()]), expected);

        let mut builder = ResponseBuilder::new();
        for event in &expected {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(
            resp.parts[2],
            Part::ToolCall {
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "Edit".into(),
                arguments: json!({"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}),
            }
        );
        assert_eq!(
            resp.plain_text(),
            "The operator is wrong \u{2014} fixing it."
        );
    }

    fn sse(events: &[Value]) -> String {
        let mut out = Vec::new();
        for event in events {
            let name = event["type"].as_str().expect("type");
            write_sse_json(&mut out, Some(name), event);
        }
        String::from_utf8(out).expect("utf8")
    }

    fn message_start(id: &str) -> Value {
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "model": "claude-opus-4-1-20250805", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 2679, "output_tokens": 3}}})
    }

    #[test]
    fn stream_maps_block_indices_and_skips_unmodelled_blocks() {
        let wire = sse(&[
            message_start("msg_01"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgB"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "server_tool_use", "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB", "name": "web_search", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"weather in NYC today\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB", "content": [{"type": "web_search_result", "title": "Weather", "url": "https://weather.com"}]}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "It is sunny."}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "citations_delta", "citation": {"type": "web_search_result_location"}}}),
            json!({"type": "content_block_stop", "index": 3}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"input_tokens": 10682, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 510, "server_tool_use": {"web_search_requests": 1}}}),
            json!({"type": "message_stop"}),
        ]);
        let events = decode_stream(&[wire.as_bytes()]);
        assert_eq!(
            events,
            vec![
                E::Start {
                    id: "msg_01".into(),
                    model: "claude-opus-4-1-20250805".into(),
                    usage: Usage {
                        input_tokens: 2679,
                        ..Usage::default()
                    },
                },
                E::PartStart {
                    index: 0,
                    kind: PartKind::ToolCall {
                        id: "srvtoolu_014hJH82Qum7Td6UV8gDXThB".into(),
                        name: "web_search".into(),
                    },
                },
                E::ToolArgsDelta {
                    index: 0,
                    json: "{\"query\": \"weather in NYC today\"}".into(),
                },
                E::PartStop { index: 0 },
                E::PartStart {
                    index: 1,
                    kind: PartKind::Text,
                },
                E::TextDelta {
                    index: 1,
                    text: "It is sunny.".into(),
                },
                E::PartStop { index: 1 },
                E::Finish {
                    stop_reason: StopReason::EndTurn,
                    usage: Usage {
                        input_tokens: 10682,
                        output_tokens: 510,
                        ..Usage::default()
                    },
                },
            ]
        );
    }

    #[test]
    fn truncated_stream_ends_in_an_error() {
        let cut = CAPTURED_STREAM
            .find("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}")
            .expect("marker");
        let events = decode_stream(&[&CAPTURED_STREAM.as_bytes()[..cut]]);
        let last = events.last().expect("events");
        assert_eq!(
            last,
            &E::Error {
                error: ApiError::new(
                    ErrorKind::BadGateway,
                    "anthropic stream ended before message_stop"
                )
            }
        );
        assert!(!events.iter().any(|e| matches!(e, E::Finish { .. })));
        assert_eq!(events.len(), 10);

        // Nothing at all is still an error, never a fabricated Finish.
        let events = decode_stream(&[]);
        assert!(matches!(&events[..], [E::Error { error }] if error.kind == ErrorKind::BadGateway));

        // A message_stop without a blank line after it still completes the stream.
        let unterminated = CAPTURED_STREAM.trim_end();
        let events = decode_stream(&[unterminated.as_bytes()]);
        assert_eq!(events, captured_events());
    }

    #[test]
    fn stream_error_event_becomes_an_error() {
        let wire = format!(
            "{}event: error\ndata: {{\"type\": \"error\", \"error\": {{\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}}}\n\n",
            sse(&[message_start("msg_02")])
        );
        let events = decode_stream(&[wire.as_bytes()]);
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[1],
            E::Error {
                error: ApiError::new(ErrorKind::Overloaded, "Overloaded")
            }
        );
    }

    #[test]
    fn malformed_stream_json_is_a_bad_gateway() {
        let mut decoder = Anthropic.stream_decoder();
        let err = decoder
            .feed(b"event: message_start\ndata: {\"type\": \"message_start\", \"mess\n\n")
            .expect_err("malformed");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert!(err.message.contains("not JSON"), "{}", err.message);
        assert_eq!(decoder.finish(), Vec::new());

        let mut decoder = Anthropic.stream_decoder();
        let err = decoder
            .feed(b"data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"text\"}}\n\n")
            .expect_err("no index");
        assert_eq!(err.kind, ErrorKind::BadGateway);
    }

    fn parse_sse(bytes: &[u8]) -> Vec<(String, Value)> {
        let mut parser = SseParser::new();
        let mut events = parser.feed(bytes);
        events.extend(parser.finish());
        events
            .into_iter()
            .map(|e| {
                let data: Value = serde_json::from_str(&e.data).expect("json data");
                (e.event.expect("named event"), data)
            })
            .collect()
    }

    #[test]
    fn stream_encodes_exactly_what_the_api_writes() {
        let mut encoder = Anthropic.stream_encoder();
        let mut out = Vec::new();
        let response = Response {
            id: "resp_68af".into(),
            ..expected_response()
        };
        for event in events_of(&response) {
            encoder.encode(&event, &mut out);
        }
        let text = String::from_utf8(out.clone()).expect("utf8");
        assert!(text.starts_with("event: message_start\ndata: {"), "{text}");
        assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));

        let events = parse_sse(&out);
        for (name, data) in &events {
            assert_eq!(data["type"], json!(name), "event name matches data.type");
        }
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(
            events[0].1,
            json!({"type": "message_start", "message": {
                "id": "msg_resp_68af", "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5-20250929", "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 12, "cache_creation_input_tokens": 2048, "cache_read_input_tokens": 18432, "output_tokens": 0}
            }})
        );
        assert_eq!(events[1].1, json!({"type": "ping"}));
        assert_eq!(
            events[2].1,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
        );
        assert_eq!(
            events[3].1,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "The operator is wrong."}})
        );
        assert_eq!(
            events[4].1,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs"}})
        );
        assert_eq!(
            events[5].1,
            json!({"type": "content_block_stop", "index": 0})
        );
        assert_eq!(
            events[6].1,
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})
        );
        assert_eq!(
            events[7].1,
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Fixing the operator."}})
        );
        assert_eq!(
            events[9].1,
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "Edit", "input": {}}})
        );
        assert_eq!(events[10].1["delta"]["type"], json!("input_json_delta"));
        let args: Value = serde_json::from_str(
            events[10].1["delta"]["partial_json"]
                .as_str()
                .expect("partial_json"),
        )
        .expect("args json");
        assert_eq!(
            args,
            json!({"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"})
        );
        assert_eq!(
            events[12].1,
            json!({"type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"input_tokens": 12, "cache_creation_input_tokens": 2048, "cache_read_input_tokens": 18432, "output_tokens": 89}})
        );

        // Our own decoder reads it back to the same reply.
        let mut builder = ResponseBuilder::new();
        for event in decode_stream(&[&out]) {
            builder.push(&event);
        }
        let back = builder.finish().expect("complete");
        assert_eq!(
            back,
            Response {
                id: "msg_resp_68af".into(),
                ..response
            }
        );
    }

    #[test]
    fn stream_encoder_writes_errors_and_stops() {
        let mut encoder = Anthropic.stream_encoder();
        let mut out = Vec::new();
        encoder.encode(
            &E::Start {
                id: "msg_07".into(),
                model: "qwen3-coder".into(),
                usage: Usage::default(),
            },
            &mut out,
        );
        encoder.encode(
            &E::PartStart {
                index: 0,
                kind: PartKind::Text,
            },
            &mut out,
        );
        encoder.encode(
            &E::Error {
                error: ApiError::new(ErrorKind::Timeout, "backend timed out after 300s"),
            },
            &mut out,
        );
        encoder.encode(
            &E::Finish {
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
            },
            &mut out,
        );
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.ends_with(
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"backend timed out after 300s\"}}\n\n"
        ), "{text}");
        assert!(!text.contains("message_stop"));
        assert!(text.contains("\"id\":\"msg_07\""));
    }

    #[test]
    fn stream_encoder_marks_tool_turns_from_foreign_backends() {
        let mut encoder = Anthropic.stream_encoder();
        let mut out = Vec::new();
        for event in [
            E::Start {
                id: "chatcmpl-1".into(),
                model: "gpt-5".into(),
                usage: Usage::default(),
            },
            E::PartStart {
                index: 0,
                kind: PartKind::ToolCall {
                    id: "call_1".into(),
                    name: "Bash".into(),
                },
            },
            E::ToolArgsDelta {
                index: 0,
                json: "{\"command\":\"ls\"}".into(),
            },
            E::PartStop { index: 0 },
            E::Finish {
                stop_reason: StopReason::EndTurn,
                usage: Usage {
                    input_tokens: 5,
                    output_tokens: 7,
                    ..Usage::default()
                },
            },
        ] {
            encoder.encode(&event, &mut out);
        }
        let events = parse_sse(&out);
        assert_eq!(events[0].1["message"]["id"], json!("msg_chatcmpl-1"));
        let delta = &events[events.len() - 2].1;
        assert_eq!(delta["delta"]["stop_reason"], json!("tool_use"));
        assert_eq!(delta["usage"]["output_tokens"], json!(7));
        assert_eq!(delta["usage"]["input_tokens"], json!(5));
    }

    #[test]
    fn encodes_every_error_kind() {
        let cases = [
            (ErrorKind::InvalidRequest, "invalid_request_error"),
            (ErrorKind::Authentication, "authentication_error"),
            (ErrorKind::Permission, "permission_error"),
            (ErrorKind::NotFound, "not_found_error"),
            (ErrorKind::RequestTooLarge, "request_too_large"),
            (ErrorKind::RateLimit, "rate_limit_error"),
            (ErrorKind::Internal, "api_error"),
            (ErrorKind::BadGateway, "api_error"),
            (ErrorKind::Timeout, "api_error"),
            (ErrorKind::Unavailable, "overloaded_error"),
            (ErrorKind::Overloaded, "overloaded_error"),
        ];
        for (kind, wire) in cases {
            let body = Anthropic.encode_error(&ApiError::new(kind, "something happened"));
            assert_eq!(
                body,
                json!({"type": "error", "error": {"type": wire, "message": "something happened"}})
            );
        }
        let err = ApiError::invalid("max_tokens: Field required").with_param("max_tokens");
        let body = Anthropic.encode_error(&err);
        let back = Anthropic.decode_error(400, body.to_string().as_bytes());
        assert_eq!(back.kind, ErrorKind::InvalidRequest);
        assert_eq!(back.message, "max_tokens: Field required");
    }

    #[test]
    fn decodes_backend_errors() {
        let err = Anthropic.decode_error(
            529,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#,
        );
        assert_eq!(err, ApiError::new(ErrorKind::Overloaded, "Overloaded"));
        let err = Anthropic.decode_error(
            429,
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 80,000 input tokens per minute."}}"#,
        );
        assert_eq!(err.kind, ErrorKind::RateLimit);
        assert!(err.message.starts_with("This request would exceed"));
        // An unknown type falls back on the status.
        let err = Anthropic.decode_error(
            404,
            br#"{"type":"error","error":{"type":"model_missing","message":"model: claude-9"}}"#,
        );
        assert_eq!(err, ApiError::new(ErrorKind::NotFound, "model: claude-9"));
        // OpenAI-compatible servers behind an Anthropic endpoint.
        let err = Anthropic.decode_error(500, br#"{"error":{"message":"CUDA out of memory"}}"#);
        assert_eq!(
            err,
            ApiError::new(ErrorKind::BadGateway, "CUDA out of memory")
        );
        // Not JSON: the body text, truncated to 500 characters.
        let html = format!("<html><body>{}</body></html>", "\u{e9}".repeat(600));
        let err = Anthropic.decode_error(502, html.as_bytes());
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert_eq!(err.message.chars().count(), 500);
        assert!(err.message.starts_with("<html><body>\u{e9}"));
        let err = Anthropic.decode_error(503, b"  ");
        assert_eq!(
            err,
            ApiError::new(ErrorKind::Unavailable, "backend returned HTTP 503")
        );
    }

    #[test]
    fn codec_identity() {
        assert_eq!(Anthropic.dialect(), Dialect::Anthropic);
        assert_eq!(Anthropic.stream_content_type(), "text/event-stream");
        assert_eq!(
            crate::codec(Dialect::Anthropic).dialect(),
            Dialect::Anthropic
        );
    }

    #[test]
    fn unmodelled_blocks_survive_to_an_anthropic_backend() {
        let body = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
            {"type": "text", "text": "summarise"}
        ]}]});
        let request = Anthropic
            .decode_request(body.to_string().as_bytes())
            .expect("unknown blocks are kept, not refused");
        assert!(
            matches!(&request.turns[0].parts[0], Part::Native { dialect: Dialect::Anthropic, raw } if raw["type"] == "document")
        );
        let encoded = Anthropic.encode_request(&request);
        assert_eq!(
            encoded["messages"][0]["content"][0],
            body["messages"][0]["content"][0]
        );
    }
}
