//! The sticky rule: a session keeps an explicit choice (`/cloud`, `/local`, the header)
//! for its follow-on requests until it expires. Sessions are keyed by what clients
//! really send (Claude Code's `X-Claude-Code-Session-Id` and the `session_id` inside its
//! `metadata.user_id`, Codex's `session-id`), else by a digest of the conversation's
//! start (model, system prompt, caller's user id, first user message); either way
//! scoped by a one-way digest of the client's credential, so that two clients never
//! share a session ([`session_id`]). The store is bounded, and a live sticky-cloud
//! choice is not replaced by a concurrent sticky-local.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use glider_ngl::{Request, Role};
use http::HeaderMap;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::Target;

/// The header the Cursor plane sets on the turns it routes: the conversation id from
/// the Agent RPC frames (Cursor sends no session header of its own). Never forwarded to
/// a backend (only listed client headers are).
pub const CURSOR_CONVERSATION_HEADER: &str = "x-glider-cursor-conversation";

/// The headers that carry a client's credential, each dialect's own.
const CREDENTIAL_HEADERS: [&str; 3] = ["x-api-key", "authorization", "x-goog-api-key"];

/// The opening of a session key Glider derived from the conversation's start (no
/// session id was sent), after the credential's scope.
const DERIVED: &str = "prefix:";

/// The session a request belongs to. A session id the client sent names it — Glider's
/// Cursor plane header, `X-Claude-Code-Session-Id`, Codex's `session-id`, or the
/// `session_id` inside `metadata.user_id` (a plain user id names a user, not a
/// session) — else it is derived: `prefix:` and a digest of the model, the system
/// prompt, the plain user id if any and the first user message. Either way a client
/// that sends a credential (`x-api-key`, `Authorization`, `x-goog-api-key`) has it
/// scoped by the credential's one-way digest: `k<16 hex>/claude-code:<id>`. The
/// credential itself is never part of the key, and no unscoped key can be read as a
/// scoped one (unscoped keys open with their kind, never with `k<hex>/`).
pub fn session_id(request: &Request, headers: &HeaderMap) -> Option<String> {
    let key = named_session(request, headers).or_else(|| derived_session(request))?;
    Some(match credential_scope(headers) {
        Some(scope) => format!("k{scope:016x}/{key}"),
        None => key,
    })
}

/// Whether `session` (a [`session_id`]) was derived from the conversation's start
/// rather than named by the client.
pub fn is_derived(session: &str) -> bool {
    let unscoped = match session.split_once('/') {
        Some((scope, rest)) if scope.starts_with('k') => rest,
        _ => session,
    };
    unscoped.starts_with(DERIVED)
}

/// The session id the client sent, with its kind.
fn named_session(request: &Request, headers: &HeaderMap) -> Option<String> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
    };
    if let Some(id) = header(CURSOR_CONVERSATION_HEADER) {
        return Some(format!("cursor:{id}"));
    }
    if let Some(id) = header("x-claude-code-session-id") {
        return Some(format!("claude-code:{id}"));
    }
    if let Some(id) = header("session-id") {
        return Some(format!("codex:{id}"));
    }
    user_id(request)
        .and_then(session_of_user_id)
        .map(|session| format!("user:{session}"))
}

/// No id sent: the conversation's start stands for it — the model, the system prompt
/// (the leading system turns), the caller's plain user id and the first user message.
fn derived_session(request: &Request) -> Option<String> {
    let first = request
        .turns
        .iter()
        .find(|t| t.role == Role::User)?
        .plain_text();
    let system: Vec<String> = request
        .turns
        .iter()
        .take_while(|t| t.role == Role::System)
        .map(|t| t.plain_text())
        .collect();
    let mut digest = Sha256::new();
    digest_field(&mut digest, request.model.as_bytes());
    digest_field(&mut digest, system.join("\n").as_bytes());
    digest_field(&mut digest, user_id(request).unwrap_or_default().as_bytes());
    digest_field(&mut digest, first.as_bytes());
    Some(format!("{DERIVED}{:016x}", first_u64(digest)))
}

/// The one-way digest of the credential the client sent (every credential header it
/// sent, by name), `None` when it sent none.
fn credential_scope(headers: &HeaderMap) -> Option<u64> {
    let mut digest = Sha256::new();
    digest_field(&mut digest, b"glider session credential");
    let mut any = false;
    for name in CREDENTIAL_HEADERS {
        if let Some(value) = headers.get(name).filter(|v| !v.is_empty()) {
            digest_field(&mut digest, name.as_bytes());
            digest_field(&mut digest, value.as_bytes());
            any = true;
        }
    }
    any.then(|| first_u64(digest))
}

/// Put `field` in `digest` with its length first, so that no two field lists hash
/// alike by where one field ends and the next begins.
fn digest_field(digest: &mut Sha256, field: &[u8]) {
    digest.update((field.len() as u64).to_le_bytes());
    digest.update(field);
}

/// A digest's first eight bytes.
fn first_u64(digest: Sha256) -> u64 {
    let bytes = digest.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(first)
}

/// The caller's `metadata.user_id`, when it sent one.
fn user_id(request: &Request) -> Option<&str> {
    request
        .metadata
        .as_ref()
        .and_then(|m| m.get("user_id"))
        .and_then(|u| u.as_str())
        .filter(|u| !u.is_empty())
}

/// The session inside a `metadata.user_id`: Claude Code's JSON form
/// (`{"device_id": ..., "session_id": ...}`) or its older
/// `user_<hash>_account_<id>_session_<uuid>`. A plain user id (`alice`) names no
/// session.
fn session_of_user_id(user: &str) -> Option<String> {
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(user) {
        return value
            .get("session_id")
            .and_then(|s| s.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
    }
    user.rsplit_once("_session_")
        .map(|(_, session)| session)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

#[derive(Debug, Clone)]
struct Entry {
    target: Target,
    set_at: Instant,
    used_at: Instant,
}

/// What happened to a `set`.
#[derive(Debug, Clone, PartialEq)]
pub enum SetOutcome {
    Stored,
    /// A live sticky-cloud choice younger than the guard kept its place.
    KeptCloud,
}

/// Session → sticky target, bounded and expiring. Shared across config reloads.
#[derive(Debug, Default)]
pub struct StickyStore {
    entries: Mutex<HashMap<String, Entry>>,
}

impl StickyStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live target of `session`, refreshing its use time.
    pub fn get(&self, session: &str, ttl: Duration) -> Option<(Target, Duration)> {
        let now = Instant::now();
        let mut entries = self.lock();
        let entry = entries.get_mut(session)?;
        if now.duration_since(entry.used_at) > ttl {
            entries.remove(session);
            return None;
        }
        entry.used_at = now;
        Some((entry.target.clone(), now.duration_since(entry.set_at)))
    }

    /// Remember `target` for `session`, unless that would replace a sticky-cloud
    /// choice made less than `cloud_guard` ago with a local one.
    pub fn set(
        &self,
        session: &str,
        target: Target,
        ttl: Duration,
        cloud_guard: Duration,
        max: usize,
    ) -> SetOutcome {
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(current) = entries.get(session)
            && current.target == Target::Cloud
            && target != Target::Cloud
            && now.duration_since(current.set_at) < cloud_guard
            && now.duration_since(current.used_at) <= ttl
        {
            return SetOutcome::KeptCloud;
        }
        if entries.len() >= max && !entries.contains_key(session) {
            entries.retain(|_, e| now.duration_since(e.used_at) <= ttl);
            if entries.len() >= max
                && let Some(oldest) = entries
                    .iter()
                    .min_by_key(|(_, e)| e.used_at)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(
            session.to_owned(),
            Entry {
                target,
                set_at: now,
                used_at: now,
            },
        );
        SetOutcome::Stored
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::Turn;
    use std::sync::Arc;

    const TTL: Duration = Duration::from_secs(60);
    const GUARD: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn choices_expire_after_the_ttl_of_disuse() {
        let store = StickyStore::default();
        store.set("s", Target::Cloud, TTL, GUARD, 10);
        tokio::time::advance(Duration::from_secs(50)).await;
        assert_eq!(store.get("s", TTL).map(|(t, _)| t), Some(Target::Cloud));
        tokio::time::advance(Duration::from_secs(50)).await;
        assert_eq!(
            store.get("s", TTL).map(|(t, _)| t),
            Some(Target::Cloud),
            "use refreshed it"
        );
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(store.get("s", TTL), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_store_is_bounded() {
        let store = StickyStore::default();
        for i in 0..10 {
            store.set(&format!("s{i}"), Target::Local, TTL, GUARD, 4);
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(store.len(), 4);
        assert!(store.get("s9", TTL).is_some());
        assert!(
            store.get("s0", TTL).is_none(),
            "the least recently used went first"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_live_sticky_cloud_is_not_replaced_by_a_concurrent_local() {
        let store = StickyStore::default();
        assert_eq!(
            store.set("s", Target::Cloud, TTL, GUARD, 10),
            SetOutcome::Stored
        );
        assert_eq!(
            store.set("s", Target::Local, TTL, GUARD, 10),
            SetOutcome::KeptCloud
        );
        assert_eq!(store.get("s", TTL).map(|(t, _)| t), Some(Target::Cloud));
        tokio::time::advance(GUARD).await;
        assert_eq!(
            store.set("s", Target::Local, TTL, GUARD, 10),
            SetOutcome::Stored
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_cloud_and_local_always_end_cloud() {
        for round in 0..200 {
            let store = Arc::new(StickyStore::default());
            let session = format!("race{round}");
            let (a, b) = (store.clone(), store.clone());
            let (s1, s2) = (session.clone(), session.clone());
            let cloud = tokio::spawn(async move { a.set(&s1, Target::Cloud, TTL, GUARD, 10) });
            let local = tokio::spawn(async move { b.set(&s2, Target::Local, TTL, GUARD, 10) });
            let (cloud, local) = (cloud.await.expect("task"), local.await.expect("task"));
            assert_eq!(cloud, SetOutcome::Stored);
            // Whichever ran first, a live StickyCloud wins.
            assert_eq!(
                store.get(&session, TTL).map(|(t, _)| t),
                Some(Target::Cloud),
                "round {round}: {local:?}"
            );
        }
    }

    #[test]
    fn sessions_come_from_what_clients_send() {
        let mut request = Request {
            model: "m".into(),
            turns: vec![Turn::text(Role::User, "hello")],
            ..Request::default()
        };
        let mut headers = HeaderMap::new();
        let prefix = session_id(&request, &headers).expect("prefix");
        assert!(prefix.starts_with("prefix:"));
        assert!(is_derived(&prefix));
        request.metadata =
            Some(serde_json::json!({"user_id": "user_abc_account__session_1234-5678"}));
        assert_eq!(
            session_id(&request, &headers).as_deref(),
            Some("user:1234-5678")
        );
        request.metadata =
            Some(serde_json::json!({"user_id": "{\"device_id\":\"d\",\"session_id\":\"s-json\"}"}));
        assert_eq!(
            session_id(&request, &headers).as_deref(),
            Some("user:s-json")
        );
        headers.insert("session-id", "codex-1".parse().expect("header"));
        assert_eq!(
            session_id(&request, &headers).as_deref(),
            Some("codex:codex-1")
        );
        headers.insert("x-claude-code-session-id", "cc-1".parse().expect("header"));
        assert_eq!(
            session_id(&request, &headers).as_deref(),
            Some("claude-code:cc-1")
        );
        assert!(!is_derived("claude-code:cc-1"));
        headers.insert(
            CURSOR_CONVERSATION_HEADER,
            "conv-1".parse().expect("header"),
        );
        assert_eq!(
            session_id(&request, &headers).as_deref(),
            Some("cursor:conv-1")
        );
    }

    /// A request opening with `first`, under `system` (none: no system turn).
    fn opening(system: Option<&str>, first: &str) -> Request {
        let mut turns: Vec<Turn> = system
            .map(|s| Turn::text(Role::System, s))
            .into_iter()
            .collect();
        turns.push(Turn::text(Role::User, first));
        Request {
            model: "m".into(),
            turns,
            ..Request::default()
        }
    }

    fn with_header(name: &'static str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, value.parse().expect("header"));
        headers
    }

    #[test]
    fn two_clients_with_the_same_opening_words_get_different_sessions() {
        let request = opening(Some("You are a helper."), "hello");
        let a = session_id(&request, &with_header("x-api-key", "sk-aaa")).expect("a");
        let b = session_id(&request, &with_header("x-api-key", "sk-bbb")).expect("b");
        assert_ne!(a, b, "two API keys, two sessions");
        let bearer = session_id(&request, &with_header("authorization", "Bearer sk-aaa"));
        assert_ne!(bearer.as_deref(), Some(a.as_str()));
        assert_eq!(
            session_id(&request, &with_header("x-api-key", "sk-aaa")).as_deref(),
            Some(a.as_str()),
            "one client's requests keep one session"
        );
        for key in [&a, &b] {
            assert!(
                !key.contains("sk-"),
                "the credential never in the key: {key}"
            );
            assert!(is_derived(key), "{key}");
        }
    }

    #[test]
    fn the_same_opening_under_two_system_prompts_is_two_sessions() {
        let headers = with_header("x-api-key", "sk-aaa");
        let a = session_id(&opening(Some("You review code."), "hello"), &headers);
        let b = session_id(&opening(Some("You write poems."), "hello"), &headers);
        let none = session_id(&opening(None, "hello"), &headers);
        assert_ne!(a, b);
        assert_ne!(a, none);
    }

    #[test]
    fn a_session_header_is_scoped_by_the_credential() {
        let request = opening(None, "hello");
        let mut a = with_header("x-api-key", "sk-aaa");
        a.insert("x-claude-code-session-id", "cc-1".parse().expect("header"));
        let mut b = with_header("authorization", "Bearer sk-bbb");
        b.insert("x-claude-code-session-id", "cc-1".parse().expect("header"));
        let (a, b) = (
            session_id(&request, &a).expect("a"),
            session_id(&request, &b).expect("b"),
        );
        assert_ne!(a, b, "one session id under two keys: two sessions");
        for key in [&a, &b] {
            assert!(key.ends_with("/claude-code:cc-1"), "{key}");
            assert!(key.starts_with('k'), "{key}");
            assert!(!key.contains("sk-"), "{key}");
            assert!(!is_derived(key), "{key}");
        }
    }

    #[test]
    fn a_plain_user_id_names_no_session() {
        let mut first = opening(None, "summarize my notes");
        let mut second = opening(None, "plan my week");
        for request in [&mut first, &mut second] {
            request.metadata = Some(serde_json::json!({"user_id": "alice"}));
        }
        let headers = HeaderMap::new();
        let (a, b) = (
            session_id(&first, &headers).expect("a"),
            session_id(&second, &headers).expect("b"),
        );
        assert_ne!(a, b, "two conversations of one user are two sessions");
        assert!(is_derived(&a), "{a}");
        assert!(!a.contains("alice"), "{a}");
        // The user id still tells two users' identical openings apart.
        let mut other_user = opening(None, "summarize my notes");
        other_user.metadata = Some(serde_json::json!({"user_id": "u-1"}));
        assert_ne!(
            session_id(&other_user, &headers).as_deref(),
            Some(a.as_str())
        );
        // Claude Code's JSON user id with a session in it still names that session.
        first.metadata = Some(serde_json::json!({
            "user_id": "{\"device_id\":\"d1\",\"account_uuid\":\"\",\"session_id\":\"sess-9\"}"
        }));
        assert_eq!(session_id(&first, &headers).as_deref(), Some("user:sess-9"));
        first.metadata = Some(serde_json::json!({"user_id": "{\"device_id\":\"d1\"}"}));
        assert!(is_derived(&session_id(&first, &headers).expect("derived")));
    }
}
