//! The dashboard's view of the plugins (docs/plugins.md): `GET /api/plugins` (each
//! configured plugin's manifest, breaker, starts and restarts, and its counts per hook)
//! and the `glider_plugin_*` families on `/metrics`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use glider_plugin::Hook;
use glider_plugin::host::{Counts, HookCounts};
use serde_json::json;

use crate::Shared;
use crate::vram::{before_eof, label};

/// `GET /api/plugins`: `{"plugins": [{name, manifest, refused, breaker_open, starts,
/// restarts, counts: {calls, failures, ..., route: {calls, failures, timeouts}, ...}}]}`.
pub async fn view(State(shared): State<Arc<Shared>>) -> Response {
    let plugins = shared.engine.plugins();
    Json(json!({"plugins": plugins.stats()})).into_response()
}

/// One OpenMetrics family: `# TYPE`, `# HELP`, then its samples (`name` is the family;
/// a counter's samples get `_total`).
fn family(out: &mut String, name: &str, kind: &str, help: &str, rows: &[(String, u64)]) {
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "# HELP {name} {help}");
    let sample = if kind == "counter" {
        format!("{name}_total")
    } else {
        name.to_owned()
    };
    for (labels, value) in rows {
        let _ = writeln!(out, "{sample}{{{labels}}} {value}");
    }
}

/// The plugin families, inserted before the closing `# EOF` of `text` (none without
/// plugins).
pub fn with_families(mut text: String, shared: &Shared) -> String {
    let plugins = shared.engine.plugins();
    if plugins.is_empty() {
        return text;
    }
    let plugin = |name: &str| format!("plugin=\"{}\"", label(name));
    let per_hook = |count: fn(&HookCounts) -> &AtomicU64| -> Vec<(String, u64)> {
        plugins
            .hosts()
            .iter()
            .flat_map(|host| {
                Hook::ALL.iter().map(move |&hook| {
                    (
                        format!("{},hook=\"{}\"", plugin(host.name()), hook.name()),
                        count(host.counts.hook(hook)).load(Ordering::Relaxed),
                    )
                })
            })
            .collect()
    };
    let per_plugin = |count: fn(&Counts) -> &AtomicU64| -> Vec<(String, u64)> {
        plugins
            .hosts()
            .iter()
            .map(|h| (plugin(h.name()), count(&h.counts).load(Ordering::Relaxed)))
            .collect()
    };
    let mut out = String::new();
    let counter = "counter";
    family(
        &mut out,
        "glider_plugin_calls",
        counter,
        "Calls made to a plugin, per hook.",
        &per_hook(|c| &c.calls),
    );
    family(
        &mut out,
        "glider_plugin_failures",
        counter,
        "Plugin calls that failed (an error, a timeout, the plugin down), per hook.",
        &per_hook(|c| &c.failures),
    );
    family(
        &mut out,
        "glider_plugin_timeouts",
        counter,
        "Plugin calls with no reply within the deadline, per hook.",
        &per_hook(|c| &c.timeouts),
    );
    family(
        &mut out,
        "glider_plugin_refused",
        counter,
        "Plugin results refused for going outside the manifest or the grants.",
        &per_plugin(|c| &c.refused),
    );
    family(
        &mut out,
        "glider_plugin_skipped",
        counter,
        "Plugin calls skipped because its breaker was open.",
        &per_plugin(|c| &c.skipped),
    );
    family(
        &mut out,
        "glider_plugin_breaker_opened",
        counter,
        "Times a plugin's breaker opened.",
        &per_plugin(|c| &c.breaker_opened),
    );
    family(
        &mut out,
        "glider_plugin_observe_dropped",
        counter,
        "Observe events dropped (a full queue, the plugin down or skipped).",
        &per_plugin(|c| &c.observe_dropped),
    );
    let hosts = plugins.hosts();
    let restarts: Vec<(String, u64)> = hosts
        .iter()
        .map(|h| (plugin(h.name()), h.restarts()))
        .collect();
    family(
        &mut out,
        "glider_plugin_restarts",
        counter,
        "Times a plugin's process was started again after its first start.",
        &restarts,
    );
    let open: Vec<(String, u64)> = hosts
        .iter()
        .map(|h| (plugin(h.name()), u64::from(h.breaker_open())))
        .collect();
    family(
        &mut out,
        "glider_plugin_breaker_open",
        "gauge",
        "1 while a plugin's breaker skips it.",
        &open,
    );
    before_eof(&mut text, &out);
    text
}
