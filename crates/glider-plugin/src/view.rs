//! What a plugin is shown of a request: Glider's ngl [`Request`] as JSON, cut to the
//! fields its manifest `reads` (plus `model`), with every prompt text replaced by
//! `"[hidden: N chars]"` unless the config grants `allow_prompt_text`.

use glider_ngl::Request;
use serde_json::{Map, Value};

/// The keys whose values carry what a user or a tool wrote (text, thinking, tool-call
/// arguments, tool results' text, image data, a vendor's raw part).
const PROMPT_KEYS: &[&str] = &[
    "text",
    "arguments",
    "data",
    "raw",
    "redacted",
    "signature",
    "url",
];

/// The view of `request` for a plugin that reads `reads` and may (or may not) see text.
pub fn request(request: &Request, reads: &[String], prompt_text: bool) -> Value {
    let Ok(Value::Object(all)) = serde_json::to_value(request) else {
        return Value::Null;
    };
    let mut shown: Map<String, Value> = all
        .into_iter()
        .filter(|(key, _)| key == "model" || reads.iter().any(|r| r == key))
        .collect();
    if !prompt_text {
        for value in shown.values_mut() {
            hide(value);
        }
    }
    Value::Object(shown)
}

fn hide(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                if PROMPT_KEYS.contains(&key.as_str()) {
                    *inner = Value::String(format!("[hidden: {} chars]", chars(inner)));
                } else {
                    hide(inner);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(hide),
        _ => {}
    }
}

fn chars(value: &Value) -> usize {
    match value {
        Value::String(text) => text.chars().count(),
        other => other.to_string().chars().count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::{Role, Turn};

    #[test]
    fn text_is_hidden_unless_granted_and_only_read_fields_are_shown() {
        let request = Request {
            turns: vec![Turn::text(Role::User, "my secret is hunter2")],
            max_tokens: Some(64),
            model: "m".into(),
            ..Request::default()
        };
        let hidden = request_view(&request, false);
        assert!(!hidden.to_string().contains("hunter2"), "{hidden}");
        assert_eq!(hidden["turns"][0]["parts"][0]["text"], "[hidden: 20 chars]");
        assert!(hidden.get("max_tokens").is_none(), "not in reads");
        let shown = request_view(&request, true);
        assert_eq!(
            shown["turns"][0]["parts"][0]["text"],
            "my secret is hunter2"
        );
        assert_eq!(shown["model"], "m");
    }

    fn request_view(request: &Request, prompt_text: bool) -> Value {
        super::request(request, &["turns".to_owned()], prompt_text)
    }
}
