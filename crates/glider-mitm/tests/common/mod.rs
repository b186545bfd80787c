//! Harness for the MITM black-box tests (and the benchmark): a TLS "origin" on
//! 127.0.0.1:0 with its own test CA, Glider's proxy in front of an engine whose local
//! backend is a mock vendor, and a client that speaks CONNECT, TLS and HTTP/1.1 or
//! HTTP/2 by hand so each test controls the version, the trusted roots and sees the
//! certificate it was shown.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use glider_config::{Config, ConfigHandle};
use glider_engine::Engine;
use glider_mitm::Mitm;
use glider_test_support::{MockConfig, MockVendor};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Every network step of a test is bounded by this.
pub const STEP: Duration = Duration::from_secs(10);

pub async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: took longer than {STEP:?}"))
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A CA for the test origin, separate from Glider's.
pub struct TestCa {
    pub pem: String,
    pub der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "Test Origin CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("self-signed");
        TestCa {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for `names`, with its key.
    pub fn leaf(&self, names: &[&str]) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().expect("key");
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (
            cert.der().clone(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
    }
}

/// A request the origin received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path_and_query: String,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// The TLS origin: answers Anthropic-ish replies and records what it saw. A streamed
/// reply sends its first part, then waits for [`Origin::release`] before the rest, so a
/// test can prove the first part reached the client while the origin was still busy.
pub struct Origin {
    pub addr: SocketAddr,
    pub cert: CertificateDer<'static>,
    seen: Arc<Mutex<Vec<Seen>>>,
    gate: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub const ORIGIN_NAMES: [&str; 4] = ["api.anthropic.com", "tunnel.test", "localhost", "127.0.0.1"];

impl Origin {
    pub async fn start(ca: &TestCa) -> Origin {
        let (cert, key) = ca.leaf(&ORIGIN_NAMES);
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .expect("server config");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Notify::new());
        let (task_seen, task_gate) = (seen.clone(), gate.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let (seen, gate) = (task_seen.clone(), task_gate.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        origin_reply(request, seen.clone(), gate.clone())
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Origin {
            addr,
            cert,
            seen,
            gate,
            task,
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    pub fn clear(&self) {
        self.seen.lock().expect("lock").clear();
    }

    /// Let a waiting streamed reply finish.
    pub fn release(&self) {
        self.gate.notify_one();
    }
}

type OriginBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

async fn origin_reply(
    mut request: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    gate: Arc<Notify>,
) -> Result<Response<OriginBody>, std::convert::Infallible> {
    // `Upgrade: echo-test`: switch protocols and echo every byte back.
    if request
        .headers()
        .get("upgrade")
        .is_some_and(|v| v == "echo-test")
    {
        seen.lock().expect("lock").push(Seen {
            method: request.method().to_string(),
            path_and_query: request.uri().to_string(),
            version: request.version(),
            headers: request.headers().clone(),
            body: Bytes::new(),
        });
        let upgrade = hyper::upgrade::on(&mut request);
        tokio::spawn(async move {
            if let Ok(upgraded) = upgrade.await {
                let (mut reader, mut writer) = tokio::io::split(TokioIo::new(upgraded));
                let _ = tokio::io::copy(&mut reader, &mut writer).await;
            }
        });
        return Ok(Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header("connection", "upgrade")
            .header("upgrade", "echo-test")
            .body(Full::new(Bytes::new()).boxed())
            .expect("response"));
    }
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    seen.lock().expect("lock").push(Seen {
        method: parts.method.to_string(),
        path_and_query: path_and_query.clone(),
        version: parts.version,
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let streamed = json["stream"].as_bool() == Some(true) || parts.uri.path() == "/stream";
    let builder = Response::builder().header("x-origin", "yes");
    if streamed {
        let (first, rest) = if parts.uri.path() == "/stream" {
            ("one\n".to_owned(), "two\n".to_owned())
        } else {
            anthropic_sse("from-origin")
        };
        let stream = futures_util::stream::unfold(0u8, move |step| {
            let (first, rest, gate) = (first.clone(), rest.clone(), gate.clone());
            async move {
                match step {
                    0 => Some((Ok(hyper::body::Frame::data(Bytes::from(first))), 1)),
                    1 => {
                        gate.notified().await;
                        Some((Ok(hyper::body::Frame::data(Bytes::from(rest))), 2))
                    }
                    _ => None,
                }
            }
        });
        let content_type = if parts.uri.path() == "/stream" {
            "text/plain"
        } else {
            "text/event-stream"
        };
        let body = http_body_util::StreamBody::new(stream).boxed();
        return Ok(builder
            .header("content-type", content_type)
            .body(body)
            .expect("response"));
    }
    let reply = if parts.uri.path() == "/v1/messages" {
        serde_json::json!({
            "id": "msg_origin", "type": "message", "role": "assistant",
            "model": json["model"], "stop_reason": "end_turn", "stop_sequence": null,
            "content": [{"type": "text", "text": "from-origin"}],
            "usage": {"input_tokens": 3, "output_tokens": 2}
        })
    } else {
        serde_json::json!({"origin": true, "path": path_and_query})
    };
    let status = if parts.method == http::Method::HEAD {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::OK
    };
    Ok(builder
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(reply.to_string())).boxed())
        .expect("response"))
}

/// An Anthropic SSE reply split in two: up to the first text delta, then the rest.
pub fn anthropic_sse(text: &str) -> (String, String) {
    let event = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
    let first = [
        event("message_start", serde_json::json!({"type": "message_start", "message": {"id": "msg_origin", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 3, "output_tokens": 0}}})),
        event("content_block_start", serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        event("content_block_delta", serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})),
    ]
    .concat();
    let rest = [
        event("content_block_stop", serde_json::json!({"type": "content_block_stop", "index": 0})),
        event("message_delta", serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 2}})),
        event("message_stop", serde_json::json!({"type": "message_stop"})),
    ]
    .concat();
    (first, rest)
}

/// Glider's proxy, an engine behind it with a mock local backend, and the origin.
pub struct Stack {
    pub proxy: SocketAddr,
    pub mitm: Arc<Mitm>,
    pub engine: Arc<Engine>,
    pub config: ConfigHandle,
    pub origin: Origin,
    pub origin_ca: TestCa,
    pub mock: MockVendor,
    pub home: tempfile::TempDir,
    pub yaml: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The test config: `claude-local*` answered by the mock (as Ollama), `claude-down*`
/// by a backend that is not running, everything else not local (so: the origin).
pub fn stack_yaml(mock: &MockVendor, origin: SocketAddr, ca_file: &str, extra: &str) -> String {
    format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{mock}', models: [qwen-local]}}\n\
         \x20 - {{name: down, type: ollama, base_url: 'http://127.0.0.1:1', models: [qwen-down], connect_timeout_secs: 2}}\n\
         model_aliases: {{'claude-local*': qwen-local, 'claude-down*': qwen-down}}\n\
         routing: {{cloud_fallback: false}}\n\
         mitm:\n\
         \x20 enabled: true\n\
         \x20 port: 0\n\
         \x20 hosts: [api.anthropic.com, '*.intercepted.test']\n\
         \x20 upstream_overrides: {{api.anthropic.com: '{origin}', tunnel.test: '{origin}', localhost: '{origin}', plain.test: '{mock_addr}'}}\n\
         \x20 upstream_ca_file: '{ca_file}'\n{extra}",
        mock = mock.base_url(),
        mock_addr = mock.addr,
    )
}

pub async fn stack(extra: &str) -> Stack {
    let home = tempfile::tempdir().expect("tempdir");
    let origin_ca = TestCa::new();
    let ca_file = home.path().join("origin-ca.pem");
    std::fs::write(&ca_file, &origin_ca.pem).expect("write ca");
    let origin = Origin::start(&origin_ca).await;
    let mock = MockVendor::start(MockConfig::default()).await;
    let yaml = stack_yaml(&mock, origin.addr, &ca_file.display().to_string(), extra);
    let config = Config::parse(&yaml, "test").expect("valid test config");
    let handle = ConfigHandle::new(config, None);
    let engine = Engine::new(handle.clone());
    engine.follow_config();
    let mitm = Mitm::new(engine.clone(), home.path()).expect("mitm");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(mitm.clone().serve(listener, async {
        let _ = rx.await;
    }));
    Stack {
        proxy,
        mitm,
        engine,
        config: handle,
        origin,
        origin_ca,
        mock,
        home,
        yaml,
        shutdown: Some(tx),
    }
}

impl Stack {
    /// Glider's CA certificate.
    pub fn glider_ca(&self) -> CertificateDer<'static> {
        glider_mitm::ca::first_certificate(self.mitm.authority().cert_pem()).expect("ca der")
    }

    /// Change hot config keys by appending YAML to the running config.
    pub fn apply(&self, extra_mitm: &str) {
        let yaml = format!("{}{extra_mitm}", self.yaml);
        let config = Config::parse(&yaml, "test").expect("valid");
        self.config.apply(config);
    }
}

/// `CONNECT host:port` on a fresh connection to the proxy; returns the status line's
/// code and, on 200, the open stream.
pub async fn connect(proxy: SocketAddr, authority: &str) -> (u16, String, TcpStream) {
    let mut stream = bounded("connect to proxy", TcpStream::connect(proxy))
        .await
        .expect("proxy accepts");
    stream
        .write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .expect("write CONNECT");
    // Read the head byte by byte: nothing after it may be consumed (the tunnel starts).
    let mut reader = BufReader::with_capacity(1, stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        bounded("CONNECT reply", reader.read_line(&mut line))
            .await
            .expect("read");
        if line.is_empty() || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head, reader.into_inner())
}

/// TLS over an open tunnel, trusting only `roots`, offering `alpn`. Returns the stream
/// and the certificate the server presented.
pub async fn tls(
    stream: TcpStream,
    host: &str,
    roots: &[CertificateDer<'static>],
    alpn: &[&[u8]],
) -> Result<
    (
        tokio_rustls::client::TlsStream<TcpStream>,
        CertificateDer<'static>,
    ),
    std::io::Error,
> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(root.clone()).expect("root");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from(host.to_owned()).expect("server name");
    let tls = bounded("TLS handshake", connector.connect(name, stream)).await?;
    let presented = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first().cloned())
        .expect("a server certificate");
    Ok((tls, presented))
}

/// Which HTTP version the client speaks inside the tunnel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Http {
    One,
    Two,
}

/// A client on one decrypted or tunnelled connection.
pub enum Client {
    One(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    Two(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// CONNECT to `host:443` through the proxy, TLS trusting `roots`, then HTTP/1.1 or /2.
pub async fn client(
    proxy: SocketAddr,
    host: &str,
    roots: &[CertificateDer<'static>],
    http: Http,
) -> (Client, CertificateDer<'static>) {
    let (code, head, stream) = connect(proxy, &format!("{host}:443")).await;
    assert_eq!(code, 200, "CONNECT {host}: {head}");
    let alpn: &[&[u8]] = match http {
        Http::One => &[b"http/1.1"],
        Http::Two => &[b"h2"],
    };
    let (tls, presented) = tls(stream, host, roots, alpn)
        .await
        .expect("TLS through the proxy");
    let io = TokioIo::new(tls);
    let client = match http {
        Http::One => {
            let (sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("h1 handshake");
            tokio::spawn(connection.with_upgrades());
            Client::One(sender)
        }
        Http::Two => {
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("h2 handshake");
            tokio::spawn(connection);
            Client::Two(sender)
        }
    };
    (client, presented)
}

impl Client {
    /// Send a request and return the response with its body still streaming.
    pub async fn send(&mut self, request: Request<Full<Bytes>>) -> Response<Incoming> {
        let future = async {
            match self {
                Client::One(sender) => {
                    sender.ready().await.expect("ready");
                    sender.send_request(request).await
                }
                Client::Two(sender) => {
                    sender.ready().await.expect("ready");
                    sender.send_request(request).await
                }
            }
        };
        bounded("response head", future).await.expect("a response")
    }

    /// Send and read the whole body.
    pub async fn fetch(&mut self, request: Request<Full<Bytes>>) -> (Response<()>, Bytes) {
        let response = self.send(request).await;
        let (parts, body) = response.into_parts();
        let body = bounded("response body", body.collect())
            .await
            .expect("body")
            .to_bytes();
        (Response::from_parts(parts, ()), body)
    }
}

/// A request with `body` to `https://host{path}` (the URI form each version expects).
pub fn request(
    http: Http,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Request<Full<Bytes>> {
    let uri = match http {
        Http::One => path.to_owned(),
        Http::Two => format!("https://{host}{path}"),
    };
    let mut builder = Request::builder().method(method).uri(uri);
    if http == Http::One {
        builder = builder.header("host", host);
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::new(body.into())).expect("request")
}

/// An Anthropic Messages body.
pub fn messages_body(model: &str, text: &str, stream: bool) -> String {
    serde_json::json!({
        "model": model,
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    })
    .to_string()
}

pub fn home_file(stack: &Stack, rel: &str) -> PathBuf {
    stack.home.path().join(rel)
}
