//! How a local model's reply ends on its way to the client, whole or streamed: a reply
//! cut at Glider's own output cap ends as a finished turn with a note (the client never
//! asked for that limit); a reply cut inside a tool call's arguments drops the
//! incomplete call and says so, ending at `max_tokens` (never a finished turn with a
//! broken call); and a JSON schema that [`crate::fit`] sent as a forced tool (a wire
//! with no schema field) comes back as the text reply the client asked for.
//!
//! A note goes at the end of the reply's last text block, never in a block of its own
//! after the answer: `claude -p` and `codex exec` print only a reply's last text block,
//! so a note block of its own would be all the user saw. A reply with no text gets the
//! note as its text; one whose text came before a tool call says it by its stop reason
//! and the record alone.

use std::collections::{BTreeMap, BTreeSet};

use glider_ngl::stream::{PartKind, arguments_text};
use glider_ngl::{Part, Response, StopReason, StreamEvent, Usage};

use crate::fit::{OutputCap, SCHEMA_TOOL};

/// What a local candidate's reply may need rewritten at its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalEnding {
    /// The output cap Glider set in place of the client's higher (or missing) one.
    pub cap: Option<OutputCap>,
    /// The request's JSON schema went out as the forced tool [`SCHEMA_TOOL`].
    pub schema_tool: bool,
}

impl LocalEnding {
    /// Whether every reply must be decoded (never forwarded as raw bytes), because its
    /// ending or its content may change whatever the backend's dialect.
    pub fn rewrites(&self) -> bool {
        self.cap.is_some() || self.schema_tool
    }
}

/// The visible note a reply cut at Glider's cap ends with.
fn cap_note(cap: OutputCap) -> String {
    format!(
        "\n\n[glider: reply cut at the local output cap of {} tokens ({})]",
        cap.tokens, cap.setting
    )
}

/// The record's line for a reply cut at Glider's cap.
fn cap_record(cap: OutputCap) -> String {
    format!(
        "reply cut at the output cap of {} tokens: reported as a finished turn with a note",
        cap.tokens
    )
}

/// Where a reply was cut, in the words of a note or a record line.
fn cut_at(cap: Option<OutputCap>) -> String {
    match cap {
        Some(cap) => format!(
            "the local output cap of {} tokens ({})",
            cap.tokens, cap.setting
        ),
        None => "max_tokens".to_owned(),
    }
}

fn call_names(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The visible note a reply cut inside tool calls ends with.
fn cut_call_note(cap: Option<OutputCap>, dropped: &[String]) -> String {
    format!(
        "\n\n[glider: reply cut at {} inside a call to {}: the incomplete call was dropped]",
        cut_at(cap),
        call_names(dropped)
    )
}

fn cut_call_record(cap: Option<OutputCap>, dropped: &[String]) -> String {
    format!(
        "reply cut at {} inside a call to {}: the incomplete call was dropped, reported as max_tokens with a note",
        cut_at(cap),
        call_names(dropped)
    )
}

/// Whether streamed arguments are a whole JSON object (empty: a call without any).
fn complete_arguments(json: &str) -> bool {
    json.trim().is_empty()
        || serde_json::from_str::<serde_json::Value>(json).is_ok_and(|v| v.is_object())
}

/// The record's line for text a model wrote beside its schema tool's answer.
const TEXT_BESIDE_ANSWER: &str =
    "text beside the answer to the schema tool dropped (the reply is that answer's JSON)";

/// A whole reply, ended as [`LocalEnding`] says; returns the record's lines for what
/// was rewritten.
pub fn end_whole(response: &mut Response, ending: LocalEnding) -> Vec<String> {
    let mut lines = Vec::new();
    let answer = ending
        .schema_tool
        .then(|| {
            response
                .parts
                .iter()
                .position(|part| matches!(part, Part::ToolCall { name, .. } if name == SCHEMA_TOOL))
        })
        .flatten();
    if let Some(at) = answer {
        // The answer is the call's JSON: text the model wrote beside it is not.
        let mut answer_complete = false;
        if let Part::ToolCall { arguments, .. } = &response.parts[at] {
            answer_complete = arguments.is_object();
            response.parts[at] = Part::text(arguments_text(arguments));
        }
        let before = response.parts.len();
        let mut index = 0;
        response.parts.retain(|part| {
            index += 1;
            index - 1 == at || !matches!(part, Part::Text { .. })
        });
        if response.parts.len() < before {
            lines.push(TEXT_BESIDE_ANSWER.to_owned());
        }
        let calls_left = glider_ngl::tool_calls(&response.parts).next().is_some();
        if answer_complete
            && !calls_left
            && matches!(
                response.stop_reason,
                StopReason::ToolUse | StopReason::MaxTokens
            )
        {
            // A whole answer: whatever the model went on to write was not delivered.
            response.stop_reason = StopReason::EndTurn;
        }
    }
    if response.stop_reason != StopReason::MaxTokens {
        return lines;
    }
    let mut dropped = Vec::new();
    response.parts.retain(|part| match part {
        Part::ToolCall {
            name, arguments, ..
        } if !arguments.is_object() => {
            dropped.push(name.clone());
            false
        }
        _ => true,
    });
    if !dropped.is_empty() {
        append_note(response, &cut_call_note(ending.cap, &dropped));
        lines.push(cut_call_record(ending.cap, &dropped));
        return lines;
    }
    let Some(cap) = ending.cap else {
        return lines;
    };
    // Stopped at Glider's own cap: reported as a finished turn, since the client did
    // not ask for the limit and would read `max_tokens` as its own (Claude Code then
    // retries with a larger one).
    response.stop_reason = StopReason::EndTurn;
    append_note(response, &cap_note(cap));
    lines.push(cap_record(cap));
    lines
}

/// Where a note goes (see the module's doc): the last part if it is text, a text part
/// of its own if the reply has no text, nowhere if text came before the last part.
fn append_note(response: &mut Response, note: &str) {
    let has_text = response
        .parts
        .iter()
        .any(|part| matches!(part, Part::Text { .. }));
    match response.parts.last_mut() {
        Some(Part::Text { text, .. }) => text.push_str(note),
        _ if !has_text => response.parts.push(Part::text(note.trim_start())),
        _ => {}
    }
}

/// What [`EndingStream`] hands on: an event for the client, or a line for the record.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    Event(StreamEvent),
    Record(String),
}

/// A tool call held back until its arguments are known to be whole.
#[derive(Debug)]
struct HeldCall {
    name: String,
    /// The arguments streamed so far, until the call's part stops.
    arguments: String,
    /// Set at the call's part stop: whether its arguments were a whole JSON object
    /// (decided once there, not re-parsed at every later part stop).
    whole: Option<bool>,
}

impl HeldCall {
    fn complete(&self) -> bool {
        self.whole == Some(true)
    }
}

/// [`end_whole`] for a stream, one event at a time. A tool call's events are held
/// until its arguments are a whole JSON object (so a call cut by the end of the reply
/// never reaches the client), and everything after a held call waits behind it, in
/// order. Part indices are renumbered so that the client's stay contiguous when a call
/// is dropped.
#[derive(Debug)]
pub struct EndingStream {
    ending: LocalEnding,
    /// The client's index of each part passed on, by the backend's index.
    client_index: BTreeMap<usize, usize>,
    next_client_index: usize,
    /// Parts passed on and not stopped yet (backend indices).
    open: BTreeSet<usize>,
    /// The backend's index of the schema tool's call, passed on as text, and its JSON.
    schema_part: Option<usize>,
    schema_json: String,
    /// Text parts before the schema tool's call (held: they are dropped once it comes).
    text_before_answer: BTreeSet<usize>,
    /// Parts never handed on (text beside the schema tool's answer).
    dropped_parts: BTreeSet<usize>,
    calls: BTreeMap<usize, HeldCall>,
    held: Vec<StreamEvent>,
    /// Whether any tool call other than the schema tool's reached the client.
    passed_a_call: bool,
    /// The client's index of the last part handed on, if it is a text part: a note
    /// at the end goes into it.
    last_text: Option<usize>,
    /// Whether any text part was handed on.
    passed_text: bool,
    /// The stop of the last text part, held until another event is handed on (so a
    /// note can still go into it if the reply ends there).
    text_stop: Option<usize>,
}

impl EndingStream {
    pub fn new(ending: LocalEnding) -> Self {
        EndingStream {
            ending,
            client_index: BTreeMap::new(),
            next_client_index: 0,
            open: BTreeSet::new(),
            schema_part: None,
            schema_json: String::new(),
            text_before_answer: BTreeSet::new(),
            dropped_parts: BTreeSet::new(),
            calls: BTreeMap::new(),
            held: Vec::new(),
            passed_a_call: false,
            last_text: None,
            passed_text: false,
            text_stop: None,
        }
    }

    /// What to hand on in place of `event`.
    pub fn event(&mut self, mut event: StreamEvent) -> Vec<Ended> {
        let mut out = Vec::new();
        if event_index_mut(&mut event).is_some_and(|i| self.dropped_parts.contains(i)) {
            return out;
        }
        match event {
            StreamEvent::PartStart {
                index,
                kind: PartKind::Text,
            } if self.ending.schema_tool => {
                if self.schema_part.is_some() {
                    self.dropped_parts.insert(index);
                } else {
                    self.text_before_answer.insert(index);
                    self.held.push(StreamEvent::PartStart {
                        index,
                        kind: PartKind::Text,
                    });
                }
            }
            StreamEvent::PartStart {
                index,
                kind: PartKind::ToolCall { id, name },
            } => {
                if self.ending.schema_tool && self.schema_part.is_none() && name == SCHEMA_TOOL {
                    self.schema_part = Some(index);
                    let before = std::mem::take(&mut self.text_before_answer);
                    if !before.is_empty() {
                        self.held.retain_mut(|e| {
                            !event_index_mut(e).is_some_and(|i| before.contains(i))
                        });
                        self.dropped_parts.extend(before);
                        out.push(Ended::Record(TEXT_BESIDE_ANSWER.to_owned()));
                    }
                    if self.calls.values().all(HeldCall::complete) {
                        self.flush(&BTreeSet::new(), &mut out);
                    }
                    self.pass_or_hold(
                        StreamEvent::PartStart {
                            index,
                            kind: PartKind::Text,
                        },
                        &mut out,
                    );
                } else {
                    self.calls.insert(
                        index,
                        HeldCall {
                            name: name.clone(),
                            arguments: String::new(),
                            whole: None,
                        },
                    );
                    self.held.push(StreamEvent::PartStart {
                        index,
                        kind: PartKind::ToolCall { id, name },
                    });
                }
            }
            StreamEvent::ToolArgsDelta { index, json } if self.schema_part == Some(index) => {
                self.schema_json.push_str(&json);
                self.pass_or_hold(StreamEvent::TextDelta { index, text: json }, &mut out);
            }
            StreamEvent::ToolArgsDelta { index, json } if self.calls.contains_key(&index) => {
                if let Some(call) = self.calls.get_mut(&index) {
                    call.arguments.push_str(&json);
                }
                self.held.push(StreamEvent::ToolArgsDelta { index, json });
            }
            StreamEvent::PartStop { index } if self.calls.contains_key(&index) => {
                if let Some(call) = self.calls.get_mut(&index) {
                    call.whole = Some(complete_arguments(&std::mem::take(&mut call.arguments)));
                }
                self.held.push(StreamEvent::PartStop { index });
                if !self.awaiting_answer() && self.calls.values().all(HeldCall::complete) {
                    self.flush(&BTreeSet::new(), &mut out);
                }
            }
            StreamEvent::Finish {
                stop_reason,
                stop_sequence,
                usage,
            } => self.finish(stop_reason, stop_sequence, usage, &mut out),
            StreamEvent::Error { error } => {
                // Whatever call is still open was cut by the failure: never shown.
                let cut = self.incomplete_calls();
                self.flush(&cut, &mut out);
                self.release_text_stop(&mut out);
                out.push(Ended::Event(StreamEvent::Error { error }));
            }
            other => self.pass_or_hold(other, &mut out),
        }
        out
    }

    /// The schema tool is in play and its call has not come yet: text may still be
    /// only what the model wrote before its answer.
    fn awaiting_answer(&self) -> bool {
        self.ending.schema_tool && self.schema_part.is_none()
    }

    /// Hand `event` on, or hold it behind what is held (or while the answer is awaited).
    fn pass_or_hold(&mut self, event: StreamEvent, out: &mut Vec<Ended>) {
        if self.held.is_empty() && !self.awaiting_answer() {
            self.pass(event, out);
        } else {
            self.held.push(event);
        }
    }

    fn incomplete_calls(&self) -> BTreeSet<usize> {
        self.calls
            .iter()
            .filter(|(_, call)| !call.complete())
            .map(|(index, _)| *index)
            .collect()
    }

    fn finish(
        &mut self,
        stop_reason: StopReason,
        stop_sequence: Option<String>,
        usage: Usage,
        out: &mut Vec<Ended>,
    ) {
        let finish = |stop_reason| {
            Ended::Event(StreamEvent::Finish {
                stop_reason,
                stop_sequence: None,
                usage,
            })
        };
        let cut = if stop_reason == StopReason::MaxTokens {
            self.incomplete_calls()
        } else {
            BTreeSet::new()
        };
        let dropped: Vec<String> = cut
            .iter()
            .filter_map(|index| self.calls.get(index).map(|c| c.name.clone()))
            .collect();
        self.flush(&cut, out);
        let note_into = self.last_text;
        if note_into.is_none() {
            self.release_text_stop(out);
        }
        let answered = self.schema_part.is_some()
            && complete_arguments(&self.schema_json)
            && !self.passed_a_call
            && cut.is_empty();
        if answered && matches!(stop_reason, StopReason::ToolUse | StopReason::MaxTokens) {
            // A whole answer: whatever the model went on to write was not delivered.
            self.release_text_stop(out);
            out.push(finish(StopReason::EndTurn));
            return;
        }
        if stop_reason != StopReason::MaxTokens {
            self.release_text_stop(out);
            out.push(Ended::Event(StreamEvent::Finish {
                stop_reason,
                stop_sequence,
                usage,
            }));
            return;
        }
        let (note, line, stop_reason) = if !dropped.is_empty() {
            (
                cut_call_note(self.ending.cap, &dropped),
                cut_call_record(self.ending.cap, &dropped),
                StopReason::MaxTokens,
            )
        } else if let Some(cap) = self.ending.cap {
            (cap_note(cap), cap_record(cap), StopReason::EndTurn)
        } else {
            // Cut at the client's own limit, between parts: its dialect's own ending.
            self.release_text_stop(out);
            out.push(finish(StopReason::MaxTokens));
            return;
        };
        // The note ends the last text part (open, or its stop held back for this).
        if let Some(index) = note_into {
            out.push(Ended::Event(StreamEvent::TextDelta {
                index,
                text: note.clone(),
            }));
        }
        for index in std::mem::take(&mut self.open) {
            let index = self.client_index.get(&index).copied().unwrap_or(index);
            out.push(Ended::Event(StreamEvent::PartStop { index }));
        }
        self.release_text_stop(out);
        if note_into.is_none() && !self.passed_text {
            // No text at all: the note is the reply's text.
            let index = self.next_client_index;
            self.next_client_index += 1;
            out.extend([
                Ended::Event(StreamEvent::PartStart {
                    index,
                    kind: PartKind::Text,
                }),
                Ended::Event(StreamEvent::TextDelta {
                    index,
                    text: note.trim_start().to_owned(),
                }),
                Ended::Event(StreamEvent::PartStop { index }),
            ]);
        }
        out.extend([finish(stop_reason), Ended::Record(line)]);
    }

    /// Hand on the held stop of the last text part, if any.
    fn release_text_stop(&mut self, out: &mut Vec<Ended>) {
        if let Some(index) = self.text_stop.take() {
            if self.last_text == Some(index) {
                // Closed: a note can no longer go into it.
                self.last_text = None;
            }
            out.push(Ended::Event(StreamEvent::PartStop { index }));
        }
    }

    /// Hand on every held event except those of the `dropped` calls.
    fn flush(&mut self, dropped: &BTreeSet<usize>, out: &mut Vec<Ended>) {
        for mut event in std::mem::take(&mut self.held) {
            if event_index_mut(&mut event).is_some_and(|i| dropped.contains(i)) {
                continue;
            }
            if matches!(
                event,
                StreamEvent::PartStart {
                    kind: PartKind::ToolCall { .. },
                    ..
                }
            ) {
                self.passed_a_call = true;
            }
            self.pass(event, out);
        }
        self.calls.clear();
    }

    /// Hand `event` on with the client's part index; the stop of a text part that is
    /// the last part so far is held (see [`EndingStream::text_stop`]).
    fn pass(&mut self, mut event: StreamEvent, out: &mut Vec<Ended>) {
        if let StreamEvent::PartStart { index, kind } = &event {
            let client = self.next_client_index;
            self.client_index.insert(*index, client);
            self.open.insert(*index);
            self.next_client_index += 1;
            let text = matches!(kind, PartKind::Text);
            self.last_text = text.then_some(client);
            self.passed_text |= text;
        }
        if let StreamEvent::PartStop { index } = &event {
            self.open.remove(index);
        }
        if let Some(index) = event_index_mut(&mut event) {
            *index = self.client_index.get(index).copied().unwrap_or(*index);
        }
        if let StreamEvent::PartStop { index } = event
            && self.last_text == Some(index)
        {
            self.text_stop = Some(index);
            return;
        }
        self.release_text_stop(out);
        out.push(Ended::Event(event));
    }
}

/// The part an event belongs to, if any.
fn event_index_mut(event: &mut StreamEvent) -> Option<&mut usize> {
    match event {
        StreamEvent::PartStart { index, .. }
        | StreamEvent::TextDelta { index, .. }
        | StreamEvent::ThinkingDelta { index, .. }
        | StreamEvent::ThinkingSignature { index, .. }
        | StreamEvent::ToolArgsDelta { index, .. }
        | StreamEvent::PartStop { index } => Some(index),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use glider_ngl::ResponseBuilder;
    use serde_json::json;

    use super::*;

    const CAP: OutputCap = OutputCap {
        tokens: 8,
        setting: "fit.max_output_tokens",
    };

    fn capped() -> LocalEnding {
        LocalEnding {
            cap: Some(CAP),
            schema_tool: false,
        }
    }

    fn finish(stop_reason: StopReason) -> StreamEvent {
        StreamEvent::Finish {
            stop_reason,
            stop_sequence: None,
            usage: Default::default(),
        }
    }

    fn response(parts: Vec<Part>, stop_reason: StopReason) -> Response {
        Response {
            id: "r".into(),
            model: "m".into(),
            parts,
            stop_reason,
            stop_sequence: None,
            usage: Default::default(),
        }
    }

    fn call(name: &str, arguments: serde_json::Value) -> Part {
        Part::ToolCall {
            id: format!("id-{name}"),
            name: name.into(),
            arguments,
        }
    }

    /// Run `events` through an [`EndingStream`]: the client's events, the record lines.
    fn run(ending: LocalEnding, events: Vec<StreamEvent>) -> (Vec<StreamEvent>, Vec<String>) {
        let mut ender = EndingStream::new(ending);
        let mut out = Vec::new();
        let mut lines = Vec::new();
        for ended in events.into_iter().flat_map(|e| ender.event(e)) {
            match ended {
                Ended::Event(event) => out.push(event),
                Ended::Record(line) => lines.push(line),
            }
        }
        (out, lines)
    }

    fn built(events: &[StreamEvent]) -> Response {
        let mut builder = ResponseBuilder::new();
        events.iter().for_each(|e| builder.push(e));
        builder.finish().expect("a complete stream")
    }

    /// A text part's start and its one delta.
    fn text_part(index: usize, text: &str) -> [StreamEvent; 2] {
        [
            StreamEvent::PartStart {
                index,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index,
                text: text.into(),
            },
        ]
    }

    fn text_then_call(args: &[&str], stop: StopReason) -> Vec<StreamEvent> {
        let mut events = text_part(0, "Looking.").to_vec();
        events.extend([
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::ToolCall {
                    id: "c1".into(),
                    name: "Read".into(),
                },
            },
        ]);
        events.extend(args.iter().map(|json| StreamEvent::ToolArgsDelta {
            index: 1,
            json: (*json).into(),
        }));
        events.extend([StreamEvent::PartStop { index: 1 }, finish(stop)]);
        events
    }

    #[test]
    fn a_whole_reply_cut_at_glider_s_cap_ends_the_turn_with_a_note() {
        let mut cut = response(vec![Part::text("Once upon")], StopReason::MaxTokens);
        assert_eq!(end_whole(&mut cut, capped()), [cap_record(CAP)]);
        assert_eq!(cut.stop_reason, StopReason::EndTurn);
        assert_eq!(
            cut.plain_text(),
            "Once upon\n\n[glider: reply cut at the local output cap of 8 tokens (fit.max_output_tokens)]"
        );
        // Text before a whole call: a note block after the call would be the last text
        // block, printed in place of the answer; the record says it instead.
        let mut after_call = response(
            vec![
                Part::text("Looking."),
                call("Read", json!({"path": "/tmp"})),
            ],
            StopReason::MaxTokens,
        );
        assert_eq!(end_whole(&mut after_call, capped()), [cap_record(CAP)]);
        assert_eq!(after_call.parts.len(), 2);
        assert_eq!(after_call.plain_text(), "Looking.");
        let mut finished = response(vec![Part::text("Once upon")], StopReason::EndTurn);
        let before = finished.clone();
        assert!(
            end_whole(&mut finished, capped()).is_empty(),
            "only a cut reply changes"
        );
        assert_eq!(finished, before);
    }

    #[test]
    fn a_streamed_reply_cut_at_glider_s_cap_gets_the_note_at_the_end_of_its_last_text() {
        let noted = "Once\n\n[glider: reply cut at the local output cap of 8 tokens (fit.max_output_tokens)]";
        let open = text_part(0, "Once").to_vec();
        let mut closed = open.clone();
        closed.push(StreamEvent::PartStop { index: 0 });
        // Open or closed: the cut can come before the backend closes the part.
        for mut events in [open, closed] {
            events.push(finish(StopReason::MaxTokens));
            let (out, lines) = run(capped(), events);
            let reply = built(&out);
            assert_eq!(reply.stop_reason, StopReason::EndTurn);
            // One text block: what `claude -p` and `codex exec` print is the answer.
            assert_eq!(reply.parts, [Part::text(noted)], "{out:?}");
            assert_eq!(
                out.iter()
                    .filter(|e| matches!(e, StreamEvent::PartStop { .. }))
                    .count(),
                1,
                "{out:?}"
            );
            assert_eq!(lines, [cap_record(CAP)]);
        }
        // A reply with no text at all: the note is its text.
        let (out, _) = run(capped(), vec![finish(StopReason::MaxTokens)]);
        assert_eq!(
            built(&out).plain_text(),
            "[glider: reply cut at the local output cap of 8 tokens (fit.max_output_tokens)]"
        );
        let (ended, lines) = run(capped(), vec![finish(StopReason::EndTurn)]);
        assert_eq!(
            ended,
            [finish(StopReason::EndTurn)],
            "a reply that ended by itself passes unchanged"
        );
        assert!(lines.is_empty());
    }

    #[test]
    fn a_stream_cut_inside_a_call_drops_it_and_ends_at_max_tokens_with_a_note() {
        for ending in [capped(), LocalEnding::default()] {
            let (out, lines) = run(
                ending,
                text_then_call(&["{\"path\": ", "\"/tm"], StopReason::MaxTokens),
            );
            assert!(
                !out.iter()
                    .any(|e| matches!(e, StreamEvent::ToolArgsDelta { .. })),
                "the partial call never reaches the client: {out:?}"
            );
            let reply = built(&out);
            assert_eq!(reply.stop_reason, StopReason::MaxTokens, "{ending:?}");
            assert!(glider_ngl::tool_calls(&reply.parts).next().is_none());
            let text = reply.plain_text();
            assert!(text.starts_with("Looking."), "{text}");
            assert!(
                text.contains("inside a call to `Read`: the incomplete call was dropped]"),
                "{text}"
            );
            // The note ends the text before the dropped call: one text block.
            assert_eq!(reply.parts.len(), 1, "{out:?}");
            assert!(
                !out.iter()
                    .any(|e| matches!(e, StreamEvent::PartStart { index: 1, .. })),
                "{out:?}"
            );
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(lines[0].contains("reported as max_tokens"), "{lines:?}");
        }
        let (out, _) = run(
            LocalEnding::default(),
            text_then_call(&["{\"path\": ", "\"/tm"], StopReason::MaxTokens),
        );
        assert!(
            built(&out)
                .plain_text()
                .contains("reply cut at max_tokens inside")
        );
    }

    #[test]
    fn a_whole_call_before_the_cut_is_kept_and_a_stream_error_drops_an_open_call() {
        let (out, lines) = run(
            capped(),
            text_then_call(&["{\"path\": ", "\"/tmp\"}"], StopReason::MaxTokens),
        );
        let reply = built(&out);
        assert_eq!(glider_ngl::tool_calls(&reply.parts).count(), 1, "{out:?}");
        assert_eq!(
            reply.stop_reason,
            StopReason::EndTurn,
            "cut after the call: Glider's cap"
        );
        assert_eq!(lines, [cap_record(CAP)]);
        let mut events = text_then_call(&["{\"pa"], StopReason::ToolUse);
        events.truncate(events.len() - 2);
        events.push(StreamEvent::Error {
            error: glider_ngl::ApiError::new(glider_ngl::ErrorKind::BadGateway, "cut"),
        });
        let (out, _) = run(LocalEnding::default(), events);
        assert!(
            !out.iter().any(|e| matches!(
                e,
                StreamEvent::PartStart {
                    kind: PartKind::ToolCall { .. },
                    ..
                }
            )),
            "{out:?}"
        );
        assert!(matches!(out.last(), Some(StreamEvent::Error { .. })));
    }

    #[test]
    fn a_whole_reply_cut_inside_a_call_drops_it() {
        let mut reply = response(
            vec![
                Part::text("Looking."),
                call("Glob", json!({"pattern": "*.rs"})),
                call("Read", json!("{\"path\": \"/tm")),
            ],
            StopReason::MaxTokens,
        );
        let lines = end_whole(&mut reply, capped());
        assert!(lines[0].contains("inside a call to `Read`"), "{lines:?}");
        assert_eq!(reply.stop_reason, StopReason::MaxTokens);
        let names: Vec<&str> = glider_ngl::tool_calls(&reply.parts)
            .map(|(_, n, _)| n)
            .collect();
        assert_eq!(names, ["Glob"], "the whole call before the cut is kept");
        // The last block is a call: a note block after it would be the last text block
        // a CLI prints in place of "Looking."; max_tokens and the record say it.
        assert_eq!(reply.plain_text(), "Looking.");
    }

    #[test]
    fn the_schema_tool_s_call_comes_back_as_the_text_reply() {
        let schema = LocalEnding {
            cap: None,
            schema_tool: true,
        };
        // llama-server lets text come before a forced call, and may go on to the cap.
        let mut whole = response(
            vec![
                Part::text("You may call these tools."),
                call(SCHEMA_TOOL, json!({"title": "Sorting lists"})),
            ],
            StopReason::MaxTokens,
        );
        assert_eq!(end_whole(&mut whole, schema), [TEXT_BESIDE_ANSWER]);
        assert_eq!(whole.stop_reason, StopReason::EndTurn);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&whole.plain_text()).expect("JSON text"),
            json!({"title": "Sorting lists"})
        );
        let mut events = text_part(0, "You may call these tools.").to_vec();
        events.extend([
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::ToolCall {
                    id: "c".into(),
                    name: SCHEMA_TOOL.into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 1,
                json: "{\"title\": ".into(),
            },
            StreamEvent::ToolArgsDelta {
                index: 1,
                json: "\"Sorting lists\"}".into(),
            },
            StreamEvent::PartStop { index: 1 },
            finish(StopReason::ToolUse),
        ]);
        let (out, lines) = run(schema, events);
        assert_eq!(lines, [TEXT_BESIDE_ANSWER]);
        assert!(
            out.contains(&StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Text
            }),
            "{out:?}"
        );
        let streamed = built(&out);
        assert_eq!(streamed.stop_reason, StopReason::EndTurn);
        assert_eq!(streamed.plain_text(), "{\"title\": \"Sorting lists\"}");
        // Without the schema tool in play, a call of that name is the client's own.
        let mut other = response(vec![call(SCHEMA_TOOL, json!({}))], StopReason::ToolUse);
        end_whole(&mut other, LocalEnding::default());
        assert_eq!(glider_ngl::tool_calls(&other.parts).count(), 1);
    }
}
