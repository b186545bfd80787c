//! The context log in the real binary: `glider serve` records a Claude Code-shaped tool
//! loop sent through its gateway; after it stops (SIGTERM, drained), `glider context
//! sessions | show | export --json | forget` read the file it left; with
//! `context.enabled: false` no context directory is made.

mod common;

use std::path::Path;
use std::process::Command;

use common::serve::{Served, serve_yaml};
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");

fn glider(home: &Path) -> Command {
    let mut command = Command::new(GLIDER);
    command
        .env("GLIDER_HOME", home)
        .env_remove("GLIDER_CONFIG")
        .env_remove("GLIDER_LOG");
    command
}

/// `glider serve` on free ports with one local Ollama-type backend, `mock`, and
/// `extra` config.
fn serve(home: &Path, mock: &MockVendor, extra: &str) -> Served {
    serve_yaml(
        home,
        &format!(
            "backends:\n  - {{name: local, type: ollama, base_url: '{}', models: [qwen]}}\n{extra}",
            mock.base_url()
        ),
    )
}

fn context(home: &Path, args: &[&str]) -> (bool, String, String) {
    let out = glider(home)
        .arg("context")
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn post(client: &reqwest::Client, gateway: &str, body: Value) -> String {
    let reply = client
        .post(format!("{gateway}/v1/messages"))
        .header("x-claude-code-session-id", "cli-session")
        .json(&body)
        .send()
        .await
        .expect("answered");
    assert_eq!(reply.status(), 200);
    reply.text().await.expect("body")
}

#[tokio::test]
async fn serve_records_a_session_and_the_cli_shows_exports_and_forgets_it() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let served = serve(home.path(), &mock, "");
    let gateway = served.gateway.clone();
    let client = reqwest::Client::new();
    let tools = json!([{"name": "Edit", "input_schema": {"type": "object"}}]);
    let args = json!({"file_path": "/w/main.rs", "old_string": "a", "new_string": "b"});
    let prompt = format!("rename it [[call:Edit {args}]]");
    post(
        &client,
        &gateway,
        json!({"model": "qwen", "max_tokens": 50, "tools": tools,
        "messages": [{"role": "user", "content": prompt}]}),
    )
    .await;
    post(&client, &gateway, json!({"model": "qwen", "max_tokens": 50, "tools": tools,
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Edit", "input": args}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "updated"}]}
        ]})).await;
    served.stop();

    let (ok, sessions, err) = context(home.path(), &["sessions"]);
    assert!(ok, "{err}");
    assert!(
        sessions.contains("claude-code:cli-session\t2\t4\t"),
        "{sessions}"
    );
    let (ok, show, err) = context(home.path(), &["show", "claude-code:cli-session"]);
    assert!(ok, "{err}");
    assert!(show.contains("rename it"), "{show}");
    assert!(show.contains("  /w/main.rs  edited"), "{show}");
    assert!(show.contains("local/qwen  2 requests"), "{show}");
    // The continuity record, as a local model would be given it.
    assert!(
        show.contains(
            "continuity record:\n<continuity-record session=\"claude-code:cli-session\">"
        ),
        "{show}"
    );
    assert!(show.contains("- /w/main.rs: edited"), "{show}");
    assert!(
        show.contains(
            "budget (from the log):\n  2 requests, 2 in the newest episode, 100% answered locally, 0 loops stopped"
        ),
        "{show}"
    );
    let (ok, export, err) = context(
        home.path(),
        &["export", "claude-code:cli-session", "--json"],
    );
    assert!(ok, "{err}");
    let export: Value = serde_json::from_str(&export).expect("JSON");
    assert_eq!(export["events"].as_array().map(Vec::len), Some(4));
    assert_eq!(export["graph"]["files"][0]["path"], "/w/main.rs");
    assert_eq!(export["record"]["files"][0]["state"], "edited");
    let (ok, lines, _) = context(home.path(), &["export", "claude-code:cli-session"]);
    assert!(ok);
    assert_eq!(lines.lines().count(), 4, "JSON Lines: one event each");

    let (ok, forgot, err) = context(home.path(), &["forget", "claude-code:cli-session"]);
    assert!(ok, "{err}");
    assert_eq!(
        forgot.trim(),
        "forgot claude-code:cli-session: 4 events deleted"
    );
    let (ok, _, err) = context(home.path(), &["show", "claude-code:cli-session"]);
    assert!(!ok);
    assert!(err.contains("holds no session"), "{err}");
}

#[tokio::test]
async fn a_loop_guard_stop_is_a_budget_stop_event_and_counted_on_metrics() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let served = serve(home.path(), &mock, "context: {loop_guard: {repeats: 2}}\n");
    let gateway = served.gateway.clone();
    let client = reqwest::Client::new();
    let tools = json!([{"name": "Edit", "input_schema": {"type": "object"}}]);
    let args = json!({"file_path": "/w/main.rs", "old_string": "a", "new_string": "b"});
    let prompt = format!("rename it [[call:Edit {args}]]");
    let after = |ids: &[&str]| -> Value {
        let mut messages = vec![json!({"role": "user", "content": prompt})];
        for id in ids {
            messages.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": id, "name": "Edit", "input": args}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": "updated"}]}));
        }
        json!({"model": "qwen", "max_tokens": 50, "tools": tools, "messages": messages})
    };
    post(&client, &gateway, after(&[])).await;
    post(&client, &gateway, after(&["toolu_1"])).await;
    let stopped = post(&client, &gateway, after(&["toolu_1", "toolu_2"])).await;
    assert!(
        stopped.contains("context.loop_guard.repeats"),
        "Glider's own final reply: {stopped}"
    );
    let chats = mock
        .requests()
        .iter()
        .filter(|r| r.path == "/api/chat")
        .count();
    assert_eq!(
        chats, 2,
        "the stopped turn was not sent (health probes aside)"
    );
    // The session's budget on the dashboard: the log's count and the engine's own.
    let view = served
        .poll_json("/api/context/sessions/claude-code:cli-session", |view| {
            view["budget"]["stops"] == 1
        })
        .await;
    let budget = &view["budget"];
    assert_eq!(
        (&budget["requests"], &budget["episode_requests"]),
        (&json!(3), &json!(3)),
        "{budget}"
    );
    let live = &budget["live"];
    assert_eq!(
        (
            &live["total"]["turns"],
            &live["episode_spend"]["turns"],
            &live["stops"]
        ),
        (&json!(3), &json!(3), &json!(1)),
        "the engine's in-memory spend: {budget}"
    );
    assert_eq!(
        live["total"]["backends"]["local"]["requests"], 2,
        "{budget}"
    );
    let metrics = served.metrics().await;
    assert!(
        metrics.contains("glider_budget_stops_total{limit=\"loop_guard\"} 1"),
        "{metrics}"
    );
    served.stop();

    let (ok, export, err) = context(
        home.path(),
        &["export", "claude-code:cli-session", "--json"],
    );
    assert!(ok, "{err}");
    let export: Value = serde_json::from_str(&export).expect("JSON");
    let stops: Vec<&Value> = export["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter(|e| e["event"]["body"]["kind"] == "budget_stop")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(stops.len(), 1, "{export}");
    assert_eq!(export["budget"]["stops"], 1, "{export}");
    let (ok, show, err) = context(home.path(), &["show", "claude-code:cli-session"]);
    assert!(ok, "{err}");
    assert!(
        show.contains(
            "requests, 3 local]\n    loop stopped by Glider: loop_guard at turn 3, Edit called alike 2 times"
        ),
        "the stop on the episode's timeline: {show}"
    );
    assert_eq!(
        export["budget"]["live"],
        Value::Null,
        "no live state in the CLI"
    );
    let stop = &stops[0]["event"]["body"];
    assert_eq!(
        (
            &stop["limit"],
            &stop["tool"],
            &stop["repeats"],
            &stop["turns"]
        ),
        (&json!("loop_guard"), &json!("Edit"), &json!(2), &json!(3))
    );
}

#[tokio::test]
async fn with_context_disabled_serve_makes_no_context_directory() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let served = serve(home.path(), &mock, "context: {enabled: false}\n");
    let gateway = served.gateway.clone();
    post(
        &reqwest::Client::new(),
        &gateway,
        json!({"model": "qwen", "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    served.stop();
    assert!(!home.path().join("context").exists());
    let (ok, out, _) = context(home.path(), &["sessions"]);
    assert!(ok);
    assert!(out.starts_with("no sessions in "), "{out}");
}

#[tokio::test]
async fn after_a_restart_the_first_local_request_of_a_session_gets_its_record() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let served = serve(home.path(), &mock, "");
    let client = reqwest::Client::new();
    let tools = json!([{"name": "Edit", "input_schema": {"type": "object"}}]);
    let args = json!({"file_path": "/w/main.rs", "old_string": "a", "new_string": "b"});
    let prompt = format!("rename it [[call:Edit {args}]]");
    let history = json!([
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Edit", "input": args}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "updated"}]}
    ]);
    post(
        &client,
        &served.gateway,
        json!({"model": "qwen", "max_tokens": 50, "tools": tools,
        "messages": [{"role": "user", "content": prompt}]}),
    )
    .await;
    post(
        &client,
        &served.gateway,
        json!({"model": "qwen", "max_tokens": 50, "tools": tools,
        "messages": history}),
    )
    .await;
    served.stop();

    // A new server on the same GLIDER_HOME: it holds the session's record once its
    // start-up load is done, before any request of the session.
    let served = serve(home.path(), &mock, "");
    let view = served
        .poll_json("/api/context/sessions/claude-code:cli-session", |view| {
            view["record"]["live"].is_string()
        })
        .await;
    assert!(
        view["record"]["live"]
            .as_str()
            .is_some_and(|live| live.contains("- /w/main.rs: edited")),
        "{view}"
    );
    let chats_before = mock.requests().len();
    let mut messages = history.as_array().cloned().unwrap_or_default();
    messages.push(json!({"role": "assistant", "content": "Renamed."}));
    messages.push(json!({"role": "user", "content": "what did we change?"}));
    post(
        &client,
        &served.gateway,
        json!({"model": "qwen", "max_tokens": 50, "tools": tools,
        "messages": messages}),
    )
    .await;
    // The request began a new episode, so the summarizer may compact the one before
    // it at the same moment, on the same backend: only the client's request counts.
    let asked: Vec<Value> = mock.requests()[chats_before..]
        .iter()
        .filter(|r| r.path == "/api/chat")
        .filter(|r| {
            r.body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m["content"] == "what did we change?")
        })
        .map(|r| r.body.clone())
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let sent = asked[0]["messages"].as_array().cloned().unwrap_or_default();
    let system: Vec<&str> = sent
        .iter()
        .filter(|m| m["role"] == "system")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        system.iter().any(|text| {
            text.contains("<continuity-record session=\"claude-code:cli-session\">")
                && text.contains("- /w/main.rs: edited")
        }),
        "the first request after the restart carries the record: {sent:?}"
    );
    let conversation: Vec<&Value> = sent.iter().filter(|m| m["role"] != "system").collect();
    assert_eq!(
        conversation.len(),
        1,
        "the current episode alone, none of the turns before it: {sent:?}"
    );
    assert_eq!(conversation[0]["content"], "what did we change?");
    served.stop();
}

/// `glider check` and `glider context sessions` into a pipe whose reader is already
/// gone (`… | head -1` once `head` has its line): each ends quietly, never with Rust's
/// panic on EPIPE (exit 101, "failed printing to stdout").
#[test]
fn printing_into_a_closed_pipe_ends_quietly() {
    let home = tempfile::tempdir().expect("tempdir");
    let config = home.path().join("glider.yaml");
    let backends: String = (0..200)
        .map(|i| {
            format!(
                "  - {{name: b{i}, type: ollama, base_url: 'http://127.0.0.1:9', models: [m{i}]}}\n"
            )
        })
        .collect();
    std::fs::write(&config, format!("backends:\n{backends}")).expect("config");
    let config = config.display().to_string();
    for args in [vec!["check", config.as_str()], vec!["context", "sessions"]] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = glider(home.path())
            .args(&args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runs")
            .wait_with_output()
            .expect("ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
    }
}
