//! `/ws`: typed JSON events for live views. Each socket reads the hub, a bounded
//! broadcast: a socket that falls behind loses the oldest events, is told how many in a
//! `dropped` event, and never holds up the collector or a request.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use glider_engine::{BackendState, RequestRecord};
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;

use crate::Shared;
use crate::collector::Entry;

/// A socket whose client has not taken one message for this long is closed.
const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// What `/ws` sends; `type` names the variant.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WsEvent<'a> {
    /// First message on every socket.
    Hello {
        version: &'static str,
        /// `seq` of the last finished request so far.
        last_seq: u64,
    },
    RequestStarted {
        request: &'a RequestRecord,
    },
    RequestFinished {
        request: &'a Entry<'a>,
    },
    BackendStateChanged {
        backend: &'a BackendState,
    },
    ConfigReloaded {
        at_ms: u64,
        backends: &'a [String],
    },
    /// A context session changed (`updated`: new events; `forgotten`: deleted), at
    /// most once a second per session. Carries its summary line, never prompt text.
    Session {
        session: &'a str,
        change: &'static str,
        summary: Option<&'a glider_context::SessionRow>,
    },
    /// A GPU sample, an eviction plan, a load or an unload (`event` names which).
    Vram {
        #[serde(flatten)]
        event: &'a glider_vram::VramEvent,
    },
    /// Events were lost: `source` `ws` (this socket was too slow) or `bus` (the
    /// dashboard itself fell behind the pipeline). `total` counts since the socket (ws)
    /// or the process (bus) began.
    Dropped {
        source: &'static str,
        count: u64,
        total: u64,
    },
}

pub async fn upgrade(State(shared): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| run(shared, socket))
}

/// Counts a socket for as long as it lives.
struct ClientGuard(Arc<Shared>);

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.ws_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn run(shared: Arc<Shared>, socket: WebSocket) {
    let mut events = shared.hub.subscribe();
    let mut closing = shared.closing.subscribe();
    shared.ws_clients.fetch_add(1, Ordering::Relaxed);
    let _guard = ClientGuard(shared.clone());
    let (mut sink, mut incoming) = socket.split();
    let hello = WsEvent::Hello {
        version: env!("CARGO_PKG_VERSION"),
        last_seq: shared.last_seq.load(Ordering::Relaxed),
    };
    if send(&mut sink, &hello).await.is_err() {
        return;
    }
    let mut dropped = 0u64;
    loop {
        tokio::select! {
            message = incoming.next() => match message {
                // Pings are answered by the protocol layer; anything else is ignored.
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            event = events.recv() => {
                let sent = match event {
                    Ok(text) => send_text(&mut sink, text).await,
                    Err(RecvError::Lagged(count)) => {
                        dropped += count;
                        shared.ws_dropped.fetch_add(count, Ordering::Relaxed);
                        shared.metrics.dropped("websocket", count);
                        send(&mut sink, &WsEvent::Dropped { source: "ws", count, total: dropped }).await
                    }
                    Err(RecvError::Closed) => break,
                };
                if sent.is_err() {
                    break;
                }
            },
            _ = closing.changed() => break,
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.send(Message::Close(None))).await;
}

type Sink = futures_util::stream::SplitSink<WebSocket, Message>;

async fn send(sink: &mut Sink, event: &WsEvent<'_>) -> Result<(), ()> {
    let text = serde_json::to_string(event).map_err(|_| ())?;
    send_text(sink, text.into()).await
}

async fn send_text(sink: &mut Sink, text: axum::extract::ws::Utf8Bytes) -> Result<(), ()> {
    match tokio::time::timeout(SEND_TIMEOUT, sink.send(Message::Text(text))).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}
