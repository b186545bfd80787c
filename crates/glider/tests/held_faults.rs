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

/// The release-style binary, run as a user runs it: `glider serve` over a home directory.
mod binary {
    use std::io::{BufRead, BufReader};
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    const GLIDER: &str = env!("CARGO_BIN_EXE_glider");

    /// A running `glider serve`; everything it printed (stdout and stderr) is kept.
    pub struct Serve {
        child: Child,
        pub output: Arc<Mutex<String>>,
        pub gateway: String,
        pub dashboard: String,
    }

    impl Serve {
        pub fn start(home: &Path, config: &Path) -> Serve {
            let mut child = Command::new(GLIDER)
                .env("GLIDER_HOME", home)
                .env("GLIDER_LOG", "debug")
                .env_remove("GLIDER_CONFIG")
                .args(["serve", "--port", "0", "--dashboard-port", "0", "-c"])
                .arg(config)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn glider serve");
            let output = Arc::new(Mutex::new(String::new()));
            let stdout = child.stdout.take().expect("stdout");
            let stderr = child.stderr.take().expect("stderr");
            for pipe in [
                Box::new(stdout) as Box<dyn std::io::Read + Send>,
                Box::new(stderr),
            ] {
                let output = output.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                        let mut all = output.lock().expect("output");
                        all.push_str(&line);
                        all.push('\n');
                    }
                });
            }
            let mut serve = Serve {
                child,
                output,
                gateway: String::new(),
                dashboard: String::new(),
            };
            serve.gateway = serve.address("glider gateway listening on ");
            serve.dashboard = serve.address("glider dashboard on ");
            serve
        }

        /// The URL printed after `prefix`, waited for (bounded).
        fn address(&mut self, prefix: &str) -> String {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let found = self
                    .output
                    .lock()
                    .expect("output")
                    .lines()
                    .find_map(|l| l.strip_prefix(prefix))
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(str::to_owned);
                if let Some(url) = found {
                    return url;
                }
                if std::time::Instant::now() > deadline {
                    let _ = self.child.kill();
                    panic!(
                        "no {prefix:?} line: {}",
                        self.output.lock().expect("output")
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }

        /// SIGKILL: no shutdown code runs.
        pub fn kill(mut self) -> String {
            self.child.kill().expect("SIGKILL");
            self.child.wait().expect("reaped");
            self.output.lock().expect("output").clone()
        }
    }

    impl Drop for Serve {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// The history files under `home`.
    pub fn history_files(home: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(home.join("history"))
            .map(|dir| dir.filter_map(|e| Some(e.ok()?.path())).collect())
            .unwrap_or_default();
        files.sort();
        files
    }
}

/// The cloud key the tests configure; it must never show in a log line or a reply.
const KEY: &str = "sk-held-faults-secret-4242";

async fn get(url: &str) -> (u16, String) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let response = client.get(url).send().await.expect("dashboard answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

/// The number of finished requests `/api/requests` lists.
async fn listed_requests(dashboard: &str) -> usize {
    let (status, body) = get(&format!("{dashboard}/api/requests")).await;
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).expect("requests page is JSON");
    page["requests"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn sigkill_and_a_torn_history_line_keep_history_and_no_key_reaches_a_log_or_the_api() {
    let mock = glider_test_support::MockVendor::start(Default::default()).await;
    let home = tempfile::tempdir().expect("home");
    let config = home.path().join("glider.yaml");
    std::fs::write(
        &config,
        format!(
            "backends:\n  - {{name: openai, type: openai, base_url: '{}/v1', api_key: {KEY}, models: [m-openai]}}\n\
             routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n",
            mock.base_url()
        ),
    )
    .expect("config");
    let ask = wire(Dialect::OpenAiChat, &text_request("m-openai", "hi", false)).to_string();

    let first = binary::Serve::start(home.path(), &config);
    let reply = post(&first.gateway, "/v1/chat/completions", ask.clone(), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        mock.requests()
            .iter()
            .any(|r| format!("{r:?}").contains(KEY)),
        "the key is sent to the backend (else this test shows nothing)"
    );
    // Every API that describes backends, config or requests, and the docs.
    for path in [
        "/api/config",
        "/api/backends",
        "/api/requests",
        "/api/status",
        "/metrics",
    ] {
        let (status, body) = get(&format!("{}{path}", first.dashboard)).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(!body.contains(KEY), "{path} shows the key: {body}");
    }
    // Docs are embedded pages, not files: no path reaches the disk.
    for path in [
        "/docs/..%2F..%2FCargo.toml",
        "/docs/%2e%2e%2f%2e%2e%2fCargo.toml",
        "/docs/..%2F..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        "/assets/..%2F..%2FCargo.toml",
    ] {
        let (status, body) = get(&format!("{}{path}", first.dashboard)).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(
            !body.contains("[package]") && !body.contains("root:"),
            "{path} served a file"
        );
    }
    let dashboard = first.dashboard.clone();
    assert!(
        common::procs::until(|| binary::history_files(home.path())
            .iter()
            .any(|f| std::fs::metadata(f).is_ok_and(|m| m.len() > 0)))
        .await,
        "the request reached the history"
    );
    assert_eq!(listed_requests(&dashboard).await, 1);
    let mut output = first.kill();

    // A write cut off by the kill: half a line, no newline.
    let file = binary::history_files(home.path())
        .pop()
        .expect("a history file");
    let mut torn = std::fs::read(&file).expect("history");
    torn.extend_from_slice(b"{\"seq\": 99, \"front\": \"openai_ch");
    std::fs::write(&file, torn).expect("tear the history");

    let second = binary::Serve::start(home.path(), &config);
    assert_eq!(
        listed_requests(&second.dashboard).await,
        1,
        "the request before the kill is still listed"
    );
    let reply = post(&second.gateway, "/v1/chat/completions", ask, &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let dashboard = second.dashboard.clone();
    assert!(
        common::procs::until(|| std::fs::read_to_string(&file)
            .is_ok_and(|t| t.matches("\"model_requested\":\"m-openai\"").count() >= 2))
        .await,
        "the new request reached the history"
    );
    output.push_str(&second.kill());

    // A third start reads both requests back, the torn line skipped.
    let third = binary::Serve::start(home.path(), &config);
    assert_eq!(
        listed_requests(&third.dashboard).await,
        2,
        "{dashboard}: {}",
        std::fs::read_to_string(&file).unwrap_or_default()
    );
    output.push_str(&third.kill());
    assert!(
        output.contains("DEBUG") || output.contains("debug"),
        "debug logging was on: {output}"
    );
    assert!(!output.contains(KEY), "a log line shows the key:\n{output}");
}
