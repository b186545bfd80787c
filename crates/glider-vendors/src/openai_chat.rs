//! openai_chat codec — placeholder until its implementation lands; every call is an honest
//! "not implemented" error, never a fake success.

use glider_ngl::{ApiError, Dialect, ErrorKind, Request, Response};
use serde_json::Value;

use crate::{Codec, StreamDecoder, StreamEncoder};

pub struct OpenAiChat;

fn missing() -> ApiError {
    ApiError::new(
        ErrorKind::Internal,
        "the openai_chat codec is not implemented yet",
    )
}

impl Codec for OpenAiChat {
    fn dialect(&self) -> Dialect {
        Dialect::OpenAiChat
    }
    fn decode_request(&self, _body: &[u8]) -> Result<Request, ApiError> {
        Err(missing())
    }
    fn encode_request(&self, _req: &Request) -> Value {
        Value::Null
    }
    fn decode_response(&self, _body: &[u8]) -> Result<Response, ApiError> {
        Err(missing())
    }
    fn encode_response(&self, _resp: &Response) -> Value {
        Value::Null
    }
    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        unimplemented!("openai_chat stream decoder")
    }
    fn stream_encoder(&self) -> Box<dyn StreamEncoder> {
        unimplemented!("openai_chat stream encoder")
    }
    fn stream_content_type(&self) -> &'static str {
        "text/event-stream"
    }
    fn encode_error(&self, err: &ApiError) -> Value {
        serde_json::json!({ "error": { "message": err.message } })
    }
    fn decode_error(&self, status: u16, _body: &[u8]) -> ApiError {
        ApiError::new(ErrorKind::from_status(status), "backend error")
    }
}
