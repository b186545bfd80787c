//! The door sequence, the same for every door: read the body under
//! `server.max_body_bytes`, let a delegate take a flagged message first, run the
//! pipeline, then apply `mitm.origin_on_local_error`. The result is an [`Outcome`]
//! the door renders in its own way (HTTP in the caller's dialect, or Cursor frames).

use bytes::Bytes;
use glider_delegate::{Delegation, Delegator};
use glider_engine::{
    Bus, CompleteError, Completion, CompletionRequest, Engine, Prepared, RouteDecision, Tracker,
};
use glider_ngl::{ApiError, Dialect, ErrorKind};
use glider_sys::listen::{BodyTimedOut, DeadlineBody};
use http::HeaderMap;
use http_body_util::{BodyExt, Limited};
use std::time::Duration;

pub use glider_engine::Door;

/// The pipeline request for a body that came through `door`.
fn completion_request(
    door: Door,
    front: Dialect,
    body: Bytes,
    headers: HeaderMap,
) -> CompletionRequest {
    match door {
        Door::Gateway => CompletionRequest::gateway(front, body, headers),
        Door::Mitm => CompletionRequest::mitm(front, body, headers, true),
    }
}

/// Whose limit a too-large body broke, in the 413's message.
fn limit_owner(door: Door) -> &'static str {
    match door {
        Door::Gateway => "the configured limit",
        Door::Mitm => "Glider's limit",
    }
}

/// The door sequence's steps two to four for a body already read, through `door`:
/// delegation first (a flagged message never enters the pipeline nor reaches an origin;
/// only when `delegator` is given), then the pipeline, then the origin-on-local-error
/// rule. The headers and body move into the pipeline's request (a door that still needs
/// them keeps its own copy).
pub async fn answer(
    door: Door,
    engine: &Engine,
    delegator: Option<&Delegator>,
    front: Dialect,
    headers: HeaderMap,
    body: Bytes,
) -> Outcome {
    if let Some(delegation) = delegation(engine, delegator, front, &headers, &body) {
        return Outcome::Delegated(delegation);
    }
    let request = completion_request(door, front, body, headers);
    outcome(door, engine, engine.complete(request).await)
}

/// Steps three and four for a request decided earlier (the spec's `CompleteLocal` after
/// a `DecideLocal`): carry out exactly `prepared`'s decision, then the
/// origin-on-local-error rule.
pub async fn carry_out(door: Door, engine: &Engine, prepared: Prepared) -> Outcome {
    outcome(door, engine, engine.complete_prepared(prepared).await)
}

/// The `mitm.origin_on_local_error` rule for a local answer that failed before anything
/// was written: the origin answers instead (MITM, rule on), or the client sees the
/// error.
pub fn after_local_error(door: Door, engine: &Engine, error: ApiError) -> Outcome {
    if door == Door::Mitm && engine.runtime().config.mitm.origin_on_local_error {
        Outcome::Origin(ToOrigin::LocalFailed(error))
    } else {
        Outcome::Error(error)
    }
}

/// Step two: a delegate takes a flagged message (only when `delegator` is given).
pub(crate) fn delegation(
    engine: &Engine,
    delegator: Option<&Delegator>,
    front: Dialect,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<Delegation> {
    delegator?.take(
        &engine.runtime().config.delegate,
        front,
        headers,
        body,
        engine.context_sink(),
    )
}

/// The door's outcome for what the pipeline said.
pub(crate) fn outcome(
    door: Door,
    engine: &Engine,
    result: Result<Completion, CompleteError>,
) -> Outcome {
    match result {
        Ok(completion) => Outcome::Reply(Box::new(completion)),
        Err(CompleteError::OriginPassthrough { decision, tracker }) => {
            Outcome::Origin(ToOrigin::Decided { decision, tracker })
        }
        Err(CompleteError::Api(error)) => after_local_error(door, engine, error),
    }
}

/// What the door sequence decided for one request.
pub enum Outcome {
    /// A delegate took the message: render it with [`crate::render::delegation`].
    Delegated(Delegation),
    /// The pipeline answered (boxed: a completion is far larger than the other cases).
    Reply(Box<Completion>),
    /// Send the original request to the origin with its credentials unchanged (MITM only).
    Origin(ToOrigin),
    /// Show this error to the client, in its dialect.
    Error(ApiError),
}

/// Why a request goes to the origin after all.
pub enum ToOrigin {
    /// The pipeline decided it is not a local request; its tracker records it.
    Decided {
        decision: Box<RouteDecision>,
        tracker: Box<Tracker>,
    },
    /// The local answer failed and `mitm.origin_on_local_error` sends it on.
    LocalFailed(ApiError),
}

/// The shape the pipeline's own `CompleteError` prints, for logs and the gateway's
/// "unexpected outcome" error.
impl std::fmt::Debug for ToOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToOrigin::Decided { decision, .. } => write!(
                f,
                "OriginPassthrough({}: {})",
                decision.rule, decision.reason
            ),
            ToOrigin::LocalFailed(error) => write!(f, "LocalFailed({error})"),
        }
    }
}

impl ToOrigin {
    /// The record of the origin's leg: the pipeline's own, or a new one saying that the
    /// local answer failed (announced, backend `origin`, rule `origin_on_local_error`).
    pub fn into_tracker(self, bus: &Bus, front: Dialect, headers: &HeaderMap) -> Tracker {
        match self {
            ToOrigin::Decided { tracker, .. } => *tracker,
            ToOrigin::LocalFailed(error) => {
                let mut tracker = bus.start_for(Door::Mitm, front, headers);
                tracker.record.backend = Some("origin".into());
                tracker.record.local = Some(false);
                tracker.record.rule = Some("origin_on_local_error".into());
                tracker.record.reason = Some(format!("local answer failed: {}", error.message));
                tracker.record.fallbacks = vec![error.message];
                tracker.announce();
                tracker
            }
        }
    }
}

/// A request body that could not be read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyError {
    /// The body is longer than the limit (else it broke off while being read).
    pub too_large: bool,
    pub limit: usize,
    /// The reader's own words.
    pub cause: String,
    /// The body did not arrive in full within this time of its head (a 408).
    pub timed_out_after: Option<Duration>,
}

impl BodyError {
    /// The error in ngl terms, for a door that answers in the caller's dialect: a 413
    /// naming `server.max_body_bytes`, or a 400.
    /// The HTTP status of the refusal: 408 past the time, 413 over the size, else 400.
    pub fn status(&self) -> http::StatusCode {
        if self.timed_out_after.is_some() {
            http::StatusCode::REQUEST_TIMEOUT
        } else if self.too_large {
            http::StatusCode::PAYLOAD_TOO_LARGE
        } else {
            http::StatusCode::BAD_REQUEST
        }
    }

    pub fn api_error(&self, door: Door) -> ApiError {
        if let Some(after) = self.timed_out_after {
            ApiError::invalid(BodyTimedOut { after }.to_string())
        } else if self.too_large {
            ApiError::new(
                ErrorKind::RequestTooLarge,
                format!(
                    "request body exceeds {} of {} bytes (server.max_body_bytes)",
                    limit_owner(door),
                    self.limit
                ),
            )
        } else {
            ApiError::invalid(format!("could not read the request body: {}", self.cause))
        }
    }
}

/// Step one of the sequence: the whole body, at most `limit` bytes of it.
pub async fn read_limited<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => Err(BodyError {
            too_large: e.is::<http_body_util::LengthLimitError>(),
            limit,
            cause: e.to_string(),
            timed_out_after: e.downcast_ref::<BodyTimedOut>().map(|t| t.after),
        }),
    }
}

/// Step one under both of the server's limits, as every door reads a request: at most
/// `limit` bytes (`server.max_body_bytes`), in full within `time` of its head
/// (`server.body_read_timeout_secs`), however slowly the bytes trickle in.
pub async fn read_within<B>(body: B, limit: usize, time: Duration) -> Result<Bytes, BodyError>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    read_limited(DeadlineBody::new(body, time), limit).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[tokio::test]
    async fn a_body_under_the_limit_is_read_whole() {
        let body = read_limited(Full::new(Bytes::from_static(b"hello")), 5).await;
        assert_eq!(body, Ok(Bytes::from_static(b"hello")));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_a_413_naming_the_setting() {
        let error = read_limited(Full::new(Bytes::from_static(b"hello!")), 5)
            .await
            .expect_err("over the limit");
        assert!(error.too_large);
        let api = error.api_error(Door::Gateway);
        assert_eq!(api.kind, ErrorKind::RequestTooLarge);
        assert_eq!(
            api.message,
            "request body exceeds the configured limit of 5 bytes (server.max_body_bytes)"
        );
        assert!(
            error
                .api_error(Door::Mitm)
                .message
                .contains("Glider's limit of 5 bytes")
        );
    }
}
