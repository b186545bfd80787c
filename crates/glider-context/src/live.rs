//! The continuity records of live sessions, in memory, for the request path. The log's
//! writer keeps an incremental fold ([`Folder`]) of each session it wrote for recently
//! and feeds it every committed event; the fold and its rendered record sit together in
//! one [`RecordCache`] slot, found without a lock or a query (an `ArcSwap` of the map).
//! A commit only marks the session's record stale; it is rendered when something reads
//! it ([`RecordCache::get`]: a local request's bounded context, the compaction answered
//! from the record, the dashboard and REST through the server) — on the reader's
//! thread, from memory, with every committed event in it — or by the writer once it has
//! idled for `idle_rebuild_after` after an event other than a request, so that the next
//! read usually finds it current. A render is kept until the session's next event:
//! however many events a busy session commits, its record is rendered at most once per
//! read. A session the writer has not seen since start is loaded from the database
//! once, on its first new event; at start, the most recently active sessions are loaded
//! on a thread of their own ([`preload`]) and handed to the writer, which renders them
//! when it first idles, so the first request of a session after a restart finds its
//! record current. A forget (by
//! the dashboard or by `glider context forget` from another process, seen within a
//! second as a commit by another connection) and retention make the writer reload or
//! drop what it holds.

use foldhash::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use arc_swap::ArcSwap;
use rusqlite::Connection;

use crate::event::{Event, EventBody};
use crate::graph::Folder;
use crate::own::{Match, is_own};
use crate::record::ContinuityRecord;
use crate::store::{self, StoreError};

/// Sessions whose fold is kept in memory; past it the least recently written one is
/// let go (its record is rebuilt from the database on its next event).
pub const MAX_LIVE_SESSIONS: usize = 256;

/// The live sessions' folds and rendered records, which the request path reads.
#[derive(Default)]
pub struct RecordCache {
    slots: ArcSwap<HashMap<String, Arc<Slot>>>,
    /// The token budget of each rendered record (`context.record_max_tokens`).
    max_tokens: u64,
    /// Records rendered since start, by readers and by the idle writer.
    renders: AtomicU64,
}

impl std::fmt::Debug for RecordCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordCache")
            .field("sessions", &self.len())
            .finish()
    }
}

impl RecordCache {
    /// An empty cache rendering records within `max_tokens`.
    pub(crate) fn new(max_tokens: u64) -> RecordCache {
        RecordCache {
            max_tokens,
            ..RecordCache::default()
        }
    }

    /// `session`'s rendered record with every committed event of it (`None` when the
    /// writer holds no fold of it, or nothing in it is worth telling a model yet).
    /// Rendered here, from memory, when events came since the last render.
    pub fn get(&self, session: &str) -> Option<Arc<str>> {
        let slot = self.slots.load().get(session).cloned()?;
        self.rendered(&slot)
    }

    /// [`RecordCache::get`] for a request whose root user messages have the digests
    /// `request` ([`crate::own::request_roots`]): `None` also when the session's
    /// stored episodes are not the request's own under `rule` ([`crate::own::is_own`]),
    /// checked under the same lock as the render, against the same fold.
    pub fn get_own(&self, session: &str, request: &[u64], rule: Match) -> Option<Arc<str>> {
        let slot = self.slots.load().get(session).cloned()?;
        let mut state = slot.lock();
        if !is_own(state.folder.roots(), request, rule) {
            return None;
        }
        self.render(&slot.session, &mut state)
    }

    /// Whether the writer holds a fold of `session` (renders nothing).
    pub fn holds(&self, session: &str) -> bool {
        self.slots.load().contains_key(session)
    }

    /// Whether `session` is held and its record rendered since its last event: a read
    /// now renders nothing.
    pub fn is_current(&self, session: &str) -> bool {
        self.slots
            .load()
            .get(session)
            .is_some_and(|slot| slot.lock().rendered.is_some())
    }

    /// Records rendered since start (by reads and by the idle writer).
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    /// Sessions held.
    pub fn len(&self) -> usize {
        self.slots.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `slot`'s record, rendered first if it is stale.
    fn rendered(&self, slot: &Slot) -> Option<Arc<str>> {
        self.render(&slot.session, &mut slot.lock())
    }

    /// The record of `session` in `state`, rendered first if it is stale.
    fn render(&self, session: &str, state: &mut SlotState) -> Option<Arc<str>> {
        if let Some(current) = &state.rendered {
            return current.clone();
        }
        let record = ContinuityRecord::of_folder_within(session, &state.folder, self.max_tokens);
        let text = (!record.is_empty()).then(|| Arc::from(record.into_text(self.max_tokens)));
        self.renders.fetch_add(1, Ordering::Relaxed);
        state.rendered = Some(text.clone());
        text
    }

    /// Swap in the map with `added` slots put in and `gone` sessions taken out.
    fn publish(&self, added: Vec<(String, Arc<Slot>)>, gone: &[String]) {
        if added.is_empty() && gone.is_empty() {
            return;
        }
        let mut map = HashMap::clone(&self.slots.load());
        for session in gone {
            map.remove(session);
        }
        map.extend(added);
        self.slots.store(Arc::new(map));
    }
}

/// One session's fold and the record last rendered from it. The writer locks it to
/// feed an event (briefly); a reader locks it to render a stale record, so the writer
/// waits on a render only when it feeds that same session meanwhile.
pub(crate) struct Slot {
    session: String,
    state: Mutex<SlotState>,
}

struct SlotState {
    folder: Folder,
    /// The record rendered from `folder` as it is now (its inner `None`: nothing worth
    /// telling yet); `None` when events were fed since: stale.
    rendered: Option<Option<Arc<str>>>,
}

impl Slot {
    fn new(session: &str, folder: Folder) -> Arc<Slot> {
        Arc::new(Slot {
            session: session.to_owned(),
            state: Mutex::new(SlotState {
                folder,
                rendered: None,
            }),
        })
    }

    /// The state; a reader that panicked mid-render left at worst a stale record,
    /// which the next read renders again.
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One session's fold, as the writer holds it.
pub(crate) struct Live {
    slot: Arc<Slot>,
    /// The newest event id folded.
    last_id: i64,
    /// When it was last written for (a counter), for letting the oldest go.
    used: u64,
}

/// The writer's side: the folds and the cache they are published in.
pub(crate) struct LiveSessions {
    sessions: HashMap<String, Live>,
    cache: Arc<RecordCache>,
    tick: u64,
    /// The connection's `data_version` when last checked: another connection (a
    /// forget) committed when it changed.
    data_version: i64,
    /// Sessions an event other than a request made stale, for the writer to render
    /// when it idles. A request alone does not: its reply, normally a moment later,
    /// changes the record again, and a read meanwhile renders it anyway.
    idle_due: Vec<String>,
}

impl LiveSessions {
    pub(crate) fn new(conn: &Connection, cache: Arc<RecordCache>) -> Self {
        LiveSessions {
            sessions: HashMap::default(),
            cache,
            tick: 0,
            data_version: store::data_version(conn).unwrap_or(0),
            idle_due: Vec::new(),
        }
    }

    /// `rows` were committed with `ids`: feed them to their sessions' folds (which
    /// take what they keep of them), which marks those records stale. Nothing is
    /// rendered here.
    pub(crate) fn committed(
        &mut self,
        conn: &Connection,
        rows: Vec<(Option<String>, Box<Event>)>,
        ids: &[i64],
    ) {
        let mut rows = rows.into_iter().zip(ids).peekable();
        while let Some(((family, mut event), &id)) = rows.next() {
            // Taken from the run's first event: the session is kept below.
            let Some(owned_session) = event.session.take() else {
                continue;
            };
            let session = owned_session.as_str();
            self.tick += 1;
            if !self.sessions.contains_key(session) {
                // Loaded whole, this event included (it is committed).
                match load(conn, session) {
                    Ok(live) => self.admit(vec![(session.to_owned(), live)]),
                    Err(error) => {
                        tracing::warn!(%error, "context: cannot load a session's record");
                        continue;
                    }
                }
            }
            let Some(live) = self.sessions.get_mut(session) else {
                continue;
            };
            // The events right after it of the same session (a busy session's, side
            // by side in a batch) are fed with it: one lookup and one lock for them all
            // (a reader rendering this session waits for the run, at most a batch).
            let mut state = live.slot.lock();
            let mut only_requests = true;
            let mut next = Some((family, event, id));
            while let Some((family, event, id)) = next.take() {
                only_requests &= matches!(event.body, EventBody::Request(_));
                if id > live.last_id {
                    state.folder.feed_owned(event, family);
                    state.rendered = None;
                    live.last_id = id;
                }
                next = rows
                    .next_if(|((_, following), _)| following.session.as_deref() == Some(session))
                    .map(|((family, event), &id)| (family, event, id));
            }
            drop(state);
            live.used = self.tick;
            if !only_requests && !self.idle_due.iter().any(|s| s == session) {
                self.idle_due.push(owned_session);
            }
        }
    }

    /// Whether a stale record waits for the writer to idle.
    pub(crate) fn has_idle_due(&self) -> bool {
        !self.idle_due.is_empty()
    }

    /// The writer is idle: render the records that wait for it (one already rendered
    /// by a read costs nothing).
    pub(crate) fn render_idle(&mut self) {
        for session in std::mem::take(&mut self.idle_due) {
            if let Some(live) = self.sessions.get(&session) {
                self.cache.rendered(&live.slot);
            }
        }
    }

    /// Periodically: if another connection changed the database (a forget: the
    /// writer is the only other writer), reload what is held
    /// ([`LiveSessions::revalidate`]).
    pub(crate) fn check_forgotten(&mut self, conn: &Connection) {
        match store::data_version(conn) {
            Ok(version) if version != self.data_version => {
                self.data_version = version;
                self.revalidate(conn);
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "context: cannot check for forgotten sessions"),
        }
    }

    /// Events were deleted (a forget, retention): each held session whose newest event
    /// is no longer the one folded is reloaded, or dropped when nothing of it is left.
    pub(crate) fn revalidate(&mut self, conn: &Connection) {
        let mut reloaded = Vec::new();
        let mut gone = Vec::new();
        let sessions: Vec<(String, i64)> = self
            .sessions
            .iter()
            .map(|(s, l)| (s.clone(), l.last_id))
            .collect();
        for (session, last_id) in sessions {
            match store::last_id(conn, &session) {
                Ok(Some(id)) if id == last_id => continue,
                Ok(Some(_)) => match load(conn, &session) {
                    Ok(mut live) => {
                        live.used = self.sessions.get(&session).map_or(0, |l| l.used);
                        reloaded.push((session.clone(), live.slot.clone()));
                        self.sessions.insert(session, live);
                    }
                    Err(_) => gone.push(session),
                },
                Ok(None) | Err(_) => gone.push(session),
            }
        }
        for session in &gone {
            self.sessions.remove(session);
        }
        self.idle_due.retain(|s| !gone.contains(s));
        self.cache.publish(reloaded, &gone);
    }

    /// `batch` was folded from the database at start by [`preload`]. A
    /// session held already (an event of it came first, and the writer loaded it
    /// whole), or one past the room left, is passed over. Events deleted since it was
    /// read (a forget, retention) make it read again; none left, it is dropped. Those
    /// taken are published together, in one swap of the map, and rendered when the
    /// writer idles (or read first).
    pub(crate) fn preloaded(&mut self, conn: &Connection, batch: Vec<(String, Live)>) {
        let mut admitted = Vec::new();
        for (session, live) in batch {
            if self.sessions.contains_key(&session)
                || self.sessions.len() + admitted.len() >= MAX_LIVE_SESSIONS
                || admitted.iter().any(|(s, _)| *s == session)
            {
                continue;
            }
            let live = match store::last_id(conn, &session) {
                Ok(Some(id)) if id == live.last_id => live,
                Ok(Some(_)) => match load(conn, &session) {
                    Ok(live) => live,
                    Err(error) => {
                        tracing::warn!(%error, "context: cannot load a session's record");
                        continue;
                    }
                },
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(%error, "context: cannot check a preloaded session");
                    continue;
                }
            };
            admitted.push((session, live));
        }
        for (session, _) in &admitted {
            if !self.idle_due.contains(session) {
                self.idle_due.push(session.clone());
            }
        }
        self.admit(admitted);
    }

    /// Hold `lives` and publish their slots in one swap, letting the least recently
    /// written sessions go to make room.
    fn admit(&mut self, lives: Vec<(String, Live)>) {
        if lives.is_empty() {
            return;
        }
        let mut evicted = Vec::new();
        while self.sessions.len() + lives.len() > MAX_LIVE_SESSIONS {
            let Some(oldest) = self
                .sessions
                .iter()
                .min_by_key(|(_, l)| l.used)
                .map(|(s, _)| s.clone())
            else {
                break;
            };
            self.sessions.remove(&oldest);
            evicted.push(oldest);
        }
        self.idle_due.retain(|s| !evicted.contains(s));
        let added = lives
            .iter()
            .map(|(session, live)| (session.clone(), live.slot.clone()))
            .collect();
        self.sessions.extend(lives);
        self.cache.publish(added, &evicted);
    }
}

/// Fold `session` from the database.
fn load(conn: &Connection, session: &str) -> Result<Live, StoreError> {
    // A page at a time: a long session's events are never all held at once.
    let mut folder = Folder::live(session);
    let mut last_id = 0;
    store::each_page_after(conn, Some(session), i64::MIN, store::PAGE_EVENTS, |page| {
        for stored in page {
            folder.feed(stored);
        }
        last_id = page.last().map_or(last_id, |e| e.id);
        std::ops::ControlFlow::Continue(())
    })?;
    Ok(Live {
        slot: Slot::new(session, folder),
        last_id,
        used: 0,
    })
}

/// At start: fold the `limit` most recently active sessions of the
/// database in `dir` (its own connection, off the writer's thread and the request
/// path) and hand each to `deliver`, newest first, until it refuses one or `closing`
/// is set. A session the writer holds in `held` already (an event of it came first)
/// is not read: the writer would pass it over.
pub(crate) fn preload(
    dir: &Path,
    limit: usize,
    closing: &AtomicBool,
    held: &RecordCache,
    mut deliver: impl FnMut(String, Live) -> bool,
) {
    let began = Instant::now();
    let loaded = (|| -> Result<usize, StoreError> {
        let Some(conn) = store::open_existing(dir)? else {
            return Ok(0);
        };
        let mut loaded = 0;
        for session in store::recent_sessions(&conn, limit)? {
            if closing.load(Ordering::Relaxed) {
                break;
            }
            if held.holds(&session) {
                continue;
            }
            let live = load(&conn, &session)?;
            if !deliver(session, live) {
                break;
            }
            loaded += 1;
        }
        Ok(loaded)
    })();
    match loaded {
        Ok(0) => {}
        Ok(sessions) => tracing::info!(
            sessions,
            took_ms = began.elapsed().as_millis() as u64,
            "context: the records of recent sessions are loaded"
        ),
        Err(error) => tracing::warn!(
            %error,
            "context: cannot load recent sessions' records; each is loaded on its next event"
        ),
    }
}
