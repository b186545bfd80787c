//! A reply body passed through frame by frame while an [`Observer`] watches its bytes
//! and is told once when it ends. A body dropped before its end (the client went away)
//! drops the observer without [`Observer::finish`], so its own `Drop` says what that
//! means (a tracker records 499; a Cursor turn still touches its family).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// Watches one reply body.
pub trait Observer: Send + 'static {
    /// A data frame on its way to the client.
    fn data(&mut self, bytes: &Bytes);
    /// The body ended: delivered whole (`failure` is `None`) or broken off by the
    /// source with this error.
    fn finish(self, failure: Option<String>);
}

/// `inner`, unchanged, with an observer watching it.
pub struct ObservedBody<B, O: Observer> {
    inner: B,
    observer: Option<O>,
}

impl<B: Body<Data = Bytes> + Unpin, O: Observer> ObservedBody<B, O> {
    pub fn new(inner: B, observer: O) -> Self {
        let mut body = ObservedBody {
            inner,
            observer: Some(observer),
        };
        // An empty reply may never be polled.
        if body.inner.is_end_stream() {
            body.finish(None);
        }
        body
    }

    fn finish(&mut self, failure: Option<String>) {
        if let Some(observer) = self.observer.take() {
            observer.finish(failure);
        }
    }
}

impl<B, O> Body for ObservedBody<B, O>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
    O: Observer + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(observer), Some(data)) = (&mut this.observer, frame.data_ref()) {
                    observer.data(data);
                }
                // A reader may stop polling once the body says it is complete.
                if this.inner.is_end_stream() {
                    this.finish(None);
                }
            }
            Poll::Ready(Some(Err(error))) => this.finish(Some(error.to_string())),
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::{Arc, Mutex};

    /// Records what it saw into a shared log.
    struct Log(Arc<Mutex<Vec<String>>>);

    impl Observer for Log {
        fn data(&mut self, bytes: &Bytes) {
            self.0
                .lock()
                .expect("log")
                .push(String::from_utf8_lossy(bytes).into_owned());
        }
        fn finish(self, failure: Option<String>) {
            self.0.lock().expect("log").push(format!("end {failure:?}"));
        }
    }

    #[tokio::test]
    async fn bytes_pass_unchanged_and_the_end_is_seen_once() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let body = ObservedBody::new(
            http_body_util::Full::new(Bytes::from_static(b"abc")),
            Log(log.clone()),
        );
        let bytes = body.collect().await.expect("body").to_bytes();
        assert_eq!(bytes, Bytes::from_static(b"abc"));
        assert_eq!(*log.lock().expect("log"), ["abc", "end None"]);
    }

    #[tokio::test]
    async fn a_body_dropped_early_drops_the_observer_unfinished() {
        let log = Arc::new(Mutex::new(Vec::new()));
        drop(ObservedBody::new(
            http_body_util::Full::new(Bytes::from_static(b"abc")),
            Log(log.clone()),
        ));
        assert!(log.lock().expect("log").is_empty());
    }
}
