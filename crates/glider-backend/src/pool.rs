//! A backend's replica pool (`replicas:`): which replica a session goes to and in what
//! order the others stand behind it. The order is a rendezvous (highest-random-weight)
//! hash of the session key over the replicas' URLs, so a conversation keeps to one
//! replica (its prefix cache stays warm there), a replica that fails moves only its own
//! sessions (each to its next-ranked replica), and adding or reordering replicas in the
//! config moves only the sessions the change must move. Each replica has its own
//! breaker: its passive health, skipped while open, probed once its cool-down passes.
//! Each replica is also probed with the backend's health probe ([`ReplicaHealth`]): a
//! replica the last probe found down stands behind every other in each session's
//! order, so its sessions move to their next-ranked replica, and come back once a
//! probe finds it up again.
//! The session key reaches the pool (and any OpenAI-compatible server or router behind
//! the backend) as [`SESSION_KEY_HEADER`].

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::breaker::{Admission, CircuitBreaker};
use crate::health::HealthStatus;

/// The header that carries a request's session key upstream: a digest of the session
/// Glider derived (see `glider_engine::router::sticky::session_id`), the same for every
/// request of one conversation. vLLM Router's `consistent_hash` policy hashes this
/// header first; Glider's own pool reads it to pick the replica.
pub const SESSION_KEY_HEADER: &str = "x-session-id";

/// The [`SESSION_KEY_HEADER`] value for a session: a stable digest, so that the
/// client's own ids (Claude Code's session UUID, an account id in `metadata.user_id`)
/// never leave the machine as written.
pub fn session_key_digest(session: &str) -> String {
    format!("{:016x}", mix(fnv1a(session.as_bytes())))
}

/// One replica of a pool: its base URL (resolved) and its breaker.
#[derive(Debug)]
pub struct Replica {
    pub base_url: String,
    /// The URL's hash, worked out once: the replica's identity in the rendezvous hash
    /// (its URL, not its position, so reordering the config moves no session).
    identity: u64,
    /// The generation endpoint per dialect (see `client::DIALECTS`).
    pub(crate) endpoints: crate::direct::Endpoints,
    pub breaker: CircuitBreaker,
    health: Mutex<ReplicaHealth>,
    /// `health` is down: read on every request's order without taking the lock.
    down: AtomicBool,
}

/// A replica's health as its last probe found it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplicaHealth {
    pub status: HealthStatus,
    /// Why it is down, when it is.
    pub detail: Option<String>,
}

impl Replica {
    /// A replica at `base_url` (resolved, no trailing slash) of a backend that is
    /// `local` or not (a local one is never reached through a proxy).
    pub fn new(base_url: String, local: bool) -> Replica {
        Replica {
            identity: fnv1a(base_url.as_bytes()),
            endpoints: crate::direct::Endpoints::under(&base_url, local),
            base_url,
            breaker: CircuitBreaker::default(),
            health: Mutex::default(),
            down: AtomicBool::new(false),
        }
    }

    /// What the last probe of this replica found.
    pub fn health(&self) -> ReplicaHealth {
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_health(&self, health: ReplicaHealth) {
        let mut kept = self
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.down
            .store(health.status == HealthStatus::Down, Ordering::Relaxed);
        *kept = health;
    }

    fn probed_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }
}

/// The replicas of one backend, `base_url` first.
#[derive(Debug)]
pub struct Pool {
    pub replicas: Vec<Replica>,
}

impl Pool {
    /// The replicas in the order a request with session `key` tries them: the
    /// session's own replica first, then the rest by rank (no key: config order), a
    /// replica the last probe found down behind all the others (tried only when they
    /// fail too).
    pub fn order(&self, key: Option<&str>) -> Vec<usize> {
        let Some(key) = key.map(|key| fnv1a(key.as_bytes())) else {
            // Config order, the replicas found down moved behind the others.
            let mut order: Vec<usize> = (0..self.replicas.len()).collect();
            order.sort_by_key(|&i| self.replicas[i].probed_down());
            return order;
        };
        // Each replica's rank worked out once: down last, then the highest score first;
        // the index breaks a (vanishingly unlikely) tie.
        let mut ranked: Vec<(bool, std::cmp::Reverse<u64>, usize)> = self
            .replicas
            .iter()
            .enumerate()
            .map(|(i, replica)| {
                let score = mix(key ^ replica.identity);
                (replica.probed_down(), std::cmp::Reverse(score), i)
            })
            .collect();
        ranked.sort_unstable();
        ranked.into_iter().map(|(.., i)| i).collect()
    }

    /// The replica a request should go to next among `order[from..]`: the first whose
    /// breaker admits it, with that admission (a `Probe` must reach a verdict).
    pub(crate) fn next_admitted(
        &self,
        order: &[usize],
        from: usize,
    ) -> Option<(usize, usize, Admission)> {
        order
            .iter()
            .enumerate()
            .skip(from)
            .find_map(
                |(at, &replica)| match self.replicas[replica].breaker.admit() {
                    Admission::Refused => None,
                    admission => Some((at, replica, admission)),
                },
            )
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms (the std hasher is not
/// promised to be), and cheap on short keys.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64's finaliser: spreads FNV's weak low bits so that each replica's score
/// for a key is independent of the others'.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(urls: &[&str]) -> Pool {
        Pool {
            replicas: urls
                .iter()
                .map(|u| Replica::new((*u).to_owned(), true))
                .collect(),
        }
    }

    #[test]
    fn a_session_always_ranks_the_replicas_the_same_way() {
        let pool = pool(&["http://a", "http://b", "http://c"]);
        for s in 0..50 {
            let key = format!("session-{s}");
            assert_eq!(pool.order(Some(&key)), pool.order(Some(&key)));
        }
        assert_eq!(pool.order(None), [0, 1, 2]);
    }

    #[test]
    fn sessions_spread_over_the_replicas() {
        let pool = pool(&["http://a", "http://b", "http://c"]);
        let mut counts = [0usize; 3];
        for s in 0..3000 {
            counts[pool.order(Some(&format!("s{s}")))[0]] += 1;
        }
        // A fair hash gives each about 1000; far outside that is a broken mix.
        assert!(
            counts.iter().all(|&n| (800..1200).contains(&n)),
            "{counts:?}"
        );
    }

    #[test]
    fn a_replica_probed_down_stands_last_and_its_sessions_come_back_when_it_is_up() {
        let pool = pool(&["http://a", "http://b", "http://c"]);
        let keys: Vec<String> = (0..100).map(|s| format!("s{s}")).collect();
        let before: Vec<Vec<usize>> = keys.iter().map(|k| pool.order(Some(k))).collect();
        pool.replicas[1].set_health(ReplicaHealth {
            status: HealthStatus::Down,
            detail: Some("unreachable".into()),
        });
        let mut moved = 0;
        for (key, before) in keys.iter().zip(&before) {
            let now = pool.order(Some(key));
            assert_eq!(
                now.last(),
                Some(&1),
                "{key}: the down replica is tried last"
            );
            if before[0] == 1 {
                moved += 1;
                assert_eq!(now[0], before[1], "{key} moves to its next-ranked replica");
            } else {
                assert_eq!(now[0], before[0], "{key} stays where it was");
            }
        }
        assert!(moved > 0, "some sessions were on the down replica");
        pool.replicas[1].set_health(ReplicaHealth {
            status: HealthStatus::Up,
            detail: None,
        });
        let after: Vec<Vec<usize>> = keys.iter().map(|k| pool.order(Some(k))).collect();
        assert_eq!(
            after, before,
            "back up, every session is back on its own replica"
        );
    }

    #[test]
    fn removing_a_replica_moves_only_its_sessions() {
        let three = pool(&["http://a", "http://b", "http://c"]);
        let two = pool(&["http://a", "http://c"]);
        for s in 0..500 {
            let key = format!("s{s}");
            let before = &three.replicas[three.order(Some(&key))[0]].base_url;
            let after = &two.replicas[two.order(Some(&key))[0]].base_url;
            if before != "http://b" {
                assert_eq!(before, after, "{key} moved though its replica stayed");
            } else {
                // It moves to the replica it ranked second.
                let second = &three.replicas[three.order(Some(&key))[1]].base_url;
                assert_eq!(after, second);
            }
        }
    }

    #[test]
    fn the_header_value_is_a_stable_digest() {
        assert_eq!(
            session_key_digest("claude-code:x"),
            session_key_digest("claude-code:x")
        );
        assert_ne!(
            session_key_digest("claude-code:x"),
            session_key_digest("claude-code:y")
        );
        assert!(!session_key_digest("claude-code:x").contains("claude"));
    }
}
