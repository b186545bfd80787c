//! Bounded local context through the gateway, over real loopback HTTP with a context
//! log attached, on Claude Code's real traffic: every conversation here that stands for
//! Claude Code is derived from Claude Code 2.1.197's captured `tool-loop` turn
//! (tests/fixtures/cli, docs/captured-traffic.md) — its headers, system blocks, 24
//! tools, metadata and session id as captured — with the test's own messages laid out
//! as the CLI lays them out: the captured `<system-reminder>` block before the first
//! prompt and the captured `role: "system"` entry after it, `/local` through the
//! command file `glider setup claude` writes (the captured `local-flag` blocks), its
//! compaction instruction (captured) joined to the last user message. A session of
//! several episodes builds a continuity record; a `/local` turn then reaches the local
//! backend with the record (naming the earlier files and the open error) and only the
//! current episode — read from the mock backend's own request log. A session too long
//! for the local budget arrives cut to it, with no tool call split from its result, and
//! the route record counts what was left out. Conversations of SDK clients (no CLI's
//! shape: hand-written, and said so) that open with the same words are never merged.

mod common;

use std::sync::Arc;
use std::time::Duration;

use glider_context::Context;
use glider_dialects::codec;
use glider_engine::{PipelineEvent, RequestRecord};
use glider_ngl::Dialect;
use glider_test_support::captured::captured_file;
use glider_test_support::{MockConfig, MockVendor, RecordedRequest};
use serde_json::{Value, json};

/// A gateway with a local (OpenAI-compatible) and a cloud (Anthropic) backend on one
/// mock, and a context log under `dir` (as `GLIDER_HOME`), started as `glider serve`
/// starts it.
async fn gateway(
    mock: &MockVendor,
    dir: &std::path::Path,
    extra: &str,
) -> (common::Gateway, Arc<Context>) {
    gateway_sized(mock, dir, 4096, extra).await
}

/// [`gateway`] whose local model's context window is `window` tokens.
async fn gateway_sized(
    mock: &MockVendor,
    dir: &std::path::Path,
    window: u64,
    extra: &str,
) -> (common::Gateway, Arc<Context>) {
    let url = mock.base_url();
    let local = format!(
        "  - {{name: local, type: vllm, base_url: '{url}/v1', models: [{{name: qwen, context_window: {window}}}]}}\n"
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

/// Post `chat`'s next request (its body and headers); the reply as Anthropic JSON,
/// read from the stream when the request streams (as Claude Code's do).
async fn ask(gateway: &common::Gateway, chat: &Conversation) -> Value {
    send(gateway, chat, &chat.body()).await
}

/// Post `body` as `chat` posts (its path and headers); the reply as [`ask`] gives it.
async fn send(gateway: &common::Gateway, chat: &Conversation, body: &Value) -> Value {
    let reply = chat.post(gateway, body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let response = reply
        .decode(Dialect::Anthropic, body["stream"] == true)
        .expect("a well-formed Anthropic reply");
    codec(Dialect::Anthropic).encode_response(&response)
}

/// Headers of a captured request the HTTP client sets itself (`common::post` sends
/// `content-type: application/json`, as captured): not sent again.
const CLIENT_SET_HEADERS: &[&str] = &["host", "content-type", "accept-encoding"];

/// A conversation in one client's shape, grown one exchange at a time.
struct Conversation {
    /// Where it is posted (Claude Code: `/v1/messages?beta=true`, as captured).
    path: String,
    /// The request body; its `messages` are replaced by the conversation's own.
    template: Value,
    /// Sent with every request.
    headers: Vec<(String, String)>,
    /// Blocks the client puts before the first prompt (Claude Code's `<system-reminder>`).
    before_first: Vec<Value>,
    /// Entries it puts right after the first prompt (Claude Code's `role: "system"`
    /// entry: the Agent tool's agent types, the Skill tool's skills).
    after_first: Vec<Value>,
    /// `cache_control` on the last block of the last message, as Claude Code marks it.
    cache_last: bool,
    messages: Vec<Value>,
    /// Ids of the calls the test writes itself (the mock's replies carry their own).
    next_id: usize,
}

impl Conversation {
    /// Claude Code 2.1.197's conversation: its captured first `tool-loop` turn's
    /// headers and body (model `claude-opus-4-8`, 3 system blocks, 24 tools, metadata
    /// with its session id, adaptive thinking, `context_management`, streamed) as
    /// captured, the messages the test's.
    fn claude_code() -> Self {
        let captured = captured_file("claude-code", "tool-loop", "002-messages");
        let messages = captured.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let reminder = messages[0]["content"][0].clone();
        assert!(
            reminder["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("<system-reminder>")),
            "{reminder}"
        );
        let system_entries: Vec<Value> = messages
            .into_iter()
            .filter(|m| m["role"] == "system")
            .collect();
        assert_eq!(system_entries.len(), 1, "the captured system entry");
        Conversation {
            path: captured.path,
            template: captured.body,
            headers: captured
                .headers
                .into_iter()
                .filter(|(name, _)| !CLIENT_SET_HEADERS.contains(&name.as_str()))
                .collect(),
            before_first: vec![reminder],
            after_first: system_entries,
            cache_last: true,
            messages: Vec::new(),
            next_id: 0,
        }
    }

    /// An Anthropic SDK client's conversation, no CLI's shape (hand-written): its own
    /// system prompt, three small tools, no session id, `metadata` when given; sent with
    /// `headers` (its credential, if any).
    fn sdk(system: &str, metadata: Option<Value>, headers: &[(&str, &str)]) -> Self {
        let mut template = json!({
            "model": "claude-sonnet", "max_tokens": 200,
            "system": system,
            "tools": [
                {"name": "Read", "input_schema": {"type": "object"}},
                {"name": "Edit", "input_schema": {"type": "object"}},
                {"name": "Bash", "input_schema": {"type": "object"}}
            ],
            "messages": [],
        });
        if let Some(metadata) = metadata {
            template["metadata"] = metadata;
        }
        Conversation {
            path: "/v1/messages".into(),
            template,
            headers: headers
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            before_first: Vec::new(),
            after_first: Vec::new(),
            cache_last: false,
            messages: Vec::new(),
            next_id: 0,
        }
    }

    /// Post `body` (this conversation's, or one derived from it) on its path with its
    /// headers.
    async fn post(&self, gateway: &common::Gateway, body: &Value) -> common::Reply {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        common::post(&gateway.base, &self.path, body.to_string(), &headers).await
    }

    /// The next request's body.
    fn body(&self) -> Value {
        let mut messages = self.messages.clone();
        if self.cache_last {
            mark_last_block(messages.last_mut());
        }
        self.with_messages(messages)
    }

    /// The client's body holding `messages`.
    fn with_messages(&self, messages: Vec<Value>) -> Value {
        let mut body = self.template.clone();
        body["messages"] = messages.into();
        body
    }

    /// The session key Glider gives this conversation (its session id or its start,
    /// scoped by its credential).
    fn session(&self) -> String {
        let request = codec(Dialect::Anthropic)
            .decode_request(self.body().to_string().as_bytes())
            .expect("decodes");
        let mut headers = http::HeaderMap::new();
        for (name, value) in &self.headers {
            headers.insert(
                http::HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
                http::HeaderValue::from_str(value).expect("a header value"),
            );
        }
        glider_engine::router::sticky::session_id(&request, &headers).expect("a session")
    }

    /// The user's next message of `blocks`, laid out as the client lays it out.
    fn user(&mut self, mut blocks: Vec<Value>) {
        let first = self.messages.is_empty();
        if first {
            blocks.splice(0..0, self.before_first.iter().cloned());
        }
        self.messages
            .push(json!({"role": "user", "content": blocks}));
        if first {
            self.messages.extend(self.after_first.iter().cloned());
        }
    }

    /// The user types `text`.
    fn prompt(&mut self, text: &str) {
        self.user(vec![json!({"type": "text", "text": text})]);
    }

    /// The user types `/local <args>` in Claude Code with the command file `glider
    /// setup claude` writes: Claude Code's record of the command and the expanded
    /// text, as captured in `local-flag` (`/local what is 2+2`), the arguments
    /// replaced.
    fn local(&mut self, args: &str) {
        let captured = captured_file("claude-code", "local-flag", "002-messages");
        let blocks: Vec<Value> = captured.body["messages"][0]["content"]
            .as_array()
            .map(|blocks| blocks[1..].to_vec())
            .unwrap_or_default()
            .into_iter()
            .map(|mut block| {
                let text = block["text"].as_str().unwrap_or_default();
                assert!(text.contains("what is 2+2"), "{block}");
                block["text"] = text.replace("what is 2+2", args).into();
                if let Some(block) = block.as_object_mut() {
                    block.remove("cache_control");
                }
                block
            })
            .collect();
        assert_eq!(blocks.len(), 2, "the command's record and its expansion");
        self.user(blocks);
    }

    /// The model's reply, as the client sends it back.
    fn answer(&mut self, reply: &Value) {
        self.messages
            .push(json!({"role": "assistant", "content": reply["content"].clone()}));
    }

    /// One episode: the user asks, the model calls `tool` (the mock's script), the
    /// CLI sends `output` back under the call's own id, the model answers in text.
    async fn episode(
        &mut self,
        gateway: &common::Gateway,
        goal: &str,
        tool: &str,
        args: Value,
        output: &str,
    ) {
        self.prompt(&format!("{goal} [[call:{tool} {args}]]"));
        let call = ask(gateway, self).await;
        let id = tool_use_id(&call).expect("the model called the tool");
        self.answer(&call);
        self.messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": output}
        ]}));
        let answer = ask(gateway, self).await;
        self.answer(&answer);
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

    /// The compaction request Claude Code sends for this conversation (`/compact`, or
    /// automatically as a turn starts), laid out as the captured ones are
    /// (`compact`, `auto-compact`): the last reply left out, the captured instruction
    /// joined as a text block to the user message before it, `cache_control` on the
    /// message before that.
    fn compaction(&self) -> Value {
        let captured = captured_file("claude-code", "compact", "002-compact");
        let instruction = captured.body["messages"]
            .as_array()
            .and_then(|messages| messages.last())
            .and_then(|last| last["content"].as_array())
            .and_then(|blocks| blocks.last())
            .cloned()
            .expect("the captured instruction");
        let mut messages = self.messages.clone();
        assert_eq!(
            messages.pop().map(|m| m["role"].clone()),
            Some(json!("assistant")),
            "compaction follows a reply"
        );
        let last = messages.len() - 1;
        messages[last]["content"]
            .as_array_mut()
            .expect("the user message's blocks")
            .push(instruction);
        mark_last_block(messages.get_mut(last - 1));
        self.with_messages(messages)
    }
}

/// Claude Code's `cache_control` on the last block of `message`.
fn mark_last_block(message: Option<&mut Value>) {
    if let Some(block) = message
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|blocks| blocks.last_mut())
    {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
}

/// The id of the first tool call in an Anthropic reply.
fn tool_use_id(reply: &Value) -> Option<String> {
    reply["content"]
        .as_array()?
        .iter()
        .find(|part| part["type"] == "tool_use")?["id"]
        .as_str()
        .map(str::to_owned)
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

/// Whether the cloud backend (Anthropic Messages, on the same mock) received `request`.
fn is_cloud(request: &RecordedRequest) -> bool {
    request.path.split('?').next() == Some("/v1/messages")
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
/// 3.5 bytes a token, 4 a message, and the tool definitions' text (each one's name,
/// description and parameter schema, not the wire's framing around them).
fn sent_tokens(request: &RecordedRequest) -> u64 {
    let sent = messages(request);
    let tools: usize = request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|tool| {
            let function = &tool["function"];
            function["name"].as_str().map_or(0, str::len)
                + function["description"].as_str().map_or(0, str::len)
                + function["parameters"].to_string().len()
        })
        .sum();
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
        + tools;
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
    let mut chat = Conversation::claude_code();
    let session = chat.session();
    chat.episode(
        &gateway,
        "look at the greeting in src/hello.rs",
        "Read",
        json!({"file_path": "src/hello.rs"}),
        "fn hello() { println!(\"helo\") }",
    )
    .await;
    chat.episode(
        &gateway,
        "fix the typo",
        "Edit",
        json!({"file_path": "src/hello.rs", "old_string": "helo", "new_string": "hello"}),
        "The file src/hello.rs has been updated.",
    )
    .await;
    chat.episode(
        &gateway,
        "run the tests",
        "Bash",
        json!({"command": "cargo test"}),
        "test result: FAILED. 3 passed; 1 failed",
    )
    .await;
    let record = record_until(&context, &session, 3).await;
    assert!(record.contains("- src/hello.rs: edited"), "{record}");

    let mut events = gateway.engine.bus().subscribe();
    chat.local("what did we change so far and why?");
    ask(&gateway, &chat).await;
    let route = finished(&mut events).await;

    let sent = messages(&last_local_request(&mock));
    let roles: Vec<&str> = sent.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["system", "user"], "{sent:#?}");
    // Claude Code's system blocks, cut to the window's share (its system entry, after
    // them, is cut whole), then the record as its own part.
    let system = sent[0]["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(system.len(), SYSTEM_PARTS + 1, "{system:#?}");
    let captured = chat.template["system"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        system[..SYSTEM_PARTS - 1]
            .iter()
            .map(|p| &p["text"])
            .collect::<Vec<_>>(),
        captured[..SYSTEM_PARTS - 1]
            .iter()
            .map(|p| &p["text"])
            .collect::<Vec<_>>(),
        "the billing line and who the model is, as Claude Code sent them"
    );
    let main = system[SYSTEM_PARTS - 1]["text"]
        .as_str()
        .unwrap_or_default();
    let head: String = main.chars().take(200).collect();
    assert!(
        captured[SYSTEM_PARTS - 1]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with(&head)),
        "the main prompt's head: {main}"
    );
    assert!(
        main.ends_with("[system text cut here to fit this model's window]"),
        "{main}"
    );
    assert!(
        !sent[0].to_string().contains("Available agent types"),
        "the system entry did not fit the share"
    );
    let given = system[SYSTEM_PARTS]["text"].as_str().unwrap_or_default();
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
    assert!(
        !given.contains("<system-reminder>") && !given.contains("Today's date"),
        "the CLI's reminder is no goal: {given}"
    );
    // The command's record and the flag are stripped; the expanded text's own line
    // end stays.
    assert_eq!(text_of(&sent[1]), "what did we change so far and why?\n");

    assert_eq!(route.local, Some(true));
    let left_out = &route.context_left_out;
    assert_eq!(left_out.len(), 1, "{left_out:?}");
    assert_eq!(left_out[0].backend, "local");
    assert_eq!(
        left_out[0].turns, 12,
        "three episodes of four turns each (the system entry is system text: fitting's)"
    );
    assert!(
        left_out[0].tokens > 0 && left_out[0].record_tokens > 0,
        "{left_out:?}"
    );
}

/// The parts of Claude Code's system text a local request's system message opens with:
/// its three captured blocks (the billing line, who the model is, the main prompt).
const SYSTEM_PARTS: usize = 3;

/// A gateway whose local model has a 4k window with 1k kept for the reply (3072 tokens
/// for the request), and a Claude Code session whose first episode read conf/app.toml.
struct OneRead {
    mock: MockVendor,
    _home: tempfile::TempDir,
    gateway: common::Gateway,
    context: Arc<Context>,
    chat: Conversation,
}

/// [`OneRead`] with `extra` config; once its record is held.
async fn after_one_read(extra: &str) -> OneRead {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) = gateway(
        &mock,
        home.path(),
        &format!("{extra}context: {{output_reserve_tokens: 1024}}\n"),
    )
    .await;
    let mut chat = Conversation::claude_code();
    chat.episode(
        &gateway,
        "read the config",
        "Read",
        json!({"file_path": "conf/app.toml"}),
        "port = 80",
    )
    .await;
    record_until(&context, &chat.session(), 1).await;
    OneRead {
        mock,
        _home: home,
        gateway,
        context,
        chat,
    }
}

/// Claude Code's model served by the local one (`model_aliases`): automatic routing
/// takes it local while it fits, the cloud (which serves the name asked for) behind.
const CLAUDE_CODE_MODEL_LOCAL: &str = "model_aliases: {claude-opus-4-8: qwen}\n";

#[tokio::test]
async fn a_session_over_the_local_budget_arrives_cut_to_it_with_no_call_split_from_its_result() {
    let OneRead {
        mock,
        _home,
        gateway,
        context: _context,
        mut chat,
    } = after_one_read(CLAUDE_CODE_MODEL_LOCAL).await;

    // The current episode reads four large files: ~1,900 tokens of results; with Claude
    // Code's system text (cut to a quarter of the window) and its core tools (slimmed),
    // ~3,500 tokens once fitted: over the 3,072-token budget, yet under the 4,096-token
    // window the router checks.
    let goal = "summarise the sources";
    chat.prompt(goal);
    let chunk = "let value = compute(input);\n".repeat(60); // 1,680 bytes, ~480 tokens
    let reads = 4;
    for i in 0..reads {
        chat.tool_round(
            "Read",
            json!({"file_path": format!("src/part{i}.rs")}),
            &chunk,
        );
    }
    let mut events = gateway.engine.bus().subscribe();
    ask(&gateway, &chat).await;
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
    assert_eq!(calls.last(), Some(&format!("toolu_{reads}")));
    let left_out = &route.context_left_out[0];
    assert!(
        left_out.turns > 4,
        "older reads were left out: {left_out:?}"
    );
}

#[tokio::test]
async fn a_session_over_the_local_window_goes_to_the_cloud_unless_the_user_chose_local() {
    // Claude Code asks for its Claude model, aliased to the local one: the cloud serves
    // the name it asked for, so it is the fallback.
    let OneRead {
        mock,
        _home,
        gateway,
        context,
        mut chat,
    } = after_one_read(CLAUDE_CODE_MODEL_LOCAL).await;
    let session = chat.session();
    let chunk = "let value = compute(input);\n".repeat(60); // 1,680 bytes, ~480 tokens
    // As Claude Code sends it: the user's words alone first (the episode's root, which
    // the record's owner check reads back), then its tool loop.
    chat.prompt("summarise the sources");
    ask(&gateway, &chat).await;
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
    let answer = ask(&gateway, &chat).await;
    let route = finished(&mut events).await;
    assert_eq!(
        (route.backend.as_deref(), route.rule.as_deref()),
        (Some("claude"), Some("token_limit")),
        "{:?}",
        route.reason
    );
    chat.answer(&answer);
    // The loop's reads (in the same episode: it had no new root turn) are in the
    // record the server holds.
    poll_log(&context, "the held record with the loop's reads", |last| {
        let held = context.log().records().get(&session)?;
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
    chat.local(&format!("what did part3 say? [[call:Read {args}]]"));
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
    let id = tool_use_id(&call).expect("the local model called Read");
    chat.answer(&call);
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

/// Send `chat`: the local backend must answer it under the user's `/local` (rule
/// `explicit`) within the 3072-token budget. The reply, its route and what the local
/// backend got.
async fn ask_local_explicit(
    gateway: &common::Gateway,
    mock: &MockVendor,
    events: &mut tokio::sync::broadcast::Receiver<Arc<PipelineEvent>>,
    chat: &Conversation,
) -> (Value, RequestRecord, RecordedRequest) {
    let reply = ask(gateway, chat).await;
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

/// Two episodes of Claude Code through the cloud: an edit of src/hello.rs, then a
/// failing test run; the record is built.
async fn worked_session(gateway: &common::Gateway, context: &Context) -> Conversation {
    let mut chat = Conversation::claude_code();
    chat.episode(
        gateway,
        "fix the typo in src/hello.rs",
        "Edit",
        json!({"file_path": "src/hello.rs", "old_string": "helo", "new_string": "hello"}),
        "The file src/hello.rs has been updated.",
    )
    .await;
    chat.episode(
        gateway,
        "run the tests",
        "Bash",
        json!({"command": "cargo test"}),
        "test result: FAILED. 3 passed; 1 failed",
    )
    .await;
    record_until(context, &chat.session(), 2).await;
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
    // Claude Code's instruction is 6 KB (~1,750 tokens): an 8k window holds it with the
    // episode it follows.
    let (gateway, context) = gateway_sized(
        &mock,
        home.path(),
        8192,
        "context: {compaction: local, output_reserve_tokens: 1024}\n",
    )
    .await;
    let chat = worked_session(&gateway, &context).await;
    let session = chat.session();
    let cloud_before = mock.requests().iter().filter(|r| is_cloud(r)).count();

    let mut events = gateway.engine.bus().subscribe();
    // Streamed, as Claude Code sends it.
    let body = chat.compaction();
    assert_eq!(body["stream"], true);
    let reply = chat.post(&gateway, &body).await;
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
        mock.requests().iter().filter(|r| is_cloud(r)).count(),
        cloud_before,
        "nothing went to the cloud"
    );

    // The record, the episode the instruction follows, and the instruction (joined to
    // the last tool result, as Claude Code sends it; the reply it followed left out):
    // not the earlier episode.
    let sent = messages(&last_local_request(&mock));
    let roles: Vec<&str> = sent.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "user"],
        "{sent:#?}"
    );
    let system = text_of(&sent[0]);
    assert!(system.contains("- src/hello.rs: edited"), "{system}");
    assert!(
        system.contains("- cargo test: test result: FAILED"),
        "{system}"
    );
    assert!(text_of(&sent[1]).starts_with("run the tests"));
    assert!(text_of(&sent[4]).starts_with("CRITICAL: Respond with TEXT ONLY"));
    assert!(
        !sent[1..]
            .iter()
            .any(|m| text_of(m).contains("fix the typo")),
        "the earlier episode is left to the record"
    );
    assert_eq!(
        route.context_left_out[0].turns, 4,
        "the earlier episode's four turns (the system entry is system text, kept): {:?}",
        route.context_left_out
    );

    let compactions = compactions(&context, &session).await;
    assert_eq!(compactions.len(), 1, "{compactions:?}");
    assert_eq!(compactions[0].source, "local_model");
    assert!(!compactions[0].accepted, "not checked against the graph");
    assert!(
        !compactions[0].narrative.is_empty(),
        "the local model's summary is kept"
    );
    let view = context
        .reader()
        .session(&session)
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
    let chat = worked_session(&gateway, &context).await;
    let asked_before = mock.requests().len();

    // Streamed as Claude Code sends it, and (derived) not streamed.
    for stream in [false, true] {
        let mut body = chat.compaction();
        body["stream"] = json!(stream);
        let reply = chat.post(&gateway, &body).await;
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
    let compactions = compactions(&context, &chat.session()).await;
    assert!(
        compactions.iter().all(|c| c.source == "record"),
        "{compactions:?}"
    );
}

#[tokio::test]
async fn with_compaction_cloud_a_compaction_goes_where_the_route_sends_it() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) = gateway(&mock, home.path(), "context: {compaction: cloud}\n").await;
    let chat = worked_session(&gateway, &context).await;
    let mut events = gateway.engine.bus().subscribe();
    let compaction = chat.compaction();
    send(&gateway, &chat, &compaction).await;
    let route = finished(&mut events).await;
    assert_eq!(
        route.backend.as_deref(),
        Some("claude"),
        "context.compaction: cloud"
    );
    let last = mock.requests().into_iter().last().expect("asked");
    assert_eq!(last.path, "/v1/messages", "the cloud's own Messages path");
    assert_eq!(
        last.body["messages"], compaction["messages"],
        "the cloud gets the conversation as the CLI sent it"
    );
}

/// The default policy (`context.compaction: auto`): a local model that is up and holds
/// the session's record answers the compaction; the user's `x-glider-route: cloud`
/// is kept; with no local backend the route stands (Glider does not answer from the
/// record itself, as `local` would).
#[tokio::test]
async fn by_default_a_compaction_goes_to_a_local_model_that_holds_the_record() {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    // An 8k window: the compaction as sent (Claude Code's 24 tools and all) does not
    // fit; the record and the episode do.
    let (gateway, context) = gateway_sized(
        &mock,
        home.path(),
        8192,
        "context: {output_reserve_tokens: 1024}\n",
    )
    .await;
    let mut chat = worked_session(&gateway, &context).await;
    let mut events = gateway.engine.bus().subscribe();
    let compaction = chat.compaction();
    send(&gateway, &chat, &compaction).await;
    let route = finished(&mut events).await;
    assert_eq!(route.backend.as_deref(), Some("local"), "{route:?}");
    let reason = route.reason.as_deref().unwrap_or("");
    assert!(reason.contains("context.compaction: auto"), "{reason}");
    assert!(
        !route.context_left_out.is_empty(),
        "the history was left to the record: {route:?}"
    );

    // The user's own choice stands.
    chat.headers.push(("x-glider-route".into(), "cloud".into()));
    send(&gateway, &chat, &compaction).await;
    let route = finished(&mut events).await;
    assert_eq!(route.backend.as_deref(), Some("claude"), "{route:?}");

    // No local backend: the route, not the record.
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) = gateway_with(&mock, home.path(), "", "").await;
    let chat = worked_session(&gateway, &context).await;
    let mut events = gateway.engine.bus().subscribe();
    send(&gateway, &chat, &chat.compaction()).await;
    let route = finished(&mut events).await;
    assert_eq!(route.backend.as_deref(), Some("claude"), "{route:?}");
}

/// Words only conversation A ever sent.
const A_ONLY: &str = "ALPHA-SECRET";

/// Two clients' conversations through one gateway: A works two episodes through the
/// cloud, the second naming [`A_ONLY`]; its record is held. Then B works one episode
/// and asks `/local`: what the local backend received for B, as text.
async fn b_local_after_a(
    mut a: Conversation,
    mut b: Conversation,
    a_opening: &str,
    b_opening: &str,
) -> String {
    let mock = MockVendor::start(MockConfig::default()).await;
    let home = tempfile::tempdir().expect("tempdir");
    let (gateway, context) = gateway(&mock, home.path(), "").await;
    let mut events = gateway.engine.bus().subscribe();
    let read = json!({"file_path": "src/a.rs"});
    a.episode(&gateway, a_opening, "Read", read, "fn a() {}")
        .await;
    let session_a = finished(&mut events).await.session.expect("a session");
    let run = json!({"command": "cargo test"});
    let goal = format!("deploy the {A_ONLY} plan");
    a.episode(&gateway, &goal, "Bash", run, "deployed").await;
    let record_a = record_until(&context, &session_a, 2).await;
    assert!(record_a.contains(A_ONLY), "A's own record: {record_a}");

    let read = json!({"file_path": "src/b.rs"});
    b.episode(&gateway, b_opening, "Read", read, "fn b() {}")
        .await;
    b.prompt("/local what did we do so far?");
    ask(&gateway, &b).await;
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

/// The system prompt of the SDK clients below.
const SDK_SYSTEM: &str = "You are a helpful coding assistant.";

#[tokio::test]
async fn two_api_keys_opening_with_the_same_words_never_share_a_record() {
    let with_key = |key| Conversation::sdk(SDK_SYSTEM, None, &[("x-api-key", key)]);
    let sent_for_b = b_local_after_a(
        with_key("sk-client-a"),
        with_key("sk-client-b"),
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
    let key: &[(&str, &str)] = &[("authorization", "Bearer sk-shared")];
    let sent_for_b = b_local_after_a(
        Conversation::sdk("You review code.", None, key),
        Conversation::sdk("You write release notes.", None, key),
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
    let of_alice = || Conversation::sdk(SDK_SYSTEM, Some(json!({"user_id": "alice"})), &[]);
    let sent_for_b =
        b_local_after_a(of_alice(), of_alice(), "look at the code", "plan my week").await;
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
    let mut a = Conversation::claude_code();
    let read = json!({"file_path": "src/a.rs"});
    a.episode(&gateway, "look at the code", "Read", read, "fn a() {}")
        .await;
    let run = json!({"command": "cargo test"});
    let goal = format!("deploy the {A_ONLY} plan");
    a.episode(&gateway, &goal, "Bash", run, "deployed").await;
    record_until(&context, &a.session(), 2).await;

    // Another Claude Code conversation under the same (captured) session id and key,
    // its earlier turns never seen.
    let mut b = Conversation::claude_code();
    assert_eq!(b.session(), a.session());
    b.prompt("plan my week");
    b.messages
        .push(json!({"role": "assistant", "content": [{"type": "text", "text": "Monday: rest."}]}));
    b.local("and Tuesday?");
    ask(&gateway, &b).await;
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
