//! The dashboard's view of what Glider fits local models to: `GET /api/fit` lists each
//! local backend's models with the speed measured on the model's own replies (prompt
//! and generated tokens a second, `glider_engine::speed`) and what fitting gives it
//! (the output cap a request asking for more gets, and the system text's budget), as
//! the fit code itself computes them (`glider_engine::fit::LocalFit`). The overview's
//! *Local models* panel shows the same.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::Shared;

/// `GET /api/fit`
pub async fn view(State(shared): State<Arc<Shared>>) -> Response {
    let runtime = shared.engine.runtime();
    let fit = &runtime.config.fit;
    Json(json!({
        "enabled": fit.enabled,
        "max_reply_secs": fit.max_reply_secs,
        "max_system_share": fit.max_system_share,
        "models": shared.engine.local_fits(),
    }))
    .into_response()
}
