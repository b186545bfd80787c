//! A reply Glider writes itself, as RunSSE frames: ngl stream events become Cursor's
//! interaction updates, and the reply ends with one end-of-stream frame — clean after
//! the model's finish, or an error whose Connect code is the error kind's own
//! ([`ErrorKind::connect_code`](glider_ngl::ErrorKind::connect_code), the one mapping).

use bytes::Bytes;
use glider_ngl::{ApiError, StreamEvent};

use crate::frame::EndOfStream;
use crate::messages::{Update, server_frame};

/// Encodes ngl events as RunSSE frames, and knows when the reply has ended.
#[derive(Debug, Default)]
pub struct FrameEncoder {
    ended: bool,
}

impl FrameEncoder {
    /// The frames for `event` (none for events Cursor has no counterpart for).
    pub fn encode(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        let frame = |update| Bytes::from(server_frame(update));
        match event {
            StreamEvent::TextDelta { text, .. } if !text.is_empty() => {
                vec![frame(Update::TextDelta(text.clone()))]
            }
            StreamEvent::ThinkingDelta { text, .. } if !text.is_empty() => {
                vec![frame(Update::ThinkingDelta(text.clone()))]
            }
            StreamEvent::Finish { usage, .. } => {
                self.ended = true;
                let mut frames = Vec::new();
                if usage.output_tokens > 0 {
                    frames.push(frame(Update::TokenDelta(usage.output_tokens)));
                }
                frames.push(frame(Update::TurnEnded));
                frames.push(Bytes::from(EndOfStream::ok().encode()));
                frames
            }
            StreamEvent::Error { error } => vec![self.fail(error)],
            _ => Vec::new(),
        }
    }

    /// End the reply with `error`: its end-of-stream frame.
    pub fn fail(&mut self, error: &ApiError) -> Bytes {
        self.ended = true;
        error_frame(error)
    }

    /// Whether the reply's last frame has been encoded.
    pub fn ended(&self) -> bool {
        self.ended
    }
}

/// The end-of-stream frame that carries `error` (a streaming Connect error).
pub fn error_frame(error: &ApiError) -> Bytes {
    Bytes::from(EndOfStream::error(error.kind.connect_code(), error.message.clone()).encode())
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::ErrorKind;

    #[test]
    fn an_error_ends_the_reply_with_its_kinds_connect_code() {
        let mut encoder = FrameEncoder::default();
        assert!(
            encoder
                .encode(&StreamEvent::TextDelta {
                    index: 0,
                    text: String::new()
                })
                .is_empty()
        );
        assert!(!encoder.ended());
        let frames = encoder.encode(&StreamEvent::Error {
            error: ApiError::new(ErrorKind::Overloaded, "busy"),
        });
        assert!(encoder.ended());
        let end = crate::frame::decode_all(&frames.concat(), false).expect("frames")[0]
            .end_of_stream()
            .expect("end")
            .expect("json");
        let error = end.error.expect("an error");
        assert_eq!(
            (error.code.as_str(), error.message.as_str()),
            ("unavailable", "busy")
        );
    }
}
