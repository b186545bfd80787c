//! Responses API typed SSE streams (`response.created` … `response.completed`): the backend
//! decoder and the client encoder.
//!
//! One file, past 600 lines, on purpose: the decoder and the encoder are the two halves
//! of one event grammar (each item's `added` → deltas → `done`), kept together so a
//! change to the grammar is made on both sides at once.

use glider_ngl::stream::{PartKind, parse_arguments};
use glider_ngl::{ApiError, Part, StopReason, StreamEvent, Usage};
use serde::Serialize;
use serde_json::{Value, json};

use super::error::{error_from_value, error_labels, failure_code};
use super::items::{
    CallKind, HOSTED_CALLS, TYPED_CALLS, call_item, is_typed_call, item_id, item_prefix,
    message_item, qualified_name, reasoning_item, response_id, starts_like_object,
};
use super::request::reasoning_part;
use super::response::{
    ResponseShape, decode_usage, incomplete_stop, output_item_parts, status_of, typed_arguments,
};
use crate::framing::{SseParser, finished, refused};
use crate::json::{bad_gateway, str_field};
use crate::openai_chat::now_unix;
use crate::{StreamDecoder, StreamEncoder};

#[derive(Debug, Clone, Copy, PartialEq)]
enum OpenKind {
    Text,
    Thinking,
    Tool,
}

#[derive(Debug)]
struct OpenPart {
    index: usize,
    kind: OpenKind,
    /// Whether any delta was forwarded (else the `done` events fill the content in).
    streamed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ItemKind {
    Message,
    Reasoning,
    Call,
    Other,
}

#[derive(Debug, Default)]
pub(super) struct ResponsesStreamDecoder {
    sse: SseParser,
    started: bool,
    terminated: bool,
    next_index: usize,
    open: Option<OpenPart>,
    /// The output item in progress and whether it produced a part yet.
    item: Option<(ItemKind, bool)>,
    saw_tool_call: bool,
    /// Events whose `event:` name this says are passed over unparsed (a reader that
    /// needs only part of the stream: [`crate::usage_stream_decoder`]).
    passed_over: Option<fn(&str) -> bool>,
}

impl ResponsesStreamDecoder {
    /// A decoder of the stream's usage, errors and end, and its tool calls when
    /// `with_tool_calls` ([`crate::usage_stream_decoder`]).
    pub(super) fn usage_only(with_tool_calls: bool) -> Self {
        let passed_over: fn(&str) -> bool = match with_tool_calls {
            true => is_text_event,
            false => is_output_event,
        };
        ResponsesStreamDecoder {
            sse: SseParser::passing_over(passed_over),
            passed_over: Some(passed_over),
            ..Self::default()
        }
    }
}

/// Whether a Responses event carries only text (message text, refusals, reasoning),
/// not a tool call, the response's start, end, usage or an error.
fn is_text_event(name: &str) -> bool {
    [
        "response.output_text.",
        "response.refusal.",
        "response.content_part.",
        "response.reasoning_summary_part.",
        "response.reasoning_summary_text.",
        "response.reasoning_text.",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// Whether a Responses event only carries output (items, parts, deltas), not the
/// response's start, end, usage or an error.
fn is_output_event(name: &str) -> bool {
    name.starts_with("response.")
        && !matches!(
            name,
            "response.created"
                | "response.in_progress"
                | "response.queued"
                | "response.completed"
                | "response.incomplete"
                | "response.failed"
        )
}

fn item_kind(item: &Value) -> ItemKind {
    match str_field(item, "type").unwrap_or_default() {
        "message" => ItemKind::Message,
        "reasoning" => ItemKind::Reasoning,
        "function_call" | "custom_tool_call" => ItemKind::Call,
        t if t.ends_with("_call")
            && !HOSTED_CALLS.contains(&t)
            && item.get("call_id").is_some() =>
        {
            ItemKind::Call
        }
        _ => ItemKind::Other,
    }
}

/// The call id and ngl name of a call item.
fn call_identity(item: &Value) -> (String, String) {
    let kind = str_field(item, "type").unwrap_or_default();
    let call_id = str_field(item, "call_id")
        .or_else(|| str_field(item, "id"))
        .unwrap_or_default()
        .to_owned();
    let name = match kind {
        "function_call" | "custom_tool_call" => {
            qualified_name(item, str_field(item, "name").unwrap_or_default())
        }
        t => t.trim_end_matches("_call").to_owned(),
    };
    (call_id, name)
}

/// The complete argument text of a finished call item.
fn call_arguments(item: &Value) -> String {
    match str_field(item, "type").unwrap_or_default() {
        "function_call" => str_field(item, "arguments").unwrap_or_default().to_owned(),
        "custom_tool_call" => str_field(item, "input").unwrap_or_default().to_owned(),
        _ => typed_arguments(item).to_string(),
    }
}

impl ResponsesStreamDecoder {
    fn start(&mut self, out: &mut Vec<StreamEvent>, response: Option<&Value>) {
        if self.started {
            return;
        }
        self.started = true;
        let field = |k: &str| {
            response
                .and_then(|r| str_field(r, k))
                .unwrap_or_default()
                .to_owned()
        };
        out.push(StreamEvent::Start {
            id: field("id"),
            model: field("model"),
            usage: response
                .and_then(|r| r.get("usage"))
                .filter(|u| u.is_object())
                .map(decode_usage)
                .unwrap_or_default(),
        });
    }

    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(open) = self.open.take() {
            out.push(StreamEvent::PartStop { index: open.index });
        }
    }

    fn open(&mut self, out: &mut Vec<StreamEvent>, kind: PartKind) {
        self.start(out, None);
        self.close(out);
        let open_kind = match &kind {
            PartKind::Text => OpenKind::Text,
            PartKind::Thinking => OpenKind::Thinking,
            PartKind::ToolCall { .. } => {
                self.saw_tool_call = true;
                OpenKind::Tool
            }
        };
        let index = self.next_index;
        self.next_index += 1;
        out.push(StreamEvent::PartStart { index, kind });
        self.open = Some(OpenPart {
            index,
            kind: open_kind,
            streamed: false,
        });
        if let Some((_, produced)) = &mut self.item {
            *produced = true;
        }
    }

    /// The open part's index if it is of `kind`, opening one (`make`) otherwise.
    fn ensure(&mut self, out: &mut Vec<StreamEvent>, kind: OpenKind, make: PartKind) -> usize {
        match &self.open {
            Some(open) if open.kind == kind => open.index,
            _ => {
                self.open(out, make);
                self.next_index - 1
            }
        }
    }

    fn delta(&mut self, out: &mut Vec<StreamEvent>, kind: OpenKind, text: &str) {
        let make = match kind {
            OpenKind::Text => PartKind::Text,
            OpenKind::Thinking => PartKind::Thinking,
            // Argument deltas without an announced call cannot be placed: ignore.
            OpenKind::Tool => {
                if !matches!(&self.open, Some(o) if o.kind == OpenKind::Tool) {
                    return;
                }
                PartKind::Text
            }
        };
        let index = self.ensure(out, kind, make);
        if text.is_empty() {
            return;
        }
        if let Some(open) = &mut self.open {
            open.streamed = true;
        }
        out.push(match kind {
            OpenKind::Text => StreamEvent::TextDelta {
                index,
                text: text.to_owned(),
            },
            OpenKind::Thinking => StreamEvent::ThinkingDelta {
                index,
                text: text.to_owned(),
            },
            OpenKind::Tool => StreamEvent::ToolArgsDelta {
                index,
                json: text.to_owned(),
            },
        });
    }

    fn streamed(&self) -> bool {
        self.open.as_ref().is_some_and(|o| o.streamed)
    }

    fn item_done(&mut self, out: &mut Vec<StreamEvent>, item: &Value) {
        let kind = item_kind(item);
        let produced = matches!(self.item, Some((k, true)) if k == kind);
        match kind {
            ItemKind::Message => {
                if !produced {
                    for part in output_item_parts(item).unwrap_or_default() {
                        if let Part::Text { text, .. } = part {
                            self.open(out, PartKind::Text);
                            self.delta(out, OpenKind::Text, &text);
                        }
                    }
                }
                self.close(out);
            }
            ItemKind::Reasoning => {
                let text = match reasoning_part("output", item) {
                    Ok(Part::Thinking { text, .. }) => text,
                    _ => String::new(),
                };
                let encrypted = str_field(item, "encrypted_content");
                let open = matches!(&self.open, Some(o) if o.kind == OpenKind::Thinking);
                if !open && text.is_empty() && encrypted.is_none() {
                    self.item = None;
                    return;
                }
                if !open {
                    self.open(out, PartKind::Thinking);
                }
                if !self.streamed() {
                    self.delta(out, OpenKind::Thinking, &text);
                }
                if let (Some(signature), Some(open)) = (encrypted, &self.open) {
                    out.push(StreamEvent::ThinkingSignature {
                        index: open.index,
                        signature: signature.to_owned(),
                    });
                }
                self.close(out);
            }
            ItemKind::Call => {
                if !matches!(&self.open, Some(o) if o.kind == OpenKind::Tool) || !produced {
                    let (id, name) = call_identity(item);
                    self.open(out, PartKind::ToolCall { id, name });
                }
                if !self.streamed() {
                    self.delta(out, OpenKind::Tool, &call_arguments(item));
                }
                self.close(out);
            }
            ItemKind::Other => {}
        }
        self.item = None;
    }

    fn finish_with(&mut self, out: &mut Vec<StreamEvent>, response: &Value, stop: StopReason) {
        self.start(out, Some(response));
        self.close(out);
        let stop_reason = if stop == StopReason::EndTurn && self.saw_tool_call {
            StopReason::ToolUse
        } else {
            stop
        };
        out.push(StreamEvent::Finish {
            stop_reason,
            stop_sequence: None,
            usage: response.get("usage").map(decode_usage).unwrap_or_default(),
        });
        self.terminated = true;
    }

    fn fail(&mut self, out: &mut Vec<StreamEvent>, error: ApiError) {
        out.push(StreamEvent::Error { error });
        self.terminated = true;
    }

    fn handle(
        &mut self,
        out: &mut Vec<StreamEvent>,
        name: Option<&str>,
        data: &str,
    ) -> Result<(), ApiError> {
        if self.terminated || data.trim() == "[DONE]" {
            return Ok(());
        }

        let event: Value = serde_json::from_str(data)
            .map_err(|e| bad_gateway(format!("malformed Responses stream event: {e}")))?;
        let kind = str_field(&event, "type")
            .or(name)
            .unwrap_or_default()
            .to_owned();
        let null = Value::Null;
        let response = event.get("response").unwrap_or(&null);
        let text = |key: &str| str_field(&event, key).unwrap_or_default().to_owned();
        match kind.as_str() {
            "response.created" | "response.in_progress" | "response.queued" => {
                self.start(out, Some(response));
            }
            "response.output_item.added" => {
                let item = event.get("item").unwrap_or(&null);
                self.start(out, None);
                self.close(out);
                let kind = item_kind(item);
                self.item = Some((kind, false));
                match kind {
                    // Opened by its first summary part or at its end, so a reasoning
                    // item with nothing to carry makes no empty thinking part.
                    ItemKind::Reasoning => {}
                    ItemKind::Call => {
                        let (id, name) = call_identity(item);
                        self.open(out, PartKind::ToolCall { id, name });
                    }
                    ItemKind::Message | ItemKind::Other => {}
                }
            }
            "response.content_part.added" => {
                let part_type = event.pointer("/part/type").and_then(Value::as_str);
                if matches!(part_type, Some("output_text" | "refusal")) {
                    self.open(out, PartKind::Text);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if matches!(self.item, Some((ItemKind::Message, _)) | None) {
                    self.delta(out, OpenKind::Text, &text("delta"));
                }
            }
            "response.output_text.done" | "response.refusal.done"
                if matches!(&self.open, Some(o) if o.kind == OpenKind::Text)
                    && !self.streamed() =>
            {
                let key = if kind == "response.refusal.done" {
                    "refusal"
                } else {
                    "text"
                };
                self.delta(out, OpenKind::Text, &text(key));
            }
            "response.content_part.done" => {
                if matches!(&self.open, Some(o) if o.kind == OpenKind::Text) {
                    if !self.streamed() {
                        let part = event.get("part").unwrap_or(&null);
                        let full = str_field(part, "text")
                            .or_else(|| str_field(part, "refusal"))
                            .unwrap_or_default()
                            .to_owned();
                        self.delta(out, OpenKind::Text, &full);
                    }
                    self.close(out);
                }
            }
            "response.reasoning_summary_part.added" => {
                let was_streamed =
                    matches!(&self.open, Some(o) if o.kind == OpenKind::Thinking && o.streamed);
                self.ensure(out, OpenKind::Thinking, PartKind::Thinking);
                let summary_index = event
                    .get("summary_index")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                if summary_index > 0 && was_streamed {
                    self.delta(out, OpenKind::Thinking, "\n\n");
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.delta(out, OpenKind::Thinking, &text("delta"));
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                self.delta(out, OpenKind::Tool, &text("delta"));
            }
            "response.function_call_arguments.done" | "response.custom_tool_call_input.done"
                if matches!(&self.open, Some(o) if o.kind == OpenKind::Tool)
                    && !self.streamed() =>
            {
                let key = if kind.ends_with("arguments.done") {
                    "arguments"
                } else {
                    "input"
                };
                self.delta(out, OpenKind::Tool, &text(key));
            }
            "response.output_item.done" => {
                let item = event.get("item").cloned().unwrap_or(Value::Null);
                self.item_done(out, &item);
            }
            "response.completed" => self.finish_with(out, response, StopReason::EndTurn),
            "response.incomplete" => {
                let stop = incomplete_stop(response);
                self.finish_with(out, response, stop);
            }
            "response.failed" => {
                let error = response.get("error").unwrap_or(&null);
                self.fail(out, error_from_value(error, "backend response failed"));
            }
            "error" => {
                let error = event
                    .get("error")
                    .filter(|e| e.is_object())
                    .unwrap_or(&event);
                self.fail(out, error_from_value(error, "backend stream error"));
            }
            _ => {}
        }
        Ok(())
    }
}

impl StreamDecoder for ResponsesStreamDecoder {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ApiError> {
        let mut out = Vec::new();
        let events = self
            .sse
            .feed(bytes)
            .map_err(|error| refused(error, &mut self.terminated))?;
        for event in events {
            if let (Some(passed_over), Some(name)) = (self.passed_over, event.event.as_deref())
                && passed_over(name)
            {
                continue;
            }
            self.handle(&mut out, event.event.as_deref(), &event.data)?;
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let last = finished(self.sse.finish(), &mut self.terminated, &mut out);
        if let Some(event) = last
            && let Err(error) = self.handle(&mut out, event.event.as_deref(), &event.data)
        {
            self.fail(&mut out, error);
        }
        if !self.terminated {
            self.fail(
                &mut out,
                bad_gateway("backend stream ended before response.completed"),
            );
        }
        out
    }
}

#[derive(Debug)]
enum EncPart {
    Text {
        text: String,
    },
    Thinking {
        text: String,
        signature: Option<String>,
        summary_open: bool,
    },
    Tool {
        call_id: String,
        name: String,
        args: String,
        /// Set once `output_item.added` went out.
        kind: Option<CallKind>,
    },
}

#[derive(Debug)]
struct EncItem {
    item_id: String,
    output_index: usize,
    part: EncPart,
}

/// One Responses event, serialised straight into the stream: `{"type": KIND, <the
/// body's members>, "sequence_number": SEQ}` (a body that is not an object adds
/// nothing), SEQ taken from `seq`, which moves on to the next.
fn write_event(out: &mut Vec<u8>, kind: &str, seq: &mut u64, body: &impl Serialize) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: {\"type\":");
    let json = "event data serialises (string keys) into a Vec, which takes every write";
    serde_json::to_writer(&mut *out, kind).expect(json);
    let at = out.len();
    serde_json::to_writer(&mut *out, body).expect(json);
    // The body's members go between the type and the sequence number: its braces go.
    if out[at] == b'{' && out.len() - at > 2 {
        out[at] = b',';
        out.pop();
    } else {
        out.truncate(at);
    }
    out.extend_from_slice(b",\"sequence_number\":");
    serde_json::to_writer(&mut *out, &*seq).expect(json);
    out.extend_from_slice(b"}\n\n");
    *seq += 1;
}

#[derive(Debug, Default)]
pub(super) struct ResponsesStreamEncoder {
    seq: u64,
    id: String,
    model: String,
    created_at: u64,
    started: bool,
    ended: bool,
    output: Vec<Value>,
    open: Option<EncItem>,
}

impl ResponsesStreamEncoder {
    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, body: impl Serialize) {
        write_event(out, kind, &mut self.seq, &body);
    }

    /// A `response.*` event carrying the response object as it stands.
    fn emit_response(
        &mut self,
        out: &mut Vec<u8>,
        kind: &str,
        status: &str,
        incomplete: Option<&str>,
        error: Option<&Value>,
        usage: Option<&Usage>,
    ) {
        #[derive(Serialize)]
        struct ResponseEvent<'a> {
            response: ResponseShape<'a>,
        }
        let response = ResponseShape {
            id: &self.id,
            model: &self.model,
            created_at: self.created_at,
            status,
            incomplete,
            error,
            output: &self.output,
            usage,
        };
        write_event(out, kind, &mut self.seq, &ResponseEvent { response });
    }

    fn start(&mut self, out: &mut Vec<u8>, id: &str, model: &str) {
        if self.started {
            return;
        }
        self.started = true;
        self.id = response_id(id);
        self.model = model.to_owned();
        self.created_at = now_unix();
        for kind in ["response.created", "response.in_progress"] {
            self.emit_response(out, kind, "in_progress", None, None, None);
        }
    }

    fn part_start(&mut self, out: &mut Vec<u8>, kind: &PartKind) {
        if !self.started {
            self.start(out, "", "");
        }
        self.close(out);
        let output_index = self.output.len();
        let (item_id, part) = match kind {
            PartKind::Text => {
                let item_id = item_id(&self.id, "msg", output_index);
                let item = json!({
                    "id": item_id, "type": "message", "status": "in_progress",
                    "role": "assistant", "content": [],
                });
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": item}),
                );
                self.emit(
                    out,
                    "response.content_part.added",
                    json!({
                        "item_id": item_id, "output_index": output_index, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []},
                    }),
                );
                (
                    item_id,
                    EncPart::Text {
                        text: String::new(),
                    },
                )
            }
            PartKind::Thinking => {
                let item_id = item_id(&self.id, "rs", output_index);
                let item = json!({"id": item_id, "type": "reasoning", "summary": []});
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": item}),
                );
                (
                    item_id,
                    EncPart::Thinking {
                        text: String::new(),
                        signature: None,
                        summary_open: false,
                    },
                )
            }
            PartKind::ToolCall { id, name } => (
                String::new(),
                EncPart::Tool {
                    call_id: id.clone(),
                    name: name.clone(),
                    args: String::new(),
                    kind: None,
                },
            ),
        };
        self.open = Some(EncItem {
            item_id,
            output_index,
            part,
        });
    }

    /// Announce the open tool call as `kind` and replay the arguments gathered so far.
    fn announce(&mut self, out: &mut Vec<u8>, kind: CallKind) {
        let Some(mut open) = self.open.take() else {
            return;
        };
        if let EncPart::Tool {
            call_id,
            name,
            args,
            kind: announced,
        } = &mut open.part
        {
            open.item_id = item_id(&self.id, item_prefix(&kind), open.output_index);
            let item = match kind {
                CallKind::Typed => {
                    call_item(&open.item_id, call_id, name, args, &kind, "in_progress")
                }
                _ => call_item(&open.item_id, call_id, name, "", &kind, "in_progress"),
            };
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": open.output_index, "item": item}),
            );
            if kind != CallKind::Typed && !args.is_empty() {
                let delta = args.clone();
                self.args_delta(out, &kind, &open.item_id, open.output_index, &delta);
            }
            *announced = Some(kind);
        }
        self.open = Some(open);
    }

    fn args_delta(
        &mut self,
        out: &mut Vec<u8>,
        kind: &CallKind,
        item_id: &str,
        output_index: usize,
        delta: &str,
    ) {
        let event = match kind {
            CallKind::Custom => "response.custom_tool_call_input.delta",
            _ => "response.function_call_arguments.delta",
        };
        #[derive(Serialize)]
        struct ArgumentsDelta<'a> {
            item_id: &'a str,
            output_index: usize,
            delta: &'a str,
        }
        let delta = ArgumentsDelta {
            item_id,
            output_index,
            delta,
        };
        self.emit(out, event, delta);
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        let Some(open) = self.open.as_ref() else {
            return;
        };
        // A call still unannounced decides its kind now, from the whole arguments.
        let pending = match &open.part {
            EncPart::Tool {
                name,
                args,
                kind: None,
                ..
            } => Some(if is_typed_call(name, &parse_arguments(args)) {
                CallKind::Typed
            } else if args.trim().is_empty() || starts_like_object(args) {
                CallKind::Function
            } else {
                CallKind::Custom
            }),
            _ => None,
        };
        if let Some(kind) = pending {
            if let Some(EncItem {
                part: EncPart::Tool { args, .. },
                ..
            }) = &mut self.open
                && args.trim().is_empty()
            {
                *args = "{}".to_owned();
            }
            self.announce(out, kind);
        }
        let Some(open) = self.open.take() else {
            return;
        };
        let (item_id, output_index) = (open.item_id, open.output_index);
        let item = match open.part {
            EncPart::Text { text } => {
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({
                        "item_id": item_id, "output_index": output_index,
                        "content_index": 0, "text": text, "logprobs": [],
                    }),
                );
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({
                        "item_id": item_id, "output_index": output_index, "content_index": 0,
                        "part": {"type": "output_text", "text": text, "annotations": []},
                    }),
                );
                message_item(&item_id, &text, "completed")
            }
            EncPart::Thinking {
                text,
                signature,
                summary_open,
            } => {
                if summary_open {
                    self.emit(
                        out,
                        "response.reasoning_summary_text.done",
                        json!({
                            "item_id": item_id, "output_index": output_index,
                            "summary_index": 0, "text": text,
                        }),
                    );
                    self.emit(
                        out,
                        "response.reasoning_summary_part.done",
                        json!({
                            "item_id": item_id, "output_index": output_index, "summary_index": 0,
                            "part": {"type": "summary_text", "text": text},
                        }),
                    );
                }
                reasoning_item(&item_id, &text, signature)
            }
            EncPart::Tool {
                call_id,
                name,
                args,
                kind,
            } => {
                let kind = kind.unwrap_or(CallKind::Function);
                match kind {
                    CallKind::Function => self.emit(
                        out,
                        "response.function_call_arguments.done",
                        json!({"item_id": item_id, "output_index": output_index, "arguments": args}),
                    ),
                    CallKind::Custom => self.emit(
                        out,
                        "response.custom_tool_call_input.done",
                        json!({"item_id": item_id, "output_index": output_index, "input": args}),
                    ),
                    CallKind::Typed => {}
                }
                call_item(&item_id, &call_id, &name, &args, &kind, "completed")
            }
        };
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": output_index, "item": item}),
        );
        self.output.push(item);
    }

    /// A text or reasoning delta: the events a stream sends most, serialised from
    /// borrowed fields.
    fn text_delta(&mut self, out: &mut Vec<u8>, delta: &str) {
        #[derive(Serialize)]
        struct TextDelta<'a> {
            item_id: &'a str,
            output_index: usize,
            content_index: usize,
            delta: &'a str,
            logprobs: [(); 0],
        }
        #[derive(Serialize)]
        struct SummaryDelta<'a> {
            item_id: &'a str,
            output_index: usize,
            summary_index: usize,
            delta: &'a str,
        }
        let Some(open) = &mut self.open else {
            return;
        };
        let (item_id, output_index) = (open.item_id.as_str(), open.output_index);
        match &mut open.part {
            EncPart::Text { text } => {
                text.push_str(delta);
                let event = TextDelta {
                    item_id,
                    output_index,
                    content_index: 0,
                    delta,
                    logprobs: [],
                };
                write_event(out, "response.output_text.delta", &mut self.seq, &event);
            }
            EncPart::Thinking {
                text, summary_open, ..
            } => {
                if delta.is_empty() {
                    return;
                }
                text.push_str(delta);
                if !std::mem::replace(summary_open, true) {
                    let added = json!({
                        "item_id": item_id, "output_index": output_index, "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""},
                    });
                    write_event(
                        out,
                        "response.reasoning_summary_part.added",
                        &mut self.seq,
                        &added,
                    );
                }
                let event = SummaryDelta {
                    item_id,
                    output_index,
                    summary_index: 0,
                    delta,
                };
                write_event(
                    out,
                    "response.reasoning_summary_text.delta",
                    &mut self.seq,
                    &event,
                );
            }
            EncPart::Tool { .. } => {}
        }
    }

    fn tool_delta(&mut self, out: &mut Vec<u8>, delta: &str) {
        let Some(EncItem {
            item_id,
            output_index,
            part: EncPart::Tool {
                name, args, kind, ..
            },
        }) = &mut self.open
        else {
            return;
        };
        args.push_str(delta);
        match kind.clone() {
            Some(CallKind::Typed) => {}
            Some(kind) => {
                let (item_id, output_index) = (item_id.clone(), *output_index);
                self.args_delta(out, &kind, &item_id, output_index, delta);
            }
            None => {
                // Typed calls wait for their whole arguments; others announce on the
                // first non-blank character, which tells JSON from free text.
                let typed = TYPED_CALLS.iter().any(|(t, _)| t == name);
                let first = args.trim_start().chars().next();
                if let (false, Some(c)) = (typed, first) {
                    let kind = if c == '{' {
                        CallKind::Function
                    } else {
                        CallKind::Custom
                    };
                    self.announce(out, kind);
                }
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>, stop: StopReason, usage: &Usage) {
        if !self.started {
            self.start(out, "", "");
        }
        self.close(out);
        let (status, incomplete) = status_of(stop);
        let event = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.emit_response(out, event, status, incomplete, None, Some(usage));
        self.ended = true;
    }

    fn error(&mut self, out: &mut Vec<u8>, error: &ApiError) {
        let (kind, code) = error_labels(error.kind);
        let code = code.unwrap_or(kind);
        self.emit(
            out,
            "error",
            json!({
                "code": code,
                "message": error.message,
                "param": error.param,
                "error": {"type": kind, "code": code, "message": error.message, "param": error.param},
            }),
        );
        if self.id.is_empty() {
            self.id = response_id("");
        }
        let failure = json!({"code": failure_code(error.kind), "message": error.message});
        self.emit_response(out, "response.failed", "failed", None, Some(&failure), None);
        self.ended = true;
    }
}

impl StreamEncoder for ResponsesStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        match event {
            StreamEvent::Start { id, model, .. } => self.start(out, id, model),
            StreamEvent::PartStart { kind, .. } => self.part_start(out, kind),
            StreamEvent::TextDelta { text, .. } | StreamEvent::ThinkingDelta { text, .. } => {
                self.text_delta(out, text);
            }
            StreamEvent::ThinkingSignature { signature, .. } => {
                if let Some(EncItem {
                    part: EncPart::Thinking { signature: sig, .. },
                    ..
                }) = &mut self.open
                {
                    *sig = Some(signature.clone());
                }
            }
            StreamEvent::ToolArgsDelta { json, .. } => self.tool_delta(out, json),
            StreamEvent::PartStop { .. } => self.close(out),
            StreamEvent::Finish {
                stop_reason, usage, ..
            } => self.finish(out, *stop_reason, usage),
            StreamEvent::Error { error } => self.error(out, error),
        }
    }
}

#[cfg(test)]
mod tests {
    use glider_ngl::ResponseBuilder;
    use glider_ngl::stream::PartKind;
    use glider_ngl::stream::events_of;
    use glider_ngl::{ApiError, ErrorKind, Part, StopReason, StreamEvent, Usage};
    use serde_json::{Value, json};

    use crate::framing::SseEvent;
    use crate::framing::SseParser;
    use crate::openai_responses::fixtures::{codec, sample_response, text};

    fn sse(events: &[Value]) -> String {
        let mut out = String::new();
        for event in events {
            let kind = event["type"].as_str().unwrap_or_default();
            out.push_str(&format!("event: {kind}\ndata: {event}\n\n"));
        }
        out
    }

    /// A stream shaped like the live API's for a reasoning model calling a function.
    fn captured_stream() -> String {
        let response = json!({"id": "resp_67c9", "object": "response", "created_at": 1741290958,
                              "status": "in_progress", "model": "gpt-5-2025-08-07", "output": [],
                              "usage": null});
        let mut done = response.clone();
        done["status"] = json!("completed");
        done["usage"] = json!({"input_tokens": 300, "input_tokens_details": {"cached_tokens": 100},
                               "output_tokens": 80, "output_tokens_details": {"reasoning_tokens": 40},
                               "total_tokens": 380});
        sse(&[
            json!({"type": "response.created", "sequence_number": 0, "response": response}),
            json!({"type": "response.in_progress", "sequence_number": 1, "response": response}),
            json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
                   "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
            json!({"type": "response.reasoning_summary_part.added", "sequence_number": 3, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
            json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 4, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0, "delta": "**Checking"}),
            json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 5, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0, "delta": " weather**"}),
            json!({"type": "response.reasoning_summary_text.done", "sequence_number": 6, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0, "text": "**Checking weather**"}),
            json!({"type": "response.reasoning_summary_part.done", "sequence_number": 7, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 0,
                   "part": {"type": "summary_text", "text": "**Checking weather**"}}),
            json!({"type": "response.reasoning_summary_part.added", "sequence_number": 8, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 1, "part": {"type": "summary_text", "text": ""}}),
            json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 9, "item_id": "rs_1",
                   "output_index": 0, "summary_index": 1, "delta": "Call the tool."}),
            json!({"type": "response.output_item.done", "sequence_number": 10, "output_index": 0,
                   "item": {"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAAA-enc",
                            "summary": [{"type": "summary_text", "text": "**Checking weather**"},
                                        {"type": "summary_text", "text": "Call the tool."}]}}),
            json!({"type": "response.output_item.added", "sequence_number": 11, "output_index": 1,
                   "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant",
                            "content": []}}),
            json!({"type": "response.content_part.added", "sequence_number": 12, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0,
                   "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}}),
            json!({"type": "response.output_text.delta", "sequence_number": 13, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0, "delta": "Let me ", "logprobs": []}),
            json!({"type": "response.output_text.delta", "sequence_number": 14, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0, "delta": "check – ☀️.", "logprobs": []}),
            json!({"type": "response.output_text.done", "sequence_number": 15, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0, "text": "Let me check – ☀️.", "logprobs": []}),
            json!({"type": "response.content_part.done", "sequence_number": 16, "item_id": "msg_1",
                   "output_index": 1, "content_index": 0,
                   "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": "Let me check – ☀️."}}),
            json!({"type": "response.output_item.done", "sequence_number": 17, "output_index": 1,
                   "item": {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "annotations": [], "text": "Let me check – ☀️."}]}}),
            json!({"type": "response.output_item.added", "sequence_number": 18, "output_index": 2,
                   "item": {"id": "fc_1", "type": "function_call", "status": "in_progress", "arguments": "",
                            "call_id": "call_9", "name": "get_weather"}}),
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 19, "item_id": "fc_1",
                   "output_index": 2, "delta": "{\"city\":"}),
            json!({"type": "response.function_call_arguments.delta", "sequence_number": 20, "item_id": "fc_1",
                   "output_index": 2, "delta": "\"Paris\"}"}),
            json!({"type": "response.function_call_arguments.done", "sequence_number": 21, "item_id": "fc_1",
                   "output_index": 2, "arguments": "{\"city\":\"Paris\"}"}),
            json!({"type": "response.output_item.done", "sequence_number": 22, "output_index": 2,
                   "item": {"id": "fc_1", "type": "function_call", "status": "completed",
                            "arguments": "{\"city\":\"Paris\"}", "call_id": "call_9", "name": "get_weather"}}),
            json!({"type": "response.completed", "sequence_number": 23, "response": done}),
        ])
    }

    fn decode_all(wire: &[u8], split: usize) -> Vec<StreamEvent> {
        let mut decoder = codec().stream_decoder();
        let mut events = decoder.feed(&wire[..split]).expect("first half");
        events.extend(decoder.feed(&wire[split..]).expect("second half"));
        events.extend(decoder.finish());
        events
    }

    /// Merge consecutive deltas of the same part so chunking does not matter.
    fn coalesce(events: Vec<StreamEvent>) -> Vec<StreamEvent> {
        let mut out: Vec<StreamEvent> = Vec::new();
        for event in events {
            match (out.last_mut(), &event) {
                (
                    Some(StreamEvent::TextDelta { index: a, text }),
                    StreamEvent::TextDelta {
                        index: b,
                        text: more,
                    },
                )
                | (
                    Some(StreamEvent::ThinkingDelta { index: a, text }),
                    StreamEvent::ThinkingDelta {
                        index: b,
                        text: more,
                    },
                ) if a == b => {
                    text.push_str(more);
                }
                (
                    Some(StreamEvent::ToolArgsDelta { index: a, json }),
                    StreamEvent::ToolArgsDelta {
                        index: b,
                        json: more,
                    },
                ) if a == b => {
                    json.push_str(more);
                }
                _ => out.push(event),
            }
        }
        out
    }

    #[test]
    fn decodes_a_captured_stream_split_anywhere() {
        let wire = captured_stream();
        let wire = wire.as_bytes();
        let expected = vec![
            StreamEvent::Start {
                id: "resp_67c9".into(),
                model: "gpt-5-2025-08-07".into(),
                usage: Usage::default(),
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Thinking,
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "**Checking".into(),
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: " weather**".into(),
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "\n\n".into(),
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "Call the tool.".into(),
            },
            StreamEvent::ThinkingSignature {
                index: 0,
                signature: "gAAAA-enc".into(),
            },
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "Let me ".into(),
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "check – ☀️.".into(),
            },
            StreamEvent::PartStop { index: 1 },
            StreamEvent::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "call_9".into(),
                    name: "get_weather".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "{\"city\":".into(),
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "\"Paris\"}".into(),
            },
            StreamEvent::PartStop { index: 2 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                stop_sequence: None,
                usage: Usage {
                    input_tokens: 200,
                    output_tokens: 80,
                    cache_read_tokens: 100,
                    cache_write_tokens: 0,
                    reasoning_tokens: 40,
                },
            },
        ];
        assert_eq!(decode_all(wire, wire.len()), expected);
        for split in 0..=wire.len() {
            assert_eq!(
                coalesce(decode_all(wire, split)),
                coalesce(expected.clone()),
                "split at {split}"
            );
        }
        let mut builder = ResponseBuilder::new();
        for event in &expected {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(resp.plain_text(), "Let me check – ☀️.");
        assert_eq!(
            resp.parts[0],
            Part::Thinking {
                text: "**Checking weather**\n\nCall the tool.".into(),
                signature: Some("gAAAA-enc".into()),
                redacted: None
            }
        );
    }

    #[test]
    fn decodes_custom_calls_done_only_items_and_incomplete() {
        let wire = sse(&[
            json!({"type": "response.created", "sequence_number": 0,
                   "response": {"id": "resp_2", "model": "gpt-5-codex", "status": "in_progress", "output": []}}),
            // A reasoning item with nothing to carry makes no part.
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                   "item": {"id": "rs_0", "type": "reasoning", "summary": []}}),
            json!({"type": "response.output_item.done", "sequence_number": 1, "output_index": 0,
                   "item": {"id": "rs_0", "type": "reasoning", "summary": []}}),
            json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                   "item": {"id": "ctc_1", "type": "custom_tool_call", "status": "in_progress",
                            "call_id": "call_P", "name": "apply_patch", "input": ""}}),
            json!({"type": "response.custom_tool_call_input.delta", "sequence_number": 2, "item_id": "ctc_1",
                   "output_index": 0, "delta": "*** Begin Patch\n"}),
            json!({"type": "response.custom_tool_call_input.delta", "sequence_number": 3, "item_id": "ctc_1",
                   "output_index": 0, "delta": "*** End Patch\n"}),
            json!({"type": "response.custom_tool_call_input.done", "sequence_number": 4, "item_id": "ctc_1",
                   "output_index": 0, "input": "*** Begin Patch\n*** End Patch\n"}),
            json!({"type": "response.output_item.done", "sequence_number": 5, "output_index": 0,
                   "item": {"id": "ctc_1", "type": "custom_tool_call", "status": "completed",
                            "call_id": "call_P", "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch\n"}}),
            // Items that only arrive whole (some servers send no deltas).
            json!({"type": "response.output_item.done", "sequence_number": 6, "output_index": 1,
                   "item": {"id": "msg_2", "type": "message", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": "Done", "annotations": []}]}}),
            json!({"type": "response.output_item.done", "sequence_number": 7, "output_index": 2,
                   "item": {"id": "fc_2", "type": "function_call", "status": "completed", "namespace": "mcp__gh",
                            "call_id": "call_Q", "name": "get_issue", "arguments": "{\"n\":1}"}}),
            json!({"type": "response.output_item.added", "sequence_number": 8, "output_index": 3,
                   "item": {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}}),
            json!({"type": "response.output_item.done", "sequence_number": 9, "output_index": 3,
                   "item": {"id": "ws_1", "type": "web_search_call", "status": "completed",
                            "action": {"type": "search", "query": "q"}}}),
            json!({"type": "response.incomplete", "sequence_number": 10,
                   "response": {"id": "resp_2", "status": "incomplete",
                                "incomplete_details": {"reason": "max_output_tokens"},
                                "usage": {"input_tokens": 10, "output_tokens": 4}}}),
        ]);
        let events = decode_all(wire.as_bytes(), wire.len());
        let mut builder = ResponseBuilder::new();
        for event in &events {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(resp.id, "resp_2");
        assert_eq!(resp.stop_reason, StopReason::MaxTokens);
        assert_eq!(resp.usage.input_tokens, 10);
        assert_eq!(
            resp.parts,
            vec![
                Part::ToolCall {
                    id: "call_P".into(),
                    name: "apply_patch".into(),
                    arguments: json!("*** Begin Patch\n*** End Patch\n")
                },
                text("Done"),
                Part::ToolCall {
                    id: "call_Q".into(),
                    name: "mcp__gh.get_issue".into(),
                    arguments: json!({"n": 1})
                },
            ]
        );
        let starts: Vec<usize> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::PartStart { index, .. } => Some(*index),
                _ => None,
            })
            .collect();
        assert_eq!(starts, vec![0, 1, 2]);
    }

    #[test]
    fn stream_failures_become_errors() {
        // Truncated before response.completed.
        let wire = captured_stream();
        let cut = wire
            .find("event: response.completed")
            .expect("has completed");
        let events = decode_all(&wire.as_bytes()[..cut], cut);
        match events.last() {
            Some(StreamEvent::Error { error }) => {
                assert_eq!(error.kind, ErrorKind::BadGateway);
                assert!(error.message.contains("stream ended before"));
            }
            other => panic!("expected error, got {other:?}"),
        }
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::Finish { .. }))
        );

        // The live API's nested error event.
        let wire = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_3\",\"model\":\"m\"}}\n\nevent: error\ndata: {\"type\":\"error\",\"sequence_number\":1,\"error\":{\"type\":\"too_many_requests\",\"code\":\"too_many_requests\",\"message\":\"Too Many Requests\",\"param\":null}}\n\n";
        let events = decode_all(wire.as_bytes(), 10);
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[1],
            StreamEvent::Error {
                error: ApiError::new(ErrorKind::RateLimit, "Too Many Requests")
            }
        );

        // The documented flat error event.
        let wire = "event: error\ndata: {\"type\":\"error\",\"sequence_number\":0,\"code\":\"server_error\",\"message\":\"boom\",\"param\":null}\n\n";
        let events = decode_all(wire.as_bytes(), 5);
        assert_eq!(
            events,
            vec![StreamEvent::Error {
                error: ApiError::new(ErrorKind::BadGateway, "boom")
            }]
        );

        // response.failed carries the error on the response.
        let wire = sse(&[
            json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_4", "model": "m"}}),
            json!({"type": "response.failed", "sequence_number": 1,
                   "response": {"id": "resp_4", "status": "failed",
                                "error": {"code": "server_error", "message": "The model crashed"}}}),
        ]);
        let events = decode_all(wire.as_bytes(), 3);
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Error {
                error: ApiError::new(ErrorKind::BadGateway, "The model crashed")
            })
        );
        assert_eq!(events.len(), 2);

        // Malformed JSON is an error from feed.
        let mut decoder = codec().stream_decoder();
        let err = decoder
            .feed(b"event: response.created\ndata: {not json\n\n")
            .expect_err("malformed");
        assert_eq!(err.kind, ErrorKind::BadGateway);
    }

    fn parse_sse(bytes: &[u8]) -> Vec<(String, Value)> {
        let mut parser = SseParser::new();
        let mut events: Vec<SseEvent> = parser.feed(bytes).expect("short lines");
        events.extend(parser.finish().expect("short lines"));
        events
            .into_iter()
            .map(|e| {
                let data: Value = serde_json::from_str(&e.data).expect("JSON data");
                (e.event.unwrap_or_default(), data)
            })
            .collect()
    }

    fn call(index: usize, id: &str, name: &str) -> StreamEvent {
        StreamEvent::PartStart {
            index,
            kind: PartKind::ToolCall {
                id: id.into(),
                name: name.into(),
            },
        }
    }

    fn args(index: usize, json: &str) -> StreamEvent {
        StreamEvent::ToolArgsDelta {
            index,
            json: json.into(),
        }
    }

    fn encode_events(events: &[StreamEvent]) -> Vec<u8> {
        let mut encoder = codec().stream_encoder();
        let mut out = Vec::new();
        for event in events {
            encoder.encode(event, &mut out);
        }
        out
    }

    /// The encoder's bytes, member order included (`created_at` masked), for each kind
    /// of item and ending: what the API writes, and what this encoder wrote through
    /// merged `Value` maps before it serialised straight into the stream.
    #[test]
    fn stream_encoder_bytes_are_the_apis() {
        let mut truncated = sample_response();
        truncated.parts.truncate(2);
        truncated.stop_reason = StopReason::MaxTokens;
        let mut failing = events_of(&sample_response());
        failing.truncate(5);
        failing.push(StreamEvent::Error {
            error: ApiError::new(ErrorKind::Overloaded, "busy \"now\""),
        });
        let streams = [
            events_of(&sample_response()),
            vec![
                StreamEvent::Start {
                    id: "chatcmpl-9".into(),
                    model: "qwen3".into(),
                    usage: Usage::default(),
                },
                call(0, "c1", "read"),
                args(0, " {\"path\""),
                args(0, ":\"a\"}"),
                StreamEvent::PartStop { index: 0 },
                call(1, "c2", "list"),
                StreamEvent::PartStop { index: 1 },
                call(2, "c3", "apply_patch"),
                args(2, "*** Begin Patch\n"),
                StreamEvent::PartStop { index: 2 },
                call(3, "c4", "local_shell"),
                args(3, "{\"action\":{\"type\":\"exec\",\"command\":[\"ls\"]}}"),
                StreamEvent::PartStop { index: 3 },
                StreamEvent::Finish {
                    stop_reason: StopReason::ToolUse,
                    stop_sequence: None,
                    usage: Usage::default(),
                },
            ],
            events_of(&truncated),
            failing,
            vec![StreamEvent::Error {
                error: ApiError::new(ErrorKind::RateLimit, "slow down"),
            }],
        ];
        let mut text = String::new();
        for events in &streams {
            text.push_str(&String::from_utf8(encode_events(events)).expect("utf8"));
        }
        // `created_at` is the clock's: masked.
        let masked = crate::openai_chat::fixtures::mask_number(&text, "created_at");
        let golden = include_str!("../../tests/golden/responses_stream.sse");
        assert_eq!(masked, golden, "{masked}");
    }

    #[test]
    fn stream_encoding_matches_the_api() {
        let resp = sample_response();
        let wire = encode_events(&events_of(&resp));
        let events = parse_sse(&wire);
        for (i, (name, data)) in events.iter().enumerate() {
            assert_eq!(data["type"].as_str(), Some(name.as_str()), "event {i}");
            assert_eq!(data["sequence_number"], json!(i), "event {i}");
        }
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.reasoning_summary_part.added",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.done",
                "response.reasoning_summary_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.custom_tool_call_input.delta",
                "response.custom_tool_call_input.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let data = |i: usize| &events[i].1;
        assert_eq!(data(0)["response"]["id"], "resp_abc");
        assert_eq!(data(0)["response"]["status"], "in_progress");
        assert_eq!(data(0)["response"]["output"], json!([]));
        assert_eq!(data(0)["response"]["usage"], Value::Null);
        assert_eq!(data(0)["response"]["model"], "gpt-5-codex");
        assert_eq!(
            data(2)["item"],
            json!({"id": "rs_abc_0", "type": "reasoning", "summary": []})
        );
        assert_eq!(data(2)["output_index"], 0);
        assert_eq!(data(3)["part"], json!({"type": "summary_text", "text": ""}));
        assert_eq!(data(4)["delta"], "**Planning**");
        assert_eq!(data(4)["summary_index"], 0);
        assert_eq!(data(4)["item_id"], "rs_abc_0");
        assert_eq!(data(5)["text"], "**Planning**");
        assert_eq!(data(7)["item"]["encrypted_content"], "gAAAAB-sig");
        assert_eq!(
            data(8)["item"],
            json!({"id": "msg_abc_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []})
        );
        assert_eq!(data(8)["output_index"], 1);
        assert_eq!(
            data(9)["part"],
            json!({"type": "output_text", "text": "", "annotations": []})
        );
        assert_eq!(data(10)["item_id"], "msg_abc_1");
        assert_eq!(data(10)["output_index"], 1);
        assert_eq!(data(10)["content_index"], 0);
        assert_eq!(data(10)["delta"], "Applying the fix.");
        assert_eq!(data(11)["text"], "Applying the fix.");
        assert_eq!(data(12)["part"]["text"], "Applying the fix.");
        assert_eq!(data(13)["item"]["status"], "completed");
        assert_eq!(
            data(14)["item"],
            json!({"id": "fc_abc_2", "type": "function_call", "status": "in_progress",
                   "arguments": "", "call_id": "call_1", "name": "shell"})
        );
        assert_eq!(data(15)["delta"], "{\"command\":[\"cargo\",\"test\"]}");
        assert_eq!(data(16)["arguments"], "{\"command\":[\"cargo\",\"test\"]}");
        assert_eq!(
            data(17)["item"]["arguments"],
            "{\"command\":[\"cargo\",\"test\"]}"
        );
        assert_eq!(data(18)["item"]["type"], "custom_tool_call");
        assert_eq!(data(18)["item"]["input"], "");
        assert_eq!(
            data(20)["input"],
            "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
        );
        let done = &data(22)["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["usage"]["input_tokens"], 120);
        assert_eq!(done["usage"]["total_tokens"], 170);
        // The final object equals the non-streamed one (bar the clock).
        let mut whole = codec().encode_response(&resp);
        whole["created_at"] = done["created_at"].clone();
        assert_eq!(done, &whole);

        // Our own decoder reads it back to the same reply.
        let mut builder = ResponseBuilder::new();
        for event in decode_all(&wire, wire.len() / 2) {
            builder.push(&event);
        }
        assert_eq!(builder.finish().expect("complete"), resp);
    }

    #[test]
    fn stream_encoder_picks_the_call_kind_from_the_arguments() {
        let start = StreamEvent::Start {
            id: "chatcmpl-9".into(),
            model: "qwen3".into(),
            usage: Usage::default(),
        };
        let wire = encode_events(&[
            start,
            // A call whose first fragment is empty still announces on its first brace.
            call(0, "c1", "read"),
            args(0, ""),
            args(0, " {\"path\""),
            args(0, ":\"a\"}"),
            StreamEvent::PartStop { index: 0 },
            // No arguments at all: `{}`.
            call(1, "c2", "list"),
            StreamEvent::PartStop { index: 1 },
            // Free text: a custom tool call.
            call(2, "c3", "apply_patch"),
            args(2, "*** Begin Patch"),
            StreamEvent::PartStop { index: 2 },
            // A typed call waits for its whole arguments.
            call(3, "c4", "local_shell"),
            args(3, "{\"action\":{\"type\":\"exec\","),
            args(3, "\"command\":[\"ls\"]}}"),
            StreamEvent::PartStop { index: 3 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                stop_sequence: None,
                usage: Usage::default(),
            },
        ]);
        let events = parse_sse(&wire);
        let added: Vec<&Value> = events
            .iter()
            .filter(|(n, _)| n == "response.output_item.added")
            .map(|(_, d)| &d["item"])
            .collect();
        assert_eq!(added[0]["type"], "function_call");
        assert_eq!(added[0]["id"], "fc_chatcmpl-9_0");
        assert_eq!(added[1]["type"], "function_call");
        assert_eq!(added[2]["type"], "custom_tool_call");
        assert_eq!(added[3]["type"], "local_shell_call");
        assert_eq!(added[3]["action"]["command"], json!(["ls"]));
        let deltas: Vec<&Value> = events
            .iter()
            .filter(|(n, _)| n == "response.function_call_arguments.delta")
            .map(|(_, d)| &d["delta"])
            .collect();
        assert_eq!(
            deltas,
            vec![&json!(" {\"path\""), &json!(":\"a\"}"), &json!("{}")]
        );
        let done = &events.last().expect("completed").1["response"];
        assert_eq!(done["id"], "resp_chatcmpl-9");
        assert_eq!(done["output"][1]["arguments"], "{}");
        assert_eq!(
            done["output"][3],
            json!({"id": "tc_chatcmpl-9_3", "type": "local_shell_call", "status": "completed",
                   "call_id": "c4", "action": {"type": "exec", "command": ["ls"]}})
        );
    }

    #[test]
    fn stream_encoder_ends_incomplete_and_on_error() {
        let mut resp = sample_response();
        resp.parts.truncate(2);
        resp.stop_reason = StopReason::MaxTokens;
        let events = parse_sse(&encode_events(&events_of(&resp)));
        let (name, last) = events.last().expect("events");
        assert_eq!(name, "response.incomplete");
        assert_eq!(last["response"]["status"], "incomplete");
        assert_eq!(
            last["response"]["incomplete_details"],
            json!({"reason": "max_output_tokens"})
        );

        let mut events = events_of(&sample_response());
        events.truncate(5);
        events.push(StreamEvent::Error {
            error: ApiError::new(ErrorKind::Overloaded, "all backends are busy"),
        });
        // Anything after an error is ignored.
        events.push(StreamEvent::Finish {
            stop_reason: StopReason::EndTurn,
            stop_sequence: None,
            usage: Usage::default(),
        });
        let wire = encode_events(&events);
        let parsed = parse_sse(&wire);
        let n = parsed.len();
        let (name, error) = &parsed[n - 2];
        assert_eq!(name, "error");
        assert_eq!(error["type"], "error");
        assert_eq!(error["code"], "server_error");
        assert_eq!(error["message"], "all backends are busy");
        assert_eq!(error["param"], Value::Null);
        assert_eq!(error["sequence_number"], json!(n - 2));
        assert_eq!(
            error["error"],
            json!({"type": "server_error", "code": "server_error", "message": "all backends are busy", "param": null})
        );
        let (name, failed) = &parsed[n - 1];
        assert_eq!(name, "response.failed");
        assert_eq!(failed["response"]["status"], "failed");
        assert_eq!(
            failed["response"]["error"],
            json!({"code": "server_error", "message": "all backends are busy"})
        );
        // Our decoder surfaces it.
        let decoded = decode_all(&wire, 1);
        assert_eq!(
            decoded.last(),
            Some(&StreamEvent::Error {
                error: ApiError::new(ErrorKind::BadGateway, "all backends are busy")
            })
        );

        // An error before anything else still reads as an error.
        let parsed = parse_sse(&encode_events(&[StreamEvent::Error {
            error: ApiError::new(ErrorKind::RateLimit, "slow down"),
        }]));
        assert_eq!(parsed[0].0, "error");
        assert_eq!(parsed[0].1["code"], "rate_limit_exceeded");
        assert_eq!(parsed[0].1["sequence_number"], 0);
        assert_eq!(
            parsed[1].1["response"]["error"]["code"],
            "rate_limit_exceeded"
        );
    }
}
