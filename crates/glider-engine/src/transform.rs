//! What happens to a request on its way to a LOCAL backend only (spec: "episodes +
//! BoundLocalContext — local only, never the full history", then the opt-in
//! `Transformer`). The cloud path is never touched.
//!
//! Bounding policy: keep every system turn and the tool definitions; keep the latest
//! turns that fit the budget, never splitting an assistant tool call from the tool
//! results that answer it; the last user turn and any tool call still waiting for its
//! result are always kept. Older turns are dropped oldest first, in whole exchanges.

use glider_config::{ContextConfig, TransformConfig};
use glider_ngl::{Part, Request, Role, Turn};

use crate::tokenizer::{
    TOKENS_PER_MESSAGE, estimate_request_tokens, estimate_tools, estimate_turn,
};

/// What bounding did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bounded {
    pub dropped_turns: usize,
    pub kept_tokens: u64,
}

/// The token budget of a local request on a model with `window` tokens.
pub fn local_budget(config: &ContextConfig, window: u64) -> u64 {
    config
        .local_budget_tokens
        .unwrap_or_else(|| window.saturating_sub(config.output_reserve_tokens))
        .min(window)
}

/// Whether a local request must be rewritten before it is sent: the transform is on,
/// or its history is over the budget. Checked first so the common case (nothing to
/// change) costs no copy of the request.
pub fn needs_rewrite(
    request: &Request,
    context: &ContextConfig,
    transform: &TransformConfig,
    window: u64,
) -> bool {
    transform.enabled || over_local_budget(request, context, window)
}

/// Whether bounding would cut `request` for a local model with `window` tokens.
pub fn over_local_budget(request: &Request, context: &ContextConfig, window: u64) -> bool {
    context.bound_local && estimate_request_tokens(request, "").0 > local_budget(context, window)
}

/// Cut `request`'s history to the budget for a local model with `window` tokens.
pub fn bound_local_context(request: &mut Request, config: &ContextConfig, window: u64) -> Bounded {
    if !config.bound_local {
        return Bounded::default();
    }
    let budget = local_budget(config, window);
    let (total, _) = estimate_request_tokens(request, "");
    if total <= budget {
        return Bounded {
            dropped_turns: 0,
            kept_tokens: total,
        };
    }
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
    let conversation: Vec<(usize, &Turn)> = request
        .turns
        .iter()
        .enumerate()
        .filter(|(_, t)| t.role != Role::System)
        .collect();
    let mut units: Vec<Vec<usize>> = Vec::new();
    for (index, turn) in &conversation {
        let joins_previous = turn.role == Role::Tool && units.last().is_some();
        if joins_previous {
            if let Some(unit) = units.last_mut() {
                unit.push(*index);
            }
        } else {
            units.push(vec![*index]);
        }
    }
    // Walk back from the newest unit; the newest unit and the last user turn always stay.
    let last_user = request.turns.iter().rposition(|t| t.role == Role::User);
    let mut keep = vec![false; request.turns.len()];
    for (i, turn) in request.turns.iter().enumerate() {
        keep[i] = turn.role == Role::System;
    }
    let mut budget_reached = false;
    for (n, unit) in units.iter().enumerate().rev() {
        let cost: u64 = unit.iter().map(|&i| estimate_turn(&request.turns[i])).sum();
        let mandatory = n + 1 == units.len() || unit.iter().any(|&i| Some(i) == last_user);
        if mandatory || (!budget_reached && used + cost <= budget) {
            used += cost;
            for &i in unit {
                keep[i] = true;
            }
        } else {
            // Once a unit does not fit, older ones are dropped too: history stays contiguous.
            budget_reached = true;
        }
    }
    let before = request.turns.len();
    let mut index = 0;
    request.turns.retain(|_| {
        let kept = keep[index];
        index += 1;
        kept
    });
    drop_orphan_results(request);
    Bounded {
        dropped_turns: before - request.turns.len(),
        kept_tokens: used + TOKENS_PER_MESSAGE,
    }
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
        request.turns.retain(|t| t.role != Role::System);
        request
            .turns
            .insert(0, Turn::text(Role::System, prompt.clone()));
        changed = true;
    } else if let Some(max_chars) = config.local_system_max_chars {
        for turn in request.turns.iter_mut().filter(|t| t.role == Role::System) {
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
