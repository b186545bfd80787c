//! The engine's [`ContextSink`], turning what the pipeline decided and recorded into
//! log events. It runs on the request path, so it copies only the conversation's
//! newest turns (the last assistant turn and what follows it) and queues the event
//! without waiting. For a shadow comparison of a CLI's compaction it also folds the
//! whole conversation into a graph of its own: what the summary must name.

use std::sync::Arc;

use glider_ngl::{Part, Request, Role, Turn};
use glider_vocab::{
    CompactionSource, ContextSink, DecidedTurn, DelegatedRun, MustName, RecordedTurn, newest_turns,
    tool_calls_of, user_words,
};

use crate::Context;
use crate::event::{
    BudgetStopEvent, CompactionEvent, DelegateEvent, Event, EventBody, MAX_NARRATIVE_EDGE_CHARS,
    MAX_USER_TEXT_CHARS, REPLY_TEXT_EDGE_CHARS, ReplyEvent, RequestEvent, ToolCall, ToolResult,
    ToolRunEvent, edges, into_edges, prefix,
};
use crate::graph::{Folder, SessionGraph};
use crate::own::{Match, request_roots};
use crate::summarizer::compaction;

impl ContextSink for Context {
    fn decided(&self, turn: &DecidedTurn<'_>) -> String {
        let (tool_calls, tool_results, user_text) = newest_calls_and_results(turn.request);
        let key = self.request_key(turn.request_id);
        // A CLI's compaction request is no new goal of the user's: it stays in the
        // current episode and its instruction is not kept.
        let compaction = glider_vocab::compaction_prompt(turn.request).is_some();
        let root = tool_results.is_empty() && user_text.is_some() && !compaction;
        self.log.append_body(
            crate::now_ms(),
            Some(turn.session),
            &EventBody::Request(RequestEvent {
                request: key.clone(),
                door: turn.door.as_str().into(),
                front: turn.front.as_str().into(),
                model_requested: turn.request.model.clone(),
                model: turn.model.to_owned(),
                rule: turn.rule.as_str().into(),
                reason: turn.reason.to_owned(),
                backend: turn.backend.map(|(name, _)| name.to_owned()),
                local: turn.backend.map(|(_, local)| local),
                estimated_tokens: turn.estimated_tokens,
                root,
                user_text: if root { user_text } else { None },
                tool_calls,
                tool_results,
                compaction,
            }),
        );
        key
    }

    fn must_cover(&self, request: &Request) -> Vec<MustName> {
        compaction::must_cover(&conversation_graph(request))
    }

    fn delegated(&self, run: &DelegatedRun<'_>) {
        self.log.append_body(
            crate::now_ms(),
            Some(run.session),
            &EventBody::Delegate(DelegateEvent {
                vendor: run.vendor.to_owned(),
                exit_code: run.exit_code,
                error: run.error.map(str::to_owned),
                duration_ms: run.duration_ms,
            }),
        );
    }

    fn recorded(&self, turn: RecordedTurn<'_>) {
        let record = turn.record;
        if let Some(stop) = &record.budget_stop {
            self.log.append_body(
                crate::now_ms(),
                Some(&turn.session),
                &EventBody::BudgetStop(BudgetStopEvent {
                    request: turn.key.clone(),
                    limit: stop.limit.as_str().to_owned(),
                    turns: stop.turns,
                    tool: stop.tool.clone(),
                    repeats: stop.repeats,
                    message: stop.message.clone(),
                }),
            );
        }
        for run in &record.tool_calls {
            self.log.append_body(
                crate::now_ms(),
                Some(&turn.session),
                &EventBody::ToolRun(ToolRunEvent {
                    request: turn.key.clone(),
                    turn: run.turn,
                    id: run.id.clone(),
                    tool: run.tool.clone(),
                    arguments: run.arguments.clone(),
                    ok: run.ok,
                    error: run.error.clone(),
                    result_chars: run.result_chars,
                    duration_ms: run.duration_ms,
                }),
            );
        }
        // Read before the reply's event takes the text.
        let compaction = turn
            .compaction
            .map(|source| compaction_event(source, &turn.text, record.status == Some(200)));
        let at_ms = crate::now_ms();
        self.log.append_body(
            at_ms,
            Some(&turn.session),
            &EventBody::Reply(ReplyEvent {
                request: turn.key,
                backend: record.backend.clone(),
                model: record.model_used.clone(),
                local: record.local,
                status: record.status,
                error: record.error.clone(),
                input_tokens: record.usage.input_tokens
                    + record.usage.cache_read_tokens
                    + record.usage.cache_write_tokens,
                output_tokens: record.usage.output_tokens,
                stop_reason: turn.stop_reason.map(|r| r.as_str().into()),
                tool_calls: turn
                    .tool_calls
                    .into_iter()
                    .map(|c| ToolCall::from_text(c.id, c.name, &c.arguments))
                    .collect(),
                ttft_ms: record.ttft_ms,
                total_ms: record.total_ms,
                text: (!turn.text.is_empty()).then(|| into_edges(turn.text, REPLY_TEXT_EDGE_CHARS)),
            }),
        );
        if let Some(compaction) = compaction {
            self.log.append_body(
                at_ms,
                Some(&turn.session),
                &EventBody::Compaction(CompactionEvent {
                    until_ms: at_ms,
                    ..compaction
                }),
            );
        }
    }

    fn record(&self, session: &str, request: &Request) -> Option<Arc<str>> {
        let records = self.log.records();
        if !records.holds(session) {
            return None;
        }
        let rule = if glider_vocab::is_derived(session) {
            Match::Exact
        } else {
            Match::InOrder
        };
        records.get_own(session, &request_roots(request), rule)
    }
}

/// The `compaction` event of a CLI's compaction request answered locally. Never
/// `accepted`: the local model's summary was not checked against the graph (the
/// summarizer's acceptance rule does that), and a reply built from the record adds
/// nothing the record does not hold — either way the record's narrative is not
/// replaced. The local model's summary is kept, bounded, as the narrative tried.
fn compaction_event(source: CompactionSource, text: &str, answered: bool) -> CompactionEvent {
    let (narrative, reason) = match (source, answered) {
        (_, false) => (String::new(), "the compaction request failed"),
        (CompactionSource::LocalModel, true) => (
            edges(text, MAX_NARRATIVE_EDGE_CHARS),
            "a CLI's compaction answered by the local model; not checked against the graph",
        ),
        (CompactionSource::Record, true) => (
            String::new(),
            "a CLI's compaction answered from the continuity record itself",
        ),
    };
    CompactionEvent {
        accepted: false,
        narrative,
        until_ms: 0,
        source: source.as_str().to_owned(),
        reason: Some(reason.to_owned()),
        ..CompactionEvent::default()
    }
}

/// The newest assistant turn's tool calls, the tool results after it, and the user's
/// text after it (when there is any).
fn newest_calls_and_results(request: &Request) -> (Vec<ToolCall>, Vec<ToolResult>, Option<String>) {
    let (assistant, after) = newest_turns(request);
    let (calls, results) = calls_and_results(assistant, after);
    (calls, results, user_text(after))
}

/// `assistant`'s tool calls and the tool results in the turns `after` it.
fn calls_and_results(assistant: Option<&Turn>, after: &[Turn]) -> (Vec<ToolCall>, Vec<ToolResult>) {
    let calls = tool_calls_of(assistant)
        .map(|(id, name, arguments)| {
            ToolCall::new(id.to_owned(), name.to_owned(), arguments.clone())
        })
        .collect();
    let mut results = Vec::new();
    for turn in after
        .iter()
        .filter(|t| matches!(t.role, Role::User | Role::Tool))
    {
        for part in &turn.parts {
            if let Part::ToolResult {
                call_id,
                name,
                content,
                is_error,
            } = part
            {
                let joined: Vec<&str> = glider_ngl::texts(content).collect();
                results.push(ToolResult::new(
                    call_id.clone(),
                    name.clone(),
                    *is_error,
                    &joined.join("\n"),
                ));
            }
        }
    }
    (calls, results)
}

/// `request`'s whole conversation folded as the log folds a session: a request event
/// for each assistant turn that called tools (its calls and the results after it).
/// What its compaction must name is read from this graph.
fn conversation_graph(request: &Request) -> SessionGraph {
    let mut folder = Folder::new("conversation");
    let turns = &request.turns;
    let assistants: Vec<usize> = (0..turns.len())
        .filter(|&at| turns[at].role == Role::Assistant)
        .collect();
    for (step, &at) in assistants.iter().enumerate() {
        let next = assistants.get(step + 1).copied().unwrap_or(turns.len());
        let (tool_calls, tool_results) = calls_and_results(turns.get(at), &turns[at + 1..next]);
        if tool_calls.is_empty() && tool_results.is_empty() {
            continue;
        }
        let event = Event {
            at_ms: step as u64,
            session: None,
            body: EventBody::Request(RequestEvent {
                request: format!("step-{step}"),
                tool_calls,
                tool_results,
                ..RequestEvent::default()
            }),
        };
        folder.feed_event(&event, None);
    }
    folder.into_graph()
}

/// The user's text in `turns` as the log keeps it (a request event's `user_text`):
/// the text parts of the user turns, each and all together cut to
/// [`MAX_USER_TEXT_CHARS`], joined by newlines; `None` when there is none.
pub(crate) fn user_text(turns: &[Turn]) -> Option<String> {
    let mut text = String::new();
    for turn in turns.iter().filter(|t| t.role == Role::User) {
        for part in &turn.parts {
            if let Part::Text { text: t, .. } = part {
                // The user's words, not the blocks their CLI injected.
                let words = user_words(t);
                if words.is_empty() {
                    continue;
                }
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(prefix(&words, MAX_USER_TEXT_CHARS));
            }
        }
    }
    // Cut in place: the joined text is already the event's own.
    let kept = prefix(&text, MAX_USER_TEXT_CHARS).len();
    text.truncate(kept);
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::Dialect;
    use glider_test_support::captured::captured_file;

    fn decoded(dialect: Dialect, body: &[u8]) -> Request {
        glider_dialects::codec(dialect)
            .decode_request(body)
            .expect("decodes")
    }

    fn labels(request: &Request) -> Vec<String> {
        compaction::must_cover(&conversation_graph(request))
            .into_iter()
            .map(|m| m.label)
            .collect()
    }

    #[test]
    fn a_real_compaction_must_name_the_files_its_conversation_edited() {
        // Claude Code's `/compact` after fixing a typo: it read, edited and showed it.
        let compact = captured_file("claude-code", "compact", "002-compact");
        let request = decoded(Dialect::Anthropic, &compact.body_bytes());
        assert_eq!(labels(&request), ["/workspace/notes.txt"]);
        let names = &compaction::must_cover(&conversation_graph(&request))[0].names;
        assert_eq!(names, &["/workspace/notes.txt", "notes.txt"]);
        // Codex's automatic one after `wc -l`: nothing edited, nothing failed.
        let codex = captured_file("codex", "auto-compact", "002-compact");
        assert!(labels(&decoded(Dialect::OpenAiResponses, &codex.body_bytes())).is_empty());
    }

    #[test]
    fn an_error_a_later_success_closed_is_not_required_and_an_open_one_is() {
        let call = |id: &str, name: &str, input: serde_json::Value| {
            serde_json::json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": id, "name": name, "input": input}]})
        };
        let result = |id: &str, failed: bool, text: &str| {
            serde_json::json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "is_error": failed, "content": text}]})
        };
        let body = serde_json::json!({"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": "fix the build"},
            call("1", "Bash", serde_json::json!({"command": "cargo test"})),
            result("1", true, "error[E0308]: mismatched types"),
            call("2", "Bash", serde_json::json!({"command": "cargo fmt --check"})),
            result("2", true, "Diff in src/a.rs"),
            call("3", "Edit", serde_json::json!({"file_path": "/w/src/a.rs", "old_string": "x", "new_string": "y"})),
            result("3", false, "updated"),
            call("4", "Bash", serde_json::json!({"command": "cargo fmt --check"})),
            result("4", false, ""),
            {"role": "user", "content": "Summarize the conversation so far."}
        ]});
        let request = decoded(Dialect::Anthropic, body.to_string().as_bytes());
        assert_eq!(labels(&request), ["/w/src/a.rs", "cargo test"]);
    }
}
