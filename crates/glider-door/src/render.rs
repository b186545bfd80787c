//! Rendering a completion or an error for the client: raw bytes from a same-dialect
//! backend, a translated stream through the front codec's encoder, or a whole reply;
//! an error with its status (the upstream's own when it was passed through) and its
//! `retry-after`.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use glider_dialects::codec;
use glider_engine::{Completion, CompletionBody};
use glider_ngl::{ApiError, Dialect, ErrorKind, ResponseBuilder, StreamEvent};
use glider_sys::listen::Cutoff;

use crate::sequence::{BodyError, Door};

/// An error in `front`'s own JSON shape with its status, `retry-after` when the error
/// says how long to wait, and `x-glider-route` when it was routed.
pub fn error_response(front: Dialect, error: &ApiError) -> Response {
    let status =
        StatusCode::from_u16(error.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(codec(front).encode_error(error))).into_response();
    if let Some(secs) = error.retry_after_secs {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if let Some(route) = error
        .route
        .as_deref()
        .and_then(|r| HeaderValue::from_str(r).ok())
    {
        response.headers_mut().insert("x-glider-route", route);
    }
    response
}

use glider_engine::stream_error_event;

/// A request body a door could not read, as `front`'s error: 413 over
/// `server.max_body_bytes`, 408 past `server.body_read_timeout_secs`, else 400.
pub fn body_refused(front: Dialect, door: Door, error: &BodyError) -> Response {
    let mut response = error_response(front, &error.api_error(door));
    *response.status_mut() = error.status();
    response
}

/// What a reply ended at the drain deadline says.
pub fn shutting_down() -> ApiError {
    ApiError::new(
        ErrorKind::Unavailable,
        "Glider is shutting down: this reply was ended at the drain deadline (server.shutdown_grace_secs)",
    )
}

/// The reply `answer` makes, under the drain deadline of `cutoff` (taken from the
/// request's extensions; none when the door is not draining): a reply not made by the
/// deadline is a 503, a stream still open then ends with `front`'s error event.
///
/// `answer` comes boxed: the pipeline's future is about 9 KB, and held by value it was
/// copied at each await above it (this one, the handler's, the router's box) — a tenth
/// of a small forwarded request's instructions went to those copies.
pub async fn by_deadline<F: std::future::Future<Output = Response>>(
    front: Dialect,
    cutoff: Option<Cutoff>,
    answer: std::pin::Pin<Box<F>>,
) -> Response {
    let response = match &cutoff {
        Some(cutoff) => tokio::select! {
            response = answer => response,
            () = cutoff.reached() => error_response(front, &shutting_down()),
        },
        None => answer.await,
    };
    ending_at(front, response, cutoff.as_ref())
}

/// `response` as it is, except that a streamed reply (SSE or NDJSON) still open at the
/// drain deadline of `cutoff` ends with `front`'s error event: the client sees a
/// clean, typed end instead of a cut connection.
pub(crate) fn ending_at(front: Dialect, response: Response, cutoff: Option<&Cutoff>) -> Response {
    let Some(cutoff) = cutoff else {
        return response;
    };
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value.starts_with("text/event-stream") || value.starts_with("application/x-ndjson")
        });
    if !streamed {
        return response;
    }
    let last = stream_error_event(front, shutting_down());
    response.map(|body| Body::new(cutoff.end_stream(body, last)))
}

/// The HTTP response for a completion in `front`'s dialect to the client whose request
/// body was `client_body` (shared by every door, so the gateway and the MITM proxy
/// send the same bytes).
pub fn completion(front: Dialect, client_body: &[u8], completion: Completion) -> Response {
    let route = completion.route_header();
    let warning = completion.warnings.join("; ");
    let front_codec = codec(front);
    let mut response = match completion.body {
        CompletionBody::Raw {
            content_type,
            first_chunk,
            rest,
        } => {
            let streaming = completion.stream;
            let first = futures_util::stream::once(async move { Ok(first_chunk) });
            // The pipeline already ended a broken stream with the dialect's error
            // event; an `Err` left (a whole body cut short) aborts the reply, so the
            // client sees a failed transfer rather than a truncated JSON body.
            let body = Body::from_stream(first.chain(rest));
            let content_type =
                content_type.unwrap_or_else(|| default_content_type(front, streaming).to_owned());
            let mut response = Response::new(body);
            if let Ok(value) = HeaderValue::from_str(&content_type) {
                response.headers_mut().insert(header::CONTENT_TYPE, value);
            }
            response
        }
        CompletionBody::Events(events) => event_stream(front, client_body, events),
        CompletionBody::Whole(reply) => {
            axum::Json(front_codec.encode_response(&reply)).into_response()
        }
    };
    if completion.stream {
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    if let Ok(value) = HeaderValue::from_str(&route) {
        response.headers_mut().insert("x-glider-route", value);
    }
    // What the model was not sent is said to the client, not only recorded.
    if !warning.is_empty()
        && let Ok(value) = HeaderValue::from_str(&warning)
    {
        response.headers_mut().insert("x-glider-warning", value);
    }
    response
}

/// A stream of ngl events encoded as it is polled by `front`'s stream encoder for the
/// client whose request body was `client_body` (which says, for Chat Completions,
/// whether it gets the usage chunk).
fn event_stream(
    front: Dialect,
    client_body: &[u8],
    events: impl futures_util::Stream<Item = StreamEvent> + Send + 'static,
) -> Response {
    let front_codec = codec(front);
    let mut encoder = front_codec.client_stream_encoder(client_body);
    let body = events.map(move |event| {
        let mut out = Vec::new();
        encoder.encode(&event, &mut out);
        Ok::<_, std::convert::Infallible>(Bytes::from(out))
    });
    let mut response = Response::new(Body::from_stream(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(front_codec.stream_content_type()),
    );
    response
}

/// A delegate's reply in `front`'s dialect: streamed as it runs when the client asked
/// for a stream, else gathered into one reply (an error mid-run becomes the error
/// reply). Dropping the body ends the delegate's run.
pub async fn delegation(
    front: Dialect,
    client_body: &[u8],
    delegation: glider_delegate::Delegation,
) -> Response {
    let route = format!("delegate:{}", delegation.vendor.binary());
    let mut response = if delegation.stream {
        let mut response = event_stream(front, client_body, delegation.events);
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    } else {
        let mut builder = ResponseBuilder::new();
        let mut events = delegation.events;
        while let Some(event) = events.next().await {
            builder.push(&event);
        }
        match builder.finish() {
            Ok(reply) => axum::Json(codec(front).encode_response(&reply)).into_response(),
            Err(error) => error_response(front, &error),
        }
    };
    if let Ok(value) = HeaderValue::from_str(&route) {
        response.headers_mut().insert("x-glider-route", value);
    }
    response
}

fn default_content_type(front: Dialect, streaming: bool) -> &'static str {
    if streaming {
        codec(front).stream_content_type()
    } else {
        "application/json"
    }
}
