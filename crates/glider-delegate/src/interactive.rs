//! The interactive template (spec: the default for `/agy`): open a separate console
//! running the CLI with the task (by default a detached tmux session in the workdir)
//! and reply at once with how to reach it. Glider neither waits for it nor stops it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use glider_config::DelegateConfig;
use glider_ngl::{ApiError, ErrorKind, StreamEvent};
use tokio::io::AsyncReadExt;

use crate::run::Events;
use crate::vendors::Vendor;

/// Longest the console command (e.g. `tmux new-session -d`) may take to return.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Distinguishes sessions opened within the same millisecond.
static LAUNCHED: AtomicU64 = AtomicU64::new(0);

/// Open a console running `program` (with the vendor's args and env, then `task` when
/// not empty) in `workdir`; the reply names the console and how to attach to it.
pub fn launch(
    config: &DelegateConfig,
    vendor: Vendor,
    program: PathBuf,
    workdir: PathBuf,
    task: String,
) -> Events {
    let settings = vendor.settings(config);
    let session = session_name(vendor);
    let mut command: Vec<String> = Vec::new();
    if !settings.env.is_empty() {
        // A console server that already runs would not pass the launcher's
        // environment on, so the CLI gets its variables through `env`.
        command.push("env".to_owned());
        command.extend(settings.env.iter().map(|(k, v)| format!("{k}={v}")));
    }
    command.push(program.display().to_string());
    command.extend(settings.args.iter().cloned());
    if !task.is_empty() {
        command.push(task.clone());
    }
    let argv = expand(
        &config.interactive_command,
        &session,
        &workdir,
        &task,
        &command,
    );
    let hint = config.attach_hint.replace("{session}", &session);
    let env = settings.env.clone();
    let label = vendor.binary();
    let launched = async move {
        match run_launcher(&argv, &env, &workdir).await {
            Ok(()) => {
                tracing::info!(delegate = label, %session, "opened an interactive delegate console");
                crate::note_events(
                    label,
                    format!(
                        "Glider: {label} is running in its own console (session `{session}`) in {}. Reach it with:\n\n    {hint}\n\nGlider does not wait for it or stop it; close it from that console.",
                        workdir.display()
                    ),
                )
                .to_vec()
            }
            Err(error) => vec![StreamEvent::Error { error }],
        }
    };
    Box::pin(futures_util::stream::once(launched).flat_map(futures_util::stream::iter))
}

/// `glider-agy-<unix ms>-<n>`: unique, and free of the `.` and `:` tmux refuses.
fn session_name(vendor: Vendor) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let n = LAUNCHED.fetch_add(1, Ordering::Relaxed);
    format!("glider-{}-{ms}-{n}", vendor.binary())
}

/// The template with its placeholders filled: an item that is exactly `{command}`
/// becomes the CLI's whole argv; `{session}`, `{workdir}`, `{task}` are replaced in
/// every other item.
fn expand(
    template: &[String],
    session: &str,
    workdir: &Path,
    task: &str,
    command: &[String],
) -> Vec<String> {
    let workdir = workdir.display().to_string();
    let mut argv = Vec::new();
    for item in template {
        if item == "{command}" {
            argv.extend(command.iter().cloned());
        } else {
            argv.push(
                item.replace("{session}", session)
                    .replace("{workdir}", &workdir)
                    .replace("{task}", task),
            );
        }
    }
    argv
}

/// Run the console command and wait (bounded) for it to return. Its exit status and
/// stderr say whether the console opened.
async fn run_launcher(
    argv: &[String],
    env: &std::collections::BTreeMap<String, String>,
    workdir: &Path,
) -> Result<(), ApiError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(ApiError::new(
            ErrorKind::Unavailable,
            "delegate.interactive_command is empty",
        ));
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .envs(env)
        .current_dir(workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            ApiError::new(
                ErrorKind::Unavailable,
                format!("cannot start {program} (delegate.interactive_command): {e}"),
            )
        })?;
    let mut stderr = child.stderr.take();
    let waited = tokio::time::timeout(LAUNCH_TIMEOUT, child.wait()).await;
    let status = match waited {
        // A launcher that keeps running (a terminal window in the foreground) is left
        // alone: the console is the user's now.
        Err(_) => {
            tracing::warn!(%program, "the interactive console command did not return; left running");
            return Ok(());
        }
        Ok(Err(e)) => {
            return Err(ApiError::new(
                ErrorKind::BadGateway,
                format!("waiting for {program}: {e}"),
            ));
        }
        Ok(Ok(status)) => status,
    };
    if status.success() {
        return Ok(());
    }
    let mut text = String::new();
    if let Some(stderr) = stderr.as_mut() {
        let mut bytes = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(1), stderr.read_to_end(&mut bytes)).await;
        text = String::from_utf8_lossy(&bytes).trim().to_owned();
    }
    Err(ApiError::new(
        ErrorKind::BadGateway,
        format!(
            "the interactive console did not open: {program} exited with {status}{}",
            if text.is_empty() {
                String::new()
            } else {
                format!(": {text}")
            }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_expands_its_placeholders() {
        let template: Vec<String> = [
            "tmux",
            "new",
            "-s",
            "{session}",
            "-c",
            "{workdir}",
            "{command}",
            "#{task}",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        let argv = expand(
            &template,
            "s1",
            Path::new("/w"),
            "fix it",
            &["agy".to_owned(), "fix it".to_owned()],
        );
        assert_eq!(
            argv,
            [
                "tmux", "new", "-s", "s1", "-c", "/w", "agy", "fix it", "#fix it"
            ]
        );
        assert_ne!(session_name(Vendor::Agy), session_name(Vendor::Agy));
    }
}
