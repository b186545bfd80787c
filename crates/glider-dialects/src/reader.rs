//! A one-pass JSON reader that validates everything it passes over and borrows what it
//! reads: the caller walks the objects and arrays it wants and reads or skips each
//! value. It refuses what serde_json refuses (bad syntax, a raw control byte or a bad
//! escape in a string) and nesting past [`MAX_DEPTH`] (a little short of serde_json's
//! own limit), and [`Refused`] is also how a caller declines what it does not read for
//! certain; either way the caller falls back to a typed parse. It costs a fraction of
//! serde's per-token machinery: plain string bytes are passed eight at a time
//! ([`string_byte_flags`]), and nothing is allocated. The text must be valid UTF-8
//! already (it is a `&str`).

use std::borrow::Cow;

/// The reader refuses the text, or its caller declines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused;

/// Deepest nesting the reader follows (serde_json's limit is 128).
const MAX_DEPTH: usize = 100;

/// A position in a JSON text.
pub(crate) struct Reader<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            depth: 0,
        }
    }

    /// The next byte past white space.
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.at) {
            self.at += 1;
        }
        bytes.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), Refused> {
        if self.peek() != Some(byte) {
            return Err(Refused);
        }
        self.at += 1;
        Ok(())
    }

    /// Only white space is left.
    pub(crate) fn end(mut self) -> Result<(), Refused> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(Refused),
        }
    }

    fn enter(&mut self, open: u8) -> Result<(), Refused> {
        self.expect(open)?;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Refused);
        }
        Ok(())
    }

    /// Each member of the object here, in order: `visit` gets its name (`None` for one
    /// with an escape: a typed parse would unescape it) and must read its value.
    pub(crate) fn object(
        &mut self,
        mut visit: impl FnMut(Option<&'a str>, &mut Self) -> Result<(), Refused>,
    ) -> Result<(), Refused> {
        self.items(b'{', b'}', |_, reader| {
            let (name, escaped) = reader.raw_string()?;
            reader.expect(b':')?;
            visit((!escaped).then_some(name), reader)
        })
    }

    /// Each element of the array here, in order: `visit` gets its index and must read
    /// it.
    pub(crate) fn array(
        &mut self,
        visit: impl FnMut(usize, &mut Self) -> Result<(), Refused>,
    ) -> Result<(), Refused> {
        self.items(b'[', b']', visit)
    }

    /// The items of the object or array (between `open` and `close`) here, each read
    /// by `item` with its index, separated by commas.
    fn items(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(usize, &mut Self) -> Result<(), Refused>,
    ) -> Result<(), Refused> {
        self.enter(open)?;
        if self.peek() != Some(close) {
            let mut index = 0;
            loop {
                item(index, self)?;
                index += 1;
                match self.peek() {
                    Some(b',') => self.at += 1,
                    Some(byte) if byte == close => break,
                    _ => return Err(Refused),
                }
            }
        }
        self.at += 1;
        self.depth -= 1;
        Ok(())
    }

    /// The next value's JSON text, validated.
    pub(crate) fn value(&mut self) -> Result<&'a str, Refused> {
        self.peek();
        let start = self.at;
        self.skip()?;
        Ok(&self.text[start..self.at])
    }

    /// Pass over the next value, validating it.
    pub(crate) fn skip(&mut self) -> Result<(), Refused> {
        match self.peek().ok_or(Refused)? {
            b'"' => self.raw_string().map(drop),
            b'{' => self.object(|_, reader| reader.skip()),
            b'[' => self.array(|_, reader| reader.skip()),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(Refused),
        }
    }

    /// A string or `null`, as serde reads an optional text: a string without escapes
    /// is borrowed. Any other value is refused.
    pub(crate) fn optional_text(&mut self) -> Result<Option<Cow<'a, str>>, Refused> {
        if self.peek() == Some(b'n') {
            return self.literal("null").map(|()| None);
        }
        let (raw, escaped) = self.raw_string()?;
        if !escaped {
            return Ok(Some(Cow::Borrowed(raw)));
        }
        // Quotes included; the reader has checked every escape.
        let quoted = &self.text[self.at - raw.len() - 2..self.at];
        serde_json::from_str(quoted)
            .map(|text| Some(Cow::Owned(text)))
            .map_err(|_| Refused)
    }

    /// A string's text between its quotes, as written, and whether it has an escape.
    fn raw_string(&mut self) -> Result<(&'a str, bool), Refused> {
        self.expect(b'"')?;
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut escaped = false;
        loop {
            while let Some(word) = bytes.get(self.at..self.at + 8) {
                let flags =
                    string_byte_flags(u64::from_le_bytes(word.try_into().expect("eight bytes")));
                if flags != 0 {
                    self.at += (flags.trailing_zeros() / 8) as usize;
                    break;
                }
                self.at += 8;
            }
            match *bytes.get(self.at).ok_or(Refused)? {
                b'"' => {
                    self.at += 1;
                    return Ok((&self.text[start..self.at - 1], escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.escape()?;
                }
                byte if byte < 0x20 => return Err(Refused),
                _ => self.at += 1,
            }
        }
    }

    /// The escape whose backslash is here.
    fn escape(&mut self) -> Result<(), Refused> {
        let bytes = self.text.as_bytes();
        match bytes.get(self.at + 1).ok_or(Refused)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
            b'u' => {
                let hex = bytes.get(self.at + 2..self.at + 6).ok_or(Refused)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return Err(Refused);
                }
                self.at += 6;
            }
            _ => return Err(Refused),
        }
        Ok(())
    }

    fn literal(&mut self, word: &str) -> Result<(), Refused> {
        if !self.text.as_bytes()[self.at..].starts_with(word.as_bytes()) {
            return Err(Refused);
        }
        self.at += word.len();
        Ok(())
    }

    /// A number by JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Result<(), Refused> {
        let bytes = self.text.as_bytes();
        let digits = |at: &mut usize| {
            let start = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at > start
        };
        let mut at = self.at;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        match bytes.get(at) {
            Some(b'0') => at += 1,
            Some(b'1'..=b'9') => {
                digits(&mut at);
            }
            _ => return Err(Refused),
        }
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            if !digits(&mut at) {
                return Err(Refused);
            }
        }
        if let Some(b'e' | b'E') = bytes.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = bytes.get(at) {
                at += 1;
            }
            if !digits(&mut at) {
                return Err(Refused);
            }
        }
        self.at = at;
        Ok(())
    }
}

/// Most counts a usage decoder reads through [`ReadCounts`].
const MAX_COUNTS: usize = 8;

/// A usage object's counts, read in the reader's pass for a usage decoder
/// ([`crate::scan::Counts`]) that reads the paths it was read for, of one or two member
/// names. The rest of the object is validated and skipped.
pub(crate) struct ReadCounts<'a> {
    paths: &'a [&'a [&'a str]],
    values: [Option<&'a str>; MAX_COUNTS],
}

impl<'a> ReadCounts<'a> {
    /// The usage value here, for `paths`: an object's counts; `null` or any other
    /// value is no usage, as `Value::get` reads it. A counted member given twice, or
    /// the object that holds one, is declined (a parse keeps the last).
    pub(crate) fn read(
        reader: &mut Reader<'a>,
        paths: &'a [&'a [&'a str]],
    ) -> Result<Self, Refused> {
        assert!(paths.len() <= MAX_COUNTS, "at most {MAX_COUNTS} counts");
        let mut counts = Self {
            paths,
            values: [None; MAX_COUNTS],
        };
        if reader.peek() != Some(b'{') {
            return reader.skip().map(|()| counts);
        }
        let mut holders_seen = 0u32;
        reader.object(|name, reader| {
            let name = name.ok_or(Refused)?;
            if let Some(at) = paths.iter().position(|path| *path == [name]) {
                return counts.keep(at, reader.value()?);
            }
            let Some(holder) = paths
                .iter()
                .position(|path| path.len() == 2 && path[0] == name)
            else {
                return reader.skip();
            };
            if holders_seen & (1 << holder) != 0 {
                return Err(Refused);
            }
            holders_seen |= 1 << holder;
            if reader.peek() != Some(b'{') {
                // `null` or a scalar holds no count: each of its paths reads 0.
                return reader.skip();
            }
            reader.object(|member, reader| {
                let member = member.ok_or(Refused)?;
                match paths.iter().position(|path| *path == [name, member]) {
                    Some(at) => counts.keep(at, reader.value()?),
                    None => reader.skip(),
                }
            })
        })?;
        Ok(counts)
    }

    fn keep(&mut self, at: usize, value: &'a str) -> Result<(), Refused> {
        once(&mut self.values[at], value)
    }
}

/// Keep `value` in `slot`, declining a member given twice (a typed parse refuses it;
/// a `Value` parse keeps the last).
pub(crate) fn once<T>(slot: &mut Option<T>, value: T) -> Result<(), Refused> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err(Refused),
    }
}

impl crate::scan::Counts for ReadCounts<'_> {
    fn count(&self, path: &[&str]) -> u64 {
        let at = self.paths.iter().position(|read| *read == path);
        debug_assert!(at.is_some(), "{path:?} was not read");
        at.and_then(|at| self.values[at])
            .and_then(|value| crate::scan::integer(value.as_bytes()))
            .unwrap_or(0)
    }
}

/// The high bit of each byte of `word` that may be `"`, `\` or below 0x20 (bytes in
/// memory order, little-endian): where a JSON string's reader must stop and look. Each test is the "some byte is zero" (or "below n") bit trick: it never
/// misses a byte that is one, and a borrow may flag bytes above a real one but none
/// below it, so the lowest flagged byte is the first to look at.
fn string_byte_flags(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    below_space
        | zero_bytes(word ^ (ONES * u64::from(b'"')))
        | zero_bytes(word ^ (ONES * u64::from(b'\\')))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the reader takes `text` as one value, as serde_json does.
    fn reads(text: &str) -> bool {
        let mut reader = Reader::new(text);
        reader.skip().is_ok() && reader.end().is_ok()
    }

    /// The reader accepts and refuses what serde_json accepts and refuses, over
    /// hand-picked edges and every one-byte change of a reply.
    #[test]
    fn validates_as_serde_json_does() {
        let edges = [
            "0",
            "-0",
            "1.5e-7",
            "1E+2",
            "-12",
            "01",
            "1.",
            ".5",
            "1e",
            "-",
            "+1",
            "1.5e999",
            "true",
            "tru",
            "nulls",
            "null",
            "\"\"",
            "\"\\u00e9\\n\\\"\\\\\\/\"",
            "\"\\x\"",
            "\"\\u00g0\"",
            "\"a\u{1}b\"",
            "\"é ✓ 😀\"",
            "\"unterminated",
            "[]",
            "[1,]",
            "[,1]",
            "{}",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{\"a\":1 \"b\":2}",
            "{1:2}",
            " [ {\"a\" : [ ] } ] ",
            "[1] x",
            "",
            " ",
        ];
        for text in edges {
            let serde = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
            assert_eq!(reads(text), serde, "{text:?}");
        }
        let reply = r#"{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"you\" é\n","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3.5e1,"details":[true,false,-1]}}"#;
        assert!(reads(reply));
        let bytes = reply.as_bytes();
        for at in 0..bytes.len() {
            for byte in [
                b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'1', b'e', b'-', b' ', b'\n',
                b'x', 0x01,
            ] {
                let mut changed = bytes.to_vec();
                changed[at] = byte;
                let Ok(text) = std::str::from_utf8(&changed) else {
                    continue;
                };
                let serde = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
                assert_eq!(reads(text), serde, "{text}");
            }
        }
    }

    /// The flags never miss a byte to escape, and the lowest one is always one.
    #[test]
    fn a_words_flags_find_every_byte_to_escape_and_begin_at_one() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for n in 0..200_000u32 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Mostly printable bytes, some escapes: each byte drawn from a small set.
            let pick = |i: u32| -> u8 {
                let r = (seed >> (i * 8)) as u8;
                match r % 8 {
                    0 => b'"',
                    1 => b'\\',
                    2 => r % 0x20,
                    3 => 0x20 + r % 0x60,
                    _ => r,
                }
            };
            let bytes: [u8; 8] = std::array::from_fn(|i| {
                if n % 3 == 0 {
                    pick(i as u32)
                } else {
                    (seed >> (i * 8)) as u8
                }
            });
            let flags = string_byte_flags(u64::from_le_bytes(bytes));
            let stops_at = |byte: u8| byte < 0x20 || byte == b'"' || byte == b'\\';
            for (i, &byte) in bytes.iter().enumerate() {
                if stops_at(byte) {
                    assert_ne!(flags & (0x80 << (i * 8)), 0, "{bytes:?}: byte {i} missed");
                }
            }
            if flags != 0 {
                let first = (flags.trailing_zeros() / 8) as usize;
                assert!(stops_at(bytes[first]), "{bytes:?}: byte {first} flagged");
            }
        }
    }

    #[test]
    fn nesting_past_the_limit_is_refused_not_followed() {
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        assert!(!reads(&deep));
        let fits = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(reads(&fits));
    }

    #[test]
    fn texts_are_borrowed_unless_escaped_and_other_values_refused() {
        fn read(text: &str) -> Result<Option<Cow<'_, str>>, Refused> {
            Reader::new(text).optional_text()
        }
        assert_eq!(read("\"plain\""), Ok(Some(Cow::Borrowed("plain"))));
        assert!(matches!(read("\"a\\nb\""), Ok(Some(Cow::Owned(text))) if text == "a\nb"));
        assert_eq!(read("null"), Ok(None));
        assert_eq!(read("1"), Err(Refused));
        assert_eq!(read("[\"x\"]"), Err(Refused));
    }
}
