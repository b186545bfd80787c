//! The summarizer in the real binary, never on the request path: `glider serve` with
//! `context.summarizer` pointed at a mock model that never answers; once a new root
//! turn has ended an episode and the compaction is held open at that mock, requests
//! through the gateway still all complete (counted, not timed), and `/metrics` shows
//! the compaction counters.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use glider_test_support::{Failure, MockConfig, MockVendor};
use serde_json::{Value, json};

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");
/// Requests sent while the compaction is held open.
const DURING: usize = 24;

/// `glider serve` on free ports: (child, gateway URL, dashboard URL).
fn serve(home: &Path, yaml: &str) -> (Child, String, String) {
    let config = home.join("glider.yaml");
    std::fs::write(&config, yaml).expect("config");
    let mut child = Command::new(GLIDER)
        .env("GLIDER_HOME", home)
        .env_remove("GLIDER_CONFIG")
        .env_remove("GLIDER_LOG")
        .args(["serve", "--port", "0", "--dashboard-port", "0", "-c"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("glider serve starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (mut gateway, mut dashboard) = (None, None);
    while gateway.is_none() || dashboard.is_none() {
        let line = lines
            .next()
            .expect("glider printed its doors")
            .expect("utf8");
        if let Some(url) = line.strip_prefix("glider gateway listening on ") {
            gateway = Some(url.to_owned());
        }
        if let Some(url) = line.strip_prefix("glider dashboard on ") {
            dashboard = Some(url.split_whitespace().next().unwrap_or_default().to_owned());
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    (
        child,
        gateway.unwrap_or_default(),
        dashboard.unwrap_or_default(),
    )
}

fn stop(mut child: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    assert!(child.wait().expect("reaped").success());
}

/// POST an Anthropic request for `session`; its status and JSON body.
async fn post(
    client: &reqwest::Client,
    gateway: &str,
    session: &str,
    body: &Value,
) -> (u16, Value) {
    let reply = client
        .post(format!("{gateway}/v1/messages"))
        .header("x-claude-code-session-id", session)
        .json(body)
        .send()
        .await
        .expect("answered");
    let status = reply.status().as_u16();
    let body = reply.json().await.unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test]
async fn requests_complete_while_a_compaction_is_held_open() {
    let model = MockVendor::start(MockConfig::default()).await;
    let summarizer = MockVendor::start(MockConfig::default()).await;
    summarizer.set_failure(Failure::Hang);
    let home = tempfile::tempdir().expect("tempdir");
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{}', models: [qwen]}}\n\
         \x20 - {{name: notes, type: vllm, base_url: '{}/v1', models: [scribe]}}\n\
         routing: {{cloud_fallback: false}}\n\
         context: {{summarizer: {{backend: notes, idle_secs: 3600, timeout_secs: 600}}}}\n",
        model.base_url(),
        summarizer.base_url()
    );
    let (child, gateway, dashboard) = serve(home.path(), &yaml);
    let client = reqwest::Client::new();
    let tools = json!([{"name": "Edit", "input_schema": {"type": "object"}}]);
    let args = json!({"file_path": "/w/main.rs", "old_string": "a", "new_string": "b"});
    let prompt = format!("rename it [[call:Edit {args}]]");
    let first = json!({"model": "qwen", "max_tokens": 50, "tools": tools,
        "messages": [{"role": "user", "content": prompt}]});
    let (status, reply) = post(&client, &gateway, "s1", &first).await;
    assert_eq!(status, 200);
    // The result answers the call the model made (the episode then waits on nothing).
    let call = reply["content"][0]["id"]
        .as_str()
        .expect("a tool call")
        .to_owned();
    let result = json!({"model": "qwen", "max_tokens": 50, "tools": tools,
    "messages": [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "Edit", "input": args}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": "updated"}]}
    ]});
    assert_eq!(post(&client, &gateway, "s1", &result).await.0, 200);
    // The user's next message ends the episode: its compaction goes to the mock that
    // never answers.
    let next = json!({"model": "qwen", "max_tokens": 20,
        "messages": [{"role": "user", "content": "now the docs"}]});
    assert_eq!(post(&client, &gateway, "s1", &next).await.0, 200);
    assert!(
        summarizer
            .wait_open_streams(1, Duration::from_secs(30))
            .await,
        "the compaction reached the summarizer's backend"
    );
    // Glider also probes the backend (`GET /v1/models`); the compactions are the posts.
    let compactions = || {
        summarizer
            .requests()
            .into_iter()
            .filter(|r| r.path == "/v1/chat/completions")
            .collect::<Vec<_>>()
    };
    let asked = compactions();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].body.to_string().contains("/w/main.rs (edited)"));

    let mut completed = 0;
    for i in 0..DURING {
        let session = format!("s{}", i % 3);
        let body = json!({"model": "qwen", "max_tokens": 20,
            "messages": [{"role": "user", "content": format!("question {i}")}]});
        if post(&client, &gateway, &session, &body).await.0 == 200 {
            completed += 1;
        }
    }
    assert_eq!(completed, DURING, "every request completed");
    assert_eq!(
        summarizer.open_streams(),
        1,
        "the compaction was held open the whole time"
    );
    assert_eq!(compactions().len(), 1, "one compaction at a time");

    let metrics = client
        .get(format!("{dashboard}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("glider_context_compactions_total{outcome=\"rejected\"} 0"),
        "{metrics}"
    );
    stop(child);
}
