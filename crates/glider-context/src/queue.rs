//! The log's queue between where events happen and the writer: each event is packed
//! into bytes where it happens ([`crate::packed::write_queued`]) and appended to one
//! shared buffer, which the writer takes whole for each batch, leaving the one it has
//! emptied in its place. Nothing an event owns crosses threads: its strings are freed
//! where they were made, at once.
//!
//! Why not a channel of events: an event's dozen strings, made on a request's thread
//! and freed on the writer's up to a batch later, cost the request path more than
//! building them (`bench/results/2026-12-05-context-cost16.md`) — the allocator
//! collects each block back from the other thread, cold, and the request path's heap
//! holds a batch of them between its own short-lived blocks. The buffer is reused
//! batch after batch, written front to back.

use std::cell::RefCell;
use std::sync::Mutex;

use crate::event::{Event, EventBody};
use crate::packed::{self, Malformed};

/// Most bytes the queue holds (events past it are dropped and counted, as past the
/// capacity in events): a burst of long tool results must not grow it without bound.
pub(crate) const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;

/// What a buffer keeps of its capacity once the writer has read it: a busy batch's
/// bytes are some hundreds of KB, a burst's may be tens of MB.
const BUFFER_KEPT: usize = 4 * 1024 * 1024;

/// Each packed event is preceded by its length.
const LENGTH_BYTES: usize = 4;

pub(crate) struct EventQueue {
    pending: Mutex<Pending>,
    /// Events it holds before new ones are dropped (`context.queue_capacity`).
    capacity: usize,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    events: usize,
    /// The writer took the last batch and has not been woken since: the next event
    /// must wake it.
    writer_idle: bool,
}

/// What became of an appended event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Queued; the writer must be woken for it.
    Wake,
    /// Queued; the writer is awake or already told.
    Queued,
    /// The queue is full (or the event could not be packed): dropped.
    Dropped,
}

thread_local! {
    /// Where an event is packed before it is copied in (the queue's lock is held for
    /// the copy alone).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The longest a thread's scratch buffer stays after a long event.
const SCRATCH_KEPT: usize = 64 * 1024;

impl EventQueue {
    pub(crate) fn new(capacity: usize) -> EventQueue {
        EventQueue {
            pending: Mutex::new(Pending {
                writer_idle: true,
                ..Pending::default()
            }),
            capacity: capacity.max(1),
        }
    }

    /// Pack an event (its time, session and body) and queue it, never waiting on the
    /// writer (only on another thread's copy of its own event).
    pub(crate) fn push(&self, at_ms: u64, session: Option<&str>, body: &EventBody) -> Pushed {
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.clear();
            scratch.extend_from_slice(&[0; LENGTH_BYTES]);
            let packed = packed::write_queued(scratch, at_ms, session, body).is_ok();
            let length = u32::try_from(scratch.len() - LENGTH_BYTES);
            let queued = match length {
                Ok(length) if packed => {
                    scratch[..LENGTH_BYTES].copy_from_slice(&length.to_le_bytes());
                    self.copy_in(scratch)
                }
                _ => Pushed::Dropped,
            };
            if scratch.capacity() > SCRATCH_KEPT {
                scratch.clear();
                scratch.shrink_to(SCRATCH_KEPT);
            }
            queued
        })
    }

    fn copy_in(&self, record: &[u8]) -> Pushed {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.events >= self.capacity || pending.bytes.len() + record.len() > MAX_QUEUED_BYTES
        {
            return Pushed::Dropped;
        }
        pending.bytes.extend_from_slice(record);
        pending.events += 1;
        if std::mem::take(&mut pending.writer_idle) {
            Pushed::Wake
        } else {
            Pushed::Queued
        }
    }

    /// The writer's turn: the queued bytes, swapped for `emptied` (the buffer it read
    /// last, cleared here). The next event after this wakes the writer.
    pub(crate) fn take(&self, mut emptied: Vec<u8>) -> Vec<u8> {
        emptied.clear();
        emptied.shrink_to(BUFFER_KEPT);
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.events = 0;
        pending.writer_idle = true;
        std::mem::replace(&mut pending.bytes, emptied)
    }
}

/// The events of a buffer [`EventQueue::take`] returned, in the order they were queued
/// (an event that does not read back is an error in its place; the rest still read).
pub(crate) fn events(bytes: &[u8]) -> impl Iterator<Item = Result<Event, Malformed>> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at == bytes.len() {
            return None;
        }
        let cut = |at: &mut usize, what: String| {
            *at = bytes.len();
            Some(Err(Malformed(format!(
                "{what} ends past the buffer's {} bytes",
                bytes.len()
            ))))
        };
        let Some(header) = bytes.get(at..at + LENGTH_BYTES) else {
            return cut(&mut at, "a queued event's length".into());
        };
        let mut length = [0; LENGTH_BYTES];
        length.copy_from_slice(header);
        let length = u32::from_le_bytes(length) as usize;
        let start = at + LENGTH_BYTES;
        let Some(record) = bytes.get(start..start + length) else {
            return cut(&mut at, format!("a queued event of {length} bytes"));
        };
        at = start + length;
        Some(packed::read_queued(record))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(dropped: u64, session: Option<&str>) -> Event {
        Event {
            at_ms: 7,
            session: session.map(str::to_owned),
            body: EventBody::Gap { dropped },
        }
    }

    fn push(queue: &EventQueue, event: &Event) -> Pushed {
        queue.push(event.at_ms, event.session.as_deref(), &event.body)
    }

    #[test]
    fn events_come_out_in_order_and_the_first_after_a_take_wakes_the_writer() {
        let queue = EventQueue::new(10);
        assert_eq!(push(&queue, &gap(1, Some("s"))), Pushed::Wake);
        assert_eq!(push(&queue, &gap(2, None)), Pushed::Queued);
        let bytes = queue.take(Vec::new());
        let read: Vec<Event> = events(&bytes).map(|e| e.expect("reads")).collect();
        assert_eq!(read, [gap(1, Some("s")), gap(2, None)]);
        assert_eq!(push(&queue, &gap(3, None)), Pushed::Wake);
        let emptied = queue.take(bytes);
        assert_eq!(events(&emptied).count(), 1);
        assert!(events(&queue.take(emptied)).next().is_none());
    }

    #[test]
    fn a_full_queue_drops_until_the_writer_takes_it() {
        let queue = EventQueue::new(2);
        assert_ne!(push(&queue, &gap(1, None)), Pushed::Dropped);
        assert_ne!(push(&queue, &gap(2, None)), Pushed::Dropped);
        assert_eq!(push(&queue, &gap(3, None)), Pushed::Dropped);
        let bytes = queue.take(Vec::new());
        assert_eq!(events(&bytes).count(), 2);
        assert_ne!(push(&queue, &gap(4, None)), Pushed::Dropped);
    }

    #[test]
    fn a_cut_buffer_reads_as_an_error_not_a_panic() {
        let queue = EventQueue::new(2);
        push(&queue, &gap(1, Some("session")));
        let bytes = queue.take(Vec::new());
        let cut = &bytes[..bytes.len() - 1];
        let read: Vec<_> = events(cut).collect();
        assert_eq!(read.len(), 1);
        assert!(read[0].is_err());
        // Cut inside the next event's length: an error too, not the end of the events.
        let mut two = bytes.clone();
        two.extend_from_slice(&[1, 0]);
        let read: Vec<_> = events(&two).collect();
        assert_eq!(read.len(), 2);
        assert!(read[0].is_ok() && read[1].is_err(), "{read:?}");
    }
}
