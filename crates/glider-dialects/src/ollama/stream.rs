//! Ollama NDJSON streams: the backend decoder and the client encoder.

use glider_ngl::stream::{PartKind, parse_arguments};
use glider_ngl::{ApiError, Part, StreamEvent, Usage};
use serde_json::{Map, Value, json};

use super::borrowed;
use super::request::tool_call_value;
use super::response::{
    decode_reply_calls, decode_stop, decode_usage, final_fields, response_id, rfc3339_now, stamp_of,
};
use crate::framing::{LineSplitter, finished, refused};
use crate::json::bad_gateway;
use crate::openai_chat::error_fields;
use crate::typed::Reading;
use crate::{StreamDecoder, StreamEncoder};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenKind {
    Text,
    Thinking,
}

#[derive(Debug, Default)]
pub(super) struct OllamaStreamDecoder {
    lines: LineSplitter,
    started: bool,
    ended: bool,
    open: Option<(usize, OpenKind)>,
    next_index: usize,
    stamp: String,
    tool_calls: usize,
    /// Whether the borrowing reader is tried first (always, but in tests).
    reading: Reading,
}

impl OllamaStreamDecoder {
    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some((index, _)) = self.open.take() {
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

    fn ensure(&mut self, kind: OpenKind, out: &mut Vec<StreamEvent>) -> usize {
        if let Some((index, open)) = self.open
            && open == kind
        {
            return index;
        }
        let part = match kind {
            OpenKind::Text => PartKind::Text,
            OpenKind::Thinking => PartKind::Thinking,
        };
        let index = self.start_part(part, out);
        self.open = Some((index, kind));
        index
    }

    fn line(&mut self, line: &str, out: &mut Vec<StreamEvent>) -> Result<(), ApiError> {
        if let Some((chunk, usage)) = self
            .reading
            .borrowing()
            .then(|| borrowed::line(line))
            .flatten()
        {
            if !self.started {
                self.start(
                    chunk.created_at.as_deref().unwrap_or_default(),
                    chunk.model.as_deref().unwrap_or_default(),
                    out,
                );
            }
            if let Some(message) = chunk.message() {
                self.text(message.thinking.as_deref(), message.content.as_deref(), out);
            }
            if let Some(usage) = usage {
                self.done(chunk.done_reason.as_deref(), usage, out);
            }
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(line)
            .map_err(|e| bad_gateway(format!("malformed backend stream line: {e}")))?;
        if !chunk.is_object() {
            return Err(bad_gateway("malformed backend stream line: not an object"));
        }
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            let (message, _) = error_fields(&chunk);
            out.push(StreamEvent::Error {
                error: bad_gateway(message.unwrap_or_else(|| "backend stream error".to_owned())),
            });
            self.ended = true;
            return Ok(());
        }
        if !self.started {
            let text = |key: &str| chunk.get(key).and_then(Value::as_str).unwrap_or_default();
            self.start(text("created_at"), text("model"), out);
        }
        if let Some(message) = chunk.get("message") {
            let text = |key: &str| message.get(key).and_then(Value::as_str);
            self.text(text("thinking"), text("content"), out);
            for call in decode_reply_calls(message, &self.stamp, self.tool_calls)? {
                let Part::ToolCall {
                    id,
                    name,
                    arguments,
                } = call
                else {
                    continue;
                };
                let index = self.start_part(PartKind::ToolCall { id, name }, out);
                out.push(StreamEvent::ToolArgsDelta {
                    index,
                    json: glider_ngl::stream::arguments_text(&arguments),
                });
                out.push(StreamEvent::PartStop { index });
                self.tool_calls += 1;
            }
        }
        if chunk.get("done").and_then(Value::as_bool) == Some(true) {
            let reason = chunk.get("done_reason").and_then(Value::as_str);
            self.done(reason, decode_usage(&chunk), out);
        }
        Ok(())
    }

    fn start(&mut self, created_at: &str, model: &str, out: &mut Vec<StreamEvent>) {
        self.started = true;
        self.stamp = stamp_of(created_at);
        out.push(StreamEvent::Start {
            id: response_id(created_at),
            model: model.to_owned(),
            usage: Usage::default(),
        });
    }

    /// A message's thinking, then its text (empty ones are nothing).
    fn text(&mut self, thinking: Option<&str>, content: Option<&str>, out: &mut Vec<StreamEvent>) {
        if let Some(text) = thinking.filter(|t| !t.is_empty()) {
            let index = self.ensure(OpenKind::Thinking, out);
            out.push(StreamEvent::ThinkingDelta {
                index,
                text: text.to_owned(),
            });
        }
        if let Some(text) = content.filter(|t| !t.is_empty()) {
            let index = self.ensure(OpenKind::Text, out);
            out.push(StreamEvent::TextDelta {
                index,
                text: text.to_owned(),
            });
        }
    }

    /// The last line (`done: true`).
    fn done(&mut self, done_reason: Option<&str>, usage: Usage, out: &mut Vec<StreamEvent>) {
        self.close(out);
        out.push(StreamEvent::Finish {
            stop_reason: decode_stop(done_reason, self.tool_calls > 0),
            // Ollama never says which sequence stopped it (`done_reason: "stop"` is an
            // end of turn too): Glider matches stop sequences itself.
            stop_sequence: None,
            usage,
        });
        self.ended = true;
    }
}

impl StreamDecoder for OllamaStreamDecoder {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ApiError> {
        let mut out = Vec::new();
        let lines = self
            .lines
            .feed(bytes)
            .map_err(|error| refused(error, &mut self.ended))?;
        for line in lines {
            if self.ended {
                break;
            }
            self.line(&line, &mut out)?;
        }
        Ok(out)
    }

    fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let last = finished(self.lines.finish(), &mut self.ended, &mut out);
        if let Some(line) = last
            && !self.ended
            && let Err(error) = self.line(&line, &mut out)
        {
            out.push(StreamEvent::Error { error });
            self.ended = true;
        }
        if !self.ended {
            out.push(StreamEvent::Error {
                error: bad_gateway("backend stream ended before the reply was done"),
            });
            self.ended = true;
        }
        out
    }
}

#[derive(Debug, Default)]
pub(super) struct OllamaStreamEncoder {
    model: String,
    created_at: String,
    ended: bool,
    /// The tool call being streamed: (id, name, argument text so far).
    pending: Option<(String, String, String)>,
    tool_calls: usize,
    start_usage: Usage,
}

impl OllamaStreamEncoder {
    fn write(&mut self, out: &mut Vec<u8>, body: Map<String, Value>) {
        out.extend_from_slice(Value::Object(body).to_string().as_bytes());
        out.push(b'\n');
    }

    fn head(&mut self, message: Value) -> Map<String, Value> {
        if self.created_at.is_empty() {
            self.created_at = rfc3339_now();
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("created_at".into(), json!(self.created_at));
        body.insert("message".into(), message);
        body
    }

    fn chunk(&mut self, out: &mut Vec<u8>, message: Value) {
        let mut body = self.head(message);
        body.insert("done".into(), json!(false));
        self.write(out, body);
    }
}

impl StreamEncoder for OllamaStreamEncoder {
    fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        match event {
            StreamEvent::Start { model, usage, .. } => {
                self.model = model.clone();
                self.created_at = rfc3339_now();
                self.start_usage = *usage;
            }
            StreamEvent::PartStart {
                kind: PartKind::ToolCall { id, name },
                ..
            } => self.pending = Some((id.clone(), name.clone(), String::new())),
            StreamEvent::PartStart { .. } => self.pending = None,
            StreamEvent::TextDelta { text, .. } if !text.is_empty() => {
                self.chunk(out, json!({"role": "assistant", "content": text}));
            }
            StreamEvent::ThinkingDelta { text, .. } if !text.is_empty() => {
                self.chunk(
                    out,
                    json!({"role": "assistant", "content": "", "thinking": text}),
                );
            }
            StreamEvent::ToolArgsDelta { json: args, .. } => {
                if let Some((_, _, buffer)) = &mut self.pending {
                    buffer.push_str(args);
                }
            }
            StreamEvent::PartStop { .. } => {
                if let Some((id, name, args)) = self.pending.take() {
                    let call =
                        tool_call_value(&id, &name, &parse_arguments(&args), Some(self.tool_calls));
                    self.tool_calls += 1;
                    self.chunk(
                        out,
                        json!({"role": "assistant", "content": "", "tool_calls": [call]}),
                    );
                }
            }
            StreamEvent::Finish {
                stop_reason, usage, ..
            } => {
                let mut total = self.start_usage;
                total.merge(usage);
                let mut body = self.head(json!({"role": "assistant", "content": ""}));
                final_fields(&mut body, *stop_reason, &total);
                self.write(out, body);
                self.ended = true;
            }
            StreamEvent::Error { error } => {
                let mut body = Map::new();
                body.insert("error".into(), json!(error.message));
                self.write(out, body);
                self.ended = true;
            }
            StreamEvent::TextDelta { .. }
            | StreamEvent::ThinkingDelta { .. }
            | StreamEvent::ThinkingSignature { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::typed::{Reading, decode_all};
    use glider_ngl::stream::PartKind;
    use glider_ngl::stream::events_of;
    use glider_ngl::{ApiError, Part, Response, StopReason, StreamEvent, Usage};
    use glider_ngl::{ErrorKind, ResponseBuilder};
    use serde_json::{Value, json};

    use crate::Codec;
    use crate::ollama::Ollama;
    use crate::ollama::fixtures::call;
    use crate::openai_chat::fixtures::{decode_every_split, encode_stream};

    /// The borrowing reader of lines gives what the `Value` reading gives, line by
    /// line, for every shape a server sends — and leaves it the ones it does not read.
    #[test]
    fn borrowed_lines_decode_as_the_value_reading_does() {
        let lines = [
            r#"{"model":"m","created_at":"2025-06-01T10:00:00.1Z","message":{"role":"assistant","content":"","thinking":"hm \"x\""},"done":false}"#,
            r#"{"model":"m","message":{"content":"Hi \u00e9","tool_calls":null},"done":null}"#,
            r#"{"message":null}"#,
            r#"{"error":null,"message":{"content":"more"}}"#,
            r#"{"message":{"content":""},"done":true,"done_reason":"length","prompt_eval_count":26,"eval_count":2.5,"total_duration":1}"#,
            r#"{"message":{"content":"x","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}}"#,
            r#"{"message":"text"}"#,
            r#"{"message":{"content":"a"},"message":{"content":"b"}}"#,
            r#"{"done":"yes"}"#,
            r#"{"error":"model not found"}"#,
            r#"{"done":true,"prompt_eval_count":01}"#,
            r#"[1]"#,
        ];
        let borrowed = lines
            .iter()
            .filter(|l| super::borrowed::line(l).is_some())
            .count();
        assert_eq!(
            borrowed, 5,
            "the first five are read borrowed, the rest fall back"
        );
        for skip in 0..lines.len() {
            // Each line after the first `skip`, so every one is read first and last once.
            let wire: String = lines[skip..].iter().map(|l| format!("{l}\n")).collect();
            let read = |value_only: bool| {
                let reading = Reading { value_only };
                let decoder = super::OllamaStreamDecoder {
                    reading,
                    ..super::OllamaStreamDecoder::default()
                };
                decode_all(decoder, wire.as_bytes())
            };
            assert_eq!(read(false), read(true), "from line {skip}");
        }
    }

    const THINKING_STREAM: &str = concat!(
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.1Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\"Okay,\"},\"done\":false}\n",
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.2Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\" simple.\"},\"done\":false}\n",
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.3Z\",\"message\":{\"role\":\"assistant\",\"content\":\"Hello\"},\"done\":false}\n",
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.4Z\",\"message\":{\"role\":\"assistant\",\"content\":\" \u{00E9}t\u{00E9}!\"},\"done\":false}\n",
        "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-06-01T10:00:00.5Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done_reason\":\"stop\",\"done\":true,\"total_duration\":4883583458,\"load_duration\":1334875,\"prompt_eval_count\":26,\"prompt_eval_duration\":342546000,\"eval_count\":282,\"eval_duration\":4535599000}\n",
    );

    #[test]
    fn decodes_thinking_stream_at_every_split() {
        let events = decode_every_split(&Ollama, THINKING_STREAM.as_bytes());
        assert_eq!(
            events,
            vec![
                StreamEvent::Start {
                    id: "ollama-202506011000001".into(),
                    model: "qwen3:8b".into(),
                    usage: Usage::default()
                },
                StreamEvent::PartStart {
                    index: 0,
                    kind: PartKind::Thinking
                },
                StreamEvent::ThinkingDelta {
                    index: 0,
                    text: "Okay,".into()
                },
                StreamEvent::ThinkingDelta {
                    index: 0,
                    text: " simple.".into()
                },
                StreamEvent::PartStop { index: 0 },
                StreamEvent::PartStart {
                    index: 1,
                    kind: PartKind::Text
                },
                StreamEvent::TextDelta {
                    index: 1,
                    text: "Hello".into()
                },
                StreamEvent::TextDelta {
                    index: 1,
                    text: " \u{00E9}t\u{00E9}!".into()
                },
                StreamEvent::PartStop { index: 1 },
                StreamEvent::Finish {
                    stop_reason: StopReason::EndTurn,
                    stop_sequence: None,
                    usage: Usage {
                        input_tokens: 26,
                        output_tokens: 282,
                        ..Usage::default()
                    }
                },
            ]
        );
    }

    const TOOL_STREAM: &str = concat!(
        "{\"model\":\"llama3.1\",\"created_at\":\"2025-06-01T10:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"Checking.\"},\"done\":false}\n",
        "{\"model\":\"llama3.1\",\"created_at\":\"2025-06-01T10:00:01Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}},{\"id\":\"call_k9\",\"function\":{\"index\":1,\"name\":\"get_weather\",\"arguments\":{\"city\":\"Tokyo\"}}}]},\"done\":false}\n",
        "{\"model\":\"llama3.1\",\"created_at\":\"2025-06-01T10:00:02Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done_reason\":\"stop\",\"done\":true,\"total_duration\":1,\"prompt_eval_count\":90,\"eval_count\":25}\n",
    );

    fn tool_stream_events() -> Vec<StreamEvent> {
        vec![
            StreamEvent::Start {
                id: "ollama-20250601100000".into(),
                model: "llama3.1".into(),
                usage: Usage::default(),
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 0,
                text: "Checking.".into(),
            },
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::ToolCall {
                    id: "call_20250601100000_0".into(),
                    name: "get_weather".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 1,
                json: "{\"city\":\"Paris\"}".into(),
            },
            StreamEvent::PartStop { index: 1 },
            StreamEvent::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "call_k9".into(),
                    name: "get_weather".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "{\"city\":\"Tokyo\"}".into(),
            },
            StreamEvent::PartStop { index: 2 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                stop_sequence: None,
                usage: Usage {
                    input_tokens: 90,
                    output_tokens: 25,
                    ..Usage::default()
                },
            },
        ]
    }

    #[test]
    fn decodes_tool_stream_at_every_split() {
        let events = decode_every_split(&Ollama, TOOL_STREAM.as_bytes());
        assert_eq!(events, tool_stream_events());
    }

    #[test]
    fn truncated_error_and_malformed_streams() {
        let cut = THINKING_STREAM.rfind("{\"model\"").expect("last line");
        let events = decode_every_split(&Ollama, &THINKING_STREAM.as_bytes()[..cut]);
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
        // The last line without its newline still counts.
        let events = decode_every_split(&Ollama, THINKING_STREAM.trim_end().as_bytes());
        assert!(matches!(events.last(), Some(StreamEvent::Finish { .. })));

        let wire = concat!(
            "{\"model\":\"m\",\"created_at\":\"2025-06-01T10:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n",
            "{\"error\":\"an error was encountered while running the model: unexpected EOF\"}\n",
        );
        let events = decode_every_split(&Ollama, wire.as_bytes());
        assert_eq!(events.len(), 4);
        assert!(matches!(&events[3], StreamEvent::Error { error }
            if error.message == "an error was encountered while running the model: unexpected EOF"));

        let mut decoder = Ollama.stream_decoder();
        let err = decoder.feed(b"{\"model\": nope}\n").expect_err("malformed");
        assert_eq!(err.kind, ErrorKind::BadGateway);
        let mut decoder = Ollama.stream_decoder();
        assert!(matches!(
            decoder.finish().as_slice(),
            [StreamEvent::Error { .. }]
        ));
    }

    fn lines(wire: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(wire).expect("utf8");
        assert!(text.ends_with('\n'));
        text.lines()
            .map(|l| serde_json::from_str(l).expect("line JSON"))
            .collect()
    }

    #[test]
    fn encodes_stream_like_ollama() {
        let events = vec![
            StreamEvent::Start {
                id: "x".into(),
                model: "qwen3:8b".into(),
                usage: Usage {
                    input_tokens: 40,
                    ..Usage::default()
                },
            },
            StreamEvent::PartStart {
                index: 0,
                kind: PartKind::Thinking,
            },
            StreamEvent::ThinkingDelta {
                index: 0,
                text: "plan".into(),
            },
            StreamEvent::ThinkingSignature {
                index: 0,
                signature: "sig".into(),
            },
            StreamEvent::PartStop { index: 0 },
            StreamEvent::PartStart {
                index: 1,
                kind: PartKind::Text,
            },
            StreamEvent::TextDelta {
                index: 1,
                text: "Let me run it.".into(),
            },
            StreamEvent::PartStop { index: 1 },
            StreamEvent::PartStart {
                index: 2,
                kind: PartKind::ToolCall {
                    id: "toolu_1".into(),
                    name: "bash".into(),
                },
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: "{\"cmd\":".into(),
            },
            StreamEvent::ToolArgsDelta {
                index: 2,
                json: " \"ls\"}".into(),
            },
            StreamEvent::PartStop { index: 2 },
            StreamEvent::Finish {
                stop_reason: StopReason::ToolUse,
                stop_sequence: None,
                usage: Usage {
                    output_tokens: 17,
                    ..Usage::default()
                },
            },
        ];
        let wire = encode_stream(&Ollama, &events);
        let lines = lines(&wire);
        assert_eq!(lines.len(), 4);
        let created_at = lines[0]["created_at"].clone();
        assert!(created_at.as_str().is_some_and(|s| s.ends_with('Z')));
        assert_eq!(
            lines[0],
            json!({"model": "qwen3:8b", "created_at": created_at,
                   "message": {"role": "assistant", "content": "", "thinking": "plan"}, "done": false})
        );
        assert_eq!(
            lines[1],
            json!({"model": "qwen3:8b", "created_at": created_at,
                   "message": {"role": "assistant", "content": "Let me run it."}, "done": false})
        );
        assert_eq!(
            lines[2],
            json!({"model": "qwen3:8b", "created_at": created_at,
                   "message": {"role": "assistant", "content": "", "tool_calls": [
                       {"id": "toolu_1", "function": {"index": 0, "name": "bash", "arguments": {"cmd": "ls"}}}
                   ]}, "done": false})
        );
        assert_eq!(
            lines[3],
            json!({"model": "qwen3:8b", "created_at": created_at,
                   "message": {"role": "assistant", "content": ""},
                   "done_reason": "stop", "done": true, "total_duration": 0, "load_duration": 0,
                   "prompt_eval_count": 40, "prompt_eval_duration": 0, "eval_count": 17,
                   "eval_duration": 0})
        );
    }

    #[test]
    fn stream_encode_decode_round_trip_of_a_response() {
        let resp = Response {
            id: "r".into(),
            model: "m".into(),
            parts: vec![
                Part::Thinking {
                    text: "t".into(),
                    signature: None,
                    redacted: None,
                },
                Part::text("answer"),
                call("c1", "f", json!({"a": [1, 2]})),
            ],
            stop_reason: StopReason::ToolUse,
            stop_sequence: None,
            usage: Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            },
        };
        let wire = encode_stream(&Ollama, &events_of(&resp));
        let mut builder = ResponseBuilder::new();
        for event in decode_every_split(&Ollama, &wire) {
            builder.push(&event);
        }
        let back = builder.finish().expect("complete");
        assert_eq!(back.parts, resp.parts);
        assert_eq!(back.usage, resp.usage);
        assert_eq!(back.stop_reason, resp.stop_reason);
        assert!(back.id.starts_with("ollama-"));
    }

    #[test]
    fn encodes_stream_error_and_stops() {
        let events = vec![
            StreamEvent::Start {
                id: "x".into(),
                model: "m".into(),
                usage: Usage::default(),
            },
            StreamEvent::Error {
                error: ApiError::new(ErrorKind::BadGateway, "backend died"),
            },
            StreamEvent::Finish {
                stop_reason: StopReason::EndTurn,
                stop_sequence: None,
                usage: Usage::default(),
            },
        ];
        let wire = encode_stream(&Ollama, &events);
        assert_eq!(lines(&wire), vec![json!({"error": "backend died"})]);
    }
}
