//! Decoded tool definitions kept across requests. A coding CLI sends the same tools on
//! every turn of a session (Claude Code: ~25 tools, 40-60 KB of JSON schema, most of its
//! body), and decoding them was most of a request's decode. The tools of the last few
//! distinct definitions are kept, keyed by the dialect and the exact bytes of the body's
//! top-level `tools` member: a body whose `tools` bytes are one of those is decoded with
//! that member read as `null`, and gets the kept tools (a shared [`ToolList`]: no copy).
//!
//! Decoding a dialect's tools reads the `tools` member alone, so the result is the one a
//! whole decode gives. Anything the scan cannot place (see [`crate::scan`]) is decoded
//! whole; so is a body that fails to decode without its tools, so that its error is the
//! one the whole body gives. Only tools that decoded are kept.

use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use glider_ngl::{ApiError, Dialect, Request, ToolList};

use crate::scan;

/// A `tools` member shorter than this is decoded each time: parsing it costs less than
/// keeping it.
const MIN_BYTES: usize = 2 * 1024;
/// Nor is a larger one kept (memory: the bytes and their decoded form, per entry).
const MAX_BYTES: usize = 512 * 1024;
/// Distinct tool definitions kept (one per CLI and version, typically).
const ENTRIES: usize = 8;

struct Entry {
    dialect: Dialect,
    bytes: Box<[u8]>,
    tools: ToolList,
}

/// Most recently used first.
static KEPT: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// `decode` (the dialect's whole-body decoder) of `body`, with the tools taken from the
/// ones kept when its `tools` member is byte for byte one of them.
pub(crate) fn decode_request(
    body: &[u8],
    dialect: Dialect,
    decode: fn(&[u8]) -> Result<Request, ApiError>,
) -> Result<Request, ApiError> {
    let Some(span) = tools_span(body) else {
        return decode(body);
    };
    let bytes = &body[span.clone()];
    if let Some(tools) = kept(dialect, bytes) {
        let mut without = Vec::with_capacity(body.len() - bytes.len() + 4);
        without.extend_from_slice(&body[..span.start]);
        without.extend_from_slice(b"null");
        without.extend_from_slice(&body[span.end..]);
        if let Ok(mut request) = decode(&without) {
            request.tools = tools;
            return Ok(request);
        }
        return decode(body);
    }
    let request = decode(body)?;
    keep(dialect, bytes, &request.tools);
    Ok(request)
}

/// Where the body's `tools` member lies, when it is one worth keeping.
fn tools_span(body: &[u8]) -> Option<Range<usize>> {
    if body.len() < MIN_BYTES {
        return None;
    }
    let span = scan::top_level_member(body, "tools").ok()??;
    (MIN_BYTES..=MAX_BYTES)
        .contains(&span.len())
        .then_some(span)
}

fn kept(dialect: Dialect, bytes: &[u8]) -> Option<ToolList> {
    let mut entries = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    let at = entries
        .iter()
        .position(|e| e.dialect == dialect && *e.bytes == *bytes)?;
    entries[..=at].rotate_right(1);
    Some(entries[0].tools.clone())
}

fn keep(dialect: Dialect, bytes: &[u8], tools: &ToolList) {
    let entry = Entry {
        dialect,
        bytes: bytes.into(),
        tools: tools.clone(),
    };
    let mut entries = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    // Two requests with the same new tools may both miss; keep one.
    entries.retain(|e| !(e.dialect == dialect && *e.bytes == *bytes));
    entries.insert(0, entry);
    entries.truncate(ENTRIES);
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::codec;

    /// A Claude Code-sized tool list: `n` tools with long schemas, their descriptions
    /// marked with `tag` (the kept lists are shared by every test in the process).
    fn tools(n: usize, dialect: Dialect, tag: &str) -> Vec<Value> {
        (0..n)
            .map(|i| {
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "x".repeat(200)},
                        "limit": {"type": "integer", "description": format!("{tag} {i}")},
                    },
                    "required": ["path"],
                });
                let name = format!("T{i}");
                match dialect {
                    Dialect::Anthropic => {
                        json!({"name": name, "description": "d", "input_schema": schema})
                    }
                    Dialect::OpenAiResponses => {
                        json!({"type": "function", "name": name, "description": "d", "parameters": schema})
                    }
                    _ => json!({"type": "function", "function": {"name": name, "description": "d", "parameters": schema}}),
                }
            })
            .collect()
    }

    fn body(dialect: Dialect, tools: &[Value], text: &str) -> Vec<u8> {
        let body = match dialect {
            Dialect::Anthropic => json!({
                "model": "m", "max_tokens": 100, "tools": tools,
                "tool_choice": {"type": "auto"},
                "messages": [{"role": "user", "content": text}],
            }),
            Dialect::OpenAiResponses => json!({
                "model": "m", "tools": tools, "input": text, "store": false,
            }),
            _ => json!({
                "model": "m", "tools": tools, "stream": false,
                "messages": [{"role": "user", "content": text}],
            }),
        };
        body.to_string().into_bytes()
    }

    fn is_kept(dialect: Dialect, body: &[u8]) -> bool {
        kept(
            dialect,
            &body[tools_span(body).expect("big enough to keep")],
        )
        .is_some()
    }

    #[test]
    fn a_repeated_tool_list_decodes_as_the_whole_body_does() {
        for dialect in Dialect::ALL {
            let codec = codec(dialect);
            let list = tools(12, dialect, "repeated");
            let first = body(dialect, &list, "first turn");
            let second = body(dialect, &list, "second turn");
            assert!(!is_kept(dialect, &second), "{dialect:?}: not seen yet");
            // Unseen tools: the whole body is decoded, and its tools kept.
            let whole = codec.decode_request(&second).expect("decodes");
            assert_eq!(whole.tools.len(), 12);
            assert!(is_kept(dialect, &first), "{dialect:?}: kept");
            // Seen: decoded without them, given the kept ones; the same request.
            assert_eq!(codec.decode_request(&second).expect("decodes"), whole);
            let other_turn = codec.decode_request(&first).expect("decodes");
            assert_eq!(other_turn.tools, whole.tools);
            assert_eq!(other_turn.last_user_text().as_deref(), Some("first turn"));
        }
    }

    #[test]
    fn the_same_bytes_in_another_dialect_are_not_taken() {
        // Chat Completions and Ollama write tools alike: the key is the dialect too.
        let list = tools(14, Dialect::OpenAiChat, "two dialects");
        let chat = body(Dialect::OpenAiChat, &list, "hi");
        codec(Dialect::OpenAiChat)
            .decode_request(&chat)
            .expect("decodes");
        assert!(is_kept(Dialect::OpenAiChat, &chat));
        assert!(!is_kept(Dialect::Ollama, &chat));
    }

    #[test]
    fn a_bad_body_with_kept_tools_gets_the_whole_bodys_error() {
        let dialect = Dialect::OpenAiChat;
        let list = tools(13, dialect, "bad body");
        let good = body(dialect, &list, "ok");
        // A wrong member after the tools, a malformed one (its error says where: the
        // position in the body without its tools would be wrong), and a body cut short.
        let mut bad_member = good.clone();
        let end = bad_member.len() - 1;
        bad_member.splice(end..end, *b",\"temperature\":\"hot\"");
        let mut malformed = good.clone();
        malformed.splice(end..end, *b",\"temperature\":tru");
        let mut cut_short = good.clone();
        cut_short.truncate(good.len() - 4);
        // Seen before the tools are kept, the errors are the whole body's.
        let wrong_whole = codec(dialect)
            .decode_request(&bad_member)
            .expect_err("refused");
        let cut_whole = codec(dialect)
            .decode_request(&cut_short)
            .expect_err("refused");
        let malformed_whole = codec(dialect)
            .decode_request(&malformed)
            .expect_err("refused");
        codec(dialect).decode_request(&good).expect("decodes");
        assert!(is_kept(dialect, &bad_member));
        assert_eq!(
            codec(dialect)
                .decode_request(&bad_member)
                .expect_err("refused"),
            wrong_whole
        );
        assert_eq!(
            codec(dialect)
                .decode_request(&cut_short)
                .expect_err("refused"),
            cut_whole
        );
        assert!(is_kept(dialect, &malformed));
        assert_eq!(
            codec(dialect)
                .decode_request(&malformed)
                .expect_err("refused"),
            malformed_whole
        );
        assert!(
            cut_whole.message.contains("invalid JSON body"),
            "{}",
            cut_whole.message
        );
        assert!(
            malformed_whole
                .message
                .contains(&format!("column {}", good.len() + 18)),
            "{}",
            malformed_whole.message
        );
        assert_eq!(wrong_whole.param.as_deref(), Some("temperature"));
    }

    #[test]
    fn at_most_a_few_lists_are_kept() {
        let dialect = Dialect::Ollama;
        for n in 0..ENTRIES + 3 {
            let list = tools(10, dialect, &format!("many {n}"));
            codec(dialect)
                .decode_request(&body(dialect, &list, "hi"))
                .expect("decodes");
        }
        assert!(KEPT.lock().expect("not poisoned").len() <= ENTRIES);
    }
}
