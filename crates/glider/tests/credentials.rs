//! The user's own credentials through the gateway, over loopback against the mock
//! (issue 21, item 1): a cloud backend whose key variable is unset forwards the
//! client's `x-api-key` or OAuth bearer (with its `anthropic-beta` values) unchanged; a
//! configured key wins; a client's key never reaches another vendor's backend nor a
//! local server; and a request with no credential at all is told what to set.

mod common;

use common::*;
use glider_ngl::Dialect;
use glider_test_support::{MockVendor, RecordedRequest};

/// A variable no test environment sets: the configured key resolves to nothing.
const UNSET: &str = "${GLIDER_TEST_CREDENTIALS_NEVER_SET}";

/// The mock with an Ollama, an Anthropic and an OpenAI backend on it, the two cloud
/// ones keyed by `anthropic_key` and `openai_key`.
async fn backends(anthropic_key: &str, openai_key: &str) -> (MockVendor, String) {
    let mock = MockVendor::start(Default::default()).await;
    let url = mock.base_url();
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: ollama, type: ollama, base_url: '{url}', models: [m-ollama]}}\n\
         \x20 - {{name: openai, type: openai, base_url: '{url}/v1', api_key: '{openai_key}', models: [m-openai]}}\n\
         \x20 - {{name: anthropic, type: anthropic, base_url: '{url}', api_key: '{anthropic_key}', models: [m-anthropic]}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n"
    );
    (mock, yaml)
}

/// The one request the mock received since it was last cleared.
fn only_request(mock: &MockVendor) -> RecordedRequest {
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    mock.clear_requests();
    requests.into_iter().next().expect("one request")
}

async fn ask(gw: &Gateway, front: Dialect, model: &str, headers: &[(&str, &str)]) -> Reply {
    let body = wire(front, &text_request(model, "hello", false)).to_string();
    post(&gw.base, front_path(front), body, headers).await
}

#[tokio::test]
async fn an_unset_key_forwards_the_clients_own_credentials_unchanged() {
    let (mock, yaml) = backends(UNSET, UNSET).await;
    let gw = gateway(&yaml).await;

    // An API-key user of Claude Code.
    let reply = ask(
        &gw,
        Dialect::Anthropic,
        "m-anthropic",
        &[("x-api-key", "sk-ant-api-client")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = only_request(&mock);
    assert_eq!(seen.header("x-api-key"), Some("sk-ant-api-client"));
    assert_eq!(seen.header("authorization"), None);

    // A subscription user: the OAuth bearer and the betas that go with it.
    let beta = "oauth-2025-04-20,claude-code-20250219";
    let reply = ask(
        &gw,
        Dialect::Anthropic,
        "m-anthropic",
        &[
            ("authorization", "Bearer sk-ant-oat01-client"),
            ("anthropic-beta", beta),
        ],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = only_request(&mock);
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer sk-ant-oat01-client")
    );
    assert_eq!(seen.header("anthropic-beta"), Some(beta));
    assert_eq!(seen.header("x-api-key"), None);

    // An OpenAI client (Chat Completions and Responses) to the OpenAI backend.
    for front in [Dialect::OpenAiChat, Dialect::OpenAiResponses] {
        let reply = ask(
            &gw,
            front,
            "m-openai",
            &[("authorization", "Bearer sk-openai-client")],
        )
        .await;
        assert_eq!(reply.status, 200, "{front:?}: {}", reply.text());
        let seen = only_request(&mock);
        assert_eq!(
            seen.header("authorization"),
            Some("Bearer sk-openai-client")
        );
    }
}

#[tokio::test]
async fn a_configured_key_wins_over_the_clients() {
    let (mock, yaml) = backends("k-configured-anthropic", "k-configured-openai").await;
    let gw = gateway(&yaml).await;
    let reply = ask(
        &gw,
        Dialect::Anthropic,
        "m-anthropic",
        &[
            ("x-api-key", "sk-ant-api-client"),
            ("authorization", "Bearer sk-ant-oat01-client"),
            ("anthropic-beta", "oauth-2025-04-20,claude-code-20250219"),
        ],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = only_request(&mock);
    assert_eq!(seen.header("x-api-key"), Some("k-configured-anthropic"));
    assert_eq!(seen.header("authorization"), None);
    // The OAuth beta announces a bearer that is not sent; the others stay.
    assert_eq!(seen.header("anthropic-beta"), Some("claude-code-20250219"));

    let reply = ask(
        &gw,
        Dialect::OpenAiChat,
        "m-openai",
        &[("authorization", "Bearer sk-openai-client")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = only_request(&mock);
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer k-configured-openai")
    );
}

#[tokio::test]
async fn a_clients_credentials_reach_neither_a_local_server_nor_another_vendor() {
    let (mock, yaml) = backends(UNSET, UNSET).await;
    let gw = gateway(&yaml).await;
    let claude_code = [
        ("x-api-key", "sk-ant-api-client"),
        ("authorization", "Bearer sk-ant-oat01-client"),
    ];

    // A local route: nothing of the client's credentials.
    for front in [Dialect::Anthropic, Dialect::OpenAiChat, Dialect::Ollama] {
        let reply = ask(&gw, front, "m-ollama", &claude_code).await;
        assert_eq!(reply.status, 200, "{front:?}: {}", reply.text());
        let seen = only_request(&mock);
        assert_eq!(seen.path, "/api/chat");
        assert_eq!(seen.header("x-api-key"), None, "{front:?}");
        assert_eq!(seen.header("authorization"), None, "{front:?}");
    }

    // Claude Code's Anthropic credentials asked for an OpenAI model: not forwarded,
    // and the client is told what to set, in its own dialect.
    let reply = ask(&gw, Dialect::Anthropic, "m-openai", &claude_code).await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    let error = reply.json();
    assert_eq!(error["error"]["type"], "authentication_error", "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("GLIDER_TEST_CREDENTIALS_NEVER_SET"),
        "{message}"
    );
    assert!(mock.requests().is_empty(), "{:?}", mock.requests());

    // And an OpenAI key asked for a Claude model.
    let reply = ask(
        &gw,
        Dialect::OpenAiChat,
        "m-anthropic",
        &[("authorization", "Bearer sk-openai-client")],
    )
    .await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    assert_eq!(reply.json()["error"]["code"], "invalid_api_key");
    assert!(mock.requests().is_empty(), "{:?}", mock.requests());
}

#[tokio::test]
async fn no_credential_anywhere_says_what_to_set() {
    let (mock, yaml) = backends(UNSET, UNSET).await;
    let gw = gateway(&yaml).await;
    let reply = ask(&gw, Dialect::Anthropic, "m-anthropic", &[]).await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("set GLIDER_TEST_CREDENTIALS_NEVER_SET"),
        "{message}"
    );
    assert!(mock.requests().is_empty(), "nothing was sent upstream");
}
