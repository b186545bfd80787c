//! OpenAI Chat Completions codec (`POST /v1/chat/completions`), the dialect vLLM and
//! llama.cpp's server speak too: requests, `chat.completion` replies, SSE streams of
//! `chat.completion.chunk` ending in `data: [DONE]`, and `{"error":{...}}` bodies. Mapping
//! notes: `docs/translation.md#openai-chat-completions`.

mod borrowed;
mod error;
#[cfg(test)]
pub(crate) mod fixtures;
mod request;
mod response;
mod stream;

// The Ollama codec shares Chat's message walk, tool shapes, error bodies and
// sampling-field readers; the Responses codec its image URLs and clock.
pub(crate) use error::{decode_error, error_fields};
pub(crate) use request::{
    CallsOf, Message, decode_message_list, decode_tool_calls, decode_tools, encode_tools,
    image_source, image_url, model_and_messages, take_stop, take_top_k, unsupported_role,
};
pub(crate) use response::now_unix;

use glider_ngl::Dialect;

/// The OpenAI Chat Completions codec (also vLLM and llama.cpp's server).
pub struct OpenAiChat;

dialect_codec! {
    codec: OpenAiChat,
    dialect: Dialect::OpenAiChat,
    stream_content_type: "text/event-stream",
    stream_decoder: stream::ChatStreamDecoder,
    stream_encoder: stream::ChatStreamEncoder,
    reply_text: borrowed::reply_text,
    client_stream_encoder: stream::client_stream_encoder,
}
