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
}

impl OriginBody {
    pub fn new(inner: Incoming, tracker: Tracker) -> OriginBody {
        OriginBody {
            inner,
            tracker: Some(tracker),
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
                if this.inner.is_end_stream()
                    && let Some(mut tracker) = this.tracker.take()
                {
                    tracker.end();
                }
            }
            Poll::Ready(Some(Err(error))) => {
                if let Some(mut tracker) = this.tracker.take() {
                    tracker.record.error = Some(format!("origin stream failed: {error}"));
                    tracker.end();
                }
            }
            Poll::Ready(None) => {
                if let Some(mut tracker) = this.tracker.take() {
                    tracker.end();
                }
            }
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
