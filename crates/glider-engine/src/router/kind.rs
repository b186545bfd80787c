//! What kind of request a coding CLI sent: its session title, a compaction, a
//! subagent's turn, a turn carrying an image, a long turn, a turn relaying tool results,
//! a trivial follow-up, or a main turn. The default policy (docs/routing.md, "The
//! default policy") is stated per kind and measured per kind on captured traffic, so
//! the kind is read the same way everywhere: on every decision
//! ([`RouteDecision::kind`](super::RouteDecision), `glider route explain`) and in the
//! replay test that holds the documented shares true.
//!
//! It only names the request; it decides nothing. Where a kind's side is chosen, the
//! rule that chose it says so (the classifier's `title_request`, the compaction phase
//! for `context.compaction`). The tests read every captured request: a kind that no
//! longer matches what the CLIs send fails there, not in a user's session.

use glider_ngl::{Part, Request, Role};
use serde::Serialize;

use super::classifier::{LONG_CONVERSATION_TURNS, conversation, is_title_request};
use glider_vocab::compaction_prompt;

/// Conversation tokens (system text and tool definitions left out, counted as the
/// classifier counts them) from which a turn is a long one: twice the classifier's
/// `conversation_10k_tokens` step, where size alone outweighs a follow-up's lean.
pub const LONG_TURN_TOKENS: f64 = 20_000.0;

/// A trivial follow-up's text is shorter than this (the classifier's `short_followup`).
const SHORT_FOLLOWUP_CHARS: usize = 200;

/// The kinds, in the order they are tested: the first that fits names the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A CLI's compaction: Claude Code's `/compact` or automatic one, Codex's checkpoint.
    Compaction,
    /// Claude Code's session title call (no tools, a `title` JSON schema).
    Title,
    /// A turn of a subagent (Claude Code's `cc_is_subagent=true`).
    Subagent,
    /// An image anywhere in the conversation.
    Image,
    /// A conversation of [`LONG_TURN_TOKENS`] or more, or of more than 40 turns.
    LongTurn,
    /// The last turn relays tool results back to the model.
    ToolFollowup,
    /// A short user message (under 200 characters) after the model has answered.
    TrivialFollowup,
    /// Anything else: the user's prompt that opens a task.
    MainTurn,
}

impl RequestKind {
    /// Every kind, in the order of [`kind_of`]'s tests.
    pub const ALL: [RequestKind; 8] = [
        RequestKind::Compaction,
        RequestKind::Title,
        RequestKind::Subagent,
        RequestKind::Image,
        RequestKind::LongTurn,
        RequestKind::ToolFollowup,
        RequestKind::TrivialFollowup,
        RequestKind::MainTurn,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Compaction => "compaction",
            RequestKind::Title => "title",
            RequestKind::Subagent => "subagent",
            RequestKind::Image => "image",
            RequestKind::LongTurn => "long_turn",
            RequestKind::ToolFollowup => "tool_followup",
            RequestKind::TrivialFollowup => "trivial_followup",
            RequestKind::MainTurn => "main_turn",
        }
    }

    /// The kind named `name` ([`as_str`](Self::as_str)).
    pub fn parse(name: &str) -> Option<RequestKind> {
        RequestKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for RequestKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Claude Code marks a subagent's requests in its billing line, the first system block.
const SUBAGENT_MARK: &str = "cc_is_subagent=true";

/// The kind of `request`.
pub fn kind_of(request: &Request) -> RequestKind {
    if compaction_prompt(request).is_some() {
        return RequestKind::Compaction;
    }
    if is_title_request(request) {
        return RequestKind::Title;
    }
    if is_subagent(request) {
        return RequestKind::Subagent;
    }
    let conversation = conversation(request);
    if conversation.images {
        return RequestKind::Image;
    }
    if conversation.tokens() >= LONG_TURN_TOKENS || conversation.turns > LONG_CONVERSATION_TURNS {
        return RequestKind::LongTurn;
    }
    if request.last_turn().is_some_and(|t| t.role == Role::Tool) {
        return RequestKind::ToolFollowup;
    }
    let answered_before = request.turns.iter().any(|t| t.role == Role::Assistant);
    let short = request
        .last_user_text()
        .is_some_and(|t| !t.trim().is_empty() && t.trim().chars().count() < SHORT_FOLLOWUP_CHARS);
    if answered_before && short {
        return RequestKind::TrivialFollowup;
    }
    RequestKind::MainTurn
}

fn is_subagent(request: &Request) -> bool {
    request
        .turns
        .iter()
        .filter(|t| t.role == Role::System)
        .flat_map(|t| &t.parts)
        .any(|part| matches!(part, Part::Text { text, .. } if text.contains(SUBAGENT_MARK)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_dialects::codec;
    use glider_ngl::{Dialect, Turn};
    use glider_test_support::captured::{captured, clis, scenarios};

    fn decoded(cli: &str, body: &[u8]) -> Request {
        let front = if cli.starts_with("codex") {
            Dialect::OpenAiResponses
        } else {
            Dialect::Anthropic
        };
        codec(front)
            .decode_request(body)
            .expect("a captured body decodes")
    }

    /// Every captured request's kind, by `cli/scenario/file`.
    #[test]
    fn every_captured_request_has_the_kind_it_is() {
        let mut got = Vec::new();
        for cli in clis() {
            for scenario in scenarios(&cli) {
                for r in captured(&cli, &scenario) {
                    if r.kind == "probe" {
                        continue;
                    }
                    let kind = kind_of(&decoded(&cli, &r.body_bytes()));
                    let name = cli.rsplit_once('-').map_or(cli.as_str(), |(n, _)| n);
                    got.push(format!(
                        "{name}/{scenario}/{} {kind}",
                        r.file.trim_end_matches(".json")
                    ));
                }
            }
        }
        let expected = [
            "claude-code/auto-compact/002-messages main_turn",
            "claude-code/auto-compact/003-messages tool_followup",
            "claude-code/auto-compact/005-compact compaction",
            "claude-code/auto-compact/006-messages trivial_followup",
            "claude-code/cloud-flag/002-messages main_turn",
            "claude-code/compact/002-compact compaction",
            "claude-code/image/002-messages main_turn",
            "claude-code/image/003-messages image",
            "claude-code/interactive/002-title title",
            "claude-code/interactive/003-messages main_turn",
            "claude-code/interactive/004-messages tool_followup",
            "claude-code/local-flag/002-messages main_turn",
            "claude-code/plain/002-messages main_turn",
            "claude-code/plan-mode/002-messages main_turn",
            "claude-code/plan-mode/003-messages tool_followup",
            "claude-code/plan-mode/004-messages tool_followup",
            "claude-code/resume/002-messages trivial_followup",
            "claude-code/subagent/002-messages main_turn",
            "claude-code/subagent/003-messages subagent",
            "claude-code/subagent/004-messages subagent",
            "claude-code/subagent/005-messages tool_followup",
            "claude-code/tool-loop/002-messages main_turn",
            "claude-code/tool-loop/003-messages tool_followup",
            "claude-code/tool-loop/004-messages tool_followup",
            "claude-code/tool-loop/005-messages tool_followup",
            "codex/auto-compact/001-responses main_turn",
            "codex/auto-compact/002-compact compaction",
            "codex/auto-compact/003-responses main_turn",
            "codex/plain/001-responses main_turn",
            "codex/resume/001-responses trivial_followup",
            "codex/shell/001-responses main_turn",
            "codex/shell/002-responses tool_followup",
        ];
        assert_eq!(got, expected);
    }

    #[test]
    fn size_and_turns_make_a_long_turn_and_names_read_back() {
        let short = |n: usize, text: &str| Request {
            turns: (0..n)
                .flat_map(|_| {
                    [
                        Turn::text(Role::User, "go on"),
                        Turn::text(Role::Assistant, "done"),
                    ]
                })
                .chain([Turn::text(Role::User, text)])
                .collect(),
            ..Request::default()
        };
        assert_eq!(
            kind_of(&short(1, "and then?")),
            RequestKind::TrivialFollowup
        );
        assert_eq!(kind_of(&short(0, "and then?")), RequestKind::MainTurn);
        assert_eq!(kind_of(&short(20, "and then?")), RequestKind::LongTurn);
        // 20k tokens at 3.5 bytes each: long; one byte-token less is not.
        let bytes = (LONG_TURN_TOKENS * glider_vocab::estimate::BYTES_PER_TOKEN) as usize;
        assert_eq!(
            kind_of(&short(0, &"x".repeat(bytes))),
            RequestKind::LongTurn
        );
        assert_eq!(
            kind_of(&short(0, &"x".repeat(bytes - 4))),
            RequestKind::MainTurn
        );
        for kind in RequestKind::ALL {
            assert_eq!(RequestKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(RequestKind::parse("nothing"), None);
    }
}
