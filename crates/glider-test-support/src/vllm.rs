//! vLLM's sleep mode (`--enable-sleep-mode` with `VLLM_SERVER_DEV_MODE=1`):
//! `POST /sleep?level=1|2`, `POST /wake_up` (optionally `?tags=weights,kv_cache`) and
//! `GET /is_sleeping` -> `{"is_sleeping": bool}`; and llama.cpp's `GET /props`
//! (a server's window, tool support and modalities), when configured. vLLM answers the first two with an
//! empty 200. A generation request while asleep is refused with 503 (the mock's
//! choice: a real server has no weights on the GPU then, and a client that forgot the
//! wake must find out rather than get an answer).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::openai_chat;
use crate::server::Incoming;
use crate::state::MockState;

/// Without sleep mode the endpoints do not exist, as on a server run without it.
fn not_served() -> Response {
    (StatusCode::NOT_FOUND, "Not Found").into_response()
}

pub(crate) async fn sleep(
    State(state): State<Arc<MockState>>,
    Query(query): Query<HashMap<String, String>>,
    _inc: Incoming,
) -> Response {
    if !state.config.vllm_sleep_mode {
        return not_served();
    }
    let level = match query.get("level").map(|l| l.parse::<u8>()) {
        None => 1,
        Some(Ok(level @ (1 | 2))) => level,
        Some(_) => {
            return openai_chat::error(400, "level must be 1 or 2", None, None);
        }
    };
    state.set_sleeping(Some(level));
    StatusCode::OK.into_response()
}

pub(crate) async fn wake_up(State(state): State<Arc<MockState>>, _inc: Incoming) -> Response {
    if !state.config.vllm_sleep_mode {
        return not_served();
    }
    if state.sleeping().is_some() {
        if !state.sleep(state.config.wake_delay).await {
            return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
        }
        state.set_sleeping(None);
    }
    StatusCode::OK.into_response()
}

pub(crate) async fn is_sleeping(State(state): State<Arc<MockState>>, _inc: Incoming) -> Response {
    if !state.config.vllm_sleep_mode {
        return not_served();
    }
    axum::Json(json!({"is_sleeping": state.sleeping().is_some()})).into_response()
}

/// A generation request while asleep.
pub(crate) fn asleep(level: u8) -> Response {
    openai_chat::error(
        503,
        &format!("the engine is asleep (sleep level {level}); POST /wake_up first"),
        None,
        None,
    )
}

/// llama.cpp's `GET /props`, when [`crate::MockConfig::llama_props_vision`] is set.
pub(crate) async fn props(State(state): State<Arc<MockState>>, _inc: Incoming) -> Response {
    let Some(vision) = state.config.llama_props_vision else {
        return not_served();
    };
    axum::Json(json!({
        "default_generation_settings": {"n_ctx": state.config.context_window.unwrap_or(4096)},
        "chat_template_caps": {"supports_tools": true},
        "modalities": {"vision": vision, "audio": false},
    }))
    .into_response()
}
