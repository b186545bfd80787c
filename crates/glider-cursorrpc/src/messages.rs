//! The typed messages Glider reads (BidiAppend's client message, RunSSE's request id)
//! and writes (RunSSE's server messages for a local reply). Each keeps the fields it
//! does not model as raw bytes, so decode → encode gives them back untouched.
//!
//! One file, past 600 lines, on purpose: the messages nest one in another (an append
//! holds the client message, which holds the run request, its action and the user's
//! message; a server message holds the interaction update and its tool call), and each
//! keeps its decode and encode beside it, so one message's wire is read top to bottom.

use crate::fields::{
    agent_client_message as acm, agent_run_request as arr, agent_server_message as asm,
    bidi_append_request as bar, bidi_request_id as bri, conversation_action as ca,
    interaction_update as iu, model_details as md, text_delta_update as tdu,
    token_delta_update as tok, tool_call_update as tcu, user_message as um,
    user_message_action as uma,
};
use crate::wire::{
    Encode, Field, Known, MAX_DEPTH, Unknown, decode_fields, put_bytes, put_msg, put_opt_str,
    put_str, put_uint,
};
use crate::{Error, fields};

fn known<'f, 'a>(message: &'static str, field: &'f Field<'a>) -> Known<'f, 'a> {
    Known { message, field }
}

/// Depth guard shared by the nested decoders.
fn deeper(depth: usize) -> Result<usize, Error> {
    if depth >= MAX_DEPTH {
        Err(Error::TooDeep)
    } else {
        Ok(depth + 1)
    }
}

/// `aiserver.v1.BidiRequestId`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BidiRequestId {
    pub request_id: String,
    pub unknown: Unknown,
}

impl BidiRequestId {
    pub fn new(request_id: impl Into<String>) -> BidiRequestId {
        BidiRequestId {
            request_id: request_id.into(),
            unknown: Unknown::default(),
        }
    }

    pub fn decode(buf: &[u8]) -> Result<BidiRequestId, Error> {
        let mut m = BidiRequestId::default();
        decode_fields(buf, &mut m.unknown, |f| {
            if f.number == bri::REQUEST_ID {
                m.request_id = known("BidiRequestId", f).string()?;
                return Ok(true);
            }
            Ok(false)
        })?;
        Ok(m)
    }
}

impl Encode for BidiRequestId {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_str(&mut out, bri::REQUEST_ID, &self.request_id);
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

/// `aiserver.v1.BidiAppendRequest`: one client message for a running request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BidiAppendRequest {
    /// The `AgentClientMessage`, hex-encoded (as sent).
    pub data: String,
    pub request_id: Option<BidiRequestId>,
    pub append_seqno: u64,
    pub unknown: Unknown,
}

impl BidiAppendRequest {
    pub fn decode(buf: &[u8]) -> Result<BidiAppendRequest, Error> {
        let mut m = BidiAppendRequest::default();
        decode_fields(buf, &mut m.unknown, |f| {
            let k = known("BidiAppendRequest", f);
            match f.number {
                bar::DATA => m.data = k.string()?,
                bar::REQUEST_ID => m.request_id = Some(BidiRequestId::decode(k.bytes()?)?),
                bar::APPEND_SEQNO => m.append_seqno = k.uint()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(m)
    }

    /// The request UUID, when present and not empty.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id
            .as_ref()
            .map(|r| r.request_id.as_str())
            .filter(|id| !id.is_empty())
    }

    /// The client message carried in `data`.
    pub fn message(&self) -> Result<AgentClientMessage, Error> {
        AgentClientMessage::decode(&hex_decode(&self.data)?)
    }
}

impl Encode for BidiAppendRequest {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_str(&mut out, bar::DATA, &self.data);
        put_msg(&mut out, bar::REQUEST_ID, &self.request_id);
        put_uint(&mut out, bar::APPEND_SEQNO, self.append_seqno);
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

/// Lower- or upper-case hex → bytes.
pub fn hex_decode(text: &str) -> Result<Vec<u8>, Error> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err(Error::Hex);
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(Error::Hex),
    };
    digits
        .chunks_exact(2)
        .map(|pair| Ok(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

/// Bytes → lower-case hex.
pub fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// `agent.v1.AgentClientMessage`: Glider models `run_request`; any other member of the
/// oneof is kept verbatim and named by [`AgentClientMessage::kind`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentClientMessage {
    pub run_request: Option<AgentRunRequest>,
    /// The oneof member's field number, when it is not `run_request`.
    pub other: Option<u32>,
    pub unknown: Unknown,
}

impl AgentClientMessage {
    pub fn decode(buf: &[u8]) -> Result<AgentClientMessage, Error> {
        let mut m = AgentClientMessage::default();
        decode_fields(buf, &mut m.unknown, |f| {
            if f.number == acm::RUN_REQUEST {
                let bytes = known("AgentClientMessage", f).bytes()?;
                m.run_request = Some(AgentRunRequest::decode(bytes, 1)?);
                return Ok(true);
            }
            if f.number <= acm::PREWARM_REQUEST {
                m.other = Some(f.number);
            }
            Ok(false)
        })?;
        Ok(m)
    }

    /// What this append is, for routing.
    pub fn kind(&self) -> AppendKind {
        let Some(run) = &self.run_request else {
            return AppendKind::ToolLoop {
                member: self.other.map_or("unknown", client_member_name),
            };
        };
        if run
            .subagent_type_name
            .as_deref()
            .is_some_and(|s| !s.is_empty())
        {
            return AppendKind::Child;
        }
        let action = run.action.as_ref();
        let text = action
            .and_then(|a| a.user_message_action.as_ref())
            .and_then(|u| u.user_message.as_ref())
            .map(|m| m.text.clone());
        match text {
            Some(text) => AppendKind::Root { text },
            None => AppendKind::FollowOn {
                action: action.and_then(|a| a.other).unwrap_or(0),
            },
        }
    }
}

impl Encode for AgentClientMessage {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_msg(&mut out, acm::RUN_REQUEST, &self.run_request);
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

fn client_member_name(number: u32) -> &'static str {
    match number {
        acm::EXEC_CLIENT_MESSAGE => "exec_client_message",
        acm::KV_CLIENT_MESSAGE => "kv_client_message",
        acm::CONVERSATION_ACTION => "conversation_action",
        acm::EXEC_CLIENT_CONTROL_MESSAGE => "exec_client_control_message",
        acm::INTERACTION_RESPONSE => "interaction_response",
        acm::CLIENT_HEARTBEAT => "client_heartbeat",
        acm::PREWARM_REQUEST => "prewarm_request",
        _ => "unknown",
    }
}

/// What a BidiAppend carries, as far as routing cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendKind {
    /// A run started by a user message: the only kind Glider may answer locally.
    Root { text: String },
    /// A run started by a subagent (`subagent_type_name` set): the origin's.
    Child,
    /// A run started by another action (summary, resume, ...): `action` is the
    /// `ConversationAction` member's number (0 when there is none).
    FollowOn { action: u32 },
    /// Not a new run: a tool result, blob, heartbeat or approval on a running one.
    ToolLoop { member: &'static str },
}

/// `agent.v1.AgentRunRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentRunRequest {
    pub action: Option<ConversationAction>,
    pub model_details: Option<ModelDetails>,
    pub conversation_id: Option<String>,
    pub subagent_type_name: Option<String>,
    pub unknown: Unknown,
}

impl AgentRunRequest {
    fn decode(buf: &[u8], depth: usize) -> Result<AgentRunRequest, Error> {
        let depth = deeper(depth)?;
        let mut m = AgentRunRequest::default();
        decode_fields(buf, &mut m.unknown, |f| {
            let k = known("AgentRunRequest", f);
            match f.number {
                arr::ACTION => m.action = Some(ConversationAction::decode(k.bytes()?, depth)?),
                arr::MODEL_DETAILS => m.model_details = Some(ModelDetails::decode(k.bytes()?)?),
                arr::CONVERSATION_ID => m.conversation_id = Some(k.string()?),
                arr::SUBAGENT_TYPE_NAME => m.subagent_type_name = Some(k.string()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(m)
    }

    /// The model the client asked for, if it said.
    pub fn model(&self) -> Option<&str> {
        self.model_details
            .as_ref()
            .map(|d| d.model_id.as_str())
            .filter(|m| !m.is_empty())
    }
}

impl Encode for AgentRunRequest {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_msg(&mut out, arr::ACTION, &self.action);
        put_msg(&mut out, arr::MODEL_DETAILS, &self.model_details);
        put_opt_str(&mut out, arr::CONVERSATION_ID, &self.conversation_id);
        put_opt_str(&mut out, arr::SUBAGENT_TYPE_NAME, &self.subagent_type_name);
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

/// `agent.v1.ModelDetails`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelDetails {
    pub model_id: String,
    pub unknown: Unknown,
}

impl ModelDetails {
    fn decode(buf: &[u8]) -> Result<ModelDetails, Error> {
        let mut m = ModelDetails::default();
        decode_fields(buf, &mut m.unknown, |f| {
            if f.number == md::MODEL_ID {
                m.model_id = known("ModelDetails", f).string()?;
                return Ok(true);
            }
            Ok(false)
        })?;
        Ok(m)
    }
}

impl Encode for ModelDetails {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_str(&mut out, md::MODEL_ID, &self.model_id);
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

/// `agent.v1.ConversationAction`: `user_message_action` modelled, the rest kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConversationAction {
    pub user_message_action: Option<UserMessageAction>,
    /// The member's number when it is another action (resume 2, summarize 4, ...).
    pub other: Option<u32>,
    pub unknown: Unknown,
}

impl ConversationAction {
    fn decode(buf: &[u8], depth: usize) -> Result<ConversationAction, Error> {
        let depth = deeper(depth)?;
        let mut m = ConversationAction::default();
        decode_fields(buf, &mut m.unknown, |f| {
            if f.number == ca::USER_MESSAGE_ACTION {
                let bytes = known("ConversationAction", f).bytes()?;
                m.user_message_action = Some(UserMessageAction::decode(bytes, depth)?);
                return Ok(true);
            }
            m.other = Some(f.number);
            Ok(false)
        })?;
        Ok(m)
    }

    /// A user-message action with `text`.
    pub fn user_text(text: impl Into<String>, message_id: impl Into<String>) -> Self {
        ConversationAction {
            user_message_action: Some(UserMessageAction {
                user_message: Some(UserMessage {
                    text: text.into(),
                    message_id: message_id.into(),
                    mode: 1,
                    unknown: Unknown::default(),
                }),
                unknown: Unknown::default(),
            }),
            other: None,
            unknown: Unknown::default(),
        }
    }
}

impl Encode for ConversationAction {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_msg(&mut out, ca::USER_MESSAGE_ACTION, &self.user_message_action);
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

/// `agent.v1.UserMessageAction` (its request context is kept verbatim).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserMessageAction {
    pub user_message: Option<UserMessage>,
    pub unknown: Unknown,
}

impl UserMessageAction {
    fn decode(buf: &[u8], depth: usize) -> Result<UserMessageAction, Error> {
        deeper(depth)?;
        let mut m = UserMessageAction::default();
        decode_fields(buf, &mut m.unknown, |f| {
            if f.number == uma::USER_MESSAGE {
                let bytes = known("UserMessageAction", f).bytes()?;
                m.user_message = Some(UserMessage::decode(bytes)?);
                return Ok(true);
            }
            Ok(false)
        })?;
        Ok(m)
    }
}

impl Encode for UserMessageAction {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_msg(&mut out, uma::USER_MESSAGE, &self.user_message);
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

/// `agent.v1.UserMessage`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserMessage {
    pub text: String,
    pub message_id: String,
    pub mode: u64,
    pub unknown: Unknown,
}

impl UserMessage {
    fn decode(buf: &[u8]) -> Result<UserMessage, Error> {
        let mut m = UserMessage::default();
        decode_fields(buf, &mut m.unknown, |f| {
            let k = known("UserMessage", f);
            match f.number {
                um::TEXT => m.text = k.string()?,
                um::MESSAGE_ID => m.message_id = k.string()?,
                um::MODE => m.mode = k.uint()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(m)
    }
}

impl Encode for UserMessage {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_str(&mut out, um::TEXT, &self.text);
        put_str(&mut out, um::MESSAGE_ID, &self.message_id);
        put_uint(&mut out, um::MODE, self.mode);
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

/// `agent.v1.AgentServerMessage`: `interaction_update` modelled, the rest kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentServerMessage {
    pub interaction_update: Option<InteractionUpdate>,
    /// The oneof member's number when it is not an interaction update.
    pub other: Option<u32>,
    pub unknown: Unknown,
}

impl AgentServerMessage {
    pub fn decode(buf: &[u8]) -> Result<AgentServerMessage, Error> {
        let mut m = AgentServerMessage::default();
        decode_fields(buf, &mut m.unknown, |f| {
            if f.number == asm::INTERACTION_UPDATE {
                let bytes = known("AgentServerMessage", f).bytes()?;
                m.interaction_update = Some(InteractionUpdate::decode(bytes)?);
                return Ok(true);
            }
            m.other = Some(f.number);
            Ok(false)
        })?;
        Ok(m)
    }

    /// A server message carrying one interaction update.
    pub fn update(update: Update) -> AgentServerMessage {
        AgentServerMessage {
            interaction_update: Some(InteractionUpdate::new(update)),
            other: None,
            unknown: Unknown::default(),
        }
    }
}

impl Encode for AgentServerMessage {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_msg(&mut out, asm::INTERACTION_UPDATE, &self.interaction_update);
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

/// One member of the `InteractionUpdate` oneof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    TextDelta(String),
    ThinkingDelta(String),
    /// New output tokens.
    TokenDelta(u64),
    Heartbeat,
    TurnEnded,
    ToolCallStarted(ToolCallUpdate),
    ToolCallCompleted(ToolCallUpdate),
    PartialToolCall(ToolCallUpdate),
    /// A member Glider does not model (kept in `InteractionUpdate::unknown`).
    Other(u32),
    /// No member set.
    None,
}

/// `agent.v1.InteractionUpdate`. A member whose typed value would not re-encode to the
/// same bytes (extra inner fields), or one Glider does not model, is kept verbatim in
/// `unknown`; `update` still names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InteractionUpdate {
    pub update: Update,
    pub unknown: Unknown,
    /// The member's bytes are in `unknown` (so `update` is not written again).
    verbatim: bool,
}

impl InteractionUpdate {
    /// An update built in code.
    pub fn new(update: Update) -> InteractionUpdate {
        InteractionUpdate {
            update,
            unknown: Unknown::default(),
            verbatim: false,
        }
    }

    pub fn decode(buf: &[u8]) -> Result<InteractionUpdate, Error> {
        let mut update = Update::None;
        let mut unknown = Unknown::default();
        let mut verbatim = false;
        decode_fields(buf, &mut unknown, |f| {
            let k = known("InteractionUpdate", f);
            update = match f.number {
                iu::TEXT_DELTA => Update::TextDelta(sub_text(k.bytes()?, "TextDeltaUpdate")?),
                iu::THINKING_DELTA => {
                    Update::ThinkingDelta(sub_text(k.bytes()?, "ThinkingDeltaUpdate")?)
                }
                iu::TOKEN_DELTA => Update::TokenDelta(sub_tokens(k.bytes()?)?),
                iu::HEARTBEAT => {
                    k.bytes()?;
                    Update::Heartbeat
                }
                iu::TURN_ENDED => {
                    k.bytes()?;
                    Update::TurnEnded
                }
                iu::TOOL_CALL_STARTED => {
                    Update::ToolCallStarted(ToolCallUpdate::decode(k.bytes()?)?)
                }
                iu::TOOL_CALL_COMPLETED => {
                    Update::ToolCallCompleted(ToolCallUpdate::decode(k.bytes()?)?)
                }
                iu::PARTIAL_TOOL_CALL => {
                    Update::PartialToolCall(ToolCallUpdate::decode(k.bytes()?)?)
                }
                other => Update::Other(other),
            };
            let mut again = Vec::new();
            encode_update(&update, &mut again);
            if again != f.raw {
                verbatim = true;
                return Ok(false);
            }
            Ok(true)
        })?;
        Ok(InteractionUpdate {
            update,
            unknown,
            verbatim,
        })
    }
}

fn encode_update(update: &Update, out: &mut Vec<u8>) {
    let text_member = |text: &str| {
        let mut inner = Vec::new();
        put_str(&mut inner, tdu::TEXT, text);
        inner
    };
    match update {
        Update::TextDelta(text) => put_bytes(out, iu::TEXT_DELTA, &text_member(text)),
        Update::ThinkingDelta(text) => put_bytes(out, iu::THINKING_DELTA, &text_member(text)),
        Update::TokenDelta(tokens) => {
            let mut inner = Vec::new();
            put_uint(&mut inner, tok::TOKENS, *tokens);
            put_bytes(out, iu::TOKEN_DELTA, &inner);
        }
        Update::Heartbeat => put_bytes(out, iu::HEARTBEAT, &[]),
        Update::TurnEnded => put_bytes(out, iu::TURN_ENDED, &[]),
        Update::ToolCallStarted(t) => put_bytes(out, iu::TOOL_CALL_STARTED, &t.raw),
        Update::ToolCallCompleted(t) => put_bytes(out, iu::TOOL_CALL_COMPLETED, &t.raw),
        Update::PartialToolCall(t) => put_bytes(out, iu::PARTIAL_TOOL_CALL, &t.raw),
        Update::Other(_) | Update::None => {}
    }
}

impl Encode for InteractionUpdate {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.verbatim {
            encode_update(&self.update, &mut out);
        }
        out.extend_from_slice(&self.unknown.0);
        out
    }
}

fn sub_text(buf: &[u8], message: &'static str) -> Result<String, Error> {
    let mut text = String::new();
    let mut ignored = Unknown::default();
    decode_fields(buf, &mut ignored, |f| {
        if f.number == tdu::TEXT {
            text = known(message, f).string()?;
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok(text)
}

fn sub_tokens(buf: &[u8]) -> Result<u64, Error> {
    let mut tokens = 0;
    let mut ignored = Unknown::default();
    decode_fields(buf, &mut ignored, |f| {
        if f.number == tok::TOKENS
            && let Ok(value) = known("TokenDeltaUpdate", f).uint()
        {
            tokens = value;
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok(tokens)
}

/// A tool-call update (the tool codec): the call id, the tool's kind from
/// [`fields::TOOL_CALL_KINDS`], and the partial arguments or model call id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCallUpdate {
    pub call_id: String,
    /// The `ToolCall` oneof member's number, if a tool call was present.
    pub tool_kind: Option<u32>,
    /// Field 3: the model's call id (started/completed) or an argument fragment
    /// (partial), as text.
    pub field3: String,
    /// Every byte as it came (the update is written back from these, untouched).
    pub raw: Vec<u8>,
}

impl ToolCallUpdate {
    fn decode(buf: &[u8]) -> Result<ToolCallUpdate, Error> {
        let mut m = ToolCallUpdate {
            raw: buf.to_vec(),
            ..ToolCallUpdate::default()
        };
        let mut ignored = Unknown::default();
        decode_fields(buf, &mut ignored, |f| {
            let k = known("ToolCallUpdate", f);
            match f.number {
                tcu::CALL_ID => m.call_id = k.string()?,
                tcu::TOOL_CALL => {
                    let mut reader = crate::wire::Reader::new(k.bytes()?);
                    if let Some(member) = reader.next_field()? {
                        m.tool_kind = Some(member.number);
                    }
                }
                tcu::MODEL_CALL_ID => m.field3 = k.string()?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(m)
    }

    /// The tool's name from the codec's small map (`unknown_tool(N)` otherwise).
    pub fn tool_name(&self) -> String {
        match self.tool_kind {
            None => "none".into(),
            Some(n) => fields::TOOL_CALL_KINDS
                .iter()
                .find(|(k, _)| *k == n)
                .map_or_else(|| format!("unknown_tool({n})"), |(_, name)| (*name).into()),
        }
    }
}

/// One RunSSE data frame carrying `update`.
pub fn server_frame(update: Update) -> Vec<u8> {
    crate::frame::message_frame(&AgentServerMessage::update(update).encode())
}

/// The RunSSE request frame's message for `request_id`.
pub fn run_sse_request(request_id: &str) -> Vec<u8> {
    BidiRequestId::new(request_id).encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_request_with(text: &str) -> AgentRunRequest {
        AgentRunRequest {
            action: Some(ConversationAction::user_text(text, "m-1")),
            model_details: Some(ModelDetails {
                model_id: "composer-1".into(),
                unknown: Unknown::default(),
            }),
            conversation_id: Some("conv-1".into()),
            subagent_type_name: None,
            unknown: Unknown::default(),
        }
    }

    #[test]
    fn a_bidi_append_round_trips_with_unknown_fields_untouched() {
        let mut run = run_request_with("fix the bug");
        // Unknown fields at three depths: a conversation state (1), a custom system
        // prompt (8) and a request context inside the user-message action (2).
        let mut extra = Vec::new();
        put_bytes(&mut extra, arr::CONVERSATION_STATE, b"\x0a\x03abc");
        put_str(&mut extra, 8, "be terse");
        extra.extend_from_slice(&[0x9d, 0x01, 1, 2, 3, 4]); // field 19, fixed32
        run.unknown = Unknown(extra);
        if let Some(action) = run.action.as_mut()
            && let Some(uma) = action.user_message_action.as_mut()
        {
            let mut ctx = Vec::new();
            put_bytes(&mut ctx, uma::REQUEST_CONTEXT, b"\x22\x00");
            uma.unknown = Unknown(ctx);
        }
        let message = AgentClientMessage {
            run_request: Some(run),
            other: None,
            unknown: Unknown::default(),
        };
        let append = BidiAppendRequest {
            data: hex_encode(&message.encode()),
            request_id: Some(BidiRequestId::new("6f1c-uuid")),
            append_seqno: 0,
            unknown: Unknown(vec![0x20, 0x07]), // field 4 = 7
        };
        let bytes = append.encode();
        let decoded = BidiAppendRequest::decode(&bytes).expect("decode");
        assert_eq!(decoded, append);
        assert_eq!(decoded.encode(), bytes, "byte for byte");
        let inner = decoded.message().expect("client message");
        assert_eq!(inner, message);
        assert_eq!(hex_encode(&inner.encode()), append.data);
        assert_eq!(
            inner.kind(),
            AppendKind::Root {
                text: "fix the bug".into()
            }
        );
        assert_eq!(decoded.request_id(), Some("6f1c-uuid"));
        let run = inner.run_request.expect("run");
        assert_eq!(run.model(), Some("composer-1"));
        assert_eq!(run.conversation_id.as_deref(), Some("conv-1"));
    }

    #[test]
    fn append_kinds() {
        let mut child = run_request_with("look around");
        child.subagent_type_name = Some("explore".into());
        let child = AgentClientMessage {
            run_request: Some(child),
            ..Default::default()
        };
        assert_eq!(child.kind(), AppendKind::Child);
        let mut summary = run_request_with("");
        summary.action = Some(ConversationAction {
            unknown: Unknown(vec![0x22, 0x00]), // summarize_action = 4, empty
            ..Default::default()
        });
        let summary = AgentClientMessage::decode(
            &AgentClientMessage {
                run_request: Some(summary),
                ..Default::default()
            }
            .encode(),
        )
        .expect("decode");
        assert_eq!(summary.kind(), AppendKind::FollowOn { action: 4 });
        let exec = AgentClientMessage::decode(&[0x12, 0x00]).expect("decode");
        assert_eq!(
            exec.kind(),
            AppendKind::ToolLoop {
                member: "exec_client_message"
            }
        );
        assert_eq!(exec.encode(), vec![0x12, 0x00]);
    }

    #[test]
    fn server_updates_round_trip() {
        for update in [
            Update::TextDelta("héllo".into()),
            Update::ThinkingDelta("hmm".into()),
            Update::TokenDelta(3),
            Update::Heartbeat,
            Update::TurnEnded,
        ] {
            let bytes = AgentServerMessage::update(update.clone()).encode();
            let decoded = AgentServerMessage::decode(&bytes).expect("decode");
            assert_eq!(
                decoded.interaction_update.as_ref().map(|u| &u.update),
                Some(&update)
            );
            assert_eq!(decoded.encode(), bytes);
        }
    }

    #[test]
    fn lossy_and_unknown_update_members_survive() {
        // A text delta whose inner message carries an extra field 2.
        let mut inner = Vec::new();
        put_str(&mut inner, 1, "hi");
        put_uint(&mut inner, 2, 9);
        let mut update = Vec::new();
        put_bytes(&mut update, iu::TEXT_DELTA, &inner);
        let decoded = InteractionUpdate::decode(&update).expect("decode");
        assert_eq!(decoded.update, Update::TextDelta("hi".into()));
        assert_eq!(decoded.encode(), update);
        // A member Glider does not model (field 20), and an exec server message.
        let mut other = Vec::new();
        put_bytes(&mut other, 20, b"\x08\x01");
        let decoded = InteractionUpdate::decode(&other).expect("decode");
        assert_eq!(decoded.update, Update::Other(20));
        assert_eq!(decoded.encode(), other);
        let mut server = Vec::new();
        put_bytes(&mut server, asm::EXEC_SERVER_MESSAGE, b"\x08\x05");
        let decoded = AgentServerMessage::decode(&server).expect("decode");
        assert_eq!(decoded.other, Some(asm::EXEC_SERVER_MESSAGE));
        assert_eq!(decoded.encode(), server);
    }

    #[test]
    fn tool_call_frames_are_named() {
        let mut tool_call = Vec::new();
        put_bytes(&mut tool_call, 8, b"\x0a\x05a.txt"); // read_tool_call { path }
        let mut started = Vec::new();
        put_str(&mut started, tcu::CALL_ID, "call-1");
        put_bytes(&mut started, tcu::TOOL_CALL, &tool_call);
        put_str(&mut started, tcu::MODEL_CALL_ID, "toolu_1");
        let mut update = Vec::new();
        put_bytes(&mut update, iu::TOOL_CALL_STARTED, &started);
        let decoded = InteractionUpdate::decode(&update).expect("decode");
        let Update::ToolCallStarted(call) = &decoded.update else {
            panic!("{decoded:?}");
        };
        assert_eq!(call.call_id, "call-1");
        assert_eq!(call.tool_name(), "read");
        assert_eq!(call.field3, "toolu_1");
        assert_eq!(decoded.encode(), update);
    }

    #[test]
    fn malformed_messages_are_typed_errors() {
        assert_eq!(
            BidiAppendRequest {
                data: "zz".into(),
                ..Default::default()
            }
            .message(),
            Err(Error::Hex)
        );
        // `data` sent as a varint.
        assert!(matches!(
            BidiAppendRequest::decode(&[0x08, 0x01]),
            Err(Error::FieldType { field: 1, .. })
        ));
        // Text that is not UTF-8.
        let mut bad = Vec::new();
        put_bytes(&mut bad, 1, &[0xff, 0xfe]);
        assert!(matches!(
            BidiRequestId::decode(&bad),
            Err(Error::Utf8 { .. })
        ));
    }
}
