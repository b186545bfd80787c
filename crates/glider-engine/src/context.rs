//! The context hook: what the pipeline tells a context store (`glider-context`) about
//! each request, from every door, at the two moments every request passes — once it is
//! decided (its session, the request as decoded, the route) and once it is recorded
//! (the reply's tool calls, text, usage, stop reason, status) — and the one thing the
//! pipeline reads back: a session's continuity record, for a local model's bounded
//! context. The engine knows nothing of how it is stored; with no sink attached nothing
//! is built or copied.

use std::sync::Arc;

use glider_dialects::scan::Needle;
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
    /// Returns the sink's name for it (its key in the log), which the request's end
    /// hands back ([`RecordedTurn::key`]): named once, not again at its end.
    fn decided(&self, turn: &DecidedTurn<'_>) -> String;
    /// The request ended: its reply was delivered, it failed, or its client went away.
    fn recorded(&self, turn: RecordedTurn<'_>);
    /// The session's continuity record rendered for a model, with every event of it
    /// committed so far, for `request` — only when the session's stored episodes are
    /// the request's own: their root user messages must match the request's earlier
    /// ones (exactly, in order, for a key derived from the conversation's start
    /// ([`crate::router::sticky::is_derived`]); each earlier one found among them, in
    /// order, for a session id the client named). `None` when none is held for it or
    /// it is another conversation's: the request then keeps its own history. Called on
    /// the request path: it must answer from memory, never query storage nor wait on a
    /// lock a writer holds long; it may render the record there when events came since
    /// the last render (the log renders lazily: only what is read).
    fn record(&self, session: &str, request: &Request) -> Option<Arc<str>>;
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
    /// The name [`ContextSink::decided`] gave the request.
    pub key: String,
    /// The session key, as the request's decision had it.
    pub session: String,
    /// The bus record: backend, model, usage, status, error, timings.
    pub record: &'a RequestRecord,
    /// The tool calls of the reply, in order, as far as the reply was seen.
    pub tool_calls: Vec<ReplyToolCall>,
    /// Why generation stopped, when the reply said so.
    pub stop_reason: Option<StopReason>,
    /// The reply's text (not its thinking): whole when under twice [`REPLY_TEXT_KEPT`]
    /// bytes, else its first [`REPLY_TEXT_KEPT`] bytes, `…`, and its last ones.
    pub text: String,
    /// The request was a CLI's compaction answered locally, and by what.
    pub compaction: Option<CompactionSource>,
}

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

/// Who answered a CLI's compaction request locally (`context.compaction: local`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionSource {
    /// A local model, given the continuity record and the current episode.
    LocalModel,
    /// Glider itself, from the continuity record (no local backend was up).
    Record,
}

impl CompactionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionSource::LocalModel => "local_model",
            CompactionSource::Record => "record",
        }
    }
}

/// Which CLI's compaction prompt a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionPrompt {
    /// Claude Code's `/compact` and auto-compaction: the reply is expected as an
    /// `<analysis>` block and a `<summary>` block.
    ClaudeCode,
    /// Codex's context checkpoint: a handoff summary as plain text.
    Codex,
}

/// The openings of the CLIs' compaction instructions, as their shipped binaries write
/// them (read from Claude Code 2.1.197, whose three variants — the whole conversation,
/// its recent portion, a continuing session — share this start, and Codex 0.171.0).
const CLAUDE_CODE_COMPACTION: &str = "Your task is to create a detailed summary of ";
const CODEX_COMPACTION: &str = "You are performing a CONTEXT CHECKPOINT COMPACTION.";
/// What both begin with.
const COMPACTION_OPENING: &str = "You";

/// Whether `request` is a CLI's compaction request, recognised by shape: its last turn
/// other than system entries is the user's and its text holds the CLI's compaction
/// instruction (Claude Code sends it after the conversation, alone or next to tool
/// results, and most often follows it with a `role: "system"` entry — a reminder, a
/// file note, the skills list — which is looked past).
pub fn compaction_prompt(request: &Request) -> Option<CompactionPrompt> {
    let last = request
        .turns
        .iter()
        .rev()
        .find(|turn| turn.role != Role::System)?;
    if last.role != Role::User {
        return None;
    }
    // Every request of a session with the context log on asks this of its newest user
    // text: one vectorised search for the opening both instructions share, its table
    // built once, and each instruction compared where that is found.
    static OPENING: Needle = Needle::new(COMPACTION_OPENING.as_bytes());
    let at = |text: &str, at: usize, instruction: &str| {
        text.as_bytes()[at..].starts_with(instruction.as_bytes())
    };
    last.parts.iter().find_map(|part| match part {
        // Claude Code's instruction wins wherever it is; Codex's is kept in case.
        Part::Text { text, .. } => {
            let mut codex = None;
            for found in OPENING.places_in(text.as_bytes()) {
                if at(text, found, CLAUDE_CODE_COMPACTION) {
                    return Some(CompactionPrompt::ClaudeCode);
                }
                if at(text, found, CODEX_COMPACTION) {
                    codex = Some(CompactionPrompt::Codex);
                }
            }
            codex
        }
        _ => None,
    })
}

/// Bytes of a reply's text kept from each end for the sink (a closing summary of what
/// the model did is at the end; a long reply's middle is not kept).
pub const REPLY_TEXT_KEPT: usize = 4 * 1024;

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
    glider_ngl::tool_calls(turn.map_or(&[][..], |t| &t.parts))
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

    /// A captured request of the real CLI, decoded as the gateway decodes it.
    fn real(cli: &str, scenario: &str, kind: &str) -> Vec<Request> {
        glider_test_support::captured::captured_kind(cli, scenario, kind)
            .iter()
            .map(|captured| {
                let dialect = if cli == "codex" {
                    Dialect::OpenAiResponses
                } else {
                    Dialect::Anthropic
                };
                glider_dialects::codec(dialect)
                    .decode_request(&captured.body_bytes())
                    .unwrap_or_else(|e| panic!("{cli} {scenario} {}: {e}", captured.file))
            })
            .collect()
    }

    #[test]
    fn the_real_clis_compactions_are_recognised_and_their_other_turns_are_not() {
        for (cli, scenario, expected) in [
            ("claude-code", "compact", CompactionPrompt::ClaudeCode),
            ("claude-code", "auto-compact", CompactionPrompt::ClaudeCode),
            ("codex", "auto-compact", CompactionPrompt::Codex),
        ] {
            let compactions = real(cli, scenario, "compact");
            assert!(!compactions.is_empty(), "{cli} {scenario}");
            for request in &compactions {
                assert_eq!(
                    compaction_prompt(request),
                    Some(expected),
                    "{cli} {scenario}: last turns {:?}",
                    &request.turns[request.turns.len().saturating_sub(2)..]
                );
            }
        }
        for (cli, scenario, kind) in [
            ("claude-code", "tool-loop", "messages"),
            ("claude-code", "auto-compact", "messages"),
            ("claude-code", "subagent", "messages"),
            ("codex", "shell", "responses"),
            ("codex", "auto-compact", "responses"),
        ] {
            for request in real(cli, scenario, kind) {
                assert_eq!(compaction_prompt(&request), None, "{cli} {scenario}");
            }
        }
    }

    fn conversation(last: glider_ngl::Turn) -> Request {
        use glider_ngl::{Role, Turn};
        Request {
            turns: vec![
                Turn::text(Role::User, "fix it"),
                Turn::text(Role::Assistant, "fixed"),
                last,
            ],
            ..Request::default()
        }
    }

    #[test]
    fn claude_codes_and_codexs_compaction_requests_are_recognised_by_their_instruction() {
        use glider_ngl::{Role, Turn};
        let claude = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is \
                      to create a detailed summary of the conversation so far, paying close attention";
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, claude))),
            Some(CompactionPrompt::ClaudeCode)
        );
        let recent =
            "Your task is to create a detailed summary of the RECENT portion of the conversation";
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, recent))),
            Some(CompactionPrompt::ClaudeCode)
        );
        let codex = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary \
                     for another LLM that will resume the task.";
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, codex))),
            Some(CompactionPrompt::Codex)
        );
        // Found after other words that open alike.
        let after = format!("You asked. You are performing a review. Your task is… {codex}");
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, &after))),
            Some(CompactionPrompt::Codex)
        );
        // Both in one text: Claude Code's, as when each was searched for in turn.
        let both = format!("{codex} {claude}");
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::User, &both))),
            Some(CompactionPrompt::ClaudeCode)
        );
        for text in [
            "what did we change?",
            "You are performing a review. Your task is",
        ] {
            assert_eq!(
                compaction_prompt(&conversation(Turn::text(Role::User, text))),
                None
            );
        }
        // The instruction quoted by the model is no compaction request.
        assert_eq!(
            compaction_prompt(&conversation(Turn::text(Role::Assistant, claude))),
            None
        );
        // Claude Code 2.1.197 ends `/compact` and most auto-compactions with system
        // entries after the instruction.
        let mut trailing = conversation(Turn::text(Role::User, claude));
        trailing.turns.push(Turn::text(
            Role::System,
            "<system-reminder>The following skills are available</system-reminder>",
        ));
        trailing
            .turns
            .push(Turn::text(Role::System, "Note: src/parse.rs was modified"));
        assert_eq!(
            compaction_prompt(&trailing),
            Some(CompactionPrompt::ClaudeCode)
        );
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
        let bus = crate::Bus::default();
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
            let bus = crate::Bus::default();
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
