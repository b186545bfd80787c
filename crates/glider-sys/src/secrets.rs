//! API keys out of stored text: the one scanner every store of prompt-derived text uses
//! (the context log, the request history, the dashboard's views and exports). A key is
//! recognised by its vendor's shape — `sk-…` (Anthropic `sk-ant-…`, OpenAI `sk-proj-…`
//! and older `sk-…`), AWS `AKIA…`/`ASIA…`, GitHub `ghp_…`/`gho_…`/`ghu_…`/`ghs_…`/
//! `ghr_…`/`github_pat_…`, GitLab `glpat-…`, Slack `xox?-…`, Google `AIza…`, Hugging
//! Face `hf_…` — and replaced whole by [`KEY_REDACTED`], the same token the example
//! redaction plugin (`examples/plugins/rewrite_redact.py`) writes, so a prompt that
//! plugin rewrote is stored as the backend got it.
//!
//! A key is a run of token characters (`A-Z a-z 0-9 _ -`) that starts at a boundary
//! (the text's start or a character outside that set), begins with a known prefix and
//! has at least the prefix's length of body after it. `sk-` bodies must also look
//! random (a digit, or upper and lower case) so words like `sk-learn-estimators` stay.
//! A key's characters need no escaping in JSON, so JSON text can be scanned as it is.

use std::borrow::Cow;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, Input, MatchKind};
use serde_json::Value;

/// What a key becomes.
pub const KEY_REDACTED: &str = "[redacted]";

/// A key shape: its prefix, the fewest body characters after it, the most (AWS ids
/// have an exact length), and whether the body may hold `-` and `_`.
struct Shape {
    prefix: &'static str,
    min_body: usize,
    max_body: usize,
    punctuated: bool,
    /// The body must hold a digit or both cases (prefixes that start words).
    random: bool,
}

const fn shape(prefix: &'static str, min_body: usize, punctuated: bool) -> Shape {
    Shape {
        prefix,
        min_body,
        max_body: usize::MAX,
        punctuated,
        random: false,
    }
}

const SHAPES: [Shape; 16] = [
    Shape {
        random: true,
        ..shape("sk-", 20, true)
    },
    Shape {
        max_body: 16,
        ..shape("AKIA", 16, false)
    },
    Shape {
        max_body: 16,
        ..shape("ASIA", 16, false)
    },
    shape("ghp_", 36, false),
    shape("gho_", 36, false),
    shape("ghu_", 36, false),
    shape("ghs_", 36, false),
    shape("ghr_", 36, false),
    shape("github_pat_", 22, true),
    shape("glpat-", 20, true),
    shape("xoxb-", 10, true),
    shape("xoxp-", 10, true),
    shape("xoxa-", 10, true),
    shape("xoxr-", 10, true),
    shape("AIza", 35, true),
    Shape {
        random: true,
        ..shape("hf_", 30, false)
    },
];

fn is_token(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'
}

/// The shortest run any shape accepts: its prefix and its fewest body characters.
const SHORTEST_KEY: usize = {
    let mut shortest = usize::MAX;
    let mut at = 0;
    while at < SHAPES.len() {
        let length = SHAPES[at].prefix.len() + SHAPES[at].min_body;
        if length < shortest {
            shortest = length;
        }
        at += 1;
    }
    shortest
};

/// Whether a shape's prefix begins with `byte`.
fn may_begin_a_key(byte: u8) -> bool {
    SHAPES
        .iter()
        .any(|shape| shape.prefix.as_bytes()[0] == byte)
}

/// Whether the token run `run` (maximal, starting at a boundary) is a key. Most runs
/// are words, too short to be one or beginning with no prefix's first letter: those
/// two checks come before the shapes.
fn is_key(run: &[u8]) -> bool {
    if run.len() < SHORTEST_KEY || !may_begin_a_key(run[0]) {
        return false;
    }
    SHAPES.iter().any(|shape| {
        run.strip_prefix(shape.prefix.as_bytes())
            .is_some_and(|body| {
                (shape.min_body..=shape.max_body).contains(&body.len())
                    && (shape.punctuated || body.iter().all(u8::is_ascii_alphanumeric))
                    && (!shape.random || looks_random(body))
            })
    })
}

fn looks_random(body: &[u8]) -> bool {
    body.iter().any(u8::is_ascii_digit)
        || (body.iter().any(u8::is_ascii_uppercase) && body.iter().any(u8::is_ascii_lowercase))
}

/// Finds where a shape's prefix stands (SIMD over the 16 prefixes at once), so that
/// the bytes between candidates are not looked at one by one: every text stored is
/// scanned, and almost none holds a key.
static PREFIXES: LazyLock<AhoCorasick> = LazyLock::new(|| {
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostFirst)
        .build(SHAPES.iter().map(|shape| shape.prefix))
        .expect("the key prefixes build a searcher")
});

/// `text` with every key replaced by [`KEY_REDACTED`]; borrowed when it holds none.
/// A key starts with a prefix at a boundary, so only where a prefix is found is the
/// token run there read; a prefix's characters are all token characters, so no
/// boundary lies inside a match, and after a run the search goes on from its end.
pub fn redact_keys(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut redaction = Redaction::of(text);
    let mut from = 0;
    while let Some(found) = PREFIXES.find(Input::new(bytes).span(from..bytes.len())) {
        let at = found.start();
        from = if at > 0 && is_token(bytes[at - 1]) {
            // Inside a run that began before it: no key starts here.
            found.end()
        } else {
            redaction.run(at)
        };
    }
    redaction.finish()
}

/// A text being redacted: what of it is written out so far.
struct Redaction<'a> {
    text: &'a str,
    out: String,
    copied: usize,
}

impl<'a> Redaction<'a> {
    fn of(text: &'a str) -> Redaction<'a> {
        Redaction {
            text,
            out: String::new(),
            copied: 0,
        }
    }

    /// The run of token characters from `at` (a boundary), replaced whole when it is a
    /// key; returns where it ends.
    fn run(&mut self, at: usize) -> usize {
        let bytes = self.text.as_bytes();
        let end = bytes[at..]
            .iter()
            .position(|&b| !is_token(b))
            .map_or(bytes.len(), |run| at + run);
        if is_key(&bytes[at..end]) {
            self.out.push_str(&self.text[self.copied..at]);
            self.out.push_str(KEY_REDACTED);
            self.copied = end;
        }
        end
    }

    /// The text, borrowed when it held no key.
    fn finish(mut self) -> Cow<'a, str> {
        if self.copied == 0 {
            return Cow::Borrowed(self.text);
        }
        self.out.push_str(&self.text[self.copied..]);
        Cow::Owned(self.out)
    }
}

/// [`redact_keys`] in place (no allocation when `text` holds no key).
pub fn redact_keys_in(text: &mut String) {
    if let Cow::Owned(redacted) = redact_keys(text) {
        *text = redacted;
    }
}

/// [`redact_keys_in`] on every string of `value` (object keys stay).
pub fn redact_keys_in_json(value: &mut Value) {
    match value {
        Value::String(text) => redact_keys_in(text),
        Value::Array(items) => items.iter_mut().for_each(redact_keys_in_json),
        Value::Object(map) => map.values_mut().for_each(redact_keys_in_json),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: [&str; 8] = [
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcdEFGH",
        "sk-proj-Zq9xYw8vUt7sRq6pOn5mLk4jIh3gFe2dCb1a",
        "sk-abcdefghijklmnopqrstuvwxyz0123",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "xoxb-1234567890-abcdefghij",
        "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    ];

    #[test]
    fn the_shortest_key_of_each_shape_passes_the_quick_checks() {
        for shape in &SHAPES {
            // A body of its fewest characters, with a digit and both cases.
            let body: String = "a1B".chars().cycle().take(shape.min_body).collect();
            let key = format!("{}{body}", shape.prefix);
            assert_eq!(redact_keys(&key), KEY_REDACTED, "{key}");
            let short = &key[..key.len() - 1];
            assert_eq!(redact_keys(short), short, "one character short: {short}");
        }
    }

    #[test]
    fn every_key_shape_is_replaced_whole_wherever_it_stands() {
        for key in KEYS {
            for (text, expected) in [
                (key.to_owned(), KEY_REDACTED.to_owned()),
                (
                    format!("my key is {key}"),
                    format!("my key is {KEY_REDACTED}"),
                ),
                (
                    format!("export X=\"{key}\"; echo"),
                    format!("export X=\"{KEY_REDACTED}\"; echo"),
                ),
                (
                    format!("{key}\n{key}"),
                    format!("{KEY_REDACTED}\n{KEY_REDACTED}"),
                ),
            ] {
                assert_eq!(redact_keys(&text), expected, "{key}");
            }
        }
    }

    #[test]
    fn text_without_keys_is_borrowed_and_lookalikes_stay() {
        for text in [
            "",
            "plain words, no keys",
            "task-abcdefghijklmnopqrstu0123456789", // `sk-` inside a word
            "sk-learn-compatible-estimators-here",  // a word, not random
            "sk-short1",
            "AKIAIOSFODNN7EXAMPLE2", // one too many for an AWS id
            "ghp_tooshort123",
            "naïve café — sk-",
        ] {
            assert!(
                matches!(redact_keys(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
    }

    #[test]
    fn json_strings_are_redacted_in_place_and_serialized_json_scans_alike() {
        let key = KEYS[0];
        let mut value = serde_json::json!({"command": format!("curl -H 'x-api-key: {key}'"),
            "list": [key, 3], "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx0123": true});
        let text = value.to_string();
        redact_keys_in_json(&mut value);
        assert!(!value["command"].as_str().unwrap_or_default().contains(key));
        assert_eq!(value["list"][0], KEY_REDACTED);
        let scanned: Value = serde_json::from_str(&redact_keys(&text)).expect("still JSON");
        assert_eq!(scanned["command"], value["command"]);
        assert_eq!(scanned["list"], value["list"]);
    }

    /// The rule read byte by byte, as the module's doc states it: every maximal token
    /// run starting at a boundary is checked whole.
    fn by_every_run(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut redaction = Redaction::of(text);
        let mut at = 0;
        while at < bytes.len() {
            at = if is_token(bytes[at]) {
                redaction.run(at)
            } else {
                at + 1
            };
        }
        redaction.finish().into_owned()
    }

    #[test]
    fn searching_for_prefixes_redacts_exactly_what_reading_every_run_does() {
        // Keys, lookalikes, prefixes inside words, and what stands between them.
        let pieces = [
            KEYS[0],
            KEYS[1],
            KEYS[2],
            KEYS[3],
            KEYS[4],
            KEYS[5],
            KEYS[6],
            KEYS[7],
            "sk-learn-compatible-estimators",
            "xsk-abcdefghijklmnopqrstu0123",
            "ghp_",
            "AKIA",
            "hf_",
            "github_pat_",
            "AIza",
            "task",
            "ask",
            "gh",
            "-",
            "_",
            " ",
            "\"",
            "\n",
            "é",
            "—",
            "{\"k\":",
            "0",
            "Z",
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for _ in 0..5000 {
            let count = 1 + next(12);
            let text: String = (0..count).map(|_| pieces[next(pieces.len())]).collect();
            assert_eq!(redact_keys(&text), by_every_run(&text), "{text:?}");
        }
    }
}
