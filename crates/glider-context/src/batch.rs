//! How the subsystem's writer threads (the event log's, the stored responses') gather a
//! batch for one SQLite transaction: under load a writer commits at most every
//! [`COMMIT_EVERY`], so what arrives within it of the last commit waits for the rest of
//! it and goes in the same transaction; a write after a quiet spell is committed at
//! once, and a flush ends the wait. While a batch gathers the writer sleeps until it is
//! due and then takes what came, instead of waiting on the queue: a wait wakes it for
//! every write (a context switch per request on the request path's core, and a futex
//! wake in every sender); so would a poll each millisecond (fifty times a batch).

use std::sync::mpsc::{Receiver, TryRecvError};
use std::thread;
use std::time::{Duration, Instant};

/// Under load, a writer commits at most this often. What a crash can lose is what it
/// always could — writes queued and not yet committed — now at most this much newer.
pub(crate) const COMMIT_EVERY: Duration = Duration::from_millis(50);

/// When the batch after a commit at `last_commit` (none yet: `None`) may be written.
pub(crate) fn due_after(last_commit: Option<Instant>) -> Instant {
    last_commit.map_or_else(Instant::now, |at| at + COMMIT_EVERY)
}

/// The batch that begins with `first`: what else is queued, and — when `due` is later —
/// what has arrived by then, up to `max` items; a flush (an item `is_flush` says is one)
/// already queued ends the wait, one that comes during it is answered when it ends.
pub(crate) fn gather<T>(
    receiver: &Receiver<T>,
    first: T,
    due: Instant,
    max: usize,
    is_flush: impl Fn(&T) -> bool,
) -> Vec<T> {
    let mut flushing = is_flush(&first);
    let mut batch = vec![first];
    while batch.len() < max {
        let next = match receiver.try_recv() {
            Ok(item) => item,
            Err(TryRecvError::Disconnected) => break,
            Err(TryRecvError::Empty) => {
                let left = due.saturating_duration_since(Instant::now());
                if flushing || left.is_zero() {
                    break;
                }
                thread::sleep(left);
                continue;
            }
        };
        flushing |= is_flush(&next);
        batch.push(next);
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_batch_after_a_quiet_spell_is_what_is_queued_and_a_busy_one_waits_for_more() {
        let (sender, receiver) = mpsc::channel();
        sender.send(2).expect("send");
        // Nothing committed lately: what is queued, at once.
        assert_eq!(gather(&receiver, 1, due_after(None), 10, |_| false), [1, 2]);
        // Committed just now: a later write joins the batch before it is due.
        let late = sender.clone();
        let writer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(1));
            late.send(4).expect("send");
        });
        let due = Instant::now() + Duration::from_millis(50);
        let batch = gather(&receiver, 3, due, 2, |_| false);
        writer.join().expect("join");
        assert_eq!(batch, [3, 4], "gathered until full");
    }

    #[test]
    fn a_flush_ends_the_wait_and_a_closed_queue_ends_the_batch() {
        let (sender, receiver) = mpsc::channel();
        sender.send(0).expect("send");
        let far = Instant::now() + Duration::from_secs(3600);
        assert_eq!(gather(&receiver, 7, far, 10, |n| *n == 0), [7, 0]);
        drop(sender);
        assert_eq!(gather(&receiver, 5, far, 10, |_| false), [5]);
    }
}
