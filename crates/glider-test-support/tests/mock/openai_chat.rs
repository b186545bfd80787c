//! OpenAI Chat Completions routes.

use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn non_stream_echo_shape_and_usage() {
    let mock = mock().await;
    let body = json!({"model": "m1", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there"}
    ]});
    let (status, out) = post_json(&mock, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200);
    assert_eq!(out["object"], "chat.completion");
    assert!(out["id"].as_str().expect("id").starts_with("chatcmpl-"));
    assert_eq!(out["model"], "m1");
    let choice = &out["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "echo: hello there");
    assert_eq!(choice["finish_reason"], "stop");
    let sent = serde_json::to_vec(&body).expect("serialise").len() as u64;
    assert_eq!(out["usage"]["prompt_tokens"], sent / 4);
    assert_eq!(out["usage"]["completion_tokens"], 17 / 4);
    assert_eq!(
        out["usage"]["total_tokens"],
        out["usage"]["prompt_tokens"].as_u64().expect("n") + 4
    );
}

#[tokio::test]
async fn content_parts_and_v1less_path() {
    let mock = mock().await;
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "from parts"}]}
    ]});
    let (status, out) = post_json(&mock, "/chat/completions", &body).await;
    assert_eq!(status, 200);
    assert_eq!(out["choices"][0]["message"]["content"], "echo: from parts");
}

#[tokio::test]
async fn stream_with_usage() {
    let mock = mock().await;
    let body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "abcdefgh"}]});
    let (status, ct, text) = post_text(&mock, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let events = parse_sse(&text);
    assert!(events.iter().all(|e| e.event.is_none()));
    assert_eq!(events.last().expect("events").data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(Sse::json).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert!(c.as_object().expect("obj").contains_key("usage"));
    }
    let pieces: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(pieces.len(), 4);
    assert_eq!(pieces.concat(), "echo: abcdefgh");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["usage"], Value::Null);
    let usage_chunk = chunks.last().expect("usage chunk");
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 14 / 4);
}

#[tokio::test]
async fn stream_without_usage_and_configured_deltas() {
    let mock = MockVendor::start(MockConfig {
        deltas: 2,
        reply_text: Some("fixed reply".into()),
        ..MockConfig::default()
    })
    .await;
    let body =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let (_, _, text) = post_text(&mock, "/v1/chat/completions", &body).await;
    let events = parse_sse(&text);
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(Sse::json).collect();
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    let pieces: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(pieces, vec!["fixed ", "reply"]);
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}])
}

#[tokio::test]
async fn tool_call_two_turns() {
    let mock = mock().await;
    let user = json!({"role": "user", "content": "please [[call:read_file {\"path\":\"a.txt\"}]]"});
    let turn1 = json!({"model": "m", "tools": tools(), "messages": [user]});
    let (status, out) = post_json(&mock, "/v1/chat/completions", &turn1).await;
    assert_eq!(status, 200);
    let choice = &out["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_mock_1");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "read_file");
    let args = call["function"]["arguments"].as_str().expect("string args");
    assert_eq!(
        serde_json::from_str::<Value>(args).expect("json"),
        json!({"path": "a.txt"})
    );

    let turn2 = json!({"model": "m", "tools": tools(), "messages": [
        user,
        choice["message"],
        {"role": "tool", "tool_call_id": "call_mock_1", "content": "file contents"}
    ]});
    let (status, out) = post_json(&mock, "/v1/chat/completions", &turn2).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        out["choices"][0]["message"]["content"],
        "tool result: file contents"
    );
    assert_eq!(out["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn markers_without_tools_are_echoed() {
    let mock = mock().await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "[[call:x {}]]"}]});
    let (_, out) = post_json(&mock, "/v1/chat/completions", &body).await;
    assert_eq!(
        out["choices"][0]["message"]["content"],
        "echo: [[call:x {}]]"
    );
}

#[tokio::test]
async fn parallel_tool_calls_stream() {
    let mock = mock().await;
    let body = json!({"model": "m", "stream": true, "tools": tools(), "messages": [
        {"role": "user", "content": "[[call:read_file {\"path\":\"a\"}]] [[call:read_file {\"path\":\"b\"}]]"}
    ]});
    let (_, _, text) = post_text(&mock, "/v1/chat/completions", &body).await;
    let events = parse_sse(&text);
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(Sse::json).collect();
    let mut ids = Vec::new();
    let mut args = [String::new(), String::new()];
    for c in &chunks {
        if let Some(calls) = c["choices"][0]["delta"]["tool_calls"].as_array() {
            for tc in calls {
                let i = tc["index"].as_u64().expect("index") as usize;
                if let Some(id) = tc["id"].as_str() {
                    ids.push(id.to_string());
                    assert_eq!(tc["function"]["name"], "read_file");
                }
                args[i].push_str(tc["function"]["arguments"].as_str().expect("args"));
            }
        }
    }
    assert_eq!(ids, vec!["call_mock_1", "call_mock_2"]);
    assert_eq!(args[0], r#"{"path":"a"}"#);
    assert_eq!(args[1], r#"{"path":"b"}"#);
    assert_eq!(
        chunks.last().expect("finish")["choices"][0]["finish_reason"],
        "tool_calls"
    );
}

#[tokio::test]
async fn reasoning_effort_gives_reasoning_content() {
    let mock = mock().await;
    let body = json!({"model": "m", "reasoning_effort": "high",
        "messages": [{"role": "user", "content": "hi"}]});
    let (_, out) = post_json(&mock, "/v1/chat/completions", &body).await;
    assert_eq!(
        out["choices"][0]["message"]["reasoning_content"],
        "thinking about it"
    );
    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    let (_, _, text) = post_text(&mock, "/v1/chat/completions", &stream_body).await;
    let events = parse_sse(&text);
    let reasoning: String = events[..events.len() - 1]
        .iter()
        .map(Sse::json)
        .filter_map(|c| {
            c["choices"][0]["delta"]["reasoning_content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(reasoning, "thinking about it");
}

async fn refused(mock: &MockVendor, body: Value) -> (u16, Value) {
    let (status, out) = post_json(mock, "/v1/chat/completions", &body).await;
    let err = &out["error"];
    assert!(err["message"].is_string(), "{out}");
    assert!(err["type"].is_string(), "{out}");
    assert!(err.as_object().expect("obj").contains_key("param"));
    assert!(err.as_object().expect("obj").contains_key("code"));
    (status, out)
}

#[tokio::test]
async fn refusals() {
    let mock = mock().await;
    let (s, out) = refused(&mock, json!({"model": "m"})).await;
    assert_eq!(s, 400);
    assert_eq!(out["error"]["param"], "messages");
    assert_eq!(out["error"]["code"], "missing_required_parameter");

    let (s, out) = refused(
        &mock,
        json!({"model": "m", "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": {"a": 1}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"}
        ]}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(
        out["error"]["param"],
        "messages[1].tool_calls[0].function.arguments"
    );
    assert_eq!(out["error"]["code"], "invalid_type");
    assert!(
        out["error"]["message"]
            .as_str()
            .expect("msg")
            .contains("expected a string, but got an object instead")
    );

    let (s, out) = refused(
        &mock,
        json!({"model": "m", "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "content": "r"}
        ]}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(out["error"]["param"], "messages[2].tool_call_id");

    let (s, _) = refused(
        &mock,
        json!({"model": "m", "messages": [
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "c1", "content": "r"}
        ]}),
    )
    .await;
    assert_eq!(s, 400);

    let (s, out) = refused(
        &mock,
        json!({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(out["error"]["code"], "invalid_value");

    let resp = client()
        .post(format!("{}/v1/chat/completions", mock.base_url()))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 400);
    let out: Value = resp.json().await.expect("json");
    assert_eq!(out["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn unknown_model_and_models_list() {
    let mock = MockVendor::start(MockConfig {
        models: vec!["known".into()],
        ..MockConfig::default()
    })
    .await;
    let (s, out) = refused(
        &mock,
        json!({"model": "other", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 404);
    assert_eq!(out["error"]["type"], "invalid_request_error");
    assert_eq!(out["error"]["param"], "model");
    assert_eq!(out["error"]["code"], "model_not_found");
    let (s, _) = post_json(
        &mock,
        "/v1/chat/completions",
        &json!({"model": "known", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 200);

    for path in ["/v1/models", "/models"] {
        let list = get_json(&mock, path).await;
        assert_eq!(list["object"], "list");
        assert_eq!(list["data"][0]["id"], "known");
        assert_eq!(list["data"][0]["object"], "model");
        assert_eq!(list["data"].as_array().expect("data").len(), 1);
    }
}

#[tokio::test]
async fn records_requests() {
    let mock = mock().await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
    let resp = client()
        .post(format!("{}/v1/chat/completions?trace=1", mock.base_url()))
        .header("Authorization", "Bearer sk-test")
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 200);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.query.as_deref(), Some("trace=1"));
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert!(r.headers.iter().any(|(k, _)| k == "content-type"));
    assert_eq!(r.body, body);
    assert_eq!(r.raw_body, serde_json::to_vec(&body).expect("bytes"));
    mock.clear_requests();
    assert!(mock.requests().is_empty());
}
