//! The tools plugins declare (`capabilities.tools`), served to the tool loop: the
//! configured [`Plugins`] are a [`ToolProvider`]. A call goes as `tools/call` to the
//! plugin that declared the tool, within its `tool_deadline_ms`, through its breaker,
//! and its result is read in MCP's shape (`content` parts, `isError`,
//! `structuredContent`), so a plugin's tool answers as an MCP server's does.

use glider_tools::{ToolError, ToolFuture, ToolOutput, ToolProvider, ToolSpec};
use serde_json::{Value, json};

use crate::Plugins;
use crate::host::{Called, Hook, Host};

impl ToolProvider for Plugins {
    fn name(&self) -> &str {
        "plugins"
    }

    /// Every tool of every initialised plugin, in config order (a later plugin's tool
    /// of a name already offered is left out by the [`glider_tools::ToolSet`]).
    fn specs(&self) -> Vec<ToolSpec> {
        self.hosts()
            .iter()
            .filter_map(|host| host.manifest())
            .flat_map(|manifest| manifest.capabilities.tools)
            .map(|tool| ToolSpec {
                name: tool.name,
                description: tool.description,
                input_schema: match tool.input_schema {
                    Value::Null => json!({"type": "object"}),
                    schema => schema,
                },
            })
            .collect()
    }

    fn call<'a>(&'a self, name: &'a str, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let host = self
                .hosts()
                .iter()
                .find(|h| {
                    h.manifest()
                        .is_some_and(|m| m.capabilities.tools.iter().any(|t| t.name == name))
                })
                .ok_or_else(|| ToolError::UnknownTool(name.to_owned()))?;
            let params = json!({"name": name, "arguments": args});
            match host.call(Hook::Tool, params).await {
                Called::Result(result) => tool_result(host, &result),
                Called::Without(why) => Err(ToolError::Unavailable(why)),
            }
        })
    }
}

/// A `tools/call` result: `{"content": [{"type": "text", "text"}...], "isError"?,
/// "structuredContent"?}`. Anything else is refused (counted) and the model is told.
fn tool_result(host: &Host, result: &Value) -> Result<ToolOutput, ToolError> {
    let refused = |what: &str| ToolError::Failed(host.refuse(what));
    let Some(content) = result.get("content").and_then(Value::as_array) else {
        return Err(refused("a tool result without a content array"));
    };
    let mut texts = Vec::with_capacity(content.len());
    for part in content {
        match (
            part.get("type").and_then(Value::as_str),
            part.get("text").and_then(Value::as_str),
        ) {
            (Some("text"), Some(text)) => texts.push(text),
            _ => return Err(refused("a tool result part that is not {type: text, text}")),
        }
    }
    let text = texts.join("\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(ToolError::Failed(text));
    }
    match result.get("structuredContent") {
        Some(structured) if text.is_empty() && !structured.is_null() => {
            Ok(ToolOutput::Structured(structured.clone()))
        }
        _ => Ok(ToolOutput::Text(text)),
    }
}
