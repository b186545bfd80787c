//! Fixtures the Anthropic tests in several files share.

use glider_ngl::{Part, Response, StopReason, Usage};
use serde_json::json;

pub(super) fn expected_response() -> Response {
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
        stop_sequence: None,
        usage: Usage {
            input_tokens: 12,
            output_tokens: 89,
            cache_read_tokens: 18432,
            cache_write_tokens: 2048,
            reasoning_tokens: 0,
        },
    }
}
