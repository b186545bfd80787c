//! Pure codecs (no I/O), one per wire dialect: each decodes its
//! requests, responses, streams and errors into ngl and encodes them back. The
//! [`Codec`] trait is the one surface the pipeline and gateway use; [`codec`] picks the
//! implementation for a [`Dialect`]. Framing helpers (SSE, NDJSON) live in [`framing`].

/// Implements [`Codec`] for a dialect folder's unit struct. Every folder has the same
/// shape: `request::{decode_request, encode_request}`, `response::{decode_response,
/// encode_response}`, `error::{encode_error, decode_error}` and a stream decoder and
/// encoder with `Default` (and `response::response_usage`), so the trait is written once here, not once per dialect.
macro_rules! dialect_codec {
    (
        codec: $codec:ident,
        dialect: $dialect:expr,
        stream_content_type: $content_type:expr,
        stream_decoder: $decoder:ty,
        stream_encoder: $encoder:ty
        $(, reply_text: $reply_text:path)?
        $(, client_stream_encoder: $client_encoder:path)? $(,)?
    ) => {
        impl $crate::Codec for $codec {
            fn dialect(&self) -> ::glider_ngl::Dialect {
                $dialect
            }

            fn decode_request(
                &self,
                body: &[u8],
            ) -> Result<::glider_ngl::Request, ::glider_ngl::ApiError> {
                $crate::tool_cache::decode_request(body, $dialect, request::decode_request)
            }

            fn encode_request(&self, req: &::glider_ngl::Request) -> ::serde_json::Value {
                request::encode_request(req)
            }

            fn decode_response(
                &self,
                body: &[u8],
            ) -> Result<::glider_ngl::Response, ::glider_ngl::ApiError> {
                response::decode_response(body)
            }

            fn encode_response(&self, resp: &::glider_ngl::Response) -> ::serde_json::Value {
                response::encode_response(resp)
            }

            fn response_usage(
                &self,
                body: &[u8],
            ) -> Result<::glider_ngl::Usage, $crate::scan::Unscannable> {
                response::response_usage(body)
            }

            $(
                fn reply_text<'a>(&self, body: &'a [u8]) -> Option<$crate::ReplyText<'a>> {
                    $reply_text(body)
                }
            )?

            fn stream_decoder(&self) -> Box<dyn $crate::StreamDecoder> {
                Box::<$decoder>::default()
            }

            fn stream_encoder(&self) -> Box<dyn $crate::StreamEncoder> {
                Box::<$encoder>::default()
            }

            $(
                fn client_stream_encoder(
                    &self,
                    client_body: &[u8],
                ) -> Box<dyn $crate::StreamEncoder> {
                    $client_encoder(client_body)
                }
            )?

            fn stream_content_type(&self) -> &'static str {
                $content_type
            }

            fn encode_error(&self, err: &::glider_ngl::ApiError) -> ::serde_json::Value {
                error::encode_error(err)
            }

            fn decode_error(&self, status: u16, body: &[u8]) -> ::glider_ngl::ApiError {
                error::decode_error(status, body)
            }
        }
    };
}

pub mod anthropic;
pub mod carry;
pub mod framing;
mod json;
pub mod ollama;
pub mod openai_chat;
pub mod openai_responses;
pub mod reader;
pub mod scan;
mod tool_cache;
mod typed;

use glider_ngl::{ApiError, Dialect, Request, Response, StopReason, StreamEvent, Usage};
use serde_json::Value;

/// What [`Codec::reply_text`] reads of a reply without tool calls.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyText<'a> {
    pub usage: Usage,
    pub stop_reason: StopReason,
    /// The reply's text parts, joined in order (its thinking left out).
    pub text: std::borrow::Cow<'a, str>,
}

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
    /// A backend's non-streamed reply's usage alone, as [`Codec::decode_response`]
    /// would read it, from a scan of the body's top level ([`scan`]) without decoding
    /// the rest: what a forwarded reply is read for when nothing needs its content.
    /// `Err` when the scan cannot place it; decode the reply then.
    fn response_usage(&self, body: &[u8]) -> Result<Usage, scan::Unscannable>;
    /// A backend's non-streamed reply that makes no tool call, read for its usage, stop
    /// reason and text alone ([`ReplyText`]), as [`Codec::decode_response`] reads them,
    /// without building the [`Response`]: what a forwarded reply is read for when the
    /// context log keeps its text. `None` for a reply with tool calls, one this reading
    /// leaves to the full decode, or a dialect without it: decode the reply then.
    fn reply_text<'a>(&self, body: &'a [u8]) -> Option<ReplyText<'a>> {
        let _ = body;
        None
    }
    fn stream_decoder(&self) -> Box<dyn StreamDecoder>;
    /// An encoder that writes everything the dialect's stream can say (Glider's own
    /// uses: tests, the usage a record reads back).
    fn stream_encoder(&self) -> Box<dyn StreamEncoder>;
    /// The encoder for the client whose request body was `client_body`: what that
    /// request asked of the stream decides what it gets (Chat Completions writes its
    /// trailing usage chunk only when `stream_options.include_usage` asked for it, as
    /// OpenAI does). Dialects whose streams have no such option use
    /// [`Codec::stream_encoder`].
    fn client_stream_encoder(&self, client_body: &[u8]) -> Box<dyn StreamEncoder> {
        let _ = client_body;
        self.stream_encoder()
    }
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

/// A decoder of a backend's stream in `dialect` for what a forwarded stream is read for
/// when nothing needs its text: the usage it reports, an error event, whether it
/// reached its terminator, and with `with_tool_calls` the tool calls it makes. Those
/// events (`Start`, `Finish`, `Error`, the truncation error of
/// [`StreamDecoder::finish`], and a tool call's `PartStart` and `ToolArgsDelta`) are
/// the full decoder's; the rest may be left out. Complete events are passed over by
/// their `event:` names, unparsed (so a malformed one, at which the full decoder stops
/// reading, goes unnoticed): Anthropic's content block events and pings (with tool
/// calls, the deltas of blocks that are not tool calls, found by a scan of their
/// `index`), Responses' output events (with tool calls, its text, refusal and
/// reasoning events). Chat Completions and Ollama chunks carry the end, usage and tool
/// calls in chunks shaped like the text, so they are decoded whole.
pub fn usage_stream_decoder(dialect: Dialect, with_tool_calls: bool) -> Box<dyn StreamDecoder> {
    match dialect {
        Dialect::Anthropic => anthropic::usage_stream_decoder(with_tool_calls),
        Dialect::OpenAiResponses => openai_responses::usage_stream_decoder(with_tool_calls),
        _ => codec(dialect).stream_decoder(),
    }
}

/// Whether a backend's non-streamed reply in `dialect` may make a tool call: `false`
/// only when the type or key every tool call of the dialect is written with (Anthropic
/// `tool_use`, Chat Completions and Ollama `tool_calls`, Responses `call_id`) does not
/// occur in its bytes at all. A reply that spells it with escapes is not one a backend
/// writes.
pub fn reply_may_call_tools(dialect: Dialect, body: &[u8]) -> bool {
    static TOOL_USE: scan::Needle = scan::Needle::new(b"tool_use\"");
    static TOOL_CALLS: scan::Needle = scan::Needle::new(b"\"tool_calls\"");
    static CALL_ID: scan::Needle = scan::Needle::new(b"\"call_id\"");
    match dialect {
        Dialect::Anthropic => &TOOL_USE,
        Dialect::OpenAiChat | Dialect::Ollama => &TOOL_CALLS,
        Dialect::OpenAiResponses => &CALL_ID,
    }
    .occurs_in(body)
}

/// A JSON value's compact text as bytes, written straight into the buffer: a body to
/// send. `Value::to_string` goes through `fmt::Write` (55k more instructions on an
/// 80 KB request's ~370k of serialising).
pub fn json_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    // A Value has string keys and finite numbers only: writing one to a Vec cannot fail.
    serde_json::to_writer(&mut out, value).expect("a serde_json::Value always serializes");
    out
}

/// Parse a JSON body, turning serde's error into a 400 a client can act on.
pub fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))
}
