//! The backup sequence: try candidates in order of usability (configured, breaker
//! admits, healthy, warm), each until the first byte of a good reply; on failure record
//! it and go on. After the first byte the choice is final: a later failure is the
//! stream's problem, reported in the client's dialect, never a silent switch. Only a
//! backend that is unwell (no connection, timeout, 5xx) counts toward its breaker; a
//! 4xx is the request's or its key's, and a 429 with `retry-after` cools that caller
//! down on that backend instead. Candidates from a `reserve` index on stand behind
//! the rest: they are tried only when every earlier attempt could not reach its
//! backend at all (`routing.local_fallback`: the cloud is down, the local model is up).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::breaker::{Admission, ProbeGuard};
use crate::client::{Backend, BodyStream, UpstreamRequest, UpstreamResponse};
pub use crate::failure::AttemptFailure;
use crate::health::HealthStatus;
use futures_util::StreamExt;
use glider_ngl::{ApiError, ErrorKind};

/// One (backend, model) pair the router would accept.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub backend: Arc<Backend>,
    pub model: String,
}

/// The attempt that answered.
pub struct Executed {
    /// Index into the candidates given to [`execute`].
    pub index: usize,
    pub response: UpstreamResponse,
    /// Attempts that failed before this one.
    pub failures: Vec<AttemptFailure>,
}

/// The order in which to try `candidates` before `reserve`: usable before blocked or
/// down ones, and, among backends of the same locality, warm before cold. The router's
/// order is kept otherwise (it already put the preferred side first). The reserve
/// follows, in its own order.
pub fn attempt_order(candidates: &[Candidate], reserve: usize) -> Vec<usize> {
    let reserve = reserve.min(candidates.len());
    let mut order: Vec<usize> = (0..reserve).collect();
    let first_local = candidates.first().map(|c| c.backend.is_local());
    order.sort_by_key(|&i| {
        let c = &candidates[i];
        let health = c.backend.health();
        let blocked = c.backend.unavailable.is_some() || health.status == HealthStatus::Down;
        let other_side = Some(c.backend.is_local()) != first_local;
        let cold = c.backend.is_local() && !c.backend.is_warm(&c.model);
        (blocked, other_side, cold)
    });
    order.extend(reserve..candidates.len());
    order
}

/// Whether the reserve may answer after `failures`: there were attempts, and none of
/// them reached its backend — each could not connect, or could not serve this client
/// at all (Glider's own refusal: never a reason to withhold the local model).
fn reserve_admitted(failures: &[AttemptFailure]) -> bool {
    !failures.is_empty() && failures.iter().all(AttemptFailure::reached_nothing)
}

/// Run the backup sequence over requests already prepared, one per candidate (same
/// order): the executor only sends them, in attempt order, under each breaker.
/// Candidates from index `reserve` on are tried only when nothing before them could be
/// reached (`None`: no reserve).
pub async fn execute_prepared(
    candidates: &[Candidate],
    requests: &[UpstreamRequest],
    reserve: Option<usize>,
) -> Result<Executed, Vec<AttemptFailure>> {
    let reserve = reserve.unwrap_or(candidates.len());
    run_sequence(candidates, reserve, |index, candidate| {
        prepared_request(requests, index, candidate)
    })
    .await
}

/// Candidate `index`'s request among those prepared (one per candidate, same order);
/// a missing one is that candidate's failure, never a panic.
pub fn prepared_request<'a>(
    requests: &'a [UpstreamRequest],
    index: usize,
    candidate: &Candidate,
) -> Result<Cow<'a, UpstreamRequest>, AttemptFailure> {
    requests.get(index).map(Cow::Borrowed).ok_or_else(|| {
        AttemptFailure::new(
            candidate.backend.name(),
            ErrorKind::Internal,
            "no upstream request was prepared for this candidate",
            true,
        )
    })
}

/// Run the backup sequence. `build` makes the request body for a candidate (its
/// dialect and model differ); a build error counts as that candidate's failure.
pub async fn execute(
    candidates: &[Candidate],
    mut build: impl FnMut(&Candidate) -> Result<UpstreamRequest, AttemptFailure>,
) -> Result<Executed, Vec<AttemptFailure>> {
    run_sequence(candidates, candidates.len(), |_, candidate| {
        build(candidate).map(Cow::Owned)
    })
    .await
}

/// The backup sequence itself; `request_for` gives the request for a candidate (by its
/// index in `candidates`) only once the breaker admits it.
async fn run_sequence<'r>(
    candidates: &[Candidate],
    reserve: usize,
    mut request_for: impl FnMut(usize, &Candidate) -> Result<Cow<'r, UpstreamRequest>, AttemptFailure>,
) -> Result<Executed, Vec<AttemptFailure>> {
    let mut failures = Vec::new();
    for index in attempt_order(candidates, reserve) {
        if index >= reserve && !reserve_admitted(&failures) {
            break;
        }
        let candidate = &candidates[index];
        match attempt(candidate, || request_for(index, candidate)).await {
            Ok(response) => {
                return Ok(Executed {
                    index,
                    response,
                    failures,
                });
            }
            Err(failure) => {
                let retryable = failure.retryable;
                failures.push(failure);
                if !retryable {
                    return Err(failures);
                }
            }
        }
    }
    Err(failures)
}

/// One attempt on `candidate` under its breaker and its caller's cooldown, until the
/// first byte of a good reply; the backend's breaker and health learn the outcome.
/// `request` is asked for only once the breaker admits the attempt. Dropping the
/// future before it resolves cancels the attempt: its connection is dropped, and a
/// half-open probe it held is given back (the fan-out cancels a hedge's loser so).
pub async fn attempt<'r>(
    candidate: &Candidate,
    request: impl FnOnce() -> Result<Cow<'r, UpstreamRequest>, AttemptFailure>,
) -> Result<UpstreamResponse, AttemptFailure> {
    let backend = &candidate.backend;
    let admission = backend.breaker.admit();
    if admission == Admission::Refused {
        // The breaker opened on failures like the last ones: as unreachable as they.
        return Err(AttemptFailure {
            unreachable: backend.breaker_opened_unreachable(),
            ..AttemptFailure::not_sent(
                backend.name(),
                ErrorKind::Unavailable,
                "circuit breaker open after repeated failures",
            )
        });
    }
    let mut probe = ProbeGuard::new(&backend.breaker, admission);
    let request = request()?;
    let caller = backend.cooldown.caller(&request.headers);
    if let Some(wait) = backend.cooldown.remaining(caller) {
        // Told to wait by a 429: skipping it is no verdict on the backend.
        return Err(cooling_down(backend.name(), wait));
    }
    match backend.send(&request).await {
        Ok(mut response) => {
            probe.disarm();
            backend.breaker.success();
            backend.answered();
            response.rest = watch_stream(backend.clone(), response.rest);
            Ok(response)
        }
        Err(failure) => {
            probe.disarm();
            if backend.unavailable.is_some() || failure.never_sent {
                // Never sent: neither a failure nor a success of the backend.
                backend.breaker.abandon_probe();
            } else if failure.backend_unwell() {
                backend.failed(failure.unreachable);
            } else {
                // The backend answered; the request, its key or its pace was refused.
                backend.breaker.success();
                if failure.status == Some(429)
                    && let Some(secs) = failure.retry_after_secs
                {
                    backend.cooldown.cool(caller, Duration::from_secs(secs));
                }
            }
            tracing::warn!(backend = backend.name(), model = %candidate.model, error = %failure.message, "backend attempt failed");
            Err(failure)
        }
    }
}

/// A failure after the first byte still counts against the backend's breaker.
fn watch_stream(backend: Arc<Backend>, rest: BodyStream) -> BodyStream {
    Box::pin(rest.inspect(move |chunk| {
        if chunk.is_err() {
            backend.failed(false);
        }
    }))
}

/// A candidate skipped because a 429 told this caller to wait `wait` more.
fn cooling_down(backend: &str, wait: Duration) -> AttemptFailure {
    // Round up: a client told "0" would ask again at once.
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    AttemptFailure {
        status: Some(429),
        upstream_message: Some(format!("rate limited by {backend}; retry after {secs} s")),
        retry_after_secs: Some(secs),
        ..AttemptFailure::new(
            backend,
            ErrorKind::RateLimit,
            format!("cooling down after HTTP 429 for {secs} more s"),
            true,
        )
    }
}

/// The one error to show when every attempt failed:
/// 1. the last backend that was reached answered with a client error (4xx: the
///    request, its key, its pace) — its status, message and `retry-after`, so the
///    client can act on it as if it had called the backend itself; a backend that
///    could not serve this client (no credential it may forward) speaks here only when
///    no backend was tried at all, since a 401 is what a CLI reports as "Failed to
///    authenticate" when the truth is that the cloud is down;
/// 2. nothing was reachable (no connection, missing keys, open breakers) — 502 saying
///    so with each backend's failure and what to check: not 503, which clients read as
///    "overloaded" and retry as capacity (that stays for an upstream that said so);
/// 3. every backend reached said it is overloaded (529) — the overload, with its
///    `retry-after`; every backend reached timed out — 504;
/// 4. otherwise 502 listing each backend's failure.
pub fn summarise(failures: &[AttemptFailure]) -> ApiError {
    if failures.is_empty() {
        return ApiError::new(
            ErrorKind::Unavailable,
            "no backend is configured for this model",
        );
    }
    let only_unservable = failures.iter().all(|f| f.cannot_serve);
    let last_reached = failures
        .iter()
        .rev()
        .find(|f| f.kind != ErrorKind::Unavailable && (only_unservable || !f.cannot_serve));
    if let Some(answered) = last_reached.filter(|f| f.client_can_act()) {
        let message = answered
            .upstream_message
            .clone()
            .unwrap_or_else(|| answered.message.clone());
        return ApiError::new(answered.kind, message).with_retry_after(answered.retry_after_secs);
    }
    let list: Vec<String> = failures.iter().map(ToString::to_string).collect();
    // A backend that could not serve this client tells nothing of the others' state.
    let all = |kinds: &[ErrorKind]| {
        failures
            .iter()
            .filter(|f| !f.cannot_serve)
            .all(|f| kinds.contains(&f.kind))
    };
    let overloaded = failures
        .iter()
        .rev()
        .find(|f| f.kind == ErrorKind::Overloaded);
    if let Some(overloaded) =
        overloaded.filter(|_| all(&[ErrorKind::Overloaded, ErrorKind::Unavailable]))
    {
        // The one place a capacity error is true: an upstream said so.
        return ApiError::new(
            ErrorKind::Overloaded,
            format!("overloaded: {}", list.join("; ")),
        )
        .with_retry_after(overloaded.retry_after_secs);
    }
    if all(&[ErrorKind::Unavailable]) {
        return ApiError::new(
            ErrorKind::BadGateway,
            format!(
                "no backend could be reached: {}. {NOTHING_ANSWERED_FIX}",
                list.join("; ")
            ),
        );
    }
    let kind = if all(&[ErrorKind::Timeout, ErrorKind::Unavailable]) {
        ErrorKind::Timeout
    } else {
        ErrorKind::BadGateway
    };
    ApiError::new(
        kind,
        format!(
            "all backends failed: {}. {NOTHING_ANSWERED_FIX}",
            list.join("; ")
        ),
    )
}

/// What a user can do when no backend answered, said after each backend's failure.
pub const NOTHING_ANSWERED_FIX: &str = "To have a local model answer: start it (the local \
     backend's base_url; `glider doctor` checks each backend), then send the header \
     `x-glider-route: local` or begin the message with `/local`";

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(kind: ErrorKind, status: Option<u16>) -> AttemptFailure {
        AttemptFailure {
            status,
            upstream_message: status.map(|s| format!("upstream says {s}")),
            retry_after_secs: (status == Some(429)).then_some(9),
            ..AttemptFailure::new("b", kind, "why", true)
        }
    }

    #[test]
    fn the_summary_keeps_the_status_a_client_can_act_on() {
        let refused = failed(ErrorKind::Unavailable, None);
        let limited = failed(ErrorKind::RateLimit, Some(429));
        let timed_out = failed(ErrorKind::Timeout, None);
        let broken = failed(ErrorKind::BadGateway, Some(500));

        let error = summarise(&[refused.clone(), limited.clone()]);
        assert_eq!(
            (error.kind, error.message.as_str(), error.retry_after_secs),
            (ErrorKind::RateLimit, "upstream says 429", Some(9))
        );
        // An open breaker after the 429 does not hide it.
        assert_eq!(
            summarise(&[limited.clone(), refused.clone()]).kind,
            ErrorKind::RateLimit
        );
        // A backend that broke after the 4xx decides: 502.
        assert_eq!(
            summarise(&[limited, broken.clone()]).kind,
            ErrorKind::BadGateway
        );
        let nothing_reachable = summarise(&[refused.clone(), refused.clone()]);
        assert_eq!(nothing_reachable.kind, ErrorKind::BadGateway);
        assert!(
            nothing_reachable
                .message
                .starts_with("no backend could be reached: b: why; b: why"),
            "{}",
            nothing_reachable.message
        );
        // An upstream that said it is overloaded stays overloaded.
        let overloaded = failed(ErrorKind::Overloaded, Some(529));
        assert_eq!(
            summarise(std::slice::from_ref(&overloaded)).kind,
            ErrorKind::Overloaded
        );
        assert_eq!(
            summarise(&[refused.clone(), timed_out]).kind,
            ErrorKind::Timeout
        );
        let listed = summarise(&[refused, broken]);
        assert_eq!(listed.kind, ErrorKind::BadGateway);
        assert!(
            listed
                .message
                .starts_with("all backends failed: b: why; b: why")
        );
        assert_eq!(summarise(&[]).kind, ErrorKind::Unavailable);
    }

    #[test]
    fn a_backend_that_cannot_serve_the_client_neither_ends_the_sequence_nor_speaks_for_it() {
        let unreachable = AttemptFailure::unreachable("claude", ErrorKind::Unavailable, "refused");
        let no_key = AttemptFailure::cannot_serve(
            "openai",
            ErrorKind::Authentication,
            "no credentials for openai",
        );
        let answered_500 = failed(ErrorKind::BadGateway, Some(500));
        // The cloud down and a passthrough backend without a key: the reserve answers.
        assert!(reserve_admitted(&[unreachable.clone(), no_key.clone()]));
        // No cloud backend could serve this client at all: the local model may.
        assert!(reserve_admitted(std::slice::from_ref(&no_key)));
        // A backend that answered, even with an error, keeps the reserve out.
        assert!(!reserve_admitted(&[answered_500, no_key.clone()]));
        assert!(!reserve_admitted(&[]));

        // Nothing answered: a server problem naming each backend and the fix, never
        // the 401 a CLI reports as "Failed to authenticate".
        let error = summarise(&[unreachable.clone(), no_key.clone()]);
        assert_eq!(error.kind, ErrorKind::BadGateway, "{}", error.message);
        assert!(
            error.message.starts_with(
                "no backend could be reached: claude: refused; openai: no credentials"
            ),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("x-glider-route: local"),
            "{}",
            error.message
        );
        let reversed = summarise(&[no_key.clone(), unreachable]);
        assert_eq!(reversed.kind, ErrorKind::BadGateway, "{}", reversed.message);
        // Only backends that wanted a credential the client did not send: the client
        // can act on that, so it is its 401.
        let alone = summarise(std::slice::from_ref(&no_key));
        assert_eq!(alone.kind, ErrorKind::Authentication, "{}", alone.message);
    }
}
