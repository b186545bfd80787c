//! A reply's usage read by scanning its top level (`Codec::response_usage`) equals the
//! usage a full decode reads, in every dialect, over the conformance replies and the
//! shapes a backend may send (nulls, nested details, duplicates, errors, odd spacing);
//! what the scan cannot place is refused, for the caller to decode instead.

use glider_dialects::codec;
use glider_dialects::scan::Unscannable;
use glider_ngl::{Dialect, Response, StreamEvent, Usage};
use glider_test_support::conformance::{rich_response, stop_reason_replies};
use serde_json::json;

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
    for dialect in Dialect::ALL {
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
        // Each shape decodes, so `scanned` does compare it with the full decode.
        codec(dialect)
            .decode_response(body.as_bytes())
            .expect("a backend's shape decodes");
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
    // A count given twice inside the usage (and an Ollama reply's, whose counts are
    // the reply's own members): the last one, as a full parse keeps it.
    let inner = br#"{"id":"c","object":"chat.completion","model":"m","choices":[],
        "usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens":9,"completion_tokens":2}}"#;
    let usage = scanned(Dialect::OpenAiChat, inner).expect("scans");
    assert_eq!((usage.input_tokens, usage.output_tokens), (9, 2));
    let ollama =
        br#"{"model":"q","done":true,"eval_count":3,"prompt_eval_count":4,"eval_count":8}"#;
    let usage = scanned(Dialect::Ollama, ollama).expect("scans");
    assert_eq!((usage.input_tokens, usage.output_tokens), (4, 8));
    // A null usage, or none at all: no usage, and nothing to decode for it.
    let null = br#"{"id":"c","object":"chat.completion","model":"m","usage":null,
        "choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;
    assert_eq!(scanned(Dialect::OpenAiChat, null), Ok(Usage::default()));
    let none = br#"{"id":"c","object":"chat.completion","model":"m","choices":[]}"#;
    assert_eq!(scanned(Dialect::OpenAiChat, none), Ok(Usage::default()));
}

#[test]
fn counts_that_are_not_plain_integers_read_as_the_decode_reads_them() {
    // Fractions, exponents, signs, strings, nulls, too large, a scalar or an array
    // where details belong: the scan reads each as the full decode does (0 or the
    // integer), reading the numbers' bytes itself.
    let odd = [
        "12.5",
        "1e3",
        "-4",
        "\"7\"",
        "null",
        "18446744073709551616",
        "0",
        "[1]",
        "{}",
    ];
    for count in odd {
        for (dialect, body) in [
            (
                Dialect::OpenAiChat,
                format!(
                    r#"{{"id":"c","object":"chat.completion","model":"m",
                    "choices":[{{"index":0,"message":{{"role":"assistant","content":"hi"}},"finish_reason":"stop"}}],
                    "usage":{{"prompt_tokens":{count},"completion_tokens":3,
                        "prompt_tokens_details":{count},"completion_tokens_details":{{"reasoning_tokens":{count}}}}}}}"#
                ),
            ),
            (
                Dialect::OpenAiResponses,
                format!(
                    r#"{{"id":"r","object":"response","status":"completed","model":"m","output":[],
                    "usage":{{"input_tokens":90,"output_tokens":{count},
                        "input_tokens_details":{{"cached_tokens":{count}}},"output_tokens_details":{count}}}}}"#
                ),
            ),
            (
                Dialect::Anthropic,
                format!(
                    r#"{{"id":"m","type":"message","role":"assistant","model":"c","content":[],
                    "stop_reason":"end_turn","usage":{{"input_tokens":{count},"output_tokens":2,
                        "cache_read_input_tokens":{count}}}}}"#
                ),
            ),
        ] {
            codec(dialect)
                .decode_response(body.as_bytes())
                .unwrap_or_else(|e| panic!("{dialect:?} {count}: {e:?}"));
            scanned(dialect, body.as_bytes()).expect("scans");
        }
    }
}

#[test]
fn what_the_scan_cannot_place_is_left_to_a_full_decode() {
    for dialect in Dialect::ALL {
        for body in [
            &b"not json"[..],
            b"[1, 2]",
            br#"{"usage": {"input_tokens": 1"#,
            br#"{"usage": {"input_tokens": 1}} trailing"#,
            br#"{"usag\u0065": {"input_tokens": 1}}"#,
            br#"{"usage": {"input_tokens": }, "prompt_eval_count": x}"#,
            // Counts a parse refuses (a bare word, a leading zero) in a body the scan
            // can walk: no reply decodes from them, so no usage is read from them.
            br#"{"usage": {"input_tokens": x, "output_tokens": x, "prompt_tokens": x,
                "completion_tokens": x}, "prompt_eval_count": x, "eval_count": x}"#,
            br#"{"usage": {"input_tokens": 007, "output_tokens": 007, "prompt_tokens": 007,
                "completion_tokens": 007}, "prompt_eval_count": 007, "eval_count": 007}"#,
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

/// What a forwarded stream's record reads of its events: the usage merged from `Start`
/// and `Finish`, the first error, whether it finished, and (as the budget kit's capture
/// keeps them) the tool calls, when `calls` is asked for.
#[derive(Debug, Default, PartialEq)]
struct StreamRecord {
    usage: Usage,
    error: Option<(glider_ngl::ErrorKind, String)>,
    finished: bool,
    calls: Vec<(usize, String, String, String)>,
}

fn record_of(
    mut decoder: Box<dyn glider_dialects::StreamDecoder>,
    wire: &[u8],
    split: usize,
    calls: bool,
) -> StreamRecord {
    use glider_ngl::stream::PartKind;
    let mut record = StreamRecord::default();
    let mut see = |events: Vec<StreamEvent>| {
        for event in events {
            match event {
                StreamEvent::Start { usage, .. } => record.usage.merge(&usage),
                StreamEvent::Finish { usage, .. } => {
                    record.usage.merge(&usage);
                    record.finished = true;
                }
                StreamEvent::Error { error } => {
                    record.error.get_or_insert((error.kind, error.message));
                }
                StreamEvent::PartStart {
                    index,
                    kind: PartKind::ToolCall { id, name },
                } if calls => record.calls.push((index, id, name, String::new())),
                StreamEvent::ToolArgsDelta { index, json } if calls => {
                    if let Some(call) = record.calls.iter_mut().rev().find(|c| c.0 == index) {
                        call.3.push_str(&json);
                    }
                }
                _ => {}
            }
        }
    };
    let split = split.min(wire.len());
    for piece in [&wire[..split], &wire[split..]] {
        if let Ok(events) = decoder.feed(piece) {
            see(events);
        }
    }
    see(decoder.finish());
    // Part indices differ once text parts are passed over; the calls' order does not.
    for call in &mut record.calls {
        call.0 = 0;
    }
    record
}

#[test]
fn a_usage_only_stream_decoder_records_what_the_full_decoder_records() {
    use glider_dialects::usage_stream_decoder;
    use glider_ngl::stream::events_of;
    let mut failing = events_of(&rich_response());
    failing.truncate(4);
    failing.push(StreamEvent::Error {
        error: glider_ngl::ApiError::new(glider_ngl::ErrorKind::Overloaded, "busy"),
    });
    let mut replies: Vec<Vec<StreamEvent>> = replies().iter().map(events_of).collect();
    replies.push(failing);
    for dialect in Dialect::ALL {
        for events in &replies {
            let mut encoder = codec(dialect).stream_encoder();
            let mut wire = Vec::new();
            for event in events {
                encoder.encode(event, &mut wire);
            }
            // Whole, split mid-event, and cut short at several points (a truncation).
            let cuts = [wire.len(), wire.len() * 2 / 3, wire.len() / 3, 10];
            for cut in cuts {
                let whole = cut == wire.len();
                let wire = &wire[..cut];
                for split in [wire.len() / 2, 7] {
                    for calls in [false, true] {
                        let full = record_of(codec(dialect).stream_decoder(), wire, split, calls);
                        let scanned =
                            record_of(usage_stream_decoder(dialect, calls), wire, split, calls);
                        assert_eq!(
                            scanned,
                            full,
                            "{dialect:?} cut {cut} calls {calls}: {}",
                            String::from_utf8_lossy(wire)
                        );
                        if whole && !matches!(events.last(), Some(StreamEvent::Error { .. })) {
                            assert!(
                                full.finished && full.error.is_none(),
                                "{dialect:?}: {full:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn anthropic_and_responses_content_events_are_passed_over() {
    use glider_ngl::stream::events_of;
    for dialect in [Dialect::Anthropic, Dialect::OpenAiResponses] {
        let mut encoder = codec(dialect).stream_encoder();
        let mut wire = Vec::new();
        for event in events_of(&rich_response()) {
            encoder.encode(&event, &mut wire);
        }
        let mut decoder = glider_dialects::usage_stream_decoder(dialect, false);
        let mut events = decoder.feed(&wire).expect("decodes");
        events.extend(decoder.finish());
        assert!(
            events
                .iter()
                .all(|e| matches!(e, StreamEvent::Start { .. } | StreamEvent::Finish { .. })),
            "{dialect:?}: {events:?}"
        );
        assert!(
            matches!(events.last(), Some(StreamEvent::Finish { usage, .. }) if usage.output_tokens == 25)
        );
    }
    // With tool calls: the Responses text and reasoning events are passed over (an
    // item's text still comes with its `output_item.done`), the calls kept.
    let mut encoder = codec(Dialect::OpenAiResponses).stream_encoder();
    let mut wire = Vec::new();
    for event in events_of(&rich_response()) {
        encoder.encode(&event, &mut wire);
    }
    let count = |mut decoder: Box<dyn glider_dialects::StreamDecoder>| {
        let events = decoder.feed(&wire).expect("decodes");
        events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    StreamEvent::PartStart {
                        kind: glider_ngl::stream::PartKind::ToolCall { .. },
                        ..
                    }
                )
            })
            .count()
    };
    let calls = count(codec(Dialect::OpenAiResponses).stream_decoder());
    let kept = count(glider_dialects::usage_stream_decoder(
        Dialect::OpenAiResponses,
        true,
    ));
    assert_eq!((calls, kept), (2, 2));
    // Anthropic with tool calls: the tool blocks' deltas decoded, the text's not.
    let mut encoder = codec(Dialect::Anthropic).stream_encoder();
    let mut wire = Vec::new();
    for event in events_of(&rich_response()) {
        encoder.encode(&event, &mut wire);
    }
    let mut decoder = glider_dialects::usage_stream_decoder(Dialect::Anthropic, true);
    let events = decoder.feed(&wire).expect("decodes");
    let text = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                StreamEvent::TextDelta { .. } | StreamEvent::ThinkingDelta { .. }
            )
        })
        .count();
    let arguments = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolArgsDelta { .. }))
        .count();
    assert_eq!(text, 0, "{events:?}");
    assert!(arguments >= 2, "{events:?}");
}

#[test]
fn a_reply_without_the_dialects_tool_call_marker_makes_no_tool_call() {
    use glider_dialects::reply_may_call_tools;
    use glider_ngl::Part;
    for dialect in Dialect::ALL {
        for reply in replies() {
            let body = codec(dialect).encode_response(&reply).to_string();
            let calls = reply
                .parts
                .iter()
                .any(|p| matches!(p, Part::ToolCall { .. }));
            let decoded = codec(dialect)
                .decode_response(body.as_bytes())
                .expect("decodes");
            assert_eq!(
                decoded
                    .parts
                    .iter()
                    .any(|p| matches!(p, Part::ToolCall { .. })),
                calls
            );
            if calls {
                assert!(
                    reply_may_call_tools(dialect, body.as_bytes()),
                    "{dialect:?}: {body}"
                );
            }
        }
        let plain = codec(dialect)
            .encode_response(&stop_reason_replies()[0])
            .to_string();
        assert!(
            !reply_may_call_tools(dialect, plain.as_bytes()),
            "{dialect:?}: {plain}"
        );
    }
}
