//! `AgentFulfillHub`: pairs a BidiAppend's decision with the RunSSE stream of the same
//! request UUID. One mutex over three maps: `waiting` (RunSSE came first), `pending`
//! (BidiAppend came first, kept 30 s) and `family` (a turn family's sticky condition).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long an armed decision waits for its RunSSE.
pub const PENDING_TTL: Duration = Duration::from_secs(30);
/// How long a RunSSE waits for its BidiAppend's decision.
pub const WAIT: Duration = Duration::from_millis(800);

/// What a BidiAppend decided for its request.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<L> {
    /// Answer the RunSSE locally with this turn.
    Local(L),
    /// Relay the RunSSE to the origin.
    Origin,
}

/// A turn family's sticky condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sticky {
    Cloud,
    Local,
}

/// What happened to [`AgentFulfillHub::open_family`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyOutcome {
    Opened,
    /// A live StickyCloud family kept its place against a StickyLocal.
    KeptCloud,
}

struct Waiter<L> {
    id: u64,
    tx: oneshot::Sender<Decision<L>>,
}

struct Pending<L> {
    id: u64,
    decision: Decision<L>,
}

#[derive(Debug, Clone)]
struct Family {
    sticky: Sticky,
    conversation: Option<String>,
    expires: Instant,
}

struct Maps<L> {
    waiting: HashMap<String, Waiter<L>>,
    pending: HashMap<String, Pending<L>>,
    family: HashMap<String, Family>,
    next_id: u64,
}

/// The hub. Cheap to share (`Arc` inside); every method takes the one lock briefly.
pub struct AgentFulfillHub<L> {
    maps: Arc<Mutex<Maps<L>>>,
}

impl<L: Send + 'static> Default for AgentFulfillHub<L> {
    fn default() -> Self {
        AgentFulfillHub {
            maps: Arc::new(Mutex::new(Maps {
                waiting: HashMap::new(),
                pending: HashMap::new(),
                family: HashMap::new(),
                next_id: 0,
            })),
        }
    }
}

fn lock<L>(maps: &Mutex<Maps<L>>) -> MutexGuard<'_, Maps<L>> {
    maps.lock().unwrap_or_else(|p| p.into_inner())
}

impl<L> Maps<L> {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// Takes a waiter out of `waiting` when its `wait` ends or is dropped (the client went
/// away), unless an `arm` already took it.
struct WaiterGuard<'a, L> {
    maps: &'a Mutex<Maps<L>>,
    request: &'a str,
    id: u64,
}

impl<L> Drop for WaiterGuard<'_, L> {
    fn drop(&mut self) {
        let mut maps = lock(self.maps);
        if maps
            .waiting
            .get(self.request)
            .is_some_and(|w| w.id == self.id)
        {
            maps.waiting.remove(self.request);
        }
    }
}

impl<L: Send + 'static> AgentFulfillHub<L> {
    /// The BidiAppend decided "answer locally".
    pub fn arm_local(&self, request: &str, turn: L) {
        self.arm(request, Decision::Local(turn));
    }

    /// The BidiAppend decided "the origin answers".
    pub fn arm_origin(&self, request: &str) {
        self.arm(request, Decision::Origin);
    }

    /// Hand `decision` to the RunSSE waiting for `request`, or keep it in `pending` for
    /// [`PENDING_TTL`] (a timer removes it unless a RunSSE took it first).
    pub fn arm(&self, request: &str, decision: Decision<L>) {
        let id = {
            let mut maps = lock(&self.maps);
            let decision = match maps.waiting.remove(request) {
                // A waiter whose client went away hands the decision back.
                Some(waiter) => match waiter.tx.send(decision) {
                    Ok(()) => return,
                    Err(decision) => decision,
                },
                None => decision,
            };
            let id = maps.id();
            maps.pending
                .insert(request.to_owned(), Pending { id, decision });
            id
        };
        let weak: Weak<Mutex<Maps<L>>> = Arc::downgrade(&self.maps);
        let request = request.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(PENDING_TTL).await;
            if let Some(maps) = weak.upgrade() {
                let mut maps = lock(&maps);
                if maps.pending.get(&request).is_some_and(|p| p.id == id) {
                    maps.pending.remove(&request);
                    tracing::debug!(%request, "Agent RPC: an armed decision expired without a RunSSE");
                }
            }
        });
    }

    /// The RunSSE for `request`: its decision if the BidiAppend came first; else wait
    /// up to `timeout` for one; then look in `pending` once more (an append that landed
    /// as the timer fired). `None`: no decision, so the origin answers.
    pub async fn wait(&self, request: &str, timeout: Duration) -> Option<Decision<L>> {
        let (id, mut rx) = {
            let mut maps = lock(&self.maps);
            if let Some(pending) = maps.pending.remove(request) {
                return Some(pending.decision);
            }
            let id = maps.id();
            let (tx, rx) = oneshot::channel();
            maps.waiting.insert(request.to_owned(), Waiter { id, tx });
            (id, rx)
        };
        let _guard = WaiterGuard {
            maps: &self.maps,
            request,
            id,
        };
        tokio::select! {
            biased;
            offered = &mut rx => {
                if let Ok(decision) = offered {
                    return Some(decision);
                }
            }
            _ = tokio::time::sleep(timeout) => {}
        }
        let mut maps = lock(&self.maps);
        if maps.waiting.get(request).is_some_and(|w| w.id == id) {
            maps.waiting.remove(request);
        }
        // An arm that found this waiter just as the timer fired left its offer here.
        if let Ok(decision) = rx.try_recv() {
            return Some(decision);
        }
        maps.pending.remove(request).map(|p| p.decision)
    }

    /// Open (or renew) the family of `root` for `ttl`, unless a live StickyCloud family
    /// (of this root, or of the same conversation) would be replaced by a StickyLocal.
    pub fn open_family(
        &self,
        root: &str,
        conversation: Option<&str>,
        sticky: Sticky,
        ttl: Duration,
    ) -> FamilyOutcome {
        let now = Instant::now();
        let mut maps = lock(&self.maps);
        maps.family.retain(|_, f| f.expires > now);
        if sticky == Sticky::Local {
            let live_cloud = maps.family.iter().any(|(key, f)| {
                f.sticky == Sticky::Cloud
                    && (key == root
                        || conversation.is_some() && f.conversation.as_deref() == conversation)
            });
            if live_cloud {
                return FamilyOutcome::KeptCloud;
            }
        }
        maps.family.insert(
            root.to_owned(),
            Family {
                sticky,
                conversation: conversation.map(str::to_owned),
                expires: now + ttl,
            },
        );
        FamilyOutcome::Opened
    }

    /// The live family of `conversation`: its root request UUID and condition (a cloud
    /// family first, when two are live).
    pub fn family_of(&self, conversation: &str) -> Option<(String, Sticky)> {
        let now = Instant::now();
        let maps = lock(&self.maps);
        maps.family
            .iter()
            .filter(|(_, f)| f.expires > now && f.conversation.as_deref() == Some(conversation))
            .min_by_key(|(_, f)| f.sticky == Sticky::Local)
            .map(|(root, f)| (root.clone(), f.sticky))
    }

    /// The live condition of the family rooted at `root`.
    pub fn family(&self, root: &str) -> Option<Sticky> {
        let now = Instant::now();
        let maps = lock(&self.maps);
        maps.family
            .get(root)
            .filter(|f| f.expires > now)
            .map(|f| f.sticky)
    }

    /// Keep `root`'s family alive for `ttl` from now (its turn just ended, so the
    /// follow-ons are about to come).
    pub fn touch_family(&self, root: &str, ttl: Duration) {
        let now = Instant::now();
        let mut maps = lock(&self.maps);
        if let Some(family) = maps.family.get_mut(root).filter(|f| f.expires > now) {
            family.expires = family.expires.max(now + ttl);
        }
    }

    /// Sizes of (`waiting`, `pending`, `family`), for tests and the dashboard.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let maps = lock(&self.maps);
        (maps.waiting.len(), maps.pending.len(), maps.family.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Hub = AgentFulfillHub<&'static str>;

    /// Let spawned tasks (waiters, expiry timers) run up to their next await.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    fn spawn_wait(
        hub: &Arc<Hub>,
        request: &'static str,
    ) -> tokio::task::JoinHandle<(Option<Decision<&'static str>>, Duration)> {
        let hub = hub.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let decision = hub.wait(request, WAIT).await;
            (decision, start.elapsed())
        })
    }

    #[tokio::test(start_paused = true)]
    async fn append_before_sse_is_answered_at_once() {
        let hub = Hub::default();
        hub.arm_local("r1", "turn");
        let start = Instant::now();
        assert_eq!(hub.wait("r1", WAIT).await, Some(Decision::Local("turn")));
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(hub.sizes(), (0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn sse_before_append_waits_for_the_offer() {
        let hub = Arc::new(Hub::default());
        let waiter = spawn_wait(&hub, "r1");
        settle().await;
        assert_eq!(hub.sizes(), (1, 0, 0), "the RunSSE is waiting");
        tokio::time::advance(Duration::from_millis(300)).await;
        hub.arm_local("r1", "turn");
        let (decision, waited) = waiter.await.expect("task");
        assert_eq!(decision, Some(Decision::Local("turn")));
        assert_eq!(waited, Duration::from_millis(300));
        assert_eq!(hub.sizes(), (0, 0, 0), "handed over, nothing left pending");
    }

    #[tokio::test(start_paused = true)]
    async fn an_origin_decision_is_handed_over_too() {
        let hub = Arc::new(Hub::default());
        let waiter = spawn_wait(&hub, "r1");
        settle().await;
        hub.arm_origin("r1");
        assert_eq!(waiter.await.expect("task").0, Some(Decision::Origin));
    }

    #[tokio::test(start_paused = true)]
    async fn an_append_exactly_at_the_timer_is_not_lost() {
        // The timer has fired but the waiter has not taken the lock yet: the append
        // still finds it registered, and the offer is read after the timer.
        let hub = Arc::new(Hub::default());
        let waiter = spawn_wait(&hub, "r1");
        settle().await;
        tokio::time::advance(WAIT).await;
        hub.arm_local("r1", "turn");
        let (decision, waited) = waiter.await.expect("task");
        assert_eq!(decision, Some(Decision::Local("turn")));
        assert_eq!(waited, WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn no_append_at_all_means_the_origin_after_800ms() {
        let hub = Arc::new(Hub::default());
        let (decision, waited) = spawn_wait(&hub, "r1").await.expect("task");
        assert_eq!(decision, None);
        assert_eq!(waited, WAIT);
        assert_eq!(hub.sizes(), (0, 0, 0), "the waiter left");
        // A late append after the stream went to the origin is pending, then expires.
        hub.arm_local("r1", "too late");
        assert_eq!(hub.sizes(), (0, 1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn pending_decisions_expire_after_30s() {
        let hub = Arc::new(Hub::default());
        hub.arm_local("r1", "turn");
        settle().await;
        tokio::time::advance(PENDING_TTL - Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(hub.sizes(), (0, 1, 0), "still there just before 30 s");
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(hub.sizes(), (0, 0, 0), "removed at 30 s");
        let (decision, _) = spawn_wait(&hub, "r1").await.expect("task");
        assert_eq!(decision, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rearmed_request_keeps_its_own_timer() {
        // The first timer must not remove the second decision.
        let hub = Arc::new(Hub::default());
        hub.arm_local("r1", "first");
        settle().await;
        tokio::time::advance(Duration::from_secs(20)).await;
        hub.arm_local("r1", "second");
        settle().await;
        tokio::time::advance(Duration::from_secs(15)).await;
        settle().await;
        assert_eq!(hub.wait("r1", WAIT).await, Some(Decision::Local("second")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_whose_client_left_gives_the_decision_back_to_pending() {
        let hub = Arc::new(Hub::default());
        let waiter = spawn_wait(&hub, "r1");
        settle().await;
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(hub.sizes(), (0, 0, 0), "the guard removed the waiter");
        hub.arm_local("r1", "turn");
        assert_eq!(hub.wait("r1", WAIT).await, Some(Decision::Local("turn")));
    }

    const FAMILY: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_live_sticky_cloud_family_is_not_replaced_by_a_concurrent_local() {
        let hub = Hub::default();
        assert_eq!(
            hub.open_family("root", Some("conv"), Sticky::Cloud, FAMILY),
            FamilyOutcome::Opened
        );
        assert_eq!(
            hub.open_family("root", Some("conv"), Sticky::Local, FAMILY),
            FamilyOutcome::KeptCloud
        );
        // Nor by a local family opened for another root of the same conversation.
        assert_eq!(
            hub.open_family("other", Some("conv"), Sticky::Local, FAMILY),
            FamilyOutcome::KeptCloud
        );
        assert_eq!(hub.family("root"), Some(Sticky::Cloud));
        assert_eq!(
            hub.family_of("conv"),
            Some(("root".to_owned(), Sticky::Cloud))
        );
        // Once it expires, a local family may open.
        tokio::time::advance(FAMILY).await;
        assert_eq!(hub.family("root"), None);
        assert_eq!(
            hub.open_family("root", Some("conv"), Sticky::Local, FAMILY),
            FamilyOutcome::Opened
        );
        // A cloud family does replace a local one.
        assert_eq!(
            hub.open_family("root", Some("conv"), Sticky::Cloud, FAMILY),
            FamilyOutcome::Opened
        );
        assert_eq!(hub.family("root"), Some(Sticky::Cloud));
    }

    #[tokio::test(start_paused = true)]
    async fn touching_a_family_keeps_it_for_the_follow_ons() {
        let hub = Hub::default();
        hub.open_family("root", Some("conv"), Sticky::Cloud, FAMILY);
        tokio::time::advance(Duration::from_secs(8)).await;
        hub.touch_family("root", FAMILY);
        tokio::time::advance(Duration::from_secs(8)).await;
        assert_eq!(
            hub.family_of("conv"),
            Some(("root".to_owned(), Sticky::Cloud))
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(hub.family_of("conv"), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_cloud_and_local_families_always_end_cloud() {
        for round in 0..200 {
            let hub = Arc::new(Hub::default());
            let (a, b) = (hub.clone(), hub.clone());
            let cloud =
                tokio::spawn(
                    async move { a.open_family("root", Some("conv"), Sticky::Cloud, FAMILY) },
                );
            let local =
                tokio::spawn(
                    async move { b.open_family("root", Some("conv"), Sticky::Local, FAMILY) },
                );
            let (cloud, local) = (cloud.await.expect("task"), local.await.expect("task"));
            assert_eq!(cloud, FamilyOutcome::Opened);
            assert_eq!(
                hub.family("root"),
                Some(Sticky::Cloud),
                "round {round}: {local:?}"
            );
        }
    }
}
