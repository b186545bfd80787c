//! The cases of the faults matrix (issue 22) that already held, kept as tests so they
//! stay held: oversized bodies, headers and URIs and malformed or 100k-deep JSON in each
//! front dialect, and a request that carries both `Content-Length` and
//! `Transfer-Encoding` (request smuggling). docs/reliability.md lists each case.

mod common;

use common::{FRONTS, Reply, front_path, gateway, mock_and_config, post, text_request, wire};
use glider_ngl::Dialect;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The message of `reply`'s error body if it has `front`'s error shape.
fn dialect_error(front: Dialect, reply: &Reply) -> Option<String> {
    let body: Value = serde_json::from_slice(&reply.body).ok()?;
    let message = match front {
        Dialect::Anthropic => {
            (body["type"] == "error").then_some(())?;
            body["error"]["message"].as_str()
        }
        Dialect::OpenAiChat | Dialect::OpenAiResponses => body["error"]["message"].as_str(),
        Dialect::Ollama => body["error"].as_str(),
    };
    message.map(str::to_owned)
}

#[track_caller]
fn assert_dialect_error(front: Dialect, reply: &Reply, status: u16, needle: &str) {
    assert_eq!(reply.status, status, "{front:?}: {}", reply.text());
    let message = dialect_error(front, reply)
        .unwrap_or_else(|| panic!("{front:?}: not its error shape: {}", reply.text()));
    assert!(
        message.contains(needle),
        "{front:?}: {message:?} should mention {needle:?}"
    );
}

/// A model each front's request is routed to (any backend of the mock).
const MODEL: &str = "m-vllm";

#[tokio::test]
async fn an_oversized_body_gets_413_in_each_dialect() {
    let (mock, yaml) = mock_and_config("server: {max_body_bytes: 4096}\n").await;
    let gw = gateway(&yaml).await;
    for front in FRONTS {
        let body = wire(front, &text_request(MODEL, &"x".repeat(8192), false)).to_string();
        let reply = post(&gw.base, front_path(front), body, &[]).await;
        assert_dialect_error(front, &reply, 413, "max_body_bytes");
    }
    assert!(
        mock.requests().is_empty(),
        "an oversized body reached a backend"
    );
}

#[tokio::test]
async fn malformed_json_gets_400_in_each_dialect() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    for front in FRONTS {
        let reply = post(&gw.base, front_path(front), "{\"model\": \"m\", ", &[]).await;
        assert_dialect_error(front, &reply, 400, "JSON");
    }
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn json_nested_100k_deep_gets_400_in_each_dialect_without_overflowing() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let deep = format!(
        "{{\"model\": \"{MODEL}\", \"messages\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    for front in FRONTS {
        let reply = post(&gw.base, front_path(front), deep.clone(), &[]).await;
        assert_dialect_error(front, &reply, 400, "JSON");
    }
    assert!(mock.requests().is_empty());
}

/// One raw HTTP/1.1 exchange: write `request`, read until the server closes (or a
/// bounded wait passes) and return what came back.
async fn raw_exchange(base: &str, request: &[u8]) -> String {
    let addr = base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    socket.write_all(request).await.expect("write");
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), socket.read(&mut buf));
        match read.await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn oversized_headers_get_431_and_an_oversized_uri_414() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    for front in FRONTS {
        let body = wire(front, &text_request(MODEL, "hi", false)).to_string();
        let header = "a".repeat(1 << 20);
        let request = format!(
            "POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\nx-big: {header}\r\ncontent-length: {}\r\n\r\n{body}",
            front_path(front),
            body.len()
        );
        // Refused while the request head is parsed, before the path picks a dialect:
        // the status alone, and the connection closed.
        let reply = raw_exchange(&gw.base, request.as_bytes()).await;
        assert!(
            reply.starts_with("HTTP/1.1 431 "),
            "{front:?}: {}",
            &reply[..reply.len().min(300)]
        );
        let uri = format!("{}?q={}", front_path(front), "b".repeat(1 << 17));
        let request = format!(
            "POST {uri} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let reply = raw_exchange(&gw.base, request.as_bytes()).await;
        assert!(
            reply.starts_with("HTTP/1.1 414 "),
            "{front:?}: {}",
            &reply[..reply.len().min(300)]
        );
    }
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn content_length_with_transfer_encoding_cannot_smuggle_a_request() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let body = wire(Dialect::OpenAiChat, &text_request(MODEL, "hi", false)).to_string();
    let smuggled = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}",
        5 + smuggled.len()
    );
    let reply = raw_exchange(&gw.base, request.as_bytes()).await;
    // Refused whole: one 400, the connection closed, nothing reaches a backend (so the
    // request hidden in the body is never read as a second one).
    assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
    assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("connection: close"),
        "{reply}"
    );
    assert!(
        mock.requests().is_empty(),
        "a smuggled request reached a backend"
    );
}
