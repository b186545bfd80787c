//! A backend's rate-limit cool-down: after a 429 with `retry-after`, requests for the
//! same caller skip the backend until that time has passed, instead of asking again
//! (and instead of counting toward the breaker, which would lock every caller out). The
//! caller is the credential that was refused: the client's own key when the backend
//! passes the client's credentials through (a cloud backend with no key configured),
//! else the backend's configured key, which all callers share. Keys are held only as
//! hashes with a per-process random seed.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::Duration;

use http::HeaderMap;
use tokio::time::Instant;

/// The longest cool-down honoured, whatever `retry-after` says: a backend that asks for
/// an hour is asked again after this.
pub const MAX_COOLDOWN: Duration = Duration::from_secs(600);

/// Headers that carry a client's own credentials to a backend.
const CREDENTIAL_HEADERS: [&str; 2] = ["authorization", "x-api-key"];

/// Who is cooling down: a hash of the credentials a request carries (the same for
/// every request that carries none, i.e. uses the backend's configured key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Caller(u64);

#[derive(Debug, Default)]
pub struct Cooldown {
    until: Mutex<HashMap<Caller, Instant>>,
    seed: RandomState,
}

impl Cooldown {
    /// The caller a request with these (already forwarded) headers is.
    pub fn caller(&self, headers: &HeaderMap) -> Caller {
        let credentials: Vec<&[u8]> = CREDENTIAL_HEADERS
            .iter()
            .flat_map(|name| headers.get_all(*name))
            .map(|value| value.as_bytes())
            .collect();
        Caller(self.seed.hash_one(credentials))
    }

    /// How long `caller` must still wait, if it is cooling down.
    pub fn remaining(&self, caller: Caller) -> Option<Duration> {
        let now = Instant::now();
        let until = self.lock().get(&caller).copied()?;
        (until > now).then(|| until - now)
    }

    /// `caller` was told to wait `retry_after` (capped at [`MAX_COOLDOWN`]).
    pub fn cool(&self, caller: Caller, retry_after: Duration) {
        let now = Instant::now();
        let mut until = self.lock();
        // Forget callers whose wait is over, so the map holds only live cool-downs.
        until.retain(|_, at| *at > now);
        until.insert(caller, now + retry_after.min(MAX_COOLDOWN));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Caller, Instant>> {
        self.until.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whole seconds in a `retry-after` header (the HTTP-date form is not honoured).
pub fn retry_after_secs(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_key(key: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", http::HeaderValue::from_static(key));
        headers
    }

    #[tokio::test(start_paused = true)]
    async fn a_cool_down_holds_one_caller_for_its_time_and_no_other() {
        let cooldown = Cooldown::default();
        let (alice, bob) = (
            cooldown.caller(&with_key("a")),
            cooldown.caller(&with_key("b")),
        );
        let shared = cooldown.caller(&HeaderMap::new());
        assert_ne!(alice, bob);
        assert_ne!(alice, shared);
        cooldown.cool(alice, Duration::from_secs(7));
        assert_eq!(cooldown.remaining(alice), Some(Duration::from_secs(7)));
        assert_eq!(cooldown.remaining(bob), None);
        assert_eq!(cooldown.remaining(shared), None);
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(cooldown.remaining(alice), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_huge_retry_after_is_capped() {
        let cooldown = Cooldown::default();
        let caller = cooldown.caller(&HeaderMap::new());
        cooldown.cool(caller, Duration::from_secs(86_400));
        assert_eq!(cooldown.remaining(caller), Some(MAX_COOLDOWN));
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after_secs(&headers), None);
        headers.insert("retry-after", http::HeaderValue::from_static(" 12 "));
        assert_eq!(retry_after_secs(&headers), Some(12));
        headers.insert(
            "retry-after",
            http::HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after_secs(&headers), None);
    }
}
