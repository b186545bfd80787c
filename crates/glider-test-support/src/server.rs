//! The axum router: records every request, applies the configured [`Failure`] to
//! generation routes, then hands the request to its dialect module.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use bytes::Bytes;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::Failure;
use crate::state::{MockState, OpenStream};
use crate::stream::{self, Frame, NDJSON_CONTENT_TYPE, SSE_CONTENT_TYPE};
use crate::{anthropic, ollama, openai_chat, openai_responses, vllm};

/// A request body, already recorded.
pub(crate) struct Incoming {
    pub headers: HeaderMap,
    /// Parsed JSON (`Null` when empty or unparsable).
    pub body: Value,
    pub body_len: usize,
    /// The JSON parser's message when the body is not empty and not JSON.
    pub parse_error: Option<String>,
}

impl Incoming {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl FromRequest<Arc<MockState>> for Incoming {
    type Rejection = Response;

    async fn from_request(req: Request, state: &Arc<MockState>) -> Result<Self, Response> {
        let (parts, body) = req.into_parts();
        let raw: Bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()).into_response())?;
        let (body, parse_error) = if raw.is_empty() {
            (Value::Null, None)
        } else {
            match serde_json::from_slice::<Value>(&raw) {
                Ok(v) => (v, None),
                Err(e) => (Value::Null, Some(e.to_string())),
            }
        };
        state.record(&parts, &raw, &body);
        Ok(Incoming {
            headers: parts.headers,
            body,
            body_len: raw.len(),
            parse_error,
        })
    }
}

/// A refusal ready to send, boxed so the `Result`s that carry one stay small.
pub(crate) type Refusal = Box<Response>;

/// The four generation dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Chat,
    Responses,
    Anthropic,
    Ollama,
}

impl Wire {
    fn wants_stream(self, body: &Value) -> bool {
        match self {
            // Ollama streams unless told `stream: false`.
            Wire::Ollama => body.get("stream").and_then(Value::as_bool) != Some(false),
            _ => body.get("stream").and_then(Value::as_bool) == Some(true),
        }
    }

    fn error(self, status: u16, message: &str) -> Response {
        match self {
            Wire::Chat | Wire::Responses => openai_chat::error(status, message, None, None),
            Wire::Anthropic => anthropic::error(status, message),
            Wire::Ollama => ollama::error(status, message),
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Wire::Ollama => NDJSON_CONTENT_TYPE,
            _ => SSE_CONTENT_TYPE,
        }
    }
}

pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<MockState>,
    mut shutdown: watch::Receiver<bool>,
) {
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let _ = axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await;
}

fn router(state: Arc<MockState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/models", get(openai_chat::models))
        .route("/models", get(openai_chat::models))
        .route("/v1/responses", post(responses))
        .route("/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/api/chat", post(ollama_chat))
        .route("/api/tags", get(ollama::tags))
        .route("/api/version", get(ollama::version))
        .route("/api/ps", get(ollama::ps))
        .route("/api/show", post(ollama::show))
        .route("/api/embed", post(crate::embed::ollama))
        .route("/v1/embeddings", post(crate::embed::openai))
        .route("/embeddings", post(crate::embed::openai))
        .route("/", get(ollama::root))
        .route("/props", get(vllm::props))
        .route("/sleep", post(vllm::sleep))
        .route("/wake_up", post(vllm::wake_up))
        .route("/is_sleeping", get(vllm::is_sleeping))
        .fallback(not_found)
        .with_state(state)
}

async fn chat(State(state): State<Arc<MockState>>, inc: Incoming) -> Response {
    generate(Wire::Chat, state, inc).await
}

async fn responses(State(state): State<Arc<MockState>>, inc: Incoming) -> Response {
    generate(Wire::Responses, state, inc).await
}

async fn messages(State(state): State<Arc<MockState>>, inc: Incoming) -> Response {
    generate(Wire::Anthropic, state, inc).await
}

async fn ollama_chat(State(state): State<Arc<MockState>>, inc: Incoming) -> Response {
    generate(Wire::Ollama, state, inc).await
}

async fn not_found(_inc: Incoming) -> Response {
    let mut resp = (StatusCode::NOT_FOUND, "404 page not found").into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

async fn generate(wire: Wire, state: Arc<MockState>, inc: Incoming) -> Response {
    if let Some(level) = state.sleeping() {
        return vllm::asleep(level);
    }
    let stream = wire.wants_stream(&inc.body);
    let mut close_after = None;
    match state.take_failure() {
        Failure::None | Failure::FailTimes(..) => {}
        Failure::Status(status) => {
            return wire.error(status, &format!("mock failure: status {status}"));
        }
        Failure::Garbage => return garbage(wire, &state, stream),
        Failure::StatusRetryAfter {
            status,
            retry_after_secs,
        } => {
            let mut response = wire.error(status, &format!("mock failure: status {status}"));
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            return response;
        }
        Failure::CloseMidStream { after_deltas } => {
            close_after = Some(Cut {
                after_deltas,
                clean: false,
            });
        }
        Failure::EndEarly { after_deltas } => {
            close_after = Some(Cut {
                after_deltas,
                clean: true,
            });
        }
        Failure::Hang => {
            let _open = OpenStream::new(state.clone());
            state.until_shutdown().await;
            return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
        }
    }
    let ctx = Ctx {
        state: &state,
        inc: &inc,
        stream,
        close_after,
    };
    match wire {
        Wire::Chat => openai_chat::handle(ctx).await,
        Wire::Responses => openai_responses::handle(ctx).await,
        Wire::Anthropic => anthropic::handle(ctx).await,
        Wire::Ollama => ollama::handle(ctx).await,
    }
}

/// What a dialect handler gets.
pub(crate) struct Ctx<'a> {
    pub state: &'a Arc<MockState>,
    pub inc: &'a Incoming,
    pub stream: bool,
    /// `Some` when the answer must be cut short.
    pub close_after: Option<Cut>,
}

/// Where and how a reply is cut short.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cut {
    /// Content deltas sent before the cut (the final event is never sent).
    pub after_deltas: usize,
    /// End the body cleanly (else abort the connection).
    pub clean: bool,
}

fn garbage(wire: Wire, state: &Arc<MockState>, stream: bool) -> Response {
    if stream {
        let junk: &'static [u8] = match wire {
            Wire::Ollama => b"{this is not json\n",
            _ => b"data: {this is not json\n\n",
        };
        stream::streamed(
            state,
            wire.content_type(),
            vec![Frame::delta(Bytes::from_static(junk))],
            None,
            &[],
        )
    } else {
        let mut resp = Response::new(Body::from("<html><body>502 mock garbage</body></html>"));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}
