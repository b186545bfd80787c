//! The ledger (spec package `metrics`, its time end): what finished requests add up to
//! over time — requests and the share answered locally, latency percentiles, and the
//! tokens answered locally with the cloud cost they avoided — in 10-second buckets for
//! the last day (the charts' `/api/stats/series`), per UTC day for the last 35 days,
//! and per session. It is seeded at start from the request history, so the days and
//! sessions outlive a restart. Latency is kept as a small log-scale histogram per
//! bucket, so buckets merge into any coarser one; its percentiles are within 25 %.

use std::collections::{BTreeMap, HashMap};

use glider_config::PricingConfig;
use glider_engine::RequestRecord;
use glider_ngl::Usage;
use serde::{Deserialize, Serialize};

/// The finest bucket of the series.
pub const FINE_BUCKET_MS: u64 = 10_000;
/// How long fine buckets are kept.
pub const FINE_KEPT_MS: u64 = DAY_MS;
/// UTC days kept.
pub const DAYS_KEPT: u64 = 35;
/// Sessions kept; past this the least recently active are dropped.
pub const SESSIONS_KEPT: usize = 1000;
/// Most points one series answer holds.
pub const MAX_POINTS: u64 = 1440;

pub const DAY_MS: u64 = 86_400_000;

/// The fields of a finished request that the aggregates read: built from a live record
/// or read back from a history line (which holds the same record).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Row {
    pub started_at_ms: u64,
    pub total_ms: Option<u64>,
    pub ttft_ms: Option<u64>,
    pub status: Option<u16>,
    pub backend: Option<String>,
    pub local: Option<bool>,
    /// The model the client asked for: what a local answer is priced at.
    pub model_requested: String,
    pub rule: Option<String>,
    pub session: Option<String>,
    pub usage: Usage,
}

impl Row {
    pub fn of(record: &RequestRecord) -> Row {
        Row {
            started_at_ms: record.started_at_ms,
            total_ms: record.total_ms,
            ttft_ms: record.ttft_ms,
            status: record.status,
            backend: record.backend.clone(),
            local: record.local,
            model_requested: record.model_requested.clone(),
            rule: record.rule.clone(),
            session: record.session.clone(),
            usage: record.usage,
        }
    }

    pub fn ended_ms(&self) -> u64 {
        self.started_at_ms + self.total_ms.unwrap_or(0)
    }

    /// A backend answered it successfully (local or cloud).
    pub fn answered(&self) -> bool {
        self.backend.is_some() && (200..400).contains(&self.status.unwrap_or(0))
    }

    pub fn answered_locally(&self) -> bool {
        self.answered() && self.local == Some(true)
    }

    /// Input tokens as billed: fresh plus cached input.
    pub fn tokens_in(&self) -> u64 {
        self.usage.input_tokens + self.usage.cache_read_tokens + self.usage.cache_write_tokens
    }

    /// 4xx and 5xx, except 499 (the client went away: nobody's failure to report).
    pub fn is_error(&self) -> bool {
        is_error(self.status.unwrap_or(0))
    }
}

pub fn is_error(status: u16) -> bool {
    status >= 400 && status != 499
}

/// What requests answered locally saved: their tokens, and what the cloud would have
/// charged for them at the model the client asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Saved {
    /// Requests a local backend answered.
    pub requests: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// USD, at the `pricing:` table's price of each request's asked-for model.
    pub cost_usd: f64,
    /// Of `requests`, those whose asked-for model has no price (a local model's own
    /// name, or a cloud model missing from the table): their tokens count, no cost.
    pub unpriced: u64,
}

impl Saved {
    /// What `row` saved: nothing unless a local backend answered it.
    pub fn of(row: &Row, pricing: &PricingConfig) -> Saved {
        if !row.answered_locally() {
            return Saved::default();
        }
        let usage = &row.usage;
        let price = pricing.price_of(&row.model_requested);
        Saved {
            requests: 1,
            tokens_in: row.tokens_in(),
            tokens_out: usage.output_tokens,
            cost_usd: price
                .map(|(_, price)| {
                    price.cost_usd(
                        usage.input_tokens + usage.cache_write_tokens,
                        usage.cache_read_tokens,
                        usage.output_tokens,
                    )
                })
                .unwrap_or(0.0),
            unpriced: u64::from(price.is_none()),
        }
    }

    pub fn add(&mut self, other: &Saved) {
        self.requests += other.requests;
        self.tokens_in += other.tokens_in;
        self.tokens_out += other.tokens_out;
        self.cost_usd += other.cost_usd;
        self.unpriced += other.unpriced;
    }
}

const LATENCY_BINS: usize = 64;
/// Each bin's upper bound is this much above the previous one's.
const LATENCY_GROWTH: f64 = 1.25;

/// Latencies in milliseconds as a log-scale histogram (bin `i` holds values up to
/// `1.25^i`), mergeable across buckets.
#[derive(Debug, Clone, PartialEq)]
struct Latency {
    counts: [u32; LATENCY_BINS],
    samples: u64,
    max: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            counts: [0; LATENCY_BINS],
            samples: 0,
            max: 0,
        }
    }
}

impl Latency {
    fn bin(ms: u64) -> usize {
        if ms <= 1 {
            return 0;
        }
        let bin = ((ms as f64).ln() / LATENCY_GROWTH.ln()).ceil() as usize;
        bin.min(LATENCY_BINS - 1)
    }

    fn upper(bin: usize) -> u64 {
        LATENCY_GROWTH.powi(bin as i32).ceil() as u64
    }

    fn push(&mut self, ms: u64) {
        let bin = Latency::bin(ms);
        self.counts[bin] = self.counts[bin].saturating_add(1);
        self.samples += 1;
        self.max = self.max.max(ms);
    }

    fn merge(&mut self, other: &Latency) {
        for (into, from) in self.counts.iter_mut().zip(other.counts.iter()) {
            *into = into.saturating_add(*from);
        }
        self.samples += other.samples;
        self.max = self.max.max(other.max);
    }

    /// Nearest rank: the upper bound of the bin that holds the `p` quantile, never
    /// above the largest sample.
    fn percentile(&self, p: f64) -> u64 {
        let rank = ((p * self.samples as f64).ceil() as u64).clamp(1, self.samples.max(1));
        let mut seen = 0u64;
        for (bin, count) in self.counts.iter().enumerate() {
            seen += u64::from(*count);
            if seen >= rank {
                return Latency::upper(bin).min(self.max);
            }
        }
        self.max
    }

    fn view(&self) -> Option<LatencyView> {
        (self.samples > 0).then(|| LatencyView {
            p50: self.percentile(0.50),
            p90: self.percentile(0.90),
            p99: self.percentile(0.99),
            max: self.max,
            samples: self.samples,
        })
    }
}

/// Latency percentiles of a bucket, in milliseconds (within 25 % of the exact ones).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyView {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    pub samples: u64,
}

/// How many requests ended, how many a backend answered (and a local one), and how
/// many failed: counted the same way for the since-start aggregates and the buckets.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    pub requests: u64,
    /// Answered successfully by a backend (local or cloud).
    pub answered: u64,
    pub local: u64,
    /// 4xx/5xx answers other than 499.
    pub errors: u64,
}

impl Counts {
    pub fn record(&mut self, row: &Row) {
        self.requests += 1;
        if row.answered() {
            self.answered += 1;
            if row.local == Some(true) {
                self.local += 1;
            }
        }
        if row.is_error() {
            self.errors += 1;
        }
    }

    fn merge(&mut self, other: &Counts) {
        self.requests += other.requests;
        self.answered += other.answered;
        self.local += other.local;
        self.errors += other.errors;
    }

    /// `local / answered`; `None` before the first answer.
    pub fn local_share(&self) -> Option<f64> {
        (self.answered > 0).then(|| self.local as f64 / self.answered as f64)
    }
}

/// Everything one stretch of time adds up to.
#[derive(Debug, Clone, Default)]
struct Bucket {
    counts: Counts,
    latency: Latency,
    saved: Saved,
}

impl Bucket {
    fn record(&mut self, row: &Row, saved: &Saved) {
        self.counts.record(row);
        if let Some(ms) = row.total_ms {
            self.latency.push(ms);
        }
        self.saved.add(saved);
    }

    fn merge(&mut self, other: &Bucket) {
        self.counts.merge(&other.counts);
        self.latency.merge(&other.latency);
        self.saved.add(&other.saved);
    }

    fn view(&self, t_ms: u64) -> Point {
        let counts = self.counts;
        Point {
            t_ms,
            requests: counts.requests,
            answered: counts.answered,
            local: counts.local,
            local_share: counts.local_share(),
            errors: counts.errors,
            latency_ms: self.latency.view(),
            saved: self.saved,
        }
    }
}

/// One bucket as `/api/stats/series` and `/api/stats`' `days` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Start of the bucket, Unix milliseconds.
    pub t_ms: u64,
    pub requests: u64,
    pub answered: u64,
    pub local: u64,
    /// `local / answered`; null when nothing was answered.
    pub local_share: Option<f64>,
    pub errors: u64,
    pub latency_ms: Option<LatencyView>,
    pub saved: Saved,
}

/// One session's totals in `/api/stats`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionTotals {
    pub last_ms: u64,
    pub requests: u64,
    pub saved: Saved,
}

/// A series asked of the ledger.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    pub bucket_ms: u64,
    pub from_ms: u64,
    pub to_ms: u64,
    /// Oldest first, one per bucket, empty buckets included.
    pub points: Vec<Point>,
}

#[derive(Debug, Default)]
pub struct Ledger {
    /// Start of each 10 s bucket → its totals.
    fine: BTreeMap<u64, Bucket>,
    /// Days since the epoch (UTC) → totals.
    days: BTreeMap<u64, Bucket>,
    sessions: HashMap<String, SessionTotals>,
}

impl Ledger {
    /// Add a finished request (`now_ms` decides what is old enough to drop).
    pub fn record(&mut self, row: &Row, saved: &Saved, now_ms: u64) {
        let ended = row.ended_ms();
        let fine_cutoff = now_ms.saturating_sub(FINE_KEPT_MS);
        if ended >= fine_cutoff {
            let start = ended - ended % FINE_BUCKET_MS;
            self.fine.entry(start).or_default().record(row, saved);
        }
        while self
            .fine
            .first_key_value()
            .is_some_and(|(t, _)| *t < fine_cutoff)
        {
            self.fine.pop_first();
        }
        let day_cutoff = (now_ms / DAY_MS).saturating_sub(DAYS_KEPT - 1);
        let day = ended / DAY_MS;
        if day >= day_cutoff {
            self.days.entry(day).or_default().record(row, saved);
        }
        while self
            .days
            .first_key_value()
            .is_some_and(|(d, _)| *d < day_cutoff)
        {
            self.days.pop_first();
        }
        if let Some(session) = &row.session {
            let totals = self
                .sessions
                .entry(session.clone())
                .or_insert(SessionTotals {
                    last_ms: 0,
                    requests: 0,
                    saved: Saved::default(),
                });
            totals.last_ms = totals.last_ms.max(ended);
            totals.requests += 1;
            totals.saved.add(saved);
            if self.sessions.len() > SESSIONS_KEPT + SESSIONS_KEPT / 10 {
                self.forget_oldest_sessions();
            }
        }
    }

    /// Keep the `SESSIONS_KEPT` most recently active sessions (done in batches, so a
    /// long run of new sessions does not sort the map on every request).
    fn forget_oldest_sessions(&mut self) {
        let mut last: Vec<u64> = self.sessions.values().map(|s| s.last_ms).collect();
        last.sort_unstable_by(|a, b| b.cmp(a));
        let cutoff = last[SESSIONS_KEPT - 1];
        self.sessions.retain(|_, s| s.last_ms >= cutoff);
    }

    /// `window_ms` up to `now_ms` in buckets of `bucket_ms` (a multiple of a day: from
    /// the days; else a multiple of 10 s: from the fine buckets). The caller checks
    /// the bounds ([`check_series`]).
    pub fn series(&self, bucket_ms: u64, window_ms: u64, now_ms: u64) -> Series {
        let points = window_ms.div_ceil(bucket_ms).max(1);
        let last = now_ms - now_ms % bucket_ms;
        let first = last.saturating_sub((points - 1) * bucket_ms);
        let by_day = bucket_ms.is_multiple_of(DAY_MS);
        let mut out = Vec::new();
        let mut start = first;
        while start <= last {
            let end = start + bucket_ms;
            let mut bucket = Bucket::default();
            let parts = if by_day {
                self.days.range(start / DAY_MS..end / DAY_MS)
            } else {
                self.fine.range(start..end)
            };
            for (_, part) in parts {
                bucket.merge(part);
            }
            out.push(bucket.view(start));
            start = end;
        }
        Series {
            bucket_ms,
            from_ms: first,
            to_ms: last + bucket_ms,
            points: out,
        }
    }

    /// Each UTC day kept (`YYYY-MM-DD`), with its totals.
    pub fn days(&self) -> BTreeMap<String, Point> {
        self.days
            .iter()
            .map(|(day, bucket)| {
                let t_ms = day * DAY_MS;
                (crate::history::utc_day(t_ms), bucket.view(t_ms))
            })
            .collect()
    }

    pub fn sessions(&self) -> BTreeMap<String, SessionTotals> {
        self.sessions
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Why a series cannot be answered, or `Ok` when `bucket_ms` and `window_ms` fit the
/// ledger: a bucket of a multiple of 10 s over at most a day, or of whole days over at
/// most 35 days, and at most 1440 points.
pub fn check_series(bucket_ms: u64, window_ms: u64) -> Result<(), String> {
    if bucket_ms == 0 || !bucket_ms.is_multiple_of(FINE_BUCKET_MS) {
        return Err(format!(
            "bucket must be a whole multiple of 10s (got {} ms)",
            bucket_ms
        ));
    }
    if window_ms < bucket_ms {
        return Err("window must be at least one bucket".into());
    }
    let (kept, kept_name) = if bucket_ms.is_multiple_of(DAY_MS) {
        (DAYS_KEPT * DAY_MS, "35d (days are kept 35 days)")
    } else {
        (
            FINE_KEPT_MS,
            "1d (buckets under a day are kept one day; use bucket=1d for longer)",
        )
    };
    if window_ms > kept {
        return Err(format!("window must be at most {kept_name}"));
    }
    if window_ms.div_ceil(bucket_ms) > MAX_POINTS {
        return Err(format!(
            "at most {MAX_POINTS} points per series: use a larger bucket"
        ));
    }
    Ok(())
}

/// A duration as the series query writes it: a number of seconds, or a number with
/// `s`, `m`, `h` or `d` (`60s`, `5m`, `1h`, `1d`).
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit_ms) = match text.char_indices().last() {
        Some((at, 's')) => (&text[..at], 1_000),
        Some((at, 'm')) => (&text[..at], 60_000),
        Some((at, 'h')) => (&text[..at], 3_600_000),
        Some((at, 'd')) => (&text[..at], DAY_MS),
        _ => (text, 1_000),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_ms))
        .ok_or_else(|| {
            format!("{text:?} is not a duration (a whole number with s, m, h or d, e.g. 60s)")
        })
}

/// Rows of the history to seed the ledger with, read in chunks.
pub const SEED_CHUNK: usize = 4096;

/// A line of the history as the seed reads it: its `seq` and the row.
#[derive(Debug, Deserialize)]
pub struct HistoryRow {
    pub seq: u64,
    #[serde(flatten)]
    pub row: Row,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ended_ms: u64, total_ms: u64, local: bool, model: &str) -> Row {
        Row {
            started_at_ms: ended_ms - total_ms,
            total_ms: Some(total_ms),
            ttft_ms: Some(1),
            status: Some(200),
            backend: Some(if local { "local" } else { "cloud" }.into()),
            local: Some(local),
            model_requested: model.into(),
            rule: Some("model".into()),
            session: Some("s1".into()),
            usage: Usage {
                input_tokens: 1_000,
                output_tokens: 100,
                cache_read_tokens: 500,
                ..Usage::default()
            },
        }
    }

    #[test]
    fn a_local_answer_saves_its_tokens_at_the_asked_for_price() {
        let pricing = PricingConfig::default();
        let saved = Saved::of(&row(10_000, 5, true, "claude-sonnet-4-5"), &pricing);
        assert_eq!(
            (saved.requests, saved.tokens_in, saved.tokens_out),
            (1, 1_500, 100)
        );
        // 1000 × $3 + 500 × $0.30 + 100 × $15, per million.
        assert!(
            (saved.cost_usd - 0.00465).abs() < 1e-12,
            "{}",
            saved.cost_usd
        );
        assert_eq!(saved.unpriced, 0);
        let cloud = Saved::of(&row(10_000, 5, false, "claude-sonnet-4-5"), &pricing);
        assert_eq!(cloud, Saved::default(), "a cloud answer saves nothing");
        let unpriced = Saved::of(&row(10_000, 5, true, "qwen2.5-coder:7b"), &pricing);
        assert_eq!(
            (unpriced.tokens_in, unpriced.cost_usd, unpriced.unpriced),
            (1_500, 0.0, 1)
        );
        let mut failed = row(10_000, 5, true, "claude-sonnet-4-5");
        failed.status = Some(500);
        assert_eq!(Saved::of(&failed, &pricing), Saved::default());
    }

    #[test]
    fn latency_percentiles_are_within_a_quarter_and_never_above_the_max() {
        let mut latency = Latency::default();
        for ms in 1..=1000 {
            latency.push(ms);
        }
        let view = latency.view().expect("samples");
        for (got, exact) in [(view.p50, 500.0), (view.p90, 900.0), (view.p99, 990.0)] {
            let ratio = got as f64 / exact;
            assert!((1.0..=1.25).contains(&ratio), "{got} vs {exact}");
        }
        assert_eq!((view.max, view.samples), (1000, 1000));
        let mut one = Latency::default();
        one.push(7);
        assert_eq!(one.view().map(|v| (v.p50, v.p99)), Some((7, 7)));
        assert_eq!(Latency::bin(0), 0);
        assert_eq!(Latency::bin(u64::MAX), LATENCY_BINS - 1);
    }

    #[test]
    fn series_merge_fine_buckets_and_show_empty_ones() {
        let pricing = PricingConfig::default();
        // Halfway through a minute: the last bucket is the minute in progress.
        let now = 100 * DAY_MS + 3_600_000 + 30_000;
        let mut ledger = Ledger::default();
        for (ended, local) in [
            (now - 125_000, true),
            (now - 119_000, false),
            (now - 5_000, true),
        ] {
            let r = row(ended, 40, local, "claude-sonnet-4-5");
            ledger.record(&r, &Saved::of(&r, &pricing), now);
        }
        let series = ledger.series(60_000, 180_000, now);
        assert_eq!(series.points.len(), 3);
        assert_eq!(series.to_ms, now + 30_000);
        let counts: Vec<(u64, u64)> = series
            .points
            .iter()
            .map(|p| (p.requests, p.local))
            .collect();
        assert_eq!(counts, vec![(2, 1), (0, 0), (1, 1)]);
        assert_eq!(series.points[0].local_share, Some(0.5));
        assert_eq!(series.points[1].local_share, None);
        assert_eq!(series.points[2].saved.requests, 1);
        let days = ledger.series(DAY_MS, 2 * DAY_MS, now);
        assert_eq!(
            days.points.iter().map(|p| p.requests).collect::<Vec<_>>(),
            vec![0, 3]
        );
        assert_eq!(ledger.days().len(), 1);
        assert_eq!(ledger.sessions()["s1"].requests, 3);
    }

    #[test]
    fn old_buckets_and_idle_sessions_are_dropped() {
        let pricing = PricingConfig::default();
        let now = 200 * DAY_MS;
        let mut ledger = Ledger::default();
        let old = row(now - 2 * DAY_MS, 5, true, "m");
        ledger.record(&old, &Saved::of(&old, &pricing), now);
        assert!(ledger.fine.is_empty(), "older than a day: no fine bucket");
        assert_eq!(ledger.days.len(), 1, "but its day is kept");
        let ancient = row(now - 40 * DAY_MS, 5, true, "m");
        ledger.record(&ancient, &Saved::of(&ancient, &pricing), now);
        assert_eq!(ledger.days.len(), 1, "older than 35 days: not kept");
        for i in 0..(SESSIONS_KEPT as u64 + SESSIONS_KEPT as u64 / 10 + 1) {
            let mut r = row(now - 1_000_000 + i, 5, true, "m");
            r.session = Some(format!("s{i}"));
            ledger.record(&r, &Saved::default(), now);
        }
        assert!(
            ledger.sessions.len() <= SESSIONS_KEPT,
            "{}",
            ledger.sessions.len()
        );
        assert!(
            ledger
                .sessions
                .contains_key(&format!("s{}", SESSIONS_KEPT + 100))
        );
    }

    #[test]
    fn series_bounds_and_durations() {
        assert_eq!(parse_duration_ms("60s"), Ok(60_000));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert_eq!(parse_duration_ms("90"), Ok(90_000));
        assert_eq!(parse_duration_ms("1d"), Ok(DAY_MS));
        assert!(parse_duration_ms("soon").is_err());
        assert!(parse_duration_ms("-5s").is_err());
        assert!(check_series(60_000, 3_600_000).is_ok());
        assert!(check_series(DAY_MS, 30 * DAY_MS).is_ok());
        assert!(
            check_series(15_000, 60_000)
                .expect_err("refused")
                .contains("10s")
        );
        assert!(
            check_series(60_000, 2 * DAY_MS)
                .expect_err("refused")
                .contains("bucket=1d")
        );
        assert!(
            check_series(10_000, DAY_MS)
                .expect_err("refused")
                .contains("1440")
        );
        assert!(check_series(60_000, 10_000).is_err());
    }
}
