//! Anthropic Messages API codec (`POST /v1/messages`): requests, non-streamed replies, SSE
//! streams and error bodies between Anthropic's wire format and ngl, keeping Claude Code's
//! shapes (`cache_control`, signed thinking, server tools) wherever ngl can carry them.
//! Defaults and losses: `docs/translation.md#anthropic-messages`.

mod borrowed;
mod error;
#[cfg(test)]
mod fixtures;
mod request;
mod response;
mod stream;

pub use request::DEFAULT_MAX_TOKENS;

use glider_ngl::Dialect;

/// The Anthropic Messages dialect.
pub struct Anthropic;

dialect_codec! {
    codec: Anthropic,
    dialect: Dialect::Anthropic,
    stream_content_type: "text/event-stream",
    stream_decoder: stream::AnthropicStreamDecoder,
    stream_encoder: stream::AnthropicStreamEncoder,
}

/// See [`crate::usage_stream_decoder`].
pub(crate) fn usage_stream_decoder(with_tool_calls: bool) -> Box<dyn crate::StreamDecoder> {
    Box::new(stream::AnthropicStreamDecoder::usage_only(with_tool_calls))
}
