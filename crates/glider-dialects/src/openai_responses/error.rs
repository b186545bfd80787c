//! Responses API error bodies and `response.failed` error labels, both ways.

use glider_ngl::{ApiError, ErrorKind};
use serde_json::{Value, json};

use crate::json::str_field;

/// `(type, code)` of an error body, as the live OpenAI API labels them.
pub(super) fn error_labels(kind: ErrorKind) -> (&'static str, Option<&'static str>) {
    match kind {
        ErrorKind::InvalidRequest => ("invalid_request_error", None),
        ErrorKind::Authentication => ("invalid_request_error", Some("invalid_api_key")),
        ErrorKind::Permission => ("invalid_request_error", Some("permission_denied")),
        ErrorKind::NotFound => ("invalid_request_error", Some("model_not_found")),
        ErrorKind::RequestTooLarge => ("invalid_request_error", Some("request_too_large")),
        ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
        ErrorKind::Internal
        | ErrorKind::BadGateway
        | ErrorKind::Unavailable
        | ErrorKind::Timeout
        | ErrorKind::Overloaded => ("server_error", None),
    }
}

/// The `code` of a failed response (`ResponseError.code` has a closed set of values).
pub(super) fn failure_code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::RateLimit => "rate_limit_exceeded",
        ErrorKind::InvalidRequest | ErrorKind::RequestTooLarge => "invalid_prompt",
        _ => "server_error",
    }
}

/// The ngl kind of a streamed or failed-response error code.
fn kind_of_code(code: Option<&str>) -> ErrorKind {
    match code {
        Some("rate_limit_exceeded" | "insufficient_quota" | "too_many_requests") => {
            ErrorKind::RateLimit
        }
        Some(
            "invalid_prompt"
            | "context_length_exceeded"
            | "invalid_request_error"
            | "invalid_image"
            | "invalid_image_format"
            | "invalid_base64_image"
            | "invalid_image_url",
        ) => ErrorKind::InvalidRequest,
        _ => ErrorKind::BadGateway,
    }
}

/// An error carried by a `response.failed` / `error` event or a failed Response.
pub(super) fn error_from_value(err: &Value, fallback: &str) -> ApiError {
    let code = str_field(err, "code").or_else(|| str_field(err, "type"));
    let message = str_field(err, "message")
        .filter(|m| !m.is_empty())
        .unwrap_or(fallback);
    let mut error = ApiError::new(kind_of_code(code), message);
    error.param = str_field(err, "param").map(str::to_owned);
    error
}

/// The error body a Responses API client expects.
pub(super) fn encode_error(err: &ApiError) -> Value {
    let (kind, code) = error_labels(err.kind);
    json!({
        "error": {
            "message": err.message,
            "type": kind,
            "param": err.param,
            "code": code,
        }
    })
}

/// A backend's non-2xx reply as an [`ApiError`], keeping its message.
pub(super) fn decode_error(status: u16, body: &[u8]) -> ApiError {
    let kind = ErrorKind::from_status(status);
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let error = parsed.as_ref().map(|v| v.get("error").unwrap_or(v));
    let message = match error {
        Some(Value::String(s)) => Some(s.clone()),
        Some(e) => str_field(e, "message").map(str::to_owned),
        None => None,
    };
    let message = message.filter(|m| !m.trim().is_empty()).unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        if text.is_empty() {
            format!("backend returned HTTP {status}")
        } else {
            text.chars().take(500).collect()
        }
    });
    let mut api_error = ApiError::new(kind, message);
    api_error.param = error.and_then(|e| str_field(e, "param")).map(str::to_owned);
    api_error
}

#[cfg(test)]
mod tests {
    use glider_ngl::{ApiError, ErrorKind};
    use serde_json::json;

    use crate::openai_responses::fixtures::codec;

    #[test]
    fn error_bodies() {
        let err = ApiError::new(ErrorKind::NotFound, "The model `gpt-9` does not exist");
        assert_eq!(
            codec().encode_error(&err),
            json!({"error": {"message": "The model `gpt-9` does not exist",
                             "type": "invalid_request_error", "param": null, "code": "model_not_found"}})
        );
        let err = ApiError::invalid("input: required").with_param("input");
        assert_eq!(
            codec().encode_error(&err),
            json!({"error": {"message": "input: required", "type": "invalid_request_error",
                             "param": "input", "code": null}})
        );
        let body = codec().encode_error(&ApiError::new(ErrorKind::RateLimit, "Rate limit reached"));
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        let body = codec().encode_error(&ApiError::new(ErrorKind::BadGateway, "upstream died"));
        assert_eq!(body["error"]["type"], "server_error");

        let real = br#"{"error": {"message": "Incorrect API key provided: sk-***", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}"#;
        let err = codec().decode_error(401, real);
        assert_eq!(err.kind, ErrorKind::Authentication);
        assert_eq!(err.message, "Incorrect API key provided: sk-***");
        let err = codec().decode_error(
            400,
            br#"{"error": {"message": "Invalid value: 'x'.", "type": "invalid_request_error", "param": "input[0].content[0].type", "code": "invalid_value"}}"#,
        );
        assert_eq!(err.kind, ErrorKind::InvalidRequest);
        assert_eq!(err.param.as_deref(), Some("input[0].content[0].type"));
        let err = codec().decode_error(429, br#"{"error": {"message": "Rate limit reached for gpt-5", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}"#);
        assert_eq!(err.kind, ErrorKind::RateLimit);
        let err = codec().decode_error(502, b"<html>Bad Gateway</html>");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert_eq!(err.message, "<html>Bad Gateway</html>");
        let err = codec().decode_error(503, b"");
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert_eq!(err.message, "backend returned HTTP 503");
        // Our own error body reads back to the same error.
        let original = ApiError::invalid("tools[0].name: required").with_param("tools[0].name");
        let body = codec().encode_error(&original).to_string();
        assert_eq!(codec().decode_error(400, body.as_bytes()), original);
    }
}
