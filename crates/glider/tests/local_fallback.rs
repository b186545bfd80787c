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
