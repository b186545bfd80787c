//! Anthropic Messages routes.

use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn non_stream_shape() {
    let mock = mock().await;
    let body = json!({"model": "claude-x", "max_tokens": 100, "system": "sys",
        "messages": [{"role": "user", "content": "hello"}]});
    let (status, out) = post_json(&mock, "/v1/messages?beta=true", &body).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["type"], "message");
    assert_eq!(out["role"], "assistant");
    assert_eq!(out["model"], "claude-x");
    assert!(out["id"].as_str().expect("id").starts_with("msg_"));
    assert_eq!(
        out["content"],
        json!([{"type": "text", "text": "echo: hello"}])
    );
    assert_eq!(out["stop_reason"], "end_turn");
    assert_eq!(out["stop_sequence"], Value::Null);
    let sent = serde_json::to_vec(&body).expect("bytes").len() as u64;
    assert_eq!(out["usage"]["input_tokens"], sent / 4);
    assert_eq!(out["usage"]["output_tokens"], 11 / 4);
    assert_eq!(out["usage"]["cache_read_input_tokens"], 0);
    let reqs = mock.requests();
    assert_eq!(reqs[0].query.as_deref(), Some("beta=true"));
}

#[tokio::test]
async fn stream_event_sequence() {
    let mock = mock().await;
    let body = json!({"model": "c", "max_tokens": 10, "stream": true,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "yo"}]}]});
    let (status, ct, text) = post_text(&mock, "/v1/messages", &body).await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("text/event-stream"));
    let events = parse_sse(&text);
    let names: Vec<String> = events.iter().map(|e| e.event.clone().expect("n")).collect();
    let mut expected = vec!["message_start", "ping", "content_block_start"];
    expected.extend(["content_block_delta"; 4]);
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    for e in &events {
        assert_eq!(e.json()["type"].as_str(), e.event.as_deref());
    }
    let start = events[0].json();
    assert_eq!(start["message"]["content"], json!([]));
    assert_eq!(start["message"]["stop_reason"], Value::Null);
    assert!(
        start["message"]["usage"]["input_tokens"]
            .as_u64()
            .expect("n")
            > 0
    );
    assert_eq!(
        events[2].json()["content_block"],
        json!({"type": "text", "text": ""})
    );
    let text: String = events[3..7]
        .iter()
        .map(|e| {
            let d = e.json();
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().expect("t").to_string()
        })
        .collect();
    assert_eq!(text, "echo: yo");
    let delta = events[8].json();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 2);
}

#[tokio::test]
async fn thinking_block_with_signature() {
    let mock = mock().await;
    let body = json!({"model": "c", "max_tokens": 2000, "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "think"}]});
    let (_, _, text) = post_text(&mock, "/v1/messages", &body).await;
    let events: Vec<Value> = parse_sse(&text).iter().map(Sse::json).collect();
    assert_eq!(
        events[2]["content_block"],
        json!({"type": "thinking", "thinking": "", "signature": ""})
    );
    let thinking: String = events
        .iter()
        .filter(|e| e["delta"]["type"] == "thinking_delta")
        .map(|e| e["delta"]["thinking"].as_str().expect("t").to_string())
        .collect();
    assert_eq!(thinking, "thinking about it");
    assert!(
        events
            .iter()
            .any(|e| e["delta"]["type"] == "signature_delta"
                && e["index"] == 0
                && e["delta"]["signature"].is_string())
    );
    let text_start = events
        .iter()
        .find(|e| e["type"] == "content_block_start" && e["content_block"]["type"] == "text")
        .expect("text block");
    assert_eq!(text_start["index"], 1);

    let mut plain = body.clone();
    plain["stream"] = json!(false);
    let (_, out) = post_json(&mock, "/v1/messages", &plain).await;
    assert_eq!(out["content"][0]["type"], "thinking");
    assert_eq!(out["content"][0]["thinking"], "thinking about it");
    assert!(out["content"][0]["signature"].is_string());
    assert_eq!(out["content"][1]["type"], "text");
}

fn tools() -> Value {
    json!([{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}])
}

#[tokio::test]
async fn tool_call_two_turns() {
    let mock = mock().await;
    let user = json!({"role": "user", "content": "go [[call:Bash {\"command\":\"ls\"}]] [[call:Bash {\"command\":\"pwd\"}]]"});
    let body = json!({"model": "c", "max_tokens": 100, "stream": true, "tools": tools(),
        "messages": [user]});
    let (_, _, text) = post_text(&mock, "/v1/messages", &body).await;
    let events: Vec<Value> = parse_sse(&text).iter().map(Sse::json).collect();
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .collect();
    assert_eq!(starts.len(), 2);
    assert_eq!(
        starts[0]["content_block"],
        json!({"type": "tool_use", "id": "toolu_mock_1", "name": "Bash", "input": {}})
    );
    assert_eq!(starts[1]["content_block"]["id"], "toolu_mock_2");
    assert_eq!(starts[1]["index"], 1);
    let json0: String = events
        .iter()
        .filter(|e| e["index"] == 0 && e["delta"]["type"] == "input_json_delta")
        .map(|e| e["delta"]["partial_json"].as_str().expect("pj").to_string())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json0).expect("json"),
        json!({"command": "ls"})
    );
    let md = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .expect("message_delta");
    assert_eq!(md["delta"]["stop_reason"], "tool_use");

    let turn2 = json!({"model": "c", "max_tokens": 100, "tools": tools(), "messages": [
        user,
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_mock_1", "name": "Bash", "input": {"command": "ls"}},
            {"type": "tool_use", "id": "toolu_mock_2", "name": "Bash", "input": {"command": "pwd"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_mock_1", "content": "a.txt"},
            {"type": "tool_result", "tool_use_id": "toolu_mock_2",
             "content": [{"type": "text", "text": "/home"}]}
        ]},
        {"role": "system", "content": "reminder"}
    ]});
    let (status, out) = post_json(&mock, "/v1/messages", &turn2).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["content"][0]["text"], "tool result: a.txt\n/home");
    assert_eq!(out["stop_reason"], "end_turn");

    let (_, out) = post_json(
        &mock,
        "/v1/messages",
        &json!({"model": "c", "max_tokens": 100, "messages": [user]}),
    )
    .await;
    assert_eq!(out["content"][0]["type"], "text", "no tools: no tool call");
}

fn anthropic_error(out: &Value, ty: &str) {
    assert_eq!(out["type"], "error", "{out}");
    assert_eq!(out["error"]["type"], ty, "{out}");
    assert!(out["error"]["message"].is_string());
}

#[tokio::test]
async fn refusals() {
    let mock = MockVendor::start(MockConfig {
        models: vec!["claude-ok".into()],
        ..MockConfig::default()
    })
    .await;
    let url = format!("{}/v1/messages", mock.base_url());
    let body = json!({"model": "claude-ok", "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}]});

    let resp = client()
        .post(&url)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 401);
    anthropic_error(&resp.json().await.expect("json"), "authentication_error");

    let resp = client()
        .post(&url)
        .header("x-api-key", "k")
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 400);
    let out: Value = resp.json().await.expect("json");
    anthropic_error(&out, "invalid_request_error");
    assert_eq!(
        out["error"]["message"],
        "anthropic-version: header is required"
    );

    let resp = client()
        .post(&url)
        .header("authorization", "Bearer k")
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 200, "authorization header is enough");

    let (s, out) = post_json(
        &mock,
        "/v1/messages",
        &json!({"model": "claude-ok", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 400);
    anthropic_error(&out, "invalid_request_error");
    assert_eq!(out["error"]["message"], "max_tokens: Field required");

    let (s, out) = post_json(
        &mock,
        "/v1/messages",
        &json!({"model": "claude-ok", "max_tokens": 5}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(out["error"]["message"], "messages: Field required");

    let (s, out) = post_json(
        &mock,
        "/v1/messages",
        &json!({"model": "claude-ok", "max_tokens": 5,
            "messages": [{"role": "tool", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 400);
    anthropic_error(&out, "invalid_request_error");

    let (s, out) = post_json(
        &mock,
        "/v1/messages",
        &json!({"model": "claude-ok", "max_tokens": 5, "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": "r"}]}
        ]}),
    )
    .await;
    assert_eq!(s, 400);
    assert!(
        out["error"]["message"]
            .as_str()
            .expect("m")
            .contains("unexpected `tool_use_id` found in `tool_result` blocks: toolu_b")
    );

    let (s, out) = post_json(
        &mock,
        "/v1/messages",
        &json!({"model": "claude-ok", "max_tokens": 5, "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a", "name": "f", "input": "{}"}]}
        ]}),
    )
    .await;
    assert_eq!(s, 400, "tool_use input must be an object: {out}");

    let mut unknown = body.clone();
    unknown["model"] = json!("claude-nope");
    let (s, out) = post_json(&mock, "/v1/messages", &unknown).await;
    assert_eq!(s, 404);
    anthropic_error(&out, "not_found_error");
}

#[tokio::test]
async fn count_tokens() {
    let mock = mock().await;
    let body = json!({"model": "c", "messages": [{"role": "user", "content": "count me"}]});
    let (s, out) = post_json(&mock, "/v1/messages/count_tokens", &body).await;
    assert_eq!(s, 200);
    let sent = serde_json::to_vec(&body).expect("bytes").len() as u64;
    assert_eq!(out, json!({"input_tokens": sent / 4}));

    let resp = client()
        .post(format!(
            "{}/v1/messages/count_tokens?beta=true",
            mock.base_url()
        ))
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 401);
}
