//! The pure half of the summarizer: what it carries of a session between runs
//! ([`Carried`]: the session folded so far and the range since the last accepted
//! compaction), which events a compaction covers (its range), what its narrative must
//! name (every file edited in the range and every error still open, from the fold), the
//! text the model is given ([`Carried::render_input`], the one place that says what
//! the model sees), and the check that accepts or rejects what it wrote.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::ops::ControlFlow;

use glider_vocab::{MustName, coverage};

use crate::event::{CompactionEvent, EventBody, ToolCall, prefix};
use crate::graph::{self, ErrorFact, Folder, Narrative, SessionGraph};
use crate::record::{ContinuityRecord, op_word};
use crate::store::Stored;
use crate::tools::FileOp;

/// What the model is told to do with [`Carried::render_input`]'s text.
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

/// What one compaction covers: what its event says of its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The first request's or reply's time after the last accepted compaction.
    pub since_ms: u64,
    /// The range's newest event, and its time.
    pub until_ms: u64,
    pub until_event: i64,
    pub trigger: Trigger,
}

/// The events folded so far belong to a range an accepted compaction cut in two (one
/// the carrier did not make): [`Carried::advance`] cannot split them, so the session is
/// read again from its first event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stale;

/// What a run learns of the events it is about to fold in a first pass over them
/// ([`Carried::look_ahead`], a page at a time), before it folds any.
#[derive(Debug, Default)]
pub struct Ahead {
    /// The newest accepted compaction among them that ends after the range's start.
    compaction: Option<CompactionEvent>,
    /// The turn family of the newest request among them.
    newest_family: Option<String>,
    /// Whether any reply among them succeeded.
    pub answered: bool,
    /// The newest event looked at: the run folds no further.
    last_id: Option<i64>,
}

/// What the summarizer carries of one session from one run to the next, so that a run
/// reads and folds only the events committed since the last one, however long the
/// session grows: the session folded up to [`Carried::through`] (a live fold, bounded,
/// whose record is the replay's), the last accepted compaction, and what the range
/// after it amounts to so far — its transcript lines (the newest, within the input's
/// budget), the files it edited and the commands it ran.
pub struct Carried {
    session: String,
    /// The session's oldest event id when it was first read: a different one later
    /// means events were deleted since (forget, retention; both delete a session's
    /// oldest first), and the session is read again.
    first_id: i64,
    /// The newest event folded, and its time.
    through: i64,
    through_ms: u64,
    folder: Folder,
    /// The last accepted compaction: its narrative is the one updated.
    previous: Option<CompactionEvent>,
    range: RangeSoFar,
}

/// The range after the last accepted compaction, as far as it was folded.
#[derive(Default)]
struct RangeSoFar {
    /// The range holds the events after this one (the compaction's end).
    after: i64,
    since_ms: Option<u64>,
    requests: bool,
    /// The turns as transcript lines, oldest first; older ones are dropped (and
    /// counted) past the input's budget.
    turns: Kept,
    /// Paths the range edited, wrote, created or deleted.
    edited: BTreeSet<String>,
    /// The commands the range ran, with their outcome.
    commands: Kept,
}

/// Lines, oldest first, the newest kept within a budget of characters.
#[derive(Default)]
struct Kept {
    lines: VecDeque<String>,
    chars: usize,
    left_out: usize,
}

impl Kept {
    fn push(&mut self, line: String, budget: usize) {
        self.chars += line.len() + 1;
        self.lines.push_back(line);
        while self.chars > budget {
            let Some(oldest) = self.lines.pop_front() else {
                break;
            };
            self.chars -= oldest.len() + 1;
            self.left_out += 1;
        }
    }

    /// The newest lines that fit in `room` characters, and how many were left out
    /// (here and before).
    fn newest_within(&self, room: usize) -> (usize, impl Iterator<Item = &String>) {
        let mut used = 0;
        let kept = self
            .lines
            .iter()
            .rev()
            .take_while(|line| {
                used += line.len() + 1;
                used <= room
            })
            .count();
        let skipped = self.lines.len() - kept;
        (self.left_out + skipped, self.lines.iter().skip(skipped))
    }
}

impl Carried {
    /// Nothing of `session` read yet; `first_id` is its oldest event's id now.
    pub fn new(session: &str, first_id: i64) -> Carried {
        Carried {
            session: session.to_owned(),
            first_id,
            through: i64::MIN,
            through_ms: 0,
            folder: Folder::live(session),
            previous: None,
            range: RangeSoFar {
                after: i64::MIN,
                ..RangeSoFar::default()
            },
        }
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    /// The session's oldest event id when it was first read.
    pub fn first_id(&self) -> i64 {
        self.first_id
    }

    /// The newest event folded: the next run reads the events after it.
    pub fn through(&self) -> i64 {
        self.through
    }

    /// Fold `events` (the session's events after [`Carried::through`], oldest first) as
    /// far as `trigger`'s range goes, and say what the range now covers: `Idle` takes
    /// them all; `Episode` stops before the first of them in the newest request's turn
    /// family (the episode just begun), folding the rest in a later run. An accepted
    /// compaction among them starts the range again after its end. Each new turn's
    /// lines and commands are kept within `max_chars`. `None` when the range holds no
    /// request (nothing to compact). The events in one slice: the summarizer reads a
    /// session a page at a time, through [`Carried::look_ahead`],
    /// [`Carried::begin`] and [`Carried::fold_page`], which this is.
    pub fn advance(
        &mut self,
        events: &[Stored],
        trigger: Trigger,
        max_chars: usize,
    ) -> Result<Option<Range>, Stale> {
        let mut ahead = Ahead::default();
        self.look_ahead(&mut ahead, events);
        self.begin(&ahead)?;
        let _ = self.fold_page(events, trigger, &ahead, max_chars);
        Ok(self.range(trigger))
    }

    /// The first pass over a page of the events after [`Carried::through`]: what
    /// [`Carried::begin`] and [`Carried::fold_page`] must know of all of them before
    /// folding any.
    pub fn look_ahead(&self, ahead: &mut Ahead, page: &[Stored]) {
        for stored in page {
            ahead.last_id = Some(stored.id);
            match &stored.event.body {
                EventBody::Compaction(c) if c.accepted && c.until_event > self.range.after => {
                    ahead.compaction = Some(c.clone());
                }
                EventBody::Request(_) => ahead.newest_family = stored.family.clone(),
                EventBody::Reply(reply) if reply.status.is_none_or(|status| status == 200) => {
                    ahead.answered = true;
                }
                _ => {}
            }
        }
    }

    /// Before the first page is folded: an accepted compaction ahead starts the range
    /// again after its end; one that ends inside what is folded already cannot (the
    /// carrier is [`Stale`]).
    pub fn begin(&mut self, ahead: &Ahead) -> Result<(), Stale> {
        if let Some(compaction) = &ahead.compaction {
            if compaction.until_event < self.through {
                return Err(Stale);
            }
            self.previous = Some(compaction.clone());
            self.range = RangeSoFar {
                after: compaction.until_event,
                ..RangeSoFar::default()
            };
        }
        Ok(())
    }

    /// Fold the next page (in order, after [`Carried::begin`]) as far as `trigger`'s
    /// range goes; breaks where the range ends (an `Episode`'s newest family, or the
    /// last event looked ahead at: one committed since is the next run's).
    pub fn fold_page(
        &mut self,
        page: &[Stored],
        trigger: Trigger,
        ahead: &Ahead,
        max_chars: usize,
    ) -> ControlFlow<()> {
        let Some(last_id) = ahead.last_id else {
            return ControlFlow::Break(());
        };
        let stop = match trigger {
            Trigger::Idle => None,
            Trigger::Episode => match &ahead.newest_family {
                Some(family) => Some(family.as_str()),
                // No request ahead: nothing of the range to fold.
                None => return ControlFlow::Break(()),
            },
        };
        let end = page
            .iter()
            .position(|s| s.id > last_id || (stop.is_some() && s.family.as_deref() == stop))
            .unwrap_or(page.len());
        let folded = &page[..end];
        for stored in folded {
            self.folder.feed(stored);
        }
        if let Some(last) = folded.last() {
            self.through = last.id;
            self.through_ms = last.event.at_ms;
        }
        let after = self.range.after;
        let new = &folded[folded.partition_point(|s| s.id <= after)..];
        self.range.take(&self.session, new, max_chars);
        if end < page.len() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    /// What the range covers once its pages are folded; `None` when it holds no
    /// request (nothing to compact).
    pub fn range(&self, trigger: Trigger) -> Option<Range> {
        if !self.range.requests {
            return None;
        }
        Some(Range {
            since_ms: self.range.since_ms.unwrap_or(self.through_ms),
            until_ms: self.through_ms,
            until_event: self.through,
            trigger,
        })
    }

    /// The summarizer's own compaction of the range [`Carried::advance`] gave was
    /// accepted: the next range starts after it. One that does not end where the fold
    /// does cannot be, and leaves the range as it was (a later read sees its event).
    pub fn accepted(&mut self, compaction: &CompactionEvent) {
        if compaction.accepted && compaction.until_event == self.through {
            self.previous = Some(compaction.clone());
            self.range = RangeSoFar {
                after: compaction.until_event,
                ..RangeSoFar::default()
            };
        }
    }

    /// What the range's narrative must name: the files it edited, with their latest
    /// op, and every error still open where the fold is (wherever it was opened).
    pub fn required(&self) -> Required {
        let mut required = Required::default();
        for path in &self.range.edited {
            let latest = self
                .folder
                .file(path)
                .and_then(|f| f.changes.iter().rev().find(|c| c.op != FileOp::Read));
            if let Some(change) = latest {
                required.files.push((MustName::file(path), change.op));
            }
        }
        for error in self
            .folder
            .errors()
            .iter()
            .filter(|e| e.closed_ms.is_none())
        {
            required
                .errors
                .push((error_name(error), error.reason.clone()));
        }
        required
    }

    /// The text the summarizer model is given: the session's continuity record as of
    /// the range's end ([`ContinuityRecord::render`], the one renderer of its
    /// structure; its summary is the previous accepted narrative), what the narrative
    /// must name (the check's list, always whole), the commands the range ran and the
    /// range's turns, the newest kept when the whole must fit `max_chars`. The record
    /// gets at most half of `max_chars`, the commands a quarter.
    /// The accepted narrative this run updates, if any (part of its input).
    pub fn previous_narrative(&self) -> Option<&str> {
        self.previous.as_ref().map(|p| p.narrative.as_str())
    }

    pub fn render_input(&self, required: &Required, max_chars: usize) -> String {
        let mut record = ContinuityRecord::of_folder(&self.session, &self.folder);
        // The narrative being updated is the one the range starts after.
        record.narrative = self.previous.as_ref().map(Narrative::of);
        let record_tokens =
            ((max_chars / 2) as f64 / glider_vocab::estimate::BYTES_PER_TOKEN) as u64;
        let mut out = String::from("The continuity record so far:\n");
        out.push_str(&record.render(record_tokens));
        if self.previous.is_none() {
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
        let (left_out, commands) = self
            .range
            .commands
            .newest_within(commands_budget(max_chars));
        if left_out > 0 {
            out.push_str(&format!("({left_out} earlier commands left out)\n"));
        }
        list(&mut out, commands.cloned());
        out.push_str("\nNew turns (oldest first):\n");
        let room = max_chars.saturating_sub(out.len());
        let (left_out, lines) = self.range.turns.newest_within(room);
        if left_out > 0 {
            out.push_str(&format!("({left_out} earlier lines left out)\n"));
        }
        for line in lines {
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

impl RangeSoFar {
    /// Take `events` (folded, all in the range) into it.
    fn take(&mut self, session: &str, events: &[Stored], max_chars: usize) {
        if events.is_empty() {
            return;
        }
        let calls = calls_by_id(events);
        for stored in events {
            match &stored.event.body {
                EventBody::Request(_) => self.requests = true,
                EventBody::Reply(_) => {}
                _ => continue,
            }
            self.since_ms.get_or_insert(stored.event.at_ms);
            for line in turn_lines(stored, &calls) {
                self.turns.push(line, max_chars);
            }
        }
        // What the new turns did to files and which commands they ran: a replay of
        // them alone (a request carries the calls its results answer).
        let done = graph::fold(session, events);
        for file in &done.files {
            if file.changes.iter().any(|c| c.op != FileOp::Read) {
                self.edited.insert(file.path.clone());
            }
        }
        for command in &done.commands {
            let outcome = match (command.exit_code, command.failed) {
                (Some(code), _) => format!("exit {code}"),
                (None, true) => "failed".to_owned(),
                (None, false) => "ok".to_owned(),
            };
            let line = format!(
                "{} ({outcome})",
                one_line(&command.command, COMMAND_NAME_CHARS)
            );
            self.commands.push(line, commands_budget(max_chars));
        }
    }
}

/// The characters of an input of `max_chars` its commands may take: a quarter.
fn commands_budget(max_chars: usize) -> usize {
    max_chars / 4
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
        let files = self.files.iter().map(|(m, _)| m);
        coverage::missing(files.chain(self.errors.iter().map(|(m, _)| m)), narrative)
    }
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

/// What any summary of all of `graph` must name: every file it edited and every
/// error still open, as a range's narrative must ([`Carried::required`]).
pub fn must_cover(graph: &SessionGraph) -> Vec<MustName> {
    let files = graph.edited_files().into_iter().map(MustName::file);
    files.chain(graph.open_errors().map(error_name)).collect()
}

/// An open error is named by its subject (and a file tool's by its file too), a
/// command's by its first line.
fn error_name(error: &ErrorFact) -> MustName {
    let names = match &error.path {
        Some(path) => {
            let mut names = vec![error.subject.clone()];
            names.extend(MustName::file(path).names);
            names
        }
        None => vec![command_name(&error.subject)],
    };
    MustName {
        label: error.subject.clone(),
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

    /// The result of call `id`, failed or not.
    fn result(id: &str, failed: bool, text: &str) -> ToolResult {
        ToolResult::new(id.into(), None, failed, text)
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
            vec![result("e1", false, "updated")],
            vec![bash("b1", "cargo test")],
        );
        log.turn(
            "f1",
            None,
            vec![result("b1", true, "Exit code 101\ntest result: FAILED")],
            vec![],
        );
        log.turn("f2", Some("now the docs"), vec![], vec![]);
        log
    }

    /// A carrier that has read nothing of "s", then `events` for `trigger`.
    fn read(events: &[Stored], trigger: Trigger, max_chars: usize) -> (Carried, Option<Range>) {
        let mut carried = Carried::new("s", 1);
        let range = carried
            .advance(events, trigger, max_chars)
            .expect("not stale");
        (carried, range)
    }

    fn labels(required: &Required) -> (Vec<&str>, Vec<&str>) {
        (
            required
                .files
                .iter()
                .map(|(m, _)| m.label.as_str())
                .collect(),
            required
                .errors
                .iter()
                .map(|(m, _)| m.label.as_str())
                .collect(),
        )
    }

    #[test]
    fn an_episode_range_stops_before_the_new_root_turn() {
        let log = session();
        let (mut carried, range) = read(&log.0, Trigger::Episode, 100_000);
        let range = range.expect("a range");
        assert_eq!(
            (range.since_ms, range.until_event),
            (1000, 6),
            "the three rounds of f1"
        );
        assert_eq!(carried.through(), 6, "f2 is left for a later run");
        let required = carried.required();
        let (files, errors) = labels(&required);
        assert_eq!(files, ["/p/src/parse.rs"]);
        assert_eq!(errors, ["cargo test"]);
        let text = carried.render_input(&carried.required(), 100_000);
        assert!(!text.contains("now the docs"), "{text}");
        // The next (idle) run reads what the first left, and its range still starts
        // with f1: nothing was accepted.
        let idle = carried
            .advance(&log.0[6..], Trigger::Idle, 100_000)
            .expect("not stale")
            .expect("a range");
        assert_eq!((idle.since_ms, idle.until_event), (1000, 8));
        let text = carried.render_input(&carried.required(), 100_000);
        assert!(text.contains("[user] fix the parser"), "{text}");
        assert!(text.contains("[user] now the docs"), "{text}");
    }

    #[test]
    fn a_narrative_must_name_each_edited_file_and_open_error() {
        let log = session();
        let (carried, _) = read(&log.0, Trigger::Episode, 100_000);
        let required = carried.required();
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
    fn a_failed_file_tool_is_named_by_its_file() {
        let mut log = Log(Vec::new());
        log.turn(
            "f1",
            Some("fix it"),
            vec![],
            vec![edit("e1", "/p/src/a.rs")],
        );
        log.turn(
            "f1",
            None,
            vec![result("e1", true, "old_string not found")],
            vec![],
        );
        let (carried, _) = read(&log.0, Trigger::Idle, 100_000);
        let required = carried.required();
        assert_eq!(labels(&required).1, ["Edit /p/src/a.rs"]);
        assert!(required.missing("The edit of a.rs failed.").is_empty());
        assert_eq!(required.missing("It failed."), ["Edit /p/src/a.rs"]);
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
        let (carried, range) = read(&log.0, Trigger::Idle, 100_000);
        let range = range.expect("the new episode");
        assert_eq!((range.since_ms, range.until_event), (7000, 9));
        assert_eq!(
            carried.previous.as_ref().map(|p| p.narrative.as_str()),
            Some("Parser fixed in parse.rs; cargo test fails.")
        );
        let required = carried.required();
        assert!(required.files.is_empty(), "no edit in this range");
        assert_eq!(required.errors.len(), 1, "the error is still open");
        let text = carried.render_input(&required, 100_000);
        // The input is the rendered record (the live fold's, which is the replay's),
        // its summary the previous narrative.
        let record = ContinuityRecord {
            narrative: carried.previous.as_ref().map(Narrative::of),
            ..ContinuityRecord::of_graph(&graph::fold("s", &log.0))
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
        assert_eq!(
            read(&log.0, Trigger::Episode, 100_000).1,
            None,
            "f2 has not ended"
        );
    }

    #[test]
    fn runs_that_read_only_what_came_since_agree_with_one_read_of_the_whole() {
        let mut log = session();
        let mut carried = Carried::new("s", 1);
        // As the summarizer reads: the events after the carrier's newest.
        let run = |log: &Log, carried: &mut Carried, trigger| {
            let after = log.0.partition_point(|s| s.id <= carried.through());
            carried
                .advance(&log.0[after..], trigger, 100_000)
                .expect("not stale")
        };
        run(&log, &mut carried, Trigger::Idle).expect("a range");
        // Its summary is accepted, and logged after the range.
        let compaction = CompactionEvent {
            accepted: true,
            narrative: "Edited parse.rs; cargo test fails.".into(),
            until_event: carried.through(),
            ..CompactionEvent::default()
        };
        carried.accepted(&compaction);
        log.push("f2", EventBody::Compaction(compaction));
        log.turn(
            "f2",
            None,
            vec![],
            vec![edit("e2", "/p/docs/guide.md"), bash("b2", "cargo test")],
        );
        log.turn(
            "f2",
            None,
            vec![
                result("e2", false, "updated"),
                result("b2", false, "Exit code 0\ntest result: ok"),
            ],
            vec![],
        );
        log.turn("f3", Some("and the changelog"), vec![], vec![]);
        run(&log, &mut carried, Trigger::Episode).expect("f2's range");
        run(&log, &mut carried, Trigger::Idle).expect("f3's range");
        let (whole, range) = read(&log.0, Trigger::Idle, 100_000);
        assert_eq!(range.map(|r| r.until_event), Some(carried.through()));
        assert_eq!(carried.required(), whole.required());
        let required = carried.required();
        let (files, errors) = labels(&required);
        assert_eq!(files, ["/p/docs/guide.md"]);
        assert!(errors.is_empty(), "cargo test passed: {errors:?}");
        let text = carried.render_input(&carried.required(), 100_000);
        assert_eq!(text, whole.render_input(&whole.required(), 100_000));
        assert!(text.contains("- cargo test (exit 0)"), "{text}");
        assert!(text.contains("[user] and the changelog"), "{text}");
        assert!(!text.contains("[user] now the docs"), "{text}");
    }

    /// `events` folded as the summarizer reads a session: a look ahead over pages of
    /// `page` events, then the fold page by page.
    fn read_in_pages(
        carried: &mut Carried,
        events: &[Stored],
        page: usize,
        trigger: Trigger,
    ) -> Result<Option<Range>, Stale> {
        let mut ahead = Ahead::default();
        for chunk in events.chunks(page) {
            carried.look_ahead(&mut ahead, chunk);
        }
        carried.begin(&ahead)?;
        for chunk in events.chunks(page) {
            if carried
                .fold_page(chunk, trigger, &ahead, 100_000)
                .is_break()
            {
                break;
            }
        }
        Ok(carried.range(trigger))
    }

    #[test]
    fn a_session_read_in_pages_folds_as_one_read_of_the_whole() {
        let mut log = session();
        // An accepted compaction past the first pages, and a new episode after it.
        log.push(
            "f2",
            EventBody::Compaction(CompactionEvent {
                accepted: true,
                narrative: "Edited parse.rs.".into(),
                until_event: 6,
                ..CompactionEvent::default()
            }),
        );
        log.turn("f3", Some("and the changelog"), vec![], vec![]);
        for trigger in [Trigger::Idle, Trigger::Episode] {
            let (whole, range) = read(&log.0, trigger, 100_000);
            for page in 1..=log.0.len() {
                let mut paged = Carried::new("s", 1);
                let paged_range =
                    read_in_pages(&mut paged, &log.0, page, trigger).expect("not stale");
                assert_eq!(paged_range, range, "{trigger:?}, pages of {page}");
                assert_eq!(paged.through(), whole.through(), "{trigger:?}, {page}");
                assert_eq!(paged.required(), whole.required(), "{trigger:?}, {page}");
                assert_eq!(
                    paged.render_input(&paged.required(), 100_000),
                    whole.render_input(&whole.required(), 100_000),
                    "{trigger:?}, pages of {page}"
                );
            }
        }
        // The episode's range stops before the newest family, the idle one takes all.
        let (episode, _) = read(&log.0, Trigger::Episode, 100_000);
        assert!(episode.through() < log.0.len() as i64);
        let (idle, _) = read(&log.0, Trigger::Idle, 100_000);
        assert_eq!(idle.through(), log.0.len() as i64);
    }

    #[test]
    fn a_fold_stops_at_the_last_event_looked_ahead_at() {
        let log = session();
        let (whole, range) = read(&log.0, Trigger::Idle, 100_000);
        // The look ahead saw every event; one committed between the two passes waits.
        let mut carried = Carried::new("s", 1);
        let mut ahead = Ahead::default();
        carried.look_ahead(&mut ahead, &log.0);
        carried.begin(&ahead).expect("not stale");
        let mut longer = log.0.clone();
        let id = longer.len() as i64 + 1;
        longer.push(Stored {
            id,
            family: Some("late".into()),
            event: Event {
                at_ms: 1000 * id as u64,
                session: Some("s".into()),
                body: EventBody::Request(RequestEvent::default()),
            },
        });
        assert!(
            carried
                .fold_page(&longer, Trigger::Idle, &ahead, 100_000)
                .is_break()
        );
        assert_eq!(carried.range(Trigger::Idle), range);
        assert_eq!(carried.through(), whole.through());
    }

    #[test]
    fn a_compaction_that_cuts_what_was_folded_makes_the_carrier_stale() {
        let mut log = session();
        let (mut carried, _) = read(&log.0, Trigger::Idle, 100_000);
        log.push(
            "f2",
            EventBody::Compaction(CompactionEvent {
                accepted: true,
                until_event: 6,
                ..CompactionEvent::default()
            }),
        );
        assert_eq!(
            carried.advance(&log.0[8..], Trigger::Idle, 100_000),
            Err(Stale)
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
        let (carried, range) = read(&log.0, Trigger::Idle, 2000);
        assert!(range.is_some());
        let text = carried.render_input(&carried.required(), 2000);
        assert!(text.len() <= 2000 + 200, "{}", text.len());
        assert!(text.contains("/p/src/parse.rs (edited)"), "{text}");
        assert!(text.contains("earlier lines left out"), "{text}");
        assert!(text.contains("echo 49"), "the newest turn is kept: {text}");
        assert!(!text.contains("[user] fix the parser"), "{text}");
    }
}
