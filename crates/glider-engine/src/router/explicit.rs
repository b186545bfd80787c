//! The explicit rule: the user says where a request goes. A leading `/local`,
//! `/cloud` or `/via <backend>` in the last user message (stripped before the request
//! is forwarded), or a request header (`x-glider-route: local|cloud|<backend>`), or a
//! model name of the form `<backend>/<model>` or naming a backend. Claude Code refuses
//! an unknown slash command, so there a flag comes through a custom command file
//! (`glider setup claude`): the message then holds Claude Code's record of the command
//! (`<command-message>…<command-name>/local</command-name><command-args>…`) and the
//! expanded text; the flag is read from either, and both are stripped. Delegation
//! flags (`/claude`, `/cursor-agent`, `/agy`) are not routing flags: they bypass the
//! pipeline.

use bytes::Bytes;
use glider_ngl::{Dialect, Part, Request, Role};
use http::HeaderMap;
use serde_json::Value;

use super::Target;

pub use glider_vocab::DELEGATION_FLAGS;

/// The routing flags, as typed (`/via` takes a backend name after it).
pub const ROUTING_FLAGS: &[&str] = &["/local", "/cloud", "/via"];

/// A routing flag found at the start of a text part of the last user message.
#[derive(Debug, Clone, PartialEq)]
pub struct Flag {
    pub target: Target,
    /// The exact text to remove (flag and following whitespace); empty when the flag
    /// came only in a command block.
    pub prefix: String,
    /// The text part holding Claude Code's record of the custom command that carried
    /// the flag, removed whole (it names the flag).
    pub command_block: Option<String>,
}

/// The routing flag a Claude Code command block names, written back as the user typed
/// it (`/via vllm rest`), if the text is such a block.
fn command_block_flag(text: &str) -> Option<Flag> {
    if !text.trim_start().starts_with("<command-") {
        return None;
    }
    let name = between(text, "<command-name>", "</command-name>")?.trim();
    let args = between(text, "<command-args>", "</command-args>").unwrap_or_default();
    let typed = format!("{name} {}", args.trim());
    let flag = parse_flag(&typed)?;
    Some(Flag {
        prefix: String::new(),
        command_block: Some(text.to_owned()),
        ..flag
    })
}

/// The text between the first `open` and the `close` after it.
fn between<'t>(text: &'t str, open: &str, close: &str) -> Option<&'t str> {
    let start = text.find(open)? + open.len();
    let len = text[start..].find(close)?;
    Some(&text[start..start + len])
}

/// Parse a flag at the start of `text`.
pub fn parse_flag(text: &str) -> Option<Flag> {
    let trimmed = text.trim_start();
    let leading = text.len() - trimmed.len();
    let mut words = trimmed.splitn(3, char::is_whitespace);
    let first = words.next()?;
    let (target, consumed) = match first {
        "/local" => (Target::Local, first.len()),
        "/cloud" => (Target::Cloud, first.len()),
        "/via" => {
            let backend = words.next().filter(|b| !b.is_empty())?;
            (
                Target::Backend(backend.to_owned()),
                trimmed.find(backend)? + backend.len(),
            )
        }
        _ => return None,
    };
    // The flag must be a whole word: `/localhost` is not `/local`.
    let rest = &trimmed[consumed..];
    if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
        return None;
    }
    let after = rest.len() - rest.trim_start().len();
    Some(Flag {
        target,
        prefix: text[..leading + consumed + after].to_owned(),
        command_block: None,
    })
}

/// The routing flag of the request's last user message, if any: a text part that
/// starts with one, or a Claude Code command block that names one (with the expanded
/// text after it, whose leading flag goes too).
pub fn find_flag(request: &Request) -> Option<Flag> {
    let turn = request.turns.iter().rev().find(|t| t.role == Role::User)?;
    let texts = || glider_ngl::texts(&turn.parts);
    let typed = texts().find_map(parse_flag);
    match texts().find_map(command_block_flag) {
        Some(block) => Some(Flag {
            prefix: typed
                .filter(|t| t.target == block.target)
                .map(|t| t.prefix)
                .unwrap_or_default(),
            ..block
        }),
        None => typed,
    }
}

/// Remove `flag` from the request (its decoded form).
pub fn strip_from_request(request: &mut Request, flag: &Flag) {
    let Some(turn) = request
        .turns
        .iter_mut()
        .rev()
        .find(|t| t.role == Role::User)
    else {
        return;
    };
    if let Some(block) = &flag.command_block {
        turn.parts
            .retain(|part| !matches!(part, Part::Text { text, .. } if text == block));
    }
    if flag.prefix.is_empty() {
        return;
    }
    for part in &mut turn.parts {
        if let Part::Text { text, .. } = part
            && let Some(rest) = text.strip_prefix(flag.prefix.as_str())
        {
            *text = rest.to_owned();
            return;
        }
    }
}

/// Remove `flag` from the raw body, touching nothing else (unknown fields and key
/// order survive, so a same-dialect backend still gets the client's request).
pub fn strip_from_body(front: Dialect, body: &[u8], flag: &Flag) -> Option<Bytes> {
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let messages = match front {
        Dialect::OpenAiResponses => match value.get_mut("input")? {
            Value::String(text) => {
                return replace_prefix(text, flag)
                    .then(|| serialise(&value))
                    .flatten();
            }
            other => other,
        },
        _ => value.get_mut("messages")?,
    };
    let message = messages
        .as_array_mut()?
        .iter_mut()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    let stripped = match message.get_mut("content")? {
        Value::String(text) => replace_prefix(text, flag),
        Value::Array(parts) => {
            let before = parts.len();
            if let Some(block) = &flag.command_block {
                parts.retain(|part| part.get("text").and_then(Value::as_str) != Some(block));
            }
            let prefix = parts.iter_mut().any(|part| match part.get_mut("text") {
                Some(Value::String(text)) => replace_prefix(text, flag),
                _ => false,
            });
            prefix || parts.len() != before
        }
        _ => false,
    };
    if stripped { serialise(&value) } else { None }
}

fn replace_prefix(text: &mut String, flag: &Flag) -> bool {
    if flag.prefix.is_empty() {
        return false;
    }
    match text.strip_prefix(flag.prefix.as_str()) {
        Some(rest) => {
            *text = rest.to_owned();
            true
        }
        None => false,
    }
}

fn serialise(value: &Value) -> Option<Bytes> {
    serde_json::to_vec(value).ok().map(Bytes::from)
}

/// The target named by the configured header, if present.
pub fn header_target(headers: &HeaderMap, header: &str) -> Option<Target> {
    if header.is_empty() {
        return None;
    }
    let value = headers.get(header)?.to_str().ok()?.trim();
    Target::parse(value)
}

/// `<backend>/<model>` or a bare backend name, when `<backend>` is configured.
pub fn model_target(model: &str, backend_names: &[&str]) -> Option<(Target, Option<String>)> {
    if backend_names.contains(&model) {
        return Some((Target::Backend(model.to_owned()), None));
    }
    let (backend, rest) = model.split_once('/')?;
    backend_names
        .contains(&backend)
        .then(|| (Target::Backend(backend.to_owned()), Some(rest.to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_dialects::codec;
    use glider_test_support::captured::captured_file;
    use serde_json::json;

    #[test]
    fn flags_are_whole_leading_words() {
        assert_eq!(
            parse_flag("/local fix it").map(|f| f.target),
            Some(Target::Local)
        );
        assert_eq!(
            parse_flag("  /cloud\nfix it").map(|f| f.prefix),
            Some("  /cloud\n".into())
        );
        assert_eq!(
            parse_flag("/via vllm do it").map(|f| f.target),
            Some(Target::Backend("vllm".into()))
        );
        assert_eq!(
            parse_flag("/via vllm do it").map(|f| f.prefix),
            Some("/via vllm ".into())
        );
        assert_eq!(parse_flag("/localhost is down"), None);
        assert_eq!(parse_flag("please /local"), None);
        assert_eq!(parse_flag("/via"), None);
        assert_eq!(parse_flag("/claude do it"), None);
        for flag in ROUTING_FLAGS {
            assert!(parse_flag(&format!("{flag} b rest")).is_some(), "{flag}");
        }
    }

    /// Claude Code 2.1.197's captured `/local what is 2+2` turn (through the command
    /// file `glider setup claude` writes), with the command renamed to `name`, its
    /// arguments made `args` and its expanded text `expanded` (left out when `None`, as
    /// a command file without `$ARGUMENTS` sends it): the captures hold only `/local`
    /// and `/cloud`, so the other commands are derived from the real turn.
    fn claude_code_command(name: &str, args: &str, expanded: Option<&str>) -> Value {
        let mut body = captured_file("claude-code", "local-flag", "002-messages").body;
        let content = body["messages"][0]["content"]
            .as_array_mut()
            .expect("the prompt's blocks");
        let block = content[1]["text"]
            .as_str()
            .expect("the command block")
            .replace("local", name.trim_start_matches('/'))
            .replace("what is 2+2", args);
        content[1]["text"] = block.into();
        match expanded {
            Some(text) => content[2]["text"] = text.into(),
            None => {
                content.remove(2);
            }
        }
        body
    }

    #[test]
    fn a_derived_command_turn_is_what_claude_code_sends() {
        let derived = claude_code_command("/cloud", "what is 2+2", Some("/cloud what is 2+2\n"));
        let real = captured_file("claude-code", "cloud-flag", "002-messages").body;
        assert_eq!(derived["messages"], real["messages"]);
    }

    #[test]
    fn a_claude_code_command_block_is_a_flag_and_is_stripped_whole() {
        let cases = [
            ("/local", "say hi", Some("/local say hi\n"), Target::Local),
            ("/cloud", "say hi", None, Target::Cloud),
            (
                "/via",
                "vllm say hi",
                Some("/via vllm say hi\n"),
                Target::Backend("vllm".into()),
            ),
        ];
        for (name, args, expanded, target) in cases {
            let body = claude_code_command(name, args, expanded);
            let request = codec(Dialect::Anthropic)
                .decode_request(body.to_string().as_bytes())
                .expect("decodes");
            let flag = find_flag(&request).unwrap_or_else(|| panic!("{name}: no flag"));
            assert_eq!(flag.target, target, "{name}");

            let stripped = strip_from_body(Dialect::Anthropic, body.to_string().as_bytes(), &flag)
                .expect("stripped");
            // The prompt's message (the body's tools and system text name `/local` too).
            let stripped: Value = serde_json::from_slice(&stripped).expect("JSON");
            let text = stripped["messages"][0].to_string();
            assert!(
                !text.contains("command-name") && !text.contains(name),
                "{name}: {text}"
            );
            assert!(
                text.contains("system-reminder"),
                "{name}: the rest stays: {text}"
            );
            let mut request = request;
            strip_from_request(&mut request, &flag);
            // The prompt's turn (the system text comes first, a system entry after it).
            let left = request
                .turns
                .iter()
                .find(|t| t.role == Role::User)
                .expect("the prompt")
                .plain_text();
            assert!(
                !left.contains("command-") && !left.contains(name),
                "{name}: {left}"
            );
            if expanded.is_some() {
                assert!(left.ends_with("say hi\n"), "{name}: {left:?}");
            }
        }
        // Another custom command is not a flag.
        let body = claude_code_command("/review", "the parser", Some("Review the parser\n"));
        let request = codec(Dialect::Anthropic)
            .decode_request(body.to_string().as_bytes())
            .expect("decodes");
        assert_eq!(find_flag(&request), None);
    }

    #[test]
    fn stripping_the_body_keeps_everything_else() {
        let body = json!({"model": "m", "z_unknown": {"keep": true}, "messages": [
            {"role": "user", "content": "/cloud old"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}, {"type": "text", "text": "/cloud now"}]}
        ]});
        let flag = parse_flag("/cloud now").expect("flag");
        let stripped = strip_from_body(Dialect::Anthropic, body.to_string().as_bytes(), &flag)
            .expect("stripped");
        let value: Value = serde_json::from_slice(&stripped).expect("json");
        assert_eq!(value["messages"][2]["content"][1]["text"], "now");
        assert_eq!(
            value["messages"][0]["content"], "/cloud old",
            "only the last user message"
        );
        assert_eq!(value["z_unknown"], json!({"keep": true}));
        let keys: Vec<&String> = value.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["model", "z_unknown", "messages"], "key order kept");

        let body = json!({"model": "m", "input": "/local hi"});
        let stripped = strip_from_body(
            Dialect::OpenAiResponses,
            body.to_string().as_bytes(),
            &parse_flag("/local hi").expect("flag"),
        )
        .expect("stripped");
        assert_eq!(
            serde_json::from_slice::<Value>(&stripped).expect("json")["input"],
            "hi"
        );
    }

    #[test]
    fn model_names_can_name_a_backend() {
        let names = ["local", "claude"];
        assert_eq!(
            model_target("local", &names),
            Some((Target::Backend("local".into()), None))
        );
        assert_eq!(
            model_target("claude/claude-opus-4", &names),
            Some((
                Target::Backend("claude".into()),
                Some("claude-opus-4".into())
            ))
        );
        assert_eq!(model_target("Qwen/Qwen2.5", &names), None);
    }
}
