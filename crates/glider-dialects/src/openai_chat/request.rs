//! Chat Completions request bodies both ways; the message walk, the tool-call reader and
//! the tool-definition helpers are shared with the Ollama codec.
//!
//! One file, past 600 lines, on purpose: each field's decoding and its encoding sit
//! side by side so a mapping is changed in both directions at once (the folder already
//! splits the dialect by concern: request, response, stream, error).

use glider_ngl::stream::{arguments_text, parse_arguments};
use glider_ngl::{
    ApiError, Dialect, DialectExtra, ImageSource, NativeTool, OutputSchema, Part, Request, Role,
    ThinkingConfig, ToolChoice, ToolDef, Turn,
};
use serde_json::{Map, Value, json};

use crate::json::{FieldReader, Object, invalid_at, join_path, take};
use crate::parse_json;

/// Chat Completions words its 400s `expected a string`, `expected an integer`, ...
pub(super) const FIELDS: &FieldReader = &FieldReader::CHAT;

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
        let mut tool = FIELDS.owned_object(item, &here)?;
        let kind = FIELDS.take_string(&mut tool, "type", &here)?;
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
            Some(f) => FIELDS.owned_object(f, &fpath)?,
            None => return Err(invalid_at(&fpath, "required")),
        };
        let mut function = function;
        let name = FIELDS
            .take_string(&mut function, "name", &fpath)?
            .ok_or_else(|| invalid_at(&join_path(&fpath, "name"), "required"))?;
        let description = FIELDS.take_string(&mut function, "description", &fpath)?;
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

/// A request body with its `model` and `messages` taken out, and the rest.
pub(crate) type ChatBody = (Map<String, Value>, String, Vec<Value>);

/// The body as an object with its required `model` and `messages` taken out (the
/// shared start of the Chat Completions and Ollama request decoders).
pub(crate) fn model_and_messages(body: &[u8]) -> Result<ChatBody, ApiError> {
    let Value::Object(mut obj) = parse_json(body)? else {
        return Err(ApiError::invalid("request body: expected a JSON object"));
    };
    let model = FIELDS
        .take_string(&mut obj, "model", "")?
        .ok_or_else(|| invalid_at("model", "required"))?;
    let messages = match take(&mut obj, "messages") {
        Some(Value::Array(messages)) => messages,
        Some(_) => return Err(invalid_at("messages", "expected an array")),
        None => return Err(invalid_at("messages", "required")),
    };
    Ok((obj, model, messages))
}

pub(super) fn decode_request(body: &[u8]) -> Result<Request, ApiError> {
    let (mut obj, model, messages) = model_and_messages(body)?;
    let mut req = Request {
        model,
        turns: decode_messages(messages)?,
        ..Request::default()
    };
    if let Some(tools) = take(&mut obj, "tools") {
        req.tools = decode_tools(tools, "tools", Dialect::OpenAiChat)?.into();
    }
    if let Some(choice) = take(&mut obj, "tool_choice") {
        req.tool_choice = Some(decode_tool_choice(choice)?);
    }
    req.parallel_tool_calls = FIELDS.take_bool(&mut obj, "parallel_tool_calls", "")?;
    let max_completion_tokens = FIELDS.take_u32(&mut obj, "max_completion_tokens", "")?;
    let max_tokens = FIELDS.take_u32(&mut obj, "max_tokens", "")?;
    req.max_tokens = max_completion_tokens.or(max_tokens);
    req.temperature = FIELDS.take_number(&mut obj, "temperature", "")?;
    req.top_p = FIELDS.take_number(&mut obj, "top_p", "")?;
    req.top_k = take_top_k(&mut obj, "top_k", "")?;
    req.seed = FIELDS.take_i64(&mut obj, "seed", "")?;
    req.stop = take_stop(&mut obj, "stop", "")?;
    req.stream = FIELDS.take_bool(&mut obj, "stream", "")?.unwrap_or(false);
    if let Some(effort) = FIELDS.take_string(&mut obj, "reasoning_effort", "")? {
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
    decode_message_list(messages, |turns, message| {
        let Message {
            path,
            role,
            fields: mut m,
            ..
        } = message;
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
                let call_id = FIELDS
                    .take_string(&mut m, "tool_call_id", &path)?
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
                glider_ngl::push_tool_result(turns, result);
            }
            other => return Err(unsupported_role(&path, other)),
        }
        Ok(())
    })
}

/// One entry of a `messages` array: where it is, its `role`, and its other fields.
pub(crate) struct Message {
    pub index: usize,
    /// `messages.<index>`, for error paths.
    pub path: String,
    pub role: String,
    pub fields: Map<String, Value>,
}

/// The `messages` walk Chat Completions and Ollama share: each message an object with a
/// required `role`, handed to `decode` with the turns so far (a tool result joins the
/// turn before it, so `decode` sees them all).
pub(crate) fn decode_message_list(
    messages: Vec<Value>,
    mut decode: impl FnMut(&mut Vec<Turn>, Message) -> Result<(), ApiError>,
) -> Result<Vec<Turn>, ApiError> {
    let mut turns: Vec<Turn> = Vec::with_capacity(messages.len());
    for (index, message) in messages.into_iter().enumerate() {
        let path = format!("messages.{index}");
        let mut fields = FIELDS.owned_object(message, &path)?;
        let role = FIELDS
            .take_string(&mut fields, "role", &path)?
            .ok_or_else(|| invalid_at(&join_path(&path, "role"), "required"))?;
        decode(
            &mut turns,
            Message {
                index,
                path,
                role,
                fields,
            },
        )?;
    }
    Ok(turns)
}

/// The 400 for a message whose `role` the dialect does not have.
pub(crate) fn unsupported_role(path: &str, role: &str) -> ApiError {
    invalid_at(
        &join_path(path, "role"),
        format!("unsupported role '{role}'"),
    )
}

/// Whose `tool_calls` are read: the two dialects write the same shape and differ in
/// what they require.
#[derive(Clone, Copy)]
pub(crate) enum CallsOf {
    /// Chat Completions: every call has an `id`, its `type` is `function`, and
    /// `arguments` is a JSON string (an object is accepted too).
    Chat,
    /// Ollama: `arguments` is an object (a JSON string is accepted too), `type` is not
    /// read, and a call without an `id` is named `call_<message>_<n>`.
    Ollama { message: usize },
}

/// An assistant message's `tool_calls` (taken out of `m`), as tool-call parts.
pub(crate) fn decode_tool_calls(
    m: &mut Map<String, Value>,
    path: &str,
    of: CallsOf,
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
        let mut call = FIELDS.owned_object(call, &here)?;
        let id = FIELDS.take_string(&mut call, "id", &here)?;
        let id = match (id, of) {
            (Some(id), _) => id,
            (None, CallsOf::Ollama { message }) => format!("call_{message}_{n}"),
            (None, CallsOf::Chat) => return Err(invalid_at(&join_path(&here, "id"), "required")),
        };
        if let CallsOf::Chat = of {
            match FIELDS.take_string(&mut call, "type", &here)?.as_deref() {
                None | Some("function") => {}
                Some(other) => {
                    return Err(invalid_at(
                        &join_path(&here, "type"),
                        format!("unsupported tool call type '{other}'"),
                    ));
                }
            }
        }
        let fpath = join_path(&here, "function");
        let mut function = match take(&mut call, "function") {
            Some(f) => FIELDS.owned_object(f, &fpath)?,
            None => return Err(invalid_at(&fpath, "required")),
        };
        let name = FIELDS
            .take_string(&mut function, "name", &fpath)?
            .ok_or_else(|| invalid_at(&join_path(&fpath, "name"), "required"))?;
        let arguments = match take(&mut function, "arguments") {
            None => Value::Object(Map::new()),
            Some(Value::String(text)) => parse_arguments(&text),
            Some(object @ Value::Object(_)) => object,
            Some(_) => {
                let expected = match of {
                    CallsOf::Chat => "expected a JSON string",
                    CallsOf::Ollama { .. } => "expected an object",
                };
                return Err(invalid_at(&join_path(&fpath, "arguments"), expected));
            }
        };
        parts.push(Part::ToolCall {
            id,
            name,
            arguments,
        });
    }
    Ok(parts)
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
        let mut item = FIELDS.owned_object(item, &here)?;
        let kind = FIELDS
            .take_string(&mut item, "type", &here)?
            .ok_or_else(|| invalid_at(&join_path(&here, "type"), "required"))?;
        match kind.as_str() {
            "text" => {
                let text = FIELDS
                    .take_string(&mut item, "text", &here)?
                    .ok_or_else(|| invalid_at(&join_path(&here, "text"), "required"))?;
                parts.push(Part::Text {
                    text,
                    cache_control: take(&mut item, "cache_control"),
                });
            }
            "refusal" => {
                let text = FIELDS
                    .take_string(&mut item, "refusal", &here)?
                    .ok_or_else(|| invalid_at(&join_path(&here, "refusal"), "required"))?;
                parts.push(Part::text(text));
            }
            "image_url" if images => {
                let ipath = join_path(&here, "image_url");
                let url = match take(&mut item, "image_url") {
                    Some(Value::String(url)) => url,
                    Some(Value::Object(mut image)) => FIELDS
                        .take_string(&mut image, "url", &ipath)?
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
                    format!("unsupported content part type '{other}'"),
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
    let reasoning = match FIELDS.take_string(&mut m, "reasoning_content", path)? {
        Some(text) => Some(text),
        None => FIELDS.take_string(&mut m, "reasoning", path)?,
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
    parts.extend(decode_tool_calls(&mut m, path, CallsOf::Chat)?);
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
                format!("unsupported value '{other}' (expected auto, none or required)"),
            )),
        },
        Value::Object(mut choice) => {
            match FIELDS
                .take_string(&mut choice, "type", "tool_choice")?
                .as_deref()
            {
                Some("function") => {}
                _ => {
                    return Err(invalid_at(
                        "tool_choice.type",
                        "expected \"function\" for an object tool_choice",
                    ));
                }
            }
            let mut function = match take(&mut choice, "function") {
                Some(f) => FIELDS.owned_object(f, "tool_choice.function")?,
                None => return Err(invalid_at("tool_choice.function", "required")),
            };
            let name = FIELDS
                .take_string(&mut function, "name", "tool_choice.function")?
                .ok_or_else(|| invalid_at("tool_choice.function.name", "required"))?;
            Ok(ToolChoice::Tool { name })
        }
        _ => Err(invalid_at("tool_choice", "expected a string or an object")),
    }
}

fn decode_response_format(format: Value) -> Result<Option<OutputSchema>, ApiError> {
    let mut format = FIELDS.owned_object(format, "response_format")?;
    let kind = FIELDS
        .take_string(&mut format, "type", "response_format")?
        .ok_or_else(|| invalid_at("response_format.type", "required"))?;
    match kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(OutputSchema {
            name: None,
            schema: json!({"type": "object"}),
        })),
        "json_schema" => {
            let mut spec = match take(&mut format, "json_schema") {
                Some(spec) => FIELDS.owned_object(spec, "response_format.json_schema")?,
                None => return Err(invalid_at("response_format.json_schema", "required")),
            };
            let name = FIELDS.take_string(&mut spec, "name", "response_format.json_schema")?;
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
            format!("unsupported value '{other}'"),
        )),
    }
}

pub(super) fn encode_request(req: &Request) -> Value {
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
    if let Some(thinking) = &req.thinking {
        body.insert(
            "reasoning_effort".into(),
            Value::String(effort_of(thinking)),
        );
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

fn effort_of(thinking: &ThinkingConfig) -> String {
    if let Some(effort) = &thinking.effort {
        return effort.clone();
    }
    // A switch with neither effort nor budget (Ollama's `think: true`) asks for
    // thinking all the same: the middle effort, as Anthropic's codec sends `adaptive`.
    let effort = match thinking.budget_tokens {
        None => "medium",
        Some(0..=4096) => "low",
        Some(4097..=16384) => "medium",
        Some(_) => "high",
    };
    effort.to_owned()
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

/// Stop sequences: a string or an array of strings.
pub(crate) fn take_stop(map: &mut Object, key: &str, path: &str) -> Result<Vec<String>, ApiError> {
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
pub(crate) fn take_top_k(map: &mut Object, key: &str, path: &str) -> Result<Option<u32>, ApiError> {
    match FIELDS.take_i64(map, key, path)? {
        Some(k) if k > 0 => Ok(Some(u32::try_from(k).unwrap_or(u32::MAX))),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use glider_ngl::{
        ApiError, Dialect, DialectExtra, ErrorKind, ImageSource, NativeTool, OutputSchema, Part,
        Request, Role, ThinkingConfig, ToolChoice, ToolDef, Turn,
    };
    use serde_json::{Map, Value, json};

    use crate::Codec;
    use crate::openai_chat::OpenAiChat;
    use crate::openai_chat::fixtures::read_call;

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
            ].into(),
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
