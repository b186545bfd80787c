//! Capabilities discovered from local servers (the mock speaks Ollama's `/api/show` and
//! `/api/ps` and vLLM's `/v1/models` over loopback HTTP) decide what the config leaves
//! unset: the token limit's window, the tools and thinking fit keeps, and what
//! `/v1/models` shows. A configured value always wins.

use std::sync::Arc;

use bytes::Bytes;
use glider_backend::health::HealthStatus;
use glider_config::{Config, ConfigHandle};
use glider_engine::{CompletionRequest, Engine};
use glider_ngl::Dialect;
use glider_test_support::{MockConfig, MockVendor};
use http::HeaderMap;
use serde_json::json;

mod common;
use common::route;

async fn ollama_mock() -> MockVendor {
    MockVendor::start(MockConfig {
        models: vec!["tiny:1b".into()],
        thinking_models: vec!["qwen3:8b".into()],
        tool_less_models: vec!["tiny:1b".into()],
        context_window: Some(8192),
        ..MockConfig::default()
    })
    .await
}

/// An Ollama backend (`extra`: more of its keys) and a cloud backend for Claude models.
fn engine(ollama: &MockVendor, extra: &str) -> Arc<Engine> {
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{0}', models: ['qwen3:8b', 'tiny:1b']{extra}}}\n\
         \x20 - {{name: cloud, type: anthropic, base_url: '{0}', api_key: k, models: ['claude-*']}}\n\
         routing: {{cloud_fallback: true, classifier: {{enabled: false}}}}\n",
        ollama.base_url()
    );
    Engine::new(ConfigHandle::new(
        Config::parse(&yaml, "t").expect("valid"),
        None,
    ))
}

/// An engine on `yaml`, its backends probed once.
async fn probed(yaml: &str) -> Arc<Engine> {
    let engine = Engine::new(ConfigHandle::new(
        Config::parse(yaml, "t").expect("valid"),
        None,
    ));
    engine.probe_all().await;
    engine
}

/// An Anthropic Messages body for `model` of about `tokens` estimated tokens.
fn body(model: &str, tokens: usize, tools: bool) -> Bytes {
    let mut body = json!({
        "model": model, "max_tokens": 16, "stream": false,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "word ".repeat(tokens * 7 / 10)}],
    });
    if tools {
        body["tools"] = json!([{"name": "Read", "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
    }
    Bytes::from(body.to_string())
}

#[tokio::test]
async fn ollama_s_show_and_ps_give_the_window_tools_and_thinking() {
    let mock = ollama_mock().await;
    let engine = engine(&mock, "");
    // Before any probe the default window (32768) holds a ~10k-token request.
    let big = body("qwen3:8b", 10_000, false);
    assert_eq!(
        route(&engine, &big).expect("routes").candidates[0]
            .backend
            .name(),
        "local"
    );
    engine.probe_all().await;

    let models = engine.models();
    let qwen = models.iter().find(|m| m.id == "qwen3:8b").expect("listed");
    let caps = qwen.capabilities.as_ref().expect("discovered");
    assert_eq!(
        (
            caps.context_window,
            caps.trained_context,
            caps.tools,
            caps.thinking,
            caps.vision
        ),
        (
            Some(8192),
            Some(131_072),
            Some(true),
            Some(true),
            Some(false)
        ),
        "num_ctx from the Modelfile parameters, the trained context from model_info: {caps:?}"
    );
    assert_eq!(caps.sources, ["/api/show"]);

    // Now the server's own window decides: refused (no cloud backend serves qwen3:8b).
    let refused = route(&engine, &big).expect_err("over the discovered window");
    assert!(
        refused.message.contains("local holds 8192"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn a_model_ollama_says_has_no_tools_gets_none_and_thinking_stays_for_one_that_thinks() {
    let mock = ollama_mock().await;
    let engine = engine(&mock, "");
    engine.probe_all().await;
    for model in ["tiny:1b", "qwen3:8b"] {
        let completion = engine
            .complete(CompletionRequest::gateway(
                Dialect::Anthropic,
                body(model, 10, true),
                HeaderMap::new(),
            ))
            .await
            .expect("answers");
        assert_eq!(completion.backend, "local");
    }
    let chats: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/chat")
        .collect();
    assert_eq!(chats.len(), 2);
    let (tiny, qwen) = (&chats[0].body, &chats[1].body);
    assert!(
        tiny.get("tools").is_none(),
        "tiny:1b lists no tools capability: {tiny}"
    );
    assert!(tiny.get("think").is_none(), "and no thinking: {tiny}");
    assert_eq!(qwen["tools"][0]["function"]["name"], "Read", "{qwen}");
    assert_eq!(qwen["think"], true, "qwen3:8b says it thinks: {qwen}");
}

#[tokio::test]
async fn a_configured_window_wins_over_the_discovered_one() {
    let mock = ollama_mock().await;
    let engine = engine(&mock, ", context_window: 65536");
    engine.probe_all().await;
    let decision = route(&engine, &body("qwen3:8b", 10_000, false)).expect("routes");
    assert_eq!(
        decision.candidates[0].backend.name(),
        "local",
        "{}",
        decision.reason
    );
}

#[tokio::test]
async fn vllm_s_max_model_len_is_the_window() {
    let mock = MockVendor::start(MockConfig {
        models: vec!["Qwen/Qwen2.5-7B-Instruct".into()],
        context_window: Some(4096),
        ..MockConfig::default()
    })
    .await;
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: vllm, type: vllm, base_url: '{0}/v1', models: ['qwen']}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n",
        mock.base_url()
    );
    let engine = probed(&yaml).await;
    let backend = engine.runtime().backends[0].clone();
    let caps = backend
        .discovered("qwen")
        .expect("a one-model server's entry is the configured model's");
    assert_eq!(
        (caps.context_window, caps.sources.as_slice()),
        (Some(4096), &["/v1/models".to_owned()][..])
    );
    let refused = route(&engine, &body("qwen", 6_000, false))
        .expect_err("over the discovered window, with no cloud to take it");
    assert!(
        refused.message.contains("vllm holds 4096"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn local_anthropic_and_openai_wire_backends_are_probed_as_local_servers() {
    let mock = MockVendor::start(MockConfig {
        models: vec!["gemma3-270m".into()],
        context_window: Some(4096),
        anthropic_keyless: true,
        ..MockConfig::default()
    })
    .await;
    // Nothing listens on a port that was just bound and released.
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: llama-anthropic, type: anthropic, local: true, base_url: '{0}', models: [gemma3-270m]}}\n\
         \x20 - {{name: llama-openai, type: openai, local: true, base_url: '{0}/v1', models: [gemma3-270m]}}\n\
         \x20 - {{name: gone, type: anthropic, local: true, base_url: 'http://{gone}', models: [gemma3-270m]}}\n\
         \x20 - {{name: cloud, type: anthropic, base_url: '{0}', api_key: k, models: ['claude-*']}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n",
        mock.base_url()
    );
    let engine = probed(&yaml).await;
    let runtime = engine.runtime();
    let backend = |name: &str| {
        runtime
            .backends
            .iter()
            .find(|b| b.name() == name)
            .expect("configured")
            .clone()
    };
    for name in ["llama-anthropic", "llama-openai"] {
        let health = backend(name).health();
        assert_eq!(health.status, HealthStatus::Up, "{name}: {health:?}");
        assert_eq!(health.served_models, ["gemma3-270m"], "{name}");
        let caps = backend(name).discovered("gemma3-270m").expect("discovered");
        assert_eq!(
            caps.context_window,
            Some(4096),
            "{name}: the window the server says"
        );
    }
    let gone = backend("gone").health();
    assert_eq!(gone.status, HealthStatus::Down, "{gone:?}");
    assert!(gone.detail.is_some_and(|d| d.contains("unreachable")));
    // A cloud backend is probed too, but as a vendor: its key on its model list, and
    // no capabilities read from it.
    let cloud = backend("cloud");
    assert_eq!(
        cloud.health().status,
        HealthStatus::Up,
        "{:?}",
        cloud.health()
    );
    assert!(cloud.discovered("claude-sonnet-4-6").is_none());
    let listings: Vec<String> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/models"))
        .map(|r| r.path)
        .collect();
    assert_eq!(
        listings,
        ["/v1/models", "/v1/models", "/v1/models"],
        "one listing for each local backend and one for the cloud's"
    );
    let keyed: Vec<String> = mock
        .requests()
        .into_iter()
        .filter(|r| r.headers.iter().any(|(k, v)| k == "x-api-key" && v == "k"))
        .map(|r| r.path)
        .collect();
    assert_eq!(
        keyed,
        ["/v1/models"],
        "the cloud's key went on its own probe only, never on a local server's"
    );
}
