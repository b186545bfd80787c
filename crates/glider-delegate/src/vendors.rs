//! The vendor registry: which delegate CLIs exist (`claude`, `cursor-agent`, `agy`),
//! where their executables are (configured path or `PATH`) and which version each
//! reports (`--version`, bounded by a timeout).

use std::path::{Path, PathBuf};
use std::time::Duration;

use glider_config::{DelegateConfig, DelegateVendorConfig};
use serde_json::{Value, json};

/// A CLI Glider can hand a message to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vendor {
    /// Claude Code (`/claude`).
    Claude,
    /// Cursor's agent CLI (`/cursor-agent`).
    CursorAgent,
    /// Antigravity's CLI (`/agy`).
    Agy,
}

impl Vendor {
    /// Every vendor, in the order the flags are documented.
    pub const ALL: [Vendor; 3] = [Vendor::Claude, Vendor::CursorAgent, Vendor::Agy];

    /// The vendor a message flag (`/claude`, ...) names.
    pub fn from_flag(flag: &str) -> Option<Vendor> {
        Vendor::ALL.into_iter().find(|v| v.flag() == flag)
    }

    /// The message flag, e.g. `/claude`.
    pub fn flag(self) -> &'static str {
        match self {
            Vendor::Claude => "/claude",
            Vendor::CursorAgent => "/cursor-agent",
            Vendor::Agy => "/agy",
        }
    }

    /// The executable's usual name on `PATH`.
    pub fn binary(self) -> &'static str {
        match self {
            Vendor::Claude => "claude",
            Vendor::CursorAgent => "cursor-agent",
            Vendor::Agy => "agy",
        }
    }

    /// This vendor's section of the config.
    pub fn settings(self, config: &DelegateConfig) -> &DelegateVendorConfig {
        match self {
            Vendor::Claude => &config.claude,
            Vendor::CursorAgent => &config.cursor_agent,
            Vendor::Agy => &config.agy,
        }
    }
}

/// Where a vendor's executable is: the configured `path` (a bare name is looked up on
/// `PATH`, `~/` is expanded), else its usual name on `PATH`. `None` when not installed.
pub fn locate(vendor: Vendor, config: &DelegateConfig) -> Option<PathBuf> {
    let wanted = vendor
        .settings(config)
        .path
        .clone()
        .unwrap_or_else(|| vendor.binary().to_owned());
    let wanted = expand_home(&wanted);
    if wanted.components().count() > 1 {
        return is_executable(&wanted).then_some(wanted);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(&wanted))
        .find(|candidate| is_executable(candidate))
}

/// `~/x` → `$HOME/x`; anything else unchanged.
pub fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// One vendor as discovery found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovered {
    /// Which vendor.
    pub vendor: Vendor,
    /// Its executable, if installed.
    pub path: Option<PathBuf>,
    /// The first line `--version` printed, if it answered in time.
    pub version: Option<String>,
    /// Why there is no version (not installed, timed out, failed).
    pub problem: Option<String>,
}

impl Discovered {
    /// The JSON shape `/api/vendors` and logs use.
    pub fn to_json(&self) -> Value {
        json!({
            "vendor": self.vendor.binary(),
            "flag": self.vendor.flag(),
            "path": self.path.as_ref().map(|p| p.display().to_string()),
            "version": self.version,
            "problem": self.problem,
        })
    }
}

/// Find every vendor and ask each for its version (in parallel, each bounded by
/// `version_timeout_secs`; a CLI that does not answer in time is killed).
pub async fn discover(config: &DelegateConfig) -> Vec<Discovered> {
    let timeout = Duration::from_secs(config.version_timeout_secs.max(1));
    let probes = Vendor::ALL.into_iter().map(|vendor| {
        let path = locate(vendor, config);
        async move {
            let Some(path) = path else {
                return Discovered {
                    vendor,
                    path: None,
                    version: None,
                    problem: Some(format!("{} is not installed", vendor.binary())),
                };
            };
            let (version, problem) = match version_of(&path, timeout).await {
                Ok(version) => (Some(version), None),
                Err(problem) => (None, Some(problem)),
            };
            Discovered {
                vendor,
                path: Some(path),
                version,
                problem,
            }
        }
    });
    futures_util::future::join_all(probes).await
}

async fn version_of(path: &Path, timeout: Duration) -> Result<String, String> {
    let mut command = tokio::process::Command::new(path);
    command
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let child = command
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    // Whatever happens, nothing the probe started outlives it.
    let _guard = child.id().map(crate::run::GroupGuard::new);
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Err(_) => Err(format!("--version did not answer within {timeout:?}")),
        Ok(Err(e)) => Err(format!("cannot run {}: {e}", path.display())),
        Ok(Ok(output)) if !output.status.success() => {
            Err(format!("--version failed ({})", output.status))
        }
        Ok(Ok(output)) => Ok(String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[tokio::test]
    async fn discovery_reports_versions_missing_clis_and_hung_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let claude = script(dir.path(), "claude", "echo '2.0.1 (Claude Code)'");
        let pidfile = dir.path().join("agy.pid");
        let hung = script(
            dir.path(),
            "agy",
            &format!("echo $$ > '{}'; sleep 30 & sleep 30", pidfile.display()),
        );
        let mut config = DelegateConfig {
            version_timeout_secs: 1,
            ..DelegateConfig::default()
        };
        config.claude.path = Some(claude.display().to_string());
        config.cursor_agent.path = Some(dir.path().join("nope").display().to_string());
        config.agy.path = Some(hung.display().to_string());
        let found = discover(&config).await;
        assert_eq!(found[0].version.as_deref(), Some("2.0.1 (Claude Code)"));
        assert_eq!(found[1].path, None);
        assert!(
            found[1]
                .problem
                .as_deref()
                .is_some_and(|p| p.contains("not installed"))
        );
        assert_eq!(found[2].version, None);
        assert!(
            found[2]
                .problem
                .as_deref()
                .is_some_and(|p| p.contains("did not answer"))
        );
        // The hung probe and the sleeper it started are gone (process group killed).
        let pgid = std::fs::read_to_string(&pidfile)
            .expect("pid")
            .trim()
            .to_owned();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while in_group(&pgid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!in_group(&pgid), "a --version probe outlived discovery");
    }

    /// Whether any process is in process group `pgid` (field 5 of /proc/<pid>/stat).
    fn in_group(pgid: &str) -> bool {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                std::fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
                    stat.rsplit_once(')')
                        .and_then(|(_, after)| after.split_whitespace().nth(2).map(|g| g == pgid))
                        .unwrap_or(false)
                })
            })
    }

    #[test]
    fn flags_name_vendors_and_nothing_else() {
        assert_eq!(Vendor::from_flag("/claude"), Some(Vendor::Claude));
        assert_eq!(
            Vendor::from_flag("/cursor-agent"),
            Some(Vendor::CursorAgent)
        );
        assert_eq!(Vendor::from_flag("/agy"), Some(Vendor::Agy));
        assert_eq!(Vendor::from_flag("/codex"), None);
        for flag in glider_engine::router::explicit::DELEGATION_FLAGS {
            assert!(Vendor::from_flag(flag).is_some(), "{flag}");
        }
    }
}
