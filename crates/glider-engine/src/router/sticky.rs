//! The sticky rule: a session keeps an explicit choice (`/cloud`, `/local`, the header)
//! for its follow-on requests until it expires. Sessions are keyed by the session-key
//! rule ([`session_id`], `glider_vocab::session`: what clients really send, else a
//! digest of the conversation's start, scoped by the client's credential). The store is
//! bounded, and a live sticky-cloud choice is not replaced by a concurrent sticky-local.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::Target;

pub use glider_vocab::session::{CURSOR_CONVERSATION_HEADER, is_derived, session_id};

#[derive(Debug, Clone)]
struct Entry {
    target: Target,
    set_at: Instant,
    used_at: Instant,
}

/// What happened to a `set`.
#[derive(Debug, Clone, PartialEq)]
pub enum SetOutcome {
    Stored,
    /// A live sticky-cloud choice younger than the guard kept its place.
    KeptCloud,
}

/// Session → sticky target, bounded and expiring. Shared across config reloads.
#[derive(Debug, Default)]
pub struct StickyStore {
    entries: Mutex<HashMap<String, Entry>>,
}

impl StickyStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live target of `session`, refreshing its use time.
    pub fn get(&self, session: &str, ttl: Duration) -> Option<(Target, Duration)> {
        let now = Instant::now();
        let mut entries = self.lock();
        let entry = entries.get_mut(session)?;
        if now.duration_since(entry.used_at) > ttl {
            entries.remove(session);
            return None;
        }
        entry.used_at = now;
        Some((entry.target.clone(), now.duration_since(entry.set_at)))
    }

    /// Remember `target` for `session`, unless that would replace a sticky-cloud
    /// choice made less than `cloud_guard` ago with a local one.
    pub fn set(
        &self,
        session: &str,
        target: Target,
        ttl: Duration,
        cloud_guard: Duration,
        max: usize,
    ) -> SetOutcome {
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(current) = entries.get(session)
            && current.target == Target::Cloud
            && target != Target::Cloud
            && now.duration_since(current.set_at) < cloud_guard
            && now.duration_since(current.used_at) <= ttl
        {
            return SetOutcome::KeptCloud;
        }
        if entries.len() >= max && !entries.contains_key(session) {
            entries.retain(|_, e| now.duration_since(e.used_at) <= ttl);
            if entries.len() >= max
                && let Some(oldest) = entries
                    .iter()
                    .min_by_key(|(_, e)| e.used_at)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(
            session.to_owned(),
            Entry {
                target,
                set_at: now,
                used_at: now,
            },
        );
        SetOutcome::Stored
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const TTL: Duration = Duration::from_secs(60);
    const GUARD: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn choices_expire_after_the_ttl_of_disuse() {
        let store = StickyStore::default();
        store.set("s", Target::Cloud, TTL, GUARD, 10);
        tokio::time::advance(Duration::from_secs(50)).await;
        assert_eq!(store.get("s", TTL).map(|(t, _)| t), Some(Target::Cloud));
        tokio::time::advance(Duration::from_secs(50)).await;
        assert_eq!(
            store.get("s", TTL).map(|(t, _)| t),
            Some(Target::Cloud),
            "use refreshed it"
        );
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(store.get("s", TTL), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_store_is_bounded() {
        let store = StickyStore::default();
        for i in 0..10 {
            store.set(&format!("s{i}"), Target::Local, TTL, GUARD, 4);
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(store.len(), 4);
        assert!(store.get("s9", TTL).is_some());
        assert!(
            store.get("s0", TTL).is_none(),
            "the least recently used went first"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_live_sticky_cloud_is_not_replaced_by_a_concurrent_local() {
        let store = StickyStore::default();
        assert_eq!(
            store.set("s", Target::Cloud, TTL, GUARD, 10),
            SetOutcome::Stored
        );
        assert_eq!(
            store.set("s", Target::Local, TTL, GUARD, 10),
            SetOutcome::KeptCloud
        );
        assert_eq!(store.get("s", TTL).map(|(t, _)| t), Some(Target::Cloud));
        tokio::time::advance(GUARD).await;
        assert_eq!(
            store.set("s", Target::Local, TTL, GUARD, 10),
            SetOutcome::Stored
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_cloud_and_local_always_end_cloud() {
        for round in 0..200 {
            let store = Arc::new(StickyStore::default());
            let session = format!("race{round}");
            let (a, b) = (store.clone(), store.clone());
            let (s1, s2) = (session.clone(), session.clone());
            let cloud = tokio::spawn(async move { a.set(&s1, Target::Cloud, TTL, GUARD, 10) });
            let local = tokio::spawn(async move { b.set(&s2, Target::Local, TTL, GUARD, 10) });
            let (cloud, local) = (cloud.await.expect("task"), local.await.expect("task"));
            assert_eq!(cloud, SetOutcome::Stored);
            // Whichever ran first, a live StickyCloud wins.
            assert_eq!(
                store.get(&session, TTL).map(|(t, _)| t),
                Some(Target::Cloud),
                "round {round}: {local:?}"
            );
        }
    }
}
