//! `git_status`, `git_diff` and `git_log`: git run in the [`Sandbox`], in the workspace,
//! with no global or system config (a user's aliases and pagers stay out), no optional
//! locks (a read never takes `index.lock`), no fsmonitor or hooks, and no prompt.

use crate::sandbox::{RunOutput, Sandbox};
use crate::{ToolError, Workspace};

/// The most commits `git_log` shows.
pub const MAX_LOG_COMMITS: u64 = 100;

const GIT_ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_OPTIONAL_LOCKS", "0"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_PAGER", "cat"),
];

/// Which git tool, with its arguments.
pub enum GitQuery<'a> {
    Status,
    Diff {
        path: Option<&'a str>,
        staged: bool,
    },
    Log {
        max_count: u64,
        path: Option<&'a str>,
    },
}

/// Run one git tool; a path it is given must resolve inside the workspace.
pub async fn run(
    workspace: &Workspace,
    sandbox: &Sandbox,
    query: GitQuery<'_>,
) -> Result<String, ToolError> {
    let root = workspace.root().display().to_string();
    let mut args: Vec<String> = [
        "-c",
        &format!("safe.directory={root}"),
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.hooksPath=/dev/null",
        "--no-pager",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    let path = match &query {
        GitQuery::Status => {
            args.extend(["status".into(), "--short".into(), "--branch".into()]);
            None
        }
        GitQuery::Diff { path, staged } => {
            args.extend(["diff".into(), "--no-color".into(), "--no-ext-diff".into()]);
            if *staged {
                args.push("--cached".into());
            }
            *path
        }
        GitQuery::Log { max_count, path } => {
            args.extend([
                "log".into(),
                "--no-color".into(),
                format!("--max-count={}", (*max_count).clamp(1, MAX_LOG_COMMITS)),
                "--format=%h %ad %an: %s".into(),
                "--date=short".into(),
            ]);
            *path
        }
    };
    if let Some(path) = path {
        let resolved = workspace.resolve(path)?;
        args.push("--".into());
        args.push(resolved.display().to_string());
    }
    let out = sandbox.run("git", &args, GIT_ENV).await?;
    render(out)
}

fn render(out: RunOutput) -> Result<String, ToolError> {
    if out.code != Some(0) && !out.truncated {
        let why = out.stderr.trim();
        return Err(ToolError::Failed(format!("git failed: {why}")));
    }
    let mut text = out.stdout;
    if text.is_empty() {
        text = "(no output)".into();
    }
    if out.truncated {
        text.push_str("\n[glider: output cut at the tools.max_output_bytes cap]");
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::SandboxMode;

    fn git(root: &std::path::Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(root)
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    }

    #[tokio::test]
    async fn status_diff_and_log_run_sandboxed_and_a_path_outside_is_refused() {
        let root = tempfile::tempdir().expect("root");
        git(root.path(), &["init", "-q"]);
        std::fs::write(root.path().join("a.txt"), "one\n").expect("w");
        git(root.path(), &["add", "a.txt"]);
        git(root.path(), &["commit", "-q", "-m", "first commit"]);
        std::fs::write(root.path().join("a.txt"), "two\n").expect("w");
        let ws = Workspace::open(root.path()).expect("opens");
        let sandbox = Sandbox::new(
            ws.root(),
            SandboxMode::ReadOnly,
            Duration::from_secs(20),
            65536,
        );
        let status = run(&ws, &sandbox, GitQuery::Status).await.expect("status");
        assert!(status.contains(" M a.txt"), "{status}");
        let diff = run(
            &ws,
            &sandbox,
            GitQuery::Diff {
                path: Some("a.txt"),
                staged: false,
            },
        )
        .await
        .expect("diff");
        assert!(diff.contains("-one") && diff.contains("+two"), "{diff}");
        let log = run(
            &ws,
            &sandbox,
            GitQuery::Log {
                max_count: 5,
                path: None,
            },
        )
        .await
        .expect("log");
        assert!(log.contains("first commit"), "{log}");
        let outside = run(
            &ws,
            &sandbox,
            GitQuery::Diff {
                path: Some("/etc/passwd"),
                staged: false,
            },
        )
        .await;
        assert!(matches!(outside, Err(ToolError::Refused(_))), "{outside:?}");
    }
}
