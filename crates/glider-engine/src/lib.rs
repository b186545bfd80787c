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
pub mod user_words;

pub use context::{
    CompactionPrompt, CompactionSource, ContextSink, DecidedTurn, DelegatedRun, RecordedTurn,
    ReplyToolCall, compaction_prompt, newest_turns, tool_calls_of,
};
pub use contextkit::{BUDGET_BACKEND, BudgetStop, ContextKit, SessionBudget, StopLimit};
pub use events::{
    BackendState, Bus, ContextLeftOut, PipelineEvent, RequestRecord, Tracker, unix_ms,
};
pub use pipeline::{Agreement, AnswerSummary, ComparedAnswer, ShadowOutcome, ShadowSample};
pub use pipeline::{
    CompleteError, Completion, CompletionBody, CompletionRequest, Door, Engine, FanOutRecord,
    ModelInfo, Prepared, decode_events, stream_error_event,
};
pub use router::{RouteDecision, RuleName};
pub use user_words::user_words;
