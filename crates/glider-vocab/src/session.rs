//! The session-key rule: which session a request belongs to. Sessions are keyed by
//! what clients really send (Claude Code's `X-Claude-Code-Session-Id` and the
//! `session_id` inside its `metadata.user_id`, Codex's `session-id`, the Cursor plane's
//! conversation header), else by a digest of the conversation's start (model, system
//! prompt, caller's user id, first user message); either way scoped by a one-way digest
//! of the client's credential, so that two clients never share a session
//! ([`session_id`]). The sticky rule, the budget kit, the context store and the
//! delegates all key by it.

use glider_ngl::{Request, Role};
use http::HeaderMap;
use sha2::{Digest, Sha256};

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
/// The session key of a request the router found none for (no user turn at all).
pub const UNSESSIONED: &str = "unsessioned";

#[cfg(test)]
mod tests {
    use super::*;
    use glider_ngl::Turn;

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
