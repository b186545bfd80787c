//! The tool loop for local answers (`tools.loop`) through the real gateway over
//! loopback, with the scripted mock as the local model: Glider runs the model's calls
//! to its internal tools in `tools.workspace` itself, sends the results back, and the
//! client gets the final answer in its own dialect, streamed or not; a model that never
//! stops calling tools ends at the turn budget with Glider's honest reply; a tool's
//! error goes back to the model as its result. Each call is on the request record.
//! The loop is bounded (issue 50 item 4): calls per reply and per request, argument and
//! result bytes, each cut told to the model and kept on the record; a call with an
//! empty name is refused as invalid.

mod common;

use common::*;
use glider_ngl::{Dialect, StopReason};

/// A workspace with one file the model greps for, and the gateway with the loop on.
async fn setup(max_turns: u32) -> (tempfile::TempDir, glider_test_support::MockVendor, Gateway) {
    setup_with(&format!("max_turns: {max_turns}")).await
}

/// [`setup`] with `loop_keys` in `tools.loop` (besides `enabled: true`).
async fn setup_with(
    loop_keys: &str,
) -> (tempfile::TempDir, glider_test_support::MockVendor, Gateway) {
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(
        workspace.path().join("notes.txt"),
        "first line\nthe needle is here\n",
    )
    .expect("file written");
    let extra = format!(
        "tools: {{workspace: '{}', loop: {{enabled: true, {loop_keys}}}}}\n",
        workspace.path().display()
    );
    let (mock, yaml) = mock_and_config(&extra).await;
    (workspace, mock, gateway(&yaml).await)
}

async fn ask(gateway: &Gateway, front: Dialect, text: &str, stream: bool) -> Reply {
    ask_model(gateway, "m-ollama", front, text, stream).await
}

async fn ask_model(
    gateway: &Gateway,
    model: &str,
    front: Dialect,
    text: &str,
    stream: bool,
) -> Reply {
    let request = text_request(model, text, stream);
    post(
        &gateway.base,
        front_path(front),
        wire(front, &request).to_string(),
        &[],
    )
    .await
}

#[tokio::test]
async fn a_local_model_that_calls_grep_gets_its_result_and_the_client_gets_the_answer() {
    let (_workspace, mock, gateway) = setup(4).await;
    // Every front, streamed or not (both CLIs always stream), to an Ollama and an
    // OpenAI-compatible local backend: the loop reads each model turn whole.
    let cases = [("m-ollama", "ollama"), ("m-vllm", "vllm")]
        .into_iter()
        .flat_map(|model| FRONTS.into_iter().map(move |front| (model, front)))
        .flat_map(|case| [false, true].map(move |stream| (case, stream)));
    for (((model, backend), front), stream) in cases {
        {
            let case = format!("{model} {front:?} stream={stream}");
            let mut events = gateway.engine.bus().subscribe();
            let before = mock.requests().len();
            let reply = ask_model(
                &gateway,
                model,
                front,
                r#"where is the needle? [[call:grep {"pattern":"needle"}]]"#,
                stream,
            )
            .await;
            assert_eq!(reply.status, 200, "{case}: {}", reply.text());
            let response = reply
                .decode(front, stream)
                .unwrap_or_else(|e| panic!("{case}: {e}: {}", reply.text()));
            assert!(
                tool_calls(&response).is_empty(),
                "{case}: no call reaches the client"
            );
            assert_eq!(response.stop_reason, StopReason::EndTurn, "{case}");
            let text = response.plain_text();
            assert!(
                text.contains("tool result: notes.txt:2: the needle is here"),
                "{case}: the model's answer from the grep result: {text}"
            );
            let sent = mock.requests();
            assert_eq!(sent.len(), before + 2, "{case}: two model turns");
            let first = sent[before].body.to_string();
            assert!(
                first.contains("\"grep\""),
                "{case}: the tools are offered: {first}"
            );
            let second = sent[before + 1].body.to_string();
            assert!(
                second.contains("notes.txt:2: the needle is here"),
                "{case}: the second request carries the grep result: {second}"
            );
            let record = next_finished(&mut events).await;
            assert_eq!(
                record.tool_calls.len(),
                1,
                "{case}: {:?}",
                record.tool_calls
            );
            let call = &record.tool_calls[0];
            assert_eq!(
                (call.tool.as_str(), call.ok, call.turn),
                ("grep", true, 1),
                "{case}"
            );
            assert!(
                call.arguments.contains("needle"),
                "{case}: {}",
                call.arguments
            );
            assert_eq!(record.backend.as_deref(), Some(backend), "{case}");
        }
    }
}

#[tokio::test]
async fn a_model_that_calls_tools_forever_stops_at_the_turn_budget_with_an_honest_reply() {
    let (_workspace, mock, gateway) = setup(3).await;
    for stream in [false, true] {
        let mut events = gateway.engine.bus().subscribe();
        let before = mock.requests().len();
        let reply = ask(
            &gateway,
            Dialect::Anthropic,
            r#"keep looking [[loop:list_dir {"path":"."}]]"#,
            stream,
        )
        .await;
        assert_eq!(reply.status, 200, "stream={stream}: {}", reply.text());
        let response = reply
            .decode(Dialect::Anthropic, stream)
            .expect("well-formed");
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert!(tool_calls(&response).is_empty());
        let text = response.plain_text();
        assert!(
            text.contains("stopped after 3 tool turns") && text.contains("tools.loop.max_turns"),
            "stream={stream}: {text}"
        );
        assert_eq!(
            mock.requests().len(),
            before + 4,
            "three turns ran their calls; the fourth's were not run"
        );
        let record = next_finished(&mut events).await;
        let turns: Vec<u32> = record.tool_calls.iter().map(|c| c.turn).collect();
        assert_eq!(turns, [1, 2, 3], "stream={stream}");
    }
}

#[tokio::test]
async fn a_tool_error_goes_back_to_the_model_as_its_result() {
    let (_workspace, mock, gateway) = setup(4).await;
    let mut events = gateway.engine.bus().subscribe();
    let before = mock.requests().len();
    let reply = ask(
        &gateway,
        Dialect::OpenAiChat,
        r#"read it [[call:read_file {"path":"../../../etc/passwd"}]]"#,
        false,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply
        .decode(Dialect::OpenAiChat, false)
        .expect("decodes")
        .plain_text();
    assert!(text.contains("tool result: error: refused"), "{text}");
    let second = mock.requests()[before + 1].body.to_string();
    assert!(
        second.contains("outside the workspace"),
        "the model is told why: {second}"
    );
    assert!(!second.contains("root:x:0:0"), "nothing outside was read");
    let record = next_finished(&mut events).await;
    assert_eq!(record.tool_calls.len(), 1);
    assert!(!record.tool_calls[0].ok);
    assert!(
        record.tool_calls[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("outside the workspace")),
        "{:?}",
        record.tool_calls[0]
    );
}

#[tokio::test]
async fn with_the_loop_off_a_tool_call_reaches_the_client_untouched() {
    let workspace = tempfile::tempdir().expect("workspace");
    let extra = format!("tools: {{workspace: '{}'}}\n", workspace.path().display());
    let (mock, yaml) = mock_and_config(&extra).await;
    let gateway = gateway(&yaml).await;
    let reply = post(
        &gateway.base,
        front_path(Dialect::Anthropic),
        wire(Dialect::Anthropic, &tool_request("m-ollama", false)).to_string(),
        &[],
    )
    .await;
    let response = reply.decode(Dialect::Anthropic, false).expect("decodes");
    assert_eq!(
        first_tool_call(&response).map(|c| c.1).as_deref(),
        Some("get_weather")
    );
    assert_eq!(mock.requests().len(), 1);
    assert!(
        !mock.requests()[0].body.to_string().contains("\"grep\""),
        "no tools added"
    );
}

#[tokio::test]
async fn every_call_the_loop_runs_is_a_tool_run_event_in_the_context_log() {
    let (workspace, _mock, gateway) = setup(4).await;
    let home = tempfile::tempdir().expect("home");
    let config = gateway.config.snapshot();
    let context = glider_context::Context::start(home.path(), &config.context)
        .expect("the log opens")
        .expect("context is on");
    assert!(gateway.engine.attach_context(context.clone()).is_ok());
    let request = text_request(
        "m-ollama",
        r#"find it [[call:grep {"pattern":"needle"}]]"#,
        false,
    );
    let reply = post(
        &gateway.base,
        front_path(Dialect::Anthropic),
        wire(Dialect::Anthropic, &request).to_string(),
        &[("x-claude-code-session-id", "tool-loop")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let mut runs = Vec::new();
    // Polled: the log's writer appends off the request path.
    for _ in 0..500 {
        context.log().flush();
        runs = context
            .reader()
            .events("claude-code:tool-loop")
            .expect("reads")
            .into_iter()
            .filter_map(|e| match e.event.body {
                glider_context::event::EventBody::ToolRun(run) => Some(run),
                _ => None,
            })
            .collect();
        if !runs.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        (runs[0].tool.as_str(), runs[0].ok, runs[0].turn),
        ("grep", true, 1)
    );
    assert!(runs[0].arguments.contains("needle"));
    drop(workspace);
}

/// The last 2000 characters of `text`: enough to see why, not a 50 KB body.
fn tail(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    chars[chars.len().saturating_sub(2000)..].iter().collect()
}

#[tokio::test]
async fn calls_past_the_reply_cap_are_not_run_and_the_model_and_the_record_say_so() {
    let (_workspace, mock, gateway) = setup_with("max_calls_per_reply: 3").await;
    let mut events = gateway.engine.bus().subscribe();
    let before = mock.requests().len();
    let calls = r#"[[call:list_dir {"path":"."}]]"#.repeat(40);
    let reply = ask(
        &gateway,
        Dialect::OpenAiChat,
        &format!("look {calls}"),
        false,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let sent = mock.requests();
    assert_eq!(sent.len(), before + 2);
    let second = sent[before + 1].body.to_string();
    let sent_back: usize = sent[before + 1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .map(Vec::len)
        .sum();
    assert_eq!(sent_back, 3, "only the calls that ran go back to the model");
    assert!(
        second.contains("this reply made 40 tool calls; only the first 3 ran (tools.loop.max_calls_per_reply: 3)"),
        "{}",
        tail(&second)
    );
    let record = next_finished(&mut events).await;
    assert_eq!(record.tool_calls.len(), 3);
    let cut = record.tool_calls[2].cut.as_deref().unwrap_or_default();
    assert!(cut.contains("the other 37 were not run"), "{cut}");
}

#[tokio::test]
async fn the_request_cap_runs_what_is_left_then_ends_the_loop_with_an_honest_reply() {
    let (_workspace, mock, gateway) = setup_with("max_calls_per_request: 5").await;
    let mut events = gateway.engine.bus().subscribe();
    let before = mock.requests().len();
    let calls = r#"[[loop:list_dir {"path":"."}]]"#.repeat(3);
    let reply = ask(
        &gateway,
        Dialect::Anthropic,
        &format!("look {calls}"),
        false,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply
        .decode(Dialect::Anthropic, false)
        .expect("well-formed")
        .plain_text();
    assert!(
        text.contains("budget of 5 tool calls (tools.loop.max_calls_per_request) ran out"),
        "{text}"
    );
    // Three calls, then the two left, then the third reply's calls are not run.
    assert_eq!(mock.requests().len(), before + 3);
    let record = next_finished(&mut events).await;
    let turns: Vec<u32> = record.tool_calls.iter().map(|c| c.turn).collect();
    assert_eq!(turns, [1, 1, 1, 2, 2]);
}

#[tokio::test]
async fn oversized_arguments_are_not_run_nor_sent_back_and_a_long_result_is_cut() {
    let (workspace, mock, gateway) =
        setup_with("max_argument_bytes: 1000, max_result_bytes: 2000").await;
    // 200 matching lines: a grep result of some 8 KB.
    std::fs::write(
        workspace.path().join("many.txt"),
        "a needle in a line of hay\n".repeat(200),
    )
    .expect("file written");
    let mut events = gateway.engine.bus().subscribe();
    let before = mock.requests().len();
    let big = "x".repeat(50_000);
    let text =
        format!(r#"go [[call:grep {{"pattern":"{big}"}}]] [[call:grep {{"pattern":"needle"}}]]"#);
    let reply = ask(&gateway, Dialect::OpenAiChat, &text, false).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let sent = mock.requests();
    let (first, second) = (
        sent[before].body.to_string(),
        sent[before + 1].body.to_string(),
    );
    assert!(
        second.len() < first.len() + 10_000,
        "the oversized arguments went back to the model: {} then {} bytes",
        first.len(),
        second.len()
    );
    assert!(
        second.contains("more than tools.loop.max_argument_bytes (1000)"),
        "{}",
        tail(&second)
    );
    assert!(
        second.contains("result cut at 2000 of") && second.contains("tools.loop.max_result_bytes"),
        "{}",
        tail(&second)
    );
    let record = next_finished(&mut events).await;
    let cuts: Vec<(bool, String)> = record
        .tool_calls
        .iter()
        .map(|c| (c.ok, c.cut.clone().unwrap_or_default()))
        .collect();
    assert!(!cuts[0].0 && cuts[0].1.contains("not run"), "{cuts:?}");
    assert!(cuts[1].1.starts_with("result cut at 2000 of"), "{cuts:?}");
}

#[tokio::test]
async fn a_call_with_an_empty_name_is_refused_as_invalid_not_passed_to_the_client() {
    let (_workspace, mock, gateway) = setup(4).await;
    let before = mock.requests().len();
    let reply = ask(
        &gateway,
        Dialect::OpenAiChat,
        "go [[call:<empty> {}]]",
        false,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let response = reply
        .decode(Dialect::OpenAiChat, false)
        .expect("well-formed");
    assert!(tool_calls(&response).is_empty(), "{}", reply.text());
    let sent = mock.requests();
    assert_eq!(sent.len(), before + 2);
    assert!(
        sent[before + 1]
            .body
            .to_string()
            .contains("a tool call with an empty name is invalid"),
    );
}
