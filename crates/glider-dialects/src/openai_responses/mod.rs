//! OpenAI Responses API codec (`POST /v1/responses`): request bodies, `Response` objects,
//! the typed SSE event stream (`response.created` … `response.completed`) and error bodies,
//! as Codex CLI (`wire_api = "responses"`) and the official `openai` SDK speak them.
//! Mapping notes: `docs/translation.md#openai-responses`.

mod error;
#[cfg(test)]
mod fixtures;
mod items;
mod request;
mod response;
mod stream;

use glider_ngl::Dialect;

/// The OpenAI Responses API dialect.
pub struct OpenAiResponses;

dialect_codec! {
    codec: OpenAiResponses,
    dialect: Dialect::OpenAiResponses,
    stream_content_type: "text/event-stream",
    stream_decoder: stream::ResponsesStreamDecoder,
    stream_encoder: stream::ResponsesStreamEncoder,
}

/// See [`crate::usage_stream_decoder`].
pub(crate) fn usage_stream_decoder(with_tool_calls: bool) -> Box<dyn crate::StreamDecoder> {
    Box::new(stream::ResponsesStreamDecoder::usage_only(with_tool_calls))
}
