//! The pure half of the summarizer: which events a compaction covers (its range), what
//! its narrative must name (every file edited in the range and every error still open,
//! from the graph), the text the model is given ([`render_input`], the one place that
//! says what the model sees), and the check that accepts or rejects what it wrote.

use std::collections::{HashMap, HashSet};

use crate::event::{CompactionEvent, EventBody, ToolCall, prefix};
use crate::graph::{self, Narrative, SessionGraph};
use crate::record::{ContinuityRecord, op_word};
use crate::store::Stored;
use crate::tools::{self, Action, FileOp};

/// What the model is told to do with [`render_input`]'s text.
pub const SYSTEM_PROMPT: &str = "You keep the continuity record of a coding session \
that an AI coding assistant runs for a user. You get the session's continuity record \
(its summary so far, if any, and the structural facts Glider keeps: goals, files, the \
assistant's closing words, open errors) and the new turns. Write the updated summary: \
what the user wants, what was done and why, what was decided, and what is still open. \
Plain prose, at most 300 words, no preamble. You must name every file and every error \
listed under \"Must be named\" (a file by its path, an error by its subject).";

/// Most characters of one user message, tool result or argument shown in the turns.
const USER_TEXT_CHARS: usize = 1000;
const RESULT_CHARS: usize = 300;
const ARGUMENT_CHARS: usize = 200;
/// A command is named by its first line, up to this many characters.
const COMMAND_NAME_CHARS: usize = 80;

/// What ended the range being compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A new root turn began a new episode: the range stops before it.
    Episode,
    /// The session went quiet: the range runs to its newest event.
    Idle,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Episode => "episode",
            Trigger::Idle => "idle",
        }
    }
}

/// The events one compaction covers.
#[derive(Debug)]
pub struct Range<'a> {
    /// The last accepted compaction before it (its narrative is updated).
    pub previous: Option<&'a CompactionEvent>,
    /// The session's events from the first up to the range's end (the graph is folded
    /// over these: the state when the range ends).
    pub through: &'a [Stored],
    /// The requests and replies in the range, oldest first.
    pub turns: Vec<&'a Stored>,
    pub since_ms: u64,
    pub until_ms: u64,
    pub until_event: i64,
    pub trigger: Trigger,
}

impl Range<'_> {
    /// The tool calls whose results arrived in the range (what it did: a fact of the
    /// graph belongs to the range when its call's result is here).
    fn resulted_calls(&self) -> HashSet<&str> {
        self.turns
            .iter()
            .filter_map(|s| match &s.event.body {
                EventBody::Request(r) => Some(r.tool_results.iter().map(|t| t.call_id.as_str())),
                _ => None,
            })
            .flatten()
            .collect()
    }
}

/// The range `trigger` asks for in one session's `events` (oldest first): the requests
/// and replies after the last accepted compaction, up to the newest turn family's first
/// event (`Episode`) or to the end (`Idle`). `None` when it holds no request.
pub fn select(events: &[Stored], trigger: Trigger) -> Option<Range<'_>> {
    let previous = events.iter().rev().find_map(|s| match &s.event.body {
        EventBody::Compaction(c) if c.accepted => Some(c),
        _ => None,
    });
    let after = previous.map_or(i64::MIN, |c| c.until_event);
    let start = events.iter().position(|s| s.id > after)?;
    let end = match trigger {
        Trigger::Idle => events.len(),
        Trigger::Episode => {
            let newest = events
                .iter()
                .rev()
                .find(|s| matches!(s.event.body, EventBody::Request(_)))?
                .family
                .as_deref()?;
            events[start..]
                .iter()
                .position(|s| s.family.as_deref() == Some(newest))
                .map_or(events.len(), |at| start + at)
        }
    };
    let window = events.get(start..end)?;
    let turns: Vec<&Stored> = window
        .iter()
        .filter(|s| matches!(s.event.body, EventBody::Request(_) | EventBody::Reply(_)))
        .collect();
    if !turns
        .iter()
        .any(|s| matches!(s.event.body, EventBody::Request(_)))
    {
        return None;
    }
    let (first, last) = (turns.first()?, window.last()?);
    Some(Range {
        previous,
        through: &events[..end],
        since_ms: first.event.at_ms,
        until_ms: last.event.at_ms,
        until_event: last.id,
        turns,
        trigger,
    })
}

/// Something the narrative must name, and the words that count as naming it.
#[derive(Debug, Clone, PartialEq)]
pub struct MustName {
    /// How it is listed for the model and in `missing`.
    pub label: String,
    /// Any one of these (case and spacing aside) in the narrative names it.
    pub names: Vec<String>,
}

/// What a range's narrative must name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Required {
    /// Files edited, written, created or deleted in the range, with their latest op.
    pub files: Vec<(MustName, FileOp)>,
    /// Errors still open when the range ends (wherever they were opened).
    pub errors: Vec<(MustName, String)>,
}

impl Required {
    /// The labels of what `narrative` leaves out.
    pub fn missing(&self, narrative: &str) -> Vec<String> {
        let text = normalise(narrative);
        self.files
            .iter()
            .map(|(m, _)| m)
            .chain(self.errors.iter().map(|(m, _)| m))
            .filter(|m| !m.names.iter().any(|name| text.contains(&normalise(name))))
            .map(|m| m.label.clone())
            .collect()
    }
}

/// The graph at the range's end and what the narrative must name.
pub fn required(session: &str, range: &Range<'_>) -> (SessionGraph, Required) {
    let graph = graph::fold(session, range.through);
    let resulted = range.resulted_calls();
    let mut required = Required::default();
    for file in &graph.files {
        let in_range = file
            .changes
            .iter()
            .rev()
            .find(|c| c.op != FileOp::Read && resulted.contains(c.call_id.as_str()));
        if let Some(change) = in_range {
            required.files.push((file_name(&file.path), change.op));
        }
    }
    let calls = calls_by_id(range.through);
    for error in graph.open_errors() {
        let paths = match calls
            .get(error.call_id.as_str())
            .map(|c| tools::action(&c.name, &c.arguments))
        {
            Some(Action::Read { path }) => vec![path],
            Some(Action::Edit { files }) => files.into_iter().map(|(p, _)| p).collect(),
            _ => Vec::new(),
        };
        let names = if paths.is_empty() {
            vec![command_name(&error.subject)]
        } else {
            let mut names = vec![error.subject.clone()];
            for path in &paths {
                names.extend(file_name(path).names);
            }
            names
        };
        required.errors.push((
            MustName {
                label: error.subject.clone(),
                names,
            },
            error.reason.clone(),
        ));
    }
    (graph, required)
}

/// The text the summarizer model is given: the session's continuity record as of the
/// range's end ([`ContinuityRecord::render`], the one renderer of its structure; its
/// summary is the previous accepted narrative), what the narrative must name (the
/// check's list, always whole), the commands the range ran and the range's turns,
/// newest kept first when the whole must fit `max_chars`. The record gets at most half
/// of `max_chars`.
pub fn render_input(
    range: &Range<'_>,
    graph: &SessionGraph,
    required: &Required,
    max_chars: usize,
) -> String {
    let mut record = ContinuityRecord::of_graph(graph);
    // The narrative being updated is the one the range starts after, whatever the
    // fold saw later.
    record.narrative = range.previous.map(Narrative::of);
    let record_tokens = ((max_chars / 2) as f64 / glider_engine::tokenizer::BYTES_PER_TOKEN) as u64;
    let mut out = String::from("The continuity record so far:\n");
    out.push_str(&record.render(record_tokens));
    if range.previous.is_none() {
        out.push_str("\n(no summary yet: this is the session's first compaction)");
    }
    out.push_str("\n\nMust be named (every one):\n");
    list(
        &mut out,
        required
            .files
            .iter()
            .map(|(m, op)| format!("{} ({})", m.label, op_word(*op)))
            .chain(
                required
                    .errors
                    .iter()
                    .map(|(m, _)| format!("{} (open error)", m.label)),
            ),
    );
    out.push_str("\nCommands run in these turns:\n");
    let resulted = range.resulted_calls();
    list(
        &mut out,
        graph
            .commands
            .iter()
            .filter(|c| resulted.contains(c.call_id.as_str()))
            .map(|c| {
                let outcome = match (c.exit_code, c.failed) {
                    (Some(code), _) => format!("exit {code}"),
                    (None, true) => "failed".to_owned(),
                    (None, false) => "ok".to_owned(),
                };
                format!("{} ({outcome})", one_line(&c.command, COMMAND_NAME_CHARS))
            }),
    );
    out.push_str("\nNew turns (oldest first):\n");
    let calls = calls_by_id(range.through);
    let lines: Vec<String> = range
        .turns
        .iter()
        .flat_map(|s| turn_lines(s, &calls))
        .collect();
    let room = max_chars.saturating_sub(out.len());
    let mut kept = 0;
    let mut used = 0;
    for line in lines.iter().rev() {
        if used + line.len() + 1 > room {
            break;
        }
        used += line.len() + 1;
        kept += 1;
    }
    let left_out = lines.len() - kept;
    if left_out > 0 {
        out.push_str(&format!("({left_out} earlier lines left out)\n"));
    }
    for line in &lines[left_out..] {
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn list(out: &mut String, items: impl Iterator<Item = String>) {
    let mut any = false;
    for item in items {
        out.push_str(&format!("- {item}\n"));
        any = true;
    }
    if !any {
        out.push_str("(none)\n");
    }
}

/// One stored request or reply as lines of the transcript the model reads.
fn turn_lines(stored: &Stored, calls: &HashMap<&str, &ToolCall>) -> Vec<String> {
    let mut lines = Vec::new();
    match &stored.event.body {
        EventBody::Request(request) => {
            for result in &request.tool_results {
                let name = result
                    .name
                    .as_deref()
                    .or_else(|| calls.get(result.call_id.as_str()).map(|c| c.name.as_str()))
                    .unwrap_or("tool");
                let status = if result.is_error { "error" } else { "ok" };
                lines.push(format!(
                    "[{name} result, {status}] {}",
                    one_line(&result.text, RESULT_CHARS)
                ));
            }
            if let (true, Some(text)) = (request.root, &request.user_text) {
                lines.push(format!("[user] {}", one_line(text, USER_TEXT_CHARS)));
            }
        }
        EventBody::Reply(reply) => {
            if let Some(error) = &reply.error {
                lines.push(format!("[reply failed] {}", one_line(error, RESULT_CHARS)));
            }
            for call in &reply.tool_calls {
                lines.push(format!(
                    "[assistant calls {}] {}",
                    call.name,
                    one_line(&call.arguments.to_string(), ARGUMENT_CHARS)
                ));
            }
        }
        _ => {}
    }
    lines
}

/// Every tool call seen in `events` (request history and replies), by id.
fn calls_by_id(events: &[Stored]) -> HashMap<&str, &ToolCall> {
    let mut calls = HashMap::new();
    for stored in events {
        let seen = match &stored.event.body {
            EventBody::Request(r) => &r.tool_calls,
            EventBody::Reply(r) => &r.tool_calls,
            _ => continue,
        };
        for call in seen {
            calls.entry(call.id.as_str()).or_insert(call);
        }
    }
    calls
}

/// A file is named by its path or its file name.
fn file_name(path: &str) -> MustName {
    let mut names = vec![path.to_owned()];
    if let Some(base) = path.rsplit(['/', '\\']).next()
        && !base.is_empty()
        && base != path
    {
        names.push(base.to_owned());
    }
    MustName {
        label: path.to_owned(),
        names,
    }
}

/// A command is named by its first line, up to [`COMMAND_NAME_CHARS`].
fn command_name(command: &str) -> String {
    prefix(
        command.lines().next().unwrap_or(command).trim(),
        COMMAND_NAME_CHARS,
    )
    .to_owned()
}

/// `text` on one line, cut to `chars`.
fn one_line(text: &str, chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = prefix(&flat, chars);
    if cut.len() < flat.len() {
        format!("{cut}…")
    } else {
        flat
    }
}

/// Lowercase with runs of whitespace as one space (how names are compared).
fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::{Event, ReplyEvent, RequestEvent, ToolResult};

    struct Log(Vec<Stored>);

    impl Log {
        fn push(&mut self, family: &str, body: EventBody) {
            let id = self.0.len() as i64 + 1;
            self.0.push(Stored {
                id,
                family: Some(family.into()),
                event: Event {
                    at_ms: 1000 * id as u64,
                    session: Some("s".into()),
                    body,
                },
            });
        }

        /// A root request `family` with `results` of earlier calls, answered by `calls`.
        fn turn(
            &mut self,
            family: &str,
            text: Option<&str>,
            results: Vec<ToolResult>,
            calls: Vec<ToolCall>,
        ) {
            let request = format!("{family}-{}", self.0.len());
            self.push(
                family,
                EventBody::Request(RequestEvent {
                    request: request.clone(),
                    root: text.is_some(),
                    user_text: text.map(str::to_owned),
                    tool_results: results,
                    ..RequestEvent::default()
                }),
            );
            self.push(
                family,
                EventBody::Reply(ReplyEvent {
                    request,
                    status: Some(200),
                    tool_calls: calls,
                    ..ReplyEvent::default()
                }),
            );
        }
    }

    fn edit(id: &str, path: &str) -> ToolCall {
        ToolCall::new(
            id.into(),
            "Edit".into(),
            json!({"file_path": path, "old_string": "a", "new_string": "b"}),
        )
    }

    fn bash(id: &str, command: &str) -> ToolCall {
        ToolCall::new(id.into(), "Bash".into(), json!({"command": command}))
    }

    fn session() -> Log {
        let mut log = Log(Vec::new());
        log.turn(
            "f1",
            Some("fix the parser"),
            vec![],
            vec![edit("e1", "/p/src/parse.rs")],
        );
        log.turn(
            "f1",
            None,
            vec![ToolResult::new("e1".into(), None, false, "updated")],
            vec![bash("b1", "cargo test")],
        );
        log.turn(
            "f1",
            None,
            vec![ToolResult::new(
                "b1".into(),
                None,
                true,
                "Exit code 101\ntest result: FAILED",
            )],
            vec![],
        );
        log.turn("f2", Some("now the docs"), vec![], vec![]);
        log
    }

    #[test]
    fn an_episode_range_stops_before_the_new_root_turn() {
        let log = session();
        let range = select(&log.0, Trigger::Episode).expect("a range");
        assert_eq!(range.turns.len(), 6, "the three rounds of f1");
        assert_eq!(range.until_event, 6);
        let (_, required) = required("s", &range);
        let files: Vec<_> = required
            .files
            .iter()
            .map(|(m, _)| m.label.as_str())
            .collect();
        assert_eq!(files, ["/p/src/parse.rs"]);
        let errors: Vec<_> = required
            .errors
            .iter()
            .map(|(m, _)| m.label.as_str())
            .collect();
        assert_eq!(errors, ["cargo test"]);
        let idle = select(&log.0, Trigger::Idle).expect("a range");
        assert_eq!(idle.turns.len(), 8);
    }

    #[test]
    fn a_narrative_must_name_each_edited_file_and_open_error() {
        let log = session();
        let range = select(&log.0, Trigger::Episode).expect("a range");
        let (_, required) = required("s", &range);
        assert_eq!(
            required.missing("We changed parse.rs; `cargo  test` still fails."),
            Vec::<String>::new(),
            "a file name and the command, spacing and case aside"
        );
        assert_eq!(required.missing("We ran CARGO TEST."), ["/p/src/parse.rs"]);
        assert_eq!(
            required.missing("Nothing."),
            ["/p/src/parse.rs", "cargo test"]
        );
    }

    #[test]
    fn the_next_range_starts_after_the_accepted_compaction() {
        let mut log = session();
        log.push(
            "f2",
            EventBody::Compaction(CompactionEvent {
                accepted: true,
                narrative: "Parser fixed in parse.rs; cargo test fails.".into(),
                until_event: 6,
                ..CompactionEvent::default()
            }),
        );
        let range = select(&log.0, Trigger::Idle).expect("the new episode");
        assert_eq!(range.turns.len(), 2);
        assert_eq!(
            range.previous.map(|p| p.narrative.as_str()),
            Some("Parser fixed in parse.rs; cargo test fails.")
        );
        let (graph, required) = required("s", &range);
        assert!(required.files.is_empty(), "no edit in this range");
        assert_eq!(required.errors.len(), 1, "the error is still open");
        let text = render_input(&range, &graph, &required, 100_000);
        // The input is the rendered record, its summary the previous narrative.
        let record = ContinuityRecord {
            narrative: range.previous.map(Narrative::of),
            ..ContinuityRecord::of_graph(&graph)
        };
        assert!(
            text.starts_with(&format!(
                "The continuity record so far:\n{}",
                record.render(u64::MAX)
            )),
            "{text}"
        );
        assert!(
            text.contains("Summary so far:\nParser fixed in parse.rs"),
            "{text}"
        );
        assert!(text.contains("- /p/src/parse.rs: edited"), "{text}");
        assert!(text.contains("- cargo test (open error)"), "{text}");
        assert!(text.contains("[user] now the docs"), "{text}");
        assert!(
            !text.contains("[user] fix the parser"),
            "earlier turns are in the narrative: {text}"
        );
        assert!(text.contains("- cargo test: test result: FAILED"), "{text}");
        assert!(
            select(&log.0, Trigger::Episode).is_none(),
            "f2 has not ended"
        );
    }

    #[test]
    fn the_input_keeps_the_structure_and_the_newest_turns_within_its_budget() {
        let mut log = session();
        for i in 0..50 {
            log.turn(
                "f2",
                None,
                vec![],
                vec![bash(&format!("x{i}"), &format!("echo {i}"))],
            );
        }
        let range = select(&log.0, Trigger::Idle).expect("a range");
        let (graph, required) = required("s", &range);
        let text = render_input(&range, &graph, &required, 2000);
        assert!(text.len() <= 2000 + 200, "{}", text.len());
        assert!(text.contains("/p/src/parse.rs (edited)"), "{text}");
        assert!(text.contains("earlier lines left out"), "{text}");
        assert!(text.contains("echo 49"), "the newest turn is kept: {text}");
        assert!(!text.contains("[user] fix the parser"), "{text}");
    }
}
