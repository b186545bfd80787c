//! The origin's reply to a model request, passed through frame by frame while the
//! request's [`Tracker`] watches it: first byte, usage read from the bytes, the end or
//! the client going away. The tracker publishes its record when this body is dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use glider_engine::Tracker;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

/// An origin body that reports to a tracker.
pub struct OriginBody {
    inner: Incoming,
    tracker: Option<Tracker>,
    /// The origin's status, recorded once the reply has been delivered. A body dropped
    /// before its end leaves the record's status unset, so it reads 499 (client gone).
    status: u16,
}

impl OriginBody {
    pub fn new(inner: Incoming, tracker: Tracker, status: u16) -> OriginBody {
        let mut body = OriginBody {
            inner,
            tracker: Some(tracker),
            status,
        };
        // An empty reply may never be polled.
        if body.inner.is_end_stream() {
            body.finish(None);
        }
        body
    }

    fn finish(&mut self, error: Option<String>) {
        if let Some(mut tracker) = self.tracker.take() {
            tracker.record.status = Some(self.status);
            if error.is_some() {
                tracker.record.error = error;
            }
            tracker.end();
        }
    }
}

impl Body for OriginBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(tracker), Some(data)) = (&mut this.tracker, frame.data_ref()) {
                    tracker.first_byte();
                    tracker.raw_bytes(data);
                }
                // A reader may stop polling once the body says it is complete.
                if this.inner.is_end_stream() {
                    this.finish(None);
                }
            }
            Poll::Ready(Some(Err(error))) => {
                this.finish(Some(format!("origin stream failed: {error}")));
            }
            Poll::Ready(None) => this.finish(None),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
