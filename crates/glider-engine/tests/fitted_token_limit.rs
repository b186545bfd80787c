//! The token limit counts a local request as it will be sent: a Claude-Code-sized tool
//! set over a small window is refused as it came, but fits once fitting reduces the
//! tools, and then goes to the local model (a real loopback mock Ollama).

use std::sync::Arc;

use bytes::Bytes;
use glider_config::{Config, ConfigHandle};
use glider_engine::{CompletionRequest, Engine};
use glider_ngl::Dialect;
use glider_test_support::{MockConfig, MockVendor};
use http::HeaderMap;
use serde_json::json;

mod common;
use common::route;

fn engine(mock: &MockVendor, fit_enabled: bool) -> Arc<Engine> {
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{}', models: ['qwen3:8b'], context_window: 4096}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n\
         fit: {{enabled: {fit_enabled}}}\n",
        mock.base_url()
    );
    Engine::new(ConfigHandle::new(
        Config::parse(&yaml, "t").expect("valid"),
        None,
    ))
}

/// 24 tools with long descriptions (~14k estimated tokens of schemas), the core set
/// among them, and a short question.
fn claude_code_sized() -> Bytes {
    let names = ["Read", "Edit", "Write", "Bash", "Grep", "Glob"]
        .into_iter()
        .map(str::to_owned)
        .chain((0..18).map(|i| format!("Extra{i}")));
    let tools: Vec<_> = names
        .map(|name| {
            json!({
                "name": name,
                "description": format!("{name} does one thing. {}", "It is explained at length here. ".repeat(60)),
                "input_schema": {"type": "object", "properties": {
                    "path": {"type": "string", "description": "Which file. ".repeat(20)},
                }},
            })
        })
        .collect();
    Bytes::from(
        json!({
            "model": "qwen3:8b", "max_tokens": 32000, "stream": false, "tools": tools,
            "messages": [{"role": "user", "content": "What is in README.md?"}],
        })
        .to_string(),
    )
}

#[tokio::test]
async fn a_request_that_fits_only_after_fitting_goes_local() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let engine = engine(&mock, true);
    let body = claude_code_sized();
    let (_, _, tokens) = engine.prepare(Dialect::Anthropic, &body).expect("decodes");
    assert!(tokens > 4096, "over the window as it came: ~{tokens}");
    let decision = route(&engine, &body).expect("fits after fitting");
    assert_eq!(decision.candidates[0].backend.name(), "local");
    assert!(
        decision.reason.contains("local holds 4096 after fitting"),
        "{}",
        decision.reason
    );

    let completion = engine
        .complete(CompletionRequest::gateway(
            Dialect::Anthropic,
            body,
            HeaderMap::new(),
        ))
        .await
        .expect("answered locally");
    assert_eq!(completion.backend, "local");
    let sent = mock.requests();
    let chat = sent
        .iter()
        .find(|r| r.path == "/api/chat")
        .expect("sent to Ollama");
    let kept: Vec<&str> = chat.body["tools"]
        .as_array()
        .expect("tools sent")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(kept, ["Read", "Edit", "Write", "Bash", "Grep", "Glob"]);
    assert!(
        chat.raw_body.len() < 4096 * 3,
        "what was sent is what was counted: {} bytes",
        chat.raw_body.len()
    );
}

#[tokio::test]
async fn with_fitting_off_the_same_request_is_refused() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let engine = engine(&mock, false);
    let refused =
        route(&engine, &claude_code_sized()).expect_err("sent as it came, it does not fit");
    assert!(
        refused
            .message
            .contains("exceed the local context (local holds 4096)"),
        "{}",
        refused.message
    );
}
