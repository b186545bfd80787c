//! One borrowing pass over a JSON body's top level: where a member's value lies, found
//! without decoding the body or allocating. The model rewrite of a forwarded request
//! splices the new name over the old one's bytes with it, and the usage of a forwarded
//! reply is read from its `usage` member alone, instead of parsing (and, for the
//! request, re-serialising) the whole, often 80 KB, body.
//!
//! The scan follows strings, nesting and delimiters; it does not validate what it
//! skips. Anything it cannot place for certain — not an object, a key spelled with
//! escapes, a member given twice, a body cut short — is [`Unscannable`], and the caller
//! settles it with a full parse.

use std::cell::{Cell, OnceCell};
use std::ops::Range;
use std::sync::OnceLock;

use memchr::memmem::Finder;

/// The scan could not place the member for certain; parse the body instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unscannable;

/// A fixed needle looked for in many bodies, by a vectorised substring search (a plain
/// `windows` comparison costs about 25 instructions a byte, 2 M on a Codex turn). Its
/// searcher is built once, at the first search: building one for each search
/// (`memmem::find`) cost more than searching a short reply (0.9k instructions for one
/// of 500 bytes).
pub struct Needle {
    bytes: &'static [u8],
    finder: OnceLock<Finder<'static>>,
}

impl Needle {
    pub const fn new(bytes: &'static [u8]) -> Self {
        Needle {
            bytes,
            finder: OnceLock::new(),
        }
    }

    fn finder(&self) -> &Finder<'static> {
        self.finder.get_or_init(|| Finder::new(self.bytes))
    }

    /// Whether it occurs anywhere in `body`.
    pub fn occurs_in(&self, body: &[u8]) -> bool {
        self.finder().find(body).is_some()
    }

    /// Where it begins in `body`, each place in order (places do not overlap).
    pub fn places_in<'b>(&'b self, body: &'b [u8]) -> impl Iterator<Item = usize> + 'b {
        self.finder().find_iter(body)
    }
}

/// The byte range of the top-level member `key`'s value (a string's quotes included),
/// `Ok(None)` when the object has no such member.
pub fn top_level_member(body: &[u8], key: &str) -> Result<Option<Range<usize>>, Unscannable> {
    let key = key.as_bytes();
    let mut found = None;
    let mut twice = false;
    top_level_members(body, |name, value| {
        if name == key {
            twice |= found.is_some();
            found = Some(value);
        }
    })?;
    if twice {
        return Err(Unscannable);
    }
    Ok(found)
}

/// The byte range of the top-level member `key`'s value, quotes included, when it is a
/// string; `None` when it is absent, not a string, or the body is [`Unscannable`].
pub fn top_level_string(body: &[u8], key: &str) -> Option<Range<usize>> {
    top_level_member(body, key)
        .ok()
        .flatten()
        .filter(|span| body[span.start] == b'"')
}

/// Where the values of the top-level members `keys` lie (the last of duplicates, as a
/// full parse keeps it); `None` for an absent one.
fn member_spans<const N: usize>(
    body: &[u8],
    keys: [&str; N],
) -> Result<[Option<Range<usize>>; N], Unscannable> {
    let mut spans: [Option<Range<usize>>; N] = std::array::from_fn(|_| None);
    top_level_members(body, |name, value| {
        if let Some(at) = keys.iter().position(|key| key.as_bytes() == name) {
            spans[at] = Some(value);
        }
    })?;
    Ok(spans)
}

/// A reply's usage from its top-level `usage` member alone, read by `decode` as a
/// full decode reads it (from the member's bytes, nothing parsed); no member is no
/// usage.
pub(crate) fn usage_member(
    body: &[u8],
    decode: impl FnOnce(&ScannedCounts<'_>) -> glider_ngl::Usage,
) -> Result<glider_ngl::Usage, Unscannable> {
    match member_spans(body, ["usage"])? {
        [Some(span)] if body[span.start] == b'{' => counts_of(&body[span], decode),
        // Absent, `null` or not an object: no counts, as a decode reads it.
        _ => Ok(glider_ngl::Usage::default()),
    }
}

/// The usage `decode` reads from the counts of `object` (an object's bytes, nothing
/// parsed); `Err` when the scan cannot read what it asked for, `object` itself
/// included.
pub(crate) fn counts_of(
    object: &[u8],
    decode: impl FnOnce(&ScannedCounts<'_>) -> glider_ngl::Usage,
) -> Result<glider_ngl::Usage, Unscannable> {
    let counts = ScannedCounts {
        object,
        unscannable: Cell::new(false),
        members: OnceCell::new(),
    };
    let usage = decode(&counts);
    if counts.unscannable.get() {
        return Err(Unscannable);
    }
    Ok(usage)
}

/// Where a usage decoder reads its counts: a parsed value, or an object's bytes by the
/// scan ([`ScannedCounts`]), so that one decoder serves both.
pub(crate) trait Counts {
    /// The unsigned integer at `path` (nested member names), 0 when a step is absent
    /// or it is not one: what `Value::as_u64` reads.
    fn count(&self, path: &[&str]) -> u64;
}

impl Counts for serde_json::Value {
    fn count(&self, path: &[&str]) -> u64 {
        path.iter()
            .try_fold(self, |value, key| value.get(key))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    }
}

/// An object's counts read from its bytes (the last of duplicate members, as a full
/// parse keeps it). An object the scan cannot read marks the whole read unscannable,
/// and the caller decodes instead.
pub(crate) struct ScannedCounts<'a> {
    object: &'a [u8],
    unscannable: Cell<bool>,
    /// The object's own members (name, value), scanned once on the first count: a
    /// usage decoder reads four or five counts, and each scan of the object (an
    /// Ollama reply's is the whole reply) cost about 2,000 instructions.
    members: OnceCell<Result<Vec<Member<'a>>, Unscannable>>,
}

/// A member of a scanned object: its name and where its value lies.
type Member<'a> = (&'a [u8], Range<usize>);

impl<'a> ScannedCounts<'a> {
    /// The value of the object's member `key` (the last, when given twice).
    fn member(&self, key: &str) -> Result<Option<&'a [u8]>, Unscannable> {
        let object = self.object;
        let members = self.members.get_or_init(|| {
            let mut members = Vec::with_capacity(8);
            top_level_members(object, |name, value| members.push((name, value)))?;
            Ok(members)
        });
        let members = members.as_ref().map_err(|&unscannable| unscannable)?;
        Ok(members
            .iter()
            .rev()
            .find(|(name, _)| *name == key.as_bytes())
            .map(|(_, value)| &object[value.clone()]))
    }
}

impl Counts for ScannedCounts<'_> {
    fn count(&self, path: &[&str]) -> u64 {
        let mut value = self.object;
        for (depth, key) in path.iter().enumerate() {
            let member = if depth == 0 {
                self.member(key)
            } else {
                member_spans(value, [key]).map(|[span]| span.map(|span| &value[span]))
            };
            match member {
                Ok(Some(found)) => value = found,
                Ok(None) => return 0,
                // Below the object, `null` or a scalar has no members: absent, as
                // `Value::get` says.
                Err(Unscannable) if depth > 0 && value.first().is_some_and(|c| *c != b'{') => {
                    return 0;
                }
                Err(Unscannable) => {
                    self.unscannable.set(true);
                    return 0;
                }
            }
        }
        match integer(value) {
            Some(count) => count,
            None => {
                // Not a count, but a value a parse reads (`12.5`, `null`, `"7"`) is 0
                // as `as_u64` says; bytes a parse refuses make the reply unreadable.
                if serde_json::from_slice::<serde::de::IgnoredAny>(value).is_err() {
                    self.unscannable.set(true);
                }
                0
            }
        }
    }
}

/// A JSON number's bytes as `Value::as_u64` reads it when it is a plain unsigned
/// integer that fits; `None` for anything else.
pub(crate) fn integer(bytes: &[u8]) -> Option<u64> {
    // JSON has no leading zeros (`007` is refused by a parse, read as 7 by `parse`).
    let leading_zero = bytes.len() > 1 && bytes[0] == b'0';
    if leading_zero || !bytes.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Call `visit` with each top-level member's key (as written, without its quotes) and
/// its value's byte range, in order.
pub fn top_level_members<'a>(
    body: &'a [u8],
    mut visit: impl FnMut(&'a [u8], Range<usize>),
) -> Result<(), Unscannable> {
    let mut at = skip_space(body, 0);
    if body.get(at) != Some(&b'{') {
        return Err(Unscannable);
    }
    at = skip_space(body, at + 1);
    if body.get(at) == Some(&b'}') {
        return Ok(());
    }
    loop {
        if body.get(at) != Some(&b'"') {
            return Err(Unscannable);
        }
        let key_end = string_end(body, at).ok_or(Unscannable)?;
        let name = &body[at + 1..key_end - 1];
        if name.contains(&b'\\') {
            return Err(Unscannable);
        }
        at = skip_space(body, key_end);
        if body.get(at) != Some(&b':') {
            return Err(Unscannable);
        }
        at = skip_space(body, at + 1);
        let value_end = value_end(body, at).ok_or(Unscannable)?;
        visit(name, at..value_end);
        at = skip_space(body, value_end);
        match body.get(at) {
            Some(b',') => at = skip_space(body, at + 1),
            Some(b'}') if skip_space(body, at + 1) == body.len() => return Ok(()),
            _ => return Err(Unscannable),
        }
    }
}

fn skip_space(body: &[u8], mut at: usize) -> usize {
    while matches!(body.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The end (exclusive) of the string whose opening quote is at `at`.
fn string_end(body: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', body.get(i..)?)?;
        match body[i] {
            b'"' => return Some(i + 1),
            _ => i += 2,
        }
    }
}

/// The end (exclusive) of the value that starts at `at`.
fn value_end(body: &[u8], at: usize) -> Option<usize> {
    match body.get(at)? {
        b'"' => string_end(body, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match body.get(i)? {
                    b'"' => {
                        i = string_end(body, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        // A number, true, false or null: up to the next delimiter.
        _ => {
            let mut i = at;
            while body
                .get(i)
                .is_some_and(|c| !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
            {
                i += 1;
            }
            (i > at).then_some(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(body: &str) -> Option<&str> {
        top_level_string(body.as_bytes(), "model").map(|span| &body[span])
    }

    #[test]
    fn finds_the_top_level_member_past_nested_ones() {
        let body = r#" { "messages": [{"model": "inner", "content": "a \"}]\" b"}],
            "n": -1.5e3, "ok": true, "none": null, "model" : "gpt-4.1", "tools": {} } "#;
        assert_eq!(model(body), Some("\"gpt-4.1\""));
        assert_eq!(model(r#"{"model":"a\"b"}"#), Some(r#""a\"b""#));
        // An escaped backslash ends just before the closing quote.
        assert_eq!(model(r#"{"x":"a\\","model":"m\\"}"#), Some(r#""m\\""#));
        static TOOL_CALLS: Needle = Needle::new(b"\"tool_calls\"");
        assert!(TOOL_CALLS.occurs_in(b"{\"tool_calls\":[]}"));
        assert!(!TOOL_CALLS.occurs_in(b"{\"tool_call\":[]}"));
        assert!(
            TOOL_CALLS.occurs_in(b"{\"tool_calls\":[]}"),
            "searched again"
        );
        let twice = b"[\"tool_calls\",\"tool_calls\"]";
        assert_eq!(TOOL_CALLS.places_in(twice).collect::<Vec<_>>(), [1, 14]);
        let usage = top_level_member(body.as_bytes(), "tools").expect("scans");
        assert_eq!(usage.map(|span| &body[span]), Some("{}"));
        assert_eq!(top_level_member(body.as_bytes(), "usage"), Ok(None));
    }

    #[test]
    fn leaves_what_it_cannot_place_to_a_full_parse() {
        for body in [
            r#"{"model": "a", "model": "b"}"#,
            r#"{"mod\u0065l": "a"}"#,
            r#"["model", "a"]"#,
            r#"{"model": "a""#,
            r#"{"x": [1, 2}"#,
            r#"{"model": "a"} trailing"#,
            "",
        ] {
            assert_eq!(model(body), None, "{body}");
            assert_eq!(
                top_level_member(body.as_bytes(), "model"),
                Err(Unscannable),
                "{body}"
            );
        }
        // Well-formed, but no string model: absent to the scan, a full parse decides.
        for body in [r#"{"messages": []}"#, r#"{"model": 7}"#, "{}"] {
            assert_eq!(model(body), None, "{body}");
            assert!(top_level_member(body.as_bytes(), "model").is_ok(), "{body}");
        }
    }
}
