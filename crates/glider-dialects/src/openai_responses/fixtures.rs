//! Fixtures the Responses API tests in several files share.

use super::*;

use glider_ngl::{Part, Response, StopReason, Usage};
use serde_json::json;

use crate::Codec;

pub(super) fn codec() -> &'static dyn Codec {
    &OpenAiResponses
}

pub(super) fn text(t: &str) -> Part {
    Part::text(t)
}

pub(super) fn sample_response() -> Response {
    Response {
        id: "resp_abc".into(),
        model: "gpt-5-codex".into(),
        parts: vec![
            Part::Thinking {
                text: "**Planning**".into(),
                signature: Some("gAAAAB-sig".into()),
                redacted: None,
            },
            text("Applying the fix."),
            Part::ToolCall {
                id: "call_1".into(),
                name: "shell".into(),
                arguments: json!({"command": ["cargo", "test"]}),
            },
            Part::ToolCall {
                id: "call_2".into(),
                name: "apply_patch".into(),
                arguments: json!("*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"),
            },
        ],
        stop_reason: StopReason::ToolUse,
        stop_sequence: None,
        usage: Usage {
            input_tokens: 100,
            output_tokens: 50,
            cache_read_tokens: 20,
            cache_write_tokens: 0,
            reasoning_tokens: 10,
        },
    }
}
