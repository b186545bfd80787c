//! The per-backend circuit breaker, exactly as the spec says: 5 failures in a row open
//! it for 30 seconds; then one probe request is let through; its success closes the
//! breaker, its failure opens it again. Time is tokio's, so tests can pause it.

use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

/// Failures in a row that open the breaker.
pub const FAILURE_THRESHOLD: u32 = 5;
/// How long an open breaker refuses requests before it lets one probe through.
pub const OPEN_FOR: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probe_in_flight: bool },
}

/// What the dashboard and logs show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

/// May this request go to the backend?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Yes, normally.
    Allowed,
    /// Yes, as the single probe of a half-open breaker.
    Probe,
    /// No: open (or a probe is already in flight).
    Refused,
}

#[derive(Debug)]
pub struct CircuitBreaker {
    state: Mutex<State>,
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        CircuitBreaker {
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }
}

impl CircuitBreaker {
    fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// Ask to send one request. A `Probe` admission must end in `success` or `failure`
    /// (or `abandon_probe` if the request never ran to an outcome).
    pub fn admit(&self) -> Admission {
        self.with_state(|state| match *state {
            State::Closed { .. } => Admission::Allowed,
            // 1. Open: refuse until the cool-down has passed.
            State::Open { until } if Instant::now() < until => Admission::Refused,
            // 2. Cool-down over: this request is the one probe.
            State::Open { .. }
            | State::HalfOpen {
                probe_in_flight: false,
            } => {
                *state = State::HalfOpen {
                    probe_in_flight: true,
                };
                Admission::Probe
            }
            // 3. A probe is already out: everyone else waits for its verdict.
            State::HalfOpen {
                probe_in_flight: true,
            } => Admission::Refused,
        })
    }

    /// The backend answered well: close the breaker.
    pub fn success(&self) {
        self.with_state(|state| *state = State::Closed { failures: 0 });
    }

    /// The backend failed: count it; open on the threshold or on a failed probe.
    pub fn failure(&self) {
        self.with_state(|state| {
            *state = match *state {
                State::Closed { failures } if failures + 1 < FAILURE_THRESHOLD => State::Closed {
                    failures: failures + 1,
                },
                State::Closed { .. } | State::HalfOpen { .. } | State::Open { .. } => State::Open {
                    until: Instant::now() + OPEN_FOR,
                },
            }
        });
    }

    /// A probe ended without a verdict (the client went away): let another probe try.
    pub fn abandon_probe(&self) {
        self.with_state(|state| {
            if let State::HalfOpen { .. } = state {
                *state = State::HalfOpen {
                    probe_in_flight: false,
                };
            }
        });
    }

    /// Operator action: close the breaker now.
    pub fn reset(&self) {
        self.success();
    }

    pub fn state(&self) -> BreakerState {
        self.with_state(|state| match *state {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { until } if Instant::now() < until => BreakerState::Open,
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        })
    }
}

/// Clears a half-open probe that never reached a verdict (the request was cancelled
/// while it was out): armed only for a `Probe` admission, disarmed once the caller
/// records the verdict.
pub struct ProbeGuard<'a> {
    breaker: &'a CircuitBreaker,
    armed: bool,
}

impl<'a> ProbeGuard<'a> {
    pub fn new(breaker: &'a CircuitBreaker, admission: Admission) -> ProbeGuard<'a> {
        ProbeGuard {
            breaker,
            armed: admission == Admission::Probe,
        }
    }

    /// The caller is about to record a verdict itself.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.breaker.abandon_probe();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_after_five_failures_and_probes_after_thirty_seconds() {
        let breaker = CircuitBreaker::default();
        for _ in 0..4 {
            assert_eq!(breaker.admit(), Admission::Allowed);
            breaker.failure();
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker.failure();
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.admit(), Admission::Refused);

        tokio::time::advance(OPEN_FOR - Duration::from_millis(1)).await;
        assert_eq!(breaker.admit(), Admission::Refused);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        assert_eq!(breaker.admit(), Admission::Probe);
        // Only one probe at a time.
        assert_eq!(breaker.admit(), Admission::Refused);
        breaker.success();
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert_eq!(breaker.admit(), Admission::Allowed);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probe_reopens_for_another_thirty_seconds() {
        let breaker = CircuitBreaker::default();
        for _ in 0..FAILURE_THRESHOLD {
            breaker.failure();
        }
        tokio::time::advance(OPEN_FOR).await;
        assert_eq!(breaker.admit(), Admission::Probe);
        breaker.failure();
        assert_eq!(breaker.admit(), Admission::Refused);
        tokio::time::advance(OPEN_FOR).await;
        assert_eq!(breaker.admit(), Admission::Probe);
        breaker.abandon_probe();
        assert_eq!(breaker.admit(), Admission::Probe);
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_count() {
        let breaker = CircuitBreaker::default();
        for _ in 0..4 {
            breaker.failure();
        }
        breaker.success();
        for _ in 0..4 {
            breaker.failure();
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
    }
}
