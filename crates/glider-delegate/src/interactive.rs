//! The interactive template (spec: the default for `/agy`): open a separate console
//! running the CLI with the task (by default a detached tmux session in the workdir)
//! and reply at once with how to reach it. Glider neither waits for it nor stops it.
//! The CLI's configured env reaches it through a private file, never through an argv.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use glider_config::DelegateConfig;
use glider_ngl::{ApiError, ErrorKind, StreamEvent};
use glider_sys::childenv::ChildEnv;
use tokio::io::AsyncReadExt;

use crate::run::Events;
use crate::vendors::Vendor;

/// What a console launcher keeps of Glider's environment besides the minimal one and
/// its vendor's variables: how it reaches the user's display, session bus and
/// terminal multiplexer.
const CONSOLE_ENV: [&str; 8] = [
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "DBUS_SESSION_BUS_ADDRESS",
    "TMUX",
    "TMUX_TMPDIR",
    "COLORTERM",
    "TERM_PROGRAM",
];

/// Longest the console command (e.g. `tmux new-session -d`) may take to return.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Distinguishes sessions opened within the same millisecond.
static LAUNCHED: AtomicU64 = AtomicU64::new(0);

/// Open a console running `program` (with the vendor's args and env, then `-- <task>`
/// when the task is not empty) in `workdir`; the reply names the console and how to
/// attach to it.
pub fn launch(
    config: &DelegateConfig,
    vendor: Vendor,
    program: PathBuf,
    workdir: PathBuf,
    task: String,
) -> Events {
    let settings = vendor.settings(config);
    let session = session_name(vendor);
    let label = vendor.binary();
    let mut command = vec![program.display().to_string()];
    command.extend(settings.args.iter().cloned());
    if !task.is_empty() {
        // `--` ends the options: a task such as `-v check the build` is the prompt,
        // not a flag (agy parses Go-style flags, which stop at `--`).
        command.extend(["--".to_owned(), task.clone()]);
    }
    // A console server that already runs would not pass the launcher's environment
    // on, so the CLI's variables (API keys, often) travel in a private file that the
    // console's shell reads and deletes — never in an argv, where /proc/*/cmdline,
    // `ps` and tmux's pane_start_command would show them.
    let mut env_file = None;
    if !settings.env.is_empty() && config.interactive_command.iter().any(|i| i == "{command}") {
        match write_env_file(&session, &settings.env) {
            Ok(file) => {
                command = source_then_exec(&file, command);
                env_file = Some(file);
            }
            Err(e) => {
                let error = ApiError::new(
                    ErrorKind::Internal,
                    format!(
                        "cannot hand {label} its environment (delegate.{}.env): {e}",
                        label.replace('-', "_")
                    ),
                );
                return Box::pin(futures_util::stream::iter([StreamEvent::Error { error }]));
            }
        }
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
    let inherit: Vec<&str> = vendor
        .own_env()
        .iter()
        .chain(&CONSOLE_ENV)
        .copied()
        .collect();
    let launched = async move {
        match run_launcher(&argv, &inherit, &env, &workdir).await {
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
            Err(error) => {
                // No console ran to read and delete the file: delete it here.
                if let Some(file) = &env_file {
                    let _ = std::fs::remove_file(file);
                }
                vec![StreamEvent::Error { error }]
            }
        }
    };
    Box::pin(futures_util::stream::once(launched).flat_map(futures_util::stream::iter))
}

/// How old a console's environment file may get before a later launch deletes it (the
/// console it was for never read it).
const STALE_ENV_FILE: Duration = Duration::from_secs(600);

/// The private directory console environment files are written to: `glider` under
/// `$XDG_RUNTIME_DIR` (the per-user runtime directory), else `glider-<uid>` under the
/// temporary directory; created 0700, and refused unless it is a real directory owned
/// by this user (a shared /tmp could hold someone else's, or a symlink).
pub fn env_dir() -> io::Result<PathBuf> {
    let uid = std::fs::metadata("/proc/self")?.uid();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("glider"),
        None => std::env::temp_dir().join(format!("glider-{uid}")),
    };
    match std::fs::DirBuilder::new()
        .mode(glider_sys::fileacl::PRIVATE_DIR)
        .create(&dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(io::Error::other(format!(
            "{} is not a directory of this user",
            dir.display()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        glider_sys::fileacl::set_mode(&dir, glider_sys::fileacl::PRIVATE_DIR)?;
    }
    Ok(dir)
}

/// Write `env` as `export K='v'` lines to a new 0600 file (atomically) in [`env_dir`],
/// first deleting files there that no console read in time.
fn write_env_file(session: &str, env: &BTreeMap<String, String>) -> io::Result<PathBuf> {
    let mut text = String::new();
    for (key, value) in env {
        let valid = key
            .chars()
            .next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && key.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
        if !valid {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{key}` is not a variable name"),
            ));
        }
        text.push_str(&format!("export {key}={}\n", shell_quote(value)));
    }
    let dir = env_dir()?;
    sweep(&dir);
    let file = dir.join(format!("{session}-{}.env", std::process::id()));
    glider_sys::atomicfile::write(&file, text.as_bytes(), glider_sys::fileacl::PRIVATE_FILE)?;
    Ok(file)
}

/// Delete environment files in `dir` older than [`STALE_ENV_FILE`].
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_ENV_FILE);
        if stale && path.extension().is_some_and(|e| e == "env") {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// `'…'` with each `'` written as `'\''`: one word to a POSIX shell, whatever `value` holds.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

/// `command`, run by a shell that first reads `file` (exporting its variables) and
/// deletes it. `command .` keeps a broken file from stopping the shell before `rm`.
fn source_then_exec(file: &Path, command: Vec<String>) -> Vec<String> {
    let mut argv = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        r#"command . "$0"; rm -f -- "$0"; exec "$@""#.to_owned(),
        file.display().to_string(),
    ];
    argv.extend(command);
    argv
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
/// stderr say whether the console opened. The vendor's `env` is in its environment
/// (readable by this user only, never in an argv): a launcher that starts a console
/// server, or a terminal, hands it on; the env file covers a server already running.
async fn run_launcher(
    argv: &[String],
    inherit: &[&str],
    env: &BTreeMap<String, String>,
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
        .minimal_env(inherit)
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

    #[test]
    fn the_env_file_is_private_exact_and_deleted_by_the_console() {
        use std::os::unix::fs::PermissionsExt;
        let value = "it's a \"key\"\n$HOME `x` \\ end";
        let env = BTreeMap::from([
            ("GLIDER_T_ONE".to_owned(), value.to_owned()),
            ("_two".to_owned(), String::new()),
        ]);
        let file = write_env_file(&session_name(Vendor::Agy), &env).expect("written");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(file.parent().expect("dir")), 0o700);
        // The console's wrapper: read, delete, then exec the CLI with the variables.
        let argv = source_then_exec(
            &file,
            vec![
                "sh".into(),
                "-c".into(),
                r#"printf '%s|%s' "$GLIDER_T_ONE" "${_two-unset}""#.into(),
            ],
        );
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .expect("runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{value}|"));
        assert!(!file.exists(), "the console deletes it");
        assert!(!argv.concat().contains("a \"key\""), "{argv:?}");

        let bad = BTreeMap::from([("NOT-A-NAME".to_owned(), "x".to_owned())]);
        assert!(write_env_file("s", &bad).is_err());
    }
}
