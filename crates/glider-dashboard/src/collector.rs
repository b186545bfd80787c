//! The collector (spec package `metrics`): the one reader of the engine's bus. For each
//! event it updates the metrics, the in-memory recent list, the WebSocket hub and the
//! history queue, none of which can block. A second task watches backend state and
//! publishes its changes on the bus, so breaker moves driven by time show up too.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use glider_engine::{BackendState, PipelineEvent, RequestRecord};
use serde::Serialize;
use serde_json::Value;
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

/// Recent finished requests (newest last) and the ones in flight.
pub struct Recent {
    pub finished: VecDeque<Value>,
    pub in_flight: BTreeMap<u64, RequestRecord>,
    capacity: usize,
}

impl Recent {
    /// Start from entries read back from the history (newest first).
    pub fn seeded(newest_first: Vec<Value>, capacity: usize) -> Recent {
        Recent {
            finished: newest_first.into_iter().rev().collect(),
            in_flight: BTreeMap::new(),
            capacity: capacity.max(1),
        }
    }

    fn push(&mut self, entry: Value) {
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
    tokio::spawn(async move {
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
            shared.metrics.finished(record, was_in_flight);
            let seq = shared.last_seq.fetch_add(1, Ordering::Relaxed) + 1;
            let entry = Entry { seq, record };
            let value = serde_json::to_value(&entry).unwrap_or(Value::Null);
            let json = value.to_string();
            shared.history.append(Line {
                ended_at_ms: record.started_at_ms + record.total_ms.unwrap_or(0),
                json,
            });
            broadcast_event(shared, &WsEvent::RequestFinished { request: &entry });
            lock(&shared.recent).push(value);
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
    if let Ok(text) = serde_json::to_string(event) {
        let _ = shared.hub.send(text.into());
    }
}

/// Compare every backend's state with the last one seen and publish the changes on
/// the bus, every `poll_interval`.
pub fn spawn_backend_watch(shared: &Arc<Shared>) -> tokio::task::JoinHandle<()> {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    let interval = shared.options.poll_interval;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(shared) = weak.upgrade() else { break };
            publish_backend_changes(&shared);
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
