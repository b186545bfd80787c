//! JSON views of decoded Agent RPC messages for the MITM's debug dumps: what Glider
//! understood of each append and each RunSSE frame, next to the raw bytes.

use serde_json::{Value, json};

use crate::frame::Frame;
use crate::messages::{AgentServerMessage, AppendKind, BidiAppendRequest, Update};

/// A BidiAppend as Glider read it (or why it could not).
pub fn append(body: &[u8]) -> Value {
    let request = match BidiAppendRequest::decode(body) {
        Ok(request) => request,
        Err(e) => return json!({"decode_error": e.to_string()}),
    };
    let mut view = json!({
        "request_id": request.request_id(),
        "append_seqno": request.append_seqno,
        "unknown_bytes": request.unknown.0.len(),
    });
    match request.message() {
        Ok(message) => {
            view["kind"] = match message.kind() {
                AppendKind::Root { text } => json!({"root": {"text": text}}),
                AppendKind::Child => json!("child"),
                AppendKind::FollowOn { action } => json!({"follow_on": {"action": action}}),
                AppendKind::ToolLoop { member } => json!({"tool_loop": member}),
            };
            if let Some(run) = &message.run_request {
                view["model"] = json!(run.model());
                view["conversation_id"] = json!(run.conversation_id);
                view["subagent_type_name"] = json!(run.subagent_type_name);
                view["run_request_unknown_bytes"] = json!(run.unknown.0.len());
            }
        }
        Err(e) => view["message_error"] = json!(e.to_string()),
    }
    view
}

/// One RunSSE frame as Glider read it.
pub fn frame(frame: &Frame) -> Value {
    if let Some(end) = frame.end_of_stream() {
        return match end {
            Ok(end) => json!({
                "end_of_stream": {
                    "error": end.error.map(|e| json!({"code": e.code, "message": e.message})),
                    "metadata": end.metadata,
                }
            }),
            Err(e) => json!({"end_of_stream": {"decode_error": e.to_string()}}),
        };
    }
    match AgentServerMessage::decode(&frame.payload) {
        Ok(message) => match message.interaction_update.map(|u| u.update) {
            Some(update) => update_view(&update),
            None => json!({"server_message_member": message.other}),
        },
        Err(e) => json!({"decode_error": e.to_string(), "bytes": frame.payload.len()}),
    }
}

fn update_view(update: &Update) -> Value {
    match update {
        Update::TextDelta(text) => json!({"text_delta": text}),
        Update::ThinkingDelta(text) => json!({"thinking_delta": text}),
        Update::TokenDelta(n) => json!({"token_delta": n}),
        Update::Heartbeat => json!("heartbeat"),
        Update::TurnEnded => json!("turn_ended"),
        Update::ToolCallStarted(t) => {
            json!({"tool_call_started": {"call_id": t.call_id, "tool": t.tool_name()}})
        }
        Update::ToolCallCompleted(t) => {
            json!({"tool_call_completed": {"call_id": t.call_id, "tool": t.tool_name()}})
        }
        Update::PartialToolCall(t) => {
            json!({"partial_tool_call": {"call_id": t.call_id, "tool": t.tool_name()}})
        }
        Update::Other(n) => json!({"other_update": n}),
        Update::None => Value::Null,
    }
}
