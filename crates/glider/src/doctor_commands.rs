//! `glider doctor [-c FILE] [--json]`: what stands between this machine and a working
//! Glider, each problem with the command that fixes it. It checks every configured
//! backend (probed concurrently, with a short timeout) and whose credentials a cloud
//! one uses; the local model servers on the usual ports ([`crate::discovery`]) the
//! config does not name, and one sitting on a port Glider needs; the MITM CA (present,
//! trusted by the system store, named by `NODE_EXTRA_CA_CERTS`); redirect rules or
//! delegate processes an earlier run left; the configured ports; and GLIDER_HOME's
//! permissions. The exit status is non-zero when a problem is found. The JSON shape is
//! documented in docs/doctor.md.
//!
//! One file past 600 lines on purpose: each check is a short function and the two
//! renderings read their one list of findings; a split would spread one report over
//! files.

use crate::out::{out, outln};
use std::path::{Path, PathBuf};
use std::time::Duration;

use glider_backend::health::HealthStatus;
use glider_config::{BackendConfig, Config};
use glider_sys::runstate::{Previous, leftover_delegates};
use serde_json::{Value, json};

use crate::discovery::{self, Found, ServerKind};

/// How long one backend's probe may take before it counts as unreachable.
const BACKEND_TIMEOUT: Duration = Duration::from_secs(8);

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// As it should be.
    Ok,
    /// Worth knowing; nothing configured is broken by it.
    Warn,
    /// Something configured does not work until it is fixed.
    Problem,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Problem => "problem",
        }
    }
}

/// One finding.
#[derive(Debug, Clone)]
pub struct Finding {
    /// `config`, `backend`, `credentials`, `local_server`, `login`, `ca`,
    /// `transparent`, `delegate`, `port` or `home`.
    pub category: &'static str,
    /// What it is about (a backend's name, a port, a path).
    pub subject: String,
    pub status: Status,
    pub detail: String,
    /// The command (or edit) that fixes it.
    pub fix: Option<String>,
}

impl Finding {
    fn new(category: &'static str, subject: impl Into<String>, status: Status) -> Finding {
        Finding {
            category,
            subject: subject.into(),
            status,
            detail: String::new(),
            fix: None,
        }
    }

    fn detail(mut self, detail: impl Into<String>) -> Finding {
        self.detail = detail.into();
        self
    }

    fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }
}

/// `glider doctor`: print the findings; the exit status says whether any is a problem.
pub fn doctor(config_path: Option<&Path>, json: bool) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("glider doctor: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let home = crate::glider_home();
    let findings = runtime.block_on(examine(config_path, &home));
    let problems = findings
        .iter()
        .filter(|f| f.status == Status::Problem)
        .count();
    if json {
        outln!("{}", render_json(config_path, &home, &findings));
    } else {
        out!("{}", render_text(&findings));
    }
    if problems > 0 {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// Every check, in the order they are printed.
pub async fn examine(config_path: Option<&Path>, home: &Path) -> Vec<Finding> {
    let source = config_path
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "embedded configs/glider.yaml".into());
    let mut config = match crate::load_config(config_path) {
        Ok(config) => config,
        Err(e) => {
            return vec![
                Finding::new("config", source, Status::Problem)
                    .detail(format!("{e:#}"))
                    .fix("fix the file (`glider check -c FILE` shows each error with its line)"),
            ];
        }
    };
    let ports = discovery::ports();
    let scanned = ports.as_deref().unwrap_or_default();
    let found = discovery::scan(scanned).await;
    let mut findings = Vec::new();
    if config_path.is_none() {
        // What `glider serve` without a config uses: the servers found replace the
        // embedded profile's local backend.
        if let Err(e) = discovery::replace_local_backends(&mut config, &found, scanned) {
            findings.push(
                Finding::new("local_server", "discovered servers", Status::Problem)
                    .detail(format!("{e:#}"))
                    .fix("write a config naming the servers (`glider check -c FILE`)"),
            );
        }
    }
    let backends = check_backends(&config).await;
    let previous = glider_sys::runstate::previous(home);
    findings.insert(
        0,
        Finding::new("config", source, Status::Ok)
            .detail(format!("{} backends", config.backends.len())),
    );
    findings.extend(backends);
    if let Err(why) = ports {
        findings.push(
            Finding::new("local_server", discovery::PORTS_ENV, Status::Problem)
                .detail(why)
                .fix(format!(
                    "set {} to comma-separated port numbers, or unset it",
                    discovery::PORTS_ENV
                )),
        );
    }
    findings.extend(check_local_servers(&config, &found));
    findings.extend(check_subscription_login(&config));
    findings.extend(check_ca(&config, home));
    findings.extend(check_leftovers(&config, &previous));
    findings.extend(check_ports(&config, &found, &previous));
    findings.extend(check_home(home));
    findings.extend(check_context(home));
    findings
}

/// The context database: sound (`PRAGMA quick_check`), corrupt (the next start moves it
/// aside), and any database already moved aside as corrupt.
fn check_context(home: &Path) -> Vec<Finding> {
    use glider_context::store;
    let dir = glider_context::dir(home);
    let path = store::db_path(&dir);
    let subject = path.display().to_string();
    let mut findings = Vec::new();
    if path.exists() {
        findings.push(match store::quick_check(&path) {
            Ok(()) => Finding::new("context", subject.clone(), Status::Ok).detail("quick_check ok"),
            Err(why) => Finding::new("context", subject.clone(), Status::Problem)
                .detail(format!("the database is corrupt: {why}"))
                .fix("restart `glider serve`: it moves the file aside and starts a fresh one"),
        });
    }
    let aside = store::moved_aside(&dir);
    if let Some(last) = aside.last() {
        findings.push(
            Finding::new("context", last.display().to_string(), Status::Warn)
                .detail(format!(
                    "{} corrupt context database(s) moved aside at start; the newest is this one",
                    aside.len()
                ))
                .fix(format!(
                    "keep it to inspect or recover (sqlite3 {} .recover), else delete it",
                    last.display()
                )),
        );
    }
    findings
}

/// Each enabled backend probed (concurrently), and a cloud one's credential mode.
async fn check_backends(config: &Config) -> Vec<Finding> {
    let probes = config
        .backends
        .iter()
        .filter(|b| b.enabled)
        .map(|b| async move {
            let backend = glider_backend::Backend::new(b.clone());
            let finding = probe(&backend).await;
            (backend, finding)
        });
    let mut findings = Vec::new();
    for (backend, finding) in futures_util::future::join_all(probes).await {
        findings.push(finding);
        // An unusable backend (its key's variable unset, a bad header) is one problem,
        // already reported by the probe's finding with its fix.
        if !backend.is_local() && backend.unavailable.is_none() {
            findings.push(
                Finding::new("credentials", backend.name(), Status::Ok)
                    .detail(glider_backend::credentials::describe(&backend.config)),
            );
        }
    }
    findings
}

/// Which door a CLI logged in with a subscription (an OAuth token, not an API key)
/// should use: said whenever a cloud backend forwards the client's own credentials,
/// the case such a login lands in.
fn check_subscription_login(config: &Config) -> Option<Finding> {
    let passthrough: Vec<&str> = config
        .backends
        .iter()
        .filter(|b| b.enabled && !b.is_local())
        .filter(|b| glider_backend::credentials::forwards_client_credentials(b))
        .map(|b| b.name.as_str())
        .collect();
    if passthrough.is_empty() {
        return None;
    }
    Some(
        Finding::new("login", "subscription logins", Status::Ok).detail(format!(
            "{} forward the client's own credentials. A CLI logged in with a subscription \
                 (Claude Pro/Max, ChatGPT) holds an OAuth token, not an API key: use the MITM \
                 door (`glider run claude`, or HTTPS_PROXY with Glider's CA trusted), where a \
                 request bound for the CLI's own origin is never altered and only what Glider \
                 answers locally leaves that path. Through the gateway (a base URL), the token \
                 would be relayed to the vendor's API: whether that is allowed is the vendor's \
                 policy, not Glider's",
            passthrough.join(", ")
        )),
    )
}

/// One backend's reachability, as its health probe sees it.
async fn probe(backend: &glider_backend::Backend) -> Finding {
    let config = &backend.config;
    let subject = &config.name;
    let kind = format!("{:?}", config.kind).to_lowercase();
    if let Some(why) = &backend.unavailable {
        return Finding::new("backend", subject, Status::Problem)
            .detail(format!("{kind} backend unusable: {why}"))
            .fix(unusable_fix(config, why));
    }
    let health = match tokio::time::timeout(BACKEND_TIMEOUT, backend.probe()).await {
        Ok(health) => health,
        Err(_) => {
            return Finding::new("backend", subject, Status::Problem)
                .detail(format!(
                    "{kind} at {}: no answer within {} s",
                    backend.config.base_url,
                    BACKEND_TIMEOUT.as_secs()
                ))
                .fix(unreachable_fix(&backend.config));
        }
    };
    match health.status {
        HealthStatus::Down => Finding::new("backend", subject, Status::Problem)
            .detail(format!(
                "{kind} at {}: {}",
                backend.config.base_url,
                health.detail.unwrap_or_default()
            ))
            .fix(unreachable_fix(&backend.config)),
        // A cloud probe the vendor answered with a 5xx: nothing proved either way.
        HealthStatus::Unknown if health.note.is_some() => {
            Finding::new("backend", subject, Status::Warn).detail(format!(
                "{kind} at {}: {}",
                backend.config.base_url,
                health.note.unwrap_or_default()
            ))
        }
        _ => {
            let what = match (&health.note, health.served_models.len()) {
                (Some(note), _) => note.clone(),
                (None, n) => format!(
                    "up, serving {n} models: {}",
                    health.served_models.join(", ")
                ),
            };
            Finding::new("backend", subject, Status::Ok)
                .detail(format!("{kind} at {}: {what}", backend.config.base_url))
        }
    }
}

/// What to do about a backend that does not answer.
fn unreachable_fix(config: &BackendConfig) -> String {
    match (config.is_local(), config.kind) {
        (true, glider_config::BackendKind::Ollama) => format!(
            "start Ollama (`ollama serve`), or correct base_url of backend {} (now {})",
            config.name, config.base_url
        ),
        (true, _) => format!(
            "start the model server at {} (e.g. `llama-server -m MODEL.gguf --port PORT`, `vllm serve MODEL --port PORT`), or correct base_url of backend {}",
            config.base_url, config.name
        ),
        (false, _) => format!(
            "check the network path to it (`curl -sS -o /dev/null -w '%{{http_code}}\\n' {}`; a proxy in HTTPS_PROXY?), or its key",
            config.base_url
        ),
    }
}

/// What to do about an unusable backend: its key's variable unset (a local backend's; an
/// unset cloud key means the client's own is used), or another part of its config broken
/// (a base URL, a header), said as the client saw it.
fn unusable_fix(config: &BackendConfig, why: &str) -> String {
    match config.api_key.as_ref().map(|key| key.lookup()) {
        Some(Err(glider_config::Unresolved::Unset(variable))) => format!(
            "`export {variable}=...` before `glider serve`, or remove api_key from backend {}",
            config.name
        ),
        _ => format!("fix backend {} in the config: {why}", config.name),
    }
}

/// The host:port a local base URL names, when it is this machine.
fn loopback_port(base_url: &str) -> Option<u16> {
    let url = reqwest::Url::parse(base_url).ok()?;
    let host = url.host_str()?;
    // 0.0.0.0 as a client address reaches this machine too.
    let local = host == "0.0.0.0" || glider_sys::webguard::is_loopback_host(host);
    local.then(|| url.port_or_known_default()).flatten()
}

/// The model servers found: named by a backend (ok), or not (with the lines to add).
fn check_local_servers(config: &Config, found: &[Found]) -> Vec<Finding> {
    let named: Vec<u16> = config
        .backends
        .iter()
        .filter_map(|b| loopback_port(&b.base_url))
        .collect();
    let mut findings = Vec::new();
    for server in found.iter().filter(|f| f.kind.is_model_server()) {
        let subject = format!("{} on port {}", server.kind.label(), server.port);
        let models = if server.models.is_empty() {
            "no models listed".to_owned()
        } else {
            format!("models: {}", server.models.join(", "))
        };
        let finding = if named.contains(&server.port) {
            Finding::new("local_server", subject, Status::Ok)
                .detail(format!("named by the config ({models})"))
        } else {
            let kind = server.backend_type();
            Finding::new("local_server", subject, Status::Warn)
                .detail(format!(
                    "found by {} but not named by the config ({models})",
                    server.identified_by
                ))
                .fix(format!(
                    "add to backends: `- {{name: {}, type: {kind}, base_url: \"{}\"}}` (with no config at all, `glider serve` uses it by itself)",
                    server.kind.id(),
                    server.base_url()
                ))
        };
        findings.push(finding);
    }
    findings
}

/// The MITM CA: present, trusted by the system store, named by NODE_EXTRA_CA_CERTS.
fn check_ca(config: &Config, home: &Path) -> Vec<Finding> {
    if !config.mitm.enabled {
        return vec![
            Finding::new("ca", "mitm", Status::Ok).detail("mitm.enabled is false: no CA needed"),
        ];
    }
    let cert = glider_mitm::ca_dir(&config.mitm, home).join(glider_mitm::ca::CERT_FILE);
    let subject = cert.display().to_string();
    let Ok(pem) = std::fs::read_to_string(&cert) else {
        return vec![
            Finding::new("ca", subject, Status::Warn)
                .detail("no CA yet (made on first use)")
                .fix("`glider ca install` makes it and says how to trust it"),
        ];
    };
    let holds = |path: &Path| glider_mitm::trust::holds_certificate(path, &pem);
    let mut findings = vec![Finding::new("ca", subject.clone(), Status::Ok).detail("present")];
    let system =
        Path::new(glider_mitm::trust::SYSTEM_TRUST_DIR).join(glider_mitm::trust::SYSTEM_TRUST_NAME);
    findings.push(if glider_mitm::trust::system_trusts(&cert) {
        Finding::new("ca", "system trust store", Status::Ok)
            .detail(format!("{} is trusted", system.display()))
    } else {
        Finding::new("ca", "system trust store", Status::Warn)
            .detail("Glider's CA is not in the system trust store: clients that read it refuse the MITM proxy's certificates")
            .fix("sudo glider ca install")
    });
    let extra = std::env::var_os("NODE_EXTRA_CA_CERTS").map(PathBuf::from);
    findings.push(match extra {
        Some(path) if holds(&path) => Finding::new("ca", "NODE_EXTRA_CA_CERTS", Status::Ok)
            .detail(format!("{} holds Glider's CA", path.display())),
        Some(path) => Finding::new("ca", "NODE_EXTRA_CA_CERTS", Status::Warn)
            .detail(format!("{} does not hold Glider's CA: Node-based CLIs (Claude Code, Cursor) refuse the MITM proxy", path.display()))
            .fix(format!("export NODE_EXTRA_CA_CERTS={subject}  (or start the CLI with `glider run <cli>`)")),
        None => Finding::new("ca", "NODE_EXTRA_CA_CERTS", Status::Warn)
            .detail("not set: Node-based CLIs (Claude Code, Cursor) through the MITM proxy refuse its certificates")
            .fix(format!("export NODE_EXTRA_CA_CERTS={subject}  (or start the CLI with `glider run <cli>`)")),
    });
    findings
}

/// Redirect rules and delegate process groups an earlier run left behind.
fn check_leftovers(config: &Config, previous: &Previous) -> Vec<Finding> {
    let mut findings = Vec::new();
    let running = match previous {
        Previous::StillRunning(record) => Some(record.pid),
        _ => None,
    };
    let record = match previous {
        Previous::Clean(record) | Previous::Unclean(record) => Some(record),
        _ => None,
    };
    let recorded = record
        .and_then(|r| r.redirect.as_ref())
        .filter(|r| r.removed_at.is_none());
    let redirector =
        glider_mitm::transparent::redirect::for_this_platform(glider_mitm::transparent::Spec {
            to_port: config.mitm.transparent_port,
            ports: config.mitm.transparent_ports.clone(),
            ipv6: glider_mitm::transparent::redirect::ipv6_usable(),
        });
    let live = redirector.map(|r| r.leftover());
    let subject = glider_mitm::transparent::CHAIN;
    findings.push(match (running, live, recorded) {
        (Some(pid), _, _) => Finding::new("transparent", subject, Status::Ok).detail(format!(
            "a Glider (pid {pid}) is running with this GLIDER_HOME; any redirect chain is its own"
        )),
        (None, Ok(Ok(Some(found))), _) => Finding::new("transparent", subject, Status::Problem)
            .detail(found)
            .fix("sudo glider transparent cleanup"),
        (None, Ok(Ok(None)), _) => Finding::new("transparent", subject, Status::Ok)
            .detail("no redirect chain is installed"),
        (None, _, Some(redirect)) => Finding::new("transparent", subject, Status::Problem)
            .detail(format!(
                "an earlier run recorded {} rules it did not remove (they could not be listed now: run doctor as root to check)",
                redirect.backend
            ))
            .fix("sudo glider transparent cleanup"),
        (None, Ok(Err(e)), None) => Finding::new("transparent", subject, Status::Ok)
            .detail(format!("no rules recorded as left; cannot list the chain now ({e})")),
        (None, Err(e), None) => Finding::new("transparent", subject, Status::Ok)
            .detail(format!("not applicable here: {e}")),
    });
    if running.is_none() {
        let delegates = record.map(|r| r.delegates.as_slice()).unwrap_or_default();
        for (delegate, alive) in leftover_delegates(delegates) {
            findings.push(
                Finding::new(
                    "delegate",
                    format!("{} (process group {})", delegate.cli, delegate.pgid),
                    Status::Problem,
                )
                .detail(format!(
                    "an earlier run's delegate is still running without it: {}",
                    alive.join(", ")
                ))
                .fix(format!("kill -- -{}", delegate.pgid)),
            );
        }
    }
    findings
}

/// The ports Glider listens on: free, or held by this GLIDER_HOME's running Glider.
fn check_ports(config: &Config, found: &[Found], previous: &Previous) -> Vec<Finding> {
    let wanted = config.listen_ports();
    let taken_by_us: Vec<u16> = wanted.iter().map(|p| p.port).collect();
    let mut findings = Vec::new();
    for &glider_config::ListenPort {
        port,
        setting,
        flag,
    } in wanted.iter().filter(|p| p.port != 0)
    {
        let subject = format!("{port} ({setting})");
        let free = std::net::TcpListener::bind((config.server.bind.as_str(), port)).is_ok();
        if free {
            findings.push(Finding::new("port", subject, Status::Ok).detail("free"));
            continue;
        }
        let holder = found.iter().find(|f| f.port == port).map(|f| f.kind);
        if let (Previous::StillRunning(record), None | Some(ServerKind::Glider)) =
            (previous, holder)
        {
            findings.push(
                Finding::new("port", subject, Status::Ok)
                    .detail(format!("in use by the running Glider (pid {})", record.pid)),
            );
            continue;
        }
        let alternative = discovery::free_port_after(&config.server.bind, port, &taken_by_us);
        let mv = match (flag, alternative) {
            (Some(flag), Some(alt)) => {
                format!(
                    "move Glider: `glider serve {flag} {alt}` (or {setting}: {alt} in the config)"
                )
            }
            (None, Some(alt)) => format!("move Glider: {setting}: {alt} in the config"),
            (_, None) => format!("move Glider: another {setting} in the config"),
        };
        let (detail, fix) = match holder {
            Some(kind) if kind.is_model_server() => (
                format!(
                    "taken by {} (found on it), which is also Glider's {setting}: one of them must move",
                    kind.label()
                ),
                format!("{mv}; keep the model server where it is and name it as a backend"),
            ),
            Some(ServerKind::Glider) => (
                "a Glider gateway answers there (another GLIDER_HOME's?)".to_owned(),
                format!("stop that Glider, or {mv}"),
            ),
            _ => (
                "taken by another process".to_owned(),
                format!("see which with `ss -ltnp 'sport = :{port}'`; stop it, or {mv}"),
            ),
        };
        findings.push(
            Finding::new("port", subject, Status::Problem)
                .detail(detail)
                .fix(fix),
        );
    }
    findings
}

/// GLIDER_HOME private to its owner: 0700 directories, 0600 files (the CA key, the
/// request history and the run state are in it).
fn check_home(home: &Path) -> Vec<Finding> {
    let subject = home.display().to_string();
    if !home.exists() {
        return vec![
            Finding::new("home", subject, Status::Ok)
                .detail("does not exist yet (made 0700 at the first `glider serve`)"),
        ];
    }
    let mut exposed = Vec::new();
    exposed_entries(home, &mut exposed);
    if exposed.is_empty() {
        return vec![
            Finding::new("home", subject, Status::Ok)
                .detail("private to its owner (directories 0700, files 0600)"),
        ];
    }
    let count = exposed.len();
    exposed.truncate(5);
    vec![
        Finding::new("home", subject.clone(), Status::Problem)
            .detail(format!(
                "{count} entries others can read (directories must be 0700, files 0600): {}{}",
                exposed.join(", "),
                if count > 5 { ", …" } else { "" }
            ))
            .fix(format!("chmod -R go-rwx {subject}")),
    ]
}

/// `path` and what is under it (links not followed) that group or others can access,
/// each as `path (mode)`.
fn exposed_entries(path: &Path, out: &mut Vec<String>) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        if meta.file_type().is_symlink() {
            return;
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            out.push(format!("{} ({mode:04o})", path.display()));
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                exposed_entries(&entry.path(), out);
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, out);
    }
}

fn render_text(findings: &[Finding]) -> String {
    let mut text = String::new();
    for finding in findings {
        let label = match finding.status {
            Status::Ok => "ok     ",
            Status::Warn => "warn   ",
            Status::Problem => "PROBLEM",
        };
        text.push_str(&format!(
            "{label} {} {}: {}\n",
            finding.category, finding.subject, finding.detail
        ));
        if let Some(fix) = &finding.fix {
            text.push_str(&format!("        fix: {fix}\n"));
        }
    }
    let count = |status| findings.iter().filter(|f| f.status == status).count();
    text.push_str(&format!(
        "{} problems, {} warnings\n",
        count(Status::Problem),
        count(Status::Warn)
    ));
    text
}

fn render_json(config_path: Option<&Path>, home: &Path, findings: &[Finding]) -> Value {
    let count = |status| findings.iter().filter(|f| f.status == status).count();
    json!({
        "config": config_path.map(|p| p.display().to_string()),
        "glider_home": home.display().to_string(),
        "problems": count(Status::Problem),
        "warnings": count(Status::Warn),
        "checks": findings.iter().map(|f| json!({
            "category": f.category,
            "subject": f.subject,
            "status": f.status.as_str(),
            "detail": f.detail,
            "fix": f.fix,
        })).collect::<Vec<_>>(),
    })
}
