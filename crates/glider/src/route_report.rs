//! `glider route report`: the routing evidence under `GLIDER_HOME`, read straight from
//! its files (beside a serving Glider, no dashboard needed). From the request history:
//! requests and estimated tokens per rule and side, and per kind of request
//! (docs/routing.md, "The default policy"); from the shadow samples: how often the
//! local model agreed with the cloud per kind. Then what lowering
//! `routing.classifier.local_threshold` would move: for each score the classifier gave
//! a request the policy sent to the cloud, the requests and tokens that would go local
//! and the measured agreement of their kinds. The suggestion is the lowest such
//! threshold whose moved kinds all have at least `--min-samples` ([`MIN_SAMPLES`])
//! compared samples and a pooled agreement of at least `--min-agreement`
//! ([`MIN_AGREEMENT`]), every higher one too; `--apply` writes it to the config
//! file, which a running `glider serve` then reloads (a reload, never a silent change).
//! Only a file that states `local_threshold:` on a line of its own is edited (its value
//! replaced, the rest of the file byte for byte); anything else gets an error naming the
//! key and value to set by hand.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use glider_config::Config;
use glider_dashboard::shadow::{read, summarize};
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

/// The report over the newest `last` requests and shadow samples under `home`, for the
/// thresholds of `config`, suggesting a change that clears `bar`.
pub fn report(home: &Path, config: &Config, last: usize, bar: Bar) -> RouteReport {
    let history = glider_dashboard::history::read_before(&home.join("history"), None, last);
    let entries: Vec<Entry> = history.iter().filter_map(entry).collect();
    let samples = read(&home.join("shadow"), last);

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

/// The report as text.
pub fn render(report: &RouteReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} requests, {} shadow samples read",
        report.requests_read, report.samples_read
    );
    let _ = writeln!(out, "by rule:");
    for (rule, sides) in &report.by_rule {
        for (side, v) in sides {
            let _ = writeln!(
                out,
                "  {rule:<14} {side:<5} {:>6} requests {:>10} tokens",
                v.requests, v.tokens
            );
        }
    }
    let _ = writeln!(out, "by kind:");
    for row in &report.by_kind {
        let agreement = match row.compared {
            0 => "no shadow samples".to_owned(),
            n => format!(
                "agreement {:.0}% ({} of {n})",
                row.agreed as f64 * 100.0 / n as f64,
                row.agreed
            ),
        };
        let _ = writeln!(
            out,
            "  {:<16} {:>6} requests {:>10} tokens, local {} / {} tokens; {agreement}",
            row.kind, row.all.requests, row.all.tokens, row.local.requests, row.local.tokens
        );
    }
    let _ = writeln!(
        out,
        "routing.classifier.local_threshold {:?} (cloud_threshold {:?}); lowered to:",
        report.local_threshold, report.cloud_threshold
    );
    if report.moves.is_empty() {
        let _ = writeln!(
            out,
            "  nothing would move: no request the policy sent to the cloud scored between the thresholds"
        );
    }
    for m in &report.moves {
        let agreement = m.agreement.map_or("no shadow samples".to_owned(), |a| {
            format!("agreement {:.0}% over {} samples", a * 100.0, m.samples)
        });
        let kinds: Vec<String> = m.kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            out,
            "  {:?}: {} requests, {} tokens local ({}); {agreement}{}",
            m.threshold,
            m.moved.requests,
            m.moved.tokens,
            kinds.join(", "),
            if m.supported {
                ""
            } else {
                " — not enough evidence"
            }
        );
    }
    match report.suggested_local_threshold {
        Some(t) => {
            let _ = write!(
                out,
                "suggested: routing.classifier.local_threshold: {t:?} (glider route report --apply -c CONFIG writes it)"
            );
        }
        None => {
            let _ = write!(
                out,
                "no change suggested: each moved kind needs {} compared shadow samples and {:.0}% agreement",
                report.bar.min_samples,
                report.bar.min_agreement * 100.0
            );
        }
    }
    out
}

/// `config_text` with its one `local_threshold:` line set to `threshold`; an error
/// naming the key when the file does not state it on a line of its own exactly once.
pub fn with_local_threshold(config_text: &str, threshold: f64) -> anyhow::Result<String> {
    let mut found = 0;
    let mut out = String::with_capacity(config_text.len() + 16);
    for line in config_text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let indent = body.len() - body.trim_start().len();
        let rest = &body[indent..];
        if let Some(value) = rest.strip_prefix("local_threshold:") {
            found += 1;
            let comment = value.find('#').map(|at| &value[at..]).unwrap_or("");
            let ending = &line[body.len()..];
            let spacer = if comment.is_empty() { "" } else { "  " };
            let _ = write!(
                out,
                "{}local_threshold: {threshold:?}{spacer}{comment}{ending}",
                &body[..indent]
            );
        } else {
            out.push_str(line);
        }
    }
    if found != 1 {
        anyhow::bail!(
            "the config states `local_threshold:` on a line of its own {found} times, not once; set routing.classifier.local_threshold: {threshold:?} by hand"
        );
    }
    Ok(out)
}

/// `glider route report [--json] [--apply]`.
pub fn run(
    home: &Path,
    config_path: Option<&Path>,
    last: usize,
    bar: Bar,
    json: bool,
    apply: bool,
) -> anyhow::Result<String> {
    let config = match config_path {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default()?,
    };
    let report = report(home, &config, last, bar);
    let mut out = if json {
        serde_json::to_string_pretty(&report).context("encoding the report")?
    } else {
        render(&report)
    };
    if !apply {
        return Ok(out);
    }
    let path = config_path.context(
        "--apply writes the config file: name it with -c (the embedded profile is not a file)",
    )?;
    let threshold = report.suggested_local_threshold.with_context(|| {
        format!(
            "--apply: no change is suggested (each moved kind needs {} compared shadow samples and {:.0}% agreement)",
            bar.min_samples,
            bar.min_agreement * 100.0
        )
    })?;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let edited = with_local_threshold(&text, threshold)?;
    // Checked as the server will load it before anything is written.
    let parsed = Config::parse(&edited, &path.display().to_string())
        .with_context(|| format!("{} would not load once edited", path.display()))?;
    if parsed.routing.classifier.local_threshold != threshold {
        anyhow::bail!(
            "the `local_threshold:` line in {} is not routing.classifier's; set routing.classifier.local_threshold: {threshold:?} by hand",
            path.display()
        );
    }
    let staged = path.with_extension("yaml.glider-new");
    std::fs::write(&staged, &edited).with_context(|| format!("writing {}", staged.display()))?;
    std::fs::rename(&staged, path).with_context(|| format!("replacing {}", path.display()))?;
    let _ = write!(
        out,
        "\nwrote routing.classifier.local_threshold: {threshold:?} to {} (a running glider serve reloads it)",
        path.display()
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_threshold_line_changes() {
        let text = "routing:\n  classifier:\n    local_threshold: 2.0   # was 3\n    cloud_threshold: -2.0\n";
        assert_eq!(
            with_local_threshold(text, 0.97).expect("edited"),
            "routing:\n  classifier:\n    local_threshold: 0.97  # was 3\n    cloud_threshold: -2.0\n"
        );
        let error = with_local_threshold("routing: {classifier: {local_threshold: 2}}\n", 1.0)
            .expect_err("not a line of its own");
        assert!(
            error
                .to_string()
                .contains("set routing.classifier.local_threshold: 1.0 by hand"),
            "{error}"
        );
    }
}
