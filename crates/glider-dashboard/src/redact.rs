//! Secrets out of what the dashboard shows: API keys, header values, tokens and
//! passwords in a URL are replaced; a value written purely as `${VAR}` references keeps
//! the reference (it names where the secret comes from, not the secret). Any other
//! string has API keys of a known shape replaced ([`glider_sys::secrets`], the scanner
//! the context log and the history use too).

use glider_sys::secrets::redact_keys;
use serde_json::Value;

/// What a hidden value becomes.
pub const REDACTED: &str = "<redacted>";

/// Keys whose values are secret wherever they appear.
const SECRET_KEYS: [&str; 7] = [
    "api_key",
    "dashboard_token",
    "gateway_token",
    "token",
    "password",
    "secret",
    "authorization",
];

/// `value` with every secret replaced.
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, v)| {
                    let hidden = if SECRET_KEYS.contains(&key.to_ascii_lowercase().as_str()) {
                        hide(v)
                    } else if key == "headers" {
                        match v {
                            Value::Object(headers) => Value::Object(
                                headers.iter().map(|(k, v)| (k.clone(), hide(v))).collect(),
                            ),
                            other => hide(other),
                        }
                    } else {
                        redact(v)
                    };
                    (key.clone(), hidden)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::String(text) => Value::String(strip_userinfo(&redact_keys(text))),
        other => other.clone(),
    }
}

/// A secret's replacement: null stays null, pure `${VAR}` references stay, the rest goes.
fn hide(value: &Value) -> Value {
    match value {
        Value::Null => Value::Null,
        Value::String(text) if only_references(text) => value.clone(),
        _ => Value::String(REDACTED.into()),
    }
}

/// `text` is one or more `${NAME}` and nothing else.
fn only_references(text: &str) -> bool {
    let mut rest = text;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let Some(after) = rest.strip_prefix("${") else {
            return false;
        };
        let Some(end) = after.find('}') else {
            return false;
        };
        let name = &after[..end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return false;
        }
        rest = &after[end + 1..];
    }
    true
}

/// `scheme://user:pass@host/...` → `scheme://<redacted>@host/...`.
pub fn strip_userinfo(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{REDACTED}@{}", &rest[at + 1..]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_replaced_and_references_kept() {
        let config = json!({
            "server": {"dashboard_token": "tok-123", "bind": "127.0.0.1"},
            "routing": {"note": "pasted sk-ant-api03-Zq9xYw8vUt7sRq6pOn5mLk4j here"},
            "backends": [
                {"name": "a", "api_key": "sk-live-1", "base_url": "https://u:p@h.example/v1", "headers": {"x-key": "hv-1", "x-env": "${HV}"}},
                {"name": "b", "api_key": "${ANTHROPIC_API_KEY}", "base_url": "http://h", "headers": {}},
                {"name": "c", "api_key": null},
            ],
        });
        let shown = redact(&config);
        let text = shown.to_string();
        for secret in ["tok-123", "sk-live-1", "u:p", "hv-1", "Zq9xYw8v"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        assert_eq!(shown["backends"][1]["api_key"], "${ANTHROPIC_API_KEY}");
        assert_eq!(shown["backends"][0]["headers"]["x-env"], "${HV}");
        assert_eq!(shown["backends"][2]["api_key"], Value::Null);
        assert_eq!(
            shown["backends"][0]["base_url"],
            "https://<redacted>@h.example/v1"
        );
        assert_eq!(shown["server"]["bind"], "127.0.0.1");
        assert!(!only_references("Bearer ${X}"));
        assert!(only_references("${A}${B_2}"));
    }
}
