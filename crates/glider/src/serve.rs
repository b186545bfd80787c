//! What `glider serve` starts, one function per door and service: delegation, the
//! background tasks (config and rules watchers, health probes, the log-level follower),
//! the gateway, the MITM proxy with its transparent door, the dashboard, and the
//! start-up report on the backends. `main` wires them in order and waits for the stop.
//!
//! One file past 600 lines on purpose: one short function per door and service, in the
//! order `main` wires them, sharing the engine and the stop.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use glider_config::{Config, ConfigHandle, FileWatcher};
use glider_engine::Engine;
use glider_sys::listen::Drain;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

/// Where the log filter set up at start is replaced when `log_level` changes.
pub type LogFilterHandle =
    tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// The one stop every door and service waits on.
#[derive(Clone)]
pub struct Stop(tokio::sync::watch::Receiver<bool>);

/// Fires its [`Stop`]; made apart from it so doors can wait on the stop before the
/// signal handler is installed.
pub struct StopTrigger(tokio::sync::watch::Sender<bool>);

impl Stop {
    /// A stop and its trigger.
    pub fn new() -> (StopTrigger, Stop) {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        (StopTrigger(stop_tx), Stop(stop_rx))
    }

    /// Resolves when the stop fired.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + use<> {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}

impl StopTrigger {
    /// Fire the stop once `signal` resolves (a task waits for it).
    pub fn on(self, signal: impl Future<Output = ()> + Send + 'static) {
        tokio::spawn(async move {
            signal.await;
            let _ = self.0.send(true);
        });
    }
}

/// Delegation: the handler (each running delegate recorded in runstate, so a crash
/// leaves their PIDs named) and the registry of CLIs, which starts finding them now.
pub fn start_delegation(
    runstate: &glider_sys::runstate::RunState,
    delegate: &glider_config::schema::DelegateConfig,
) -> (
    Arc<glider_delegate::Delegator>,
    Arc<glider_delegate::Registry>,
) {
    let delegator = Arc::new(glider_delegate::Delegator::with_pids(
        runstate.delegate_pids(),
    ));
    let vendors = Arc::new(glider_delegate::Registry::new());
    {
        let (vendors, delegate) = (vendors.clone(), delegate.clone());
        tokio::spawn(async move {
            for found in vendors.discover(&delegate).await.iter() {
                tracing::debug!(vendor = found.vendor.binary(), path = ?found.path, version = ?found.version, "delegate CLI");
            }
        });
    }
    (delegator, vendors)
}

/// GPU memory for local models (docs/vram.md): find the GPUs, read the measured load
/// costs under `home/vram`, sample every `vram.sample_interval_secs` while
/// `vram.enabled` (both as reloaded). The GPUs are found in the background: a hung
/// `nvidia-smi` holds up neither start-up nor (the returned guard kills it) the stop.
pub fn start_vram(
    engine: &Arc<Engine>,
    handle: &ConfigHandle,
    home: &Path,
    pids: glider_sys::runstate::DelegatePids,
) -> VramStop {
    let config = handle.clone();
    let vram =
        glider_vram::Vram::start(&handle.snapshot().vram, Some(home), Some(pids), move || {
            config.snapshot()
        });
    if engine.attach_vram(vram.clone()).is_err() {
        tracing::warn!("VRAM state was already attached");
    }
    VramStop(vram)
}

/// Kills the VRAM probes still running (and starts no other) when dropped: however
/// `serve` ends, no `nvidia-smi` outlives it.
pub struct VramStop(Arc<glider_vram::Vram>);

impl Drop for VramStop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The MCP servers of `mcp:` (docs/tools.md): connected now, each stdio server's
/// process group recorded in `runstate`, and registered with the engine's hot-swap
/// registry as module `mcp`, so each reloaded config brings them in line (a changed
/// server restarts, a removed one stops, the others are left alone).
pub fn start_mcp(
    handle: &ConfigHandle,
    engine: &Engine,
    runstate: &glider_sys::runstate::RunState,
    home: &std::path::Path,
) -> glider_mcp::McpHub {
    let hub = glider_mcp::McpHub::new(Some(runstate.delegate_pids()));
    hub.set_token_dir(glider_mcp::auth::token_dir(home));
    let applied = handle.snapshot().mcp.clone();
    hub.apply(&applied);
    engine.register_hotswap(Arc::new(McpModule {
        hub: hub.clone(),
        applied: std::sync::Mutex::new(applied),
    }));
    hub
}

/// Module `mcp` of the hot-swap registry: the hub brought in line with `mcp:`. Never
/// fails as a whole: a server that cannot start is shown in its state and retried.
struct McpModule {
    hub: glider_mcp::McpHub,
    /// The section the hub was last brought in line with.
    applied: std::sync::Mutex<glider_config::McpConfig>,
}

impl glider_engine::hotswap::HotSwap for McpModule {
    fn name(&self) -> &'static str {
        "mcp"
    }

    fn reload(&self, config: &Arc<Config>) -> Result<glider_engine::hotswap::Swapped, String> {
        let mut applied = self
            .applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *applied == config.mcp {
            return Ok(glider_engine::hotswap::Swapped::Unchanged);
        }
        self.hub.apply(&config.mcp);
        *applied = config.mcp.clone();
        Ok(glider_engine::hotswap::Swapped::New)
    }
}

/// Join the hub and the engine's tools (docs/tools.md): the hub's tools enter the
/// engine's tool set (the loop offers those `tools.loop.mcp` allows), and `/mcp` serves
/// the engine's current set and the plugins' tools beside the hub's, its clients told
/// after a reload that changed it.
fn join_mcp(engine: &Arc<Engine>, hub: &glider_mcp::McpHub) -> glider_mcp::server::LocalTools {
    engine.attach_tools(Arc::new(hub.clone()));
    let (mut events, follower) = (engine.bus().subscribe(), hub.clone());
    tokio::spawn(async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match events.recv().await {
                Ok(event)
                    if matches!(
                        *event,
                        glider_engine::events::PipelineEvent::ConfigReloaded { .. }
                    ) =>
                {
                    follower.tools_may_have_changed();
                }
                Ok(_) => {}
                // Events were missed: one of them may have been a reload.
                Err(RecvError::Lagged(_)) => follower.tools_may_have_changed(),
                Err(RecvError::Closed) => return,
            }
        }
    });
    let engine = Arc::downgrade(engine);
    Arc::new(move || {
        engine
            .upgrade()
            .map(|engine| engine.served_tools())
            .unwrap_or_default()
    })
}

/// What `/api/mcp` shows: each MCP server's state, tools and counters.
pub fn mcp_surface(hub: &glider_mcp::McpHub) -> glider_dashboard::McpSurface {
    let hub = hub.clone();
    glider_dashboard::McpSurface(Arc::new(
        move || serde_json::json!({"enabled": true, "servers": hub.servers()}),
    ))
}

/// The file watchers the background services run on; dropping it stops them.
pub struct Background {
    _config: Option<FileWatcher>,
    _rules: Option<FileWatcher>,
}

/// The background services: reload the config file when it changes, the engine's own
/// tasks (health probes and the like), reload the routing rules file, and follow
/// `log_level` on reload.
pub fn start_background(
    handle: &ConfigHandle,
    engine: &Arc<Engine>,
    filter_handle: LogFilterHandle,
) -> anyhow::Result<Background> {
    let config = handle.watch()?;
    engine.spawn_background();
    let rules = engine.watch_rules();
    follow_log_level(handle, filter_handle);
    Ok(Background {
        _config: config,
        _rules: rules,
    })
}

/// Log targets held at `warn` whatever `GLIDER_LOG` or `log_level` ask for. notify
/// logs every raw file event at `trace`; with the log file in the watched config
/// directory each line written is such an event, which logs another line: a loop that
/// wrote 835 MB in 40 s at 100 % CPU.
const PINNED_LOG_DIRECTIVES: [&str; 1] = ["notify=warn"];

/// The log filter for `spec` (`GLIDER_LOG` syntax), with [`PINNED_LOG_DIRECTIVES`].
pub fn log_filter(spec: &str) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    let mut filter = EnvFilter::try_new(spec)?;
    for directive in PINNED_LOG_DIRECTIVES {
        filter = filter.add_directive(directive.parse()?);
    }
    Ok(filter)
}

/// Hot log level: apply each reloaded config's `log_level` to the log filter.
fn follow_log_level(handle: &ConfigHandle, filter_handle: LogFilterHandle) {
    let handle = handle.clone();
    glider_sys::safego::spawn_named(
        "log level follower",
        glider_sys::safego::Restart::BACKOFF,
        move || {
            let (mut changes, filter_handle) = (handle.subscribe(), filter_handle.clone());
            async move {
                while changes.changed().await.is_ok() {
                    let level = changes.borrow_and_update().log_level.clone();
                    if let Some(level) = level {
                        match log_filter(&level) {
                            Ok(filter) => {
                                let _ = filter_handle.reload(filter);
                            }
                            Err(e) => tracing::warn!(%level, error = %e, "log_level not applied"),
                        }
                    }
                }
            }
        },
    );
}

/// Listen on `server.bind` and `port`; an error names `setting`, where the port comes
/// from.
async fn listen(
    snapshot: &Config,
    port: u16,
    setting: &str,
) -> anyhow::Result<(TcpListener, std::net::SocketAddr)> {
    let addr = format!("{}:{}", snapshot.server.bind, port);
    let listener = TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({setting})"))?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// A door that listens: its entry on the dashboard, and the future that serves it
/// until the stop (nothing is served until it is polled).
pub struct Listening<F> {
    pub door: glider_dashboard::Door,
    pub serving: F,
}

/// The gateway: build its router, warn when it is open to other machines without a
/// token, listen on `server.proxy_port`, and say so. `responses`: the context store's
/// stored Responses, when it runs.
#[allow(clippy::too_many_arguments)]
pub async fn start_gateway(
    engine: &Arc<Engine>,
    delegator: &Arc<glider_delegate::Delegator>,
    responses: Option<Arc<glider_context::ResponseStore>>,
    mcp: &glider_mcp::McpHub,
    snapshot: &Config,
    config_path: Option<&Path>,
    home: &Path,
    drain: &Drain,
) -> anyhow::Result<Listening<impl Future<Output = std::io::Result<()>> + use<>>> {
    let mcp_router =
        glider_mcp::server::router(mcp.clone(), join_mcp(engine, mcp), drain.draining());
    let router = glider_gateway::router_with_mcp(
        engine.clone(),
        delegator.clone(),
        responses,
        Some(mcp_router),
    )
    .map_err(anyhow::Error::msg)?;
    if !snapshot.server.is_loopback() && snapshot.server.gateway_token.is_none() {
        tracing::warn!(
            "server.bind is {:?} but server.gateway_token is unset: the gateway answers only requests addressed to a loopback host name; set a token to serve other machines",
            snapshot.server.bind
        );
    }
    let (listener, local) =
        listen(snapshot, snapshot.server.proxy_port, "server.proxy_port").await?;
    tracing::info!(
        config = %config_path.map(|p| p.display().to_string()).unwrap_or_else(|| "embedded configs/glider.yaml".into()),
        home = %home.display(),
        "gateway listening on http://{local}"
    );
    crate::out::sayln!("glider gateway listening on http://{local}");
    Ok(Listening {
        door: glider_dashboard::Door {
            name: "gateway".into(),
            url: format!("http://{local}"),
        },
        serving: glider_gateway::serve_with(
            listener,
            router,
            snapshot.server.client_limits(),
            drain.clone(),
        ),
    })
}

/// The MITM proxy as started: serving already, its entry on the dashboard, and the
/// transparent door when `mitm.transparent` is on.
pub struct MitmStarted {
    pub door: glider_dashboard::Door,
    pub transparent: Option<TransparentStarted>,
}

/// The transparent door as started, and how the dashboard enrolls PIDs in it (where
/// the platform's redirector supports that).
pub struct TransparentStarted {
    pub door: glider_mitm::transparent::Transparent,
    pub enrollment: Option<glider_dashboard::EnrollmentHook>,
}

/// The MITM proxy (and first its transparent door, when on): listen on `mitm.port`,
/// warn when that is reachable from other machines, say so, and serve until the stop.
/// `responses`: the context store's stored Responses, when it runs.
#[allow(clippy::too_many_arguments)]
pub async fn start_mitm(
    engine: &Arc<Engine>,
    home: &Path,
    delegator: &Arc<glider_delegate::Delegator>,
    vendors: &Arc<glider_delegate::Registry>,
    snapshot: &Config,
    runstate: &mut glider_sys::runstate::RunState,
    drain: &Drain,
    responses: Option<Arc<glider_context::ResponseStore>>,
) -> anyhow::Result<MitmStarted> {
    let mitm = glider_mitm::Mitm::with_delegator(engine.clone(), home, delegator.clone())?;
    if let Some(store) = responses {
        mitm.use_responses(store);
    }
    // Before the transparent door starts: its decrypted connections drain with the rest.
    mitm.use_drain(drain.clone());
    let transparent = if snapshot.mitm.transparent {
        Some(start_transparent(&mitm, vendors, snapshot, runstate, drain).await?)
    } else {
        None
    };
    let (listener, local) = listen(snapshot, snapshot.mitm.port, "mitm.port").await?;
    if !local.ip().is_loopback() {
        tracing::warn!(
            "the MITM proxy listens on {local}, reachable from other machines: it has no authentication, so anyone who reaches it can use it as a proxy; prefer server.bind: 127.0.0.1"
        );
    }
    let ca = mitm.authority().cert_path();
    tracing::info!(ca = %ca.display(), hosts = ?snapshot.mitm.hosts, "MITM proxy listening on {local}");
    crate::out::sayln!(
        "glider mitm proxy listening on {local} (HTTPS_PROXY=http://{local}, CA {})",
        ca.display()
    );
    tokio::spawn(mitm.serve_draining(listener, drain.clone()));
    Ok(MitmStarted {
        door: glider_dashboard::Door {
            name: "mitm".into(),
            url: format!("http://{local}"),
        },
        transparent,
    })
}

/// The transparent door: pick the processes it decrypts, install the redirect rules
/// (recorded in runstate), and say which ports and processes it covers.
async fn start_transparent(
    mitm: &Arc<glider_mitm::Mitm>,
    vendors: &Arc<glider_delegate::Registry>,
    snapshot: &Config,
    runstate: &mut glider_sys::runstate::RunState,
    drain: &Drain,
) -> anyhow::Result<TransparentStarted> {
    use glider_mitm::transparent::{Enrollment, ProcessFilter, Transparent, selected_names};
    let enrolled = Enrollment::default();
    let filter = ProcessFilter::new(selected_names(snapshot), enrolled.clone())
        .with_registry(vendors.clone());
    let names: Vec<String> = filter.names().iter().cloned().collect();
    let started = match Transparent::start(mitm.clone(), filter, runstate, drain.draining()).await {
        Ok(started) => started,
        // Nothing of this run is left on the machine (the caller records the orderly
        // exit); the error itself names what an earlier run left.
        Err(e) => return Err(anyhow::anyhow!("mitm.transparent: {e}")),
    };
    let addrs: Vec<String> = started.addrs().iter().map(|a| a.to_string()).collect();
    crate::out::sayln!(
        "glider transparent door on {} (TCP to ports {:?} redirected; processes: {})",
        addrs.join(", "),
        snapshot.mitm.transparent_ports,
        names.join(", ")
    );
    let enrollment = started
        .supports_enrollment()
        .then(|| glider_dashboard::EnrollmentHook(Arc::new(move |pids| enrolled.set(pids))));
    Ok(TransparentStarted {
        door: started,
        enrollment,
    })
}

/// The redirect rules go at the stop, not after the drain: new connections then reach
/// their origins directly instead of a door that no longer accepts.
pub async fn remove_rules_at_stop(
    transparent: Option<glider_mitm::transparent::Transparent>,
    stop: &Stop,
) {
    stop.stopped().await;
    if let Some(transparent) = transparent
        && let Err(e) = tokio::task::block_in_place(|| transparent.stop())
    {
        tracing::error!("{e}");
    }
}

/// What the dashboard shows besides the engine's events.
pub struct DashboardInputs {
    /// The doors already listening (the dashboard adds itself).
    pub doors: Vec<glider_dashboard::Door>,
    /// The config file as written, to say what a restart would change.
    pub baseline: Option<Arc<Config>>,
    pub vendors: Arc<glider_delegate::Registry>,
    pub enrollment: Option<glider_dashboard::EnrollmentHook>,
    /// The context log, when `context.enabled`.
    pub context: Option<glider_dashboard::ContextSurface>,
    /// The MCP servers (`/api/mcp`).
    pub mcp: Option<glider_dashboard::McpSurface>,
}

/// `server.dashboard_token`, resolved (the dashboard and the desktop window both need it).
pub fn dashboard_token(snapshot: &Config) -> anyhow::Result<Option<String>> {
    snapshot
        .server
        .dashboard_token
        .as_ref()
        .map(|secret| {
            secret
                .resolve()
                .map_err(|e| anyhow::anyhow!("server.dashboard_token: {e}"))
        })
        .transpose()
}

/// The dashboard: resolve its token, listen on `server.dashboard_port`, open the
/// request history, and say where it is (and whether it wants the token). Returns the
/// address it listens on (the desktop window opens it) and the serving future.
pub async fn start_dashboard(
    engine: &Arc<Engine>,
    home: &Path,
    snapshot: &Config,
    inputs: DashboardInputs,
    drain: &Drain,
) -> anyhow::Result<(
    std::net::SocketAddr,
    impl Future<Output = std::io::Result<()>> + use<>,
)> {
    let token = dashboard_token(snapshot)?;
    let (dashboard_listener, dashboard_local) = listen(
        snapshot,
        snapshot.server.dashboard_port,
        "server.dashboard_port",
    )
    .await?;
    let mut options = glider_dashboard::Options::new(home.to_path_buf());
    let mut doors = inputs.doors;
    doors.push(glider_dashboard::Door {
        name: "dashboard".into(),
        url: format!("http://{dashboard_local}"),
    });
    options.doors = doors;
    options.token = token;
    options.baseline = inputs.baseline;
    options.vendors = inputs.vendors;
    options.enrollment = inputs.enrollment;
    options.context = inputs.context;
    options.mcp = inputs.mcp;
    let dashboard = glider_dashboard::Dashboard::start(engine.clone(), options)
        .with_context(|| format!("cannot open the request history under {}", home.display()))?;
    tracing::info!("dashboard on http://{dashboard_local}");
    crate::out::sayln!(
        "glider dashboard on http://{dashboard_local}{}",
        if snapshot.server.dashboard_token.is_some() {
            " (token required: open /?token=<server.dashboard_token>)"
        } else {
            ""
        }
    );
    Ok((
        dashboard_local,
        dashboard.serve_draining(
            dashboard_listener,
            snapshot.server.client_limits(),
            drain.clone(),
        ),
    ))
}

/// The context log under `GLIDER_HOME/context/`, told of every request the engine
/// decides and records; `None` (and no file made) with `context.enabled: false`.
pub fn start_context(
    engine: &Arc<Engine>,
    home: &Path,
    snapshot: &Config,
) -> anyhow::Result<Option<Arc<glider_context::Context>>> {
    let Some(context) = glider_context::Context::start(home, &snapshot.context)
        .context("cannot open the context log (context.enabled: false turns it off)")?
    else {
        return Ok(None);
    };
    if engine.attach_context(context.clone()).is_err() {
        anyhow::bail!("the engine already has a context log attached");
    }
    tracing::info!(dir = %context.log().dir().display(), "context log");
    Ok(Some(context))
}

/// The summarizer over `context`'s log (`context.summarizer`, docs/context.md): it
/// asks the engine's own backends, read from the runtime at each run, so a reload
/// changes its settings and model without a restart.
pub fn start_summarizer(
    engine: &Arc<Engine>,
    context: Option<&Arc<glider_context::Context>>,
) -> anyhow::Result<Option<glider_context::Summarizer>> {
    let Some(context) = context else {
        return Ok(None);
    };
    let source = Arc::new(EngineBackends(Arc::downgrade(engine)));
    let summarizer = glider_context::Summarizer::start(context, source)
        .context("cannot start the summarizer")?;
    let config = engine.runtime().config.clone();
    match config.summarizer_target() {
        Ok((backend, model)) if config.context.summarizer.enabled => tracing::info!(
            backend = %backend.name,
            %model,
            idle_secs = config.context.summarizer.idle_secs,
            "summarizer: ended episodes are compacted off the request path"
        ),
        Ok(_) => tracing::info!("summarizer off (context.summarizer.enabled: false)"),
        Err(why) => tracing::warn!("summarizer: {why}; sessions are not compacted"),
    }
    Ok(Some(summarizer))
}

/// The engine's runtime as the summarizer's source: its config and its backends (with
/// their connection pools). Weak, so the summarizer never keeps the engine alive.
struct EngineBackends(std::sync::Weak<Engine>);

impl glider_context::SummarizerSource for EngineBackends {
    fn config(&self) -> Arc<Config> {
        match self.0.upgrade() {
            Some(engine) => engine.runtime().config.clone(),
            None => Arc::new(Config::default()),
        }
    }

    fn backend(&self, config: &glider_config::BackendConfig) -> Arc<glider_backend::Backend> {
        self.0
            .upgrade()
            .and_then(|engine| engine.runtime().backend(&config.name).cloned())
            .unwrap_or_else(|| glider_backend::Backend::new(config.clone()))
    }

    fn reloads(&self) -> Option<tokio::sync::watch::Receiver<Arc<Config>>> {
        self.0.upgrade().map(|engine| engine.config().subscribe())
    }
}

/// What the dashboard reads of a running context log.
pub fn context_surface(context: &glider_context::Context) -> glider_dashboard::ContextSurface {
    glider_dashboard::ContextSurface {
        reader: context.reader(),
        counters: context.log().counters().clone(),
    }
}

/// Say plainly, at start, which backends can answer and what is missing for the others
/// (after a probe of each: a cloud one's model list, see `glider_backend::health`). It
/// probes the cloud backends (their first probe); the local ones were probed before
/// serving (see `main`). The periodic probes start an interval later.
pub async fn report_backends(engine: &Arc<Engine>) {
    engine.probe_cloud_backends().await;
    let runtime = engine.runtime();
    let mut usable = 0;
    for backend in &runtime.backends {
        let health = backend.health();
        let kind = format!("{:?}", backend.kind()).to_lowercase();
        match (&backend.unavailable, health.detail) {
            (Some(why), _) => {
                tracing::warn!("backend {} ({kind}): unusable: {why}", backend.name())
            }
            (None, Some(detail)) => {
                tracing::warn!("backend {} ({kind}): down: {detail}", backend.name())
            }
            (None, None) => {
                usable += 1;
                // A cloud backend's probe says what it proved (the key, or only TLS).
                tracing::info!(
                    "backend {} ({kind}) at {}: {}",
                    backend.name(),
                    backend.config.base_url,
                    health.note.as_deref().unwrap_or("ready")
                );
                for (model, caps) in &health.capabilities {
                    tracing::info!(
                        "backend {}: model {model} {}",
                        backend.name(),
                        glider_backend::capabilities::describe(caps)
                    );
                }
            }
        }
        if !backend.is_local() && backend.unavailable.is_none() {
            tracing::info!(
                "backend {} ({kind}) authenticates with {}",
                backend.name(),
                glider_backend::credentials::describe(&backend.config)
            );
        }
    }
    if usable == 0 {
        tracing::warn!(
            "no backend can answer yet: start Ollama (http://127.0.0.1:11434), send your CLI's own key, set ANTHROPIC_API_KEY or OPENAI_API_KEY, or pass -c with your own config; requests get a clear error until then"
        );
    }
}
