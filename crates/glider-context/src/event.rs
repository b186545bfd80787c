//! The typed events of the context log. A batch's events of one session are stored as
//! one row (`store.rs`, `packed.rs`); their JSON is what exports and the API show.
//! Nothing is ever rewritten; the graph ([`crate::graph`]) is a fold over these.
//! Every text an event carries of a prompt or a reply passes through
//! [`EventBody::redact_keys`] before it is stored or read back, so no API key typed
//! into a prompt reaches the file, the dashboard or an export.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use glider_sys::secrets::{redact_keys_in, redact_keys_in_json};

/// Longest string kept of a tool call's argument (an `apply_patch` patch, a `Write`'s
/// content); longer ones keep their start and say how long they were.
pub const MAX_ARGUMENT_CHARS: usize = 32 * 1024;
/// Tool result text kept from each end of a longer result (a test failure is usually at
/// the end, the command's first output at the start).
pub const RESULT_EDGE_CHARS: usize = 2 * 1024;
/// Most characters of a root user message kept (the user's goal in their own words).
pub const MAX_USER_TEXT_CHARS: usize = 4 * 1024;
/// A compaction summary's text kept from each end (a local model's answer to a CLI's
/// compaction request; the reply's own text is capped by the engine first).
pub const MAX_NARRATIVE_EDGE_CHARS: usize = 4 * 1024;
/// Reply text kept from each end of a longer reply (its opening says what the model
/// set out to do, its end what it did; the continuity record quotes them).
pub const REPLY_TEXT_EDGE_CHARS: usize = 1024;

/// One event, as appended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Unix milliseconds when it happened.
    pub at_ms: u64,
    /// The session key; `None` for events of the store itself (gaps, retention).
    pub session: Option<String>,
    pub body: EventBody,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventBody {
    /// A request was decided: where it goes and what its newest turns carry.
    Request(RequestEvent),
    /// A request ended: the reply's tool calls, usage and stop reason, or its failure.
    Reply(ReplyEvent),
    /// The writer fell behind and `dropped` events were not written.
    Gap { dropped: u64 },
    /// Retention deleted the events older than `before_ms` (reason `age`) or the
    /// oldest ones until the log fitted its size (reason `size`).
    Retention {
        reason: String,
        deleted: u64,
        before_ms: u64,
    },
    /// A user asked to forget a session (`DELETE /api/context/sessions/{id}`, `glider
    /// context forget`): its events were deleted.
    Forgotten { deleted: u64 },
    /// A compaction of the session's history: a summary written for it (accepted or
    /// not), or a CLI's compaction request answered locally.
    Compaction(CompactionEvent),
    /// Glider ended an agent loop with its own final reply (contextkit's turn budget or
    /// loop guard); the request's `reply` event follows with backend `glider-budget`.
    BudgetStop(BudgetStopEvent),
    /// A delegate run (`/claude …`, handled before the pipeline) ended.
    Delegate(DelegateEvent),
    /// Glider ran one of a local model's tool calls itself (`tools.loop`).
    ToolRun(ToolRunEvent),
}

/// A tool call the tool loop ran, before the request's `reply` event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolRunEvent {
    pub request: String,
    /// The loop's model turn that made the call (1 for the first).
    pub turn: u32,
    pub id: String,
    pub tool: String,
    /// The arguments as JSON text (cut by the engine).
    pub arguments: String,
    pub ok: bool,
    pub error: Option<String>,
    pub result_chars: usize,
    pub duration_ms: u64,
}

/// A headless delegate run at its end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DelegateEvent {
    /// The CLI, e.g. `claude`.
    pub vendor: String,
    /// Its exit code when it exited by itself (`None`: killed at the timeout or the
    /// output limit, or its client went away).
    pub exit_code: Option<i32>,
    /// Why the run did not end cleanly, if it did not.
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// An agent loop Glider stopped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetStopEvent {
    pub request: String,
    /// `turn_budget` or `loop_guard`.
    pub limit: String,
    /// The episode's turns, the stopped one included.
    pub turns: u32,
    /// The repeated tool and how often it was called alike (loop guard only).
    pub tool: Option<String>,
    pub repeats: Option<u32>,
    /// The text of the final reply the client got.
    pub message: String,
}

impl EventBody {
    /// Replace every API key ([`glider_sys::secrets`]) in the texts of a prompt or a
    /// reply the event carries: the user's text, tool calls' arguments, tool results,
    /// reply text, errors, narratives and budget messages. The writer calls it on each
    /// event before storing it, and the store on each event it reads back (rows
    /// written before keys were redacted).
    pub fn redact_keys(&mut self) {
        let opt = |text: &mut Option<String>| {
            if let Some(text) = text {
                redact_keys_in(text);
            }
        };
        let calls = |calls: &mut Vec<ToolCall>| {
            for call in calls {
                redact_keys_in_json(&mut call.arguments);
            }
        };
        match self {
            EventBody::Request(request) => {
                opt(&mut request.user_text);
                calls(&mut request.tool_calls);
                for result in &mut request.tool_results {
                    redact_keys_in(&mut result.text);
                }
            }
            EventBody::Reply(reply) => {
                opt(&mut reply.error);
                opt(&mut reply.text);
                calls(&mut reply.tool_calls);
            }
            EventBody::Compaction(compaction) => {
                redact_keys_in(&mut compaction.narrative);
                opt(&mut compaction.reason);
                opt(&mut compaction.rejected_text);
                compaction.missing.iter_mut().for_each(redact_keys_in);
            }
            EventBody::BudgetStop(stop) => redact_keys_in(&mut stop.message),
            EventBody::Delegate(delegate) => opt(&mut delegate.error),
            EventBody::ToolRun(run) => {
                redact_keys_in(&mut run.arguments);
                opt(&mut run.error);
            }
            EventBody::Gap { .. } | EventBody::Retention { .. } | EventBody::Forgotten { .. } => {}
        }
    }

    /// The `kind` column.
    pub fn kind(&self) -> &'static str {
        match self {
            EventBody::Request(_) => "request",
            EventBody::Reply(_) => "reply",
            EventBody::Gap { .. } => "gap",
            EventBody::Retention { .. } => "retention",
            EventBody::Forgotten { .. } => "forgotten",
            EventBody::Compaction(_) => "compaction",
            EventBody::BudgetStop(_) => "budget_stop",
            EventBody::Delegate(_) => "delegate",
            EventBody::ToolRun(_) => "tool_run",
        }
    }
}

/// A request once routed. Only the conversation's newest turns are kept (the last
/// assistant turn and what follows it): the rest was seen by the requests before.
///
/// It is stored packed (and so are a [`ReplyEvent`], a [`ToolCall`] and a
/// [`ToolResult`]): `packed.rs` names each member (a destructuring without `..`), so a
/// member added here fails to compile until written there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestEvent {
    /// Which run of Glider and which request in it (`<run>-<bus id>`), so its reply
    /// finds it.
    pub request: String,
    /// The door, front and rule are named by `&'static str`s on the request path:
    /// borrowed there, so an event costs no allocation for them (owned when read back).
    pub door: Cow<'static, str>,
    pub front: Cow<'static, str>,
    pub model_requested: String,
    /// The model after aliasing.
    pub model: String,
    pub rule: Cow<'static, str>,
    pub reason: String,
    /// The first candidate the router chose and whether it is local.
    pub backend: Option<String>,
    pub local: Option<bool>,
    pub estimated_tokens: u64,
    /// The newest user turn is the user's own text (not tool results): a new episode,
    /// unless the family still waits on tool results (then it is a subagent's prompt).
    pub root: bool,
    /// That text, when `root`, up to [`MAX_USER_TEXT_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_text: Option<String>,
    /// Tool calls in the newest assistant turn (often already seen in its reply).
    /// Written only when there are some (and this and the other optional members of
    /// a request or reply are absent when empty: most requests have neither calls nor
    /// results, and each member written cost the writer's JSON, its compression and
    /// SQLite's WAL bytes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tool results after it: what the CLI's tools returned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_results: Vec<ToolResult>,
    /// A CLI's compaction request (recognised by its instruction's text).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compaction: bool,
}

/// A request at its end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplyEvent {
    pub request: String,
    pub backend: Option<String>,
    pub model: Option<String>,
    pub local: Option<bool>,
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Borrowed from `StopReason::as_str` on the request path (owned when read back).
    pub stop_reason: Option<Cow<'static, str>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    pub ttft_ms: Option<u64>,
    pub total_ms: Option<u64>,
    /// The reply's text (not its thinking), or its first and last
    /// [`REPLY_TEXT_EDGE_CHARS`]; absent in events written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A compaction. The contract the summarizer and the compaction answer share: the
/// newest `accepted` one's `narrative` is the continuity record's narrative, covering
/// the session up to `until_ms`. The summarizer's runs cover a range of events (those
/// after the last accepted compaction's `until_event`, up to this one's); a CLI's
/// compaction answered locally fills only the first fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionEvent {
    /// The narrative named every file edited and every error still open in the range.
    pub accepted: bool,
    /// The session's updated narrative when accepted; empty when rejected (what the
    /// model wrote then is in `rejected_text`).
    pub narrative: String,
    /// Time of the newest event the range covers.
    pub until_ms: u64,
    /// Who compacted: `summarizer`, or `local_model` / `record` for a CLI's compaction
    /// request answered by the local model or from the record itself.
    pub source: String,
    /// Why it was not accepted: names left out, the backend failed, the time ran out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Id of the newest event the range covers (the next range starts after it).
    pub until_event: i64,
    /// Time of the oldest event in the range.
    pub since_ms: u64,
    /// What ended the range: `episode` (a new root turn began) or `idle`.
    pub trigger: String,
    /// The files and errors the narrative had to name and did not.
    pub missing: Vec<String>,
    /// What the model wrote, when it was rejected (for the reader to see why).
    pub rejected_text: Option<String>,
    pub backend: Option<String>,
    pub model: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Time the model took, in milliseconds.
    pub took_ms: u64,
}

/// A tool call (in a request's history or a reply).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Parsed JSON when it parses (strings capped at [`MAX_ARGUMENT_CHARS`]), else the
    /// text as a string.
    pub arguments: Value,
}

/// A tool's result as the CLI sent it back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub call_id: String,
    pub name: Option<String>,
    pub is_error: bool,
    /// The text, or its first and last [`RESULT_EDGE_CHARS`] with `…` between.
    pub text: String,
    /// Characters of the whole text.
    pub chars: usize,
}

impl ToolCall {
    /// A call whose arguments arrive as JSON text (a reply's stream fragments).
    pub fn from_text(id: String, name: String, arguments: &str) -> Self {
        let arguments = serde_json::from_str::<Value>(arguments)
            .unwrap_or_else(|_| Value::String(arguments.to_owned()));
        ToolCall::new(id, name, arguments)
    }

    /// A call, its long string arguments capped.
    pub fn new(id: String, name: String, mut arguments: Value) -> Self {
        cap_strings(&mut arguments);
        ToolCall {
            id,
            name,
            arguments,
        }
    }
}

impl ToolResult {
    pub fn new(call_id: String, name: Option<String>, is_error: bool, text: &str) -> Self {
        ToolResult {
            call_id,
            name,
            is_error,
            text: edges(text, RESULT_EDGE_CHARS),
            chars: text.chars().count(),
        }
    }
}

fn cap_strings(value: &mut Value) {
    match value {
        Value::String(text) if text.len() > MAX_ARGUMENT_CHARS => {
            let kept = prefix(text, MAX_ARGUMENT_CHARS);
            *text = format!("{kept}… [{} chars]", text.chars().count());
        }
        Value::Array(items) => items.iter_mut().for_each(cap_strings),
        Value::Object(map) => map.values_mut().for_each(cap_strings),
        _ => {}
    }
}

/// [`edges`] of an owned `text`: kept as it is (not copied) when short.
pub fn into_edges(text: String, edge: usize) -> String {
    match long_text_chars(&text, edge) {
        None => text,
        Some(count) => cut_to_edges(&text, count, edge),
    }
}

/// At most `chars` characters from the start of `text`.
pub fn prefix(text: &str, chars: usize) -> &str {
    // No more bytes than `chars`: no more characters either, nothing to walk.
    if text.len() <= chars {
        return text;
    }
    match text.char_indices().nth(chars) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// `text` whole when short, else its first and last `edge` characters.
pub fn edges(text: &str, edge: usize) -> String {
    match long_text_chars(text, edge) {
        None => text.to_owned(),
        Some(count) => cut_to_edges(text, count, edge),
    }
}

/// The characters of `text` when it has more than `2 * edge` of them (`None`: it is
/// short and kept whole). No more bytes than that means no more characters either, and
/// nothing is counted.
fn long_text_chars(text: &str, edge: usize) -> Option<usize> {
    if text.len() <= 2 * edge {
        return None;
    }
    let count = text.chars().count();
    (count > 2 * edge).then_some(count)
}

/// The first and last `edge` characters of `text`, which has `count` of them.
fn cut_to_edges(text: &str, count: usize, edge: usize) -> String {
    let head = prefix(text, edge);
    let tail_start = text
        .char_indices()
        .nth(count - edge)
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    format!("{head}\n…\n{}", &text[tail_start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Empty optional members are left out of a written event, and an event written
    /// before with them (`[]`, `null`) reads as the same event.
    #[test]
    fn empty_members_are_left_out_and_old_rows_with_them_still_read() {
        let request = EventBody::Request(RequestEvent {
            request: "r-1".into(),
            rule: "model".into(),
            ..RequestEvent::default()
        });
        let written = serde_json::to_value(&request).expect("serializes");
        for absent in ["user_text", "tool_calls", "tool_results", "compaction"] {
            assert!(written.get(absent).is_none(), "{absent}: {written}");
        }
        let old = r#"{"kind":"request","request":"r-1","door":"","front":"","model_requested":"",
            "model":"","rule":"model","reason":"","backend":null,"local":null,"estimated_tokens":0,
            "root":false,"user_text":null,"tool_calls":[],"tool_results":[]}"#;
        assert_eq!(
            serde_json::from_str::<EventBody>(old).expect("reads"),
            request
        );
        let reply = EventBody::Reply(ReplyEvent {
            request: "r-1".into(),
            stop_reason: Some("end_turn".into()),
            ..ReplyEvent::default()
        });
        let written = serde_json::to_value(&reply).expect("serializes");
        for absent in ["error", "tool_calls", "text"] {
            assert!(written.get(absent).is_none(), "{absent}: {written}");
        }
        let old = r#"{"kind":"reply","request":"r-1","backend":null,"model":null,"local":null,
            "status":null,"error":null,"input_tokens":0,"output_tokens":0,
            "stop_reason":"end_turn","tool_calls":[],"ttft_ms":null,"total_ms":null}"#;
        assert_eq!(
            serde_json::from_str::<EventBody>(old).expect("reads"),
            reply
        );
    }

    #[test]
    fn an_owned_text_keeps_the_same_edges_as_a_borrowed_one() {
        // Short in bytes, short in characters but long in bytes, and long.
        for text in ["short".to_owned(), "é".repeat(30), "ab".repeat(40)] {
            assert_eq!(into_edges(text.clone(), 20), edges(&text, 20), "{text}");
        }
        assert!(into_edges("ab".repeat(40), 20).contains("\n…\n"));
    }

    #[test]
    fn long_results_keep_both_ends_and_their_length() {
        let text = format!("{}{}{}", "a".repeat(3000), "b".repeat(3000), "FAILED x");
        let result = ToolResult::new("c".into(), None, false, &text);
        assert!(result.text.starts_with(&"a".repeat(RESULT_EDGE_CHARS)));
        assert!(result.text.ends_with("FAILED x"));
        assert_eq!(result.chars, 6008);
        assert!(result.text.chars().count() < 2 * RESULT_EDGE_CHARS + 4);
    }

    #[test]
    fn long_arguments_are_capped_short_ones_kept() {
        let call = ToolCall::from_text(
            "1".into(),
            "Write".into(),
            &serde_json::json!({"file_path": "a.rs", "content": "é".repeat(40_000)}).to_string(),
        );
        assert_eq!(call.arguments["file_path"], "a.rs");
        let content = call.arguments["content"].as_str().expect("string");
        assert!(
            content.ends_with("… [40000 chars]"),
            "{}",
            &content[content.len() - 30..]
        );
        let broken = ToolCall::from_text("2".into(), "Bash".into(), "{not json");
        assert_eq!(broken.arguments, Value::String("{not json".into()));
    }
}
