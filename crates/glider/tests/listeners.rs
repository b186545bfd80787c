//! The listening side, black-box on the `glider` binary over real loopback sockets
//! (issue 22, items 5, 9 and 11): clients that send nothing, trickle their head or
//! stall their body are closed (or get a 408 in their dialect) on every port, while a
//! slow stream still arrives whole; SIGTERM drains under its deadline and ends a held
//! stream with the dialect's error event, a second signal exits at once; trace logging
//! with the log file beside the config does not feed itself.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;

use common::output::OutputLines;
use glider_test_support::{MockConfig, MockVendor};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");

/// Longest any step may hang before the test fails instead of waiting for ever (a
/// guard against a hang, not a speed requirement).
const HANG_GUARD: Duration = Duration::from_secs(30);

/// Short client limits so the tests see them act.
const TIGHT: &str = "server: {header_read_timeout_secs: 1, body_read_timeout_secs: 1, idle_timeout_secs: 1, shutdown_grace_secs: 1}\n";

fn write_config(dir: &Path, backend_url: &str, extra: &str) -> PathBuf {
    let path = dir.join("glider.yaml");
    let yaml = format!(
        "backends:\n  - {{name: a, type: anthropic, base_url: '{backend_url}', api_key: k, models: [m]}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n\
         mitm: {{enabled: true, port: 0}}\n{extra}"
    );
    std::fs::write(&path, yaml).expect("write config");
    path
}

fn glider(home: &Path, config: &Path) -> Command {
    let mut command = Command::new(GLIDER);
    command
        .env("GLIDER_HOME", home)
        .env_remove("GLIDER_CONFIG")
        .env_remove("GLIDER_LOG")
        .args(["serve", "--port", "0", "--dashboard-port", "0", "-c"])
        .arg(config);
    command
}

/// `glider serve` with its stdout read line by line, and the three ports it opened.
struct Serve {
    child: Child,
    lines: OutputLines,
    gateway: String,
    dashboard: String,
    mitm: String,
}

impl Serve {
    fn start(home: &Path, config: &Path) -> Serve {
        let mut child = glider(home, config)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn glider serve");
        let lines = OutputLines::of(&mut child);
        let mut serve = Serve {
            child,
            lines,
            gateway: String::new(),
            dashboard: String::new(),
            mitm: String::new(),
        };
        let after = |line: String, prefix: &str| -> String {
            let rest = &line[line.find(prefix).expect("prefix") + prefix.len()..];
            rest.split_whitespace().next().expect("address").to_owned()
        };
        serve.gateway = after(
            serve.wait_for("glider gateway listening on http://"),
            "http://",
        );
        serve.mitm = after(
            serve.wait_for("glider mitm proxy listening on "),
            "listening on ",
        );
        serve.dashboard = after(serve.wait_for("glider dashboard on http://"), "http://");
        serve
    }

    fn wait_for(&mut self, needle: &str) -> String {
        self.lines.wait_for(needle)
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name}");
    }

    /// The exit status, waiting (polled) at most [`HANG_GUARD`].
    fn exit_status(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + HANG_GUARD;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "glider did not exit after the stop signal"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read until the server closes the connection; what it sent. Panics if it stays open.
async fn read_until_closed(stream: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(HANG_GUARD, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "{what}: the connection stayed open");
    got
}

/// Send `head` one byte at a time, a byte every 100 ms, until the server closes the
/// connection (a slowloris); panics if it never does.
async fn trickle_until_closed(addr: &str, head: &[u8]) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let closed = tokio::time::timeout(HANG_GUARD, async {
        let mut buf = [0u8; 64];
        for byte in head.iter().cycle() {
            if stream.write_all(&[*byte]).await.is_err() {
                return;
            }
            if let Ok(read) =
                tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await
            {
                match read {
                    Ok(0) | Err(_) => return,
                    // A 408/400 before the close is fine; the close is what counts.
                    Ok(_) => {}
                }
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "{addr}: a trickled head kept the connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_port_closes_silent_trickling_and_idle_clients() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), "http://127.0.0.1:1", TIGHT);
    let serve = Serve::start(dir.path(), &config);
    for (door, addr) in [
        ("gateway", &serve.gateway),
        ("dashboard", &serve.dashboard),
        ("mitm", &serve.mitm),
    ] {
        // Nothing at all.
        let mut silent = TcpStream::connect(addr.as_str()).await.expect("connect");
        let got = read_until_closed(&mut silent, &format!("{door}, silent client")).await;
        assert!(got.is_empty(), "{door}: {}", String::from_utf8_lossy(&got));

        // A head that never ends, one byte at a time.
        trickle_until_closed(addr, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaa").await;

        // One request answered, then a kept-alive connection left silent.
        let mut idle = TcpStream::connect(addr.as_str()).await.expect("connect");
        idle.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .expect("request");
        let got = read_until_closed(&mut idle, &format!("{door}, idle keep-alive")).await;
        assert!(
            got.starts_with(b"HTTP/1.1 "),
            "{door}: {}",
            String::from_utf8_lossy(&got)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_a_408_in_the_callers_dialect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), "http://127.0.0.1:1", TIGHT);
    let serve = Serve::start(dir.path(), &config);
    for (path, dialect_mark) in [
        ("/v1/messages", "\"type\":\"error\""),
        ("/api/chat", "\"error\":"),
    ] {
        let mut stream = TcpStream::connect(serve.gateway.as_str())
            .await
            .expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"model\""
        );
        stream.write_all(head.as_bytes()).await.expect("send");
        let reply = read_until_closed(&mut stream, path).await;
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 408"), "{path}: {reply}");
        assert!(reply.contains(dialect_mark), "{path}: {reply}");
        assert!(
            reply.contains("server.body_read_timeout_secs"),
            "{path}: {reply}"
        );
    }
}

/// A streamed reply whose deltas are further apart than every client limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_stream_outlasts_the_client_timeouts() {
    let mock = MockVendor::start(MockConfig {
        deltas: 3,
        first_byte_delay: Duration::from_millis(1500),
        delta_delay: Duration::from_millis(1500),
        ..MockConfig::default()
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &mock.base_url(), TIGHT);
    let serve = Serve::start(dir.path(), &config);
    let reply = reqwest::Client::new()
        .post(format!("http://{}/v1/messages", serve.gateway))
        .header("anthropic-version", "2023-06-01")
        .json(&serde_json::json!({
            "model": "m", "max_tokens": 16, "stream": true,
            "messages": [{"role": "user", "content": "slow"}]
        }))
        .send()
        .await
        .expect("send");
    assert_eq!(reply.status(), 200);
    let text = reply.text().await.expect("the whole stream");
    assert!(text.contains("event: message_stop"), "{text}");
    assert!(!text.contains("event: error"), "{text}");
}

/// A streaming request the mock answers with one delta, then holds open for an hour.
async fn held_stream(gateway: &str) -> reqwest::Response {
    let reply = reqwest::Client::new()
        .post(format!("http://{gateway}/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&serde_json::json!({
            "model": "m", "max_tokens": 16, "stream": true,
            "messages": [{"role": "user", "content": "hold it"}]
        }))
        .send()
        .await
        .expect("send");
    assert_eq!(reply.status(), 200);
    reply
}

fn holding_mock() -> MockConfig {
    MockConfig {
        deltas: 3,
        delta_delay: Duration::from_secs(3600),
        ..MockConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_a_held_stream_with_the_dialects_error_event_and_exits() {
    let mock = MockVendor::start(holding_mock()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &mock.base_url(), TIGHT);
    let mut serve = Serve::start(dir.path(), &config);
    let mut reply = held_stream(&serve.gateway).await;
    let first = tokio::time::timeout(HANG_GUARD, reply.chunk())
        .await
        .expect("the first event arrives")
        .expect("read")
        .expect("a chunk");
    assert!(!first.is_empty());

    serve.signal("TERM");
    let rest = tokio::time::timeout(HANG_GUARD, async {
        let mut rest = Vec::new();
        while let Ok(Some(chunk)) = reply.chunk().await {
            rest.extend_from_slice(&chunk);
        }
        rest
    })
    .await
    .expect("the stream ends after the drain deadline");
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("event: error"), "{rest}");
    assert!(rest.contains("server.shutdown_grace_secs"), "{rest}");
    let status = serve.exit_status();
    assert!(status.success(), "an orderly stop: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_at_once() {
    let mock = MockVendor::start(holding_mock()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // A drain far longer than the hang guard: only the second signal can end it.
    let config = write_config(
        dir.path(),
        &mock.base_url(),
        "server: {shutdown_grace_secs: 3600}\n",
    );
    let mut serve = Serve::start(dir.path(), &config);
    let mut reply = held_stream(&serve.gateway).await;
    tokio::time::timeout(HANG_GUARD, reply.chunk())
        .await
        .expect("the first event arrives")
        .expect("read");
    serve.signal("TERM");
    serve.wait_for("shutting down: draining open requests");
    serve.signal("INT");
    let status = serve.exit_status();
    assert!(
        !status.success(),
        "stopped at once, not drained: {status:?}"
    );
}

fn line_count(path: &Path) -> usize {
    std::fs::read(path)
        .map(|bytes| bytes.iter().filter(|b| **b == b'\n').count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_logging_beside_the_config_file_does_not_feed_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), "http://127.0.0.1:1", "");
    let log = dir.path().join("glider.log");
    let file = std::fs::File::create(&log).expect("log file");
    let mut child = glider(dir.path(), &config)
        .env("GLIDER_LOG", "trace")
        .stdout(file.try_clone().expect("clone"))
        .stderr(file)
        .spawn()
        .expect("spawn glider serve");
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("glider dashboard on")
    {
        assert!(std::time::Instant::now() < deadline, "glider did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let at_start = line_count(&log);
    // A short window, polled: each line written is a file event in the watched
    // directory, so a self-feeding log grows by thousands of lines in it.
    let mut grown = 0;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        grown = line_count(&log) - at_start;
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        grown < 500,
        "{grown} lines in the window; the log feeds itself:\n{}",
        text.lines().rev().take(10).collect::<Vec<_>>().join("\n")
    );
    assert!(
        !text.contains("inotify event"),
        "notify's per-event trace got through"
    );
}
