//! Chat Completions SSE streams (`chat.completion.chunk` … `[DONE]`): the backend decoder
//! and the client encoder.

use glider_ngl::stream::PartKind;
use glider_ngl::{ApiError, StopReason, StreamEvent, Usage};
use serde::Serialize;
use serde_json::{Value, json};

use super::borrowed::{self, Chunk};
use super::error::{error_fields, error_object};
use super::response::{
    completion_id, decode_finish, decode_usage, encode_finish, encode_usage, now_unix,
};
use crate::framing::{SseParser, finished, refused, write_sse, write_sse_json};
use crate::json::bad_gateway;
use crate::typed::{EmptyObject, Reading};
use crate::{StreamDecoder, StreamEncoder};

/// The part a stream decoder has open.
#[derive(Debug)]
enum Open {
    Text(usize),
    Thinking(usize),
    /// `wire` is the OpenAI `tool_calls[].index`.
    Tool {
        index: usize,
        wire: u64,
        id: String,
    },
}

#[derive(Debug, Default)]
pub(super) struct ChatStreamDecoder {
    sse: SseParser,
    started: bool,
    ended: bool,
    open: Option<Open>,
    next_index: usize,
    seen_wire: Vec<u64>,
    finish_reason: Option<String>,
    /// vLLM's `stop_reason` string: the stop sequence that matched.
    stop_sequence: Option<String>,
    saw_tool_calls: bool,
    usage: Usage,
    /// Whether the borrowing reader is tried first (always, but in tests).
    reading: Reading,
}

impl ChatStreamDecoder {
    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(open) = self.open.take() {
            let index = match open {
                Open::Text(i) | Open::Thinking(i) | Open::Tool { index: i, .. } => i,
            };
            out.push(StreamEvent::PartStop { index });
        }
    }

    fn start_part(&mut self, kind: PartKind, out: &mut Vec<StreamEvent>) -> usize {
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        out.push(StreamEvent::PartStart { index, kind });
        index
    }

    fn text_index(&mut self, out: &mut Vec<StreamEvent>) -> usize {
        if let Some(Open::Text(i)) = self.open {
            return i;
        }
        let index = self.start_part(PartKind::Text, out);
        self.open = Some(Open::Text(index));
        index
    }

    fn thinking_index(&mut self, out: &mut Vec<StreamEvent>) -> usize {
        if let Some(Open::Thinking(i)) = self.open {
            return i;
        }
        let index = self.start_part(PartKind::Thinking, out);
        self.open = Some(Open::Thinking(index));
        index
    }

    fn tool_fragment(&mut self, call: &Value, out: &mut Vec<StreamEvent>) -> Result<(), ApiError> {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let function = call.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let arguments = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(text)) => text.clone(),
            Some(object @ Value::Object(_)) => object.to_string(),
            _ => String::new(),
        };
        let wire = match call.get("index").and_then(Value::as_u64) {
            Some(wire) => wire,
            // No index: a fragment continues the open call unless it brings a new id.
            None => match &self.open {
                Some(Open::Tool { wire, .. }) if id.is_none() => *wire,
                _ => self.seen_wire.iter().max().map_or(0, |w| w + 1),
            },
        };
        let index = match &self.open {
            Some(Open::Tool {
                index,
                wire: open_wire,
                id: open_id,
            }) if *open_wire == wire && id.is_none_or(|id| id == open_id) => *index,
            _ => {
                if id.is_none() && self.seen_wire.contains(&wire) {
                    return Err(bad_gateway(format!(
                        "backend stream resumed tool call {wire} after another part started"
                    )));
                }
                let id = id.map_or_else(|| format!("call_{wire}"), str::to_owned);
                let kind = PartKind::ToolCall {
                    id: id.clone(),
                    name: name.unwrap_or_default().to_owned(),
                };
                let index = self.start_part(kind, out);
                self.open = Some(Open::Tool { index, wire, id });
                self.seen_wire.push(wire);
                self.saw_tool_calls = true;
                index
            }
        };
        if !arguments.is_empty() {
            out.push(StreamEvent::ToolArgsDelta {
                index,
                json: arguments,
            });
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) {
        self.close(out);
        let stop_reason = decode_finish(
            self.finish_reason.as_deref(),
            self.stop_sequence.is_some(),
            self.saw_tool_calls,
        );
        out.push(StreamEvent::Finish {
            stop_reason,
            stop_sequence: self
                .stop_sequence
                .take()
                .filter(|_| stop_reason == StopReason::StopSequence),
            usage: self.usage,
        });
        self.ended = true;
    }

    fn fail(&mut self, message: String, out: &mut Vec<StreamEvent>) {
        out.push(StreamEvent::Error {
            error: bad_gateway(message),
        });
        self.ended = true;
    }

    fn data(&mut self, data: &str, out: &mut Vec<StreamEvent>) -> Result<(), ApiError> {
        if data.trim() == "[DONE]" {
            if self.started {
                self.end(out);
            } else {
                self.fail("backend stream ended before any chunk".into(), out);
            }
            return Ok(());
        }
        if let Some((chunk, usage)) = self
            .reading
            .borrowing()
            .then(|| borrowed::chunk(data))
            .flatten()
        {
            self.borrowed_chunk(&chunk, &usage, out);
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| bad_gateway(format!("malformed backend stream chunk: {e}")))?;
        if !chunk.is_object() {
            return Err(bad_gateway("malformed backend stream chunk: not an object"));
        }
        let is_error = chunk.get("error").is_some_and(|e| !e.is_null())
            || chunk.get("object").and_then(Value::as_str) == Some("error");
        if is_error {
            let (message, _) = error_fields(&chunk);
            self.fail(
                message.unwrap_or_else(|| "backend stream error".to_owned()),
                out,
            );
            return Ok(());
        }
        if !self.started {
            let str_of = |key: &str| chunk.get(key).and_then(Value::as_str).unwrap_or_default();
            self.start(str_of("id"), str_of("model"), out);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage.merge(&decode_usage(usage));
        }
        let choices = chunk.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.get("delta") {
                let reasoning = delta
                    .get("reasoning_content")
                    .and_then(Value::as_str)
                    .or_else(|| delta.get("reasoning").and_then(Value::as_str));
                self.text(reasoning, delta.get("content").and_then(Value::as_str), out);
                if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                    for call in calls {
                        self.tool_fragment(call, out)?;
                    }
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                let sequence = choice.get("stop_reason").and_then(Value::as_str);
                self.finishing(reason, sequence.map(str::to_owned));
            }
        }
        Ok(())
    }

    /// A chunk without tool calls, read by the borrowing reader: what [`Self::data`]
    /// does with it, in the same order.
    fn borrowed_chunk(&mut self, chunk: &Chunk<'_>, usage: &Usage, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.start(
                chunk.id.as_deref().unwrap_or_default(),
                chunk.model.as_deref().unwrap_or_default(),
                out,
            );
        }
        self.usage.merge(usage);
        for choice in chunk.first_choices() {
            if let Some(delta) = choice.delta() {
                self.text(delta.reasoning(), delta.content.as_deref(), out);
            }
            if let Some(reason) = &choice.finish_reason {
                self.finishing(reason, choice.stop_sequence());
            }
        }
    }

    fn start(&mut self, id: &str, model: &str, out: &mut Vec<StreamEvent>) {
        self.started = true;
        out.push(StreamEvent::Start {
            id: id.to_owned(),
            model: model.to_owned(),
            usage: Usage::default(),
        });
    }

    /// A delta's reasoning, then its text (empty ones are nothing).
    fn text(&mut self, reasoning: Option<&str>, content: Option<&str>, out: &mut Vec<StreamEvent>) {
        if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
            let index = self.thinking_index(out);
            out.push(StreamEvent::ThinkingDelta {
                index,
                text: text.to_owned(),
            });
        }
        if let Some(text) = content.filter(|t| !t.is_empty()) {
            let index = self.text_index(out);
            out.push(StreamEvent::TextDelta {
                index,
                text: text.to_owned(),
            });
        }
    }

    /// A choice's `finish_reason` (and vLLM's matched stop string, when it names one).
    fn finishing(&mut self, reason: &str, sequence: Option<String>) {
        self.finish_reason = Some(reason.to_owned());
        if let Some(sequence) = sequence {
            self.stop_sequence = Some(sequence);
        }
    }
}

impl StreamDecoder for ChatStreamDecoder {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ApiError> {
        let mut out = Vec::new();
        let events = self
            .sse
            .feed(bytes)
            .map_err(|error| refused(error, &mut self.ended))?;
        for event in events {
            if self.ended {
                break;
            }
            self.data(&event.data, &mut out)?;
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let last = finished(self.sse.finish(), &mut self.ended, &mut out);
        if let Some(event) = last
            && !self.ended
            && let Err(error) = self.data(&event.data, &mut out)
        {
            out.push(StreamEvent::Error { error });
            self.ended = true;
        }
        if !self.ended {
            if self.started && self.finish_reason.is_some() {
                self.end(&mut out);
            } else {
                self.fail(
                    "backend stream ended before the completion finished".into(),
                    &mut out,
                );
            }
        }
        out
    }
}

#[derive(Debug)]
pub(super) struct ChatStreamEncoder {
    /// Whether the trailing usage chunk (`choices: []`) is written: only when the
    /// client's `stream_options.include_usage` asked for it ([`client_stream_encoder`]).
    usage_chunk: bool,
    id: String,
    model: String,
    created: u64,
    ended: bool,
    tool_count: usize,
    current_tool: Option<usize>,
    start_usage: Usage,
}

impl Default for ChatStreamEncoder {
    /// Writes the usage chunk: Glider's own readers of an encoded stream want it.
    fn default() -> Self {
        ChatStreamEncoder::with_usage_chunk(true)
    }
}

/// The encoder for a client whose request was `client_body`: the usage chunk only
/// when `stream_options.include_usage` is `true`. OpenAI sends it only then, and the
/// OpenAI docs' own `chunk.choices[0]` loop fails on a chunk with no choices.
pub(super) fn client_stream_encoder(client_body: &[u8]) -> Box<dyn StreamEncoder> {
    Box::new(ChatStreamEncoder::with_usage_chunk(asks_for_usage(
        client_body,
    )))
}

/// Whether a Chat Completions request body sets `stream_options.include_usage: true`
/// (read from the member alone; the decoder has already refused a body that is not
/// JSON, so an unreadable one asks for nothing).
fn asks_for_usage(client_body: &[u8]) -> bool {
    let span = match crate::scan::top_level_member(client_body, "stream_options") {
        Ok(Some(span)) => span,
        Ok(None) => return false,
        // Unscannable at the top level (duplicate keys, ...): read it as a parse does.
        Err(_) => {
            return serde_json::from_slice::<Value>(client_body)
                .is_ok_and(|body| body["stream_options"]["include_usage"].as_bool() == Some(true));
        }
    };
    serde_json::from_slice::<Value>(&client_body[span])
        .is_ok_and(|options| options["include_usage"].as_bool() == Some(true))
}

impl ChatStreamEncoder {
    fn with_usage_chunk(usage_chunk: bool) -> Self {
        ChatStreamEncoder {
            usage_chunk,
            id: String::new(),
            model: String::new(),
            created: 0,
            ended: false,
            tool_count: 0,
            current_tool: None,
            start_usage: Usage::default(),
        }
    }

    /// One `chat.completion.chunk` of `delta`, serialised from borrowed fields straight
    /// into the stream, members in the API's order.
    fn write_chunk(&self, out: &mut Vec<u8>, delta: impl Serialize, finish_reason: Option<&str>) {
        #[derive(Serialize)]
        struct Chunk<'a, D> {
            id: &'a str,
            object: &'static str,
            created: u64,
            model: &'a str,
            choices: [Choice<'a, D>; 1],
        }
        #[derive(Serialize)]
        struct Choice<'a, D> {
            index: u32,
            delta: D,
            logprobs: Option<()>,
            finish_reason: Option<&'a str>,
        }
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices: [Choice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason,
            }],
        };
        write_sse_json(out, None, &chunk);
    }

    fn write(&self, out: &mut Vec<u8>, delta: impl Serialize) {
        self.write_chunk(out, delta, None);
    }
}

/// A delta of text (`content`) or reasoning (`reasoning_content`), the chunks a stream
/// sends most.
#[derive(Serialize)]
enum DeltaText<'a> {
    #[serde(rename = "content")]
    Content(&'a str),
    #[serde(rename = "reasoning_content")]
    Reasoning(&'a str),
}

impl StreamEncoder for ChatStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        match event {
            StreamEvent::Start { id, model, usage } => {
                self.id = completion_id(id);
                self.model = model.clone();
                self.created = now_unix();
                self.start_usage = *usage;
                self.write(
                    out,
                    json!({"role": "assistant", "content": "", "refusal": null}),
                );
            }
            StreamEvent::PartStart { kind, .. } => {
                self.current_tool = None;
                if let PartKind::ToolCall { id, name } = kind {
                    let n = self.tool_count;
                    self.tool_count += 1;
                    self.current_tool = Some(n);
                    self.write(
                        out,
                        json!({"tool_calls": [{
                            "index": n,
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }]}),
                    );
                }
            }
            StreamEvent::TextDelta { text, .. } if !text.is_empty() => {
                self.write(out, DeltaText::Content(text));
            }
            StreamEvent::ThinkingDelta { text, .. } if !text.is_empty() => {
                self.write(out, DeltaText::Reasoning(text));
            }
            StreamEvent::ToolArgsDelta { json: args, .. } if !args.is_empty() => {
                if let Some(n) = self.current_tool {
                    self.write(
                        out,
                        json!({"tool_calls": [{"index": n, "function": {"arguments": args}}]}),
                    );
                }
            }
            StreamEvent::PartStop { .. } => self.current_tool = None,
            StreamEvent::Finish {
                stop_reason, usage, ..
            } => {
                self.write_chunk(out, EmptyObject {}, Some(encode_finish(*stop_reason)));
                if self.usage_chunk {
                    let mut total = self.start_usage;
                    total.merge(usage);
                    let usage_chunk = json!({
                        "id": self.id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": encode_usage(&total),
                    });
                    write_sse_json(out, None, &usage_chunk);
                }
                write_sse(out, None, "[DONE]");
                self.ended = true;
            }
            StreamEvent::Error { error } => {
                write_sse_json(out, None, &json!({"error": error_object(error)}));
                self.ended = true;
            }
            StreamEvent::TextDelta { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::ToolArgsDelta { .. }
            | StreamEvent::ThinkingSignature { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::typed::{Reading, decode_all};
    use glider_ngl::ResponseBuilder;
    use glider_ngl::stream::PartKind;
    use glider_ngl::stream::events_of;
    use glider_ngl::{
        ApiError, Dialect, ErrorKind, Part, Response, StopReason, StreamEvent, Usage,
    };
    use serde_json::{Value, json};

    use crate::Codec;
    use crate::framing::SseParser;
    use crate::openai_chat::OpenAiChat;
    use crate::openai_chat::fixtures::{decode_every_split, encode_stream, mask_number, read_call};

    fn sse_data(wire: &[u8]) -> Vec<String> {
        let mut parser = SseParser::new();
        let mut events = parser.feed(wire).expect("short lines");
        events.extend(parser.finish().expect("short lines"));
        events.into_iter().map(|e| e.data).collect()
    }

    const TEXT_STREAM: &str = concat!(
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there! \u{1F44B}\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
        "data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fc9f1d7035\",\"choices\":[],\"usage\":{\"prompt_tokens\":19,\"completion_tokens\":10,\"total_tokens\":29,\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}\n\n",
        "data: [DONE]\n\n",
    );

    /// The borrowing reader of chunks gives what the `Value` reading gives, chunk by
    /// chunk, for every shape a server sends — and leaves it the ones it does not read.
    #[test]
    fn borrowed_chunks_decode_as_the_value_reading_does() {
        let chunks = [
            r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"reasoning_content":"think \"hard\""}}]}"#,
            r#"{"id":"c1","choices":[{"delta":{"reasoning":"more","content":"Hi \u00e9"}}]}"#,
            r#"{"choices":[{"index":1,"delta":{"content":"other choice"}},{"index":0,"delta":{"content":" there"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":null,"tool_calls":null},"finish_reason":"stop","stop_reason":"@@"}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length","stop_reason":128009}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}"#,
            r#"{"choices":null,"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":["array"]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"dup","content":"last"}}]}"#,
            r#"{"choices":[{"index":0.0,"delta":{"content":"float index"}}]}"#,
            r#"{"error":{"message":"overloaded"}}"#,
            r#"{"object":"error","message":"bad"}"#,
            r#"[{"choices":[]}]"#,
        ];
        let borrowed = chunks
            .iter()
            .filter(|c| super::borrowed::chunk(c).is_some())
            .count();
        assert_eq!(
            borrowed, 8,
            "the first eight are read borrowed, the rest fall back"
        );
        // Each prefix of the sequence, ended by [DONE], through both readings.
        for end in 1..=chunks.len() {
            let mut wire = Vec::new();
            for chunk in &chunks[..end] {
                crate::framing::write_sse(&mut wire, None, chunk);
            }
            crate::framing::write_sse(&mut wire, None, "[DONE]");
            let read = |value_only: bool| {
                let reading = Reading { value_only };
                let decoder = super::ChatStreamDecoder {
                    reading,
                    ..super::ChatStreamDecoder::default()
                };
                decode_all(decoder, &wire)
            };
            assert_eq!(read(false), read(true), "{} chunks", end);
        }
    }

    #[test]
    fn decodes_text_stream_at_every_split() {
        let events = decode_every_split(&OpenAiChat, TEXT_STREAM.as_bytes());
        assert_eq!(
            events,
            vec![
                StreamEvent::Start {
                    id: "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT".into(),
                    model: "gpt-4o-2024-08-06".into(),
                    usage: Usage::default()
                },
                StreamEvent::PartStart {
                    index: 0,
                    kind: PartKind::Text
                },
                StreamEvent::TextDelta {
                    index: 0,
                    text: "Hello".into()
                },
                StreamEvent::TextDelta {
                    index: 0,
                    text: " there! \u{1F44B}".into()
                },
                StreamEvent::PartStop { index: 0 },
                StreamEvent::Finish {
                    stop_reason: StopReason::EndTurn,
                    stop_sequence: None,
                    usage: Usage {
                        input_tokens: 19,
                        output_tokens: 10,
                        ..Usage::default()
                    }
                },
            ]
        );
    }

    const TOOL_STREAM: &str = concat!(
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"The user wants\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\" two files.\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Reading both.\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"chatcmpl-tool-a1\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\": \"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"a.rs\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"chatcmpl-tool-b2\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\"{\\\"path\\\": \\\"b.rs\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"id\":\"chatcmpl-9f2c\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\"model\":\"Qwen/Qwen3-8B\",\"choices\":[],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":48,\"total_tokens\":168,\"prompt_tokens_details\":{\"cached_tokens\":100},\"completion_tokens_details\":{\"reasoning_tokens\":20}}}\n\n",
        "data: [DONE]\n\n",
    );

    fn tool_stream_events() -> Vec<StreamEvent> {
        vec![
            StreamEvent::Start {
                id: "chatcmpl-9f2c".into(),
                model: "Qwen/Qwen3-8B".into(),
                usage: Usage::default(),
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Thinking,
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "The user wants".into(),
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: " two files.".into(),
            },
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "Reading both.".into(),
            },
            StreamEvent::PartStop { index: 1 },
            StreamEvent::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "chatcmpl-tool-a1".into(),
                    name: "read_file".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "{\"path\": ".into(),
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "\"a.rs\"}".into(),
            },
            StreamEvent::PartStop { index: 2 },
            StreamEvent::PartStart {
                index: 3,
                kind: PartKind::ToolCall {
                    id: "chatcmpl-tool-b2".into(),
                    name: "read_file".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 3,
                json: "{\"path\": \"b.rs\"}".into(),
            },
            StreamEvent::PartStop { index: 3 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                stop_sequence: None,
                usage: Usage {
                    input_tokens: 20,
                    output_tokens: 48,
                    cache_read_tokens: 100,
                    cache_write_tokens: 0,
                    reasoning_tokens: 20,
                },
            },
        ]
    }

    #[test]
    fn decodes_parallel_tool_call_stream_at_every_split() {
        let events = decode_every_split(&OpenAiChat, TOOL_STREAM.as_bytes());
        assert_eq!(events, tool_stream_events());
        let mut builder = ResponseBuilder::new();
        for event in &events {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(resp.parts[2], read_call("chatcmpl-tool-a1", "a.rs"));
        assert_eq!(resp.parts[3], read_call("chatcmpl-tool-b2", "b.rs"));
    }

    #[test]
    fn stream_without_done_finishes_only_after_finish_reason() {
        // Ends after the usage chunk but without [DONE]: still complete.
        let cut = TOOL_STREAM.rfind("data: [DONE]").expect("done line");
        let events = decode_every_split(&OpenAiChat, &TOOL_STREAM.as_bytes()[..cut]);
        assert_eq!(events, tool_stream_events());
        // Cut before finish_reason: an error, never a fabricated Finish.
        let cut = TOOL_STREAM
            .find("\"finish_reason\":\"tool_calls\"")
            .expect("finish");
        let cut = TOOL_STREAM[..cut].rfind("data:").expect("line start");
        let events = decode_every_split(&OpenAiChat, &TOOL_STREAM.as_bytes()[..cut]);
        match events.last() {
            Some(StreamEvent::Error { error }) => {
                assert_eq!(error.kind, ErrorKind::BadGateway);
                assert!(error.message.contains("ended before"), "{}", error.message);
            }
            other => panic!("expected an error, got {other:?}"),
        }
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::Finish { .. }))
        );
        // Nothing at all.
        let mut decoder = OpenAiChat.stream_decoder();
        assert!(matches!(
            decoder.finish().as_slice(),
            [StreamEvent::Error { .. }]
        ));
    }

    #[test]
    fn stream_error_and_malformed_chunks() {
        let wire = concat!(
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
            "data: {\"error\":{\"message\":\"CUDA out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
            "data: [DONE]\n\n",
        );
        let events = decode_every_split(&OpenAiChat, wire.as_bytes());
        assert_eq!(events.len(), 4);
        match &events[3] {
            StreamEvent::Error { error } => {
                assert_eq!(error.message, "CUDA out of memory");
                assert_eq!(error.kind, ErrorKind::BadGateway);
            }
            other => panic!("expected error, got {other:?}"),
        }
        // vLLM's flat error object.
        let wire = b"data: {\"object\":\"error\",\"message\":\"max_tokens too large\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}\n\n";
        let events = decode_every_split(&OpenAiChat, wire);
        assert!(
            matches!(&events[..], [StreamEvent::Error { error }] if error.message == "max_tokens too large")
        );
        // Malformed JSON is an Err from feed.
        let mut decoder = OpenAiChat.stream_decoder();
        let err = decoder
            .feed(b"data: {\"id\": oops}\n\n")
            .expect_err("malformed");
        assert_eq!(err.kind, ErrorKind::BadGateway);
    }

    #[test]
    fn stream_tool_calls_without_index_or_with_reused_index() {
        // Some servers send every call with index 0 but distinct ids.
        let wire = concat!(
            "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{\\\"x\\\":1}\"}}]}}]}\n\n",
            "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let events = decode_every_split(&OpenAiChat, wire.as_bytes());
        let mut builder = ResponseBuilder::new();
        for event in &events {
            builder.push(event);
        }
        let resp = builder.finish().expect("complete");
        assert_eq!(
            resp.parts,
            vec![
                Part::ToolCall {
                    id: "a".into(),
                    name: "f".into(),
                    arguments: json!({})
                },
                Part::ToolCall {
                    id: "b".into(),
                    name: "g".into(),
                    arguments: json!({"x": 1})
                },
            ]
        );
        assert_eq!(resp.stop_reason, StopReason::ToolUse, "stop + tool calls");
    }

    fn chunks(wire: &[u8]) -> Vec<Value> {
        sse_data(wire)
            .into_iter()
            .filter(|d| d != "[DONE]")
            .map(|d| serde_json::from_str(&d).expect("chunk JSON"))
            .collect()
    }

    /// The encoder's bytes, member order included (`created` masked): what the API
    /// writes, and what this encoder wrote through `json!` values before it serialised
    /// borrowed structs.
    #[test]
    fn stream_encoder_bytes_are_the_apis() {
        let mut events = tool_stream_events();
        events.insert(
            1,
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "think \"twice\"\n".into(),
            },
        );
        events.insert(
            2,
            StreamEvent::TextDelta {
                index: 0,
                text: "é\u{1}".into(),
            },
        );
        let mut wire = encode_stream(&OpenAiChat, &events);
        wire.extend(encode_stream(
            &OpenAiChat,
            &[StreamEvent::Error {
                error: ApiError::new(ErrorKind::Overloaded, "busy"),
            }],
        ));
        let masked = mask_number(&String::from_utf8(wire).expect("utf8"), "created");
        assert_eq!(masked, GOLDEN, "{masked}");
    }

    const GOLDEN: &str = r#"data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"reasoning_content":"think \"twice\"\n"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"content":"é\u0001"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"reasoning_content":"The user wants"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"reasoning_content":" two files."},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"content":"Reading both."},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"chatcmpl-tool-a1","type":"function","function":{"name":"read_file","arguments":""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\": "}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.rs\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"chatcmpl-tool-b2","type":"function","function":{"name":"read_file","arguments":""}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"path\": \"b.rs\"}"}}]},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":T,"model":"Qwen/Qwen3-8B","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":48,"total_tokens":168,"prompt_tokens_details":{"cached_tokens":100},"completion_tokens_details":{"reasoning_tokens":20}}}

data: [DONE]

data: {"error":{"message":"busy","type":"server_error","param":null,"code":"overloaded"}}

"#;

    #[test]
    fn the_usage_chunk_goes_only_to_a_client_that_asked_for_it() {
        let events = tool_stream_events();
        let written = |body: &str| {
            let mut encoder = OpenAiChat.client_stream_encoder(body.as_bytes());
            let mut out = Vec::new();
            for event in &events {
                encoder.encode(event, &mut out);
            }
            chunks(&out)
        };
        let asked = written(
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#,
        );
        assert_eq!(asked.len(), 11);
        assert_eq!(asked[10]["choices"], json!([]));
        assert_eq!(asked[10]["usage"]["prompt_tokens"], json!(120));
        for unasked in [
            r#"{"model":"m","stream":true,"messages":[]}"#,
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[]}"#,
            r#"{"model":"m","stream":true,"stream_options":{},"messages":[]}"#,
            r#"{"model":"m","stream":true,"stream_options":null,"messages":[]}"#,
        ] {
            let chunks = written(unasked);
            assert_eq!(chunks.len(), 10, "{unasked}");
            // Every chunk has a choice: the OpenAI docs' `chunk.choices[0]` loop holds.
            assert!(
                chunks.iter().all(|c| c["choices"][0].is_object()),
                "{unasked}: {chunks:?}"
            );
        }
        // Duplicate top-level keys defeat the scan: read as a parse reads (the last).
        let duplicated = written(
            r#"{"stream_options":{"include_usage":false},"stream_options":{"include_usage":true},"messages":[]}"#,
        );
        assert_eq!(duplicated.len(), 11);
        // Other dialects have no such option: their client encoder is the full one.
        for dialect in [
            Dialect::Anthropic,
            Dialect::Ollama,
            Dialect::OpenAiResponses,
        ] {
            let mut full = Vec::new();
            let mut client = Vec::new();
            let mut a = crate::codec(dialect).stream_encoder();
            let mut b = crate::codec(dialect).client_stream_encoder(b"{}");
            for event in &events {
                a.encode(event, &mut full);
                b.encode(event, &mut client);
            }
            // Timestamps differ between the two runs: compare without digits.
            let mask = |wire: Vec<u8>| {
                String::from_utf8(wire)
                    .expect("utf8")
                    .replace(|c: char| c.is_ascii_digit(), "")
            };
            assert_eq!(mask(full), mask(client), "{dialect:?}");
        }
    }

    #[test]
    fn encodes_stream_like_openai() {
        let mut events = tool_stream_events();
        if let StreamEvent::Start { usage, .. } = &mut events[0] {
            usage.input_tokens = 5;
        }
        let wire = encode_stream(&OpenAiChat, &events);
        let text = String::from_utf8(wire.clone()).expect("utf8");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(
            text.lines()
                .all(|l| l.is_empty() || l.starts_with("data: "))
        );
        let data = sse_data(&wire);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
        let chunks = chunks(&wire);
        for chunk in &chunks {
            assert_eq!(chunk["id"], json!("chatcmpl-9f2c"));
            assert_eq!(chunk["object"], json!("chat.completion.chunk"));
            assert_eq!(chunk["model"], json!("Qwen/Qwen3-8B"));
            assert!(chunk["created"].as_u64().expect("created") > 1_700_000_000);
        }
        let deltas: Vec<&Value> = chunks.iter().map(|c| &c["choices"][0]["delta"]).collect();
        assert_eq!(chunks.len(), 11);
        assert_eq!(
            *deltas[0],
            json!({"role": "assistant", "content": "", "refusal": null})
        );
        assert_eq!(chunks[0]["choices"][0]["index"], json!(0));
        assert_eq!(chunks[0]["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(*deltas[1], json!({"reasoning_content": "The user wants"}));
        assert_eq!(*deltas[2], json!({"reasoning_content": " two files."}));
        assert_eq!(*deltas[3], json!({"content": "Reading both."}));
        assert_eq!(
            *deltas[4],
            json!({"tool_calls": [{"index": 0, "id": "chatcmpl-tool-a1", "type": "function",
                                   "function": {"name": "read_file", "arguments": ""}}]})
        );
        assert_eq!(
            *deltas[5],
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": "}}]})
        );
        assert_eq!(
            *deltas[6],
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"a.rs\"}"}}]})
        );
        assert_eq!(
            *deltas[7],
            json!({"tool_calls": [{"index": 1, "id": "chatcmpl-tool-b2", "type": "function",
                                   "function": {"name": "read_file", "arguments": ""}}]})
        );
        assert_eq!(
            *deltas[8],
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"path\": \"b.rs\"}"}}]})
        );
        assert_eq!(*deltas[9], json!({}));
        assert_eq!(
            chunks[9]["choices"][0]["finish_reason"],
            json!("tool_calls")
        );
        assert_eq!(chunks[10]["choices"], json!([]));
        assert_eq!(
            chunks[10]["usage"],
            json!({"prompt_tokens": 120, "completion_tokens": 48, "total_tokens": 168,
                   "prompt_tokens_details": {"cached_tokens": 100},
                   "completion_tokens_details": {"reasoning_tokens": 20}})
        );
        // And our own decoder reads it back to the same events.
        let decoded = decode_every_split(&OpenAiChat, &wire);
        assert_eq!(decoded, tool_stream_events());
    }

    #[test]
    fn stream_encode_decode_round_trip_of_a_response() {
        let resp = Response {
            id: "chatcmpl-r".into(),
            model: "m".into(),
            parts: vec![
                Part::Thinking {
                    text: "t".into(),
                    signature: None,
                    redacted: None,
                },
                Part::text("answer"),
                read_call("c1", "a"),
            ],
            stop_reason: StopReason::ToolUse,
            stop_sequence: None,
            usage: Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            },
        };
        let wire = encode_stream(&OpenAiChat, &events_of(&resp));
        let mut builder = ResponseBuilder::new();
        for event in decode_every_split(&OpenAiChat, &wire) {
            builder.push(&event);
        }
        assert_eq!(builder.finish().expect("complete"), resp);
    }

    #[test]
    fn encodes_stream_error_and_stops() {
        let events = vec![
            StreamEvent::Start {
                id: "x".into(),
                model: "m".into(),
                usage: Usage::default(),
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 0,
                text: "par".into(),
            },
            StreamEvent::Error {
                error: ApiError::new(ErrorKind::Timeout, "backend timed out"),
            },
            StreamEvent::Finish {
                stop_reason: StopReason::EndTurn,
                stop_sequence: None,
                usage: Usage::default(),
            },
        ];
        let wire = encode_stream(&OpenAiChat, &events);
        let data = sse_data(&wire);
        assert_eq!(data.len(), 3, "{data:?}");
        let error: Value = serde_json::from_str(&data[2]).expect("json");
        assert_eq!(
            error,
            json!({"error": {"message": "backend timed out", "type": "server_error",
                             "param": null, "code": "timeout"}})
        );
        assert_eq!(chunks(&wire)[0]["id"], json!("chatcmpl-x"));
        // Our decoder turns it back into an Error event.
        let decoded = decode_every_split(&OpenAiChat, &wire);
        assert!(
            matches!(decoded.last(), Some(StreamEvent::Error { error }) if error.message == "backend timed out")
        );
    }
}
