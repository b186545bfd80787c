//! The engine's half of the context hook (`glider_vocab::sink`: the [`ContextSink`] a
//! store implements and the turns it is told): the [`ReplyCapture`] a request's tracker
//! fills as its reply passes — tool calls, stop reason, the text's edges in bounded
//! memory — and hands to the sink and the budget kit when the request ends. With no
//! sink attached only the tool calls are kept (for the kit), and no text is copied.

use std::sync::Arc;

use glider_ngl::stream::PartKind;
use glider_ngl::{Dialect, Part, Response, StopReason, StreamEvent};
use glider_vocab::{
    CompactionSource, ContextSink, REPLY_TEXT_KEPT, RecordedTurn, ReplyToolCall, RequestRecord,
};

use crate::contextkit::ContextKit;

/// What the request path reads of a forwarded whole reply
/// ([`ReplyCapture::whole_reply_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WholeReplyRead {
    /// Its usage alone (a scan, no decode).
    Usage,
    /// Its usage, stop reason and text in one reading (the dialect's text reading,
    /// `Codec::reply_text`: no `Response` built).
    Text,
    /// All of it.
    Decode,
}

/// Collects a reply's tool calls and stop reason for the sink and for the session's
/// spend ([`ContextKit`]) as the reply passes the request's tracker (translated events,
/// a same-dialect stream decoded as it is forwarded, or a whole response).
pub(crate) struct ReplyCapture {
    /// The sink and its name for the request ([`ContextSink::decided`]).
    sink: Option<(Arc<dyn ContextSink>, String)>,
    /// The kit and the episode (family) the request was admitted to.
    kit: Option<(Arc<ContextKit>, u64)>,
    session: String,
    /// Stream part index → position in `calls`, for argument fragments.
    open: Vec<(usize, usize)>,
    calls: Vec<ReplyToolCall>,
    stop_reason: Option<StopReason>,
    text: TextEdges,
    compaction: Option<CompactionSource>,
}

/// A reply's text as it streams, bounded: the first [`REPLY_TEXT_KEPT`] bytes and a
/// tail of at most twice that, so a long reply costs bounded memory.
#[derive(Default)]
struct TextEdges {
    head: String,
    tail: String,
    /// Text between `head` and `tail` was let go.
    cut: bool,
}

impl TextEdges {
    fn push(&mut self, text: &str) {
        let room = REPLY_TEXT_KEPT.saturating_sub(self.head.len());
        let split = floor_char_boundary(text, room.min(text.len()));
        if self.tail.is_empty() {
            self.head.push_str(&text[..split]);
            self.tail.push_str(&text[split..]);
        } else {
            self.tail.push_str(text);
        }
        if self.tail.len() > 2 * REPLY_TEXT_KEPT {
            let from = floor_char_boundary(&self.tail, self.tail.len() - REPLY_TEXT_KEPT);
            self.tail.drain(..from);
            self.cut = true;
        }
    }

    fn finish(mut self) -> String {
        if self.tail.len() > REPLY_TEXT_KEPT
            && (self.cut || self.head.len() + self.tail.len() > 2 * REPLY_TEXT_KEPT)
        {
            let from = floor_char_boundary(&self.tail, self.tail.len() - REPLY_TEXT_KEPT);
            self.tail.drain(..from);
            self.cut = true;
        }
        match (self.cut, self.tail.is_empty()) {
            (_, true) => self.head,
            (false, false) => self.head + &self.tail,
            (true, false) => format!("{}\n…\n{}", self.head, self.tail),
        }
    }
}

/// The largest char boundary of `text` at or below `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    (0..=at.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

impl ReplyCapture {
    pub(crate) fn new(sink: Option<(Arc<dyn ContextSink>, String)>, session: String) -> Self {
        ReplyCapture {
            sink,
            kit: None,
            session,
            open: Vec::new(),
            calls: Vec::new(),
            stop_reason: None,
            text: TextEdges::default(),
            compaction: None,
        }
    }

    /// The request is a CLI's compaction, answered locally by `source`.
    pub(crate) fn compaction(&mut self, source: CompactionSource) {
        self.compaction = Some(source);
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
            // The text is only for the sink's record; the budget kit alone needs none.
            StreamEvent::TextDelta { text, .. } if self.sink.is_some() => self.text.push(text),
            StreamEvent::Finish { stop_reason, .. } => self.stop_reason = Some(*stop_reason),
            _ => {}
        }
    }

    pub(crate) fn response(&mut self, response: &Response) {
        self.stop_reason = Some(response.stop_reason);
        for part in &response.parts {
            match part {
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => self.calls.push(ReplyToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.to_string(),
                }),
                Part::Text { text, .. } if self.sink.is_some() => self.text.push(text),
                _ => {}
            }
        }
    }

    /// What the request path reads of a whole reply `body` in `dialect` for this
    /// capture: all of it when it may call tools; its usage alone when only tool calls
    /// are kept (no sink); else its usage, stop reason and text. One reading on the
    /// request path costs fewer instructions than a usage scan there and a text reading
    /// elsewhere (the log's writer runs on the same cores at saturation).
    pub(crate) fn whole_reply_read(&self, dialect: Dialect, body: &[u8]) -> WholeReplyRead {
        if glider_dialects::reply_may_call_tools(dialect, body) {
            WholeReplyRead::Decode
        } else if self.keeps_only_tool_calls() {
            WholeReplyRead::Usage
        } else {
            WholeReplyRead::Text
        }
    }

    /// A whole reply without tool calls, read by the dialect's text reading.
    pub(crate) fn text_reply(&mut self, stop_reason: StopReason, text: &str) {
        self.stop_reason = Some(stop_reason);
        if self.sink.is_some() {
            self.text.push(text);
        }
    }

    /// Whether only the reply's tool calls are kept (for the budget kit): no sink, which
    /// would also keep its stop reason and text.
    pub(crate) fn keeps_only_tool_calls(&self) -> bool {
        self.sink.is_none()
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
        if let Some((sink, key)) = self.sink {
            sink.recorded(RecordedTurn {
                key,
                session: self.session,
                record,
                tool_calls: self.calls,
                stop_reason: self.stop_reason,
                text: self.text.finish(),
                compaction: self.compaction,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::Request;
    use glider_vocab::{DecidedTurn, DelegatedRun};

    #[test]
    fn a_long_reply_text_keeps_its_start_and_end_in_bounded_memory() {
        let mut text = TextEdges::default();
        text.push("begin ");
        for _ in 0..10_000 {
            text.push("é middle ");
        }
        text.push("the end");
        assert!(text.head.len() <= REPLY_TEXT_KEPT);
        assert!(text.tail.len() <= 2 * REPLY_TEXT_KEPT + "é middle ".len());
        let kept = text.finish();
        assert!(kept.starts_with("begin é middle"), "{}", &kept[..20]);
        assert!(kept.ends_with("é middle the end"));
        assert!(kept.contains("\n…\n"));
        assert!(kept.len() <= 2 * REPLY_TEXT_KEPT + 16);
    }

    /// A sink that keeps what each finished capture handed it.
    #[derive(Default)]
    struct Kept(std::sync::Mutex<Vec<(Option<StopReason>, String)>>);

    impl ContextSink for Kept {
        fn decided(&self, _: &DecidedTurn<'_>) -> String {
            String::new()
        }
        fn recorded(&self, turn: RecordedTurn<'_>) {
            self.0
                .lock()
                .expect("lock")
                .push((turn.stop_reason, turn.text));
        }
        fn record(&self, _: &str, _: &Request) -> Option<Arc<str>> {
            None
        }
        fn delegated(&self, _: &DelegatedRun<'_>) {}
    }

    #[test]
    fn a_reply_read_by_its_text_reading_is_captured_as_its_decode_is() {
        let long = "x".repeat(3 * REPLY_TEXT_KEPT);
        let chats = [
            r#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,
                "message":{"role":"assistant","content":"Renamed \"it\"."},"finish_reason":"length"}],
                "usage":{"prompt_tokens":3,"completion_tokens":2}}"#
                .to_owned(),
            serde_json::json!({"choices": [{"message": {"content": long, "refusal": "no"},
                "finish_reason": "stop"}]})
            .to_string(),
        ];
        let codec = glider_dialects::codec(Dialect::OpenAiChat);
        let bus = crate::events::Bus::default();
        let tracker = bus.start("gateway", Dialect::OpenAiChat, None);
        let record = tracker.record.clone();
        tracker.forget();
        for body in chats {
            let sink = Arc::new(Kept::default());
            let mut read = ReplyCapture::new(Some((sink.clone(), String::new())), "s".into());
            let reply = codec
                .reply_text(body.as_bytes())
                .expect("the text reading reads it");
            read.text_reply(reply.stop_reason, &reply.text);
            read.finish(&record);
            let mut decoded = ReplyCapture::new(Some((sink.clone(), String::new())), "s".into());
            decoded.response(&codec.decode_response(body.as_bytes()).expect("decodes"));
            decoded.finish(&record);
            let kept = sink.0.lock().expect("lock");
            assert_eq!(kept[0], kept[1]);
            assert!(
                kept[0].1.starts_with("Renamed") || kept[0].1.starts_with("xxx"),
                "{:.40}",
                kept[0].1
            );
            assert!(
                kept[0].1.len() <= 2 * REPLY_TEXT_KEPT + 8,
                "the text's edges"
            );
        }
    }

    /// A forwarded whole reply through the tracker, with the log's capture: Chat
    /// Completions by its text reading, Anthropic (no text reading) by its decode; both
    /// give the sink their text and stop reason and the record their usage.
    #[test]
    fn a_tracker_reads_a_forwarded_whole_reply_for_the_sink_in_either_dialect() {
        let chat = br#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,
            "message":{"role":"assistant","content":"Renamed it."},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":11,"completion_tokens":3}}"#;
        let anthropic = br#"{"id":"msg","type":"message","role":"assistant","model":"m",
            "content":[{"type":"text","text":"Done. "},{"type":"text","text":"All green."}],
            "stop_reason":"max_tokens","usage":{"input_tokens":11,"output_tokens":3}}"#;
        let replies: [(Dialect, &[u8], StopReason, &str); 2] = [
            (
                Dialect::OpenAiChat,
                chat,
                StopReason::EndTurn,
                "Renamed it.",
            ),
            (
                Dialect::Anthropic,
                anthropic,
                StopReason::MaxTokens,
                "Done. All green.",
            ),
        ];
        for (dialect, body, stop_reason, text) in replies {
            let sink = Arc::new(Kept::default());
            let bus = crate::events::Bus::default();
            let mut tracker = bus.start("gateway", dialect, None);
            tracker.capture_context(ReplyCapture::new(
                Some((sink.clone(), String::new())),
                "s".into(),
            ));
            tracker.observe_raw_in(dialect, false);
            let (head, tail) = body.split_at(body.len() / 2);
            tracker.raw_bytes(head);
            tracker.raw_bytes(tail);
            tracker.end();
            assert_eq!(
                (
                    tracker.record.usage.input_tokens,
                    tracker.record.usage.output_tokens
                ),
                (11, 3),
                "{dialect:?}"
            );
            drop(tracker);
            let kept = sink.0.lock().expect("lock");
            assert_eq!(
                kept[..],
                [(Some(stop_reason), text.to_owned())],
                "{dialect:?}"
            );
        }
    }

    #[test]
    fn a_whole_reply_is_read_for_its_text_only_for_a_sink_and_without_calls() {
        let text = br#"{"choices":[{"message":{"content":"ok"}}]}"#;
        let call =
            br#"{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"Read"}}]}}]}"#;
        let chat = Dialect::OpenAiChat;
        let mut with_sink =
            ReplyCapture::new(Some((Arc::new(Kept::default()), String::new())), "s".into());
        assert_eq!(with_sink.whole_reply_read(chat, text), WholeReplyRead::Text);
        assert_eq!(
            with_sink.whole_reply_read(chat, call),
            WholeReplyRead::Decode
        );
        with_sink.compaction(CompactionSource::LocalModel);
        assert_eq!(with_sink.whole_reply_read(chat, text), WholeReplyRead::Text);
        // Without a sink only the calls are kept (the budget kit's).
        let kit_only = ReplyCapture::new(None, "s".into());
        assert_eq!(kit_only.whole_reply_read(chat, text), WholeReplyRead::Usage);
        assert_eq!(
            kit_only.whole_reply_read(chat, call),
            WholeReplyRead::Decode
        );
    }

    #[test]
    fn a_short_reply_text_is_kept_whole() {
        let mut text = TextEdges::default();
        text.push("I renamed ");
        text.push("it.");
        assert_eq!(text.finish(), "I renamed it.");
    }
}
