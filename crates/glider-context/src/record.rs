//! The continuity record of a session (spec: "the continuity record"): what a model
//! taking the session over must know, built deterministically from the graph — the
//! user's goals in their own words, the files touched and their latest known state,
//! the assistant's closing words of each episode, the errors still open and the last
//! few exchanges — plus a narrative slot that the newest accepted compaction fills.
//! [`ContinuityRecord::render`] writes it as compact text for a model, within a token
//! budget; its JSON is what the dashboard and `glider context show` present.
//!
//! One file past 600 lines on purpose: the record's shape, how it is built from the
//! graph and how it is rendered are one contract — the budget's loop measures each
//! section with the very line writers the render uses, and the builders cut each list
//! to what the render can hold. Its tests are in `record/tests.rs`.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::Serialize;

use crate::event::{edges, prefix};
use crate::graph::{Episode, ErrorFact, FileFact, Folder, Narrative, SessionGraph, Step};
use crate::tools::FileOp;

/// Characters of the user's goals kept verbatim, all episodes together; over it the
/// oldest goals are left out (the newest say what the user wants now).
pub const GOALS_MAX_CHARS: usize = 8 * 1024;
/// Files listed, most recently touched first.
pub const MAX_FILES: usize = 40;
/// Episodes whose closing words are kept, newest first.
pub const MAX_DECISIONS: usize = 8;
/// Characters kept of each closing reply (its start and end).
pub const DECISION_MAX_CHARS: usize = 600;
/// Open errors listed (the newest ones).
pub const MAX_OPEN_ERRORS: usize = 12;
/// Requests shown as the last exchanges.
pub const RECENT_EXCHANGES: usize = 3;
/// Characters kept of each side of an exchange.
pub const EXCHANGE_MAX_CHARS: usize = 400;

/// A session's continuity record. Lists are bounded by the constants above; the
/// `*_left_out` counts say how many items did not fit.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ContinuityRecord {
    pub session: String,
    /// The newest accepted compaction's summary (`None` until one is accepted).
    pub narrative: Option<Narrative>,
    /// The root turns' text, oldest first, verbatim (a deque: the budget leaves the
    /// oldest out first).
    pub goals: VecDeque<Goal>,
    pub goals_left_out: usize,
    /// Most recently touched first.
    pub files: Vec<FileState>,
    pub files_left_out: usize,
    /// The assistant's last text reply of each finished episode, oldest first.
    pub decisions: Vec<Decision>,
    /// Newest last.
    pub open_errors: Vec<OpenError>,
    pub open_errors_left_out: usize,
    /// The last requests of the session, oldest first.
    pub recent: Vec<Exchange>,
}

/// One episode's goal, in the user's words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Goal {
    pub family: String,
    pub at_ms: u64,
    pub text: String,
    /// Its line in the rendered record (the episode's [`GoalLine`]).
    #[serde(skip)]
    line: Arc<str>,
}

/// A goal as the record writes it: made once, when a record first renders an
/// episode's goal, so that later renders copy and measure it without walking its text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GoalLine {
    line: Arc<str>,
}

impl GoalLine {
    pub(crate) fn of(goal: &str) -> GoalLine {
        let mut line = String::with_capacity(goal.len().min(4 * GOALS_MAX_CHARS) + 8);
        block_item(&mut line, prefix(goal, GOALS_MAX_CHARS));
        GoalLine { line: line.into() }
    }
}

/// A file's latest known state: the newest change still valid (an edit, creation or
/// deletion; a read when nothing changed it), and whether it was read since.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileState {
    pub path: String,
    pub state: FileOp,
    /// When that state began.
    pub since_ms: u64,
    /// The newest touch of the file (a read after the change counts).
    pub last_ms: u64,
    /// Read again after its latest change.
    pub read_since: bool,
}

/// What the assistant said when it finished an episode: the model's own account of
/// what it did and why (not a decision extracted by parsing).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub family: String,
    pub at_ms: u64,
    pub text: String,
}

/// A failing tool result no later success closed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenError {
    pub subject: String,
    pub reason: String,
    pub opened_ms: u64,
}

/// One request and its reply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exchange {
    pub at_ms: u64,
    /// The user's words when the request began an episode (else it carried tool
    /// results back).
    pub user: Option<String>,
    pub reply: Option<String>,
    /// The tools the reply called.
    pub tools: Vec<String>,
}

impl ContinuityRecord {
    /// The record of a whole folded graph.
    pub fn of_graph(graph: &SessionGraph) -> ContinuityRecord {
        let goals_total = graph.episodes.iter().filter_map(Episode::goal_text).count();
        build(
            &graph.session,
            &graph.episodes,
            goals_total,
            graph.files.iter(),
            &graph.errors,
            graph.narrative.as_ref(),
            usize::MAX,
        )
    }

    /// The record of a fold in progress (the writer's live sessions).
    pub fn of_folder(session: &str, folder: &Folder) -> ContinuityRecord {
        Self::of_folder_for(session, folder, usize::MAX)
    }

    /// [`ContinuityRecord::of_folder`] for rendering within `max_tokens`
    /// ([`ContinuityRecord::into_text`]): the same text, from fewer goals. Goals are
    /// left out oldest first, and only once nothing else is left to leave out, so a
    /// goal older than those whose lines alone overflow the budget (and the first that
    /// overflows it, which makes the budget leave out everything else first, as the
    /// whole list would) never reaches the text: it is counted as left out without
    /// being copied, measured and dropped again on every render; so are the
    /// sections the budget leaves out first when what it keeps longer fills it
    /// ([`build`]).
    pub fn of_folder_within(session: &str, folder: &Folder, max_tokens: u64) -> ContinuityRecord {
        Self::of_folder_for(session, folder, budget_bytes(max_tokens))
    }

    /// A fold's record built for a text of at most `budget_bytes` ([`build`]).
    fn of_folder_for(session: &str, folder: &Folder, budget_bytes: usize) -> Self {
        build(
            session,
            folder.episodes(),
            folder.goal_count(),
            folder.files(),
            folder.errors(),
            folder.narrative(),
            budget_bytes,
        )
    }

    /// Nothing worth telling a model yet.
    pub fn is_empty(&self) -> bool {
        self.narrative.is_none()
            && self.goals.is_empty()
            && self.files.is_empty()
            && self.open_errors.is_empty()
    }

    /// The record as text for a model, at most `max_tokens` (estimated): when over,
    /// items are left out oldest first in this order — recent exchanges, closing
    /// words, files, goals (the newest stays), open errors (the newest stays) — and
    /// what still does not fit is cut with a note.
    pub fn render(&self, max_tokens: u64) -> String {
        self.clone().into_text(max_tokens)
    }

    /// [`ContinuityRecord::render`], consuming the record (the writer's rebuild has no
    /// other use for it). The text is measured, not written, while items are left out
    /// one at a time — each by the bytes its lines take, since the estimate is linear
    /// in bytes — and written once, when it fits: the cost is one pass over the
    /// record's lists, never one per item left out, and never grows with the session.
    pub fn into_text(mut self, max_tokens: u64) -> String {
        let budget_bytes = budget_bytes(max_tokens);
        let mut len = self.rendered_len();
        loop {
            // `estimate_text(text) <= max_tokens` exactly when `text.len() <= budget_bytes`.
            if len <= budget_bytes {
                let text = self.render_all();
                debug_assert_eq!(text.len(), len, "the measured length is the written one");
                if glider_vocab::estimate::estimate_text(&text) <= max_tokens {
                    return text;
                }
                len = text.len();
            }
            match self.leave_out_one() {
                Some(shorter) => len = len.saturating_add_signed(-shorter),
                None => {
                    let text = self.render_all();
                    let head = prefix(&text, (budget_bytes / 2).saturating_sub(40));
                    return format!(
                        "{head}\n… (record cut to its token budget)\n</continuity-record>"
                    );
                }
            }
        }
    }

    /// Drop the least needed item; `None` when only what is always kept is left,
    /// else by how many bytes the rendered text got shorter (a section's heading
    /// goes with its last item; a heading that starts counting what was left out
    /// grows).
    fn leave_out_one(&mut self) -> Option<isize> {
        let section = |heading: usize, left: bool| if left { 0 } else { heading + 1 };
        let shorter = if !self.recent.is_empty() {
            let exchange = self.recent.remove(0);
            measured(|out| exchange_lines(out, &exchange))
                + section(RECENT_HEADING.len(), !self.recent.is_empty())
        } else if !self.decisions.is_empty() {
            let decision = self.decisions.remove(0);
            measured(|out| decision_line(out, &decision))
                + section(DECISIONS_HEADING.len(), !self.decisions.is_empty())
        } else if let Some(file) = self.files.pop() {
            let before = measured(|out| self.files_heading(out)) as isize;
            self.files_left_out += 1;
            let heading = if self.files.is_empty() {
                before + 1
            } else {
                before - measured(|out| self.files_heading(out)) as isize
            };
            return Some(measured(|out| file_line(out, &file)) as isize + heading);
        } else if self.goals.len() > 1 {
            let before = measured(|out| self.goals_heading(out)) as isize;
            let goal = self.goals.pop_front()?;
            self.goals_left_out += 1;
            let grown = measured(|out| self.goals_heading(out)) as isize - before;
            return Some(measured(|out| goal_line(out, &goal)) as isize - grown);
        } else if self.open_errors.len() > 1 {
            let before = measured(|out| self.errors_heading(out)) as isize;
            let error = self.open_errors.remove(0);
            self.open_errors_left_out += 1;
            let grown = measured(|out| self.errors_heading(out)) as isize - before;
            return Some(measured(|out| error_line(out, &error)) as isize - grown);
        } else {
            return None;
        };
        Some(shorter as isize)
    }

    fn goals_heading(&self, out: &mut impl Out) {
        heading(
            out,
            "Goals, in the user's words (oldest first",
            self.goals_left_out,
            "earlier",
        )
    }

    fn files_heading(&self, out: &mut impl Out) {
        heading(
            out,
            "Files (latest known state, newest first",
            self.files_left_out,
            "more",
        )
    }

    fn errors_heading(&self, out: &mut impl Out) {
        heading(
            out,
            "Open errors (newest last",
            self.open_errors_left_out,
            "older",
        )
    }

    fn render_all(&self) -> String {
        #[cfg(test)]
        work::rendered();
        let mut out = String::new();
        self.write_all(&mut out);
        out
    }

    /// The length of [`ContinuityRecord::render_all`]'s text, nothing written.
    fn rendered_len(&self) -> usize {
        let mut measure = Measure(0);
        self.write_all(&mut measure);
        measure.0
    }

    fn write_all(&self, out: &mut impl Out) {
        out.put("<continuity-record session=\"");
        out.put(&self.session);
        out.put("\">\n");
        if let Some(narrative) = &self.narrative {
            out.put("Summary so far:\n");
            out.put(narrative.text.trim());
            out.put("\n");
        }
        if !self.goals.is_empty() {
            self.goals_heading(out);
            out.put("\n");
            for goal in &self.goals {
                goal_line(out, goal);
            }
        }
        if !self.files.is_empty() {
            self.files_heading(out);
            out.put("\n");
            for file in &self.files {
                file_line(out, file);
            }
        }
        if !self.decisions.is_empty() {
            heading_line(out, DECISIONS_HEADING);
            for decision in &self.decisions {
                decision_line(out, decision);
            }
        }
        if !self.open_errors.is_empty() {
            self.errors_heading(out);
            out.put("\n");
            for error in &self.open_errors {
                error_line(out, error);
            }
        }
        if !self.recent.is_empty() {
            heading_line(out, RECENT_HEADING);
            for exchange in &self.recent {
                exchange_lines(out, exchange);
            }
        }
        out.put("</continuity-record>");
    }
}

const DECISIONS_HEADING: &str = "What the assistant said when each task ended (oldest first):";
const RECENT_HEADING: &str = "Last exchanges:";

/// Where the record's text goes: written ([`String`]) or only counted ([`Measure`]),
/// by the same code, so the length that decides what is left out is the written one.
trait Out {
    fn put(&mut self, text: &str);
}

impl Out for String {
    fn put(&mut self, text: &str) {
        self.push_str(text);
    }
}

/// Bytes that would have been written.
struct Measure(usize);

impl Out for Measure {
    fn put(&mut self, text: &str) {
        self.0 += text.len();
    }
}

/// Bytes `write` puts, each line with its newline.
fn measured(write: impl FnOnce(&mut Measure)) -> usize {
    let mut measure = Measure(0);
    write(&mut measure);
    measure.0
}

fn heading_line(out: &mut impl Out, heading: &str) {
    out.put(heading);
    out.put("\n");
}

fn goal_line(out: &mut impl Out, goal: &Goal) {
    out.put(&goal.line);
}

/// A list item that is one block of text (a goal, closing words).
fn block_item(out: &mut impl Out, text: &str) {
    out.put("- ");
    one_block(out, text);
    out.put("\n");
}

fn file_line(out: &mut impl Out, file: &FileState) {
    out.put("- ");
    out.put(&file.path);
    out.put(": ");
    out.put(op_word(file.state));
    if file.read_since {
        out.put(", read since");
    }
    out.put("\n");
}

fn decision_line(out: &mut impl Out, decision: &Decision) {
    block_item(out, &decision.text);
}

fn error_line(out: &mut impl Out, error: &OpenError) {
    out.put("- ");
    out.put(&error.subject);
    out.put(": ");
    one_block(out, &error.reason);
    out.put("\n");
}

/// An exchange's lines: the user's words (when it began an episode), then the reply
/// and the tools it called.
fn exchange_lines(out: &mut impl Out, exchange: &Exchange) {
    if let Some(user) = &exchange.user {
        out.put("- user: ");
        one_block(out, user);
        out.put("\n");
    }
    out.put("- assistant: ");
    if let Some(reply) = &exchange.reply {
        one_block(out, reply);
    }
    for (index, tool) in exchange.tools.iter().enumerate() {
        out.put(if index == 0 { " [called " } else { ", " });
        out.put(tool);
    }
    if !exchange.tools.is_empty() {
        out.put("]");
    }
    out.put("\n");
}

#[cfg(test)]
pub(crate) mod work;

/// A section's heading: `title` (an open parenthesis) closed with how many `what`
/// items were left out, if any: `Files (newest first; 3 more left out):`. Put piece
/// by piece, never formatted into a string of its own: the budget's loop measures it
/// after each item it leaves out.
fn heading(out: &mut impl Out, title: &str, left_out: usize, what: &str) {
    out.put(title);
    if left_out > 0 {
        out.put("; ");
        out.put(itoa::Buffer::new().format(left_out));
        out.put(" ");
        out.put(what);
        out.put(" left out");
    }
    out.put("):");
}

/// The most bytes of text within `max_tokens`: `estimate_text(text) <= max_tokens`
/// exactly when `text.len() <= budget_bytes(max_tokens)`.
fn budget_bytes(max_tokens: u64) -> usize {
    (max_tokens as f64 * glider_vocab::estimate::BYTES_PER_TOKEN) as usize
}

/// Build the record from the graph's parts, its goals' lines up to the first that
/// takes them past `budget_bytes` ([`ContinuityRecord::of_folder_within`]). The
/// sections a budget leaves out first (recent exchanges, then closing words, then
/// files: [`ContinuityRecord::into_text`]) are built in the reverse order, each only
/// while what is built so far fits `budget_bytes`: once it does not, the budget would
/// leave every item of the later sections out, so they are never copied, measured and
/// dropped. A long session's goals alone usually fill a record, and then only they
/// and the open errors are built.
fn build<'a>(
    session: &str,
    episodes: &[Episode],
    goals_total: usize,
    files: impl Iterator<Item = &'a FileFact>,
    errors: &[ErrorFact],
    narrative: Option<&Narrative>,
    budget_bytes: usize,
) -> ContinuityRecord {
    let (goals, goals_left_out) = goals(episodes, goals_total, budget_bytes);
    let open: Vec<&ErrorFact> = errors.iter().filter(|e| e.closed_ms.is_none()).collect();
    let open_errors_left_out = open.len().saturating_sub(MAX_OPEN_ERRORS);
    let open_errors = open[open_errors_left_out..]
        .iter()
        .map(|e| OpenError {
            subject: e.subject.clone(),
            reason: e.reason.clone(),
            opened_ms: e.opened_ms,
        })
        .collect();
    let mut record = ContinuityRecord {
        session: session.to_owned(),
        narrative: narrative.cloned(),
        goals,
        goals_left_out,
        open_errors,
        open_errors_left_out,
        ..ContinuityRecord::default()
    };
    let fits = |record: &ContinuityRecord| {
        budget_bytes == usize::MAX || record.rendered_len() <= budget_bytes
    };
    if !fits(&record) {
        return record;
    }
    let mut files: Vec<FileState> = files.filter_map(file_state).collect();
    files.sort_by(|a, b| b.last_ms.cmp(&a.last_ms).then(a.path.cmp(&b.path)));
    record.files_left_out = files.len().saturating_sub(MAX_FILES);
    files.truncate(MAX_FILES);
    record.files = files;
    if !fits(&record) {
        return record;
    }
    record.decisions = decisions(episodes);
    if !fits(&record) {
        return record;
    }
    record.recent = recent(episodes);
    record
}

/// The goals, newest kept first until [`GOALS_MAX_CHARS`] and until their lines
/// first take more than `line_bytes`, returned oldest first; `total` is how many
/// episodes have one.
fn goals(episodes: &[Episode], total: usize, line_bytes: usize) -> (VecDeque<Goal>, usize) {
    let mut kept = VecDeque::new();
    let mut bytes = 0usize;
    for index in goals_within_budget(episodes) {
        if bytes > line_bytes {
            break;
        }
        let episode = &episodes[index];
        let Some(goal) = episode.goal_line() else {
            continue;
        };
        bytes = bytes.saturating_add(goal.line.len());
        kept.push_front(Goal {
            family: episode.family.clone(),
            at_ms: episode.started_ms,
            text: prefix(episode.goal.as_deref().unwrap_or_default(), GOALS_MAX_CHARS).to_owned(),
            line: goal.line.clone(),
        });
    }
    let left_out = total.saturating_sub(kept.len());
    (kept, left_out)
}

/// The episodes (by index) whose goals fit [`GOALS_MAX_CHARS`], newest first. Only
/// the kept goals' episodes (and the goal-less ones among them, and the first goal
/// that did not fit) are visited, and none past where its reader stops: a long session
/// costs no more. Counting a goal's characters is all it does to one (its line is made
/// only for a render).
fn goals_within_budget(episodes: &[Episode]) -> impl Iterator<Item = usize> {
    let mut chars = 0;
    episodes
        .iter()
        .enumerate()
        .rev()
        .filter_map(|(index, e)| e.goal_chars().map(|goal_chars| (index, goal_chars)))
        .take_while(move |&(_, goal_chars)| {
            #[cfg(test)]
            work::visited();
            // The newest goal is always kept, cut to the budget if it alone is over.
            let fits = chars == 0 || chars + goal_chars <= GOALS_MAX_CHARS;
            chars += goal_chars;
            fits
        })
        .map(|(index, _)| index)
}

fn file_state(fact: &FileFact) -> Option<FileState> {
    let valid = || fact.changes.iter().filter(|c| c.superseded_ms.is_none());
    let last_ms = fact.changes.iter().map(|c| c.at_ms).max()?;
    let change = valid()
        .rfind(|c| c.op != FileOp::Read)
        .or_else(|| valid().next_back())?;
    Some(FileState {
        path: fact.path.clone(),
        state: change.op,
        since_ms: change.at_ms,
        last_ms,
        read_since: change.op != FileOp::Read
            && valid().any(|c| c.op == FileOp::Read && c.at_ms >= change.at_ms),
    })
}

/// Each finished episode's closing words ([`closing_words`]), the newest
/// [`MAX_DECISIONS`] of them, oldest first.
fn decisions(episodes: &[Episode]) -> Vec<Decision> {
    let mut decisions: Vec<Decision> = episodes
        .iter()
        .rev()
        .filter_map(|episode| {
            #[cfg(test)]
            work::visited();
            let (last, text) = closing_words(episode)?;
            Some(Decision {
                family: episode.family.clone(),
                at_ms: last.at_ms,
                text: edges(text, DECISION_MAX_CHARS / 2),
            })
        })
        .take(MAX_DECISIONS)
        .collect();
    decisions.reverse();
    decisions
}

/// An episode's closing words: its last request's reply (a compaction's summary
/// aside), when that reply called no tool (the episode's answer), said something, and
/// is an answer at all ([`an_answer`]).
fn closing_words(episode: &Episode) -> Option<(&Step, &str)> {
    let last = episode.steps.iter().rev().find(|s| !s.compaction)?;
    let text = last.reply_text.as_deref()?.trim();
    (last.tool_calls.is_empty() && !text.is_empty() && an_answer(last, episode, text))
        .then_some((last, text))
}

/// Whether a reply's `text` is the model's account of the task, worth keeping as
/// what the assistant said: a reply that succeeded and ended by itself (not cut at a
/// limit), that is not Glider's own note, and — a small or base local model echoes its
/// prompt — that repeats neither the CLI's injected blocks nor the user's goal.
fn an_answer(step: &Step, episode: &Episode, text: &str) -> bool {
    let succeeded = step.status.is_none_or(|status| status == 200);
    let ended = step.stop_reason.as_deref() != Some("max_tokens");
    let glider_note = text.starts_with("[glider");
    let echoes = text.contains("<system-reminder>")
        || episode
            .goal_text()
            .map(str::trim)
            .is_some_and(|goal| goal.len() >= ECHO_MIN_CHARS && text.contains(goal));
    succeeded && ended && !glider_note && !echoes
}

/// A goal this long found whole inside a reply is the prompt echoed, not an answer.
const ECHO_MIN_CHARS: usize = 40;

/// A request the last exchanges may show: not a compaction, and its reply said or
/// called something.
pub(crate) fn is_exchange(step: &Step) -> bool {
    !step.compaction && (step.reply_text.is_some() || !step.tool_calls.is_empty())
}

/// The last [`RECENT_EXCHANGES`] requests that got a reply.
fn recent(episodes: &[Episode]) -> Vec<Exchange> {
    let mut out = Vec::new();
    'episodes: for episode in episodes.iter().rev() {
        for (index, step) in episode.steps.iter().enumerate().rev() {
            if out.len() == RECENT_EXCHANGES {
                break 'episodes;
            }
            if !is_exchange(step) {
                continue;
            }
            out.push(Exchange {
                at_ms: step.at_ms,
                user: (index == 0 && episode.steps_left_out == 0)
                    .then(|| {
                        episode
                            .goal
                            .as_deref()
                            .map(|g| edges(g, EXCHANGE_MAX_CHARS / 2))
                    })
                    .flatten(),
                reply: step
                    .reply_text
                    .as_deref()
                    .map(|t| edges(t.trim(), EXCHANGE_MAX_CHARS / 2))
                    .filter(|t| !t.is_empty()),
                tools: step.tool_calls.clone(),
            });
        }
    }
    out.reverse();
    out
}

/// What the record of a session reads of its episodes, by index, with room to spare
/// so that the newest episodes changing (an answer becoming a tool call) still finds
/// what it needs: a live fold lets the rest go ([`crate::graph::Folder::live`]).
pub(crate) struct Reads {
    /// The kept goals' episodes and the first one left out (the budget stops there).
    pub goals: Vec<usize>,
    /// Twice [`MAX_DECISIONS`] episodes with closing words.
    pub decisions: Vec<usize>,
    /// Every step from this episode on: twice [`RECENT_EXCHANGES`] exchanges.
    pub exchanges_from: usize,
}

pub(crate) fn reads(episodes: &[Episode]) -> Reads {
    let newest_first = || episodes.iter().enumerate().rev();
    let mut goals: Vec<usize> = goals_within_budget(episodes).collect();
    // The first goal the budget left out: the next older episode with one.
    let oldest_kept = goals.last().copied().unwrap_or(0);
    goals.extend(
        episodes[..oldest_kept]
            .iter()
            .rposition(|e| e.goal_text().is_some()),
    );
    Reads {
        goals,
        decisions: newest_first()
            .filter(|(_, e)| closing_words(e).is_some())
            .take(2 * MAX_DECISIONS)
            .map(|(index, _)| index)
            .collect(),
        exchanges_from: newest_first()
            .flat_map(|(index, e)| {
                e.steps
                    .iter()
                    .filter(|s| is_exchange(s))
                    .map(move |_| index)
            })
            .take(2 * RECENT_EXCHANGES)
            .last()
            .unwrap_or(episodes.len()),
    }
}

/// How a file's state is written for a model.
pub(crate) fn op_word(op: FileOp) -> &'static str {
    match op {
        FileOp::Read => "read",
        FileOp::Edited => "edited",
        FileOp::Written => "written",
        FileOp::Created => "created",
        FileOp::Deleted => "deleted",
    }
}

/// `text` on indented continuation lines, so a multi-line goal stays one list item.
fn one_block(out: &mut impl Out, text: &str) {
    for (index, line) in text.trim().split('\n').enumerate() {
        if index > 0 {
            out.put("\n  ");
        }
        out.put(line);
    }
}

#[cfg(test)]
mod tests;
