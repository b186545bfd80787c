//! The gateway's browser rules over real HTTP: a foreign `Origin` is refused in the
//! caller's dialect before the pipeline runs, a non-loopback `Host` (DNS rebinding) is
//! refused unless `server.gateway_token` is set and presented, and clients that send no
//! `Origin` (SDKs, CLIs, curl) keep working.

mod common;

use common::{Reply, gateway, mock_and_config, post};
use serde_json::json;

fn anthropic_body() -> String {
    json!({"model": "m-anthropic", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
}

fn openai_body() -> String {
    json!({"model": "m-anthropic", "messages": [{"role": "user", "content": "hi"}]}).to_string()
}

async fn send(base: &str, path: &str, body: String, headers: &[(&str, &str)]) -> Reply {
    post(base, path, body, headers).await
}

#[tokio::test]
async fn a_foreign_origin_is_refused_in_each_dialect_and_never_reaches_a_backend() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    for origin in ["http://evil.example", "null", "http://localhost:9999"] {
        let reply = send(
            &gw.base,
            "/v1/messages",
            anthropic_body(),
            &[("origin", origin), ("content-type", "text/plain")],
        )
        .await;
        assert_eq!(reply.status, 403, "{origin}: {}", reply.text());
        assert_eq!(reply.json()["error"]["type"], "permission_error");

        let reply = send(
            &gw.base,
            "/v1/chat/completions",
            openai_body(),
            &[("origin", origin)],
        )
        .await;
        assert_eq!(reply.status, 403, "{origin}: {}", reply.text());
        assert!(
            reply.json()["error"]["message"].is_string(),
            "{}",
            reply.text()
        );

        let reply = send(&gw.base, "/api/chat", openai_body(), &[("origin", origin)]).await;
        assert_eq!(reply.status, 403, "{origin}: {}", reply.text());
        assert!(reply.json()["error"].is_string(), "{}", reply.text());
    }
    // GETs too: a page must not read the model list either.
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let models = client
        .get(format!("{}/v1/models", gw.base))
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("answers");
    assert_eq!(models.status(), 403);
    assert!(mock.requests().is_empty(), "nothing reached the backend");
}

#[tokio::test]
async fn clients_without_an_origin_and_the_gateways_own_origin_are_served() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let reply = send(&gw.base, "/v1/messages", anthropic_body(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    // `curl -d` without a content type sends a form type; it has no Origin, so it works.
    let reply = send(
        &gw.base,
        "/v1/messages",
        anthropic_body(),
        &[("content-type", "application/x-www-form-urlencoded")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let own = gw.base.clone();
    let reply = send(
        &gw.base,
        "/v1/messages",
        anthropic_body(),
        &[("origin", &own)],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn a_rebinding_host_is_refused_without_a_token() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let reply = send(
        &gw.base,
        "/v1/messages",
        anthropic_body(),
        &[("host", "attacker.example:8080")],
    )
    .await;
    assert_eq!(reply.status, 403, "{}", reply.text());
    assert!(
        reply.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("gateway_token")),
        "{}",
        reply.text()
    );
    for host in ["localhost:8080", "[::1]:8080", "127.0.0.1"] {
        let reply = send(
            &gw.base,
            "/v1/messages",
            anthropic_body(),
            &[("host", host)],
        )
        .await;
        assert_eq!(reply.status, 200, "{host}: {}", reply.text());
    }
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn with_a_token_any_host_is_served_but_only_with_the_token() {
    let (mock, yaml) = mock_and_config("server: {gateway_token: s3cret}\n").await;
    let gw = gateway(&yaml).await;
    let other_host = [("host", "gpu-box.lan:8080")];
    let reply = send(&gw.base, "/v1/messages", anthropic_body(), &other_host).await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    assert_eq!(reply.json()["error"]["type"], "authentication_error");
    let reply = send(
        &gw.base,
        "/v1/messages",
        anthropic_body(),
        &[("host", "gpu-box.lan:8080"), ("x-glider-token", "wrong")],
    )
    .await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    let reply = send(
        &gw.base,
        "/v1/messages",
        anthropic_body(),
        &[("host", "gpu-box.lan:8080"), ("x-glider-token", "s3cret")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    // The token does not lift the Origin rule.
    let reply = send(
        &gw.base,
        "/v1/messages",
        anthropic_body(),
        &[
            ("host", "gpu-box.lan:8080"),
            ("x-glider-token", "s3cret"),
            ("origin", "http://evil.example"),
        ],
    )
    .await;
    assert_eq!(reply.status, 403, "{}", reply.text());
    assert_eq!(mock.requests().len(), 1);
}
