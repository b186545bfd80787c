//! Which of a server's requests are a client's: [`Foreground`] counts the requests
//! [`crate::Backend::send`] starts, so work Glider does for itself on the same server
//! (the summarizer's compactions, sent with [`crate::Backend::send_background`]) can
//! step aside when a client's request starts. A local model server often has one slot:
//! a summary in it makes the client's next turn wait for the whole summary. Backends
//! with the same origin (two configured dialects of one llama-server) share one
//! [`Foreground`]: they share the server's slots.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// The [`Foreground`] of each origin some backend in this process points at.
static BY_ORIGIN: Mutex<Option<HashMap<String, Weak<Foreground>>>> = Mutex::new(None);

/// The [`Foreground`] shared by every backend whose base URL has `base_url`'s origin
/// (scheme, host and port); a URL that does not parse is its own origin.
pub fn for_origin(base_url: &str) -> Arc<Foreground> {
    let origin = reqwest::Url::parse(base_url)
        .map(|url| url.origin().ascii_serialization())
        .unwrap_or_else(|_| base_url.to_owned());
    let mut registry = BY_ORIGIN.lock().unwrap_or_else(|p| p.into_inner());
    let registry = registry.get_or_insert_with(HashMap::new);
    if let Some(shared) = registry.get(&origin).and_then(Weak::upgrade) {
        return shared;
    }
    // Entries of backends since dropped (a reload) go when a new one is added.
    registry.retain(|_, weak| weak.strong_count() > 0);
    let shared = Arc::new(Foreground::default());
    registry.insert(origin, Arc::downgrade(&shared));
    shared
}

/// The client requests started on one backend, and the waiters told of the next one.
#[derive(Debug, Default)]
pub struct Foreground {
    started: AtomicU64,
    /// Waiters in [`Foreground::next_after`]: with none (the usual case) a start costs
    /// one atomic add and one load.
    watching: AtomicUsize,
    notify: Notify,
}

impl Foreground {
    /// A client's request starts.
    pub(crate) fn start(&self) {
        self.started.fetch_add(1, Ordering::SeqCst);
        if self.watching.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// How many client requests have started so far (the mark [`Foreground::next_after`]
    /// waits past).
    pub fn mark(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Resolves once a client request has started after `mark` (at once when one
    /// already has).
    pub async fn next_after(&self, mark: u64) {
        let _watching = Watching::new(&self.watching);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the count is read, so a start between the two wakes it.
            notified.as_mut().enable();
            if self.started.load(Ordering::SeqCst) != mark {
                return;
            }
            notified.await;
        }
    }
}

/// One waiter counted in [`Foreground::watching`] while it waits.
struct Watching<'a>(&'a AtomicUsize);

impl<'a> Watching<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Watching(count)
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_waiter_wakes_on_the_next_start_and_at_once_for_one_already_past() {
        let foreground = Arc::new(Foreground::default());
        let mark = foreground.mark();
        let waiter = tokio::spawn({
            let foreground = foreground.clone();
            async move { foreground.next_after(mark).await }
        });
        // The waiter registers before the start, or finds it already counted.
        tokio::task::yield_now().await;
        foreground.start();
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("woken by the start")
            .expect("the waiter ran");
        // A mark already passed resolves at once.
        tokio::time::timeout(Duration::from_secs(10), foreground.next_after(mark))
            .await
            .expect("already past");
        assert_eq!(foreground.watching.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn backends_on_one_origin_share_it_and_other_origins_do_not() {
        let openai = for_origin("http://127.0.0.1:48123/v1");
        let anthropic = for_origin("http://127.0.0.1:48123");
        let other = for_origin("http://127.0.0.1:48124/v1");
        assert!(Arc::ptr_eq(&openai, &anthropic));
        assert!(!Arc::ptr_eq(&openai, &other));
        openai.start();
        assert_eq!(anthropic.mark(), 1);
        assert_eq!(other.mark(), 0);
    }
}
