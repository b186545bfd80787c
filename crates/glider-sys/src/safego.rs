//! Long-lived tasks that a panic does not take down (spec package `safego`): every loop
//! Glider runs for its whole life (collector, writers, probes, watchers, supervisors) is
//! started with [`spawn_named`]. A panic is caught, logged with the task's name, counted
//! (the dashboard's `/metrics` shows [`counts`]), and — where the [`Restart`] policy
//! says so — the task is built again by its factory after a backoff that doubles up to
//! a cap and starts over once a run has lasted a while.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::task::JoinHandle;

/// What happens after a task panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Log and count the panic; the task stays ended (its state cannot be rebuilt, e.g.
    /// it owned a channel's only receiver).
    Never,
    /// Build the task again after `first`, doubling per panic in a row up to `max`.
    OnPanic { first: Duration, max: Duration },
}

impl Restart {
    /// The policy most loops use: 100 ms, doubling to 30 s.
    pub const BACKOFF: Restart = Restart::OnPanic {
        first: Duration::from_millis(100),
        max: Duration::from_secs(30),
    };
}

/// How often one named task has panicked and been restarted since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskCounts {
    pub panics: u64,
    pub restarts: u64,
}

/// A run that lasted this long counts as healthy: the next panic starts the backoff over.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

static COUNTS: Mutex<BTreeMap<&'static str, TaskCounts>> = Mutex::new(BTreeMap::new());

/// Every named task that has panicked at least once, with its counts.
pub fn counts() -> Vec<(&'static str, TaskCounts)> {
    lock().iter().map(|(name, c)| (*name, *c)).collect()
}

/// The counts of task `name` (zero when it never panicked).
pub fn counts_of(name: &str) -> TaskCounts {
    lock().get(name).copied().unwrap_or_default()
}

fn lock() -> std::sync::MutexGuard<'static, BTreeMap<&'static str, TaskCounts>> {
    // The map is only ever changed by whole-value updates; a poisoned one is still whole.
    COUNTS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn count(name: &'static str, update: impl FnOnce(&mut TaskCounts)) {
    update(lock().entry(name).or_default());
}

/// Start the task `factory` builds as `name`. A run that returns ends the task; a run
/// that panics is logged, counted, and built again per `policy` (the first run is built
/// before this returns, restarts in the task). The handle ends when
/// the task does (aborting it stops the task and any restart).
pub fn spawn_named<F, Fut>(name: &'static str, policy: Restart, factory: F) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    // The first run is built here, not in the task: what the factory sets up (a
    // subscription, say) is in place when `spawn_named` returns.
    let mut first = Some(factory());
    tokio::spawn(async move {
        let mut in_a_row = 0u32;
        loop {
            let started = tokio::time::Instant::now();
            let run = first.take().unwrap_or_else(&factory);
            let Err(panic) = AssertUnwindSafe(run).catch_unwind().await else {
                return;
            };
            let message = panic_message(panic.as_ref());
            count(name, |c| c.panics += 1);
            let Restart::OnPanic { first, max } = policy else {
                tracing::error!(task = name, panic = %message, "task panicked; it is not restarted");
                return;
            };
            if started.elapsed() >= HEALTHY_RUN {
                in_a_row = 0;
            }
            let wait = backoff_wait(first, max, in_a_row);
            in_a_row = in_a_row.saturating_add(1);
            tracing::error!(task = name, panic = %message, restart_in_ms = wait.as_millis() as u64, "task panicked; restarting it");
            tokio::time::sleep(wait).await;
            count(name, |c| c.restarts += 1);
        }
    })
}

/// Start `task`, which owns state a restart could not rebuild (a channel's receiver, a
/// worker's queue), as `name`: a panic is caught, logged and counted, and the task stays
/// ended ([`Restart::Never`] for a future made once).
pub fn spawn_once<Fut>(name: &'static str, task: Fut) -> JoinHandle<()>
where
    Fut: Future<Output = ()> + Send + 'static,
{
    let slot = Mutex::new(Some(task));
    spawn_named(name, Restart::Never, move || {
        let task = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
        async move {
            if let Some(task) = task {
                task.await;
            }
        }
    })
}

/// The wait before a restart after `in_a_row` earlier failures: `first`, doubling, at
/// most `max`.
pub fn backoff_wait(first: Duration, max: Duration, in_a_row: u32) -> Duration {
    first
        .saturating_mul(1u32 << in_a_row.min(16))
        .min(max.max(first))
}

/// The text a panic carried (`panic!("…")` gives a `&str` or a `String`).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_panicking_task_is_restarted_until_it_finishes_and_the_process_goes_on() {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let task = spawn_named(
            "test-panics-three-times",
            Restart::OnPanic {
                first: Duration::from_millis(1),
                max: Duration::from_millis(4),
            },
            move || {
                let runs = counted.clone();
                async move {
                    if runs.fetch_add(1, Ordering::SeqCst) < 3 {
                        panic!("deliberate panic");
                    }
                }
            },
        );
        task.await
            .expect("the supervising task itself never panics");
        assert_eq!(runs.load(Ordering::SeqCst), 4);
        assert_eq!(
            counts_of("test-panics-three-times"),
            TaskCounts {
                panics: 3,
                restarts: 3
            }
        );
        assert!(
            counts()
                .iter()
                .any(|(n, _)| *n == "test-panics-three-times")
        );
    }

    #[tokio::test]
    async fn a_task_that_may_not_restart_is_counted_once_and_stays_ended() {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        spawn_once("test-never-restarts", async move {
            counted.fetch_add(1, Ordering::SeqCst);
            panic!("{}", String::from("owned message"));
        })
        .await
        .expect("the supervising task itself never panics");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(
            counts_of("test-never-restarts"),
            TaskCounts {
                panics: 1,
                restarts: 0
            }
        );
    }

    #[test]
    fn panic_messages_are_read_from_both_payload_kinds() {
        let owned: Box<dyn std::any::Any + Send> = Box::new(String::from("owned"));
        let borrowed: Box<dyn std::any::Any + Send> = Box::new("borrowed");
        let other: Box<dyn std::any::Any + Send> = Box::new(7u8);
        assert_eq!(panic_message(owned.as_ref()), "owned");
        assert_eq!(panic_message(borrowed.as_ref()), "borrowed");
        assert_eq!(panic_message(other.as_ref()), "a panic without a message");
    }
}
