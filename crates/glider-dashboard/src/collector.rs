//! The collector (spec package `metrics`): the one reader of the engine's bus. For each
//! event it updates the metrics, the in-memory recent list, the WebSocket hub and the
//! history queue, none of which can block. A second task watches backend state and
//! publishes its changes on the bus, so breaker moves driven by time show up too; a
//! third tells `/ws` which context sessions changed; and at start the ledger is seeded
//! from the history.

use glider_sys::safego::{self, Restart};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use glider_engine::{BackendState, PipelineEvent, RequestRecord};
use serde::Serialize;
use tokio::sync::broadcast::{self, error::RecvError};

use crate::Shared;
use crate::history::Line;
use crate::ws::WsEvent;

/// A request still in flight is forgotten after this long without its end (its
/// `request_finished` was lost to a lagging bus).
const IN_FLIGHT_MAX_AGE_MS: u64 = 3_600_000;

/// A finished request as the history, `/api/requests` and `/ws` carry it: the record
/// with its sequence number (monotonic across restarts).
#[derive(Serialize)]
pub struct Entry<'a> {
    pub seq: u64,
    #[serde(flatten)]
    pub record: &'a RequestRecord,
}

/// A finished request as the in-memory list keeps it: its [`Entry`]'s sequence number
/// and JSON text, serialized once (the history file gets the same text); parsed only
/// when `GET /api/requests` reads it.
#[derive(Debug, Clone)]
pub struct Finished {
    pub seq: u64,
    pub json: Arc<str>,
}

/// Recent finished requests (newest last) and the ones in flight.
pub struct Recent {
    pub finished: VecDeque<Finished>,
    pub in_flight: BTreeMap<u64, RequestRecord>,
    capacity: usize,
}

impl Recent {
    /// Start from entries read back from the history as text (newest first).
    pub fn seeded(newest_first: Vec<(u64, String)>, capacity: usize) -> Recent {
        Recent {
            finished: newest_first
                .into_iter()
                .rev()
                .map(|(seq, json)| Finished {
                    seq,
                    json: json.into(),
                })
                .collect(),
            in_flight: BTreeMap::new(),
            capacity: capacity.max(1),
        }
    }

    fn push(&mut self, entry: Finished) {
        if self.finished.len() >= self.capacity {
            self.finished.pop_front();
        }
        self.finished.push_back(entry);
    }

    fn start(&mut self, record: &RequestRecord) {
        if self.in_flight.len() >= 1024 {
            let cutoff = crate::unix_ms().saturating_sub(IN_FLIGHT_MAX_AGE_MS);
            self.in_flight.retain(|_, r| r.started_at_ms >= cutoff);
        }
        self.in_flight.insert(record.id, record.clone());
    }
}

/// Read the bus until the dashboard is dropped or closed.
pub fn spawn_collector(
    shared: &Arc<Shared>,
    mut events: broadcast::Receiver<Arc<PipelineEvent>>,
) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(shared);
    glider_sys::safego::spawn_once("dashboard collector", async move {
        loop {
            let received = events.recv().await;
            let Some(shared) = weak.upgrade() else { break };
            match received {
                Ok(event) => handle(&shared, &event),
                Err(RecvError::Lagged(missed)) => {
                    // The bus dropped its oldest events for us: count them and tell the
                    // live clients, whose view now has a hole.
                    let total = shared.bus_lagged.fetch_add(missed, Ordering::Relaxed) + missed;
                    shared.metrics.dropped("bus", missed);
                    broadcast_event(
                        &shared,
                        &WsEvent::Dropped {
                            source: "bus",
                            count: missed,
                            total,
                        },
                    );
                }
                Err(RecvError::Closed) => break,
            }
        }
    })
}

fn handle(shared: &Shared, event: &PipelineEvent) {
    match event {
        PipelineEvent::RequestStarted(record) => {
            shared.metrics.started();
            lock(&shared.recent).start(record);
            broadcast_event(shared, &WsEvent::RequestStarted { request: record });
        }
        PipelineEvent::RequestFinished(record) => {
            let was_in_flight = lock(&shared.recent).in_flight.remove(&record.id).is_some();
            shared.metrics.finished(
                record,
                was_in_flight,
                &shared.engine.runtime().config.pricing,
            );
            let seq = shared.last_seq.fetch_add(1, Ordering::Relaxed) + 1;
            let entry = Entry { seq, record };
            // Serialized once: the history file and the in-memory list share the text.
            // Keys out once, in the line: the list, the file and `/ws` share it.
            let line = Line::new(
                record.started_at_ms + record.total_ms.unwrap_or(0),
                serde_json::to_string(&entry).unwrap_or_else(|_| "null".into()),
            );
            let json = line.json.clone();
            shared.history.append(line);
            broadcast_event(shared, &WsEvent::RequestFinished { request: &entry });
            lock(&shared.recent).push(Finished { seq, json });
        }
        PipelineEvent::ShadowSampled(sample) => {
            shared.metrics.shadow_sampled(sample);
            shared.shadow.add(sample);
        }
        PipelineEvent::BackendStateChanged(state) => {
            broadcast_event(shared, &WsEvent::BackendStateChanged { backend: state });
        }
        PipelineEvent::ConfigReloaded { at_ms, backends } => {
            broadcast_event(
                shared,
                &WsEvent::ConfigReloaded {
                    at_ms: *at_ms,
                    backends,
                },
            );
        }
    }
}

/// Serialize once and hand to every socket (a socket that is behind loses the oldest).
pub fn broadcast_event(shared: &Shared, event: &WsEvent) {
    if shared.hub.receiver_count() == 0 {
        return;
    }
    if let Ok(mut text) = serde_json::to_string(event) {
        // A finished request's tool calls may quote a prompt: no key goes out live.
        glider_sys::secrets::redact_keys_in(&mut text);
        let _ = shared.hub.send(text.into());
    }
}

/// Compare every backend's state with the last one seen and publish the changes on
/// the bus, every `poll_interval`.
pub fn spawn_backend_watch(shared: &Arc<Shared>) -> tokio::task::JoinHandle<()> {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    let interval = shared.options.poll_interval;
    safego::spawn_named("backend watch", Restart::BACKOFF, move || {
        let weak = weak.clone();
        async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(shared) = weak.upgrade() else { break };
                publish_backend_changes(&shared);
            }
        }
    })
}

/// Publish a `backend_state_changed` for each backend whose state differs from the last
/// published one (also called right after an operator action, for a prompt update).
pub fn publish_backend_changes(shared: &Shared) {
    let runtime = shared.engine.runtime();
    let mut known = lock(&shared.backend_states);
    let current: Vec<BackendState> = runtime
        .backends
        .iter()
        .map(|b| BackendState::of(b))
        .collect();
    known.retain(|name, _| current.iter().any(|s| &s.backend == name));
    for state in current {
        if known.get(&state.backend) != Some(&state) {
            known.insert(state.backend.clone(), state.clone());
            shared
                .engine
                .bus()
                .publish(PipelineEvent::BackendStateChanged(state));
        }
    }
}

pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Read the history of the last days (entries up to `through_seq`, the last one written
/// before this process began) into the ledger, a chunk at a time, off the runtime's
/// threads. `/api/status` says when it is done.
pub fn spawn_ledger_seed(shared: &Arc<Shared>, through_seq: u64) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(shared);
    let dir = shared.history.options.dir.clone();
    tokio::task::spawn_blocking(move || {
        let since =
            crate::unix_ms().saturating_sub(crate::ledger::DAYS_KEPT * crate::ledger::DAY_MS);
        let mut chunk = Vec::with_capacity(crate::ledger::SEED_CHUNK);
        let flush = |chunk: &mut Vec<crate::ledger::Row>| -> bool {
            let Some(shared) = weak.upgrade() else {
                return false;
            };
            let pricing = shared.engine.runtime().config.pricing.clone();
            shared.metrics.seed(chunk, &pricing);
            shared
                .ledger_seeded_rows
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            chunk.clear();
            true
        };
        let mut alive = true;
        crate::history::for_each_since(&dir, since, |line| {
            if line.seq <= through_seq {
                chunk.push(line.row);
            }
            if chunk.len() >= crate::ledger::SEED_CHUNK {
                alive = flush(&mut chunk);
            }
            alive
        });
        if alive
            && flush(&mut chunk)
            && let Some(shared) = weak.upgrade()
        {
            shared.ledger_seeded.store(true, Ordering::Release);
        }
    })
}

/// How often the context log is looked at for sessions that changed: the most a
/// session's `/ws` event can lag, and the most often one is sent per session.
pub const SESSION_POLL: Duration = Duration::from_secs(1);

/// Send a `session` event on `/ws` for each context session that changed since the
/// last look (new events, or forgotten). The log is read once at start, then only when
/// something was written or forgotten while a socket listens; changes made while none
/// listened are told to the next listener.
pub fn spawn_session_watch(shared: &Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    let surface = shared.options.context.clone()?;
    let weak: Weak<Shared> = Arc::downgrade(shared);
    Some(safego::spawn_named(
        "session watch",
        Restart::BACKOFF,
        move || {
            let (surface, weak) = (surface.clone(), weak.clone());
            async move {
                let mut tick = tokio::time::interval(SESSION_POLL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut known: Option<BTreeMap<String, (u64, u64)>> = None;
                let mut seen_marks = None;
                loop {
                    tick.tick().await;
                    let Some(shared) = weak.upgrade() else { break };
                    let marks = (
                        surface.counters.written.load(Ordering::Relaxed),
                        shared.sessions_forgotten.load(Ordering::Relaxed),
                    );
                    let listening = shared.hub.receiver_count() > 0;
                    if known.is_some() && (seen_marks == Some(marks) || !listening) {
                        continue;
                    }
                    let reader = surface.reader.clone();
                    let Ok(Ok(rows)) = tokio::task::spawn_blocking(move || reader.sessions()).await
                    else {
                        continue;
                    };
                    seen_marks = Some(marks);
                    let now: BTreeMap<String, (u64, u64)> = rows
                        .iter()
                        .map(|row| (row.session.clone(), (row.last_ms, row.events)))
                        .collect();
                    if let Some(before) = &known {
                        for row in &rows {
                            if before.get(&row.session) != now.get(&row.session) {
                                broadcast_event(
                                    &shared,
                                    &WsEvent::Session {
                                        session: &row.session,
                                        change: "updated",
                                        summary: Some(row),
                                    },
                                );
                            }
                        }
                        for gone in before.keys().filter(|s| !now.contains_key(*s)) {
                            broadcast_event(
                                &shared,
                                &WsEvent::Session {
                                    session: gone,
                                    change: "forgotten",
                                    summary: None,
                                },
                            );
                        }
                    }
                    known = Some(now);
                }
            }
        },
    ))
}
