//! The engine's hook feeding a real log: requests through `Engine::complete` to mock
//! vendors over loopback HTTP, the reply's tool calls captured both from a translated
//! reply and from a same-dialect stream forwarded byte for byte, and the session's
//! graph built from what was seen on the wire.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use glider_config::{Config, ConfigHandle};
use glider_context::event::EventBody;
use glider_context::graph;
use glider_context::store::{self, Retention};
use glider_context::tools::FileOp;
use glider_context::{Context, ContextLog, LogOptions};
use glider_engine::{CompletionBody, CompletionRequest, Engine};
use glider_ngl::Dialect;
use glider_test_support::{MockConfig, MockVendor};
use http::HeaderMap;
use serde_json::{Value, json};

fn engine(mock: &MockVendor) -> Arc<Engine> {
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{0}', models: [qwen]}}\n\
         \x20 - {{name: claude, type: anthropic, base_url: '{0}', api_key: k, models: ['claude-*']}}\n",
        mock.base_url()
    );
    Engine::new(ConfigHandle::new(
        Config::parse(&yaml, "t").expect("valid"),
        None,
    ))
}

fn attach(engine: &Engine, dir: &std::path::Path) -> Arc<Context> {
    let log = ContextLog::start(LogOptions {
        dir: dir.to_path_buf(),
        queue_capacity: 1024,
        retention: Retention {
            max_age_ms: u64::MAX,
            max_bytes: u64::MAX,
        },
        retention_every: Duration::from_secs(3600),
        record_max_tokens: 1500,
        idle_rebuild_after: Duration::from_millis(20),
    })
    .expect("log starts");
    let context = Arc::new(Context::with_log(log));
    assert!(engine.attach_context(context.clone()).is_ok());
    context
}

/// Send one Anthropic request for session `session` and read its reply to the end.
async fn ask(engine: &Engine, session: &str, body: Value) {
    let mut headers = HeaderMap::new();
    headers.insert("x-claude-code-session-id", session.parse().expect("header"));
    complete(engine, Dialect::Anthropic, body, headers).await;
}

/// Send `body` in `dialect` and read its reply to the end.
async fn complete(engine: &Engine, dialect: Dialect, body: Value, headers: HeaderMap) {
    let completion = engine
        .complete(CompletionRequest::gateway(
            dialect,
            Bytes::from(body.to_string()),
            headers,
        ))
        .await
        .expect("answered");
    match completion.body {
        CompletionBody::Raw { mut rest, .. } => while rest.next().await.is_some() {},
        CompletionBody::Events(mut events) => while events.next().await.is_some() {},
        CompletionBody::Whole(_) => {}
    }
}

fn tools() -> Value {
    json!([
        {"name": "Read", "input_schema": {"type": "object"}},
        {"name": "Bash", "input_schema": {"type": "object"}}
    ])
}

/// The first user turn asks the mock to call `call`; the second sends its result.
async fn tool_round(
    engine: &Engine,
    model: &str,
    stream: bool,
    call: &str,
    id: &str,
    args: Value,
    result: &str,
) {
    let prompt = format!("please [[call:{call} {args}]]");
    ask(
        engine,
        "sess-1",
        json!({"model": model, "max_tokens": 100, "stream": stream, "tools": tools(),
               "messages": [{"role": "user", "content": prompt}]}),
    )
    .await;
    ask(
        engine,
        "sess-1",
        json!({"model": model, "max_tokens": 100, "stream": stream, "tools": tools(),
               "messages": [
                   {"role": "user", "content": prompt},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": call, "input": args}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": result}]}
               ]}),
    )
    .await;
}

#[tokio::test]
async fn requests_through_the_engine_become_events_and_a_graph() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let engine = engine(&mock);
    let home = tempfile::tempdir().expect("tempdir");
    let context = attach(&engine, home.path());

    // Same dialect, streamed: the reply's bytes are forwarded untouched and observed.
    tool_round(
        &engine,
        "claude-x",
        true,
        "Read",
        "toolu_mock_1",
        json!({"file_path": "/p/a.rs"}),
        "fn a() {}",
    )
    .await;
    // Translated (Anthropic client, Ollama backend), not streamed.
    tool_round(
        &engine,
        "qwen",
        false,
        "Bash",
        "call_mock_2",
        json!({"command": "make"}),
        "Exit code 2\nmake: *** no rule",
    )
    .await;

    // The reply event is sent when the tracker drops, after the body ended.
    let mut replies = 0;
    for _ in 0..200 {
        context.log().flush();
        let conn = store::open(home.path()).expect("opens");
        let events = store::events(&conn, Some("claude-code:sess-1")).expect("reads");
        replies = events
            .iter()
            .filter(|e| matches!(e.event.body, EventBody::Reply(_)))
            .count();
        if replies == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(replies, 4);
    let conn = store::open(home.path()).expect("opens");
    let events = store::events(&conn, Some("claude-code:sess-1")).expect("reads");
    let reply_calls: Vec<Vec<(String, Value)>> = events
        .iter()
        .filter_map(|e| match &e.event.body {
            EventBody::Reply(r) => Some(
                r.tool_calls
                    .iter()
                    .map(|c| (c.name.clone(), c.arguments.clone()))
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    assert_eq!(
        reply_calls[0],
        [("Read".to_owned(), json!({"file_path": "/p/a.rs"}))],
        "from the forwarded stream"
    );
    assert_eq!(
        reply_calls[2],
        [("Bash".to_owned(), json!({"command": "make"}))],
        "from the translated reply"
    );
    // Each reply names the request it answers, in order: the key the sink gave the
    // request, which the request's capture hands back at its end.
    let keys = |reply: bool| -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match &e.event.body {
                EventBody::Request(r) if !reply => Some(r.request.clone()),
                EventBody::Reply(r) if reply => Some(r.request.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(keys(true), keys(false));
    assert_eq!(
        keys(false)
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        4,
        "one key a request"
    );
    let first = events.iter().find_map(|e| match &e.event.body {
        EventBody::Request(r) => Some(r.clone()),
        _ => None,
    });
    let first = first.expect("a request");
    assert!(first.root);
    assert_eq!(first.rule, "model");
    assert_eq!(first.backend.as_deref(), Some("claude"));
    let graph = graph::fold("claude-code:sess-1", &events);
    assert_eq!(graph.episodes.len(), 2, "each user prompt is a root");
    let read: Vec<_> = graph
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.changes[0].op))
        .collect();
    assert_eq!(read, [("/p/a.rs", FileOp::Read)]);
    assert_eq!(graph.commands.len(), 1);
    assert_eq!(
        (
            graph.commands[0].command.as_str(),
            graph.commands[0].exit_code
        ),
        ("make", Some(2))
    );
    assert_eq!(graph.open_errors().count(), 1);
    let backends: Vec<_> = graph
        .models
        .iter()
        .map(|m| (m.backend.as_str(), m.local, m.requests))
        .collect();
    assert_eq!(backends, [("claude", false, 2), ("local", true, 2)]);
}

/// A same-dialect whole reply (OpenAI Chat to vLLM, not streamed) is forwarded as it
/// came and read once for its usage, text and stop reason (no full decode): the reply
/// event keeps all three, a long text its edges; a reply with a tool call still gives
/// the call.
#[tokio::test]
async fn a_forwarded_whole_reply_keeps_its_text_stop_reason_and_calls() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: pool, type: vllm, base_url: '{}/v1', models: [qwen]}}\n",
        mock.base_url()
    );
    let engine = Engine::new(ConfigHandle::new(
        Config::parse(&yaml, "t").expect("valid"),
        None,
    ));
    let home = tempfile::tempdir().expect("tempdir");
    let context = attach(&engine, home.path());
    let ask_chat = |content: &str| {
        let body = json!({"model": "qwen", "max_tokens": 50, "stream": false,
            "tools": [{"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}],
            "messages": [{"role": "user", "content": content}]});
        let engine = engine.clone();
        async move { complete(&engine, Dialect::OpenAiChat, body, HeaderMap::new()).await }
    };
    ask_chat("say \"hi\"").await;
    ask_chat("please [[call:Read {\"file_path\": \"/p/b.rs\"}]]").await;
    ask_chat(&format!("long {}", "x".repeat(20_000))).await;
    let mut replies = Vec::new();
    for _ in 0..200 {
        context.log().flush();
        let conn = store::open(home.path()).expect("opens");
        replies = store::events(&conn, None)
            .expect("reads")
            .into_iter()
            .filter_map(|e| match e.event.body {
                EventBody::Reply(reply) => Some(reply),
                _ => None,
            })
            .collect();
        if replies.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(replies.len(), 3);
    let long = replies[2].text.as_deref().expect("the long reply's text");
    assert!(
        long.starts_with("echo: long xxx") && long.ends_with("xxx"),
        "{long:.40}"
    );
    assert!(long.len() < 20_000, "its edges: {}", long.len());
    assert_eq!(replies[2].stop_reason.as_deref(), Some("end_turn"));
    let text = &replies[0];
    assert_eq!(text.text.as_deref(), Some("echo: say \"hi\""));
    assert_eq!(text.stop_reason.as_deref(), Some("end_turn"));
    assert!(text.output_tokens > 0, "the usage is read too");
    assert!(text.tool_calls.is_empty());
    let call = &replies[1];
    assert_eq!(call.stop_reason.as_deref(), Some("tool_use"));
    let calls: Vec<_> = call
        .tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.clone()))
        .collect();
    assert_eq!(calls, [("Read", json!({"file_path": "/p/b.rs"}))]);
}

/// Poll `check` (flushing the log first) until it holds or a generous deadline passes.
async fn eventually(context: &Context, mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..500 {
        context.log().flush();
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn the_writer_keeps_a_live_sessions_record_for_the_request_path_and_drops_it_when_forgotten()
{
    let mock = MockVendor::start(MockConfig::default()).await;
    let engine = engine(&mock);
    let home = tempfile::tempdir().expect("tempdir");
    let context = attach(&engine, home.path());
    let session = "claude-code:sess-1";
    assert!(
        context.log().records().get(session).is_none(),
        "nothing before any request"
    );

    tool_round(
        &engine,
        "qwen",
        false,
        "Read",
        "call_mock_1",
        json!({"file_path": "/p/notes.md"}),
        "the notes",
    )
    .await;
    let held = eventually(&context, || {
        context
            .log()
            .records()
            .get(session)
            .is_some_and(|r| r.contains("/p/notes.md: read"))
    })
    .await;
    let record = context.log().records().get(session).unwrap_or_default();
    assert!(held, "{record}");
    assert!(record.contains("please [[call:Read"), "the goal: {record}");
    // The mock answers a tool result with text (`tool result: …`): captured as the
    // episode's closing words.
    assert!(record.contains("- tool result: the notes"), "{record}");
    // The same record the dashboard and CLI read, built by a full fold.
    let view = context
        .reader()
        .session(session)
        .expect("reads")
        .expect("known");
    assert_eq!(&*record, view.record.text);
    assert_eq!(
        view.record.live.as_deref(),
        Some(&*record),
        "the held one, served"
    );

    // Forgotten through another connection (as `glider context forget` does): the
    // writer notices and the record is no longer served.
    glider_context::Reader::new(home.path().to_path_buf())
        .forget(session)
        .expect("forgets");
    assert!(
        eventually(&context, || context.log().records().get(session).is_none()).await,
        "a forgotten session's record outlived it"
    );
}
