//! One plugin as Glider runs it: its child process under a [`Supervisor`] (restarted with
//! backoff), the life cycle (`initialize` → `ready` → calls → `shutdown`), a heartbeat,
//! the deadline of each call, the breaker that skips a plugin that keeps failing, the
//! bounded queue its `observe` events wait in (a full queue drops and counts them), and
//! its counts.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use glider_config::PluginConfig;
use glider_sys::runstate::DelegatePids;
use glider_sys::safego::{self, Restart};
use glider_sys::stdio_rpc::{Backoff, ChildSpec, RpcChild, RpcError, Supervisor};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::manifest::{Initialized, Manifest, PROTOCOL_VERSIONS};

/// How long `shutdown` and the exit after it may take before the group is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
const RESTART_BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(200),
    max: Duration::from_secs(30),
};

/// The calls Glider makes to a plugin, each counted on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Route,
    Rewrite,
    /// A call of a tool the plugin declared.
    Tool,
    Heartbeat,
}

impl Hook {
    pub const ALL: [Hook; 4] = [Hook::Route, Hook::Rewrite, Hook::Tool, Hook::Heartbeat];

    /// Its name in counts and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Route => "route",
            Hook::Rewrite => "rewrite",
            Hook::Tool => "tool",
            Hook::Heartbeat => "heartbeat",
        }
    }

    /// The JSON-RPC method the plugin is called with.
    pub fn method(self) -> &'static str {
        match self {
            Hook::Tool => "tools/call",
            other => other.name(),
        }
    }
}

/// The calls of one hook.
#[derive(Debug, Default, Serialize)]
pub struct HookCounts {
    pub calls: AtomicU64,
    /// An error, no reply within the deadline, or the plugin down.
    pub failures: AtomicU64,
    pub timeouts: AtomicU64,
}

impl HookCounts {
    fn called(&self, outcome: &Result<Value, RpcError>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Ok(_) => {}
            Err(RpcError::Timeout) => {
                self.timeouts.fetch_add(1, Ordering::Relaxed);
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A plugin's counts since it was configured.
#[derive(Debug, Default, Serialize)]
pub struct Counts {
    /// Calls made through the breaker (route, rewrite, tool), all hooks together.
    pub calls: AtomicU64,
    /// Calls that failed: an error, no reply within the deadline, or the plugin down.
    pub failures: AtomicU64,
    pub timeouts: AtomicU64,
    /// Results refused for going outside the manifest or the config's grants.
    pub refused: AtomicU64,
    /// Calls skipped because the breaker was open.
    pub skipped: AtomicU64,
    /// Observe events sent, and dropped because the queue was full.
    pub observed: AtomicU64,
    pub observe_dropped: AtomicU64,
    /// Times the breaker opened.
    pub breaker_opened: AtomicU64,
    pub route: HookCounts,
    pub rewrite: HookCounts,
    pub tool: HookCounts,
    /// Heartbeats asked; a failed one ends the process (a restart follows).
    pub heartbeat: HookCounts,
}

impl Counts {
    pub fn hook(&self, hook: Hook) -> &HookCounts {
        match hook {
            Hook::Route => &self.route,
            Hook::Rewrite => &self.rewrite,
            Hook::Tool => &self.tool,
            Hook::Heartbeat => &self.heartbeat,
        }
    }
}

/// What a hook call gave.
pub enum Called {
    Result(Value),
    /// No result; the request goes on without the plugin. The text is for the record.
    Without(String),
}

/// One configured plugin.
pub struct Host {
    pub config: PluginConfig,
    supervisor: Supervisor,
    manifest: Mutex<Option<Manifest>>,
    /// Why the plugin's manifest was refused (it is never called then).
    refused: Mutex<Option<String>>,
    pub counts: Counts,
    failures_in_a_row: AtomicU32,
    open_until: Mutex<Option<tokio::time::Instant>>,
    observe: mpsc::Sender<Value>,
    /// Events dropped since the last one that got through (told to the plugin as a gap).
    gap: AtomicU64,
    /// A background start is under way.
    starting: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Host {
    /// Configure the plugin and start it in the background; `base` is the directory
    /// its command runs in.
    pub fn start(config: PluginConfig, base: &Path, pids: Option<DelegatePids>) -> Arc<Host> {
        let mut parts = config.command.iter();
        let program = parts.next().cloned().unwrap_or_default();
        let spec = ChildSpec {
            name: format!("plugin:{}", config.name),
            program: program.into(),
            args: parts.cloned().collect(),
            env: config
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cwd: Some(base.to_path_buf()),
            memory_limit_bytes: (config.memory_mb > 0).then_some(config.memory_mb << 20),
            max_line_bytes: config.max_line_bytes,
        };
        let (observe, queue) = mpsc::channel(config.observe_queue);
        let host = Arc::new(Host {
            supervisor: Supervisor::new(spec, pids, RESTART_BACKOFF),
            manifest: Mutex::new(None),
            refused: Mutex::new(None),
            counts: Counts::default(),
            failures_in_a_row: AtomicU32::new(0),
            open_until: Mutex::new(None),
            observe,
            gap: AtomicU64::new(0),
            starting: AtomicBool::new(false),
            config,
        });
        host.start_in_background();
        let weak = Arc::downgrade(&host);
        safego::spawn_once("plugin observe sender", send_observed(weak.clone(), queue));
        safego::spawn_named("plugin heartbeat", Restart::BACKOFF, move || {
            heartbeat(weak.clone())
        });
        host
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The manifest, once the plugin has initialised.
    pub fn manifest(&self) -> Option<Manifest> {
        lock(&self.manifest).clone()
    }

    /// Why the manifest was refused, if it was.
    pub fn refused(&self) -> Option<String> {
        lock(&self.refused).clone()
    }

    /// How many times the process was started.
    pub fn starts(&self) -> u64 {
        self.supervisor.starts()
    }

    /// How many times it was started again after its first start.
    pub fn restarts(&self) -> u64 {
        self.starts().saturating_sub(1)
    }

    /// The running child's process group.
    pub fn pgid(&self) -> Option<u32> {
        self.supervisor.running().and_then(|c| c.pgid())
    }

    /// Whether the breaker skips the plugin now.
    pub fn breaker_open(&self) -> bool {
        lock(&self.open_until).is_some_and(|until| tokio::time::Instant::now() < until)
    }

    /// The running child, started (and initialised) if need be.
    async fn child(&self) -> Result<Arc<RpcChild>, String> {
        if let Some(why) = self.refused() {
            return Err(format!("refused: {why}"));
        }
        let initialize_deadline = Duration::from_millis(self.config.initialize_deadline_ms);
        let outcome = self
            .supervisor
            .child(|child| async move {
                let result = child
                    .call(
                        "initialize",
                        json!({
                            "protocol_versions": PROTOCOL_VERSIONS,
                            "glider_version": env!("CARGO_PKG_VERSION"),
                            "name": self.config.name,
                            "grants": {"prompt_text": self.config.allow_prompt_text},
                        }),
                        initialize_deadline,
                    )
                    .await?;
                match Initialized::parse(result) {
                    Ok(initialized) => {
                        *lock(&self.manifest) = Some(initialized.manifest);
                        child
                            .notify("ready", json!({}), initialize_deadline)
                            .await
                    }
                    Err(why) => {
                        tracing::error!(plugin = %self.config.name, %why, "plugin manifest refused; it is not called");
                        *lock(&self.refused) = Some(why.clone());
                        Err(RpcError::Closed(format!("manifest refused: {why}")))
                    }
                }
            })
            .await;
        outcome.map_err(|e| e.to_string())
    }

    /// Make sure the plugin runs (at start and after a reload that added it).
    pub async fn ensure_started(&self) -> Result<(), String> {
        self.child().await.map(drop)
    }

    /// Start the plugin off the caller's path, unless a start is under way: a hook
    /// never waits for an interpreter to load.
    fn start_in_background(self: &Arc<Self>) {
        if self.starting.swap(true, Ordering::AcqRel) {
            return;
        }
        let host = self.clone();
        safego::spawn_once("plugin start", async move {
            if let Err(why) = host.ensure_started().await {
                tracing::warn!(plugin = %host.config.name, %why, "plugin not started");
            }
            host.starting.store(false, Ordering::Release);
        });
    }

    /// Call `hook` within its deadline (`tool_deadline_ms` for a tool, `deadline_ms`
    /// for the others), through the breaker.
    pub async fn call(self: &Arc<Self>, hook: Hook, params: Value) -> Called {
        let method = hook.method();
        if self.breaker_open() {
            self.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Called::Without(format!("{}: skipped, its breaker is open", self.name()));
        }
        self.counts.calls.fetch_add(1, Ordering::Relaxed);
        let deadline = Duration::from_millis(match hook {
            Hook::Tool => self.config.tool_deadline_ms,
            _ => self.config.deadline_ms,
        });
        let running = match self.refused() {
            Some(why) => Err(format!("refused: {why}")),
            None => self.supervisor.running().ok_or_else(|| {
                self.start_in_background();
                "not running (starting it)".to_owned()
            }),
        };
        let outcome = match running {
            Err(why) => {
                self.counts
                    .hook(hook)
                    .called(&Err(RpcError::Closed(why.clone())));
                Err(why)
            }
            Ok(child) => {
                let outcome = child.call(method, params, deadline).await;
                self.counts.hook(hook).called(&outcome);
                match outcome {
                    Ok(result) => Ok(result),
                    Err(RpcError::Timeout) => {
                        self.counts.timeouts.fetch_add(1, Ordering::Relaxed);
                        Err(RpcError::Timeout.to_string())
                    }
                    Err(other) => Err(other.to_string()),
                }
            }
        };
        match outcome {
            Ok(result) => {
                self.failures_in_a_row.store(0, Ordering::Relaxed);
                Called::Result(result)
            }
            Err(why) => {
                self.failed();
                tracing::warn!(plugin = %self.config.name, method, %why, "plugin call failed; going on without it");
                Called::Without(format!("{}: {method} failed ({why})", self.name()))
            }
        }
    }

    fn failed(&self) {
        self.counts.failures.fetch_add(1, Ordering::Relaxed);
        let in_a_row = self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if in_a_row >= self.config.breaker_failures {
            self.failures_in_a_row.store(0, Ordering::Relaxed);
            let open_for = Duration::from_secs(self.config.breaker_open_secs);
            *lock(&self.open_until) = Some(tokio::time::Instant::now() + open_for);
            self.counts.breaker_opened.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(plugin = %self.config.name, failures = in_a_row, "plugin breaker opened");
        }
    }

    /// A result that goes outside the manifest or the grants: refused, counted, logged.
    pub fn refuse(&self, what: &str) -> String {
        self.counts.refused.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(plugin = %self.config.name, refused = what, "plugin result refused");
        format!("{}: refused, {what}", self.name())
    }

    /// Queue an observe event; a full queue drops it and counts a gap.
    pub fn observe(&self, event: &str, data: Value) {
        match self.observe.try_send(json!({"event": event, "data": data})) {
            Ok(()) => {}
            Err(_) => {
                self.counts.observe_dropped.fetch_add(1, Ordering::Relaxed);
                self.gap.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Say `shutdown`, then end the process (stop, or a reload that removed or changed
    /// the plugin).
    pub async fn stop(&self) {
        if let Some(child) = self.supervisor.running() {
            let _ = child.call("shutdown", json!({}), SHUTDOWN_GRACE).await;
        }
        self.supervisor.stop(SHUTDOWN_GRACE).await;
    }
}

/// Hand queued events to the plugin as `observe` notifications, a gap first when some
/// were dropped, until the host is gone.
async fn send_observed(host: Weak<Host>, mut queue: mpsc::Receiver<Value>) {
    while let Some(event) = queue.recv().await {
        let Some(host) = host.upgrade() else { return };
        if host.breaker_open() {
            host.counts.observe_dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let Ok(child) = host.child().await else {
            host.counts.observe_dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let deadline = Duration::from_millis(host.config.deadline_ms);
        let dropped = host.gap.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let gap = json!({"event": "gap", "data": {"dropped": dropped}});
            let _ = child.notify("observe", gap, deadline).await;
        }
        match child.notify("observe", event, deadline).await {
            Ok(()) => host.counts.observed.fetch_add(1, Ordering::Relaxed),
            Err(_) => host.counts.observe_dropped.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// Ask a running plugin `heartbeat` every `heartbeat_secs`; one that does not answer
/// within its deadline is ended (the supervisor starts it again on the next call).
async fn heartbeat(host: Weak<Host>) {
    let every = match host.upgrade() {
        Some(host) if host.config.heartbeat_secs > 0 => {
            Duration::from_secs(host.config.heartbeat_secs)
        }
        _ => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(host) = host.upgrade() else { return };
        let Some(child) = host.supervisor.running() else {
            continue;
        };
        let deadline = Duration::from_millis(host.config.deadline_ms).max(Duration::from_secs(1));
        let outcome = child
            .call(Hook::Heartbeat.method(), json!({}), deadline)
            .await;
        host.counts.heartbeat.called(&outcome);
        if let Err(why) = outcome {
            tracing::warn!(plugin = %host.config.name, %why, "plugin missed its heartbeat; it is restarted");
            child.stop(Duration::ZERO).await;
        }
    }
}
