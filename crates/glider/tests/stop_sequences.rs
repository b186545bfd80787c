//! Exact stop sequences through the gateway to both local wires (the mock's Ollama
//! NDJSON and its OpenAI-compatible Chat Completions, as llama-server and vLLM speak
//! them): the reply is cut at the sequence, names it (`stop_reason: "stop_sequence"`
//! and `stop_sequence` for an Anthropic client, `finish_reason: "stop"` for an OpenAI
//! one), streamed and not, and the backend was never sent the sequence (it would cut
//! the text unseen) but a streamed request Glider could end at the match.

mod common;

use common::*;
use glider_ngl::Dialect;
use glider_test_support::RecordedRequest;
use serde_json::{Value, json};

/// The mock echoes the last user text (`echo: ...`) in several deltas, so the sequence
/// arrives inside the reply, split across pieces.
const ASKED: &str = "alpha beta STOP gamma delta";
const BEFORE: &str = "echo: alpha beta ";

fn asked(front: Dialect, model: &str, stream: bool) -> Value {
    let mut request = text_request(model, ASKED, stream);
    request.stop = vec!["NEVER-THERE".into(), "STOP".into()];
    wire(front, &request)
}

/// What the local backend was sent: no stop sequences, and a stream.
fn assert_sent_without_stops(sent: &RecordedRequest, case: &str) {
    assert_eq!(
        sent.body["stream"],
        json!(true),
        "{case}: streamed upstream"
    );
    let stops = match sent.path.as_str() {
        "/api/chat" => &sent.body["options"]["stop"],
        _ => &sent.body["stop"],
    };
    assert!(stops.is_null(), "{case}: the backend got stops {stops}");
}

#[tokio::test]
async fn an_anthropic_client_gets_the_sequence_from_both_local_wires() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    for model in ["m-ollama", "m-vllm"] {
        for stream in [false, true] {
            let case = format!("{model} stream={stream}");
            mock.clear_requests();
            let reply = post_json(
                &gw.base,
                "/v1/messages",
                &asked(Dialect::Anthropic, model, stream),
            )
            .await;
            assert_eq!(reply.status, 200, "{case}: {}", reply.text());
            let response = reply.decode(Dialect::Anthropic, stream).expect("decodes");
            assert_eq!(response.plain_text(), BEFORE, "{case}: cut at the sequence");
            if stream {
                let body = reply.text();
                let delta = body
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                    .find(|e| e["type"] == "message_delta")
                    .unwrap_or_else(|| panic!("{case}: a message_delta in {body}"));
                assert_eq!(delta["delta"]["stop_reason"], "stop_sequence", "{case}");
                assert_eq!(delta["delta"]["stop_sequence"], "STOP", "{case}");
                assert!(!body.contains("gamma"), "{case}: nothing after the match");
            } else {
                let body = reply.json();
                assert_eq!(body["stop_reason"], "stop_sequence", "{case}: {body}");
                assert_eq!(body["stop_sequence"], "STOP", "{case}: {body}");
            }
            let sent = mock.requests();
            assert_eq!(sent.len(), 1, "{case}");
            assert_sent_without_stops(&sent[0], &case);
        }
    }
}

#[tokio::test]
async fn openai_and_ollama_clients_get_a_stop_cut_at_the_sequence() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    // Each pair is translated (a same-dialect reply is the backend's own bytes).
    let cases = [
        (Dialect::OpenAiChat, "m-ollama"),
        (Dialect::Ollama, "m-vllm"),
    ];
    for (front, model) in cases {
        for stream in [false, true] {
            let case = format!("{front:?} -> {model} stream={stream}");
            mock.clear_requests();
            let reply = post_json(&gw.base, front_path(front), &asked(front, model, stream)).await;
            assert_eq!(reply.status, 200, "{case}: {}", reply.text());
            let response = reply.decode(front, stream).expect("decodes");
            assert_eq!(response.plain_text(), BEFORE, "{case}");
            assert!(
                !reply.text().contains("gamma"),
                "{case}: nothing after the match"
            );
            let finish = match (front, stream) {
                (Dialect::OpenAiChat, false) => reply.json()["choices"][0]["finish_reason"].clone(),
                (Dialect::Ollama, false) => reply.json()["done_reason"].clone(),
                (Dialect::OpenAiChat, true) => reply
                    .text()
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                    .find_map(|c| c["choices"][0]["finish_reason"].as_str().map(Value::from))
                    .unwrap_or_default(),
                _ => reply
                    .text()
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .find(|l| l["done"] == true)
                    .map(|l| l["done_reason"].clone())
                    .unwrap_or_default(),
            };
            assert_eq!(finish, "stop", "{case}");
            assert_sent_without_stops(&mock.requests()[0], &case);
        }
    }
}

#[tokio::test]
async fn a_reply_without_the_sequence_is_whole_and_a_cloud_backend_is_sent_the_stops() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let mut request = text_request("m-ollama", "no match here", false);
    request.stop = vec!["STOP".into()];
    let reply = post_json(
        &gw.base,
        "/v1/messages",
        &wire(Dialect::Anthropic, &request),
    )
    .await;
    let body = reply.json();
    assert_eq!(body["stop_reason"], "end_turn", "{body}");
    assert_eq!(body["stop_sequence"], Value::Null, "{body}");
    assert_eq!(body["content"][0]["text"], "echo: no match here");

    // A cloud backend applies the stops itself: they are forwarded, the request as asked.
    mock.clear_requests();
    request.model = "m-openai".into();
    let reply = post_json(
        &gw.base,
        "/v1/messages",
        &wire(Dialect::Anthropic, &request),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let sent = mock.requests();
    assert_eq!(sent[0].body["stop"], json!(["STOP"]));
    assert_ne!(sent[0].body["stream"], json!(true));
}
