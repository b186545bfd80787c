//! What a keyed cloud backend's probe concludes from the model list's status, against a
//! loopback origin answering that status: only 401 says the key is rejected (down); a
//! 403 (a restricted key refused the list) is up with a note; a 5xx (overloaded, a
//! failing gateway) leaves the backend unverified, not down. A redirect is not followed,
//! so the key never reaches the host it points to.

use glider_backend::Backend;
use glider_backend::health::HealthStatus;
use glider_config::Config;
use glider_test_support::canned::{CannedReply, CannedServer};

/// A loopback origin answering every request with HTTP `status` and an error body, as a
/// vendor does.
async fn origin(status: u16) -> CannedServer {
    origin_with(status, &[]).await
}

/// [`origin`] with `headers` on each reply.
async fn origin_with(status: u16, headers: &[(&str, &str)]) -> CannedServer {
    let mut reply = CannedReply::json(
        status,
        r#"{"type":"error","error":{"type":"x","message":"x"}}"#,
    );
    for (name, value) in headers {
        reply = reply.header(name, value);
    }
    CannedServer::start(move |_| reply.clone()).await
}

async fn probe_keyed(status: u16) -> glider_backend::health::Health {
    probe_keyed_at(origin(status).await.port).await
}

async fn probe_keyed_at(port: u16) -> glider_backend::health::Health {
    let yaml = format!(
        "backends:\n  - {{name: keyed, type: anthropic, base_url: 'http://127.0.0.1:{port}', api_key: sk-ant-probe, models: [m]}}\n"
    );
    let config = Config::parse(&yaml, "t").expect("valid");
    Backend::new(config.backends[0].clone()).probe().await
}

#[tokio::test]
async fn a_401_says_the_configured_key_is_rejected() {
    let health = probe_keyed(401).await;
    assert_eq!(health.status, HealthStatus::Down, "{health:?}");
    assert!(
        health
            .detail
            .unwrap_or_default()
            .contains("rejected the configured key"),
    );
}

#[tokio::test]
async fn a_403_is_up_with_a_note_a_restricted_key_may_still_chat() {
    let health = probe_keyed(403).await;
    assert_eq!(health.status, HealthStatus::Up, "{health:?}");
    assert!(health.note.unwrap_or_default().contains("HTTP 403"));
}

#[tokio::test]
async fn a_5xx_leaves_the_backend_unverified_not_down() {
    for status in [502, 503, 529] {
        let health = probe_keyed(status).await;
        assert_eq!(health.status, HealthStatus::Unknown, "{status}: {health:?}");
        assert!(
            health.note.unwrap_or_default().contains(&format!(
                "unverified: GET /v1/models answered HTTP {status}"
            )),
            "{status}"
        );
    }
}

#[tokio::test]
async fn a_redirect_to_another_host_is_not_followed_with_the_key() {
    let elsewhere = origin(200).await;
    let location = format!("http://localhost:{}/v1/models", elsewhere.port);
    let redirecting = origin_with(307, &[("location", &location)]).await;
    let health = probe_keyed_at(redirecting.port).await;
    let reached: Vec<String> = elsewhere.requests().into_iter().map(|r| r.head).collect();
    assert!(
        reached.iter().all(|head| !head.contains("sk-ant-probe")),
        "the key followed the redirect: {reached:?}"
    );
    assert!(reached.is_empty(), "{reached:?}");
    assert!(
        health.note.unwrap_or_default().contains("HTTP 307"),
        "not followed"
    );
}
