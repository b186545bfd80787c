//! The vendor registry: which delegate CLIs exist (`claude`, `cursor-agent`, `agy`),
//! where their executables are (configured path or `PATH`) and which version each
//! reports (`--version`, bounded by a timeout). [`Registry`] holds the latest discovery
//! for the dashboard and for transparent mode's process filter.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use glider_config::{DelegateConfig, DelegateMode, DelegateVendorConfig};
use glider_sys::childenv::ChildEnv;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::run::Output;

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

    /// Variables of Glider's environment this CLI keeps besides the minimal ones
    /// ([`glider_sys::childenv`]): its own auth and settings (`*` ends a prefix) and
    /// the XDG directories its login lives under. Other vendors' keys never reach it;
    /// anything more is named in `delegate.<vendor>.env` (docs/delegation.md).
    pub fn own_env(self) -> &'static [&'static str] {
        match self {
            Vendor::Claude => &["ANTHROPIC_*", "CLAUDE_*", "XDG_*"],
            Vendor::CursorAgent => &["CURSOR_*", "XDG_*"],
            Vendor::Agy => &["GEMINI_*", "GOOGLE_*", "ANTIGRAVITY_*", "XDG_*"],
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

    /// How this vendor runs under `config`: its `mode`, else interactive for `agy`
    /// (spec: the interactive template is `/agy`'s default) and headless otherwise.
    pub fn mode(self, config: &DelegateConfig) -> DelegateMode {
        self.settings(config).mode.unwrap_or(match self {
            Vendor::Agy => DelegateMode::Interactive,
            Vendor::Claude | Vendor::CursorAgent => DelegateMode::Headless,
        })
    }

    /// What its headless output looks like.
    pub fn output(self) -> Output {
        match self {
            Vendor::Claude => Output::ClaudeStreamJson,
            Vendor::CursorAgent => Output::CursorStreamJson,
            Vendor::Agy => Output::Text,
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
    /// How a flagged message runs it.
    pub mode: DelegateMode,
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
            "mode": match self.mode {
                DelegateMode::Headless => "headless",
                DelegateMode::Interactive => "interactive",
            },
            "available": self.available(),
        })
    }

    /// Installed and answering `--version`.
    pub fn available(&self) -> bool {
        self.path.is_some() && self.version.is_some()
    }
}

/// The latest discovery, shared by the dashboard (`/api/vendors`) and transparent mode.
/// A re-discovery swaps in a whole new list; readers keep the list they hold.
#[derive(Debug, Default)]
pub struct Registry {
    current: RwLock<Arc<Vec<Discovered>>>,
    /// [`Registry::image_names`] of `current`, worked out once per discovery: the
    /// process filter asks for them on every redirected connection.
    names: RwLock<Arc<Vec<String>>>,
    /// Unix milliseconds of the last discovery (0: never).
    at_ms: std::sync::atomic::AtomicU64,
}

impl Registry {
    /// An empty registry (nothing discovered yet).
    pub fn new() -> Registry {
        Registry::default()
    }

    /// The list as last discovered (empty before the first discovery).
    pub fn list(&self) -> Arc<Vec<Discovered>> {
        self.current
            .read()
            .map(|list| list.clone())
            .unwrap_or_default()
    }

    /// When the last discovery finished, in Unix milliseconds (0: never).
    pub fn discovered_at_ms(&self) -> u64 {
        self.at_ms.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Discover again under `config` and swap the new list in; returns it.
    pub async fn discover(&self, config: &DelegateConfig) -> Arc<Vec<Discovered>> {
        let list = Arc::new(discover(config).await);
        let names = Arc::new(image_names_of(&list));
        if let Ok(mut current) = self.current.write() {
            *current = list.clone();
        }
        if let Ok(mut current) = self.names.write() {
            *current = names;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.at_ms.store(now, std::sync::atomic::Ordering::Relaxed);
        list
    }

    /// Executable names a delegate's process can have, for a process filter: each
    /// vendor's usual name, plus the file name of every discovered executable (a
    /// configured path may differ, and a symlink's target is what runs). Sorted, no
    /// duplicates. Worked out at discovery; this only reads them.
    pub fn image_names(&self) -> Arc<Vec<String>> {
        match self.names.read() {
            Ok(names) if !names.is_empty() => names.clone(),
            _ => Arc::new(image_names_of(&[])),
        }
    }
}

/// [`Registry::image_names`] for a discovered `list` (reads symlinks on disk).
fn image_names_of(list: &[Discovered]) -> Vec<String> {
    let mut names: Vec<String> = Vendor::ALL.iter().map(|v| v.binary().to_owned()).collect();
    for found in list {
        let Some(path) = &found.path else { continue };
        let resolved = std::fs::canonicalize(path).ok();
        for file in [Some(path.as_path()), resolved.as_deref()]
            .into_iter()
            .flatten()
        {
            if let Some(name) = file.file_name().and_then(|n| n.to_str()) {
                names.push(name.to_owned());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Find every vendor and ask each for its version (in parallel, each bounded by
/// `version_timeout_secs`; a CLI that does not answer in time is killed).
pub async fn discover(config: &DelegateConfig) -> Vec<Discovered> {
    let timeout = Duration::from_secs(config.version_timeout_secs.max(1));
    let probes = Vendor::ALL.into_iter().map(|vendor| {
        let path = locate(vendor, config);
        let mode = vendor.mode(config);
        async move {
            let Some(path) = path else {
                return Discovered {
                    vendor,
                    path: None,
                    version: None,
                    problem: Some(format!("{} is not installed", vendor.binary())),
                    mode,
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
                mode,
            }
        }
    });
    futures_util::future::join_all(probes).await
}

async fn version_of(path: &Path, timeout: Duration) -> Result<String, String> {
    let mut command = tokio::process::Command::new(path);
    command
        .minimal_env(&[])
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = glider_sys::procutil::spawn_group_leader(&mut command)
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    let stdout = child.stdout.take();
    // Whatever happens, nothing the probe started outlives it.
    let mut guard = glider_sys::procutil::GroupGuard::new(child)
        .ok_or_else(|| format!("{} exited before it could be watched", path.display()))?;
    let probe = async {
        let mut out = Vec::new();
        if let Some(stdout) = stdout {
            // A version is one short line; read no more than a little of it.
            stdout
                .take(VERSION_OUTPUT_CAP)
                .read_to_end(&mut out)
                .await?;
        }
        let status = guard.finish().await?;
        Ok::<_, std::io::Error>((status, out))
    };
    match tokio::time::timeout(timeout, probe).await {
        Err(_) => Err(format!("--version did not answer within {timeout:?}")),
        Ok(Err(e)) => Err(format!("cannot run {}: {e}", path.display())),
        Ok(Ok((status, _))) if !status.success() => Err(format!("--version failed ({status})")),
        Ok(Ok((_, out))) => Ok(String::from_utf8_lossy(&out)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned()),
    }
}

/// Most bytes of `--version` output read.
const VERSION_OUTPUT_CAP: u64 = 64 * 1024;

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
        let pgid: u32 = std::fs::read_to_string(&pidfile)
            .expect("pid")
            .trim()
            .parse()
            .expect("a pid");
        assert!(
            glider_sys::procutil::group_gone_within(pgid, Duration::from_secs(10)).await,
            "a --version probe outlived discovery"
        );
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
        for flag in glider_vocab::DELEGATION_FLAGS {
            assert!(Vendor::from_flag(flag).is_some(), "{flag}");
        }
    }
}
