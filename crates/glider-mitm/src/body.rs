//! The record of a model request the origin answers: the origin's reply passes through
//! a [`glider_door::ObservedBody`] while its [`Tracker`] watches it (first byte, usage
//! read from the bytes, the end or the client going away). The tracker publishes its
//! record when it is dropped.

use bytes::Bytes;
use glider_door::{ObservedBody, Observer};
use glider_engine::Tracker;
use hyper::body::Incoming;

/// An origin body that reports to a tracker.
pub type OriginBody = ObservedBody<Incoming, OriginRecord>;

/// Watches an origin's reply for its tracker.
pub struct OriginRecord {
    tracker: Tracker,
    /// The origin's status, recorded once the reply has been delivered. A body dropped
    /// before its end leaves the record's status unset, so it reads 499 (client gone).
    status: u16,
}

/// `inner`, reported to `tracker` as it passes.
pub fn origin_body(inner: Incoming, tracker: Tracker, status: u16) -> OriginBody {
    ObservedBody::new(inner, OriginRecord { tracker, status })
}

impl Observer for OriginRecord {
    fn data(&mut self, bytes: &Bytes) {
        self.tracker.first_byte();
        self.tracker.raw_bytes(bytes);
    }

    fn finish(mut self, failure: Option<String>) {
        self.tracker.record.status = Some(self.status);
        if let Some(failure) = failure {
            self.tracker.record.error = Some(format!("origin stream failed: {failure}"));
        }
        self.tracker.end();
    }
}
