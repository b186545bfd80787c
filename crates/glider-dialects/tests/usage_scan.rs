//! A reply's usage read by scanning its top level (`Codec::response_usage`) equals the
//! usage a full decode reads, in every dialect, over the conformance replies and the
//! shapes a backend may send (nulls, nested details, duplicates, errors, odd spacing);
//! what the scan cannot place is refused, for the caller to decode instead.

use glider_dialects::codec;
use glider_dialects::scan::Unscannable;
use glider_ngl::{Dialect, Response, Usage};
use glider_test_support::conformance::{rich_response, stop_reason_replies};
use serde_json::json;

const DIALECTS: [Dialect; 4] = [
    Dialect::Anthropic,
    Dialect::OpenAiChat,
    Dialect::OpenAiResponses,
    Dialect::Ollama,
];

fn replies() -> Vec<Response> {
    let mut replies = stop_reason_replies();
    replies.push(rich_response());
    let mut cached = rich_response();
    cached.usage = Usage {
        input_tokens: 100,
        output_tokens: 30,
        cache_read_tokens: 18_432,
        cache_write_tokens: 2_048,
        reasoning_tokens: 9,
    };
    replies.push(cached);
    replies
}

/// The scan's usage, checked against the full decode's.
fn scanned(dialect: Dialect, body: &[u8]) -> Result<Usage, Unscannable> {
    let codec = codec(dialect);
    let scanned = codec.response_usage(body);
    if let (Ok(usage), Ok(decoded)) = (&scanned, codec.decode_response(body)) {
        assert_eq!(
            *usage,
            decoded.usage,
            "{dialect:?}: {}",
            String::from_utf8_lossy(body)
        );
    }
    scanned
}

#[test]
fn the_scanned_usage_is_the_decoded_usage_of_every_encoded_reply() {
    for dialect in DIALECTS {
        for reply in replies() {
            let value = codec(dialect).encode_response(&reply);
            for body in [
                serde_json::to_vec(&value).expect("encodes"),
                serde_json::to_vec_pretty(&value).expect("encodes"),
            ] {
                let usage = scanned(dialect, &body).expect("a reply we encoded scans");
                assert!(usage.output_tokens > 0, "{dialect:?}: usage was read");
            }
        }
    }
}

#[test]
fn backend_shapes_scan_to_the_decoded_usage() {
    let bodies = [
        (
            Dialect::Anthropic,
            json!({"id": "m", "type": "message", "role": "assistant", "model": "c",
                "content": [{"type": "text", "text": "{\"usage\": 1}"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 100, "output_tokens": 20,
                    "cache_creation_input_tokens": null, "cache_read_input_tokens": null}}),
        ),
        (
            Dialect::OpenAiChat,
            json!({"id": "c", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55,
                    "prompt_tokens_details": {"cached_tokens": 20},
                    "completion_tokens_details": {"reasoning_tokens": 2}}}),
        ),
        (
            Dialect::OpenAiResponses,
            json!({"id": "r", "object": "response", "status": "completed", "model": "m",
                "output": [{"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "hi"}]}],
                "usage": {"input_tokens": 80, "output_tokens": 9,
                    "input_tokens_details": {"cached_tokens": 64},
                    "output_tokens_details": {"reasoning_tokens": 4}}}),
        ),
        (
            Dialect::Ollama,
            json!({"model": "q", "created_at": "2026-12-02T00:00:00Z",
                "message": {"role": "assistant", "content": "\"eval_count\": 99"},
                "done": true, "done_reason": "stop", "prompt_eval_count": 26, "eval_count": 7}),
        ),
    ];
    for (dialect, body) in bodies {
        let body = body.to_string();
        let usage = scanned(dialect, body.as_bytes()).expect("scans");
        assert_ne!(usage, Usage::default(), "{dialect:?}: {body}");
    }
    // Duplicate members: the last one counts, as in a full parse.
    let twice = br#"{"id":"m","type":"message","model":"c","content":[],"stop_reason":"end_turn",
        "usage":{"input_tokens":1,"output_tokens":1},"usage":{"input_tokens":3,"output_tokens":4}}"#;
    assert_eq!(
        scanned(Dialect::Anthropic, twice)
            .expect("scans")
            .input_tokens,
        3
    );
    // A null usage, or none at all: no usage, and nothing to decode for it.
    let null = br#"{"id":"c","object":"chat.completion","model":"m","usage":null,
        "choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;
    assert_eq!(scanned(Dialect::OpenAiChat, null), Ok(Usage::default()));
    let none = br#"{"id":"c","object":"chat.completion","model":"m","choices":[]}"#;
    assert_eq!(scanned(Dialect::OpenAiChat, none), Ok(Usage::default()));
}

#[test]
fn what_the_scan_cannot_place_is_left_to_a_full_decode() {
    for dialect in DIALECTS {
        for body in [
            &b"not json"[..],
            b"[1, 2]",
            br#"{"usage": {"input_tokens": 1"#,
            br#"{"usage": {"input_tokens": 1}} trailing"#,
            br#"{"usag\u0065": {"input_tokens": 1}}"#,
            br#"{"usage": {"input_tokens": }, "prompt_eval_count": x}"#,
        ] {
            assert_eq!(
                codec(dialect).response_usage(body),
                Err(Unscannable),
                "{dialect:?}: {}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
