//! The context hook: what the engine tells a context store (`glider-context`) about
//! each request, from every door, at the two moments every request passes — once it is
//! decided (its session, the request as decoded, the route) and once it is recorded
//! (the reply's tool calls, text, usage, stop reason, status) — the delegate runs the
//! store hears of, and the one thing the pipeline reads back: a session's continuity
//! record, for a local model's bounded context. Here too are the readings of a request
//! both sides make alike: a CLI's compaction prompt, the turns a request adds. The
//! engine knows nothing of how a store keeps them; with no sink attached nothing is
//! built or copied.

use std::sync::Arc;

use glider_dialects::scan::Needle;
use glider_ngl::{Dialect, Part, Request, Role, StopReason, Turn};
use serde_json::Value;

use crate::MustName;
use crate::door::Door;
use crate::record::RequestRecord;
use crate::rule::RuleName;

/// Receives every request's two moments. Both calls run on the request path: an
/// implementation must only hand the facts off (e.g. to a bounded queue), never wait.
pub trait ContextSink: Send + Sync {
    /// The request was decoded and routed (it may still go to the CLI's origin).
    /// Returns the sink's name for it (its key in the log), which the request's end
    /// hands back ([`RecordedTurn::key`]): named once, not again at its end.
    fn decided(&self, turn: &DecidedTurn<'_>) -> String;
    /// The request ended: its reply was delivered, it failed, or its client went away.
    fn recorded(&self, turn: RecordedTurn<'_>);
    /// The session's continuity record rendered for a model, with every event of it
    /// committed so far, for `request` — only when the session's stored episodes are
    /// the request's own: their root user messages must match the request's earlier
    /// ones (exactly, in order, for a key derived from the conversation's start
    /// ([`crate::session::is_derived`]); each earlier one found among them, in
    /// order, for a session id the client named). `None` when none is held for it or
    /// it is another conversation's: the request then keeps its own history. Called on
    /// the request path: it must answer from memory, never query storage nor wait on a
    /// lock a writer holds long; it may render the record there when events came since
    /// the last render (the log renders lazily: only what is read).
    fn record(&self, session: &str, request: &Request) -> Option<Arc<str>>;
    /// A delegate run (`/claude …`, handled before the pipeline) ended.
    fn delegated(&self, run: &DelegatedRun<'_>);
    /// What a summary of `request`'s conversation must name: the files it edited and
    /// the errors still open at its end, as the store's graph folds them. A shadow
    /// comparison of a CLI's compaction asks, off the request path; none (the
    /// default) leaves the two answers compared by their words alone.
    fn must_cover(&self, request: &Request) -> Vec<MustName> {
        let _ = request;
        Vec::new()
    }
}

/// A headless delegate run at its end.
pub struct DelegatedRun<'a> {
    /// The client's session key (the sticky rule's key), or `unsessioned`.
    pub session: &'a str,
    /// The CLI it ran, e.g. `claude`.
    pub vendor: &'a str,
    /// Its exit code when it exited by itself (`None`: killed, stopped, abandoned).
    pub exit_code: Option<i32>,
    /// Why it did not end cleanly, if it did not.
    pub error: Option<&'a str>,
    pub duration_ms: u64,
}

/// A request once the router has decided where it goes.
pub struct DecidedTurn<'a> {
    /// The request's id on the event bus (unique within one run of Glider).
    pub request_id: u64,
    /// The session key ([`crate::session::session_id`], the sticky rule's key).
    pub session: &'a str,
    pub door: Door,
    pub front: Dialect,
    /// The request as decoded (routing flag not yet stripped from the text).
    pub request: &'a Request,
    /// The model after `model_aliases`.
    pub model: &'a str,
    /// The rule that decided, and its short human reason.
    pub rule: RuleName,
    pub reason: &'a str,
    /// Input tokens estimated for the request.
    pub estimated_tokens: u64,
    /// The first candidate's backend and whether it is local (none: no candidate).
    pub backend: Option<(&'a str, bool)>,
}

/// A request at its end.
pub struct RecordedTurn<'a> {
    /// The name [`ContextSink::decided`] gave the request.
    pub key: String,
    /// The session key, as the request's decision had it.
    pub session: String,
    /// The bus record: backend, model, usage, status, error, timings.
    pub record: &'a RequestRecord,
    /// The tool calls of the reply, in order, as far as the reply was seen.
    pub tool_calls: Vec<ReplyToolCall>,
    /// Why generation stopped, when the reply said so.
    pub stop_reason: Option<StopReason>,
    /// The reply's text (not its thinking): whole when under twice [`REPLY_TEXT_KEPT`]
    /// bytes, else its first [`REPLY_TEXT_KEPT`] bytes, `…`, and its last ones.
    pub text: String,
    /// The request was a CLI's compaction answered locally, and by what.
    pub compaction: Option<CompactionSource>,
}

/// Who answered a CLI's compaction request locally (`context.compaction: local`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionSource {
    /// A local model, given the continuity record and the current episode.
    LocalModel,
    /// Glider itself, from the continuity record (no local backend was up).
    Record,
}

impl CompactionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionSource::LocalModel => "local_model",
            CompactionSource::Record => "record",
        }
    }
}

/// Which CLI's compaction prompt a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionPrompt {
    /// Claude Code's `/compact` and auto-compaction: the reply is expected as an
    /// `<analysis>` block and a `<summary>` block.
    ClaudeCode,
    /// Codex's context checkpoint: a handoff summary as plain text.
    Codex,
}

/// The openings of the CLIs' compaction instructions, as their shipped binaries write
/// them (read from Claude Code 2.1.197, whose three variants — the whole conversation,
/// its recent portion, a continuing session — share this start, and Codex 0.171.0).
const CLAUDE_CODE_COMPACTION: &str = "Your task is to create a detailed summary of ";
const CODEX_COMPACTION: &str = "You are performing a CONTEXT CHECKPOINT COMPACTION.";
/// What both begin with.
const COMPACTION_OPENING: &str = "You";

/// Whether `request` is a CLI's compaction request, recognised by shape: its last turn
/// other than system entries is the user's and its text holds the CLI's compaction
/// instruction (Claude Code sends it after the conversation, alone or next to tool
/// results, and most often follows it with a `role: "system"` entry — a reminder, a
/// file note, the skills list — which is looked past).
pub fn compaction_prompt(request: &Request) -> Option<CompactionPrompt> {
    let last = request
        .turns
        .iter()
        .rev()
        .find(|turn| turn.role != Role::System)?;
    if last.role != Role::User {
        return None;
    }
    // Every request of a session with the context log on asks this of its newest user
    // text: one vectorised search for the opening both instructions share, its table
    // built once, and each instruction compared where that is found.
    static OPENING: Needle = Needle::new(COMPACTION_OPENING.as_bytes());
    let at = |text: &str, at: usize, instruction: &str| {
        text.as_bytes()[at..].starts_with(instruction.as_bytes())
    };
    last.parts.iter().find_map(|part| match part {
        // Claude Code's instruction wins wherever it is; Codex's is kept in case.
        Part::Text { text, .. } => {
            let mut codex = None;
            for found in OPENING.places_in(text.as_bytes()) {
                if at(text, found, CLAUDE_CODE_COMPACTION) {
                    return Some(CompactionPrompt::ClaudeCode);
                }
                if at(text, found, CODEX_COMPACTION) {
                    codex = Some(CompactionPrompt::Codex);
                }
            }
            codex
        }
        _ => None,
    })
}

/// Bytes of a reply's text kept from each end for the sink (a closing summary of what
/// the model did is at the end; a long reply's middle is not kept).
pub const REPLY_TEXT_KEPT: usize = 4 * 1024;

/// A tool call the model made in its reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (JSON text; a stream's fragments joined).
    pub arguments: String,
}

/// What a request adds to the conversation its earlier requests already carried: its
/// newest assistant turn (whose tool calls the CLI answered) and the turns after it.
pub fn newest_turns(request: &Request) -> (Option<&Turn>, &[Turn]) {
    match request
        .turns
        .iter()
        .rposition(|t| t.role == Role::Assistant)
    {
        Some(at) => (request.turns.get(at), &request.turns[at + 1..]),
        None => (None, &request.turns),
    }
}

/// The tool calls of `turn` (none for no turn) as (id, name, arguments), in order.
pub fn tool_calls_of(turn: Option<&Turn>) -> impl Iterator<Item = (&str, &str, &Value)> {
    glider_ngl::tool_calls(turn.map_or(&[][..], |t| &t.parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A captured request of the real CLI, decoded as the gateway decodes it.
    fn real(cli: &str, scenario: &str, kind: &str) -> Vec<Request> {
        glider_test_support::captured::captured_kind(cli, scenario, kind)
            .iter()
            .map(|captured| {
                let dialect = if cli == "codex" {
                    Dialect::OpenAiResponses
                } else {
                    Dialect::Anthropic
                };
                glider_dialects::codec(dialect)
                    .decode_request(&captured.body_bytes())
                    .unwrap_or_else(|e| panic!("{cli} {scenario} {}: {e}", captured.file))
            })
            .collect()
    }

    #[test]
    fn the_real_clis_compactions_are_recognised_and_their_other_turns_are_not() {
        for (cli, scenario, expected) in [
            ("claude-code", "compact", CompactionPrompt::ClaudeCode),
            ("claude-code", "auto-compact", CompactionPrompt::ClaudeCode),
            ("codex", "auto-compact", CompactionPrompt::Codex),
        ] {
            let compactions = real(cli, scenario, "compact");
            assert!(!compactions.is_empty(), "{cli} {scenario}");
            for request in &compactions {
                assert_eq!(
                    compaction_prompt(request),
                    Some(expected),
                    "{cli} {scenario}: last turns {:?}",
                    &request.turns[request.turns.len().saturating_sub(2)..]
                );
            }
        }
        for (cli, scenario, kind) in [
            ("claude-code", "tool-loop", "messages"),
            ("claude-code", "auto-compact", "messages"),
            ("claude-code", "subagent", "messages"),
            ("codex", "shell", "responses"),
            ("codex", "auto-compact", "responses"),
        ] {
            for request in real(cli, scenario, kind) {
                assert_eq!(compaction_prompt(&request), None, "{cli} {scenario}");
            }
        }
    }

    fn conversation(last: glider_ngl::Turn) -> Request {
        use glider_ngl::{Role, Turn};
        Request {
            turns: vec![
                Turn::text(Role::User, "fix it"),
                Turn::text(Role::Assistant, "fixed"),
                last,
            ],
            ..Request::default()
        }
    }

    #[test]
    fn claude_codes_and_codexs_compaction_requests_are_recognised_by_their_instruction() {
        use glider_ngl::{Role, Turn};
        let claude = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is \
                      to create a detailed summary of the conversation so far, paying close attention";
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, claude))),
            Some(CompactionPrompt::ClaudeCode)
        );
        let recent =
            "Your task is to create a detailed summary of the RECENT portion of the conversation";
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, recent))),
            Some(CompactionPrompt::ClaudeCode)
        );
        let codex = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary \
                     for another LLM that will resume the task.";
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, codex))),
            Some(CompactionPrompt::Codex)
        );
        // Found after other words that open alike.
        let after = format!("You asked. You are performing a review. Your task is… {codex}");
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, &after))),
            Some(CompactionPrompt::Codex)
        );
        // Both in one text: Claude Code's, as when each was searched for in turn.
        let both = format!("{codex} {claude}");
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, &both))),
            Some(CompactionPrompt::ClaudeCode)
        );
        for text in [
            "what did we change?",
            "You are performing a review. Your task is",
        ] {
            assert_eq!(
                compaction_prompt(&conversation(Turn::text(Role::User, text))),
                None
            );
        }
        // The instruction quoted by the model is no compaction request.
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::Assistant, claude))),
            None
        );
        // Claude Code 2.1.197 ends `/compact` and most auto-compactions with system
        // entries after the instruction.
        let mut trailing = conversation(Turn::text(Role::User, claude));
        trailing.turns.push(Turn::text(
            Role::System,
            "<system-reminder>The following skills are available</system-reminder>",
        ));
        trailing
            .turns
            .push(Turn::text(Role::System, "Note: src/parse.rs was modified"));
        assert_eq!(
            compaction_prompt(&trailing),
            Some(CompactionPrompt::ClaudeCode)
        );
    }
}
