//! What fan-out left under `GLIDER_HOME`, read straight from its files (works beside a
//! serving Glider, no dashboard or token needed): `glider shadow report` adds up the
//! shadow samples (`GLIDER_HOME/shadow/`) per shadow backend and route, and
//! `glider route explain --compare ID` prints a `mode: all` request's answers side by
//! side from the request history (`GLIDER_HOME/history/`). docs/fan-out.md.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use glider_dashboard::shadow::{read, render, summarize};
use glider_engine::FanOutRecord;

/// Samples `glider shadow report` reads by default (the newest).
pub const REPORT_SAMPLES: usize = 10_000;

/// `glider shadow report`: the newest `last` samples added up, as text or JSON.
pub fn shadow_report(home: &Path, last: usize, json: bool) -> anyhow::Result<String> {
    let samples = read(&home.join("shadow"), last);
    let rows = summarize(&samples);
    if json {
        return serde_json::to_string_pretty(&serde_json::json!({
            "samples_read": samples.len(),
            "summary": rows,
        }))
        .context("encoding the report");
    }
    Ok(format!(
        "{}\n({} newest samples read from {})",
        render(&rows),
        samples.len(),
        home.join("shadow").display()
    ))
}

/// `glider route explain --compare SEQ`: the request with sequence number `seq` (the
/// `seq` of `/api/requests` and the history), its fan-out answers side by side (or the
/// whole fan-out record as JSON).
pub fn compare(home: &Path, seq: u64, json: bool) -> anyhow::Result<String> {
    let dir = home.join("history");
    // By sequence number, unique across restarts (a record `id` starts again at each
    // one), as `/api/requests` pages and the dashboard name requests.
    let entry = glider_dashboard::history::read_before(&dir, seq.checked_add(1), 1)
        .into_iter()
        .find(|entry| entry.get("seq").and_then(serde_json::Value::as_u64) == Some(seq))
        .with_context(|| format!("no request with seq {seq} in {}", dir.display()))?;
    let id = entry
        .get("id")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let fan_out = entry
        .get("fan_out")
        .filter(|f| !f.is_null())
        .with_context(|| {
            format!(
                "request seq {seq} did not fan out (set fan_out.mode: all to compare its candidates)"
            )
        })?;
    let record: FanOutRecord =
        serde_json::from_value(fan_out.clone()).context("reading the request's fan_out")?;
    if json {
        return serde_json::to_string_pretty(&record).context("encoding the comparison");
    }
    if record.answers.is_empty() {
        anyhow::bail!(
            "request seq {seq} fanned out with mode {} and kept one answer; only mode all records every candidate's",
            record.mode
        );
    }
    let mut out = format!(
        "request {id} (seq {seq}), mode {}: the client got {}'s answer\n",
        record.mode, record.winner
    );
    let _ = writeln!(
        out,
        "{:<3} {:<16} {:<20} {:>9} {:>7} {:<10} {:<16} {:>6} {:<16} agreement",
        "", "backend", "model", "latency", "tokens", "stop", "tools", "chars", "digest"
    );
    for compared in &record.answers {
        let answer = &compared.answer;
        let agreement = match (&compared.agreement, &answer.error) {
            (_, Some(error)) => format!("failed: {error}"),
            (Some(a), None) => format!(
                "{} (tools {}, stop {}, text similarity {:.2}{})",
                if a.agrees { "agrees" } else { "differs" },
                if a.same_tools { "same" } else { "differ" },
                if a.same_stop { "same" } else { "differ" },
                a.text_similarity,
                if a.exact { ", identical" } else { "" }
            ),
            (None, None) => "-".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<3} {:<16} {:<20} {:>6} ms {:>7} {:<10} {:<16} {:>6} {:<16} {agreement}",
            if compared.chosen { "->" } else { "" },
            answer.backend,
            answer.model,
            answer.latency_ms,
            answer.output_tokens,
            answer.stop_reason.as_deref().unwrap_or("-"),
            if answer.tool_calls.is_empty() {
                "-".to_owned()
            } else {
                answer.tool_calls.join(",")
            },
            answer.text_chars,
            answer.digest,
        );
    }
    Ok(out.trim_end().to_owned())
}
