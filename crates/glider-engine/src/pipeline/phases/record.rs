//! Record: the answering backend and model go on the record, and the reply is shaped
//! for the door — the backend's bytes when it speaks the client's dialect, else
//! decoded ngl (a stream of events or a whole response; always decoded when Glider set
//! the output cap or sent a schema as a tool, see [`crate::local_reply`]), with
//! Glider's own stop-sequence matching on a local backend's translated reply
//! ([`stops`](crate::pipeline::stops)).

use glider_dialects::codec;
use glider_ngl::{ApiError, ErrorKind};

use futures_util::{Stream, StreamExt};
use glider_ngl::stream::ResponseBuilder;
use glider_ngl::{Response, StreamEvent};

use super::{Flow, Job, Phase, PhaseFuture};
use crate::pipeline::reply::{Answered, CompletionBody, decode_events};
use crate::pipeline::stops::{self, StopMatcher};

pub(crate) struct Record;

impl Phase for Record {
    fn name(&self) -> &'static str {
        "record"
    }

    fn run<'a>(&'a self, job: &'a mut Job) -> PhaseFuture<'a> {
        PhaseFuture::waiting(async move {
            let (Some(decision), Some(executed)) = (job.decision.take(), job.executed.take())
            else {
                return Flow::Fail(ApiError::new(
                    ErrorKind::Internal,
                    "pipeline phases out of order: nothing was executed",
                ));
            };
            let Some(candidate) = decision.candidates.get(executed.index) else {
                return Flow::Fail(ApiError::new(
                    ErrorKind::Internal,
                    "the executor answered for a candidate the route does not have",
                ));
            };
            let front = job.front;
            let stream = job.request.stream;
            let tracker = &mut job.tracker;
            tracker.record.backend = Some(candidate.backend.name().to_owned());
            tracker.record.model_used = Some(candidate.model.clone());
            tracker.record.local = Some(candidate.backend.is_local());
            tracker.first_byte();
            let backend_dialect = candidate.backend.dialect_for(front);
            tracing::info!(
                front = front.as_str(),
                requested = %job.request.model,
                backend = candidate.backend.name(),
                model = %candidate.model,
                rule = decision.rule.as_str(),
                tokens = job.tokens,
                stream,
                fallbacks = executed.failures.len(),
                "completion routed"
            );
            let response = executed.response;
            // A local reply whose ending or content Glider may rewrite is decoded.
            let ending = job.endings.get(executed.index).copied().flatten();
            let glider_stops = stops::applied_by_glider(front, &job.request, &candidate.backend)
                .then(|| StopMatcher::new(&job.request.stop))
                .flatten();
            let body = if let Some(matcher) = glider_stops {
                // Upstream streamed (see `upstream::for_candidate`), whatever the client
                // asked for.
                let events = stops::cut_events(
                    decode_events(
                        codec(backend_dialect).stream_decoder(),
                        response.first_chunk,
                        response.rest,
                    ),
                    matcher,
                    job.tokens,
                );
                if stream {
                    CompletionBody::Events(events)
                } else {
                    match collect(events).await {
                        Ok(response) => CompletionBody::Whole(response),
                        Err(error) => return Flow::Fail(error),
                    }
                }
            } else if backend_dialect == front && !ending.is_some_and(|e| e.rewrites()) {
                tracker.observe_raw_in(backend_dialect, stream);
                CompletionBody::Raw {
                    content_type: response.content_type,
                    first_chunk: response.first_chunk,
                    rest: response.rest,
                }
            } else if stream {
                CompletionBody::Events(decode_events(
                    codec(backend_dialect).stream_decoder(),
                    response.first_chunk,
                    response.rest,
                ))
            } else {
                let whole = match response.collect().await {
                    Ok(whole) => whole,
                    Err(failure) => {
                        return Flow::Fail(ApiError::new(failure.kind, failure.to_string()));
                    }
                };
                match codec(backend_dialect).decode_response(&whole) {
                    Ok(response) => CompletionBody::Whole(response),
                    Err(error) => return Flow::Fail(error),
                }
            };
            Flow::Answer(Box::new(Answered {
                backend: candidate.backend.name().to_owned(),
                model: candidate.model.clone(),
                stream,
                body,
                failures: executed.failures,
                decision,
                ending,
            }))
        })
    }
}

/// A whole reply out of a stream of events.
pub(super) async fn collect(
    mut events: impl Stream<Item = StreamEvent> + Unpin,
) -> Result<Response, ApiError> {
    let mut builder = ResponseBuilder::new();
    while let Some(event) = events.next().await {
        builder.push(&event);
    }
    builder.finish()
}
