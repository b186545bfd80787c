//! The engine's [`ContextSink`], turning what the pipeline decided and recorded into
//! log events. It runs on the request path, so it copies only the conversation's
//! newest turns (the last assistant turn and what follows it) and queues the event
//! without waiting.

use glider_engine::{
    ContextSink, DecidedTurn, DelegatedRun, RecordedTurn, newest_turns, tool_calls_of,
};
use glider_ngl::{Part, Request, Role};

use crate::Context;
use crate::event::{
    BudgetStopEvent, DelegateEvent, Event, EventBody, MAX_USER_TEXT_CHARS, ReplyEvent,
    RequestEvent, ToolCall, ToolResult, prefix,
};

impl ContextSink for Context {
    fn decided(&self, turn: &DecidedTurn<'_>) {
        let (tool_calls, tool_results, user_text) = newest_calls_and_results(turn.request);
        let first = turn.decision.candidates.first();
        let root = tool_results.is_empty() && user_text.is_some();
        let body = RequestEvent {
            request: self.request_key(turn.request_id),
            door: turn.door.as_str().to_owned(),
            front: turn.front.as_str().to_owned(),
            model_requested: turn.request.model.clone(),
            model: turn.model.to_owned(),
            rule: turn.decision.rule.as_str().to_owned(),
            reason: turn.decision.reason.clone(),
            backend: first.map(|c| c.backend.name().to_owned()),
            local: first.map(|c| c.backend.kind().is_local()),
            estimated_tokens: turn.decision.estimated_tokens,
            root,
            user_text: if root { user_text } else { None },
            tool_calls,
            tool_results,
        };
        self.log.append(Event {
            at_ms: crate::now_ms(),
            session: Some(turn.session.to_owned()),
            body: EventBody::Request(body),
        });
    }

    fn delegated(&self, run: &DelegatedRun<'_>) {
        self.log.append(Event {
            at_ms: crate::now_ms(),
            session: Some(run.session.to_owned()),
            body: EventBody::Delegate(DelegateEvent {
                vendor: run.vendor.to_owned(),
                exit_code: run.exit_code,
                error: run.error.map(str::to_owned),
                duration_ms: run.duration_ms,
            }),
        });
    }

    fn recorded(&self, turn: RecordedTurn<'_>) {
        let record = turn.record;
        if let Some(stop) = &record.budget_stop {
            self.log.append(Event {
                at_ms: crate::now_ms(),
                session: Some(turn.session.to_owned()),
                body: EventBody::BudgetStop(BudgetStopEvent {
                    request: self.request_key(turn.request_id),
                    limit: stop.limit.as_str().to_owned(),
                    turns: stop.turns,
                    tool: stop.tool.clone(),
                    repeats: stop.repeats,
                    message: stop.message.clone(),
                }),
            });
        }
        let body = ReplyEvent {
            request: self.request_key(turn.request_id),
            backend: record.backend.clone(),
            model: record.model_used.clone(),
            local: record.local,
            status: record.status,
            error: record.error.clone(),
            input_tokens: record.usage.input_tokens
                + record.usage.cache_read_tokens
                + record.usage.cache_write_tokens,
            output_tokens: record.usage.output_tokens,
            stop_reason: turn.stop_reason.map(|r| {
                serde_json::to_value(r)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            }),
            tool_calls: turn
                .tool_calls
                .into_iter()
                .map(|c| ToolCall::from_text(c.id, c.name, &c.arguments))
                .collect(),
            ttft_ms: record.ttft_ms,
            total_ms: record.total_ms,
        };
        self.log.append(Event {
            at_ms: crate::now_ms(),
            session: Some(turn.session.to_owned()),
            body: EventBody::Reply(body),
        });
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
    let mut text = String::new();
    for turn in after {
        match turn.role {
            Role::User | Role::Tool => {
                for part in &turn.parts {
                    match part {
                        Part::ToolResult {
                            call_id,
                            name,
                            content,
                            is_error,
                        } => {
                            let joined: Vec<&str> = content
                                .iter()
                                .filter_map(|p| match p {
                                    Part::Text { text, .. } => Some(text.as_str()),
                                    _ => None,
                                })
                                .collect();
                            results.push(ToolResult::new(
                                call_id.clone(),
                                name.clone(),
                                *is_error,
                                &joined.join("\n"),
                            ));
                        }
                        Part::Text { text: t, .. } if turn.role == Role::User => {
                            if !text.is_empty() {
                                text.push('\n');
                            }
                            text.push_str(prefix(t, MAX_USER_TEXT_CHARS));
                        }
                        _ => {}
                    }
                }
            }
            Role::System | Role::Assistant => {}
        }
    }
    let text = (!text.is_empty()).then(|| prefix(&text, MAX_USER_TEXT_CHARS).to_owned());
    (calls, results, text)
}
