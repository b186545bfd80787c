//! Turning pre-rendered frames into HTTP bodies: streamed bodies honour the configured
//! delays, count as open streams while alive, and can be cut mid-stream; complete
//! bodies get the same total delay.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;

use crate::server::Cut;
use crate::state::{MockState, ModelBusy, OpenStream};

/// One chunk of a streamed body. `delta` marks content deltas (text, thinking, tool
/// arguments): the ones `delta_delay` and `CloseMidStream` count.
pub(crate) struct Frame {
    pub bytes: Bytes,
    pub delta: bool,
}

impl Frame {
    pub fn meta(bytes: impl Into<Bytes>) -> Frame {
        Frame {
            bytes: bytes.into(),
            delta: false,
        }
    }

    pub fn delta(bytes: impl Into<Bytes>) -> Frame {
        Frame {
            bytes: bytes.into(),
            delta: true,
        }
    }
}

/// `event: NAME\ndata: JSON\n\n` (or just `data: JSON\n\n` without a name).
pub(crate) fn sse(event: Option<&str>, data: &Value) -> Bytes {
    let json = data.to_string();
    let mut out = String::with_capacity(json.len() + 32);
    if let Some(event) = event {
        out.push_str("event: ");
        out.push_str(event);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(&json);
    out.push_str("\n\n");
    Bytes::from(out)
}

/// One NDJSON line.
pub(crate) fn ndjson(data: &Value) -> Bytes {
    let mut out = data.to_string();
    out.push('\n');
    Bytes::from(out)
}

pub(crate) const SSE_CONTENT_TYPE: &str = "text/event-stream; charset=utf-8";
pub(crate) const NDJSON_CONTENT_TYPE: &str = "application/x-ndjson";

struct Streaming {
    frames: std::vec::IntoIter<Frame>,
    guard: OpenStream,
    first: bool,
    deltas_sent: usize,
    close_after: Option<Cut>,
    done: bool,
    /// The model this stream keeps busy (Ollama will not evict it meanwhile).
    _busy: Option<ModelBusy>,
}

fn cut() -> io::Error {
    io::Error::other("glider-mock: connection closed mid-stream")
}

/// A 200 streamed response of `frames`.
pub(crate) fn streamed(
    state: &Arc<MockState>,
    content_type: &'static str,
    frames: Vec<Frame>,
    close_after: Option<Cut>,
    extra_headers: &[(&'static str, String)],
) -> Response {
    streamed_busy(
        state,
        content_type,
        frames,
        close_after,
        extra_headers,
        None,
    )
}

/// [`streamed`], keeping a model busy until the stream ends.
pub(crate) fn streamed_busy(
    state: &Arc<MockState>,
    content_type: &'static str,
    frames: Vec<Frame>,
    close_after: Option<Cut>,
    extra_headers: &[(&'static str, String)],
    busy: Option<ModelBusy>,
) -> Response {
    let st = Streaming {
        _busy: busy,
        frames: frames.into_iter(),
        guard: OpenStream::new(state.clone()),
        first: true,
        deltas_sent: 0,
        close_after,
        done: false,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let frame = st.frames.next()?;
        let cfg = &st.guard.state().config;
        let mut delay = Duration::ZERO;
        if st.first {
            delay += st.guard.state().next_first_byte_delay();
            st.first = false;
        }
        if frame.delta && st.deltas_sent > 0 {
            delay += cfg.delta_delay;
        }
        if !st.guard.state().sleep(delay).await {
            st.done = true;
            return Some((Err(cut()), st));
        }
        if let Some(planned) = st.close_after {
            let last = st.frames.len() == 0;
            if last || (frame.delta && st.deltas_sent >= planned.after_deltas) {
                st.done = true;
                if planned.clean {
                    return None;
                }
                // Let hyper flush what was sent before the abort discards its buffer.
                tokio::task::yield_now().await;
                return Some((Err(cut()), st));
            }
        }
        if frame.delta {
            st.deltas_sent += 1;
        }
        Some((Ok::<Bytes, io::Error>(frame.bytes), st))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    add_headers(&mut resp, extra_headers);
    resp
}

/// A complete JSON response after the configured generation delay; with
/// `close_mid` the body is cut in half and the connection aborted.
pub(crate) async fn complete(
    state: &Arc<MockState>,
    body: &Value,
    deltas: usize,
    close_mid: bool,
    extra_headers: &[(&'static str, String)],
) -> Response {
    let cfg = &state.config;
    let delay = state.next_first_byte_delay() + cfg.delta_delay * (deltas.saturating_sub(1) as u32);
    if !state.sleep(delay).await {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    let bytes = Bytes::from(body.to_string());
    let mut resp = if close_mid {
        let half = bytes.slice(..bytes.len() / 2);
        let abort = futures_util::stream::once(async {
            // Let hyper flush the first half before the abort discards its buffer.
            tokio::task::yield_now().await;
            Err::<Bytes, io::Error>(cut())
        });
        let chunks = futures_util::stream::iter([Ok(half)]).chain(abort);
        Response::new(Body::from_stream(chunks))
    } else {
        Response::new(Body::from(bytes))
    };
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    add_headers(&mut resp, extra_headers);
    resp
}

/// A JSON response with `status`.
pub(crate) fn json_response(
    status: u16,
    body: &Value,
    extra_headers: &[(&'static str, String)],
) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, Body::from(body.to_string())).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    add_headers(&mut resp, extra_headers);
    resp
}

fn add_headers(resp: &mut Response, extra: &[(&'static str, String)]) {
    for (name, value) in extra {
        if let Ok(v) = HeaderValue::from_str(value) {
            resp.headers_mut().insert(*name, v);
        }
    }
}
