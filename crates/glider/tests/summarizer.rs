//! The summarizer in the real binary, never on the request path: `glider serve` with
//! `context.summarizer` pointed at a mock model that never answers; once a new root
//! turn has ended an episode and the compaction is held open at that mock, requests
//! through the gateway still all complete (counted, not timed), and `/metrics` shows
//! the compaction counters.

mod common;

use std::time::Duration;

use common::serve::serve_yaml;
use glider_test_support::{Failure, MockConfig, MockVendor};
use serde_json::{Value, json};

/// Requests sent while the compaction is held open.
const DURING: usize = 24;

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
    let served = serve_yaml(home.path(), &yaml);
    let gateway = served.gateway.clone();
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

    let metrics = served.metrics().await;
    assert!(
        metrics.contains("glider_context_compactions_total{outcome=\"rejected\"} 0"),
        "{metrics}"
    );
    served.stop();
}
