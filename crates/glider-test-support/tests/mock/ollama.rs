//! Ollama native routes.

use glider_test_support::{MockConfig, MockVendor};
use serde_json::{Value, json};

use crate::common::*;

async fn ollama() -> MockVendor {
    MockVendor::start(MockConfig {
        models: vec!["llama3".into()],
        thinking_models: vec!["qwen3:8b".into()],
        ..MockConfig::default()
    })
    .await
}

#[tokio::test]
async fn streams_ndjson_by_default() {
    let mock = ollama().await;
    let body = json!({"model": "llama3", "messages": [{"role": "user", "content": "hey"}]});
    let (status, ct, text) = post_text(&mock, "/api/chat", &body).await;
    assert_eq!(status, 200);
    assert_eq!(ct, "application/x-ndjson");
    let lines = parse_ndjson(&text);
    assert_eq!(lines.len(), 5);
    let mut content = String::new();
    for l in &lines[..4] {
        assert_eq!(l["model"], "llama3");
        assert_eq!(l["done"], false);
        assert_eq!(l["message"]["role"], "assistant");
        assert!(l["created_at"].as_str().expect("ts").ends_with('Z'));
        content.push_str(l["message"]["content"].as_str().expect("c"));
    }
    assert_eq!(content, "echo: hey");
    let last = &lines[4];
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "stop");
    assert_eq!(last["message"]["content"], "");
    let sent = serde_json::to_vec(&body).expect("bytes").len() as u64;
    assert_eq!(last["prompt_eval_count"], sent / 4);
    assert_eq!(last["eval_count"], 9 / 4);
    for k in [
        "total_duration",
        "load_duration",
        "prompt_eval_duration",
        "eval_duration",
    ] {
        assert!(last[k].is_u64(), "{k}");
    }
}

#[tokio::test]
async fn single_object_when_stream_false() {
    let mock = ollama().await;
    let body = json!({"model": "llama3:latest", "stream": false,
        "messages": [{"role": "user", "content": "hey"}]});
    let (status, ct, text) = post_text(&mock, "/api/chat", &body).await;
    assert_eq!(status, 200);
    assert_eq!(ct, "application/json");
    let out: Value = serde_json::from_str(&text).expect("one JSON object");
    assert_eq!(
        out["message"],
        json!({"role": "assistant", "content": "echo: hey"})
    );
    assert_eq!(out["done"], true);
    assert_eq!(out["done_reason"], "stop");
    assert_eq!(out["model"], "llama3:latest");
}

#[tokio::test]
async fn thinking_model_and_refusal() {
    let mock = ollama().await;
    let body = json!({"model": "qwen3:8b", "think": true, "stream": false,
        "messages": [{"role": "user", "content": "why"}]});
    let (s, out) = post_json(&mock, "/api/chat", &body).await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["message"]["thinking"], "thinking about it");
    assert_eq!(out["message"]["content"], "echo: why");

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, _, text) = post_text(&mock, "/api/chat", &streamed).await;
    let lines = parse_ndjson(&text);
    let thinking: String = lines
        .iter()
        .filter_map(|l| l["message"]["thinking"].as_str())
        .collect();
    assert_eq!(thinking, "thinking about it");

    let (s, out) = post_json(
        &mock,
        "/api/chat",
        &json!({"model": "llama3", "think": true, "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(
        out,
        json!({"error": "\"llama3\" does not support thinking"})
    );
    let (s, _) = post_json(
        &mock,
        "/api/chat",
        &json!({"model": "llama3", "think": false, "stream": false,
            "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn go_decoder_refusals() {
    let mock = ollama().await;
    let (s, out) = post_json(
        &mock,
        "/api/chat",
        &json!({"model": "llama3", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "x"}]}
        ]}),
    )
    .await;
    assert_eq!(s, 400);
    let msg = out["error"].as_str().expect("error string");
    assert!(
        msg.starts_with("json: cannot unmarshal array into Go struct field")
            && msg.contains("messages.content of type string"),
        "{msg}"
    );

    let (s, out) = post_json(
        &mock,
        "/api/chat",
        &json!({"model": "llama3", "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "f", "arguments": "{\"a\":1}"}}
            ]},
            {"role": "tool", "content": "r"}
        ]}),
    )
    .await;
    assert_eq!(s, 400);
    let msg = out["error"].as_str().expect("error string");
    assert!(
        msg.starts_with("json: cannot unmarshal string into Go struct field")
            && msg.contains("arguments"),
        "{msg}"
    );

    let (s, out) = post_json(
        &mock,
        "/api/chat",
        &json!({"model": "mistral", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 404);
    assert_eq!(
        out,
        json!({"error": "model \"mistral\" not found, try pulling it first"})
    );

    let (s, out) = post_json(&mock, "/api/chat", &json!({"messages": []})).await;
    assert_eq!(s, 400);
    assert_eq!(out, json!({"error": "model is required"}));
}

#[tokio::test]
async fn tool_call_two_turns() {
    let mock = ollama().await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object"}}}]);
    let user = json!({"role": "user", "content": "[[call:get_weather {\"city\":\"Paris\"}]]"});
    let (_, _, text) = post_text(
        &mock,
        "/api/chat",
        &json!({"model": "llama3", "tools": tools, "messages": [user]}),
    )
    .await;
    let lines = parse_ndjson(&text);
    let call_line = lines
        .iter()
        .find(|l| l["message"].get("tool_calls").is_some())
        .expect("tool call chunk");
    assert_eq!(call_line["done"], false);
    let call = &call_line["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(call["function"]["arguments"], json!({"city": "Paris"}));
    assert_eq!(call["id"], "call_mock_1");
    assert_eq!(lines.last().expect("done")["done"], true);

    let turn2 = json!({"model": "llama3", "stream": false, "tools": tools, "messages": [
        user,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny"}
    ]});
    let (s, out) = post_json(&mock, "/api/chat", &turn2).await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["message"]["content"], "tool result: sunny");
}

#[tokio::test]
async fn listings_and_warm_state() {
    let mock = ollama().await;
    let tags = get_json(&mock, "/api/tags").await;
    let names: Vec<&str> = tags["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| m["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, vec!["llama3:latest", "qwen3:8b"]);
    assert_eq!(tags["models"][0]["details"]["format"], "gguf");
    assert_eq!(tags["models"][0]["digest"].as_str().expect("d").len(), 64);

    let version = get_json(&mock, "/api/version").await;
    assert!(version["version"].is_string());

    let root = client()
        .get(format!("{}/", mock.base_url()))
        .send()
        .await
        .expect("sent");
    assert_eq!(root.status(), 200);
    assert_eq!(root.text().await.expect("text"), "Ollama is running");

    assert_eq!(get_json(&mock, "/api/ps").await, json!({"models": []}));
    let (s, _) = post_json(
        &mock,
        "/api/chat",
        &json!({"model": "llama3", "stream": false, "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(s, 200);
    let ps = get_json(&mock, "/api/ps").await;
    assert_eq!(ps["models"].as_array().expect("models").len(), 1);
    assert_eq!(ps["models"][0]["name"], "llama3:latest");
    assert!(ps["models"][0]["expires_at"].is_string());
    assert!(ps["models"][0]["size_vram"].is_u64());

    let (s, out) = post_json(&mock, "/api/chat", &json!({"model": "qwen3:8b"})).await;
    assert_eq!(s, 200);
    assert_eq!(out["done_reason"], "load");
    assert_eq!(
        get_json(&mock, "/api/ps").await["models"]
            .as_array()
            .expect("m")
            .len(),
        2
    );
    let (_, out) = post_json(
        &mock,
        "/api/chat",
        &json!({"model": "qwen3:8b", "messages": [], "keep_alive": 0}),
    )
    .await;
    assert_eq!(out["done_reason"], "unload");
    assert_eq!(
        get_json(&mock, "/api/ps").await["models"]
            .as_array()
            .expect("m")
            .len(),
        1
    );
}

#[tokio::test]
async fn unknown_route_is_recorded_404() {
    let mock = mock().await;
    let resp = client()
        .get(format!("{}/api/nothing", mock.base_url()))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 404);
    assert_eq!(mock.requests()[0].path, "/api/nothing");
}

/// Names `/api/ps` lists, least recently used first.
async fn loaded(mock: &MockVendor) -> Vec<String> {
    get_json(mock, "/api/ps").await["models"]
        .as_array()
        .expect("models")
        .iter()
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn loads_account_memory_on_the_fake_gpu_and_evict_the_least_recently_used_idle_model() {
    let mock = MockVendor::start(MockConfig {
        models: vec!["a".into(), "b".into(), "c".into()],
        gpu_total_mib: Some(10_000),
        model_memory_mib: vec![("a".into(), 4000), ("b".into(), 4000), ("c".into(), 4000)],
        delta_delay: std::time::Duration::from_millis(1000),
        ..MockConfig::default()
    })
    .await;
    for model in ["a", "b"] {
        let (s, out) = post_json(&mock, "/api/chat", &json!({"model": model})).await;
        assert_eq!((s, out["done_reason"].as_str()), (200, Some("load")));
    }
    let ps = get_json(&mock, "/api/ps").await;
    assert_eq!(ps["models"][0]["size_vram"], 4000u64 * 1024 * 1024);
    assert_eq!(loaded(&mock).await, ["a:latest", "b:latest"]);
    // c does not fit beside both: a, the least recently used, goes.
    let (s, _) = post_json(&mock, "/api/chat", &json!({"model": "c"})).await;
    assert_eq!(s, 200);
    assert_eq!(loaded(&mock).await, ["b:latest", "c:latest"]);
    // With streams open on both, nothing may go: Ollama's memory error.
    let stream = |model: &'static str| {
        let mock_url = mock.base_url();
        async move {
            client()
                .post(format!("{mock_url}/api/chat"))
                .json(&json!({"model": model, "messages": [{"role": "user", "content": "x"}]}))
                .send()
                .await
                .expect("sent")
        }
    };
    let (held_b, held_c) = (stream("b").await, stream("c").await);
    let (s, out) = post_json(&mock, "/api/chat", &json!({"model": "a"})).await;
    assert_eq!(s, 500, "{out}");
    assert!(
        out["error"]
            .as_str()
            .is_some_and(|e| e.contains("requires more system memory")),
        "{out}"
    );
    drop((held_b, held_c));
    assert!(
        mock.wait_open_streams(0, std::time::Duration::from_secs(5))
            .await
    );
    // Unloading frees the memory at once.
    let (s, out) = post_json(&mock, "/api/chat", &json!({"model": "b", "keep_alive": 0})).await;
    assert_eq!((s, out["done_reason"].as_str()), (200, Some("unload")));
    assert_eq!(loaded(&mock).await, ["c:latest"]);
    assert_eq!(mock.loaded_models(), ["c:latest"]);
}
