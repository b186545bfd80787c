//! Responses API `Response` objects both ways, with the usage, status and shape helpers
//! streams share.

use glider_ngl::stream::{arguments_text, parse_arguments};
use glider_ngl::{ApiError, Part, Response, StopReason, Usage};
use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};
use serde_json::{Map, Value, json};

use super::error::error_from_value;
use super::items::{
    HOSTED_CALLS, REDACTED_PREFIX, call_item, item_id, item_prefix, message_item, qualified_name,
    reasoning_item, reply_call_kind, response_id,
};
use super::request::reasoning_part;
use crate::json::{bad_gateway, str_field};
use crate::openai_chat::now_unix;
use crate::scan::Counts;
use crate::typed::{EmptyObject, Typed};

fn encode_usage(u: &Usage) -> Value {
    let input = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens;
    json!({
        "input_tokens": input,
        "input_tokens_details": {
            "cached_tokens": u.cache_read_tokens,
            "cache_write_tokens": u.cache_write_tokens,
        },
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": input + u.output_tokens,
    })
}

/// The reply's usage from its top-level `usage` member alone (see [`crate::scan`]).
pub(super) fn response_usage(body: &[u8]) -> Result<Usage, crate::scan::Unscannable> {
    crate::scan::usage_member(body, |counts| decode_usage(counts))
}

pub(super) fn decode_usage(v: &(impl Counts + ?Sized)) -> Usage {
    let cached = v.count(&["input_tokens_details", "cached_tokens"]);
    let written = v.count(&["input_tokens_details", "cache_write_tokens"]);
    Usage {
        input_tokens: v.count(&["input_tokens"]).saturating_sub(cached + written),
        output_tokens: v.count(&["output_tokens"]),
        cache_read_tokens: cached,
        cache_write_tokens: written,
        reasoning_tokens: v.count(&["output_tokens_details", "reasoning_tokens"]),
    }
}

/// `(status, incomplete reason)` of a finished reply.
pub(super) fn status_of(stop: StopReason) -> (&'static str, Option<&'static str>) {
    match stop {
        StopReason::MaxTokens => ("incomplete", Some("max_output_tokens")),
        StopReason::ContentFilter => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

/// The Response object, with every field the SDK's `Response` model declares.
pub(super) struct ResponseShape<'a> {
    pub(super) id: &'a str,
    pub(super) model: &'a str,
    pub(super) created_at: u64,
    pub(super) status: &'a str,
    pub(super) incomplete: Option<&'a str>,
    pub(super) error: Option<&'a Value>,
    pub(super) output: &'a [Value],
    pub(super) usage: Option<&'a Usage>,
}

impl ResponseShape<'_> {
    pub(super) fn into_value(self) -> Value {
        serde_json::to_value(&self).expect("a response object serialises (string keys)")
    }
}

/// The `Response` object as the API writes it, members in its order: serialised
/// straight into a stream's events, or into a `Value` for a whole reply.
impl Serialize for ResponseShape<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Reason<'a> {
            reason: &'a str,
        }
        #[derive(Serialize)]
        struct ReasoningConfig {
            effort: Option<()>,
            summary: Option<()>,
        }
        #[derive(Serialize)]
        struct TextConfig {
            format: Typed,
        }
        let mut response = serializer.serialize_struct("Response", 24)?;
        response.serialize_field("id", self.id)?;
        response.serialize_field("object", "response")?;
        response.serialize_field("created_at", &self.created_at)?;
        response.serialize_field("status", self.status)?;
        response.serialize_field("background", &false)?;
        response.serialize_field("error", &self.error)?;
        let incomplete = self.incomplete.map(|reason| Reason { reason });
        response.serialize_field("incomplete_details", &incomplete)?;
        response.serialize_field("instructions", &None::<()>)?;
        response.serialize_field("max_output_tokens", &None::<()>)?;
        response.serialize_field("model", self.model)?;
        response.serialize_field("output", self.output)?;
        response.serialize_field("parallel_tool_calls", &true)?;
        response.serialize_field("previous_response_id", &None::<()>)?;
        let reasoning = ReasoningConfig {
            effort: None,
            summary: None,
        };
        response.serialize_field("reasoning", &reasoning)?;
        response.serialize_field("store", &false)?;
        response.serialize_field("temperature", &None::<()>)?;
        let text = TextConfig {
            format: Typed { kind: "text" },
        };
        response.serialize_field("text", &text)?;
        response.serialize_field("tool_choice", "auto")?;
        response.serialize_field("tools", &[(); 0])?;
        response.serialize_field("top_p", &None::<()>)?;
        response.serialize_field("truncation", "disabled")?;
        response.serialize_field("usage", &self.usage.map(encode_usage))?;
        response.serialize_field("user", &None::<()>)?;
        response.serialize_field("metadata", &EmptyObject {})?;
        response.end()
    }
}

fn required_reply_str<'a>(item: &'a Value, key: &str, what: &str) -> Result<&'a str, ApiError> {
    str_field(item, key).ok_or_else(|| bad_gateway(format!("backend {what} item has no `{key}`")))
}

/// One output item of a backend reply as ngl parts.
pub(super) fn output_item_parts(item: &Value) -> Result<Vec<Part>, ApiError> {
    let kind = str_field(item, "type").unwrap_or_default();
    Ok(match kind {
        "message" => item
            .get("content")
            .and_then(Value::as_array)
            .map(|content| {
                content
                    .iter()
                    .filter_map(|c| match str_field(c, "type") {
                        Some("output_text") => str_field(c, "text").map(Part::text),
                        Some("refusal") => str_field(c, "refusal").map(Part::text),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        "reasoning" => match reasoning_part("output", item).map_err(|e| bad_gateway(e.message))? {
            // Nothing to carry (a stored item without summary or encrypted content).
            Part::Thinking {
                text,
                signature: None,
                redacted: None,
            } if text.is_empty() => Vec::new(),
            part => vec![part],
        },
        "function_call" => {
            let name = required_reply_str(item, "name", kind)?;
            vec![Part::ToolCall {
                id: required_reply_str(item, "call_id", kind)?.to_owned(),
                name: qualified_name(item, name),
                arguments: parse_arguments(str_field(item, "arguments").unwrap_or_default()),
            }]
        }
        "custom_tool_call" => {
            let name = required_reply_str(item, "name", kind)?;
            vec![Part::ToolCall {
                id: required_reply_str(item, "call_id", kind)?.to_owned(),
                name: qualified_name(item, name),
                arguments: Value::String(str_field(item, "input").unwrap_or_default().to_owned()),
            }]
        }
        t if t.ends_with("_call") && !HOSTED_CALLS.contains(&t) => {
            match str_field(item, "call_id") {
                Some(call_id) => vec![Part::ToolCall {
                    id: call_id.to_owned(),
                    name: t.trim_end_matches("_call").to_owned(),
                    arguments: typed_arguments(item),
                }],
                None => Vec::new(),
            }
        }
        _ => Vec::new(),
    })
}

pub(super) fn typed_arguments(item: &Value) -> Value {
    let mut arguments = Map::new();
    if let Some(fields) = item.as_object() {
        for (k, v) in fields {
            if !matches!(k.as_str(), "type" | "id" | "call_id" | "status") {
                arguments.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(arguments)
}

pub(super) fn incomplete_stop(response: &Value) -> StopReason {
    match response
        .pointer("/incomplete_details/reason")
        .and_then(Value::as_str)
    {
        Some("content_filter") => StopReason::ContentFilter,
        _ => StopReason::MaxTokens,
    }
}

/// A backend's `Response` object as ngl (garbage is a `BadGateway`).
pub(super) fn decode_response(body: &[u8]) -> Result<Response, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| bad_gateway(format!("backend sent invalid JSON: {e}")))?;
    if !value.is_object() {
        return Err(bad_gateway("backend response is not a JSON object"));
    }
    let status = str_field(&value, "status");
    if status == Some("failed") {
        let error = value.get("error").cloned().unwrap_or(Value::Null);
        return Err(error_from_value(&error, "backend response failed"));
    }
    let Some(output) = value.get("output").and_then(Value::as_array) else {
        return Err(bad_gateway("backend response has no `output` array"));
    };
    let mut parts = Vec::new();
    for item in output {
        parts.extend(output_item_parts(item)?);
    }
    let stop_reason = if status == Some("incomplete") {
        incomplete_stop(&value)
    } else if parts.iter().any(|p| matches!(p, Part::ToolCall { .. })) {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    Ok(Response {
        id: str_field(&value, "id").unwrap_or_default().to_owned(),
        model: str_field(&value, "model").unwrap_or_default().to_owned(),
        parts,
        stop_reason,
        stop_sequence: None,
        usage: value.get("usage").map(decode_usage).unwrap_or_default(),
    })
}

/// The `Response` object a client of this dialect expects.
pub(super) fn encode_response(resp: &Response) -> Value {
    let id = response_id(&resp.id);
    let mut output = Vec::new();
    for part in &resp.parts {
        let index = output.len();
        let item = match part {
            Part::Text { text, .. } => message_item(&item_id(&id, "msg", index), text, "completed"),
            Part::Thinking {
                text,
                signature,
                redacted,
            } => {
                let encrypted = match (signature, redacted) {
                    (_, Some(data)) => Some(format!("{REDACTED_PREFIX}{data}")),
                    (Some(sig), None) => Some(sig.clone()),
                    (None, None) => None,
                };
                reasoning_item(&item_id(&id, "rs", index), text, encrypted)
            }
            Part::ToolCall {
                id: call_id,
                name,
                arguments,
            } => {
                let kind = reply_call_kind(name, arguments);
                call_item(
                    &item_id(&id, item_prefix(&kind), index),
                    call_id,
                    name,
                    &arguments_text(arguments),
                    &kind,
                    "completed",
                )
            }
            Part::Image { .. } | Part::ToolResult { .. } | Part::Native { .. } => continue,
        };
        output.push(item);
    }
    let (status, incomplete) = status_of(resp.stop_reason);
    ResponseShape {
        id: &id,
        model: &resp.model,
        created_at: now_unix(),
        status,
        incomplete,
        error: None,
        output: &output,
        usage: Some(&resp.usage),
    }
    .into_value()
}

#[cfg(test)]
mod tests {
    use glider_ngl::{ErrorKind, Part, Response, StopReason, Usage};
    use serde_json::{Value, json};

    use crate::openai_responses::fixtures::{codec, sample_response, text};

    #[test]
    fn response_encodes_like_the_api_and_round_trips() {
        let resp = sample_response();
        let body = codec().encode_response(&resp);
        for key in [
            "id",
            "object",
            "created_at",
            "status",
            "error",
            "incomplete_details",
            "instructions",
            "metadata",
            "model",
            "output",
            "parallel_tool_calls",
            "temperature",
            "tool_choice",
            "tools",
            "top_p",
            "usage",
        ] {
            assert!(body.get(key).is_some(), "missing {key}");
        }
        assert_eq!(body["id"], "resp_abc");
        assert_eq!(body["object"], "response");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["error"], Value::Null);
        assert_eq!(body["incomplete_details"], Value::Null);
        assert!(body["created_at"].as_u64().unwrap_or(0) > 1_700_000_000);
        assert_eq!(body["model"], "gpt-5-codex");
        assert_eq!(body["tools"], json!([]));
        assert_eq!(
            body["output"],
            json!([
                {"id": "rs_abc_0", "type": "reasoning",
                 "summary": [{"type": "summary_text", "text": "**Planning**"}],
                 "encrypted_content": "gAAAAB-sig"},
                {"id": "msg_abc_1", "type": "message", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Applying the fix.", "annotations": []}]},
                {"id": "fc_abc_2", "type": "function_call", "status": "completed",
                 "arguments": "{\"command\":[\"cargo\",\"test\"]}", "call_id": "call_1", "name": "shell"},
                {"id": "ctc_abc_3", "type": "custom_tool_call", "status": "completed", "call_id": "call_2",
                 "name": "apply_patch", "input": "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"}
            ])
        );
        assert_eq!(
            body["usage"],
            json!({"input_tokens": 120, "input_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 0},
                   "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 10},
                   "total_tokens": 170})
        );
        let back = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(back, resp);
    }

    #[test]
    fn truncated_and_filtered_replies_are_incomplete() {
        let mut resp = sample_response();
        resp.parts.truncate(2);
        resp.stop_reason = StopReason::MaxTokens;
        let body = codec().encode_response(&resp);
        assert_eq!(body["status"], "incomplete");
        assert_eq!(
            body["incomplete_details"],
            json!({"reason": "max_output_tokens"})
        );
        let back = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(back.stop_reason, StopReason::MaxTokens);

        resp.stop_reason = StopReason::ContentFilter;
        let body = codec().encode_response(&resp);
        assert_eq!(
            body["incomplete_details"],
            json!({"reason": "content_filter"})
        );
        let back = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(back.stop_reason, StopReason::ContentFilter);

        // Redacted thinking and a foreign id survive the trip.
        let resp = Response {
            id: "msg_01XYZ".into(),
            model: "claude".into(),
            parts: vec![
                Part::Thinking {
                    text: String::new(),
                    signature: None,
                    redacted: Some("EmwKAhgB".into()),
                },
                text("ok"),
            ],
            stop_reason: StopReason::EndTurn,
            stop_sequence: None,
            usage: Usage::default(),
        };
        let body = codec().encode_response(&resp);
        assert_eq!(body["id"], "resp_msg_01XYZ");
        assert_eq!(body["output"][0]["summary"], json!([]));
        assert_eq!(
            body["output"][0]["encrypted_content"],
            "glider.redacted_thinking:EmwKAhgB"
        );
        let back = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(back.parts, resp.parts);
    }

    #[test]
    fn decodes_an_openai_response() {
        let body = json!({
            "id": "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b",
            "object": "response",
            "created_at": 1756315696,
            "status": "completed",
            "background": false,
            "error": null,
            "incomplete_details": null,
            "instructions": null,
            "max_output_tokens": null,
            "model": "gpt-5-2025-08-07",
            "output": [
                {"id": "rs_68af4030baa48193b0b43b4c2a176a1a05438e46b5f69a3b", "type": "reasoning",
                 "summary": [{"type": "summary_text", "text": "**Considering the weather**"}],
                 "encrypted_content": "gAAAAABor0Aw"},
                {"id": "msg_68af40337e58819392e935fb404414d005438e46b5f69a3b", "type": "message",
                 "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Checking."}]},
                {"id": "fc_68af4033", "type": "function_call", "status": "completed",
                 "arguments": "{\"location\":\"Paris, France\"}", "call_id": "call_9n6RvXfU", "name": "get_weather"},
                {"id": "ws_1", "type": "web_search_call", "status": "completed",
                 "action": {"type": "search", "query": "paris weather"}}
            ],
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "reasoning": {"effort": "medium", "summary": "auto"},
            "store": true,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1024},
                      "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 256},
                      "total_tokens": 1500},
            "user": null,
            "metadata": {}
        });
        let resp = codec()
            .decode_response(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(
            resp.id,
            "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b"
        );
        assert_eq!(resp.model, "gpt-5-2025-08-07");
        assert_eq!(
            resp.parts,
            vec![
                Part::Thinking {
                    text: "**Considering the weather**".into(),
                    signature: Some("gAAAAABor0Aw".into()),
                    redacted: None
                },
                text("Checking."),
                Part::ToolCall {
                    id: "call_9n6RvXfU".into(),
                    name: "get_weather".into(),
                    arguments: json!({"location": "Paris, France"})
                },
            ]
        );
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.usage,
            Usage {
                input_tokens: 176,
                output_tokens: 300,
                cache_read_tokens: 1024,
                cache_write_tokens: 0,
                reasoning_tokens: 256
            }
        );
    }

    #[test]
    fn bad_backend_replies_are_bad_gateway() {
        for body in [&b"not json"[..], b"[]", b"{\"id\":\"resp_1\"}"] {
            let err = codec().decode_response(body).expect_err("garbage");
            assert_eq!(err.kind, ErrorKind::BadGateway);
        }
        let failed = json!({"id": "resp_1", "status": "failed", "output": [],
                            "error": {"code": "rate_limit_exceeded", "message": "Slow down"}});
        let err = codec()
            .decode_response(failed.to_string().as_bytes())
            .expect_err("failed");
        assert_eq!(err.kind, ErrorKind::RateLimit);
        assert_eq!(err.message, "Slow down");
        let missing_call_id =
            json!({"output": [{"type": "function_call", "name": "f", "arguments": "{}"}]});
        let err = codec()
            .decode_response(missing_call_id.to_string().as_bytes())
            .expect_err("no call id");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert!(err.message.contains("call_id"));
    }
}
