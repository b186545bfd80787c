//! Ollama native chat codec (`POST /api/chat`): requests, replies, NDJSON streams (one JSON
//! object a line, the last with `done: true`) and `{"error":"..."}` bodies, to and from
//! ngl. Mapping notes: `docs/translation.md#ollama`.

mod borrowed;
mod error;
#[cfg(test)]
mod fixtures;
mod request;
mod response;

pub use response::rfc3339_now;
mod stream;

use glider_ngl::Dialect;

/// The Ollama native chat codec.
pub struct Ollama;

dialect_codec! {
    codec: Ollama,
    dialect: Dialect::Ollama,
    stream_content_type: "application/x-ndjson",
    stream_decoder: stream::OllamaStreamDecoder,
    stream_encoder: stream::OllamaStreamEncoder,
}
