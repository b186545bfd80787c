//! The backup sequence: try candidates in order of usability (configured, breaker
//! admits, healthy, warm), each until the first byte of a good reply; on failure record
//! it and go on. After the first byte the choice is final: a later failure is the
//! stream's problem, reported in the client's dialect, never a silent switch.

use std::borrow::Cow;
use std::sync::Arc;

use crate::breaker::Admission;
use crate::client::{Backend, BodyStream, UpstreamRequest, UpstreamResponse};
pub use crate::failure::AttemptFailure;
use crate::health::HealthStatus;
use futures_util::StreamExt;
use glider_ngl::ErrorKind;

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

/// The order in which to try `candidates`: usable before blocked or down ones, and,
/// among backends of the same locality, warm before cold. The router's order is kept
/// otherwise (it already put the preferred side first).
fn attempt_order(candidates: &[Candidate]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    let first_local = candidates.first().map(|c| c.backend.kind().is_local());
    order.sort_by_key(|&i| {
        let c = &candidates[i];
        let health = c.backend.health();
        let blocked = c.backend.unavailable.is_some() || health.status == HealthStatus::Down;
        let other_side = Some(c.backend.kind().is_local()) != first_local;
        let cold = c.backend.kind().is_local() && !c.backend.is_warm(&c.model);
        (blocked, other_side, cold)
    });
    order
}

/// Clears a half-open probe that never reached a verdict (the request was cancelled).
struct ProbeGuard<'a> {
    backend: &'a Backend,
    armed: bool,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.backend.breaker.abandon_probe();
        }
    }
}

/// Run the backup sequence over requests already prepared, one per candidate (same
/// order): the executor only sends them, in attempt order, under each breaker.
pub async fn execute_prepared(
    candidates: &[Candidate],
    requests: &[UpstreamRequest],
) -> Result<Executed, Vec<AttemptFailure>> {
    run_sequence(candidates, |index, candidate| {
        requests
            .get(index)
            .map(Cow::Borrowed)
            .ok_or_else(|| AttemptFailure {
                backend: candidate.backend.name().to_owned(),
                kind: ErrorKind::Internal,
                message: "no upstream request was prepared for this candidate".into(),
                retryable: true,
                status: None,
                body: None,
            })
    })
    .await
}

/// Run the backup sequence. `build` makes the request body for a candidate (its
/// dialect and model differ); a build error counts as that candidate's failure.
pub async fn execute(
    candidates: &[Candidate],
    mut build: impl FnMut(&Candidate) -> Result<UpstreamRequest, AttemptFailure>,
) -> Result<Executed, Vec<AttemptFailure>> {
    run_sequence(candidates, |_, candidate| build(candidate).map(Cow::Owned)).await
}

/// The backup sequence itself; `request_for` gives the request for a candidate (by its
/// index in `candidates`) only once the breaker admits it.
async fn run_sequence<'r>(
    candidates: &[Candidate],
    mut request_for: impl FnMut(usize, &Candidate) -> Result<Cow<'r, UpstreamRequest>, AttemptFailure>,
) -> Result<Executed, Vec<AttemptFailure>> {
    let mut failures = Vec::new();
    for index in attempt_order(candidates) {
        let candidate = &candidates[index];
        let backend = &candidate.backend;
        let admission = backend.breaker.admit();
        if admission == Admission::Refused {
            failures.push(AttemptFailure {
                backend: backend.name().to_owned(),
                kind: ErrorKind::Unavailable,
                message: "circuit breaker open after repeated failures".into(),
                retryable: true,
                status: None,
                body: None,
            });
            continue;
        }
        let mut probe = ProbeGuard {
            backend,
            armed: admission == Admission::Probe,
        };
        let request = match request_for(index, candidate) {
            Ok(request) => request,
            Err(failure) => {
                failures.push(failure);
                continue;
            }
        };
        match backend.send(&request).await {
            Ok(mut response) => {
                probe.armed = false;
                backend.breaker.success();
                response.rest = watch_stream(backend.clone(), response.rest);
                return Ok(Executed {
                    index,
                    response,
                    failures,
                });
            }
            Err(failure) => {
                probe.armed = false;
                let retryable = failure.retryable;
                if retryable && backend.unavailable.is_none() {
                    backend.breaker.failure();
                } else {
                    // The backend answered; the request was at fault.
                    backend.breaker.success();
                }
                tracing::warn!(backend = backend.name(), model = %candidate.model, error = %failure.message, "backend attempt failed");
                failures.push(failure);
                if !retryable {
                    return Err(failures);
                }
            }
        }
    }
    Err(failures)
}

/// A failure after the first byte still counts against the backend's breaker.
fn watch_stream(backend: Arc<Backend>, rest: BodyStream) -> BodyStream {
    Box::pin(rest.inspect(move |chunk| {
        if chunk.is_err() {
            backend.breaker.failure();
        }
    }))
}

/// The one error to show when every attempt failed: a non-retryable backend answer
/// keeps its own kind; otherwise 502 listing each backend's failure.
pub fn summarise(failures: &[AttemptFailure]) -> (ErrorKind, String) {
    if let Some(last) = failures.last().filter(|f| !f.retryable) {
        return (last.kind, last.to_string());
    }
    if failures.is_empty() {
        return (
            ErrorKind::Unavailable,
            "no backend is configured for this model".into(),
        );
    }
    let list: Vec<String> = failures.iter().map(ToString::to_string).collect();
    // Nothing was even reachable (missing keys, open breakers): 503, not 502.
    let kind = if failures.iter().all(|f| f.kind == ErrorKind::Unavailable) {
        ErrorKind::Unavailable
    } else {
        ErrorKind::BadGateway
    };
    (kind, format!("all backends failed: {}", list.join("; ")))
}
