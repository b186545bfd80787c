//! Chat Completions non-streamed replies (`chat.completion`) both ways, with the usage and
//! finish-reason mappings streams share.

use std::time::{SystemTime, UNIX_EPOCH};

use glider_ngl::stream::{arguments_text, parse_arguments};
use glider_ngl::{ApiError, Part, Response, StopReason, Usage};
use serde_json::{Map, Value, json};

use super::error::error_fields;
use crate::json::bad_gateway;
use crate::scan::Counts;

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The reply's usage from its top-level `usage` member alone (see [`crate::scan`]).
pub(super) fn response_usage(body: &[u8]) -> Result<Usage, crate::scan::Unscannable> {
    crate::scan::usage_member(body, |counts| decode_usage(counts))
}

const PROMPT: &[&str] = &["prompt_tokens"];
const CACHED: &[&str] = &["prompt_tokens_details", "cached_tokens"];
const REASONING: &[&str] = &["completion_tokens_details", "reasoning_tokens"];
const COMPLETION: &[&str] = &["completion_tokens"];

/// The counts [`decode_usage`] reads, by their paths in the `usage` object.
pub(super) const USAGE_COUNTS: &[&[&str]] = &[PROMPT, CACHED, REASONING, COMPLETION];

/// ngl usage from an OpenAI `usage` object (`input_tokens` excludes cache reads).
pub(super) fn decode_usage(usage: &(impl Counts + ?Sized)) -> Usage {
    let prompt = usage.count(PROMPT);
    let cached = usage.count(CACHED);
    let reasoning = usage.count(REASONING);
    Usage {
        input_tokens: prompt.saturating_sub(cached),
        output_tokens: usage.count(COMPLETION),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: reasoning,
    }
}

pub(super) fn encode_usage(usage: &Usage) -> Value {
    let prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    })
}

pub(super) fn decode_finish(
    reason: Option<&str>,
    stop_sequence: bool,
    tool_calls: bool,
) -> StopReason {
    match reason {
        Some("length") => StopReason::MaxTokens,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("content_filter") => StopReason::ContentFilter,
        _ if tool_calls => StopReason::ToolUse,
        _ if stop_sequence => StopReason::StopSequence,
        _ => StopReason::EndTurn,
    }
}

pub(super) fn encode_finish(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence | StopReason::PauseTurn => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter | StopReason::Refusal => "content_filter",
    }
}

/// OpenAI ids start with `chatcmpl-`.
pub(super) fn completion_id(id: &str) -> String {
    if id.starts_with("chatcmpl-") {
        id.to_owned()
    } else if id.is_empty() {
        "chatcmpl-glider".to_owned()
    } else {
        format!("chatcmpl-{id}")
    }
}

/// A `chat.completion` reply: borrowed and typed when it is well formed, else through a
/// `Value` (same result, and its errors).
pub(super) fn decode_response(body: &[u8]) -> Result<Response, ApiError> {
    super::borrowed::decode(body).map_or_else(|| decode_value(body), Ok)
}

/// The reply through a `Value` tree: what the borrowing decode does not read, and every
/// error.
pub(super) fn decode_value(body: &[u8]) -> Result<Response, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| bad_gateway(format!("backend reply is not valid JSON: {e}")))?;
    if value.get("error").is_some_and(|e| !e.is_null()) {
        let (message, _) = error_fields(&value);
        return Err(bad_gateway(
            message.unwrap_or_else(|| "backend reply is an error".to_owned()),
        ));
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| bad_gateway("backend reply has no choices"))?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| bad_gateway("backend reply: choices.0.message missing"))?;
    let mut parts = Vec::new();
    let reasoning = message
        .get("reasoning_content")
        .and_then(Value::as_str)
        .or_else(|| message.get("reasoning").and_then(Value::as_str));
    if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
        parts.push(Part::Thinking {
            text: text.to_owned(),
            signature: None,
            redacted: None,
        });
    }
    match message.get("content") {
        Some(Value::String(text)) if !text.is_empty() => parts.push(Part::text(text.clone())),
        Some(Value::Array(items)) => {
            for item in items {
                if let Some(text) = item.get("text").and_then(Value::as_str) {
                    parts.push(Part::text(text));
                }
            }
        }
        _ => {}
    }
    if let Some(refusal) = message.get("refusal").and_then(Value::as_str) {
        parts.push(Part::text(refusal));
    }
    let mut has_calls = false;
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in calls.iter().enumerate() {
            let function = call.get("function").ok_or_else(|| {
                bad_gateway(format!("backend reply: tool_calls.{i}.function missing"))
            })?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad_gateway(format!("backend reply: tool_calls.{i} has no name")))?;
            let arguments = match function.get("arguments") {
                Some(Value::String(text)) => parse_arguments(text),
                Some(object @ Value::Object(_)) => object.clone(),
                _ => Value::Object(Map::new()),
            };
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .map_or_else(|| format!("call_{i}"), str::to_owned);
            parts.push(Part::ToolCall {
                id,
                name: name.to_owned(),
                arguments,
            });
            has_calls = true;
        }
    }
    // vLLM names the stop string that matched in `stop_reason` (a token id there is
    // an end-of-sequence token, not a client's stop sequence).
    let stop_sequence = choice.get("stop_reason").and_then(Value::as_str);
    let stop_reason = decode_finish(
        choice.get("finish_reason").and_then(Value::as_str),
        stop_sequence.is_some(),
        has_calls,
    );
    let stop_sequence = stop_sequence
        .filter(|_| stop_reason == StopReason::StopSequence)
        .map(str::to_owned);
    let str_of = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(Response {
        id: str_of("id"),
        model: str_of("model"),
        parts,
        stop_reason,
        stop_sequence,
        usage: value.get("usage").map(decode_usage).unwrap_or_default(),
    })
}

pub(super) fn encode_response(resp: &Response) -> Value {
    let mut text = String::new();
    let mut has_text = false;
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for part in &resp.parts {
        match part {
            Part::Text { text: t, .. } => {
                if has_text {
                    text.push('\n');
                }
                text.push_str(t);
                has_text = true;
            }
            Part::Thinking { text: t, .. } => reasoning.push_str(t),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => calls.push(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": arguments_text(arguments)},
            })),
            Part::Image { .. } | Part::ToolResult { .. } | Part::Native { .. } => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = if has_text || calls.is_empty() {
        Value::String(text)
    } else {
        Value::Null
    };
    message.insert("content".into(), content);
    message.insert("refusal".into(), Value::Null);
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), Value::String(reasoning));
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    json!({
        "id": completion_id(&resp.id),
        "object": "chat.completion",
        "created": now_unix(),
        "model": resp.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": encode_finish(resp.stop_reason),
        }],
        "usage": encode_usage(&resp.usage),
    })
}

#[cfg(test)]
mod tests {
    use glider_ngl::{ErrorKind, Part, Response, StopReason, Usage};
    use serde_json::{Value, json};

    use crate::Codec;
    use crate::openai_chat::OpenAiChat;
    use crate::openai_chat::fixtures::read_call;

    fn full_response() -> Value {
        json!({
            "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
            "object": "chat.completion",
            "created": 1741570283,
            "model": "deepseek-r1",
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me look.",
                    "reasoning_content": "User wants a file.",
                    "refusal": null,
                    "tool_calls": [
                        {"id": "call_xyz", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\"path\": \"src/main.rs\"}"}}
                    ],
                    "annotations": []
                },
                "logprobs": null,
                "finish_reason": "tool_calls"
            }],
            "usage": {
                "prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
                "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 12, "audio_tokens": 0}
            },
            "service_tier": "default",
            "system_fingerprint": "fp_fc9f1d7035"
        })
    }

    #[test]
    fn decodes_response() {
        let resp = OpenAiChat
            .decode_response(full_response().to_string().as_bytes())
            .expect("valid");
        assert_eq!(resp.id, "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG");
        assert_eq!(resp.model, "deepseek-r1");
        assert_eq!(
            resp.parts,
            vec![
                Part::Thinking {
                    text: "User wants a file.".into(),
                    signature: None,
                    redacted: None
                },
                Part::text("Let me look."),
                read_call("call_xyz", "src/main.rs"),
            ]
        );
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.usage,
            Usage {
                input_tokens: 93,
                output_tokens: 46,
                cache_read_tokens: 1024,
                cache_write_tokens: 0,
                reasoning_tokens: 12
            }
        );
    }

    #[test]
    fn decodes_finish_reasons() {
        let body = |finish: &str, extra: Value| {
            let mut choice = json!({"index": 0, "message": {"role": "assistant", "content": "x"},
                                    "finish_reason": finish});
            if let (Some(c), Value::Object(more)) = (choice.as_object_mut(), extra) {
                c.extend(more);
            }
            json!({"id": "1", "model": "m", "choices": [choice]}).to_string()
        };
        let reason = |finish: &str, extra: Value| {
            OpenAiChat
                .decode_response(body(finish, extra).as_bytes())
                .expect("valid")
                .stop_reason
        };
        assert_eq!(reason("stop", json!({})), StopReason::EndTurn);
        assert_eq!(
            reason("stop", json!({"stop_reason": "###"})),
            StopReason::StopSequence
        );
        assert_eq!(
            reason("stop", json!({"stop_reason": 128009})),
            StopReason::EndTurn
        );
        let named = OpenAiChat
            .decode_response(body("stop", json!({"stop_reason": "###"})).as_bytes())
            .expect("valid");
        assert_eq!(named.stop_sequence.as_deref(), Some("###"), "vLLM names it");
        assert_eq!(reason("length", json!({})), StopReason::MaxTokens);
        assert_eq!(reason("tool_calls", json!({})), StopReason::ToolUse);
        assert_eq!(
            reason("content_filter", json!({})),
            StopReason::ContentFilter
        );
        // vLLM with a named tool_choice answers "stop" with tool calls.
        let vllm = json!({"id": "1", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]});
        let resp = OpenAiChat
            .decode_response(vllm.to_string().as_bytes())
            .expect("valid");
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.parts,
            vec![Part::ToolCall {
                id: "c".into(),
                name: "f".into(),
                arguments: json!({})
            }]
        );
    }

    #[test]
    fn rejects_garbage_responses_as_bad_gateway() {
        for body in [
            &b"<html>502</html>"[..],
            b"{\"id\": \"x\"}",
            b"{\"choices\": []}",
            b"{\"choices\": [{\"message\": {\"tool_calls\": [{\"function\": {}}]}}]}",
        ] {
            let err = OpenAiChat.decode_response(body).expect_err("garbage");
            assert_eq!(err.kind, ErrorKind::BadGateway);
        }
        let err = OpenAiChat
            .decode_response(
                br#"{"error": {"message": "model overloaded", "type": "server_error"}}"#,
            )
            .expect_err("error body");
        assert_eq!(err.message, "model overloaded");
    }

    #[test]
    fn encodes_response_and_round_trips() {
        let resp = Response {
            id: "msg_01".into(),
            model: "claude-local".into(),
            parts: vec![
                Part::Thinking {
                    text: "plan".into(),
                    signature: Some("s".into()),
                    redacted: None,
                },
                read_call("toolu_9", "x.rs"),
            ],
            stop_reason: StopReason::ToolUse,
            stop_sequence: None,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 7,
                cache_read_tokens: 90,
                cache_write_tokens: 0,
                reasoning_tokens: 3,
            },
        };
        let body = OpenAiChat.encode_response(&resp);
        assert_eq!(body["id"], json!("chatcmpl-msg_01"));
        assert_eq!(body["object"], json!("chat.completion"));
        assert!(body["created"].as_u64().expect("created") > 1_700_000_000);
        assert_eq!(body["model"], json!("claude-local"));
        let choice = &body["choices"][0];
        assert_eq!(choice["index"], json!(0));
        assert_eq!(choice["finish_reason"], json!("tool_calls"));
        assert_eq!(
            choice["message"],
            json!({"role": "assistant", "content": null, "refusal": null,
                   "reasoning_content": "plan",
                   "tool_calls": [{"id": "toolu_9", "type": "function",
                                   "function": {"name": "read_file", "arguments": "{\"path\":\"x.rs\"}"}}]})
        );
        assert_eq!(
            body["usage"],
            json!({"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                   "prompt_tokens_details": {"cached_tokens": 90},
                   "completion_tokens_details": {"reasoning_tokens": 3}})
        );
        let back = OpenAiChat
            .decode_response(body.to_string().as_bytes())
            .expect("valid");
        let mut expected = resp.clone();
        expected.id = "chatcmpl-msg_01".into();
        expected.parts[0] = Part::Thinking {
            text: "plan".into(),
            signature: None,
            redacted: None,
        };
        assert_eq!(back, expected);

        for (reason, wire) in [
            (StopReason::EndTurn, "stop"),
            (StopReason::StopSequence, "stop"),
            (StopReason::PauseTurn, "stop"),
            (StopReason::MaxTokens, "length"),
            (StopReason::ContentFilter, "content_filter"),
            (StopReason::Refusal, "content_filter"),
        ] {
            let plain = Response {
                id: "chatcmpl-1".into(),
                model: "m".into(),
                parts: vec![Part::text("hi")],
                stop_reason: reason,
                stop_sequence: None,
                usage: Usage::default(),
            };
            let body = OpenAiChat.encode_response(&plain);
            assert_eq!(body["choices"][0]["finish_reason"], json!(wire));
            assert_eq!(body["choices"][0]["message"]["content"], json!("hi"));
            assert_eq!(body["id"], json!("chatcmpl-1"));
        }
    }
}
