//! The `glider` binary: parse the command line, set up logging, load and validate the
//! config, wire the engine to its doors, serve until a signal, drain. No logic of the
//! pipeline lives here.

mod explain;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use glider_config::{Config, ConfigHandle};
use glider_engine::Engine;

mod mitm_commands;
use mitm_commands::{CaAction, TransparentAction, ca, run_cli, transparent};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

#[derive(Parser)]
#[command(
    name = "glider",
    version,
    about = "Route AI coding CLI requests to a local model or the cloud"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (and the other doors) until interrupted.
    Serve {
        /// Config file (watched for changes). Default: the embedded configs/glider.yaml.
        #[arg(short, long, env = "GLIDER_CONFIG")]
        config: Option<PathBuf>,
        /// Override server.proxy_port (0 picks a free port).
        #[arg(long)]
        port: Option<u16>,
        /// Override server.dashboard_port (0 picks a free port).
        #[arg(long)]
        dashboard_port: Option<u16>,
        /// Override mitm.port (0 picks a free port).
        #[arg(long)]
        mitm_port: Option<u16>,
    },
    /// Glider's CA for the MITM proxy (made on first use under GLIDER_HOME/mitm).
    Ca {
        #[command(subcommand)]
        action: CaAction,
        /// Config file whose mitm.ca_dir to use. Default: the embedded profile.
        #[arg(short, long, env = "GLIDER_CONFIG", global = true)]
        config: Option<PathBuf>,
    },
    /// Start a CLI with the MITM proxy and Glider's CA set for that one process:
    /// `glider run claude -p "hi"`. Its exit status is the CLI's.
    Run {
        /// Config file whose mitm.port and CA to use. Default: the embedded profile.
        #[arg(short, long, env = "GLIDER_CONFIG")]
        config: Option<PathBuf>,
        /// The CLI and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Transparent mode's redirect rules (Linux: iptables).
    Transparent {
        #[command(subcommand)]
        action: TransparentAction,
        /// Config file whose transparent settings to use. Default: the embedded profile.
        #[arg(short, long, env = "GLIDER_CONFIG", global = true)]
        config: Option<PathBuf>,
    },
    /// Validate a config file and print what is wrong, with line and column.
    Check {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Routing tools.
    Route {
        #[command(subcommand)]
        action: RouteAction,
    },
}

#[derive(Subcommand)]
enum RouteAction {
    /// Route a request body read from standard input (any of the four dialects) without
    /// sending it, and print the decision and each rule's opinion.
    Explain {
        /// Config file. Default: the embedded configs/glider.yaml.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// anthropic, openai-chat, openai-responses or ollama (default: guessed from the body).
        #[arg(long)]
        dialect: Option<String>,
        /// A request header the rules may read, as NAME:VALUE (repeatable).
        #[arg(short = 'H', long = "header")]
        headers: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Route {
            action:
                RouteAction::Explain {
                    config,
                    dialect,
                    headers,
                    json,
                },
        } => match explain::explain(config, dialect, headers, json) {
            Ok(text) => {
                println!("{text}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("glider route explain: {e:#}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Ca { action, config } => ca(action, config.as_deref()),
        Command::Run { config, command } => run_cli(config.as_deref(), &command),
        Command::Transparent { action, config } => transparent(action, config.as_deref()),
        Command::Serve {
            config,
            port,
            dashboard_port,
            mitm_port,
        } => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(e) => {
                    eprintln!("glider: cannot start the async runtime: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(config, port, dashboard_port, mitm_port)) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("glider: {e:#}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}

fn check(path: &std::path::Path) -> std::process::ExitCode {
    match Config::load(path) {
        Ok(config) => {
            println!(
                "{}: valid ({} backends)",
                path.display(),
                config.backends.len()
            );
            for backend in &config.backends {
                let missing: Vec<String> = backend
                    .api_key
                    .iter()
                    .filter_map(|k| k.resolve().err())
                    .collect();
                if !missing.is_empty() {
                    println!(
                        "  note: backend {} is unusable until {}",
                        backend.name,
                        missing.join(", ")
                    );
                }
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Where Glider keeps its state (`GLIDER_HOME`, default `~/.glider`).
fn glider_home() -> PathBuf {
    std::env::var_os("GLIDER_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".glider")))
        .unwrap_or_else(|| PathBuf::from(".glider"))
}

/// The config file, or the embedded default profile.
fn load_config(path: Option<&std::path::Path>) -> anyhow::Result<Config> {
    Ok(match path {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default()?,
    })
}

async fn serve(
    config_path: Option<PathBuf>,
    port: Option<u16>,
    dashboard_port: Option<u16>,
    mitm_port: Option<u16>,
) -> anyhow::Result<()> {
    let mut config = load_config(config_path.as_deref())?;
    // The file as written: the dashboard compares the file on disk with it to say what
    // a restart would change (command-line overrides are not the file's doing).
    let baseline = config_path.as_ref().map(|_| Arc::new(config.clone()));
    if let Some(port) = port {
        config.server.proxy_port = port;
    }
    if let Some(port) = dashboard_port {
        config.server.dashboard_port = port;
    }
    if let Some(port) = mitm_port {
        config.mitm.port = port;
    }
    let filter = EnvFilter::try_from_env("GLIDER_LOG").unwrap_or_else(|_| {
        EnvFilter::new(config.log_level.clone().unwrap_or_else(|| "info".into()))
    });
    let (filter, filter_handle) = tracing_subscriber::reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        // Colours only for a terminal: escape codes are noise in a log file or journal,
        // and formatting them was half the cost of each request's log line.
        .with(
            tracing_subscriber::fmt::layer()
                .with_target(false)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout())),
        )
        .init();

    let home = glider_home();
    glider_sys::fileacl::private_home(&home)
        .with_context(|| format!("cannot create GLIDER_HOME {}", home.display()))?;
    let mut features = Vec::new();
    if config.mitm.enabled {
        features.push("mitm");
        if config.mitm.transparent {
            features.push("transparent");
        }
    }
    let (mut runstate, previous) =
        glider_sys::runstate::RunState::start(&home, env!("CARGO_PKG_VERSION"), &features)
            .with_context(|| format!("cannot record the run state in {}", home.display()))?;
    if let Some(warning) = previous.warning() {
        tracing::warn!("{warning}");
    }
    let result = serve_recorded(
        config,
        config_path,
        baseline,
        home,
        filter_handle,
        &mut runstate,
    )
    .await;
    // An orderly exit, a start-up error included: what the doors put on the machine was
    // taken back on the way out (the redirect rules by their guard), so the next start
    // must not report a crash.
    if let Err(e) = runstate.stopped() {
        tracing::warn!(error = %e, "could not record the clean stop");
    }
    result
}

/// `serve` once the run is recorded in `runstate`: open the doors and run them until the
/// stop signal.
async fn serve_recorded(
    config: Config,
    config_path: Option<PathBuf>,
    baseline: Option<Arc<Config>>,
    home: PathBuf,
    filter_handle: tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>,
    runstate: &mut glider_sys::runstate::RunState,
) -> anyhow::Result<()> {
    // Running delegates are recorded in runstate, so a crash leaves their PIDs named.
    let delegator = Arc::new(glider_delegate::Delegator::with_pids(
        runstate.delegate_pids(),
    ));
    let vendors = Arc::new(glider_delegate::Registry::new());
    {
        let (vendors, delegate) = (vendors.clone(), config.delegate.clone());
        tokio::spawn(async move {
            for found in vendors.discover(&delegate).await.iter() {
                tracing::debug!(vendor = found.vendor.binary(), path = ?found.path, version = ?found.version, "delegate CLI");
            }
        });
    }
    let handle = ConfigHandle::new(config, config_path.clone());
    let _watcher = handle.watch()?;
    let engine = Engine::new(handle.clone());
    engine.spawn_background();
    let _rules_watcher = engine.watch_rules();

    // Hot log level: follow `log_level` on reload.
    let mut changes = handle.subscribe();
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            let level = changes.borrow_and_update().log_level.clone();
            if let Some(level) = level {
                match EnvFilter::try_new(&level) {
                    Ok(filter) => {
                        let _ = filter_handle.reload(filter);
                    }
                    Err(e) => tracing::warn!(%level, error = %e, "log_level not applied"),
                }
            }
        }
    });

    let snapshot = handle.snapshot();
    let gateway_router = glider_gateway::router_with(engine.clone(), delegator.clone())
        .map_err(anyhow::Error::msg)?;
    if !snapshot.server.is_loopback() && snapshot.server.gateway_token.is_none() {
        tracing::warn!(
            "server.bind is {:?} but server.gateway_token is unset: the gateway answers only requests addressed to a loopback host name; set a token to serve other machines",
            snapshot.server.bind
        );
    }
    let addr = format!("{}:{}", snapshot.server.bind, snapshot.server.proxy_port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (server.proxy_port)"))?;
    let local = listener.local_addr()?;
    tracing::info!(
        config = %config_path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "embedded configs/glider.yaml".into()),
        home = %home.display(),
        "gateway listening on http://{local}"
    );
    println!("glider gateway listening on http://{local}");

    // One signal stops every door.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let mut doors = vec![glider_dashboard::Door {
        name: "gateway".into(),
        url: format!("http://{local}"),
    }];
    let mut transparent = None;
    let mut enrollment = None;
    if snapshot.mitm.enabled {
        let mitm = glider_mitm::Mitm::with_delegator(engine.clone(), &home, delegator.clone())?;
        if snapshot.mitm.transparent {
            use glider_mitm::transparent::{
                Enrollment, ProcessFilter, Transparent, selected_names,
            };
            let enrolled = Enrollment::default();
            let filter = ProcessFilter::new(selected_names(&snapshot), enrolled.clone())
                .with_registry(vendors.clone());
            let names: Vec<String> = filter.names().iter().cloned().collect();
            let started =
                match Transparent::start(mitm.clone(), filter, runstate, stopped(stop_rx.clone()))
                    .await
                {
                    Ok(started) => started,
                    // Nothing of this run is left on the machine (the caller records the
                    // orderly exit); the error itself names what an earlier run left.
                    Err(e) => return Err(anyhow::anyhow!("mitm.transparent: {e}")),
                };
            let addrs: Vec<String> = started.addrs().iter().map(|a| a.to_string()).collect();
            println!(
                "glider transparent door on {} (TCP to ports {:?} redirected; processes: {})",
                addrs.join(", "),
                snapshot.mitm.transparent_ports,
                names.join(", ")
            );
            if started.supports_enrollment() {
                enrollment = Some(glider_dashboard::EnrollmentHook(Arc::new(move |pids| {
                    enrolled.set(pids)
                })));
            }
            transparent = Some(started);
        }
        let addr = format!("{}:{}", snapshot.server.bind, snapshot.mitm.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (mitm.port)"))?;
        let local = listener.local_addr()?;
        if !local.ip().is_loopback() {
            tracing::warn!(
                "the MITM proxy listens on {local}, reachable from other machines: it has no authentication, so anyone who reaches it can use it as a proxy; prefer server.bind: 127.0.0.1"
            );
        }
        let ca = mitm.authority().cert_path();
        tracing::info!(ca = %ca.display(), hosts = ?snapshot.mitm.hosts, "MITM proxy listening on {local}");
        println!(
            "glider mitm proxy listening on {local} (HTTPS_PROXY=http://{local}, CA {})",
            ca.display()
        );
        doors.push(glider_dashboard::Door {
            name: "mitm".into(),
            url: format!("http://{local}"),
        });
        tokio::spawn(mitm.serve(listener, stopped(stop_rx.clone())));
    }
    let token = match &snapshot.server.dashboard_token {
        Some(secret) => Some(
            secret
                .resolve()
                .map_err(|e| anyhow::anyhow!("server.dashboard_token: {e}"))?,
        ),
        None => None,
    };
    let dashboard_addr = format!(
        "{}:{}",
        snapshot.server.bind, snapshot.server.dashboard_port
    );
    let dashboard_listener = tokio::net::TcpListener::bind(&dashboard_addr)
        .await
        .with_context(|| format!("cannot listen on {dashboard_addr} (server.dashboard_port)"))?;
    let dashboard_local = dashboard_listener.local_addr()?;
    let mut options = glider_dashboard::Options::new(home.clone());
    doors.push(glider_dashboard::Door {
        name: "dashboard".into(),
        url: format!("http://{dashboard_local}"),
    });
    options.doors = doors;
    options.token = token;
    options.baseline = baseline;
    options.vendors = vendors;
    options.enrollment = enrollment;
    let dashboard = glider_dashboard::Dashboard::start(engine.clone(), options)
        .with_context(|| format!("cannot open the request history under {}", home.display()))?;
    tracing::info!("dashboard on http://{dashboard_local}");
    println!(
        "glider dashboard on http://{dashboard_local}{}",
        if snapshot.server.dashboard_token.is_some() {
            " (token required: open /?token=<server.dashboard_token>)"
        } else {
            ""
        }
    );
    report_backends(&engine).await;

    // The redirect rules go at the signal, not after the drain: new connections then
    // reach their origins directly instead of a door that no longer accepts.
    let remove_rules = async {
        stopped(stop_rx.clone()).await;
        if let Some(transparent) = transparent
            && let Err(e) = tokio::task::block_in_place(|| transparent.stop())
        {
            tracing::error!("{e}");
        }
    };
    let (gateway, dashboard, ()) = tokio::join!(
        glider_gateway::serve_with(listener, gateway_router, stopped(stop_rx.clone())),
        dashboard.serve(dashboard_listener, stopped(stop_rx.clone())),
        remove_rules,
    );
    gateway?;
    dashboard?;
    tracing::info!("stopped");
    Ok(())
}

/// Say plainly, at start, which backends can answer and what is missing for the others.
async fn report_backends(engine: &Arc<Engine>) {
    engine.probe_all().await;
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
                tracing::info!(
                    "backend {} ({kind}) at {}: ready",
                    backend.name(),
                    backend.config.base_url
                );
            }
        }
    }
    if usable == 0 {
        tracing::warn!(
            "no backend can answer yet: start Ollama (http://127.0.0.1:11434), set ANTHROPIC_API_KEY or OPENAI_API_KEY, or pass -c with your own config; requests get a clear error until then"
        );
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: draining open requests");
}
