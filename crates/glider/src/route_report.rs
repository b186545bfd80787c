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

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use glider_config::Config;
pub use glider_dashboard::route_report::{
    Bar, MIN_AGREEMENT, MIN_SAMPLES, REPORT_REQUESTS, RouteReport, report,
};

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
    let report = report(
        &home.join("history"),
        &home.join("shadow"),
        &config,
        last,
        bar,
    );
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
    glider_sys::atomicfile::replace(path, edited.as_bytes())
        .with_context(|| format!("replacing {}", path.display()))?;
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
