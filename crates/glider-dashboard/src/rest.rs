//! The REST endpoints under `/api/*` and `/metrics` (every one is described in
//! docs/dashboard.md). Reads come from the collector's state and the engine's runtime;
//! the actions (reset a breaker, reload the config, re-discover the delegate CLIs) act
//! on the engine or the vendor registry.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use glider_config::{Config, ReloadOutcome};
use glider_engine::BackendState;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::collector::{lock, publish_backend_changes};
use crate::redact::{redact, strip_userinfo};
use crate::{Shared, ledger};

/// Largest page of `/api/requests`.
const MAX_PAGE: usize = 500;

/// A JSON error body: `{"error": {"type", "message"}}`.
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        Json(json!({"error": {"type": kind, "message": message}})),
    )
        .into_response()
}

pub async fn not_found(request: axum::extract::Request) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!(
            "no dashboard route for {} {} (see /docs/dashboard)",
            request.method(),
            request.uri().path()
        ),
    )
}

/// `GET /api/status`
pub async fn status(State(shared): State<Arc<Shared>>) -> Response {
    let history = &shared.history;
    let last_error = lock(&history.stats.last_error).clone();
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "started_at_ms": shared.started_at_ms,
        "uptime_s": shared.started.elapsed().as_secs(),
        "glider_home": shared.options.home.display().to_string(),
        "config_path": shared.engine.config().path().map(|p| p.display().to_string()),
        "doors": shared.options.doors,
        "token_required": shared.options.token.is_some(),
        "history": {
            "dir": history.options.dir.display().to_string(),
            "written": history.stats.written.load(Ordering::Relaxed),
            "dropped": history.stats.dropped.load(Ordering::Relaxed),
            "errors": history.stats.errors.load(Ordering::Relaxed),
            "last_error": last_error,
        },
        "ledger": {
            "seeded": shared.ledger_seeded.load(Ordering::Acquire),
            "seeded_rows": shared.ledger_seeded_rows.load(Ordering::Relaxed),
        },
        "events": {
            "last_seq": shared.last_seq.load(Ordering::Relaxed),
            "bus_lagged": shared.bus_lagged.load(Ordering::Relaxed),
            "ws_dropped": shared.ws_dropped.load(Ordering::Relaxed),
            "ws_clients": shared.ws_clients.load(Ordering::Relaxed),
        },
    }))
    .into_response()
}

/// `GET /api/backends`
pub async fn backends(State(shared): State<Arc<Shared>>) -> Response {
    let runtime = shared.engine.runtime();
    let list: Vec<Value> = runtime
        .backends
        .iter()
        .map(|backend| {
            let state = BackendState::of(backend);
            let health = backend.health();
            let mut value = serde_json::to_value(&state).unwrap_or_else(|_| json!({}));
            if let Value::Object(map) = &mut value {
                let config = &backend.config;
                map.insert("base_url".into(), strip_userinfo(&config.base_url).into());
                map.insert(
                    "models".into(),
                    json!(
                        config
                            .models
                            .iter()
                            .map(|m| m.spec().name)
                            .collect::<Vec<_>>()
                    ),
                );
                map.insert("default_model".into(), json!(config.default_model));
                map.insert("served_models".into(), json!(health.served_models));
                map.insert("checked_at".into(), json!(health.checked_at));
                map.insert("probe".into(), json!(health.note));
                if let Some(pool) = &backend.pool {
                    // Each replica as its own probe and breaker see it.
                    let replicas: Vec<Value> = pool
                        .replicas
                        .iter()
                        .map(|replica| {
                            let health = replica.health();
                            json!({
                                "base_url": strip_userinfo(&replica.base_url),
                                "health": health.status,
                                "detail": health.detail,
                                "breaker": replica.breaker.state(),
                            })
                        })
                        .collect();
                    map.insert("replicas".into(), json!(replicas));
                }
                map.insert(
                    "usable".into(),
                    json!(
                        config.enabled
                            && backend.unavailable.is_none()
                            && state.health != glider_backend::health::HealthStatus::Down
                            && state.breaker != glider_backend::BreakerState::Open
                    ),
                );
            }
            value
        })
        .collect();
    Json(json!({ "backends": list })).into_response()
}

/// `POST /api/backends/{name}/reset`: close the breaker now.
pub async fn reset_breaker(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Response {
    let runtime = shared.engine.runtime();
    let Some(backend) = runtime.backend(&name) else {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no backend named {name:?}"),
        );
    };
    backend.breaker.reset();
    tracing::info!(backend = %name, "circuit breaker reset by the operator");
    publish_backend_changes(&shared);
    Json(json!({"backend": name, "breaker": backend.breaker.state()})).into_response()
}

#[derive(Deserialize)]
pub struct Page {
    limit: Option<usize>,
    before: Option<u64>,
}

/// `GET /api/requests?limit=N&before=SEQ`: finished requests newest first, then older
/// pages from the history files; the first page also lists those in flight.
pub async fn requests(
    State(shared): State<Arc<Shared>>,
    page: Result<Query<Page>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(page) = match page {
        Ok(page) => page,
        Err(rejection) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &format!("limit and before must be non-negative integers: {rejection}"),
            );
        }
    };
    let limit = page.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let (mut list, in_flight) = {
        let recent = lock(&shared.recent);
        let list: Vec<Value> = recent
            .finished
            .iter()
            .rev()
            .filter(|e| page.before.is_none_or(|b| e.seq < b))
            .take(limit)
            .filter_map(|e| serde_json::from_str(&e.json).ok())
            .collect();
        let in_flight: Vec<Value> = if page.before.is_none() {
            recent
                .in_flight
                .values()
                .rev()
                .filter_map(|r| serde_json::to_value(r).ok())
                .map(|mut r| {
                    glider_sys::secrets::redact_keys_in_json(&mut r);
                    r
                })
                .collect()
        } else {
            Vec::new()
        };
        (list, in_flight)
    };
    if list.len() < limit {
        // Older than what memory holds: read the history files.
        let older_than = list.last().map(crate::history::seq_of).or(page.before);
        let more = shared
            .history
            .read_before(older_than, limit - list.len())
            .await;
        list.extend(more);
    }
    let next_before = (list.len() == limit)
        .then(|| list.last().map(crate::history::seq_of))
        .flatten();
    Json(json!({
        "requests": list,
        "in_flight": in_flight,
        "next_before": next_before,
    }))
    .into_response()
}

/// `GET /api/stats`
pub async fn stats(State(shared): State<Arc<Shared>>) -> Response {
    Json(shared.metrics.stats()).into_response()
}

#[derive(Deserialize)]
pub struct SeriesQuery {
    bucket: Option<String>,
    window: Option<String>,
}

/// `GET /api/stats/series?bucket=60s&window=1h`: the ledger's buckets, oldest first,
/// for the charts (`bucket=1d` for days).
pub async fn series(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<SeriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let invalid = |message: String| error(StatusCode::BAD_REQUEST, "invalid_request", &message);
    let Query(query) = match query {
        Ok(query) => query,
        Err(rejection) => return invalid(rejection.to_string()),
    };
    let parse = |name: &str, value: Option<&str>, default_ms: u64| match value {
        None => Ok(default_ms),
        Some(text) => ledger::parse_duration_ms(text).map_err(|e| format!("{name}: {e}")),
    };
    let bucket_ms = match parse("bucket", query.bucket.as_deref(), 60_000) {
        Ok(ms) => ms,
        Err(message) => return invalid(message),
    };
    let default_window = if bucket_ms.is_multiple_of(ledger::DAY_MS) {
        30 * ledger::DAY_MS
    } else {
        bucket_ms * 60
    };
    let window_ms = match parse("window", query.window.as_deref(), default_window) {
        Ok(ms) => ms,
        Err(message) => return invalid(message),
    };
    if let Err(message) = ledger::check_series(bucket_ms, window_ms) {
        return invalid(message);
    }
    Json(shared.metrics.series(bucket_ms, window_ms)).into_response()
}

/// What a restart would change: the file on disk against the config in effect at start.
fn restart_status(shared: &Shared) -> Value {
    let running = shared.engine.config().snapshot();
    let Some(path) = shared.engine.config().path() else {
        return json!({"file": "none", "pending": [], "reload_pending": false, "error": null});
    };
    match Config::load(path) {
        Err(e) => {
            json!({"file": "invalid", "pending": [], "reload_pending": false, "error": e.to_string()})
        }
        Ok(disk) => {
            let baseline = shared
                .options
                .baseline
                .clone()
                .unwrap_or_else(|| running.clone());
            let pending = baseline.restart_only_changes(&disk);
            // Hot keys that differ from what runs: the watcher has not applied them yet.
            let reload_pending = running.hot_applicable(disk.clone()) != *running;
            json!({
                "file": if pending.is_empty() && !reload_pending { "same" } else { "differs" },
                "pending": pending,
                "reload_pending": reload_pending,
                "error": null,
            })
        }
    }
}

/// `GET /api/config`: the running config with secrets redacted, and what needs a
/// restart.
pub async fn config(State(shared): State<Arc<Shared>>) -> Response {
    let running = shared.engine.config().snapshot();
    let value = serde_json::to_value(&*running).unwrap_or(Value::Null);
    Json(json!({
        "path": shared.engine.config().path().map(|p| p.display().to_string()),
        "running": redact(&value),
        "restart_only": glider_config::restart_only_keys(),
        "restart": restart_status(&shared),
    }))
    .into_response()
}

/// `POST /api/config/reload`: re-read the file now.
pub async fn reload(State(shared): State<Arc<Shared>>) -> Response {
    if shared.engine.config().path().is_none() {
        return error(
            StatusCode::CONFLICT,
            "no_file",
            "running the embedded default config: there is no file to reload (start with -c FILE)",
        );
    }
    let handle = shared.engine.config().clone();
    let outcome = tokio::task::spawn_blocking(move || handle.reload())
        .await
        .unwrap_or_else(|e| ReloadOutcome::Rejected {
            error: e.to_string(),
        });
    let restart = restart_status(&shared);
    let (status, body) = match outcome {
        ReloadOutcome::Unchanged => (
            StatusCode::OK,
            json!({"outcome": "unchanged", "restart": restart}),
        ),
        ReloadOutcome::Applied { .. } => (
            StatusCode::OK,
            json!({"outcome": "applied", "restart": restart}),
        ),
        ReloadOutcome::Rejected { error } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"outcome": "rejected", "error": {"type": "invalid_config", "message": error}, "restart": restart}),
        ),
    };
    (status, Json(body)).into_response()
}

/// `GET /metrics`: OpenMetrics text (Prometheus reads it).
pub async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let runtime = shared.engine.runtime();
    let states: Vec<BackendState> = runtime
        .backends
        .iter()
        .map(|b| BackendState::of(b))
        .collect();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        crate::plugins::with_families(
            crate::vram::with_gauges(
                shared.metrics.encode(
                    &states,
                    shared.options.context.as_ref().map(|c| c.counters.as_ref()),
                ),
                &shared,
            ),
            &shared,
        ),
    )
        .into_response()
}

/// The registry's list as JSON: `{"discovered_at_ms", "vendors": [...]}`.
fn vendor_list(shared: &Shared, list: &[glider_delegate::Discovered]) -> Response {
    Json(json!({
        "discovered_at_ms": shared.options.vendors.discovered_at_ms(),
        "vendors": list.iter().map(glider_delegate::Discovered::to_json).collect::<Vec<_>>(),
    }))
    .into_response()
}

/// `GET /api/vendors`: the delegate CLIs as last discovered.
pub async fn vendors(State(shared): State<Arc<Shared>>) -> Response {
    let list = shared.options.vendors.list();
    vendor_list(&shared, &list)
}

/// `POST /api/vendors/discover`: look for the CLIs again (current config) and return
/// the new list.
pub async fn discover_vendors(State(shared): State<Arc<Shared>>) -> Response {
    let config = shared.engine.runtime().config.delegate.clone();
    let list = shared.options.vendors.discover(&config).await;
    vendor_list(&shared, &list)
}

/// `POST /api/mitm/enrollment` with `{"pids":[..]}`: transparent mode then decrypts only
/// those processes (and their descendants) among the selected names. An empty array, no
/// array or an empty body clears it. With transparent mode off it succeeds and does
/// nothing (`"active": false`).
pub async fn enrollment(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Enrollment {
        #[serde(default)]
        pids: Option<Vec<u32>>,
    }
    let pids = if body.iter().all(u8::is_ascii_whitespace) {
        Vec::new()
    } else {
        match serde_json::from_slice::<Enrollment>(&body) {
            Ok(enrollment) => enrollment.pids.unwrap_or_default(),
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    &format!(r#"expected {{"pids":[<process id>, ...]}}: {e}"#),
                );
            }
        }
    };
    let pids: std::collections::BTreeSet<u32> = pids.into_iter().collect();
    let active = match &shared.options.enrollment {
        Some(hook) => {
            tracing::info!(?pids, "transparent mode: enrollment set by the operator");
            (hook.0)(pids.clone());
            true
        }
        None => false,
    };
    Json(json!({"pids": pids, "active": active})).into_response()
}

/// `GET /api/hotswap`: the modules that accept a new config with each one's version
/// now, and every swap of each that took or failed (module, version, time, outcome; a
/// rejected config file as module `config`).
pub async fn hotswap(State(shared): State<Arc<Shared>>) -> Response {
    let registry = shared.engine.hotswap();
    let versions: serde_json::Map<String, Value> = registry
        .versions()
        .into_iter()
        .map(|(module, version)| (module.to_owned(), json!(version)))
        .collect();
    Json(json!({
        "modules": registry.names(),
        "versions": versions,
        "swaps": registry.history(),
    }))
    .into_response()
}
