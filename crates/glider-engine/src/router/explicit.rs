//! The explicit rule: the user says where a request goes. A leading `/local`,
//! `/cloud` or `/via <backend>` in the last user message (stripped before the request
//! is forwarded), or a request header (`x-glider-route: local|cloud|<backend>`), or a
//! model name of the form `<backend>/<model>` or naming a backend. Delegation flags
//! (`/claude`, `/cursor-agent`, `/agy`) are not routing flags: they bypass the pipeline.

use bytes::Bytes;
use glider_ngl::{Dialect, Part, Request, Role};
use http::HeaderMap;
use serde_json::Value;

use super::Target;

/// Flags that hand a message to another CLI instead of routing it.
pub const DELEGATION_FLAGS: &[&str] = &["/claude", "/cursor-agent", "/agy"];

/// A routing flag found at the start of a text part of the last user message.
#[derive(Debug, Clone, PartialEq)]
pub struct Flag {
    pub target: Target,
    /// The exact text to remove (flag and following whitespace).
    pub prefix: String,
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
    })
}

/// The routing flag of the request's last user message, if any.
pub fn find_flag(request: &Request) -> Option<Flag> {
    let turn = request.turns.iter().rev().find(|t| t.role == Role::User)?;
    turn.parts.iter().find_map(|part| match part {
        Part::Text { text, .. } => parse_flag(text),
        _ => None,
    })
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
        Value::Array(parts) => parts.iter_mut().any(|part| match part.get_mut("text") {
            Some(Value::String(text)) => replace_prefix(text, flag),
            _ => false,
        }),
        _ => false,
    };
    if stripped { serialise(&value) } else { None }
}

fn replace_prefix(text: &mut String, flag: &Flag) -> bool {
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
