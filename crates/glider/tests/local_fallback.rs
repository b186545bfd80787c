//! The cloud is down and the local model is up (issue 21, item 3), over loopback: with
//! `routing.local_fallback`, a request routed to the cloud whose every cloud attempt
//! could not connect is answered by the local model, and the route header and the
//! request's record say so; an answer from the cloud (a 4xx, a 5xx), an explicit
//! `/cloud` or the key off leave it to the cloud's error.

mod common;

use common::*;
use glider_ngl::Dialect;
use glider_test_support::{Failure, MockVendor};

/// A loopback address nothing listens on (bound, then released).
async fn refused_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("http://{addr}")
}

/// A local Ollama backend on `local` and an Anthropic one at `cloud_url`.
fn config(local: &MockVendor, cloud_url: &str, local_fallback: bool) -> String {
    format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{}', models: [m-ollama], default_model: m-ollama}}\n\
         \x20 - {{name: claude, type: anthropic, base_url: '{cloud_url}', api_key: k, models: ['claude-*'], connect_timeout_secs: 2}}\n\
         routing: {{local_fallback: {local_fallback}, classifier: {{enabled: false}}}}\n",
        local.base_url()
    )
}

async fn ask_claude(gw: &Gateway, text: &str, stream: bool) -> Reply {
    let body = wire(
        Dialect::Anthropic,
        &text_request("claude-sonnet-4-6", text, stream),
    );
    post_json(&gw.base, "/v1/messages", &body).await
}

#[tokio::test]
async fn an_unreachable_cloud_hands_the_request_to_the_local_model_and_says_why() {
    let local = MockVendor::start(Default::default()).await;
    let gw = gateway(&config(&local, &refused_url().await, true)).await;
    let mut events = gw.engine.bus().subscribe();
    for stream in [false, true] {
        let reply = ask_claude(&gw, "hello there", stream).await;
        assert_eq!(reply.status, 200, "stream={stream}: {}", reply.text());
        let answer = reply
            .decode(Dialect::Anthropic, stream)
            .expect("a valid Anthropic reply");
        assert!(answer.plain_text().contains("echo"), "{answer:?}");
        let route = reply.header("x-glider-route");
        assert!(route.contains("rule=local_fallback"), "{route}");
        assert!(route.contains("backend=local; model=m-ollama"), "{route}");
        assert!(
            route.contains("the cloud was unreachable (claude: "),
            "{route}"
        );

        let record = next_finished(&mut events).await;
        assert_eq!(record.rule.as_deref(), Some("local_fallback"), "{record:?}");
        assert_eq!(record.local, Some(true));
        assert!(
            record
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("routing.local_fallback")),
            "{record:?}"
        );
        assert_eq!(record.fallbacks.len(), 1, "{record:?}");
    }
    let asked: Vec<String> = local.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(asked, ["/api/chat", "/api/chat"]);
}

#[tokio::test]
async fn without_local_fallback_the_cloud_error_stands() {
    let local = MockVendor::start(Default::default()).await;
    let gw = gateway(&config(&local, &refused_url().await, false)).await;
    let reply = ask_claude(&gw, "hello there", false).await;
    assert!(reply.status >= 500, "{}", reply.text());
    assert!(local.requests().is_empty(), "{:?}", local.requests());
}

#[tokio::test]
async fn a_cloud_that_answered_an_error_is_not_handed_to_the_local_model() {
    let local = MockVendor::start(Default::default()).await;
    let cloud = MockVendor::start(Default::default()).await;
    let gw = gateway(&config(&local, &cloud.base_url(), true)).await;
    for (status, failure) in [(401, Failure::Status(401)), (500, Failure::Status(500))] {
        cloud.set_failure(failure);
        let reply = ask_claude(&gw, "hello there", false).await;
        assert_ne!(reply.status, 200, "HTTP {status}: {}", reply.text());
        assert!(
            local.requests().is_empty(),
            "HTTP {status}: {:?}",
            local.requests()
        );
    }
}

#[tokio::test]
async fn an_explicit_cloud_choice_is_not_handed_to_the_local_model() {
    let local = MockVendor::start(Default::default()).await;
    let gw = gateway(&config(&local, &refused_url().await, true)).await;
    let reply = ask_claude(&gw, "/cloud hello there", false).await;
    assert!(reply.status >= 500, "{}", reply.text());
    assert!(local.requests().is_empty(), "{:?}", local.requests());
}

/// The embedded default profile (`configs/glider.yaml`) with its local Ollama at
/// `local`, both clouds at `cloud_url`, and neither cloud key set: a CLI user's
/// first hour, offline.
fn default_profile(local: &MockVendor, cloud_url: &str) -> String {
    let profile = glider_config::DEFAULT_PROFILE
        .replace("http://127.0.0.1:11434", &local.base_url())
        .replace("https://api.anthropic.com", cloud_url)
        .replace("https://api.openai.com/v1", cloud_url)
        .replace("${ANTHROPIC_API_KEY}", "${GLIDER_TEST_UNSET_ANTHROPIC_KEY}")
        .replace("${OPENAI_API_KEY}", "${GLIDER_TEST_UNSET_OPENAI_KEY}");
    assert!(profile.contains(&local.base_url()) && profile.contains(cloud_url));
    profile
}

/// The captured real Claude Code main turn, sent with its key.
async fn claude_code_turn(gw: &Gateway) -> Reply {
    let turn = captured_turn("claude-code", "plain", "messages");
    post(
        &gw.base,
        "/v1/messages",
        turn.body_bytes(),
        &[("x-api-key", "sk-ant-test")],
    )
    .await
}

/// The real CLI's first request of `scenario` (captured from it: docs/captured-traffic.md).
fn captured_turn(
    cli: &str,
    scenario: &str,
    kind: &str,
) -> glider_test_support::captured::CapturedRequest {
    glider_test_support::captured::captured_kind(cli, scenario, kind)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("a captured {cli} {scenario} {kind}"))
}

#[tokio::test]
async fn with_the_default_profile_an_offline_cli_turn_is_answered_by_the_local_model() {
    let local = MockVendor::start(Default::default()).await;
    let gw = gateway(&default_profile(&local, &refused_url().await)).await;
    // The real CLIs' main turns, with the key each sends: the classifier sends them to
    // the cloud, whose other vendor's passthrough backend cannot take that client's
    // key — which must not end the sequence before the local model.
    let cases = [
        (
            Dialect::Anthropic,
            captured_turn("claude-code", "plain", "messages"),
            ("x-api-key", "sk-ant-test"),
        ),
        (
            Dialect::OpenAiResponses,
            captured_turn("codex", "plain", "responses"),
            ("authorization", "Bearer sk-test"),
        ),
    ];
    for (front, turn, credential) in cases {
        let reply = post(
            &gw.base,
            front_path(front),
            turn.body_bytes(),
            &[credential],
        )
        .await;
        assert_eq!(reply.status, 200, "{front:?}: {}", reply.text());
        let route = reply.header("x-glider-route");
        assert!(route.contains("backend=local"), "{front:?}: {route}");
        assert!(route.contains("rule=local_fallback"), "{front:?}: {route}");
        assert!(
            route.contains("no credentials for"),
            "the other vendor's backend was skipped, not final: {route}"
        );
        reply
            .decode(front, true)
            .expect("a valid stream in the client's dialect");
    }
    assert_eq!(local.requests().len(), 2, "{:?}", local.requests());
}

#[tokio::test]
async fn when_nothing_can_answer_the_error_is_a_server_problem_naming_each_backend_and_the_fix() {
    let nowhere = refused_url().await;
    let local = MockVendor::start(Default::default()).await;
    let profile = default_profile(&local, &nowhere).replace(&local.base_url(), &nowhere);
    let gw = gateway(&profile).await;
    let reply = claude_code_turn(&gw).await;
    // Never the 401 Claude Code reports as "Failed to authenticate".
    assert_eq!(reply.status, 502, "{}", reply.text());
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for named in [
        "claude: ",
        "openai: no credentials",
        "local: ",
        "x-glider-route: local",
    ] {
        assert!(message.contains(named), "{named}: {message}");
    }
}

#[tokio::test]
async fn a_small_local_model_is_the_reserve_for_a_turn_it_holds_once_fitted() {
    // SmolLM2's 8k window: Claude Code's main turn is ~22k tokens as sent, a few
    // thousand once its tools are reduced and its system text cut.
    let local = MockVendor::start(Default::default()).await;
    let profile = default_profile(&local, &refused_url().await)
        .replace("context_window: 32768", "context_window: 8192");
    assert!(profile.contains("context_window: 8192"));
    let gw = gateway(&profile).await;
    let reply = claude_code_turn(&gw).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let route = reply.header("x-glider-route");
    assert!(route.contains("rule=local_fallback"), "{route}");
    let sent = local.requests();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].body.to_string().len() < 8192 * 4,
        "the local model got the fitted turn"
    );
}
