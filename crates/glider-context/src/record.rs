//! The continuity record of a session (spec: "the continuity record"): what a model
//! taking the session over must know, built deterministically from the graph — the
//! user's goals in their own words, the files touched and their latest known state,
//! the assistant's closing words of each episode, the errors still open and the last
//! few exchanges — plus a narrative slot that the newest accepted compaction fills.
//! [`ContinuityRecord::render`] writes it as compact text for a model, within a token
//! budget; its JSON is what the dashboard and `glider context show` present.

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

/// Counts of the record's work, per thread, for the tests that check it is bounded
/// by the record's lists rather than by the session's length.
#[cfg(test)]
pub(crate) mod work {
    use std::cell::Cell;

    thread_local! {
        static RENDERED: Cell<usize> = const { Cell::new(0) };
        static VISITED: Cell<usize> = const { Cell::new(0) };
    }

    pub(crate) fn rendered() {
        RENDERED.with(|c| c.set(c.get() + 1));
    }

    pub(crate) fn visited() {
        VISITED.with(|c| c.set(c.get() + 1));
    }

    /// (texts rendered, episodes visited) since the last call.
    pub(crate) fn take() -> (usize, usize) {
        (
            RENDERED.with(|c| c.replace(0)),
            VISITED.with(|c| c.replace(0)),
        )
    }
}

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
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::{
        CompactionEvent, Event, EventBody, ReplyEvent, RequestEvent, ToolCall, ToolResult,
    };
    use crate::graph::fold;
    use crate::store::Stored;

    /// Events of one session, each a second apart.
    #[derive(Default)]
    struct Log {
        events: Vec<Stored>,
        family: Option<String>,
    }

    impl Log {
        fn push(&mut self, body: EventBody) {
            let n = self.events.len() as u64 + 1;
            self.events.push(Stored {
                id: n as i64,
                family: self.family.clone(),
                event: Event {
                    at_ms: 1000 * n,
                    session: Some("s".into()),
                    body,
                },
            });
        }

        /// A request (a root with `user`, else carrying `results`) and its reply.
        fn turn(
            &mut self,
            user: Option<&str>,
            results: Vec<ToolResult>,
            reply: &str,
            calls: Vec<ToolCall>,
        ) {
            let request = format!("r{}", self.events.len());
            if user.is_some() {
                self.family = Some(request.clone());
            }
            self.push(EventBody::Request(RequestEvent {
                request: request.clone(),
                root: user.is_some(),
                user_text: user.map(str::to_owned),
                tool_results: results,
                ..RequestEvent::default()
            }));
            self.push(EventBody::Reply(ReplyEvent {
                request,
                status: Some(200),
                tool_calls: calls,
                text: (!reply.is_empty()).then(|| reply.to_owned()),
                ..ReplyEvent::default()
            }));
        }

        fn record(&self) -> ContinuityRecord {
            ContinuityRecord::of_graph(&fold("s", &self.events))
        }
    }

    fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
        ToolCall::new(id.into(), name.into(), args)
    }

    fn result(id: &str, text: &str, is_error: bool) -> ToolResult {
        ToolResult::new(id.into(), None, is_error, text)
    }

    /// Two episodes: read and edit a file, then a failing test run.
    fn session() -> Log {
        let mut log = Log::default();
        log.turn(
            Some("rename foo to bar in src/lib.rs"),
            vec![],
            "Reading it first.",
            vec![call("c1", "Read", json!({"file_path": "src/lib.rs"}))],
        );
        log.turn(
            None,
            vec![result("c1", "fn foo() {}", false)],
            "",
            vec![call(
                "c2",
                "Edit",
                json!({"file_path": "src/lib.rs", "old_string": "foo", "new_string": "bar"}),
            )],
        );
        log.turn(
            None,
            vec![result("c2", "updated", false)],
            "Renamed foo to bar because the API calls it bar.",
            vec![],
        );
        log.turn(
            Some("now run the tests"),
            vec![],
            "",
            vec![call("c3", "Bash", json!({"command": "cargo test"}))],
        );
        log.turn(
            None,
            vec![result(
                "c3",
                "test result: FAILED. 1 passed; 1 failed",
                false,
            )],
            "One test fails.",
            vec![],
        );
        log
    }

    #[test]
    fn a_heading_counts_what_was_left_out_in_decimal() {
        let written = |left_out| {
            let mut out = String::new();
            heading(&mut out, "Files (newest first", left_out, "more");
            out
        };
        assert_eq!(written(0), "Files (newest first):");
        assert_eq!(written(7), "Files (newest first; 7 more left out):");
        assert_eq!(written(1030), "Files (newest first; 1030 more left out):");
        let text = written(usize::MAX);
        assert!(text.contains(&format!("; {} more", usize::MAX)), "{text}");
        assert_eq!(
            measured(|out| heading(out, "Files (newest first", 1030, "more")),
            written(1030).len()
        );
    }

    #[test]
    fn the_record_holds_goals_file_states_closing_words_and_open_errors() {
        let record = session().record();
        let goals: Vec<_> = record.goals.iter().map(|g| g.text.as_str()).collect();
        assert_eq!(
            goals,
            ["rename foo to bar in src/lib.rs", "now run the tests"]
        );
        assert_eq!(record.files.len(), 1);
        assert_eq!(record.files[0].path, "src/lib.rs");
        assert_eq!(
            record.files[0].state,
            FileOp::Edited,
            "the edit supersedes the read"
        );
        let decisions: Vec<_> = record.decisions.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(
            decisions,
            [
                "Renamed foo to bar because the API calls it bar.",
                "One test fails."
            ]
        );
        assert_eq!(record.open_errors.len(), 1);
        assert_eq!(record.open_errors[0].subject, "cargo test");
        assert_eq!(record.recent.len(), RECENT_EXCHANGES);
        assert_eq!(
            record.recent[1].user.as_deref(),
            Some("now run the tests"),
            "the request that began an episode shows the user's words"
        );
        assert_eq!(record.recent[1].tools, ["Bash"]);

        let text = record.render(10_000);
        assert!(
            text.starts_with("<continuity-record session=\"s\">"),
            "{text}"
        );
        assert!(text.contains("- src/lib.rs: edited"), "{text}");
        assert!(text.contains("- rename foo to bar in src/lib.rs"), "{text}");
        assert!(text.contains("- cargo test: test result: FAILED"), "{text}");
        assert!(text.ends_with("</continuity-record>"));
    }

    #[test]
    fn a_reply_is_what_the_assistant_said_only_when_it_is_an_answer() {
        let goal = "explain what the parser in src/parse.rs does with empty input";
        let closing = |reply: &str, status: u16, stop: Option<&'static str>| {
            let mut log = Log::default();
            log.turn(Some(goal), vec![], reply, vec![]);
            if let Some(Stored {
                event:
                    Event {
                        body: EventBody::Reply(reply),
                        ..
                    },
                ..
            }) = log.events.last_mut()
            {
                reply.status = Some(status);
                reply.stop_reason = stop.map(Into::into);
            }
            log.record()
                .decisions
                .into_iter()
                .map(|d| d.text)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            closing("It returns an empty AST.", 200, Some("end_turn")),
            ["It returns an empty AST."]
        );
        // A small local model echoing its prompt, a reply cut at a limit, a failed
        // reply, and Glider's own note are not the assistant's account of the task.
        let echo = format!("User: {goal}\nAssistant: User: {goal}");
        for (reply, status, stop) in [
            (echo.as_str(), 200, Some("end_turn")),
            ("<system-reminder>skills</system-reminder> hi", 200, None),
            ("It returns an empty", 200, Some("max_tokens")),
            ("upstream error", 502, None),
            ("[glider] stopped after 3 tool turns", 200, Some("end_turn")),
        ] {
            assert!(closing(reply, status, stop).is_empty(), "{reply}");
        }
    }

    #[test]
    fn over_its_budget_the_record_leaves_out_exchanges_first_and_keeps_the_newest_goal() {
        let mut log = session();
        for i in 0..30 {
            log.turn(
                Some(&format!("goal {i}: {}", "words ".repeat(40))),
                vec![],
                &"a long closing reply ".repeat(30),
                vec![],
            );
        }
        let record = log.record();
        let full = record.render(100_000);
        let small = record.render(300);
        assert!(
            glider_vocab::estimate::estimate_text(&small) <= 300,
            "{small}"
        );
        assert!(small.len() < full.len());
        assert!(small.contains("goal 29:"), "the newest goal stays: {small}");
        assert!(!small.contains("Last exchanges:"), "{small}");
        assert!(
            small.contains("cargo test"),
            "the open error outlives the goals: {small}"
        );
        assert!(small.contains("earlier left out"), "{small}");
    }

    #[test]
    fn goals_are_kept_verbatim_newest_first_within_their_budget() {
        let mut log = Log::default();
        // Each goal is a third of the budget with its leading digit.
        let long = "g".repeat(GOALS_MAX_CHARS / 3 - 1);
        for i in 0..5 {
            log.turn(Some(&format!("{i}{long}")), vec![], "ok", vec![]);
        }
        let record = log.record();
        let firsts: Vec<char> = record
            .goals
            .iter()
            .filter_map(|g| g.text.chars().next())
            .collect();
        assert_eq!(firsts, ['2', '3', '4'], "the newest three fit");
        assert_eq!(record.goals_left_out, 2);
    }

    #[test]
    fn only_an_accepted_compaction_fills_the_narrative() {
        let mut log = session();
        let compaction = |accepted: bool, narrative: &str| {
            EventBody::Compaction(CompactionEvent {
                accepted,
                narrative: narrative.into(),
                until_ms: 5000,
                source: "summarizer".into(),
                reason: None,
                ..CompactionEvent::default()
            })
        };
        log.push(compaction(true, "Renamed foo; a test fails."));
        log.push(compaction(false, "a summary that left a file out"));
        let record = log.record();
        let narrative = record.narrative.as_ref().expect("accepted one");
        assert_eq!(narrative.text, "Renamed foo; a test fails.");
        assert!(
            record
                .render(10_000)
                .contains("Summary so far:\nRenamed foo; a test fails.")
        );
    }

    /// A live fold of `episodes` root turns, each a short goal and a text answer (the
    /// benchmark's shape: every request begins an episode of one session), with a file
    /// read and a failing command in the first so that every section is present.
    fn live_session(episodes: usize) -> crate::graph::Folder {
        let mut log = Log::default();
        log.turn(
            Some("look at lib.rs and run the tests"),
            vec![],
            "",
            vec![
                call("t1", "Read", json!({"file_path": "src/lib.rs"})),
                call("t2", "Bash", json!({"command": "cargo test"})),
            ],
        );
        log.turn(
            None,
            vec![
                result("t1", "fn add() {}", false),
                result("t2", "test result: FAILED. 0 passed; 1 failed", true),
            ],
            "The test fails.",
            vec![],
        );
        for n in 0..episodes {
            log.turn(
                Some(&format!("goal {n:05}")),
                vec![],
                &format!("done {n}"),
                vec![],
            );
        }
        let mut folder = crate::graph::Folder::new("s");
        for stored in &log.events {
            folder.feed(stored);
        }
        folder
    }

    /// What [`ContinuityRecord::render`] did before it shed items by their bytes:
    /// one item left out per rendering, until it fits.
    fn render_one_at_a_time(record: &ContinuityRecord, max_tokens: u64) -> Option<String> {
        let mut record = record.clone();
        loop {
            let text = record.render_all();
            if glider_vocab::estimate::estimate_text(&text) <= max_tokens {
                return Some(text);
            }
            record.leave_out_one()?;
        }
    }

    #[test]
    fn rendering_to_a_budget_leaves_out_what_one_at_a_time_would() {
        let record = ContinuityRecord::of_folder("s", &live_session(300));
        for max_tokens in [40, 60, 100, 150, 300, 700, 1500, 100_000] {
            let Some(expected) = render_one_at_a_time(&record, max_tokens) else {
                continue;
            };
            assert_eq!(record.render(max_tokens), expected, "budget {max_tokens}");
        }
    }

    #[test]
    fn the_measured_length_is_the_written_one() {
        let mut log = session();
        log.turn(
            Some("  a goal\non two lines\n\nand a gap  "),
            vec![],
            "  an answer\nthat wraps ",
            vec![call("c9", "Read", json!({"file_path": "b.rs"}))],
        );
        log.turn(None, vec![result("c9", "ok", false)], "", vec![]);
        let mut record = log.record();
        record.narrative = Some(crate::graph::Narrative {
            text: " the summary\n".into(),
            ..crate::graph::Narrative::default()
        });
        loop {
            assert_eq!(record.rendered_len(), record.render_all().len());
            if record.leave_out_one().is_none() {
                break;
            }
        }
        assert!(
            log.record()
                .render(10_000)
                .contains("- a goal\n  on two lines\n  \n  and a gap\n"),
            "a multi-line goal stays one indented item"
        );
    }

    #[test]
    fn a_records_work_does_not_grow_with_the_session() {
        let mut work_at = Vec::new();
        for episodes in [2000, 10_000] {
            let folder = live_session(episodes);
            work::take();
            let record = ContinuityRecord::of_folder("s", &folder);
            let text = record.render(1500);
            assert!(text.contains(&format!("- goal {:05}", episodes - 1)));
            assert!(text.contains("cargo test"), "the open error stays: {text}");
            assert_eq!(record.goals_left_out + record.goals.len(), episodes + 1);
            work_at.push(work::take());
        }
        let (rendered, visited) = work_at[1];
        assert_eq!(
            work_at[0], work_at[1],
            "texts rendered and episodes visited are the same at 2,000 and 10,000 episodes"
        );
        assert!(rendered <= 4, "{rendered} renderings for one record");
        assert!(visited < 2000, "{visited} episodes visited");
    }

    /// A long, mixed session (goals short, long and blank; tool loops reading,
    /// editing and running commands on a handful of files, with errors opened and
    /// closed; compactions; one agent loop of hundreds of steps, with a run of
    /// replies that say nothing; a stretch of episodes without closing words),
    /// `turns` turns long.
    fn mixed_session(turns: usize) -> Log {
        let mut log = Log::default();
        let mut seed: u64 = 7;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut pending: Vec<ToolCall> = Vec::new();
        for turn in 0..turns {
            let results: Vec<ToolResult> = pending
                .drain(..)
                .map(|c| {
                    let failed = next(5) == 0;
                    result(
                        &c.id,
                        if failed { "error: it failed" } else { "ok" },
                        failed,
                    )
                })
                .collect();
            let file = format!("src/f{}.rs", next(30));
            let id = format!("c{turn}");
            // Inside the agent loop, a run of requests whose replies say and call
            // nothing (failures): the last exchanges are older than the newest steps.
            let failing = (1200..1330).contains(&turn);
            let calls = match if failing { 3 } else { next(4) } {
                0 => vec![call(&id, "Read", json!({"file_path": file}))],
                1 => vec![call(
                    &id,
                    "Edit",
                    json!({"file_path": file, "old_string": "a", "new_string": "b"}),
                )],
                2 => vec![call(
                    &id,
                    "Bash",
                    json!({"command": format!("cargo test {}", next(6))}),
                )],
                _ => vec![],
            };
            let in_long_loop = (1000..1400).contains(&turn);
            // A stretch of episodes that end without closing words: the record's
            // decisions come from before it.
            let silent = (3000..4500).contains(&turn);
            let reply = if calls.is_empty() && !silent && !failing {
                format!("answer {turn}")
            } else {
                String::new()
            };
            if !in_long_loop && (results.is_empty() || next(6) == 0) {
                let goal = match next(5) {
                    0 => "   ".to_owned(),
                    1 => format!("a long goal {turn} ").repeat(120),
                    _ => format!("goal {turn}"),
                };
                log.turn(Some(&goal), vec![], &reply, calls.clone());
            } else {
                log.turn(None, results, &reply, calls.clone());
            }
            if next(40) == 0 {
                let request = format!("r{}", log.events.len());
                log.push(EventBody::Request(RequestEvent {
                    request: request.clone(),
                    compaction: true,
                    ..RequestEvent::default()
                }));
                log.push(EventBody::Reply(ReplyEvent {
                    request,
                    status: Some(200),
                    text: Some("a summary".into()),
                    ..ReplyEvent::default()
                }));
            }
            pending = calls;
        }
        log
    }

    #[test]
    fn a_live_fold_renders_the_replays_record_and_holds_what_the_record_reads() {
        let log = mixed_session(6000);
        // Fed as the writer feeds it: each event given up to the fold.
        let mut live = crate::graph::Folder::live("s");
        let mut replay = crate::graph::Folder::new("s");
        let mut given = crate::graph::Folder::new("s");
        let mut most_episodes = 0;
        let mut most_steps = 0;
        for (n, stored) in log.events.iter().enumerate() {
            live.feed_owned(stored.event.clone(), stored.family.clone());
            replay.feed(stored);
            given.feed_owned(stored.event.clone(), stored.family.clone());
            most_episodes = most_episodes.max(live.episodes().len());
            most_steps = most_steps.max(live.episodes().iter().map(|e| e.steps.len()).sum());
            if n % 53 == 0 || n == log.events.len() - 1 {
                let record = ContinuityRecord::of_folder("s", &live);
                assert_eq!(
                    record,
                    ContinuityRecord::of_folder("s", &replay),
                    "event {n}"
                );
                assert_eq!(
                    record.render(1500),
                    ContinuityRecord::of_folder("s", &replay).render(1500)
                );
            }
        }
        let replayed: usize = replay.episodes().iter().map(|e| e.steps.len()).sum();
        eprintln!(
            "live held at most {most_episodes} episodes, {most_steps} steps; the replay {} episodes, {replayed} steps",
            replay.episodes().len()
        );
        assert!(
            replay.episodes().len() > 2000,
            "{} episodes",
            replay.episodes().len()
        );
        assert!(
            most_episodes <= 200,
            "a live fold held {most_episodes} episodes"
        );
        assert!(
            most_steps <= 400,
            "a live fold held {most_steps} steps (the replay {replayed})"
        );
        assert!(
            live.errors().iter().all(|e| e.closed_ms.is_none()),
            "only open errors are held"
        );
        assert!(live.files().all(|f| f.changes.len() <= 2));
        assert!(
            given.into_graph() == replay.into_graph(),
            "a fold given the events builds the graph a fold that borrows them builds"
        );
    }

    #[test]
    fn a_record_built_for_a_budget_renders_what_the_whole_record_renders() {
        let mut padded = session();
        padded.turn(
            Some(&format!("pad{}", " ".repeat(3000))),
            vec![],
            "ok",
            vec![],
        );
        padded.turn(Some(&"x\n".repeat(500)), vec![], "ok", vec![]);
        let mut folders = vec![live_session(300), live_session(3)];
        for log in [mixed_session(1500), padded] {
            let mut folder = crate::graph::Folder::new("s");
            for stored in &log.events {
                folder.feed(stored);
            }
            folders.push(folder);
        }
        for folder in &folders {
            for max_tokens in [10, 40, 60, 100, 150, 300, 700, 1500, 3000, 5000, 100_000] {
                let whole = ContinuityRecord::of_folder("s", folder);
                let within = ContinuityRecord::of_folder_within("s", folder, max_tokens);
                assert!(within.goals.len() <= whole.goals.len());
                assert_eq!(
                    within.goals.len() + within.goals_left_out,
                    whole.goals.len() + whole.goals_left_out
                );
                assert_eq!(
                    within.into_text(max_tokens),
                    whole.into_text(max_tokens),
                    "budget {max_tokens}"
                );
            }
        }
        // 10-character goals: 8 KiB of them is about 800, a 1,500-token record
        // (5,250 bytes) shows about 400.
        let folder = live_session(2000);
        let within = ContinuityRecord::of_folder_within("s", &folder, 1500)
            .goals
            .len();
        let whole = ContinuityRecord::of_folder("s", &folder).goals.len();
        assert!(within * 3 < whole * 2, "{within} of {whole} goals copied");
        // Its goals fill the record: nothing the budget leaves out before them is built.
        let within = ContinuityRecord::of_folder_within("s", &folder, 1500);
        let whole = ContinuityRecord::of_folder("s", &folder);
        assert!(!whole.recent.is_empty() && !whole.decisions.is_empty() && !whole.files.is_empty());
        assert!(
            within.recent.is_empty() && within.decisions.is_empty() && within.files.is_empty(),
            "{within:?}"
        );
    }
}
