//! What the pipeline hands back to a door: the reply (raw bytes, ngl events or a whole
//! response), or why there is none, and the wrapping that records the request on the
//! bus when the reply ends. A forwarded stream that breaks off — a transport error, a
//! stall past the idle timeout, or a clean close before the dialect's terminator
//! (`[DONE]`, `message_stop`, `response.completed`, `done: true`) — ends with the
//! dialect's own error event and is recorded as the backend's failure, never as a
//! success or as a client that went away.

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use glider_backend::{AttemptFailure, BodyStream};
use glider_dialects::{StreamDecoder, codec};
use glider_ngl::stream::events_of;
use glider_ngl::{ApiError, Dialect, ErrorKind, Part, Response, StopReason, StreamEvent, Usage};

use crate::events::Tracker;
use crate::local_reply::{Ended, EndingStream, LocalEnding, end_whole};
use crate::router::RouteDecision;

/// Why the pipeline did not produce a reply.
pub enum CompleteError {
    /// Show this error to the client, in its dialect.
    Api(ApiError),
    /// MITM only: not a local request; forward it to the origin. The tracker records
    /// the request; the door fills in the origin's status before dropping it.
    OriginPassthrough {
        decision: Box<RouteDecision>,
        tracker: Box<Tracker>,
    },
}

impl From<ApiError> for CompleteError {
    fn from(error: ApiError) -> Self {
        CompleteError::Api(error)
    }
}

impl std::fmt::Debug for CompleteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompleteError::Api(error) => write!(f, "Api({error})"),
            CompleteError::OriginPassthrough { decision, .. } => {
                write!(
                    f,
                    "OriginPassthrough({}: {})",
                    decision.rule, decision.reason
                )
            }
        }
    }
}

/// How the reply body reaches the client.
pub enum CompletionBody {
    /// The backend speaks the client's dialect: its bytes, untouched. A stream that
    /// breaks off ends with the dialect's error event (already in `rest`); a whole
    /// body that breaks off ends with the `Err`, for the door to abort the reply.
    Raw {
        content_type: Option<String>,
        first_chunk: Bytes,
        rest: BodyStream,
    },
    /// A translated stream of ngl events (encode with the front codec).
    Events(Pin<Box<dyn Stream<Item = StreamEvent> + Send>>),
    /// A translated whole reply.
    Whole(Response),
}

/// A reply with the decision that produced it.
pub struct Completion {
    /// The request's id on the event bus.
    pub id: u64,
    pub decision: RouteDecision,
    /// The backend and model that answered.
    pub backend: String,
    pub model: String,
    /// Whether the client asked for a stream.
    pub stream: bool,
    pub body: CompletionBody,
    /// Attempts that failed before the one that answered.
    pub failures: Vec<AttemptFailure>,
    /// What fitting took out of the request the answering backend was sent that the
    /// client must be told of, not only the record (images a model cannot see replaced
    /// by a note): the door sends them as `x-glider-warning`.
    pub warnings: Vec<String>,
}

/// The fitting notes (`crate::fit`) that say the model was sent less than the client
/// asked: these go to the client as well as the record.
const WARNED_NOTES: [&str; 1] = [crate::fit::IMAGES_REPLACED];

impl Completion {
    /// The `x-glider-route` header value.
    pub fn route_header(&self) -> String {
        self.decision.header_value(&self.backend, &self.model)
    }
}

/// A completion before its body is wrapped for tracking.
pub(crate) struct Answered {
    pub(crate) backend: String,
    pub(crate) model: String,
    pub(crate) decision: RouteDecision,
    pub(crate) stream: bool,
    pub(crate) body: CompletionBody,
    pub(crate) failures: Vec<AttemptFailure>,
    /// How a local candidate's decoded reply ends ([`crate::local_reply`]); `None` for
    /// a cloud one, and for a reply Glider made itself.
    pub(crate) ending: Option<LocalEnding>,
}

impl Answered {
    /// A reply Glider makes itself, without a backend (`backend` names what made it):
    /// one assistant message of `text` ending the turn, streamed in the client's own
    /// stream grammar when it asked for a stream.
    pub(crate) fn from_glider(
        backend: &str,
        model: &str,
        decision: RouteDecision,
        stream: bool,
        id: String,
        text: String,
    ) -> Answered {
        let response = Response {
            id,
            model: model.to_owned(),
            parts: vec![Part::text(text)],
            stop_reason: StopReason::EndTurn,
            stop_sequence: None,
            usage: Usage::default(),
        };
        Answered::glider_response(backend, model, decision, stream, response)
    }

    /// A whole reply Glider made itself (`backend` and `model` name what made it),
    /// streamed in the client's own grammar when it asked for a stream.
    pub(crate) fn glider_response(
        backend: &str,
        model: &str,
        decision: RouteDecision,
        stream: bool,
        response: Response,
    ) -> Answered {
        let body = if stream {
            CompletionBody::Events(Box::pin(futures_util::stream::iter(events_of(&response))))
        } else {
            CompletionBody::Whole(response)
        };
        Answered {
            backend: backend.to_owned(),
            model: model.to_owned(),
            decision,
            stream,
            body,
            failures: Vec::new(),
            ending: None,
        }
    }

    /// Hand the tracker to the body, so the request is recorded when the reply ends
    /// (or when the client drops it).
    pub(crate) fn finish(self, mut tracker: Tracker) -> Completion {
        let id = tracker.id();
        // Fitting's lines are `backend: note`; only the answering backend's count.
        let warnings = tracker
            .record
            .fitted
            .iter()
            .filter_map(|line| line.strip_prefix(self.backend.as_str())?.strip_prefix(": "))
            .filter(|note| WARNED_NOTES.iter().any(|warned| note.contains(warned)))
            .map(str::to_owned)
            .collect();
        let body = match self.body {
            CompletionBody::Raw {
                content_type,
                first_chunk,
                rest,
            } => {
                tracker.raw_bytes(&first_chunk);
                CompletionBody::Raw {
                    content_type,
                    first_chunk,
                    rest: forwarded(rest, tracker, self.stream),
                }
            }
            CompletionBody::Events(events) => match self.ending {
                None => CompletionBody::Events(Box::pin(tracked(events, tracker, Tracker::event))),
                Some(ending) => {
                    // The tracker sees the reply as the client gets it, and the
                    // rewritten ending's line goes on the record.
                    let backend = self.backend.clone();
                    let observe = move |t: &mut Tracker, ended: &Ended| match ended {
                        Ended::Event(event) => t.event(event),
                        Ended::Record(line) => t.record.fitted.push(format!("{backend}: {line}")),
                    };
                    let mut ender = EndingStream::new(ending);
                    let ended = events
                        .flat_map(move |event| futures_util::stream::iter(ender.event(event)));
                    CompletionBody::Events(Box::pin(tracked(ended, tracker, observe).filter_map(
                        |ended| {
                            std::future::ready(match ended {
                                Ended::Event(event) => Some(event),
                                Ended::Record(_) => None,
                            })
                        },
                    )))
                }
            },
            CompletionBody::Whole(mut response) => {
                if let Some(ending) = self.ending {
                    for line in end_whole(&mut response, ending) {
                        tracker
                            .record
                            .fitted
                            .push(format!("{}: {line}", self.backend));
                    }
                }
                tracker.response(&response);
                tracker.end();
                CompletionBody::Whole(response)
            }
        };
        Completion {
            id,
            backend: self.backend,
            model: self.model,
            decision: self.decision,
            stream: self.stream,
            body,
            failures: self.failures,
            warnings,
        }
    }
}

/// `stream`, with each item shown to the tracker, which ends with the stream (or is
/// dropped with it, which records a client that went away).
fn tracked<S, T, F>(stream: S, tracker: Tracker, observe: F) -> impl Stream<Item = T> + Send
where
    S: Stream<Item = T> + Send + Unpin + 'static,
    T: Send + 'static,
    F: FnMut(&mut Tracker, &T) + Send + 'static,
{
    futures_util::stream::unfold(
        (stream, Some(tracker), observe),
        move |(mut stream, mut tracker, mut observe)| async move {
            match stream.next().await {
                Some(item) => {
                    if let Some(t) = &mut tracker {
                        observe(t, &item);
                    }
                    Some((item, (stream, tracker, observe)))
                }
                None => {
                    if let Some(mut t) = tracker.take() {
                        t.end();
                    }
                    None
                }
            }
        },
    )
}

/// The rest of a same-dialect reply on its way to the client, its bytes shown to the
/// tracker. The end decides the record: a clean end of a complete reply is a success;
/// a transport failure or stall (`Err`) or, for a stream, a close before the dialect's
/// terminator is the backend's failure (504 for a stall, 502 otherwise), and a stream
/// then gets the client dialect's error event as its last bytes.
fn forwarded(rest: BodyStream, tracker: Tracker, stream: bool) -> BodyStream {
    let front = tracker.record.front;
    Box::pin(futures_util::stream::unfold(
        (rest, Some(tracker)),
        move |(mut rest, tracker)| async move {
            let mut t = tracker?;
            let failure = match rest.next().await {
                Some(Ok(bytes)) => {
                    t.raw_bytes(&bytes);
                    return Some((Ok(bytes), (rest, Some(t))));
                }
                Some(Err(failure)) => {
                    ApiError::new(failure.kind, format!("backend stream failed: {failure}"))
                }
                None => match stream.then(|| t.raw_truncation()).flatten() {
                    Some(truncated) => truncated,
                    None => {
                        t.end();
                        return None;
                    }
                },
            };
            tracing::warn!(backend = ?t.record.backend, error = %failure.message, "backend reply broke off");
            t.fail(failure_status(failure.kind), &failure.message);
            let last = if stream {
                Ok(stream_error_event(front, failure))
            } else {
                Err(AttemptFailure::new(
                    t.record.backend.clone().unwrap_or_default(),
                    failure.kind,
                    failure.message,
                    false,
                ))
            };
            // The tracker is dropped here, with the failure on its record.
            Some((last, (rest, None)))
        },
    ))
}

/// The status recorded for a reply that broke off: a stall is the gateway timeout
/// class, anything else a bad gateway (the client saw 200 headers either way).
fn failure_status(kind: ErrorKind) -> u16 {
    match kind {
        ErrorKind::Timeout => ErrorKind::Timeout.status(),
        _ => ErrorKind::BadGateway.status(),
    }
}

/// `error` as `front`'s stream error event: how a stream that cannot go on ends (a
/// broken-off backend stream here, a drain deadline in the door kit).
pub fn stream_error_event(front: Dialect, error: ApiError) -> Bytes {
    let mut out = Vec::new();
    codec(front)
        .stream_encoder()
        .encode(&StreamEvent::Error { error }, &mut out);
    Bytes::from(out)
}

/// A backend's raw streamed reply as ngl events, decoded by `decoder` as the bytes
/// arrive; a transport or decode failure ends the stream with `StreamEvent::Error`.
pub fn decode_events(
    decoder: Box<dyn StreamDecoder>,
    first_chunk: Bytes,
    rest: BodyStream,
) -> Pin<Box<dyn Stream<Item = StreamEvent> + Send>> {
    struct State {
        decoder: Box<dyn StreamDecoder>,
        first: Option<Bytes>,
        rest: BodyStream,
        queue: VecDeque<StreamEvent>,
        done: bool,
    }
    let state = State {
        decoder,
        first: Some(first_chunk),
        rest,
        queue: VecDeque::new(),
        done: false,
    };
    Box::pin(futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.queue.pop_front() {
                if matches!(event, StreamEvent::Error { .. }) {
                    s.done = true;
                    s.queue.clear();
                }
                return Some((event, s));
            }
            if s.done {
                return None;
            }
            let chunk = match s.first.take() {
                Some(first) => Some(Ok(first)),
                None => s.rest.next().await,
            };
            match chunk {
                Some(Ok(bytes)) => match s.decoder.feed(&bytes) {
                    Ok(events) => s.queue.extend(events),
                    Err(error) => s.queue.push_back(StreamEvent::Error { error }),
                },
                Some(Err(failure)) => s.queue.push_back(StreamEvent::Error {
                    error: ApiError::new(failure.kind, format!("backend stream failed: {failure}")),
                }),
                None => {
                    s.queue.extend(s.decoder.finish());
                    s.done = true;
                }
            }
        }
    }))
}
