//! The conformance matrix: every front dialect × every backend dialect, streaming and
//! not, a text turn and a full tool round trip, over real HTTP through the gateway to
//! faithful mock vendors.

mod common;

use common::*;
use glider_ngl::{Dialect, StopReason};

async fn run_matrix(front: Dialect) {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    for (model, backend_path) in BACKENDS {
        for stream in [false, true] {
            let case = format!("{} → {model}, stream={stream}", front.as_str());

            // 1. A text turn.
            mock.clear_requests();
            let reply = post_json(
                &gw.base,
                front_path(front),
                &wire(front, &text_request(model, "hello there", stream)),
            )
            .await;
            assert_eq!(reply.status, 200, "{case}: {}", reply.text());
            let route = reply
                .headers
                .get("x-glider-route")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            assert!(
                route.contains(&format!("model={model}")),
                "{case}: route header {route:?}"
            );
            let response = reply
                .decode(front, stream)
                .unwrap_or_else(|e| panic!("{case}: {e}\n{}", reply.text()));
            assert!(
                response.plain_text().contains("echo: hello there"),
                "{case}: {response:?}"
            );
            assert_eq!(response.stop_reason, StopReason::EndTurn, "{case}");
            assert!(
                response.usage.output_tokens > 0,
                "{case}: usage {:?}",
                response.usage
            );
            let seen = mock.requests();
            assert_eq!(seen.len(), 1, "{case}");
            let expected_path = if model == "m-openai" && front == Dialect::OpenAiResponses {
                "/v1/responses"
            } else {
                backend_path
            };
            assert_eq!(seen[0].path, expected_path, "{case}");
            assert_eq!(seen[0].body["model"], model, "{case}");

            // 2. The model calls a tool.
            let reply = post_json(
                &gw.base,
                front_path(front),
                &wire(front, &tool_request(model, stream)),
            )
            .await;
            assert_eq!(reply.status, 200, "{case}: {}", reply.text());
            let response = reply
                .decode(front, stream)
                .unwrap_or_else(|e| panic!("{case}: {e}\n{}", reply.text()));
            assert_eq!(
                response.stop_reason,
                StopReason::ToolUse,
                "{case}: {response:?}"
            );
            let (call_id, name, arguments) = first_tool_call(&response)
                .unwrap_or_else(|| panic!("{case}: no tool call in {response:?}"));
            assert_eq!(name, "get_weather", "{case}");
            assert_eq!(arguments, serde_json::json!({"city": "Paris"}), "{case}");
            assert!(!call_id.is_empty(), "{case}");

            // 3. The tool result goes back and the model answers from it.
            let reply = post_json(
                &gw.base,
                front_path(front),
                &wire(front, &tool_result_request(model, &call_id, stream)),
            )
            .await;
            assert_eq!(reply.status, 200, "{case}: {}", reply.text());
            let response = reply
                .decode(front, stream)
                .unwrap_or_else(|e| panic!("{case}: {e}\n{}", reply.text()));
            assert!(
                response.plain_text().contains("tool result: 18C and sunny"),
                "{case}: {response:?}"
            );
        }
    }
}

#[tokio::test]
async fn anthropic_front_reaches_every_backend() {
    run_matrix(Dialect::Anthropic).await;
}

#[tokio::test]
async fn openai_chat_front_reaches_every_backend() {
    run_matrix(Dialect::OpenAiChat).await;
}

#[tokio::test]
async fn openai_responses_front_reaches_every_backend() {
    run_matrix(Dialect::OpenAiResponses).await;
}

#[tokio::test]
async fn ollama_front_reaches_every_backend() {
    run_matrix(Dialect::Ollama).await;
}

#[tokio::test]
async fn same_dialect_forwards_the_body_bytes() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    // Odd spacing and key order: a re-encoding would change them.
    let body = r#"{"max_tokens": 50,   "model":"m-anthropic","messages":[{"role":"user","content":"hi"}], "context_management": {"edits": []}}"#;
    let reply = post(
        &gw.base,
        "/v1/messages?beta=true",
        body,
        &[("anthropic-beta", "x-test-beta")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = mock.requests();
    assert_eq!(
        seen[0].raw_body,
        body.as_bytes(),
        "body forwarded untouched"
    );
    assert_eq!(seen[0].header("anthropic-beta"), Some("x-test-beta"));
    assert_eq!(seen[0].header("x-api-key"), Some("k-anthropic"));
}
