//! Connect's envelope around the Agent RPC messages: gzip, unary versus enveloped
//! bodies, the RunSSE request id, and a unary error body.

use axum::body::Body;
use glider_cursorrpc::frame::FrameDecoder;
use glider_cursorrpc::messages::BidiRequestId;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use serde_json::json;

/// Whether a streaming Connect message declares gzip for its frames.
pub(super) fn gzip_stream(headers: &HeaderMap) -> bool {
    headers
        .get("connect-content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"))
}

/// A unary Connect body's message (gunzipped when `content-encoding: gzip`).
pub(super) fn unary_payload(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<u8>, glider_cursorrpc::Error> {
    let gzip = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    if gzip {
        glider_cursorrpc::frame::gunzip(body, glider_cursorrpc::frame::DEFAULT_MAX_FRAME)
    } else {
        Ok(body.to_vec())
    }
}

/// The request UUID a RunSSE asks for: its one enveloped `BidiRequestId` (or a bare
/// message, if the client sent the request unary-style).
pub(super) fn run_sse_request_id(headers: &HeaderMap, body: &[u8]) -> Option<String> {
    let enveloped = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/connect+"));
    let message = if enveloped {
        // Only the first message frame is read (and inflated): the rest of the body
        // is never unpacked.
        let mut frames = FrameDecoder::new(gzip_stream(headers))
            .with_inflate_budget(glider_cursorrpc::frame::DEFAULT_MAX_FRAME);
        frames.push(body);
        loop {
            match frames.next_frame().ok()? {
                Some(frame) if !frame.is_end_stream() => break frame.payload.to_vec(),
                Some(_) => continue,
                None => return None,
            }
        }
    } else {
        unary_payload(headers, body).ok()?
    };
    let id = BidiRequestId::decode(&message).ok()?.request_id;
    (!id.is_empty()).then_some(id)
}

/// A unary Connect error: the HTTP status and `{"code", "message"}`.
pub(super) fn connect_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(
        json!({"code": code, "message": message}).to_string(),
    ));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzipped_unary_appends_and_streams_are_read() {
        let message = glider_cursorrpc::messages::run_sse_request("req-gz");
        let mut unary = HeaderMap::new();
        unary.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        let zipped = glider_cursorrpc::frame::gzip(&message);
        assert_eq!(unary_payload(&unary, &zipped).as_deref(), Ok(&message[..]));
        assert!(unary_payload(&unary, b"not gzip").is_err());
        let mut streaming = HeaderMap::new();
        streaming.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/connect+proto"),
        );
        streaming.insert("connect-content-encoding", HeaderValue::from_static("gzip"));
        let frame = glider_cursorrpc::encode_frame(0, &message, true);
        assert_eq!(
            run_sse_request_id(&streaming, &frame).as_deref(),
            Some("req-gz")
        );
    }

    #[test]
    fn run_sse_request_ids_are_read_enveloped_or_bare() {
        let message = glider_cursorrpc::messages::run_sse_request("req-1");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/connect+proto"),
        );
        let enveloped = glider_cursorrpc::message_frame(&message);
        assert_eq!(
            run_sse_request_id(&headers, &enveloped).as_deref(),
            Some("req-1")
        );
        assert_eq!(run_sse_request_id(&headers, &enveloped[..3]), None);
        assert_eq!(
            run_sse_request_id(&HeaderMap::new(), &message).as_deref(),
            Some("req-1")
        );
    }
}
