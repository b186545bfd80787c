//! What a keyed cloud backend's probe concludes from the model list's status, against a
//! loopback origin answering that status: only 401 says the key is rejected (down); a
//! 403 (a restricted key refused the list) is up with a note; a 5xx (overloaded, a
//! failing gateway) leaves the backend unverified, not down.

use glider_backend::Backend;
use glider_backend::health::HealthStatus;
use glider_config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback origin answering every request with HTTP `status` and an error body, as a
/// vendor does; its port.
async fn origin(status: u16) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = stream.read(&mut buf).await;
                let body = r#"{"type":"error","error":{"type":"x","message":"x"}}"#;
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

async fn probe_keyed(status: u16) -> glider_backend::health::Health {
    let port = origin(status).await;
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
