//! The shadow samples (fan-out `shadow`): each one the bus carries is kept in memory
//! (the latest [`RECENT`]) and written as a JSON line under `GLIDER_HOME/shadow/` by a
//! [`History`] writer of its own (same files, days and privacy as the request
//! history). `GET /api/shadow` shows the summary and the latest samples;
//! `glider shadow report` reads the files and prints the same summary
//! ([`summarize`], [`render`]): per shadow backend, route and kind of request, how
//! often it agreed with the primary, how a compaction's answers covered what they must
//! name, and how its latency and length compare.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use glider_engine::{Coverage, ShadowOutcome, ShadowSample};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::Shared;
use crate::history::{History, HistoryOptions, Line};

/// Samples kept in memory for `/api/shadow`.
pub const RECENT: usize = 1000;

/// A sample as a history line holds it: with its sequence number.
#[derive(Serialize, Deserialize)]
struct Stored {
    seq: u64,
    #[serde(flatten)]
    sample: ShadowSample,
}

/// The samples: the latest in memory, every one on disk.
pub(crate) struct ShadowBook {
    history: History,
    recent: Mutex<VecDeque<ShadowSample>>,
    last_seq: AtomicU64,
}

impl ShadowBook {
    /// Open `dir` (made 0700 if new) and read back its latest samples.
    pub fn start(dir: &Path, like: &HistoryOptions) -> std::io::Result<ShadowBook> {
        let options = HistoryOptions {
            dir: dir.to_owned(),
            ..like.clone()
        };
        let history = History::start(options)?;
        let newest_first = read(dir, RECENT);
        Ok(ShadowBook {
            last_seq: AtomicU64::new(crate::history::last_seq(dir)),
            recent: Mutex::new(newest_first.into_iter().rev().collect()),
            history,
        })
    }

    /// Keep `sample` and queue it for its file (never waits).
    pub fn add(&self, sample: &ShadowSample) {
        let seq = self.last_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let stored = Stored {
            seq,
            sample: sample.clone(),
        };
        if let Ok(json) = serde_json::to_string(&stored) {
            self.history.append(Line::new(sample.at_ms, json));
        }
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() >= RECENT {
            recent.pop_front();
        }
        recent.push_back(sample.clone());
    }

    /// Write out what is queued.
    pub async fn close(&self) {
        self.history.close().await;
    }
}

/// Up to `limit` samples stored under `dir`, newest first (a foreign line is skipped).
pub fn read(dir: &Path, limit: usize) -> Vec<ShadowSample> {
    crate::history::read_before(dir, None, limit)
        .into_iter()
        .filter_map(|value| serde_json::from_value::<Stored>(value).ok())
        .map(|stored| stored.sample)
        .collect()
}

/// One shadow backend on one route and kind of request behind one primary: what its
/// samples add up to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShadowSummary {
    pub shadow_backend: String,
    /// The shadow's models seen (its answers say).
    pub shadow_models: Vec<String>,
    pub route: String,
    /// The requests' kind (docs/routing.md); `None` for samples from before kinds.
    pub kind: Option<String>,
    pub primary_backend: String,
    /// Every sample: compared, failed, skipped and unfinished.
    pub samples: u64,
    pub compared: u64,
    /// Compared and agreeing, as the kind compares (docs/fan-out.md#comparing-answers).
    pub agreed: u64,
    /// `agreed / compared`, when any was compared.
    pub agreement: Option<f64>,
    pub same_tools: u64,
    /// The same tools with the same arguments.
    pub same_arguments: u64,
    pub same_stop: u64,
    pub exact: u64,
    /// The mean token-Jaccard similarity of the compared texts.
    pub mean_text_similarity: Option<f64>,
    /// Compactions compared by coverage (their conversations edited files or left
    /// errors open), and over them: the items their summaries must name, how many the
    /// client's answers named and the shadow's, and how many the client's named that
    /// the shadow's left out.
    pub by_coverage: u64,
    pub must_name: u64,
    pub primary_named: u64,
    pub shadow_named: u64,
    pub missed: u64,
    pub failed: u64,
    pub skipped: u64,
    pub primary_unfinished: u64,
    /// Median milliseconds to the end of the answer, over the compared samples.
    pub primary_p50_ms: Option<u64>,
    pub shadow_p50_ms: Option<u64>,
    /// Mean output tokens over the compared samples.
    pub primary_mean_output_tokens: Option<f64>,
    pub shadow_mean_output_tokens: Option<f64>,
}

/// The samples added up per (shadow backend, route, kind, primary backend), sorted so.
pub fn summarize<'a>(samples: impl IntoIterator<Item = &'a ShadowSample>) -> Vec<ShadowSummary> {
    #[derive(Default)]
    struct Sums {
        models: Vec<String>,
        samples: u64,
        agreed: u64,
        same_tools: u64,
        same_arguments: u64,
        same_stop: u64,
        exact: u64,
        similarity: f64,
        coverage: Coverage,
        by_coverage: u64,
        failed: u64,
        skipped: u64,
        unfinished: u64,
        primary_ms: Vec<u64>,
        shadow_ms: Vec<u64>,
        primary_tokens: u64,
        shadow_tokens: u64,
    }
    type Key = (String, String, Option<String>, String);
    let mut groups: BTreeMap<Key, Sums> = BTreeMap::new();
    for sample in samples {
        let key = (
            sample.shadow_backend.clone(),
            sample.route.clone(),
            sample.kind.clone(),
            sample.primary_backend.clone(),
        );
        let sums = groups.entry(key).or_default();
        sums.samples += 1;
        if let Some(shadow) = &sample.shadow
            && !sums.models.contains(&shadow.model)
        {
            sums.models.push(shadow.model.clone());
        }
        match sample.outcome {
            ShadowOutcome::Failed => sums.failed += 1,
            ShadowOutcome::Skipped => sums.skipped += 1,
            ShadowOutcome::PrimaryUnfinished => sums.unfinished += 1,
            ShadowOutcome::Compared => {}
        }
        let (Some(agreement), Some(primary), Some(shadow)) =
            (&sample.agreement, &sample.primary, &sample.shadow)
        else {
            continue;
        };
        sums.agreed += u64::from(agreement.agrees);
        sums.same_tools += u64::from(agreement.same_tools);
        sums.same_arguments += u64::from(agreement.same_arguments);
        sums.same_stop += u64::from(agreement.same_stop);
        sums.exact += u64::from(agreement.exact);
        sums.similarity += agreement.text_similarity;
        if let Some(coverage) = &agreement.coverage {
            sums.by_coverage += 1;
            sums.coverage.required += coverage.required;
            sums.coverage.primary_named += coverage.primary_named;
            sums.coverage.shadow_named += coverage.shadow_named;
            sums.coverage.missed += coverage.missed;
        }
        sums.primary_ms.push(primary.latency_ms);
        sums.shadow_ms.push(shadow.latency_ms);
        sums.primary_tokens += primary.output_tokens;
        sums.shadow_tokens += shadow.output_tokens;
    }
    groups
        .into_iter()
        .map(
            |((shadow_backend, route, kind, primary_backend), mut sums)| {
                let compared = sums.primary_ms.len() as u64;
                let per_compared = |total: f64| (compared > 0).then(|| total / compared as f64);
                ShadowSummary {
                    shadow_backend,
                    shadow_models: sums.models,
                    route,
                    kind,
                    primary_backend,
                    samples: sums.samples,
                    compared,
                    agreed: sums.agreed,
                    agreement: per_compared(sums.agreed as f64),
                    same_tools: sums.same_tools,
                    same_arguments: sums.same_arguments,
                    same_stop: sums.same_stop,
                    exact: sums.exact,
                    mean_text_similarity: per_compared(sums.similarity),
                    by_coverage: sums.by_coverage,
                    must_name: sums.coverage.required as u64,
                    primary_named: sums.coverage.primary_named as u64,
                    shadow_named: sums.coverage.shadow_named as u64,
                    missed: sums.coverage.missed as u64,
                    failed: sums.failed,
                    skipped: sums.skipped,
                    primary_unfinished: sums.unfinished,
                    primary_p50_ms: median(&mut sums.primary_ms),
                    shadow_p50_ms: median(&mut sums.shadow_ms),
                    primary_mean_output_tokens: per_compared(sums.primary_tokens as f64),
                    shadow_mean_output_tokens: per_compared(sums.shadow_tokens as f64),
                }
            },
        )
        .collect()
}

/// The lower median (nearest rank).
fn median(values: &mut [u64]) -> Option<u64> {
    values.sort_unstable();
    let middle = values.len().checked_sub(1)? / 2;
    values.get(middle).copied()
}

/// The summary as the text `glider shadow report` prints.
pub fn render(rows: &[ShadowSummary]) -> String {
    if rows.is_empty() {
        return "no shadow samples yet (set fan_out.mode: shadow; see docs/fan-out.md)".to_owned();
    }
    let percent = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.0}%", v * 100.0));
    let ms = |v: Option<u64>| v.map_or("-".to_owned(), |v| format!("{v} ms"));
    let tokens = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
    let mut out = String::new();
    for row in rows {
        let models = if row.shadow_models.is_empty() {
            String::new()
        } else {
            format!(" ({})", row.shadow_models.join(", "))
        };
        let kind = row
            .kind
            .as_deref()
            .map(|kind| format!(", kind {kind}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}{models} shadowing {} on route {}{kind}",
            row.shadow_backend, row.primary_backend, row.route
        );
        let _ = writeln!(
            out,
            "  samples {}: compared {}, failed {}, skipped by budget {}, primary unfinished {}",
            row.samples, row.compared, row.failed, row.skipped, row.primary_unfinished
        );
        let _ = writeln!(
            out,
            "  agreement {} ({} of {}): same tools {} ({} with the same arguments), same stop {}, identical text {}, mean text similarity {}",
            percent(row.agreement),
            row.agreed,
            row.compared,
            row.same_tools,
            row.same_arguments,
            row.same_stop,
            row.exact,
            row.mean_text_similarity
                .map_or("-".to_owned(), |v| format!("{v:.2}"))
        );
        if row.by_coverage > 0 {
            let _ = writeln!(
                out,
                "  coverage ({} compared by it): of {} files and errors to name, the primary named {}, the shadow {}; the shadow left out {} the primary named",
                row.by_coverage, row.must_name, row.primary_named, row.shadow_named, row.missed
            );
        }
        let _ = writeln!(
            out,
            "  latency p50: shadow {} vs primary {}; mean output tokens: shadow {} vs primary {}",
            ms(row.shadow_p50_ms),
            ms(row.primary_p50_ms),
            tokens(row.shadow_mean_output_tokens),
            tokens(row.primary_mean_output_tokens)
        );
    }
    out.trim_end().to_owned()
}

#[derive(Deserialize)]
pub(crate) struct RecentQuery {
    /// Latest samples listed (default 50).
    limit: Option<usize>,
}

/// `GET /api/shadow`: the summary of the samples in memory and the latest ones.
pub(crate) async fn view(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<RecentQuery>,
) -> Response {
    let recent = shared
        .shadow
        .recent
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let summary = summarize(recent.iter());
    let latest: Vec<&ShadowSample> = recent
        .iter()
        .rev()
        .take(query.limit.unwrap_or(50))
        .collect();
    Json(json!({
        "mode": shared.engine.runtime().config.fan_out.mode,
        "kept": recent.len(),
        "summary": summary,
        "recent": latest,
    }))
    .into_response()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use glider_engine::{Agreement, AnswerSummary};

    fn answer(backend: &str, latency_ms: u64, output_tokens: u64) -> AnswerSummary {
        AnswerSummary {
            backend: backend.into(),
            model: format!("{backend}-model"),
            latency_ms,
            output_tokens,
            stop_reason: Some("end_turn".into()),
            tool_calls: Vec::new(),
            text_chars: 10,
            digest: "d".into(),
            error: None,
        }
    }

    /// A `local`-shadowing-`cloud` sample on route `model`; compared when `agrees` is set.
    pub(crate) fn sample(
        outcome: ShadowOutcome,
        agrees: Option<bool>,
        shadow_ms: u64,
    ) -> ShadowSample {
        let compared = agrees.is_some();
        ShadowSample {
            request_id: 1,
            // Now: a line of a day past `keep_days` is deleted when written.
            at_ms: crate::unix_ms(),
            route: "model".into(),
            kind: None,
            primary_backend: "cloud".into(),
            shadow_backend: "local".into(),
            outcome,
            skipped_by: None,
            primary: compared.then(|| answer("cloud", 100, 20)),
            shadow: compared.then(|| answer("local", shadow_ms, 30)),
            agreement: agrees.map(|agrees| Agreement {
                agrees,
                same_tools: true,
                same_arguments: true,
                same_stop: agrees,
                exact: false,
                text_similarity: 0.5,
                coverage: None,
            }),
        }
    }

    #[test]
    fn the_summary_counts_each_outcome_and_compares_only_what_was_compared() {
        let samples = [
            sample(ShadowOutcome::Compared, Some(true), 300),
            sample(ShadowOutcome::Compared, Some(true), 500),
            sample(ShadowOutcome::Compared, Some(false), 400),
            sample(ShadowOutcome::Skipped, None, 0),
            sample(ShadowOutcome::Failed, None, 0),
        ];
        let rows = summarize(&samples);
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!((row.samples, row.compared, row.agreed), (5, 3, 2));
        assert_eq!((row.skipped, row.failed, row.primary_unfinished), (1, 1, 0));
        assert_eq!((row.same_tools, row.same_stop), (3, 2));
        assert_eq!(row.agreement, Some(2.0 / 3.0));
        assert_eq!(row.shadow_p50_ms, Some(400));
        assert_eq!(row.primary_p50_ms, Some(100));
        assert_eq!(row.shadow_mean_output_tokens, Some(30.0));
        assert_eq!(row.shadow_models, vec!["local-model".to_owned()]);
        let text = render(&rows);
        assert!(text.contains("agreement 67% (2 of 3)"), "{text}");
        assert!(
            text.contains("latency p50: shadow 400 ms vs primary 100 ms"),
            "{text}"
        );
        assert!(text.contains("skipped by budget 1"), "{text}");
    }

    #[tokio::test]
    async fn samples_are_written_and_read_back_newest_first() {
        let home = tempfile::tempdir().expect("tempdir");
        let dir = home.path().join("shadow");
        let book = ShadowBook::start(&dir, &HistoryOptions::under(home.path())).expect("start");
        book.add(&sample(ShadowOutcome::Compared, Some(true), 1));
        book.add(&sample(ShadowOutcome::Skipped, None, 2));
        book.close().await;
        let read = read(&dir, 10);
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].outcome, ShadowOutcome::Skipped);
        let reopened = ShadowBook::start(&dir, &HistoryOptions::under(home.path())).expect("again");
        assert_eq!(reopened.recent.lock().expect("lock").len(), 2);
        assert_eq!(reopened.last_seq.load(Ordering::Relaxed), 2);
        reopened.close().await;
    }
}
