//! The hub as a [`glider_tools::ToolProvider`] (named [`glider_tools::MCP_PROVIDER`]),
//! so the MCP servers' tools join Glider's tool set next to the internal ones: the
//! tool loop calls them through the hub, with its timeout, and reads a result the
//! server marked `isError`, or a call that never reached the tool, as a tool error.

use glider_tools::{MCP_PROVIDER, ToolFuture, ToolProvider};

use crate::{McpHub, ToolError, ToolOutput, ToolSpec};

impl ToolProvider for McpHub {
    fn name(&self) -> &str {
        MCP_PROVIDER
    }

    fn specs(&self) -> Vec<glider_tools::ToolSpec> {
        self.tools()
            .into_iter()
            .map(ToolSpec::into_tool_spec)
            .collect()
    }

    fn call<'a>(&'a self, name: &'a str, args: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move {
            match McpHub::call(self, name, args).await {
                Ok(output) if output.is_error() => {
                    Err(glider_tools::ToolError::Failed(output.model_text()))
                }
                Ok(output) => Ok(glider_tools::ToolOutput::Text(output.model_text())),
                Err(error) => Err(error.into_tool_error(name)),
            }
        })
    }
}

impl ToolSpec {
    fn into_tool_spec(self) -> glider_tools::ToolSpec {
        glider_tools::ToolSpec {
            name: self.name,
            description: self.description,
            input_schema: serde_json::Value::Object(self.input_schema),
        }
    }
}

impl ToolOutput {
    /// What a model reads: the text blocks, or the structured content when the tool
    /// sent no text.
    fn model_text(&self) -> String {
        let text = self.text();
        match &self.result.structured_content {
            Some(structured) if text.is_empty() => structured.to_string(),
            _ => text,
        }
    }
}

impl ToolError {
    fn into_tool_error(self, tool: &str) -> glider_tools::ToolError {
        let message = self.to_string();
        match self {
            ToolError::UnknownTool(name) => glider_tools::ToolError::UnknownTool(name),
            ToolError::NotOffered { .. } => glider_tools::ToolError::Refused(message),
            ToolError::Unavailable { .. } => glider_tools::ToolError::Unavailable(message),
            ToolError::BadArguments => glider_tools::ToolError::InvalidArguments {
                tool: tool.to_owned(),
                message,
            },
            ToolError::Failed { .. } | ToolError::TimedOut { .. } => {
                glider_tools::ToolError::Failed(message)
            }
        }
    }
}
