//! The router over realistic requests: bodies shaped the way Claude Code and Codex
//! really send them (large tool lists, system blocks and a system entry inside
//! `messages`, thinking, title and compaction calls), each with the decision and the
//! reason it must produce; then the explicit flags, stickiness and Starlark rules over
//! real HTTP.

mod common;

use std::time::Duration;

use common::*;
use glider_ngl::Dialect;
use glider_test_support::fixtures::*;
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

/// A config like the default profile, all on one mock.
async fn realistic(extra: &str) -> (MockVendor, Gateway) {
    let mock = MockVendor::start(MockConfig::default()).await;
    let url = mock.base_url();
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{url}', models: ['qwen2.5-coder:7b'], default_model: 'qwen2.5-coder:7b', context_window: 32768}}\n\
         \x20 - {{name: claude, type: anthropic, base_url: '{url}', api_key: k, models: ['claude-*'], default_model: claude-sonnet-4-5}}\n\
         \x20 - {{name: openai, type: openai, base_url: '{url}/v1', api_key: k, models: ['gpt-*'], default_model: gpt-5-codex}}\n\
         {extra}"
    );
    let gw = gateway(&yaml).await;
    (mock, gw)
}

fn explain(
    gw: &Gateway,
    front: Dialect,
    body: &Value,
    headers: &[(&str, &str)],
) -> glider_engine::RouteDecision {
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        map.insert(
            http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            value.parse().expect("value"),
        );
    }
    gw.engine
        .explain(front, body.to_string().as_bytes(), &map)
        .unwrap_or_else(|e| panic!("routes: {e}"))
}

#[tokio::test]
async fn realistic_requests_get_the_default_policy() {
    let (_mock, gw) = realistic("").await;
    let long_history = {
        let mut body = claude_code_main("and now the lexer");
        let turn = json!({"role": "assistant", "content": "y".repeat(40_000)});
        let messages = body["messages"].as_array_mut().expect("messages");
        for _ in 0..4 {
            messages.insert(0, json!({"role": "user", "content": "next step"}));
            messages.insert(1, turn.clone());
        }
        body
    };
    // (case, front, body, backend first tried, rule, a piece of the reason)
    let cases: Vec<(&str, Dialect, Value, &str, &str, &str)> = vec![
        (
            "claude code main turn",
            Dialect::Anthropic,
            claude_code_main("refactor the parser to stream"),
            "claude",
            "classifier",
            "thinking",
        ),
        (
            "claude code title",
            Dialect::Anthropic,
            claude_code_title(),
            "local",
            "classifier",
            "title_request",
        ),
        (
            "claude code compaction",
            Dialect::Anthropic,
            claude_code_compaction(),
            "local",
            "classifier",
            "summary_request",
        ),
        (
            "haiku-class utility call",
            Dialect::Anthropic,
            claude_code_haiku(),
            "local",
            "classifier",
            "small_model",
        ),
        (
            "codex main turn",
            Dialect::OpenAiResponses,
            codex_main("add a --verbose flag"),
            "openai",
            "classifier",
            "thinking",
        ),
        (
            "long history over the local window",
            Dialect::Anthropic,
            long_history,
            "claude",
            "classifier",
            "conversation_10k_tokens",
        ),
        (
            "explicit /local on a main turn",
            Dialect::Anthropic,
            claude_code_main("/local what does this regex do?"),
            "local",
            "explicit",
            "/local",
        ),
    ];
    for (case, front, body, backend, rule, reason) in cases {
        let decision = explain(&gw, front, &body, &[]);
        let first = decision
            .candidates
            .first()
            .map(|c| c.backend.name().to_owned())
            .unwrap_or_default();
        assert_eq!(first, backend, "{case}: {decision:#?}");
        assert_eq!(decision.rule, rule, "{case}: {decision:#?}");
        assert!(
            decision.reason.contains(reason),
            "{case}: reason {:?} lacks {reason:?}",
            decision.reason
        );
        // Every rule gave its view when explaining.
        let rules: Vec<&str> = decision.opinions.iter().map(|o| o.rule.as_str()).collect();
        assert!(
            rules.contains(&"explicit") && rules.contains(&"classifier"),
            "{case}: {rules:?}"
        );
    }
}

#[tokio::test]
async fn a_local_choice_over_the_context_window_goes_to_the_cloud() {
    let (_mock, gw) = realistic("").await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
        "messages": [{"role": "user", "content": format!("/local {}", "z ".repeat(80_000))}]});
    let decision = explain(&gw, Dialect::Anthropic, &body, &[]);
    assert_eq!(decision.rule, "token_limit", "{decision:#?}");
    assert_eq!(decision.candidates[0].backend.name(), "claude");
    assert!(
        decision.reason.contains("exceed the local context"),
        "{}",
        decision.reason
    );

    let (_mock, gw) = realistic("routing: {cloud_fallback: false}\n").await;
    let err = gw
        .engine
        .explain(
            Dialect::Anthropic,
            body.to_string().as_bytes(),
            &http::HeaderMap::new(),
        )
        .expect_err("pure local refuses");
    assert!(
        err.message.contains("cloud fallback is off"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn the_flag_is_stripped_before_the_request_is_forwarded() {
    let (mock, gw) = realistic("").await;
    // Same dialect as the cloud backend: the flag goes, every other byte stays.
    let body = claude_code_main("/cloud explain the build");
    let reply = post_json(&gw.base, "/v1/messages", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let route = reply.headers["x-glider-route"].to_str().expect("ascii");
    assert!(
        route.starts_with("rule=explicit; backend=claude"),
        "{route}"
    );
    let seen = mock.requests().pop().expect("forwarded");
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(
        seen.body["messages"][0]["content"][1]["text"],
        "explain the build"
    );
    assert_eq!(
        seen.body["context_management"], body["context_management"],
        "unknown fields survive"
    );

    // Translated to the local backend: the flag is gone there too.
    let reply = post_json(
        &gw.base,
        "/v1/messages",
        &claude_code_main("/local explain the build"),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = mock.requests().pop().expect("forwarded");
    assert_eq!(seen.path, "/api/chat");
    let text = seen.body["messages"].to_string();
    assert!(
        text.contains("explain the build") && !text.contains("/local"),
        "{text}"
    );
}

#[tokio::test]
async fn the_header_decides_and_an_unknown_backend_is_a_clear_error() {
    let (_mock, gw) = realistic("").await;
    let decision = explain(
        &gw,
        Dialect::Anthropic,
        &claude_code_main("hi"),
        &[("x-glider-route", "local")],
    );
    assert_eq!(
        (
            decision.rule.as_str(),
            decision.candidates[0].backend.name()
        ),
        ("explicit", "local")
    );
    let reply = post(
        &gw.base,
        "/v1/messages",
        claude_code_main("hi").to_string(),
        &[("x-glider-route", "nowhere")],
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .expect("message")
            .contains("nowhere")
    );
}

#[tokio::test]
async fn an_explicit_choice_sticks_to_the_session() {
    let (_mock, gw) = realistic("").await;
    let session = [("x-claude-code-session-id", "s-42")];
    let first = explain(&gw, Dialect::Anthropic, &claude_code_title(), &session);
    assert_eq!(first.rule, "classifier", "a title alone goes local");
    let flagged = explain(
        &gw,
        Dialect::Anthropic,
        &claude_code_main("/cloud plan the migration"),
        &session,
    );
    assert_eq!(flagged.rule, "explicit");
    // The session's next title call stays with the cloud the user chose.
    let follow = explain(&gw, Dialect::Anthropic, &claude_code_title(), &session);
    assert_eq!(
        (follow.rule.as_str(), follow.candidates[0].backend.name()),
        ("sticky", "claude"),
        "{follow:#?}"
    );
    // Another session is not affected.
    let other = explain(
        &gw,
        Dialect::Anthropic,
        &claude_code_title(),
        &[("x-claude-code-session-id", "s-43")],
    );
    assert_eq!(other.rule, "classifier");
}

#[tokio::test]
async fn starlark_rules_decide_fall_through_on_errors_and_reload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = dir.path().join("rules.star");
    std::fs::write(&rules, "def route(req):\n    if 'GPU' in req['last_user_text']:\n        return 'claude'\n    return None\n").expect("write");
    let config_path = dir.path().join("glider.yaml");
    let mock = MockVendor::start(MockConfig::default()).await;
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{0}', models: [qwen], default_model: qwen}}\n\
         \x20 - {{name: claude, type: anthropic, base_url: '{0}', api_key: k, models: ['claude-*'], default_model: claude-x}}\n\
         routing: {{classifier: {{enabled: false}}, starlark: {{file: rules.star, max_steps: 5000}}}}\n",
        mock.base_url()
    );
    std::fs::write(&config_path, &yaml).expect("write");
    let config = glider_config::Config::load(&config_path).expect("valid");
    let handle = glider_config::ConfigHandle::new(config, Some(config_path.clone()));
    let engine = glider_engine::Engine::new(handle);
    let _watcher = engine.watch_rules().expect("rules are watched");
    let ask = |text: &str| {
        json!({"model": "qwen", "max_tokens": 10, "messages": [{"role": "user", "content": text}]})
            .to_string()
    };
    let decide = |text: &str| {
        engine
            .explain(
                Dialect::Anthropic,
                ask(text).as_bytes(),
                &http::HeaderMap::new(),
            )
            .expect("routes")
    };

    let decision = decide("train on the GPU");
    assert_eq!(
        (
            decision.rule.as_str(),
            decision.candidates[0].backend.name()
        ),
        ("starlark", "claude")
    );
    assert_eq!(decide("hello").rule, "model");

    // A script that runs away is stopped and ignored; the request still routes.
    std::fs::write(
        &rules,
        "def route(req):\n    for i in range(10000000):\n        pass\n    return 'claude'\n",
    )
    .expect("write");
    let mut stopped = None;
    for _ in 0..500 {
        let decision = decide("GPU");
        if decision
            .opinions
            .iter()
            .any(|o| o.rule == "starlark" && o.detail.contains("error"))
        {
            stopped = Some(decision);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let decision = stopped.expect("the edited rules were reloaded within 10 s");
    assert_eq!(decision.rule, "model", "{decision:#?}");
    assert!(
        decision.opinions.iter().any(|o| o.detail.contains("ticks")),
        "{decision:#?}"
    );

    // A script that does not compile keeps nothing from the old one and says why.
    std::fs::write(&rules, "def route(req):\n    return (\n").expect("write");
    let mut broken = false;
    for _ in 0..500 {
        if engine.runtime().starlark_error.is_some() {
            broken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(broken, "the compile error is reported");
    assert_eq!(
        decide("GPU").rule,
        "model",
        "a broken file never fails a request"
    );
}
