//! Watching a root turn's RunSSE reply, local or the origin's: its frames are read as
//! they pass (debug dumps, the tool codec) and, when it ends or the client leaves, the
//! turn's family is touched so its follow-ons keep its side.

use std::sync::Arc;

use bytes::Bytes;
use glider_cursorrpc::frame::FrameDecoder;
use glider_cursorrpc::{Update, view};
use glider_door::Observer;
use serde_json::json;

use super::plane::{FAMILY_TTL, debug_rpc};
use crate::Mitm;

/// A root's reply stream ended: keep its family for the follow-ons.
fn turn_ended(mitm: &Mitm, request_id: &str) {
    if !request_id.is_empty() {
        mitm.agent_rpc.hub.touch_family(request_id, FAMILY_TTL);
    }
}

/// Watches a root turn's RunSSE reply, local or the origin's: reads its frames as they
/// pass (debug dumps, the tool codec) and, when it ends or the client leaves, touches
/// the turn's family and writes the dump.
pub(super) struct TurnWatch {
    mitm: Arc<Mitm>,
    request_id: String,
    /// The debug dump's record: whose reply this is.
    dump: &'static str,
    /// Reads the frames as they pass (debug dumps, or the tool codec).
    decoder: Option<FrameDecoder>,
    /// Decoded frames for the debug dump.
    views: Option<Vec<serde_json::Value>>,
    /// `mitm.agent_rpc_tool_codec`: name the origin's tool calls in the log.
    tool_codec: bool,
}

impl TurnWatch {
    /// A watcher for `request_id`'s reply; `gzip`: its frames are compressed.
    pub(super) fn new(
        mitm: &Arc<Mitm>,
        request_id: String,
        dump: &'static str,
        gzip: bool,
        tool_codec: bool,
    ) -> TurnWatch {
        let debug = debug_rpc(mitm);
        TurnWatch {
            mitm: mitm.clone(),
            request_id,
            dump,
            decoder: (debug || tool_codec).then(|| FrameDecoder::new(gzip)),
            views: debug.then(Vec::new),
            tool_codec,
        }
    }
}

impl Observer for TurnWatch {
    fn data(&mut self, data: &Bytes) {
        let Some(decoder) = self.decoder.as_mut() else {
            return;
        };
        decoder.push(data);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    if self.tool_codec {
                        log_tool_call(&self.request_id, &frame);
                    }
                    if let Some(views) = self.views.as_mut() {
                        views.push(view::frame(&frame));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    // Not Connect framing after all: stop reading, keep relaying.
                    if let Some(views) = self.views.as_mut() {
                        views.push(json!({"decode_error": e.to_string()}));
                    }
                    self.decoder = None;
                    break;
                }
            }
        }
    }

    /// Its `Drop` does the work, so a client that leaves is handled the same.
    fn finish(self, _failure: Option<String>) {}
}

/// The tool codec: say which of the usual tools the origin asked the client to run.
fn log_tool_call(request_id: &str, frame: &glider_cursorrpc::Frame) {
    let Ok(message) = glider_cursorrpc::AgentServerMessage::decode(&frame.payload) else {
        return;
    };
    if let Some(Update::ToolCallStarted(call)) = message.interaction_update.map(|u| u.update) {
        tracing::info!(request_id, tool = %call.tool_name(), call_id = %call.call_id, "Agent RPC: the origin started a tool call");
    }
}

impl Drop for TurnWatch {
    fn drop(&mut self) {
        turn_ended(&self.mitm, &self.request_id);
        if let Some(views) = self.views.take() {
            self.mitm.dumps.dump_record(
                self.dump,
                &json!({"request_id": self.request_id, "frames": views}),
            );
        }
    }
}
