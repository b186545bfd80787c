//! The continuity records of live sessions, in memory, for the request path. The log's
//! writer keeps an incremental fold ([`Folder`]) of each session it wrote for recently;
//! after each commit it feeds it the committed events, rebuilds the touched sessions'
//! records and publishes them in a [`RecordCache`], which a request reads without a
//! lock or a query (an `ArcSwap` of the map). A session the writer has not seen since
//! start is loaded from the database once, on its first new event; at start, the
//! records of the most recently active sessions are loaded on a thread of their own
//! ([`preload`]) and handed to the writer, so the first request of a session after a
//! restart carries its record. A forget (by the dashboard or by `glider context forget`
//! from another process, seen within a second as a commit by another connection) and
//! retention make the writer reload or drop what it holds.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rusqlite::Connection;

use crate::event::{Event, EventBody};
use crate::graph::Folder;
use crate::record::ContinuityRecord;
use crate::store::{self, StoreError};

/// Longest a session's record waits to be rebuilt after a request event alone (its
/// reply, which rebuilds it, normally comes first).
pub(crate) const DEFER_REQUEST_ONLY: Duration = Duration::from_millis(100);

/// Sessions whose fold is kept in memory; past it the least recently written one is
/// let go (its record is rebuilt from the database on its next event).
pub const MAX_LIVE_SESSIONS: usize = 256;

/// The rendered records the request path reads.
#[derive(Default)]
pub struct RecordCache {
    records: ArcSwap<HashMap<String, Arc<str>>>,
}

impl std::fmt::Debug for RecordCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordCache")
            .field("sessions", &self.len())
            .finish()
    }
}

impl RecordCache {
    /// `session`'s rendered record, if the writer holds one.
    pub fn get(&self, session: &str) -> Option<Arc<str>> {
        self.records.load().get(session).cloned()
    }

    /// Sessions with a record held.
    pub fn len(&self) -> usize {
        self.records.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One session's fold, as the writer holds it.
pub(crate) struct Live {
    folder: Folder,
    /// The newest event id folded.
    last_id: i64,
    /// When it was last written for (a counter), for letting the oldest go.
    used: u64,
}

/// The writer's side: the folds and the cache it publishes to.
pub(crate) struct LiveSessions {
    sessions: HashMap<String, Live>,
    cache: Arc<RecordCache>,
    max_tokens: u64,
    tick: u64,
    /// The connection's `data_version` when last checked: another connection (a
    /// forget) committed when it changed.
    data_version: i64,
    /// Since when the oldest waits, and the sessions folded whose record is not
    /// rebuilt yet ([`LiveSessions::committed`]); `None` when none waits.
    deferred: Option<(Instant, Vec<String>)>,
}

impl LiveSessions {
    pub(crate) fn new(conn: &Connection, cache: Arc<RecordCache>, max_tokens: u64) -> Self {
        LiveSessions {
            sessions: HashMap::new(),
            cache,
            max_tokens,
            tick: 0,
            data_version: store::data_version(conn).unwrap_or(0),
            deferred: None,
        }
    }

    /// `rows` were committed with `ids`: fold them into their sessions and publish the
    /// touched sessions' records. A session touched only by request events is
    /// deferred: its reply, a moment later, rebuilds the record once for both — a
    /// request reads the record its session had before it, so nothing reads the
    /// request's own fold sooner — and [`LiveSessions::publish_deferred`] rebuilds
    /// what still waits when the writer idles, flushes, or after
    /// [`DEFER_REQUEST_ONLY`].
    pub(crate) fn committed(
        &mut self,
        conn: &Connection,
        rows: &[(Option<String>, Event)],
        ids: &[i64],
    ) {
        let mut touched: Vec<String> = Vec::new();
        let mut deferred: Vec<String> = Vec::new();
        for ((family, event), &id) in rows.iter().zip(ids) {
            let Some(session) = event.session.as_deref() else {
                continue;
            };
            self.tick += 1;
            if !self.sessions.contains_key(session) {
                // Loaded whole, this event included (it is committed).
                match load(conn, session) {
                    Ok(live) => self.admit(session, live),
                    Err(error) => {
                        tracing::warn!(%error, "context: cannot load a session's record");
                        continue;
                    }
                }
            }
            let Some(live) = self.sessions.get_mut(session) else {
                continue;
            };
            if id > live.last_id {
                live.folder.feed_event(event, family.as_ref());
                live.last_id = id;
            }
            live.used = self.tick;
            let list = if matches!(event.body, EventBody::Request(_)) {
                &mut deferred
            } else {
                &mut touched
            };
            if !list.iter().any(|s| s == session) {
                list.push(session.to_owned());
            }
        }
        let (since, mut waiting) = self
            .deferred
            .take()
            .unwrap_or_else(|| (Instant::now(), Vec::new()));
        waiting.retain(|s| !touched.contains(s));
        for session in deferred {
            if !touched.contains(&session) && !waiting.contains(&session) {
                waiting.push(session);
            }
        }
        if !waiting.is_empty() {
            if since.elapsed() >= DEFER_REQUEST_ONLY {
                touched.append(&mut waiting);
            } else {
                self.deferred = Some((since, waiting));
            }
        }
        self.publish(&touched, &[]);
    }

    /// Whether a deferred record waits to be rebuilt.
    pub(crate) fn has_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// Rebuild the records whose rebuilding was deferred.
    pub(crate) fn publish_deferred(&mut self) {
        if let Some((_, deferred)) = self.deferred.take() {
            self.publish(&deferred, &[]);
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
        let mut touched = Vec::new();
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
                        self.sessions.insert(session.clone(), live);
                        touched.push(session);
                    }
                    Err(_) => gone.push(session),
                },
                Ok(None) | Err(_) => gone.push(session),
            }
        }
        for session in &gone {
            self.sessions.remove(session);
        }
        self.publish(&touched, &gone);
    }

    /// `batch` was folded from the database at start by [`preload`]. A session held
    /// already (an event of it came first, and the writer loaded it whole), or one
    /// past the room left, is passed over. Events deleted since it was read (a forget,
    /// retention) make it read again; none left, it is dropped. The records of those
    /// taken are published together, in one swap of the map.
    pub(crate) fn preloaded(&mut self, conn: &Connection, batch: Vec<(String, Live)>) {
        let mut admitted = Vec::new();
        for (session, live) in batch {
            if self.sessions.contains_key(&session) || self.sessions.len() >= MAX_LIVE_SESSIONS {
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
            self.admit(&session, live);
            admitted.push(session);
        }
        self.publish(&admitted, &[]);
    }

    fn admit(&mut self, session: &str, live: Live) {
        if self.sessions.len() >= MAX_LIVE_SESSIONS
            && let Some(oldest) = self
                .sessions
                .iter()
                .min_by_key(|(_, l)| l.used)
                .map(|(s, _)| s.clone())
        {
            self.sessions.remove(&oldest);
            self.publish(&[], &[oldest]);
        }
        self.sessions.insert(session.to_owned(), live);
    }

    /// Rebuild `touched` sessions' records, drop `gone` ones, and swap the new map in.
    fn publish(&self, touched: &[String], gone: &[String]) {
        if touched.is_empty() && gone.is_empty() {
            return;
        }
        let mut map = HashMap::clone(&self.cache.records.load());
        for session in gone {
            map.remove(session);
        }
        for session in touched {
            let Some(live) = self.sessions.get(session) else {
                continue;
            };
            let record = ContinuityRecord::of_folder(session, &live.folder);
            if record.is_empty() {
                map.remove(session);
            } else {
                map.insert(session.clone(), Arc::from(record.render(self.max_tokens)));
            }
        }
        self.cache.records.store(Arc::new(map));
    }
}

/// Fold `session` from the database.
fn load(conn: &Connection, session: &str) -> Result<Live, StoreError> {
    let events = store::events(conn, Some(session))?;
    let mut folder = Folder::new(session);
    for stored in &events {
        folder.feed(stored);
    }
    Ok(Live {
        folder,
        last_id: events.last().map_or(0, |e| e.id),
        used: 0,
    })
}

/// At start: fold the `limit` most recently active sessions of the database in `dir`
/// (its own connection, off the writer's thread and the request path) and hand each
/// to `deliver`, newest first, until it refuses one or `closing` is set. A session
/// whose record the writer publishes in `held` already (an event of it came first) is
/// not read: the writer would pass it over.
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
            if held.get(&session).is_some() {
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
