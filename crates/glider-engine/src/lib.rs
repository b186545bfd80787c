//! The shared completion pipeline (spec package `orchestrator`'s `PipelineCompleter`,
//! with `router` and the tokenizer half of `transform`). Every door — gateway, MITM —
//! hands a request to [`Engine::complete`]; nothing in here looks at which CLI sent it.

pub mod context;
pub mod contextkit;
pub mod events;
pub mod fit;
pub mod hotswap;
pub mod local_reply;
pub mod pipeline;
mod plugins;
pub mod router;
pub mod speed;
pub mod tokenizer;
pub mod transform;

pub use contextkit::ContextKit;
pub use events::{BackendState, Bus, PipelineEvent, Tracker, unix_ms};
pub use pipeline::{
    CompleteError, Completion, CompletionBody, CompletionRequest, Engine, ModelInfo, Prepared,
    decode_events, stream_error_event,
};
pub use router::RouteDecision;

// The shared vocabulary (`glider-vocab`), kept at the paths the doors, the dashboard
// and the binary name it by.
pub use glider_vocab::{
    Agreement, AnswerSummary, BUDGET_BACKEND, BudgetStop, CompactionPrompt, CompactionSource,
    ComparedAnswer, ContextLeftOut, ContextSink, Coverage, DecidedTurn, DelegatedRun, Door,
    FanOutRecord, RecordedTurn, ReplyToolCall, RequestRecord, RuleName, SessionBudget,
    ShadowOutcome, ShadowSample, StopLimit, compaction_prompt, newest_turns, tool_calls_of,
    user_words,
};
