//! The words the engine and the services beside it share (DESIGN.md: a small
//! vocabulary crate under the engine). The context store (`glider-context`) and the
//! delegates (`glider-delegate`) build on this crate, never on the engine: the engine
//! tells them what happens through the traits defined here ([`ContextSink`]), and they
//! name doors, rules, sessions and records in the same words the engine does. Nothing
//! here runs a request; it holds values, one trait and the pure rules both sides must
//! apply alike (the session key, a compaction prompt's shape, the text-size estimate).

pub mod budget;
pub mod coverage;
pub mod door;
pub mod estimate;
pub mod fan_out;
pub mod record;
pub mod rule;
pub mod session;
pub mod sink;
pub mod user_words;

pub use budget::{BackendTokens, SessionBudget, Spend};
pub use coverage::{Coverage, MustName};
pub use door::Door;
pub use fan_out::{
    Agreement, AnswerSummary, ComparedAnswer, FanOutRecord, ShadowOutcome, ShadowSample,
};
pub use record::{
    BUDGET_BACKEND, BudgetStop, ContextLeftOut, MAX_TOOL_ARGUMENT_CHARS, RequestRecord, StopLimit,
    ToolRun,
};
pub use rule::RuleName;
pub use session::{UNSESSIONED, is_derived, session_id};
pub use sink::{
    CompactionPrompt, CompactionSource, ContextSink, DecidedTurn, DelegatedRun, REPLY_TEXT_KEPT,
    RecordedTurn, ReplyToolCall, compaction_prompt, newest_turns, tool_calls_of,
};
pub use user_words::user_words;

/// Flags that hand a message to another CLI instead of routing it.
pub const DELEGATION_FLAGS: &[&str] = &["/claude", "/cursor-agent", "/agy"];
