//! Anthropic SSE streams (`message_start` … `message_stop`): the backend decoder and the
//! client encoder.

use std::borrow::Cow;
use std::collections::HashMap;

use glider_ngl::stream::PartKind;
use glider_ngl::{ApiError, StopReason, StreamEvent, Usage};
use serde::Serialize;
use serde_json::Value;

use super::borrowed::{ReadDelta, read_block_delta};
use super::error::{encode_error, error_from_json};
use super::response::{
    WireUsage, decode_stop, decode_usage, message_id, stop_reason_str, stop_sequence_of,
};
use crate::framing::{SseEvent, SseParser, finished, refused, write_sse_json};
use crate::json::bad_gateway;
use crate::typed::{EmptyObject, Reading, Typed};
use crate::{StreamDecoder, StreamEncoder};

/// Anthropic SSE → ngl events. Anthropic block indices map onto sequential ngl indices;
/// blocks ngl cannot carry (redacted thinking, server tool results) are skipped.
#[derive(Default)]
pub(super) struct AnthropicStreamDecoder {
    sse: SseParser,
    started: bool,
    done: bool,
    /// Anthropic block index → ngl part index (`None`: a skipped block).
    blocks: HashMap<u64, Option<usize>>,
    /// The open part: (Anthropic index, ngl index).
    open: Option<(u64, usize)>,
    next_index: usize,
    usage: Usage,
    stop_reason: Option<StopReason>,
    stop_sequence: Option<String>,
    /// Events whose `event:` name this says are passed over unparsed (a reader that
    /// needs only part of the stream: [`crate::usage_stream_decoder`]).
    passed_over: Option<fn(&str) -> bool>,
    /// Content block deltas are decoded only for tool call blocks (their `index`
    /// found by a scan): a reader that keeps only tool calls.
    tool_deltas_only: bool,
    /// The Anthropic indices of the tool call blocks seen so far (kept only with
    /// `tool_deltas_only`, the one reader of them).
    tool_blocks: Vec<u64>,
    /// Whether the borrowing reader is tried first (always, but in tests).
    reading: Reading,
}

impl AnthropicStreamDecoder {
    /// A decoder of the stream's usage, errors and end alone ([`crate::usage_stream_decoder`]).
    /// With `with_tool_calls` the tool call blocks are decoded too: every block's start,
    /// and the deltas of tool call blocks only.
    pub(super) fn usage_only(with_tool_calls: bool) -> Self {
        let passed_over: fn(&str) -> bool = match with_tool_calls {
            true => |name: &str| name == "ping",
            false => is_content_event,
        };
        AnthropicStreamDecoder {
            sse: SseParser::passing_over(passed_over),
            passed_over: Some(passed_over),
            tool_deltas_only: with_tool_calls,
            ..Self::default()
        }
    }

    /// Whether a `content_block_delta` may belong to a tool call block. Its `index` is
    /// found by a scan, not a parse; one the scan cannot place is decoded (and a delta
    /// without one fails there, as it would have).
    fn may_be_tool_delta(&self, data: &str) -> bool {
        let Ok(Some(span)) = crate::scan::top_level_member(data.as_bytes(), "index") else {
            return true;
        };
        data[span]
            .parse::<u64>()
            .map_or(true, |index| self.tool_blocks.contains(&index))
    }

    fn ensure_started(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: String::new(),
                model: String::new(),
                usage: Usage::default(),
            });
        }
    }

    fn close_open(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some((_, index)) = self.open.take() {
            out.push(StreamEvent::PartStop { index });
        }
    }

    /// A content block's delta, for the open block only.
    fn apply_delta(&mut self, block_index: u64, delta: ReadDelta<'_>, out: &mut Vec<StreamEvent>) {
        let Some(Some(index)) = self.blocks.get(&block_index).copied() else {
            return;
        };
        if self.open.map(|(_, open)| open) != Some(index) {
            return;
        }
        out.push(match delta {
            ReadDelta::Text(text) => StreamEvent::TextDelta {
                index,
                text: text.into_owned(),
            },
            ReadDelta::Thinking(text) => StreamEvent::ThinkingDelta {
                index,
                text: text.into_owned(),
            },
            ReadDelta::Signature(signature) => StreamEvent::ThinkingSignature {
                index,
                signature: signature.into_owned(),
            },
            ReadDelta::InputJson(json) if json.is_empty() => return,
            ReadDelta::InputJson(json) => StreamEvent::ToolArgsDelta {
                index,
                json: json.into_owned(),
            },
            ReadDelta::Other => return,
        });
    }

    fn handle(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), ApiError> {
        if self.done || event.data.trim().is_empty() || event.data.trim() == "[DONE]" {
            return Ok(());
        }

        if self.reading.borrowing()
            && let Some((index, delta)) = read_block_delta(event.event.as_deref(), &event.data)
        {
            self.apply_delta(index, delta, out);
            return Ok(());
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| bad_gateway(format!("anthropic stream: event data is not JSON: {e}")))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                let message = data.get("message").unwrap_or(&Value::Null);
                let usage = message.get("usage").map(decode_usage).unwrap_or_default();
                self.usage.merge(&usage);
                if !self.started {
                    self.started = true;
                    let text = |key: &str| {
                        message
                            .get(key)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    out.push(StreamEvent::Start {
                        id: text("id"),
                        model: text("model"),
                        usage: Usage {
                            output_tokens: 0,
                            ..usage
                        },
                    });
                }
            }
            "content_block_start" => {
                self.ensure_started(out);
                let block_index = block_index(&data)?;
                if self.blocks.contains_key(&block_index) {
                    return Ok(());
                }
                self.close_open(out);
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let text = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let index = self.next_index;
                let (kind, first) = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let t = text("text");
                        let first =
                            (!t.is_empty()).then_some(StreamEvent::TextDelta { index, text: t });
                        (PartKind::Text, first)
                    }
                    Some("thinking") => {
                        let t = text("thinking");
                        let first = (!t.is_empty())
                            .then_some(StreamEvent::ThinkingDelta { index, text: t });
                        (PartKind::Thinking, first)
                    }
                    Some("tool_use" | "server_tool_use") => {
                        if self.tool_deltas_only {
                            self.tool_blocks.push(block_index);
                        }
                        let first = block
                            .get("input")
                            .and_then(Value::as_object)
                            .filter(|input| !input.is_empty())
                            .map(|input| StreamEvent::ToolArgsDelta {
                                index,
                                json: Value::Object(input.clone()).to_string(),
                            });
                        (
                            PartKind::ToolCall {
                                id: text("id"),
                                name: text("name"),
                            },
                            first,
                        )
                    }
                    _ => {
                        self.blocks.insert(block_index, None);
                        return Ok(());
                    }
                };
                self.blocks.insert(block_index, Some(index));
                self.open = Some((block_index, index));
                self.next_index += 1;
                out.push(StreamEvent::PartStart { index, kind });
                out.extend(first);
            }
            "content_block_delta" => {
                let block_index = block_index(&data)?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let field = |key: &str| {
                    Cow::Borrowed(delta.get(key).and_then(Value::as_str).unwrap_or_default())
                };
                let read = match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => ReadDelta::Text(field("text")),
                    Some("thinking_delta") => ReadDelta::Thinking(field("thinking")),
                    Some("signature_delta") => ReadDelta::Signature(field("signature")),
                    Some("input_json_delta") => ReadDelta::InputJson(field("partial_json")),
                    _ => ReadDelta::Other,
                };
                self.apply_delta(block_index, read, out);
            }
            "content_block_stop" => {
                let block_index = block_index(&data)?;
                if self.open.map(|(open, _)| open) == Some(block_index) {
                    self.close_open(out);
                }
            }
            "message_delta" => {
                self.ensure_started(out);
                let delta = data.get("delta");
                let reason = delta.and_then(|d| d.get("stop_reason"));
                if reason.is_some_and(Value::is_string) {
                    let (reason, sequence) =
                        decode_stop(reason, delta.and_then(|d| d.get("stop_sequence")));
                    self.stop_reason = Some(reason);
                    self.stop_sequence = sequence;
                }
                if let Some(usage) = data.get("usage") {
                    self.usage.merge(&decode_usage(usage));
                }
            }
            "message_stop" => {
                self.ensure_started(out);
                self.close_open(out);
                out.push(StreamEvent::Finish {
                    stop_reason: self.stop_reason.unwrap_or(StopReason::EndTurn),
                    stop_sequence: self.stop_sequence.take(),
                    usage: self.usage,
                });
                self.done = true;
            }
            "error" => {
                let error = error_from_json(&data, 502).unwrap_or_else(|| {
                    bad_gateway(format!("anthropic stream error: {}", event.data))
                });
                out.push(StreamEvent::Error { error });
                self.done = true;
            }
            _ => {} // ping and future event types
        }
        Ok(())
    }
}

/// A content block event or a ping, by its `event:` name: nothing usage, errors or the
/// end read. (A last event cut short is still decoded, for its error.)
fn is_content_event(name: &str) -> bool {
    name.starts_with("content_block_") || name == "ping"
}

fn block_index(data: &Value) -> Result<u64, ApiError> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad_gateway("anthropic stream: content block event without `index`"))
}

impl StreamDecoder for AnthropicStreamDecoder {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ApiError> {
        let mut out = Vec::new();
        let events = self
            .sse
            .feed(bytes)
            .map_err(|error| refused(error, &mut self.done))?;
        for event in events {
            if let (Some(passed_over), Some(name)) = (self.passed_over, event.event.as_deref())
                && passed_over(name)
            {
                continue;
            }
            if self.tool_deltas_only
                && event.event.as_deref() == Some("content_block_delta")
                && !self.may_be_tool_delta(&event.data)
            {
                continue;
            }
            if let Err(err) = self.handle(event, &mut out) {
                self.done = true;
                return Err(err);
            }
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let last = finished(self.sse.finish(), &mut self.done, &mut out);
        if let Some(event) = last
            && let Err(error) = self.handle(event, &mut out)
        {
            self.done = true;
            out.push(StreamEvent::Error { error });
        }
        if !self.done {
            self.done = true;
            out.push(StreamEvent::Error {
                error: bad_gateway("anthropic stream ended before message_stop"),
            });
        }
        out
    }
}

/// ngl events → Anthropic SSE exactly as the API writes it (`message_start`, `ping`,
/// `content_block_*`, `message_delta`, `message_stop`, `error`).
#[derive(Default)]
pub(super) struct AnthropicStreamEncoder {
    started: bool,
    done: bool,
    open: Option<usize>,
    saw_tool_call: bool,
}

impl AnthropicStreamEncoder {
    fn start(&mut self, id: &str, model: &str, usage: &Usage, out: &mut Vec<u8>) {
        self.started = true;
        let start = MessageStart {
            kind: "message_start",
            message: StartMessage {
                id: &message_id(id),
                kind: "message",
                role: "assistant",
                model,
                content: [],
                stop_reason: None,
                stop_sequence: None,
                usage: WireUsage::of(usage),
            },
        };
        write_sse_json(out, Some("message_start"), &start);
        write_sse_json(out, Some("ping"), &Typed { kind: "ping" });
    }

    fn stop_open(&mut self, out: &mut Vec<u8>) {
        if let Some(index) = self.open.take() {
            let stop = Indexed {
                kind: "content_block_stop",
                index,
            };
            write_sse_json(out, Some("content_block_stop"), &stop);
        }
    }
}

// The events as the API writes them, serialised from borrowed fields straight into the
// stream (no `Value` built per event): members in the API's order.

#[derive(Serialize)]
struct Indexed {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
}

#[derive(Serialize)]
struct MessageStart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: StartMessage<'a>,
}

#[derive(Serialize)]
struct StartMessage<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: [(); 0],
    stop_reason: Option<()>,
    stop_sequence: Option<()>,
    usage: WireUsage,
}

#[derive(Serialize)]
struct BlockStart<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
    content_block: Block<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'static str,
    },
    Thinking {
        thinking: &'static str,
        signature: &'static str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: EmptyObject,
    },
}

#[derive(Serialize)]
struct BlockDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: usize,
    delta: Delta<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum Delta<'a> {
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    #[serde(rename = "signature_delta")]
    Signature { signature: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
}

#[derive(Serialize)]
struct MessageDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    delta: StopDelta<'a>,
    usage: WireUsage,
}

#[derive(Serialize)]
struct StopDelta<'a> {
    stop_reason: &'static str,
    stop_sequence: Option<&'a str>,
}

fn block_delta(out: &mut Vec<u8>, index: usize, delta: Delta<'_>) {
    let event = BlockDelta {
        kind: "content_block_delta",
        index,
        delta,
    };
    write_sse_json(out, Some("content_block_delta"), &event);
}

impl StreamEncoder for AnthropicStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if !self.started && !matches!(event, StreamEvent::Start { .. } | StreamEvent::Error { .. })
        {
            self.start("", "", &Usage::default(), out);
        }
        match event {
            StreamEvent::Start { id, model, usage } => {
                if !self.started {
                    self.start(id, model, usage, out);
                }
            }
            StreamEvent::PartStart { index, kind } => {
                self.stop_open(out);
                let content_block = match kind {
                    PartKind::Text => Block::Text { text: "" },
                    PartKind::Thinking => Block::Thinking {
                        thinking: "",
                        signature: "",
                    },
                    PartKind::ToolCall { id, name } => {
                        self.saw_tool_call = true;
                        Block::ToolUse {
                            id,
                            name,
                            input: EmptyObject {},
                        }
                    }
                };
                let start = BlockStart {
                    kind: "content_block_start",
                    index: *index,
                    content_block,
                };
                write_sse_json(out, Some("content_block_start"), &start);
                self.open = Some(*index);
            }
            StreamEvent::TextDelta { index, text } => {
                block_delta(out, *index, Delta::Text { text });
            }
            StreamEvent::ThinkingDelta { index, text } => {
                block_delta(out, *index, Delta::Thinking { thinking: text });
            }
            StreamEvent::ThinkingSignature { index, signature } => {
                block_delta(out, *index, Delta::Signature { signature });
            }
            StreamEvent::ToolArgsDelta { index, json } => {
                block_delta(out, *index, Delta::InputJson { partial_json: json });
            }
            StreamEvent::PartStop { index } => {
                if self.open == Some(*index) {
                    self.stop_open(out);
                }
            }
            StreamEvent::Finish {
                stop_reason,
                stop_sequence,
                usage,
            } => {
                self.stop_open(out);
                let delta = MessageDelta {
                    kind: "message_delta",
                    delta: StopDelta {
                        stop_reason: stop_reason_str(*stop_reason, self.saw_tool_call),
                        stop_sequence: stop_sequence_of(*stop_reason, stop_sequence.as_deref()),
                    },
                    usage: WireUsage::of(usage),
                };
                write_sse_json(out, Some("message_delta"), &delta);
                write_sse_json(
                    out,
                    Some("message_stop"),
                    &Typed {
                        kind: "message_stop",
                    },
                );
                self.done = true;
            }
            StreamEvent::Error { error } => {
                write_sse_json(out, Some("error"), &encode_error(error));
                self.done = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::typed::{Reading, decode_all};
    use glider_ngl::stream::PartKind;
    use glider_ngl::stream::events_of;
    use glider_ngl::{ApiError, ErrorKind, Part, Response, StopReason, StreamEvent, Usage};
    use glider_ngl::{ResponseBuilder, StreamEvent as E};
    use serde_json::{Value, json};

    use crate::Codec;
    use crate::anthropic::Anthropic;
    use crate::anthropic::fixtures::expected_response;
    use crate::framing::{SseParser, write_sse_json};

    const CAPTURED_STREAM: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":2048,\"cache_read_input_tokens\":18432,\"output_tokens\":1,\"service_tier\":\"standard\"}}}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\
\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"The test expects add\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\" to sum, so fix the operator.\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"The operator is wrong \u{2014} \"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"fixing it.\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"Edit\",\"input\":{}}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"file_path\\\": \\\"/repo/src/lib.rs\\\", \"}}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"old_string\\\": \\\"a - b\\\", \\\"new_string\\\": \\\"a + b\\\"}\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":2}\n\
\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\
\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\
\n";

    fn captured_events() -> Vec<StreamEvent> {
        vec![
            E::Start {
                id: "msg_01XFDUDYJgAACzvnptvVoYEL".into(),
                model: "claude-sonnet-4-5-20250929".into(),
                usage: Usage {
                    input_tokens: 12,
                    output_tokens: 0,
                    cache_read_tokens: 18432,
                    cache_write_tokens: 2048,
                    reasoning_tokens: 0,
                },
            },
            E::PartStart {
                index: 0,
                kind: PartKind::Thinking,
            },
            E::ThinkingDelta {
                index: 0,
                text: "The test expects add".into(),
            },
            E::ThinkingDelta {
                index: 0,
                text: " to sum, so fix the operator.".into(),
            },
            E::ThinkingSignature {
                index: 0,
                signature: "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs".into(),
            },
            E::PartStop { index: 0 },
            E::PartStart {
                index: 1,
                kind: PartKind::Text,
            },
            E::TextDelta {
                index: 1,
                text: "The operator is wrong \u{2014} ".into(),
            },
            E::TextDelta {
                index: 1,
                text: "fixing it.".into(),
            },
            E::PartStop { index: 1 },
            E::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                    name: "Edit".into(),
                },
            },
            E::ToolArgsDelta {
                index: 2,
                json: "{\"file_path\": \"/repo/src/lib.rs\", ".into(),
            },
            E::ToolArgsDelta {
                index: 2,
                json: "\"old_string\": \"a - b\", \"new_string\": \"a + b\"}".into(),
            },
            E::PartStop { index: 2 },
            E::Finish {
                stop_reason: StopReason::ToolUse,
                stop_sequence: None,
                usage: Usage {
                    input_tokens: 12,
                    output_tokens: 89,
                    cache_read_tokens: 18432,
                    cache_write_tokens: 2048,
                    reasoning_tokens: 0,
                },
            },
        ]
    }

    fn decode_stream(chunks: &[&[u8]]) -> Vec<StreamEvent> {
        let mut decoder = Anthropic.stream_decoder();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(decoder.feed(chunk).expect("well-formed stream"));
        }
        events.extend(decoder.finish());
        events
    }

    /// The borrowing reader of content block deltas gives what the `Value` reading
    /// gives, for the captured stream and for deltas it leaves to that reading.
    #[test]
    fn borrowed_deltas_decode_as_the_value_reading_does() {
        let start = |index: u64, block: &str| {
            format!(
                "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{index},\"content_block\":{block}}}\n\n"
            )
        };
        let delta = |data: &str| format!("event: content_block_delta\ndata: {data}\n\n");
        let mut odd = String::from(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"x\",\"usage\":{\"input_tokens\":3}}}\n\n",
        );
        odd.push_str(&start(0, r#"{"type":"text","text":""}"#));
        for data in [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a \"b\" \u00e9"}}"#,
            r#"{"index":0,"delta":{"type":"text_delta","text":"no type: the event name"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":null}"#,
            r#"{"type":"content_block_delta","index":0}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":7}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","text":"dup"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":["text_delta"]}"#,
            r#"{"type":"content_block_delta","index":5,"delta":{"type":"text_delta","text":"unknown block"}}"#,
            r#"{"type":"ping","index":0}"#,
        ] {
            odd.push_str(&delta(data));
        }
        odd.push_str(&start(
            1,
            r#"{"type":"tool_use","id":"t","name":"f","input":{}}"#,
        ));
        for data in [
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"closed block"}}"#,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"no index"}}"#,
        ] {
            odd.push_str(&delta(data));
        }
        // The typed reader does read: every delta of the captured stream, and the odd
        // deltas but those of a wrong type, duplicated, an array or without an index.
        let typed_reads = |wire: &str| {
            let mut parser = SseParser::new();
            let events = parser.feed(wire.as_bytes()).expect("short lines");
            let deltas = events
                .iter()
                .filter(|e| e.event.as_deref() == Some("content_block_delta"));
            let read = deltas
                .clone()
                .filter(|e| super::read_block_delta(e.event.as_deref(), &e.data).is_some());
            (read.count(), deltas.count())
        };
        let (read, deltas) = typed_reads(CAPTURED_STREAM);
        assert!(deltas > 0 && read == deltas, "{read} of {deltas}");
        assert_eq!(typed_reads(&odd), (9, 14));
        for wire in [CAPTURED_STREAM, odd.as_str()] {
            let read = |value_only: bool| {
                let reading = Reading { value_only };
                let decoder = super::AnthropicStreamDecoder {
                    reading,
                    ..super::AnthropicStreamDecoder::default()
                };
                decode_all(decoder, wire.as_bytes())
            };
            assert_eq!(read(false), read(true), "{wire}");
        }
    }

    #[test]
    fn stream_decodes_at_every_split_point() {
        let wire = CAPTURED_STREAM.as_bytes();
        let expected = captured_events();
        for split in 0..=wire.len() {
            let events = decode_stream(&[&wire[..split], &wire[split..]]);
            assert_eq!(events, expected, "split at {split}");
        }
        let bytes: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(decode_stream(&bytes), expected);
        let crlf = CAPTURED_STREAM.replace('\n', "\r\n");
        assert_eq!(decode_stream(&[crlf.as_bytes()]), expected);

        let mut builder = ResponseBuilder::new();
        for event in &expected {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(
            resp.parts[2],
            Part::ToolCall {
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "Edit".into(),
                arguments: json!({"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"}),
            }
        );
        assert_eq!(
            resp.plain_text(),
            "The operator is wrong \u{2014} fixing it."
        );
    }

    fn sse(events: &[Value]) -> String {
        let mut out = Vec::new();
        for event in events {
            let name = event["type"].as_str().expect("type");
            write_sse_json(&mut out, Some(name), event);
        }
        String::from_utf8(out).expect("utf8")
    }

    fn message_start(id: &str) -> Value {
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "model": "claude-opus-4-1-20250805", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 2679, "output_tokens": 3}}})
    }

    #[test]
    fn stream_maps_block_indices_and_skips_unmodelled_blocks() {
        let wire = sse(&[
            message_start("msg_01"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgB"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "server_tool_use", "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB", "name": "web_search", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"weather in NYC today\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB", "content": [{"type": "web_search_result", "title": "Weather", "url": "https://weather.com"}]}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "It is sunny."}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "citations_delta", "citation": {"type": "web_search_result_location"}}}),
            json!({"type": "content_block_stop", "index": 3}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"input_tokens": 10682, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 510, "server_tool_use": {"web_search_requests": 1}}}),
            json!({"type": "message_stop"}),
        ]);
        let events = decode_stream(&[wire.as_bytes()]);
        assert_eq!(
            events,
            vec![
                E::Start {
                    id: "msg_01".into(),
                    model: "claude-opus-4-1-20250805".into(),
                    usage: Usage {
                        input_tokens: 2679,
                        ..Usage::default()
                    },
                },
                E::PartStart {
                    index: 0,
                    kind: PartKind::ToolCall {
                        id: "srvtoolu_014hJH82Qum7Td6UV8gDXThB".into(),
                        name: "web_search".into(),
                    },
                },
                E::ToolArgsDelta {
                    index: 0,
                    json: "{\"query\": \"weather in NYC today\"}".into(),
                },
                E::PartStop { index: 0 },
                E::PartStart {
                    index: 1,
                    kind: PartKind::Text,
                },
                E::TextDelta {
                    index: 1,
                    text: "It is sunny.".into(),
                },
                E::PartStop { index: 1 },
                E::Finish {
                    stop_reason: StopReason::EndTurn,
                    stop_sequence: None,
                    usage: Usage {
                        input_tokens: 10682,
                        output_tokens: 510,
                        ..Usage::default()
                    },
                },
            ]
        );
    }

    #[test]
    fn truncated_stream_ends_in_an_error() {
        let cut = CAPTURED_STREAM
            .find("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}")
            .expect("marker");
        let events = decode_stream(&[&CAPTURED_STREAM.as_bytes()[..cut]]);
        let last = events.last().expect("events");
        assert_eq!(
            last,
            &E::Error {
                error: ApiError::new(
                    ErrorKind::BadGateway,
                    "anthropic stream ended before message_stop"
                )
            }
        );
        assert!(!events.iter().any(|e| matches!(e, E::Finish { .. })));
        assert_eq!(events.len(), 10);

        // Nothing at all is still an error, never a fabricated Finish.
        let events = decode_stream(&[]);
        assert!(matches!(&events[..], [E::Error { error }] if error.kind == ErrorKind::BadGateway));

        // A message_stop without a blank line after it still completes the stream.
        let unterminated = CAPTURED_STREAM.trim_end();
        let events = decode_stream(&[unterminated.as_bytes()]);
        assert_eq!(events, captured_events());
    }

    #[test]
    fn stream_error_event_becomes_an_error() {
        let wire = format!(
            "{}event: error\ndata: {{\"type\": \"error\", \"error\": {{\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}}}\n\n",
            sse(&[message_start("msg_02")])
        );
        let events = decode_stream(&[wire.as_bytes()]);
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[1],
            E::Error {
                error: ApiError::new(ErrorKind::Overloaded, "Overloaded")
            }
        );
    }

    #[test]
    fn malformed_stream_json_is_a_bad_gateway() {
        let mut decoder = Anthropic.stream_decoder();
        let err = decoder
            .feed(b"event: message_start\ndata: {\"type\": \"message_start\", \"mess\n\n")
            .expect_err("malformed");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        assert!(err.message.contains("not JSON"), "{}", err.message);
        assert_eq!(decoder.finish(), Vec::new());

        let mut decoder = Anthropic.stream_decoder();
        let err = decoder
            .feed(b"data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"text\"}}\n\n")
            .expect_err("no index");
        assert_eq!(err.kind, ErrorKind::BadGateway);
    }

    fn parse_sse(bytes: &[u8]) -> Vec<(String, Value)> {
        let mut parser = SseParser::new();
        let mut events = parser.feed(bytes).expect("short lines");
        events.extend(parser.finish().expect("short lines"));
        events
            .into_iter()
            .map(|e| {
                let data: Value = serde_json::from_str(&e.data).expect("json data");
                (e.event.expect("named event"), data)
            })
            .collect()
    }

    /// The encoder's bytes, member order included, for every kind of event: what the
    /// API writes (and what this encoder wrote through `json!` values before it
    /// serialised borrowed structs).
    #[test]
    fn stream_encoder_bytes_are_the_apis() {
        let mut response = Response {
            id: "resp_\"q\"".into(),
            stop_reason: StopReason::StopSequence,
            stop_sequence: Some("END\n".into()),
            ..expected_response()
        };
        response.parts.push(Part::ToolCall {
            id: "toolu_1".into(),
            name: "Read".into(),
            arguments: json!({"path": "a\tb.rs", "n": 1}),
        });
        let mut encoder = Anthropic.stream_encoder();
        let mut out = Vec::new();
        for event in events_of(&response) {
            encoder.encode(&event, &mut out);
        }
        let mut failing = Anthropic.stream_encoder();
        failing.encode(
            &E::TextDelta {
                index: 0,
                text: "é\u{1}".into(),
            },
            &mut out,
        );
        failing.encode(
            &E::Error {
                error: ApiError::new(ErrorKind::Overloaded, "busy"),
            },
            &mut out,
        );
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(text, GOLDEN, "{text}");
    }

    const GOLDEN: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_resp_\"q\"","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":2048,"cache_read_input_tokens":18432,"output_tokens":0}}}

event: ping
data: {"type":"ping"}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The operator is wrong."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Fixing the operator."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"Edit","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"file_path\":\"/repo/src/lib.rs\",\"old_string\":\"a - b\",\"new_string\":\"a + b\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"a\\tb.rs\",\"n\":1}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END\n"},"usage":{"input_tokens":12,"cache_creation_input_tokens":2048,"cache_read_input_tokens":18432,"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

event: message_start
data: {"type":"message_start","message":{"id":"msg_glider","type":"message","role":"assistant","model":"","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}

event: ping
data: {"type":"ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"é\u0001"}}

event: error
data: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}

"#;

    #[test]
    fn stream_encodes_exactly_what_the_api_writes() {
        let mut encoder = Anthropic.stream_encoder();
        let mut out = Vec::new();
        let response = Response {
            id: "resp_68af".into(),
            ..expected_response()
        };
        for event in events_of(&response) {
            encoder.encode(&event, &mut out);
        }
        let text = String::from_utf8(out.clone()).expect("utf8");
        assert!(text.starts_with("event: message_start\ndata: {"), "{text}");
        assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));

        let events = parse_sse(&out);
        for (name, data) in &events {
            assert_eq!(data["type"], json!(name), "event name matches data.type");
        }
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(
            events[0].1,
            json!({"type": "message_start", "message": {
                "id": "msg_resp_68af", "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5-20250929", "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 12, "cache_creation_input_tokens": 2048, "cache_read_input_tokens": 18432, "output_tokens": 0}
            }})
        );
        assert_eq!(events[1].1, json!({"type": "ping"}));
        assert_eq!(
            events[2].1,
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
        );
        assert_eq!(
            events[3].1,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "The operator is wrong."}})
        );
        assert_eq!(
            events[4].1,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCkgIBxABGAIqQKk4cIbqDhJSUpgFMV1Zs"}})
        );
        assert_eq!(
            events[5].1,
            json!({"type": "content_block_stop", "index": 0})
        );
        assert_eq!(
            events[6].1,
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})
        );
        assert_eq!(
            events[7].1,
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Fixing the operator."}})
        );
        assert_eq!(
            events[9].1,
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "Edit", "input": {}}})
        );
        assert_eq!(events[10].1["delta"]["type"], json!("input_json_delta"));
        let args: Value = serde_json::from_str(
            events[10].1["delta"]["partial_json"]
                .as_str()
                .expect("partial_json"),
        )
        .expect("args json");
        assert_eq!(
            args,
            json!({"file_path": "/repo/src/lib.rs", "old_string": "a - b", "new_string": "a + b"})
        );
        assert_eq!(
            events[12].1,
            json!({"type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"input_tokens": 12, "cache_creation_input_tokens": 2048, "cache_read_input_tokens": 18432, "output_tokens": 89}})
        );

        // Our own decoder reads it back to the same reply.
        let mut builder = ResponseBuilder::new();
        for event in decode_stream(&[&out]) {
            builder.push(&event);
        }
        let back = builder.finish().expect("complete");
        assert_eq!(
            back,
            Response {
                id: "msg_resp_68af".into(),
                ..response
            }
        );
    }

    #[test]
    fn a_stop_sequence_streams_by_name_both_ways() {
        let response = Response {
            id: "msg_1".into(),
            model: "m".into(),
            parts: vec![Part::text("Writ")],
            stop_reason: StopReason::StopSequence,
            stop_sequence: Some("e".into()),
            usage: Usage::default(),
        };
        let mut encoder = Anthropic.stream_encoder();
        let mut out = Vec::new();
        for event in events_of(&response) {
            encoder.encode(&event, &mut out);
        }
        let text = String::from_utf8(out.clone()).expect("utf-8");
        assert!(
            text.contains(r#""stop_reason":"stop_sequence","stop_sequence":"e""#),
            "{text}"
        );
        let mut builder = ResponseBuilder::new();
        for event in decode_stream(&[&out]) {
            builder.push(&event);
        }
        let back = builder.finish().expect("complete");
        assert_eq!(back.stop_sequence.as_deref(), Some("e"));
        assert_eq!(back.stop_reason, StopReason::StopSequence);
    }

    #[test]
    fn stream_encoder_writes_errors_and_stops() {
        let mut encoder = Anthropic.stream_encoder();
        let mut out = Vec::new();
        encoder.encode(
            &E::Start {
                id: "msg_07".into(),
                model: "qwen3-coder".into(),
                usage: Usage::default(),
            },
            &mut out,
        );
        encoder.encode(
            &E::PartStart {
                index: 0,
                kind: PartKind::Text,
            },
            &mut out,
        );
        encoder.encode(
            &E::Error {
                error: ApiError::new(ErrorKind::Timeout, "backend timed out after 300s"),
            },
            &mut out,
        );
        encoder.encode(
            &E::Finish {
                stop_reason: StopReason::EndTurn,
                stop_sequence: None,
                usage: Usage::default(),
            },
            &mut out,
        );
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.ends_with(
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"backend timed out after 300s\"}}\n\n"
        ), "{text}");
        assert!(!text.contains("message_stop"));
        assert!(text.contains("\"id\":\"msg_07\""));
    }

    #[test]
    fn stream_encoder_marks_tool_turns_from_foreign_backends() {
        let mut encoder = Anthropic.stream_encoder();
        let mut out = Vec::new();
        for event in [
            E::Start {
                id: "chatcmpl-1".into(),
                model: "gpt-5".into(),
                usage: Usage::default(),
            },
            E::PartStart {
                index: 0,
                kind: PartKind::ToolCall {
                    id: "call_1".into(),
                    name: "Bash".into(),
                },
            },
            E::ToolArgsDelta {
                index: 0,
                json: "{\"command\":\"ls\"}".into(),
            },
            E::PartStop { index: 0 },
            E::Finish {
                stop_reason: StopReason::EndTurn,
                stop_sequence: None,
                usage: Usage {
                    input_tokens: 5,
                    output_tokens: 7,
                    ..Usage::default()
                },
            },
        ] {
            encoder.encode(&event, &mut out);
        }
        let events = parse_sse(&out);
        assert_eq!(events[0].1["message"]["id"], json!("msg_chatcmpl-1"));
        let delta = &events[events.len() - 2].1;
        assert_eq!(delta["delta"]["stop_reason"], json!("tool_use"));
        assert_eq!(delta["usage"]["output_tokens"], json!(7));
        assert_eq!(delta["usage"]["input_tokens"], json!(5));
    }
}
