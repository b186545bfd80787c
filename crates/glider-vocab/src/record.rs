//! The request record: one request as the dashboard, the history, the metrics and the
//! context store see it — never its prompt text — with the parts other pipeline steps
//! fill in: the tool calls Glider ran itself, a budget stop, what bounded context left
//! out, and what a fan-out or a shadow copy did. The engine opens and finishes a record
//! for every request (its `Tracker`); everything else only reads them.

use glider_ngl::{Dialect, Usage};
use serde::Serialize;

/// One request as the dashboard and the history see it. Never holds prompt text.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    pub id: u64,
    /// Unix milliseconds at arrival.
    pub started_at_ms: u64,
    /// Which door took it (`gateway`, `mitm`).
    pub door: String,
    /// The client's `user-agent`, shown to the operator (never used to decide).
    pub client: Option<String>,
    pub front: Dialect,
    pub stream: bool,
    pub model_requested: String,
    pub model_used: Option<String>,
    pub backend: Option<String>,
    /// Whether a local backend answered.
    pub local: Option<bool>,
    pub rule: Option<String>,
    pub reason: Option<String>,
    /// The request's kind (docs/routing.md, "The default policy"): `glider route
    /// report` sums by it. One of a fixed set of names, never allocated per request.
    pub kind: Option<&'static str>,
    /// The classifier's score as compared with the thresholds, when it ran: what a
    /// threshold change would move (`glider route report`).
    pub score: Option<f64>,
    pub estimated_tokens: u64,
    pub usage: Usage,
    /// Milliseconds to the first byte of the reply.
    pub ttft_ms: Option<u64>,
    pub total_ms: Option<u64>,
    /// HTTP status the client got (499: the client went away first).
    pub status: Option<u16>,
    pub error: Option<String>,
    /// Backends that failed before the one that answered.
    pub fallbacks: Vec<String>,
    /// What was fitted to each local candidate's model (`backend: change`), e.g.
    /// `local: tools 25 -> 8 (...)`, `local: max_tokens 32000 -> 4096`.
    pub fitted: Vec<String>,
    /// Glider ended the agent loop with its own reply (turn budget, loop guard).
    pub budget_stop: Option<BudgetStop>,
    /// The session key the router found (the sticky rule's: the CLI's session id, or a
    /// hash of the conversation's start), so the dashboard can sum per session.
    pub session: Option<String>,
    /// What bounded context left out of each local candidate's request (turns and
    /// estimated tokens), and whether the session's continuity record stood in.
    pub context_left_out: Vec<ContextLeftOut>,
    /// The tool calls Glider ran itself for this request (`tools.loop`), in order.
    pub tool_calls: Vec<ToolRun>,
    /// What plugins did not do for this request (skipped, timed out, refused), and
    /// which rewrote it.
    pub plugins: Vec<String>,
    /// What the fan-out did (hedge, first, all, shadow), when it ran: which backend won,
    /// whether the hedge fired, which attempts were cancelled, every answer under `all`.
    pub fan_out: Option<crate::fan_out::FanOutRecord>,
}

impl RequestRecord {
    /// The record of a request that just arrived: nothing decided yet.
    pub fn arriving(
        id: u64,
        started_at_ms: u64,
        door: String,
        client: Option<String>,
        front: Dialect,
    ) -> RequestRecord {
        RequestRecord {
            id,
            started_at_ms,
            door,
            client,
            front,
            stream: false,
            model_requested: String::new(),
            model_used: None,
            backend: None,
            local: None,
            rule: None,
            reason: None,
            kind: None,
            score: None,
            estimated_tokens: 0,
            usage: Usage::default(),
            ttft_ms: None,
            total_ms: None,
            status: None,
            error: None,
            fallbacks: Vec::new(),
            fitted: Vec::new(),
            session: None,
            context_left_out: Vec::new(),
            budget_stop: None,
            tool_calls: Vec::new(),
            plugins: Vec::new(),
            fan_out: None,
        }
    }
}

/// One local candidate's bounded context, for the route record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextLeftOut {
    pub backend: String,
    pub turns: usize,
    /// Estimated tokens of the turns left out.
    pub tokens: u64,
    /// Estimated tokens of the continuity record given instead (0: none given).
    pub record_tokens: u64,
}
/// One tool call Glider ran itself in the tool loop (`tools.loop`), for the request
/// record, the dashboard and the context log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolRun {
    /// The loop's model turn that asked for it (1 for the first reply).
    pub turn: u32,
    pub id: String,
    pub tool: String,
    /// The arguments as JSON text, cut at [`MAX_TOOL_ARGUMENT_CHARS`].
    pub arguments: String,
    /// Whether the tool succeeded (an error goes back to the model as the result).
    pub ok: bool,
    pub error: Option<String>,
    /// Characters of the result the model was given.
    pub result_chars: usize,
    pub duration_ms: u64,
    /// What a `tools.loop.max_*` bound cut of this call or its reply, as the model was
    /// told: arguments too large (not run), a result cut, the reply's calls past the cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
}

/// Longest argument text a [`ToolRun`] keeps.
pub const MAX_TOOL_ARGUMENT_CHARS: usize = 2048;

/// What the reply of a stopped loop says answered it (`x-glider-route`, the request
/// record, the context log's `reply` event).
pub const BUDGET_BACKEND: &str = "glider-budget";

/// Which limit ended a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopLimit {
    /// The episode took `context.turn_budget.hard` model turns.
    TurnBudget,
    /// The same tool call came `context.loop_guard.repeats` times.
    LoopGuard,
}

impl StopLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            StopLimit::TurnBudget => "turn_budget",
            StopLimit::LoopGuard => "loop_guard",
        }
    }
}

/// A loop Glider ended with its own final reply instead of asking a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetStop {
    pub limit: StopLimit,
    /// The episode's turns, this one included.
    pub turns: u32,
    /// The repeated tool (loop guard only).
    pub tool: Option<String>,
    /// How many times it was called with the same arguments (loop guard only).
    pub repeats: Option<u32>,
    /// The reply's text: what happened and the key that raises the limit.
    pub message: String,
}
