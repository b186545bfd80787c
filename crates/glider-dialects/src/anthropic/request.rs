//! Anthropic request bodies: decoding a client's `/v1/messages` body into ngl and encoding
//! ngl for an Anthropic backend.
//!
//! One file, past 600 lines, on purpose: each field's decoding and its encoding sit
//! side by side so a mapping is changed in both directions at once (the folder already
//! splits the dialect by concern: request, response, stream, error). Its tests are in
//! `request/tests.rs`.

use std::collections::HashMap;

use glider_ngl::{
    ApiError, Dialect, DialectExtra, ImageSource, NativeTool, OutputSchema, Part, Request, Role,
    ThinkingConfig, ToolChoice, ToolDef, Turn,
};
use serde_json::{Map, Value, json};

use crate::json::{FieldReader, Fields, Object, invalid_at, join_path};
use crate::parse_json;

/// Anthropic words its 400s like pydantic (`Field required`, `expected string`).
pub(super) const FIELDS: &FieldReader = &FieldReader::ANTHROPIC;

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

fn cache_control(obj: &Object) -> Option<Value> {
    obj.present("cache_control").cloned()
}

pub(super) fn empty_object() -> Value {
    Value::Object(Map::new())
}

pub(super) fn decode_request(body: &[u8]) -> Result<Request, ApiError> {
    let value = &parse_json(body)?;
    let obj = value
        .as_object()
        .ok_or_else(|| ApiError::invalid("request body: expected a JSON object"))?;
    let model = FIELDS.required_str(obj, "model", "")?.to_owned();
    let max_tokens = FIELDS
        .optional_u32(obj, "max_tokens", "")?
        .ok_or_else(|| invalid_at("max_tokens", "Field required"))?;
    if max_tokens == 0 {
        return Err(invalid_at(
            "max_tokens",
            "Input should be greater than or equal to 1",
        ));
    }
    let messages = FIELDS
        .required(obj, "messages", "")?
        .as_array()
        .ok_or_else(|| invalid_at("messages", "expected array"))?;

    let mut turns = decode_system(obj.present("system"))?;
    turns.extend(decode_messages(messages)?);
    let (tool_choice, parallel_tool_calls) = decode_tool_choice(obj.present("tool_choice"))?;
    let metadata = match obj.present("metadata") {
        None => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(_) => return Err(invalid_at("metadata", "expected object")),
    };
    let fields: Object = obj
        .iter()
        .filter(|(key, _)| !MODELLED_FIELDS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();

    Ok(Request {
        model,
        turns,
        tools: decode_tools(obj.present("tools"))?.into(),
        tool_choice,
        parallel_tool_calls,
        max_tokens: Some(max_tokens),
        temperature: FIELDS.optional_f64(obj, "temperature", "")?,
        top_p: FIELDS.optional_f64(obj, "top_p", "")?,
        top_k: FIELDS.optional_u32(obj, "top_k", "")?,
        seed: None,
        stop: decode_stop_sequences(obj.present("stop_sequences"))?,
        stream: FIELDS.optional_bool(obj, "stream", "")?.unwrap_or(false),
        thinking: decode_thinking(obj.present("thinking"))?,
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
                let obj = FIELDS.object(block, &path)?;
                let kind = FIELDS.required_str(obj, "type", &path)?;
                if kind != "text" {
                    return Err(invalid_at(
                        &join_path(&path, "type"),
                        format!("expected 'text', got '{kind}'"),
                    ));
                }
                Ok(Part::Text {
                    text: FIELDS.required_str(obj, "text", &path)?.to_owned(),
                    cache_control: cache_control(obj),
                })
            })
            .collect(),
        _ => Err(invalid_at(path, "expected string or array")),
    }
}

fn decode_messages(messages: &[Value]) -> Result<Vec<Turn>, ApiError> {
    let mut turns = Vec::new();
    // tool_use id → tool name, so tool results can carry the name (Ollama wants it).
    let mut tool_names: HashMap<String, String> = HashMap::new();
    for (i, message) in messages.iter().enumerate() {
        let path = format!("messages.{i}");
        let obj = FIELDS.object(message, &path)?;
        let role = FIELDS.required_str(obj, "role", &path)?;
        let content = FIELDS.required(obj, "content", &path)?;
        let content_path = join_path(&path, "content");
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
                return Err(invalid_at(
                    &join_path(&path, "role"),
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
        _ => Err(invalid_at(path, "expected string or array")),
    }
}

fn decode_block(
    block: &Value,
    path: &str,
    tool_names: &mut HashMap<String, String>,
) -> Result<Part, ApiError> {
    let obj = FIELDS.object(block, path)?;
    match FIELDS.required_str(obj, "type", path)? {
        "text" => Ok(Part::Text {
            text: FIELDS.required_str(obj, "text", path)?.to_owned(),
            cache_control: cache_control(obj),
        }),
        "image" => decode_image(obj, path),
        "tool_use" => {
            let id = FIELDS.required_str(obj, "id", path)?.to_owned();
            let name = FIELDS.required_str(obj, "name", path)?.to_owned();
            tool_names.insert(id.clone(), name.clone());
            Ok(Part::ToolCall {
                id,
                name,
                arguments: obj.present("input").cloned().unwrap_or_else(empty_object),
            })
        }
        "tool_result" => decode_tool_result(obj, path, tool_names),
        "thinking" => Ok(Part::Thinking {
            text: FIELDS.required_str(obj, "thinking", path)?.to_owned(),
            signature: FIELDS
                .optional_str(obj, "signature", path)?
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            redacted: None,
        }),
        "redacted_thinking" => Ok(Part::Thinking {
            text: String::new(),
            signature: None,
            redacted: Some(FIELDS.required_str(obj, "data", path)?.to_owned()),
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
    let source_path = join_path(path, "source");
    let source = FIELDS.object(FIELDS.required(obj, "source", path)?, &source_path)?;
    let source = match FIELDS.required_str(source, "type", &source_path)? {
        "base64" => ImageSource::Base64 {
            media_type: FIELDS
                .required_str(source, "media_type", &source_path)?
                .to_owned(),
            data: FIELDS
                .required_str(source, "data", &source_path)?
                .to_owned(),
        },
        "url" => ImageSource::Url {
            url: FIELDS.required_str(source, "url", &source_path)?.to_owned(),
        },
        other => {
            return Err(invalid_at(
                &join_path(&source_path, "type"),
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
    let call_id = FIELDS.required_str(obj, "tool_use_id", path)?.to_owned();
    let content_path = join_path(path, "content");
    let mut content = match obj.present("content") {
        None => Vec::new(),
        Some(Value::String(s)) if s.is_empty() => Vec::new(),
        Some(Value::String(s)) => vec![Part::text(s.clone())],
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(i, block)| {
                let path = format!("{content_path}.{i}");
                let inner = FIELDS.object(block, &path)?;
                match FIELDS.required_str(inner, "type", &path)? {
                    "text" => Ok(Part::Text {
                        text: FIELDS.required_str(inner, "text", &path)?.to_owned(),
                        cache_control: cache_control(inner),
                    }),
                    "image" => decode_image(inner, &path),
                    _ => Ok(native(block)),
                }
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(invalid_at(&content_path, "expected string or array")),
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
        is_error: FIELDS
            .optional_bool(obj, "is_error", path)?
            .unwrap_or(false),
    })
}

fn decode_tools(tools: Option<&Value>) -> Result<Vec<ToolDef>, ApiError> {
    let Some(tools) = tools else {
        return Ok(Vec::new());
    };
    let tools = tools
        .as_array()
        .ok_or_else(|| invalid_at("tools", "expected array"))?;
    tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let path = format!("tools.{i}");
            let obj = FIELDS.object(tool, &path)?;
            let description = FIELDS
                .optional_str(obj, "description", &path)?
                .map(str::to_owned);
            match FIELDS.optional_str(obj, "type", &path)? {
                None | Some("custom") => {
                    let schema = FIELDS.required(obj, "input_schema", &path)?;
                    if !schema.is_object() {
                        return Err(invalid_at(
                            &join_path(&path, "input_schema"),
                            "expected object",
                        ));
                    }
                    Ok(ToolDef {
                        name: FIELDS.required_str(obj, "name", &path)?.to_owned(),
                        description,
                        parameters: schema.clone(),
                        native: None,
                    })
                }
                Some(kind) => Ok(ToolDef {
                    name: FIELDS
                        .optional_str(obj, "name", &path)?
                        .unwrap_or(kind)
                        .to_owned(),
                    description,
                    parameters: obj
                        .present("input_schema")
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
    let obj = FIELDS.object(choice, path)?;
    let choice = match FIELDS.required_str(obj, "type", path)? {
        "auto" => ToolChoice::Auto,
        "any" => ToolChoice::Required,
        "none" => ToolChoice::None,
        "tool" => ToolChoice::Tool {
            name: FIELDS.required_str(obj, "name", path)?.to_owned(),
        },
        other => {
            return Err(invalid_at(
                "tool_choice.type",
                format!("expected 'auto', 'any', 'tool' or 'none', got '{other}'"),
            ));
        }
    };
    let parallel = FIELDS
        .optional_bool(obj, "disable_parallel_tool_use", path)?
        .map(|off| !off);
    Ok((Some(choice), parallel))
}

fn decode_thinking(thinking: Option<&Value>) -> Result<Option<ThinkingConfig>, ApiError> {
    let Some(thinking) = thinking else {
        return Ok(None);
    };
    let path = "thinking";
    let obj = FIELDS.object(thinking, path)?;
    match FIELDS.required_str(obj, "type", path)? {
        "enabled" => {
            let budget = FIELDS
                .optional_u32(obj, "budget_tokens", path)?
                .ok_or_else(|| invalid_at("thinking.budget_tokens", "Field required"))?;
            Ok(Some(ThinkingConfig {
                budget_tokens: Some(budget),
                effort: None,
            }))
        }
        "adaptive" => Ok(Some(ThinkingConfig::default())),
        "disabled" => Ok(None),
        other => Err(invalid_at(
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
        .ok_or_else(|| invalid_at("stop_sequences", "expected array"))?
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| invalid_at(&format!("stop_sequences.{i}"), "expected string"))
        })
        .collect()
}

/// `output_config.format` (GA) or `output_format` (beta) with `type: json_schema`.
fn decode_output_schema(obj: &Object) -> Result<Option<OutputSchema>, ApiError> {
    let mut schema = None;
    if let Some(format) = obj.present("output_format") {
        schema = json_schema_format(format, "output_format")?;
    }
    if let Some(config) = obj.present("output_config") {
        let config = FIELDS.object(config, "output_config")?;
        if let Some(format) = config.present("format") {
            schema = json_schema_format(format, "output_config.format")?.or(schema);
        }
    }
    Ok(schema)
}

fn json_schema_format(format: &Value, path: &str) -> Result<Option<OutputSchema>, ApiError> {
    let obj = FIELDS.object(format, path)?;
    if FIELDS.required_str(obj, "type", path)? != "json_schema" {
        return Ok(None);
    }
    let schema = FIELDS.required(obj, "schema", path)?;
    if !schema.is_object() {
        return Err(invalid_at(&join_path(path, "schema"), "expected object"));
    }
    Ok(Some(OutputSchema {
        name: None,
        schema: schema.clone(),
    }))
}

pub(super) fn encode_request(req: &Request) -> Value {
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
pub(super) fn tool_input(arguments: &Value) -> Value {
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

#[cfg(test)]
mod tests;
