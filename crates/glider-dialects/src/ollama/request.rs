//! Ollama `/api/chat` request bodies both ways: string content, base64 `images`, object
//! tool arguments, `options`, `format`, `think`.

use glider_ngl::{
    ApiError, Dialect, DialectExtra, ImageSource, OutputSchema, Part, Request, Role,
    ThinkingConfig, ToolChoice, Turn,
};
use serde_json::{Map, Value, json};

use crate::json::{FieldReader, invalid_at, join_path, take};
use crate::openai_chat::{
    CallsOf, Message, decode_message_list, decode_tool_calls, decode_tools, encode_tools,
    image_source, model_and_messages, take_stop, take_top_k, unsupported_role,
};

/// Ollama reads its bodies with the Chat Completions wording it shares tool shapes with.
const FIELDS: &FieldReader = &FieldReader::CHAT;

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
pub(super) fn flatten(parts: &[Part]) -> (String, Vec<Value>, String) {
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

pub(super) fn decode_request(body: &[u8]) -> Result<Request, ApiError> {
    let (mut obj, model, messages) = model_and_messages(body)?;
    let mut req = Request {
        model,
        turns: decode_messages(messages)?,
        ..Request::default()
    };
    if let Some(tools) = take(&mut obj, "tools") {
        req.tools = decode_tools(tools, "tools", Dialect::Ollama)?.into();
    }
    req.stream = FIELDS.take_bool(&mut obj, "stream", "")?.unwrap_or(true);
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
        let mut options = FIELDS.owned_object(options, "options")?;
        req.max_tokens = FIELDS
            .take_i64(&mut options, "num_predict", "options")?
            .and_then(|n| u32::try_from(n).ok());
        req.temperature = FIELDS.take_number(&mut options, "temperature", "options")?;
        req.top_p = FIELDS.take_number(&mut options, "top_p", "options")?;
        req.top_k = take_top_k(&mut options, "top_k", "options")?;
        req.seed = FIELDS.take_i64(&mut options, "seed", "options")?;
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
    // Calls of the latest assistant message not yet answered: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    decode_message_list(messages, |turns, message| {
        let Message {
            index: i,
            path,
            role,
            fields: mut m,
        } = message;
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
                if let Some(text) = FIELDS
                    .take_string(&mut m, "thinking", &path)?
                    .filter(|t| !t.is_empty())
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
                let calls = decode_tool_calls(&mut m, &path, CallsOf::Ollama { message: i })?;
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
                let call_id = FIELDS.take_string(&mut m, "tool_call_id", &path)?;
                let tool_name = match FIELDS.take_string(&mut m, "tool_name", &path)? {
                    Some(name) => Some(name),
                    None => FIELDS.take_string(&mut m, "name", &path)?,
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
                glider_ngl::push_tool_result(turns, result);
            }
            other => return Err(unsupported_role(&path, other)),
        }
        Ok(())
    })
}

/// The name of the call `call_id` in `turns` (the latest match wins).
fn call_name(turns: &[Turn], call_id: &str) -> Option<String> {
    turns.iter().rev().find_map(|turn| {
        turn.parts.iter().find_map(|part| match part {
            Part::ToolCall { id, name, .. } if id == call_id => Some(name.clone()),
            _ => None,
        })
    })
}

pub(super) fn tool_call_value(
    id: &str,
    name: &str,
    arguments: &Value,
    index: Option<usize>,
) -> Value {
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
                let calls: Vec<Value> = glider_ngl::tool_calls(&turn.parts)
                    .map(|(id, name, arguments)| tool_call_value(id, name, arguments, None))
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

pub(super) fn encode_request(req: &Request) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;

    use glider_ngl::{
        ApiError, Dialect, DialectExtra, ImageSource, OutputSchema, Part, Request, Role,
        ThinkingConfig, ToolChoice, Turn,
    };
    use glider_ngl::{ErrorKind, NativeTool, ToolDef};
    use serde_json::{Map, Value, json};

    use crate::Codec;
    use crate::ollama::Ollama;
    use crate::ollama::fixtures::call;
    use crate::ollama::response::rfc3339;

    fn decode(body: Value) -> Result<Request, ApiError> {
        Ollama.decode_request(body.to_string().as_bytes())
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
            ].into(),
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
