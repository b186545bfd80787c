//! The engine's [`ContextSink`], turning what the pipeline decided and recorded into
//! log events. It runs on the request path, so it copies only the conversation's
//! newest turns (the last assistant turn and what follows it) and queues the event
//! without waiting.

use std::sync::Arc;

use glider_ngl::{Part, Request, Role, Turn};
use glider_vocab::{
    CompactionSource, ContextSink, DecidedTurn, DelegatedRun, RecordedTurn, newest_turns,
    tool_calls_of, user_words,
};

use crate::Context;
use crate::event::{
    BudgetStopEvent, CompactionEvent, DelegateEvent, EventBody, MAX_NARRATIVE_EDGE_CHARS,
    MAX_USER_TEXT_CHARS, REPLY_TEXT_EDGE_CHARS, ReplyEvent, RequestEvent, ToolCall, ToolResult,
    ToolRunEvent, edges, into_edges, prefix,
};
use crate::own::{Match, request_roots};

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
    (calls, results, user_text(after))
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
