//! The entity graph of a session: a fold over its events, so replaying the log rebuilds
//! it exactly. Episodes (a root user turn and its follow-ons) with their requests;
//! files read, edited, created or deleted; commands with their exit status; errors,
//! closed by a later success of the same command or on the same file; and the models
//! and backends that answered; the newest accepted compaction's narrative; the agent
//! loops Glider stopped (on their request's step) and the delegate runs (in the episode
//! they came during). Facts carry
//! validity: each file change records when a later one superseded it. The fold is
//! incremental ([`Folder`]): the log's writer keeps one per live session and feeds it
//! each committed event, so the continuity record is rebuilt without a query.
//!
//! One file past 600 lines on purpose: the graph's types and the fold ([`Folder`]) that
//! builds them change together — each event kind sets fields of several types, and a
//! live fold's trimming must keep exactly what the record reads of them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use foldhash::HashMap;

use serde::Serialize;

use crate::event::{
    BudgetStopEvent, CompactionEvent, DelegateEvent, EventBody, ReplyEvent, RequestEvent, ToolCall,
    ToolResult,
};
use crate::keyed::Positions;
use crate::store::Stored;
use crate::tools::{self, Action, FileOp};

/// One session, folded.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionGraph {
    pub session: String,
    pub episodes: Vec<Episode>,
    pub files: Vec<FileFact>,
    pub commands: Vec<CommandFact>,
    pub errors: Vec<ErrorFact>,
    pub models: Vec<ModelUse>,
    /// The newest accepted compaction's narrative.
    pub narrative: Option<Narrative>,
}

/// A summary of the session written by a compaction, covering it up to `until_ms`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Narrative {
    pub text: String,
    pub until_ms: u64,
    pub source: String,
}

impl Narrative {
    /// The narrative a compaction wrote.
    pub fn of(compaction: &CompactionEvent) -> Narrative {
        Narrative {
            text: compaction.narrative.clone(),
            until_ms: compaction.until_ms,
            source: compaction.source.clone(),
        }
    }
}

/// One root user turn and everything that followed it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Episode {
    /// The root request's key.
    pub family: String,
    pub started_ms: u64,
    /// The user's words that began it (up to 4 KiB).
    pub goal: Option<String>,
    /// Its goal as the continuity record writes it, made the first time a record
    /// reads it ([`Episode::goal_line`]): a live fold lets most episodes go before any
    /// record is rendered, and making it cost more than the rest of a request's fold.
    #[serde(skip)]
    goal_line: Lazy<crate::record::GoalLine>,
    /// Its goal's characters, counted the first time a record's budget counts them
    /// ([`Episode::goal_chars`]): a live fold counts its newest goals at each trim.
    #[serde(skip)]
    goal_chars: Lazy<usize>,
    pub steps: Vec<Step>,
    /// Its oldest steps a live fold let go ([`Folder::live`]); 0 in a replay.
    #[serde(skip_serializing_if = "is_zero")]
    pub steps_left_out: usize,
    /// Headless delegate runs (`/claude …`) that ended while this episode was current.
    pub delegate_runs: Vec<DelegateRun>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Episode {
    /// Its goal, when the user's words say something (not only blanks).
    pub fn goal_text(&self) -> Option<&str> {
        self.goal.as_deref().filter(|g| !g.trim().is_empty())
    }

    /// The characters of its goal ([`Episode::goal_text`]), counted once.
    pub(crate) fn goal_chars(&self) -> Option<usize> {
        let goal = self.goal_text()?;
        Some(*self.goal_chars.0.get_or_init(|| goal.chars().count()))
    }

    /// Its goal as the record writes it (`None` while it has none worth telling).
    pub(crate) fn goal_line(&self) -> Option<&crate::record::GoalLine> {
        let goal = self.goal_text()?;
        Some(
            self.goal_line
                .0
                .get_or_init(|| crate::record::GoalLine::of(goal)),
        )
    }
}

/// Something derived from an episode's goal alone (its line in the record, its
/// characters), made once, when first read; two episodes with the same goal are equal
/// whether or not it was made yet.
#[derive(Debug, Clone)]
struct Lazy<T>(std::sync::OnceLock<T>);

impl<T> Default for Lazy<T> {
    fn default() -> Self {
        Lazy(std::sync::OnceLock::new())
    }
}

impl<T> PartialEq for Lazy<T> {
    fn eq(&self, _: &Lazy<T>) -> bool {
        true
    }
}

/// A delegate run, as its `delegate` event told it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DelegateRun {
    pub vendor: String,
    pub at_ms: u64,
    /// `None`: killed at the timeout or the output limit, or its client went away.
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// The limit that ended an agent loop at this step ([`crate::event::BudgetStopEvent`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoopStop {
    /// `turn_budget` or `loop_guard`.
    pub limit: String,
    /// The episode's turns, the stopped one included.
    pub turns: u32,
    pub tool: Option<String>,
    pub repeats: Option<u32>,
}

/// One request of an episode.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Step {
    pub request: String,
    pub at_ms: u64,
    pub door: Cow<'static, str>,
    pub model: String,
    pub rule: Cow<'static, str>,
    pub reason: String,
    /// Who answered (`origin` for the CLI's own cloud), once the reply ended.
    pub backend: Option<String>,
    pub local: Option<bool>,
    pub status: Option<u16>,
    pub estimated_tokens: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub stop_reason: Option<Cow<'static, str>>,
    /// The tools the reply called.
    pub tool_calls: Vec<String>,
    /// The reply's text as the log kept it.
    pub reply_text: Option<String>,
    /// A CLI's compaction request (its reply is a summary, not the episode's answer).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compaction: bool,
    /// Glider answered it itself, ending the agent loop (its reply's backend is
    /// `glider-budget`).
    pub budget_stop: Option<LoopStop>,
}

/// What is known of one file; `changes` oldest first, the last one current.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FileFact {
    pub path: String,
    pub changes: Vec<FileChange>,
}

/// One thing done to a file, valid until `superseded_ms` when a later change came.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileChange {
    pub op: FileOp,
    pub at_ms: u64,
    pub call_id: String,
    pub family: Option<String>,
    pub superseded_ms: Option<u64>,
}

/// A shell command the CLI ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandFact {
    pub command: String,
    pub call_id: String,
    pub at_ms: u64,
    pub family: Option<String>,
    pub exit_code: Option<i32>,
    pub failed: bool,
}

/// A failing tool result, open until a later success of the same command or tool on
/// the same file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorFact {
    /// The command, or the tool and file, that failed.
    pub subject: String,
    /// The file, when a file tool failed on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub reason: String,
    pub call_id: String,
    pub opened_ms: u64,
    pub family: Option<String>,
    pub closed_ms: Option<u64>,
    pub closed_by: Option<String>,
}

/// Requests a backend and model answered, and their tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ModelUse {
    pub backend: String,
    pub model: String,
    pub local: bool,
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl FileFact {
    /// Drop the changes a record cannot read (a live fold's, [`Folder`]): keep the
    /// newest valid change that is not a read and the newest valid read (its state),
    /// the valid read with the latest time (whether it was read since) and the change
    /// with the latest time (when it was last touched) — by position and by time
    /// apart, in case concurrent requests commit out of time order.
    fn keep_what_the_record_reads(&mut self) {
        let changes = &self.changes;
        let valid = |at: &usize| changes[*at].superseded_ms.is_none();
        let read = |at: &usize| changes[*at].op == FileOp::Read;
        let newest =
            |is_read: bool| (0..changes.len()).rfind(|at| valid(at) && read(at) == is_read);
        let latest = |keep: &dyn Fn(&usize) -> bool| {
            (0..changes.len())
                .filter(keep)
                .max_by_key(|&at| changes[at].at_ms)
        };
        let kept = [
            newest(true),
            newest(false),
            latest(&|at| valid(at) && read(at)),
            latest(&|_| true),
        ];
        let mut index = 0;
        self.changes.retain(|_| {
            index += 1;
            kept.contains(&Some(index - 1))
        });
    }
}

impl SessionGraph {
    /// The files whose latest change is an edit, creation or deletion.
    pub fn edited_files(&self) -> Vec<&str> {
        self.files
            .iter()
            .filter(|f| f.changes.iter().any(|c| c.op != FileOp::Read))
            .map(|f| f.path.as_str())
            .collect()
    }

    /// The errors no later success closed.
    pub fn open_errors(&self) -> impl Iterator<Item = &ErrorFact> {
        self.errors.iter().filter(|e| e.closed_ms.is_none())
    }
}

/// The strings a step keeps of a request: its key, door, model, rule and reason (in
/// the step's own fields) and the user's text for the episode's goal. Cloned from an
/// event the fold borrows (a replay), moved out of one it is given (the writer's).
struct Kept {
    key: String,
    user_text: Option<String>,
    step: Step,
}

impl Kept {
    fn of_request(request: &RequestEvent) -> Self {
        Kept {
            key: request.request.clone(),
            user_text: request.user_text.clone(),
            step: Step {
                door: request.door.clone(),
                model: request.model.clone(),
                rule: request.rule.clone(),
                reason: request.reason.clone(),
                ..Step::default()
            },
        }
    }

    fn taken_from_request(request: &mut RequestEvent) -> Self {
        use std::mem::take;
        Kept {
            key: take(&mut request.request),
            user_text: take(&mut request.user_text),
            step: Step {
                door: take(&mut request.door),
                model: take(&mut request.model),
                rule: take(&mut request.rule),
                reason: take(&mut request.reason),
                ..Step::default()
            },
        }
    }
}

/// The strings a step keeps of its reply: its backend, stop reason and text.
struct ReplyKept {
    backend: Option<String>,
    stop_reason: Option<Cow<'static, str>>,
    text: Option<String>,
}

impl ReplyKept {
    fn of_reply(reply: &ReplyEvent) -> Self {
        ReplyKept {
            backend: reply.backend.clone(),
            stop_reason: reply.stop_reason.clone(),
            text: reply.text.clone(),
        }
    }

    fn taken_from_reply(reply: &mut ReplyEvent) -> Self {
        use std::mem::take;
        ReplyKept {
            backend: take(&mut reply.backend),
            stop_reason: take(&mut reply.stop_reason),
            text: take(&mut reply.text),
        }
    }
}

/// Whether episode `at` is family `family`'s.
fn holds_episode(episodes: &[Episode], at: usize, family: &str) -> bool {
    episodes.get(at).is_some_and(|e| e.family == family)
}

/// Whether step `step` of episode `episode` is request `key`'s.
fn holds_step(episodes: &[Episode], episode: usize, step: usize, key: &str) -> bool {
    episodes
        .get(episode)
        .and_then(|e| e.steps.get(step))
        .is_some_and(|s| s.request == key)
}

/// Fold `events` (one session's, oldest first) into its graph.
pub fn fold(session: &str, events: &[Stored]) -> SessionGraph {
    let mut folder = Folder::new(session);
    for stored in events {
        folder.feed(stored);
    }
    folder.into_graph()
}

/// A live fold trims its episodes first when it holds this many ...
const LIVE_TRIM_AT: usize = 64;
/// ... down to what the record reads and the newest this many.
const LIVE_EPISODES_KEPT: usize = 16;
/// An episode of a live fold with this many steps (a long agent loop) ...
const LIVE_STEPS_TRIM_AT: usize = 128;
/// ... keeps its newest this many (more when its last exchanges need them).
const LIVE_STEPS_KEPT: usize = 32;
/// Call ids a live fold remembers, waiting for their results and already resulted
/// (each): a result is repeated only by the next few requests.
const LIVE_CALL_IDS: usize = 1024;

/// A fold in progress: feed it a session's events oldest first; read the graph's parts
/// at any point ([`Folder::episodes`], …) or take it whole ([`Folder::into_graph`]).
///
/// A replay ([`Folder::new`], [`fold`]) keeps everything. A live fold
/// ([`Folder::live`], the writer's, which lives as long as the session is active)
/// keeps only what the continuity record reads, so that its memory does not grow
/// with the session: the episodes the record reads ([`crate::record::reads`]) and
/// the newest [`LIVE_EPISODES_KEPT`] (older ones with their closing step only); the
/// newest [`LIVE_STEPS_KEPT`] steps of an episode past [`LIVE_STEPS_TRIM_AT`] (more
/// when fewer hold its last exchanges); of each file, the changes that say its state,
/// whether it was read since and when it was last touched (superseded changes are not
/// in the record); open errors only; no commands (the record lists none; their errors
/// are kept); and the newest [`LIVE_CALL_IDS`] call ids of each kind (a result that
/// comes more than that many ids after its call, while the pending calls overflow, is
/// not folded). Its record is the replay's: the counts of what the record left out
/// (goals, files, errors) are kept whole. Not bounded: open errors (each failure that
/// no success closed) and the files touched (one entry per path).
#[derive(Default)]
pub struct Folder {
    /// Episodes, commands, errors and narrative; files and models are kept in the maps
    /// below and moved in by [`Folder::into_graph`].
    graph: SessionGraph,
    /// Calls seen (in replies or request history) by id, waiting for their result
    /// (dropped once it came: only `resulted` must remember the id), with the
    /// sequence number they were seen at.
    calls: HashMap<String, (u64, ToolCall)>,
    /// Call ids whose result was already folded (history repeats them), with the
    /// sequence number it was folded at.
    resulted: HashMap<String, u64>,
    /// Call ids seen so far, numbering `calls` and `resulted`.
    seq: u64,
    /// Trims itself (see above) ...
    live: bool,
    /// ... when it holds this many episodes.
    trim_at: usize,
    files: BTreeMap<String, FileFact>,
    models: BTreeMap<(String, String), ModelUse>,
    /// Request key → (episode index, step index), the key read in the step itself.
    steps: Positions<(usize, usize)>,
    /// Family → episode index, the family read in the episode itself: an event finds
    /// its episode without a scan, however many episodes the session has.
    episode_of: Positions<usize>,
    /// Episodes with a goal ([`Episode::goal_text`]), so that the record counts the
    /// goals it leaves out without walking every episode.
    goals: usize,
    /// The digest of each root request's user text, oldest first
    /// ([`crate::own::words_digest`]): what a request's own history is checked against
    /// before the record is used for it ([`crate::own`]). Not trimmed: 8 bytes a root
    /// request.
    roots: Vec<u64>,
}

impl Folder {
    /// A replay's fold: keeps everything.
    pub fn new(session: &str) -> Folder {
        Folder {
            graph: SessionGraph {
                session: session.to_owned(),
                ..SessionGraph::default()
            },
            ..Folder::default()
        }
    }

    /// A live session's fold: keeps what the record reads (see [`Folder`]).
    pub fn live(session: &str) -> Folder {
        Folder {
            live: true,
            trim_at: LIVE_TRIM_AT,
            ..Folder::new(session)
        }
    }

    /// Fold one more event of the session (events of the store itself change nothing).
    pub fn feed(&mut self, stored: &Stored) {
        self.feed_event(&stored.event, stored.family.as_ref());
    }

    /// [`Folder::feed`] for an event not read back from the store (just committed
    /// with its `family`).
    pub fn feed_event(&mut self, event: &crate::event::Event, family: Option<&String>) {
        let at_ms = event.at_ms;
        match &event.body {
            EventBody::Request(request) => {
                self.request(request, Kept::of_request(request), at_ms, family.cloned())
            }
            EventBody::Reply(reply) => self.reply(reply, ReplyKept::of_reply(reply)),
            _ => self.other(&event.body, at_ms, family),
        }
        self.after_event();
    }

    /// [`Folder::feed_event`] for an event the caller gives up (the writer's, once
    /// committed): what a step keeps of a request or a reply moves into the fold
    /// instead of being copied.
    /// It is taken boxed, as the writer holds it, and its strings are taken through a
    /// reference: the event is never moved whole (a few hundred bytes a copy).
    pub fn feed_owned(
        &mut self,
        event: impl Into<Box<crate::event::Event>>,
        family: Option<String>,
    ) {
        let mut event = event.into();
        let at_ms = event.at_ms;
        match &mut event.body {
            EventBody::Request(request) => {
                let kept = Kept::taken_from_request(request);
                self.request(request, kept, at_ms, family)
            }
            EventBody::Reply(reply) => {
                let kept = ReplyKept::taken_from_reply(reply);
                self.reply(reply, kept)
            }
            body => self.other(body, at_ms, family.as_ref()),
        }
        self.after_event();
    }

    /// An event that is neither a request nor a reply.
    fn other(&mut self, body: &EventBody, at_ms: u64, family: Option<&String>) {
        match body {
            EventBody::Compaction(compaction) => self.compaction(compaction),
            EventBody::BudgetStop(stop) => self.budget_stop(stop),
            EventBody::Delegate(run) => self.delegate(run, at_ms, family),
            EventBody::Request(_)
            | EventBody::Reply(_)
            | EventBody::Gap { .. }
            | EventBody::Retention { .. }
            | EventBody::Forgotten { .. }
            | EventBody::ToolRun(_) => {}
        }
    }

    fn after_event(&mut self) {
        if self.live {
            self.trim();
        }
    }

    /// A live fold lets go what the record no longer reads (see [`Folder`]). Cheap
    /// unless a bound is reached; the next bound is twice what a trim kept, so its
    /// cost per event is constant.
    fn trim(&mut self) {
        if self.graph.episodes.len() >= self.trim_at {
            self.trim_episodes();
            self.trim_at = (2 * self.graph.episodes.len()).max(LIVE_TRIM_AT);
        }
        self.trim_long_episode();
        let oldest_kept = self.seq.saturating_sub(LIVE_CALL_IDS as u64);
        if self.calls.len() > 2 * LIVE_CALL_IDS {
            self.calls.retain(|_, (seq, _)| *seq > oldest_kept);
        }
        if self.resulted.len() > 2 * LIVE_CALL_IDS {
            self.resulted.retain(|_, seq| *seq > oldest_kept);
        }
    }

    /// Keep the episodes the record reads ([`crate::record::reads`]) and the newest
    /// [`LIVE_EPISODES_KEPT`]; of those older than both the newest and the last
    /// exchanges, only the closing step (the goal and the closing words are all the
    /// record reads of them).
    fn trim_episodes(&mut self) {
        let episodes = std::mem::take(&mut self.graph.episodes);
        let reads = crate::record::reads(&episodes);
        let whole_from = reads
            .exchanges_from
            .min(episodes.len().saturating_sub(LIVE_EPISODES_KEPT));
        let mut keep = vec![false; episodes.len()];
        for &index in reads.goals.iter().chain(&reads.decisions) {
            keep[index] = true;
        }
        keep[whole_from..].fill(true);
        // Where each episode goes (`None`: let go), and for one cut to its closing
        // step, which step that was; the position tables are updated in place.
        let mut moved: Vec<Option<(usize, Option<usize>)>> = vec![None; episodes.len()];
        for (index, mut episode) in episodes.into_iter().enumerate() {
            if !keep[index] {
                continue;
            }
            let mut closing_at = None;
            if index < whole_from {
                closing_at = episode.steps.iter().rposition(|s| !s.compaction);
                let closing = closing_at.map(|at| episode.steps.swap_remove(at));
                episode.steps_left_out += episode.steps.len();
                episode.steps.clear();
                episode.steps.extend(closing);
            }
            moved[index] = Some((self.graph.episodes.len(), closing_at));
            self.graph.episodes.push(episode);
        }
        self.episode_of.retain(|at| match moved[*at] {
            Some((to, _)) => {
                *at = to;
                true
            }
            None => false,
        });
        self.steps.retain(|(episode, step)| match moved[*episode] {
            Some((to, None)) => {
                *episode = to;
                true
            }
            Some((to, Some(closing))) if *step == closing => {
                (*episode, *step) = (to, 0);
                true
            }
            _ => false,
        });
    }

    /// The current episode of a long agent loop keeps its newest [`LIVE_STEPS_KEPT`]
    /// steps, never fewer than its last exchanges need; checked each
    /// [`LIVE_STEPS_KEPT`] steps past [`LIVE_STEPS_TRIM_AT`].
    fn trim_long_episode(&mut self) {
        let Some(last) = self.graph.episodes.len().checked_sub(1) else {
            return;
        };
        let steps = &self.graph.episodes[last].steps;
        if steps.len() < LIVE_STEPS_TRIM_AT || !steps.len().is_multiple_of(LIVE_STEPS_KEPT) {
            return;
        }
        let exchanges_from = steps
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, s)| crate::record::is_exchange(s))
            .nth(2 * crate::record::RECENT_EXCHANGES - 1)
            .map_or(0, |(at, _)| at);
        let keep_from = (steps.len() - LIVE_STEPS_KEPT).min(exchanges_from);
        if keep_from > 0 {
            self.drop_steps(last, keep_from);
        }
    }

    /// Let the first `count` steps of episode `index` go.
    fn drop_steps(&mut self, index: usize, count: usize) {
        let episode = &mut self.graph.episodes[index];
        episode.steps.drain(..count);
        episode.steps_left_out += count;
        // By position: the entries of the steps let go go, the later ones move down.
        self.steps.retain(|(episode, step)| {
            if *episode != index {
                return true;
            }
            if *step < count {
                return false;
            }
            *step -= count;
            true
        });
    }

    /// Remember a call seen in a reply or a request's history, unless its result
    /// was folded already.
    fn saw_call(&mut self, call: &ToolCall) {
        if self.resulted.contains_key(&call.id) || self.calls.contains_key(&call.id) {
            return;
        }
        self.seq += 1;
        self.calls.insert(call.id.clone(), (self.seq, call.clone()));
    }

    /// The digests of the root requests' user texts, oldest first (see
    /// [`crate::own`]).
    pub fn roots(&self) -> &[u64] {
        &self.roots
    }

    pub fn episodes(&self) -> &[Episode] {
        &self.graph.episodes
    }

    /// Files by path.
    pub fn files(&self) -> impl Iterator<Item = &FileFact> {
        self.files.values()
    }

    /// What is known of the file at `path`.
    pub fn file(&self, path: &str) -> Option<&FileFact> {
        self.files.get(path)
    }

    pub fn errors(&self) -> &[ErrorFact] {
        &self.graph.errors
    }

    pub fn narrative(&self) -> Option<&Narrative> {
        self.graph.narrative.as_ref()
    }

    /// Episodes with a goal.
    pub fn goal_count(&self) -> usize {
        self.goals
    }

    pub fn into_graph(self) -> SessionGraph {
        let mut graph = self.graph;
        graph.files = self.files.into_values().collect();
        graph.models = self.models.into_values().collect();
        graph
    }

    /// Only an accepted compaction replaces the narrative (a rejected one is kept in
    /// the log as what was tried).
    fn compaction(&mut self, compaction: &CompactionEvent) {
        if compaction.accepted {
            self.graph.narrative = Some(Narrative::of(compaction));
        }
    }

    /// On its request's step (the request is folded before it; its reply follows).
    fn budget_stop(&mut self, stop: &BudgetStopEvent) {
        if let Some((episode, step)) = self.step_of(&stop.request) {
            self.graph.episodes[episode].steps[step].budget_stop = Some(LoopStop {
                limit: stop.limit.clone(),
                turns: stop.turns,
                tool: stop.tool.clone(),
                repeats: stop.repeats,
            });
        }
    }

    /// In the episode current when it ended (its family); a run before any request of
    /// the session is an episode of its own, with no goal and no steps.
    fn delegate(&mut self, run: &DelegateEvent, at_ms: u64, family: Option<&String>) {
        let key = family
            .cloned()
            .unwrap_or_else(|| format!("delegate-{at_ms}"));
        let episode = self.episode(key, at_ms);
        self.graph.episodes[episode]
            .delegate_runs
            .push(DelegateRun {
                vendor: run.vendor.clone(),
                at_ms,
                exit_code: run.exit_code,
                error: run.error.clone(),
                duration_ms: run.duration_ms,
            });
    }

    /// The index of the episode `family`, opened at `at_ms` if it is new.
    fn episode(&mut self, family: String, at_ms: u64) -> usize {
        let episodes = &self.graph.episodes;
        let holds = |at: usize| holds_episode(episodes, at, &family);
        if let Some(index) = self.episode_of.get(&family, holds) {
            return index;
        }
        let index = episodes.len();
        self.episode_of.insert_new(&family, index);
        self.graph.episodes.push(Episode {
            family,
            started_ms: at_ms,
            // Most episodes of a live fold end with their first step.
            steps: Vec::with_capacity(1),
            ..Episode::default()
        });
        index
    }

    /// Where the step of request `key` is.
    fn step_of(&self, key: &str) -> Option<(usize, usize)> {
        let episodes = &self.graph.episodes;
        self.steps.get(key, |(episode, step)| {
            holds_step(episodes, episode, step, key)
        })
    }

    /// `request`, whose strings a step keeps are in `kept` (see [`Kept`]).
    fn request(&mut self, request: &RequestEvent, kept: Kept, at_ms: u64, family: Option<String>) {
        for call in &request.tool_calls {
            self.saw_call(call);
        }
        for result in &request.tool_results {
            self.result(result, at_ms, family.clone());
        }
        let Kept {
            key,
            user_text,
            step,
        } = kept;
        if request.root
            && let Some(text) = &user_text
        {
            self.roots.push(crate::own::words_digest(text));
        }
        let family_key = family.unwrap_or_else(|| key.clone());
        let episode = self.episode(family_key, at_ms);
        let episode_ref = &mut self.graph.episodes[episode];
        if episode_ref.goal.is_none() && request.root {
            episode_ref.goal = user_text;
            self.goals += usize::from(episode_ref.goal_text().is_some());
        }
        episode_ref.steps.push(Step {
            request: key,
            at_ms,
            estimated_tokens: request.estimated_tokens,
            compaction: request.compaction,
            ..step
        });
        let at = (episode, episode_ref.steps.len() - 1);
        let episodes = &self.graph.episodes;
        let key = &episodes[at.0].steps[at.1].request;
        self.steps
            .insert(key, at, |(e, s)| holds_step(episodes, e, s, key));
    }

    /// `reply`, whose strings its step keeps are in `kept` (its backend there, not in
    /// `reply`).
    fn reply(&mut self, reply: &ReplyEvent, kept: ReplyKept) {
        for call in &reply.tool_calls {
            self.saw_call(call);
        }
        if let (Some(backend), Some(model)) = (&kept.backend, &reply.model) {
            self.count_model(backend, model, reply);
        }
        if let Some((episode, step)) = self.step_of(&reply.request) {
            let step = &mut self.graph.episodes[episode].steps[step];
            step.local = reply.local;
            step.status = reply.status;
            step.input_tokens = reply.input_tokens;
            step.output_tokens = reply.output_tokens;
            step.tool_calls = reply.tool_calls.iter().map(|c| c.name.clone()).collect();
            step.backend = kept.backend;
            step.stop_reason = kept.stop_reason;
            step.reply_text = kept.text;
        }
    }

    /// Count `reply` toward the use of `model` on `backend`.
    fn count_model(&mut self, backend: &str, model: &str, reply: &ReplyEvent) {
        // Found without building a key: a session uses few models.
        let known = self
            .models
            .iter_mut()
            .find(|((b, m), _)| b == backend && m == model);
        let entry = match known {
            Some((_, entry)) => entry,
            None => self
                .models
                .entry((backend.to_owned(), model.to_owned()))
                .or_insert_with(|| ModelUse {
                    backend: backend.to_owned(),
                    model: model.to_owned(),
                    local: reply.local.unwrap_or(false),
                    ..ModelUse::default()
                }),
        };
        entry.requests += 1;
        entry.input_tokens += reply.input_tokens;
        entry.output_tokens += reply.output_tokens;
    }

    fn result(&mut self, result: &ToolResult, at_ms: u64, family: Option<String>) {
        if self.resulted.contains_key(&result.call_id) {
            return;
        }
        self.seq += 1;
        self.resulted.insert(result.call_id.clone(), self.seq);
        let Some((_, call)) = self.calls.remove(&result.call_id) else {
            return;
        };
        let outcome = tools::outcome(result.is_error, &result.text);
        let call_id = call.id.clone();
        match tools::action(&call.name, &call.arguments) {
            Action::Read { path } => {
                if outcome.failed {
                    self.open_error(
                        format!("{} {path}", call.name),
                        Some(&path),
                        &outcome,
                        &call_id,
                        at_ms,
                        family,
                    );
                } else {
                    self.close_errors(&format!("{} {path}", call.name), &call_id, at_ms);
                    self.file_change(&path, FileOp::Read, &call_id, at_ms, family);
                }
            }
            Action::Edit { files } => {
                let name = call.name.clone();
                for (path, op) in files {
                    let subject = format!("{name} {path}");
                    if outcome.failed {
                        let file = Some(path.as_str());
                        self.open_error(subject, file, &outcome, &call_id, at_ms, family.clone());
                    } else {
                        self.close_errors(&subject, &call_id, at_ms);
                        let op = match op {
                            FileOp::Written if !self.files.contains_key(&path) => FileOp::Created,
                            op => op,
                        };
                        self.file_change(&path, op, &call_id, at_ms, family.clone());
                    }
                }
            }
            Action::Command { command } => {
                if outcome.failed {
                    let subject = command.clone();
                    self.open_error(subject, None, &outcome, &call_id, at_ms, family.clone());
                } else {
                    self.close_errors(&command, &call_id, at_ms);
                }
                if self.live {
                    return;
                }
                self.graph.commands.push(CommandFact {
                    command,
                    call_id,
                    at_ms,
                    family,
                    exit_code: outcome.exit_code,
                    failed: outcome.failed,
                });
            }
            Action::Other => {
                if outcome.failed {
                    let subject = call.name.clone();
                    self.open_error(subject, None, &outcome, &call_id, at_ms, family);
                }
            }
        }
    }

    fn file_change(
        &mut self,
        path: &str,
        op: FileOp,
        call_id: &str,
        at_ms: u64,
        family: Option<String>,
    ) {
        let fact = self
            .files
            .entry(path.to_owned())
            .or_insert_with(|| FileFact {
                path: path.to_owned(),
                changes: Vec::new(),
            });
        // A read does not supersede what an edit made of the file; an edit supersedes
        // everything known before it.
        if op != FileOp::Read {
            for change in fact
                .changes
                .iter_mut()
                .filter(|c| c.superseded_ms.is_none())
            {
                change.superseded_ms = Some(at_ms);
            }
        }
        fact.changes.push(FileChange {
            op,
            at_ms,
            call_id: call_id.to_owned(),
            family,
            superseded_ms: None,
        });
        if self.live {
            fact.keep_what_the_record_reads();
        }
    }

    fn open_error(
        &mut self,
        subject: String,
        path: Option<&str>,
        outcome: &tools::Outcome,
        call_id: &str,
        at_ms: u64,
        family: Option<String>,
    ) {
        self.graph.errors.push(ErrorFact {
            subject,
            path: path.map(str::to_owned),
            reason: outcome.reason.clone().unwrap_or_default(),
            call_id: call_id.to_owned(),
            opened_ms: at_ms,
            family,
            closed_ms: None,
            closed_by: None,
        });
    }

    fn close_errors(&mut self, subject: &str, call_id: &str, at_ms: u64) {
        for error in self
            .graph
            .errors
            .iter_mut()
            .filter(|e| e.closed_ms.is_none() && e.subject == subject)
        {
            error.closed_ms = Some(at_ms);
            error.closed_by = Some(call_id.to_owned());
        }
        if self.live {
            self.graph.errors.retain(|e| e.closed_ms.is_none());
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::Event;

    /// A recorded session, built one wire event at a time.
    #[derive(Default)]
    struct Script {
        events: Vec<Stored>,
        family: Option<String>,
        n: u64,
    }

    impl Script {
        fn push(&mut self, body: EventBody) {
            self.n += 1;
            self.events.push(Stored {
                id: self.n as i64,
                family: self.family.clone(),
                event: Event {
                    at_ms: 1000 * self.n,
                    session: Some("s".into()),
                    body,
                },
            });
        }

        /// The user types `text`: a root request, and its reply calls `calls`.
        fn user(&mut self, text: &str, calls: Vec<ToolCall>) {
            let request = format!("r{}", self.n);
            self.family = Some(request.clone());
            self.push(EventBody::Request(RequestEvent {
                request: request.clone(),
                root: true,
                user_text: Some(text.into()),
                model: "m".into(),
                ..RequestEvent::default()
            }));
            self.reply(&request, calls);
        }

        /// The CLI sends `results` back; the model calls `calls` next.
        fn results(&mut self, results: Vec<ToolResult>, calls: Vec<ToolCall>) {
            let request = format!("r{}", self.n);
            self.push(EventBody::Request(RequestEvent {
                request: request.clone(),
                tool_results: results,
                model: "m".into(),
                ..RequestEvent::default()
            }));
            self.reply(&request, calls);
        }

        fn reply(&mut self, request: &str, calls: Vec<ToolCall>) {
            self.push(EventBody::Reply(ReplyEvent {
                request: request.into(),
                backend: Some("local".into()),
                model: Some("m".into()),
                local: Some(true),
                status: Some(200),
                input_tokens: 10,
                output_tokens: 2,
                tool_calls: calls,
                ..ReplyEvent::default()
            }));
        }

        fn fold(&self) -> SessionGraph {
            fold("s", &self.events)
        }
    }

    fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
        ToolCall::new(id.into(), name.into(), args)
    }

    fn ok(id: &str, text: &str) -> ToolResult {
        ToolResult::new(id.into(), None, false, text)
    }

    fn failed(id: &str, text: &str) -> ToolResult {
        ToolResult::new(id.into(), None, true, text)
    }

    #[test]
    fn a_late_reply_finds_its_step_in_an_episode_a_live_fold_cut_to_its_closing_step() {
        let event = |family: &str, body| {
            let event = Event {
                at_ms: 1,
                session: Some("s".into()),
                body,
            };
            (event, Some(family.to_owned()))
        };
        let request = |key: &str, goal: Option<&str>| {
            EventBody::Request(RequestEvent {
                request: key.into(),
                root: goal.is_some(),
                user_text: goal.map(str::to_owned),
                ..RequestEvent::default()
            })
        };
        let reply = |key: &str, text: &str| {
            EventBody::Reply(ReplyEvent {
                request: key.into(),
                status: Some(200),
                text: Some(text.into()),
                ..ReplyEvent::default()
            })
        };
        let mut live = Folder::live("s");
        // The one goal of the session, two steps whose replies are still out.
        for (event, family) in [
            event("f0", request("a", Some("the goal"))),
            event("f0", request("b", None)),
        ] {
            live.feed_owned(event, family);
        }
        // Enough later episodes, each a step without a goal, for trims to cut f0.
        for n in 1..200 {
            let (later, family) = event(&format!("f{n}"), request(&format!("k{n}"), None));
            live.feed_owned(later, family);
        }
        let f0 = |live: &Folder| {
            live.episodes().iter().find(|e| e.family == "f0").map(|e| {
                e.steps
                    .iter()
                    .map(|s| s.request.clone())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(
            f0(&live),
            Some(vec!["b".to_owned()]),
            "cut to its closing step"
        );
        let (late, family) = event("f0", reply("b", "the closing words"));
        live.feed_owned(late, family);
        let steps = &live
            .episodes()
            .iter()
            .find(|e| e.family == "f0")
            .expect("f0")
            .steps;
        assert_eq!(steps[0].reply_text.as_deref(), Some("the closing words"));
    }

    fn ops(graph: &SessionGraph, path: &str) -> Vec<FileOp> {
        graph
            .files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.changes.iter().map(|c| c.op).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_claude_code_session_lists_its_files_commands_and_errors() {
        let mut s = Script::default();
        s.user(
            "fix the failing test",
            vec![call("t1", "Read", json!({"file_path": "/p/src/lib.rs"}))],
        );
        s.results(
            vec![ok("t1", "fn add() {}")],
            vec![call("t2", "Bash", json!({"command": "cargo test"}))],
        );
        s.results(
            vec![failed(
                "t2",
                "Error: Exit code 101\ntest result: FAILED. 0 passed; 1 failed",
            )],
            vec![call(
                "t3",
                "Edit",
                json!({"file_path": "/p/src/lib.rs", "old_string": "a", "new_string": "b"}),
            )],
        );
        s.results(
            vec![ok("t3", "The file has been updated.")],
            vec![
                call(
                    "t4",
                    "Write",
                    json!({"file_path": "/p/tests/new.rs", "content": "x"}),
                ),
                call("t5", "Bash", json!({"command": "cargo test"})),
            ],
        );
        s.results(
            vec![
                ok("t4", "File created"),
                ok("t5", "test result: ok. 1 passed"),
            ],
            vec![],
        );
        let graph = s.fold();
        assert_eq!(graph.episodes.len(), 1);
        let episode = &graph.episodes[0];
        assert_eq!(episode.goal.as_deref(), Some("fix the failing test"));
        assert_eq!(episode.steps.len(), 5);
        assert_eq!(episode.steps[0].tool_calls, ["Read"]);
        assert_eq!(episode.steps[0].backend.as_deref(), Some("local"));
        assert_eq!(ops(&graph, "/p/src/lib.rs"), [FileOp::Read, FileOp::Edited]);
        assert_eq!(ops(&graph, "/p/tests/new.rs"), [FileOp::Created]);
        assert_eq!(graph.edited_files(), ["/p/src/lib.rs", "/p/tests/new.rs"]);
        let lib = graph
            .files
            .iter()
            .find(|f| f.path == "/p/src/lib.rs")
            .expect("lib.rs");
        assert_eq!(
            lib.changes[0].superseded_ms,
            Some(lib.changes[1].at_ms),
            "the edit supersedes the read"
        );
        assert_eq!(lib.changes[1].superseded_ms, None);
        let commands: Vec<_> = graph
            .commands
            .iter()
            .map(|c| (c.command.as_str(), c.exit_code, c.failed))
            .collect();
        assert_eq!(
            commands,
            [("cargo test", Some(101), true), ("cargo test", None, false)]
        );
        assert_eq!(graph.errors.len(), 1);
        let error = &graph.errors[0];
        assert_eq!(error.subject, "cargo test");
        assert_eq!(error.reason, "test result: FAILED. 0 passed; 1 failed");
        assert_eq!(
            error.closed_by.as_deref(),
            Some("t5"),
            "the later passing run closes it"
        );
        assert_eq!(graph.open_errors().count(), 0);
        assert_eq!(graph.models.len(), 1);
        assert_eq!(
            (graph.models[0].requests, graph.models[0].input_tokens),
            (5, 50)
        );
    }

    #[test]
    fn a_budget_stop_marks_its_step_and_a_delegate_run_its_episode() {
        let delegate = |vendor: &str, exit_code, error: Option<&str>| {
            EventBody::Delegate(DelegateEvent {
                vendor: vendor.into(),
                exit_code,
                error: error.map(str::to_owned),
                duration_ms: 1200,
            })
        };
        let mut s = Script::default();
        // Before any request of the session: an episode of its own.
        s.push(delegate("claude", Some(0), None));
        let edit = json!({"file_path": "f.rs", "old_string": "a", "new_string": "b"});
        s.user("loop on it", vec![call("e1", "Edit", edit.clone())]);
        s.push(delegate("cursor-agent", None, Some("timed out")));
        let stopped = format!("r{}", s.n);
        s.push(EventBody::Request(RequestEvent {
            request: stopped.clone(),
            tool_results: vec![ok("e1", "updated")],
            ..RequestEvent::default()
        }));
        s.push(EventBody::BudgetStop(BudgetStopEvent {
            request: stopped.clone(),
            limit: "loop_guard".into(),
            turns: 2,
            tool: Some("Edit".into()),
            repeats: Some(5),
            message: "Glider stopped this agent loop".into(),
        }));
        s.push(EventBody::Reply(ReplyEvent {
            request: stopped,
            backend: Some("glider-budget".into()),
            local: Some(true),
            status: Some(200),
            ..ReplyEvent::default()
        }));
        let graph = s.fold();
        assert_eq!(graph.episodes.len(), 2);
        let first = &graph.episodes[0];
        assert_eq!(
            (
                first.family.as_str(),
                first.goal.as_deref(),
                first.steps.len()
            ),
            ("delegate-1000", None, 0)
        );
        assert_eq!(
            first.delegate_runs,
            [DelegateRun {
                vendor: "claude".into(),
                at_ms: 1000,
                exit_code: Some(0),
                error: None,
                duration_ms: 1200
            }]
        );
        let second = &graph.episodes[1];
        assert_eq!(second.goal.as_deref(), Some("loop on it"));
        let runs: Vec<_> = second
            .delegate_runs
            .iter()
            .map(|r| (r.vendor.as_str(), r.exit_code, r.error.as_deref()))
            .collect();
        assert_eq!(runs, [("cursor-agent", None, Some("timed out"))]);
        assert_eq!(second.steps[0].budget_stop, None);
        assert_eq!(
            second.steps[1].budget_stop,
            Some(LoopStop {
                limit: "loop_guard".into(),
                turns: 2,
                tool: Some("Edit".into()),
                repeats: Some(5)
            })
        );
        assert_eq!(
            second.steps[1].backend.as_deref(),
            Some("glider-budget"),
            "its reply is folded onto the same step"
        );
        assert_eq!(crate::BudgetView::of_graph(&graph, 0).stops, 1);
        // Fed one event at a time, the fold is the same as over the whole log.
        let mut folder = Folder::new("s");
        for stored in &s.events {
            folder.feed_event(&stored.event, stored.family.as_ref());
        }
        assert_eq!(folder.into_graph(), graph);
    }

    #[test]
    fn a_codex_session_reads_exec_command_and_apply_patch() {
        let mut s = Script::default();
        let patch = "*** Begin Patch\n*** Add File: app/new.py\n+x\n*** Update File: app/main.py\n@@\n-a\n+b\n*** End Patch";
        s.user(
            "add a module",
            vec![call("c1", "exec_command", json!({"cmd": "ls app"}))],
        );
        s.results(
            vec![ok("c1", "Process exited with code 0\nOutput:\nmain.py")],
            vec![call("c2", "apply_patch", json!({"input": patch}))],
        );
        s.results(
            vec![ok(
                "c2",
                "Success. Updated the following files:\nA app/new.py\nM app/main.py",
            )],
            vec![call(
                "c3",
                "exec_command",
                json!({"cmd": ["bash", "-lc", "python -m pytest"]}),
            )],
        );
        s.results(
            vec![ok(
                "c3",
                "Process exited with code 1\nOutput:\nFAILED test_main.py::test_x",
            )],
            vec![],
        );
        let graph = s.fold();
        assert_eq!(ops(&graph, "app/new.py"), [FileOp::Created]);
        assert_eq!(ops(&graph, "app/main.py"), [FileOp::Edited]);
        let commands: Vec<_> = graph
            .commands
            .iter()
            .map(|c| (c.command.as_str(), c.exit_code))
            .collect();
        assert_eq!(
            commands,
            [("ls app", Some(0)), ("python -m pytest", Some(1))]
        );
        let open: Vec<_> = graph.open_errors().map(|e| e.subject.as_str()).collect();
        assert_eq!(open, ["python -m pytest"], "no later success: still open");
    }

    #[test]
    fn each_root_turn_opens_an_episode_and_history_is_not_counted_twice() {
        let mut s = Script::default();
        s.user("first", vec![call("a", "Read", json!({"file_path": "x"}))]);
        s.results(vec![ok("a", "1")], vec![]);
        s.user("second", vec![]);
        // A later request repeats an old result in its history: folded once.
        s.results(vec![ok("a", "1")], vec![]);
        let graph = s.fold();
        let goals: Vec<_> = graph.episodes.iter().map(|e| e.goal.as_deref()).collect();
        assert_eq!(goals, [Some("first"), Some("second")]);
        assert_eq!(graph.episodes[1].steps.len(), 2);
        assert_eq!(ops(&graph, "x"), [FileOp::Read]);
    }

    #[test]
    fn a_failed_edit_is_an_error_closed_by_a_later_edit_of_that_file() {
        let mut s = Script::default();
        let edit = |id: &str| {
            call(
                id,
                "Edit",
                json!({"file_path": "f.rs", "old_string": "q", "new_string": "r"}),
            )
        };
        s.user("edit", vec![edit("e1")]);
        s.results(
            vec![failed("e1", "String to replace not found in file.")],
            vec![edit("e2")],
        );
        let open: Vec<_> = s.fold().open_errors().map(|e| e.subject.clone()).collect();
        assert_eq!(open, ["Edit f.rs"]);
        assert!(
            ops(&s.fold(), "f.rs").is_empty(),
            "a failed edit changed nothing"
        );
        s.results(vec![ok("e2", "updated")], vec![]);
        let graph = s.fold();
        assert_eq!(graph.open_errors().count(), 0);
        assert_eq!(ops(&graph, "f.rs"), [FileOp::Edited]);
    }
}
