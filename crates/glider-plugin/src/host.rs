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

/// How long `initialize` may take (a plugin's own start-up: an interpreter loading).
const INITIALIZE_DEADLINE: Duration = Duration::from_secs(10);
/// How often a running plugin is asked `heartbeat`.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// How long `shutdown` and the exit after it may take before the group is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
const RESTART_BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(200),
    max: Duration::from_secs(30),
};

/// A plugin's counts since it was configured.
#[derive(Debug, Default, Serialize)]
pub struct Counts {
    /// Hook calls made (route, rewrite).
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
                        INITIALIZE_DEADLINE,
                    )
                    .await?;
                match Initialized::parse(result) {
                    Ok(initialized) => {
                        *lock(&self.manifest) = Some(initialized.manifest);
                        child
                            .notify("ready", json!({}), INITIALIZE_DEADLINE)
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

    /// Call hook `method` within the deadline, through the breaker.
    pub async fn call(self: &Arc<Self>, method: &str, params: Value) -> Called {
        if self.breaker_open() {
            self.counts.skipped.fetch_add(1, Ordering::Relaxed);
            return Called::Without(format!("{}: skipped, its breaker is open", self.name()));
        }
        self.counts.calls.fetch_add(1, Ordering::Relaxed);
        let deadline = Duration::from_millis(self.config.deadline_ms);
        let running = match self.refused() {
            Some(why) => Err(format!("refused: {why}")),
            None => self.supervisor.running().ok_or_else(|| {
                self.start_in_background();
                "not running (starting it)".to_owned()
            }),
        };
        let outcome = match running {
            Err(why) => Err(why),
            Ok(child) => match child.call(method, params, deadline).await {
                Ok(result) => Ok(result),
                Err(RpcError::Timeout) => {
                    self.counts.timeouts.fetch_add(1, Ordering::Relaxed);
                    Err(RpcError::Timeout.to_string())
                }
                Err(other) => Err(other.to_string()),
            },
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

/// Ask a running plugin `heartbeat` every few seconds; one that does not answer within
/// its deadline is ended (the supervisor starts it again on the next call).
async fn heartbeat(host: Weak<Host>) {
    loop {
        tokio::time::sleep(HEARTBEAT_EVERY).await;
        let Some(host) = host.upgrade() else { return };
        let Some(child) = host.supervisor.running() else {
            continue;
        };
        let deadline = Duration::from_millis(host.config.deadline_ms).max(Duration::from_secs(1));
        if let Err(why) = child.call("heartbeat", json!({}), deadline).await {
            tracing::warn!(plugin = %host.config.name, %why, "plugin missed its heartbeat; it is restarted");
            child.stop(Duration::ZERO).await;
        }
    }
}
