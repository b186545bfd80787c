//! The writer: requests pack events into a bounded queue ([`crate::queue`], never
//! waiting) and one thread writes them, a batch per transaction. It gives each event
//! its turn family. When the queue is full the event is dropped and counted, and the
//! count is written as a `gap` event once the writer catches up: a loss is never
//! silent. Retention runs on the same thread, at start and then periodically. After
//! each commit the writer feeds the live sessions' folds, which marks their continuity
//! records stale ([`crate::live`]): a read renders one, or the writer does once it
//! idles; at start a thread of its own loads the recent sessions' records and sends
//! them to the writer through its channel.

use foldhash::HashMap;
use std::borrow::Borrow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::batch;
use crate::event::{Event, EventBody};
use crate::live::{self, Live, LiveSessions, MAX_LIVE_SESSIONS, RecordCache};
use crate::queue::{self, EventQueue, Pushed};
use crate::store::{self, Retention, StoreError};

/// How much lower than the process's the writer thread's priority is (nice levels): a
/// writer woken with events waits for an idle moment of its core instead of preempting
/// a request being served there, and under load its share still keeps up (batches grow
/// when it runs less often, and a bigger batch costs less an event).
/// `bench/results/2026-12-04-context-cost5.md`: at one connection on one core, the p50
/// the log added went from +22 µs to none, with no event dropped at saturation.
pub(crate) const WRITER_NICE: i32 = 10;
/// Most messages (wake-ups, flushes, preloaded records) taken in one batch.
const MAX_MESSAGES: usize = 4096;
/// Messages the writer's channel holds: at most one wake-up a batch, a few flushes, the
/// records loaded at start (their sender waits for room).
const MESSAGE_CAPACITY: usize = 64;
/// Families remembered for requests whose reply has not come (a Cursor turn handed
/// back to its origin never has one); past this the oldest memory is dropped.
const MAX_OPEN_REQUESTS: usize = 16_384;
/// Sessions whose state (current family, calls awaiting results) is kept in memory.
const MAX_SESSIONS: usize = 4096;
/// Longest the writer idles before checking whether a session was forgotten by
/// another connection (its record must not outlive it).
const FORGET_CHECK_EVERY: Duration = Duration::from_secs(1);

/// How the log is run.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// The context directory (`GLIDER_HOME/context`).
    pub dir: PathBuf,
    /// Events the queue holds before new ones are dropped (and counted).
    pub queue_capacity: usize,
    pub retention: Retention,
    /// How often retention runs after the one at start.
    pub retention_every: Duration,
    /// The token budget of each rendered continuity record.
    pub record_max_tokens: u64,
    /// How long the writer waits with nothing to write before it renders the records
    /// its last events made stale (a read renders one sooner itself).
    pub idle_rebuild_after: Duration,
}

/// Counters of the log, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Events committed to the database.
    pub written: AtomicU64,
    /// Events dropped because the queue was full (or a write failed, or a queued event
    /// did not read back).
    pub dropped: AtomicU64,
    /// Gap events written (each tells how many were dropped before it).
    pub gaps: AtomicU64,
    /// Summaries the summarizer accepted (they named every edited file and open error).
    pub compactions_accepted: AtomicU64,
    /// Summaries rejected, or runs that failed (the structural record stood).
    pub compactions_rejected: AtomicU64,
    /// Summaries dropped mid-run because a client's request to the same backend
    /// started (`context.summarizer.yield_to_clients`); each is tried again later.
    pub compactions_yielded: AtomicU64,
    /// Dropped events not yet told by a gap event.
    unreported: AtomicU64,
}

impl Counters {
    /// `events` were lost: counted, and owed a gap event.
    fn lost(&self, events: u64) {
        self.dropped.fetch_add(events, Ordering::Relaxed);
        self.unreported.fetch_add(events, Ordering::Relaxed);
    }
}

/// A session whose requests or replies were just committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    pub session: String,
    /// A root request began a new turn family: the episode before it ended.
    pub episode_ended: bool,
}

/// Told, on the writer's thread, of the sessions each committed batch touched (the
/// summarizer watches for ended episodes and idle sessions this way).
pub trait CommitObserver: Send + Sync {
    fn committed(&self, activity: &[Activity]);
}

type ObserverSlot = Arc<OnceLock<Arc<dyn CommitObserver>>>;

enum Message {
    /// Events were queued after the writer took its last batch.
    Wake,
    /// Answered once everything sent before it is committed.
    Flush(mpsc::Sender<()>),
    /// A session's fold read at start by [`live::preload`].
    Preloaded(String, Box<Live>),
}

/// The handle requests append through. Dropping it drains the queue and stops the
/// writer.
pub struct ContextLog {
    queue: Arc<EventQueue>,
    sender: Option<SyncSender<Message>>,
    counters: Arc<Counters>,
    records: Arc<RecordCache>,
    writer: Option<JoinHandle<()>>,
    dir: PathBuf,
    observer: ObserverSlot,
    /// Tells the preload at start to stop (the log is being dropped).
    closing: Arc<AtomicBool>,
}

impl ContextLog {
    /// Open (create, migrate) the database, apply retention once, and start the writer.
    pub fn start(options: LogOptions) -> Result<ContextLog, StoreError> {
        let mut conn = store::open(&options.dir)?;
        store::apply_retention(&mut conn, options.retention, crate::now_ms())?;
        let queue = Arc::new(EventQueue::new(options.queue_capacity));
        let (sender, receiver) = mpsc::sync_channel(MESSAGE_CAPACITY);
        let counters = Arc::new(Counters::default());
        let records = Arc::new(RecordCache::new(options.record_max_tokens));
        let observer = ObserverSlot::default();
        let writer = Writer {
            queue: queue.clone(),
            emptied: Vec::new(),
            live: LiveSessions::new(&conn, records.clone()),
            conn,
            counters: counters.clone(),
            observer: observer.clone(),
            families: Families::default(),
            retention: options.retention,
            retention_every: options.retention_every,
            idle_rebuild_after: options.idle_rebuild_after,
        };
        let thread = glider_sys::threadprio::spawn_lowered(
            "glider-context-writer",
            WRITER_NICE,
            move || writer.run(receiver),
        )
        .map_err(|source| StoreError::Io {
            path: options.dir.clone(),
            source,
        })?;
        let closing = Arc::new(AtomicBool::new(false));
        let preload = (
            sender.clone(),
            options.dir.clone(),
            closing.clone(),
            records.clone(),
        );
        // Off the request path and the writer's thread; if it cannot start, each
        // session's record is loaded on its next event as before.
        let spawned = std::thread::Builder::new()
            .name("glider-context-preload".into())
            .spawn(move || {
                let (sender, dir, closing, held) = preload;
                live::preload(&dir, MAX_LIVE_SESSIONS, &closing, &held, |session, live| {
                    sender
                        .send(Message::Preloaded(session, Box::new(live)))
                        .is_ok()
                });
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "context: cannot start loading recent sessions' records");
        }
        Ok(ContextLog {
            queue,
            sender: Some(sender),
            counters,
            records,
            writer: Some(thread),
            dir: options.dir,
            observer,
            closing,
        })
    }

    /// Tell `observer` of every later commit; only one can be set (an error
    /// otherwise).
    pub fn observe(&self, observer: Arc<dyn CommitObserver>) -> Result<(), StoreError> {
        self.observer.set(observer).map_err(|_| StoreError::Io {
            path: self.dir.clone(),
            source: std::io::Error::other("the context log already has an observer"),
        })
    }

    /// Queue `event` without waiting (packed: the caller keeps and frees it); if the
    /// queue is full it is counted as dropped.
    pub fn append(&self, event: impl Borrow<Event>) {
        let event = event.borrow();
        self.append_body(event.at_ms, event.session.as_deref(), &event.body);
    }

    /// [`ContextLog::append`] of an event given by its parts, borrowed: the request
    /// path names a session it holds already, with no copy of it made for an event.
    pub fn append_body(&self, at_ms: u64, session: Option<&str>, body: &EventBody) {
        let Some(sender) = &self.sender else { return };
        match self.queue.push(at_ms, session, body) {
            Pushed::Queued => {}
            // A wake-up that finds the channel full is not needed: the writer has
            // messages to take, and takes the queue with them.
            Pushed::Wake => drop(sender.try_send(Message::Wake)),
            Pushed::Dropped => self.counters.lost(1),
        }
    }

    /// Wait until everything appended so far is committed (tests, the CLI, shutdown).
    pub fn flush(&self) {
        let Some(sender) = &self.sender else { return };
        let (done, wait) = mpsc::channel();
        if sender.send(Message::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// The live sessions' continuity records (rendered when read, if stale).
    pub fn records(&self) -> &RecordCache {
        &self.records
    }

    /// A handle on them, for a reader in the same process.
    pub fn records_handle(&self) -> Arc<RecordCache> {
        self.records.clone()
    }

    /// The context directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for ContextLog {
    fn drop(&mut self) {
        // Closing the queue lets the writer drain it and stop (once the preload, which
        // holds a sender too, has seen `closing`).
        self.closing.store(true, Ordering::Relaxed);
        self.sender.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

struct Writer {
    queue: Arc<EventQueue>,
    /// The buffer of the batch before, handed back to the queue at the next take.
    emptied: Vec<u8>,
    live: LiveSessions,
    conn: Connection,
    counters: Arc<Counters>,
    observer: ObserverSlot,
    families: Families,
    retention: Retention,
    retention_every: Duration,
    idle_rebuild_after: Duration,
}

impl Writer {
    fn run(mut self, receiver: Receiver<Message>) {
        let mut retention_due = Instant::now() + self.retention_every;
        let mut forget_checked = Instant::now();
        let started = Instant::now();
        let mut last_commit: Option<Instant> = None;
        loop {
            let mut wait = retention_due
                .saturating_duration_since(Instant::now())
                .min(FORGET_CHECK_EVERY);
            if self.live.has_idle_due() {
                let idle_due = last_commit.unwrap_or(started) + self.idle_rebuild_after;
                wait = wait.min(idle_due.saturating_duration_since(Instant::now()));
            }
            let first = match receiver.recv_timeout(wait) {
                Ok(message) => message,
                Err(RecvTimeoutError::Timeout) => {
                    if last_commit.unwrap_or(started).elapsed() >= self.idle_rebuild_after {
                        self.live.render_idle();
                    }
                    if Instant::now() >= retention_due {
                        self.retain();
                        retention_due = Instant::now() + self.retention_every;
                    }
                    self.live.check_forgotten(&self.conn);
                    forget_checked = Instant::now();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // The log is closing: what was queued last is written.
                    self.write(Vec::new());
                    break;
                }
            };
            // The messages that come until the batch is due; the events are what the
            // queue holds then.
            let messages = batch::gather(
                &receiver,
                first,
                batch::due_after(last_commit),
                MAX_MESSAGES,
                |message| matches!(message, Message::Flush(_)),
            );
            self.write(messages);
            last_commit = Some(Instant::now());
            if forget_checked.elapsed() >= FORGET_CHECK_EVERY {
                // A busy writer checks here, an idle one on its timeout.
                self.live.check_forgotten(&self.conn);
                forget_checked = Instant::now();
            }
            if Instant::now() >= retention_due {
                self.retain();
                retention_due = Instant::now() + self.retention_every;
            }
        }
    }

    /// Write what the queue holds, then act on `messages` (taken after it was due: a
    /// flush is answered once everything queued before it is committed).
    fn write(&mut self, messages: Vec<Message>) {
        let mut flushes = Vec::new();
        let mut preloaded = Vec::new();
        for message in messages {
            match message {
                Message::Wake => {}
                Message::Flush(done) => flushes.push(done),
                Message::Preloaded(session, live) => preloaded.push((session, *live)),
            }
        }
        let bytes = self.queue.take(std::mem::take(&mut self.emptied));
        let mut rows = Vec::new();
        let observed = self.observer.get().is_some();
        let mut activity: Vec<Activity> = Vec::new();
        for event in queue::events(&bytes) {
            let mut event = match event {
                Ok(event) => Box::new(event),
                Err(error) => {
                    // Never expected (the bytes were packed in this process): counted
                    // and told by a gap event like any other loss.
                    self.counters.lost(1);
                    tracing::warn!(error = %error.0, "context: a queued event does not read back");
                    continue;
                }
            };
            // Keys out before anything of the event is stored or folded (off the
            // request path: the writer's thread does it).
            event.body.redact_keys();
            let (family, began) = self.families.assign(&self.conn, &event);
            if observed {
                note_activity(&mut activity, &event, began);
            }
            rows.push((family, event));
        }
        self.emptied = bytes;
        let unreported = self.counters.unreported.swap(0, Ordering::Relaxed);
        if unreported > 0 {
            rows.push((
                None,
                Box::new(Event {
                    at_ms: crate::now_ms(),
                    session: None,
                    body: EventBody::Gap {
                        dropped: unreported,
                    },
                }),
            ));
        }
        if !rows.is_empty() {
            match store::append(&mut self.conn, &rows) {
                Ok(ids) => {
                    self.counters
                        .written
                        .fetch_add(ids.len() as u64, Ordering::Relaxed);
                    self.live.committed(&self.conn, rows, &ids);
                    if let Some(observer) = self.observer.get()
                        && !activity.is_empty()
                    {
                        observer.committed(&activity);
                    }
                    if unreported > 0 {
                        self.counters.gaps.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            dropped = unreported,
                            "context log fell behind; the loss is logged as a gap event"
                        );
                    }
                }
                Err(error) => {
                    // Lost with this batch: counted, and told by the next gap event that
                    // can be written.
                    let lost = rows.len() as u64 - u64::from(unreported > 0);
                    self.counters.lost(lost);
                    // The gap event that did not go in is owed again.
                    self.counters
                        .unreported
                        .fetch_add(unreported, Ordering::Relaxed);
                    tracing::warn!(%error, lost, "context log write failed");
                }
            }
        }
        // After this batch's events: a session they touched is held whole already.
        if !preloaded.is_empty() {
            self.live.preloaded(&self.conn, preloaded);
        }
        // Everything committed so far is in the folds: a read after the flush renders it.
        for done in flushes {
            let _ = done.send(());
        }
    }

    fn retain(&mut self) {
        match store::apply_retention(&mut self.conn, self.retention, crate::now_ms()) {
            Ok(0) => {}
            Ok(_) => self.live.revalidate(&self.conn),
            Err(error) => tracing::warn!(%error, "context retention failed"),
        }
    }
}

/// Add `event`'s session to `activity` (once per batch; an ended episode is kept).
/// Only requests and replies count: the summarizer's own compaction events must not
/// make a session look active again.
fn note_activity(activity: &mut Vec<Activity>, event: &Event, began_family: bool) {
    if !matches!(event.body, EventBody::Request(_) | EventBody::Reply(_)) {
        return;
    }
    let Some(session) = event.session.as_deref() else {
        return;
    };
    match activity.iter_mut().find(|a| a.session == session) {
        Some(seen) => seen.episode_ended |= began_family,
        None => activity.push(Activity {
            session: session.to_owned(),
            episode_ended: began_family,
        }),
    }
}

/// Turn families: an episode begins at a root request (the user's own text) and every
/// later request and reply of the session belongs to it — tool loops, titles, and a
/// subagent's prompt, which arrives while the family still waits on a tool's result.
#[derive(Default)]
struct Families {
    /// Request key → its family, until its reply comes (`None`: the request began it,
    /// so its reply takes the key itself as the family, and nothing is copied for it).
    by_request: HashMap<String, Option<String>>,
    /// Each session's state (its current family, calls awaiting results), in
    /// hashbrown's own map for its `entry_ref`: a known session is found with one
    /// lookup, and a new one's key is copied only when it is put in.
    sessions: hashbrown::HashMap<String, SessionState, foldhash::fast::RandomState>,
}

#[derive(Default)]
struct SessionState {
    current: Option<String>,
    /// Tool call ids of replies whose results the CLI has not sent yet.
    awaiting: Vec<String>,
}

/// Most awaited calls remembered per session.
const MAX_AWAITING: usize = 256;

impl Families {
    /// The event's family, and whether it began a new one after an earlier family of
    /// its session (so that earlier episode ended).
    fn assign(&mut self, conn: &Connection, event: &Event) -> (Option<String>, bool) {
        let Some(session) = event.session.as_deref() else {
            return (None, false);
        };
        if self.sessions.len() >= MAX_SESSIONS && !self.sessions.contains_key(session) {
            self.sessions.clear();
        }
        if self.by_request.len() >= MAX_OPEN_REQUESTS {
            self.by_request.clear();
        }
        let state = self.sessions.entry_ref(session).or_default();
        if state.current.is_none() {
            // After a restart: continue the session's newest family.
            state.current = store::last_family(conn, session).ok().flatten();
        }
        match &event.body {
            EventBody::Request(request) => {
                for result in &request.tool_results {
                    state.awaiting.retain(|id| *id != result.call_id);
                }
                let (family, began) =
                    match (&state.current, request.root && state.awaiting.is_empty()) {
                        (Some(current), false) => (current.clone(), false),
                        (current, _) => (request.request.clone(), current.is_some()),
                    };
                // A family the request began is its own key, which the reply takes back.
                let of_reply = (family != request.request).then(|| family.clone());
                self.by_request.insert(request.request.clone(), of_reply);
                state.current = Some(family.clone());
                (Some(family), began)
            }
            EventBody::Reply(reply) => {
                if reply.status == Some(200) {
                    state
                        .awaiting
                        .extend(reply.tool_calls.iter().map(|c| c.id.clone()));
                    let excess = state.awaiting.len().saturating_sub(MAX_AWAITING);
                    state.awaiting.drain(..excess);
                }
                let family = match self.by_request.remove_entry(&reply.request) {
                    Some((key, None)) => Some(key),
                    Some((_, family)) => family,
                    None => state.current.clone(),
                };
                (family, false)
            }
            _ => (state.current.clone(), false),
        }
    }
}
