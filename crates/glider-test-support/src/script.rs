//! The deterministic reply script shared by every dialect: `[[call:NAME {args}]]`
//! markers become tool calls, a trailing tool result is acknowledged, anything else is
//! echoed; `[[loop:NAME {args}]]` calls on every turn, tool results or not (a model
//! that never stops calling tools); `<empty>` as NAME makes a call with an empty name;
//! plus delta splitting and the byte-based token estimates.

use serde_json::{Value, json};

use crate::MockConfig;

/// The text used for every thinking / reasoning block.
pub(crate) const THINKING_TEXT: &str = "thinking about it";

/// What a dialect's decoder extracts from a request for the script.
#[derive(Debug, Default)]
pub(crate) struct Conversation {
    /// Text of the last user message that is not a tool result.
    pub last_user_text: String,
    /// Whether a tool result follows that user message.
    pub tool_result_after_user: bool,
    /// The texts of the tool results that end the conversation (empty when the last
    /// message is not a tool result).
    pub trailing_tool_results: Vec<String>,
    /// Whether the request offers tools.
    pub has_tools: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub seq: u64,
    pub name: String,
    pub arguments: Value,
}

impl ToolCall {
    /// OpenAI / Ollama style id.
    pub fn call_id(&self) -> String {
        format!("call_mock_{}", self.seq)
    }

    /// Anthropic style id.
    pub fn toolu_id(&self) -> String {
        format!("toolu_mock_{}", self.seq)
    }

    /// The arguments as a JSON string (OpenAI wire form).
    pub fn arguments_string(&self) -> String {
        self.arguments.to_string()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub thinking: Option<String>,
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
}

impl Reply {
    /// Reply characters / 4, at least 1.
    pub fn output_tokens(&self) -> u64 {
        let mut chars = self.text.chars().count();
        if let Some(t) = &self.thinking {
            chars += t.chars().count();
        }
        for call in &self.tool_calls {
            chars += call.name.chars().count() + call.arguments_string().chars().count();
        }
        ((chars / 4) as u64).max(1)
    }

    /// Thinking characters / 4 (0 without thinking).
    pub fn reasoning_tokens(&self) -> u64 {
        self.thinking
            .as_ref()
            .map(|t| ((t.chars().count() / 4) as u64).max(1))
            .unwrap_or(0)
    }
}

/// Request body bytes / 4.
pub(crate) fn input_tokens(body_len: usize) -> u64 {
    (body_len / 4) as u64
}

pub(crate) fn plan(
    conv: &Conversation,
    thinking: bool,
    config: &MockConfig,
    mut next_call: impl FnMut() -> u64,
) -> Reply {
    let thinking = thinking.then(|| THINKING_TEXT.to_string());
    let looping = parse_markers_opened(&conv.last_user_text, LOOP_OPEN);
    if conv.has_tools && (!conv.tool_result_after_user || !looping.is_empty()) {
        let markers = if looping.is_empty() {
            parse_markers(&conv.last_user_text)
        } else {
            looping
        };
        if !markers.is_empty() {
            let tool_calls = markers
                .into_iter()
                .map(|(name, arguments)| ToolCall {
                    seq: next_call(),
                    name,
                    arguments,
                })
                .collect();
            return Reply {
                thinking,
                text: String::new(),
                tool_calls,
            };
        }
    }
    let text = if !conv.trailing_tool_results.is_empty() {
        let joined = conv.trailing_tool_results.join("\n");
        let head: String = joined.chars().take(200).collect();
        format!("tool result: {head}")
    } else if let Some(fixed) = &config.reply_text {
        fixed.clone()
    } else {
        format!("echo: {}", conv.last_user_text)
    };
    Reply {
        thinking,
        text,
        tool_calls: Vec::new(),
    }
}

/// Every well-formed `[[call:NAME {json}]]` marker in `text`, in order. The JSON is
/// optional (`[[call:NAME]]` means `{}`); malformed markers are skipped.
pub(crate) fn parse_markers(text: &str) -> Vec<(String, Value)> {
    parse_markers_opened(text, "[[call:")
}

/// The marker name that makes a call with an empty name: `[[call:<empty>]]`.
const EMPTY_NAME: &str = "<empty>";

/// The opening of a marker called on every turn.
const LOOP_OPEN: &str = "[[loop:";

/// [`parse_markers`] for markers that open with `OPEN`.
fn parse_markers_opened(text: &str, open: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find(open) {
        let after = &rest[pos + open.len()..];
        let name_end = after
            .find(|c: char| c.is_whitespace() || c == ']' || c == '{')
            .unwrap_or(after.len());
        let name = &after[..name_end];
        let tail = after[name_end..].trim_start();
        let parsed = if let Some(remaining) = tail.strip_prefix("]]") {
            Some((json!({}), remaining))
        } else {
            let mut values = serde_json::Deserializer::from_str(tail).into_iter::<Value>();
            match values.next() {
                Some(Ok(args)) => {
                    let end = values.byte_offset();
                    tail[end..]
                        .trim_start()
                        .strip_prefix("]]")
                        .map(|remaining| (args, remaining))
                }
                _ => None,
            }
        };
        match parsed {
            Some((args, remaining)) if !name.is_empty() => {
                // `<empty>` stands for a call with an empty name (a broken model's).
                let name = if name == EMPTY_NAME { "" } else { name };
                out.push((name.to_string(), args));
                rest = remaining;
            }
            _ => rest = after,
        }
    }
    out
}

/// Split `text` into `min(n, chars)` (n at least 1) non-empty pieces whose character
/// counts differ by at most one. Empty text gives no pieces.
pub(crate) fn split(text: &str, n: usize) -> Vec<&str> {
    let total = text.chars().count();
    if total == 0 {
        return Vec::new();
    }
    let n = n.clamp(1, total);
    let (base, extra) = (total / n, total % n);
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    let mut count = 0;
    let mut want = base + usize::from(extra > 0);
    for (i, _) in text.char_indices() {
        if count == want {
            out.push(&text[start..i]);
            start = i;
            count = 0;
            want = base + usize::from(out.len() < extra);
        }
        count += 1;
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers() {
        let m =
            parse_markers(r#"do [[call:read {"path":"a]]b"}]] and [[call:ls]] [[call:x {bad]]"#);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].0, "read");
        assert_eq!(m[0].1, json!({"path": "a]]b"}));
        assert_eq!(m[1], ("ls".to_string(), json!({})));
    }

    #[test]
    fn splits() {
        assert_eq!(split("abcdefgh", 4), vec!["ab", "cd", "ef", "gh"]);
        assert_eq!(split("abcde", 4), vec!["ab", "c", "d", "e"]);
        assert_eq!(split("ab", 4), vec!["a", "b"]);
        assert_eq!(split("héllo", 1), vec!["héllo"]);
        assert!(split("", 3).is_empty());
        assert_eq!(split("xyz", 0), vec!["xyz"]);
    }
}
