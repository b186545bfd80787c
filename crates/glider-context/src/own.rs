//! Whether a session's stored episodes are a request's own, before their continuity
//! record stands in for the request's earlier turns. Two conversations can land on
//! one session key (two of a client's conversations opening with the same words, a
//! session id a client reuses): the record would then tell one conversation's words
//! in the other's request. So each episode-opening request's user text is kept as a
//! digest ([`words_digest`], in the fold: [`crate::graph::Folder::roots`]), and a
//! request gets the record only when its own root user messages ([`request_roots`])
//! match them ([`is_own`]); otherwise it keeps its own history (bounded).

use std::hash::{DefaultHasher, Hash, Hasher};

use glider_ngl::{Part, Request, Role};

use crate::sink::user_text;

/// How a request's root user messages must match a session's stored ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// The stored ones are the request's, in order, all of them (consecutive repeats —
    /// a retried request — counted once), the current one stored or not yet. For a key
    /// derived from the conversation's start: every request of such a session opens
    /// with the same words, so a stored episode the request does not carry is another
    /// conversation's.
    Exact,
    /// Each of the request's earlier ones is stored, in order; others may be stored
    /// between them. For a session id the client named (and scoped by its credential):
    /// the client's other requests of the session (titles, subagents) open episodes the
    /// main conversation does not carry.
    InOrder,
}

/// The digest of a root request's user text (as the log keeps it: the event's
/// `user_text`).
pub fn words_digest(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// The digests of `request`'s root user messages, oldest first, read as the sink
/// reads a request's newest turns: each run of turns after an assistant turn (the
/// first: before any) with user text and no tool result. A compaction request's
/// instruction opens no episode, so is none.
pub fn request_roots(request: &Request) -> Vec<u64> {
    let mut runs: Vec<_> = request
        .turns
        .split(|turn| turn.role == Role::Assistant)
        .collect();
    if glider_vocab::compaction_prompt(request).is_some() {
        runs.pop();
    }
    runs.into_iter()
        .filter(|run| {
            !run.iter()
                .filter(|t| matches!(t.role, Role::User | Role::Tool))
                .flat_map(|t| &t.parts)
                .any(|p| matches!(p, Part::ToolResult { .. }))
        })
        .filter_map(user_text)
        .map(|text| words_digest(&text))
        .collect()
}

/// Whether the `stored` root digests (a session's, oldest first) are those of a
/// request whose own are `request` (its current episode's root last) under `rule`.
/// A request with nothing stored of its own, or no root, matches nothing.
pub fn is_own(stored: &[u64], request: &[u64], rule: Match) -> bool {
    let Some((current, earlier)) = request.split_last() else {
        return false;
    };
    match rule {
        Match::Exact => {
            let stored = once_each(stored);
            let request = once_each(request);
            !stored.is_empty() && request.starts_with(&stored) && stored.len() + 1 >= request.len()
        }
        Match::InOrder => {
            let mut remaining = stored.iter();
            earlier.iter().all(|root| remaining.any(|s| s == root))
                && (!earlier.is_empty() || stored.contains(current))
        }
    }
}

/// `roots` with consecutive repeats counted once.
fn once_each(roots: &[u64]) -> Vec<u64> {
    let mut once = roots.to_vec();
    once.dedup();
    once
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::Turn;

    #[test]
    fn exact_takes_the_request_own_episodes_only() {
        let [a, b, c, x] = [1, 2, 3, 9];
        // The current episode's root stored already, or not yet.
        assert!(is_own(&[a, b], &[a, b, c], Match::Exact));
        assert!(is_own(&[a, b, c], &[a, b, c], Match::Exact));
        assert!(is_own(&[a, a, b], &[a, b, c], Match::Exact), "a retry");
        // Another conversation that opened with the same words.
        assert!(!is_own(&[a, x], &[a, b], Match::Exact));
        assert!(!is_own(&[a, x, a], &[a, b], Match::Exact));
        assert!(!is_own(&[a, b, x], &[a, b, c], Match::Exact));
        // Part of the conversation was never stored: its record would stand for turns
        // it does not tell.
        assert!(!is_own(&[a], &[a, b, c], Match::Exact));
        assert!(!is_own(&[], &[a, b], Match::Exact));
        assert!(!is_own(&[a], &[], Match::Exact));
    }

    #[test]
    fn in_order_finds_each_earlier_message_among_the_stored() {
        let [a, b, c, t, x] = [1, 2, 3, 7, 9];
        assert!(
            is_own(&[a, t, b], &[a, b, c], Match::InOrder),
            "a title between"
        );
        assert!(is_own(&[a, t, b, c], &[a, b, c], Match::InOrder));
        assert!(
            !is_own(&[a, t], &[a, b, c], Match::InOrder),
            "b never stored"
        );
        assert!(!is_own(&[b, a], &[a, b, c], Match::InOrder), "out of order");
        assert!(!is_own(&[x, t], &[a, b], Match::InOrder));
        // A compaction of the first episode: its own root must be stored.
        assert!(is_own(&[a], &[a], Match::InOrder));
        assert!(!is_own(&[x], &[a], Match::InOrder));
    }

    #[test]
    fn a_request_roots_are_its_user_messages_that_open_an_exchange() {
        let result = Turn {
            role: Role::User,
            parts: vec![Part::ToolResult {
                call_id: "c1".into(),
                name: None,
                content: vec![Part::text("ok")],
                is_error: false,
            }],
        };
        let request = Request {
            model: "m".into(),
            turns: vec![
                Turn::text(Role::System, "be brief"),
                Turn::text(Role::User, "first"),
                Turn::text(Role::Assistant, "calling"),
                result,
                Turn::text(Role::Assistant, "done"),
                Turn::text(Role::User, "second"),
                Turn::text(Role::User, "and more"),
            ],
            ..Request::default()
        };
        assert_eq!(
            request_roots(&request),
            [words_digest("first"), words_digest("second\nand more")]
        );
    }
}
