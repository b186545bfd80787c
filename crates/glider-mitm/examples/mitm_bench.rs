//! Load tool for bench/mitm: a minimal TLS origin (`origin`), and a client (`load`) that
//! sends Anthropic-shaped requests directly or through an HTTP CONNECT proxy (Glider,
//! mitmproxy) over kept-alive HTTP/1.1 connections, or one new connection per request,
//! and prints one JSON line of throughput and latency percentiles. Bounded: it stops
//! after `--requests` requests or `--max-seconds`, whichever comes first.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A TLS origin answering every request with a small Messages reply. Writes its CA
    /// to `--ca-out` and prints `origin listening on 127.0.0.1:PORT`.
    Origin {
        #[arg(long)]
        ca_out: PathBuf,
    },
    /// Send requests and print one JSON line of results.
    Load {
        /// `host:port` of the origin as the client names it.
        #[arg(long)]
        target: String,
        /// `ip:port` of an HTTP CONNECT proxy; none: connect directly.
        #[arg(long)]
        proxy: Option<SocketAddr>,
        /// Where to connect without a proxy (default: `--target`).
        #[arg(long)]
        direct: Option<SocketAddr>,
        /// PEM files of CAs to trust (repeat).
        #[arg(long, required = true)]
        ca: Vec<PathBuf>,
        #[arg(long, default_value = "claude-bench")]
        model: String,
        #[arg(long, default_value_t = 8)]
        connections: usize,
        #[arg(long, default_value_t = 2000)]
        requests: u64,
        /// Open a new connection (CONNECT + TLS) for every request.
        #[arg(long)]
        new_connections: bool,
        #[arg(long, default_value_t = 60)]
        max_seconds: u64,
        #[arg(long, default_value = "")]
        label: String,
    },
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Origin { ca_out } => origin(ca_out).await,
        Command::Load {
            target,
            proxy,
            direct,
            ca,
            model,
            connections,
            requests,
            new_connections,
            max_seconds,
            label,
        } => {
            let load = Load {
                issuer: std::sync::OnceLock::new(),
                target,
                proxy,
                direct,
                tls: client_tls(&ca)?,
                body: Bytes::from(request_body(&model)),
                new_connections,
                deadline: Instant::now() + Duration::from_secs(max_seconds),
            };
            run_load(Arc::new(load), connections, requests, label).await
        }
    }
}

async fn origin(ca_out: PathBuf) -> anyhow::Result<()> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Bench Origin CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    std::fs::write(&ca_out, ca_cert.pem())?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?
        .signed_by(&key, &issuer)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("origin listening on {}", listener.local_addr()?);
    let reply = Bytes::from(
        serde_json::json!({
            "id": "msg_bench", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "bench reply"}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 3}
        })
        .to_string(),
    );
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (acceptor, reply) = (acceptor.clone(), reply.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let service = hyper::service::service_fn(move |request: http::Request<_>| {
                let reply = reply.clone();
                async move {
                    let _ = BodyExt::collect(request.into_body()).await;
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(reply))
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

fn client_tls(cas: &[PathBuf]) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for path in cas {
        for cert in
            CertificateDer::pem_file_iter(path).with_context(|| format!("{}", path.display()))?
        {
            roots.add(cert?)?;
        }
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn request_body(model: &str) -> String {
    // About 1 KiB of prompt, like a short coding question.
    let prompt = "Explain what this function does and suggest a better name. ".repeat(16);
    serde_json::json!({
        "model": model,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": prompt}],
    })
    .to_string()
}

struct Load {
    /// Issuer of the first certificate a server presented (proves who terminated TLS).
    issuer: std::sync::OnceLock<String>,
    target: String,
    proxy: Option<SocketAddr>,
    direct: Option<SocketAddr>,
    tls: Arc<rustls::ClientConfig>,
    body: Bytes,
    new_connections: bool,
    deadline: Instant,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

impl Load {
    async fn connect(&self) -> anyhow::Result<Sender> {
        let stream = match self.proxy {
            Some(proxy) => {
                let mut stream = TcpStream::connect(proxy).await?;
                stream
                    .write_all(
                        format!("CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n", t = self.target)
                            .as_bytes(),
                    )
                    .await?;
                read_connect_reply(&mut stream).await?;
                stream
            }
            None => match self.direct {
                Some(addr) => TcpStream::connect(addr).await?,
                None => TcpStream::connect(&self.target).await?,
            },
        };
        stream.set_nodelay(true)?;
        let host = self
            .target
            .rsplit_once(':')
            .map_or(self.target.as_str(), |(h, _)| h);
        let name = ServerName::try_from(host.to_owned())?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, stream)
            .await?;
        if self.issuer.get().is_none()
            && let Some(cert) = tls.get_ref().1.peer_certificates().and_then(|c| c.first())
            && let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert)
        {
            let _ = self.issuer.set(parsed.issuer().to_string());
        }
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        Ok(sender)
    }

    async fn request(&self, sender: &mut Sender) -> anyhow::Result<()> {
        sender.ready().await?;
        let host = self.target.clone();
        let request = http::Request::post("/v1/messages")
            .header("host", host)
            .header("content-type", "application/json")
            .header("x-api-key", "sk-bench")
            .header("anthropic-version", "2023-06-01")
            .body(Full::new(self.body.clone()))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        anyhow::ensure!(
            status.is_success(),
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        );
        Ok(())
    }
}

/// Read a CONNECT reply head exactly (nothing after it belongs to us).
async fn read_connect_reply(stream: &mut TcpStream) -> anyhow::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        anyhow::ensure!(stream.read(&mut byte).await? == 1, "proxy closed");
        head.push(byte[0]);
        anyhow::ensure!(head.len() < 8192, "CONNECT reply too long");
    }
    let text = String::from_utf8_lossy(&head);
    anyhow::ensure!(
        text.split_whitespace().nth(1) == Some("200"),
        "CONNECT refused: {text}"
    );
    Ok(())
}

async fn run_load(
    load: Arc<Load>,
    connections: usize,
    requests: u64,
    label: String,
) -> anyhow::Result<()> {
    let tickets = Arc::new(AtomicI64::new(requests as i64));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (load, tickets, errors) = (load.clone(), tickets.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut sender: Option<Sender> = None;
            let mut first_error = None;
            while tickets.fetch_sub(1, Ordering::Relaxed) > 0 && Instant::now() < load.deadline {
                let start = Instant::now();
                let result = async {
                    if sender.is_none() || load.new_connections {
                        sender = Some(load.connect().await?);
                    }
                    match &mut sender {
                        Some(s) => load.request(s).await,
                        None => anyhow::bail!("no connection"),
                    }
                }
                .await;
                match result {
                    Ok(()) => latencies.push(start.elapsed()),
                    Err(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        first_error.get_or_insert_with(|| format!("{e:#}"));
                        sender = None;
                    }
                }
            }
            (latencies, first_error)
        }));
    }
    let mut all = Vec::new();
    let mut first_error = None;
    for task in tasks {
        let (latencies, error) = task.await?;
        all.extend(latencies);
        first_error = first_error.or(error);
    }
    let seconds = started.elapsed().as_secs_f64();
    all.sort();
    let pick = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let mean = if all.is_empty() {
        0.0
    } else {
        all.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / all.len() as f64
    };
    println!(
        "{}",
        serde_json::json!({
            "label": label,
            "server_cert_issuer": load.issuer.get(),
            "ok": all.len(),
            "errors": errors.load(Ordering::Relaxed),
            "first_error": first_error,
            "connections": connections,
            "new_connections": load.new_connections,
            "seconds": seconds,
            "rps": all.len() as f64 / seconds,
            "mean_ms": mean,
            "p50_ms": pick(0.50),
            "p90_ms": pick(0.90),
            "p99_ms": pick(0.99),
        })
    );
    Ok(())
}
