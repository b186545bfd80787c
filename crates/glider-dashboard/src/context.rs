//! `/api/context/*`: the sessions of the context log, one session's episodes and
//! entities (folded from its events), and forgetting one. Each call reads the SQLite
//! file on a blocking thread with its own connection; the guard treats these as reads
//! that cost work (same `Origin` rule as the state-changing calls).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::Shared;
use crate::rest::error;

/// `GET /api/context/sessions`: every session, most recently active first.
pub async fn sessions(State(shared): State<Arc<Shared>>) -> Response {
    with_reader(&shared, |reader| {
        reader
            .sessions()
            .map(|sessions| Json(json!({ "sessions": sessions })).into_response())
    })
    .await
}

/// `GET /api/context/sessions/{id}`: the session's timeline of episodes, its entities
/// (files, commands, errors, models), its continuity record and its budget (the
/// log's count, and what the running engine holds for the turn budget and loop guard).
pub async fn session(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let engine = shared.engine.clone();
    with_reader(&shared, move |reader| {
        Ok(match reader.session(&id)? {
            Some(mut view) => {
                view.budget.live = engine.session_budget(&id);
                Json(view).into_response()
            }
            None => unknown(&id),
        })
    })
    .await
}

/// `DELETE /api/context/sessions/{id}`: delete the session's events (the log keeps
/// only the count, as a `forgotten` event).
pub async fn forget(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let watched = shared.clone();
    with_reader(&shared, move |reader| {
        let deleted = reader.forget(&id)?;
        if deleted == 0 {
            return Ok(unknown(&id));
        }
        tracing::info!(deleted, "context session forgotten by the operator");
        watched
            .sessions_forgotten
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Json(json!({ "session": id, "deleted": deleted })).into_response())
    })
    .await
}

fn unknown(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("the context log holds no session {id:?}"),
    )
}

/// Run `read` on a blocking thread; a disabled log or a database error is a clear
/// JSON error.
async fn with_reader(
    shared: &Shared,
    read: impl FnOnce(&glider_context::Reader) -> Result<Response, glider_context::StoreError>
    + Send
    + 'static,
) -> Response {
    let Some(surface) = &shared.options.context else {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "the context log is off (context.enabled: false)",
        );
    };
    let reader = surface.reader.clone();
    match tokio::task::spawn_blocking(move || read(&reader)).await {
        Ok(Ok(response)) => response,
        Ok(Err(failure)) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "context_error",
            &failure.to_string(),
        ),
        Err(join) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "context_error",
            &format!("the context read failed: {join}"),
        ),
    }
}
