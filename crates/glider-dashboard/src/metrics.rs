//! The metrics facade (spec package `metrics`): a finished request is recorded once,
//! here, into the Prometheus families served at `/metrics`, into the per-backend and
//! per-route aggregates (with latency percentiles and what local answers saved) served
//! at `/api/stats`, and into the ledger of buckets over time ([`crate::ledger`]).
//!
//! One file past 600 lines on purpose: a finished request is recorded once, and every
//! Prometheus family and aggregate it feeds (the ledger aside) is declared beside that
//! one recording, so a new field of the record is counted in one place.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use glider_backend::BreakerState;
use glider_backend::health::HealthStatus;
use glider_config::PricingConfig;
use glider_engine::{BackendState, RequestRecord};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::Serialize;

use crate::ledger::{Counts, Ledger, Point, Row, Saved, Series, SessionTotals, is_error};

/// Latency samples kept per aggregate for percentiles (the most recent ones).
const SAMPLES: usize = 1024;

const DURATION_BUCKETS: [f64; 13] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
const TTFT_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    door: String,
    front: String,
    backend: String,
    rule: String,
    local: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    backend: String,
    rule: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    backend: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetStopLabels {
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    task: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FanOutLabels {
    mode: String,
    /// `hedged` (the next candidate started) or `alone` (the first answered in time).
    outcome: String,
    winner: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    /// The backend the copy went to.
    shadow: String,
    /// `compared`, `failed`, `skipped` or `primary_unfinished`.
    outcome: String,
    /// `local_busy`, `sample_rate`, `max_concurrent` or `max_per_minute` when skipped; else empty.
    skipped_by: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    source: String,
}

type HistogramFamily = Family<BackendLabels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

fn ttft_histogram() -> Histogram {
    Histogram::new(TTFT_BUCKETS)
}

/// Every number the dashboard and Prometheus see.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: HistogramFamily,
    ttft: HistogramFamily,
    tokens: Family<TokenLabels, Counter>,
    in_flight: Gauge,
    local_share: Gauge<f64, AtomicU64>,
    breaker: Family<BackendLabels, Gauge>,
    health: Family<BackendLabels, Gauge>,
    dropped: Family<DropLabels, Counter>,
    tokens_saved: Family<DirectionLabels, Counter>,
    cost_avoided: Counter<f64, AtomicU64>,
    unpriced: Counter,
    /// The context log's counters, caught up with its own at each scrape.
    context_written: Counter,
    context_dropped: Counter,
    context_gaps: Counter,
    budget_stops: Family<BudgetStopLabels, Counter>,
    context_compactions: Family<OutcomeLabels, Counter>,
    /// safego's counts, caught up at each scrape.
    task_panics: Family<TaskLabels, Counter>,
    task_restarts: Family<TaskLabels, Counter>,
    fan_outs: Family<FanOutLabels, Counter>,
    fan_out_cancelled: Family<BackendLabels, Counter>,
    shadow_samples: Family<ShadowLabels, Counter>,
    stats: Mutex<Stats>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("glider");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Finished requests, by door, front dialect, backend, route rule, locality and HTTP status",
            requests.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "request_errors",
            "Finished requests whose status was an error (4xx/5xx; a client that went away, 499, is not counted)",
            errors.clone(),
        );
        let duration: HistogramFamily = Family::new_with_constructor(duration_histogram);
        registry.register(
            "request_duration_seconds",
            "Time from arrival to the end of the reply, by backend",
            duration.clone(),
        );
        let ttft: HistogramFamily = Family::new_with_constructor(ttft_histogram);
        registry.register(
            "time_to_first_token_seconds",
            "Time from arrival to the first byte of the reply, by backend",
            ttft.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "tokens",
            "Tokens reported by backends, by backend and direction (input includes cached input)",
            tokens.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "requests_in_flight",
            "Requests started and not yet finished",
            in_flight.clone(),
        );
        let local_share = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "local_share",
            "Share of answered requests that a local backend answered (0 to 1), since start",
            local_share.clone(),
        );
        let breaker = Family::<BackendLabels, Gauge>::default();
        registry.register(
            "backend_breaker_state",
            "Circuit breaker of each backend: 0 closed, 1 half-open, 2 open",
            breaker.clone(),
        );
        let health = Family::<BackendLabels, Gauge>::default();
        registry.register(
            "backend_health",
            "Last probe of each backend: 1 up, 0 down, -1 unknown (cloud backends are not probed)",
            health.clone(),
        );
        let dropped = Family::<DropLabels, Counter>::default();
        registry.register(
            "dashboard_events_dropped",
            "Live events dropped because a reader fell behind (source: bus or websocket)",
            dropped.clone(),
        );
        let tokens_saved = Family::<DirectionLabels, Counter>::default();
        registry.register(
            "tokens_saved",
            "Tokens of requests a local backend answered, by direction (input includes cached input)",
            tokens_saved.clone(),
        );
        let cost_avoided = Counter::<f64, AtomicU64>::default();
        registry.register(
            "cost_avoided_usd",
            "What the cloud would have charged for the requests answered locally, at the pricing: table's price of the model each client asked for (USD)",
            cost_avoided.clone(),
        );
        let unpriced = Counter::default();
        registry.register(
            "local_requests_unpriced",
            "Requests answered locally whose asked-for model has no price in the pricing: table (their tokens count as saved, their cost does not)",
            unpriced.clone(),
        );
        let context_written = Counter::default();
        registry.register(
            "context_events_written",
            "Events committed to the context log",
            context_written.clone(),
        );
        let context_dropped = Counter::default();
        registry.register(
            "context_events_dropped",
            "Context events dropped because the writer fell behind (each loss is logged as a gap event)",
            context_dropped.clone(),
        );
        let context_gaps = Counter::default();
        registry.register(
            "context_gaps",
            "Gap events written to the context log",
            context_gaps.clone(),
        );
        let context_compactions = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "context_compactions",
            "Summarizer runs, by outcome: accepted, or rejected (a file or open error left out, the backend failed or timed out; the structural record stood)",
            context_compactions.clone(),
        );
        let task_panics = Family::<TaskLabels, Counter>::default();
        registry.register(
            "task_panics",
            "Panics caught in long-lived tasks (safego), by task",
            task_panics.clone(),
        );
        let task_restarts = Family::<TaskLabels, Counter>::default();
        registry.register(
            "task_restarts",
            "Long-lived tasks restarted after a panic (safego), by task",
            task_restarts.clone(),
        );
        let budget_stops = Family::<BudgetStopLabels, Counter>::default();
        registry.register(
            "budget_stops",
            "Agent loops Glider ended with its own final reply, by limit (turn_budget or loop_guard)",
            budget_stops.clone(),
        );
        let fan_outs = Family::<FanOutLabels, Counter>::default();
        registry.register(
            "fan_outs",
            "Requests sent to more than one candidate at once (fan_out), by mode, whether the hedge fired, and the backend that won",
            fan_outs.clone(),
        );
        let fan_out_cancelled = Family::<BackendLabels, Counter>::default();
        registry.register(
            "fan_out_cancelled",
            "Upstream attempts a fan-out cancelled (their connection dropped) because another candidate won, by backend",
            fan_out_cancelled.clone(),
        );
        let shadow_samples = Family::<ShadowLabels, Counter>::default();
        registry.register(
            "shadow_samples",
            "Shadow copies (fan_out mode shadow), by shadow backend and outcome: compared, failed, skipped (by which budget limit) or primary_unfinished",
            shadow_samples.clone(),
        );
        Metrics {
            registry,
            shadow_samples,
            fan_outs,
            fan_out_cancelled,
            budget_stops,
            context_compactions,
            context_written,
            context_dropped,
            context_gaps,
            task_panics,
            task_restarts,
            requests,
            errors,
            duration,
            ttft,
            tokens,
            in_flight,
            local_share,
            breaker,
            health,
            dropped,
            tokens_saved,
            cost_avoided,
            unpriced,
            stats: Mutex::new(Stats::new(crate::unix_ms())),
        }
    }

    /// A shadow copy ended, failed or was skipped.
    pub fn shadow_sampled(&self, sample: &glider_engine::ShadowSample) {
        self.shadow_samples
            .get_or_create(&ShadowLabels {
                shadow: sample.shadow_backend.clone(),
                outcome: sample.outcome.as_str().to_owned(),
                skipped_by: sample.skipped_by.clone().unwrap_or_default(),
            })
            .inc();
    }

    /// A request started.
    pub fn started(&self) {
        self.in_flight.inc();
    }

    /// A request finished (`was_in_flight`: its start was counted); a local answer is
    /// priced with `pricing`.
    pub fn finished(&self, record: &RequestRecord, was_in_flight: bool, pricing: &PricingConfig) {
        if was_in_flight {
            self.in_flight.dec();
        }
        let backend = record.backend.clone().unwrap_or_else(|| UNROUTED.into());
        let rule = record.rule.clone().unwrap_or_else(|| UNROUTED.into());
        let status = record.status.unwrap_or(0);
        self.requests
            .get_or_create(&RequestLabels {
                door: record.door.clone(),
                front: record.front.as_str().to_owned(),
                backend: backend.clone(),
                rule: rule.clone(),
                local: match record.local {
                    Some(true) => "true",
                    Some(false) => "false",
                    None => "unknown",
                }
                .to_owned(),
                status: status.to_string(),
            })
            .inc();
        if let Some(stop) = &record.budget_stop {
            self.budget_stops
                .get_or_create(&BudgetStopLabels {
                    limit: stop.limit.as_str().to_owned(),
                })
                .inc();
        }
        if let Some(fan_out) = &record.fan_out {
            self.fan_outs
                .get_or_create(&FanOutLabels {
                    mode: fan_out.mode.clone(),
                    outcome: if fan_out.fired { "hedged" } else { "alone" }.to_owned(),
                    winner: fan_out.winner.clone(),
                })
                .inc();
            for loser in &fan_out.cancelled {
                self.fan_out_cancelled
                    .get_or_create(&BackendLabels {
                        backend: loser.clone(),
                    })
                    .inc();
            }
        }
        if is_error(status) {
            self.errors
                .get_or_create(&ErrorLabels {
                    backend: backend.clone(),
                    rule,
                    status: status.to_string(),
                })
                .inc();
        }
        let labels = BackendLabels {
            backend: backend.clone(),
        };
        if let Some(ms) = record.total_ms {
            self.duration
                .get_or_create(&labels)
                .observe(ms as f64 / 1000.0);
        }
        if let Some(ms) = record.ttft_ms {
            self.ttft.get_or_create(&labels).observe(ms as f64 / 1000.0);
        }
        let row = Row::of(record);
        for (direction, count) in [
            ("input", row.tokens_in()),
            ("output", record.usage.output_tokens),
        ] {
            if count > 0 {
                self.tokens
                    .get_or_create(&TokenLabels {
                        backend: backend.clone(),
                        direction: direction.into(),
                    })
                    .inc_by(count);
            }
        }
        let saved = Saved::of(&row, pricing);
        for (direction, count) in [("input", saved.tokens_in), ("output", saved.tokens_out)] {
            self.tokens_saved
                .get_or_create(&DirectionLabels {
                    direction: direction.into(),
                })
                .inc_by(count);
        }
        self.cost_avoided.inc_by(saved.cost_usd);
        self.unpriced.inc_by(saved.unpriced);
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.record(&row, &saved);
        stats.ledger.record(&row, &saved, crate::unix_ms());
        self.local_share
            .set(stats.totals.counts.local_share().unwrap_or(0.0));
    }

    /// Add requests from before this process started (read back from the history) to
    /// the ledger: the days, sessions and series, not the since-start totals.
    pub fn seed(&self, rows: &[Row], pricing: &PricingConfig) {
        let now = crate::unix_ms();
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        for row in rows {
            stats.ledger.record(row, &Saved::of(row, pricing), now);
        }
    }

    /// The ledger's buckets of `bucket_ms` over the last `window_ms` (checked by
    /// [`crate::ledger::check_series`]).
    pub fn series(&self, bucket_ms: u64, window_ms: u64) -> Series {
        let stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.ledger.series(bucket_ms, window_ms, crate::unix_ms())
    }

    /// Events lost by a lagging reader.
    pub fn dropped(&self, source: &str, count: u64) {
        self.dropped
            .get_or_create(&DropLabels {
                source: source.into(),
            })
            .inc_by(count);
    }

    /// The aggregates for `/api/stats`.
    pub fn stats(&self) -> StatsView {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).view()
    }

    /// The OpenMetrics text for `/metrics`, with backend gauges read from `backends` now
    /// (a backend removed by a reload disappears).
    pub fn encode(
        &self,
        backends: &[BackendState],
        context: Option<&glider_context::Counters>,
    ) -> String {
        if let Some(context) = context {
            catch_up(&self.context_written, &context.written);
            catch_up(&self.context_dropped, &context.dropped);
            catch_up(&self.context_gaps, &context.gaps);
            for (outcome, count) in [
                ("accepted", &context.compactions_accepted),
                ("rejected", &context.compactions_rejected),
                ("yielded", &context.compactions_yielded),
            ] {
                let labels = OutcomeLabels {
                    outcome: outcome.to_owned(),
                };
                catch_up(&self.context_compactions.get_or_create(&labels), count);
            }
        }
        for (task, counts) in glider_sys::safego::counts() {
            let labels = TaskLabels {
                task: task.to_owned(),
            };
            let panics = AtomicU64::new(counts.panics);
            catch_up(&self.task_panics.get_or_create(&labels), &panics);
            let restarts = AtomicU64::new(counts.restarts);
            catch_up(&self.task_restarts.get_or_create(&labels), &restarts);
        }
        self.breaker.clear();
        self.health.clear();
        for state in backends {
            let labels = BackendLabels {
                backend: state.backend.clone(),
            };
            self.breaker
                .get_or_create(&labels)
                .set(match state.breaker {
                    BreakerState::Closed => 0,
                    BreakerState::HalfOpen => 1,
                    BreakerState::Open => 2,
                });
            self.health.get_or_create(&labels).set(match state.health {
                HealthStatus::Up => 1,
                HealthStatus::Down => 0,
                HealthStatus::Unknown => -1,
            });
        }
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(error = %e, "metrics encoding failed");
        }
        text
    }
}

/// Raise `counter` to the count `source` holds (both only ever grow).
fn catch_up(counter: &Counter, source: &AtomicU64) {
    let now = source.load(std::sync::atomic::Ordering::Relaxed);
    counter.inc_by(now.saturating_sub(counter.get()));
}

/// Recent latency samples in milliseconds.
#[derive(Debug, Default)]
struct Samples(VecDeque<u64>);

impl Samples {
    fn push(&mut self, value: u64) {
        if self.0.len() >= SAMPLES {
            self.0.pop_front();
        }
        self.0.push_back(value);
    }

    fn percentiles(&self) -> Option<Percentiles> {
        if self.0.is_empty() {
            return None;
        }
        let mut sorted: Vec<u64> = self.0.iter().copied().collect();
        sorted.sort_unstable();
        // Nearest rank: the smallest sample with at least p of the samples at or below it.
        let rank = |p: f64| {
            let index = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[index]
        };
        Some(Percentiles {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: sorted[sorted.len() - 1],
            samples: sorted.len(),
        })
    }
}

/// Percentiles of the most recent samples (up to 1024), in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    pub samples: usize,
}

/// Totals for one backend, one route rule, or everything.
#[derive(Debug, Default)]
struct Aggregate {
    counts: Counts,
    cancelled: u64,
    tokens_in: u64,
    tokens_out: u64,
    latency: Samples,
    ttft: Samples,
    saved: Saved,
}

impl Aggregate {
    fn record(&mut self, row: &Row, saved: &Saved) {
        self.counts.record(row);
        if row.status == Some(499) {
            self.cancelled += 1;
        }
        self.tokens_in += row.tokens_in();
        self.tokens_out += row.usage.output_tokens;
        if let Some(ms) = row.total_ms {
            self.latency.push(ms);
        }
        if let Some(ms) = row.ttft_ms {
            self.ttft.push(ms);
        }
        self.saved.add(saved);
    }

    fn view(&self) -> AggregateView {
        let counts = self.counts;
        AggregateView {
            requests: counts.requests,
            errors: counts.errors,
            cancelled: self.cancelled,
            tokens_in: self.tokens_in,
            tokens_out: self.tokens_out,
            answered: counts.answered,
            local: counts.local,
            local_share: counts.local_share(),
            latency_ms: self.latency.percentiles(),
            ttft_ms: self.ttft.percentiles(),
            saved: self.saved,
        }
    }
}

/// One aggregate as `/api/stats` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct AggregateView {
    pub requests: u64,
    /// 4xx/5xx answers (499, the client going away, is counted in `cancelled`).
    pub errors: u64,
    pub cancelled: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// Requests a backend answered successfully.
    pub answered: u64,
    /// Of those, answered by a local backend.
    pub local: u64,
    /// `local / answered`; null before the first answer.
    pub local_share: Option<f64>,
    pub latency_ms: Option<Percentiles>,
    pub ttft_ms: Option<Percentiles>,
    /// What the requests a local backend answered saved.
    pub saved: Saved,
}

#[derive(Debug)]
struct Stats {
    since_ms: u64,
    totals: Aggregate,
    backends: BTreeMap<String, Aggregate>,
    unrouted: BTreeMap<String, Aggregate>,
    routes: BTreeMap<String, Aggregate>,
    ledger: Ledger,
}

/// The backend (and rule) label of a request that never reached one: rejected before
/// routing (malformed, too large, a model no backend serves) or routed nowhere.
pub const UNROUTED: &str = "unrouted";

/// The `/api/stats` `unrouted` bucket of a request with no backend: the kind of error
/// its status says (`not_found`: no backend serves the model, `invalid_request`,
/// `request_too_large`, …; `client_closed` for 499).
pub fn unrouted_reason(status: Option<u16>) -> String {
    match status {
        Some(499) => "client_closed".to_owned(),
        Some(status) => serde_json::to_value(glider_ngl::ErrorKind::from_status(status))
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| status.to_string()),
        None => "unknown".to_owned(),
    }
}

/// `/api/stats`: since this process started.
#[derive(Debug, Clone, Serialize)]
pub struct StatsView {
    pub since_ms: u64,
    pub totals: AggregateView,
    /// By the backend that answered, or whose failure ended the request.
    pub backends: BTreeMap<String, AggregateView>,
    /// Requests no backend was chosen for, by what they failed with
    /// ([`unrouted_reason`]).
    pub unrouted: BTreeMap<String, AggregateView>,
    /// By the route rule that decided (`unrouted`: it failed before routing).
    pub routes: BTreeMap<String, AggregateView>,
    /// By UTC day (`YYYY-MM-DD`), the last 35 days, including the history from before
    /// this process started.
    pub days: BTreeMap<String, Point>,
    /// By session key (the 1000 most recently active), including the history.
    pub sessions: BTreeMap<String, SessionTotals>,
}

impl Stats {
    fn new(since_ms: u64) -> Stats {
        Stats {
            since_ms,
            totals: Aggregate::default(),
            backends: BTreeMap::new(),
            unrouted: BTreeMap::new(),
            routes: BTreeMap::new(),
            ledger: Ledger::default(),
        }
    }

    fn record(&mut self, row: &Row, saved: &Saved) {
        self.totals.record(row, saved);
        let bucket = match &row.backend {
            Some(backend) => self.backends.entry(backend.clone()),
            None => self.unrouted.entry(unrouted_reason(row.status)),
        };
        bucket.or_default().record(row, saved);
        let rule = row.rule.as_deref().unwrap_or(UNROUTED);
        self.routes
            .entry(rule.to_owned())
            .or_default()
            .record(row, saved);
    }

    fn view(&self) -> StatsView {
        StatsView {
            since_ms: self.since_ms,
            totals: self.totals.view(),
            backends: self
                .backends
                .iter()
                .map(|(k, v)| (k.clone(), v.view()))
                .collect(),
            unrouted: self
                .unrouted
                .iter()
                .map(|(k, v)| (k.clone(), v.view()))
                .collect(),
            routes: self
                .routes
                .iter()
                .map(|(k, v)| (k.clone(), v.view()))
                .collect(),
            days: self.ledger.days(),
            sessions: self.ledger.sessions(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples = Samples::default();
        for v in 1..=100 {
            samples.push(v);
        }
        let p = samples.percentiles().expect("samples");
        assert_eq!(
            (p.p50, p.p90, p.p99, p.max, p.samples),
            (50, 90, 99, 100, 100)
        );
        let mut one = Samples::default();
        one.push(7);
        let p = one.percentiles().expect("one sample");
        assert_eq!((p.p50, p.p99), (7, 7));
        for v in 0..(SAMPLES as u64 + 10) {
            one.push(v);
        }
        assert_eq!(one.percentiles().map(|p| p.samples), Some(SAMPLES));
    }
}

#[cfg(test)]
mod fan_out_tests {
    use super::*;

    #[test]
    fn a_hedge_and_its_cancelled_loser_are_counted() {
        let metrics = Metrics::new();
        let bus = glider_engine::Bus::default();
        let mut record = bus
            .start("gateway", glider_ngl::Dialect::OpenAiChat, None)
            .record
            .clone();
        record.status = Some(200);
        record.backend = Some("cloud".into());
        record.fan_out = Some(glider_engine::FanOutRecord {
            mode: "hedge".into(),
            fired: true,
            delay_ms: Some(50),
            winner: "cloud".into(),
            cancelled: vec!["local".into()],
            answers: Vec::new(),
        });
        metrics.finished(&record, false, &PricingConfig::default());
        let text = metrics.encode(&[], None);
        assert!(
            text.contains(
                "glider_fan_outs_total{mode=\"hedge\",outcome=\"hedged\",winner=\"cloud\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("glider_fan_out_cancelled_total{backend=\"local\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn shadow_copies_are_counted_by_outcome_and_budget_limit() {
        let metrics = Metrics::new();
        let sample = |outcome, skipped_by: Option<&str>| glider_engine::ShadowSample {
            skipped_by: skipped_by.map(str::to_owned),
            ..crate::shadow::tests::sample(outcome, None, 0)
        };
        use glider_engine::ShadowOutcome::{Failed, Skipped};
        metrics.shadow_sampled(&sample(Skipped, Some("max_concurrent")));
        metrics.shadow_sampled(&sample(Skipped, Some("max_concurrent")));
        metrics.shadow_sampled(&sample(Failed, None));
        let text = metrics.encode(&[], None);
        assert!(
            text.contains("glider_shadow_samples_total{shadow=\"local\",outcome=\"skipped\",skipped_by=\"max_concurrent\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "glider_shadow_samples_total{shadow=\"local\",outcome=\"failed\",skipped_by=\"\"} 1"
            ),
            "{text}"
        );
    }
}
