//! Reservations: a local request holds its model for as long as the request and its
//! stream last; the guard releases it when dropped — at the end, on an error, and
//! when the client goes away (the body holding it is dropped). The planner never
//! evicts a model that has a reservation.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::Stream;

/// How many reservations each `backend/model` has.
#[derive(Debug, Default)]
pub struct Reservations(Mutex<BTreeMap<String, usize>>);

impl Reservations {
    fn counts(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserve `key` until the guard is dropped.
    pub fn reserve(self: &Arc<Self>, key: String) -> Reservation {
        *self.counts().entry(key.clone()).or_default() += 1;
        Reservation {
            owner: self.clone(),
            key,
        }
    }

    /// Reservations `key` has now.
    pub fn count(&self, key: &str) -> usize {
        self.counts().get(key).copied().unwrap_or(0)
    }
}

/// One request's hold on a model.
#[derive(Debug)]
pub struct Reservation {
    owner: Arc<Reservations>,
    key: String,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut counts = self.owner.counts();
        if let Some(count) = counts.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// A body stream that holds a reservation until it ends or is dropped.
pub struct ReservedStream<S> {
    inner: S,
    reservation: Option<Reservation>,
}

impl<S> ReservedStream<S> {
    pub fn new(inner: S, reservation: Reservation) -> Self {
        ReservedStream {
            inner,
            reservation: Some(reservation),
        }
    }
}

impl<S: Stream + Unpin> Stream for ReservedStream<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(None) = polled {
            self.reservation = None;
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    #[tokio::test]
    async fn a_reserved_stream_releases_at_its_end_and_when_dropped_early() {
        let reservations = Arc::new(Reservations::default());
        let mut stream = ReservedStream::new(
            futures_util::stream::iter([1, 2]),
            reservations.reserve("b/m".into()),
        );
        let _second = reservations.reserve("b/m".into());
        assert_eq!(reservations.count("b/m"), 2);
        while stream.next().await.is_some() {}
        assert_eq!(reservations.count("b/m"), 1, "released at the end");
        let early = ReservedStream::new(
            futures_util::stream::iter([1]),
            reservations.reserve("b/m".into()),
        );
        assert_eq!(reservations.count("b/m"), 2);
        drop(early);
        assert_eq!(reservations.count("b/m"), 1, "released when dropped");
    }
}
