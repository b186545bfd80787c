//! One MCP server's supervisor: connect (start the stdio child in its own process group,
//! or open the Streamable HTTP session), list its tools, keep them current on
//! `tools/list_changed`, and when the connection ends take its tools away, end what is
//! left of the child's group, and connect again after a backoff that doubles per failed
//! try. What it sees is kept in [`Live`] for the hub and the dashboard.
//!
//! A stdio child is bounded: a line on its stdout longer than [`MAX_LINE_BYTES`] is an
//! error for that server (the connection is ended, the line counted in `long_lines`, the
//! server restarted after its backoff), its stderr is kept one line at a time, each cut
//! at [`STDERR_LINE_BYTES`]; and a stop (removal on reload, shutdown) gives the polite
//! close [`CLOSE_GRACE`], SIGTERM [`STOP_GRACE`], then SIGKILLs the whole group, so a
//! stuck server never outlives its removal.
//!
//! One file on purpose: the connection's life and the stdio child's bounds are one loop
//! over one server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use glider_config::McpServerConfig;
use glider_config::mcp::TOOL_SEPARATOR;
use glider_sys::childenv::ChildEnv;
use glider_sys::procutil::{GroupGuard, spawn_group_leader};
use rmcp::model::ProtocolVersion;
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncRead};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{Inner, ServerView, ToolSpec, lock};

/// How long a server may take to start and answer `initialize`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// A server that stayed up this long before it went down starts its backoff afresh.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// The longest line (one JSON-RPC message) read from a stdio server's stdout: 8 MiB.
/// A longer one ends the connection as an error for that server.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// The most of one stderr line of a stdio server kept (for its state's `why`); the rest
/// of the line is skipped.
pub const STDERR_LINE_BYTES: usize = 4 * 1024;
/// How long a stop waits for the MCP connection to close politely (stdin closed)
/// before the process group is signalled.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Where a server stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    /// Connecting for the first time.
    Starting,
    /// Connected; its tools are offered.
    Ready,
    /// It went down or could not connect; the next try comes after `retry_in_secs`.
    Failed { why: String, retry_in_secs: f64 },
    /// Connecting again, try number `attempt` since it was last up for a while.
    Restarting { attempt: u32 },
    /// Stopped by Glider (removed from the config, or shutdown).
    Stopped,
}

impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerState::Starting => f.write_str("starting"),
            ServerState::Ready => f.write_str("ready"),
            ServerState::Failed { why, retry_in_secs } => {
                write!(f, "failed ({why}); retrying in {retry_in_secs:.1} s")
            }
            ServerState::Restarting { attempt } => write!(f, "restarting (try {attempt})"),
            ServerState::Stopped => f.write_str("stopped"),
        }
    }
}

/// What the supervisor shares with the hub.
pub(crate) struct Live {
    name: String,
    config: McpServerConfig,
    state: Mutex<ServerState>,
    peer: Mutex<Option<Peer<RoleClient>>>,
    tools: Mutex<Vec<ToolSpec>>,
    /// The last line the stdio child wrote to stderr (often why it failed).
    last_stderr: Mutex<Option<String>>,
    calls: AtomicU64,
    errors: AtomicU64,
    restarts: AtomicU64,
    /// Stdout lines past [`MAX_LINE_BYTES`], each of which ended a connection.
    long_lines: Arc<AtomicU64>,
    last_restart: Mutex<Option<u64>>,
}

impl Live {
    pub(crate) fn new(name: String, config: &McpServerConfig) -> Live {
        Live {
            name,
            config: config.clone(),
            state: Mutex::new(ServerState::Starting),
            peer: Mutex::new(None),
            tools: Mutex::new(Vec::new()),
            last_stderr: Mutex::new(None),
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            long_lines: Arc::default(),
            last_restart: Mutex::new(None),
        }
    }

    pub(crate) fn offered_tools(&self) -> Vec<ToolSpec> {
        lock(&self.tools).clone()
    }

    pub(crate) fn offers(&self, tool: &str) -> bool {
        self.config.offers(tool)
    }

    pub(crate) fn peer(&self) -> Option<Peer<RoleClient>> {
        lock(&self.peer).clone()
    }

    pub(crate) fn state(&self) -> ServerState {
        lock(&self.state).clone()
    }

    pub(crate) fn count_call(&self, failed: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn view(&self) -> ServerView {
        ServerView {
            name: self.name.clone(),
            transport: if self.config.command.is_some() {
                "stdio"
            } else {
                "http"
            },
            state: self.state(),
            tools: lock(&self.tools).iter().map(|t| t.name.clone()).collect(),
            calls: self.calls.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            last_restart: *lock(&self.last_restart),
            restarts: self.restarts.load(Ordering::Relaxed),
            long_lines: self.long_lines.load(Ordering::Relaxed),
            // The connected peer's (none while down).
            protocol: lock(&self.peer)
                .as_ref()
                .and_then(|peer| peer.peer_info())
                .map(|info| info.protocol_version.to_string()),
        }
    }

    fn set_state(&self, state: ServerState) {
        tracing::info!(server = %self.name, state = %state, "MCP server");
        *lock(&self.state) = state;
    }
}

/// What a supervisor task needs.
pub(crate) struct Supervisor {
    pub(crate) live: Arc<Live>,
    pub(crate) config: McpServerConfig,
    pub(crate) stop: CancellationToken,
    pub(crate) hub: Weak<Inner>,
}

/// Hears `notifications/tools/list_changed` from the server.
struct Handler {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

/// A live connection, and the stdio child's process group when there is one.
struct Connection {
    service: RunningService<RoleClient, Handler>,
    tools_changed: Arc<Notify>,
    group: Option<GroupGuard>,
}

/// Supervise one server until `stop` is cancelled.
pub(crate) async fn run(sup: Supervisor) {
    let mut attempt = 0u32;
    loop {
        let started = Instant::now();
        let connected = tokio::select! {
            _ = sup.stop.cancelled() => return sup.live.set_state(ServerState::Stopped),
            connected = tokio::time::timeout(CONNECT_TIMEOUT, connect(&sup)) => connected
                .unwrap_or_else(|_| Err(format!("no answer to initialize within {} s", CONNECT_TIMEOUT.as_secs()))),
        };
        let why = match connected {
            Ok(connection) => match serve_until_down(&sup, connection).await {
                Some(why) => why,
                None => return sup.live.set_state(ServerState::Stopped),
            },
            Err(why) => why,
        };
        let why = match lock(&sup.live.last_stderr).take() {
            Some(line) => format!("{why}; its last stderr line: {line}"),
            None => why,
        };
        if started.elapsed() >= STABLE_AFTER {
            attempt = 0;
        }
        attempt += 1;
        let wait = backoff(&sup, attempt);
        tracing::warn!(server = %sup.live.name, %why, "MCP server went down");
        sup.live.set_state(ServerState::Failed {
            why,
            retry_in_secs: wait.as_secs_f64(),
        });
        tokio::select! {
            _ = sup.stop.cancelled() => return sup.live.set_state(ServerState::Stopped),
            _ = tokio::time::sleep(wait) => {}
        }
        sup.live.restarts.fetch_add(1, Ordering::Relaxed);
        *lock(&sup.live.last_restart) = Some(unix_now());
        sup.live.set_state(ServerState::Restarting { attempt });
    }
}

/// `restart_initial_secs`, doubled per try since the server was last stable, capped.
fn backoff(sup: &Supervisor, attempt: u32) -> Duration {
    let (initial, max) = match sup.hub.upgrade() {
        Some(hub) => {
            let settings = *lock(&hub.settings);
            (settings.restart_initial, settings.restart_max)
        }
        None => (Duration::from_millis(500), Duration::from_secs(30)),
    };
    glider_sys::safego::backoff_wait(initial, max, attempt.saturating_sub(1))
}

/// How long a stopped stdio server has, after SIGTERM, before its group is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// How a connection starts: `server/discover` for the stateless 2026-07-28 revision,
/// falling back to the `initialize` handshake of the session-based revisions when the
/// server says it does not know it (rmcp's `Auto`).
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    }
}

async fn connect(sup: &Supervisor) -> Result<Connection, String> {
    let tools_changed = Arc::new(Notify::new());
    let handler = Handler {
        tools_changed: tools_changed.clone(),
    };
    match (&sup.config.command, &sup.config.url) {
        (Some(command), _) => {
            let (service, group) = connect_stdio(sup, command, handler).await?;
            Ok(Connection {
                service,
                tools_changed,
                group: Some(group),
            })
        }
        (None, Some(url)) => Ok(Connection {
            service: connect_http(sup, url, handler).await?,
            tools_changed,
            group: None,
        }),
        (None, None) => Err("neither command nor url is set".into()),
    }
}

async fn connect_stdio(
    sup: &Supervisor,
    program: &str,
    handler: Handler,
) -> Result<(RunningService<RoleClient, Handler>, GroupGuard), String> {
    let config = &sup.config;
    let mut command = tokio::process::Command::new(program);
    // Glider's environment holds the cloud keys: the server gets the minimal one and
    // its own `env:` map (docs/tools.md).
    command
        .minimal_env(&[])
        .args(&config.args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(cwd) = &config.cwd {
        command.current_dir(cwd);
    }
    for (key, value) in &config.env {
        command.env(key, value.resolve().map_err(|e| format!("env.{key}: {e}"))?);
    }
    let mut child =
        spawn_group_leader(&mut command).map_err(|e| format!("cannot start {program:?}: {e}"))?;
    let (Some(stdin), Some(stdout), stderr) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("the child's pipes were not set up".into());
    };
    let mut group = GroupGuard::new(child).ok_or("the child exited at once")?;
    if let Some(pids) = sup.hub.upgrade().and_then(|hub| hub.pids.clone()) {
        pids.started(group.pgid(), &format!("mcp:{}", sup.live.name));
        group = group.on_ended(move |pgid| pids.ended(pgid));
    }
    if let Some(stderr) = stderr {
        let live = sup.live.clone();
        tokio::spawn(async move {
            let mut stderr = tokio::io::BufReader::new(stderr);
            while let Some(line) = read_capped_line(&mut stderr, STDERR_LINE_BYTES).await {
                tracing::debug!(server = %live.name, "stderr: {line}");
                if !line.trim().is_empty() {
                    *lock(&live.last_stderr) = Some(line);
                }
            }
        });
    }
    let stdout = LineCap::new(stdout, MAX_LINE_BYTES, sup.live.long_lines.clone());
    let service = handler
        .serve_with_lifecycle((stdout, stdin), lifecycle())
        .await
        .map_err(|e| format!("initialize failed: {e}"))?;
    Ok((service, group))
}

async fn connect_http(
    sup: &Supervisor,
    url: &str,
    handler: Handler,
) -> Result<RunningService<RoleClient, Handler>, String> {
    let config = &sup.config;
    let mut headers = HashMap::new();
    for (key, value) in &config.headers {
        let name = http::HeaderName::from_bytes(key.as_bytes())
            .map_err(|_| format!("headers.{key}: not a valid header name"))?;
        let value = value.resolve().map_err(|e| format!("headers.{key}: {e}"))?;
        let value = http::HeaderValue::from_str(&value)
            .map_err(|_| format!("headers.{key}: not a valid header value"))?;
        headers.insert(name, value);
    }
    let mut transport_config =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(headers);
    if let Some(variable) = &config.bearer_token_env {
        let token = std::env::var(variable)
            .ok()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                format!("bearer_token_env: environment variable {variable} is not set")
            })?;
        transport_config = transport_config.auth_header(token);
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    if let Some(oauth) = &config.oauth {
        let dir = sup
            .hub
            .upgrade()
            .and_then(|hub| hub.token_dir.get().cloned())
            .ok_or("no token directory is set for OAuth servers")?;
        let tokens = Arc::new(crate::auth::TokenSource::new(
            &sup.live.name,
            url,
            &dir,
            Duration::from_secs(oauth.refresh_before_secs),
            client.clone(),
        ));
        // Fail with the error that says to log in before talking to the server at all.
        tokens.bearer().await.map_err(|e| e.to_string())?;
        let client = crate::auth::AuthorizedClient::new(client, tokens);
        let transport = StreamableHttpClientTransport::with_client(client, transport_config);
        return handler
            .serve_with_lifecycle(transport, lifecycle())
            .await
            .map_err(|e| format!("initialize failed at {url}: {e}"));
    }
    let transport = StreamableHttpClientTransport::with_client(client, transport_config);
    handler
        .serve_with_lifecycle(transport, lifecycle())
        .await
        .map_err(|e| format!("initialize failed at {url}: {e}"))
}

/// Offer the server's tools until it goes down (`Some(why)`) or is stopped (`None`);
/// either way its tools are taken away and its process group ended before returning.
async fn serve_until_down(sup: &Supervisor, connection: Connection) -> Option<String> {
    let Connection {
        service,
        tools_changed,
        group,
    } = connection;
    let peer = service.peer().clone();
    let long_lines = sup.live.long_lines.load(Ordering::Relaxed);
    let listed = tokio::select! {
        _ = sup.stop.cancelled() => None,
        listed = listing(sup, &peer) => Some(listed),
    };
    let why = match listed {
        None => {
            close(service).await;
            None
        }
        Some(Err(why)) => {
            drop(service);
            Some(why)
        }
        Some(Ok(())) => {
            *lock(&sup.live.peer) = Some(peer.clone());
            sup.live.set_state(ServerState::Ready);
            notify_hub(sup);
            let cancel = service.cancellation_token();
            let waiting = service.waiting();
            tokio::pin!(waiting);
            loop {
                tokio::select! {
                    quit = &mut waiting => break Some(match quit {
                        Ok(reason) => format!("the connection ended ({reason:?})"),
                        Err(e) => format!("the connection's task failed: {e}"),
                    }),
                    _ = sup.stop.cancelled() => {
                        cancel.cancel();
                        if tokio::time::timeout(CLOSE_GRACE, waiting).await.is_err() {
                            tracing::warn!(server = %sup.live.name, "the MCP connection did not close in time; signalling its process group");
                        }
                        break None;
                    }
                    _ = tools_changed.notified() => {
                        let listed = tokio::select! {
                            _ = sup.stop.cancelled() => continue,
                            listed = listing(sup, &peer) => listed,
                        };
                        if let Err(why) = listed {
                            tracing::warn!(server = %sup.live.name, %why, "could not list tools after tools/list_changed");
                        }
                        notify_hub(sup);
                    }
                }
            }
        }
    };
    let why = match sup.live.long_lines.load(Ordering::Relaxed) > long_lines {
        true => Some(format!(
            "it wrote a line longer than {MAX_LINE_BYTES} bytes on stdout (MCP stdio's limit)"
        )),
        false => why,
    };
    *lock(&sup.live.peer) = None;
    lock(&sup.live.tools).clear();
    notify_hub(sup);
    // Stopped (not crashed): its stdin is closed by now; SIGTERM and a grace period
    // before SIGKILL, so it can flush and clean up as MCP's stdio shutdown expects.
    let ended = match (group, &why) {
        (Some(mut group), None) => Some(group.terminate(STOP_GRACE).await),
        (Some(mut group), Some(_)) => Some(group.finish().await),
        (None, _) => None,
    };
    if let Some(Err(e)) = ended {
        tracing::warn!(server = %sup.live.name, error = %e, "could not reap the MCP server");
    }
    why
}

/// Cancel a connection and give its polite close up to [`CLOSE_GRACE`].
async fn close(service: RunningService<RoleClient, Handler>) {
    let cancel = service.cancellation_token();
    cancel.cancel();
    let _ = tokio::time::timeout(CLOSE_GRACE, service.waiting()).await;
}

/// [`refresh_tools`] within [`CONNECT_TIMEOUT`]: a server that never answers
/// `tools/list` is down.
async fn listing(sup: &Supervisor, peer: &Peer<RoleClient>) -> Result<(), String> {
    tokio::time::timeout(CONNECT_TIMEOUT, refresh_tools(sup, peer))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer to tools/list within {} s",
                CONNECT_TIMEOUT.as_secs()
            ))
        })
}

/// The next line of `reader` without its newline, at most `cap` bytes of it kept (the
/// rest of a longer line is read and dropped, so memory stays bounded); `None` at the
/// end or on a read error.
async fn read_capped_line(
    reader: &mut (impl tokio::io::AsyncBufRead + Unpin),
    cap: usize,
) -> Option<String> {
    let mut line = Vec::new();
    let mut cut = false;
    loop {
        let available = reader.fill_buf().await.ok()?;
        if available.is_empty() {
            return (!line.is_empty()).then(|| finish_line(line, cut));
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |at| at + 1);
        let room = cap.saturating_sub(line.len());
        let body = &available[..newline.unwrap_or(take)];
        cut |= body.len() > room;
        line.extend_from_slice(&body[..body.len().min(room)]);
        reader.consume(take);
        if newline.is_some() {
            return Some(finish_line(line, cut));
        }
    }
}

fn finish_line(line: Vec<u8>, cut: bool) -> String {
    let mut line = String::from_utf8_lossy(&line).into_owned();
    if cut {
        line.push_str(" [cut]");
    }
    line
}

/// A stdio server's stdout with a bound on its lines: once more than `cap` bytes come
/// without a newline, reading fails (ending the connection) and `long_lines` counts it.
struct LineCap<R> {
    inner: R,
    cap: usize,
    /// Bytes since the last newline.
    run: usize,
    long_lines: Arc<AtomicU64>,
}

impl<R> LineCap<R> {
    fn new(inner: R, cap: usize, long_lines: Arc<AtomicU64>) -> LineCap<R> {
        LineCap {
            inner,
            cap,
            run: 0,
            long_lines,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.run > this.cap {
            return std::task::Poll::Ready(Err(line_too_long(this.cap)));
        }
        let before = buf.filled().len();
        std::task::ready!(std::pin::Pin::new(&mut this.inner).poll_read(cx, buf))?;
        for byte in &buf.filled()[before..] {
            this.run = if *byte == b'\n' { 0 } else { this.run + 1 };
            if this.run > this.cap {
                this.long_lines.fetch_add(1, Ordering::Relaxed);
                return std::task::Poll::Ready(Err(line_too_long(this.cap)));
            }
        }
        std::task::Poll::Ready(Ok(()))
    }
}

fn line_too_long(cap: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("a line longer than {cap} bytes"),
    )
}

/// List the server's tools and keep those its allow/deny lists offer, prefixed.
async fn refresh_tools(sup: &Supervisor, peer: &Peer<RoleClient>) -> Result<(), String> {
    let listed = peer
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let offered: Vec<ToolSpec> = listed
        .into_iter()
        .filter(|tool| sup.config.offers(&tool.name))
        .map(|tool| ToolSpec {
            name: format!("{}{TOOL_SEPARATOR}{}", sup.live.name, tool.name),
            description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
            input_schema: (*tool.input_schema).clone(),
        })
        .collect();
    *lock(&sup.live.tools) = offered;
    Ok(())
}

fn notify_hub(sup: &Supervisor) {
    if let Some(hub) = sup.hub.upgrade() {
        hub.tools_changed();
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
