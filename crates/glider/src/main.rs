//! The `glider` binary: parse the command line, set up logging, load and validate the
//! config, wire the engine to its doors, serve until a signal, drain. No logic of the
//! pipeline lives here.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use glider_config::{Config, ConfigHandle};
use glider_engine::Engine;
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
    },
    /// Validate a config file and print what is wrong, with line and column.
    Check {
        #[arg(short, long)]
        config: PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => check(&config),
        Command::Serve { config, port } => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(e) => {
                    eprintln!("glider: cannot start the async runtime: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(config, port)) {
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

async fn serve(config_path: Option<PathBuf>, port: Option<u16>) -> anyhow::Result<()> {
    let mut config = match &config_path {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default()?,
    };
    if let Some(port) = port {
        config.server.proxy_port = port;
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
    std::fs::create_dir_all(&home)
        .with_context(|| format!("cannot create GLIDER_HOME {}", home.display()))?;
    let handle = ConfigHandle::new(config, config_path.clone());
    let _watcher = handle.watch()?;
    let engine = Engine::new(handle.clone());
    engine.spawn_background();

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
    report_backends(&engine).await;

    glider_gateway::serve(listener, engine, shutdown_signal()).await?;
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
