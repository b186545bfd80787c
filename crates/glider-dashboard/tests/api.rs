//! The REST API over real HTTP: status, backends, requests (paged), stats, config
//! (redacted, with what needs a restart), the two actions, /metrics, docs and the page.

mod common;

use common::{Setup, start, wait_event};
use glider_test_support::Failure;
use serde_json::Value;

#[tokio::test]
async fn requests_stats_and_status_describe_what_happened() {
    let stack = start(Setup::default()).await;
    assert_eq!(stack.ask("m-local", false).await.status, 200);
    assert_eq!(stack.ask("m-cloud", true).await.status, 200);
    assert_eq!(stack.ask("no-such-model", false).await.status, 404);
    stack.wait_finished(3).await;

    let status = stack.get_json("/api/status").await;
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["glider_home"], stack.home.display().to_string());
    let doors: Vec<&str> = status["doors"]
        .as_array()
        .expect("doors")
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert_eq!(doors, ["gateway", "dashboard"]);
    assert_eq!(status["token_required"], false);

    let page = stack.get_json("/api/requests").await;
    let requests = page["requests"].as_array().expect("requests");
    assert_eq!(requests.len(), 3, "{page}");
    let seqs: Vec<u64> = requests.iter().filter_map(|r| r["seq"].as_u64()).collect();
    assert_eq!(seqs, [3, 2, 1], "newest first");
    let local = &requests[2];
    assert_eq!(local["model_requested"], "m-local");
    assert_eq!(local["model_used"], "m-local");
    assert_eq!(local["backend"], "local");
    assert_eq!(local["local"], true);
    assert_eq!(local["front"], "anthropic");
    assert_eq!(local["client"], "dashboard-test/1.0");
    assert_eq!(local["rule"], "model");
    assert!(local["reason"].as_str().is_some_and(|r| !r.is_empty()));
    assert_eq!(local["status"], 200);
    assert!(
        local["usage"]["output_tokens"].as_u64() > Some(0),
        "{local}"
    );
    assert!(local["ttft_ms"].is_u64() && local["total_ms"].is_u64());
    let cloud = &requests[1];
    assert_eq!(
        (cloud["backend"].as_str(), cloud["stream"].as_bool()),
        (Some("cloud"), Some(true))
    );
    let missing = &requests[0];
    assert_eq!(missing["status"], 404);
    assert!(missing["backend"].is_null());
    assert!(page["in_flight"].as_array().is_some_and(Vec::is_empty));

    // Paging: two, then the rest.
    let first = stack.get_json("/api/requests?limit=2").await;
    assert_eq!(first["requests"].as_array().map(Vec::len), Some(2));
    let before = first["next_before"].as_u64().expect("a next page");
    let second = stack
        .get_json(&format!("/api/requests?limit=2&before={before}"))
        .await;
    let rest: Vec<u64> = second["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter_map(|r| r["seq"].as_u64())
        .collect();
    assert_eq!(rest, [1]);
    assert!(second["next_before"].is_null());
    let bad = stack.get("/api/requests?limit=lots").await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"]["type"], "invalid_request");

    let stats = stack.get_json("/api/stats").await;
    let totals = &stats["totals"];
    assert_eq!(totals["requests"], 3);
    assert_eq!(totals["errors"], 1);
    assert_eq!(totals["answered"], 2);
    assert_eq!(totals["local_share"], 0.5);
    assert!(totals["tokens_in"].as_u64() > Some(0) && totals["tokens_out"].as_u64() > Some(0));
    assert_eq!(totals["latency_ms"]["samples"], 3);
    assert_eq!(stats["backends"]["local"]["requests"], 1);
    assert_eq!(stats["backends"]["local"]["local_share"], 1.0);
    assert_eq!(stats["backends"]["cloud"]["local_share"], 0.0);
    // The unknown model never reached a backend: filed under what it was, not under a
    // backend called "none".
    assert!(stats["backends"].get("none").is_none(), "{stats:#}");
    assert_eq!(
        stats["backends"].as_object().map(|b| b.len()),
        Some(2),
        "{stats:#}"
    );
    assert_eq!(stats["unrouted"]["not_found"]["requests"], 1, "{stats:#}");
    assert_eq!(stats["unrouted"]["not_found"]["errors"], 1);
    assert_eq!(stats["routes"]["model"]["requests"], 2);
    assert_eq!(stats["routes"]["model"]["local_share"], 0.5);
    assert_eq!(stats["routes"]["unrouted"]["requests"], 1);
    assert!(stats["backends"]["local"]["ttft_ms"]["p50"].is_u64());
}

#[tokio::test]
async fn backends_show_health_breaker_and_the_operator_can_reset_a_breaker() {
    let stack = start(Setup::default()).await;
    stack.engine.probe_all().await;
    let listed = stack.get_json("/api/backends").await;
    let local = &listed["backends"][0];
    assert_eq!(local["backend"], "local");
    assert_eq!(local["type"], "ollama");
    assert_eq!(local["health"], "up");
    assert_eq!(local["breaker"], "closed");
    assert_eq!(local["usable"], true);
    assert!(local["warm_models"].is_array());
    let cloud = &listed["backends"][1];
    // A cloud backend is probed too (its model list, with its key), not left unknown.
    assert_eq!(
        (cloud["local"].as_bool(), cloud["health"].as_str()),
        (Some(false), Some("up")),
        "{listed:#}"
    );
    assert!(
        cloud["probe"]
            .as_str()
            .is_some_and(|p| p.contains("accepted the configured key")),
        "{listed:#}"
    );
    assert!(local["probe"].is_null());

    let mut socket = stack.ws().await;
    stack.mock.set_failure(Failure::Status(500));
    for _ in 0..5 {
        assert_eq!(stack.ask("m-local", false).await.status, 502);
    }
    let opened = wait_event(&mut socket, |e| {
        e["type"] == "backend_state_changed" && e["backend"]["breaker"] == "open"
    })
    .await;
    assert_eq!(opened["backend"]["backend"], "local");
    let listed = stack.get_json("/api/backends").await;
    assert_eq!(listed["backends"][0]["breaker"], "open");
    assert_eq!(listed["backends"][0]["usable"], false);

    stack.mock.set_failure(Failure::None);
    let reset = stack.post("/api/backends/local/reset", &[]).await;
    assert_eq!(reset.status, 200, "{}", reset.text);
    assert_eq!(reset.json()["breaker"], "closed");
    wait_event(&mut socket, |e| {
        e["type"] == "backend_state_changed"
            && e["backend"]["backend"] == "local"
            && e["backend"]["breaker"] == "closed"
    })
    .await;
    assert_eq!(stack.ask("m-local", false).await.status, 200);
    assert_eq!(
        stack.post("/api/backends/nope/reset", &[]).await.status,
        404
    );
}

#[tokio::test]
async fn config_is_redacted_reloads_and_says_what_needs_a_restart() {
    let stack = start(Setup {
        file: true,
        ..Setup::default()
    })
    .await;
    let reply = stack.get("/api/config").await;
    assert_eq!(reply.status, 200);
    for secret in ["sk-secret-key-123", "hv-secret-456"] {
        assert!(
            !reply.text.contains(secret),
            "{secret} leaked: {}",
            reply.text
        );
    }
    let config = reply.json();
    assert_eq!(config["running"]["backends"][1]["api_key"], "<redacted>");
    assert_eq!(
        config["running"]["backends"][1]["headers"]["x-team"],
        "<redacted>"
    );
    assert_eq!(config["restart"]["file"], "same", "{config}");
    // Nothing else shows the key either.
    for path in ["/api/backends", "/api/status", "/metrics"] {
        let text = stack.get(path).await.text;
        assert!(
            !text.contains("sk-secret-key-123") && !text.contains("hv-secret-456"),
            "{path}"
        );
    }

    let mut socket = stack.ws().await;
    let path = stack.home.join("glider.yaml");
    let text = std::fs::read_to_string(&path).expect("config");
    // A hot key and a restart-only key change; the file watcher is off in this test,
    // so the operator's reload applies the hot one.
    let edited =
        format!("{text}model_aliases: {{gpt-4o: m-local}}\nserver: {{proxy_port: 9999}}\n");
    std::fs::write(&path, &edited).expect("write");
    let before = stack.get_json("/api/config").await;
    assert_eq!(before["restart"]["reload_pending"], true, "{before}");
    let reload = stack
        .post("/api/config/reload", &[("origin", &stack.base)])
        .await;
    assert_eq!(reload.status, 200, "{}", reload.text);
    let reload = reload.json();
    assert_eq!(reload["outcome"], "applied");
    let pending = reload["restart"]["pending"].as_array().expect("pending");
    assert!(
        pending
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.starts_with("server"))),
        "{reload}"
    );
    let event = wait_event(&mut socket, |e| e["type"] == "config_reloaded").await;
    assert_eq!(event["backends"], serde_json::json!(["local", "cloud"]));
    let after = stack.get_json("/api/config").await;
    assert_eq!(after["running"]["model_aliases"]["gpt-4o"], "m-local");
    assert_eq!(
        after["running"]["server"]["proxy_port"], 8080,
        "restart-only keys wait"
    );
    assert_eq!(after["restart"]["file"], "differs");
    assert_eq!(after["restart"]["reload_pending"], false);

    std::fs::write(&path, "backends: [oops\n").expect("write");
    let rejected = stack.post("/api/config/reload", &[]).await;
    assert_eq!(rejected.status, 422);
    assert_eq!(rejected.json()["outcome"], "rejected");
    assert_eq!(
        stack.get_json("/api/config").await["restart"]["file"],
        "invalid"
    );
}

#[tokio::test]
async fn metrics_are_prometheus_text_with_the_promised_families() {
    let stack = start(Setup::default()).await;
    for _ in 0..3 {
        assert_eq!(stack.ask("m-local", true).await.status, 200);
    }
    assert_eq!(stack.ask("m-cloud", false).await.status, 200);
    assert_eq!(stack.ask("no-such-model", false).await.status, 404);
    stack.wait_finished(5).await;
    let reply = stack.get("/metrics").await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.headers["content-type"]
            .to_str()
            .is_ok_and(|t| t.starts_with("application/openmetrics-text"))
    );
    let samples = parse_exposition(&reply.text);
    let sum = |name: &str, filter: &dyn Fn(&str) -> bool| -> f64 {
        samples
            .iter()
            .filter(|(n, labels, _)| n == name && filter(labels))
            .map(|(_, _, v)| v)
            .sum()
    };
    let all = |_: &str| true;
    assert_eq!(sum("glider_requests_total", &all), 5.0);
    assert_eq!(
        sum("glider_requests_total", &|l| l
            .contains("backend=\"local\"")),
        3.0
    );
    assert_eq!(sum("glider_request_errors_total", &all), 1.0);
    assert_eq!(
        sum("glider_requests_total", &|l| l
            .contains("backend=\"unrouted\"")),
        1.0
    );
    assert_eq!(
        sum("glider_requests_total", &|l| l.contains("\"none\"")),
        0.0
    );
    assert_eq!(sum("glider_request_duration_seconds_count", &all), 5.0);
    assert_eq!(sum("glider_time_to_first_token_seconds_count", &all), 4.0);
    assert!(
        sum("glider_tokens_total", &|l| l
            .contains("direction=\"output\""))
            > 0.0
    );
    assert_eq!(sum("glider_local_share", &all), 0.75);
    assert_eq!(sum("glider_backend_breaker_state", &all), 0.0);
    assert_eq!(
        samples
            .iter()
            .filter(|(n, _, _)| n == "glider_backend_breaker_state")
            .count(),
        2
    );
}

/// A strict reading of the text exposition: `# HELP`/`# TYPE`/`# EOF` comments, and
/// `name{labels} value` samples with a finite number. Panics on anything else.
fn parse_exposition(text: &str) -> Vec<(String, String, f64)> {
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            assert!(
                comment.starts_with("HELP ") || comment.starts_with("TYPE ") || comment == "EOF",
                "bad comment: {line}"
            );
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line: {line}"));
        let value: f64 = if value == "+Inf" {
            f64::INFINITY
        } else {
            value
                .parse()
                .unwrap_or_else(|_| panic!("bad value: {line}"))
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => {
                assert!(labels.ends_with('}'), "bad labels: {line}");
                (name, labels.trim_end_matches('}'))
            }
            None => (series, ""),
        };
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name: {line}"
        );
        samples.push((name.to_owned(), labels.to_owned(), value));
    }
    samples
}

#[tokio::test]
async fn the_page_and_the_docs_are_served_from_the_binary() {
    let stack = start(Setup::default()).await;
    let page = stack.get("/").await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("<title>Glider"));
    for asset in ["/", "/assets/app.js", "/assets/app.css"] {
        let text = stack.get(asset).await.text;
        assert!(!text.is_empty(), "{asset} is empty");
        // Offline machine: nothing may come from elsewhere.
        assert!(
            !text.contains("https://") && !text.contains("http://"),
            "{asset} refers outside"
        );
    }
    assert_eq!(stack.get("/assets/nope.js").await.status, 404);
    let index = stack.get("/docs").await;
    for page in [
        "/docs/readme",
        "/docs/configuration",
        "/docs/pipeline",
        "/docs/dashboard",
    ] {
        assert!(
            index.text.contains(&format!("href=\"{page}\"")),
            "{page} not listed"
        );
    }
    let configuration = stack.get("/docs/configuration").await;
    assert_eq!(configuration.status, 200);
    assert!(
        configuration.text.contains("<table>") && configuration.text.contains("dashboard_token")
    );
    let dashboard = stack.get("/docs/dashboard.md").await;
    assert!(dashboard.text.contains("/api/requests"));
    assert_eq!(stack.get("/docs/nope").await.status, 404);
    let missing: Value = stack.get("/api/nope").await.json();
    assert_eq!(missing["error"]["type"], "not_found");
}
