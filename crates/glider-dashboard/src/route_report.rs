//! The routing evidence (docs/routing.md, "Evidence"): from the request history,
//! requests and estimated tokens per rule and side, and per kind of request (the
//! default policy's kinds); from the shadow samples, how often the local model agreed
//! with the cloud per kind; then what lowering `routing.classifier.local_threshold`
//! would move: for each score the classifier gave a request the policy sent to the
//! cloud, the requests and tokens that would go local and the measured agreement of
//! their kinds. The suggestion is the lowest such threshold whose moved kinds all have
//! at least [`MIN_SAMPLES`] compared samples and a pooled agreement of at least
//! [`MIN_AGREEMENT`] (both adjustable), every higher one too. Read straight from the
//! files under `GLIDER_HOME`, so `glider route report` (text, `--apply`) and the
//! dashboard's `GET /api/route-report` (its chart) show the same figures.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::Shared;
use crate::shadow::{read, summarize};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use glider_config::Config;
use serde::Serialize;
use serde_json::Value;

/// Requests `glider route report` reads by default (the newest).
pub const REPORT_REQUESTS: usize = 10_000;
/// Compared shadow samples each moved kind needs before a change is suggested (default).
pub const MIN_SAMPLES: u64 = 20;
/// The pooled agreement a suggested change must have measured (default).
pub const MIN_AGREEMENT: f64 = 0.9;

/// What a suggestion needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bar {
    /// Compared shadow samples of each moved kind.
    pub min_samples: u64,
    /// Pooled agreement over them.
    pub min_agreement: f64,
}

impl Default for Bar {
    fn default() -> Self {
        Bar {
            min_samples: MIN_SAMPLES,
            min_agreement: MIN_AGREEMENT,
        }
    }
}

/// Requests and estimated input tokens.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct Volume {
    pub requests: u64,
    pub tokens: u64,
}

impl Volume {
    fn add(&mut self, tokens: u64) {
        self.requests += 1;
        self.tokens += tokens;
    }
}

/// One kind: its volume, what went local, and its shadow evidence.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct KindRow {
    pub kind: String,
    pub all: Volume,
    pub local: Volume,
    /// Shadow samples of this kind that were compared, and those that agreed.
    pub compared: u64,
    pub agreed: u64,
}

/// What `local_threshold: threshold` would move local, and the evidence for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThresholdMove {
    pub threshold: f64,
    pub moved: Volume,
    /// The moved requests per kind.
    pub kinds: BTreeMap<String, u64>,
    /// Compared shadow samples of the moved kinds, and the agreement pooled over them
    /// (`None`: none compared).
    pub samples: u64,
    pub agreement: Option<f64>,
    /// Every moved kind has the bar's samples and the pool its agreement.
    pub supported: bool,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteReport {
    pub requests_read: usize,
    pub samples_read: usize,
    /// `rule -> side (local / cloud) -> volume`.
    pub by_rule: BTreeMap<String, BTreeMap<String, Volume>>,
    pub by_kind: Vec<KindRow>,
    pub local_threshold: f64,
    pub cloud_threshold: f64,
    /// What a suggestion needs.
    pub bar: Bar,
    /// Lower thresholds, highest first.
    pub moves: Vec<ThresholdMove>,
    /// The lowest supported threshold, if any.
    pub suggested_local_threshold: Option<f64>,
}

/// One history entry as the report reads it.
struct Entry {
    rule: String,
    local: bool,
    kind: String,
    score: Option<f64>,
    tokens: u64,
}

fn entry(value: &Value) -> Option<Entry> {
    Some(Entry {
        rule: value.get("rule")?.as_str()?.to_owned(),
        local: value.get("local")?.as_bool()?,
        kind: value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned(),
        score: value.get("score").and_then(Value::as_f64),
        tokens: value
            .get("estimated_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// The report over the newest `last` requests of the history in `history_dir` and
/// shadow samples in `shadow_dir`, for the thresholds of `config`, suggesting a change
/// that clears `bar`.
pub fn report(
    history_dir: &Path,
    shadow_dir: &Path,
    config: &Config,
    last: usize,
    bar: Bar,
) -> RouteReport {
    let history = crate::history::read_before(history_dir, None, last);
    let entries: Vec<Entry> = history.iter().filter_map(entry).collect();
    let samples = read(shadow_dir, last);

    let side = |local: bool| if local { "local" } else { "cloud" };
    let mut by_rule: BTreeMap<String, BTreeMap<String, Volume>> = BTreeMap::new();
    let mut kinds: BTreeMap<String, KindRow> = BTreeMap::new();
    for e in &entries {
        by_rule
            .entry(e.rule.clone())
            .or_default()
            .entry(side(e.local).to_owned())
            .or_default()
            .add(e.tokens);
        let row = kinds.entry(e.kind.clone()).or_insert_with(|| KindRow {
            kind: e.kind.clone(),
            ..KindRow::default()
        });
        row.all.add(e.tokens);
        if e.local {
            row.local.add(e.tokens);
        }
    }
    for summary in summarize(&samples) {
        let Some(kind) = summary.kind else { continue };
        let row = kinds.entry(kind.clone()).or_insert_with(|| KindRow {
            kind,
            ..KindRow::default()
        });
        row.compared += summary.compared;
        row.agreed += summary.agreed;
    }

    let classifier = &config.routing.classifier;
    let (local_threshold, cloud_threshold) =
        (classifier.local_threshold, classifier.cloud_threshold);
    // What the policy sent to the cloud on its own and the classifier scored: a lower
    // local threshold is what would move it.
    let movable: Vec<&Entry> = entries
        .iter()
        .filter(|e| !e.local && matches!(e.rule.as_str(), "classifier" | "model"))
        .filter(|e| {
            e.score
                .is_some_and(|s| s < local_threshold && s > cloud_threshold)
        })
        .collect();
    let mut thresholds: Vec<f64> = movable.iter().filter_map(|e| e.score).collect();
    thresholds.sort_by(|a, b| b.total_cmp(a));
    thresholds.dedup();
    let moves: Vec<ThresholdMove> = thresholds
        .into_iter()
        .map(|threshold| {
            let mut moved = Volume::default();
            let mut moved_kinds: BTreeMap<String, u64> = BTreeMap::new();
            for e in movable
                .iter()
                .filter(|e| e.score.is_some_and(|s| s >= threshold))
            {
                moved.add(e.tokens);
                *moved_kinds.entry(e.kind.clone()).or_default() += 1;
            }
            let evidence = |kind: &str| {
                kinds
                    .get(kind)
                    .map_or((0, 0), |row| (row.compared, row.agreed))
            };
            let (samples, agreed) = moved_kinds
                .keys()
                .map(|k| evidence(k))
                .fold((0, 0), |(s, a), (c, g)| (s + c, a + g));
            let agreement = (samples > 0).then(|| agreed as f64 / samples as f64);
            let supported = moved_kinds.keys().all(|k| evidence(k).0 >= bar.min_samples)
                && agreement.is_some_and(|a| a >= bar.min_agreement);
            ThresholdMove {
                threshold,
                moved,
                kinds: moved_kinds,
                samples,
                agreement,
                supported,
            }
        })
        .collect();
    let suggested_local_threshold = moves
        .iter()
        .take_while(|m| m.supported)
        .last()
        .map(|m| m.threshold);
    RouteReport {
        requests_read: entries.len(),
        samples_read: samples.len(),
        by_rule,
        by_kind: kinds.into_values().collect(),
        local_threshold,
        cloud_threshold,
        bar,
        moves,
        suggested_local_threshold,
    }
}

/// `GET /api/route-report`: the report over the newest [`REPORT_REQUESTS`] requests at
/// the default bar, as `glider route report --json` gives it; the overview's *Routing
/// evidence* panel draws it. The files are read on a blocking thread.
pub(crate) async fn view(State(shared): State<Arc<Shared>>) -> Response {
    let config = shared.engine.runtime().config.clone();
    let history_dir = shared.options.history.dir.clone();
    let shadow_dir = shared.options.home.join("shadow");
    let read = tokio::task::spawn_blocking(move || {
        report(
            &history_dir,
            &shadow_dir,
            &config,
            REPORT_REQUESTS,
            Bar::default(),
        )
    })
    .await;
    match read {
        Ok(report) => Json(report).into_response(),
        Err(join) => crate::rest::error(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "route_report_error",
            &format!("the route report failed: {join}"),
        ),
    }
}
