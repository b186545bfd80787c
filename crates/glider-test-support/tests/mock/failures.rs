//! Failure modes, open-stream accounting and shutdown.

use std::time::Duration;

use futures_util::StreamExt;
use glider_test_support::{Failure, MockConfig, MockVendor};
use serde_json::{Value, json};

use crate::common::*;

fn chat(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "abcdefgh"}]})
}

fn anthropic(stream: bool) -> Value {
    json!({"model": "m", "max_tokens": 5, "stream": stream,
        "messages": [{"role": "user", "content": "abcdefgh"}]})
}

fn ollama(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "abcdefgh"}]})
}

fn responses(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "input": "abcdefgh"})
}

#[tokio::test]
async fn status_with_dialect_error_bodies() {
    let mock = mock().await;
    mock.set_failure(Failure::Status(529));
    let (s, out) = post_json(&mock, "/v1/messages", &anthropic(false)).await;
    assert_eq!(s, 529);
    assert_eq!(out["type"], "error");
    assert_eq!(out["error"]["type"], "overloaded_error");

    mock.set_failure(Failure::Status(429));
    let (s, out) = post_json(&mock, "/v1/messages", &anthropic(true)).await;
    assert_eq!(s, 429);
    assert_eq!(out["error"]["type"], "rate_limit_error");
    let (s, out) = post_json(&mock, "/v1/chat/completions", &chat(true)).await;
    assert_eq!(s, 429);
    assert_eq!(out["error"]["code"], "rate_limit_exceeded");

    mock.set_failure(Failure::Status(500));
    let (s, out) = post_json(&mock, "/v1/chat/completions", &chat(false)).await;
    assert_eq!(s, 500);
    assert_eq!(out["error"]["type"], "server_error");
    let (s, out) = post_json(&mock, "/v1/responses", &responses(false)).await;
    assert_eq!(s, 500);
    assert_eq!(out["error"]["type"], "server_error");
    let (s, out) = post_json(&mock, "/api/chat", &ollama(true)).await;
    assert_eq!(s, 500);
    assert!(out["error"].is_string());

    // Listings are not affected.
    assert!(get_json(&mock, "/api/tags").await["models"].is_array());

    mock.set_failure(Failure::None);
    let (s, _) = post_json(&mock, "/v1/chat/completions", &chat(false)).await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn fail_times_then_recover() {
    let mock = mock().await;
    mock.set_failure(Failure::FailTimes(2, 503));
    let (s1, _) = post_json(&mock, "/api/chat", &ollama(false)).await;
    let (s2, _) = post_json(&mock, "/v1/chat/completions", &chat(false)).await;
    let (s3, out) = post_json(&mock, "/api/chat", &ollama(false)).await;
    assert_eq!((s1, s2, s3), (503, 503, 200));
    assert_eq!(out["message"]["content"], "echo: abcdefgh");
    assert_eq!(mock.requests().len(), 3, "failed requests are recorded too");
}

#[tokio::test]
async fn garbage() {
    let mock = mock().await;
    mock.set_failure(Failure::Garbage);
    for (path, body) in [
        ("/v1/chat/completions", chat(false)),
        ("/v1/messages", anthropic(false)),
        ("/api/chat", ollama(false)),
        ("/v1/responses", responses(false)),
    ] {
        let (s, _, text) = post_text(&mock, path, &body).await;
        assert_eq!(s, 200);
        assert!(
            serde_json::from_str::<Value>(&text).is_err(),
            "{path}: {text}"
        );
    }
    let (s, ct, text) = post_text(&mock, "/v1/chat/completions", &chat(true)).await;
    assert_eq!(s, 200);
    assert!(ct.starts_with("text/event-stream"));
    let events = parse_sse(&text);
    assert!(!events.is_empty());
    assert!(serde_json::from_str::<Value>(&events[0].data).is_err());
    let (_, ct, text) = post_text(&mock, "/api/chat", &ollama(true)).await;
    assert_eq!(ct, "application/x-ndjson");
    assert!(serde_json::from_str::<Value>(text.trim()).is_err());
}

/// Read a streamed body until it ends or errors: (text so far, whether it errored).
async fn read_stream(resp: reqwest::Response) -> (String, bool) {
    let mut text = String::new();
    let mut chunks = resp.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Err(_) => return (text, true),
        }
    }
    (text, false)
}

#[tokio::test]
async fn close_mid_stream() {
    let mock = mock().await;
    mock.set_failure(Failure::CloseMidStream { after_deltas: 2 });

    let (text, errored) = read_stream(post(&mock, "/v1/chat/completions", &chat(true)).await).await;
    assert!(errored, "body must end with an error");
    assert!(!text.contains("[DONE]"));
    let content: Vec<String> = parse_sse(&text)
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(content, vec!["echo", ": ab"]);

    let (text, errored) = read_stream(post(&mock, "/v1/messages", &anthropic(true)).await).await;
    assert!(errored);
    assert!(!text.contains("message_stop"));

    let (text, errored) = read_stream(post(&mock, "/api/chat", &ollama(true)).await).await;
    assert!(errored);
    assert!(!text.contains("\"done\":true"));

    let (text, errored) = read_stream(post(&mock, "/v1/responses", &responses(true)).await).await;
    assert!(errored);
    assert!(!text.contains("response.completed"));

    // More deltas allowed than the reply has: the final event is still withheld.
    mock.set_failure(Failure::CloseMidStream { after_deltas: 100 });
    let (text, errored) = read_stream(post(&mock, "/v1/chat/completions", &chat(true)).await).await;
    assert!(errored);
    assert!(!text.contains("[DONE]"));
    assert!(text.contains("\"finish_reason\":\"stop\""));

    // Non-streaming: a truncated body.
    mock.set_failure(Failure::CloseMidStream { after_deltas: 0 });
    let resp = post(&mock, "/v1/chat/completions", &chat(false)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.is_err());
    assert!(mock.wait_open_streams(0, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn hang_until_client_drops() {
    let mock = mock().await;
    mock.set_failure(Failure::Hang);
    let url = format!("{}/v1/chat/completions", mock.base_url());
    let task = tokio::spawn(async move {
        client()
            .post(url)
            .json(&chat(false))
            .send()
            .await
            .map(|r| r.status())
    });
    assert!(mock.wait_open_streams(1, Duration::from_secs(5)).await);
    assert!(!task.is_finished());
    task.abort();
    assert!(
        mock.wait_open_streams(0, Duration::from_secs(5)).await,
        "dropping the client ends the hanging request"
    );

    let timed_out = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .expect("client")
        .post(format!("{}/api/chat", mock.base_url()))
        .json(&ollama(true))
        .send()
        .await;
    assert!(timed_out.expect_err("hangs").is_timeout());
    assert!(mock.wait_open_streams(0, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn client_disconnect_closes_stream() {
    let mock = MockVendor::start(MockConfig {
        deltas: 200,
        delta_delay: Duration::from_millis(20),
        reply_text: Some("x".repeat(400)),
        ..MockConfig::default()
    })
    .await;
    for (path, body) in [
        ("/v1/chat/completions", chat(true)),
        ("/v1/messages", anthropic(true)),
        ("/api/chat", ollama(true)),
        ("/v1/responses", responses(true)),
    ] {
        let mut resp = post(&mock, path, &body).await;
        assert_eq!(resp.status(), 200);
        let first = resp.chunk().await.expect("body").expect("a first chunk");
        assert!(!first.is_empty());
        assert_eq!(mock.open_streams(), 1, "{path}");
        drop(resp);
        assert!(
            mock.wait_open_streams(0, Duration::from_secs(5)).await,
            "{path}: stream still open after the client left"
        );
    }
}

#[tokio::test]
async fn delays_apply() {
    let mock = MockVendor::start(MockConfig {
        first_byte_delay: Duration::from_millis(150),
        ..MockConfig::default()
    })
    .await;
    let started = std::time::Instant::now();
    let (s, _) = post_json(&mock, "/v1/chat/completions", &chat(false)).await;
    assert_eq!(s, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));
    let started = std::time::Instant::now();
    let mut resp = post(&mock, "/v1/chat/completions", &chat(true)).await;
    let _ = resp.chunk().await.expect("body");
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn shutdown_ends_hanging_requests() {
    let mock = mock().await;
    mock.set_failure(Failure::Hang);
    let url = format!("{}/v1/messages", mock.base_url());
    let task = tokio::spawn(async move {
        client()
            .post(url)
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .json(&anthropic(false))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    assert!(mock.wait_open_streams(1, Duration::from_secs(5)).await);
    tokio::time::timeout(Duration::from_secs(10), mock.shutdown())
        .await
        .expect("shutdown is prompt");
    let outcome = task.await.expect("task");
    assert!(!matches!(outcome, Ok(200)), "{outcome:?}");
}
