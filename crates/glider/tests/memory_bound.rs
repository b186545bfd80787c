//! The default configuration's memory under a fixed load (issue 55): `glider serve`
//! with the context log and its summarizer on, as by default, answers a fixed number
//! of agent-loop requests of one long session (each carrying tool calls and results, as
//! a coding CLI's do), then the summarizer catches up on that session once it idles.
//! The process's peak resident set (`VmHWM`) must stay within the bound the issue sets
//! for the whole benchmark harness: the catch-up reads the session a page at a time,
//! never all of its events at once (it read them all before, and peaked at several
//! hundred MB on the harness).

mod common;

use std::time::{Duration, Instant};

use common::serve::serve_yaml;
use futures_util::StreamExt;
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

/// Requests sent: a count, not a duration.
const REQUESTS: usize = 8_000;
/// Requests sent before the test waits for the log to have written them.
const ROUND: usize = 500;
/// At most this many in flight.
const CONCURRENCY: usize = 8;
/// Tool calls (and their results) in each request's newest turns.
const CALLS: usize = 5;
/// The peak resident set allowed, in MiB (issue 55's target for the whole harness).
const PEAK_MIB: u64 = 150;

/// Request `n` of the session: the same opening user message (so one session), then
/// an assistant turn of [`CALLS`] reads and their results, each id and text its own.
fn request(n: usize) -> Value {
    let calls: Vec<Value> = (0..CALLS)
        .map(|i| {
            json!({
                "id": format!("call_{n}_{i}"),
                "type": "function",
                "function": {
                    "name": "Read",
                    "arguments": json!({
                        "file_path": format!("/work/src/module_{i}.rs"),
                        "note": format!("{n} {}", "why this file ".repeat(100)),
                    }).to_string(),
                },
            })
        })
        .collect();
    let results = (0..CALLS).map(|i| {
        json!({
            "role": "tool",
            "tool_call_id": format!("call_{n}_{i}"),
            "content": format!("{n}:{i} {}", "fn parse(input: &str) -> Result<Ast> { todo!() }\n".repeat(80)),
        })
    });
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the parser so that the tests pass."}),
        json!({"role": "assistant", "content": null, "tool_calls": calls}),
    ];
    messages.extend(results);
    json!({"model": "m", "max_tokens": 64, "messages": messages})
}

/// `/metrics`' counter `name` (its first series).
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_default() as u64
}

/// The sum of `/metrics`' `context_compactions_total` over its outcomes.
fn compactions(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("glider_context_compactions_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_session_and_its_summary_stay_within_the_memory_bound() {
    let local = MockVendor::start(MockConfig {
        record: false,
        ..MockConfig::default()
    })
    .await;
    let home = tempfile::tempdir().expect("home");
    // The defaults, but for the summarizer's idle time: longer than any pause between
    // rounds, so that it runs once, after the load, over everything the load logged.
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: vllm, base_url: '{}/v1', models: [{{name: m, context_window: 131072}}]}}\n\
         context: {{summarizer: {{idle_secs: 5}}}}\n",
        local.base_url()
    );
    let served = serve_yaml(home.path(), &yaml);
    let client = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", served.gateway);
    // In rounds, each logged before the next is sent: what is measured is the memory
    // of a long session and its catch-up, not whether the writer keeps up with a
    // debug build's request path (an event dropped would shorten the session).
    for round in (0..REQUESTS).collect::<Vec<_>>().chunks(ROUND) {
        let failed = futures_util::stream::iter(round.iter().copied())
            .map(|n| {
                let (client, url) = (client.clone(), url.clone());
                async move {
                    let reply = client.post(&url).json(&request(n)).send().await;
                    match reply {
                        Ok(reply) if reply.status() == 200 => reply.bytes().await.is_err(),
                        _ => true,
                    }
                }
            })
            .buffer_unordered(CONCURRENCY)
            .filter(|failed| std::future::ready(*failed))
            .count()
            .await;
        assert_eq!(failed, 0, "of requests {round:?}");
        let sent = (round[round.len() - 1] + 1) as u64;
        let guard = Instant::now() + Duration::from_secs(60);
        loop {
            let metrics = served.metrics().await;
            let dropped = counter(&metrics, "glider_context_events_dropped_total");
            assert_eq!(dropped, 0, "events dropped");
            if counter(&metrics, "glider_context_events_written_total") >= 2 * sent {
                break;
            }
            assert!(Instant::now() < guard, "the log never caught up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // The summarizer's run over the session (accepted or not: what it read is what
    // counts here).
    let guard = Instant::now() + Duration::from_secs(120);
    while compactions(&served.metrics().await) == 0 {
        assert!(
            Instant::now() < guard,
            "the summarizer never ran over the session"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let peak_mib = served.peak_rss_kib() / 1024;
    eprintln!("glider serve peaked at {peak_mib} MiB");
    assert!(
        peak_mib <= PEAK_MIB,
        "glider serve peaked at {peak_mib} MiB (bound {PEAK_MIB} MiB)"
    );
    assert!(served.stop_within(Duration::from_secs(20)).success());
}
