//! `glider-load`: the closed-loop HTTP load client of `bench/run.sh` for what wrk cannot
//! do — streaming time to first/last byte, requests through a CONNECT proxy with TLS
//! (a MITM's decrypted path, trusting its CA) and plain HTTP through a raw CONNECT
//! tunnel. Each of `--connections` workers owns one connection and sends its requests
//! one after another for `--duration` seconds (or until `--max-requests`). Prints one
//! line `BENCH_JSON {...}` with requests/s and latency percentiles in microseconds.
//!
//! ```text
//! glider-load --url URL --body FILE [--connections N] [--duration S] [--warmup S]
//!             [--max-requests N] [--header 'name: value']... [--proxy http://H:P]
//!             [--ca PEM] [--tunnel] [--expect TEXT]
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use glider_bench::{Flags, summary};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

struct Opts {
    url: String,
    body: Bytes,
    connections: u64,
    max_requests: u64,
    headers: Vec<(String, String)>,
    proxy: Option<String>,
    ca: Option<Vec<u8>>,
    tunnel: bool,
    expect: Option<String>,
}

/// One finished request: total latency and time to the first body byte (µs).
#[derive(Default)]
struct Samples {
    latency: Vec<u64>,
    ttfb: Vec<u64>,
    errors: u64,
    bytes: u64,
    first_error: Option<String>,
    first_body: Option<String>,
}

fn parse() -> Result<(Opts, Duration, Duration), String> {
    let flags = Flags::parse(std::env::args().skip(1), &["tunnel"])?;
    let url = flags.get("url").ok_or("--url is required")?.to_owned();
    let body_path = flags.get("body").ok_or("--body is required")?;
    let body = std::fs::read(body_path).map_err(|e| format!("--body {body_path}: {e}"))?;
    let headers = flags
        .all("header")
        .into_iter()
        .map(|h| {
            h.split_once(':')
                .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| format!("--header {h:?}: expected 'name: value'"))
        })
        .collect::<Result<_, _>>()?;
    let ca = match flags.get("ca") {
        Some(path) => Some(std::fs::read(path).map_err(|e| format!("--ca {path}: {e}"))?),
        None => None,
    };
    let opts = Opts {
        url,
        body: Bytes::from(body),
        connections: flags.number("connections", 1)?.max(1),
        max_requests: flags.number("max-requests", u64::MAX)?,
        headers,
        proxy: flags.get("proxy").map(str::to_owned),
        ca,
        tunnel: flags.switch("tunnel"),
        expect: flags.get("expect").map(str::to_owned),
    };
    if opts.tunnel && opts.proxy.is_none() {
        return Err("--tunnel needs --proxy".into());
    }
    let duration = Duration::from_secs(flags.number("duration", 10)?);
    let warmup = Duration::from_secs(flags.number("warmup", 1)?);
    Ok((opts, duration, warmup))
}

fn client(opts: &Opts) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30));
    builder = match &opts.proxy {
        Some(proxy) => builder.proxy(reqwest::Proxy::all(proxy).map_err(|e| e.to_string())?),
        None => builder.no_proxy(),
    };
    if let Some(pem) = &opts.ca {
        let cert = reqwest::Certificate::from_pem(pem).map_err(|e| format!("--ca: {e}"))?;
        builder = builder.tls_certs_only([cert]);
    }
    builder.build().map_err(|e| e.to_string())
}

/// One request through reqwest: (latency, ttfb, bytes, body start when asked).
async fn request_reqwest(
    client: &reqwest::Client,
    opts: &Opts,
    keep_body: bool,
) -> Result<(u64, u64, u64, Option<String>), String> {
    let start = Instant::now();
    let mut builder = client.post(&opts.url).body(opts.body.clone());
    builder = builder.header("content-type", "application/json");
    for (name, value) in &opts.headers {
        builder = builder.header(name, value);
    }
    let mut response = builder
        .send()
        .await
        .map_err(|e| glider_backend::health::error_chain(&e))?;
    let status = response.status();
    let mut ttfb = None;
    let mut bytes = 0u64;
    let mut kept = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| glider_backend::health::error_chain(&e))?
    {
        if chunk.is_empty() {
            continue;
        }
        ttfb.get_or_insert_with(|| start.elapsed().as_micros() as u64);
        bytes += chunk.len() as u64;
        if (keep_body || !status.is_success()) && kept.len() < 600 {
            kept.extend_from_slice(&chunk);
        }
    }
    let latency = start.elapsed().as_micros() as u64;
    if !status.is_success() {
        return Err(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&kept[..kept.len().min(300)])
        ));
    }
    let body = keep_body.then(|| String::from_utf8_lossy(&kept).into_owned());
    Ok((latency, ttfb.unwrap_or(latency), bytes, body))
}

/// A connection through a raw CONNECT tunnel speaking plain HTTP/1.1 to the target.
struct Tunnel {
    reader: BufReader<tokio::io::ReadHalf<TcpStream>>,
    writer: tokio::io::WriteHalf<TcpStream>,
    host: String,
    path: String,
}

impl Tunnel {
    async fn open(opts: &Opts) -> Result<Tunnel, String> {
        let proxy = opts.proxy.as_deref().unwrap_or_default();
        let proxy_addr = proxy.trim_start_matches("http://").trim_end_matches('/');
        let rest = opts
            .url
            .strip_prefix("http://")
            .ok_or("--tunnel wants an http:// --url")?;
        let (host, path) = match rest.find('/') {
            Some(at) => (rest[..at].to_owned(), rest[at..].to_owned()),
            None => (rest.to_owned(), "/".to_owned()),
        };
        let stream = TcpStream::connect(proxy_addr)
            .await
            .map_err(|e| format!("connect {proxy_addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (read, mut writer) = tokio::io::split(stream);
        let mut reader = BufReader::new(read);
        writer
            .write_all(format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let (status, _) = read_head(&mut reader).await?;
        if !status.contains(" 200") {
            return Err(format!("CONNECT refused: {status}"));
        }
        Ok(Tunnel {
            reader,
            writer,
            host,
            path,
        })
    }

    async fn request(&mut self, opts: &Opts) -> Result<(u64, u64, u64, Vec<u8>), String> {
        let start = Instant::now();
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            self.path,
            self.host,
            opts.body.len()
        );
        for (name, value) in &opts.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        self.writer
            .write_all(head.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        self.writer
            .write_all(&opts.body)
            .await
            .map_err(|e| e.to_string())?;
        let (status, length) = read_head(&mut self.reader).await?;
        let ttfb = start.elapsed().as_micros() as u64;
        let length = length.ok_or("reply without content-length (not supported in --tunnel)")?;
        let mut body = vec![0u8; length];
        self.reader
            .read_exact(&mut body)
            .await
            .map_err(|e| e.to_string())?;
        if !status.contains(" 200") {
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        Ok((
            start.elapsed().as_micros() as u64,
            ttfb,
            length as u64,
            body,
        ))
    }
}

/// Read a response head: (status line, content-length).
async fn read_head(
    reader: &mut BufReader<tokio::io::ReadHalf<TcpStream>>,
) -> Result<(String, Option<usize>), String> {
    let mut status = String::new();
    if reader
        .read_line(&mut status)
        .await
        .map_err(|e| e.to_string())?
        == 0
    {
        return Err("connection closed".into());
    }
    let mut length = None;
    for _ in 0..200 {
        let mut line = String::new();
        if reader
            .read_line(&mut line)
            .await
            .map_err(|e| e.to_string())?
            == 0
        {
            return Err("connection closed in headers".into());
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok((status.trim_end().to_owned(), length));
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok();
        }
    }
    Err("too many header lines".into())
}

async fn worker(opts: Arc<Opts>, deadline: Instant, issued: Arc<AtomicU64>) -> Samples {
    let mut samples = Samples::default();
    let fail = |samples: &mut Samples, e: String| {
        samples.errors += 1;
        samples.first_error.get_or_insert(e);
    };
    let http = if opts.tunnel {
        None
    } else {
        match client(&opts) {
            Ok(c) => Some(c),
            Err(e) => {
                fail(&mut samples, e);
                return samples;
            }
        }
    };
    let mut tunnel: Option<Tunnel> = None;
    while Instant::now() < deadline && issued.fetch_add(1, Ordering::Relaxed) < opts.max_requests {
        let keep = samples.first_body.is_none();
        let outcome = match &http {
            Some(client) => request_reqwest(client, &opts, keep).await,
            None => {
                if tunnel.is_none() {
                    match Tunnel::open(&opts).await {
                        Ok(t) => tunnel = Some(t),
                        Err(e) => {
                            fail(&mut samples, e);
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    }
                }
                let Some(t) = tunnel.as_mut() else { continue };
                match t.request(&opts).await {
                    Ok((lat, ttfb, n, body)) => Ok((
                        lat,
                        ttfb,
                        n,
                        keep.then(|| String::from_utf8_lossy(&body).into()),
                    )),
                    Err(e) => {
                        tunnel = None;
                        Err(e)
                    }
                }
            }
        };
        match outcome {
            Ok((latency, ttfb, bytes, body)) => {
                samples.latency.push(latency);
                samples.ttfb.push(ttfb);
                samples.bytes += bytes;
                if let Some(body) = body {
                    samples.first_body = Some(body);
                }
            }
            Err(e) => {
                fail(&mut samples, e);
                // Do not spin on a dead target.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    samples
}

async fn run(opts: Arc<Opts>, duration: Duration) -> Samples {
    let start = Instant::now();
    let deadline = start + duration;
    let issued = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..opts.connections)
        .map(|_| tokio::spawn(worker(opts.clone(), deadline, issued.clone())))
        .collect();
    let mut all = Samples::default();
    for handle in handles {
        if let Ok(s) = handle.await {
            all.latency.extend(s.latency);
            all.ttfb.extend(s.ttfb);
            all.errors += s.errors;
            all.bytes += s.bytes;
            if all.first_error.is_none() {
                all.first_error = s.first_error;
            }
            if all.first_body.is_none() {
                all.first_body = s.first_body;
            }
        }
    }
    all
}

#[tokio::main]
async fn main() -> ExitCode {
    let (opts, duration, warmup) = match parse() {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("glider-load: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = Arc::new(opts);
    if !warmup.is_zero() {
        run(opts.clone(), warmup).await;
    }
    let start = Instant::now();
    let mut samples = run(opts.clone(), duration).await;
    let elapsed = start.elapsed().as_secs_f64();
    let expected = match (&opts.expect, &samples.first_body) {
        (Some(text), Some(body)) => Some(body.contains(text.as_str())),
        (Some(_), None) => Some(false),
        _ => None,
    };
    let requests = samples.latency.len() as u64;
    let out = json!({
        "requests": requests,
        "errors": samples.errors,
        "duration_s": (elapsed * 1000.0).round() / 1000.0,
        "rps": ((requests as f64 / elapsed) * 10.0).round() / 10.0,
        "bytes": samples.bytes,
        "latency_us": summary(&mut samples.latency),
        "ttfb_us": summary(&mut samples.ttfb),
        "first_error": samples.first_error,
        "expected_reply": expected,
        "first_body": samples.first_body.map(|b| b.chars().take(300).collect::<String>()),
    });
    println!("BENCH_JSON {out}");
    if requests == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
