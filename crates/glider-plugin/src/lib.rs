//! Plugins (spec package `plugin`): small programs in any language that Glider runs as
//! child processes and talks to over stdio JSON-RPC (docs/plugins.md has the protocol).
//! Each declares a [`manifest`] — `observe`, `route`, `rewrite` (with a scope), `tools`
//! (served to the tool loop, [`tools`]) — and Glider calls it only within it, within a deadline, through a breaker; a plugin
//! sees Glider's own typed values ([`view`]), never a vendor's wire format. [`Plugins`]
//! is the configured set, rebuilt on reload (a plugin whose entry did not change keeps
//! its process).

pub mod host;
pub mod manifest;
pub mod tools;
pub mod view;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use glider_config::PluginConfig;
use glider_ngl::{Request, Role, Turn};
use glider_sys::runstate::DelegatePids;
use serde::Serialize;
use serde_json::{Value, json};

pub use host::{Called, Hook, Host};
pub use manifest::{Manifest, Scope};

/// A plugin's routing opinion: a side or a backend name, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteOpinion {
    pub plugin: String,
    /// `local`, `cloud` or a backend name.
    pub target: String,
    pub reason: String,
}

/// What the `route` hook is shown besides the request.
pub struct RouteAsk<'a> {
    pub request: &'a Request,
    /// After `model_aliases`.
    pub model: &'a str,
    pub front: &'a str,
    pub estimated_tokens: u64,
    pub session: Option<&'a str>,
}

/// Where a `rewrite` hook's request is going.
pub struct RewriteAsk<'a> {
    pub request: &'a Request,
    pub backend: &'a str,
    pub model: &'a str,
    pub local: bool,
}

/// One plugin's state (its manifest, breaker, starts and counts).
#[derive(Debug, Serialize)]
pub struct PluginStats<'a> {
    pub name: &'a str,
    pub manifest: Option<Manifest>,
    pub refused: Option<String>,
    pub breaker_open: bool,
    pub starts: u64,
    /// Starts after the first (a crash, a missed heartbeat, an over-long line).
    pub restarts: u64,
    pub counts: &'a host::Counts,
}

/// The configured plugins, in config order.
#[derive(Default)]
pub struct Plugins {
    hosts: Vec<Arc<Host>>,
}

impl Plugins {
    /// Start the enabled plugins of `configs`, keeping the hosts of `previous` whose
    /// entry did not change; returns the new set and the hosts to stop.
    pub fn build(
        configs: &[PluginConfig],
        previous: Option<&Plugins>,
        base: &Path,
        pids: Option<&DelegatePids>,
    ) -> (Plugins, Vec<Arc<Host>>) {
        let mut kept = Vec::new();
        let hosts = configs
            .iter()
            .filter(|c| c.enabled)
            .map(|config| {
                let same = previous.and_then(|p| p.hosts.iter().find(|h| h.config == *config));
                match same {
                    Some(host) => {
                        kept.push(host.clone());
                        host.clone()
                    }
                    None => Host::start(config.clone(), base, pids.cloned()),
                }
            })
            .collect();
        let gone = previous
            .map(|p| {
                p.hosts
                    .iter()
                    .filter(|h| !kept.iter().any(|k| Arc::ptr_eq(k, h)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        (Plugins { hosts }, gone)
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    pub fn hosts(&self) -> &[Arc<Host>] {
        &self.hosts
    }

    pub fn stats(&self) -> Vec<PluginStats<'_>> {
        self.hosts
            .iter()
            .map(|h| PluginStats {
                name: h.name(),
                manifest: h.manifest(),
                refused: h.refused(),
                breaker_open: h.breaker_open(),
                starts: h.starts(),
                restarts: h.restarts(),
                counts: &h.counts,
            })
            .collect()
    }

    /// Whether any plugin gives routing opinions.
    pub fn routes(&self) -> bool {
        self.hosts
            .iter()
            .any(|h| h.manifest().is_some_and(|m| m.capabilities.route.is_some()))
    }

    /// Whether any plugin rewrites requests going to a local (or a cloud) backend.
    pub fn rewrites(&self, local: bool) -> bool {
        self.hosts.iter().any(|h| rewrite_scope(h, local))
    }

    /// Queue `event` for every plugin that observes it (never waits).
    pub fn observe(&self, event: &str, data: impl FnOnce() -> Value) {
        let mut data = Some(data);
        let mut built = Value::Null;
        for host in &self.hosts {
            let wants = host.manifest().is_some_and(|m| {
                m.capabilities
                    .observe
                    .is_some_and(|o| o.events.iter().any(|e| e == event))
            });
            if wants {
                if let Some(make) = data.take() {
                    built = make();
                }
                host.observe(event, built.clone());
            }
        }
    }

    /// Ask the routing plugins in config order; the first that names a target gives
    /// the opinion. `notes` gets what went wrong (a plugin skipped, timed out, refused).
    pub async fn route(&self, ask: &RouteAsk<'_>, notes: &mut Vec<String>) -> Option<RouteOpinion> {
        for host in &self.hosts {
            let Some(manifest) = host.manifest() else {
                continue;
            };
            if manifest.capabilities.route.is_none() {
                continue;
            }
            let params = json!({
                "request": view::request(ask.request, &manifest.reads, host.config.allow_prompt_text),
                "model": ask.model,
                "front": ask.front,
                "estimated_tokens": ask.estimated_tokens,
                "session": ask.session,
            });
            let result = match host.call(Hook::Route, params).await {
                Called::Result(result) => result,
                Called::Without(note) => {
                    notes.push(note);
                    continue;
                }
            };
            match result.get("target") {
                None | Some(Value::Null) => continue,
                Some(Value::String(target)) if !target.trim().is_empty() => {
                    let reason = result
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("no reason given");
                    return Some(RouteOpinion {
                        plugin: host.name().to_owned(),
                        target: target.trim().to_owned(),
                        reason: reason.to_owned(),
                    });
                }
                Some(other) => {
                    notes.push(host.refuse(&format!("route target {other} is not a name")))
                }
            }
        }
        None
    }

    /// Run the rewrite plugins whose scope covers the route, in config order, each on
    /// the previous one's result. `None`: no plugin changed the request.
    pub async fn rewrite(&self, ask: &RewriteAsk<'_>, notes: &mut Vec<String>) -> Option<Request> {
        let mut current: Option<Request> = None;
        for host in self.hosts.iter().filter(|h| rewrite_scope(h, ask.local)) {
            let Some(manifest) = host.manifest() else {
                continue;
            };
            let request = current.as_ref().unwrap_or(ask.request);
            let params = json!({
                "request": view::request(request, &manifest.reads, host.config.allow_prompt_text),
                "route": {"backend": ask.backend, "model": ask.model, "local": ask.local},
            });
            let result = match host.call(Hook::Rewrite, params).await {
                Called::Result(result) => result,
                Called::Without(note) => {
                    notes.push(note);
                    continue;
                }
            };
            match apply_rewrite(host, &manifest.reads, request, &result) {
                Ok(Some(next)) => current = Some(next),
                Ok(None) => {}
                Err(refused) => notes.push(refused),
            }
        }
        current
    }

    /// Say `shutdown` to every plugin and end their processes.
    pub async fn stop(&self) {
        stop_all(&self.hosts).await;
    }
}

/// Stop `hosts` (all at once: each waits its own grace).
pub async fn stop_all(hosts: &[Arc<Host>]) {
    let stopping: Vec<_> = hosts
        .iter()
        .map(|h| {
            let h = h.clone();
            tokio::spawn(async move { h.stop().await })
        })
        .collect();
    for stop in stopping {
        let _ = stop.await;
    }
}

fn rewrite_scope(host: &Host, local: bool) -> bool {
    host.manifest()
        .and_then(|m| m.capabilities.rewrite)
        .is_some_and(|r| r.scope.covers(local))
}

/// A rewrite result: `null`/`{}` (no change), `{"append_system": "..."}` (a system note
/// added after the leading system turns), or `{"request": {...}}` (the request as it was
/// shown, only for a plugin that may see prompt text: its fields are laid over the
/// request, each one a field the manifest `reads`, the model unchanged).
fn apply_rewrite(
    host: &Host,
    reads: &[String],
    request: &Request,
    result: &Value,
) -> Result<Option<Request>, String> {
    if result.is_null() {
        return Ok(None);
    }
    if let Some(whole) = result.get("request") {
        if !host.config.allow_prompt_text {
            return Err(host.refuse("a whole request from a plugin not granted prompt text"));
        }
        let Some(fields) = whole.as_object() else {
            return Err(host.refuse("a request that is not an object"));
        };
        if let Some(unread) = fields.keys().find(|k| *k != "model" && !reads.contains(k)) {
            return Err(host.refuse(&format!("a change to {unread:?}, which it does not read")));
        }
        let mut merged = serde_json::to_value(request).unwrap_or_default();
        if let Some(target) = merged.as_object_mut() {
            target.extend(fields.clone());
        }
        let next: Request = serde_json::from_value(merged)
            .map_err(|e| host.refuse(&format!("its request is not an ngl Request ({e})")))?;
        if next.model != request.model {
            return Err(host.refuse("a rewrite that changes the model (routing decided it)"));
        }
        return Ok(Some(next));
    }
    if let Some(note) = result.get("append_system") {
        let Some(note) = note.as_str() else {
            return Err(host.refuse("append_system that is not text"));
        };
        let mut next = request.clone();
        let at = next
            .turns
            .iter()
            .take_while(|t| t.role == Role::System)
            .count();
        next.turns.insert(at, Turn::text(Role::System, note));
        return Ok(Some(next));
    }
    match result.as_object() {
        Some(empty) if empty.is_empty() => Ok(None),
        _ => Err(host.refuse("a rewrite result with no known key")),
    }
}

impl Plugins {
    /// The hosts' call counts summed: (calls, failures).
    pub fn totals(&self) -> (u64, u64) {
        self.hosts.iter().fold((0, 0), |(calls, failures), h| {
            (
                calls + h.counts.calls.load(Ordering::Relaxed),
                failures + h.counts.failures.load(Ordering::Relaxed),
            )
        })
    }
}
