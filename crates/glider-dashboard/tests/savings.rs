//! Tokens saved and the cloud cost avoided, over real HTTP: a request a local backend
//! answers is priced at the model the client asked for, per backend, route, session and
//! day, in `/api/stats` and `/metrics`; a cloud answer saves nothing; `pricing:`
//! replaces the built-in table; `/api/stats/series` buckets requests for the charts and
//! refuses what it cannot give; the ledger is seeded from an earlier run's history.

mod common;

use common::{Setup, send, start};
use serde_json::{Value, json};

/// One Anthropic request through the gateway, with a Claude Code session id if given.
async fn ask(stack: &common::Stack, model: &str, session: Option<&str>) -> Value {
    let body = json!({
        "model": model,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": format!("price me ({model})")}],
    });
    let mut request = stack
        .http
        .post(format!("{}/v1/messages", stack.gateway))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(session) = session {
        request = request.header("x-claude-code-session-id", session);
    }
    let reply = send(request).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.json()
}

fn usage_of(reply: &Value) -> (u64, u64) {
    let usage = &reply["usage"];
    let input = usage["input_tokens"].as_u64().expect("input tokens")
        + usage["cache_read_input_tokens"].as_u64().unwrap_or(0)
        + usage["cache_creation_input_tokens"].as_u64().unwrap_or(0);
    (
        input,
        usage["output_tokens"].as_u64().expect("output tokens"),
    )
}

fn close(got: &Value, want: f64) -> bool {
    got.as_f64().is_some_and(|got| (got - want).abs() < 1e-12)
}

/// The value of the sample `name` (exact label set included) in the metrics text.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
}

#[tokio::test]
async fn a_local_answer_is_priced_at_the_model_asked_for_everywhere_it_is_summed() {
    let stack = start(Setup {
        extra: "model_aliases: {claude-sonnet-4-5-20250929: m-local}\n".into(),
        ..Setup::default()
    })
    .await;
    let local = ask(&stack, "claude-sonnet-4-5-20250929", Some("savings-1")).await;
    let (tokens_in, tokens_out) = usage_of(&local);
    assert!(tokens_in > 0 && tokens_out > 0, "{local}");
    ask(&stack, "m-cloud", None).await;
    stack.wait_finished(2).await;

    // Claude Sonnet 4.x list price: $3 input, $15 output per million tokens.
    let cost = tokens_in as f64 * 3.0 / 1e6 + tokens_out as f64 * 15.0 / 1e6;
    let stats = stack.get_json("/api/stats").await;
    let want = |saved: &Value, requests: u64| {
        assert_eq!(saved["requests"], requests, "{saved}");
        if requests > 0 {
            assert_eq!(
                (saved["tokens_in"].as_u64(), saved["tokens_out"].as_u64()),
                (Some(tokens_in), Some(tokens_out))
            );
            assert!(close(&saved["cost_usd"], cost), "{saved} vs {cost}");
            assert_eq!(saved["unpriced"], 0);
        }
    };
    want(&stats["totals"]["saved"], 1);
    assert_eq!(stats["totals"]["requests"], 2);
    want(&stats["backends"]["local"]["saved"], 1);
    want(&stats["backends"]["cloud"]["saved"], 0);
    want(&stats["routes"]["model"]["saved"], 1);
    want(&stats["sessions"]["claude-code:savings-1"]["saved"], 1);
    let today = glider_dashboard::history::utc_day(glider_engine::unix_ms());
    let day = &stats["days"][&today];
    assert_eq!(
        (day["requests"].as_u64(), day["local"].as_u64()),
        (Some(2), Some(1)),
        "{}",
        stats["days"]
    );
    want(&day["saved"], 1);

    // The request list names the session too (a key, never prompt text).
    let requests = stack.get_json("/api/requests").await;
    let sessions: Vec<&Value> = requests["requests"]
        .as_array()
        .expect("list")
        .iter()
        .map(|r| &r["session"])
        .collect();
    assert!(
        sessions.contains(&&json!("claude-code:savings-1")),
        "{sessions:?}"
    );

    let metrics = stack.get("/metrics").await.text;
    let saved_in = sample(&metrics, "glider_tokens_saved_total{direction=\"input\"}");
    let saved_out = sample(&metrics, "glider_tokens_saved_total{direction=\"output\"}");
    assert_eq!(
        (saved_in, saved_out),
        (Some(tokens_in as f64), Some(tokens_out as f64)),
        "{metrics}"
    );
    let avoided =
        sample(&metrics, "glider_cost_avoided_usd_total").expect("the cost counter is served");
    assert!((avoided - cost).abs() < 1e-9, "{avoided} vs {cost}");
    assert_eq!(
        sample(&metrics, "glider_local_requests_unpriced_total"),
        Some(0.0)
    );
}

#[tokio::test]
async fn a_configured_table_replaces_the_built_in_one_and_unpriced_models_are_counted() {
    let stack = start(Setup {
        extra: "model_aliases: {claude-sonnet-4-5: m-local}\npricing: {builtin: false, models: {'m-': {input: 2, output: 4}}}\n".into(),
        ..Setup::default()
    })
    .await;
    let priced = ask(&stack, "m-local", None).await;
    let (tokens_in, tokens_out) = usage_of(&priced);
    let unpriced = ask(&stack, "claude-sonnet-4-5", None).await;
    let (unpriced_in, _) = usage_of(&unpriced);
    stack.wait_finished(2).await;
    let saved = stack.get_json("/api/stats").await["totals"]["saved"].clone();
    assert_eq!(
        (saved["requests"].as_u64(), saved["unpriced"].as_u64()),
        (Some(2), Some(1)),
        "{saved}"
    );
    assert_eq!(
        saved["tokens_in"].as_u64(),
        Some(tokens_in + unpriced_in),
        "unpriced tokens still count"
    );
    let cost = tokens_in as f64 * 2.0 / 1e6 + tokens_out as f64 * 4.0 / 1e6;
    assert!(
        close(&saved["cost_usd"], cost),
        "{saved} vs {cost}: only the m- price applies"
    );
    let metrics = stack.get("/metrics").await.text;
    assert_eq!(
        sample(&metrics, "glider_local_requests_unpriced_total"),
        Some(1.0)
    );
}

#[tokio::test]
async fn the_series_buckets_requests_for_the_charts_and_refuses_what_it_cannot_give() {
    let stack = start(Setup::default()).await;
    ask(&stack, "m-local", None).await;
    ask(&stack, "m-cloud", None).await;
    stack.wait_finished(2).await;

    let series = stack
        .get_json("/api/stats/series?bucket=10s&window=60s")
        .await;
    assert_eq!(series["bucket_ms"], 10_000);
    let points = series["points"].as_array().expect("points");
    assert_eq!(points.len(), 6);
    let times: Vec<u64> = points
        .iter()
        .map(|p| p["t_ms"].as_u64().expect("t"))
        .collect();
    assert!(times.windows(2).all(|w| w[1] == w[0] + 10_000), "{times:?}");
    let requests: u64 = points
        .iter()
        .map(|p| p["requests"].as_u64().expect("n"))
        .sum();
    let local: u64 = points.iter().map(|p| p["local"].as_u64().expect("n")).sum();
    assert_eq!((requests, local), (2, 1), "{series}");
    assert!(
        points.iter().any(|p| p["latency_ms"]["p50"].is_u64()),
        "a bucket with requests has latency: {series}"
    );

    let days = stack
        .get_json("/api/stats/series?bucket=1d&window=7d")
        .await;
    let points = days["points"].as_array().expect("points");
    assert_eq!(points.len(), 7);
    assert_eq!(points[6]["requests"], 2, "today is the last day: {days}");
    assert_eq!(points[6]["local_share"], 0.5);
    let default = stack.get_json("/api/stats/series").await;
    assert_eq!(
        (
            default["bucket_ms"].as_u64(),
            default["points"].as_array().map(Vec::len)
        ),
        (Some(60_000), Some(60))
    );

    for (query, says) in [
        ("bucket=15s", "multiple of 10s"),
        ("bucket=soon", "not a duration"),
        ("bucket=60s&window=2d", "bucket=1d"),
        ("bucket=10s&window=1d", "1440"),
        ("bucket=1d&window=60d", "35d"),
    ] {
        let reply = stack.get(&format!("/api/stats/series?{query}")).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.text);
        let error = reply.json();
        assert_eq!(error["error"]["type"], "invalid_request");
        let message = error["error"]["message"].as_str().expect("message");
        assert!(message.contains(says), "{query}: {message}");
    }
}

#[tokio::test]
async fn days_and_sessions_outlive_a_restart_through_the_history() {
    let home = tempfile::tempdir().expect("tempdir");
    let history = home.path().join("history");
    std::fs::create_dir_all(&history).expect("history dir");
    let now = glider_engine::unix_ms();
    let day_ms = 86_400_000;
    let line = |seq: u64, ended: u64| {
        json!({
            "seq": seq, "id": seq, "started_at_ms": ended - 100, "total_ms": 100,
            "door": "gateway", "front": "anthropic", "stream": false,
            "model_requested": "claude-sonnet-4-5", "model_used": "m-local",
            "backend": "local", "local": true, "rule": "model", "status": 200,
            "session": "claude-code:earlier",
            "usage": {"input_tokens": 1000, "output_tokens": 100},
        })
        .to_string()
    };
    let yesterday = now - day_ms;
    let files = [(1, yesterday), (2, now - 1000)];
    for (seq, ended) in files {
        let name = format!(
            "requests-{}.jsonl",
            glider_dashboard::history::utc_day(ended)
        );
        let mut text = std::fs::read_to_string(history.join(&name)).unwrap_or_default();
        text.push_str(&line(seq, ended));
        text.push('\n');
        std::fs::write(history.join(&name), text).expect("write history");
    }

    let stack = start(Setup {
        home: Some(home.path().to_path_buf()),
        ..Setup::default()
    })
    .await;
    let status = stack
        .wait_status("the ledger seeded", |s| s["ledger"]["seeded"] == true)
        .await;
    assert_eq!(status["ledger"]["seeded_rows"], 2);
    let stats = stack.get_json("/api/stats").await;
    assert_eq!(stats["totals"]["requests"], 0, "totals count since start");
    let per_request = 1000.0 * 3.0 / 1e6 + 100.0 * 15.0 / 1e6;
    let session = &stats["sessions"]["claude-code:earlier"];
    assert_eq!(session["requests"], 2, "{stats}");
    assert!(
        close(&session["saved"]["cost_usd"], 2.0 * per_request),
        "{session}"
    );
    let before = &stats["days"][&glider_dashboard::history::utc_day(yesterday)];
    assert_eq!(before["saved"]["tokens_in"], 1000, "{}", stats["days"]);
    assert!(close(&before["saved"]["cost_usd"], per_request), "{before}");

    // A request of this run adds to the same day, after the seeded ones.
    ask(&stack, "m-local", None).await;
    stack.wait_finished(3).await;
    let today = &stack.get_json("/api/stats").await["days"]
        [&glider_dashboard::history::utc_day(glider_engine::unix_ms())];
    assert!(today["requests"].as_u64() >= Some(1), "{today}");
}
