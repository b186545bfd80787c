//! A backend that streams one line and never ends it (issue 22 item 8): the gateway
//! stops at the line cap, ends the client's stream with its dialect's error event and
//! closes the backend connection instead of reading on.

mod common;

use common::{gateway, post_json, text_request, wire};
use glider_dialects::framing::MAX_LINE_BYTES;
use glider_ngl::Dialect;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the endless backend saw: how many bytes it wrote, and whether a write failed
/// because Glider closed the connection (rather than the backend giving up).
struct Sent {
    bytes: usize,
    closed_by_peer: bool,
}

/// How much the backend writes at most before giving up: far past the cap plus what
/// loopback socket buffers can hold, so stopping short of it means Glider closed.
const GIVE_UP_AFTER: usize = 8 * MAX_LINE_BYTES;

/// An Anthropic-speaking backend on loopback whose stream opens properly, then sends a
/// `content_block_delta` line that never ends.
async fn endless_backend() -> (String, tokio::task::JoinHandle<Sent>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("glider connects");
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.expect("request");
            assert!(n > 0, "glider hung up before sending its request");
            request.extend_from_slice(&buf[..n]);
        }
        let opening = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",",
            "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m-anthropic\",\"content\":[],",
            "\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""
        );
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let mut sent = 0;
        for part in [head.as_bytes(), opening.as_bytes()] {
            socket.write_all(part).await.expect("opening");
            sent += part.len();
        }
        let chunk = vec![b'x'; 64 << 10];
        while sent < GIVE_UP_AFTER {
            if socket.write_all(&chunk).await.is_err() {
                return Sent {
                    bytes: sent,
                    closed_by_peer: true,
                };
            }
            sent += chunk.len();
        }
        Sent {
            bytes: sent,
            closed_by_peer: false,
        }
    });
    (url, task)
}

#[tokio::test]
async fn an_endless_backend_line_ends_the_clients_stream_with_an_error_and_closes_the_backend() {
    let (url, backend) = endless_backend().await;
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: anthropic, type: anthropic, base_url: '{url}', api_key: k-anthropic, models: [m-anthropic]}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n"
    );
    let gw = gateway(&yaml).await;
    // The client speaks Chat Completions: the stream is translated, so decoded here.
    let request = wire(
        Dialect::OpenAiChat,
        &text_request("m-anthropic", "hi", true),
    );
    let reply = post_json(&gw.base, "/v1/chat/completions", &request).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply.text();
    let last = text
        .lines()
        .rfind(|l| l.starts_with("data: "))
        .expect("the stream has events");
    let event: serde_json::Value =
        serde_json::from_str(last.trim_start_matches("data: ")).expect("a JSON event");
    let message = event["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&MAX_LINE_BYTES.to_string()),
        "the stream ends with the Chat Completions error event naming the cap: {last}"
    );
    let sent = backend.await.expect("backend task");
    assert!(
        sent.closed_by_peer,
        "glider kept reading the endless line: {} bytes taken without closing",
        sent.bytes
    );
}
