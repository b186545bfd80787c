//! RunSSE, the reply: wait for the BidiAppend's decision and carry a local one out
//! (the spec's `CompleteLocal`) as RunSSE frames with heartbeats. Until the first
//! frame is ready nothing is written, so a failure may still go to the origin; after
//! it, a failure ends the stream with an error frame.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use glider_cursorrpc::reply::{FrameEncoder, error_frame};
use glider_cursorrpc::{Update, server_frame};
use glider_door::{Door, ObservedBody, Outcome, ToOrigin, after_local_error, carry_out};
use glider_engine::{CompletionBody, decode_events};
use glider_ngl::{ApiError, Dialect, ErrorKind, StreamEvent};
use http::{HeaderValue, Response, header};

use super::connect::run_sse_request_id;
use super::decide::LocalTurn;
use super::hub::{Decision, WAIT};
use super::plane::HEARTBEAT_EVERY;
use super::watch::TurnWatch;
use crate::Mitm;
use crate::handler::Target;

type EventStream = Pin<Box<dyn Stream<Item = StreamEvent> + Send>>;

/// Wait for a RunSSE's decision and answer it locally when it is local. `Err`: the
/// request id whose stream the origin answers instead.
pub(super) async fn run_sse(
    mitm: &Arc<Mitm>,
    parts: &http::request::Parts,
    body: &Bytes,
    target: &Target,
) -> Result<Response<Body>, String> {
    let request_id = run_sse_request_id(&parts.headers, body);
    let decision = match &request_id {
        Some(id) => mitm.agent_rpc.hub.wait(id, WAIT).await,
        None => {
            tracing::info!(host = %target.host, "Agent RPC: RunSSE without a readable request id; to the origin");
            None
        }
    };
    let request_id = request_id.unwrap_or_default();
    if let Some(Decision::Local(turn)) = decision {
        match answer_locally(mitm, &request_id, turn).await {
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
    mitm: &Arc<Mitm>,
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
    let outcome = carry_out(Door::Mitm, &mitm.engine, prepared).await;
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
        .map_err(|error| NotLocal::failed(after_local_error(Door::Mitm, &mitm.engine, error)))?;
    let mut response = Response::new(Body::new(ObservedBody::new(
        Body::from_stream(reply.into_stream()),
        TurnWatch::new(
            mitm,
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
                if s.encoder.ended() {
                    return None;
                }
                match tokio::time::timeout(HEARTBEAT_EVERY, s.rest.next()).await {
                    Err(_) => s
                        .queue
                        .push_back(Bytes::from(server_frame(Update::Heartbeat))),
                    Ok(Some(event)) => s.queue.extend(s.encoder.encode(&event)),
                    Ok(None) => {
                        let error = ApiError::new(
                            ErrorKind::BadGateway,
                            "the local model stopped before finishing its reply",
                        );
                        s.queue.push_back(s.encoder.fail(&error));
                    }
                }
            }
        })
    }
}

/// A streaming Connect error: HTTP 200 and one end-of-stream frame.
fn stream_error(error: &ApiError) -> Response<Body> {
    let mut response = Response::new(Body::from(error_frame(error)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/connect+proto"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_cursorrpc::EndOfStream;
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
}
