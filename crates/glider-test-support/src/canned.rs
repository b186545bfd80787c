//! A loopback HTTP/1.1 server that answers each request with what a closure returns for
//! it, and records what it received: for tests that need a server no mock vendor is — a
//! llama.cpp or Open WebUI look-alike for a port scanner, an origin answering a fixed
//! status or a redirect, a backend scripted to cut a reply. One request per connection
//! (`connection: close`), the body read by its `content-length`.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the server read it.
#[derive(Clone, Debug)]
pub struct CannedRequest {
    /// The request line and the header lines, as sent (without the blank line).
    pub head: String,
    pub path: String,
    pub body: Vec<u8>,
}

impl CannedRequest {
    /// The body as JSON (`Null` when empty or not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// A header's value (names compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// What the server answers.
#[derive(Clone, Debug)]
pub struct CannedReply {
    pub status: u16,
    /// Extra header lines (`content-type`, `content-length` and `connection` are written).
    pub headers: Vec<(String, String)>,
    pub content_type: String,
    pub body: String,
}

impl CannedReply {
    /// A JSON reply with `status`.
    pub fn json(status: u16, body: impl ToString) -> CannedReply {
        CannedReply::with_type(status, "application/json", body)
    }

    /// A reply with `status`, `content_type` and `body`.
    pub fn with_type(status: u16, content_type: &str, body: impl ToString) -> CannedReply {
        CannedReply {
            status,
            headers: Vec::new(),
            content_type: content_type.to_owned(),
            body: body.to_string(),
        }
    }

    /// This reply with one more header line.
    pub fn header(mut self, name: &str, value: &str) -> CannedReply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// The running server; it serves until the test's runtime ends.
pub struct CannedServer {
    pub port: u16,
    requests: Arc<Mutex<Vec<CannedRequest>>>,
}

impl CannedServer {
    /// Start on an ephemeral loopback port, answering each request with `answer(request)`.
    pub async fn start<F>(answer: F) -> CannedServer
    where
        F: Fn(&CannedRequest) -> CannedReply + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (seen, answer) = (requests.clone(), Arc::new(answer));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (seen, answer) = (seen.clone(), answer.clone());
                tokio::spawn(async move {
                    let mut stream = stream;
                    let Some(request) = read_request(&mut stream).await else {
                        return;
                    };
                    let reply = answer(&request);
                    seen.lock().expect("lock").push(request);
                    let _ = stream.write_all(render(&reply).as_bytes()).await;
                });
            }
        });
        CannedServer { port, requests }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request answered so far, oldest first.
    pub fn requests(&self) -> Vec<CannedRequest> {
        self.requests.lock().expect("lock").clone()
    }
}

/// The reason phrase is not read by clients; one for the common codes keeps logs readable.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        307 => "Temporary Redirect",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Status",
    }
}

fn render(reply: &CannedReply) -> String {
    let mut out = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        out += &format!("{name}: {value}\r\n");
    }
    out += &format!(
        "content-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
        reply.content_type,
        reply.body.len(),
        reply.body
    );
    out
}

/// Read one request: its head up to the blank line, then `content-length` bytes of body.
async fn read_request(stream: &mut TcpStream) -> Option<CannedRequest> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let mut request = CannedRequest {
        head,
        path,
        body: Vec::new(),
    };
    let length: usize = request
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while data.len() < body_start + length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
    request.body = data[body_start..body_start + length].to_vec();
    Some(request)
}
