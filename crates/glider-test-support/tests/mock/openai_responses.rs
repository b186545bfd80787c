//! OpenAI Responses routes.

use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn non_stream_string_input() {
    let mock = mock().await;
    let body = json!({"model": "m", "input": "hello", "instructions": "be nice"});
    let (status, out) = post_json(&mock, "/v1/responses", &body).await;
    assert_eq!(status, 200);
    assert_eq!(out["object"], "response");
    assert_eq!(out["status"], "completed");
    assert_eq!(out["instructions"], "be nice");
    assert!(out["id"].as_str().expect("id").starts_with("resp_"));
    let item = &out["output"][0];
    assert_eq!(item["type"], "message");
    assert_eq!(item["role"], "assistant");
    assert_eq!(item["status"], "completed");
    assert_eq!(item["content"][0]["type"], "output_text");
    assert_eq!(item["content"][0]["text"], "echo: hello");
    let sent = serde_json::to_vec(&body).expect("bytes").len() as u64;
    assert_eq!(out["usage"]["input_tokens"], sent / 4);
    assert_eq!(out["usage"]["output_tokens"], 11 / 4);
    assert!(out["usage"]["total_tokens"].is_u64());
}

#[tokio::test]
async fn stream_event_sequence() {
    let mock = mock().await;
    let body = json!({"model": "m", "stream": true,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]});
    let (status, ct, text) = post_text(&mock, "/responses", &body).await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("text/event-stream"));
    let events = parse_sse(&text);
    let types: Vec<String> = events
        .iter()
        .map(|e| e.event.clone().expect("named event"))
        .collect();
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(["response.output_text.delta"; 4]);
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(types, expected);
    for (n, e) in events.iter().enumerate() {
        let data = e.json();
        assert_eq!(data["type"].as_str(), e.event.as_deref());
        assert_eq!(data["sequence_number"], n as u64);
    }
    let deltas: String = events
        .iter()
        .map(Sse::json)
        .filter(|d| d["type"] == "response.output_text.delta")
        .map(|d| d["delta"].as_str().expect("delta").to_string())
        .collect();
    assert_eq!(deltas, "echo: hi");
    let done = events.last().expect("completed").json();
    assert_eq!(done["response"]["status"], "completed");
    assert_eq!(
        done["response"]["output"][0]["content"][0]["text"],
        "echo: hi"
    );
    assert!(
        done["response"]["usage"]["output_tokens"]
            .as_u64()
            .expect("n")
            >= 1
    );
    let created = events[0].json();
    assert_eq!(created["response"]["status"], "in_progress");
    assert_eq!(created["response"]["usage"], Value::Null);
}

fn tools() -> Value {
    json!([{"type": "function", "name": "shell", "parameters": {"type": "object"}}])
}

#[tokio::test]
async fn tool_call_two_turns_streamed() {
    let mock = mock().await;
    let user = json!({"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "run [[call:shell {\"cmd\":\"ls\"}]]"}]});
    let body = json!({"model": "m", "stream": true, "tools": tools(), "input": [user]});
    let (_, _, text) = post_text(&mock, "/v1/responses", &body).await;
    let events = parse_sse(&text);
    let types: Vec<String> = events
        .iter()
        .map(|e| e.event.clone().expect("name"))
        .collect();
    assert_eq!(
        types,
        vec![
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let added = events[2].json();
    assert_eq!(added["item"]["type"], "function_call");
    assert_eq!(added["item"]["status"], "in_progress");
    assert_eq!(added["item"]["call_id"], "call_mock_1");
    assert_eq!(added["item"]["name"], "shell");
    let args_done = events[5].json();
    assert_eq!(args_done["arguments"], r#"{"cmd":"ls"}"#);
    let completed = events[7].json();
    let item = &completed["response"]["output"][0];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["arguments"], r#"{"cmd":"ls"}"#);

    let turn2 = json!({"model": "m", "tools": tools(), "input": [
        user,
        item,
        {"type": "function_call_output", "call_id": "call_mock_1", "output": "a.txt b.txt"}
    ]});
    let (status, out) = post_json(&mock, "/v1/responses", &turn2).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        out["output"][0]["content"][0]["text"],
        "tool result: a.txt b.txt"
    );
}

#[tokio::test]
async fn reasoning_item_with_summary() {
    let mock = mock().await;
    let body =
        json!({"model": "m", "input": "q", "reasoning": {"effort": "medium", "summary": "auto"}});
    let (_, out) = post_json(&mock, "/v1/responses", &body).await;
    assert_eq!(out["output"][0]["type"], "reasoning");
    assert_eq!(out["output"][0]["summary"][0]["type"], "summary_text");
    assert_eq!(out["output"][0]["summary"][0]["text"], "thinking about it");
    assert_eq!(out["output"][1]["type"], "message");

    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    let (_, _, text) = post_text(&mock, "/v1/responses", &stream_body).await;
    let events = parse_sse(&text);
    let summary: String = events
        .iter()
        .map(Sse::json)
        .filter(|d| d["type"] == "response.reasoning_summary_text.delta")
        .map(|d| d["delta"].as_str().expect("delta").to_string())
        .collect();
    assert_eq!(summary, "thinking about it");
    let names: Vec<String> = events.iter().map(|e| e.event.clone().expect("n")).collect();
    assert!(names.contains(&"response.reasoning_summary_part.added".to_string()));
    assert!(names.contains(&"response.reasoning_summary_part.done".to_string()));
}

#[tokio::test]
async fn refusals() {
    let mock = MockVendor::start(MockConfig {
        models: vec!["gpt-x".into()],
        ..MockConfig::default()
    })
    .await;
    let (s, out) = post_json(&mock, "/v1/responses", &json!({"input": "x"})).await;
    assert_eq!(s, 400);
    assert_eq!(out["error"]["param"], "model");

    let (s, out) = post_json(
        &mock,
        "/v1/responses",
        &json!({"model": "gpt-x", "input": [
            {"role": "user", "content": "x"},
            {"type": "function_call_output", "call_id": "nope", "output": "r"}
        ]}),
    )
    .await;
    assert_eq!(s, 400);
    assert!(
        out["error"]["message"]
            .as_str()
            .expect("msg")
            .contains("No tool call found for function call output with call_id nope")
    );

    let (s, out) = post_json(
        &mock,
        "/v1/responses",
        &json!({"model": "gpt-x", "input": [
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}
        ]}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(out["error"]["code"], "invalid_type");

    let (s, out) = post_json(
        &mock,
        "/v1/responses",
        &json!({"model": "other", "input": "x"}),
    )
    .await;
    assert_eq!(s, 404);
    assert_eq!(out["error"]["code"], "model_not_found");
}
