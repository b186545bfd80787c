//! The `glider` binary: parse the command line, set up logging, load and validate the
//! config, wire the engine to its doors, serve until a signal, drain. No logic of the
//! pipeline lives here.
//!
//! One file, past 600 lines, on purpose: most of it is the command line itself (every
//! subcommand's arguments and help, in one `clap` tree a reader scans top to bottom)
//! and `serve`'s wiring in start-up order; each subcommand's work is in its own module.

mod explain;
mod fan_out_commands;
mod route_report;

use crate::out::outln;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use glider_config::{Config, ConfigHandle};
use glider_engine::Engine;
use glider_sys::listen::Drain;

mod context_commands;
mod desktop;
mod discovery;
mod doctor_commands;
mod mcp_commands;
mod mitm_commands;
mod out;
mod serve;
mod setup_commands;
use mitm_commands::{CaAction, TransparentAction, ca, run_cli, transparent};
use tracing_subscriber::prelude::*;

/// mimalloc, not glibc's malloc: a request allocates and frees thousands of small
/// blocks (decoded JSON, the ngl request, encoded bodies), and glibc's malloc and free
/// were about a third of a request's instructions (callgrind, `bench/callgrind.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        #[command(flatten)]
        serve: desktop::ServeArgs,
        /// Show the dashboard in a window of its own, with a tray icon (as `glider
        /// desktop`; needs a build with `--features desktop`).
        #[arg(long)]
        window: bool,
    },
    /// Serve as `glider serve` does, with the dashboard in a window of the operating
    /// system and a tray icon (Open dashboard, Pause local routing, Exit). Closing the
    /// window leaves Glider serving. Needs a build with `--features desktop`.
    Desktop {
        #[command(flatten)]
        serve: desktop::ServeArgs,
        #[command(flatten)]
        window: desktop::WindowArgs,
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
    /// `glider run claude -p "hi"`. Its exit status is the CLI's. Claude Code also gets
    /// Glider's flag commands (/local, /cloud…) for that process, via `--add-dir`.
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
    /// The context log: `sessions`, `show ID`, `export ID [--json]`, `forget ID`
    /// (reads GLIDER_HOME/context directly; works while `glider serve` runs).
    Context {
        #[command(subcommand)]
        action: context_commands::ContextAction,
    },
    /// Make Glider's flags typable in a CLI: `glider setup claude` installs Claude
    /// Code command files for /local, /cloud, /via, /claude, /cursor-agent and /agy
    /// (user level, never over a file of your own); `--remove` deletes them.
    Setup {
        #[command(subcommand)]
        target: SetupTarget,
    },
    /// Check backends, local model servers, the CA, leftovers of a killed run, ports
    /// and GLIDER_HOME; each problem with the command that fixes it (exit 1 if any).
    Doctor {
        /// Config file. Default: the embedded configs/glider.yaml.
        #[arg(short, long, env = "GLIDER_CONFIG")]
        config: Option<PathBuf>,
        /// Print JSON (the shape is in docs/doctor.md).
        #[arg(long)]
        json: bool,
    },
    /// MCP servers' OAuth logins: `login NAME`, `logout NAME` (docs/tools.md).
    Mcp {
        #[command(subcommand)]
        action: mcp_commands::McpAction,
        /// Config file whose mcp.servers to use. Default: the embedded profile.
        #[arg(short, long, env = "GLIDER_CONFIG", global = true)]
        config: Option<PathBuf>,
    },
    /// Routing tools.
    Route {
        #[command(subcommand)]
        action: RouteAction,
    },
    /// Fan-out `shadow`'s samples: `glider shadow report` (reads GLIDER_HOME/shadow).
    Shadow {
        #[command(subcommand)]
        action: ShadowAction,
    },
}

#[derive(Subcommand)]
enum ShadowAction {
    /// Per shadow backend and route: samples, agreement with the primary (same tools,
    /// same stop reason), text similarity, latency and output tokens against the primary.
    Report {
        /// The newest samples read.
        #[arg(long, default_value_t = fan_out_commands::REPORT_SAMPLES)]
        last: usize,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum SetupTarget {
    /// Claude Code: ~/.claude/commands/<flag>.md (or $CLAUDE_CONFIG_DIR/commands).
    Claude {
        /// Delete the command files Glider installed (a file of your own stays).
        #[arg(long)]
        remove: bool,
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
        /// Instead of routing a body: a request `fan_out: {mode: all}` answered, by its
        /// sequence number (`seq` in /api/requests), every candidate's answer side by
        /// side (from GLIDER_HOME/history).
        #[arg(long, value_name = "SEQ")]
        compare: Option<u64>,
    },
    /// The routing evidence under GLIDER_HOME: requests and tokens per rule, side and
    /// kind (history), local agreement per kind (shadow samples), and what a lower
    /// routing.classifier.local_threshold would move; --apply writes the suggestion.
    Report {
        /// Config file whose thresholds are read (and, with --apply, written).
        /// Default: the embedded configs/glider.yaml.
        #[arg(short, long, env = "GLIDER_CONFIG")]
        config: Option<PathBuf>,
        /// The newest requests (and shadow samples) read.
        #[arg(long, default_value_t = route_report::REPORT_REQUESTS)]
        last: usize,
        /// Compared shadow samples each moved kind needs for a suggestion.
        #[arg(long, default_value_t = route_report::MIN_SAMPLES)]
        min_samples: u64,
        /// Pooled agreement (0.0 to 1.0) a suggestion needs.
        #[arg(long, default_value_t = route_report::MIN_AGREEMENT)]
        min_agreement: f64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Write the suggested local_threshold to the config file (a running glider
        /// serve reloads it).
        #[arg(long)]
        apply: bool,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Doctor { config, json } => doctor_commands::doctor(config.as_deref(), json),
        Command::Setup {
            target: SetupTarget::Claude { remove },
        } => match setup_commands::commands_dir()
            .and_then(|dir| setup_commands::setup_claude(&dir, remove))
        {
            Ok(lines) => {
                for line in lines {
                    outln!("{line}");
                }
                if !remove {
                    outln!(
                        "type a flag as the start of a Claude Code message, e.g. `/local explain this`; it reaches Glider and is stripped before the model"
                    );
                }
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("glider setup claude: {e:#}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Route {
            action:
                RouteAction::Explain {
                    json,
                    compare: Some(id),
                    ..
                },
        } => print_or_fail(
            "glider route explain --compare",
            fan_out_commands::compare(&glider_home(), id, json),
        ),
        Command::Route {
            action:
                RouteAction::Report {
                    config,
                    last,
                    min_samples,
                    min_agreement,
                    json,
                    apply,
                },
        } => print_or_fail(
            "glider route report",
            route_report::run(
                &glider_home(),
                config.as_deref(),
                last,
                route_report::Bar {
                    min_samples,
                    min_agreement,
                },
                json,
                apply,
            ),
        ),
        Command::Shadow {
            action: ShadowAction::Report { last, json },
        } => print_or_fail(
            "glider shadow report",
            fan_out_commands::shadow_report(&glider_home(), last, json),
        ),
        Command::Route {
            action:
                RouteAction::Explain {
                    config,
                    dialect,
                    headers,
                    json,
                    compare: None,
                },
        } => print_or_fail(
            "glider route explain",
            explain::explain(config, dialect, headers, json),
        ),
        Command::Context { action } => print_or_fail(
            "glider context",
            context_commands::run(action, &glider_home()),
        ),
        Command::Mcp { action, config } => {
            print_or_fail("glider mcp", mcp_commands::run(action, config.as_deref()))
        }
        Command::Ca { action, config } => ca(action, config.as_deref()),
        Command::Run { config, command } => run_cli(config.as_deref(), &command),
        Command::Transparent { action, config } => transparent(action, config.as_deref()),
        Command::Serve {
            serve,
            window: true,
        } => desktop::run(serve, desktop::WindowArgs::default()),
        Command::Desktop { serve, window } => desktop::run(serve, window),
        Command::Serve {
            serve,
            window: false,
        } => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(e) => {
                    eprintln!("glider: cannot start the async runtime: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            let desktop::ServeArgs {
                config,
                port,
                dashboard_port,
                mitm_port,
            } = serve;
            match runtime.block_on(self::serve(config, port, dashboard_port, mitm_port, None)) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("glider: {e:#}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}

/// A subcommand's text on standard output, or its error (exit 1).
fn print_or_fail(command: &str, result: anyhow::Result<String>) -> std::process::ExitCode {
    match result {
        Ok(text) => {
            outln!("{text}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{command}: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn check(path: &std::path::Path) -> std::process::ExitCode {
    match Config::load(path) {
        Ok(config) => {
            outln!(
                "{}: valid ({} backends)",
                path.display(),
                config.backends.len()
            );
            for backend in &config.backends {
                outln!(
                    "  backend {}: {}",
                    backend.name,
                    glider_backend::credentials::describe(backend)
                );
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
    window: Option<desktop::WindowHooks>,
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
    let filter = std::env::var("GLIDER_LOG")
        .ok()
        .and_then(|spec| serve::log_filter(&spec).ok())
        .unwrap_or_else(|| {
            let spec = config.log_level.clone().unwrap_or_else(|| "info".into());
            serve::log_filter(&spec)
                .or_else(|_| serve::log_filter("info"))
                .unwrap_or_default()
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
    if config_path.is_none() {
        discovery::use_found_servers(&mut config).await?;
    }

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
    // Stdio MCP servers, plugins and probes (`nvidia-smi`) a killed run left behind are
    // ended before the warning below looks at what is still running.
    for ended in
        glider_sys::runstate::end_orphaned_groups(&previous, &["mcp:", "plugin:", "probe:"])
    {
        tracing::warn!("{ended}");
    }
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
        window,
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

/// `serve` once the run is recorded in `runstate`: open the doors (in this order: the
/// console lines and the dashboard's door list follow it) and run them until the stop
/// signal, then drain.
async fn serve_recorded(
    config: Config,
    config_path: Option<PathBuf>,
    baseline: Option<Arc<Config>>,
    home: PathBuf,
    filter_handle: serve::LogFilterHandle,
    runstate: &mut glider_sys::runstate::RunState,
    window: Option<desktop::WindowHooks>,
) -> anyhow::Result<()> {
    let (delegator, vendors) = serve::start_delegation(runstate, &config.delegate);
    let handle = ConfigHandle::new(config, config_path.clone());
    let engine = Engine::new(handle.clone());
    let vram = serve::start_vram(&engine, &handle, &home, runstate.delegate_pids());
    // Each plugin's process group is recorded like a delegate's: a crash leaves it
    // named for the next start's check (`glider doctor`).
    engine.attach_plugins(Some(runstate.delegate_pids()));
    let context = serve::start_context(&engine, &home, &handle.snapshot())?;
    let _summarizer = serve::start_summarizer(&engine, context.as_ref())?;
    let _background = serve::start_background(&handle, &engine, filter_handle)?;

    let snapshot = handle.snapshot();
    let (trigger, stop) = serve::Stop::new();
    // Every door drains under one deadline: open replies get server.shutdown_grace_secs,
    // then streams still open end with their dialect's error event.
    let drain = Drain::on(
        stop.stopped(),
        std::time::Duration::from_secs(snapshot.server.shutdown_grace_secs),
    );
    let mcp = serve::start_mcp(&handle, &engine, runstate, &home);
    let gateway = serve::start_gateway(
        &engine,
        &delegator,
        context.as_ref().and_then(|c| c.responses().cloned()),
        &mcp,
        &snapshot,
        config_path.as_deref(),
        &home,
        &drain,
    )
    .await?;
    // One signal stops every door; until the gateway listens, a signal ends the process.
    // The window's Exit is the same stop.
    let window_stop = window.as_ref().map(|hooks| hooks.stop.clone());
    let grace_secs = snapshot.server.shutdown_grace_secs;
    trigger.on(async move {
        match window_stop {
            Some(stop) => {
                tokio::select! {
                    () = shutdown_signal(grace_secs) => {}
                    () = stop.notified() => tracing::info!(
                        "shutting down: draining open requests for up to {grace_secs} s (server.shutdown_grace_secs)"
                    ),
                }
            }
            None => shutdown_signal(grace_secs).await,
        }
    });

    let mut doors = vec![gateway.door];
    let mut transparent = None;
    let mut enrollment = None;
    if snapshot.mitm.enabled {
        let mitm = serve::start_mitm(
            &engine,
            &home,
            &delegator,
            &vendors,
            &snapshot,
            runstate,
            &drain,
            context.as_ref().and_then(|c| c.responses().cloned()),
        )
        .await?;
        doors.push(mitm.door);
        if let Some(started) = mitm.transparent {
            transparent = Some(started.door);
            enrollment = started.enrollment;
        }
    }
    let (dashboard_address, dashboard) = serve::start_dashboard(
        &engine,
        &home,
        &snapshot,
        serve::DashboardInputs {
            doors,
            baseline,
            vendors,
            enrollment,
            context: context.as_deref().map(serve::context_surface),
            mcp: Some(serve::mcp_surface(&mcp)),
        },
        &drain,
    )
    .await?;
    // Local backends are probed before serving (loopback, quick; what they can do decides
    // the first request's route); the cloud ones in the background: a slow cloud probe
    // (up to its timeout) must not hold up serving.
    engine.probe_local_backends().await;
    if let Some(hooks) = window {
        let token = serve::dashboard_token(&snapshot)?;
        // Bound to every address: the window comes in over loopback, as the rules want.
        let mut address = dashboard_address;
        if address.ip().is_unspecified() {
            address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        (hooks.ready)(format!("http://{address}"), token, handle.clone());
    }
    tokio::spawn({
        let engine = engine.clone();
        async move { serve::report_backends(&engine).await }
    });

    let (gateway, dashboard, ()) = tokio::join!(
        gateway.serving,
        dashboard,
        serve::remove_rules_at_stop(transparent, &stop),
    );
    // The MCP servers go after the doors: a drained request may still have called a tool.
    mcp.shutdown().await;
    engine.stop_plugins().await;
    drop(vram);
    gateway?;
    dashboard?;
    if let Some(context) = context {
        // What the drained requests queued is committed before the process ends.
        let _ = tokio::task::spawn_blocking(move || context.log().flush()).await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Resolves at the first SIGINT or SIGTERM; a second one ends the process at once
/// (the drain is then not waited for).
async fn shutdown_signal(grace_secs: u64) {
    let mut signals = StopSignals::new();
    signals.next().await;
    tracing::info!(
        "shutting down: draining open requests for up to {grace_secs} s (server.shutdown_grace_secs); a second signal stops at once"
    );
    tokio::spawn(async move {
        signals.next().await;
        eprintln!("glider: second stop signal: stopping at once");
        std::process::exit(1);
    });
}

/// The stop signals, registered once so a second one is not missed.
struct StopSignals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn new() -> StopSignals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            StopSignals {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// The next SIGINT or SIGTERM (Ctrl-C elsewhere).
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                () = recv(&mut self.interrupt) => {},
                () = recv(&mut self.terminate) => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
