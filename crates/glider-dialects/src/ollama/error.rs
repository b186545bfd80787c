//! Ollama error bodies (`{"error": "..."}`) both ways.

use glider_ngl::ApiError;
use serde_json::{Value, json};

/// A backend's error reply reads like a Chat Completions one (`error` as a string or an
/// object), so Ollama shares that reader.
pub(super) use crate::openai_chat::decode_error;

/// The error body an Ollama client expects: the message alone.
pub(super) fn encode_error(err: &ApiError) -> Value {
    json!({"error": err.message})
}

#[cfg(test)]
mod tests {
    use glider_ngl::ApiError;
    use glider_ngl::ErrorKind;
    use serde_json::json;

    use crate::Codec;
    use crate::ollama::Ollama;

    #[test]
    fn error_bodies() {
        assert_eq!(
            Ollama.encode_error(&ApiError::new(
                ErrorKind::NotFound,
                "model \"x\" not found, try pulling it first"
            )),
            json!({"error": "model \"x\" not found, try pulling it first"})
        );
        let err = Ollama.decode_error(
            404,
            br#"{"error":"model \"llama9\" not found, try pulling it first"}"#,
        );
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert_eq!(
            err.message,
            "model \"llama9\" not found, try pulling it first"
        );
        let err = Ollama.decode_error(500, b"Internal Server Error");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert_eq!(err.message, "Internal Server Error");
        let err = Ollama.decode_error(400, br#"{"error": {"message": "bad"}}"#);
        assert_eq!(err.message, "bad");
    }
}
