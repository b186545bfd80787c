//! Output items (messages, reasoning, function and typed calls) and their ids, shared by
//! requests, replies and streams.

use glider_ngl::Part;
use glider_ngl::stream::parse_arguments;
use serde_json::{Map, Value, json};

use crate::json::str_field;

/// Prefix marking Anthropic redacted thinking carried in `encrypted_content`.
pub(super) const REDACTED_PREFIX: &str = "glider.redacted_thinking:";

/// Item types ending in `_call` that record a hosted (server-side) tool run: nothing a
/// client executes, so they are not tool calls in ngl.
pub(super) const HOSTED_CALLS: &[&str] = &[
    "web_search_call",
    "file_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "mcp_call",
    "tool_search_call",
];

/// Typed client-executed calls recognised in replies (name, the argument key that marks
/// them), so a reply can be re-encoded with its own item type.
pub(super) const TYPED_CALLS: &[(&str, &str)] = &[
    ("local_shell", "action"),
    ("shell", "action"),
    ("apply_patch", "operation"),
    ("computer", "action"),
];

/// `name`, or `namespace.name` when the item carries a namespace.
pub(super) fn qualified_name(item: &Value, name: &str) -> String {
    match str_field(item, "namespace").filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{ns}.{name}"),
        None => name.to_owned(),
    }
}

/// Insert `name` (and `namespace`, when the ngl name is `namespace.name`) into `item`.
pub(super) fn put_name(item: &mut Map<String, Value>, name: &str) {
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
pub(super) fn thinking_from_encrypted(text: String, encrypted: Option<&str>) -> Part {
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
pub(super) enum CallKind {
    Function,
    /// `custom_tool_call` with a free-text `input`.
    Custom,
    /// `<name>_call` with the arguments' fields spread into the item.
    Typed,
}

/// The kind of a call in a reply, where no tool list is at hand: typed names with their
/// marker argument, raw non-object text → custom, everything else → function.
pub(super) fn reply_call_kind(name: &str, arguments: &Value) -> CallKind {
    if is_typed_call(name, arguments) {
        return CallKind::Typed;
    }
    match arguments {
        Value::String(text) if !starts_like_object(text) => CallKind::Custom,
        _ => CallKind::Function,
    }
}

pub(super) fn is_typed_call(name: &str, arguments: &Value) -> bool {
    TYPED_CALLS
        .iter()
        .any(|(typed, key)| *typed == name && arguments.get(*key).is_some_and(Value::is_object))
}

pub(super) fn starts_like_object(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// One output item for a tool call.
pub(super) fn call_item(
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

pub(super) fn item_prefix(kind: &CallKind) -> &'static str {
    match kind {
        CallKind::Function => "fc",
        CallKind::Custom => "ctc",
        CallKind::Typed => "tc",
    }
}

pub(super) fn message_item(item_id: &str, text: &str, status: &str) -> Value {
    json!({
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

pub(super) fn reasoning_item(item_id: &str, text: &str, encrypted: Option<String>) -> Value {
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
pub(super) fn response_id(id: &str) -> String {
    if id.starts_with("resp_") {
        id.to_owned()
    } else if id.is_empty() {
        "resp_glider".to_owned()
    } else {
        format!("resp_{id}")
    }
}

pub(super) fn item_id(response_id: &str, prefix: &str, index: usize) -> String {
    let suffix = response_id.strip_prefix("resp_").unwrap_or(response_id);
    format!("{prefix}_{suffix}_{index}")
}
