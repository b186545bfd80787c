//! One borrowing pass over a JSON body's top level: where a member's value lies, found
//! without decoding the body or allocating. The model rewrite of a forwarded request
//! splices the new name over the old one's bytes with it, instead of parsing and
//! re-serialising the whole (often 80 KB) body.

use std::ops::Range;

/// The byte range of the top-level member `key`'s value, quotes included, when it is a
/// string. `None` when the body is not an object, has no such member or has it twice,
/// spells a key with escapes, or is not well-formed where the scan passes: the caller
/// then settles it with a full parse.
pub(crate) fn top_level_string(body: &[u8], key: &str) -> Option<Range<usize>> {
    let key = key.as_bytes();
    let mut at = skip_space(body, 0);
    if body.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_space(body, at + 1);
    if body.get(at) == Some(&b'}') {
        return None;
    }
    let mut found = None;
    loop {
        if body.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(body, at)?;
        let name = &body[at + 1..key_end - 1];
        if name.contains(&b'\\') {
            return None;
        }
        at = skip_space(body, key_end);
        if body.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(body, at + 1);
        let value_end = value_end(body, at)?;
        if name == key {
            if found.is_some() || body[at] != b'"' {
                return None;
            }
            found = Some(at..value_end);
        }
        at = skip_space(body, value_end);
        match body.get(at)? {
            b',' => at = skip_space(body, at + 1),
            b'}' => return found,
            _ => return None,
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
        match body.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
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
    }

    #[test]
    fn leaves_what_it_cannot_place_to_a_full_parse() {
        for body in [
            r#"{"messages": []}"#,
            r#"{"model": "a", "model": "b"}"#,
            r#"{"model": 7}"#,
            r#"{"mod\u0065l": "a"}"#,
            r#"["model", "a"]"#,
            r#"{"model": "a""#,
            r#"{"x": [1, 2}"#,
            "{}",
            "",
        ] {
            assert_eq!(model(body), None, "{body}");
        }
    }
}
