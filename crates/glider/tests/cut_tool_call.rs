//! A local reply cut inside a tool call's arguments (issue 15): a scripted
//! OpenAI-compatible server on loopback stops at its output limit in the middle of a
//! `get_weather` call. Through the gateway, from every front dialect, streaming and not,
//! the client gets the text before the call, no call, a note that says the incomplete
//! call was dropped, and its dialect's cut ending (`max_tokens` / `length` /
//! `incomplete`), never a finished turn with cut-off arguments. (A same-dialect reply
//! under the client's own limit is forwarded as the backend's bytes.)

mod common;

use common::*;
use glider_ngl::{Dialect, StopReason};
use glider_test_support::canned::{CannedReply, CannedServer};

/// The cut-off arguments the script's call ends with.
const CUT_ARGUMENTS: &str = r#"{\"city\": \"Par"#;

fn chunk(delta: &str, finish_reason: &str) -> String {
    format!(
        "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m-local\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish_reason}}}]}}\n\n"
    )
}

/// The scripted reply, as llama-server or vLLM sends one cut at `max_tokens` inside a
/// call: streamed (SSE chunks) or whole.
fn scripted_reply(stream: bool) -> (&'static str, String) {
    let call = format!(
        "{{\"id\":\"call_1\",\"type\":\"function\",\"function\":{{\"name\":\"get_weather\",\"arguments\":\"{CUT_ARGUMENTS}\"}}}}"
    );
    if !stream {
        return (
            "application/json",
            format!(
                "{{\"id\":\"c1\",\"object\":\"chat.completion\",\"model\":\"m-local\",\"choices\":[{{\"index\":0,\
             \"message\":{{\"role\":\"assistant\",\"content\":\"Let me look.\",\"tool_calls\":[{call}]}},\
             \"finish_reason\":\"length\"}}],\"usage\":{{\"prompt_tokens\":10,\"completion_tokens\":20,\"total_tokens\":30}}}}"
            ),
        );
    }
    let mut body = chunk(r#"{"role":"assistant","content":"Let me look."}"#, "null");
    let with_index = call.replacen('{', "{\"index\":0,", 1);
    body += &chunk(&format!("{{\"tool_calls\":[{with_index}]}}"), "null");
    body += &chunk("{}", "\"length\"");
    body += "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m-local\",\"choices\":[],\
             \"usage\":{\"prompt_tokens\":10,\"completion_tokens\":20,\"total_tokens\":30}}\n\n";
    body += "data: [DONE]\n\n";
    ("text/event-stream", body)
}

/// A loopback server that answers every request with the scripted cut reply.
async fn scripted_backend() -> String {
    let server = CannedServer::start(|request| {
        let (content_type, body) = scripted_reply(request.json()["stream"] == true);
        CannedReply::with_type(200, content_type, body)
    })
    .await;
    server.base_url()
}

#[tokio::test]
async fn a_local_reply_cut_inside_a_tool_call_drops_the_call_with_a_note_in_every_front() {
    let url = scripted_backend().await;
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: vllm, base_url: '{url}/v1', models: [m-local]}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n"
    );
    let gw = gateway(&yaml).await;
    let mut events = gw.engine.bus().subscribe();
    // 32000 asks for more than Glider's cap (4096), 100 is the client's own limit.
    for (max_tokens, cut_at) in [
        (
            32000,
            "the local output cap of 4096 tokens (fit.max_output_tokens)",
        ),
        (100, "max_tokens"),
    ] {
        for front in FRONTS {
            for stream in [false, true] {
                let case = format!("{front:?} stream={stream} max_tokens={max_tokens}");
                let mut request = tool_request("m-local", stream);
                request.max_tokens = Some(max_tokens);
                let reply = post_json(&gw.base, front_path(front), &wire(front, &request)).await;
                assert_eq!(reply.status, 200, "{case}: {}", reply.text());
                let record = next_finished(&mut events).await;
                if front == Dialect::OpenAiChat && max_tokens == 100 {
                    // Same dialect and the client's own limit: the backend's bytes go
                    // back untouched, with the ending OpenAI's own API sends.
                    assert!(
                        reply.text().contains("\"finish_reason\":\"length\""),
                        "{case}"
                    );
                    continue;
                }
                assert!(
                    !reply.text().contains("Par\\\"") && !reply.text().contains("\"Par"),
                    "{case}: the cut-off arguments never reach the client: {}",
                    reply.text()
                );
                let response = reply.decode(front, stream).expect("a well-formed reply");
                assert!(tool_calls(&response).is_empty(), "{case}: {response:?}");
                assert_eq!(
                    response.stop_reason,
                    StopReason::MaxTokens,
                    "{case}: a cut, not a finished turn"
                );
                let text = response.plain_text();
                assert!(text.starts_with("Let me look."), "{case}: {text}");
                assert!(
                    text.ends_with(&format!(
                        "[glider: reply cut at {cut_at} inside a call to `get_weather`: the incomplete call was dropped]"
                    )),
                    "{case}: {text}"
                );
                assert!(
                    record.fitted.iter().any(|line| {
                        line.starts_with(
                        "local: reply cut at"
                    ) && line.ends_with(
                        "the incomplete call was dropped, reported as max_tokens with a note"
                    )
                    }),
                    "{case}: {:?}",
                    record.fitted
                );
            }
        }
    }
    // The dialects' own words for that ending.
    let mut request = tool_request("m-local", false);
    request.max_tokens = Some(32000);
    for (front, field, cut) in [
        (Dialect::OpenAiChat, "/choices/0/finish_reason", "length"),
        (Dialect::OpenAiResponses, "/status", "incomplete"),
        (Dialect::Ollama, "/done_reason", "length"),
    ] {
        let reply = post_json(&gw.base, front_path(front), &wire(front, &request))
            .await
            .json();
        assert_eq!(
            reply.pointer(field),
            Some(&cut.into()),
            "{front:?}: {reply}"
        );
    }
}
