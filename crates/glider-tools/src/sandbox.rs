//! The sandbox for tools that run a subprocess (the git tools): the child confines
//! itself with Landlock between fork and exec — Glider itself is never restricted — so
//! that it reads only the workspace and the system's program directories and writes
//! nowhere ([`SandboxMode::ReadOnly`]) or only inside the workspace
//! ([`SandboxMode::WorkspaceWrite`], opt-in); `no_new_privs` is set with it. Where the
//! kernel cannot enforce every rule, the child does not exec and the tool says why:
//! nothing runs unconfined. The child leads its own process group, which is killed at
//! the timeout or once its output passes the cap; its environment is emptied but for
//! `PATH`, `LANG` and what the tool sets.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use glider_sys::procutil::{GroupGuard, spawn_group_leader};
use landlock::{
    ABI, Access, AccessFs, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
    path_beneath_rules,
};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use crate::ToolError;

/// The Landlock ABI whose file-system rights are handled: 3 (Linux 6.2) adds
/// truncation, the last right a write can go through.
const LANDLOCK_ABI: ABI = ABI::V3;

/// What the child reads besides the workspace: where programs and their libraries and
/// configuration live. Missing ones are skipped.
const SYSTEM_READ: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"];
/// Device files the child may read and write (writing to them changes nothing).
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/urandom"];

/// The errno the child fails with when Landlock is not fully enforced (`ENOTSUP`):
/// only an errno crosses from the forked child back to the spawning parent.
const ENOTSUP: i32 = 95;

pub use glider_config::SandboxMode;

/// What a sandboxed run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput {
    /// The exit code; `None` when it was killed (timeout or output cap).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The output passed the cap and the process was stopped there.
    pub truncated: bool,
}

/// How subprocesses of tools run.
#[derive(Debug, Clone)]
pub struct Sandbox {
    root: PathBuf,
    mode: SandboxMode,
    timeout: Duration,
    max_output_bytes: usize,
}

impl Sandbox {
    pub fn new(root: &Path, mode: SandboxMode, timeout: Duration, max_output_bytes: usize) -> Self {
        Sandbox {
            root: root.to_path_buf(),
            mode,
            timeout,
            max_output_bytes,
        }
    }

    /// The Landlock ruleset for a child: system directories read-only, the workspace
    /// read-only or read-write, a few harmless devices.
    fn ruleset(&self) -> Result<RulesetCreated, ToolError> {
        let all = AccessFs::from_all(LANDLOCK_ABI);
        let read = AccessFs::from_read(LANDLOCK_ABI);
        let existing = |paths: &[&str]| -> Vec<PathBuf> {
            paths
                .iter()
                .map(PathBuf::from)
                .filter(|p| p.exists())
                .collect()
        };
        let workspace_access = match self.mode {
            SandboxMode::ReadOnly => read,
            SandboxMode::WorkspaceWrite => all,
        };
        let built = landlock::Ruleset::default()
            .handle_access(all)
            .and_then(|r| r.create())
            .and_then(|r| r.add_rules(path_beneath_rules(existing(SYSTEM_READ), read)))
            .and_then(|r| {
                r.add_rules(path_beneath_rules(
                    existing(DEVICES),
                    AccessFs::from_file(LANDLOCK_ABI),
                ))
            })
            .and_then(|r| r.add_rules(path_beneath_rules([&self.root], workspace_access)));
        built.map_err(|e| ToolError::Sandbox(format!("cannot build the Landlock ruleset: {e}")))
    }

    /// Run `program args` in the workspace, confined; `env` is added to the child's
    /// otherwise empty environment.
    pub async fn run(
        &self,
        program: &str,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Result<RunOutput, ToolError> {
        let ruleset = Mutex::new(Some(self.ruleset()?));
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&self.root)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let confine = move || -> std::io::Result<()> {
            // Runs in the forked child: no allocation on the good path, only syscalls.
            let taken = ruleset.lock().ok().and_then(|mut held| held.take());
            let Some(ruleset) = taken else {
                return Err(std::io::Error::from_raw_os_error(ENOTSUP));
            };
            match ruleset.restrict_self() {
                Ok(status)
                    if status.ruleset == RulesetStatus::FullyEnforced && status.no_new_privs =>
                {
                    Ok(())
                }
                _ => Err(std::io::Error::from_raw_os_error(ENOTSUP)),
            }
        };
        #[allow(unsafe_code)]
        // SAFETY: the hook runs between fork and exec in the child. It only takes the
        // ruleset out of a mutex nothing else holds (the closure owns it) and makes
        // two syscalls (prctl(PR_SET_NO_NEW_PRIVS) and landlock_restrict_self); its
        // error values are plain errnos, built without allocating.
        unsafe {
            command.pre_exec(confine);
        }
        let mut child = match spawn_group_leader(&mut command) {
            Ok(child) => child,
            Err(e) if e.raw_os_error() == Some(ENOTSUP) => {
                return Err(ToolError::Sandbox(format!(
                    "Landlock is not available or not fully enforced on this kernel (ABI {} needed), so `{program}` was not run: tools never run a subprocess unconfined",
                    LANDLOCK_ABI as i32
                )));
            }
            Err(e) => return Err(ToolError::Failed(format!("cannot run `{program}`: {e}"))),
        };
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolError::Failed(format!(
                "`{program}` started without its pipes"
            )));
        };
        let Some(mut group) = GroupGuard::new(child) else {
            return Err(ToolError::Failed(format!(
                "`{program}` ended before it could be watched"
            )));
        };
        let cap = self.max_output_bytes;
        let outputs = async { tokio::join!(read_capped(stdout, cap), read_capped(stderr, cap)) };
        let Ok(((stdout, out_cut), (stderr, err_cut))) =
            tokio::time::timeout(self.timeout, outputs).await
        else {
            // Dropping the guard kills the whole group.
            drop(group);
            return Err(ToolError::Failed(format!(
                "`{program}` was stopped after the {}-second timeout (tools.timeout_secs)",
                self.timeout.as_secs_f64()
            )));
        };
        let truncated = out_cut || err_cut;
        let status = group
            .finish()
            .await
            .map_err(|e| ToolError::Failed(format!("`{program}` could not be waited for: {e}")))?;
        Ok(RunOutput {
            code: if truncated { None } else { status.code() },
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            truncated,
        })
    }
}

/// Up to `cap` bytes of a pipe, and whether there was more; stops reading at the cap
/// (the group is killed after, so a writer blocked on the full pipe ends too).
async fn read_capped(mut pipe: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return (bytes, false),
            Ok(n) => {
                bytes.extend_from_slice(&chunk[..n]);
                if bytes.len() > cap {
                    bytes.truncate(cap);
                    return (bytes, true);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(root: &Path, mode: SandboxMode) -> Sandbox {
        Sandbox::new(root, mode, Duration::from_secs(20), 4096)
    }

    async fn sh(sandbox: &Sandbox, script: &str) -> Result<RunOutput, ToolError> {
        sandbox
            .run("/bin/sh", &["-c".into(), script.into()], &[])
            .await
    }

    #[tokio::test]
    async fn a_write_in_read_only_mode_fails_and_nothing_is_written() {
        let root = tempfile::tempdir().expect("root");
        let out = sh(
            &sandbox(root.path(), SandboxMode::ReadOnly),
            "echo x > made.txt",
        )
        .await
        .expect("runs");
        assert_ne!(out.code, Some(0), "{out:?}");
        assert!(out.stderr.contains("Permission denied"), "{out:?}");
        assert!(!root.path().join("made.txt").exists());
    }

    #[tokio::test]
    async fn workspace_write_writes_inside_the_root_only() {
        let root = tempfile::tempdir().expect("root");
        let outside = tempfile::tempdir().expect("outside");
        let target = outside.path().join("escaped.txt");
        let script = format!("echo in > made.txt && echo out > {}", target.display());
        let out = sh(&sandbox(root.path(), SandboxMode::WorkspaceWrite), &script)
            .await
            .expect("runs");
        assert_ne!(out.code, Some(0), "{out:?}");
        assert_eq!(
            std::fs::read_to_string(root.path().join("made.txt")).expect("made"),
            "in\n"
        );
        assert!(!target.exists(), "nothing written outside the root");
    }

    #[tokio::test]
    async fn a_read_outside_the_root_is_refused_and_inside_it_works() {
        let root = tempfile::tempdir().expect("root");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(root.path().join("in.txt"), "inside").expect("write");
        std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
        let sandbox = sandbox(root.path(), SandboxMode::ReadOnly);
        let inside = sh(&sandbox, "cat in.txt").await.expect("runs");
        assert_eq!((inside.code, inside.stdout.as_str()), (Some(0), "inside"));
        let script = format!("cat {}", outside.path().join("secret.txt").display());
        let refused = sh(&sandbox, &script).await.expect("runs");
        assert_ne!(refused.code, Some(0));
        assert!(refused.stderr.contains("Permission denied"), "{refused:?}");
        assert!(!refused.stdout.contains("secret"));
    }

    #[tokio::test]
    async fn a_runaway_command_is_stopped_at_the_timeout_with_its_group() {
        let root = tempfile::tempdir().expect("root");
        let quick = Sandbox::new(
            root.path(),
            SandboxMode::ReadOnly,
            Duration::from_millis(300),
            4096,
        );
        // The shell's child sleeps too: the whole group must go.
        let error = sh(&quick, "sleep 600 & echo $! > /dev/null; sleep 600")
            .await
            .expect_err("stopped");
        assert!(error.to_string().contains("timeout"), "{error}");
    }

    #[tokio::test]
    async fn output_past_the_cap_is_cut_and_the_process_stopped() {
        let root = tempfile::tempdir().expect("root");
        let out = sh(&sandbox(root.path(), SandboxMode::ReadOnly), "yes glider")
            .await
            .expect("runs");
        assert!(out.truncated);
        assert_eq!(out.stdout.len(), 4096);
        assert_eq!(out.code, None);
    }
}
