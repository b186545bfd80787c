//! Responses API request bodies both ways: `instructions`, `input` items, tools,
//! `reasoning`, `text.format`.

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
mod tests {
    use glider_ngl::{
        Dialect, DialectExtra, ErrorKind, ImageSource, NativeTool, OutputSchema, Part, Request,
        Role, ThinkingConfig, ToolChoice, ToolDef, Turn,
    };
    use serde_json::{Value, json};

    use crate::openai_responses::fixtures::{codec, text};

    fn decode(body: &Value) -> Request {
        codec()
            .decode_request(body.to_string().as_bytes())
            .expect("valid request")
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
            ].into(),
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
            }]
            .into(),
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

    #[test]
    fn content_type_is_sse() {
        assert_eq!(codec().stream_content_type(), "text/event-stream");
        assert_eq!(codec().dialect(), Dialect::OpenAiResponses);
    }
}
