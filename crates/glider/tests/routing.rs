//! The router over the requests the real CLIs sent: every request Claude Code 2.1.197
//! and Codex 0.171.0 made in the captured scenarios (`tests/fixtures/cli`, see
//! docs/captured-traffic.md) with the decision, score and reason it must produce; then
//! the explicit flags, stickiness and Starlark rules over real HTTP.

mod common;

use std::time::Duration;

use common::*;
use glider_ngl::Dialect;
use glider_test_support::captured::{CapturedRequest, captured, captured_file, clis, scenarios};
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

async fn explain(
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
        .await
        .unwrap_or_else(|e| panic!("routes: {e}"))
}

/// The dialect a captured CLI speaks.
fn front_of(cli: &str) -> Dialect {
    if cli.starts_with("codex") {
        Dialect::OpenAiResponses
    } else {
        Dialect::Anthropic
    }
}

/// A captured request routed by `explain`, headers and all.
async fn explain_captured(
    gw: &Gateway,
    cli: &str,
    r: &CapturedRequest,
) -> glider_engine::RouteDecision {
    let session = ["x-claude-code-session-id", "session-id"]
        .into_iter()
        .find_map(|name| r.header(name).map(|v| (name, v)));
    explain(gw, front_of(cli), &r.body, session.as_slice()).await
}

fn first_backend(decision: &glider_engine::RouteDecision) -> String {
    decision
        .candidates
        .first()
        .map(|c| c.backend.name().to_owned())
        .unwrap_or_default()
}

/// What a captured request must get: (cli, scenario, file, backend first tried, rule,
/// classifier score, a piece of the reason). The scores are what the real bodies
/// give; docs/routing.md's section 3 lists them.
type Expected = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    f64,
    &'static str,
);

/// Every captured request but Claude Code's `HEAD /` probes, with where it goes.
const EXPECTED: &[Expected] = &[
    (
        "claude-code",
        "auto-compact",
        "002-messages",
        "claude",
        "classifier",
        -4.01,
        "thinking",
    ),
    (
        "claude-code",
        "auto-compact",
        "003-messages",
        "claude",
        "classifier",
        -3.51,
        "tool_result",
    ),
    // Compactions: summary_request fires (+3), but the turn's thinking and tools
    // (-4) keep the score near -1.2: no opinion, the model decides, the cloud; then
    // the default policy (`context.compaction: auto`) puts the local model, which holds
    // it, first.
    (
        "claude-code",
        "auto-compact",
        "005-compact",
        "local",
        "model",
        -1.18,
        "answered locally (context.compaction: auto); claude-opus-4-8 is served by claude",
    ),
    (
        "claude-code",
        "auto-compact",
        "006-messages",
        "claude",
        "classifier",
        -3.03,
        "short_followup",
    ),
    (
        "claude-code",
        "cloud-flag",
        "002-messages",
        "claude",
        "explicit",
        -4.01,
        "/cloud",
    ),
    (
        "claude-code",
        "compact",
        "002-compact",
        "local",
        "model",
        -1.19,
        "answered locally (context.compaction: auto)",
    ),
    (
        "claude-code",
        "image",
        "002-messages",
        "claude",
        "classifier",
        -4.01,
        "thinking",
    ),
    (
        "claude-code",
        "image",
        "003-messages",
        "claude",
        "classifier",
        -5.51,
        "images -2.0",
    ),
    // The title call (interactive only): no tools, thinking disabled, a title schema.
    (
        "claude-code",
        "interactive",
        "002-title",
        "local",
        "classifier",
        5.00,
        "title_request +4.0",
    ),
    (
        "claude-code",
        "interactive",
        "003-messages",
        "claude",
        "classifier",
        -4.01,
        "thinking",
    ),
    (
        "claude-code",
        "interactive",
        "004-messages",
        "claude",
        "classifier",
        -3.51,
        "tool_result",
    ),
    (
        "claude-code",
        "local-flag",
        "002-messages",
        "local",
        "explicit",
        -4.01,
        "/local",
    ),
    (
        "claude-code",
        "plain",
        "002-messages",
        "claude",
        "classifier",
        -4.01,
        "thinking",
    ),
    (
        "claude-code",
        "plan-mode",
        "002-messages",
        "claude",
        "classifier",
        -4.01,
        "thinking",
    ),
    (
        "claude-code",
        "plan-mode",
        "003-messages",
        "claude",
        "classifier",
        -3.51,
        "tool_result",
    ),
    (
        "claude-code",
        "plan-mode",
        "004-messages",
        "claude",
        "classifier",
        -3.52,
        "tool_result",
    ),
    (
        "claude-code",
        "resume",
        "002-messages",
        "claude",
        "classifier",
        -3.02,
        "short_followup",
    ),
    (
        "claude-code",
        "subagent",
        "002-messages",
        "claude",
        "classifier",
        -4.01,
        "thinking",
    ),
    // A subagent's turns carry no thinking: -2.0 (just cloud), then -1.5 (no opinion).
    (
        "claude-code",
        "subagent",
        "003-messages",
        "claude",
        "classifier",
        -2.01,
        "edit_tools",
    ),
    (
        "claude-code",
        "subagent",
        "004-messages",
        "claude",
        "model",
        -1.51,
        "served by claude",
    ),
    (
        "claude-code",
        "subagent",
        "005-messages",
        "claude",
        "classifier",
        -3.52,
        "tool_result",
    ),
    (
        "claude-code",
        "tool-loop",
        "002-messages",
        "claude",
        "classifier",
        -4.01,
        "thinking",
    ),
    (
        "claude-code",
        "tool-loop",
        "003-messages",
        "claude",
        "classifier",
        -3.51,
        "tool_result",
    ),
    (
        "claude-code",
        "tool-loop",
        "004-messages",
        "claude",
        "classifier",
        -3.52,
        "tool_result",
    ),
    (
        "claude-code",
        "tool-loop",
        "005-messages",
        "claude",
        "classifier",
        -3.52,
        "tool_result",
    ),
    (
        "codex",
        "auto-compact",
        "001-responses",
        "openai",
        "classifier",
        -3.01,
        "thinking",
    ),
    // Codex's checkpoint compaction: its instruction is a summary request (+3) against
    // reasoning (-2) and its size: no opinion; the default policy sends it local.
    (
        "codex",
        "auto-compact",
        "002-compact",
        "local",
        "model",
        0.97,
        "answered locally (context.compaction: auto)",
    ),
    (
        "codex",
        "auto-compact",
        "003-responses",
        "openai",
        "classifier",
        -4.02,
        "thinking",
    ),
    (
        "codex",
        "plain",
        "001-responses",
        "openai",
        "classifier",
        -3.01,
        "thinking",
    ),
    (
        "codex",
        "resume",
        "001-responses",
        "openai",
        "classifier",
        -3.02,
        "thinking",
    ),
    (
        "codex",
        "shell",
        "001-responses",
        "openai",
        "classifier",
        -3.01,
        "thinking",
    ),
    (
        "codex",
        "shell",
        "002-responses",
        "openai",
        "classifier",
        -3.51,
        "tool_result",
    ),
];

#[tokio::test]
async fn every_captured_request_routes_as_the_docs_say() {
    let (_mock, gw) = realistic("").await;
    let mut seen = Vec::new();
    for cli in clis() {
        for scenario in scenarios(&cli) {
            for r in captured(&cli, &scenario) {
                if r.kind != "probe" {
                    seen.push((cli.clone(), scenario.clone(), r));
                }
            }
        }
    }
    let stem = |r: &CapturedRequest| r.file.trim_end_matches(".json").to_owned();
    let listed: Vec<String> = EXPECTED
        .iter()
        .map(|e| format!("{}/{}/{}", e.0, e.1, e.2))
        .collect();
    let captured_names: Vec<String> = seen
        .iter()
        .map(|(cli, scenario, r)| {
            let name = cli.rsplit_once('-').map_or(cli.as_str(), |(name, _)| name);
            format!("{name}/{scenario}/{}", stem(r))
        })
        .collect();
    assert_eq!(captured_names, listed, "every captured request has its row");
    for ((cli, _, r), (_, scenario, file, backend, rule, score, reason)) in
        seen.iter().zip(EXPECTED)
    {
        let case = format!("{cli}/{scenario}/{file}");
        let decision = explain_captured(&gw, cli, r).await;
        assert_eq!(first_backend(&decision), *backend, "{case}: {decision:#?}");
        assert_eq!(decision.rule, *rule, "{case}: {decision:#?}");
        let got = decision.score.expect("the classifier scored it");
        assert!(
            (got - score).abs() < 0.01,
            "{case}: score {got}, documented {score}"
        );
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

/// What the captures cannot give: a history over the local window (Claude Code's
/// captured `plain` turn with 160 KB of earlier turns put before its prompt), and a
/// haiku-class call (Claude Code 2.1.197 sent none in the captured scenarios; a plain
/// Messages body, not claimed to be any CLI's).
#[tokio::test]
async fn a_long_history_goes_to_the_cloud_and_a_small_model_call_stays_local() {
    let (_mock, gw) = realistic("").await;
    let mut long_history = captured_file("claude-code", "plain", "002-messages").body;
    let turn = json!({"role": "assistant", "content": "y".repeat(40_000)});
    let messages = long_history["messages"].as_array_mut().expect("messages");
    for _ in 0..4 {
        messages.insert(0, json!({"role": "user", "content": "next step"}));
        messages.insert(1, turn.clone());
    }
    let decision = explain(&gw, Dialect::Anthropic, &long_history, &[]).await;
    assert_eq!(first_backend(&decision), "claude", "{decision:#?}");
    assert_eq!(decision.rule, "classifier");
    assert!(
        decision.reason.contains("conversation_10k_tokens"),
        "{}",
        decision.reason
    );

    let haiku = json!({"model": "claude-3-5-haiku-20241022", "max_tokens": 512,
        "messages": [{"role": "user", "content": "Extract the command prefix of: git commit -m 'x'"}]});
    let decision = explain(&gw, Dialect::Anthropic, &haiku, &[]).await;
    assert_eq!(
        (first_backend(&decision).as_str(), decision.rule.as_str()),
        ("local", "classifier"),
        "{decision:#?}"
    );
    assert!(
        decision.reason.contains("small_model"),
        "{}",
        decision.reason
    );
}

#[tokio::test]
async fn a_local_choice_over_the_context_window_goes_to_the_cloud() {
    let (_mock, gw) = realistic("").await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
        "messages": [{"role": "user", "content": format!("/local {}", "z ".repeat(80_000))}]});
    let decision = explain(&gw, Dialect::Anthropic, &body, &[]).await;
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
        .await
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
    // Claude Code's `/cloud what is 2+2` through `glider setup claude`'s command file:
    // its record of the command, then the expanded `/cloud what is 2+2`.
    let body = captured_file("claude-code", "cloud-flag", "002-messages").body;
    let reply = post_json(&gw.base, "/v1/messages", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let route = reply.headers["x-glider-route"].to_str().expect("ascii");
    assert!(
        route.starts_with("rule=explicit; backend=claude"),
        "{route}"
    );
    // Same dialect as the cloud backend: the command block and the flag go, every
    // other byte stays.
    let seen = mock.requests().pop().expect("forwarded");
    assert_eq!(seen.path, "/v1/messages");
    let sent = &seen.body["messages"][0]["content"];
    assert_eq!(sent.as_array().map(Vec::len), Some(2), "{sent}");
    assert_eq!(sent[1]["text"], "what is 2+2\n");
    let mut expected = body.clone();
    let content = expected["messages"][0]["content"]
        .as_array_mut()
        .expect("blocks");
    content.remove(1);
    content[1]["text"] = "what is 2+2\n".into();
    assert_eq!(seen.body, expected, "nothing else changed");

    // Translated to the local backend: the flag is gone there too.
    let body = captured_file("claude-code", "local-flag", "002-messages").body;
    let reply = post_json(&gw.base, "/v1/messages", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = mock.requests().pop().expect("forwarded");
    assert_eq!(seen.path, "/api/chat");
    let text = seen.body["messages"].to_string();
    assert!(
        text.contains("what is 2+2") && !text.contains("/local") && !text.contains("command-name"),
        "{text}"
    );
}

#[tokio::test]
async fn the_header_decides_and_an_unknown_backend_is_a_clear_error() {
    let (_mock, gw) = realistic("").await;
    let body = captured_file("claude-code", "plain", "002-messages").body;
    let decision = explain(
        &gw,
        Dialect::Anthropic,
        &body,
        &[("x-glider-route", "local")],
    )
    .await;
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
        body.to_string(),
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
    // The interactive session's title call, and a `/cloud` turn given the same session.
    let title = captured_file("claude-code", "interactive", "002-title");
    let id = title.header("x-claude-code-session-id").expect("a session");
    let session = [("x-claude-code-session-id", id)];
    let first = explain(&gw, Dialect::Anthropic, &title.body, &session).await;
    assert_eq!(first.rule, "classifier", "a title alone goes local");
    let flagged = captured_file("claude-code", "cloud-flag", "002-messages").body;
    // Explaining it is a dry run: the choice is not remembered.
    let explained = explain(&gw, Dialect::Anthropic, &flagged, &session).await;
    assert_eq!(explained.rule, "explicit");
    let again = explain(&gw, Dialect::Anthropic, &title.body, &session).await;
    assert_eq!(again.rule, "classifier", "explain set no sticky choice");
    // Served, it is.
    let reply = post(&gw.base, "/v1/messages", flagged.to_string(), &session).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    // The session's next title call stays with the cloud the user chose.
    let follow = explain(&gw, Dialect::Anthropic, &title.body, &session).await;
    assert_eq!(
        (follow.rule.as_str(), follow.candidates[0].backend.name()),
        ("sticky", "claude"),
        "{follow:#?}"
    );
    // Another session is not affected.
    let other = explain(
        &gw,
        Dialect::Anthropic,
        &title.body,
        &[("x-claude-code-session-id", "s-43")],
    )
    .await;
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
    let decide = async |text: &str| {
        engine
            .explain(
                Dialect::Anthropic,
                ask(text).as_bytes(),
                &http::HeaderMap::new(),
            )
            .await
            .expect("routes")
    };

    let decision = decide("train on the GPU").await;
    assert_eq!(
        (
            decision.rule.as_str(),
            decision.candidates[0].backend.name()
        ),
        ("starlark", "claude")
    );
    assert_eq!(decide("hello").await.rule, "model");

    // A script that runs away is stopped and ignored; the request still routes.
    std::fs::write(
        &rules,
        "def route(req):\n    for i in range(10000000):\n        pass\n    return 'claude'\n",
    )
    .expect("write");
    let mut stopped = None;
    for _ in 0..500 {
        let decision = decide("GPU").await;
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
        decide("GPU").await.rule,
        "model",
        "a broken file never fails a request"
    );
}
