//! The tool loop for local answers (`tools.loop`) through the real gateway over
//! loopback, with the scripted mock as the local model: Glider runs the model's calls
//! to its internal tools in `tools.workspace` itself, sends the results back, and the
//! client gets the final answer in its own dialect, streamed or not; a model that never
//! stops calling tools ends at the turn budget with Glider's honest reply; a tool's
//! error goes back to the model as its result. Each call is on the request record.

mod common;

use common::*;
use glider_ngl::{Dialect, StopReason};

/// A workspace with one file the model greps for, and the gateway with the loop on.
async fn setup(max_turns: u32) -> (tempfile::TempDir, glider_test_support::MockVendor, Gateway) {
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(
        workspace.path().join("notes.txt"),
        "first line\nthe needle is here\n",
    )
    .expect("file written");
    let extra = format!(
        "tools: {{workspace: '{}', loop: {{enabled: true, max_turns: {max_turns}}}}}\n",
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
