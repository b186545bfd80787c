//! Which client a generation request leaves by (`glider_backend`'s `direct` module):
//! with `HTTP_PROXY` set, a cloud-kind backend at a plain `http://` URL is still sent
//! through the proxy (reqwest), while a local backend goes straight to its server (the
//! direct client), as it always did; a refused connection reads the same either way.
//! The requests are sent by this test binary run again as a child process with
//! `HTTP_PROXY` set (the environment is read when a backend is built); the parent runs
//! the proxy and the server and checks what each received.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use glider_backend::{Backend, UpstreamRequest};
use glider_config::Config;
use glider_ngl::{Dialect, ErrorKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const REPLY: &str = r#"{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;

/// A one-request-per-connection HTTP server that answers every request with [`REPLY`]
/// and keeps each request's head.
async fn recording_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                    if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                while buffer.len() < head_end + length {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                    }
                }
                seen.lock().expect("lock").push(head);
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{REPLY}",
                    REPLY.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    (port, heads)
}

fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    port
}

fn backend(kind: &str, base_url: &str) -> Arc<Backend> {
    let yaml = format!(
        "backends:\n  - {{name: b, type: {kind}, base_url: '{base_url}', api_key: k, models: [m]}}\n"
    );
    let config = Config::parse(&yaml, "t").expect("valid");
    Backend::new(config.backends[0].clone())
}

fn request() -> UpstreamRequest {
    UpstreamRequest {
        dialect: Dialect::OpenAiChat,
        body: Bytes::from_static(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#),
        stream: false,
        headers: Default::default(),
    }
}

const TEST_NAME: &str = "a_proxy_is_used_where_reqwest_would_use_it_and_never_for_a_local_backend";

#[tokio::test]
async fn a_proxy_is_used_where_reqwest_would_use_it_and_never_for_a_local_backend() {
    if let Ok(server_port) = std::env::var("GLIDER_TEST_SERVER_PORT") {
        return send_as_the_child(&server_port).await;
    }
    let (proxy_port, proxied) = recording_server().await;
    let (server_port, served) = recording_server().await;
    let status = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env("HTTP_PROXY", format!("http://127.0.0.1:{proxy_port}"))
        .env("GLIDER_TEST_SERVER_PORT", server_port.to_string())
        .kill_on_drop(true)
        .status()
        .await
        .expect("run the child");
    assert!(status.success(), "the child's checks failed: {status}");

    // The cloud-kind backend's request reached the proxy in absolute form (the closed
    // port it names was never dialled); the local backend's reached its server
    // directly, with the headers reqwest would have sent.
    let heads = proxied.lock().expect("lock").clone();
    assert_eq!(
        heads.len(),
        1,
        "only the cloud request is proxied: {heads:?}"
    );
    assert!(
        heads[0].starts_with("POST http://127.0.0.1:")
            && heads[0].contains("/v1/chat/completions HTTP/1.1"),
        "{}",
        heads[0]
    );
    let heads = served.lock().expect("lock").clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    let head = heads[0].to_ascii_lowercase();
    assert!(
        head.starts_with("post /v1/chat/completions http/1.1"),
        "{head}"
    );
    for line in [
        "authorization: bearer k",
        "content-type: application/json",
        "accept: */*",
    ] {
        assert!(head.contains(line), "{line} in {head}");
    }
}

/// The child: one request by each backend, and a refused connection.
async fn send_as_the_child(server_port: &str) {
    let cloud = backend("openai", &format!("http://127.0.0.1:{}/v1", closed_port()));
    let reply = cloud.send(&request()).await.expect("through the proxy");
    assert_eq!(reply.status, 200);

    let local = backend("vllm", &format!("http://127.0.0.1:{server_port}/v1"));
    let reply = local
        .send(&request())
        .await
        .expect("straight to the server");
    assert_eq!(reply.status, 200);
    assert_eq!(&reply.first_chunk[..], REPLY.as_bytes());

    // A refused connection through the direct client reads as reqwest's did: an
    // unreachable backend, with the cause and the URL.
    let down_url = format!("http://127.0.0.1:{}/v1", closed_port());
    let failure = match backend("vllm", &down_url).send(&request()).await {
        Ok(_) => panic!("nothing listens there"),
        Err(failure) => failure,
    };
    assert_eq!(failure.kind, ErrorKind::Unavailable);
    assert!(failure.unreachable);
    assert!(
        failure.message.starts_with(&format!(
            "error sending request for url ({down_url}/chat/completions): "
        )) && failure.message.contains("Connection refused"),
        "{}",
        failure.message
    );
}
