//! Gateway behaviour beyond the happy path: fallback, the breaker over real HTTP, bad
//! input in each dialect, mid-stream failures, client disconnects, token counting,
//! model listing and hot reload.

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use glider_ngl::Dialect;
use glider_test_support::{Failure, MockConfig, MockVendor};
use serde_json::json;

/// A local mock and a cloud mock, the cloud standing behind the local one.
async fn local_and_cloud() -> (MockVendor, MockVendor, Gateway) {
    let local = MockVendor::start(MockConfig::default()).await;
    let cloud = MockVendor::start(MockConfig::default()).await;
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: local, type: ollama, base_url: '{}', models: [qwen]}}\n\
         \x20 - {{name: claude, type: anthropic, base_url: '{}', api_key: k, models: ['claude-*']}}\n\
         model_aliases: {{claude-sonnet: qwen}}\n\
         routing: {{classifier: {{enabled: false}}}}\n",
        local.base_url(),
        cloud.base_url()
    );
    let gw = gateway(&yaml).await;
    (local, cloud, gw)
}

/// One local backend whose replies stream `deltas` pieces 50 ms apart, so a client can
/// leave in the middle.
async fn slow_local_stream(deltas: usize) -> (MockVendor, Gateway) {
    let mock = MockVendor::start(MockConfig {
        deltas,
        delta_delay: Duration::from_millis(50),
        ..MockConfig::default()
    })
    .await;
    let yaml = format!(
        "backends:\n  - {{name: local, type: ollama, base_url: '{}', models: [qwen]}}\n",
        mock.base_url()
    );
    let gw = gateway(&yaml).await;
    (mock, gw)
}

fn ask(model: &str, stream: bool) -> serde_json::Value {
    json!({"model": model, "max_tokens": 100, "stream": stream, "messages": [{"role": "user", "content": "hello"}]})
}

#[tokio::test]
async fn a_failing_local_model_falls_back_to_the_cloud() {
    let (local, cloud, gw) = local_and_cloud().await;
    local.set_failure(Failure::Status(500));
    for stream in [false, true] {
        let reply = post_json(&gw.base, "/v1/messages", &ask("claude-sonnet", stream)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let route = reply.headers["x-glider-route"].to_str().expect("ascii");
        assert!(route.contains("backend=claude"), "{route}");
        // The cloud is asked for the model the client named, not the local alias.
        assert_eq!(
            cloud.requests().last().expect("cloud asked").body["model"],
            "claude-sonnet"
        );
        let response = reply
            .decode(Dialect::Anthropic, stream)
            .expect("valid reply");
        assert!(response.plain_text().contains("echo: hello"));
    }
}

#[tokio::test]
async fn when_every_backend_fails_the_client_gets_502_listing_each() {
    let (local, cloud, gw) = local_and_cloud().await;
    local.set_failure(Failure::Status(500));
    cloud.set_failure(Failure::Status(529));
    let reply = post_json(&gw.base, "/v1/messages", &ask("claude-sonnet", false)).await;
    assert_eq!(reply.status, 502);
    let body = reply.json();
    assert_eq!(body["type"], "error");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("local: HTTP 500") && message.contains("claude: HTTP 529"),
        "{message}"
    );

    // The same failure in OpenAI's dialect.
    let reply = post_json(
        &gw.base,
        "/v1/chat/completions",
        &json!({"model": "claude-sonnet", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(reply.status, 502);
    assert_eq!(reply.json()["error"]["type"], "server_error");
}

#[tokio::test]
async fn the_breaker_stops_calling_a_backend_after_five_failures() {
    let (local, cloud, gw) = local_and_cloud().await;
    local.set_failure(Failure::Status(503));
    for _ in 0..5 {
        let reply = post_json(&gw.base, "/v1/messages", &ask("claude-sonnet", false)).await;
        assert_eq!(reply.status, 200);
    }
    let local_calls = local.requests().len();
    assert_eq!(local_calls, 5);
    let reply = post_json(&gw.base, "/v1/messages", &ask("claude-sonnet", false)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        local.requests().len(),
        local_calls,
        "an open breaker does not call the backend"
    );
    assert_eq!(cloud.requests().len(), 6);
    let runtime = gw.engine.runtime();
    let backend = runtime.backend("local").expect("local backend");
    assert_eq!(backend.breaker.state(), glider_backend::BreakerState::Open);
}

#[tokio::test]
async fn pure_local_mode_shows_the_local_error() {
    let local = MockVendor::start(MockConfig::default()).await;
    let yaml = format!(
        "backends:\n  - {{name: local, type: ollama, base_url: '{}', models: [qwen]}}\nrouting: {{cloud_fallback: false}}\n",
        local.base_url()
    );
    let gw = gateway(&yaml).await;
    local.set_failure(Failure::Status(500));
    let reply = post_json(
        &gw.base,
        "/api/chat",
        &json!({"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(reply.status, 502);
    assert!(
        reply.json()["error"]
            .as_str()
            .expect("ollama error string")
            .contains("local: HTTP 500")
    );
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_in_each_dialect() {
    let (_mock, yaml) = mock_and_config("server: {max_body_bytes: 2048}\n").await;
    let gw = gateway(&yaml).await;

    let anthropic_error = |reply: &Reply, status: u16, kind: &str, needle: &str| {
        assert_eq!(reply.status, status, "{}", reply.text());
        let body = reply.json();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], kind, "{body}");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(
            message.contains(needle),
            "{message:?} should mention {needle:?}"
        );
    };
    let openai_error = |reply: &Reply, status: u16, needle: &str| {
        assert_eq!(reply.status, status, "{}", reply.text());
        let body = reply.json();
        let message = body["error"]["message"].as_str().expect("message");
        assert!(
            message.contains(needle),
            "{message:?} should mention {needle:?}"
        );
    };

    let reply = post(&gw.base, "/v1/messages", "{not json", &[]).await;
    anthropic_error(&reply, 400, "invalid_request_error", "JSON");
    let reply = post_json(
        &gw.base,
        "/v1/messages",
        &json!({"model": "m-anthropic", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    anthropic_error(&reply, 400, "invalid_request_error", "max_tokens");
    let reply = post_json(
        &gw.base,
        "/v1/messages",
        &json!({"model": "m-anthropic", "max_tokens": "ten", "messages": []}),
    )
    .await;
    anthropic_error(&reply, 400, "invalid_request_error", "max_tokens");
    let reply = post_json(&gw.base, "/v1/messages", &ask("no-such-model", false)).await;
    anthropic_error(&reply, 404, "not_found_error", "no-such-model");
    let big = json!({"model": "m-anthropic", "max_tokens": 5, "messages": [{"role": "user", "content": "x".repeat(4096)}]});
    let reply = post_json(&gw.base, "/v1/messages", &big).await;
    anthropic_error(&reply, 413, "request_too_large", "max_body_bytes");

    let reply = post(&gw.base, "/v1/chat/completions", "[]", &[]).await;
    openai_error(&reply, 400, "");
    let reply = post_json(
        &gw.base,
        "/v1/chat/completions",
        &json!({"model": "no-such", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    openai_error(&reply, 404, "no-such");
    assert_eq!(reply.json()["error"]["param"], "model");
    let reply = post_json(
        &gw.base,
        "/v1/responses",
        &json!({"model": "m-openai", "input": 42}),
    )
    .await;
    openai_error(&reply, 400, "input");
    let reply = post_json(&gw.base, "/v1/nothing-here", &json!({})).await;
    openai_error(&reply, 404, "/v1/nothing-here");

    // Still serving after all that.
    let reply = post_json(&gw.base, "/v1/messages", &ask("m-anthropic", false)).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn a_backend_answering_garbage_is_a_502() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    mock.set_failure(Failure::Garbage);
    let reply = post_json(&gw.base, "/v1/messages", &ask("m-ollama", false)).await;
    assert_eq!(reply.status, 502, "{}", reply.text());
    assert_eq!(reply.json()["error"]["type"], "api_error");
}

#[tokio::test]
async fn a_stream_cut_mid_reply_ends_with_an_error_event_in_the_client_dialect() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    mock.set_failure(Failure::CloseMidStream { after_deltas: 2 });
    // Translated (Anthropic front, Ollama backend) and byte-forwarded (Anthropic both).
    for model in ["m-ollama", "m-anthropic"] {
        let reply = post_json(&gw.base, "/v1/messages", &ask(model, true)).await;
        assert_eq!(reply.status, 200, "headers were sent before the cut");
        let text = reply.text();
        assert!(text.contains("event: error"), "{model}: {text}");
        assert!(
            !text.contains("message_stop"),
            "{model}: a cut stream must not look complete: {text}"
        );
        assert!(reply.decode(Dialect::Anthropic, true).is_err(), "{model}");
    }
    // OpenAI chat front: an error object, and no [DONE].
    let reply = post_json(
        &gw.base,
        "/v1/chat/completions",
        &json!({"model": "m-ollama", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    let text = reply.text();
    assert!(text.contains("\"error\""), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
}

#[tokio::test]
async fn a_client_that_disconnects_cancels_the_upstream_request() {
    let (mock, gw) = slow_local_stream(200).await;
    for path in ["/v1/messages", "/api/chat"] {
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let response = client
            .post(format!("{}{path}", gw.base))
            .json(&ask("qwen", true))
            .send()
            .await
            .expect("gateway answers");
        let mut body = response.bytes_stream();
        let first = body.next().await.expect("a first chunk").expect("readable");
        assert!(!first.is_empty());
        assert_eq!(
            mock.open_streams(),
            1,
            "{path}: the upstream stream is open"
        );
        drop(body);
        drop(client);
        assert!(
            mock.wait_open_streams(0, Duration::from_secs(10)).await,
            "{path}: upstream stream still open after the client left"
        );
    }
    // A request still waiting for its first byte is cancelled too.
    mock.set_failure(Failure::Hang);
    let base = gw.base.clone();
    let pending =
        tokio::spawn(async move { post_json(&base, "/v1/messages", &ask("qwen", false)).await });
    let mut seen = false;
    for _ in 0..200 {
        if mock.open_streams() == 1 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "the hanging request reached the mock");
    pending.abort();
    assert!(
        mock.wait_open_streams(0, Duration::from_secs(10)).await,
        "a hanging upstream request outlived its client"
    );
}

#[tokio::test]
async fn count_tokens_is_exact_from_anthropic_and_estimated_otherwise() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let body = json!({"model": "m-anthropic", "messages": [{"role": "user", "content": "count me please"}]});
    let reply = post_json(&gw.base, "/v1/messages/count_tokens", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let exact = reply.json()["input_tokens"].as_u64().expect("count");
    let upstream = mock.requests();
    assert_eq!(
        upstream.last().expect("asked upstream").path,
        "/v1/messages/count_tokens"
    );
    assert!(exact > 0);

    let body =
        json!({"model": "m-ollama", "messages": [{"role": "user", "content": "x".repeat(350)}]});
    let reply = post_json(&gw.base, "/v1/messages/count_tokens", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    // 350 bytes at 3.5 bytes a token, the newline, and 4 framing tokens.
    assert_eq!(reply.json()["input_tokens"], 105);
}

#[tokio::test]
async fn models_lists_backends_and_aliases_in_both_shapes() {
    let (_mock, yaml) = mock_and_config("model_aliases: {gpt-4o: m-ollama}\n").await;
    let gw = gateway(&yaml).await;
    let (_, openai) = get_json(&gw.base, "/v1/models", &[]).await;
    assert_eq!(openai["object"], "list");
    let ids = listed_ids(&openai);
    for id in ["m-ollama", "m-vllm", "m-openai", "m-anthropic", "gpt-4o"] {
        assert!(ids.iter().any(|i| i == id), "{id} missing from {ids:?}");
    }
    let alias = openai["data"]
        .as_array()
        .expect("data")
        .iter()
        .find(|m| m["id"] == "gpt-4o")
        .expect("alias");
    assert_eq!(alias["glider"]["alias_of"], "m-ollama");
    let (_, anthropic) = get_json(
        &gw.base,
        "/v1/models",
        &[("anthropic-version", "2023-06-01")],
    )
    .await;
    assert_eq!(anthropic["data"][0]["type"], "model");
    assert_eq!(anthropic["has_more"], false);
}

/// `GET {path}` on the gateway with `headers`: (status, JSON body).
async fn get_json(base: &str, path: &str, headers: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let mut request = client.get(format!("{base}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let reply = request.send().await.expect("gateway answers");
    let status = reply.status().as_u16();
    (status, reply.json().await.expect("json"))
}

fn listed_ids(list: &serde_json::Value) -> Vec<String> {
    list["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn every_listed_model_is_retrieved_in_the_callers_shape_and_an_unknown_one_is_a_404() {
    let (_mock, yaml) = mock_and_config("model_aliases: {gpt-4o: m-ollama}\n").await;
    let gw = gateway(&yaml).await;
    let (_, list) = get_json(&gw.base, "/v1/models", &[]).await;
    let ids = listed_ids(&list);
    assert!(ids.len() >= 5, "{ids:?}");
    for id in &ids {
        let (status, openai) = get_json(&gw.base, &format!("/v1/models/{id}"), &[]).await;
        assert_eq!(status, 200, "{id}: {openai}");
        assert_eq!(openai["id"], id.as_str());
        assert_eq!(openai["object"], "model");
        assert!(openai["created"].is_u64(), "{openai}");
        assert!(openai["owned_by"].is_string(), "{openai}");
        // Anthropic's SDK sends `anthropic-version`; a bare key-holder sends `x-api-key`.
        for header in [("anthropic-version", "2023-06-01"), ("x-api-key", "sk-ant")] {
            let (status, anthropic) =
                get_json(&gw.base, &format!("/v1/models/{id}"), &[header]).await;
            assert_eq!(status, 200, "{id} {header:?}: {anthropic}");
            assert_eq!(anthropic["type"], "model");
            assert_eq!(anthropic["id"], id.as_str());
            assert!(anthropic["display_name"].is_string(), "{anthropic}");
            assert!(anthropic["created_at"].is_string(), "{anthropic}");
        }
    }
    let (status, alias) = get_json(&gw.base, "/v1/models/gpt-4o", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(alias["glider"]["alias_of"], "m-ollama");
    assert_eq!(alias["owned_by"], "ollama");

    let (status, openai) = get_json(&gw.base, "/v1/models/no-such-model", &[]).await;
    assert_eq!(status, 404, "{openai}");
    assert_eq!(openai["error"]["param"], "model", "{openai}");
    assert!(
        openai["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no-such-model")),
        "{openai}"
    );
    let (status, anthropic) = get_json(
        &gw.base,
        "/v1/models/no-such-model",
        &[("anthropic-version", "2023-06-01")],
    )
    .await;
    assert_eq!(status, 404, "{anthropic}");
    assert_eq!(anthropic["type"], "error", "{anthropic}");
    assert_eq!(anthropic["error"]["type"], "not_found_error", "{anthropic}");
}

#[tokio::test]
async fn models_lists_each_id_once_when_an_alias_equals_a_backend_model() {
    // The anthropic backend's default model is also an alias for the local model, and
    // a second backend lists a model the first already does.
    let mock = MockVendor::start(MockConfig::default()).await;
    let url = mock.base_url();
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: ollama, type: ollama, base_url: '{url}', models: [m-ollama]}}\n\
         \x20 - {{name: vllm, type: vllm, base_url: '{url}/v1', models: [m-ollama, m-vllm]}}\n\
         \x20 - {{name: anthropic, type: anthropic, base_url: '{url}', api_key: k, default_model: claude-haiku-4-5}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n\
         model_aliases: {{claude-haiku-4-5: m-ollama}}\n"
    );
    let gw = gateway(&yaml).await;
    for headers in [&[][..], &[("anthropic-version", "2023-06-01")][..]] {
        let (status, list) = get_json(&gw.base, "/v1/models", headers).await;
        assert_eq!(status, 200, "{list}");
        let mut ids = listed_ids(&list);
        let listed = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), listed, "an id is listed twice: {list}");
        assert_eq!(ids, ["claude-haiku-4-5", "m-ollama", "m-vllm"]);
    }
    // Listed as what a request for it reaches: the alias is resolved before routing.
    let (_, haiku) = get_json(&gw.base, "/v1/models/claude-haiku-4-5", &[]).await;
    assert_eq!(haiku["glider"]["alias_of"], "m-ollama", "{haiku}");
    assert_eq!(haiku["owned_by"], "ollama", "{haiku}");
    let reply = post_json(&gw.base, "/v1/messages", &ask("claude-haiku-4-5", false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        mock.requests().last().expect("reached the mock").path,
        "/api/chat"
    );
}

#[tokio::test]
async fn a_llama_cpp_model_listed_as_a_gguf_path_is_matched_by_its_file_stem() {
    // llama-server without `--alias` lists its model as the file's path.
    let mock = MockVendor::start(MockConfig {
        models: vec!["/home/me/models/gemma-3-270m-it-Q4_K_M.gguf".into()],
        ..MockConfig::default()
    })
    .await;
    let url = mock.base_url();
    let yaml = format!(
        "backends:\n\
         \x20 - {{name: llama, type: vllm, base_url: '{url}/v1', models: [gemma-3-270m-it-Q4_K_M, other-model, Qwen/Qwen2.5-0.5B-Instruct]}}\n\
         routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}\n"
    );
    let gw = gateway(&yaml).await;
    gw.engine.probe_all().await;
    let (_, list) = get_json(&gw.base, "/v1/models", &[]).await;
    assert_eq!(
        listed_ids(&list),
        [
            "gemma-3-270m-it-Q4_K_M",
            "other-model",
            "Qwen/Qwen2.5-0.5B-Instruct"
        ],
        "{list}"
    );
    let warm: Vec<&serde_json::Value> = list["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|m| &m["glider"]["warm"])
        .collect();
    assert_eq!(warm, [&json!(true), &json!(false), &json!(false)], "{list}");
    let (status, gemma) = get_json(&gw.base, "/v1/models/gemma-3-270m-it-Q4_K_M", &[]).await;
    assert_eq!(status, 200, "{gemma}");
    assert_eq!(gemma["glider"]["available"], true, "{gemma}");
    assert_eq!(
        gemma["glider"]["warm"], true,
        "the served GGUF path matches its stem: {gemma}"
    );
    let (_, other) = get_json(&gw.base, "/v1/models/other-model", &[]).await;
    assert_eq!(other["glider"]["warm"], false, "{other}");
    // A repository-style id keeps its slash, and is retrieved whole.
    let (status, qwen) = get_json(&gw.base, "/v1/models/Qwen/Qwen2.5-0.5B-Instruct", &[]).await;
    assert_eq!(status, 200, "{qwen}");
    assert_eq!(qwen["id"], "Qwen/Qwen2.5-0.5B-Instruct");
}

#[tokio::test]
async fn an_alias_added_by_reload_applies_to_the_next_request() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let reply = post_json(&gw.base, "/v1/messages", &ask("claude-haiku", false)).await;
    assert_eq!(reply.status, 404);
    let next = glider_config::Config::parse(
        &format!("{yaml}model_aliases: {{claude-haiku: m-ollama}}\n"),
        "reload",
    )
    .expect("valid");
    gw.config.apply(next);
    // The engine follows the config on a background task: wait for it by polling.
    let mut status = 0;
    for _ in 0..100 {
        status = post_json(&gw.base, "/v1/messages", &ask("claude-haiku", false))
            .await
            .status;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 200);
    assert_eq!(
        mock.requests().last().expect("served").body["model"],
        "m-ollama"
    );
}

async fn next_finished(
    events: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<glider_engine::PipelineEvent>>,
) -> glider_engine::RequestRecord {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("an event within 10 s")
            .expect("bus open");
        if let glider_engine::PipelineEvent::RequestFinished(record) = &*event {
            return record.clone();
        }
    }
}

#[tokio::test]
async fn every_request_is_reported_once_on_the_bus() {
    let (_mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    let mut events = gw.engine.bus().subscribe();

    // A translated stream and a forwarded one both carry usage to the record.
    for model in ["m-ollama", "m-anthropic"] {
        let reply = post(
            &gw.base,
            "/v1/messages",
            ask(model, true).to_string(),
            &[("user-agent", "test-cli/1.0")],
        )
        .await;
        assert_eq!(reply.status, 200);
        let started = loop {
            let event = events.recv().await.expect("bus open");
            if let glider_engine::PipelineEvent::RequestStarted(record) = &*event {
                break record.clone();
            }
        };
        let finished = next_finished(&mut events).await;
        assert_eq!(started.id, finished.id);
        assert_eq!(finished.status, Some(200), "{model}: {finished:?}");
        assert_eq!(
            finished.backend.as_deref(),
            Some(model.trim_start_matches("m-"))
        );
        assert_eq!(finished.model_used.as_deref(), Some(model));
        assert_eq!(finished.client.as_deref(), Some("test-cli/1.0"));
        assert_eq!(finished.rule.as_deref(), Some("model"));
        assert!(finished.usage.output_tokens > 0, "{model}: {finished:?}");
        assert!(finished.ttft_ms.is_some() && finished.total_ms.is_some());
    }

    // A refused request is recorded with its status and error.
    let reply = post_json(&gw.base, "/v1/messages", &ask("no-such-model", false)).await;
    assert_eq!(reply.status, 404);
    let finished = next_finished(&mut events).await;
    assert_eq!(finished.status, Some(404));
    assert!(
        finished
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("no-such-model")
    );
}

#[tokio::test]
async fn a_client_that_leaves_is_recorded_as_499() {
    let (_mock, gw) = slow_local_stream(100).await;
    let mut events = gw.engine.bus().subscribe();
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let response = client
        .post(format!("{}/v1/messages", gw.base))
        .json(&ask("qwen", true))
        .send()
        .await
        .expect("answers");
    let mut body = response.bytes_stream();
    body.next().await.expect("first chunk").expect("readable");
    drop(body);
    drop(client);
    let finished = next_finished(&mut events).await;
    assert_eq!(finished.status, Some(499), "{finished:?}");
}

#[tokio::test]
async fn origin_passthrough_answers_locally_only_what_is_local() {
    use glider_engine::{CompleteError, CompletionRequest};
    let (local, _cloud, gw) = local_and_cloud().await;
    let request = |model: &str| {
        CompletionRequest::mitm(
            Dialect::Anthropic,
            ask(model, false).to_string().into(),
            Default::default(),
            true,
        )
    };
    // claude-sonnet is aliased to the local qwen: answered here, never the cloud.
    let completion = gw
        .engine
        .complete(request("claude-sonnet"))
        .await
        .expect("local answer");
    assert_eq!(completion.backend, "local");
    // claude-opus is only served by the cloud: the door must go to the CLI's origin.
    match gw.engine.complete(request("claude-opus")).await {
        Err(CompleteError::OriginPassthrough { decision, tracker }) => {
            assert!(decision.candidates.is_empty());
            assert_eq!(tracker.record.backend.as_deref(), Some("origin"));
        }
        other => panic!(
            "expected origin passthrough, got {:?}",
            other.map(|c| c.backend)
        ),
    }
    // A model no backend serves is not local either: the origin knows its own models.
    match gw.engine.complete(request("model-nobody-serves")).await {
        Err(CompleteError::OriginPassthrough { decision, .. }) => {
            assert_eq!(decision.rule, "origin");
            assert!(
                decision.reason.contains("not served"),
                "{}",
                decision.reason
            );
        }
        other => panic!(
            "expected origin passthrough, got {:?}",
            other.map(|c| c.backend)
        ),
    }
    // A local failure is an error (the door decides about origin_on_local_error), not
    // a silent use of the configured cloud key.
    local.set_failure(Failure::Status(500));
    match gw.engine.complete(request("claude-sonnet")).await {
        Err(CompleteError::Api(error)) => {
            assert!(error.message.contains("local: HTTP 500"), "{error}")
        }
        other => panic!(
            "expected the local error, got {:?}",
            other.map(|c| c.backend)
        ),
    }
}

#[tokio::test]
async fn thinking_an_ollama_model_cannot_do_is_dropped_with_fitting_on_or_off() {
    let mock = MockVendor::start(MockConfig::default()).await;
    for fit in ["true", "false"] {
        let yaml = format!(
            "backends:\n  - {{name: local, type: ollama, base_url: '{}', models: [qwen]}}\n\
             fit: {{enabled: {fit}}}\n",
            mock.base_url()
        );
        let gw = gateway(&yaml).await;
        let mut body = ask("qwen", false);
        body["thinking"] = serde_json::json!({"type": "enabled", "budget_tokens": 1024});
        let reply = post_json(&gw.base, "/v1/messages", &body).await;
        assert_eq!(reply.status, 200, "fit {fit}: {}", reply.text());
        // Ollama refuses `think` for a model that cannot think: it must not be sent.
        let sent = mock.requests().last().expect("asked").body.clone();
        assert!(sent.get("think").is_none(), "fit {fit}: sent {sent}");
    }
}
