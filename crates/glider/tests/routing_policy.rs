//! The default routing policy (docs/routing.md, "The default policy") measured on the
//! requests the real CLIs sent: every captured request of Claude Code 2.1.197 and
//! Codex 0.171.0 (`tests/fixtures/cli`, docs/captured-traffic.md) replayed in its
//! scenario's order through a real `glider serve` with a local mock (Ollama) and a cloud
//! mock (Anthropic and OpenAI). Per kind of request, the requests and estimated tokens
//! each side received must be the figures docs/routing.md's policy table states, so the
//! table is what the code does. Counts, never timing.

mod common;

use std::collections::BTreeMap;

use common::serve::serve_yaml;
use common::*;
use glider_config::{Config, ConfigHandle};
use glider_engine::Engine;
use glider_engine::router::RequestKind;
use glider_ngl::Dialect;
use glider_test_support::captured::{captured, clis, scenarios};
use glider_test_support::{MockConfig, MockVendor};

/// The default profile's shape: one local model with a 32k window, the two vendors'
/// models in the cloud; everything else (the context log, `context.compaction`) as
/// shipped, but the summarizer off (its own requests to the local model, off the
/// request path, are not the client's), plus `context` keys `extra` (`, key: value`).
fn config(local: &MockVendor, cloud: &MockVendor, extra: &str) -> String {
    let (local, cloud) = (local.base_url(), cloud.base_url());
    format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{local}', models: ['qwen2.5-coder:7b'], default_model: 'qwen2.5-coder:7b', context_window: 32768}}\n\
         \x20 - {{name: claude, type: anthropic, base_url: '{cloud}', api_key: k, models: ['claude-*'], default_model: claude-sonnet-4-5}}\n\
         \x20 - {{name: openai, type: openai, base_url: '{cloud}/v1', api_key: k, models: ['gpt-*'], default_model: gpt-5-codex}}\n\
         context: {{summarizer: {{enabled: false}}{extra}}}\n"
    )
}

/// One kind's requests and estimated input tokens, in all and sent local.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Tally {
    requests: u64,
    tokens: u64,
    local_requests: u64,
    local_tokens: u64,
}

impl Tally {
    fn add(&mut self, tokens: u64, local: bool) {
        self.requests += 1;
        self.tokens += tokens;
        if local {
            self.local_requests += 1;
            self.local_tokens += tokens;
        }
    }
}

/// Replay every captured session through `glider serve` with `extra` context keys; the
/// tally per kind, and every request's `cli/scenario/file -> backend`.
async fn replay(extra: &str) -> (BTreeMap<RequestKind, Tally>, Vec<String>) {
    let local = MockVendor::start(MockConfig::default()).await;
    let cloud = MockVendor::start(MockConfig::default()).await;
    let yaml = config(&local, &cloud, extra);
    let home = tempfile::tempdir().expect("tempdir");
    let served = serve_yaml(home.path(), &yaml);
    // The kind and the token estimate of each request, read by the same engine code on
    // the same config (a dry run: nothing is sent, nothing remembered).
    let engine = Engine::new(ConfigHandle::new(
        Config::parse(&yaml, "test").expect("valid"),
        None,
    ));
    let mut tally: BTreeMap<RequestKind, Tally> = BTreeMap::new();
    let mut routes = Vec::new();
    for cli in clis() {
        let front = if cli.starts_with("codex") {
            Dialect::OpenAiResponses
        } else {
            Dialect::Anthropic
        };
        for scenario in scenarios(&cli) {
            for r in captured(&cli, &scenario) {
                if r.kind == "probe" {
                    continue;
                }
                // Each scenario is its own session (the captures number their ids from
                // 1 in each, so as sent they would all share one).
                let mut headers = Vec::new();
                for name in ["x-claude-code-session-id", "session-id"] {
                    if let Some(id) = r.header(name) {
                        headers.push((name, format!("{cli}-{scenario}-{id}")));
                    }
                }
                let header_refs: Vec<(&str, &str)> =
                    headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                let mut map = http::HeaderMap::new();
                for (name, value) in &headers {
                    map.insert(*name, value.parse().expect("ascii"));
                }
                let body = r.body_bytes();
                let explained = engine
                    .explain(front, &body, &map)
                    .await
                    .unwrap_or_else(|e| panic!("{cli}/{scenario}/{}: {e:?}", r.file));
                let reply = post(&served.gateway, &r.path, body, &header_refs).await;
                let case = format!("{cli}/{scenario}/{}", r.file);
                assert_eq!(reply.status, 200, "{case}: {}", reply.text());
                let route = reply.header("x-glider-route").to_owned();
                let backend = route
                    .split("; ")
                    .find_map(|p| p.strip_prefix("backend="))
                    .unwrap_or_else(|| panic!("{case}: no backend in {route}"))
                    .to_owned();
                tally
                    .entry(explained.kind)
                    .or_default()
                    .add(explained.estimated_tokens, backend == "local");
                routes.push(format!("{case} {} -> {backend}", explained.kind));
            }
        }
    }
    // The local mock saw exactly the requests the routes name local (no fallback, no
    // second try hid anywhere).
    let local_chats = local
        .requests()
        .iter()
        .filter(|r| r.path == "/api/chat")
        .count() as u64;
    let local_routed: u64 = tally.values().map(|t| t.local_requests).sum();
    assert_eq!(local_chats, local_routed, "{routes:#?}");
    drop(served);
    (tally, routes)
}

/// `12.3 %`.
fn percent(part: u64, whole: u64) -> String {
    format!("{:.1} %", part as f64 * 100.0 / whole.max(1) as f64)
}

/// `61,234`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (at, c) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The figures of a table row as docs/routing.md writes them:
/// `| kind | requests | share | tokens | share | sent local |`.
fn row(name: &str, t: &Tally, all: &Tally) -> String {
    format!(
        "| {name} | {} | {} | {} | {} | {} req., {} tokens ({}) |",
        t.requests,
        percent(t.requests, all.requests),
        thousands(t.tokens),
        percent(t.tokens, all.tokens),
        t.local_requests,
        thousands(t.local_tokens),
        percent(t.local_tokens, t.tokens),
    )
}

fn total(tally: &BTreeMap<RequestKind, Tally>) -> Tally {
    tally.values().fold(Tally::default(), |mut all, t| {
        all.requests += t.requests;
        all.tokens += t.tokens;
        all.local_requests += t.local_requests;
        all.local_tokens += t.local_tokens;
        all
    })
}

/// The measured table, one row per kind (in [`RequestKind::ALL`]'s order) and the sum.
fn measured_rows(tally: &BTreeMap<RequestKind, Tally>) -> Vec<String> {
    let all = total(tally);
    let mut rows: Vec<String> = RequestKind::ALL
        .iter()
        .map(|kind| {
            let t = tally.get(kind).copied().unwrap_or_default();
            row(&format!("`{kind}`"), &t, &all)
        })
        .collect();
    rows.push(row("all", &all, &all));
    rows
}

/// The measured figures of docs/routing.md's policy table (its rows' first seven cells).
fn documented_rows() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/routing.md"
    ))
    .expect("docs/routing.md");
    let section = doc
        .split("\n## The default policy")
        .nth(1)
        .expect("docs/routing.md has a section \"The default policy\"");
    section
        .lines()
        .skip_while(|l| !l.starts_with("| kind | requests |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            format!("{}|", cells[..7].join("|"))
        })
        .collect()
}

#[tokio::test]
async fn the_captured_sessions_go_where_the_documented_policy_says() {
    let (tally, routes) = replay("").await;
    let measured = measured_rows(&tally);
    assert_eq!(
        documented_rows(),
        measured,
        "docs/routing.md's policy table is not what a replay gives; measured:\n{}\n{routes:#?}",
        measured.join("\n")
    );
    let side = |kind: RequestKind| tally.get(&kind).copied().unwrap_or_default();
    // The policy itself, beside the figures: compactions and titles local with a local
    // model up; the user's /local main turn local, every other main turn and the rest
    // of the coding work in the cloud.
    for kind in [RequestKind::Compaction, RequestKind::Title] {
        let t = side(kind);
        assert!(t.requests > 0, "{kind} is captured");
        assert_eq!(t.local_requests, t.requests, "{kind}: {routes:#?}");
    }
    assert_eq!(side(RequestKind::MainTurn).local_requests, 1, "/local only");
    for kind in [
        RequestKind::ToolFollowup,
        RequestKind::Subagent,
        RequestKind::Image,
        RequestKind::TrivialFollowup,
    ] {
        assert_eq!(side(kind).local_requests, 0, "{kind}: {routes:#?}");
    }
    assert!(
        routes
            .iter()
            .any(|r| r.contains("cloud-flag/002-messages.json main_turn -> claude")),
        "{routes:#?}"
    );
}

/// The old default, `context.compaction: cloud`, sends no compaction local: what the
/// policy changed, and that the replay tells the two apart.
#[tokio::test]
async fn with_compaction_cloud_no_compaction_goes_local() {
    let (tally, routes) = replay(", compaction: cloud").await;
    let compactions = tally
        .get(&RequestKind::Compaction)
        .copied()
        .unwrap_or_default();
    assert_eq!(compactions.requests, 3, "{routes:#?}");
    assert_eq!(compactions.local_requests, 0, "{routes:#?}");
    assert_ne!(measured_rows(&tally), documented_rows());
}
