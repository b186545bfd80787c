//! What happens to a request on its way to a LOCAL backend only (spec: "episodes +
//! BoundLocalContext — local only, never the full history", then the opt-in
//! `Transformer`). The cloud path is never touched.
//!
//! Bounding policy, with the session's continuity record ([`bound_to_episode`]): keep
//! every system turn and the tool definitions, add the record as a system turn, and
//! keep only the current episode — from its root user turn on — dropping what came
//! before it. Without a record (context off, or none built yet: [`bound_local_context`])
//! the latest turns that fit are kept. Either way the result is cut to the budget in
//! whole exchanges, oldest first: an assistant tool call is never split from the tool
//! results that answer it, and the root (or last) user turn and the newest exchange
//! always stay.

use glider_config::{ContextConfig, TransformConfig};
use glider_ngl::{Part, Request, Role, Turn};

use crate::tokenizer::{
    TOKENS_PER_MESSAGE, estimate_request_tokens, estimate_tools, estimate_turn,
};

/// What bounding did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bounded {
    pub dropped_turns: usize,
    /// Estimated tokens of the turns left out.
    pub dropped_tokens: u64,
    pub kept_tokens: u64,
    /// Estimated tokens of the continuity record added (0: none).
    pub record_tokens: u64,
}

/// The opening of the system turn that carries the continuity record (as
/// `glider-context` renders it), so the transform keeps it when it replaces or trims
/// the CLI's own system text.
pub const RECORD_OPENING: &str = "<continuity-record";

/// The token budget of a local request on a model with `window` tokens.
pub fn local_budget(config: &ContextConfig, window: u64) -> u64 {
    config
        .local_budget_tokens
        .unwrap_or_else(|| window.saturating_sub(config.output_reserve_tokens))
        .min(window)
}

/// Whether bounding would cut `request` for a local model with `window` tokens.
pub fn over_local_budget(request: &Request, context: &ContextConfig, window: u64) -> bool {
    context.bound_local && estimate_request_tokens(request, "").0 > local_budget(context, window)
}

/// Cut `request`'s history to the budget for a local model with `window` tokens,
/// keeping its latest turns (no continuity record to stand for the rest).
pub fn bound_local_context(request: &mut Request, config: &ContextConfig, window: u64) -> Bounded {
    if !config.bound_local {
        return Bounded::default();
    }
    let budget = local_budget(config, window);
    let (total, _) = estimate_request_tokens(request, "");
    if total <= budget {
        return Bounded {
            kept_tokens: total,
            ..Bounded::default()
        };
    }
    let last_user = request.turns.iter().rposition(|t| t.role == Role::User);
    cut_to_budget(request, budget, last_user, Bounded::default())
}

/// Whether [`bound_to_episode`] reads the continuity record for `request`: only then is
/// it worth fetching (and, when stale, rendering).
pub fn reads_record(request: &Request, compaction: bool) -> bool {
    record_episode_root(request, compaction).is_some()
}

/// Where the current episode begins, when the record goes before it. Not when there
/// is nothing from before the episode: the record would only restate what the model
/// sees anyway (a new session's first turn), and a small model reads the extra system
/// text as instructions (a forced tool call went unanswered). A compaction keeps it:
/// the record is what it is answered from.
fn record_episode_root(request: &Request, compaction: bool) -> Option<usize> {
    let before_instruction = request.turns.len().saturating_sub(usize::from(compaction));
    let root = episode_root(&request.turns[..before_instruction])?;
    let earlier = request.turns[..root].iter().any(|t| t.role != Role::System);
    (earlier || compaction).then_some(root)
}

/// Give a local model the session's continuity `record` and the current episode only:
/// the turns before the episode's root user turn are dropped (the record stands for
/// them), the record goes in as a system turn after the leading system turns, and the
/// episode is cut to the budget keeping its root. For a CLI's compaction request
/// (`compaction`) the episode is the one its instruction (the last turn, always kept)
/// follows. A request with no root user turn (nothing but tool traffic), or with
/// nothing before its episode (a session's first turn: [`reads_record`]), is bounded by
/// its tail instead.
pub fn bound_to_episode(
    request: &mut Request,
    record: &str,
    config: &ContextConfig,
    window: u64,
    compaction: bool,
) -> Bounded {
    if !config.bound_local {
        return Bounded::default();
    }
    let Some(root) = record_episode_root(request, compaction) else {
        return bound_local_context(request, config, window);
    };
    let mut cut = Bounded::default();
    let mut index = 0;
    request.turns.retain(|turn| {
        let before_episode = index < root && turn.role != Role::System;
        index += 1;
        if before_episode {
            cut.dropped_turns += 1;
            cut.dropped_tokens += estimate_turn(turn);
        }
        !before_episode
    });
    let record_turn = Turn::text(Role::System, record);
    cut.record_tokens = estimate_turn(&record_turn);
    let after_system = request
        .turns
        .iter()
        .position(|t| t.role != Role::System)
        .unwrap_or(request.turns.len());
    request.turns.insert(after_system, record_turn);
    let root = after_system + 1;
    let budget = local_budget(config, window);
    let (total, _) = estimate_request_tokens(request, "");
    if total <= budget {
        cut.kept_tokens = total;
        return cut;
    }
    cut_to_budget(request, budget, Some(root), cut)
}

/// Where the current episode begins: the newest user turn holding the user's own text
/// that follows an assistant turn (or opens the conversation) with no tool results in
/// between. Text a CLI sends alongside tool results (Claude Code's reminders) is part
/// of the tool loop, not a new episode. The same rule makes a request a root in the
/// context log.
fn episode_root(turns: &[Turn]) -> Option<usize> {
    let mut root = None;
    let mut segment_has_results = false;
    for (index, turn) in turns.iter().enumerate() {
        match turn.role {
            Role::Assistant => segment_has_results = false,
            Role::Tool => segment_has_results = true,
            Role::User if !segment_has_results && has_text(turn) => {
                let opens_segment = turns[..index]
                    .iter()
                    .rev()
                    .take_while(|t| t.role != Role::Assistant)
                    .all(|t| t.role == Role::System);
                if opens_segment {
                    root = Some(index);
                }
            }
            Role::User | Role::System => {}
        }
    }
    root
}

/// Whether `turn` holds text that is more than whitespace.
pub(crate) fn has_text(turn: &Turn) -> bool {
    turn.parts
        .iter()
        .any(|p| matches!(p, Part::Text { text, .. } if !text.trim().is_empty()))
}

/// Drop whole exchanges, oldest first, until `request` fits `budget`; system turns
/// (the record among them), the tool definitions, the unit holding turn `pinned`, the
/// last user turn and the newest unit always stay. `cut` holds what was already left
/// out.
fn cut_to_budget(
    request: &mut Request,
    budget: u64,
    pinned: Option<usize>,
    mut cut: Bounded,
) -> Bounded {
    // Fixed cost: system turns and tool definitions.
    let mut used = estimate_tools(&request.tools)
        + request
            .turns
            .iter()
            .filter(|t| t.role == Role::System)
            .map(estimate_turn)
            .sum::<u64>();

    // Group the conversation into units that must stay together: an assistant turn with
    // tool calls plus the tool turns after it.
    let mut units: Vec<Vec<usize>> = Vec::new();
    for (index, turn) in request.turns.iter().enumerate() {
        if turn.role == Role::System {
            continue;
        }
        let joins_previous = turn.role == Role::Tool && !units.is_empty();
        match units.last_mut() {
            Some(unit) if joins_previous => unit.push(index),
            _ => units.push(vec![index]),
        }
    }
    let last_user = request.turns.iter().rposition(|t| t.role == Role::User);
    let mut keep: Vec<bool> = request
        .turns
        .iter()
        .map(|t| t.role == Role::System)
        .collect();
    // The mandatory units are paid for first, so what is left of the budget goes to the
    // newest of the rest.
    let mandatory = |n: usize, unit: &[usize]| {
        n + 1 == units.len()
            || unit
                .iter()
                .any(|&i| Some(i) == last_user || Some(i) == pinned)
    };
    let cost =
        |unit: &[usize]| -> u64 { unit.iter().map(|&i| estimate_turn(&request.turns[i])).sum() };
    for (n, unit) in units.iter().enumerate() {
        if mandatory(n, unit) {
            used += cost(unit);
            unit.iter().for_each(|&i| keep[i] = true);
        }
    }
    for (n, unit) in units.iter().enumerate().rev() {
        if mandatory(n, unit) {
            continue;
        }
        let unit_cost = cost(unit);
        if used + unit_cost > budget {
            // Once a unit does not fit, older ones are dropped too: history stays contiguous.
            break;
        }
        used += unit_cost;
        unit.iter().for_each(|&i| keep[i] = true);
    }
    for (turn, kept) in request.turns.iter().zip(&keep) {
        if !kept {
            cut.dropped_turns += 1;
            cut.dropped_tokens += estimate_turn(turn);
        }
    }
    let mut index = 0;
    request.turns.retain(|_| {
        let kept = keep[index];
        index += 1;
        kept
    });
    drop_orphan_results(request);
    cut.kept_tokens = used + TOKENS_PER_MESSAGE;
    cut
}

/// A tool result whose call was cut away would confuse the model (and OpenAI-style
/// servers refuse it): turn such results into plain user text.
fn drop_orphan_results(request: &mut Request) {
    let calls: Vec<String> = request
        .turns
        .iter()
        .flat_map(|t| t.parts.iter())
        .filter_map(|p| match p {
            Part::ToolCall { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    for turn in &mut request.turns {
        if turn.role != Role::Tool {
            continue;
        }
        let orphan = turn
            .parts
            .iter()
            .any(|p| matches!(p, Part::ToolResult { call_id, .. } if !calls.contains(call_id)));
        if orphan {
            turn.role = Role::User;
            turn.parts = vec![Part::text(format!(
                "(earlier tool output)\n{}",
                results_text(turn)
            ))];
        }
    }
}

/// The text of the tool results in `turn`.
fn results_text(turn: &Turn) -> String {
    turn.parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolResult { content, .. } => Some(
                Turn {
                    role: Role::Tool,
                    parts: content.clone(),
                }
                .plain_text(),
            ),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The system turn [`bound_to_episode`] added: the transform leaves it alone (it has
/// its own budget, `context.record_max_tokens`).
fn is_record_turn(turn: &Turn) -> bool {
    matches!(turn.parts.first(), Some(Part::Text { text, .. }) if text.starts_with(RECORD_OPENING))
}

/// The opt-in transform for local requests. Returns whether it changed anything.
pub fn apply(request: &mut Request, config: &TransformConfig) -> bool {
    if !config.enabled {
        return false;
    }
    let mut changed = false;
    if let Some(cap) = config.local_max_tokens
        && request.max_tokens.is_none_or(|m| m > cap)
    {
        request.max_tokens = Some(cap);
        changed = true;
    }
    if let Some(prompt) = &config.local_system_prompt {
        request
            .turns
            .retain(|t| t.role != Role::System || is_record_turn(t));
        request
            .turns
            .insert(0, Turn::text(Role::System, prompt.clone()));
        changed = true;
    } else if let Some(max_chars) = config.local_system_max_chars {
        for turn in request
            .turns
            .iter_mut()
            .filter(|t| t.role == Role::System && !is_record_turn(t))
        {
            for part in &mut turn.parts {
                if let Part::Text { text, .. } = part
                    && text.chars().count() > max_chars
                {
                    *text = text.chars().take(max_chars).collect();
                    changed = true;
                }
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Turn {
        Turn {
            role: Role::Assistant,
            parts: vec![Part::ToolCall {
                id: id.into(),
                name: "read".into(),
                arguments: json!({"path": "a"}),
            }],
        }
    }

    fn result(id: &str, text: &str) -> Turn {
        Turn {
            role: Role::Tool,
            parts: vec![Part::ToolResult {
                call_id: id.into(),
                name: None,
                content: vec![Part::text(text)],
                is_error: false,
            }],
        }
    }

    fn long_conversation() -> Request {
        let big = "x".repeat(3500); // ~1000 tokens each
        let mut turns = vec![Turn::text(Role::System, "be brief")];
        for i in 0..10 {
            turns.push(Turn::text(Role::User, format!("q{i} {big}")));
            turns.push(call(&format!("c{i}")));
            turns.push(result(&format!("c{i}"), &big));
            turns.push(Turn::text(Role::Assistant, format!("a{i}")));
        }
        turns.push(Turn::text(Role::User, "final question"));
        Request {
            model: "m".into(),
            turns,
            ..Request::default()
        }
    }

    fn config(budget: u64) -> ContextConfig {
        ContextConfig {
            bound_local: true,
            local_budget_tokens: Some(budget),
            output_reserve_tokens: 0,
            ..ContextConfig::default()
        }
    }

    #[test]
    fn history_is_cut_to_the_budget_keeping_system_and_the_latest_turns() {
        let mut request = long_conversation();
        let cut = bound_local_context(&mut request, &config(5_000), 100_000);
        assert!(cut.dropped_turns > 0);
        let (tokens, _) = estimate_request_tokens(&request, "");
        assert!(tokens <= 5_000, "{tokens}");
        assert_eq!(request.turns[0].role, Role::System);
        assert_eq!(
            request.turns.last().map(Turn::plain_text).as_deref(),
            Some("final question")
        );
        // Every tool result still follows its call.
        for (i, turn) in request.turns.iter().enumerate() {
            if let Some(Part::ToolResult { call_id, .. }) = turn.parts.first() {
                let previous = &request.turns[i - 1];
                assert!(
                    matches!(previous.parts.first(), Some(Part::ToolCall { id, .. }) if id == call_id),
                    "result {call_id} lost its call"
                );
            }
        }
    }

    #[test]
    fn a_pending_tool_call_and_its_result_are_never_split() {
        let mut request = long_conversation();
        request.turns.pop();
        request.turns.push(call("pending"));
        request.turns.push(result("pending", &"y".repeat(7000)));
        let cut = bound_local_context(&mut request, &config(1_000), 100_000);
        assert!(cut.dropped_turns > 0);
        let n = request.turns.len();
        assert!(
            matches!(request.turns[n - 2].parts.first(), Some(Part::ToolCall { id, .. }) if id == "pending")
        );
        assert_eq!(request.turns[n - 1].role, Role::Tool);
    }

    #[test]
    fn small_requests_and_disabled_bounding_are_untouched() {
        let mut request = long_conversation();
        let before = request.clone();
        assert_eq!(
            bound_local_context(&mut request, &config(1_000_000), 2_000_000).dropped_turns,
            0
        );
        let mut off = config(10);
        off.bound_local = false;
        assert_eq!(
            bound_local_context(&mut request, &off, 100).dropped_turns,
            0
        );
        assert_eq!(request, before);
    }

    /// Two finished episodes, then a third whose tool loop is under way.
    fn three_episodes() -> Request {
        let mut turns = vec![Turn::text(Role::System, "you are a CLI")];
        for e in 0..2 {
            turns.push(Turn::text(Role::User, format!("episode {e} goal")));
            turns.push(call(&format!("e{e}")));
            turns.push(result(&format!("e{e}"), "old output"));
            turns.push(Turn::text(Role::Assistant, format!("episode {e} done")));
        }
        turns.push(Turn::text(Role::User, "episode 2 goal"));
        turns.push(call("n1"));
        // Claude Code sends a reminder as text next to the tool result: the decoder
        // makes it a user turn after the tool turn, which is no new episode.
        turns.push(result("n1", "new output"));
        turns.push(Turn::text(
            Role::User,
            "<system-reminder>be careful</system-reminder>",
        ));
        Request {
            model: "m".into(),
            turns,
            ..Request::default()
        }
    }

    const RECORD: &str =
        "<continuity-record session=\"s\">\nFiles: a.rs edited\n</continuity-record>";

    fn texts(request: &Request) -> Vec<String> {
        request.turns.iter().map(Turn::plain_text).collect()
    }

    #[test]
    fn with_a_record_only_the_current_episode_is_kept_after_the_system_text_and_record() {
        let mut request = three_episodes();
        let cut = bound_to_episode(&mut request, RECORD, &config(100_000), 200_000, false);
        assert_eq!(cut.dropped_turns, 8, "both earlier episodes");
        assert!(cut.dropped_tokens > 0 && cut.record_tokens > 0);
        assert_eq!(request.turns[0].plain_text(), "you are a CLI");
        assert_eq!(request.turns[1].role, Role::System);
        assert_eq!(request.turns[1].plain_text(), RECORD);
        assert_eq!(request.turns[2].plain_text(), "episode 2 goal");
        assert!(
            !texts(&request)
                .iter()
                .any(|t| t.contains("episode 0") || t.contains("episode 1")),
            "{:?}",
            texts(&request)
        );
        assert_eq!(
            request.turns.len(),
            6,
            "system, record, root, call, result, reminder"
        );
    }

    #[test]
    fn an_episode_over_the_budget_keeps_its_root_and_whole_call_result_pairs() {
        let big = "z".repeat(3500); // ~1000 tokens
        let mut request = three_episodes();
        request.turns.truncate(12); // the new episode: its root, a call and its result
        for i in 0..8 {
            request.turns.push(call(&format!("b{i}")));
            request.turns.push(result(&format!("b{i}"), &big));
        }
        let cut = bound_to_episode(&mut request, RECORD, &config(3_000), 200_000, false);
        let (tokens, _) = estimate_request_tokens(&request, "");
        assert!(tokens <= 3_000, "{tokens}");
        assert_eq!(
            request.turns[2].plain_text(),
            "episode 2 goal",
            "the root stays"
        );
        assert!(cut.dropped_turns > 8);
        let calls: Vec<&str> = request
            .turns
            .iter()
            .flat_map(|t| &t.parts)
            .filter_map(|p| match p {
                Part::ToolCall { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        let results: Vec<&str> = request
            .turns
            .iter()
            .flat_map(|t| &t.parts)
            .filter_map(|p| match p {
                Part::ToolResult { call_id, .. } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            calls, results,
            "no call without its result, nor the reverse"
        );
        assert_eq!(calls.last(), Some(&"b7"), "the newest exchange stays");
    }

    #[test]
    fn the_record_is_read_only_where_bounding_puts_it_in() {
        let first_turn = Request {
            model: "m".into(),
            turns: vec![
                Turn::text(Role::System, "you are a CLI"),
                Turn::text(Role::User, "the first goal"),
            ],
            ..Request::default()
        };
        let compaction = Request {
            turns: [
                first_turn.turns.clone(),
                vec![Turn::text(Role::User, "summarise")],
            ]
            .concat(),
            ..first_turn.clone()
        };
        for (request, is_compaction, reads) in [
            (three_episodes(), false, true),
            (first_turn, false, false),
            (compaction, true, true),
        ] {
            assert_eq!(reads_record(&request, is_compaction), reads);
            let mut bounded = request.clone();
            let cut = bound_to_episode(
                &mut bounded,
                RECORD,
                &config(100_000),
                200_000,
                is_compaction,
            );
            assert_eq!(
                cut.record_tokens > 0,
                reads,
                "bounding puts the record in exactly where it is read: {:?}",
                texts(&request)
            );
        }
    }

    #[test]
    fn the_transform_keeps_the_record_when_it_replaces_the_system_prompt() {
        let mut request = three_episodes();
        bound_to_episode(&mut request, RECORD, &config(100_000), 200_000, false);
        let transform = TransformConfig {
            enabled: true,
            local_max_tokens: None,
            local_system_prompt: Some("small model".into()),
            local_system_max_chars: None,
        };
        assert!(apply(&mut request, &transform));
        assert_eq!(request.turns[0].plain_text(), "small model");
        assert_eq!(request.turns[1].plain_text(), RECORD);
        let trim = TransformConfig {
            local_system_prompt: None,
            local_system_max_chars: Some(5),
            ..transform
        };
        apply(&mut request, &trim);
        assert_eq!(
            request.turns[1].plain_text(),
            RECORD,
            "the record has its own budget"
        );
    }

    #[test]
    fn the_transform_is_off_by_default_and_caps_when_on() {
        let mut request = long_conversation();
        request.max_tokens = Some(64_000);
        assert!(!apply(&mut request, &TransformConfig::default()));
        let config = TransformConfig {
            enabled: true,
            local_max_tokens: Some(2048),
            local_system_prompt: Some("You are a small local model.".into()),
            local_system_max_chars: None,
        };
        assert!(apply(&mut request, &config));
        assert_eq!(request.max_tokens, Some(2048));
        assert_eq!(
            request.turns[0].plain_text(),
            "You are a small local model."
        );
        assert_eq!(
            request
                .turns
                .iter()
                .filter(|t| t.role == Role::System)
                .count(),
            1
        );
    }
}
