//! Fixtures the Ollama tests in several files share.

use glider_ngl::Part;
use serde_json::Value;

pub(super) fn call(id: &str, name: &str, arguments: Value) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
    }
}
