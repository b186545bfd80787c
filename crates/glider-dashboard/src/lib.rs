//! The dashboard door (spec packages `dashboard` and `metrics`): the operator's web page,
//! the REST `/api/*` endpoints, live events on `/ws`, Prometheus `/metrics`, the request
//! history under `GLIDER_HOME/history/`, and the project's docs under `/docs`. Everything
//! it shows comes from the engine's event bus, read by one collector task that never
//! makes a request wait.

mod collector;
mod context;
mod docs;
mod fit;
pub mod history;
pub mod ledger;
mod mcp;
pub mod metrics;
mod plugins;
mod redact;
mod rest;
pub mod route_report;
mod security;
pub mod shadow;
mod ui;
mod vram;
mod ws;

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::{get, post};
use glider_config::Config;
use glider_engine::Engine;
pub(crate) use glider_engine::unix_ms;
use glider_sys::listen::{DeadlineBody, Drain, Limits};
use hyper::body::Incoming;
use hyper::service::Service as _;
use serde::Serialize;

pub use history::HistoryOptions;
pub use mcp::McpSurface;

/// One network door of this process, as `/api/status` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Door {
    /// `gateway`, `dashboard`, `mitm`, ...
    pub name: String,
    /// Where it listens, e.g. `http://127.0.0.1:8080`.
    pub url: String,
}

/// Receives the PIDs of `POST /api/mitm/enrollment`: transparent mode narrows its
/// process selection to them (an empty set clears it).
#[derive(Clone)]
pub struct EnrollmentHook(pub Arc<dyn Fn(std::collections::BTreeSet<u32>) + Send + Sync>);

impl std::fmt::Debug for EnrollmentHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EnrollmentHook")
    }
}

/// How the dashboard runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// `GLIDER_HOME`, shown in `/api/status`.
    pub home: PathBuf,
    pub history: HistoryOptions,
    /// The doors of this process (the dashboard's own included).
    pub doors: Vec<Door>,
    /// When set, every request must present it (`Authorization: Bearer`, `?token=` or
    /// the cookie that `?token=` sets). Required when bound beyond loopback.
    pub token: Option<String>,
    /// The config as its file said at start (before command-line overrides): a file on
    /// disk that differs from it in restart-only keys needs a restart.
    pub baseline: Option<Arc<Config>>,
    /// Events a WebSocket client may fall behind by before the oldest are dropped.
    pub ws_queue: usize,
    /// Finished requests kept in memory for `/api/requests` (older pages come from the
    /// history files).
    pub recent: usize,
    /// How often backend state (health, breaker, warm models) is compared for changes.
    pub poll_interval: Duration,
    /// The delegate CLIs found (`/api/vendors`); shared with whoever else reads it.
    pub vendors: Arc<glider_delegate::Registry>,
    /// Where enrolled PIDs go; `None` when transparent mode does not run (the call then
    /// succeeds and does nothing, as the spec says).
    pub enrollment: Option<EnrollmentHook>,
    /// The context log (`/api/context/*`, its counters in `/metrics`); `None` when
    /// `context.enabled` is false.
    pub context: Option<ContextSurface>,
    /// The MCP servers (`/api/mcp`); `None` when the binary attached none.
    pub mcp: Option<mcp::McpSurface>,
}

/// What the dashboard reads of the context log.
#[derive(Debug, Clone)]
pub struct ContextSurface {
    pub reader: glider_context::Reader,
    pub counters: Arc<glider_context::Counters>,
}

impl Options {
    /// Defaults for `home` (`GLIDER_HOME`).
    pub fn new(home: PathBuf) -> Options {
        Options {
            history: HistoryOptions::under(&home),
            home,
            doors: Vec::new(),
            token: None,
            baseline: None,
            ws_queue: 256,
            recent: 1000,
            poll_interval: Duration::from_millis(250),
            vendors: Arc::new(glider_delegate::Registry::new()),
            enrollment: None,
            context: None,
            mcp: None,
        }
    }
}

/// State shared by the handlers and the background tasks.
pub(crate) struct Shared {
    pub engine: Arc<Engine>,
    pub options: Options,
    pub started: Instant,
    pub started_at_ms: u64,
    pub metrics: metrics::Metrics,
    pub recent: Mutex<collector::Recent>,
    pub hub: tokio::sync::broadcast::Sender<axum::extract::ws::Utf8Bytes>,
    pub history: history::History,
    /// Sequence number of the last finished request (continues across restarts).
    pub last_seq: AtomicU64,
    /// Bus events the collector missed because it fell behind.
    pub bus_lagged: AtomicU64,
    /// Events dropped for slow WebSocket clients, all sockets together.
    pub ws_dropped: AtomicU64,
    pub ws_clients: AtomicU64,
    /// Backend states last published, for change detection.
    pub backend_states: Mutex<std::collections::BTreeMap<String, glider_engine::BackendState>>,
    pub tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Set when the server shuts down: open sockets close so the drain can finish.
    pub closing: tokio::sync::watch::Sender<bool>,
    /// Sessions forgotten through `DELETE /api/context/sessions/{id}` (the session
    /// watcher looks at the log again when it moves).
    pub sessions_forgotten: AtomicU64,
    /// The ledger holds the history from before this process began.
    pub ledger_seeded: std::sync::atomic::AtomicBool,
    /// History entries read into the ledger at start.
    pub ledger_seeded_rows: AtomicU64,
    /// Fan-out `shadow`'s samples (`GLIDER_HOME/shadow/`, `/api/shadow`).
    pub shadow: shadow::ShadowBook,
}

/// A running dashboard: cheap to clone; serve its [`Dashboard::router`].
#[derive(Clone)]
pub struct Dashboard {
    shared: Arc<Shared>,
}

impl Dashboard {
    /// Subscribe to `engine`'s bus, open the history and start the collector and the
    /// backend watcher. Call inside a tokio runtime, before requests flow.
    pub fn start(engine: Arc<Engine>, options: Options) -> std::io::Result<Dashboard> {
        let history = history::History::start(options.history.clone())?;
        let shadow = shadow::ShadowBook::start(&options.home.join("shadow"), &options.history)?;
        let seeded = history::newest_texts(&options.history.dir, options.recent);
        // The newest entry read for the list is the last one numbered; only an empty
        // list needs its own look.
        let last_seq = match seeded.first() {
            Some(&(seq, _)) => seq,
            None => history::last_seq(&options.history.dir),
        };
        let events = engine.bus().subscribe();
        let (hub, _) = tokio::sync::broadcast::channel(options.ws_queue.max(1));
        let shared = Arc::new(Shared {
            engine,
            started: Instant::now(),
            started_at_ms: unix_ms(),
            metrics: metrics::Metrics::new(),
            recent: Mutex::new(collector::Recent::seeded(seeded, options.recent)),
            hub,
            history,
            last_seq: AtomicU64::new(last_seq),
            bus_lagged: AtomicU64::new(0),
            ws_dropped: AtomicU64::new(0),
            ws_clients: AtomicU64::new(0),
            backend_states: Mutex::new(Default::default()),
            tasks: Mutex::new(Vec::new()),
            closing: tokio::sync::watch::channel(false).0,
            sessions_forgotten: AtomicU64::new(0),
            ledger_seeded: std::sync::atomic::AtomicBool::new(false),
            ledger_seeded_rows: AtomicU64::new(0),
            shadow,
            options,
        });
        let mut tasks = vec![
            collector::spawn_collector(&shared, events),
            collector::spawn_backend_watch(&shared),
            collector::spawn_ledger_seed(&shared, last_seq),
        ];
        tasks.extend(collector::spawn_session_watch(&shared));
        tasks.extend(vram::spawn_forward(&shared));
        *shared.tasks.lock().unwrap_or_else(|p| p.into_inner()) = tasks;
        Ok(Dashboard { shared })
    }

    /// The dashboard's routes: `/`, `/assets/*`, `/api/*`, `/ws`, `/metrics`, `/docs`.
    pub fn router(&self) -> Router {
        let shared = self.shared.clone();
        Router::new()
            .route("/", get(ui::index))
            .route("/assets/{file}", get(ui::asset))
            .route("/favicon.ico", get(ui::favicon))
            .route("/docs", get(docs::index))
            .route("/docs/", get(docs::index))
            .route("/docs/{page}", get(docs::page))
            .route("/api/status", get(rest::status))
            .route("/api/backends", get(rest::backends))
            .route("/api/backends/{name}/reset", post(rest::reset_breaker))
            .route("/api/requests", get(rest::requests))
            .route("/api/stats", get(rest::stats))
            .route("/api/stats/series", get(rest::series))
            .route("/api/config", get(rest::config))
            .route("/api/config/reload", post(rest::reload))
            .route("/api/hotswap", get(rest::hotswap))
            .route("/api/vendors", get(rest::vendors))
            .route("/api/vendors/discover", post(rest::discover_vendors))
            .route("/api/mitm/enrollment", post(rest::enrollment))
            .route("/api/context/sessions", get(context::sessions))
            .route(
                "/api/context/sessions/{id}",
                get(context::session).delete(context::forget),
            )
            .route("/api/vram", get(vram::view))
            .route("/api/fit", get(fit::view))
            .route("/api/mcp", get(mcp::view))
            .route("/api/plugins", get(plugins::view))
            .route("/api/shadow", get(shadow::view))
            .route("/api/route-report", get(route_report::view))
            .route("/metrics", get(rest::metrics))
            .route("/ws", get(ws::upgrade))
            .fallback(rest::not_found)
            .layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                security::guard,
            ))
            .with_state(shared)
    }

    /// Serve on `listener` until `shutdown` resolves, under the config's client
    /// timeouts and drain deadline, then write out the history.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let server = self.shared.engine.runtime().config.server.clone();
        let drain = Drain::on(shutdown, Duration::from_secs(server.shutdown_grace_secs));
        self.serve_draining(listener, server.client_limits(), drain)
            .await
    }

    /// Serve on `listener` under `limits` until `drain` starts (live sockets close
    /// then), then write out the history. A request body that has not arrived by
    /// `limits.body_read` gets a 408.
    pub async fn serve_draining(
        self,
        listener: tokio::net::TcpListener,
        limits: Limits,
        drain: Drain,
    ) -> std::io::Result<()> {
        let router = hyper_util::service::TowerToHyperService::new(self.router());
        let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let router = router.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = DeadlineBody::new(body, limits.body_read);
                let timed_out = body.timed_out_flag();
                let mut response = router.call(http::Request::from_parts(parts, body)).await?;
                if timed_out.load(std::sync::atomic::Ordering::Acquire)
                    && response.status().is_client_error()
                {
                    *response.status_mut() = http::StatusCode::REQUEST_TIMEOUT;
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let shared = self.shared.clone();
        let closing = drain.draining();
        let served = glider_sys::listen::serve(listener, service, limits, drain.clone());
        let (served, ()) = tokio::join!(served, async move {
            closing.await;
            // Live sockets would hold the drain open until its deadline.
            shared.closing.send_replace(true);
        });
        self.close().await;
        served
    }

    /// Stop the background tasks and write out the queued history. Idempotent.
    pub async fn close(&self) {
        self.shared.closing.send_replace(true);
        let tasks =
            std::mem::take(&mut *self.shared.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for task in tasks {
            task.abort();
        }
        self.shared.history.close().await;
        self.shared.shadow.close().await;
    }
}
