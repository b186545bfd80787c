//! The context hook: what the pipeline tells a context store (`glider-context`) about
//! each request, from every door, at the two moments every request passes — once it is
//! decided (its session, the request as decoded, the route) and once it is recorded
//! (the reply's tool calls, usage, stop reason, status). The engine knows nothing of
//! how it is stored; with no sink attached nothing is built or copied.

use std::sync::Arc;

use glider_ngl::stream::PartKind;
use glider_ngl::{Dialect, Part, Request, Response, Role, StopReason, StreamEvent, Turn};
use serde_json::Value;

use crate::contextkit::ContextKit;
use crate::events::RequestRecord;
use crate::pipeline::Door;
use crate::router::RouteDecision;

/// Receives every request's two moments. Both calls run on the request path: an
/// implementation must only hand the facts off (e.g. to a bounded queue), never wait.
pub trait ContextSink: Send + Sync {
    /// The request was decoded and routed (it may still go to the CLI's origin).
    fn decided(&self, turn: &DecidedTurn<'_>);
    /// The request ended: its reply was delivered, it failed, or its client went away.
    fn recorded(&self, turn: RecordedTurn<'_>);
    /// A delegate run (`/claude …`, handled before the pipeline) ended.
    fn delegated(&self, run: &DelegatedRun<'_>);
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
    /// The session key ([`crate::router::sticky::session_id`], the sticky rule's key).
    pub session: &'a str,
    pub door: Door,
    pub front: Dialect,
    /// The request as decoded (routing flag not yet stripped from the text).
    pub request: &'a Request,
    /// The model after `model_aliases`.
    pub model: &'a str,
    pub decision: &'a RouteDecision,
}

/// A request at its end.
pub struct RecordedTurn<'a> {
    pub request_id: u64,
    pub session: &'a str,
    /// The bus record: backend, model, usage, status, error, timings.
    pub record: &'a RequestRecord,
    /// The tool calls of the reply, in order, as far as the reply was seen.
    pub tool_calls: Vec<ReplyToolCall>,
    /// Why generation stopped, when the reply said so.
    pub stop_reason: Option<StopReason>,
}

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
    turn.map_or(&[][..], |t| &t.parts)
        .iter()
        .filter_map(|part| match part {
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.as_str(), name.as_str(), arguments)),
            _ => None,
        })
}

/// Collects a reply's tool calls and stop reason for the sink and for the session's
/// spend ([`ContextKit`]) as the reply passes the request's tracker (translated events,
/// a same-dialect stream decoded as it is forwarded, or a whole response).
pub(crate) struct ReplyCapture {
    sink: Option<Arc<dyn ContextSink>>,
    /// The kit and the episode (family) the request was admitted to.
    kit: Option<(Arc<ContextKit>, u64)>,
    session: String,
    /// Stream part index → position in `calls`, for argument fragments.
    open: Vec<(usize, usize)>,
    calls: Vec<ReplyToolCall>,
    stop_reason: Option<StopReason>,
}

impl ReplyCapture {
    pub(crate) fn new(sink: Option<Arc<dyn ContextSink>>, session: String) -> Self {
        ReplyCapture {
            sink,
            kit: None,
            session,
            open: Vec::new(),
            calls: Vec::new(),
            stop_reason: None,
        }
    }

    pub(crate) fn event(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::PartStart {
                index,
                kind: PartKind::ToolCall { id, name },
            } => {
                self.open.push((*index, self.calls.len()));
                self.calls.push(ReplyToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                });
            }
            StreamEvent::ToolArgsDelta { index, json } => {
                if let Some(&(_, at)) = self.open.iter().rev().find(|(i, _)| i == index)
                    && let Some(call) = self.calls.get_mut(at)
                {
                    call.arguments.push_str(json);
                }
            }
            StreamEvent::Finish { stop_reason, .. } => self.stop_reason = Some(*stop_reason),
            _ => {}
        }
    }

    pub(crate) fn response(&mut self, response: &Response) {
        self.stop_reason = Some(response.stop_reason);
        for part in &response.parts {
            if let Part::ToolCall {
                id,
                name,
                arguments,
            } = part
            {
                self.calls.push(ReplyToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.to_string(),
                });
            }
        }
    }

    /// Also count the reply in `kit`'s episode `family` of this session.
    pub(crate) fn count_in(&mut self, kit: Arc<ContextKit>, family: u64) {
        self.kit = Some((kit, family));
    }

    pub(crate) fn session(&self) -> &str {
        &self.session
    }

    /// Hand what was seen to the kit and the sink with the request's final record.
    pub(crate) fn finish(self, record: &RequestRecord) {
        if let Some((kit, family)) = &self.kit {
            kit.finished(&self.session, *family, record, &self.calls);
        }
        if let Some(sink) = &self.sink {
            sink.recorded(RecordedTurn {
                request_id: record.id,
                session: &self.session,
                record,
                tool_calls: self.calls,
                stop_reason: self.stop_reason,
            });
        }
    }
}
