//! Pure codecs (no I/O), one per wire dialect: each decodes its
//! requests, responses, streams and errors into ngl and encodes them back. The
//! [`Codec`] trait is the one surface the pipeline and gateway use; [`codec`] picks the
//! implementation for a [`Dialect`]. Framing helpers (SSE, NDJSON) live in [`framing`].

pub mod anthropic;
pub mod framing;
pub mod ollama;
pub mod openai_chat;
pub mod openai_responses;

use glider_ngl::{ApiError, Dialect, Request, Response, StreamEvent};
use serde_json::Value;

/// Incremental decoder of a backend's streamed reply into ngl events.
pub trait StreamDecoder: Send {
    /// Feed the next chunk of raw bytes (chunks may split lines or events anywhere).
    /// Returns the events completed so far. An `Err` is a malformed stream.
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ApiError>;
    /// The backend closed the stream. Returns any trailing events; a stream that ended
    /// before its terminal event yields a `StreamEvent::Error` (never a silent success).
    fn finish(&mut self) -> Vec<StreamEvent>;
}

/// Incremental encoder of ngl events into a client's stream dialect.
pub trait StreamEncoder: Send {
    /// Append the wire bytes for `event` to `out` (nothing, if the dialect has no
    /// counterpart). `Finish` writes the dialect's terminator (`[DONE]`,
    /// `message_stop`, ...); `Error` writes its error event.
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>);
}

/// One wire dialect. Implementations are stateless unit structs.
pub trait Codec: Sync {
    fn dialect(&self) -> Dialect;
    /// A client's request body. Errors are client errors (400) with a clear message.
    fn decode_request(&self, body: &[u8]) -> Result<Request, ApiError>;
    /// The body to send a backend of this dialect (honours `req.stream`).
    fn encode_request(&self, req: &Request) -> Value;
    /// A backend's non-streamed reply body. Errors are `BadGateway`.
    fn decode_response(&self, body: &[u8]) -> Result<Response, ApiError>;
    /// The non-streamed reply body a client of this dialect expects.
    fn encode_response(&self, resp: &Response) -> Value;
    fn stream_decoder(&self) -> Box<dyn StreamDecoder>;
    fn stream_encoder(&self) -> Box<dyn StreamEncoder>;
    /// Content type of this dialect's stream (`text/event-stream`, `application/x-ndjson`).
    fn stream_content_type(&self) -> &'static str;
    /// The error body a client of this dialect expects (status: `err.kind.status()`).
    fn encode_error(&self, err: &ApiError) -> Value;
    /// Read a backend's error reply (non-2xx) into an [`ApiError`], keeping its message.
    fn decode_error(&self, status: u16, body: &[u8]) -> ApiError;
}

/// The codec for `dialect`.
pub fn codec(dialect: Dialect) -> &'static dyn Codec {
    match dialect {
        Dialect::Anthropic => &anthropic::Anthropic,
        Dialect::OpenAiChat => &openai_chat::OpenAiChat,
        Dialect::OpenAiResponses => &openai_responses::OpenAiResponses,
        Dialect::Ollama => &ollama::Ollama,
    }
}

/// Parse a JSON body, turning serde's error into a 400 a client can act on.
pub fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))
}
