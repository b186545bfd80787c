//! Chat Completions error bodies (`{"error": {message, type, code}}`) both ways; the
//! backend reader is shared with the Ollama codec.

use glider_ngl::{ApiError, ErrorKind};
use serde_json::{Value, json};

/// Message and param of a backend's error body, whatever its shape
/// (`{"error":{"message"}}`, `{"error":"..."}`, `{"message"}`, `{"detail"}`), else the
/// raw text, else a line naming the status.
pub(crate) fn decode_error(status: u16, body: &[u8]) -> ApiError {
    let kind = ErrorKind::from_status(status);
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let (message, param) = error_fields(&value);
        if let Some(message) = message {
            let error = ApiError::new(kind, message);
            return match param {
                Some(param) => error.with_param(param),
                None => error,
            };
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message = if text.is_empty() {
        format!("backend returned HTTP {status}")
    } else {
        text.chars().take(2000).collect()
    };
    ApiError::new(kind, message)
}

/// Message and param of an error object in any of the usual shapes.
pub(crate) fn error_fields(value: &Value) -> (Option<String>, Option<String>) {
    let param = |v: &Value| v.get("param").and_then(Value::as_str).map(str::to_owned);
    match value.get("error") {
        Some(Value::String(message)) => return (Some(message.clone()), None),
        Some(err @ Value::Object(_)) => {
            if let Some(message) = err.get("message").and_then(Value::as_str) {
                return (Some(message.to_owned()), param(err));
            }
        }
        _ => {}
    }
    for key in ["message", "detail"] {
        if let Some(message) = value.get(key).and_then(Value::as_str) {
            return (Some(message.to_owned()), param(value));
        }
    }
    (None, None)
}

fn error_type_and_code(kind: ErrorKind) -> (&'static str, Option<&'static str>) {
    match kind {
        ErrorKind::InvalidRequest => ("invalid_request_error", None),
        ErrorKind::Authentication => ("authentication_error", Some("invalid_api_key")),
        ErrorKind::Permission => ("permission_error", None),
        ErrorKind::NotFound => ("invalid_request_error", Some("model_not_found")),
        ErrorKind::RequestTooLarge => ("invalid_request_error", Some("request_too_large")),
        ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
        ErrorKind::Internal | ErrorKind::BadGateway => ("server_error", None),
        ErrorKind::Unavailable => ("server_error", Some("service_unavailable")),
        ErrorKind::Timeout => ("server_error", Some("timeout")),
        ErrorKind::Overloaded => ("server_error", Some("overloaded")),
    }
}

pub(super) fn error_object(err: &ApiError) -> Value {
    let (kind, code) = error_type_and_code(err.kind);
    json!({
        "message": err.message,
        "type": kind,
        "param": err.param,
        "code": code,
    })
}

/// The error body a Chat Completions client expects.
pub(super) fn encode_error(err: &ApiError) -> Value {
    json!({"error": error_object(err)})
}

#[cfg(test)]
mod tests {
    use glider_ngl::{ApiError, ErrorKind};
    use serde_json::{Value, json};

    use crate::Codec;
    use crate::openai_chat::OpenAiChat;

    #[test]
    fn error_bodies() {
        let cases = [
            (
                ErrorKind::InvalidRequest,
                "invalid_request_error",
                Value::Null,
            ),
            (
                ErrorKind::Authentication,
                "authentication_error",
                json!("invalid_api_key"),
            ),
            (ErrorKind::Permission, "permission_error", Value::Null),
            (
                ErrorKind::NotFound,
                "invalid_request_error",
                json!("model_not_found"),
            ),
            (
                ErrorKind::RequestTooLarge,
                "invalid_request_error",
                json!("request_too_large"),
            ),
            (
                ErrorKind::RateLimit,
                "requests",
                json!("rate_limit_exceeded"),
            ),
            (ErrorKind::Internal, "server_error", Value::Null),
            (ErrorKind::BadGateway, "server_error", Value::Null),
            (
                ErrorKind::Unavailable,
                "server_error",
                json!("service_unavailable"),
            ),
            (ErrorKind::Overloaded, "server_error", json!("overloaded")),
        ];
        for (kind, wire_type, code) in cases {
            let body = OpenAiChat.encode_error(&ApiError::new(kind, "boom"));
            assert_eq!(
                body,
                json!({"error": {"message": "boom", "type": wire_type, "param": null, "code": code}})
            );
        }
        let body = OpenAiChat.encode_error(
            &ApiError::invalid("messages.0.content: required").with_param("messages.0.content"),
        );
        assert_eq!(body["error"]["param"], json!("messages.0.content"));

        let err = OpenAiChat.decode_error(
            404,
            br#"{"error": {"message": "The model `gpt-5` does not exist", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}"#,
        );
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert_eq!(err.message, "The model `gpt-5` does not exist");
        assert_eq!(err.param.as_deref(), Some("model"));
        let err = OpenAiChat.decode_error(
            400,
            br#"{"object": "error", "message": "This model's maximum context length is 4096 tokens.", "type": "BadRequestError", "param": null, "code": 400}"#,
        );
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert_eq!(
            err.message,
            "This model's maximum context length is 4096 tokens."
        );
        let err = OpenAiChat.decode_error(503, b"<html>Service Unavailable</html>\n");
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert_eq!(err.message, "<html>Service Unavailable</html>");
        let err = OpenAiChat.decode_error(500, b"");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert_eq!(err.message, "backend returned HTTP 500");
        let err = OpenAiChat.decode_error(429, br#"{"detail": "slow down"}"#);
        assert_eq!(err.kind, ErrorKind::RateLimit);
        assert_eq!(err.message, "slow down");
    }
}
