//! A misbehaving backend seen through the gateway, over loopback against the mock:
//! streams that end before their terminator or stall, the first-byte and idle
//! timeouts, 4xx answers and `retry-after` passed through without tripping the
//! breaker, a 429's per-key cool-down, and nothing reachable at all (issue 22, items 4,
//! 6, 7 and 10).

mod common;

use std::time::Duration;

use common::*;
use glider_ngl::Dialect;
use glider_test_support::{Failure, MockConfig, MockVendor};
use serde_json::Value;

/// A short text request in `front`'s wire shape.
fn ask(front: Dialect, model: &str, stream: bool) -> Value {
    wire(front, &text_request(model, "hello there", stream))
}

/// What a complete stream of `front` ends with.
fn terminator(front: Dialect) -> &'static str {
    match front {
        Dialect::Anthropic => "event: message_stop",
        Dialect::OpenAiChat => "[DONE]",
        Dialect::OpenAiResponses => "event: response.completed",
        Dialect::Ollama => "\"done\":true",
    }
}

/// Each front with the backend model that speaks it (the bytes are forwarded).
const SAME_DIALECT: [(Dialect, &str); 4] = [
    (Dialect::Anthropic, "m-anthropic"),
    (Dialect::OpenAiChat, "m-vllm"),
    (Dialect::OpenAiResponses, "m-openai"),
    (Dialect::Ollama, "m-ollama"),
];

#[tokio::test]
async fn a_stream_that_ends_before_its_terminator_is_an_error_event_and_a_failure() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let mut events = gw.engine.bus().subscribe();
    mock.set_failure(Failure::EndEarly { after_deltas: 1 });
    // Forwarded in each dialect, and translated (Anthropic front, Ollama backend).
    let cases = SAME_DIALECT
        .iter()
        .copied()
        .chain([(Dialect::Anthropic, "m-ollama")]);
    for (front, model) in cases {
        let reply = post_json(&gw.base, front_path(front), &ask(front, model, true)).await;
        let text = reply.text();
        assert_eq!(reply.status, 200, "{front:?}/{model}: headers went first");
        assert!(
            text.contains("echo"),
            "{front:?}/{model}: the start was forwarded: {text}"
        );
        assert!(
            !text.contains(terminator(front)),
            "{front:?}/{model}: a cut stream must not look complete: {text}"
        );
        assert!(
            text.contains("error"),
            "{front:?}/{model}: no error event: {text}"
        );
        assert!(
            reply.decode(front, true).is_err(),
            "{front:?}/{model}: a client decoder must see the failure: {text}"
        );
        let record = next_finished(&mut events).await;
        assert_eq!(record.status, Some(502), "{front:?}/{model}: {record:?}");
        assert!(
            record
                .error
                .as_deref()
                .is_some_and(|e| e.contains("ended before")),
            "{front:?}/{model}: {record:?}"
        );
    }
}

#[tokio::test]
async fn a_stream_cut_by_the_backend_is_recorded_as_a_backend_failure() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let mut events = gw.engine.bus().subscribe();
    mock.set_failure(Failure::CloseMidStream { after_deltas: 1 });
    for (front, model) in SAME_DIALECT {
        let reply = post_json(&gw.base, front_path(front), &ask(front, model, true)).await;
        assert!(
            reply.decode(front, true).is_err(),
            "{front:?}: {}",
            reply.text()
        );
        let record = next_finished(&mut events).await;
        assert_eq!(record.status, Some(502), "{front:?}: {record:?}");
    }
}

/// One Ollama backend on `mock` with the given timeouts (seconds).
fn timed_backend(mock: &MockVendor, first_byte: u64, idle: u64) -> String {
    format!(
        "backends:\n  - {{name: local, type: ollama, base_url: '{}', models: [qwen], \
         first_byte_timeout_secs: {first_byte}, idle_timeout_secs: {idle}}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n",
        mock.base_url()
    )
}

#[tokio::test]
async fn a_first_byte_slower_than_the_idle_timeout_but_within_its_own_succeeds() {
    let mock = MockVendor::start(MockConfig {
        first_byte_delay: Duration::from_secs(2),
        ..MockConfig::default()
    })
    .await;
    let gw = gateway(&timed_backend(&mock, 10, 1)).await;
    for (front, stream) in [
        (Dialect::Ollama, true),
        (Dialect::Ollama, false),
        (Dialect::Anthropic, true),
    ] {
        let reply = post_json(&gw.base, front_path(front), &ask(front, "qwen", stream)).await;
        assert_eq!(reply.status, 200, "{front:?} {stream}: {}", reply.text());
        let response = reply.decode(front, stream).expect("a complete reply");
        assert!(response.plain_text().contains("echo: hello there"));
    }
}

#[tokio::test]
async fn a_first_byte_later_than_its_timeout_is_a_504() {
    let mock = MockVendor::start(MockConfig {
        first_byte_delay: Duration::from_secs(3),
        ..MockConfig::default()
    })
    .await;
    let gw = gateway(&timed_backend(&mock, 1, 10)).await;
    let reply = post_json(&gw.base, "/api/chat", &ask(Dialect::Ollama, "qwen", false)).await;
    assert_eq!(reply.status, 504, "{}", reply.text());
}

#[tokio::test]
async fn a_stall_mid_stream_longer_than_the_idle_timeout_is_a_504_class_failure() {
    let mock = MockVendor::start(MockConfig {
        delta_delay: Duration::from_secs(4),
        ..MockConfig::default()
    })
    .await;
    let gw = gateway(&timed_backend(&mock, 10, 1)).await;
    let mut events = gw.engine.bus().subscribe();
    // Forwarded (Ollama both sides) and translated (Anthropic front).
    for front in [Dialect::Ollama, Dialect::Anthropic] {
        let reply = post_json(&gw.base, front_path(front), &ask(front, "qwen", true)).await;
        let text = reply.text();
        assert_eq!(reply.status, 200, "{front:?}: headers went first");
        assert!(!text.contains(terminator(front)), "{front:?}: {text}");
        assert!(text.contains("idle for more than 1 s"), "{front:?}: {text}");
        let record = next_finished(&mut events).await;
        assert_eq!(record.status, Some(504), "{front:?}: not 499: {record:?}");
    }
}

/// One Anthropic backend that passes the client's own key through (none configured).
async fn passthrough_anthropic() -> (MockVendor, Gateway) {
    let mock = MockVendor::start(MockConfig::default()).await;
    let yaml = format!(
        "backends:\n  - {{name: claude, type: anthropic, base_url: '{}', models: ['claude-*']}}\n\
         routing: {{classifier: {{enabled: false}}}}\n",
        mock.base_url()
    );
    let gw = gateway(&yaml).await;
    (mock, gw)
}

async fn ask_with_key(gw: &Gateway, key: &str) -> Reply {
    let body = ask(Dialect::Anthropic, "claude-x", false).to_string();
    post(&gw.base, "/v1/messages", body, &[("x-api-key", key)]).await
}

#[tokio::test]
async fn a_401_from_the_only_backend_reaches_the_client_and_does_not_trip_the_breaker() {
    let (mock, gw) = passthrough_anthropic().await;
    mock.set_failure(Failure::Status(401));
    for _ in 0..6 {
        let reply = ask_with_key(&gw, "sk-bad").await;
        assert_eq!(reply.status, 401, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "authentication_error");
        assert_eq!(body["error"]["message"], "mock failure: status 401");
    }
    // In OpenAI's dialect too: an OpenAI client's bearer is not Anthropic's to see, so
    // Glider itself refuses it, saying what is missing.
    let asked = mock.requests().len();
    let reply = post(
        &gw.base,
        "/v1/chat/completions",
        ask(Dialect::OpenAiChat, "claude-x", false).to_string(),
        &[("authorization", "Bearer sk-bad")],
    )
    .await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    let message = reply.json()["error"]["message"].clone();
    assert!(
        message
            .as_str()
            .is_some_and(|m| m.starts_with("no credentials for claude")),
        "{message}"
    );
    assert_eq!(mock.requests().len(), asked, "nothing was forwarded");
    let runtime = gw.engine.runtime();
    let backend = runtime.backend("claude").expect("backend");
    assert_eq!(
        backend.breaker.state(),
        glider_backend::BreakerState::Closed
    );
    // A good key is served at once: nobody was locked out.
    mock.set_failure(Failure::None);
    assert_eq!(ask_with_key(&gw, "sk-good").await.status, 200);
}

#[tokio::test]
async fn a_429_passes_its_retry_after_through_and_cools_down_only_that_key() {
    let (mock, gw) = passthrough_anthropic().await;
    mock.set_failure(Failure::StatusRetryAfter {
        status: 429,
        retry_after_secs: 30,
    });
    let reply = ask_with_key(&gw, "sk-busy").await;
    assert_eq!(reply.status, 429, "{}", reply.text());
    assert_eq!(reply.headers["retry-after"], "30");
    assert_eq!(reply.json()["error"]["type"], "rate_limit_error");
    assert_eq!(reply.json()["error"]["message"], "mock failure: status 429");
    let asked = mock.requests().len();

    // The backend has recovered, but this key was told to wait: it is not asked again.
    mock.set_failure(Failure::None);
    let reply = ask_with_key(&gw, "sk-busy").await;
    assert_eq!(reply.status, 429, "{}", reply.text());
    let wait: u64 = reply.headers["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=30).contains(&wait), "{wait}");
    assert_eq!(mock.requests().len(), asked, "a cooling key is not sent on");

    // Another user's key is served, and the breaker never moved.
    assert_eq!(ask_with_key(&gw, "sk-other").await.status, 200);
    assert_eq!(mock.requests().len(), asked + 1);
    let runtime = gw.engine.runtime();
    let backend = runtime.backend("claude").expect("backend");
    assert_eq!(
        backend.breaker.state(),
        glider_backend::BreakerState::Closed
    );
}

#[tokio::test]
async fn nothing_reachable_is_a_502_that_names_each_failure_and_the_fix_in_the_client_dialect() {
    // Port 1 on loopback: nothing listens there, every connection is refused.
    let yaml = "backends:\n\
        \x20 - {name: a, type: ollama, base_url: 'http://127.0.0.1:1', models: [qwen]}\n\
        \x20 - {name: b, type: vllm, base_url: 'http://127.0.0.1:1/v1', models: [qwen]}\n\
        routing: {classifier: {enabled: false}}\n";
    let gw = gateway(yaml).await;
    let mut events = gw.engine.bus().subscribe();
    for front in [Dialect::Anthropic, Dialect::OpenAiChat] {
        let reply = post_json(&gw.base, front_path(front), &ask(front, "qwen", false)).await;
        // The dashboard files the failure under the backend that failed last.
        let record = next_finished(&mut events).await;
        assert_eq!(record.backend.as_deref(), Some("b"), "{record:?}");
        // Not 503/overloaded_error: a client reads that as "at capacity" and retries.
        assert_eq!(reply.status, 502, "{front:?}: {}", reply.text());
        // Both dialects put the message at `error.message`.
        let body = reply.json();
        let error_type = match front {
            Dialect::Anthropic => "api_error",
            _ => "server_error",
        };
        assert_eq!(body["error"]["type"], error_type, "{front:?}: {body}");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(
            message.starts_with("no backend could be reached: ")
                && message.contains("a: ")
                && message.contains("b: ")
                && message.contains("ollama serve"),
            "{message}"
        );
        let route = reply.header("x-glider-route");
        assert!(
            route.starts_with("rule=model; backend=a; model=qwen"),
            "{front:?}: {route:?}"
        );
    }
}
