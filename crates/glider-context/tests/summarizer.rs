//! The summarizer against a mock model over loopback HTTP: a session's episode is
//! written to a real log, a new root turn ends it, and the summarizer's answer is
//! accepted (it names the edited file and the open error), rejected (it leaves the
//! file out), or fails (the backend is down); each run is a `compaction` event and the
//! graph (the structural record) is untouched by a rejection.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use glider_config::{Config, ConfigHandle};
use glider_context::event::{
    CompactionEvent, Event, EventBody, ReplyEvent, RequestEvent, ToolCall, ToolResult,
};
use glider_context::{Context, Reader, Summarizer};
use glider_test_support::{MockConfig, MockVendor};
use serde_json::json;

const SESSION: &str = "claude-code:s1";
const EDITED: &str = "/w/src/parse.rs";

/// The context subsystem under `home` as `glider serve` starts it, its summarizer
/// asking the backend at `base_url`.
fn start(home: &std::path::Path, base_url: &str, idle_secs: u64) -> (Arc<Context>, Summarizer) {
    let yaml = format!(
        "backends:\n  - {{name: local, type: ollama, base_url: '{base_url}', models: [qwen]}}\n\
         context: {{summarizer: {{idle_secs: {idle_secs}, timeout_secs: 30}}}}\n"
    );
    let config = ConfigHandle::new(Config::parse(&yaml, "t").expect("valid"), None);
    let context = Context::start(home, &config.snapshot().context)
        .expect("starts")
        .expect("context.enabled");
    let summarizer = Summarizer::start(&context, Arc::new(config)).expect("starts");
    (context, summarizer)
}

/// The session as the graph (the structural record) has it.
fn structural_record(context: &Context) -> glider_context::SessionGraph {
    Reader::new(context.log().dir().to_path_buf())
        .session(SESSION)
        .expect("reads")
        .expect("the session")
        .graph
}

/// (accepted, rejected) as the counters behind `/metrics` have them.
fn counted(context: &Context) -> (u64, u64) {
    let counters = context.log().counters();
    (
        counters.compactions_accepted.load(Ordering::Relaxed),
        counters.compactions_rejected.load(Ordering::Relaxed),
    )
}

fn event(body: EventBody) -> Event {
    Event {
        at_ms: glider_context::now_ms(),
        session: Some(SESSION.into()),
        body,
    }
}

fn request(key: &str, user_text: Option<&str>, results: Vec<ToolResult>) -> Event {
    event(EventBody::Request(RequestEvent {
        request: key.into(),
        root: user_text.is_some(),
        user_text: user_text.map(str::to_owned),
        tool_results: results,
        ..RequestEvent::default()
    }))
}

fn reply(key: &str, calls: Vec<ToolCall>) -> Event {
    event(EventBody::Reply(ReplyEvent {
        request: key.into(),
        backend: Some("claude".into()),
        status: Some(200),
        tool_calls: calls,
        ..ReplyEvent::default()
    }))
}

/// Episode 1: the user asks for a fix, the model edits `EDITED`, runs the tests, and
/// they fail (an open error); then the user's next message begins episode 2.
fn write_session(context: &Context) {
    let edit = ToolCall::new(
        "t1".into(),
        "Edit".into(),
        json!({"file_path": EDITED, "old_string": "a", "new_string": "b"}),
    );
    let bash = ToolCall::new("t2".into(), "Bash".into(), json!({"command": "cargo test"}));
    let log = context.log();
    log.append(request("r1", Some("fix the parser"), vec![]));
    log.append(reply("r1", vec![edit]));
    log.append(request(
        "r2",
        None,
        vec![ToolResult::new(
            "t1".into(),
            None,
            false,
            "The file has been updated.",
        )],
    ));
    log.append(reply("r2", vec![bash]));
    log.append(request(
        "r3",
        None,
        vec![ToolResult::new(
            "t2".into(),
            None,
            true,
            "Exit code 101\ntest result: FAILED. 0 passed; 1 failed",
        )],
    ));
    log.append(reply("r3", vec![]));
    log.append(request("r4", Some("now update the docs"), vec![]));
    log.append(reply("r4", vec![]));
}

/// Poll the log until it holds `count` compaction events; they, oldest first.
async fn compactions(context: &Context, count: usize) -> Vec<CompactionEvent> {
    let reader = Reader::new(context.log().dir().to_path_buf());
    for _ in 0..3000 {
        let found: Vec<CompactionEvent> = reader
            .events(SESSION)
            .expect("reads")
            .into_iter()
            .filter_map(|s| match s.event.body {
                EventBody::Compaction(c) => Some(c),
                _ => None,
            })
            .collect();
        if found.len() >= count {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no {count} compaction events within 30 s");
}

fn mock_replying(text: &str) -> MockConfig {
    MockConfig {
        reply_text: Some(text.into()),
        ..MockConfig::default()
    }
}

#[tokio::test]
async fn a_summary_naming_every_edited_file_and_open_error_is_accepted_and_built_on() {
    let narrative =
        "The user wants the parser fixed. parse.rs was edited; `cargo test` still fails.";
    let mock = MockVendor::start(mock_replying(narrative)).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (context, _summarizer) = start(home.path(), &mock.base_url(), 1);
    write_session(&context);

    let first = compactions(&context, 1).await.remove(0);
    assert!(first.accepted, "{first:?}");
    assert_eq!(first.narrative, narrative);
    assert_eq!(first.trigger, "episode");
    assert!(first.missing.is_empty());
    assert_eq!(first.backend.as_deref(), Some("local"));
    assert_eq!(first.model.as_deref(), Some("qwen"));
    assert!(first.output_tokens > 0, "the mock's usage is kept");
    // The model was asked in its own dialect with the record and the episode's turns.
    let asked = &mock.requests()[0];
    assert_eq!(asked.path, "/api/chat");
    let input = asked.body["messages"][1]["content"].as_str().expect("text");
    assert!(input.contains(&format!("- {EDITED} (edited)")), "{input}");
    assert!(
        input.contains("- cargo test: test result: FAILED"),
        "{input}"
    );
    assert!(input.contains("[user] fix the parser"), "{input}");
    assert!(
        !input.contains("now update the docs"),
        "episode 2 has not ended: {input}"
    );

    // At idle the open episode is compacted on top of the accepted narrative.
    let second = compactions(&context, 2).await.remove(1);
    assert_eq!(second.trigger, "idle");
    assert!(
        second.accepted,
        "the error is still open and named: {second:?}"
    );
    assert!(second.until_event > first.until_event);
    let input = mock.requests()[1].body["messages"][1]["content"]
        .as_str()
        .expect("text")
        .to_owned();
    assert!(input.contains(narrative), "the previous narrative: {input}");
    assert!(input.contains("[user] now update the docs"), "{input}");
    assert!(!input.contains("[user] fix the parser"), "{input}");
    assert_eq!(counted(&context), (2, 0));
}

#[tokio::test]
async fn a_summary_that_leaves_an_edited_file_out_is_rejected_and_the_graph_stands() {
    let mock = MockVendor::start(mock_replying("We worked on the parser; cargo test fails.")).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (context, _summarizer) = start(home.path(), &mock.base_url(), 3600);
    write_session(&context);

    let rejected = compactions(&context, 1).await.remove(0);
    assert!(!rejected.accepted);
    assert_eq!(rejected.narrative, "", "a rejected summary is no narrative");
    assert_eq!(rejected.missing, [EDITED]);
    let reason = rejected.reason.as_deref().unwrap_or_default();
    assert!(reason.contains("leaves out 1"), "{reason}");
    assert_eq!(
        rejected.rejected_text.as_deref(),
        Some("We worked on the parser; cargo test fails.")
    );
    assert_eq!(counted(&context), (0, 1));
    let graph = structural_record(&context);
    assert_eq!(graph.edited_files(), [EDITED]);
    assert_eq!(graph.open_errors().count(), 1);
}

#[tokio::test]
async fn with_the_backend_down_the_run_is_logged_as_rejected_with_the_reason() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let home = tempfile::tempdir().expect("tempdir");
    let (context, _summarizer) = start(home.path(), &format!("http://127.0.0.1:{port}"), 3600);
    write_session(&context);

    let failed = compactions(&context, 1).await.remove(0);
    assert!(!failed.accepted);
    let reason = failed.reason.as_deref().unwrap_or_default();
    assert!(reason.starts_with("backend local failed"), "{reason}");
    assert!(failed.rejected_text.is_none());
    assert_eq!(counted(&context), (0, 1));
    assert_eq!(
        structural_record(&context).edited_files(),
        [EDITED],
        "the structural record stands"
    );
}

#[tokio::test]
async fn a_disabled_summarizer_compacts_once_a_reload_enables_it() {
    let narrative =
        "The user wants the parser fixed. parse.rs was edited; `cargo test` still fails.";
    let mock = MockVendor::start(mock_replying(narrative)).await;
    let home = tempfile::tempdir().expect("tempdir");
    let config = |enabled: bool| {
        let yaml = format!(
            "backends:\n  - {{name: local, type: ollama, base_url: '{}', models: [qwen]}}\n\
             context: {{summarizer: {{enabled: {enabled}, idle_secs: 3600, timeout_secs: 30}}}}\n",
            mock.base_url()
        );
        Config::parse(&yaml, "t").expect("valid")
    };
    let handle = ConfigHandle::new(config(false), None);
    let context = Context::start(home.path(), &handle.snapshot().context)
        .expect("starts")
        .expect("context.enabled");
    let _summarizer = Summarizer::start(&context, Arc::new(handle.clone())).expect("starts");
    // The task sees it disabled and waits for a reload (a current-thread runtime:
    // yielding runs it until it waits).
    tokio::task::yield_now().await;
    handle.apply(config(true));
    // Woken by the reload, it takes activity again.
    tokio::task::yield_now().await;
    write_session(&context);

    let first = compactions(&context, 1).await.remove(0);
    assert!(first.accepted, "{first:?}");
    assert_eq!(first.trigger, "episode");
}

/// A source handing the summarizer one shared client, as `glider serve` hands it the
/// engine's: the test's own requests through it are a client's.
struct Shared {
    config: ConfigHandle,
    backend: Arc<glider_backend::Backend>,
}

impl glider_context::SummarizerSource for Shared {
    fn config(&self) -> Arc<Config> {
        self.config.snapshot()
    }

    fn backend(&self, _: &glider_config::BackendConfig) -> Arc<glider_backend::Backend> {
        self.backend.clone()
    }
}

#[tokio::test]
async fn a_summary_in_flight_yields_to_a_client_request_and_runs_again_later() {
    let narrative =
        "The user wants the parser fixed. parse.rs was edited; `cargo test` still fails.";
    // The first generation (the summary) would take a minute; the client's and the
    // retried summary answer at once.
    let mock = MockVendor::start(MockConfig {
        first_byte_delays: vec![
            Duration::from_secs(60),
            Duration::ZERO,
            Duration::ZERO,
            Duration::ZERO,
        ],
        ..mock_replying(narrative)
    })
    .await;
    let yaml = format!(
        "backends:\n  - {{name: local, type: ollama, base_url: '{}', models: [qwen]}}\n\
         context: {{summarizer: {{idle_secs: 1, timeout_secs: 120}}}}\n",
        mock.base_url()
    );
    let config = ConfigHandle::new(Config::parse(&yaml, "t").expect("valid"), None);
    let backend = glider_backend::Backend::new(config.snapshot().backends[0].clone());
    let home = tempfile::tempdir().expect("tempdir");
    let context = Context::start(home.path(), &config.snapshot().context)
        .expect("starts")
        .expect("context.enabled");
    let _summarizer = Summarizer::start(
        &context,
        Arc::new(Shared {
            config,
            backend: backend.clone(),
        }),
    )
    .expect("starts");
    write_session(&context);

    // The summary is at the model, held there.
    for _ in 0..3000 {
        if !mock.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(mock.requests().len(), 1, "the summary was asked for");

    // A client's request to the same backend: the summary steps aside.
    let request = glider_ngl::Request {
        model: "qwen".into(),
        turns: vec![glider_ngl::Turn::text(glider_ngl::Role::User, "hi")],
        max_tokens: Some(8),
        ..glider_ngl::Request::default()
    };
    let dialect = backend.dialect_for(glider_ngl::Dialect::OpenAiChat);
    let body = glider_dialects::codec(dialect)
        .encode_request(&request)
        .to_string();
    let reply = backend
        .send(&glider_backend::UpstreamRequest {
            dialect,
            body: body.into(),
            stream: false,
            headers: http::HeaderMap::new(),
        })
        .await
        .expect("the client is answered");
    reply.collect().await.expect("its body");
    let yielded = || {
        context
            .log()
            .counters()
            .compactions_yielded
            .load(Ordering::Relaxed)
    };
    for _ in 0..3000 {
        if yielded() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(yielded(), 1, "the summary yielded");
    assert_eq!(
        counted(&context),
        (0, 0),
        "a yielded run is neither accepted nor rejected"
    );

    // idle_secs later it runs again, and this time it is answered.
    let compacted = compactions(&context, 1).await.remove(0);
    assert!(compacted.accepted, "{compacted:?}");
    assert_eq!(compacted.narrative, narrative);
    assert!(mock.requests().len() >= 3, "summary, client, summary again");
}
