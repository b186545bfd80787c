//! Every protobuf field number Glider relies on, in one place. Cursor publishes no
//! schema; each number says where it comes from. Sources:
//! - [A] the `agent.v1` / `aiserver.v1` field lists people extracted from Cursor's own
//!   bundled JavaScript (`typeName` tables in `workbench.desktop.main.js` and the CLI's
//!   `index.js`), as published in public reverse-engineering notes (2026);
//! - [B] open-source Cursor clients that talk to the live service with hand-written
//!   encoders (`BidiAppendRequest`, `RunSSE`, `InteractionUpdate` parsers);
//! - [assumed]: a guess consistent with [A]/[B] but not confirmed by either; Glider's
//!   behaviour for such a field degrades to "send it to the origin".
//!
//! Paths: `POST /aiserver.v1.BidiService/BidiAppend` (unary, `application/proto`) and
//! `POST /agent.v1.AgentService/RunSSE` (server stream, `application/connect+proto`) [A][B].

/// The unary append RPC's path.
pub const BIDI_APPEND_PATH: &str = "/aiserver.v1.BidiService/BidiAppend";
/// The server-streaming reply RPC's path.
pub const RUN_SSE_PATH: &str = "/agent.v1.AgentService/RunSSE";

/// `aiserver.v1.BidiRequestId` — RunSSE's only request message [A][B].
pub mod bidi_request_id {
    /// `string request_id = 1`: the request UUID shared with the appends [A][B].
    pub const REQUEST_ID: u32 = 1;
}

/// `aiserver.v1.BidiAppendRequest` [B].
pub mod bidi_append_request {
    /// `string data = 1`: an `agent.v1.AgentClientMessage`, hex-encoded [B].
    pub const DATA: u32 = 1;
    /// `BidiRequestId request_id = 2` [B].
    pub const REQUEST_ID: u32 = 2;
    /// `int64 append_seqno = 3`: 0 for the first append of a request [B].
    pub const APPEND_SEQNO: u32 = 3;
}

/// `agent.v1.AgentClientMessage`, a oneof [A][B].
pub mod agent_client_message {
    /// `AgentRunRequest run_request = 1`: starts a run (a turn) [A][B].
    pub const RUN_REQUEST: u32 = 1;
    /// `ExecClientMessage exec_client_message = 2`: a tool's result (tool loop) [A][B].
    pub const EXEC_CLIENT_MESSAGE: u32 = 2;
    /// `KvClientMessage kv_client_message = 3`: blob exchange [A][B].
    pub const KV_CLIENT_MESSAGE: u32 = 3;
    /// `ConversationAction conversation_action = 4` (mid-run action) [A][B].
    pub const CONVERSATION_ACTION: u32 = 4;
    /// `ExecClientControlMessage exec_client_control_message = 5` [A][B].
    pub const EXEC_CLIENT_CONTROL_MESSAGE: u32 = 5;
    /// `InteractionResponse interaction_response = 6` (approvals) [A][B].
    pub const INTERACTION_RESPONSE: u32 = 6;
    /// `ClientHeartbeat client_heartbeat = 7` [A].
    pub const CLIENT_HEARTBEAT: u32 = 7;
    /// `PrewarmRequest prewarm_request = 8` [A].
    pub const PREWARM_REQUEST: u32 = 8;
}

/// `agent.v1.AgentRunRequest` [A][B].
pub mod agent_run_request {
    /// `ConversationStateStructure conversation_state = 1` (kept verbatim) [A][B].
    pub const CONVERSATION_STATE: u32 = 1;
    /// `ConversationAction action = 2` [A][B].
    pub const ACTION: u32 = 2;
    /// `ModelDetails model_details = 3` [A][B].
    pub const MODEL_DETAILS: u32 = 3;
    /// `string conversation_id = 5` [A][B].
    pub const CONVERSATION_ID: u32 = 5;
    /// `string subagent_type_name = 11`: set on a child (subagent) run. One source [A]
    /// lists it as 11, another lists it without a number: [assumed] 11.
    pub const SUBAGENT_TYPE_NAME: u32 = 11;
}

/// `agent.v1.ModelDetails` [A][B].
pub mod model_details {
    /// `string model_id = 1` (`composer-1`, `claude-4-sonnet`, ...) [A][B].
    pub const MODEL_ID: u32 = 1;
}

/// `agent.v1.ConversationAction`, a oneof [A].
pub mod conversation_action {
    /// `UserMessageAction user_message_action = 1`: a new user turn [A][B].
    pub const USER_MESSAGE_ACTION: u32 = 1;
    /// `ResumeAction resume_action = 2` [A].
    pub const RESUME_ACTION: u32 = 2;
    /// `CancelAction cancel_action = 3` [A].
    pub const CANCEL_ACTION: u32 = 3;
    /// `SummarizeAction summarize_action = 4`: a follow-on (reply summary) [A].
    pub const SUMMARIZE_ACTION: u32 = 4;
}

/// `agent.v1.UserMessageAction` [A][B].
pub mod user_message_action {
    /// `UserMessage user_message = 1` [A][B].
    pub const USER_MESSAGE: u32 = 1;
    /// `RequestContext request_context = 2` (kept verbatim) [B].
    pub const REQUEST_CONTEXT: u32 = 2;
}

/// `agent.v1.UserMessage` [A][B].
pub mod user_message {
    /// `string text = 1`: what the user typed [A][B].
    pub const TEXT: u32 = 1;
    /// `string message_id = 2` (a UUID) [A][B].
    pub const MESSAGE_ID: u32 = 2;
    /// `AgentMode mode = 4` (1 agent, 2 ask, 3 plan, ...) [B].
    pub const MODE: u32 = 4;
}

/// `agent.v1.AgentServerMessage`, a oneof [A][B].
pub mod agent_server_message {
    /// `InteractionUpdate interaction_update = 1` [A][B].
    pub const INTERACTION_UPDATE: u32 = 1;
    /// `ExecServerMessage exec_server_message = 2`: asks the client to run a tool [A][B].
    pub const EXEC_SERVER_MESSAGE: u32 = 2;
    /// `ConversationCheckpointUpdate conversation_checkpoint_update = 3` [A][B].
    pub const CONVERSATION_CHECKPOINT_UPDATE: u32 = 3;
}

/// `agent.v1.InteractionUpdate`, a oneof [A][B].
pub mod interaction_update {
    /// `TextDeltaUpdate text_delta = 1` [A][B].
    pub const TEXT_DELTA: u32 = 1;
    /// `ToolCallStartedUpdate tool_call_started = 2` [B].
    pub const TOOL_CALL_STARTED: u32 = 2;
    /// `ToolCallCompletedUpdate tool_call_completed = 3` [B].
    pub const TOOL_CALL_COMPLETED: u32 = 3;
    /// `ThinkingDeltaUpdate thinking_delta = 4` [B].
    pub const THINKING_DELTA: u32 = 4;
    /// `PartialToolCallUpdate partial_tool_call = 7` [B].
    pub const PARTIAL_TOOL_CALL: u32 = 7;
    /// `TokenDeltaUpdate token_delta = 8` [B].
    pub const TOKEN_DELTA: u32 = 8;
    /// `HeartbeatUpdate heartbeat = 13` (empty message) [B].
    pub const HEARTBEAT: u32 = 13;
    /// `TurnEndedUpdate turn_ended = 14`: the end of the turn [B].
    pub const TURN_ENDED: u32 = 14;
}

/// `agent.v1.TextDeltaUpdate` and `agent.v1.ThinkingDeltaUpdate` [B].
pub mod text_delta_update {
    /// `string text = 1` [B] (for thinking: [assumed] the same shape as text).
    pub const TEXT: u32 = 1;
}

/// `agent.v1.TokenDeltaUpdate`. [B] reads field 1 without naming its type; Glider
/// writes the count of new output tokens as a varint: [assumed] `int32 tokens = 1`.
pub mod token_delta_update {
    pub const TOKENS: u32 = 1;
}

/// `agent.v1.ToolCallStartedUpdate` / `ToolCallCompletedUpdate` /
/// `PartialToolCallUpdate` (the tool codec, `mitm.agent_rpc_tool_codec`) [B].
pub mod tool_call_update {
    /// `string call_id = 1` [B].
    pub const CALL_ID: u32 = 1;
    /// `ToolCall tool_call = 2` [B].
    pub const TOOL_CALL: u32 = 2;
    /// Started/completed: `string model_call_id = 3` [B].
    pub const MODEL_CALL_ID: u32 = 3;
    /// Partial: `string args_text_delta = 3` [B].
    pub const ARGS_TEXT_DELTA: u32 = 3;
}

/// `agent.v1.ToolCall`, a oneof of tool kinds: the small map the tool codec names [B].
/// Every other number decodes as `unknown_tool(N)` and is never answered locally.
pub const TOOL_CALL_KINDS: [(u32, &str); 9] = [
    (1, "shell"),
    (4, "glob"),
    (5, "grep"),
    (8, "read"),
    (12, "edit"),
    (13, "ls"),
    (15, "mcp"),
    (18, "web_search"),
    (19, "task"),
];
