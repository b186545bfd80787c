//! What one failed attempt at a backend looks like: the value the client, the health
//! probe and the executor all speak, kept apart from each so none depends on another;
//! and which failures say the backend is unwell (they count toward its breaker) rather
//! than that the request or its credentials were refused.

use glider_ngl::ErrorKind;
use serde::Serialize;

/// Why one attempt did not produce a reply.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptFailure {
    pub backend: String,
    pub kind: ErrorKind,
    pub message: String,
    /// May another backend be tried after this failure?
    pub retryable: bool,
    /// The backend's HTTP status, if it answered.
    pub status: Option<u16>,
    /// The message of the backend's error body (decoded in its dialect), if it answered.
    #[serde(skip)]
    pub upstream_message: Option<String>,
    /// The backend's `retry-after`, in seconds, if it sent one (or the rest of a
    /// cool-down Glider keeps after a 429).
    pub retry_after_secs: Option<u64>,
    /// Nothing was sent (a missing key or credential): no verdict on the backend.
    pub never_sent: bool,
    /// The backend cannot serve this client at all (a passthrough backend for which
    /// the request carries no credential it may forward): it was not a candidate for
    /// this request, only listed so the error can say why. Glider's own refusal, never
    /// the backend's: it neither ends the backup sequence nor keeps the local reserve
    /// from answering.
    pub cannot_serve: bool,
    /// The backend could not be reached at all before the first byte: no connection
    /// (refused, DNS, TLS), a timeout, or a breaker that such failures opened. Only
    /// these let `routing.local_fallback` hand a cloud request to a local model.
    pub unreachable: bool,
}

impl AttemptFailure {
    /// A failure without an HTTP answer from the backend.
    pub fn new(
        backend: impl Into<String>,
        kind: ErrorKind,
        message: impl Into<String>,
        retryable: bool,
    ) -> AttemptFailure {
        AttemptFailure {
            backend: backend.into(),
            kind,
            message: message.into(),
            retryable,
            status: None,
            upstream_message: None,
            retry_after_secs: None,
            never_sent: false,
            cannot_serve: false,
            unreachable: false,
        }
    }

    /// A failure found before anything was sent (the request never left Glider).
    pub fn not_sent(
        backend: impl Into<String>,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> AttemptFailure {
        AttemptFailure {
            never_sent: true,
            ..AttemptFailure::new(backend, kind, message, true)
        }
    }

    /// A backend that cannot serve this client (see [`AttemptFailure::cannot_serve`]).
    pub fn cannot_serve(
        backend: impl Into<String>,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> AttemptFailure {
        AttemptFailure {
            cannot_serve: true,
            ..AttemptFailure::not_sent(backend, kind, message)
        }
    }

    /// A failure to reach the backend at all (see [`AttemptFailure::unreachable`]).
    pub fn unreachable(
        backend: impl Into<String>,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> AttemptFailure {
        AttemptFailure {
            unreachable: true,
            ..AttemptFailure::new(backend, kind, message, true)
        }
    }

    /// Does this failure say the backend itself is unwell (count it toward the
    /// breaker)? A transport failure, a timeout or a 5xx does. A 4xx does not: the
    /// request (400, 404, 413, 422) or its credentials (401, 403) were refused by a
    /// backend that answered, and a 429 is the backend pacing this caller, handled by
    /// its cool-down instead.
    pub fn backend_unwell(&self) -> bool {
        match self.status {
            None => true,
            Some(status) => status >= 500 || status == 408,
        }
    }

    /// The backend answered with a client error (4xx other than 408): the status a
    /// client can act on when no other backend is left.
    pub fn answered_client_error(&self) -> bool {
        matches!(self.status, Some(status) if (400..500).contains(&status) && status != 408)
    }

    /// A failure the client can fix itself: a client error the backend answered, or
    /// credentials it did not send.
    pub fn client_can_act(&self) -> bool {
        self.answered_client_error() || (self.never_sent && self.kind == ErrorKind::Authentication)
    }

    /// Whether this attempt says nothing about the cloud being up: it could not be
    /// reached at all, or it was never a candidate for this client. Only such failures
    /// admit `routing.local_fallback`'s reserve.
    pub fn reached_nothing(&self) -> bool {
        self.unreachable || self.cannot_serve
    }
}

impl std::fmt::Display for AttemptFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.backend, self.message)
    }
}

impl std::error::Error for AttemptFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16) -> AttemptFailure {
        AttemptFailure {
            status: Some(status),
            ..AttemptFailure::new("b", ErrorKind::from_status(status), "x", true)
        }
    }

    #[test]
    fn only_transport_failures_timeouts_and_5xx_count_against_a_backend() {
        assert!(AttemptFailure::new("b", ErrorKind::BadGateway, "refused", true).backend_unwell());
        for status in [500, 502, 503, 504, 529, 408] {
            assert!(answered(status).backend_unwell(), "{status}");
        }
        for status in [400, 401, 403, 404, 413, 422, 429] {
            assert!(!answered(status).backend_unwell(), "{status}");
            assert!(answered(status).answered_client_error(), "{status}");
        }
    }
}
