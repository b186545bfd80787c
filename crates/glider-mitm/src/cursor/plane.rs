//! The two Agent RPC handlers on a decrypted Cursor host. BidiAppend: read the turn,
//! decide through the shared pipeline, arm the hub, forward the append to the origin.
//! RunSSE: wait for the decision; answer a root turn locally as RunSSE frames, or relay
//! the stream to the origin. Families keep a turn's follow-ons with its cloud parent.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use glider_cursorrpc::frame::{EndOfStream, FrameDecoder};
use glider_cursorrpc::messages::{
    AgentClientMessage, AppendKind, BidiAppendRequest, BidiRequestId,
};
use glider_cursorrpc::{Update, fields, server_frame, view};
use glider_door::{Door, DoorSequence, ObservedBody, Observer, Outcome, ToOrigin, read_within};
use glider_engine::router::Target as RouteTarget;
use glider_engine::router::sticky::CURSOR_CONVERSATION_HEADER;
use glider_engine::{CompleteError, CompletionBody, Prepared, decode_events};
use glider_ngl::{ApiError, Dialect, ErrorKind, Role, StreamEvent, Turn};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use serde_json::json;

use super::hub::{AgentFulfillHub, Decision, FamilyOutcome, Sticky, WAIT};
use crate::Mitm;
use crate::handler::{HandlerCtx, HttpHandler, RequestOrResponse};
use crate::proxy::Target;

/// How long a turn family stays sticky after it opens, and after its root's reply
/// stream ends (the summary and title follow within seconds of the reply).
pub const FAMILY_TTL: Duration = Duration::from_secs(10);
/// A local reply sends a heartbeat after this much silence from the model.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// The model name asked of the pipeline when the append names none.
pub const DEFAULT_MODEL: &str = "default";

/// Which Agent RPC a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    BidiAppend,
    RunSse,
}

/// The Agent RPC a POST to `path` is, if any.
pub fn rpc(method: &Method, path: &str) -> Option<Rpc> {
    if method != Method::POST {
        return None;
    }
    match path {
        fields::BIDI_APPEND_PATH => Some(Rpc::BidiAppend),
        fields::RUN_SSE_PATH => Some(Rpc::RunSse),
        _ => None,
    }
}

/// A root turn to answer locally: the pipeline's decision, made once at BidiAppend (the
/// spec's `DecideLocal`) and carried out as it is at RunSSE (`CompleteLocal`). A turn
/// whose RunSSE never comes is dropped unrecorded, as the origin's turns are.
pub struct LocalTurn(Option<Prepared>);

impl LocalTurn {
    fn take(mut self) -> Option<Prepared> {
        self.0.take()
    }
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        if let Some(prepared) = self.0.take() {
            prepared.discard();
        }
    }
}

impl std::fmt::Debug for LocalTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(prepared) => write!(f, "LocalTurn({})", prepared.model()),
            None => f.write_str("LocalTurn(taken)"),
        }
    }
}

/// A turn the pipeline would not take leaves no record: the origin answers it, and
/// the plane records no origin turn.
fn forget(error: CompleteError) {
    if let CompleteError::OriginPassthrough { tracker, .. } = error {
        tracker.forget();
    }
}

/// The plane's state, shared by every connection.
#[derive(Default)]
pub struct AgentRpc {
    pub hub: AgentFulfillHub<LocalTurn>,
}

type EventStream = Pin<Box<dyn Stream<Item = StreamEvent> + Send>>;

impl Mitm {
    fn debug_rpc(&self) -> bool {
        self.engine.runtime().config.mitm.debug_agent_rpc || crate::debug::env_enabled()
    }

    /// Read a BidiAppend and arm the hub for its RunSSE; the append itself always goes
    /// on to the origin.
    async fn bidi_append(&self, parts: &http::request::Parts, body: &Bytes, target: &Target) {
        let payload = unary_payload(&parts.headers, body);
        if self.debug_rpc() {
            let append = match &payload {
                Ok(payload) => view::append(payload),
                Err(e) => json!({"decode_error": e.to_string()}),
            };
            self.dumps.dump_record(
                "agent-rpc-append",
                &json!({"host": target.host, "append": append}),
            );
        }
        let decoded = payload.and_then(|payload| BidiAppendRequest::decode(&payload));
        match decoded {
            Ok(append) => self.arm_for(&append, &parts.headers).await,
            Err(e) => {
                tracing::info!(host = %target.host, error = %e, "Agent RPC: BidiAppend not understood; its RunSSE goes to the origin")
            }
        }
    }

    /// Decide for an append that starts a request, and arm the hub. A later append on
    /// the same request (a tool result, a heartbeat) arms nothing: the RunSSE already
    /// has, or is about to get, the decision of the first.
    async fn arm_for(&self, append: &BidiAppendRequest, headers: &HeaderMap) {
        let Some(request_id) = append.request_id() else {
            return;
        };
        let message = match append.message() {
            Ok(message) => message,
            Err(e) => {
                tracing::info!(request_id, error = %e, "Agent RPC: client message not understood; to the origin");
                if append.append_seqno == 0 {
                    self.agent_rpc.hub.arm_origin(request_id);
                }
                return;
            }
        };
        if message.run_request.is_none() && append.append_seqno != 0 {
            return;
        }
        let decision = self.decide(request_id, &message, headers).await;
        self.agent_rpc.hub.arm(request_id, decision);
    }

    async fn decide(
        &self,
        request_id: &str,
        message: &AgentClientMessage,
        headers: &HeaderMap,
    ) -> Decision<LocalTurn> {
        let run = message.run_request.as_ref();
        let conversation = run
            .and_then(|r| r.conversation_id.as_deref())
            .filter(|c| !c.is_empty());
        let text = match message.kind() {
            AppendKind::Root { text } => text,
            other => {
                tracing::info!(request_id, kind = ?other, "Agent RPC: not a root Agent turn; to the origin");
                return Decision::Origin;
            }
        };
        let hub = &self.agent_rpc.hub;
        // The turn as ngl, straight from the protobuf: no JSON to build and decode back.
        let turn = |model: &str, text: &str| glider_ngl::Request {
            model: model.to_owned(),
            turns: vec![Turn::text(Role::User, text)],
            stream: true,
            ..glider_ngl::Request::default()
        };
        // The conversation is the session: every turn of it, whatever its text.
        let mut headers = headers.clone();
        headers.remove(CURSOR_CONVERSATION_HEADER);
        if let Some(value) = conversation.and_then(|c| HeaderValue::from_str(c).ok()) {
            headers.insert(CURSOR_CONVERSATION_HEADER, value);
        }
        let prepare = |request: glider_ngl::Request| {
            self.engine.prepare_decoded(
                Dialect::OpenAiChat,
                request,
                headers.clone(),
                Door::Mitm,
                true,
            )
        };
        let model = run.and_then(|r| r.model()).unwrap_or(DEFAULT_MODEL);
        // A follow-on (summary, title) of a turn that just ran keeps its family's side;
        // a routing flag the user typed still wins.
        if let Some(conversation) = conversation
            && glider_engine::router::explicit::parse_flag(&text).is_none()
            && let Some((root, sticky)) = hub.family_of(conversation)
            && root != request_id
        {
            tracing::info!(request_id, %root, ?sticky, "Agent RPC: follow-on held with its turn family");
            return match sticky {
                Sticky::Cloud => Decision::Origin,
                // The pipeline's own `/local` flag keeps it local even for a model no
                // local backend lists (the flag is stripped before the model sees it).
                Sticky::Local => match prepare(turn(model, &format!("/local {text}"))).await {
                    Ok(prepared) => Decision::Local(LocalTurn(Some(prepared))),
                    Err(error) => {
                        tracing::info!(request_id, model, error = ?error, "Agent RPC: sticky-local follow-on not routable; to the origin");
                        forget(error);
                        Decision::Origin
                    }
                },
            };
        }
        let prepared = match prepare(turn(model, &text)).await {
            Ok(prepared) => prepared,
            Err(error) => {
                tracing::info!(request_id, model, error = ?error, "Agent RPC: no local answer; to the origin");
                forget(error);
                hub.open_family(request_id, conversation, Sticky::Cloud, FAMILY_TTL);
                return Decision::Origin;
            }
        };
        let decision = prepared.decision();
        let is_local = decision.candidates.iter().any(|c| c.backend.is_local());
        let flag = decision.flag.as_ref().map(|f| f.target.clone());
        // `/cloud` is the origin's even when the router, finding no cloud backend of its
        // own, fell through to the conversation's sticky-local choice: the cloud here
        // is Cursor's.
        if !is_local || flag == Some(RouteTarget::Cloud) {
            tracing::info!(request_id, rule = decision.rule.as_str(), reason = %decision.reason, "Agent RPC: cloud decision; to the origin, family opened");
            hub.open_family(request_id, conversation, Sticky::Cloud, FAMILY_TTL);
            prepared.discard();
            return Decision::Origin;
        }
        if flag == Some(RouteTarget::Local)
            && hub.open_family(request_id, conversation, Sticky::Local, FAMILY_TTL)
                == FamilyOutcome::KeptCloud
        {
            tracing::info!(
                request_id,
                "Agent RPC: a live sticky-cloud family kept its place; to the origin"
            );
            prepared.discard();
            return Decision::Origin;
        }
        tracing::info!(request_id, rule = decision.rule.as_str(), reason = %decision.reason, "Agent RPC: root turn answered locally");
        Decision::Local(LocalTurn(Some(prepared)))
    }

    /// Wait for a RunSSE's decision and answer it locally when it is local. `Err`: the
    /// request id whose stream the origin answers instead.
    async fn run_sse(
        self: &Arc<Self>,
        parts: &http::request::Parts,
        body: &Bytes,
        target: &Target,
    ) -> Result<Response<Body>, String> {
        let request_id = run_sse_request_id(&parts.headers, body);
        let decision = match &request_id {
            Some(id) => self.agent_rpc.hub.wait(id, WAIT).await,
            None => {
                tracing::info!(host = %target.host, "Agent RPC: RunSSE without a readable request id; to the origin");
                None
            }
        };
        let request_id = request_id.unwrap_or_default();
        if let Some(Decision::Local(turn)) = decision {
            match self.answer_locally(&request_id, turn).await {
                Ok(response) => return Ok(response),
                Err(NotLocal::Origin(reason)) => {
                    tracing::info!(request_id, %reason, "Agent RPC: the pipeline now sends this turn to the origin");
                }
                Err(NotLocal::FailedToOrigin(error)) => {
                    tracing::info!(request_id, error = %error, "Agent RPC: local answer failed before its first byte; to the origin (mitm.origin_on_local_error)");
                }
                Err(NotLocal::Failed(error)) => {
                    tracing::info!(request_id, error = %error, "Agent RPC: local answer failed; shown to the client");
                    return Ok(stream_error(&error));
                }
            }
        }
        Err(request_id)
    }

    /// Run the turn through the pipeline and stream it as RunSSE frames. `Err`: nothing
    /// was written, so the caller may still go to the origin. Once this returns a
    /// response, a failure becomes an end-of-stream error: never the origin.
    async fn answer_locally(
        self: &Arc<Self>,
        request_id: &str,
        turn: LocalTurn,
    ) -> Result<Response<Body>, NotLocal> {
        let Some(mut prepared) = turn.take() else {
            return Err(NotLocal::Origin(
                "the turn's decision was already used".into(),
            ));
        };
        // Timed from the RunSSE, as the client sees it; never delegated.
        prepared.restart_clock();
        let outcome = Door::Mitm.carry_out(&self.engine, prepared).await;
        let completion = match outcome {
            Outcome::Reply(completion) => *completion,
            Outcome::Origin(ToOrigin::Decided {
                decision,
                mut tracker,
            }) => {
                // The pipeline changed its mind (a reload, a breaker): nothing was sent.
                tracker.end();
                return Err(NotLocal::Origin(decision.reason));
            }
            other => return Err(NotLocal::failed(other)),
        };
        tracing::info!(request_id, backend = %completion.backend, model = %completion.model, "Agent RPC: answering locally");
        let events: EventStream = match completion.body {
            CompletionBody::Events(events) => events,
            CompletionBody::Raw {
                first_chunk, rest, ..
            } => decode_events(
                glider_dialects::codec(Dialect::OpenAiChat).stream_decoder(),
                first_chunk,
                rest,
            ),
            CompletionBody::Whole(response) => Box::pin(futures_util::stream::iter([
                StreamEvent::TextDelta {
                    index: 0,
                    text: response.plain_text(),
                },
                StreamEvent::Finish {
                    stop_reason: response.stop_reason,
                    stop_sequence: None,
                    usage: response.usage,
                },
            ])),
        };
        let reply = LocalReply::start(events)
            .await
            .map_err(|error| NotLocal::failed(Door::Mitm.after_local_error(&self.engine, error)))?;
        let mut response = Response::new(Body::new(ObservedBody::new(
            Body::from_stream(reply.into_stream()),
            TurnWatch::new(
                self,
                request_id.to_owned(),
                "agent-rpc-local-reply",
                false,
                false,
            ),
        )));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/connect+proto"),
        );
        Ok(response)
    }

    /// A root's reply stream ended: keep its family for the follow-ons.
    fn turn_ended(&self, request_id: &str) {
        if !request_id.is_empty() {
            self.agent_rpc.hub.touch_family(request_id, FAMILY_TTL);
        }
    }
}

/// The plane's [`HttpHandler`], one per Agent RPC request. BidiAppend: arm the hub,
/// let the append through. RunSSE: answer locally, or let it through and watch the
/// origin's stream (the family is touched at its end; frames read for dumps and the
/// tool codec).
pub struct AgentRpcHandler {
    rpc: Rpc,
    /// A RunSSE the origin answers: its request id, for the reply's watcher.
    relayed: Option<String>,
}

impl AgentRpcHandler {
    pub fn new(rpc: Rpc) -> Self {
        AgentRpcHandler { rpc, relayed: None }
    }
}

impl HttpHandler for AgentRpcHandler {
    async fn handle_request(
        &mut self,
        ctx: &HandlerCtx<'_>,
        request: Request<Incoming>,
    ) -> RequestOrResponse {
        let (mitm, target) = (ctx.mitm, ctx.target);
        let server = &mitm.engine.runtime().config.server;
        let (limit, time) = (server.max_body_bytes, server.client_limits().body_read);
        let (parts, body) = request.into_parts();
        let body = match read_within(body, limit, time).await {
            Ok(body) => body,
            Err(error) => {
                let code = if error.timed_out_after.is_some() {
                    "deadline_exceeded"
                } else if error.too_large {
                    "resource_exhausted"
                } else {
                    "invalid_argument"
                };
                return RequestOrResponse::Response(connect_error(
                    error.status(),
                    code,
                    &format!("Glider could not read the request body: {}", error.cause),
                ));
            }
        };
        if mitm.debug_rpc() {
            mitm.dumps.dump(
                &target.host,
                parts.method.as_str(),
                parts.uri.path(),
                &parts.headers,
                &body,
            );
        }
        match self.rpc {
            Rpc::BidiAppend => mitm.bidi_append(&parts, &body, target).await,
            Rpc::RunSse => match mitm.run_sse(&parts, &body, target).await {
                Ok(response) => return RequestOrResponse::Response(response),
                Err(request_id) => self.relayed = Some(request_id),
            },
        }
        RequestOrResponse::to_origin(Request::from_parts(parts, Body::from(body)), None)
    }

    fn handle_response(
        &mut self,
        ctx: &HandlerCtx<'_>,
        response: Response<Body>,
    ) -> Response<Body> {
        let Some(request_id) = self.relayed.take() else {
            return response;
        };
        let (parts, body) = response.into_parts();
        let tool_codec = ctx.mitm.engine.runtime().config.mitm.agent_rpc_tool_codec;
        let watch = TurnWatch::new(
            ctx.mitm,
            request_id,
            "agent-rpc-origin-reply",
            gzip_stream(&parts.headers),
            tool_codec,
        );
        let watched = ObservedBody::new(body, watch);
        Response::from_parts(parts, Body::new(watched))
    }
}

/// Why a local turn was not answered; either way nothing has been written yet.
enum NotLocal {
    /// The pipeline sends the turn to the origin after all (a reload, a breaker).
    Origin(String),
    /// The local answer failed before its first frame and `mitm.origin_on_local_error`
    /// sends the turn to the origin.
    FailedToOrigin(ApiError),
    /// The local answer failed before its first frame; the client sees the error.
    Failed(ApiError),
}

impl NotLocal {
    /// A failed local answer, after the door kit's origin-on-local-error rule.
    fn failed(outcome: Outcome) -> NotLocal {
        match outcome {
            Outcome::Origin(ToOrigin::LocalFailed(error)) => NotLocal::FailedToOrigin(error),
            Outcome::Error(error) => NotLocal::Failed(error),
            Outcome::Origin(ToOrigin::Decided { decision, .. }) => {
                NotLocal::Origin(decision.reason)
            }
            // Nothing in the plane passes a delegator; if one ran anyway, say so.
            Outcome::Reply(_) | Outcome::Delegated(_) => NotLocal::Failed(ApiError::new(
                ErrorKind::Internal,
                "unexpected outcome for a local Cursor turn",
            )),
        }
    }
}

/// Encodes ngl events as RunSSE frames.
#[derive(Default)]
struct FrameEncoder {
    ended: bool,
}

impl FrameEncoder {
    /// The frames for `event` (none for events Cursor has no counterpart for).
    fn encode(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        let frame = |update| Bytes::from(server_frame(update));
        match event {
            StreamEvent::TextDelta { text, .. } if !text.is_empty() => {
                vec![frame(Update::TextDelta(text.clone()))]
            }
            StreamEvent::ThinkingDelta { text, .. } if !text.is_empty() => {
                vec![frame(Update::ThinkingDelta(text.clone()))]
            }
            StreamEvent::Finish { usage, .. } => {
                self.ended = true;
                let mut frames = Vec::new();
                if usage.output_tokens > 0 {
                    frames.push(frame(Update::TokenDelta(usage.output_tokens)));
                }
                frames.push(frame(Update::TurnEnded));
                frames.push(Bytes::from(EndOfStream::ok().encode()));
                frames
            }
            StreamEvent::Error { error } => {
                self.ended = true;
                vec![end_with_error(error)]
            }
            _ => Vec::new(),
        }
    }
}

fn end_with_error(error: &ApiError) -> Bytes {
    Bytes::from(EndOfStream::error(connect_code(error.kind), error.message.clone()).encode())
}

/// The Connect error code for an ngl error kind.
fn connect_code(kind: ErrorKind) -> &'static str {
    match kind.status() {
        400 | 404 | 413 => "invalid_argument",
        401 => "unauthenticated",
        403 => "permission_denied",
        429 => "resource_exhausted",
        503 | 529 => "unavailable",
        504 => "deadline_exceeded",
        _ => "internal",
    }
}

/// A local reply whose first frames are ready: the model produced content (or
/// finished) before anything was written.
struct LocalReply {
    head: Vec<Bytes>,
    rest: EventStream,
    encoder: FrameEncoder,
}

impl LocalReply {
    /// Read events up to the first frame Cursor would show. A failure (or an empty
    /// end) before that is an `Err`: nothing has been written yet.
    async fn start(mut events: EventStream) -> Result<LocalReply, ApiError> {
        let mut encoder = FrameEncoder::default();
        let mut head = Vec::new();
        while head.is_empty() {
            match events.next().await {
                None => {
                    return Err(ApiError::new(
                        ErrorKind::BadGateway,
                        "the local model ended its reply before any text",
                    ));
                }
                Some(StreamEvent::Error { error }) => return Err(error),
                Some(event) => head = encoder.encode(&event),
            }
        }
        Ok(LocalReply {
            head,
            rest: events,
            encoder,
        })
    }

    /// The frames as a body stream; heartbeats fill silences, and a model that stops
    /// without finishing ends the stream with an error frame.
    fn into_stream(self) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
        struct State {
            queue: std::collections::VecDeque<Bytes>,
            rest: EventStream,
            encoder: FrameEncoder,
        }
        let state = State {
            queue: self.head.into(),
            rest: self.rest,
            encoder: self.encoder,
        };
        futures_util::stream::unfold(state, |mut s| async move {
            loop {
                if let Some(frame) = s.queue.pop_front() {
                    return Some((Ok(frame), s));
                }
                if s.encoder.ended {
                    return None;
                }
                match tokio::time::timeout(HEARTBEAT_EVERY, s.rest.next()).await {
                    Err(_) => s
                        .queue
                        .push_back(Bytes::from(server_frame(Update::Heartbeat))),
                    Ok(Some(event)) => s.queue.extend(s.encoder.encode(&event)),
                    Ok(None) => {
                        s.encoder.ended = true;
                        s.queue.push_back(end_with_error(&ApiError::new(
                            ErrorKind::BadGateway,
                            "the local model stopped before finishing its reply",
                        )));
                    }
                }
            }
        })
    }
}

/// Watches a root turn's RunSSE reply, local or the origin's: reads its frames as they
/// pass (debug dumps, the tool codec) and, when it ends or the client leaves, touches
/// the turn's family and writes the dump.
struct TurnWatch {
    mitm: Arc<Mitm>,
    request_id: String,
    /// The debug dump's record: whose reply this is.
    dump: &'static str,
    /// Reads the frames as they pass (debug dumps, or the tool codec).
    decoder: Option<FrameDecoder>,
    /// Decoded frames for the debug dump.
    views: Option<Vec<serde_json::Value>>,
    /// `mitm.agent_rpc_tool_codec`: name the origin's tool calls in the log.
    tool_codec: bool,
}

impl TurnWatch {
    /// A watcher for `request_id`'s reply; `gzip`: its frames are compressed.
    fn new(
        mitm: &Arc<Mitm>,
        request_id: String,
        dump: &'static str,
        gzip: bool,
        tool_codec: bool,
    ) -> TurnWatch {
        let debug = mitm.debug_rpc();
        TurnWatch {
            mitm: mitm.clone(),
            request_id,
            dump,
            decoder: (debug || tool_codec).then(|| FrameDecoder::new(gzip)),
            views: debug.then(Vec::new),
            tool_codec,
        }
    }
}

impl Observer for TurnWatch {
    fn data(&mut self, data: &Bytes) {
        let Some(decoder) = self.decoder.as_mut() else {
            return;
        };
        decoder.push(data);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    if self.tool_codec {
                        log_tool_call(&self.request_id, &frame);
                    }
                    if let Some(views) = self.views.as_mut() {
                        views.push(view::frame(&frame));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    // Not Connect framing after all: stop reading, keep relaying.
                    if let Some(views) = self.views.as_mut() {
                        views.push(json!({"decode_error": e.to_string()}));
                    }
                    self.decoder = None;
                    break;
                }
            }
        }
    }

    /// Its `Drop` does the work, so a client that leaves is handled the same.
    fn finish(self, _failure: Option<String>) {}
}

/// The tool codec: say which of the usual tools the origin asked the client to run.
fn log_tool_call(request_id: &str, frame: &glider_cursorrpc::Frame) {
    let Ok(message) = glider_cursorrpc::AgentServerMessage::decode(&frame.payload) else {
        return;
    };
    if let Some(Update::ToolCallStarted(call)) = message.interaction_update.map(|u| u.update) {
        tracing::info!(request_id, tool = %call.tool_name(), call_id = %call.call_id, "Agent RPC: the origin started a tool call");
    }
}

impl Drop for TurnWatch {
    fn drop(&mut self) {
        self.mitm.turn_ended(&self.request_id);
        if let Some(views) = self.views.take() {
            self.mitm.dumps.dump_record(
                self.dump,
                &json!({"request_id": self.request_id, "frames": views}),
            );
        }
    }
}

/// Whether a streaming Connect message declares gzip for its frames.
fn gzip_stream(headers: &HeaderMap) -> bool {
    headers
        .get("connect-content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"))
}

/// A unary Connect body's message (gunzipped when `content-encoding: gzip`).
fn unary_payload(headers: &HeaderMap, body: &[u8]) -> Result<Vec<u8>, glider_cursorrpc::Error> {
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
fn run_sse_request_id(headers: &HeaderMap, body: &[u8]) -> Option<String> {
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
fn connect_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
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

/// A streaming Connect error: HTTP 200 and one end-of-stream frame.
fn stream_error(error: &ApiError) -> Response<Body> {
    let mut response = Response::new(Body::from(end_with_error(error)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/connect+proto"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_cursorrpc::frame::Frame as ConnectFrame;
    use glider_cursorrpc::frame::decode_all;
    use glider_cursorrpc::messages::AgentServerMessage;
    use glider_ngl::{StopReason, Usage};

    fn events(list: Vec<StreamEvent>) -> EventStream {
        Box::pin(futures_util::stream::iter(list))
    }

    fn text(t: &str) -> StreamEvent {
        StreamEvent::TextDelta {
            index: 0,
            text: t.into(),
        }
    }

    async fn frames_of(reply: LocalReply) -> Vec<ConnectFrame> {
        let chunks: Vec<Bytes> = reply
            .into_stream()
            .map(|chunk| match chunk {
                Ok(bytes) => bytes,
                Err(never) => match never {},
            })
            .collect()
            .await;
        decode_all(&chunks.concat(), false).expect("valid frames")
    }

    fn update_of(frame: &ConnectFrame) -> Option<Update> {
        AgentServerMessage::decode(&frame.payload)
            .ok()?
            .interaction_update
            .map(|u| u.update)
    }

    #[tokio::test]
    async fn a_local_reply_is_text_then_turn_ended_then_a_clean_end() {
        let reply = LocalReply::start(events(vec![
            StreamEvent::Start {
                id: "x".into(),
                model: "m".into(),
                usage: Usage::default(),
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "hmm".into(),
            },
            text("Hel"),
            text("lo"),
            StreamEvent::Finish {
                stop_reason: StopReason::EndTurn,
                stop_sequence: None,
                usage: Usage {
                    output_tokens: 2,
                    ..Usage::default()
                },
            },
        ]))
        .await
        .expect("starts");
        let frames = frames_of(reply).await;
        let updates: Vec<_> = frames.iter().filter_map(update_of).collect();
        assert_eq!(
            updates,
            vec![
                Update::ThinkingDelta("hmm".into()),
                Update::TextDelta("Hel".into()),
                Update::TextDelta("lo".into()),
                Update::TokenDelta(2),
                Update::TurnEnded,
            ]
        );
        let last = frames.last().expect("frames");
        assert_eq!(
            last.end_of_stream().expect("end").expect("json"),
            EndOfStream::ok()
        );
    }

    #[tokio::test]
    async fn a_failure_before_any_text_is_an_err_so_the_origin_may_still_answer() {
        let failed = LocalReply::start(events(vec![
            StreamEvent::Start {
                id: "x".into(),
                model: "m".into(),
                usage: Usage::default(),
            },
            StreamEvent::Error {
                error: ApiError::new(ErrorKind::BadGateway, "boom"),
            },
        ]))
        .await;
        assert_eq!(failed.err().map(|e| e.message), Some("boom".to_owned()));
        let empty = LocalReply::start(events(Vec::new())).await;
        assert!(empty.is_err());
    }

    #[tokio::test]
    async fn a_failure_after_a_partial_write_ends_the_stream_with_an_error_frame() {
        let reply = LocalReply::start(events(vec![
            text("partial"),
            StreamEvent::Error {
                error: ApiError::new(ErrorKind::Unavailable, "backend died"),
            },
        ]))
        .await
        .expect("the first text was ready");
        let frames = frames_of(reply).await;
        assert_eq!(
            update_of(&frames[0]),
            Some(Update::TextDelta("partial".into()))
        );
        let end = frames[1].end_of_stream().expect("end").expect("json");
        let error = end.error.expect("an error");
        assert_eq!(error.message, "backend died");
        assert_eq!(error.code, "unavailable");
    }

    async fn next_update(
        stream: &mut (impl Stream<Item = Result<Bytes, Infallible>> + Unpin),
    ) -> Option<Update> {
        let Some(Ok(bytes)) = stream.next().await else {
            panic!("the stream ended early");
        };
        let frames = decode_all(&bytes, false).expect("frames");
        update_of(&frames[0])
    }

    #[tokio::test(start_paused = true)]
    async fn silences_are_filled_with_heartbeats() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let events: EventStream = Box::pin(futures_util::stream::unfold(rx, |mut rx| async {
            rx.recv().await.map(|event| (event, rx))
        }));
        tx.send(text("thinking about it")).expect("send");
        let reply = LocalReply::start(events).await.expect("starts");
        let mut stream = Box::pin(reply.into_stream());
        assert_eq!(
            next_update(&mut stream).await,
            Some(Update::TextDelta("thinking about it".into()))
        );
        let start = tokio::time::Instant::now();
        assert_eq!(next_update(&mut stream).await, Some(Update::Heartbeat));
        assert_eq!(start.elapsed(), HEARTBEAT_EVERY);
        tx.send(text("done")).expect("send");
        assert_eq!(
            next_update(&mut stream).await,
            Some(Update::TextDelta("done".into()))
        );
        // The model's stream stops without finishing: an error frame ends the reply.
        drop(tx);
        let last = stream.next().await.expect("a last frame").expect("bytes");
        let end = decode_all(&last, false).expect("frames")[0]
            .end_of_stream()
            .expect("end")
            .expect("json");
        assert!(end.error.is_some());
        assert!(stream.next().await.is_none());
    }

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
    fn rpc_paths() {
        assert_eq!(
            rpc(&Method::POST, "/aiserver.v1.BidiService/BidiAppend"),
            Some(Rpc::BidiAppend)
        );
        assert_eq!(
            rpc(&Method::POST, "/agent.v1.AgentService/RunSSE"),
            Some(Rpc::RunSse)
        );
        assert_eq!(rpc(&Method::GET, "/agent.v1.AgentService/RunSSE"), None);
        assert_eq!(rpc(&Method::POST, "/agent.v1.AgentService/Run"), None);
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
