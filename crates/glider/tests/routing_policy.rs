//! The default routing policy (docs/routing.md, "The default policy") measured on the
//! requests the real CLIs sent: every captured request of Claude Code 2.1.197 and
//! Codex 0.171.0 (`tests/fixtures/cli`, docs/captured-traffic.md) replayed in its
//! scenario's order through a real `glider serve` with a local mock (Ollama) and a cloud
//! mock (Anthropic and OpenAI). Per kind of request, the requests and estimated tokens
//! each side received must be the figures docs/routing.md's policy table states, so the
//! table is what the code does. Then the evidence: the same replay with shadow copies to
//! the local model and scripted answers that agree or disagree, and `glider shadow
//! report`'s agreement per kind exactly what those samples give, and `glider route
//! report` (and `--apply`) on that history. Counts, never timing. One file because all
//! three run on the same replay and read its routes.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::serve::serve_yaml;
use common::*;
use glider_config::{Config, ConfigHandle};
use glider_engine::Engine;
use glider_engine::router::RequestKind;
use glider_ngl::Dialect;
use glider_test_support::captured::{captured, clis, scenarios};
use glider_test_support::{MockConfig, MockVendor};
use serde_json::Value;

const GLIDER: &str = env!("CARGO_BIN_EXE_glider");

/// What a replay runs under.
#[derive(Default)]
struct Setup {
    /// `context` keys beside the summarizer's (`, key: value`).
    context: &'static str,
    /// The `fan_out` section, if any.
    fan_out: Option<&'static str>,
    /// Scripted reply texts of the local and the cloud mock (default: an echo).
    local_reply: Option<&'static str>,
    cloud_reply: Option<&'static str>,
}

/// The default profile's shape: one local model with a 32k window, the two vendors'
/// models in the cloud; everything else (the context log, `context.compaction`) as
/// shipped, but the summarizer off (its own requests to the local model, off the
/// request path, are not the client's), plus the setup's keys.
fn config(local: &MockVendor, cloud: &MockVendor, setup: &Setup) -> String {
    let (local, cloud) = (local.base_url(), cloud.base_url());
    let fan_out = setup
        .fan_out
        .map(|f| format!("fan_out: {f}\n"))
        .unwrap_or_default();
    format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{local}', models: ['qwen2.5-coder:7b'], default_model: 'qwen2.5-coder:7b', context_window: 32768}}\n\
         \x20 - {{name: claude, type: anthropic, base_url: '{cloud}', api_key: k, models: ['claude-*'], default_model: claude-sonnet-4-5}}\n\
         \x20 - {{name: openai, type: openai, base_url: '{cloud}/v1', api_key: k, models: ['gpt-*'], default_model: gpt-5-codex}}\n\
         context: {{summarizer: {{enabled: false}}{}}}\n{fan_out}\
         routing:\n  classifier:\n    local_threshold: 2.0\n",
        setup.context
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

/// One replayed request: `cli/scenario/file`, its kind, and the rule and backend of
/// its `x-glider-route`.
#[derive(Debug)]
struct Routed {
    case: String,
    kind: RequestKind,
    rule: String,
    backend: String,
    /// The classifier's score and the estimated input tokens (the dry run's).
    score: Option<f64>,
    tokens: u64,
    /// Its last user message holds a tool result and then text (Claude Code's automatic
    /// compaction joins its instruction to the last tool result).
    tool_result_then_text: bool,
}

impl Routed {
    /// Sent to the cloud by the policy, not by the user: what shadow copies sample.
    fn sampled(&self) -> bool {
        self.backend != "local" && !matches!(self.rule.as_str(), "explicit" | "sticky")
    }
}

/// Whether an Anthropic body's last user message holds a tool result followed by text.
fn tool_result_then_text(body: &Value) -> bool {
    let Some(messages) = body["messages"].as_array() else {
        return false;
    };
    let Some(last) = messages.iter().rev().find(|m| m["role"] == "user") else {
        return false;
    };
    let types: Vec<&str> = last["content"]
        .as_array()
        .map(|c| c.iter().filter_map(|b| b["type"].as_str()).collect())
        .unwrap_or_default();
    types
        .iter()
        .position(|t| *t == "tool_result")
        .is_some_and(|at| types[at..].contains(&"text"))
}

struct Replay {
    tally: BTreeMap<RequestKind, Tally>,
    routes: Vec<Routed>,
    /// The server's `GLIDER_HOME`, kept for the commands that read it afterwards.
    home: tempfile::TempDir,
}

/// Replay every captured session through `glider serve` under `setup`; with shadow
/// copies on, each sampled request's sample is awaited before the next request (the
/// budget's one copy at a time), and the server is stopped (its files flushed).
async fn replay(setup: Setup) -> Replay {
    let mock = |reply: Option<&str>| MockConfig {
        reply_text: reply.map(str::to_owned),
        ..MockConfig::default()
    };
    // A local model that thinks, as the CLIs ask (a shadow copy is sent as the route
    // would have sent it, not fitted to the model).
    let local = MockVendor::start(MockConfig {
        thinking_models: vec!["qwen2.5-coder:7b".into()],
        ..mock(setup.local_reply)
    })
    .await;
    let cloud = MockVendor::start(mock(setup.cloud_reply)).await;
    let yaml = config(&local, &cloud, &setup);
    let home = tempfile::tempdir().expect("tempdir");
    let served = serve_yaml(home.path(), &yaml);
    // The kind and the token estimate of each request, read by the same engine code on
    // the same config (a dry run: nothing is sent, nothing remembered).
    let engine = Engine::new(ConfigHandle::new(
        Config::parse(&yaml, "test").expect("valid"),
        None,
    ));
    let mut tally: BTreeMap<RequestKind, Tally> = BTreeMap::new();
    let mut routes: Vec<Routed> = Vec::new();
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
                let field = |name: &str| {
                    route
                        .split("; ")
                        .find_map(|p| p.strip_prefix(name))
                        .unwrap_or_else(|| panic!("{case}: no {name} in {route}"))
                        .to_owned()
                };
                let (rule, backend) = (field("rule="), field("backend="));
                let routed = Routed {
                    case,
                    kind: explained.kind,
                    rule,
                    backend,
                    score: explained.score,
                    tokens: explained.estimated_tokens,
                    tool_result_then_text: tool_result_then_text(&r.body),
                };
                tally
                    .entry(routed.kind)
                    .or_default()
                    .add(explained.estimated_tokens, routed.backend == "local");
                routes.push(routed);
                if setup.fan_out.is_some() {
                    let sampled = routes.iter().filter(|r| r.sampled()).count();
                    served
                        .poll_json("/api/shadow", |v| v["kept"] == sampled)
                        .await;
                }
            }
        }
    }
    if setup.fan_out.is_some() {
        served.stop_within(Duration::from_secs(30));
        return Replay {
            tally,
            routes,
            home,
        };
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
    Replay {
        tally,
        routes,
        home,
    }
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
    let Replay { tally, routes, .. } = replay(Setup::default()).await;
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
    let flagged = |scenario: &str| {
        routes
            .iter()
            .find(|r| r.case.contains(scenario))
            .unwrap_or_else(|| panic!("{scenario} replayed"))
    };
    let cloud = flagged("cloud-flag/");
    assert_eq!(
        (cloud.rule.as_str(), cloud.backend.as_str()),
        ("explicit", "claude")
    );
    let local = flagged("local-flag/");
    assert_eq!(
        (local.rule.as_str(), local.backend.as_str()),
        ("explicit", "local")
    );
}

/// The old default, `context.compaction: cloud`, sends no compaction local: what the
/// policy changed, and that the replay tells the two apart.
#[tokio::test]
async fn with_compaction_cloud_no_compaction_goes_local() {
    let Replay { tally, routes, .. } = replay(Setup {
        context: ", compaction: cloud",
        ..Setup::default()
    })
    .await;
    let compactions = tally
        .get(&RequestKind::Compaction)
        .copied()
        .unwrap_or_default();
    assert_eq!(compactions.requests, 3, "{routes:#?}");
    assert_eq!(compactions.local_requests, 0, "{routes:#?}");
    assert_ne!(measured_rows(&tally), documented_rows());
}

/// `glider shadow report --json` under `home`, its rows added up per kind:
/// (samples, compared, agreed), and the text report.
fn report_per_kind(home: &std::path::Path) -> (BTreeMap<String, (u64, u64, u64)>, String) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(GLIDER)
            .env("GLIDER_HOME", home)
            .env_remove("GLIDER_CONFIG")
            .args(args)
            .output()
            .expect("glider runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let report: Value = serde_json::from_str(&run(&["shadow", "report", "--json"])).expect("JSON");
    let mut per_kind: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for row in report["summary"].as_array().expect("rows") {
        let kind = row["kind"].as_str().expect("every sample has its kind");
        let sums = per_kind.entry(kind.to_owned()).or_default();
        let n = |key: &str| row[key].as_u64().expect("a count");
        sums.0 += n("samples");
        sums.1 += n("compared");
        sums.2 += n("agreed");
    }
    (per_kind, run(&["shadow", "report"]))
}

/// The one captured compaction whose conversation edited a file (Claude Code's
/// `/compact` after fixing the typo in notes.txt), and that file: a summary of it must
/// name the file, so its shadow answer is compared by coverage.
const COMPACTION_MUST_NAME: (&str, &str) =
    ("claude-code-2.1.197/compact/002-compact.json", "notes.txt");

/// Shadow copies over the captured sessions, with compactions routed to the cloud
/// (`context.compaction: cloud`: the evidence one would gather before sending them
/// local) and every cloud-routed request the policy chose copied to the local model.
/// The mocks answer a trailing tool result alike and otherwise with their scripted
/// text. An agent's step compares tool calls and stop reasons, and agrees. A title, and
/// a compaction whose conversation edited nothing and left no error open, compares
/// text: it agrees when the two texts share words enough. One such compaction
/// disagrees whatever the texts: Claude Code's automatic one joins its instruction to
/// the last tool result, which the cloud mock (Anthropic) acknowledges ("tool result:
/// …") while the local one (Ollama, where the result is a `tool` message before the
/// text) answers the text. The compaction that edited notes.txt compares coverage: it
/// agrees when the local answer names the file whenever the cloud's does — so a far
/// text that names it agrees, and a close one that leaves it out does not. The report's
/// figures per kind are exactly those; the user's `/cloud` is never copied.
#[tokio::test]
async fn shadow_samples_give_the_agreement_per_kind_the_answers_give() {
    const LOCAL: &str = "Fixed the typo in notes.txt";
    // (the local answer, the cloud's, whether their words agree)
    let runs = [
        (LOCAL, LOCAL, true),
        (LOCAL, "Greeting", false),
        ("Fixed the typo in the notes", LOCAL, true),
    ];
    for (local_reply, cloud_reply, text_agrees) in runs {
        let Replay { routes, home, .. } = replay(Setup {
            context: ", compaction: cloud",
            fan_out: Some(
                "{mode: shadow, shadow: {target: local, sample_rate: 1.0, max_per_minute: 1000}}",
            ),
            local_reply: Some(local_reply),
            cloud_reply: Some(cloud_reply),
        })
        .await;
        let (must_name_case, file) = COMPACTION_MUST_NAME;
        let covered = local_reply.contains(file) || !cloud_reply.contains(file);
        let mut expected: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        for routed in routes.iter().filter(|r| r.sampled()) {
            let text_kind = matches!(routed.kind, RequestKind::Title | RequestKind::Compaction);
            let sums = expected.entry(routed.kind.to_string()).or_default();
            sums.0 += 1;
            sums.1 += 1;
            let agrees = if routed.case == must_name_case {
                covered
            } else {
                !text_kind || (text_agrees && !routed.tool_result_then_text)
            };
            sums.2 += u64::from(agrees);
        }
        assert_eq!(
            expected.get("compaction").map(|s| s.0),
            Some(3),
            "the compactions went to the cloud and were copied: {routes:#?}"
        );
        assert!(
            routes
                .iter()
                .any(|r| r.case == must_name_case && r.sampled()),
            "{routes:#?}"
        );
        let (report, text) = report_per_kind(home.path());
        assert_eq!(
            report, expected,
            "local says {local_reply:?}, cloud {cloud_reply:?}: {routes:#?}\n{text}"
        );
        assert!(
            text.contains(
                "local (qwen2.5-coder:7b) shadowing claude on route model, kind compaction"
            ),
            "{text}"
        );
        // The compaction that edited a file says how each answer covered it.
        let coverage = format!(
            "coverage (1 compared by it): of 1 files and errors to name, the primary named {}, the shadow {}; the shadow left out {} the primary named",
            u8::from(cloud_reply.contains(file)),
            u8::from(local_reply.contains(file)),
            u8::from(!covered),
        );
        assert!(text.contains(&coverage), "{coverage}\n{text}");
        let flagged = routes
            .iter()
            .filter(|r| r.backend != "local" && !r.sampled())
            .count();
        assert_eq!(flagged, 1, "the /cloud turn, never copied: {routes:#?}");
        if local_reply == cloud_reply {
            route_report_and_apply(home.path(), &routes, &expected);
        }
    }
}

/// `glider route report` (and `--apply`) under `home`, the history and samples of the
/// replay that gave `routes` and the shadow figures `shadowed` (kind -> samples,
/// compared, agreed).
fn route_report_and_apply(
    home: &std::path::Path,
    routes: &[Routed],
    shadowed: &BTreeMap<String, (u64, u64, u64)>,
) {
    let config = home.join("glider.yaml");
    let config_arg = config.to_str().expect("utf-8");
    let run = |args: &[&str]| {
        std::process::Command::new(GLIDER)
            .env("GLIDER_HOME", home)
            .env_remove("GLIDER_CONFIG")
            .args(["route", "report", "-c", config_arg])
            .args(args)
            .output()
            .expect("glider runs")
    };
    let json = |args: &[&str]| -> Value {
        let out = run(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let report = json(&["--json"]);
    assert_eq!(report["requests_read"], routes.len(), "{report:#}");
    // Per rule and side, the requests and tokens the replay routed.
    let mut by_rule: BTreeMap<String, BTreeMap<String, (u64, u64)>> = BTreeMap::new();
    for r in routes {
        let side = if r.backend == "local" {
            "local"
        } else {
            "cloud"
        };
        let v = by_rule
            .entry(r.rule.clone())
            .or_default()
            .entry(side.into())
            .or_default();
        v.0 += 1;
        v.1 += r.tokens;
    }
    let reported: BTreeMap<String, BTreeMap<String, (u64, u64)>> = report["by_rule"]
        .as_object()
        .expect("by_rule")
        .iter()
        .map(|(rule, sides)| {
            let sides = sides
                .as_object()
                .expect("sides")
                .iter()
                .map(|(side, v)| {
                    let n = |k: &str| v[k].as_u64().expect("a count");
                    (side.clone(), (n("requests"), n("tokens")))
                })
                .collect();
            (rule.clone(), sides)
        })
        .collect();
    assert_eq!(reported, by_rule);
    // Per kind, the shadow evidence.
    for row in report["by_kind"].as_array().expect("by_kind") {
        let kind = row["kind"].as_str().expect("kind");
        let (_, compared, agreed) = shadowed.get(kind).copied().unwrap_or_default();
        assert_eq!(
            (row["compared"].as_u64(), row["agreed"].as_u64()),
            (Some(compared), Some(agreed)),
            "{kind}"
        );
    }
    // What a lower threshold moves: each score the policy sent to the cloud between
    // the thresholds, highest first, and everything scoring at least that.
    let mut movable: Vec<&Routed> = routes
        .iter()
        .filter(|r| r.backend != "local" && matches!(r.rule.as_str(), "classifier" | "model"))
        .filter(|r| r.score.is_some_and(|s| s > -2.0 && s < 2.0))
        .collect();
    movable.sort_by(|a, b| b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0)));
    let moves: Vec<(f64, u64, u64)> = report["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .map(|m| {
            (
                m["threshold"].as_f64().expect("threshold"),
                m["moved"]["requests"].as_u64().expect("requests"),
                m["moved"]["tokens"].as_u64().expect("tokens"),
            )
        })
        .collect();
    let expected: Vec<(f64, u64, u64)> = movable
        .iter()
        .enumerate()
        .map(|(at, r)| {
            let moved = &movable[..=at];
            (
                r.score.expect("scored"),
                moved.len() as u64,
                moved.iter().map(|m| m.tokens).sum(),
            )
        })
        .collect();
    assert_eq!(moves, expected, "{movable:#?}");
    assert!(
        moves.len() >= 2,
        "compactions and a subagent turn: {moves:?}"
    );
    // Twenty samples per kind by default: too few here, so nothing to apply.
    assert!(report["suggested_local_threshold"].is_null());
    let refused = run(&["--apply"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no change is suggested"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // With a lower bar (the compactions agreed 2 of 3, the subagent turns 2 of 2), every
    // move clears it: the lowest is suggested and --apply writes it.
    let bar = ["--min-samples", "1", "--min-agreement", "0.6"];
    let lowest = expected.last().expect("a move").0;
    let report = json(&[&bar[..], &["--json"]].concat());
    assert_eq!(report["suggested_local_threshold"].as_f64(), Some(lowest));
    let before = std::fs::read_to_string(&config).expect("config");
    let out = run(&[&bar[..], &["--apply"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read_to_string(&config).expect("config");
    assert_eq!(
        after,
        before.replace(
            "local_threshold: 2.0\n",
            &format!("local_threshold: {lowest:?}\n")
        )
    );
    let loaded = Config::load(&config).expect("the edited config loads");
    assert_eq!(loaded.routing.classifier.local_threshold, lowest);
}
