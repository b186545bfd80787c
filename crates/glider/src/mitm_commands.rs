//! The MITM proxy's commands: `glider ca path|print|install` (Glider's CA and how to
//! trust it), `glider run <cli>` (one CLI started with the proxy and the CA set, and for
//! Claude Code Glider's flag commands for that one process) and
//! `glider transparent cleanup` (remove redirect rules a killed run left).

use crate::out::{out, outln};
use anyhow::Context;
use clap::Subcommand;

use crate::{glider_home, load_config};

/// What `glider ca` does.
#[derive(Subcommand)]
pub enum CaAction {
    /// Print the path of ca.crt.
    Path,
    /// Print ca.crt (PEM).
    Print,
    /// Add ca.crt to the system trust store (as root), or print the exact commands;
    /// also print the variables for Node- and Codex-based CLIs.
    Install {
        /// Only print what would be done.
        #[arg(long)]
        dry_run: bool,
    },
}

/// `glider ca path|print|install`.
pub fn ca(action: CaAction, config: Option<&std::path::Path>) -> std::process::ExitCode {
    match ca_inner(action, config) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("glider: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn ca_inner(
    action: CaAction,
    config: Option<&std::path::Path>,
) -> anyhow::Result<std::process::ExitCode> {
    use glider_mitm::trust;
    let config = load_config(config)?;
    let authority =
        glider_mitm::Authority::load_or_create(&glider_mitm::ca_dir(&config.mitm, &glider_home()))?;
    let cert = authority.cert_path();
    match action {
        CaAction::Path => outln!("{}", cert.display()),
        CaAction::Print => out!("{}", authority.cert_pem()),
        CaAction::Install { dry_run } => {
            let trust_dir = std::path::Path::new(trust::SYSTEM_TRUST_DIR);
            let commands = trust::install_commands(&cert, trust_dir);
            let bundle = trust::write_bundle(&authority).with_context(|| {
                format!("cannot write the CA bundle next to {}", cert.display())
            })?;
            if dry_run || !trust::is_root() {
                if !dry_run {
                    outln!("Not running as root. To trust Glider's CA system-wide, run:");
                } else {
                    outln!("Would run:");
                }
                for command in &commands {
                    outln!("  sudo {command}");
                }
            } else {
                let output = trust::install(&cert, trust_dir)?;
                out!("{output}");
                outln!(
                    "Installed {} in the system trust store.",
                    trust_dir.join(trust::SYSTEM_TRUST_NAME).display()
                );
            }
            outln!();
            outln!(
                "Node-based CLIs (Cursor, and Claude Code when it does not read the system store) and Codex also need, in your shell profile:"
            );
            for line in trust::env_lines(&cert, &bundle) {
                outln!("  {line}");
            }
            outln!();
            outln!(
                "Or start one CLI with all of this set, for that process only: glider run <cli> [args...]"
            );
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `glider run <cli> [args...]`: replace this process with the CLI, its environment
/// pointed at the MITM proxy and Glider's CA. Replacing (exec) rather than supervising
/// means the CLI's exit status and every signal (Ctrl-C, SIGTERM, job control) reach it
/// and come back exactly as if it had been started directly.
pub fn run_cli(config: Option<&std::path::Path>, command: &[String]) -> std::process::ExitCode {
    match run_cli_inner(config, command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("glider: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run_cli_inner(
    config: Option<&std::path::Path>,
    command: &[String],
) -> anyhow::Result<std::process::ExitCode> {
    use glider_mitm::trust;
    let config = load_config(config)?;
    let authority =
        glider_mitm::Authority::load_or_create(&glider_mitm::ca_dir(&config.mitm, &glider_home()))?;
    let bundle = trust::write_bundle(&authority)?;
    let host = match config.server.bind.as_str() {
        "0.0.0.0" | "::" | "[::]" => "127.0.0.1",
        bind => bind,
    };
    if config.mitm.port == 0 {
        anyhow::bail!(
            "mitm.port is 0 in this config (a different free port at each start), so glider run cannot know where the proxy is; set a fixed port"
        );
    }
    let proxy = format!("http://{host}:{}", config.mitm.port);
    if !config.mitm.enabled {
        eprintln!(
            "glider: note: mitm.enabled is false in this config; start a `glider serve` whose config enables it"
        );
    }
    let reachable = format!("{host}:{}", config.mitm.port)
        .parse::<std::net::SocketAddr>()
        .ok()
        .is_some_and(|addr| {
            std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1)).is_ok()
        });
    if !reachable {
        eprintln!(
            "glider: warning: nothing answers on {host}:{} yet; start `glider serve` (with mitm.enabled: true) or the CLI's requests will fail",
            config.mitm.port
        );
    }
    let env = trust::child_env(
        &proxy,
        &authority.cert_path(),
        &bundle,
        &config.mitm.hosts,
        |name| std::env::var(name).ok(),
    );
    let Some((program, args)) = command.split_first() else {
        anyhow::bail!("glider run needs a command");
    };
    let mut child = std::process::Command::new(program);
    if crate::setup_commands::is_claude(program) {
        // `--add-dir=DIR`, not `--add-dir DIR`: the option takes several directories, and
        // in its two-word form would swallow a prompt that follows it.
        let overlay = crate::setup_commands::run_overlay(
            &glider_home(),
            crate::setup_commands::commands_dir().ok().as_deref(),
        )?;
        child.arg(format!("--add-dir={}", overlay.display()));
    }
    child.args(args).envs(env);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let error = child.exec();
        eprintln!("glider: cannot run {program}: {error}");
        Ok(std::process::ExitCode::from(
            if error.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            },
        ))
    }
    #[cfg(not(unix))]
    {
        let status = child
            .status()
            .with_context(|| format!("cannot run {program}"))?;
        Ok(std::process::ExitCode::from(
            status.code().unwrap_or(1).clamp(0, 255) as u8,
        ))
    }
}

/// `glider transparent ...`.
#[derive(clap::Subcommand)]
pub enum TransparentAction {
    /// Remove redirect rules an earlier Glider run left (it was killed or crashed):
    /// Glider's own iptables chain and the jump to it. An explicit user action; Glider
    /// never does this by itself at start.
    Cleanup,
}

/// Run `glider transparent <action>`; the exit status says whether it worked.
pub fn transparent(
    action: TransparentAction,
    config: Option<&std::path::Path>,
) -> std::process::ExitCode {
    match transparent_inner(action, config) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("glider: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn transparent_inner(
    action: TransparentAction,
    config: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let TransparentAction::Cleanup = action;
    let config = load_config(config)?;
    let chain = glider_mitm::transparent::CHAIN;
    let home = glider_home();
    // The rules of a Glider that is running are its own: its stop removes them. Taking
    // them away under it would silently end transparent mode while it still runs.
    if let glider_sys::runstate::Previous::StillRunning(record) =
        glider_sys::runstate::previous(&home)
        && record
            .redirect
            .as_ref()
            .is_some_and(|r| r.removed_at.is_none())
    {
        anyhow::bail!(
            "Glider (pid {}) is running with transparent mode and owns the chain {chain}: stop it (a clean stop removes its rules); `glider transparent cleanup` is for the rules of a run that did not stop cleanly",
            record.pid
        );
    }
    let removed = glider_mitm::transparent::cleanup(
        &config.mitm.transparent_ports,
        config.mitm.transparent_port,
    )?;
    if removed {
        outln!("removed the redirect chain {chain} and the jump to it (nat OUTPUT)");
    } else {
        outln!("nothing to remove: no redirect chain {chain} is installed");
    }
    match glider_sys::runstate::mark_redirect_removed(&home) {
        Ok(true) => outln!(
            "recorded the removal in {}",
            home.join(glider_sys::runstate::FILE_NAME).display()
        ),
        Ok(false) => {}
        Err(e) => eprintln!(
            "glider: could not update the run state under {}: {e}",
            home.display()
        ),
    }
    Ok(())
}
