//! A local model server spoken to over the Anthropic wire (`type: anthropic` with
//! `local: true`: llama-server or Ollama serving `/v1/messages`), over loopback against
//! the mock: its requests are fitted like any local backend's (tools reduced,
//! `max_tokens` capped, `cache_control` and `context_management` dropped, no client
//! credentials nor betas), its route record says local, while a cloud Anthropic backend
//! given the same Claude Code turn still gets the client's bytes unchanged. The turn is
//! Claude Code 2.1.197's captured `plain` one (24 tools), made non-streaming (and, for
//! the local backend, naming its model).

mod common;

use common::*;
use glider_test_support::captured::captured_file;
use glider_test_support::{MockConfig, MockVendor};
use serde_json::Value;

/// The mock behind a local Anthropic-wire backend serving `gemma` and a cloud one
/// serving `claude-*` (its key unset, so the client's own is forwarded). The mock takes
/// keyless requests, as a local server does; the test asserts which key each one got.
async fn local_and_cloud_anthropic() -> (MockVendor, Gateway) {
    let mock = MockVendor::start(MockConfig {
        anthropic_keyless: true,
        ..MockConfig::default()
    })
    .await;
    let url = mock.base_url();
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: llama, type: anthropic, local: true, base_url: '{url}', models: [gemma]}}\n\
         \x20 - {{name: claude, type: anthropic, base_url: '{url}', api_key: '${{GLIDER_TEST_ANTHROPIC_LOCAL_NEVER_SET}}', models: ['claude-*']}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n"
    );
    (mock, gateway(&yaml).await)
}

/// Whether `value` holds a `cache_control` key anywhere.
fn has_cache_control(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            map.contains_key("cache_control") || map.values().any(has_cache_control)
        }
        Value::Array(items) => items.iter().any(has_cache_control),
        _ => false,
    }
}

/// Claude Code's captured `claude -p "hello"` turn, not streamed (the mock's whole
/// reply is simpler to read back).
fn claude_code_turn() -> Value {
    let mut body = captured_file("claude-code", "plain", "002-messages").body;
    body["stream"] = false.into();
    body
}

const CLIENT: &[(&str, &str)] = &[
    ("x-api-key", "sk-ant-api-client"),
    ("anthropic-beta", "context-management-2025-06-27"),
];

#[tokio::test]
async fn a_local_anthropic_backend_gets_a_fitted_request_and_no_client_credentials() {
    let (mock, gw) = local_and_cloud_anthropic().await;
    let mut events = gw.engine.bus().subscribe();
    let mut body = claude_code_turn();
    body["model"] = "gemma".into();
    let tools_sent = body["tools"].as_array().map_or(0, Vec::len);
    assert!(
        tools_sent > 12,
        "the fixture is over the default tool budget"
    );

    let reply = post(&gw.base, "/v1/messages", body.to_string(), CLIENT).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let seen = &requests[0];
    // Still the Anthropic wire.
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.header("anthropic-version"), Some("2023-06-01"));
    // Fitted: the tool set reduced to the core, output capped, markers and
    // context_management dropped.
    let tools: Vec<&str> = seen.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.len() <= 12 && tools.contains(&"Bash"), "{tools:?}");
    assert_eq!(seen.body["max_tokens"], 4096);
    assert!(!has_cache_control(&seen.body), "{}", seen.body);
    assert!(seen.body.get("context_management").is_none());
    // A model server on the user's side never gets the client's cloud credentials.
    assert_eq!(seen.header("x-api-key"), None);
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(seen.header("anthropic-beta"), None);

    let record = next_finished(&mut events).await;
    assert_eq!(record.backend.as_deref(), Some("llama"));
    assert_eq!(record.local, Some(true));
    assert!(
        record.fitted.iter().any(|n| n.starts_with("llama: tools ")),
        "{:?}",
        record.fitted
    );
}

#[tokio::test]
async fn a_cloud_anthropic_backend_beside_it_still_gets_the_clients_bytes() {
    let (mock, gw) = local_and_cloud_anthropic().await;
    let mut events = gw.engine.bus().subscribe();
    let body = claude_code_turn();
    let bytes = body.to_string();

    let reply = post(&gw.base, "/v1/messages", bytes.clone(), CLIENT).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let seen = &requests[0];
    assert_eq!(
        seen.raw_body,
        bytes.as_bytes(),
        "cloud body forwarded untouched"
    );
    assert_eq!(seen.header("x-api-key"), Some("sk-ant-api-client"));
    assert_eq!(
        seen.header("anthropic-beta"),
        Some("context-management-2025-06-27")
    );

    let record = next_finished(&mut events).await;
    assert_eq!(record.backend.as_deref(), Some("claude"));
    assert_eq!(record.local, Some(false));
    assert!(record.fitted.is_empty(), "{:?}", record.fitted);
}
