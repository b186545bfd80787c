//! Streaming in ngl: the [`StreamEvent`] grammar every stream decoder produces and every
//! stream encoder consumes, plus [`ResponseBuilder`] (events → a whole [`Response`]) and
//! [`events_of`] (a whole response → events).
//!
//! Grammar (decoders guarantee it, encoders may rely on it):
//! `Start (PartStart delta* PartStop)* Finish`, where parts are sequential (one open at a
//! time), indices count up from 0, and `Error` may end the stream at any point.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ApiError, Part, Response, StopReason, Usage};

/// What kind of part a `PartStart` opens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PartKind {
    Text,
    Thinking,
    ToolCall { id: String, name: String },
}

/// One event of a streamed reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum StreamEvent {
    /// First event. `usage` carries input tokens when the backend reports them early.
    Start {
        id: String,
        model: String,
        usage: Usage,
    },
    PartStart {
        index: usize,
        kind: PartKind,
    },
    TextDelta {
        index: usize,
        text: String,
    },
    ThinkingDelta {
        index: usize,
        text: String,
    },
    /// Anthropic's thinking signature, sent once before the thinking part stops.
    ThinkingSignature {
        index: usize,
        signature: String,
    },
    /// A fragment of a tool call's JSON arguments (concatenate them all).
    ToolArgsDelta {
        index: usize,
        json: String,
    },
    PartStop {
        index: usize,
    },
    /// Last event of a good stream; `usage` is the final, cumulative count.
    Finish {
        stop_reason: StopReason,
        /// The stop sequence matched, when `stop_reason` is `StopSequence` and known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_sequence: Option<String>,
        usage: Usage,
    },
    /// The stream failed after it started; the encoder renders it in the client dialect.
    Error {
        error: ApiError,
    },
}

/// Builds a [`Response`] from a stream of events (for a client that asked for no stream
/// from a backend that streams, and for tests).
#[derive(Debug, Default)]
pub struct ResponseBuilder {
    id: String,
    model: String,
    parts: Vec<PartAccumulator>,
    stop_reason: Option<StopReason>,
    stop_sequence: Option<String>,
    usage: Usage,
    error: Option<ApiError>,
}

#[derive(Debug)]
enum PartAccumulator {
    Text(String),
    Thinking {
        text: String,
        signature: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        json: String,
    },
}

impl ResponseBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed one event.
    pub fn push(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::Start { id, model, usage } => {
                self.id = id.clone();
                self.model = model.clone();
                self.usage.merge(usage);
            }
            StreamEvent::PartStart { kind, .. } => self.parts.push(match kind {
                PartKind::Text => PartAccumulator::Text(String::new()),
                PartKind::Thinking => PartAccumulator::Thinking {
                    text: String::new(),
                    signature: None,
                },
                PartKind::ToolCall { id, name } => PartAccumulator::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    json: String::new(),
                },
            }),
            StreamEvent::TextDelta { text: delta, .. } => {
                if let Some(PartAccumulator::Text(text)) = self.parts.last_mut() {
                    text.push_str(delta);
                }
            }
            StreamEvent::ThinkingDelta { text: delta, .. } => {
                if let Some(PartAccumulator::Thinking { text, .. }) = self.parts.last_mut() {
                    text.push_str(delta);
                }
            }
            StreamEvent::ThinkingSignature { signature: sig, .. } => {
                if let Some(PartAccumulator::Thinking { signature, .. }) = self.parts.last_mut() {
                    *signature = Some(sig.clone());
                }
            }
            StreamEvent::ToolArgsDelta { json: delta, .. } => {
                if let Some(PartAccumulator::ToolCall { json, .. }) = self.parts.last_mut() {
                    json.push_str(delta);
                }
            }
            StreamEvent::PartStop { .. } => {}
            StreamEvent::Finish {
                stop_reason,
                stop_sequence,
                usage,
            } => {
                self.stop_reason = Some(*stop_reason);
                self.stop_sequence = stop_sequence.clone();
                self.usage.merge(usage);
            }
            StreamEvent::Error { error } => self.error = Some(error.clone()),
        }
    }

    /// The whole response, or the error that ended the stream. A stream that ended
    /// without `Finish` is an error too: the reply is incomplete.
    pub fn finish(self) -> Result<Response, ApiError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let Some(stop_reason) = self.stop_reason else {
            return Err(ApiError::new(
                crate::ErrorKind::BadGateway,
                "backend stream ended before the reply was complete",
            ));
        };
        let parts = self
            .parts
            .into_iter()
            .map(|p| match p {
                PartAccumulator::Text(text) => Part::text(text),
                PartAccumulator::Thinking { text, signature } => Part::Thinking {
                    text,
                    signature,
                    redacted: None,
                },
                PartAccumulator::ToolCall { id, name, json } => Part::ToolCall {
                    id,
                    name,
                    arguments: parse_arguments(&json),
                },
            })
            .collect();
        Ok(Response {
            id: self.id,
            model: self.model,
            parts,
            stop_reason,
            stop_sequence: self.stop_sequence,
            usage: self.usage,
        })
    }
}

/// Parse streamed or stringified tool arguments. Empty means `{}`; text that is not
/// JSON is kept as a string so nothing is lost.
pub fn parse_arguments(json: &str) -> Value {
    if json.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(json).unwrap_or_else(|_| Value::String(json.to_owned()))
}

/// Serialise tool arguments as the JSON text OpenAI-style dialects want.
pub fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// The event sequence that streams `response` (one delta per part).
pub fn events_of(response: &Response) -> Vec<StreamEvent> {
    let mut events = vec![StreamEvent::Start {
        id: response.id.clone(),
        model: response.model.clone(),
        usage: Usage {
            input_tokens: response.usage.input_tokens,
            cache_read_tokens: response.usage.cache_read_tokens,
            cache_write_tokens: response.usage.cache_write_tokens,
            ..Usage::default()
        },
    }];
    let mut index = 0;
    for part in &response.parts {
        let (kind, delta) = match part {
            Part::Text { text, .. } => (
                PartKind::Text,
                vec![StreamEvent::TextDelta {
                    index,
                    text: text.clone(),
                }],
            ),
            Part::Thinking {
                text, signature, ..
            } => {
                let mut deltas = vec![StreamEvent::ThinkingDelta {
                    index,
                    text: text.clone(),
                }];
                if let Some(signature) = signature {
                    deltas.push(StreamEvent::ThinkingSignature {
                        index,
                        signature: signature.clone(),
                    });
                }
                (PartKind::Thinking, deltas)
            }
            Part::ToolCall {
                id,
                name,
                arguments,
            } => (
                PartKind::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                },
                vec![StreamEvent::ToolArgsDelta {
                    index,
                    json: arguments_text(arguments),
                }],
            ),
            Part::Image { .. } | Part::ToolResult { .. } | Part::Native { .. } => continue,
        };
        events.push(StreamEvent::PartStart { index, kind });
        events.extend(delta);
        events.push(StreamEvent::PartStop { index });
        index += 1;
    }
    events.push(StreamEvent::Finish {
        stop_reason: response.stop_reason,
        stop_sequence: response.stop_sequence.clone(),
        usage: response.usage,
    });
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Response {
        Response {
            id: "r1".into(),
            model: "m".into(),
            parts: vec![
                Part::Thinking {
                    text: "hmm".into(),
                    signature: Some("sig".into()),
                    redacted: None,
                },
                Part::text("hello"),
                Part::ToolCall {
                    id: "c1".into(),
                    name: "read".into(),
                    arguments: json!({"path": "a.rs"}),
                },
            ],
            stop_reason: StopReason::ToolUse,
            stop_sequence: None,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            },
        }
    }

    #[test]
    fn events_round_trip_through_builder() {
        let response = sample();
        let mut builder = ResponseBuilder::new();
        for event in events_of(&response) {
            builder.push(&event);
        }
        assert_eq!(builder.finish().expect("complete"), response);
    }

    #[test]
    fn stream_without_finish_is_incomplete() {
        let mut builder = ResponseBuilder::new();
        for event in events_of(&sample()).iter().take(3) {
            builder.push(event);
        }
        let err = builder.finish().expect_err("incomplete");
        assert_eq!(err.kind, crate::ErrorKind::BadGateway);
    }

    #[test]
    fn arguments_keep_non_json_text() {
        assert_eq!(parse_arguments(""), json!({}));
        assert_eq!(parse_arguments("{\"a\":1}"), json!({"a": 1}));
        assert_eq!(parse_arguments("{oops"), json!("{oops"));
        assert_eq!(arguments_text(&json!("{oops")), "{oops");
    }
}
