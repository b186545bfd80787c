//! Bounded local context through the gateway, over real loopback HTTP with a context
//! log attached: a Claude Code-shaped session of several episodes builds a continuity
//! record; a `/local` turn then reaches the local backend with the record (naming the
//! earlier files and the open error) and only the current episode — read from the mock
//! backend's own request log. A session too long for the local budget arrives cut to
//! it, with no tool call split from its result, and the route record counts what was
//! left out.

mod common;

use std::sync::Arc;
use std::time::Duration;

use glider_context::Context;
use glider_engine::{PipelineEvent, RequestRecord};
use glider_test_support::{MockConfig, MockVendor, RecordedRequest};
use serde_json::{Value, json};

const SESSION_HEADER: &str = "x-claude-code-session-id";

/// A gateway with a local (OpenAI-compatible) and a cloud (Anthropic) backend on one
/// mock, and a context log under `dir` (as `GLIDER_HOME`), started as `glider serve`
/// starts it.
async fn gateway(
    mock: &MockVendor,
    dir: &std::path::Path,
    extra: &str,
) -> (common::Gateway, Arc<Context>) {
    let url = mock.base_url();
    let local = format!(
        "  - {{name: local, type: vllm, base_url: '{url}/v1', models: [{{name: qwen, context_window: 4096}}]}}\n"
    );
    gateway_with(mock, dir, &local, extra).await
}

/// [`gateway`] with `local` as the local backends' config lines (none: empty).
async fn gateway_with(
    mock: &MockVendor,
    dir: &std::path::Path,
    local: &str,
    extra: &str,
) -> (common::Gateway, Arc<Context>) {
    let url = mock.base_url();
    let yaml = format!(
        "backends:\n{local}\
         \x20 - {{name: claude, type: anthropic, base_url: '{url}', api_key: k, models: ['claude-*']}}\n\
         routing: {{classifier: {{enabled: false}}}}\n{extra}"
    );
    let gateway = common::gateway(&yaml).await;
    let config = gateway.config.snapshot();
    let context = Context::start(dir, &config.context)
        .expect("the log opens")
        .expect("context is on");
    assert!(gateway.engine.attach_context(context.clone()).is_ok());
    (gateway, context)
}

/// Post an Anthropic request for `session`; its reply body as JSON.
async fn ask(gateway: &common::Gateway, session: &str, body: &Value) -> Value {
    ask_as(gateway, &[(SESSION_HEADER, session)], body).await
}

/// Post an Anthropic request with `headers` (a client's credential, its session
/// header); its reply body as JSON.
async fn ask_as(gateway: &common::Gateway, headers: &[(&str, &str)], body: &Value) -> Value {
    let reply = common::post(&gateway.base, "/v1/messages", body.to_string(), headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

/// A Claude Code-shaped conversation, grown one exchange at a time.
struct Conversation {
    model: String,
    system: String,
    /// The request's `metadata` (none: not sent).
    metadata: Option<Value>,
    messages: Vec<Value>,
    /// Ids of the calls the test writes itself (the mock's replies carry their own).
    next_id: usize,
}

impl Conversation {
    fn new(model: &str) -> Self {
        Conversation {
            model: model.into(),
            system: "You are Claude Code.".into(),
            metadata: None,
            messages: Vec::new(),
            next_id: 0,
        }
    }

    fn body(&self) -> Value {
        let mut body = json!({
            "model": self.model, "max_tokens": 200,
            "system": self.system,
            "tools": [
                {"name": "Read", "input_schema": {"type": "object"}},
                {"name": "Edit", "input_schema": {"type": "object"}},
                {"name": "Bash", "input_schema": {"type": "object"}}
            ],
            "messages": self.messages,
        });
        if let Some(metadata) = &self.metadata {
            body["metadata"] = metadata.clone();
        }
        body
    }

    /// One episode: the user asks, the model calls `tool` (the mock's script), the
    /// CLI sends `output` back under the call's own id, the model answers in text.
    async fn episode(
        &mut self,
        gateway: &common::Gateway,
        session: &str,
        goal: &str,
        tool: &str,
        args: Value,
        output: &str,
    ) {
        self.episode_as(
            gateway,
            &[(SESSION_HEADER, session)],
            goal,
            tool,
            args,
            output,
        )
        .await;
    }

    /// [`Conversation::episode`] sent with `headers`.
    async fn episode_as(
        &mut self,
        gateway: &common::Gateway,
        headers: &[(&str, &str)],
        goal: &str,
        tool: &str,
        args: Value,
        output: &str,
    ) {
        self.messages
            .push(json!({"role": "user", "content": format!("{goal} [[call:{tool} {args}]]")}));
        let call = ask_as(gateway, headers, &self.body()).await;
        let id = call["content"]
            .as_array()
            .and_then(|parts| parts.iter().find(|p| p["type"] == "tool_use"))
            .and_then(|p| p["id"].as_str())
            .expect("the model called the tool")
            .to_owned();
        self.messages
            .push(json!({"role": "assistant", "content": call["content"].clone()}));
        self.messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": output}
        ]}));
        let answer = ask_as(gateway, headers, &self.body()).await;
        self.messages
            .push(json!({"role": "assistant", "content": answer["content"].clone()}));
    }

    /// The model's call of `tool` and the CLI's `output` for it, as the next request
    /// carries them.
    fn tool_round(&mut self, tool: &str, args: Value, output: &str) {
        self.next_id += 1;
        let id = format!("toolu_{}", self.next_id);
        self.messages.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": tool, "input": args}
        ]}));
        self.messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": output}
        ]}));
    }
}

/// Flush the log and poll until `ready` gives a value (every 10 ms, 500 times); past
/// that, panic naming `what` and the last text `ready` noted in its argument.
async fn poll_log<T>(
    context: &Context,
    what: &str,
    mut ready: impl FnMut(&mut Option<String>) -> Option<T>,
) -> T {
    let mut last = None;
    for _ in 0..500 {
        context.log().flush();
        if let Some(done) = ready(&mut last) {
            return done;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what} never got there: {last:?}");
}

/// Flush the log and poll until the session's record holds `episodes` finished
/// episodes (each with its closing words) and is held for requests; the held text.
async fn record_until(context: &Context, session: &str, episodes: usize) -> String {
    poll_log(context, "the record", |last| {
        let view = context.reader().session(session).expect("reads")?;
        if view.record.record.decisions.len() == episodes
            && let Some(held) = context.log().records().get(session)
            && *held == view.record.text
        {
            return Some(held.to_string());
        }
        *last = Some(view.record.text);
        None
    })
    .await
}

/// The last chat request the local backend received.
fn last_local_request(mock: &MockVendor) -> RecordedRequest {
    mock.requests()
        .into_iter()
        .rev()
        .find(|r| r.path == "/v1/chat/completions")
        .expect("the local backend was asked")
}

fn messages(request: &RecordedRequest) -> Vec<Value> {
    request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A local request's tokens as the engine estimates them for a local model: text at
/// 3.5 bytes a token, 4 a message, and the tool definitions' text.
fn sent_tokens(request: &RecordedRequest) -> u64 {
    let sent = messages(request);
    let text_bytes: usize = sent
        .iter()
        .map(|m| {
            let calls: usize = m["tool_calls"]
                .as_array()
                .map(|calls| calls.iter().map(|c| c["function"].to_string().len()).sum())
                .unwrap_or(0);
            text_of(m).len() + calls
        })
        .sum::<usize>()
        + request.body["tools"].to_string().len();
    (text_bytes as f64 / 3.5) as u64 + 4 * sent.len() as u64
}

/// The ids of the tool calls in `sent` (Chat Completions messages), asserting that
/// there are some and that each has its result and no result is without its call.
fn calls_with_their_results(sent: &[Value]) -> Vec<String> {
    let calls: Vec<String> = sent
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["id"].as_str().map(str::to_owned))
        .collect();
    let results: Vec<String> = sent
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["tool_call_id"].as_str().map(str::to_owned))
        .collect();
    assert!(!calls.is_empty(), "the newest exchange stays");
    assert_eq!(calls, results, "every call with its result, none without");
    calls
}

/// The finished record of the next request on the bus.
async fn finished(
    events: &mut tokio::sync::broadcast::Receiver<Arc<PipelineEvent>>,
) -> RequestRecord {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("a request finished")
            .expect("bus open");
        if let PipelineEvent::RequestFinished(record) = &*event {
            return record.clone();
        }
    }
}

#[tokio::test]
async fn a_local_turn_gets_the_record_and_only_its_own_episode() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) = gateway(&mock, home.path(), "").await;
    let session = "claude-code:episodes";
    let mut chat = Conversation::new("claude-sonnet");
    chat.episode(
        &gateway,
        "episodes",
        "look at the greeting in src/hello.rs",
        "Read",
        json!({"file_path": "src/hello.rs"}),
        "fn hello() { println!(\"helo\") }",
    )
    .await;
    chat.episode(
        &gateway,
        "episodes",
        "fix the typo",
        "Edit",
        json!({"file_path": "src/hello.rs", "old_string": "helo", "new_string": "hello"}),
        "The file src/hello.rs has been updated.",
    )
    .await;
    chat.episode(
        &gateway,
        "episodes",
        "run the tests",
        "Bash",
        json!({"command": "cargo test"}),
        "test result: FAILED. 3 passed; 1 failed",
    )
    .await;
    let record = record_until(&context, session, 3).await;
    assert!(record.contains("- src/hello.rs: edited"), "{record}");

    let mut events = gateway.engine.bus().subscribe();
    chat.messages
        .push(json!({"role": "user", "content": "/local what did we change so far and why?"}));
    ask(&gateway, "episodes", &chat.body()).await;
    let route = finished(&mut events).await;

    let sent = messages(&last_local_request(&mock));
    let roles: Vec<&str> = sent.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["system", "user"], "{sent:#?}");
    // The system text, then the record as its own part.
    let system = sent[0]["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(system.len(), 2, "{system:?}");
    assert_eq!(system[0]["text"], "You are Claude Code.");
    let given = system[1]["text"].as_str().unwrap_or_default();
    // The record held when the episodes were done; by the time this request reads
    // it, the writer may have added this request's own goal.
    let held_before = record.trim_end_matches("</continuity-record>");
    let files = held_before.find("Files").expect("a files section");
    assert!(given.contains(&held_before[files..]), "{given}");
    assert!(given.starts_with("<continuity-record"), "{given}");
    assert!(
        given.contains("- src/hello.rs: edited"),
        "names the earlier file: {given}"
    );
    assert!(
        given.contains("- cargo test: test result: FAILED"),
        "{given}"
    );
    assert!(
        given.contains("fix the typo"),
        "the user's goals verbatim: {given}"
    );
    assert!(given.contains("run the tests"), "{given}");
    assert_eq!(text_of(&sent[1]), "what did we change so far and why?");

    assert_eq!(route.local, Some(true));
    let left_out = &route.context_left_out;
    assert_eq!(left_out.len(), 1, "{left_out:?}");
    assert_eq!(left_out[0].backend, "local");
    assert_eq!(left_out[0].turns, 12, "three episodes of four turns each");
    assert!(
        left_out[0].tokens > 0 && left_out[0].record_tokens > 0,
        "{left_out:?}"
    );
}

/// A gateway whose local model has a 4k window with 1k kept for the reply (3072 tokens
/// for the request), and a session whose first episode read conf/app.toml.
struct OneRead {
    mock: MockVendor,
    _home: tempfile::TempDir,
    gateway: common::Gateway,
    context: Arc<Context>,
    chat: Conversation,
}

/// [`OneRead`] for session `name` asking for `model`, with `extra` config; once its
/// record is held.
async fn after_one_read(name: &str, model: &str, extra: &str) -> OneRead {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) = gateway(
        &mock,
        home.path(),
        &format!("{extra}context: {{output_reserve_tokens: 1024}}\n"),
    )
    .await;
    let mut chat = Conversation::new(model);
    chat.episode(
        &gateway,
        name,
        "read the config",
        "Read",
        json!({"file_path": "conf/app.toml"}),
        "port = 80",
    )
    .await;
    record_until(&context, &format!("claude-code:{name}"), 1).await;
    OneRead {
        mock,
        _home: home,
        gateway,
        context,
        chat,
    }
}

#[tokio::test]
async fn a_session_over_the_local_budget_arrives_cut_to_it_with_no_call_split_from_its_result() {
    let OneRead {
        mock,
        _home,
        gateway,
        context: _context,
        mut chat,
    } = after_one_read("long", "qwen", "").await;

    // The current episode reads eight large files: ~3,700 tokens of results, more than
    // the budget by itself, yet under the window the router checks.
    let goal = "summarise the sources";
    chat.messages.push(json!({"role": "user", "content": goal}));
    let chunk = "let value = compute(input);\n".repeat(60); // 1,680 bytes, ~480 tokens
    for i in 0..7 {
        chat.tool_round(
            "Read",
            json!({"file_path": format!("src/part{i}.rs")}),
            &chunk,
        );
    }
    let mut events = gateway.engine.bus().subscribe();
    ask(&gateway, "long", &chat.body()).await;
    let route = finished(&mut events).await;
    assert_eq!(
        route.backend.as_deref(),
        Some("local"),
        "{:?}",
        route.reason
    );

    let request = last_local_request(&mock);
    let sent = messages(&request);
    let estimate = sent_tokens(&request);
    assert!(estimate <= 3072, "~{estimate} tokens sent");
    let first_user = sent
        .iter()
        .find(|m| m["role"] == "user")
        .expect("a user turn");
    assert_eq!(text_of(first_user), goal, "the episode's root stays");
    assert!(
        text_of(&sent[0]).contains("- conf/app.toml: read"),
        "the record stands for the earlier episode: {:?}",
        sent[0]
    );
    assert!(
        !sent
            .iter()
            .filter(|m| m["role"] != "system")
            .any(|m| text_of(m).contains("port = 80") || text_of(m).contains("read the config")),
        "no turn from before the episode (the record, a system part, may quote it)"
    );
    let calls = calls_with_their_results(&sent);
    assert_eq!(calls.last().map(String::as_str), Some("toolu_7"));
    let left_out = &route.context_left_out[0];
    assert!(
        left_out.turns > 4,
        "older reads were left out: {left_out:?}"
    );
}

#[tokio::test]
async fn a_session_over_the_local_window_goes_to_the_cloud_unless_the_user_chose_local() {
    // The CLI asks for a Claude model, aliased to the local one: the cloud serves the
    // name it asked for, so it is the fallback.
    let OneRead {
        mock,
        _home,
        gateway,
        context,
        mut chat,
    } = after_one_read(
        "over",
        "claude-sonnet-4",
        "model_aliases: {claude-sonnet-4: qwen}\n",
    )
    .await;
    let session = "claude-code:over";
    let chunk = "let value = compute(input);\n".repeat(60); // 1,680 bytes, ~480 tokens
    // As Claude Code sends it: the user's words alone first (the episode's root, which
    // the record's owner check reads back), then its tool loop.
    chat.messages
        .push(json!({"role": "user", "content": "summarise the sources"}));
    ask(&gateway, "over", &chat.body()).await;
    let mut events = gateway.engine.bus().subscribe();

    // Automatic routing judges the whole request: over the 4k window, it goes to the
    // cloud.
    for i in 0..12 {
        chat.tool_round(
            "Read",
            json!({"file_path": format!("src/part{i}.rs")}),
            &chunk,
        );
    }
    let answer = ask(&gateway, "over", &chat.body()).await;
    let route = finished(&mut events).await;
    assert_eq!(
        (route.backend.as_deref(), route.rule.as_deref()),
        (Some("claude"), Some("token_limit")),
        "{:?}",
        route.reason
    );
    chat.messages
        .push(json!({"role": "assistant", "content": answer["content"].clone()}));
    // The loop's reads (in the same episode: it had no new root turn) are in the
    // record the server holds.
    poll_log(&context, "the held record with the loop's reads", |last| {
        let held = context.log().records().get(session)?;
        if held.contains("- src/part11.rs: read") {
            return Some(());
        }
        *last = Some(held.to_string());
        None
    })
    .await;

    // `/local` with that history behind it: the user chose the local model, and
    // bounding makes the request fit its window.
    let args = json!({"file_path": "src/part3.rs"});
    chat.messages.push(json!({"role": "user",
        "content": format!("/local what did part3 say? [[call:Read {args}]]")}));
    let (call, _, request) = ask_local_explicit(&gateway, &mock, &mut events, &chat).await;
    let sent = messages(&request);
    assert!(
        text_of(&sent[0]).contains("- src/part11.rs: read"),
        "the record stands for the earlier episodes: {:?}",
        sent[0]
    );
    let conversation: Vec<&Value> = sent.iter().filter(|m| m["role"] != "system").collect();
    assert_eq!(conversation.len(), 1, "the /local turn alone: {sent:?}");

    // Its tool loop, long enough to overflow the window by itself: still the user's
    // `/local` episode, bounded, no call split from its result.
    let id = call["content"]
        .as_array()
        .and_then(|parts| parts.iter().find(|p| p["type"] == "tool_use"))
        .and_then(|p| p["id"].as_str())
        .expect("the local model called Read")
        .to_owned();
    chat.messages
        .push(json!({"role": "assistant", "content": call["content"].clone()}));
    chat.messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": id, "content": chunk}
    ]}));
    for i in 12..24 {
        chat.tool_round(
            "Read",
            json!({"file_path": format!("src/part{i}.rs")}),
            &chunk,
        );
    }
    let (_, route, request) = ask_local_explicit(&gateway, &mock, &mut events, &chat).await;
    let calls = calls_with_their_results(&messages(&request));
    assert_eq!(calls.last().map(String::as_str), Some("toolu_24"));
    assert!(
        route.context_left_out[0].turns > 4,
        "{:?}",
        route.context_left_out
    );
}

/// Send `chat` for session `over`: the local backend must answer it under the user's
/// `/local` (rule `explicit`) within the 3072-token budget. The reply, its route and
/// what the local backend got.
async fn ask_local_explicit(
    gateway: &common::Gateway,
    mock: &MockVendor,
    events: &mut tokio::sync::broadcast::Receiver<Arc<PipelineEvent>>,
    chat: &Conversation,
) -> (Value, RequestRecord, RecordedRequest) {
    let reply = ask(gateway, "over", &chat.body()).await;
    let route = finished(events).await;
    assert_eq!(
        (route.backend.as_deref(), route.rule.as_deref()),
        (Some("local"), Some("explicit")),
        "{:?}",
        route.reason
    );
    let request = last_local_request(mock);
    let estimate = sent_tokens(&request);
    assert!(estimate <= 3072, "~{estimate} tokens sent");
    (reply, route, request)
}

/// The opening of Claude Code's compaction instruction, as Claude Code 2.1.197 sends it
/// (read from its binary under tests/cli/node_modules).
const CLAUDE_CODE_COMPACT: &str = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n\
- Do NOT use Read, Bash, Grep, Glob, Edit, Write, or ANY other tool.\n\
- You already have all the context you need in the conversation above.\n\
- Tool calls will be REJECTED and will waste your only turn \u{2014} you will fail the task.\n\
- Your entire response must be plain text: an <analysis> block followed by a <summary> block.\n\n\
Your task is to create a detailed summary of the conversation so far, paying close attention \
to the user's explicit requests and your previous actions.\n\
This summary should be thorough in capturing technical details, code patterns, and \
architectural decisions that would be essential for continuing development work without \
losing context.";

/// Two episodes through the cloud: a read and an edit of src/hello.rs, then a failing
/// test run; the record is built.
async fn worked_session(gateway: &common::Gateway, context: &Context, name: &str) -> Conversation {
    let mut chat = Conversation::new("claude-sonnet");
    chat.episode(
        gateway,
        name,
        "fix the typo in src/hello.rs",
        "Edit",
        json!({"file_path": "src/hello.rs", "old_string": "helo", "new_string": "hello"}),
        "The file src/hello.rs has been updated.",
    )
    .await;
    chat.episode(
        gateway,
        name,
        "run the tests",
        "Bash",
        json!({"command": "cargo test"}),
        "test result: FAILED. 3 passed; 1 failed",
    )
    .await;
    record_until(context, &format!("claude-code:{name}"), 2).await;
    chat
}

/// The session's `compaction` events, once the writer has them.
async fn compactions(
    context: &Context,
    session: &str,
) -> Vec<glider_context::event::CompactionEvent> {
    for _ in 0..500 {
        context.log().flush();
        let found: Vec<_> = context
            .reader()
            .events(session)
            .expect("reads")
            .into_iter()
            .filter_map(|e| match e.event.body {
                glider_context::event::EventBody::Compaction(c) => Some(c),
                _ => None,
            })
            .collect();
        if !found.is_empty() {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Vec::new()
}

#[tokio::test]
async fn with_compaction_local_claude_codes_compact_goes_to_the_local_model_with_the_record() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) = gateway(
        &mock,
        home.path(),
        "context: {compaction: local, output_reserve_tokens: 1024}\n",
    )
    .await;
    let mut chat = worked_session(&gateway, &context, "compact").await;
    let cloud_before = mock
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/messages")
        .count();

    let mut events = gateway.engine.bus().subscribe();
    chat.messages
        .push(json!({"role": "user", "content": CLAUDE_CODE_COMPACT}));
    let mut body = chat.body();
    body["stream"] = json!(true);
    let reply = common::post(
        &gateway.base,
        "/v1/messages",
        body.to_string(),
        &[(SESSION_HEADER, "compact")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.text().contains("event: message_stop"),
        "Anthropic's stream grammar"
    );
    let route = finished(&mut events).await;
    assert_eq!(route.backend.as_deref(), Some("local"));
    assert!(
        route.reason.as_deref().unwrap_or("").contains("compaction"),
        "{route:?}"
    );
    assert_eq!(
        mock.requests()
            .iter()
            .filter(|r| r.path == "/v1/messages")
            .count(),
        cloud_before,
        "nothing went to the cloud"
    );

    // The record, the episode the instruction follows, and the instruction: not the
    // earlier episode.
    let sent = messages(&last_local_request(&mock));
    let roles: Vec<&str> = sent.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "user"],
        "{sent:#?}"
    );
    let system = text_of(&sent[0]);
    assert!(system.contains("- src/hello.rs: edited"), "{system}");
    assert!(
        system.contains("- cargo test: test result: FAILED"),
        "{system}"
    );
    assert!(text_of(&sent[1]).starts_with("run the tests"));
    assert!(text_of(&sent[5]).starts_with("CRITICAL: Respond with TEXT ONLY"));
    assert!(
        !sent[1..]
            .iter()
            .any(|m| text_of(m).contains("fix the typo")),
        "the earlier episode is left to the record"
    );
    assert_eq!(
        route.context_left_out[0].turns, 4,
        "{:?}",
        route.context_left_out
    );

    let compactions = compactions(&context, "claude-code:compact").await;
    assert_eq!(compactions.len(), 1, "{compactions:?}");
    assert_eq!(compactions[0].source, "local_model");
    assert!(!compactions[0].accepted, "not checked against the graph");
    assert!(
        !compactions[0].narrative.is_empty(),
        "the local model's summary is kept"
    );
    let view = context
        .reader()
        .session("claude-code:compact")
        .expect("reads")
        .expect("known");
    assert!(
        !view.record.text.contains("Your task is to create"),
        "the instruction is no goal of the user's: {}",
        view.record.text
    );
}

#[tokio::test]
async fn with_no_local_backend_up_the_compaction_is_answered_from_the_record_itself() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) =
        gateway_with(&mock, home.path(), "", "context: {compaction: local}\n").await;
    let mut chat = worked_session(&gateway, &context, "norecord").await;
    let asked_before = mock.requests().len();

    chat.messages
        .push(json!({"role": "user", "content": CLAUDE_CODE_COMPACT}));
    for stream in [false, true] {
        let mut body = chat.body();
        body["stream"] = json!(stream);
        let reply = common::post(
            &gateway.base,
            "/v1/messages",
            body.to_string(),
            &[(SESSION_HEADER, "norecord")],
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let response = reply
            .decode(glider_ngl::Dialect::Anthropic, stream)
            .expect("a well-formed Anthropic reply");
        let text = response.plain_text();
        assert!(text.starts_with("<analysis>"), "{text}");
        let summary = &text[text.find("<summary>").expect("a summary block")..];
        assert!(summary.contains("- src/hello.rs: edited"), "{summary}");
        assert!(
            summary.contains("- cargo test: test result: FAILED"),
            "{summary}"
        );
        assert!(summary.trim_end().ends_with("</summary>"));
        assert!(
            reply
                .headers
                .get("x-glider-route")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("backend=glider")),
            "{:?}",
            reply.headers
        );
    }
    assert_eq!(mock.requests().len(), asked_before, "no backend was asked");
    let compactions = compactions(&context, "claude-code:norecord").await;
    assert!(
        compactions.iter().all(|c| c.source == "record"),
        "{compactions:?}"
    );
}

#[tokio::test]
async fn by_default_a_compaction_goes_where_the_route_sends_it() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) = gateway(&mock, home.path(), "").await;
    let mut chat = worked_session(&gateway, &context, "default").await;
    let mut events = gateway.engine.bus().subscribe();
    chat.messages
        .push(json!({"role": "user", "content": CLAUDE_CODE_COMPACT}));
    ask(&gateway, "default", &chat.body()).await;
    let route = finished(&mut events).await;
    assert_eq!(
        route.backend.as_deref(),
        Some("claude"),
        "context.compaction: cloud"
    );
    let last = mock.requests().into_iter().last().expect("asked");
    assert_eq!(last.path, "/v1/messages");
    assert_eq!(
        last.body["messages"].as_array().map(Vec::len),
        Some(chat.messages.len()),
        "the cloud gets the conversation as the CLI sent it"
    );
}

/// Words only conversation A ever sent.
const A_ONLY: &str = "ALPHA-SECRET";

/// Two clients' conversations through one gateway: A (`a_headers`, its `a` shape)
/// works two episodes through the cloud, the second naming [`A_ONLY`]; its record is
/// held. Then B (`b_headers`, `b`) works one episode and asks `/local`: what the local
/// backend received for B, as text.
async fn b_local_after_a(
    (a_headers, mut a): (&[(&str, &str)], Conversation),
    (b_headers, mut b): (&[(&str, &str)], Conversation),
    a_opening: &str,
    b_opening: &str,
) -> String {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) = gateway(&mock, home.path(), "").await;
    let mut events = gateway.engine.bus().subscribe();
    let read = json!({"file_path": "src/a.rs"});
    a.episode_as(&gateway, a_headers, a_opening, "Read", read, "fn a() {}")
        .await;
    let session_a = finished(&mut events).await.session.expect("a session");
    let run = json!({"command": "cargo test"});
    let goal = format!("deploy the {A_ONLY} plan");
    a.episode_as(&gateway, a_headers, &goal, "Bash", run, "deployed")
        .await;
    let record_a = record_until(&context, &session_a, 2).await;
    assert!(record_a.contains(A_ONLY), "A's own record: {record_a}");

    let read = json!({"file_path": "src/b.rs"});
    b.episode_as(&gateway, b_headers, b_opening, "Read", read, "fn b() {}")
        .await;
    b.messages
        .push(json!({"role": "user", "content": "/local what did we do so far?"}));
    ask_as(&gateway, b_headers, &b.body()).await;
    let sent = messages(&last_local_request(&mock));
    let text: Vec<String> = sent
        .iter()
        .map(|m| format!("{}{}", text_of(m), m["tool_calls"]))
        .collect();
    let text = text.join("\n");
    assert!(text.contains("what did we do so far?"), "{text}");
    assert!(
        text.contains("src/b.rs"),
        "B's own earlier turn, as history or as its record: {text}"
    );
    text
}

#[tokio::test]
async fn two_api_keys_opening_with_the_same_words_never_share_a_record() {
    let conversation = || Conversation::new("claude-sonnet");
    let sent_for_b = b_local_after_a(
        (&[("x-api-key", "sk-client-a")], conversation()),
        (&[("x-api-key", "sk-client-b")], conversation()),
        "hello, look at the code",
        "hello, look at the code",
    )
    .await;
    assert!(
        !sent_for_b.contains(A_ONLY),
        "A's words in B's request: {sent_for_b}"
    );
    assert!(!sent_for_b.contains("src/a.rs"), "{sent_for_b}");
}

#[tokio::test]
async fn two_system_prompts_opening_with_the_same_words_never_share_a_record() {
    let with_system = |system: &str| Conversation {
        system: system.into(),
        ..Conversation::new("claude-sonnet")
    };
    let key: &[(&str, &str)] = &[("authorization", "Bearer sk-shared")];
    let sent_for_b = b_local_after_a(
        (key, with_system("You review code.")),
        (key, with_system("You write release notes.")),
        "hello, look at the code",
        "hello, look at the code",
    )
    .await;
    assert!(
        !sent_for_b.contains(A_ONLY),
        "A's words in B's request: {sent_for_b}"
    );
}

#[tokio::test]
async fn two_conversations_of_one_plain_user_id_are_not_merged() {
    let of_alice = || Conversation {
        metadata: Some(json!({"user_id": "alice"})),
        ..Conversation::new("claude-sonnet")
    };
    let sent_for_b = b_local_after_a(
        (&[], of_alice()),
        (&[], of_alice()),
        "look at the code",
        "plan my week",
    )
    .await;
    assert!(
        !sent_for_b.contains(A_ONLY),
        "A's words in B's request: {sent_for_b}"
    );
}

#[tokio::test]
async fn a_request_whose_earlier_turns_are_not_the_sessions_gets_no_record_of_it() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    // Room in the 4k window for B's whole (short) history.
    let (gateway, context) = gateway(
        &mock,
        home.path(),
        "context: {output_reserve_tokens: 1024}\n",
    )
    .await;
    let mut a = Conversation::new("claude-sonnet");
    let read = json!({"file_path": "src/a.rs"});
    a.episode(
        &gateway,
        "shared",
        "look at the code",
        "Read",
        read,
        "fn a() {}",
    )
    .await;
    let run = json!({"command": "cargo test"});
    let goal = format!("deploy the {A_ONLY} plan");
    a.episode(&gateway, "shared", &goal, "Bash", run, "deployed")
        .await;
    record_until(&context, "claude-code:shared", 2).await;

    // Another conversation under the same session id, its earlier turns never seen.
    let mut b = Conversation::new("claude-sonnet");
    b.messages = vec![
        json!({"role": "user", "content": "plan my week"}),
        json!({"role": "assistant", "content": "Monday: rest."}),
        json!({"role": "user", "content": "/local and Tuesday?"}),
    ];
    ask(&gateway, "shared", &b.body()).await;
    let sent = messages(&last_local_request(&mock));
    let text: Vec<String> = sent.iter().map(text_of).collect();
    let text = text.join("\n");
    assert!(
        !text.contains(A_ONLY),
        "the session's record in B's request: {text}"
    );
    assert!(!text.contains("<continuity-record"), "{text}");
    assert!(
        text.contains("plan my week") && text.contains("Monday: rest."),
        "B's own history instead: {text}"
    );
}
