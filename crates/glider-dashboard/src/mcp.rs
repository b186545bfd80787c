//! The dashboard's view of the MCP servers: `GET /api/mcp` lists each server Glider
//! connects to (state, offered tools, calls, errors, last restart), read from whatever
//! the binary attached as [`McpSurface`]; without one it says MCP is off.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::Shared;

/// Reads the MCP servers' state as JSON (`{"servers": [...]}`); kept as a function so
/// the dashboard does not depend on the MCP crate.
#[derive(Clone)]
pub struct McpSurface(pub Arc<dyn Fn() -> serde_json::Value + Send + Sync>);

impl std::fmt::Debug for McpSurface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("McpSurface")
    }
}

/// `GET /api/mcp`
pub async fn view(State(shared): State<Arc<Shared>>) -> Response {
    match &shared.options.mcp {
        Some(read) => Json((read.0)()).into_response(),
        None => Json(json!({"enabled": false, "servers": []})).into_response(),
    }
}
