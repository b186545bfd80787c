//! Test helpers the Chat Completions tests (and other dialects' stream tests) share.

use glider_ngl::{Part, StreamEvent};
use serde_json::json;

use crate::Codec;

/// Check the ngl stream grammar: Start, sequential parts from 0, Finish or Error last.
pub(crate) fn assert_grammar(events: &[StreamEvent]) {
    let mut next = 0;
    let mut open: Option<usize> = None;
    let last = events.len().saturating_sub(1);
    for (i, event) in events.iter().enumerate() {
        match event {
            StreamEvent::Start { .. } => assert_eq!(i, 0, "Start must come first"),
            StreamEvent::PartStart { index, .. } => {
                assert!(i > 0, "PartStart before Start");
                assert_eq!(open, None, "part opened while another is open");
                assert_eq!(*index, next, "indices count up from 0");
                open = Some(*index);
                next += 1;
            }
            StreamEvent::TextDelta { index, .. }
            | StreamEvent::ThinkingDelta { index, .. }
            | StreamEvent::ThinkingSignature { index, .. }
            | StreamEvent::ToolArgsDelta { index, .. } => {
                assert_eq!(open, Some(*index), "delta outside its part");
            }
            StreamEvent::PartStop { index } => {
                assert_eq!(open, Some(*index), "stop of a part that is not open");
                open = None;
            }
            StreamEvent::Finish { .. } => {
                assert_eq!(open, None, "Finish with an open part");
                assert_eq!(i, last, "Finish must be last");
            }
            StreamEvent::Error { .. } => assert_eq!(i, last, "Error must be last"),
        }
    }
}

/// Decode `wire` fed in two pieces split at `split`, then finish.
pub(crate) fn decode_split(codec: &dyn Codec, wire: &[u8], split: usize) -> Vec<StreamEvent> {
    let mut decoder = codec.stream_decoder();
    let mut events = decoder.feed(&wire[..split]).expect("first half");
    events.extend(decoder.feed(&wire[split..]).expect("second half"));
    events.extend(decoder.finish());
    events
}

/// Decode at every split point; all must agree and obey the grammar.
pub(crate) fn decode_every_split(codec: &dyn Codec, wire: &[u8]) -> Vec<StreamEvent> {
    let whole = decode_split(codec, wire, wire.len());
    assert_grammar(&whole);
    for split in 0..wire.len() {
        assert_eq!(decode_split(codec, wire, split), whole, "split at {split}");
    }
    // Byte by byte too.
    let mut decoder = codec.stream_decoder();
    let mut events = Vec::new();
    for byte in wire {
        events.extend(decoder.feed(std::slice::from_ref(byte)).expect("byte"));
    }
    events.extend(decoder.finish());
    assert_eq!(events, whole, "byte by byte");
    whole
}

/// `text` with the number after each `"key":` written as `T`: a clock's value masked
/// out of a golden comparison.
pub(crate) fn mask_number(text: &str, key: &str) -> String {
    let member = format!("\"{key}\":");
    let mut masked = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(&member) {
        let (head, tail) = rest.split_at(at + member.len());
        masked.push_str(head);
        masked.push('T');
        rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    masked.push_str(rest);
    masked
}

pub(crate) fn encode_stream(codec: &dyn Codec, events: &[StreamEvent]) -> Vec<u8> {
    let mut encoder = codec.stream_encoder();
    let mut out = Vec::new();
    for event in events {
        encoder.encode(event, &mut out);
    }
    out
}

pub(super) fn read_call(id: &str, path: &str) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: "read_file".into(),
        arguments: json!({"path": path}),
    }
}
