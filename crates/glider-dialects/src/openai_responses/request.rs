//! Responses API request bodies both ways: `instructions`, `input` items, tools,
//! `reasoning`, `text.format`.
//!
//! One file, past 600 lines, on purpose: each field's decoding and its encoding sit
//! side by side so a mapping is changed in both directions at once (the folder already
//! splits the dialect by concern: request, response, stream, error). Its tests are in
//! `request/tests.rs`.

use std::collections::HashMap;

use glider_ngl::stream::{arguments_text, parse_arguments};
use glider_ngl::{
    ApiError, Dialect, DialectExtra, ImageSource, NativeTool, OutputSchema, Part, Request, Role,
    ThinkingConfig, ToolChoice, ToolDef, Turn,
};
use serde_json::{Map, Value, json};

use super::items::{
    CallKind, HOSTED_CALLS, call_item, put_name, qualified_name, reasoning_item,
    thinking_from_encrypted,
};
use crate::json::{FieldReader, invalid_at, str_field};
use crate::openai_chat::image_url;
use crate::parse_json;

/// The Responses API words its 400s `expected string`, `expected integer`, `required`.
const FIELDS: &FieldReader = &FieldReader::RESPONSES;

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

/// Builds turns from `input` items.
#[derive(Default)]
pub(super) struct InputDecoder {
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
                let call_id = FIELDS.required_str(item, "call_id", &path)?;
                let name = FIELDS.required_str(item, "name", &path)?;
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
                let call_id = FIELDS.required_str(item, "call_id", &path)?;
                let name = FIELDS.required_str(item, "name", &path)?;
                let input = FIELDS.required_str(item, "input", &path)?;
                self.push_assistant(Part::ToolCall {
                    id: call_id.to_owned(),
                    name: qualified_name(item, name),
                    arguments: Value::String(input.to_owned()),
                });
                Ok(())
            }
            "function_call_output" | "custom_tool_call_output" => {
                let call_id = FIELDS.required_str(item, "call_id", &path)?;
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
        let role = match FIELDS.required_str(item, "role", path)? {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" | "developer" => Role::System,
            other => {
                return Err(invalid_at(
                    &format!("{path}.role"),
                    format!(
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
    match FIELDS.required_str(item, "type", path)? {
        "input_text" | "output_text" | "text" => {
            Ok(Some(Part::text(FIELDS.required_str(item, "text", path)?)))
        }
        "refusal" => Ok(Some(Part::text(
            FIELDS.required_str(item, "refusal", path)?,
        ))),
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
            format!("`{other}` content is not supported by this gateway"),
        )),
        other => Err(invalid_at(
            &format!("{path}.type"),
            format!("unsupported content type `{other}`"),
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

pub(super) fn reasoning_part(path: &str, item: &Value) -> Result<Part, ApiError> {
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

pub(super) fn decode_tool(index: usize, tool: &Value) -> Result<ToolDef, ApiError> {
    let path = format!("tools[{index}]");
    if !tool.is_object() {
        return Err(invalid_at(&path, "expected object"));
    }
    let kind = FIELDS.required_str(tool, "type", &path)?;
    let description = str_field(tool, "description").map(str::to_owned);
    if kind == "function" {
        let name = FIELDS.required_str(tool, "name", &path)?;
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
pub(super) fn decode_tool_choice(choice: &Value) -> Result<Option<ToolChoice>, ApiError> {
    match choice {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(Some(ToolChoice::Auto)),
            "none" => Ok(Some(ToolChoice::None)),
            "required" => Ok(Some(ToolChoice::Required)),
            other => Err(invalid_at(
                "tool_choice",
                format!("unsupported value `{other}` (expected auto, none or required)"),
            )),
        },
        Value::Object(_) => match FIELDS.required_str(choice, "type", "tool_choice")? {
            "function" | "custom" => {
                let name = FIELDS.required_str(choice, "name", "tool_choice")?;
                Ok(Some(ToolChoice::Tool {
                    name: qualified_name(choice, name),
                }))
            }
            _ => Ok(None),
        },
        _ => Err(invalid_at("tool_choice", "expected string or object")),
    }
}

pub(super) fn decode_text_format(
    text: &Map<String, Value>,
) -> Result<Option<OutputSchema>, ApiError> {
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

pub(super) fn effort_for_budget(budget: u32) -> &'static str {
    match budget {
        0..=4096 => "low",
        4097..=16384 => "medium",
        _ => "high",
    }
}

/// Is `name` a custom (free-text) tool in `tools`?
pub(super) fn is_custom_tool(tools: &[ToolDef], name: &str) -> bool {
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

pub(super) fn encode_tool(tool: &ToolDef) -> Option<Value> {
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
pub(super) struct InputEncoder<'a> {
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

/// A client's `/v1/responses` body as ngl (400s name the offending field).
pub(super) fn decode_request(body: &[u8]) -> Result<Request, ApiError> {
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
    let parallel_tool_calls = FIELDS.take_bool(&mut obj, "parallel_tool_calls", "")?;
    let max_tokens = FIELDS.take_u32(&mut obj, "max_output_tokens", "")?;
    let temperature = FIELDS.take_number(&mut obj, "temperature", "")?;
    let top_p = FIELDS.take_number(&mut obj, "top_p", "")?;
    let stream = FIELDS.take_bool(&mut obj, "stream", "")?.unwrap_or(false);
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
        tools: tools.into(),
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

/// The `/v1/responses` body for a backend of this dialect.
pub(super) fn encode_request(req: &Request) -> Value {
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
            if let Some(format) = previous.filter(|f| str_field(f, "type") != Some("json_schema")) {
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

#[cfg(test)]
mod tests;
