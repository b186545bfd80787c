//! Anthropic error bodies (`{type: error, error: {type, message}}`) both ways.

use glider_ngl::{ApiError, ErrorKind};
use serde_json::{Value, json};

/// Longest backend error text kept when the body is not Anthropic's error JSON.
const MAX_ERROR_TEXT: usize = 500;

fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::Permission => "permission_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::RequestTooLarge => "request_too_large",
        ErrorKind::RateLimit => "rate_limit_error",
        ErrorKind::Internal | ErrorKind::BadGateway | ErrorKind::Timeout => "api_error",
        ErrorKind::Unavailable | ErrorKind::Overloaded => "overloaded_error",
    }
}

/// Anthropic's error type → kind (`api_error` is the backend's own fault: bad gateway).
fn kind_of_error_type(kind: &str) -> Option<ErrorKind> {
    Some(match kind {
        "invalid_request_error" => ErrorKind::InvalidRequest,
        "authentication_error" => ErrorKind::Authentication,
        "permission_error" | "billing_error" => ErrorKind::Permission,
        "not_found_error" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::RequestTooLarge,
        "rate_limit_error" => ErrorKind::RateLimit,
        "api_error" => ErrorKind::BadGateway,
        "timeout_error" => ErrorKind::Timeout,
        "overloaded_error" => ErrorKind::Overloaded,
        _ => return None,
    })
}

pub(super) fn encode_error(err: &ApiError) -> Value {
    json!({
        "type": "error",
        "error": { "type": error_type(err.kind), "message": err.message },
    })
}

/// `{"type":"error","error":{"type","message"}}` (or a bare `{"error": "..."}`).
pub(super) fn error_from_json(value: &Value, status: u16) -> Option<ApiError> {
    let error = value.get("error")?;
    let (kind, message) = match error {
        Value::String(message) => (None, message.clone()),
        Value::Object(obj) => (
            obj.get("type").and_then(Value::as_str),
            obj.get("message").and_then(Value::as_str)?.to_owned(),
        ),
        _ => return None,
    };
    let kind = kind
        .and_then(kind_of_error_type)
        .unwrap_or_else(|| ErrorKind::from_status(status));
    Some(ApiError::new(kind, message))
}

pub(super) fn decode_error(status: u16, body: &[u8]) -> ApiError {
    if let Some(err) = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| error_from_json(&v, status))
    {
        return err;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let message = if text.is_empty() {
        format!("backend returned HTTP {status}")
    } else {
        truncate_chars(text, MAX_ERROR_TEXT)
    };
    ApiError::new(ErrorKind::from_status(status), message)
}

fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use glider_ngl::{ApiError, ErrorKind};
    use serde_json::json;

    use crate::Codec;
    use crate::anthropic::Anthropic;

    #[test]
    fn encodes_every_error_kind() {
        let cases = [
            (ErrorKind::InvalidRequest, "invalid_request_error"),
            (ErrorKind::Authentication, "authentication_error"),
            (ErrorKind::Permission, "permission_error"),
            (ErrorKind::NotFound, "not_found_error"),
            (ErrorKind::RequestTooLarge, "request_too_large"),
            (ErrorKind::RateLimit, "rate_limit_error"),
            (ErrorKind::Internal, "api_error"),
            (ErrorKind::BadGateway, "api_error"),
            (ErrorKind::Timeout, "api_error"),
            (ErrorKind::Unavailable, "overloaded_error"),
            (ErrorKind::Overloaded, "overloaded_error"),
        ];
        for (kind, wire) in cases {
            let body = Anthropic.encode_error(&ApiError::new(kind, "something happened"));
            assert_eq!(
                body,
                json!({"type": "error", "error": {"type": wire, "message": "something happened"}})
            );
        }
        let err = ApiError::invalid("max_tokens: Field required").with_param("max_tokens");
        let body = Anthropic.encode_error(&err);
        let back = Anthropic.decode_error(400, body.to_string().as_bytes());
        assert_eq!(back.kind, ErrorKind::InvalidRequest);
        assert_eq!(back.message, "max_tokens: Field required");
    }

    #[test]
    fn decodes_backend_errors() {
        let err = Anthropic.decode_error(
            529,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#,
        );
        assert_eq!(err, ApiError::new(ErrorKind::Overloaded, "Overloaded"));
        let err = Anthropic.decode_error(
            429,
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 80,000 input tokens per minute."}}"#,
        );
        assert_eq!(err.kind, ErrorKind::RateLimit);
        assert!(err.message.starts_with("This request would exceed"));
        // An unknown type falls back on the status.
        let err = Anthropic.decode_error(
            404,
            br#"{"type":"error","error":{"type":"model_missing","message":"model: claude-9"}}"#,
        );
        assert_eq!(err, ApiError::new(ErrorKind::NotFound, "model: claude-9"));
        // OpenAI-compatible servers behind an Anthropic endpoint.
        let err = Anthropic.decode_error(500, br#"{"error":{"message":"CUDA out of memory"}}"#);
        assert_eq!(
            err,
            ApiError::new(ErrorKind::BadGateway, "CUDA out of memory")
        );
        // Not JSON: the body text, truncated to 500 characters.
        let html = format!("<html><body>{}</body></html>", "\u{e9}".repeat(600));
        let err = Anthropic.decode_error(502, html.as_bytes());
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert_eq!(err.message.chars().count(), 500);
        assert!(err.message.starts_with("<html><body>\u{e9}"));
        let err = Anthropic.decode_error(503, b"  ");
        assert_eq!(
            err,
            ApiError::new(ErrorKind::Unavailable, "backend returned HTTP 503")
        );
    }
}
