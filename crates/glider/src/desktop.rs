//! `glider desktop` (and `glider serve --window`): Glider serving as `glider serve`
//! does, with its dashboard in a window of the operating system and a tray icon
//! (`glider_desktop`). The GUI's event loop takes the main thread (GTK wants it); the
//! doors run on a tokio runtime on a second thread, exactly as under `glider serve`.
//!
//! The window is one more client of the dashboard's door — its `Host` is the loopback
//! address, its `Origin` the dashboard's own, and with `server.dashboard_token` set it
//! opens `/?token=…` once, as a browser would, so the same rules apply. What the window
//! and the tray do to Glider is [`ServeActions`]: Exit fires the same stop as SIGTERM
//! (the drain, then the redirect rules taken back), and "Pause local routing" applies
//! the running config with its enabled local backends turned off, as a hot reload
//! would (resuming turns on the ones it turned off). A file reload while paused applies
//! the file as written, which ends the pause.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use glider_config::{ConfigHandle, ReloadOutcome};

/// What `serve` tells the window and takes from it.
pub struct WindowHooks {
    /// Called once the dashboard listens: its address (`http://127.0.0.1:PORT`), the
    /// token it requires if any, and the live config.
    pub ready: Box<dyn FnOnce(String, Option<String>, ConfigHandle) + Send>,
    /// Notified when the window asks Glider to stop.
    pub stop: Arc<tokio::sync::Notify>,
}

/// The arguments `glider serve` and `glider desktop` share (the window passes them
/// through to serve).
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Config file (watched for changes). Default: the embedded configs/glider.yaml.
    #[arg(short, long, env = "GLIDER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Override server.proxy_port (0 picks a free port).
    #[arg(long)]
    pub port: Option<u16>,
    /// Override server.dashboard_port (0 picks a free port).
    #[arg(long)]
    pub dashboard_port: Option<u16>,
    /// Override mitm.port (0 picks a free port).
    #[arg(long)]
    pub mitm_port: Option<u16>,
}

/// How the window behaves.
#[derive(clap::Args, Default)]
pub struct WindowArgs {
    /// Closing the window stops Glider (as the tray's Exit does).
    #[arg(long)]
    pub exit_on_close: bool,
    /// No tray icon (closing the window then stops Glider).
    #[arg(long)]
    pub no_tray: bool,
}

/// Run Glider with its dashboard in a window until it stops.
pub fn run(serve: ServeArgs, window: WindowArgs) -> std::process::ExitCode {
    let desktop = match glider_desktop::Desktop::new() {
        Ok(desktop) => desktop,
        Err(e) => {
            eprintln!("glider desktop: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let notifier = desktop.notifier();
    let stop = Arc::new(tokio::sync::Notify::new());
    let actions = Arc::new(ServeActions {
        stop: stop.clone(),
        config: Mutex::new(None),
        paused: Mutex::new(Vec::new()),
    });
    let hooks = WindowHooks {
        ready: Box::new({
            let notifier = notifier.clone();
            let actions = actions.clone();
            move |address, token, config| {
                if let Ok(mut held) = actions.config.lock() {
                    *held = Some(config);
                }
                let url = match token {
                    Some(token) => format!("{address}/?token={}", query_escape(&token)),
                    None => format!("{address}/"),
                };
                notifier.send(glider_desktop::Notice::Ready { url });
            }
        }),
        stop,
    };
    let server = std::thread::Builder::new()
        .name("glider-serve".into())
        .spawn(move || {
            let outcome = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime.block_on(crate::serve(
                    serve.config,
                    serve.port,
                    serve.dashboard_port,
                    serve.mitm_port,
                    Some(hooks),
                )),
                Err(e) => Err(anyhow::anyhow!("cannot start the async runtime: {e}")),
            };
            let error = outcome.as_ref().err().map(|e| format!("{e:#}"));
            notifier.send(glider_desktop::Notice::Stopped { error });
            outcome
        });
    let server = match server {
        Ok(server) => server,
        Err(e) => {
            eprintln!("glider desktop: cannot start the server thread: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let options = glider_desktop::Options {
        exit_on_close: window.exit_on_close,
        tray: !window.no_tray,
        ..glider_desktop::Options::default()
    };
    let shown = desktop.run(options, actions.clone());
    // The loop ends when serving has ended (or the window failed and asked it to).
    let served = server
        .join()
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the server thread panicked")));
    match (served, shown) {
        (Ok(()), Ok(())) => std::process::ExitCode::SUCCESS,
        (Err(e), _) => {
            eprintln!("glider: {e:#}");
            std::process::ExitCode::FAILURE
        }
        (Ok(()), Err(e)) => {
            eprintln!("glider desktop: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The window's and the tray's requests, carried out on the running Glider.
struct ServeActions {
    stop: Arc<tokio::sync::Notify>,
    /// The live config, once serving started.
    config: Mutex<Option<ConfigHandle>>,
    /// The local backends a pause turned off (and a resume turns on again).
    paused: Mutex<Vec<String>>,
}

impl glider_desktop::Actions for ServeActions {
    fn set_local_paused(&self, pause: bool) -> Result<(), String> {
        let handle = self
            .config
            .lock()
            .map_err(|_| "the config lock is poisoned".to_owned())?
            .clone()
            .ok_or("Glider is still starting: try again once the dashboard shows")?;
        let mut paused = self
            .paused
            .lock()
            .map_err(|_| "the pause lock is poisoned".to_owned())?;
        let (next, changed) = toggled(&handle.snapshot(), pause, &paused);
        match handle.apply(next) {
            ReloadOutcome::Rejected { error } => Err(format!(
                "local routing not {}: {error}",
                if pause { "paused" } else { "resumed" }
            )),
            ReloadOutcome::Applied { .. } | ReloadOutcome::Unchanged => {
                *paused = if pause { changed } else { Vec::new() };
                tracing::info!(
                    paused = pause,
                    backends = ?*paused,
                    "local routing {} from the tray",
                    if pause { "paused" } else { "resumed" }
                );
                Ok(())
            }
        }
    }

    fn exit(&self) {
        tracing::info!("stop asked from the window");
        self.stop.notify_one();
    }
}

/// The running config with local routing paused (every enabled local backend turned
/// off; their names returned) or resumed (the backends in `paused` turned on again).
fn toggled(
    running: &glider_config::Config,
    pause: bool,
    paused: &[String],
) -> (glider_config::Config, Vec<String>) {
    let mut next = running.clone();
    let mut changed = Vec::new();
    for backend in &mut next.backends {
        let turn = if pause {
            backend.is_local() && backend.enabled
        } else {
            paused.contains(&backend.name) && !backend.enabled
        };
        if turn {
            backend.enabled = !pause;
            changed.push(backend.name.clone());
        }
    }
    (next, changed)
}

/// `text` as a URL query value.
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> glider_config::Config {
        glider_config::Config::parse(
            "backends:\n  - {name: local, type: ollama, base_url: 'http://127.0.0.1:1', models: [m]}\n  - {name: off, type: ollama, base_url: 'http://127.0.0.1:2', models: [m], enabled: false}\n  - {name: cloud, type: anthropic, base_url: 'http://127.0.0.1:3', models: [c]}\n",
            "test",
        )
        .expect("a valid config")
    }

    #[test]
    fn pausing_turns_off_the_enabled_local_backends_and_resuming_only_those() {
        let running = config();
        let (paused, changed) = toggled(&running, true, &[]);
        assert_eq!(changed, ["local"]);
        let enabled: Vec<_> = paused
            .backends
            .iter()
            .map(|b| (b.name.as_str(), b.enabled))
            .collect();
        assert_eq!(enabled, [("local", false), ("off", false), ("cloud", true)]);
        // Resuming leaves `off` (off in the file) off.
        let (resumed, changed) = toggled(&paused, false, &changed);
        assert_eq!(changed, ["local"]);
        let enabled: Vec<_> = resumed
            .backends
            .iter()
            .map(|b| (b.name.as_str(), b.enabled))
            .collect();
        assert_eq!(enabled, [("local", true), ("off", false), ("cloud", true)]);
    }

    #[test]
    fn a_token_is_escaped_for_the_query() {
        assert_eq!(query_escape("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
        assert_eq!(query_escape("Plain-1._~"), "Plain-1._~");
    }
}
