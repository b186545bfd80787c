//! The stable-Rust twin of `fuzz/`: seeded mutations of real wire samples of every
//! dialect (requests, whole replies, streams, errors) through every decoder, in
//! `cargo test` and so in `scripts/test`. See `exercise/mod.rs` for what is checked.

mod exercise;

use exercise::{DIALECTS, Rng, exercise, fuzz_one};
use glider_dialects::codec;
use glider_ngl::stream::events_of;
use glider_ngl::{ApiError, ErrorKind, Part, Response, StopReason, Usage};
use serde_json::json;

/// A reply with every kind of part, in each dialect's whole and streamed form.
fn response() -> Response {
    Response {
        id: "msg_01".into(),
        model: "claude-sonnet-4-5".into(),
        parts: vec![
            Part::Thinking {
                text: "The operator is wrong.".into(),
                signature: Some("EqQBCkgIBxAB".into()),
                redacted: None,
            },
            Part::text("Fixing the operator: é ✓"),
            Part::ToolCall {
                id: "toolu_01".into(),
                name: "Edit".into(),
                arguments: json!({"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}),
            },
        ],
        stop_reason: StopReason::ToolUse,
        stop_sequence: None,
        usage: Usage {
            input_tokens: 12,
            output_tokens: 89,
            cache_read_tokens: 7,
            cache_write_tokens: 3,
            reasoning_tokens: 5,
        },
    }
}

/// A client request per dialect, written as its SDKs send it.
fn requests() -> Vec<serde_json::Value> {
    let tool = json!({"name": "Edit", "description": "edit a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}});
    vec![
        json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": true, "system": [{"type": "text", "text": "be brief"}],
               "tools": [tool], "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 2048},
               "messages": [{"role": "user", "content": [{"type": "text", "text": "fix it"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
                            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Edit", "input": {"path": "a.rs"}}]},
                            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": false}]}]}),
        json!({"model": "gpt-4.1", "stream": true, "stream_options": {"include_usage": true}, "temperature": 0.2, "stop": ["END"],
               "tools": [{"type": "function", "function": {"name": "Edit", "parameters": {"type": "object"}}}], "tool_choice": "auto",
               "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
                            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "Edit", "arguments": "{\"path\":\"a.rs\"}"}}]},
                            {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]}),
        json!({"model": "gpt-5", "stream": true, "instructions": "be brief", "reasoning": {"effort": "high"},
               "tools": [{"type": "function", "name": "Edit", "parameters": {"type": "object"}}],
               "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
                         {"type": "function_call", "call_id": "call_1", "name": "Edit", "arguments": "{\"path\":\"a.rs\"}"},
                         {"type": "function_call_output", "call_id": "call_1", "output": "ok"}]}),
        json!({"model": "qwen3:8b", "stream": true, "think": true, "options": {"num_ctx": 8192, "temperature": 0.1},
               "tools": [{"type": "function", "function": {"name": "Edit", "parameters": {"type": "object"}}}],
               "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "fix it", "images": ["iVBORw0KGgo="]},
                            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "Edit", "arguments": {"path": "a.rs"}}}]},
                            {"role": "tool", "content": "ok"}]}),
    ]
}

/// Every sample, tagged with the dialect it is written in.
fn seeds() -> Vec<(usize, Vec<u8>)> {
    let response = response();
    let error = ApiError::new(ErrorKind::Overloaded, "busy, try later");
    let mut seeds = Vec::new();
    for (d, request) in requests().into_iter().enumerate() {
        seeds.push((d, request.to_string().into_bytes()));
    }
    for (d, dialect) in DIALECTS.into_iter().enumerate() {
        let codec = codec(dialect);
        seeds.push((d, codec.encode_response(&response).to_string().into_bytes()));
        seeds.push((d, codec.encode_error(&error).to_string().into_bytes()));
        let mut wire = Vec::new();
        let mut encoder = codec.stream_encoder();
        for event in events_of(&response) {
            encoder.encode(&event, &mut wire);
        }
        seeds.push((d, wire));
    }
    seeds
}

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    const TOKENS: [&[u8]; 10] = [
        b"\n", b"\r\n", b"\n\n", b"data: ", b"[DONE]", b"null", b"{", b"}", b"\"", b"-1",
    ];
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(6) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = rng.next_u64() as u8;
            }
            2 => {
                let cut = rng.below(out.len() + 1);
                out.truncate(cut);
            }
            3 if !out.is_empty() => {
                // Drop a span: removes a field, a line end or half a token.
                let i = rng.below(out.len());
                let j = (i + 1 + rng.below(16)).min(out.len());
                out.drain(i..j);
            }
            4 => {
                let i = rng.below(out.len() + 1);
                let token = TOKENS[rng.below(TOKENS.len())];
                out.splice(i..i, token.iter().copied());
            }
            _ => {
                let i = rng.below(out.len() + 1);
                let extra: Vec<u8> = (0..rng.below(8)).map(|_| rng.next_u64() as u8).collect();
                out.splice(i..i, extra);
            }
        }
    }
    out
}

#[test]
fn the_seeds_themselves_decode_and_stream_cleanly() {
    // Mutations of a sample the decoder refuses outright would reach little code.
    for (d, request) in requests().iter().enumerate() {
        let decoded = codec(DIALECTS[d]).decode_request(request.to_string().as_bytes());
        assert!(decoded.is_ok(), "{:?}: {decoded:?}", DIALECTS[d]);
    }
    for dialect in DIALECTS {
        let codec = codec(dialect);
        let body = codec.encode_response(&response()).to_string();
        // What a dialect lacks (a signature, reasoning tokens) is lost; each part stays.
        let parts = codec
            .decode_response(body.as_bytes())
            .map(|r| r.parts.len());
        assert_eq!(parts.ok(), Some(response().parts.len()), "{dialect:?}");
    }
    let mut rng = Rng(1);
    for (d, seed) in seeds() {
        exercise(DIALECTS[d], &seed, &mut rng);
    }
}

#[test]
fn mutated_wire_samples_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let seeds = seeds();
    for round in 0..8_000 {
        let (d, base) = &seeds[rng.below(seeds.len())];
        let input = mutate(&mut rng, base);
        // Mostly the sample's own dialect; sometimes another's, as a misconfigured
        // backend would send.
        let dialect = if round % 5 == 0 {
            DIALECTS[rng.below(DIALECTS.len())]
        } else {
            DIALECTS[*d]
        };
        exercise(dialect, &input, &mut rng);
    }
}

/// Random bytes through the fuzz targets' own entry point (short inputs included, whose
/// split seed is incomplete).
#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for _ in 0..2_000 {
        let len = rng.below(96);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        fuzz_one(DIALECTS[rng.below(DIALECTS.len())], &bytes);
    }
}

#[test]
fn deep_nesting_is_refused_not_followed() {
    // serde_json stops at 128 levels; a decoder that walks values itself must too.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut rng = Rng(7);
    for dialect in DIALECTS {
        exercise(dialect, deep.as_bytes(), &mut rng);
        let stream = format!("data: {deep}\n\n{deep}\n");
        exercise(dialect, stream.as_bytes(), &mut rng);
    }
}
