//! Replica pools (issue 17) over loopback: a `vllm` backend with `replicas:` in front of
//! three mock OpenAI-compatible servers. Each session keeps to one replica across its
//! requests, the session key reaches the replicas as `x-session-id`, a replica that
//! stops moves only its own sessions (and no request fails), and the system-and-tools
//! prefix a session sends is byte-identical request to request (this gateway keeps no
//! context log, so no continuity record is added: with one, the record joins the
//! system text and changes it per request; see docs/scale.md).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use glider_ngl::{Dialect, Part, Role, Turn};
use glider_test_support::{MockVendor, RecordedRequest};
use serde_json::value::RawValue;

const SESSIONS: usize = 100;

async fn replicas() -> Vec<MockVendor> {
    let mut mocks = Vec::new();
    for _ in 0..3 {
        mocks.push(MockVendor::start(Default::default()).await);
    }
    mocks
}

fn pool_config(mocks: &[MockVendor]) -> String {
    let urls: Vec<String> = mocks
        .iter()
        .map(|m| format!("'{}/v1'", m.base_url()))
        .collect();
    format!(
        "backends:\n\
         \x20 - {{name: pool, type: vllm, base_url: {}, replicas: [{}], models: [m-vllm], connect_timeout_secs: 2}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n",
        urls[0],
        urls[1..].join(", ")
    )
}

/// One turn of session `session` (Codex's `session-id` header names it).
async fn ask(gw: &Gateway, session: usize, text: &str) -> Reply {
    let body = wire(Dialect::OpenAiChat, &text_request("m-vllm", text, false));
    let session_header = format!("pool-session-{session}");
    post(
        &gw.base,
        "/v1/chat/completions",
        body.to_string(),
        &[("session-id", session_header.as_str())],
    )
    .await
}

/// For each replica, the session keys (`x-session-id`) of the generation requests it
/// served since the last clear.
fn keys_per_replica(mocks: &[MockVendor]) -> Vec<Vec<String>> {
    mocks
        .iter()
        .map(|m| {
            m.requests()
                .iter()
                .filter(|r| r.path == "/v1/chat/completions")
                .map(|r| {
                    r.header("x-session-id")
                        .expect("the session key header")
                        .to_owned()
                })
                .collect()
        })
        .collect()
}

/// Which replica served each session key; panics if one was served by two.
fn replica_of_each(keys: &[Vec<String>]) -> BTreeMap<String, usize> {
    let mut owner = BTreeMap::new();
    for (replica, keys) in keys.iter().enumerate() {
        for key in keys {
            if let Some(other) = owner.insert(key.clone(), replica)
                && other != replica
            {
                panic!("session {key} was served by replicas {other} and {replica}");
            }
        }
    }
    owner
}

#[tokio::test]
async fn sessions_keep_to_one_replica_and_a_dead_one_moves_only_its_own() {
    let mut mocks = replicas().await;
    let gw = gateway(&pool_config(&mocks)).await;

    for round in 0..2 {
        for session in 0..SESSIONS {
            let reply = ask(&gw, session, &format!("turn {round} of {session}")).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
    }
    let keys = keys_per_replica(&mocks);
    let before = replica_of_each(&keys);
    assert_eq!(before.len(), SESSIONS, "one key per session: {before:?}");
    let served: usize = keys.iter().map(Vec::len).sum();
    assert_eq!(
        served,
        2 * SESSIONS,
        "each request reached exactly one replica"
    );
    for (replica, keys) in keys.iter().enumerate() {
        // 100 sessions over 3 replicas by a fair hash: none is left idle.
        assert!(
            keys.len() >= 20,
            "replica {replica} got only {} requests",
            keys.len()
        );
    }
    // The header carries a digest, never the client's own id.
    assert!(
        before.keys().all(|k| !k.contains("pool-session")),
        "{before:?}"
    );

    // Replica 1 stops: its sessions move, everyone else's stay, nothing fails.
    for mock in &mocks {
        mock.clear_requests();
    }
    mocks.remove(1).shutdown().await;
    for session in 0..SESSIONS {
        let reply = ask(&gw, session, &format!("after the failure, {session}")).await;
        assert_eq!(reply.status, 200, "session {session}: {}", reply.text());
    }
    let survivors = keys_per_replica(&mocks);
    let after = replica_of_each(&survivors);
    assert_eq!(after.len(), SESSIONS, "every session was answered once");
    let survivor_index = |old: usize| match old {
        0 => Some(0),
        2 => Some(1),
        _ => None,
    };
    let mut moved = 0;
    for (key, old) in &before {
        match survivor_index(*old) {
            Some(now) => assert_eq!(after[key], now, "session {key} moved off a live replica"),
            None => moved += 1,
        }
    }
    assert_eq!(
        moved,
        keys[1].len() / 2,
        "exactly the dead replica's sessions moved"
    );
}

/// A Claude Code-like session: a long system prompt, three tools, turns that grow.
fn claude_turn(turns: usize) -> glider_ngl::Request {
    let mut request = text_request("m-vllm", "start the task", true);
    request.turns[0] = Turn::text(
        Role::System,
        "You are a coding agent. Follow the repository's conventions. ".repeat(20),
    );
    request.tools = ["read_file", "write_file", "run_tests"]
        .iter()
        .map(|name| glider_ngl::ToolDef {
            name: (*name).into(),
            description: Some(format!("{name}: does what it says")),
            parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            native: None,
        })
        .collect();
    for turn in 1..turns {
        request.turns.push(Turn {
            role: Role::Assistant,
            parts: vec![Part::text(format!("done step {turn}"))],
        });
        request
            .turns
            .push(Turn::text(Role::User, format!("now step {}", turn + 1)));
    }
    request
}

/// The raw bytes of the system message and of the tools in an upstream chat body.
fn prefix_bytes(request: &RecordedRequest) -> (String, String) {
    let body: BTreeMap<String, Box<RawValue>> =
        serde_json::from_slice(&request.raw_body).expect("a JSON body");
    let messages: Vec<Box<RawValue>> =
        serde_json::from_str(body["messages"].get()).expect("messages");
    let tools = body.get("tools").expect("the tools were sent");
    (messages[0].get().to_owned(), tools.get().to_owned())
}

#[tokio::test]
async fn a_sessions_system_and_tools_prefix_is_byte_identical_request_to_request() {
    let mocks = replicas().await;
    let gw = gateway(&pool_config(&mocks)).await;
    for turns in 1..=4 {
        let body = wire(Dialect::Anthropic, &claude_turn(turns));
        let reply = post(
            &gw.base,
            "/v1/messages",
            body.to_string(),
            &[("x-claude-code-session-id", "prefix-session")],
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let upstream: Vec<RecordedRequest> = mocks
        .iter()
        .flat_map(|m| m.requests())
        .filter(|r| r.path == "/v1/chat/completions")
        .collect();
    assert_eq!(upstream.len(), 4, "one replica served the whole session");
    let prefixes: BTreeSet<(String, String)> = upstream.iter().map(prefix_bytes).collect();
    assert_eq!(
        prefixes.len(),
        1,
        "the prefix changed within the session: {prefixes:#?}"
    );
    let keys: BTreeSet<&str> = upstream
        .iter()
        .filter_map(|r| r.header("x-session-id"))
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
}

/// Each replica's health as the last probe found it.
fn replica_health(gw: &Gateway) -> Vec<glider_backend::health::HealthStatus> {
    let runtime = gw.engine.runtime();
    let pool = runtime
        .backend("pool")
        .and_then(|b| b.pool.as_ref())
        .expect("the pool");
    pool.replicas.iter().map(|r| r.health().status).collect()
}

#[tokio::test]
async fn a_replica_probed_down_is_skipped_by_affinity_before_any_request_and_back_once_up() {
    use glider_backend::health::HealthStatus::{Down, Up};
    let mut mocks = replicas().await;
    let gw = gateway(&pool_config(&mocks)).await;
    gw.engine.probe_all().await;
    assert_eq!(replica_health(&gw), [Up, Up, Up]);
    for session in 0..SESSIONS {
        assert_eq!(ask(&gw, session, "first").await.status, 200);
    }
    let before = replica_of_each(&keys_per_replica(&mocks));

    // Replica 1 goes away; the probe finds it down before any request is sent.
    let addr: std::net::SocketAddr = mocks[1]
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .expect("a loopback address");
    mocks.remove(1).shutdown().await;
    gw.engine.probe_all().await;
    assert_eq!(replica_health(&gw), [Up, Down, Up]);
    let runtime = gw.engine.runtime();
    let backend = runtime.backend("pool").expect("the pool");
    assert_eq!(backend.health().status, Up, "the pool serves on two");
    assert!(
        backend
            .health()
            .detail
            .is_some_and(|d| d.contains(&format!("replica http://{addr}/v1"))),
        "{:?}",
        backend.health()
    );
    for mock in &mocks {
        mock.clear_requests();
    }
    for session in 0..SESSIONS {
        assert_eq!(ask(&gw, session, "while down").await.status, 200);
    }
    // No request tried the down replica first: its breaker saw no failure.
    let pool = backend.pool.as_ref().expect("the pool");
    assert_eq!(
        pool.replicas[1].breaker.state(),
        glider_backend::BreakerState::Closed
    );
    let survivors = replica_of_each(&keys_per_replica(&mocks));
    let moved = before.iter().filter(|(_, r)| **r == 1).count();
    assert!(moved > 0, "some sessions were on replica 1");
    for (key, old) in &before {
        match old {
            0 => assert_eq!(survivors[key], 0, "{key} moved off a live replica"),
            2 => assert_eq!(survivors[key], 1, "{key} moved off a live replica"),
            _ => assert!(survivors.contains_key(key), "{key} was answered"),
        }
    }

    // Back on the same address: the next probe finds it up, and its sessions return.
    let back = MockVendor::start_on(addr, Default::default())
        .await
        .expect("the replica's port is free again");
    gw.engine.probe_all().await;
    assert_eq!(replica_health(&gw), [Up, Up, Up]);
    for session in 0..SESSIONS {
        assert_eq!(ask(&gw, session, "back").await.status, 200);
    }
    let returned = back
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .count();
    assert_eq!(returned, moved, "exactly replica 1's sessions came back");
}

#[tokio::test]
async fn glider_serve_shows_each_replicas_health_on_api_backends() {
    let live = MockVendor::start(Default::default()).await;
    let dead = format!("http://127.0.0.1:{}/v1", closed_port());
    let home = tempfile::tempdir().expect("home");
    let served = common::serve::serve_yaml(
        home.path(),
        &format!(
            "backends:\n\
             \x20 - {{name: pool, type: vllm, base_url: '{}/v1', replicas: ['{dead}'], models: [m-vllm], connect_timeout_secs: 2}}\n\
             routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n",
            live.base_url()
        ),
    );
    let view = served
        .poll_json("/api/backends", |v| {
            v["backends"][0]["replicas"][1]["health"] == "down"
        })
        .await;
    let pool = &view["backends"][0];
    assert_eq!(pool["health"], "up", "{pool}");
    let replicas = pool["replicas"].as_array().expect("the replicas");
    assert_eq!(replicas.len(), 2);
    assert_eq!(replicas[0]["base_url"], format!("{}/v1", live.base_url()));
    assert_eq!(
        (
            replicas[0]["health"].as_str(),
            replicas[0]["breaker"].as_str()
        ),
        (Some("up"), Some("closed"))
    );
    assert_eq!(replicas[1]["base_url"], dead);
    assert!(
        replicas[1]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("unreachable")),
        "{pool}"
    );
    served.stop();
}
