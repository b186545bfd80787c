//! The stored JSON of the two events every request writes — its `request` and its
//! `reply` — written by hand: byte for byte what `serde_json` writes for them (the tests
//! compare the two), at a fraction of the instructions. `serde_json` escapes a string a
//! byte at a time (about 14 instructions a byte here); [`write_str`] looks at eight bytes
//! at once and copies the runs that need no escape, and the members are written without
//! the serializer's per-member calls. At saturation the writer serialises every request's
//! events on the same core as the requests, so this is throughput. Every other event is
//! rare and goes through `serde_json`. Each writer names every member of its event's
//! struct (a destructuring without `..`), so a member added to the struct and not here
//! does not compile.

use serde::Serialize;

use crate::event::{EventBody, ReplyEvent, RequestEvent, ToolCall, ToolResult};
use glider_dialects::reader::string_byte_flags;

/// A member's name with its punctuation, `,"<name>":`, written in one piece. Each name
/// here is a literal that needs no escape.
macro_rules! name {
    ($name:literal) => {
        concat!(",\"", $name, "\":")
    };
}

/// A row of several events: `[{"at_ms":…,"family":…,"body":{…}},…]`, as `serde_json`
/// writes the store's `RowEvent`s (a `None` family left out).
pub(crate) fn write_row<'e>(
    out: &mut Vec<u8>,
    events: impl IntoIterator<Item = (u64, Option<&'e str>, &'e EventBody)>,
) -> serde_json::Result<()> {
    write_array(out, events, |out, (at_ms, family, body)| {
        let mut object = Object::open(out);
        object.int(name!("at_ms"), at_ms);
        if let Some(family) = family {
            object.str(name!("family"), family);
        }
        object.with(name!("body"), |out| write_body(out, body))?;
        object.close();
        Ok(())
    })
}

/// `[…]` of `items`, each written by `write`.
fn write_array<T>(
    out: &mut Vec<u8>,
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut Vec<u8>, T) -> serde_json::Result<()>,
) -> serde_json::Result<()> {
    out.push(b'[');
    for (at, item) in items.into_iter().enumerate() {
        if at > 0 {
            out.push(b',');
        }
        write(out, item)?;
    }
    out.push(b']');
    Ok(())
}

/// `body` as `serde_json::to_writer` writes it, appended to `out`.
pub(crate) fn write_body(out: &mut Vec<u8>, body: &EventBody) -> serde_json::Result<()> {
    match body {
        EventBody::Request(request) => write_request(out, request),
        EventBody::Reply(reply) => write_reply(out, reply),
        other => other.serialize(&mut serde_json::Serializer::new(out)),
    }
}

/// An object being written: its members after the first are preceded by a comma.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Object<'a> {
    /// `{"kind":"<kind>"` — the tag `#[serde(tag = "kind")]` writes first.
    fn tagged(out: &'a mut Vec<u8>, kind: &str) -> Self {
        let mut object = Object::open(out);
        object.str(name!("kind"), kind);
        object
    }

    fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Object { out, empty: true }
    }

    /// A member's name, `,"<name>":` as [`name!`] writes it (without its comma when it
    /// is the first).
    fn key(&mut self, name: &str) -> &mut Vec<u8> {
        debug_assert!(name.starts_with(",\"") && name.ends_with("\":"));
        let name = if self.empty { &name[1..] } else { name };
        self.empty = false;
        self.out.extend_from_slice(name.as_bytes());
        self.out
    }

    fn str(&mut self, name: &str, value: &str) {
        write_str(self.key(name), value);
    }

    fn opt_str(&mut self, name: &str, value: Option<&str>) {
        match value {
            Some(value) => self.str(name, value),
            None => self.key(name).extend_from_slice(b"null"),
        }
    }

    fn int(&mut self, name: &str, value: impl itoa::Integer) {
        let mut digits = itoa::Buffer::new();
        self.key(name)
            .extend_from_slice(digits.format(value).as_bytes());
    }

    fn opt_int(&mut self, name: &str, value: Option<impl itoa::Integer>) {
        match value {
            Some(value) => self.int(name, value),
            None => self.key(name).extend_from_slice(b"null"),
        }
    }

    fn bool(&mut self, name: &str, value: bool) {
        let text: &[u8] = if value { b"true" } else { b"false" };
        self.key(name).extend_from_slice(text);
    }

    fn opt_bool(&mut self, name: &str, value: Option<bool>) {
        match value {
            Some(value) => self.bool(name, value),
            None => self.key(name).extend_from_slice(b"null"),
        }
    }

    /// A member whose value `write` writes.
    fn with<T>(
        &mut self,
        name: &str,
        write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<T>,
    ) -> serde_json::Result<T> {
        write(self.key(name))
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

fn write_request(out: &mut Vec<u8>, request: &RequestEvent) -> serde_json::Result<()> {
    let RequestEvent {
        request,
        door,
        front,
        model_requested,
        model,
        rule,
        reason,
        backend,
        local,
        estimated_tokens,
        root,
        user_text,
        tool_calls,
        tool_results,
        compaction,
    } = request;
    let mut object = Object::tagged(out, "request");
    object.str(name!("request"), request);
    object.str(name!("door"), door);
    object.str(name!("front"), front);
    object.str(name!("model_requested"), model_requested);
    object.str(name!("model"), model);
    object.str(name!("rule"), rule);
    object.str(name!("reason"), reason);
    object.opt_str(name!("backend"), backend.as_deref());
    object.opt_bool(name!("local"), *local);
    object.int(name!("estimated_tokens"), *estimated_tokens);
    object.bool(name!("root"), *root);
    if let Some(text) = user_text {
        object.str(name!("user_text"), text);
    }
    if !tool_calls.is_empty() {
        object.with(name!("tool_calls"), |out| write_calls(out, tool_calls))?;
    }
    if !tool_results.is_empty() {
        object.with(name!("tool_results"), |out| {
            write_results(out, tool_results)
        })?;
    }
    if *compaction {
        object.bool(name!("compaction"), true);
    }
    object.close();
    Ok(())
}

fn write_reply(out: &mut Vec<u8>, reply: &ReplyEvent) -> serde_json::Result<()> {
    let ReplyEvent {
        request,
        backend,
        model,
        local,
        status,
        error,
        input_tokens,
        output_tokens,
        stop_reason,
        tool_calls,
        ttft_ms,
        total_ms,
        text,
    } = reply;
    let mut object = Object::tagged(out, "reply");
    object.str(name!("request"), request);
    object.opt_str(name!("backend"), backend.as_deref());
    object.opt_str(name!("model"), model.as_deref());
    object.opt_bool(name!("local"), *local);
    object.opt_int(name!("status"), *status);
    if let Some(error) = error {
        object.str(name!("error"), error);
    }
    object.int(name!("input_tokens"), *input_tokens);
    object.int(name!("output_tokens"), *output_tokens);
    object.opt_str(name!("stop_reason"), stop_reason.as_deref());
    if !tool_calls.is_empty() {
        object.with(name!("tool_calls"), |out| write_calls(out, tool_calls))?;
    }
    object.opt_int(name!("ttft_ms"), *ttft_ms);
    object.opt_int(name!("total_ms"), *total_ms);
    if let Some(text) = text {
        object.str(name!("text"), text);
    }
    object.close();
    Ok(())
}

fn write_calls(out: &mut Vec<u8>, calls: &[ToolCall]) -> serde_json::Result<()> {
    write_array(out, calls, |out, call| {
        let ToolCall {
            id,
            name,
            arguments,
        } = call;
        let mut object = Object::open(out);
        object.str(name!("id"), id);
        object.str(name!("name"), name);
        object.with(name!("arguments"), |out| {
            serde_json::to_writer(out, arguments)
        })?;
        object.close();
        Ok(())
    })
}

fn write_results(out: &mut Vec<u8>, results: &[ToolResult]) -> serde_json::Result<()> {
    write_array(out, results, |out, result| {
        let ToolResult {
            call_id,
            name,
            is_error,
            text,
            chars,
        } = result;
        let mut object = Object::open(out);
        object.str(name!("call_id"), call_id);
        object.opt_str(name!("name"), name.as_deref());
        object.bool(name!("is_error"), *is_error);
        object.str(name!("text"), text);
        object.int(name!("chars"), *chars);
        object.close();
        Ok(())
    })
}

/// `text` as a JSON string, escaped as `serde_json` escapes it: `"` and `\` with a
/// backslash, the control characters below U+0020 by their short escape (`\b \t \n \f
/// \r`) or `\u00xx` (lowercase hex); everything else, U+007F and non-ASCII included, as
/// it is.
pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let Some(mut at) = first_word_to_escape(bytes) else {
        // Most strings (names, models, ids, most prose): copied whole.
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    };
    let mut run_start = 0;
    while at < bytes.len() {
        // Eight bytes at a time while none of them needs an escape, then on to the
        // first that may.
        if let Some(word) = bytes.get(at..at + 8) {
            let flagged =
                string_byte_flags(u64::from_le_bytes(word.try_into().expect("eight bytes")));
            if flagged == 0 {
                at += 8;
                continue;
            }
            at += (flagged.trailing_zeros() / 8) as usize;
        }
        let byte = bytes[at];
        if let Some(escape) = escape_of(byte) {
            out.extend_from_slice(&bytes[run_start..at]);
            match escape {
                Escape::Short(letter) => out.extend_from_slice(&[b'\\', letter]),
                Escape::Unicode => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.extend_from_slice(b"\\u00");
                    out.extend_from_slice(&[
                        HEX[usize::from(byte >> 4)],
                        HEX[usize::from(byte & 0xF)],
                    ]);
                }
            }
            run_start = at + 1;
        }
        at += 1;
    }
    out.extend_from_slice(&bytes[run_start..]);
    out.push(b'"');
}

/// Where the first eight-byte word of `bytes` that may hold a byte to escape begins,
/// looked at a word at a time (the last short one padded with a byte that needs none);
/// `None` when no byte needs one. Every byte before it needs none.
fn first_word_to_escape(bytes: &[u8]) -> Option<usize> {
    let flagged = |word: [u8; 8]| string_byte_flags(u64::from_le_bytes(word)) != 0;
    let mut words = bytes.chunks_exact(8);
    if let Some(at) = words
        .by_ref()
        .position(|word| flagged(word.try_into().expect("eight bytes")))
    {
        return Some(8 * at);
    }
    let rest = words.remainder();
    let mut last = [b' '; 8];
    last[..rest.len()].copy_from_slice(rest);
    flagged(last).then(|| bytes.len() - rest.len())
}

enum Escape {
    /// A backslash and this letter.
    Short(u8),
    /// `\u00` and two hex digits.
    Unicode,
}

fn escape_of(byte: u8) -> Option<Escape> {
    Some(match byte {
        b'"' => Escape::Short(b'"'),
        b'\\' => Escape::Short(b'\\'),
        0x08 => Escape::Short(b'b'),
        0x0C => Escape::Short(b'f'),
        b'\n' => Escape::Short(b'n'),
        b'\r' => Escape::Short(b'r'),
        b'\t' => Escape::Short(b't'),
        0..0x20 => Escape::Unicode,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use serde_json::json;

    use super::*;

    fn by_hand(body: &EventBody) -> String {
        let mut out = Vec::new();
        write_body(&mut out, body).expect("writes");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let every_low_byte: String = (0u8..0x80).map(char::from).collect();
        let texts = [
            String::new(),
            "plain ascii, longer than one word of eight".into(),
            every_low_byte.clone(),
            every_low_byte.repeat(3),
            "é\"ü\\ \u{7f} 日本語 \u{1F600}\n\t".into(),
            "\"\"\"\"\"\"\"\"\\\\\\\\\\\\\\\\".into(),
            "1234567\"".into(),
            "12345678\u{1f}".into(),
        ];
        for text in &texts {
            // Every offset, so the escape falls at each place of a word.
            for start in 0..text.len().min(9) {
                let Some(text) = text.get(start..) else {
                    continue;
                };
                let mut out = Vec::new();
                write_str(&mut out, text);
                assert_eq!(
                    String::from_utf8(out).expect("UTF-8"),
                    serde_json::to_string(text).expect("serializes"),
                    "{text:?}"
                );
            }
        }
    }

    /// A byte to escape is found wherever it lies: in a whole word or in the short
    /// last one, of a string of any length.
    #[test]
    fn an_escape_is_found_in_any_place_of_any_length() {
        for length in 1..=24 {
            for at in 0..length {
                for byte in [b'"', b'\\', 0x01, b'\n', 0x1f] {
                    let mut text = vec![b'a'; length];
                    text[at] = byte;
                    let text = String::from_utf8(text).expect("ASCII");
                    let mut out = Vec::new();
                    write_str(&mut out, &text);
                    assert_eq!(
                        String::from_utf8(out).expect("UTF-8"),
                        serde_json::to_string(&text).expect("serializes"),
                        "{text:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn requests_and_replies_are_written_as_serde_json_writes_them() {
        let call = ToolCall::new(
            "call_1".into(),
            "Edit".into(),
            json!({"file_path": "src/a \"b\".rs", "n": 1.5, "big": 12345678901234567890u64, "list": [true, null]}),
        );
        let result = ToolResult::new(
            "call_1".into(),
            Some("Edit".into()),
            true,
            "error:\n\tboom\u{1}",
        );
        let full_request = RequestEvent {
            request: "1796-7".into(),
            door: "gateway".into(),
            front: Cow::Owned("openai_chat".into()),
            model_requested: "m\"1".into(),
            model: "m".into(),
            rule: "model".into(),
            reason: "served by \\ vllm".into(),
            backend: Some("vllm".into()),
            local: Some(true),
            estimated_tokens: 213,
            root: true,
            user_text: Some("fix the \"tests\"\n".into()),
            tool_calls: vec![call.clone(), call.clone()],
            tool_results: vec![
                result.clone(),
                ToolResult::new("c2".into(), None, false, "ok"),
            ],
            compaction: true,
        };
        let full_reply = ReplyEvent {
            request: "1796-7".into(),
            backend: Some("vllm".into()),
            model: Some("m".into()),
            local: Some(false),
            status: Some(200),
            error: Some("upstream said \"no\"".into()),
            input_tokens: 239,
            output_tokens: u64::MAX,
            stop_reason: Some("end_turn".into()),
            tool_calls: vec![call],
            ttft_ms: Some(20),
            total_ms: Some(0),
            text: Some("done.\r\n".into()),
        };
        let bodies = [
            EventBody::Request(full_request),
            EventBody::Request(RequestEvent::default()),
            EventBody::Reply(full_reply),
            EventBody::Reply(ReplyEvent::default()),
            EventBody::Gap { dropped: 3 },
        ];
        for body in &bodies {
            assert_eq!(
                by_hand(body),
                serde_json::to_string(body).expect("serializes")
            );
        }
    }

    #[test]
    fn a_row_is_written_as_serde_json_writes_its_events() {
        #[derive(serde::Serialize)]
        struct RowEvent<'a> {
            at_ms: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            family: Option<&'a str>,
            body: &'a EventBody,
        }
        let request = EventBody::Request(RequestEvent {
            request: "r-1".into(),
            ..RequestEvent::default()
        });
        let reply = EventBody::Reply(ReplyEvent::default());
        let events = [(7, Some("r-1"), &request), (9, None, &reply)];
        let mut out = Vec::new();
        write_row(&mut out, events).expect("writes");
        let expected: Vec<_> = events
            .iter()
            .map(|&(at_ms, family, body)| RowEvent {
                at_ms,
                family,
                body,
            })
            .collect();
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            serde_json::to_string(&expected).expect("serializes")
        );
    }
}
