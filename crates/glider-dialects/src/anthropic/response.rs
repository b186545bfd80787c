//! Anthropic non-streamed replies (`type: message`) both ways, with the stop-reason and
//! usage mappings streams share.

use glider_ngl::{ApiError, Dialect, ErrorKind, Part, Response, StopReason, Usage};
use serde_json::{Value, json};

use super::error::error_from_json;
use super::request::{empty_object, tool_input};
use crate::json::{Fields, bad_gateway, str_field};
use crate::scan::Counts;

pub(super) fn decode_response(body: &[u8]) -> Result<Response, ApiError> {
    let value: &Value = &serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            ErrorKind::BadGateway,
            format!("anthropic response is not JSON: {e}"),
        )
    })?;
    let obj = value
        .as_object()
        .ok_or_else(|| bad_gateway("anthropic response: expected a JSON object"))?;
    if obj.get("type").and_then(Value::as_str) == Some("error") {
        return Err(error_from_json(value, 502)
            .unwrap_or_else(|| bad_gateway("anthropic response: error without a message")));
    }
    let content = obj
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| bad_gateway("anthropic response: missing `content` array"))?;
    let mut parts = Vec::new();
    for (i, block) in content.iter().enumerate() {
        if let Some(part) = decode_reply_block(block)
            .map_err(|e| bad_gateway(format!("anthropic response: content.{i}: {e}")))?
        {
            parts.push(part);
        }
    }
    let (stop_reason, stop_sequence) =
        decode_stop(obj.get("stop_reason"), obj.get("stop_sequence"));
    Ok(Response {
        id: str_field(obj, "id").unwrap_or_default().to_owned(),
        model: str_field(obj, "model").unwrap_or_default().to_owned(),
        parts,
        stop_reason,
        stop_sequence,
        usage: obj.get("usage").map(decode_usage).unwrap_or_default(),
    })
}

/// One content block of a reply; `None` for blocks ngl does not model.
fn decode_reply_block(block: &Value) -> Result<Option<Part>, String> {
    let obj = block.as_object().ok_or("expected object")?;
    let text_field = |key: &str| -> Result<String, String> {
        obj.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("missing string `{key}`"))
    };
    Ok(match obj.get("type").and_then(Value::as_str) {
        Some("text") => Some(Part::text(text_field("text")?)),
        Some("thinking") => Some(Part::Thinking {
            text: text_field("thinking")?,
            signature: obj
                .get("signature")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            redacted: None,
        }),
        Some("redacted_thinking") => Some(Part::Thinking {
            text: String::new(),
            signature: None,
            redacted: Some(text_field("data")?),
        }),
        Some("tool_use" | "server_tool_use") => Some(Part::ToolCall {
            id: text_field("id")?,
            name: text_field("name")?,
            arguments: obj.present("input").cloned().unwrap_or_else(empty_object),
        }),
        Some(_) => None,
        None => return Err("missing `type`".into()),
    })
}

/// `stop_reason` with the `stop_sequence` beside it. A named sequence wins over an
/// `end_turn`: llama-server's `/v1/messages` reports a stop sequence as
/// `"stop_reason": "end_turn", "stop_sequence": "<it>"`.
pub(super) fn decode_stop(
    reason: Option<&Value>,
    sequence: Option<&Value>,
) -> (StopReason, Option<String>) {
    let reason = reason
        .and_then(Value::as_str)
        .map_or(StopReason::EndTurn, decode_stop_reason);
    let sequence = sequence
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    match (reason, sequence) {
        (StopReason::EndTurn | StopReason::StopSequence, Some(sequence)) => {
            (StopReason::StopSequence, Some(sequence))
        }
        (reason, _) => (reason, None),
    }
}

/// The `stop_sequence` field of a reply: the sequence when it stopped on one.
/// The `stop_sequence` a reply names: only when it stopped at one.
pub(super) fn stop_sequence_of(reason: StopReason, sequence: Option<&str>) -> Option<&str> {
    sequence.filter(|_| reason == StopReason::StopSequence)
}

pub(super) fn decode_stop_reason(reason: &str) -> StopReason {
    match reason {
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "tool_use" => StopReason::ToolUse,
        "pause_turn" => StopReason::PauseTurn,
        "refusal" => StopReason::Refusal,
        _ => StopReason::EndTurn,
    }
}

/// Anthropic's `stop_reason`: ngl's names ([`StopReason::as_str`]) but for a turn
/// that calls tools (always `tool_use`) and a content filter (Anthropic says `refusal`).
pub(super) fn stop_reason_str(reason: StopReason, has_tool_calls: bool) -> &'static str {
    match reason {
        StopReason::EndTurn if has_tool_calls => StopReason::ToolUse.as_str(),
        StopReason::ContentFilter => StopReason::Refusal.as_str(),
        other => other.as_str(),
    }
}

/// The reply's usage from its top-level `usage` member alone (see [`crate::scan`]).
pub(super) fn response_usage(body: &[u8]) -> Result<Usage, crate::scan::Unscannable> {
    crate::scan::usage_member(body, |counts| decode_usage(counts))
}

pub(super) fn decode_usage(usage: &(impl Counts + ?Sized)) -> Usage {
    let n = |key: &str| usage.count(&[key]);
    Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read_tokens: n("cache_read_input_tokens"),
        cache_write_tokens: n("cache_creation_input_tokens"),
        reasoning_tokens: 0,
    }
}

/// An Anthropic `usage` object, members in the API's order.
#[derive(serde::Serialize)]
pub(super) struct WireUsage {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
}

impl WireUsage {
    pub(super) fn of(usage: &Usage) -> Self {
        WireUsage {
            input_tokens: usage.input_tokens,
            cache_creation_input_tokens: usage.cache_write_tokens,
            cache_read_input_tokens: usage.cache_read_tokens,
            output_tokens: usage.output_tokens,
        }
    }
}

/// Anthropic message ids start with `msg_`; SDKs and CLIs expect that.
pub(super) fn message_id(id: &str) -> String {
    if id.starts_with("msg_") {
        id.to_owned()
    } else if id.is_empty() {
        "msg_glider".to_owned()
    } else {
        format!("msg_{id}")
    }
}

pub(super) fn encode_response(resp: &Response) -> Value {
    let content: Vec<Value> = resp
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::Native {
                dialect: Dialect::Anthropic,
                raw,
            } => Some(raw.clone()),
            Part::Native { .. } => None,
            Part::Text { text, .. } => Some(json!({ "type": "text", "text": text })),
            Part::Thinking {
                redacted: Some(data),
                ..
            } => Some(json!({ "type": "redacted_thinking", "data": data })),
            Part::Thinking {
                text, signature, ..
            } => Some(json!({
                "type": "thinking",
                "thinking": text,
                "signature": signature.clone().unwrap_or_default(),
            })),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(json!({
                "type": "tool_use",
                "id": id,
                "name": name,
                "input": tool_input(arguments),
            })),
            Part::Image { .. } | Part::ToolResult { .. } => None,
        })
        .collect();
    let has_tool_calls = resp
        .parts
        .iter()
        .any(|p| matches!(p, Part::ToolCall { .. }));
    json!({
        "id": message_id(&resp.id),
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": content,
        "stop_reason": stop_reason_str(resp.stop_reason, has_tool_calls),
        "stop_sequence": stop_sequence_of(resp.stop_reason, resp.stop_sequence.as_deref()),
        "usage": WireUsage::of(&resp.usage),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use glider_ngl::{ApiError, ErrorKind, Part, Response, StopReason, Usage};
    use serde_json::{Value, json};

    use crate::Codec;
    use crate::anthropic::Anthropic;
    use crate::anthropic::fixtures::expected_response;

    fn response_fixture() -> Value {
        json!({
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [
                {"type": "thinking", "thinking": "The operator is wrong.", "signature": "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs"},
                {"type": "text", "text": "Fixing the operator.", "citations": null},
                {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "Edit", "input": {"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": null,
            "container": null,
            "usage": {
                "input_tokens": 12,
                "cache_creation_input_tokens": 2048,
                "cache_read_input_tokens": 18432,
                "cache_creation": {"ephemeral_5m_input_tokens": 2048, "ephemeral_1h_input_tokens": 0},
                "output_tokens": 89,
                "service_tier": "standard"
            }
        })
    }

    #[test]
    fn response_decodes_and_round_trips() {
        let resp = Anthropic
            .decode_response(response_fixture().to_string().as_bytes())
            .expect("decodes");
        assert_eq!(resp, expected_response());
        let encoded = Anthropic.encode_response(&resp);
        assert_eq!(
            encoded,
            json!({
                "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [
                    {"type": "thinking", "thinking": "The operator is wrong.", "signature": "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs"},
                    {"type": "text", "text": "Fixing the operator."},
                    {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "Edit", "input": {"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}}
                ],
                "stop_reason": "tool_use",
                "stop_sequence": null,
                "usage": {"input_tokens": 12, "cache_creation_input_tokens": 2048, "cache_read_input_tokens": 18432, "output_tokens": 89}
            })
        );
        let again = Anthropic
            .decode_response(encoded.to_string().as_bytes())
            .expect("decodes again");
        assert_eq!(again, resp);
    }

    #[test]
    fn response_encode_normalises_foreign_replies() {
        let resp = Response {
            id: "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG".into(),
            model: "gpt-5".into(),
            parts: vec![
                Part::Thinking {
                    text: "reasoning".into(),
                    signature: None,
                    redacted: None,
                },
                Part::Thinking {
                    text: String::new(),
                    signature: None,
                    redacted: Some("opaque".into()),
                },
                Part::ToolCall {
                    id: "call_abc".into(),
                    name: "Bash".into(),
                    arguments: json!("{\"command\":\"ls\"}"),
                },
            ],
            stop_reason: StopReason::EndTurn,
            stop_sequence: None,
            usage: Usage::default(),
        };
        let body = Anthropic.encode_response(&resp);
        assert_eq!(
            body["id"],
            json!("msg_chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG")
        );
        assert_eq!(body["stop_reason"], json!("tool_use"));
        assert_eq!(
            body["content"],
            json!([
                {"type": "thinking", "thinking": "reasoning", "signature": ""},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "call_abc", "name": "Bash", "input": {"command": "ls"}}
            ])
        );
        let filtered = Response {
            parts: vec![Part::text("I can't help with that.")],
            stop_reason: StopReason::ContentFilter,
            ..resp
        };
        assert_eq!(
            Anthropic.encode_response(&filtered)["stop_reason"],
            json!("refusal")
        );
    }

    #[test]
    fn a_stop_sequence_is_decoded_and_encoded_by_name() {
        let reply = |reason: &str| {
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "Writ"}],
                "stop_reason": reason, "stop_sequence": "e",
                "usage": {"input_tokens": 5, "output_tokens": 1}})
            .to_string()
        };
        // Anthropic's own shape, and llama-server's, which says end_turn beside the name.
        for reason in ["stop_sequence", "end_turn"] {
            let resp = Anthropic
                .decode_response(reply(reason).as_bytes())
                .expect("valid");
            assert_eq!(resp.stop_reason, StopReason::StopSequence, "{reason}");
            assert_eq!(resp.stop_sequence.as_deref(), Some("e"), "{reason}");
            let body = Anthropic.encode_response(&resp);
            assert_eq!(body["stop_reason"], "stop_sequence");
            assert_eq!(body["stop_sequence"], "e");
        }
        let capped = Anthropic
            .decode_response(reply("max_tokens").as_bytes())
            .expect("valid");
        assert_eq!(capped.stop_reason, StopReason::MaxTokens);
        assert_eq!(
            capped.stop_sequence, None,
            "a name only beside a stop on it"
        );
    }

    #[test]
    fn response_decode_handles_server_tools_stop_reasons_and_garbage() {
        let body = json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-opus-4-1",
            "content": [
                {"type": "server_tool_use", "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "name": "web_search", "input": {"query": "rust 1.90 release"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "content": [{"type": "web_search_result", "url": "https://blog.rust-lang.org", "title": "Rust"}]},
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "text", "text": "Rust 1.90 shipped."}
            ],
            "stop_reason": "pause_turn", "stop_sequence": null,
            "usage": {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": null, "cache_read_input_tokens": null}
        });
        let resp = Anthropic
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(resp.stop_reason, StopReason::PauseTurn);
        assert_eq!(
            resp.parts,
            vec![
                Part::ToolCall {
                    id: "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE".into(),
                    name: "web_search".into(),
                    arguments: json!({"query": "rust 1.90 release"}),
                },
                Part::Thinking {
                    text: String::new(),
                    signature: None,
                    redacted: Some("EmwKAhgB".into()),
                },
                Part::text("Rust 1.90 shipped."),
            ]
        );
        assert_eq!(resp.usage.input_tokens, 100);
        assert_eq!(resp.usage.cache_read_tokens, 0);

        for (wire, reason) in [
            ("end_turn", StopReason::EndTurn),
            ("max_tokens", StopReason::MaxTokens),
            ("stop_sequence", StopReason::StopSequence),
            ("tool_use", StopReason::ToolUse),
            ("pause_turn", StopReason::PauseTurn),
            ("refusal", StopReason::Refusal),
            ("model_context_window_exceeded", StopReason::MaxTokens),
        ] {
            assert_eq!(decode_stop_reason(wire), reason);
        }

        for garbage in [
            &b"<html>502 Bad Gateway</html>"[..],
            br#"{"id": "msg_1", "type": "message"}"#,
            br#"{"id": "msg_1", "content": [{"text": "no type"}]}"#,
            br#"{"id": "msg_1", "content": [{"type": "tool_use", "name": "x"}]}"#,
        ] {
            let err = Anthropic.decode_response(garbage).expect_err("garbage");
            assert_eq!(err.kind, ErrorKind::BadGateway, "{err}");
        }
        let err = Anthropic
            .decode_response(
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
            .expect_err("error body");
        assert_eq!(err, ApiError::new(ErrorKind::Overloaded, "Overloaded"));
    }
}
