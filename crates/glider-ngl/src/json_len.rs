//! The length of a JSON value's compact text, counted without writing it: what the
//! token estimate reads of tool schemas, tool calls' arguments and native parts, and
//! what [`crate::ToolList::text_len`] remembers.

/// Bytes of `value.to_string()` (compact JSON), counted by walking the value: no
/// serializer runs (through it, tool schemas cost a Codex-sized turn ~600k
/// instructions, once per token estimate).
pub fn json_len(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(number) => number_len(number),
        Value::String(text) => json_string_len(text),
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_len).sum::<usize>()
        }
        Value::Object(members) => {
            2 + members.len().saturating_sub(1)
                + members
                    .iter()
                    .map(|(key, value)| json_string_len(key) + 1 + json_len(value))
                    .sum::<usize>()
        }
    }
}

/// Bytes of `text` as a JSON string, quotes and serde_json's escapes included: a
/// quote, a backslash and \\b \\f \\n \\r \\t take two bytes, other control characters six.
/// Eight bytes at a time: a word with no byte below 0x20, no quote and no backslash
/// (most of a schema's or a tool call's text) adds nothing and is passed over whole.
fn json_string_len(text: &str) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether some byte of `word` is below `n` (n at most 0x80).
    let any_below = |word: u64, n: u8| word.wrapping_sub(ONES * n as u64) & !word & HIGHS != 0;
    let any_equal = |word: u64, byte: u8| any_below(word ^ (ONES * byte as u64), 1);
    let extra = |bytes: &[u8]| -> usize {
        bytes
            .iter()
            .map(|&byte| match byte {
                b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t' => 1,
                0x00..=0x1f => 5,
                _ => 0,
            })
            .sum()
    };
    let (words, rest) = text.as_bytes().as_chunks::<8>();
    let escapes: usize = words
        .iter()
        .filter(|bytes| {
            let word = u64::from_ne_bytes(**bytes);
            any_below(word, 0x20) || any_equal(word, b'"') || any_equal(word, b'\\')
        })
        .map(|bytes| extra(bytes))
        .sum();
    2 + text.len() + escapes + extra(rest)
}

/// Bytes of a number as serde_json writes it.
fn number_len(number: &serde_json::Number) -> usize {
    let digits = |n: u64| n.checked_ilog10().map_or(1, |log| log as usize + 1);
    if let Some(n) = number.as_u64() {
        digits(n)
    } else if let Some(n) = number.as_i64() {
        1 + digits(n.unsigned_abs())
    } else {
        // A float (rare in a schema or arguments): ryu's text, as serde_json writes it.
        number.to_string().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_len_is_the_length_of_the_compact_json() {
        let values = [
            serde_json::json!(null),
            serde_json::json!(true),
            serde_json::json!(false),
            serde_json::json!(0),
            serde_json::json!(7),
            serde_json::json!(10),
            serde_json::json!(u64::MAX),
            serde_json::json!(-1),
            serde_json::json!(i64::MIN),
            serde_json::json!(1.5),
            serde_json::json!(-0.000123),
            serde_json::json!(1e300),
            serde_json::json!(""),
            serde_json::json!(
                "quote \" back \\ nl \n tab \t cr \r bs \u{8} ff \u{c} nul \u{0} us \u{1f} del \u{7f} é ✓"
            ),
            serde_json::json!([]),
            serde_json::json!({}),
            serde_json::json!([1, "a", [null, {}], {"k": false}]),
            serde_json::json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "a \"quoted\"\npath"}},
                "required": ["path"], "n": [1.25, -3, 40]
            }),
        ];
        for value in values {
            assert_eq!(json_len(&value), value.to_string().len(), "{value}");
        }
    }
}
