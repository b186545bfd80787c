//! Harness for the dashboard's black-box tests: a mock vendor, the engine, the gateway
//! and the dashboard, each served on 127.0.0.1:0 in this process; HTTP and WebSocket
//! helpers; polling helpers that wait on observable state, never on a sleep.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use glider_config::{Config, ConfigHandle};
use glider_dashboard::{Dashboard, Door, Options};
use glider_engine::Engine;
use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

pub struct Stack {
    pub mock: MockVendor,
    pub engine: Arc<Engine>,
    pub config: ConfigHandle,
    pub dashboard: Dashboard,
    pub gateway: String,
    pub base: String,
    pub home: PathBuf,
    /// One client for the stack's requests (building one per request is slow).
    pub http: reqwest::Client,
    pub _tmp: Option<tempfile::TempDir>,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
    }
}

/// Backends on the mock: a local Ollama and a cloud Anthropic.
pub fn yaml(mock_url: &str, extra: &str) -> String {
    format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{mock_url}', models: [m-local]}}\n\
         \x20 - {{name: cloud, type: anthropic, base_url: '{mock_url}', api_key: sk-secret-key-123, headers: {{x-team: hv-secret-456}}, models: [m-cloud]}}\n\
         routing: {{cloud_fallback: false}}\n{extra}"
    )
}

pub struct Setup {
    /// Extra YAML appended to the config.
    pub extra: String,
    /// Write the config to a file (so it can be reloaded) instead of passing it inline.
    pub file: bool,
    /// GLIDER_HOME; a fresh temporary directory when `None`.
    pub home: Option<PathBuf>,
    pub customize: Box<dyn FnOnce(&mut Options)>,
    /// SO_SNDBUF of the dashboard's sockets (small: a client that does not read blocks
    /// the server's writes sooner).
    pub send_buffer: Option<u32>,
    /// Start the engine's background tasks as `glider serve` does (the config follower,
    /// the local backends' health probes, the speed book following the bus) instead of
    /// the config follower alone.
    pub background: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            extra: String::new(),
            file: false,
            home: None,
            customize: Box::new(|_| {}),
            send_buffer: None,
            background: false,
        }
    }
}

pub async fn start(setup: Setup) -> Stack {
    let mock = MockVendor::start(MockConfig::default()).await;
    start_with(mock, setup).await
}

pub async fn start_with(mock: MockVendor, setup: Setup) -> Stack {
    let (tmp, home) = match setup.home {
        Some(home) => (None, home),
        None => {
            let tmp = tempfile::tempdir().expect("tempdir");
            let home = tmp.path().to_path_buf();
            (Some(tmp), home)
        }
    };
    let text = yaml(&mock.base_url(), &setup.extra);
    let config = Config::parse(&text, "test").expect("valid test config");
    let path = setup.file.then(|| {
        let path = home.join("glider.yaml");
        std::fs::write(&path, &text).expect("write config");
        path
    });
    let baseline = path.as_ref().map(|_| Arc::new(config.clone()));
    let handle = ConfigHandle::new(config, path);
    let engine = Engine::new(handle.clone());
    if setup.background {
        engine.spawn_background();
    } else {
        engine.follow_config();
    }

    let gateway_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    if let Some(size) = setup.send_buffer {
        // Accepted sockets inherit it (Linux), and a set size is not auto-tuned.
        socket.set_send_buffer_size(size).expect("SO_SNDBUF");
    }
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let dashboard_listener = socket.listen(64).expect("listen");
    start_on(
        mock,
        engine,
        handle,
        gateway_listener,
        dashboard_listener,
        home,
        tmp,
        baseline,
        setup.customize,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
pub async fn start_on(
    mock: MockVendor,
    engine: Arc<Engine>,
    handle: ConfigHandle,
    gateway_listener: tokio::net::TcpListener,
    dashboard_listener: tokio::net::TcpListener,
    home: PathBuf,
    tmp: Option<tempfile::TempDir>,
    baseline: Option<Arc<Config>>,
    customize: Box<dyn FnOnce(&mut Options)>,
) -> Stack {
    let dashboard_addr = dashboard_listener.local_addr().expect("addr");
    let gateway_addr = gateway_listener.local_addr().expect("addr");
    let mut options = Options::new(home.clone());
    options.doors = vec![
        Door {
            name: "gateway".into(),
            url: format!("http://{gateway_addr}"),
        },
        Door {
            name: "dashboard".into(),
            url: format!("http://{dashboard_addr}"),
        },
    ];
    options.baseline = baseline;
    customize(&mut options);
    let dashboard = Dashboard::start(engine.clone(), options).expect("dashboard starts");

    let (gateway_stop, gateway_stopped) = tokio::sync::oneshot::channel::<()>();
    let serve_engine = engine.clone();
    tokio::spawn(async move {
        let _ = glider_gateway::serve(gateway_listener, serve_engine, async {
            let _ = gateway_stopped.await;
        })
        .await;
    });
    let (dashboard_stop, dashboard_stopped) = tokio::sync::oneshot::channel::<()>();
    let served = dashboard.clone();
    tokio::spawn(async move {
        let _ = served
            .serve(dashboard_listener, async {
                let _ = dashboard_stopped.await;
            })
            .await;
    });
    Stack {
        mock,
        engine,
        config: handle,
        dashboard,
        gateway: format!("http://{gateway_addr}"),
        base: format!("http://{dashboard_addr}"),
        home,
        http: client(),
        _tmp: tmp,
        stops: vec![gateway_stop, dashboard_stop],
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

pub async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.expect("server answers");
    Reply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        text: response.text().await.expect("body"),
    }
}

impl Stack {
    pub async fn get(&self, path: &str) -> Reply {
        send(self.http.get(format!("{}{path}", self.base))).await
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let reply = self.get(path).await;
        assert_eq!(reply.status, 200, "GET {path}: {}", reply.text);
        reply.json()
    }

    pub async fn post(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = self.http.post(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        send(request).await
    }

    /// One Anthropic Messages request through the gateway for `model`.
    pub async fn ask(&self, model: &str, stream: bool) -> Reply {
        let body = json!({
            "model": model,
            "max_tokens": 64,
            "stream": stream,
            "messages": [{"role": "user", "content": "say something short"}],
        });
        send(
            self.http
                .post(format!("{}/v1/messages", self.gateway))
                .header("content-type", "application/json")
                .header("user-agent", "dashboard-test/1.0")
                .body(body.to_string()),
        )
        .await
    }

    /// Wait until `check` holds for `/api/status` (polled; 20 s at most).
    pub async fn wait_status(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let status = self.get_json("/api/status").await;
            if check(&status) {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {status}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Wait until `n` requests have finished (as the collector counts them).
    pub async fn wait_finished(&self, n: u64) -> Value {
        self.wait_status(&format!("{n} finished requests"), |s| {
            s["events"]["last_seq"].as_u64() >= Some(n)
        })
        .await
    }

    /// Wait until the history writer has written `n` lines.
    pub async fn wait_written(&self, n: u64) -> Value {
        self.wait_status(&format!("{n} history lines"), |s| {
            s["history"]["written"].as_u64() >= Some(n)
        })
        .await
    }

    pub fn ws_url(&self, query: &str) -> String {
        format!("{}/ws{query}", self.base.replacen("http://", "ws://", 1))
    }

    /// Open `/ws` and read its `hello`.
    pub async fn ws(&self) -> Ws {
        let (mut socket, _) = tokio_tungstenite::connect_async(self.ws_url(""))
            .await
            .expect("ws handshake");
        let hello = next_event(&mut socket).await;
        assert_eq!(hello["type"], "hello", "{hello}");
        socket
    }
}

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next JSON event on a socket (10 s at most).
pub async fn next_event<S>(socket: &mut tokio_tungstenite::WebSocketStream<S>) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("an event within 10 s")
            .expect("socket open")
            .expect("socket healthy");
        match message {
            Message::Text(text) => return serde_json::from_str(&text).expect("JSON event"),
            Message::Close(frame) => panic!("socket closed: {frame:?}"),
            _ => continue,
        }
    }
}

/// Read events until one satisfies `check`; return it.
pub async fn wait_event<S>(
    socket: &mut tokio_tungstenite::WebSocketStream<S>,
    check: impl Fn(&Value) -> bool,
) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let event = next_event(socket).await;
        if check(&event) {
            return event;
        }
    }
}

pub fn history_files(home: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home.join("history"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
