//! Streamable HTTP resumption (MCP 2025-11-25, "Resumability and Redelivery"): a server
//! that ends a tool call's SSE stream after its priming event, before the result, gets
//! the client back with `GET` and `Last-Event-ID`, and answers the call there. The
//! server is a small one written here on loopback (axum), so the drop is exact.

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use common::procs::until;
use glider_config::McpConfig;
use glider_mcp::McpHub;
use serde_json::{Value, json};

/// What the server saw: the `Last-Event-ID` of each GET, and the pending call's id.
#[derive(Default)]
struct Seen {
    resumed_from: Vec<String>,
    call_id: Option<Value>,
}

type Shared = Arc<Mutex<Seen>>;

fn sse(events: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from(events),
    )
        .into_response()
}

fn json_reply(value: Value) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::HeaderName::from_static("mcp-session-id"), "s1"),
        ],
        value.to_string(),
    )
        .into_response()
}

async fn on_post(State(seen): State<Shared>, body: String) -> Response {
    let message: Value = serde_json::from_str(&body).expect("JSON-RPC");
    let id = message.get("id").cloned();
    match (message["method"].as_str(), id) {
        (Some("initialize"), Some(id)) => json_reply(json!({
            "jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "dropper", "version": "1.0.0"}
            }
        })),
        (Some("tools/list"), Some(id)) => json_reply(json!({
            "jsonrpc": "2.0", "id": id, "result": {"tools": [{
                "name": "slow", "description": "answers after a reconnect",
                "inputSchema": {"type": "object", "properties": {}}
            }]}
        })),
        (Some("tools/call"), Some(id)) => {
            seen.lock().expect("lock").call_id = Some(id);
            // The priming event (an id, no data) and a short retry, then the stream
            // ends with no result.
            sse("id: e1\nretry: 50\ndata: \n\n".into())
        }
        (_, Some(id)) => json_reply(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": "no such method"}
        })),
        // Notifications (no id).
        (_, None) => StatusCode::ACCEPTED.into_response(),
    }
}

async fn on_get(State(seen): State<Shared>, headers: HeaderMap) -> Response {
    let Some(last) = headers.get("last-event-id").and_then(|v| v.to_str().ok()) else {
        // No standalone stream on this server (the spec allows 405).
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    };
    let mut seen = seen.lock().expect("lock");
    seen.resumed_from.push(last.to_owned());
    let Some(id) = seen.call_id.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let result = json!({"jsonrpc": "2.0", "id": id, "result": {
        "content": [{"type": "text", "text": format!("resumed after {last}")}]
    }});
    sse(format!("id: e2\ndata: {result}\n\n"))
}

#[tokio::test]
async fn a_dropped_reply_stream_is_resumed_with_last_event_id() {
    let seen = Shared::default();
    let app = Router::new()
        .route(
            "/mcp",
            post(on_post)
                .get(on_get)
                .delete(|| async { StatusCode::OK }),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let hub = McpHub::new(None);
    let config: McpConfig = serde_saphyr::from_str(&format!(
        "servers:\n  dropper: {{url: 'http://127.0.0.1:{port}/mcp'}}\n"
    ))
    .expect("mcp config parses");
    hub.apply(&config);
    let offered = until(|| hub.tools().iter().any(|t| t.name == "dropper__slow")).await;
    assert!(offered, "never offered; servers: {:?}", hub.servers());

    let output = hub
        .call("dropper__slow", json!({}))
        .await
        .expect("the call is answered on the resumed stream");
    assert!(!output.is_error(), "{:?}", output.result);
    assert_eq!(output.text(), "resumed after e1");
    assert_eq!(seen.lock().expect("lock").resumed_from, ["e1"]);
    hub.shutdown().await;
}
