//! Ollama non-streamed replies both ways, with the RFC 3339 timestamps and reply ids
//! streams share.

use std::time::{SystemTime, UNIX_EPOCH};

use glider_ngl::stream::parse_arguments;
use glider_ngl::{ApiError, Part, Response, StopReason, Usage};
use serde_json::{Map, Value, json};

use super::request::{flatten, tool_call_value};
use crate::json::bad_gateway;
use crate::openai_chat::error_fields;
use crate::scan::Counts;

/// The current time as RFC 3339 UTC with microseconds, as Ollama writes `created_at`.
pub fn rfc3339_now() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs(), now.subsec_micros())
}

pub(super) fn rfc3339(secs: u64, micros: u32) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The digits of a `created_at` timestamp (a deterministic, usually unique stamp).
pub(super) fn stamp_of(created_at: &str) -> String {
    created_at.chars().filter(char::is_ascii_digit).collect()
}

/// A synthesized tool call id for the `n`th call of a reply stamped `stamp`.
fn reply_call_id(stamp: &str, n: usize) -> String {
    if stamp.is_empty() {
        format!("call_{n}")
    } else {
        format!("call_{stamp}_{n}")
    }
}

/// A response id: Ollama has none, so one is made from `created_at`.
pub(super) fn response_id(created_at: &str) -> String {
    let stamp = stamp_of(created_at);
    if stamp.is_empty() {
        "ollama".to_owned()
    } else {
        format!("ollama-{stamp}")
    }
}

/// The reply's counts from its top-level `prompt_eval_count` and `eval_count` alone
/// (see [`crate::scan`]), as [`decode_response`] reads them.
pub(super) fn response_usage(body: &[u8]) -> Result<Usage, crate::scan::Unscannable> {
    crate::scan::counts_of(body, |counts| decode_usage(counts))
}

/// ngl usage from a reply's or a final chunk's top-level counts.
pub(super) fn decode_usage(value: &(impl Counts + ?Sized)) -> Usage {
    Usage {
        input_tokens: value.count(&["prompt_eval_count"]),
        output_tokens: value.count(&["eval_count"]),
        ..Usage::default()
    }
}

pub(super) fn decode_stop(done_reason: Option<&str>, tool_calls: bool) -> StopReason {
    if tool_calls {
        StopReason::ToolUse
    } else if done_reason == Some("length") {
        StopReason::MaxTokens
    } else {
        StopReason::EndTurn
    }
}

fn encode_stop(reason: StopReason) -> &'static str {
    match reason {
        StopReason::MaxTokens => "length",
        _ => "stop",
    }
}

/// Tool calls of a reply message (`stamp` makes synthesized ids).
pub(super) fn decode_reply_calls(
    message: &Value,
    stamp: &str,
    first: usize,
) -> Result<Vec<Part>, ApiError> {
    let Some(calls) = message.get("tool_calls").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let function = call.get("function").ok_or_else(|| {
                bad_gateway(format!("backend reply: tool_calls.{i}.function missing"))
            })?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad_gateway(format!("backend reply: tool_calls.{i} has no name")))?;
            let arguments = match function.get("arguments") {
                Some(object @ Value::Object(_)) => object.clone(),
                Some(Value::String(text)) => parse_arguments(text),
                _ => Value::Object(Map::new()),
            };
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map_or_else(|| reply_call_id(stamp, first + i), str::to_owned);
            Ok(Part::ToolCall {
                id,
                name: name.to_owned(),
                arguments,
            })
        })
        .collect()
}

pub(super) fn decode_response(body: &[u8]) -> Result<Response, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| bad_gateway(format!("backend reply is not valid JSON: {e}")))?;
    if value.get("error").is_some_and(|e| !e.is_null()) {
        let (message, _) = error_fields(&value);
        return Err(bad_gateway(
            message.unwrap_or_else(|| "backend reply is an error".to_owned()),
        ));
    }
    let message = value
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| bad_gateway("backend reply has no message"))?;
    let created_at = value
        .get("created_at")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut parts = Vec::new();
    if let Some(text) = message
        .get("thinking")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        parts.push(Part::Thinking {
            text: text.to_owned(),
            signature: None,
            redacted: None,
        });
    }
    if let Some(text) = message
        .get("content")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        parts.push(Part::text(text));
    }
    let calls = decode_reply_calls(message, &stamp_of(created_at), 0)?;
    let stop_reason = decode_stop(
        value.get("done_reason").and_then(Value::as_str),
        !calls.is_empty(),
    );
    parts.extend(calls);
    Ok(Response {
        id: response_id(created_at),
        model: value
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        parts,
        stop_reason,
        stop_sequence: None,
        usage: decode_usage(&value),
    })
}

/// The closing fields of a reply: `done_reason`, `done`, durations and counts.
pub(super) fn final_fields(body: &mut Map<String, Value>, stop_reason: StopReason, usage: &Usage) {
    let prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
    body.insert("done_reason".into(), json!(encode_stop(stop_reason)));
    body.insert("done".into(), json!(true));
    body.insert("total_duration".into(), json!(0));
    body.insert("load_duration".into(), json!(0));
    body.insert("prompt_eval_count".into(), json!(prompt));
    body.insert("prompt_eval_duration".into(), json!(0));
    body.insert("eval_count".into(), json!(usage.output_tokens));
    body.insert("eval_duration".into(), json!(0));
}

pub(super) fn encode_response(resp: &Response) -> Value {
    let (text, _, thinking) = flatten(&resp.parts);
    let mut message = json!({"role": "assistant", "content": text});
    if !thinking.is_empty() {
        message["thinking"] = Value::String(thinking);
    }
    let calls: Vec<Value> = glider_ngl::tool_calls(&resp.parts)
        .enumerate()
        .map(|(n, (id, name, arguments))| tool_call_value(id, name, arguments, Some(n)))
        .collect();
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(resp.model));
    body.insert("created_at".into(), json!(rfc3339_now()));
    body.insert("message".into(), message);
    final_fields(&mut body, resp.stop_reason, &resp.usage);
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use glider_ngl::ErrorKind;
    use glider_ngl::{Part, Response, StopReason, Usage};
    use serde_json::{Value, json};

    use crate::Codec;
    use crate::ollama::Ollama;
    use crate::ollama::fixtures::call;

    fn tool_reply() -> Value {
        json!({
            "model": "qwen3:8b",
            "created_at": "2025-04-11T18:18:52.293545Z",
            "message": {
                "role": "assistant",
                "content": "",
                "thinking": "Need disk usage.",
                "tool_calls": [
                    {"function": {"name": "run_command", "arguments": {"command": "df -h"}}}
                ]
            },
            "done_reason": "stop",
            "done": true,
            "total_duration": 2347998750u64,
            "load_duration": 19605625,
            "prompt_eval_count": 155,
            "prompt_eval_duration": 321024542,
            "eval_count": 81,
            "eval_duration": 2005950875u64
        })
    }

    #[test]
    fn decodes_response() {
        let resp = Ollama
            .decode_response(tool_reply().to_string().as_bytes())
            .expect("valid");
        assert_eq!(resp.id, "ollama-20250411181852293545");
        assert_eq!(resp.model, "qwen3:8b");
        assert_eq!(
            resp.parts,
            vec![
                Part::Thinking {
                    text: "Need disk usage.".into(),
                    signature: None,
                    redacted: None
                },
                call(
                    "call_20250411181852293545_0",
                    "run_command",
                    json!({"command": "df -h"})
                ),
            ]
        );
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.usage,
            Usage {
                input_tokens: 155,
                output_tokens: 81,
                ..Usage::default()
            }
        );
        let length = json!({"model": "m", "created_at": "2025-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": "truncated"},
            "done": true, "done_reason": "length", "prompt_eval_count": 3, "eval_count": 10});
        let resp = Ollama
            .decode_response(length.to_string().as_bytes())
            .expect("valid");
        assert_eq!(resp.stop_reason, StopReason::MaxTokens);
        assert_eq!(resp.parts, vec![Part::text("truncated")]);
        for garbage in [&b"oops"[..], b"{\"done\": true}", b"[]"] {
            let err = Ollama.decode_response(garbage).expect_err("garbage");
            assert_eq!(err.kind, ErrorKind::BadGateway);
        }
        let err = Ollama
            .decode_response(br#"{"error": "model 'nope' not found"}"#)
            .expect_err("error");
        assert_eq!(err.message, "model 'nope' not found");
    }

    #[test]
    fn encodes_response_and_round_trips() {
        let resp = Response {
            id: "msg_1".into(),
            model: "qwen3:8b".into(),
            parts: vec![
                Part::Thinking {
                    text: "hmm".into(),
                    signature: None,
                    redacted: None,
                },
                Part::text("Running."),
                call("toolu_1", "bash", json!({"cmd": "ls"})),
                call("toolu_2", "bash", json!({"cmd": "pwd"})),
            ],
            stop_reason: StopReason::ToolUse,
            stop_sequence: None,
            usage: Usage {
                input_tokens: 12,
                output_tokens: 30,
                cache_read_tokens: 8,
                ..Usage::default()
            },
        };
        let body = Ollama.encode_response(&resp);
        let created_at = body["created_at"].as_str().expect("created_at").to_owned();
        assert_eq!(created_at.len(), "2025-04-11T18:18:52.293545Z".len());
        assert!(created_at.ends_with('Z') && created_at.as_bytes()[10] == b'T');
        assert_eq!(
            body,
            json!({
                "model": "qwen3:8b",
                "created_at": created_at,
                "message": {"role": "assistant", "content": "Running.", "thinking": "hmm",
                    "tool_calls": [
                        {"id": "toolu_1", "function": {"index": 0, "name": "bash", "arguments": {"cmd": "ls"}}},
                        {"id": "toolu_2", "function": {"index": 1, "name": "bash", "arguments": {"cmd": "pwd"}}}
                    ]},
                "done_reason": "stop",
                "done": true,
                "total_duration": 0,
                "load_duration": 0,
                "prompt_eval_count": 20,
                "prompt_eval_duration": 0,
                "eval_count": 30,
                "eval_duration": 0
            })
        );
        let back = Ollama
            .decode_response(body.to_string().as_bytes())
            .expect("valid");
        assert_eq!(back.parts, resp.parts);
        assert_eq!(back.model, resp.model);
        assert_eq!(back.stop_reason, StopReason::ToolUse);
        assert_eq!(back.usage.input_tokens, 20);
        assert_eq!(back.usage.output_tokens, 30);
        let long = Response {
            stop_reason: StopReason::MaxTokens,
            parts: vec![Part::text("x")],
            ..resp
        };
        assert_eq!(
            Ollama.encode_response(&long)["done_reason"],
            json!("length")
        );
    }
}
